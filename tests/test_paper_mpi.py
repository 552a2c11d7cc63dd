"""``flegel paper`` end to end: one cheap figure, every run a real MPI job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flegel.cli.paper.command import DOCS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: ``flegel paper`` with the SpecSync row's rounds set to one (the suite's time: each round is
#: four more MPI jobs of the same kind).  The test runs it with ``--max-time 1`` (each run
#: trains at most 1 s, not --quick's 4: the page's shape, not its numbers, is tested here).
ONE_ROUND = ("import sys; from flegel.cli.paper import other_figures; "
             "other_figures.SPECSYNC_ROUNDS = 1; from flegel.cli.commands import main; "
             "sys.exit(main(sys.argv[1:]))")


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
    # One round of the row's three (5 runs, not 13): each round is the same pair of runs, and
    # the rounds, their rows and the median over them are tested in process
    # (tests/test_paper_specsync.py).
    proc = subprocess.run([sys.executable, "-c", ONE_ROUND, "paper", "--quick", "--only",
                           "specsync", "--max-time", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (out / "paper.md").read_text()
    row = next(ln for ln in page.splitlines() if ln.startswith("| [specsync]"))
    # the paper's number, flegel's (a ratio, maybe a bound) and a verdict
    assert "SpecSync up to 3x faster than ASP" in row
    assert re.search(r"specsync [<>?]?\d+\.\d\dx faster than asp", row), row
    assert re.search(r"\*\*(beaten|met|missed)\*\*", row), row
    assert "flegel paper --quick --only specsync --max-time 1" in page
    assert re.search(r"\d+ cores, load average \d", page)
    pic = out / "pictures" / "specsync.png"
    assert pic.read_bytes().startswith(PNG_MAGIC)
    assert "![specsync](pictures/specsync.png)" in page
    doc = json.loads((out / "paper.json").read_text())
    (figure,) = doc["figures"]
    assert figure["ours_value"] > 0 and figure["verdict"] in ("beaten", "met", "missed")
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert len(runs) == 1 + 4 * 1
    assert "median of 1 rounds" in row
    assert all((out / "runs" / r / "summary.json").exists() for r in runs)
    after = docs_page.stat().st_mtime_ns if docs_page.exists() else None
    assert after == before
