"""Fig. 16 of ``flegel paper`` (:mod:`flegel.cli.paper.scaling`): the verdicts on synthetic
times, the charged compute, the shared start, and both figures end to end in one process
with a launcher that writes the summary a run would (real runs: ``flegel paper --only 16``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.cli.compare import parse_stragglers
from flegel.cli.paper import network, plots, scaling
from flegel.cli.paper.common import Ctx
from flegel.cli.paper.page import BEATEN, MET, MISSED, verdict
from flegel.cli.paper.runner import Runner, Time
from flegel.cli.paper.workloads import QUICK
from flegel.runtime.stragglers import Stragglers

#: A tiny quick mode: 1,100 K-means rows (the start and the job only; no run reads them).
TINY = dataclasses.replace(QUICK, scale=0.01)


def _times(values: dict[tuple[str, int], float]) -> dict[tuple[str, int], Time]:
    return {k: Time(abs(v), v > 0) for k, v in values.items()}  # negative: not reached


def test_linear_scaling_holds_at_efficiency_080_in_both_settings() -> None:
    times = _times({("none", 2): 4.0, ("none", 4): 2.0, ("none", 8): 1.05,
                    ("slow", 2): 6.0, ("slow", 4): 3.2, ("slow", 8): 1.875})
    rows, holds = scaling.curves(times, (2, 4, 8))
    assert holds
    sp, eff = rows["none"][-1]
    assert sp.value == pytest.approx(4.0 / 1.05) and eff.value == pytest.approx(4.0 / 4.2)
    assert rows["slow"][-1][1].value == pytest.approx(0.8)
    assert [round(s.value, 3) for s, _ in rows["none"]] == [1.0, 2.0, round(4 / 1.05, 3)]


def test_one_setting_below_080_misses_the_claim() -> None:
    times = _times({("none", 2): 4.0, ("none", 8): 1.0, ("slow", 2): 6.0, ("slow", 8): 2.0})
    rows, holds = scaling.curves(times, (2, 8))
    assert not holds and rows["slow"][-1][1].value == pytest.approx(0.75)


def test_bounds_count_by_their_safe_end() -> None:
    """The largest count not reaching the target: an upper bound on its speedup, which
    decides nothing; the smallest not reaching it: a lower bound, which holds when it is
    already at least 0.8."""
    up = _times({("none", 2): 4.0, ("none", 8): -0.9})
    rows, holds = scaling.curves(up, (2, 8))
    assert rows["none"][-1][1].qualifier == "<" and not holds
    low = _times({("none", 2): -4.0, ("none", 8): 1.2})
    rows, holds = scaling.curves(low, (2, 8))
    assert rows["none"][-1][1].qualifier == ">" and rows["none"][-1][1].value > 0.8 and holds
    low_small = _times({("none", 2): -4.0, ("none", 8): 2.0})
    assert not scaling.curves(low_small, (2, 8))[1]


def test_a_missing_run_fails_the_claim() -> None:
    times = _times({("none", 2): 4.0, ("none", 8): 1.0, ("slow", 2): 6.0})
    rows, holds = scaling.curves(times, (2, 8))
    assert "slow" not in rows and not holds


def test_gpu_cut_reads_the_runtime_cut_and_its_bounds() -> None:
    cut, q, beats = scaling.gpu_cut(Time(3.0, True), Time(2.0, True), Time(1.0, True))
    assert cut == pytest.approx(50.0) and q == "" and beats.value == pytest.approx(1.5)
    cut, q, _ = scaling.gpu_cut(Time(3.0, True), Time(4.0, False), Time(1.0, True))
    assert cut == pytest.approx(75.0) and q == ">"  # FSPV took longer than 4 s: at least
    _, q, beats = scaling.gpu_cut(Time(1.0, True), Time(4.0, False), Time(4.0, False))
    assert q == "?" and beats.qualifier == "<"


def test_the_charged_compute_adds_the_stragglers_delay_on_top() -> None:
    """charged(): every worker pays tau per 1,000 points, the slow ones tau + extra; the two
    Injected patterns of one rank add (flegel.runtime.stragglers)."""
    spec = parse_stragglers(scaling.charged(8, 16.0, 32.0, scaling.stragglers(8)))
    assert spec == [{"pattern": "injected", "tau_ms": 16, "workers": "1-8"},
                    {"pattern": "injected", "tau_ms": 32, "workers": "1-4"}]
    delays = {}
    for rank in (1, 4, 5, 8):
        s = Stragglers.for_rank(spec, rank, seed=0)
        delays[rank] = s.after_block(2000, 0.0)[0]
    assert delays == {1: pytest.approx(0.096), 4: pytest.approx(0.096),
                      5: pytest.approx(0.032), 8: pytest.approx(0.032)}
    assert scaling.charged(4, 16.0) == "injected:tau=16,workers=1-4"
    assert scaling.stragglers(2) == "1" and scaling.stragglers(32) == "1-16"


def _ctx(tmp_path: Path) -> Ctx:
    return Ctx(Runner(TINY, tmp_path, say=lambda _: None), tmp_path / "pictures")


def test_the_shared_start_is_k_rows_of_the_data_drawn_once(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    path = scaling.shared_start(ctx)
    start = np.load(path)
    x = np.load(tmp_path / "data" / "kmeans.npy")
    k = ctx.runner.work["kmeans"].params["n_clusters"]
    assert start.shape == (k, x.shape[1])
    assert all(any(np.array_equal(row, y) for y in x) for row in start)
    assert scaling.shared_start(ctx) == path and np.array_equal(np.load(path), start)
    other = scaling.shared_start(_ctx(tmp_path / "b"), seed=scaling.START_SEED + 1)
    assert not np.array_equal(np.load(other), start)


class FakeRuns:
    """A launcher that answers each run with the summary of a table of times to target,
    keyed by (sync, workers, slow): it records the keys it was given."""

    def __init__(self, times: dict[tuple[str, int, bool], float]) -> None:
        self.times = times
        self.sets: list[list[str]] = []

    def __call__(self, job: Path, folder: Path, sets: list[str], timeout: float
                 ) -> dict[str, Any]:
        self.sets.append(sets)
        keys = dict(s.split("=", 1) for s in sets)
        n = int(keys["workers"])
        spec = json.loads(keys["stragglers"])
        slow = any(p["workers"] != f"1-{n}" for p in spec)
        t = self.times[keys["sync.model"], n, slow]
        return {"time_to_target_s": t if t > 0 else None, "wall_time_s": abs(t),
                "final_objective": 1.0, "iterations": 10,
                "per_worker": [{"passes": 3.0, "compute_s": 0.1} for _ in range(n)],
                "migration": {"points_moved": 100}}


def _page_ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeRuns) -> Ctx:
    monkeypatch.setattr(network, "find", lambda name=None: None)
    monkeypatch.setattr(scaling, "run_one", fake)
    monkeypatch.setattr(plots, "bars", lambda path, *a, **k: path.name)
    monkeypatch.setattr(plots, "lines", lambda path, *a, **k: path.name)
    ctx = _ctx(tmp_path)
    start = scaling.shared_start(ctx)
    ctx.runner.targets["kmeans", "contiguous", f"params.init={start}"] = 1.5  # no reference
    return ctx


def test_fig16a_end_to_end_met_and_missed(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    f = "fspv-async"
    times = {(f, 2, False): 4.0, (f, 4, False): 2.1, (f, 8, False): 1.1,
             (f, 2, True): 6.0, (f, 4, True): 3.0, (f, 8, True): 1.7}
    fake = FakeRuns(times)
    fig = scaling.fig16a(_page_ctx(tmp_path, monkeypatch, fake))
    assert verdict(fig) == MET, fig.ours
    assert "3.64x from 2 to 8 workers, efficiency 0.909" in fig.ours
    assert len(fake.sets) == 6
    first = dict(s.split("=", 1) for s in fake.sets[0])
    assert first["workers"] == "2" and first["params.init"].endswith("kmeans-start.npy")
    assert first["stop.target_objective"] == "1.5" and first["sync.migration.mode"] == '"async"'
    assert any("none | 8 | 1.10 | 3.64x | 0.909" in row for row in fig.table)

    times[f, 8, True] = 2.5  # efficiency 0.6 with the stragglers
    fig = scaling.fig16a(_page_ctx(tmp_path / "b", monkeypatch, FakeRuns(times)))
    assert verdict(fig) == MISSED and "efficiency 0.600" in fig.ours

    times[f, 8, True] = 1.5 / 0.795  # 0.795 reads as itself, not as 0.80
    fig = scaling.fig16a(_page_ctx(tmp_path / "c", monkeypatch, FakeRuns(times)))
    assert verdict(fig) == MISSED and "efficiency 0.795" in fig.ours


@pytest.mark.parametrize(("bspv", "fspv", "opt", "expected"), [
    (3.0, 2.0, 1.2, MET),       # FSPV beats BSPV, cut 40 %
    (3.0, 2.0, 0.8, BEATEN),    # cut 60 %
    (1.5, 2.0, 0.8, MISSED),    # a large cut, but FSPV does not beat BSPV
    (3.0, 2.0, 1.6, MISSED),    # cut 20 %
])
def test_fig16b_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bspv: float,
                           fspv: float, opt: float, expected: str) -> None:
    fake = FakeRuns({("bspv", 5, True): bspv, ("fspv-off", 5, True): fspv,
                     ("fspv-async", 5, True): opt})
    fig = scaling.fig16b(_page_ctx(tmp_path, monkeypatch, fake))
    assert verdict(fig) == expected, fig.ours
    spec = json.loads(dict(s.split("=", 1) for s in fake.sets[0])["stragglers"])
    assert spec == [{"pattern": "injected", "tau_ms": 4, "workers": "1-5"},
                    {"pattern": "injected", "tau_ms": 28, "workers": "2-5"}]
    cut = 100 * (1 - opt / fspv)
    assert f"by {cut:.1f} %" in fig.ours and math.isclose(fig.ours_value or cut, cut)
