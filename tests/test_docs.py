"""The README's and docs' examples run as written, so they cannot rot.

A fenced block runs when the line before it is a marker comment:

* ``<!-- test -->`` before a ```yaml block: a whole job, validated, then run under MPI with
  :data:`TINY` overrides (little data, a few iterations) in a folder of its own;
* ``<!-- test: part -->`` before a ```yaml block: part of a job (a ``sync:`` section, ...),
  merged over :data:`BASE_JOB`, then validated and run the same way;
* ``<!-- test: file NAME -->`` before any block: its text saved as NAME, for the page's later
  blocks (an algorithm a job names, a module a snippet imports);
* ``<!-- test -->`` before a ```python block: run with this Python;
* ``<!-- test -->`` before a ```bash block: run with ``bash -e``.

The blocks of one page run in order in one temporary folder, holding a copy of ``jobs/``, so
the commands may use the ready jobs.  Besides the blocks: ``flegel --version``, and the path
rule the README documents (every relative path in a job is relative to the job file).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from flegel.job.validate import load_job
from flegel.job.yaml_file import parse_yaml
from tests.conftest import ROOT, child_env

#: Every page whose marked blocks are run.
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

#: Overrides that keep any example job small: a few thousand points, a few iterations.
TINY = ["data.n_points=2000", "stop.max_iterations=6", "stop.max_time_s=20",
        "stop.target_objective=null", "workers=2", "output.progress=none"]

#: The job a ``part`` block is merged over.
BASE_JOB: dict[str, Any] = {
    "algorithm": "kmeans", "params": {"n_clusters": 4},
    "data": {"source": "synthetic", "kind": "blobs", "n_points": 2000, "n_features": 4,
             "centers": 4, "seed": 1},
    "workers": 2, "stop": {"max_iterations": 6}}

MARKER = re.compile(r"^<!-- test(?::\s*(?P<kind>part|file)\s*(?P<name>\S+)?)?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>\w+)\s*$")


@dataclass(frozen=True)
class Example:
    """One marked block: where it is, its language, how to run it, its text."""

    page: Path
    line: int
    lang: str
    kind: str  # "run", "part" or "file"
    name: str | None
    text: str

    def __str__(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def examples(page: Path) -> list[Example]:
    """The marked blocks of a page, in order.

    Raises
    ------
    ValueError
        A marker not followed by a fenced block, or a block left open (named by line).
    """
    lines = page.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None:
            raise ValueError(f"{page}:{i + 1}: expected a fenced block after the test marker")
        try:
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        except StopIteration:
            raise ValueError(f"{page}:{i + 2}: the fenced block is never closed") from None
        out.append(Example(page, i + 2, fence["lang"], m["kind"] or "run", m["name"],
                           "\n".join(lines[i + 2:end]) + "\n"))
    return out


def _pages_with_examples() -> list[Path]:
    return [p for p in PAGES if examples(p)]


def _merge(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in part.items():
        out[key] = (_merge(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


def _run(cmd: list[str], cwd: Path, where: Example, timeout: float = 120) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=child_env(cwd), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{where}: failed ({proc.returncode}): {' '.join(cmd)}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _run_job(doc: dict[str, Any], folder: Path, ex: Example) -> None:
    """Validate a job as the page gives it, then run it small under MPI."""
    job = folder / f"job-{ex.line}.yaml"
    job.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_job(job)  # the block itself is a valid job, before any override
    sets = [s for s in TINY if not (s.startswith("data.n_points")
                                    and doc.get("data", {}).get("source") != "synthetic")]
    args = [a for s in sets for a in ("--set", s)]
    out = folder / f"run-{ex.line}"
    _run([sys.executable, "-m", "flegel", "run", str(job), "--out", str(out), *args],
         folder, ex)
    assert (out / "summary.json").exists(), ex


def run_example(ex: Example, folder: Path) -> None:
    """Run one marked block in ``folder``; AssertionError naming the page and line if not."""
    if ex.kind == "file":
        assert ex.name, f"{ex}: test: file needs a file name"
        (folder / ex.name).write_text(ex.text)
    elif ex.lang == "yaml":
        doc = parse_yaml(ex.text)  # as flegel reads a job file (YAML 1.1's off stays 'off')
        _run_job(_merge(BASE_JOB, doc) if ex.kind == "part" else doc, folder, ex)
    elif ex.lang == "python":
        _run([sys.executable, "-c", ex.text], folder, ex)
    elif ex.lang in ("bash", "sh"):
        _run(["bash", "-e", "-c", ex.text], folder, ex)
    else:
        raise AssertionError(f"{ex}: no way to run a {ex.lang!r} block")


@pytest.mark.mpi
@pytest.mark.parametrize("page", _pages_with_examples(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run_as_written(page: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    for ex in examples(page):
        run_example(ex, tmp_path)


def test_the_readme_and_every_sync_page_have_examples_that_run() -> None:
    assert examples(ROOT / "README.md")
    pages = sorted((ROOT / "docs" / "sync").glob("*.md"))
    models = {"bsp", "fsp", "asp", "ssp", "dssp", "specsync", "elastic"}
    assert models <= {p.stem for p in pages}
    for p in pages:
        if p.stem in models:
            assert any(ex.lang == "yaml" for ex in examples(p)), p


def test_a_marker_without_a_block_is_an_error(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- test -->\nno block here\n")
    with pytest.raises(ValueError, match="page.md:2: expected a fenced block"):
        examples(page)
    page.write_text("<!-- test: file a.py -->\n```python\nx = 1\n")
    with pytest.raises(ValueError, match="never closed"):
        examples(page)


def test_a_failing_example_is_named_by_page_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n<!-- test -->\n```python\nraise SystemExit(3)\n```\n")
    (ex,) = examples(page)
    with pytest.raises(AssertionError, match=r"page.md:4: failed \(3\)"):
        run_example(ex, tmp_path)


def test_version_is_the_installed_package_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "flegel", "--version"], capture_output=True,
                          text=True, timeout=60, env=child_env())
    assert proc.returncode == 0
    assert proc.stdout == f"flegel {version('flegel')}\n"


def test_every_relative_path_in_a_job_is_relative_to_the_job_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    jobs = tmp_path / "project" / "jobs"
    jobs.mkdir(parents=True)
    np.save(jobs / "x.npy", np.random.default_rng(0).normal(size=(40, 3)))
    job = jobs / "job.yaml"
    job.write_text("algorithm: kmeans\nparams: {n_clusters: 2}\ndata: {path: x.npy}\n"
                   "workers: 2\nstop: {max_iterations: 3}\noutput: {dir: out}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory plays no part
    loaded = load_job(Path("..") / "project" / "jobs" / "job.yaml")
    assert Path(loaded.output.dir) == jobs / "out"
    assert loaded.data_info.n_rows == 40  # data.path found beside the job file
    # Absolute paths stay as they are.
    loaded = load_job(job, [f"output.dir={tmp_path / 'abs'}"])
    assert Path(loaded.output.dir) == tmp_path / "abs"
