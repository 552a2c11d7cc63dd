"""FSPV's sampled first pass on K-means (issue 19, Fig. 8; :class:`flegel.sync.fsp.FSP`,
Notes: "The sampled first pass"): after the sampled calibration, the first pass runs as
sampled iterations -- each the share trained so far, up to half of every shard -- whose
M-steps the stratum takes on the latest share alone (mini-batch K-means' step), then one
whole pass; not where a worker was paused or slow on its share (from the calibration or
a later step), nor for an algorithm without ``sampled_first_pass``; and its state across a
checkpoint.  One process: the real server, policies and K-means on the simulated
clock (tests/fakes.py), every worker with its own instance (its stratum, as in a real run)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from flegel.algorithms._stratum import Stratum
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.kmeans import KMeans
from flegel.interval.multistage import SAMPLE_SHARE, sample_batch
from flegel.protocol import Instructions
from flegel.sync.fsp import SAMPLED_FIRST_PASS, SAMPLED_PHASE, WHOLE_PHASE
from tests.fakes import Simulation, blobs, kmeans_theta0, lloyd_step

WORKERS = 3
SHARD = 8_800
BATCH = sample_batch(SHARD, SAMPLE_SHARE)
COST_S = 1e-6
LATENCY_S = 1e-3


class Versions:
    """θ after every update, and each worker's rows in its traversal order at the first."""

    def __init__(self) -> None:
        self.theta: dict[int, dict[str, np.ndarray]] = {}
        self.rows: list[np.ndarray] = []

    def __call__(self, sim: Simulation, event: dict[str, Any]) -> None:
        v = sim.server.version
        if v not in self.theta:
            self.theta[v] = {k: np.array(a, copy=True) for k, a in sim.server.theta.items()}
        if not self.rows:
            self.rows = [np.array(sim.workers[r].shard.x, copy=True) for r in sim.ranks]


def _run(slowdown: dict[int, float] | None = None, stop: int = 6,
         algorithm: Any = None) -> tuple[Simulation, Versions]:
    x, centres0 = blobs(n=WORKERS * SHARD, k=4, d=3, seed=1)
    watch = Versions()
    alg = algorithm if algorithm is not None else KMeans(n_clusters=4, n_init=1)
    theta0 = kmeans_theta0(centres0, stratum=True) if isinstance(alg, KMeans) else None
    sim = Simulation("fsp", {}, workers=WORKERS, data=x, theta0=theta0, algorithm=alg,
                     cost_s=COST_S, latency_s=LATENCY_S, slowdown=slowdown or {},
                     on_barrier=watch, stop={"max_iterations": stop},
                     own_algorithms=True).run()
    return sim, watch


def test_the_first_pass_runs_as_doubling_samples_then_a_whole_pass():
    """Shares 1/8 (the calibration), 1/8, 1/4 of every shard -- each the share trained so
    far, half of the shard in all (SAMPLED_FIRST_PASS) -- then a whole pass, then FSPV's
    ordinary iterations.  (Before: a pass right after the calibration.)"""
    sim, _ = _run()
    bars = sim.barrier_events()
    phases = [e["phase"] for e in bars[:5]]
    assert phases[:4] == ["calibration", SAMPLED_PHASE, SAMPLED_PHASE, WHOLE_PHASE]
    assert phases[4] not in ("calibration", SAMPLED_PHASE, WHOLE_PHASE)
    points = [e["workers"]["points"] for e in bars[:4]]
    assert points == [[BATCH] * WORKERS, [BATCH] * WORKERS, [2 * BATCH] * WORKERS,
                      [SHARD] * WORKERS]
    assert 4 * BATCH / SHARD <= SAMPLED_FIRST_PASS + 1e-3
    assert [e["workers"]["reason"] for e in bars[:3]] == [["batch"] * WORKERS] * 3


def test_a_sampled_step_is_lloyds_step_on_the_latest_share():
    """θ² is Lloyd's step from θ¹ on the second eighth of every shard alone (the stratum's
    estimate: n/m times the fresh sums), not incremental EM's on both eighths, whose first
    keeps θ⁰'s labels; and θ's exact sums still hold every trained point."""
    _, watch = _run()
    second = np.concatenate([rows[BATCH:2 * BATCH] for rows in watch.rows])
    expected = lloyd_step(second, watch.theta[1]["centers"])
    np.testing.assert_allclose(watch.theta[2]["centers"], expected, rtol=1e-9, atol=1e-9)
    assert watch.theta[2]["counts"].sum() == WORKERS * 2 * BATCH
    # Once the whole pass is in, no correction is left: exact sums, exactly.
    assert float(np.abs(watch.theta[4]["stratum_counts"]).sum()) == 0.0


@pytest.mark.parametrize("slowdown", [100.0, 30.0])
def test_no_sampled_pass_with_a_straggler(slowdown):
    """A straggler 100x slow is paused at the calibration's bound before its share; one 30x
    slow (Fig. 7's) trains its share within the bound, but its pass predicted from it is
    beyond SAMPLED_PASS_WAIT times the others': either way no sampled step follows (each
    would wait for the straggler's share), FSPV's iterations from the calibration on, as
    before.  A worker 2x slow (a shared core) keeps the sampled pass."""
    sim, _ = _run(slowdown={WORKERS: slowdown}, stop=6)
    bars = sim.barrier_events()
    assert bars[0]["workers"]["reason"][-1] == ("signal" if slowdown > 50 else "batch")
    assert bars[0]["phase"] == "calibration"
    assert all(e["phase"] not in ("calibration", SAMPLED_PHASE, WHOLE_PHASE) for e in bars[1:])
    sim, _ = _run(slowdown={WORKERS: 2.0}, stop=4)
    assert [e["phase"] for e in sim.barrier_events()] == [
        "calibration", SAMPLED_PHASE, SAMPLED_PHASE, WHOLE_PHASE]


def test_an_algorithm_without_the_declaration_passes_after_the_calibration():
    """GMM takes the sampled first step but declares no sampled first pass (no stratum):
    the iteration after the calibration is a pass, as before."""
    sim, _ = _run(algorithm=GaussianMixture(n_components=4), stop=2)
    second = sim.barrier_events()[1]
    assert second["phase"] != SAMPLED_PHASE
    assert second["workers"]["points"] == [SHARD] * WORKERS


def test_a_sampled_window_keeps_the_estimate_on_a_shuffled_shard():
    """The skew test switches a shuffled shard's stratum off (its shares match θ's); a
    window the master sampled (``arm(sampled=True)``) keeps the estimate whatever its
    shares, and the next iteration's skew test still switches it off."""
    rng = np.random.default_rng(3)
    n, k, d = 10_000, 3, 2
    x = rng.normal(size=(n, d))
    even = np.full(k, 1000.0)
    new = rng.integers(0, k, 500)
    onehot = (new[None, :] == np.arange(k)[:, None]).astype(float)
    fresh = {"sums": onehot @ x[:500], "counts": onehot.sum(axis=1)}
    for sampled in (False, True):
        s = Stratum(n, shares="counts")
        s.arm(sampled=sampled)
        assert s.screen(2, fresh["counts"], 500, even) == sampled
        piece = s.observe(2, 500, fresh, fresh if sampled else None, 500, 500, reference=even)
        assert (np.abs(piece["counts"]).sum() > 0) == sampled and s.on == sampled
    s.arm()  # the next iteration, not sampled: the skew test applies again
    assert not s.screen(3, fresh["counts"], 500, even) and s.off


def _slowed_from(at_s: float, factor: float) -> Any:
    """A worker ``factor`` times slower from ``at_s`` on (simulated seconds)."""
    return lambda t: 1.0 if t < at_s else factor


@pytest.mark.parametrize("slowdown", [100.0, 30.0])
@pytest.mark.parametrize("share", [1, 2])
def test_a_straggler_after_a_share_ends_the_sampled_pass(slowdown, share):
    """A worker slowed only after ``share`` sampled shares (3.5 ms: after the calibration's
    barrier at 3.1 ms; 6.5 ms: after the first sampled step's, at 6.2 ms): 100x is paused at
    the bound within its next share, 30x trains it but is found slow on that commit -- its
    kernel time, where PassPredictor's fastest recent kernel (the calibration's) hid it and a
    second sampled step then waited 66 ms for its quarter, and a whole pass followed.  Either
    way the sampled pass ends there, half of every shard or less trained, without its whole
    pass: FSPV's adjustor starts as after a calibration that found the straggler."""
    sim, _ = _run(slowdown={WORKERS: _slowed_from(0.0035 if share == 1 else 0.0065,
                                                  slowdown)}, stop=8)
    bars = sim.barrier_events()
    phases = [e["phase"] for e in bars]
    # every barrier: the sampled steps up to the one the straggler slowed, none after, and
    # no whole pass (its points come in FSPV's iterations)
    assert phases[:share + 1] == ["calibration"] + [SAMPLED_PHASE] * share
    assert all(p not in ("calibration", SAMPLED_PHASE, WHOLE_PHASE) for p in phases[share + 1:])
    assert bars[share]["workers"]["reason"][-1] == ("signal" if slowdown > 50 else "batch")
    # trained: the shares before the aborted step, which was as large again
    assert sim.policy.trained == pytest.approx(share * BATCH / SHARD)
    assert 2 * sim.policy.trained <= SAMPLED_FIRST_PASS + 1e-3
    # the adjustor started from these measurements: the η and the longest useful η of a
    # run whose calibration found the straggler (η_max: the typical worker's pass)
    ref, _ = _run(slowdown={WORKERS: slowdown}, stop=3)
    assert sim.policy.plan.eta_s > 0
    assert bars[share + 1]["eta_ms"] == pytest.approx(ref.barrier_events()[1]["eta_ms"])
    assert sim.policy.eta_max_s == pytest.approx(SHARD * COST_S, rel=1e-6)
    assert sim.policy.summary()["mean_eta_ms"] == pytest.approx(
        np.mean([e["eta_ms"] for e in bars[share + 1:]]))


def test_sampled_steps_are_no_interval_nor_pass():
    """A sampled step has no η and is no pass: its barrier has no ``eta_ms`` and
    ``mean_eta_ms`` leaves it out (the calibration's is left out as before)."""
    sim, _ = _run(stop=6)
    bars = sim.barrier_events()
    assert [e["eta_ms"] is None for e in bars] == [False, True, True, False, False, False]
    assert len(sim.policy.eta_log) == 4
    assert sim.policy.summary()["mean_eta_ms"] == pytest.approx(
        np.mean([e["eta_ms"] for e in bars[3:]]))


def test_only_the_sampled_first_pass_skips_the_skew_test():
    """Instructions.sampled is set for SAMPLED_PHASE's windows only: the sampled calibration
    arms every stratum with the skew test (as before the sampled first pass: at θ⁰, without
    counts, it cannot decide, so the calibration's window keeps its estimate), the sampled
    steps without it, the whole pass and FSPV's iterations with it again."""
    uniform: list[list[bool]] = []

    def watch(sim: Simulation, event: dict[str, Any]) -> None:
        uniform.append([bool(w.algorithm._stratum.uniform) for w in sim.workers.values()])

    x, centres0 = blobs(n=WORKERS * SHARD, k=4, d=3, seed=1)
    sim = Simulation("fsp", {}, workers=WORKERS, data=x, theta0=kmeans_theta0(centres0, True),
                     algorithm=KMeans(n_clusters=4, n_init=1), cost_s=COST_S,
                     latency_s=LATENCY_S, on_barrier=watch, stop={"max_iterations": 5},
                     own_algorithms=True).run()
    assert [u[0] for u in uniform] == [False, True, True, False, False]
    assert all(len(set(u)) == 1 for u in uniform)
    sent = {p.version: p.header["sampled"] for p in sim.transport.params_to(1)}
    assert [sent[v] for v in range(5)] == [0.0, 1.0, 1.0, 0.0, 0.0]


def test_a_resume_in_the_sampled_pass_goes_on_with_it():
    """A checkpoint taken at the barrier that schedules the second sampled step (its
    policy's state, and a worker's stratum): the resumed master sends the same instructions
    -- a quarter of every shard, a sampled step -- its share and total are the run's, and a
    resumed worker's stratum (disarmed by restore) is armed for a sampled window by them."""
    saved: dict[str, Any] = {}

    def take(sim: Simulation, event: dict[str, Any]) -> None:
        if event["t"] == 2:
            assert sim.policy.plan.phase == SAMPLED_PHASE
            saved["master"] = pickle.loads(pickle.dumps(sim.policy.checkpoint_state()))
            s = sim.workers[1].algorithm._stratum
            saved["stratum"] = pickle.loads(pickle.dumps(s.checkpoint_state()))

    x, centres0 = blobs(n=WORKERS * SHARD, k=4, d=3, seed=1)

    def sim_(**kw: Any) -> Simulation:
        return Simulation("fsp", {}, workers=WORKERS, data=x,
                          theta0=kmeans_theta0(centres0, stratum=True),
                          algorithm=KMeans(n_clusters=4, n_init=1), cost_s=COST_S,
                          latency_s=LATENCY_S, own_algorithms=True, **kw)

    run = sim_(on_barrier=take, stop={"max_iterations": 6}).run()
    assert [e["phase"] for e in run.barrier_events()][:4] == [
        "calibration", SAMPLED_PHASE, SAMPLED_PHASE, WHOLE_PHASE]
    resumed = sim_()
    resumed.policy.restore(saved["master"])
    resumed.policy.broadcast()
    assert resumed.policy.share == run.barrier_events()[2]["workers"]["points"][0] / SHARD
    assert resumed.policy.trained == pytest.approx(2 * BATCH / SHARD)
    for r in resumed.ranks:
        header = resumed.transport.params_to(r)[-1].header
        sent = next(p.header for p in run.transport.params_to(r) if p.version == 2)
        assert (header["batch"], header["sampled"]) == (sent["batch"], sent["sampled"])
        assert (header["batch"], header["sampled"]) == (2 * BATCH, 1.0)
    worker = resumed.workers[1]
    stratum = worker.algorithm._stratum
    stratum.restore(saved["stratum"])
    assert not stratum.armed
    worker.policy.begin(worker, Instructions.from_header(header_of(resumed, 1)), 0.0)
    assert stratum.armed and stratum.uniform


def header_of(sim: Simulation, rank: int) -> dict[str, float]:
    """The latest PARAMS header sent to ``rank``."""
    return sim.transport.params_to(rank)[-1].header
