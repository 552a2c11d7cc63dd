"""FSPV's sampled first pass on K-means (issue 19, Fig. 8; :class:`flegel.sync.fsp.FSP`,
Notes: "The sampled first pass"): after the sampled calibration, the first pass runs as
sampled iterations -- each the share trained so far, up to half of every shard -- whose
M-steps the stratum takes on the latest share alone (mini-batch K-means' step), then one
whole pass; not where a worker was paused, nor for an algorithm without
``sampled_first_pass``.  One process: the real server, policies and K-means on the simulated
clock (tests/fakes.py), every worker with its own instance (its stratum, as in a real run)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flegel.algorithms._stratum import Stratum
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.kmeans import KMeans
from flegel.interval.multistage import SAMPLE_SHARE, sample_batch
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
    sim, _ = _run(slowdown={WORKERS: slowdown}, stop=3)
    first, second = sim.barrier_events()[:2]
    assert first["workers"]["reason"][-1] == ("signal" if slowdown > 50 else "batch")
    assert second["phase"] not in (SAMPLED_PHASE, WHOLE_PHASE)
    sim, _ = _run(slowdown={WORKERS: 2.0}, stop=3)
    assert sim.barrier_events()[1]["phase"] == SAMPLED_PHASE


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
