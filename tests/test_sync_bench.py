"""bench/sync_bench.py's ``run``: the paths it hands ``flegel run`` (started in the run's own
folder) name the job where the script wrote it, also for a relative ``--out`` -- the
documented ``python bench/sync_bench.py --quick --out RUNS`` (docs/sync/README.md).  No
benchmark runs here: the child process is a stand-in that resolves its arguments as the real
one would, from its ``cwd``."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.bench_scripts import load_bench


def load() -> ModuleType:
    """bench/sync_bench.py as a module (bench/ is a folder of scripts, not a package)."""
    return load_bench("sync_bench")


def test_a_relative_out_names_the_job_where_it_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load()
    calls: list[list[str]] = []

    def child(args: list[str], cwd: Path, **_: Any) -> SimpleNamespace:
        """``flegel run JOB --out DIR`` started in ``cwd``: relative paths from there."""
        calls.append(args)
        job, out = (Path(cwd) / args[4], Path(cwd) / args[6])
        if not job.is_file():
            return SimpleNamespace(returncode=2, stderr=f"{args[4]}: job file not found")
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps({"ok": True}))
        (out / "events.jsonl").write_text(json.dumps({"time_s": 0.0}) + "\n")
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(bench.subprocess, "run", child)
    monkeypatch.chdir(tmp_path)
    summary, events = bench.run({**bench.job_doc(100, 1.0), "sync": {"model": "bsp"}},
                                Path("RUNS") / "x")
    assert summary == {"ok": True} and events == [{"time_s": 0.0}]
    assert calls and (tmp_path / "RUNS" / "x" / "run" / "summary.json").is_file()
