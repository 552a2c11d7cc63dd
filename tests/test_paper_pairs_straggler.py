"""bench/paper_pairs.py --straggler: the slow worker's first pass read from a run's events
(issue 19, brief gm: under FSPV a one-pass problem reaches the target with that pass)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from flegel.cli.paper.runner import RunResult
from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def pairs() -> ModuleType:
    return load_bench("paper_pairs")


def run(folder: Path, barriers: list[tuple[float, list[int], list[float], list[float],
                                           list[float]]],
        summary: dict) -> RunResult:
    """A run folder of ``barriers``: (time, points, passes, compute_s, wait_s) per barrier,
    ranks 1 and 2."""
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(
        json.dumps({"t": i + 1, "time_s": t,
                    "workers": {"rank": [1, 2], "points": p, "passes": ps,
                                "compute_s": c, "wait_s": w}}) + "\n"
        for i, (t, p, ps, c, w) in enumerate(barriers)))
    return RunResult("k", folder, summary, None, None, 0.0)


BARRIERS = [(0.04, [100, 800], [0.2, 1.0], [0.03, 0.01], [0.0, 0.02]),
            (0.08, [0, 800], [0.2, 2.0], [0.01, 0.01], [0.03, 0.02]),
            (0.12, [400, 800], [1.0, 3.0], [0.03, 0.01], [0.01, 0.02]),
            (0.16, [100, 800], [1.2, 4.0], [0.03, 0.01], [0.01, 0.02])]


def test_the_summarys_straggler_up_to_its_first_pass(pairs, tmp_path):
    r = run(tmp_path / "a", BARRIERS, {"stragglers": [{"rank": 1}]})
    assert pairs.straggler(r) == ("    straggler 1: first pass at 0.120 s after 3 barriers, "
                                  "1 commits of no point; iterations 0.070 s, waits for θ "
                                  "0.040 s")


def test_without_stragglers_the_worker_with_fewest_passes(pairs, tmp_path):
    r = run(tmp_path / "b", BARRIERS[:2], {})
    assert pairs.straggler(r) == "    straggler 1: no full pass in 2 barriers"
    assert pairs.straggler(RunResult("k", tmp_path / "none", None, "failed", None, 0.0)) is None
