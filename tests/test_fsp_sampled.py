"""FSPV's sampled calibration (issue 19, Fig. 8; :class:`flegel.sync.fsp.FSP`, Notes): an
incremental EM algorithm (``sampled_first_step``: GMM, FCM) takes its first M-step after an
eighth of every worker's shuffled shard (:func:`flegel.interval.multistage.sample_fraction`),
not after a whole pass as BSPV's calibration does, and reaches the objective of batch EM's
second step sooner.  One process: the real server, policies and GMM on the simulated clock
(tests/fakes.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flegel.algorithms.gmm import GaussianMixture
from flegel.interval.multistage import (
    SAMPLE_MIN_POINTS,
    SAMPLE_SHARE,
    sample_batch,
    sample_fraction,
)
from tests.fakes import Simulation

WORKERS = 3
#: Points per worker: an eighth of a shard is above SAMPLE_MIN_POINTS.
SHARD = 8_800
#: A pass of 8.8 ms and messages of 1 ms each way: as on the shared cores where Fig. 8 is
#: measured (``flegel paper``'s GMM: passes of 10-30 ms, barriers of 4-8 ms), FSPV's first
#: interval, BSPV's (a barrier a tenth of the iteration), is beyond the pass, so FSPV runs a
#: barrier per pass as BSPV does and only the calibration differs.
COST_S = 1e-6
LATENCY_S = 1e-3


def _data(seed: int = 0, shuffled: bool = True) -> np.ndarray:
    """Three well-separated Gaussian blobs in 4 dimensions, in random order (or sorted by
    blob: each contiguous shard holds one blob, so only the store's within-shard shuffle
    makes a worker's share a random sample of its shard)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 6.0, size=(3, 4))
    x = np.concatenate([c + rng.standard_normal((WORKERS * SHARD // 3, 4)) for c in centres])
    return x[rng.permutation(len(x))] if shuffled else x


def _run(model: str, options: dict[str, Any], stop: int = 6) -> tuple[Simulation, list]:
    """One run; returns the simulation and (time, exact objective) after every barrier."""
    trace: list[tuple[float, float]] = []

    def record(sim: Simulation, event: dict[str, Any]) -> None:
        trace.append((event["time_s"], sim.objective()))

    sim = Simulation(model, options, workers=WORKERS, data=_data(),
                     algorithm=GaussianMixture(n_components=3), cost_s=COST_S, latency_s=LATENCY_S,
                     on_barrier=record, stop={"max_iterations": stop}).run()
    return sim, trace


def test_sample_fraction_and_batch():
    assert sample_fraction([]) == 1.0  # no shards known: a whole pass
    assert sample_fraction([0, 80_000]) == 1.0  # a shard unknown: a whole pass
    assert sample_fraction([SAMPLE_MIN_POINTS, 80_000]) == 1.0  # all of a small shard
    assert sample_fraction([80_000, 16_000]) == SAMPLE_SHARE
    # The smallest shard gives SAMPLE_MIN_POINTS; the others the same share.
    assert sample_fraction([3 * SAMPLE_MIN_POINTS, 80_000]) == pytest.approx(1 / 3)
    # ... but half a shard or more is no sample: a whole pass (WHOLE_SAMPLE_SHARE)
    assert sample_fraction([2 * SAMPLE_MIN_POINTS, 80_000]) == 1.0
    assert sample_fraction([2 * SAMPLE_MIN_POINTS + 1, 80_000]) < 1.0  # just under half
    assert sample_batch(80_000, 1.0) == 0
    assert sample_batch(80_000, SAMPLE_SHARE) == 10_000
    assert sample_batch(11_067, 0.5) == 5_534


def test_the_first_m_step_comes_after_an_eighth_of_every_shard():
    """FSPV's calibration ends when each worker has trained an eighth of its shard (a
    batch); the next iteration is a pass, which revisits the sample at θ¹.  (Before: a
    whole pass of every worker.)"""
    sim, _ = _run("fsp", {})
    bars = sim.barrier_events()
    first, second = bars[0], bars[1]
    assert first["phase"] == "calibration"
    assert first["workers"]["reason"] == ["batch"] * WORKERS
    assert first["workers"]["points"] == [SHARD // 8] * WORKERS
    assert second["workers"]["reason"] == ["pass"] * WORKERS
    assert second["workers"]["points"] == [SHARD] * WORKERS


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_migration_takes_coverage_not_the_sample(mode):
    """With data migration GMM (``cover_before_update`` too) has no sampled first step: a
    straggler slower than the calibration's bound is paused before its share, so the sample
    is not stratified (``flegel.sync.fsp.sampled_calibration``); the calibration is a whole
    pass and coverage holds θ until every point was trained.  (Before: the sample took
    precedence, θ¹ came from [1100, 1100, 1100] points here, and nothing was held.)"""
    sim = Simulation("fsp", {"migration": {"mode": mode, "window": 64}}, workers=WORKERS,
                     data=_data(), algorithm=GaussianMixture(n_components=3), cost_s=COST_S,
                     latency_s=LATENCY_S, slowdown={WORKERS: 20.0},
                     stop={"max_iterations": 3}).run()
    first = sim.barrier_events()[0]
    assert first["phase"] == "calibration"
    assert "batch" not in first["workers"]["reason"]
    assert first["workers"]["points"][:-1] == [SHARD] * (WORKERS - 1)
    assert "coverage" in sim.policy.summary()


@pytest.mark.parametrize("options", [{"interval": "binary"}, {"shuffle": False},
                                     {"eta_ms": 5.0, "interval": "fixed"}])
def test_other_fsp_variants_keep_the_whole_calibration(options):
    """FSPB's η⁰ is the calibration's pass, a fixed η needs none, and a shard in its stored
    order has no random share: a whole pass, as before."""
    sim, _ = _run("fsp", options, stop=2)
    first = sim.barrier_events()[0]
    assert first["workers"]["points"] == [SHARD] * WORKERS
    assert first["workers"]["reason"] == ["pass"] * WORKERS


@pytest.mark.parametrize("slack", [1e-4, 1e-5, 1e-7])
def test_fspv_reaches_the_target_sooner_than_bspv(slack):
    """The paper's target: the converged objective plus a slack.  BSPV's calibration is a
    whole pass; FSPV's first M-step comes after an eighth of one, and every later θ is about
    batch EM's next, 7/8 of a pass sooner, with as many barriers: FSPV is there in at most
    0.8x BSPV's simulated time.  (Before: both ran the same whole passes,
    1.0x.)"""
    _, bsp = _run("bsp", {"batch": "auto"})
    _, fsp = _run("fsp", {})
    converged = bsp[-1][1]
    target = converged + slack * abs(converged)
    t_bsp = next(t for t, f in bsp if f <= target)
    t_fsp = next(t for t, f in fsp if f <= target)
    assert t_fsp <= 0.8 * t_bsp
    # Both settle on the same optimum.
    assert fsp[-1][1] == pytest.approx(converged, rel=1e-9)


def test_a_worker_alone_on_a_core_in_the_sample_does_not_make_the_pass_look_short():
    """Worker 1 runs its eighth of a pass 4x faster than later (alone on a core before the
    others start): extrapolated, its pass looks 2.2 ms against the others' 8.8 ms.  The
    typical worker's pass stands for the fastest after the sampled calibration, so FSPV
    starts from BSPV's interval (6.3 ms here, a barrier of 0.6 ms) and probes below the
    pass, instead of a barrier per pass fitted on a pass 4x too short."""
    sim = Simulation("fsp", {}, workers=WORKERS, data=_data(),
                     algorithm=GaussianMixture(n_components=3), cost_s=COST_S,
                     latency_s=2.5e-4, slowdown={1: lambda t: 0.25 if t < 2e-3 else 1.0},
                     stop={"max_iterations": 3}).run()
    first, second = sim.barrier_events()[:2]
    assert first["workers"]["compute_s"][0] < first["workers"]["compute_s"][1] / 3
    assert second["phase"] == "probe"


def test_the_sample_of_sorted_shards_is_random():
    """Data sorted along its first axis, split into contiguous shards: only the store's
    within-shard shuffle makes each worker's eighth a random sample of its shard, and θ¹ is
    then within 1% of a whole-pass calibration's (FSPB's) on the same data.  (An eighth in
    stored order, the sorted shards' first slices, is 21% worse.)"""
    x = _data()
    x = x[np.argsort(x[:, 0], kind="stable")]
    objective = {}
    for name, options in (("sampled", {}), ("whole", {"interval": "binary"})):
        sim = Simulation("fsp", options, workers=WORKERS, data=x,
                         algorithm=GaussianMixture(n_components=3), cost_s=COST_S,
                         latency_s=LATENCY_S, stop={"max_iterations": 1}).run()
        first = sim.barrier_events()[0]["workers"]
        assert first["reason"] == (["batch"] if name == "sampled" else ["pass"]) * WORKERS
        objective[name] = sim.objective()
    assert objective["sampled"] == pytest.approx(objective["whole"], rel=0.01)


@pytest.mark.parametrize("coordination", ["semi", "centralized"])
def test_a_late_starting_worker_trains_its_share_on_sorted_shards(coordination):
    """Worker 2 waits 30 ms for a core (20x slowed before then): its eighth arrives long
    after the others', but within the time a whole-pass calibration would have waited for
    it, so it is not paused short and θ¹ comes from equal shares of the sorted shards.
    (Before: paused at 4x the first arrival, an eighth of a pass, with 621 of its 1,100.)"""
    sim = Simulation("fsp", {"coordination": coordination}, workers=WORKERS,
                     data=_data(shuffled=False),
                     algorithm=GaussianMixture(n_components=3), cost_s=COST_S,
                     latency_s=LATENCY_S, slowdown={2: lambda t: 20.0 if t < 0.03 else 1.0},
                     stop={"max_iterations": 2}).run()
    first = sim.barrier_events()[0]
    assert first["phase"] == "calibration"
    assert first["workers"]["reason"] == ["batch"] * WORKERS
    assert first["workers"]["points"] == [SHARD // 8] * WORKERS


def test_uneven_shards_give_the_same_share():
    """Shards of [3000, 11700, 11700] points: the smallest gives its 1,000 points, a third
    of its shard, and so do the others, so the sample is proportional to the shards -- a
    random sample of the data.  (Before: a minimum per worker, shares of [1/3, 1/8, 1/8].)"""
    x = _data(shuffled=False)
    sizes = [3000, 11_700, 11_700]
    sim = Simulation("fsp", {}, workers=WORKERS, shards=np.split(x, np.cumsum(sizes)[:-1]),
                     algorithm=GaussianMixture(n_components=3), cost_s=COST_S,
                     latency_s=LATENCY_S, stop={"max_iterations": 2}).run()
    first = sim.barrier_events()[0]
    assert first["workers"]["reason"] == ["batch"] * WORKERS
    assert first["workers"]["points"] == [1000, 3900, 3900]


def test_the_typical_pass_after_the_sample_is_the_lower_median():
    """Four workers 1-4x slow: after the sampled calibration the longest useful η is the
    typical worker's pass by the rule of :meth:`flegel.sync.passes.PassPredictor.typical`,
    the lower median (the second of four), not the upper.  (Before: the third, 1.5x it.)"""
    sim = Simulation("fsp", {}, workers=4, data=_data(),
                     algorithm=GaussianMixture(n_components=3), cost_s=COST_S,
                     latency_s=LATENCY_S, slowdown={r: float(r) for r in range(1, 5)},
                     stop={"max_iterations": 1}).run()
    w = sim.barrier_events()[0]["workers"]
    assert w["reason"] == ["batch"] * 4
    passes = sorted(n * c / p for n, c, p in zip([len(s) for s in sim.shards],
                                                   w["compute_s"], w["points"]))
    assert passes[2] > 1.3 * passes[1]
    assert sim.policy.eta_max_s == pytest.approx(passes[1], rel=1e-6)
