"""``flegel paper`` end to end: one cheap figure, every run a real MPI job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flegel.cli.paper.command import DOCS
from flegel.cli.paper.other_figures import SPECSYNC_ROUNDS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.mpi
@pytest.mark.slow
def test_paper_only_one_figure_writes_its_page_and_picture(tmp_path: Path) -> None:
    """``flegel paper --quick --only specsync``: the reference run that sets LR's target and
    the rounds of ASP and SpecSync runs (with and without the straggler), each under mpirun;
    the page shows the paper's number beside flegel's with a verdict, and the picture is a
    PNG.  A run with ``--only`` leaves docs/paper.md alone."""
    pytest.importorskip("matplotlib")
    docs_page = DOCS / "paper.md"
    before = docs_page.stat().st_mtime_ns if docs_page.exists() else None
    out = tmp_path / "paper"
    proc = subprocess.run([sys.executable, "-m", "flegel", "paper", "--quick", "--only",
                           "specsync", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (out / "paper.md").read_text()
    row = next(ln for ln in page.splitlines() if ln.startswith("| [specsync]"))
    # the paper's number, flegel's (a ratio, maybe a bound) and a verdict
    assert "SpecSync up to 3x faster than ASP" in row
    assert re.search(r"specsync [<>?]?\d+\.\d\dx faster than asp", row), row
    assert re.search(r"\*\*(beaten|met|missed)\*\*", row), row
    assert "flegel paper --quick --only specsync" in page
    assert re.search(r"\d+ cores, load average \d", page)
    pic = out / "pictures" / "specsync.png"
    assert pic.read_bytes().startswith(PNG_MAGIC)
    assert "![specsync](pictures/specsync.png)" in page
    doc = json.loads((out / "paper.json").read_text())
    (figure,) = doc["figures"]
    assert figure["ours_value"] > 0 and figure["verdict"] in ("beaten", "met", "missed")
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert len(runs) == 1 + 4 * SPECSYNC_ROUNDS
    assert all((out / "runs" / r / "summary.json").exists() for r in runs)
    after = docs_page.stat().st_mtime_ns if docs_page.exists() else None
    assert after == before
