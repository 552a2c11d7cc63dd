"""Fig. 16 of ``flegel paper`` (:mod:`flegel.cli.paper.scaling`): the verdicts on synthetic
times, the charged compute, the shared start, and both figures end to end in one process
with a launcher that writes the summary a run would (real runs: ``flegel paper --only 16``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.cli.compare import parse_stragglers
from flegel.cli.paper import command, network, plots, scaling
from flegel.cli.paper import runner as runner_module
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
    rows, holds = scaling.curves(times, (2, 4, 8), ("none", "slow"))
    assert holds
    sp, eff = rows["none"][-1]
    assert sp.value == pytest.approx(4.0 / 1.05) and eff.value == pytest.approx(4.0 / 4.2)
    assert rows["slow"][-1][1].value == pytest.approx(0.8)
    assert [round(s.value, 3) for s, _ in rows["none"]] == [1.0, 2.0, round(4 / 1.05, 3)]


def test_one_setting_below_080_misses_the_claim() -> None:
    times = _times({("none", 2): 4.0, ("none", 8): 1.0, ("slow", 2): 6.0, ("slow", 8): 2.0})
    rows, holds = scaling.curves(times, (2, 8), ("none", "slow"))
    assert not holds and rows["slow"][-1][1].value == pytest.approx(0.75)


def test_bounds_count_by_their_safe_end() -> None:
    """The largest count not reaching the target: an upper bound on its speedup, which
    decides nothing; the smallest not reaching it: a lower bound, which holds when it is
    already at least 0.8."""
    up = _times({("none", 2): 4.0, ("none", 8): -0.9})
    rows, holds = scaling.curves(up, (2, 8), ("none",))
    assert rows["none"][-1][1].qualifier == "<" and not holds
    low = _times({("none", 2): -4.0, ("none", 8): 1.2})
    rows, holds = scaling.curves(low, (2, 8), ("none",))
    assert rows["none"][-1][1].qualifier == ">" and rows["none"][-1][1].value > 0.8 and holds
    low_small = _times({("none", 2): -4.0, ("none", 8): 2.0})
    assert not scaling.curves(low_small, (2, 8), ("none",))[1]


def test_a_missing_run_fails_the_claim() -> None:
    times = _times({("none", 2): 4.0, ("none", 8): 1.0, ("slow", 2): 6.0})
    rows, holds = scaling.curves(times, (2, 8), ("none", "slow"))
    assert "slow" not in rows and not holds


def test_a_whole_setting_missing_fails_the_claim() -> None:
    """Every run of the straggler setting failed: the other setting alone, linear as it is,
    must not read met."""
    times = _times({("none", 2): 4.0, ("none", 8): 1.0})
    rows, holds = scaling.curves(times, (2, 8), ("none", "slow"))
    assert list(rows) == ["none"] and rows["none"][-1][1].value == pytest.approx(1.0)
    assert not holds
    assert scaling.curves(times, (2, 8), ("none",))[1]


def test_gpu_cut_reads_the_runtime_cuts_and_their_bounds() -> None:
    cut, cut_bsp, beats = scaling.gpu_cut(Time(3.0, True), Time(2.0, True), Time(1.0, True))
    assert cut.value == pytest.approx(50.0) and cut.qualifier == "" and cut.text() == "50.0 %"
    assert cut_bsp.value == pytest.approx(100 * 2 / 3) and beats.value == pytest.approx(1.5)
    cut, _, _ = scaling.gpu_cut(Time(3.0, True), Time(4.0, False), Time(1.0, True))
    assert cut.value == pytest.approx(75.0) and cut.text() == ">75.0 %"  # FSPV > 4 s
    cut, cut_bsp, beats = scaling.gpu_cut(Time(1.0, True), Time(4.0, False), Time(4.0, False))
    assert cut.qualifier == "?" and cut.bound == "" and cut.text() == "unknown"
    assert cut_bsp.text() == "<-300.0 %" and beats.qualifier == "<"


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
    seed, _ = scaling.best_seed(str((tmp_path / "data" / "kmeans.npy").resolve()), k)
    assert path.name == f"kmeans-start-seed{seed}.npy"
    assert f"K rows drawn by seed {seed}, of seeds 0-9" in scaling.start_words(ctx)
    assert start.shape == (k, x.shape[1])
    assert all(any(np.array_equal(row, y) for y in x) for row in start)
    assert scaling.shared_start(ctx) == path and np.array_equal(np.load(path), start)
    other = scaling.shared_start(ctx, seed=seed + 1)  # another seed: another file, not the cache
    assert other != path and not np.array_equal(np.load(other), start)


def test_the_start_is_the_seed_whose_lloyd_objective_is_lowest(tmp_path: Path) -> None:
    """best_seed() runs the rule: of the seeds, the start Lloyd's algorithm takes lowest.  On
    three far blobs a start with two rows in one blob stays in a worse basin."""
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]])
    x = np.concatenate([c + rng.normal(size=(50, 2)) for c in centers])
    path = tmp_path / "x.npy"
    np.save(path, x)
    scores = {s: scaling.lloyd(x, scaling.start_rows(x, 3, s)) for s in range(10)}
    assert min(scores.values()) == pytest.approx(150 * 2, rel=0.3)  # the blobs' own optimum
    assert max(scores.values()) > 10 * min(scores.values())  # some seed lands worse
    seed, f = scaling.best_seed(str(path), 3)
    assert f == min(scores.values()) and scores[seed] == f
    assert seed == min(s for s, v in scores.items() if v == f)


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
        if t == 0:  # a run that fails
            raise ValueError("the run failed")
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
    assert first["workers"] == "2" and "kmeans-start-seed" in first["params.init"]
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
    assert f"by {cut:.1f} %" in fig.ours
    assert f"BSPV's by {100 * (1 - opt / bspv):.1f} %" in fig.ours
    assert "(read: against FSPV)" in fig.paper
    if expected == MISSED and bspv < fspv:  # FSPV does not beat BSPV: no number to compare
        assert fig.ours_value is None
    else:
        assert fig.ours_value == pytest.approx(cut)


def test_fig16a_with_every_straggler_run_failed_misses(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    f = "fspv-async"
    times = {(f, 2, False): 4.0, (f, 4, False): 2.0, (f, 8, False): 1.0,
             (f, 2, True): 0, (f, 4, True): 0, (f, 8, True): 0}
    fig = scaling.fig16a(_page_ctx(tmp_path, monkeypatch, FakeRuns(times)))
    assert verdict(fig) == MISSED and "failed: half slow" in fig.ours


def test_fig16b_with_fspv_failed_shows_no_cut(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRuns({("bspv", 5, True): 3.0, ("fspv-off", 5, True): 0,
                     ("fspv-async", 5, True): 1.0})
    fig = scaling.fig16b(_page_ctx(tmp_path, monkeypatch, fake))
    assert verdict(fig) == MISSED and fig.ours_value is None
    assert "FSPV's runtime by - (BSPV's by 66.7 %)" in fig.ours and "failed: FSPV" in fig.ours


class Recorder:
    """A launcher that records every run's ``--set`` keys and answers a summary."""

    def __init__(self) -> None:
        self.sets: list[list[str]] = []

    def __call__(self, job: Path, folder: Path, sets: list[str], timeout: float
                 ) -> dict[str, Any]:
        self.sets.append(sets)
        return {"final_objective": 100.0, "time_to_target_s": 1.0, "wall_time_s": 1.0}


def test_the_reference_run_gets_the_sets_and_its_target_is_keyed_by_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runner.run(reference=...): the reference run gets the keys after its stop keys (so
    they win), its target is cached under (algorithm, partition, *sets); a plain run()
    still gets the (algorithm, partition) target, from a reference without them."""
    rec = Recorder()
    monkeypatch.setattr(runner_module, "run_one", rec)
    r = Runner(TINY, tmp_path, say=lambda _: None)
    r.run("kmeans", "contiguous", "bspv", sets=("workers=2",), reference=("params.init=a",))
    ref, run = rec.sets
    assert ref[-3:][0].startswith("stop.max_time_s=") and ref[-2] == "stop.tolerance=1e-7"
    assert ref[-1] == "params.init=a" and "workers=2" not in ref
    target = 100.0 + r.work["kmeans"].slack * 100.0
    assert r.targets == {("kmeans", "contiguous", "params.init=a"): target}
    assert run[-2:] == ["workers=2", f"stop.target_objective={target!r}"]
    assert "params.init=a" not in run

    r.run("kmeans", "contiguous", "bspv")
    assert len(rec.sets) == 4 and "params.init=a" not in rec.sets[2]
    assert set(r.targets) == {("kmeans", "contiguous", "params.init=a"),
                              ("kmeans", "contiguous")}
    assert rec.sets[3][-1] == f"stop.target_objective={target!r}"


def test_only_16_expands_to_both_rows() -> None:
    assert command.expand(["16"]) == ["16a", "16b"]
    assert command.expand(["7", "16b", "nope"]) == ["7", "16b", "nope"]
    assert command.expand(None) == list(command.FIGURES) == command.expand([])
