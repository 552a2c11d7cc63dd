"""FSPV's sampled first step on K-means and NMF (issue 19, Fig. 8;
:func:`flegel.sync.fsp.sampled_calibration`): both declare ``sampled_first_step``, so FSPV's
calibration ends after the same share of every worker's shuffled shard and θ¹ is Lloyd's
(HALS's) step on that sample at θ⁰ -- exactly, checked against a step computed here --; no
sampled step where it must not apply (data migration, shards in stored order, FSPB, small
shards, BSPV, an algorithm without the declaration).  One process: the real server,
policies and algorithms on the simulated clock (tests/fakes.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.algorithms.logreg import LogisticRegression
from flegel.algorithms.nmf import NMF
from flegel.block import Block
from flegel.interval.multistage import SAMPLE_SHARE, sample_batch
from flegel.sync.fsp import SAMPLED_PHASE, sample_share, sampled_calibration
from tests.fakes import Simulation, blobs, kmeans_theta0, lloyd_step, sync_options

WORKERS = 3
#: Points per worker: an eighth of a shard (1,100) is above SAMPLE_MIN_POINTS.
SHARD = 8_800
BATCH = sample_batch(SHARD, SAMPLE_SHARE)
COST_S = 1e-6
LATENCY_S = 1e-3


class FirstUpdate:
    """At the first barrier that made θ version 1: θ¹, and each worker's first ``BATCH``
    rows in its traversal order (the store's shuffled order) and their visits."""

    def __init__(self) -> None:
        self.theta: dict[str, np.ndarray] | None = None
        self.sample: list[np.ndarray] = []
        self.visits: list[np.ndarray] = []
        self.w: list[np.ndarray] = []

    def __call__(self, sim: Simulation, event: dict[str, Any]) -> None:
        if self.theta is not None or sim.server.version != 1:
            return
        self.theta = {k: np.array(v, copy=True) for k, v in sim.server.theta.items()}
        for r in sim.ranks:
            store = sim.workers[r].shard
            self.sample.append(np.array(store.x[:BATCH], copy=True))
            self.visits.append(np.array(store.visits, copy=True))
            if "w" in store.state:  # NMF: the sample rows' w_i at H⁰
                self.w.append(np.array(store.state["w"][:BATCH], copy=True))


def _kmeans(options: dict[str, Any] | None = None, model: str = "fsp",
            shard: int = SHARD) -> tuple[Simulation, FirstUpdate, dict]:
    x, centres0 = blobs(n=WORKERS * shard, k=4, d=3, seed=1)
    theta0 = kmeans_theta0(centres0)
    watch = FirstUpdate()
    sim = Simulation(model, options or {}, workers=WORKERS, data=x, theta0=theta0,
                     algorithm=KMeans(n_clusters=4, n_init=1), cost_s=COST_S, latency_s=LATENCY_S,
                     on_barrier=watch, stop={"max_iterations": 4}).run()
    return sim, watch, theta0


def test_kmeans_first_update_is_lloyds_step_on_an_eighth_of_every_shard():
    """FSPV's calibration ends when every worker trained an eighth of its shard (a batch),
    only those rows were visited, and θ¹ is Lloyd's step on them from θ⁰ -- mini-batch
    K-means' first step on a stratified sample.  The next iteration is the sampled first
    pass's next eighth (tests/test_fsp_sampled_pass.py).  (Before: K-means' calibration was
    a whole pass of every worker; then the next iteration was a whole pass.)"""
    sim, watch, theta0 = _kmeans()
    first, second = sim.barrier_events()[:2]
    assert first["phase"] == "calibration"
    assert first["workers"]["reason"] == ["batch"] * WORKERS
    assert first["workers"]["points"] == [BATCH] * WORKERS
    assert second["phase"] == SAMPLED_PHASE
    assert second["workers"]["points"] == [BATCH] * WORKERS
    assert watch.theta is not None
    for v in watch.visits:  # the first BATCH rows of the traversal, each once
        assert int(v[:BATCH].sum()) == BATCH and int(v[BATCH:].sum()) == 0
    expected = lloyd_step(np.concatenate(watch.sample), theta0["centers"])
    np.testing.assert_allclose(watch.theta["centers"], expected, rtol=1e-12, atol=1e-12)
    assert watch.theta["counts"].sum() == WORKERS * BATCH


def test_the_kmeans_sample_is_not_the_stored_order():
    """The share is each worker's first rows in its *shuffled* order: a random sample of
    its shard, not the shard's first rows as stored."""
    sim, watch, _ = _kmeans()
    for r, sample in zip(sim.ranks, watch.sample):
        stored = sim.shards[r - 1][:BATCH]
        assert not np.array_equal(sample, stored)


def test_nmf_first_update_is_the_hals_step_on_the_sample():
    """NMF: θ¹'s statistics are the sample rows' W at H⁰ (WᵀW, WᵀX) and H¹ is HALS's update
    of H⁰ from them alone -- the step of a one-process fit on just those rows."""
    rng = np.random.default_rng(4)
    x = rng.random((WORKERS * SHARD, 6)) @ rng.random((6, 12))
    alg = NMF(n_components=3, kernel="array")
    h0 = rng.random((3, 12)) + 0.1
    theta0 = {"components": h0, "wtw": np.zeros((3, 3)), "wtx": np.zeros((3, 12))}
    watch = FirstUpdate()
    sim = Simulation("fsp", {}, workers=WORKERS, data=x, theta0=theta0, algorithm=alg,
                     cost_s=COST_S, latency_s=LATENCY_S, on_barrier=watch,
                     stop={"max_iterations": 3}).run()
    first = sim.barrier_events()[0]
    assert first["workers"]["reason"] == ["batch"] * WORKERS
    assert first["workers"]["points"] == [BATCH] * WORKERS
    assert watch.theta is not None
    ref = NMF(n_components=3, kernel="array")
    sample = np.concatenate(watch.sample)
    block = Block.from_arrays(sample, None, ref.init_state(len(sample), sample.shape[1]))
    expected = ref.update_parameter(ref.update_block(block, theta0, 1), theta0)
    for key in ("wtw", "wtx", "components"):
        np.testing.assert_allclose(watch.theta[key], expected[key], rtol=1e-9, atol=1e-9)
    # Independent of the class: HALS's update of H⁰ in plain NumPy from the sample's W.
    w = np.concatenate(watch.w)
    a, b, h = w.T @ w, w.T @ sample, h0.copy()
    for _ in range(alg.h_iter):
        for k in range(len(h)):
            h[k] = np.maximum(h[k] + (b[k] - a[k] @ h) / a[k, k], 0.0)
    np.testing.assert_allclose(watch.theta["wtw"], a, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(watch.theta["wtx"], b, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(watch.theta["components"], h, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", ["migration", "stored order", "fspb", "small shards", "bspv"])
def test_no_sampled_first_step_where_it_must_not_apply(case):
    """A whole pass where the sampled step does not apply: data migration (coverage holds θ
    instead), shards in stored order (no random share), FSPB (η⁰ is the calibration's
    pass), shards of at most 1,000 points (SAMPLE_MIN_POINTS would be all of the smallest
    shard), and BSPV, whose calibration is its own."""
    options: dict[str, Any] = {}
    model, shard = "fsp", SHARD
    if case == "migration":
        options = {"migration": {"mode": "async", "window": 64}}
    elif case == "stored order":
        options = {"shuffle": False}
    elif case == "fspb":
        options = {"interval": "binary"}
    elif case == "small shards":
        shard = 800
    else:
        model, options = "bsp", {"batch": "auto"}
    sim, _, _ = _kmeans(options, model=model, shard=shard)
    first = sim.barrier_events()[0]
    assert first["workers"]["points"] == [shard] * WORKERS
    assert "batch" not in first["workers"]["reason"] or model == "bsp"
    if case == "migration":
        assert "coverage" in sim.policy.summary()


def test_shards_between_get_a_larger_share():
    """Shards of 3,000 points: an eighth would be 375, so the share is raised to 1/3 (1,000
    points of the smallest shard, SAMPLE_MIN_POINTS) -- still a sample, not a whole pass."""
    sim, _, _ = _kmeans(shard=3_000)
    first = sim.barrier_events()[0]
    assert first["workers"]["reason"] == ["batch"] * WORKERS
    assert first["workers"]["points"] == [1_000] * WORKERS


def test_half_a_shard_is_a_whole_pass():
    """Shards of 2,000 points (``flegel paper``'s NMF): the share would be 1/2, so the
    calibration is a whole pass, as BSPV's (WHOLE_SAMPLE_SHARE), and every pass after it
    starts at the shard's first row -- one piece, not two (a store's block never wraps past
    the shard's end).  Before: a batch of 1,000 points, the cursor left mid-shard for good,
    and FSPV's θ sequence not BSPV's."""
    shard, starts = 2_000, []

    def cursors(sim: Simulation, event: dict[str, Any]) -> None:
        starts.append([sim.workers[r].shard.cursor for r in sim.ranks])

    rng = np.random.default_rng(4)
    x = rng.random((WORKERS * shard, 6)) @ rng.random((6, 12))
    h0 = rng.random((3, 12)) + 0.1
    theta0 = {"components": h0, "wtw": np.zeros((3, 3)), "wtx": np.zeros((3, 12))}
    thetas = {}
    for model, options in (("fsp", {}), ("bsp", {"batch": "full"})):
        sim = Simulation(model, options, workers=WORKERS, data=x, theta0=theta0,
                         algorithm=NMF(n_components=3, kernel="array"), cost_s=COST_S,
                         latency_s=LATENCY_S, stop={"max_iterations": 4},
                         on_barrier=cursors if model == "fsp" else None).run()
        events = sim.barrier_events()
        assert all(e["workers"]["points"] == [shard] * WORKERS for e in events), model
        assert all(e["workers"]["reason"] == ["pass"] * WORKERS for e in events), model
        thetas[model] = sim.server.theta
    assert starts and all(c == [0] * WORKERS for c in starts), starts
    # the same passes at the same θ: BSPV's sequence, up to the order of the sums
    for key in ("wtw", "wtx", "components"):
        np.testing.assert_allclose(thetas["fsp"][key], thetas["bsp"][key], rtol=1e-9)


def test_the_kmeans_share_holds_fifty_points_per_cluster():
    """K-means' sample holds at least 50·K points of every shard (sample_min_points): with K
    near the 1,000-point floor clusters sat on 0-2 points.  Raised share, same for all."""
    assert KMeans(n_clusters=128, n_init=1).sample_min_points == 6_400
    assert sample_share([27_500] * 4, 0) == SAMPLE_SHARE
    assert sample_share([27_500] * 4, 6_400) == pytest.approx(6_400 / 27_500)
    assert sample_share([27_500, 30_000], 6_400) == pytest.approx(6_400 / 27_500)
    assert sample_share([5_000] * 4, 6_400) == 1.0  # all of a shard: a whole pass
    assert sample_share([800] * 4, 0) == 1.0


@pytest.mark.parametrize("algorithm, takes", [
    (KMeans(n_init=1), True), (KMeans(init="random", n_init=1), True), (NMF(), True),
    (KMeans(), False), (KMeans(init="random"), False), (LogisticRegression(), False)])
def test_which_algorithms_take_the_sampled_first_step(algorithm, takes):
    """K-means from a raw seeding (``n_init=1``) and NMF declare it.  K-means' default
    (``n_init=10``, each seeding refined by Lloyd on the init sample) starts near a fixed
    point, where a step on an eighth is a step back (``bench/em_schedules.py``, kmeans.py);
    logistic regression's first full batch is L-BFGS's first evaluation (docs/sync/fsp.md).
    The rule is :func:`~flegel.sync.fsp.sampled_calibration` on FSPV's default options."""
    server = SimpleNamespace(sampled_first_step=algorithm.sampled_first_step)
    fspv = sync_options("fsp")
    assert sampled_calibration(fspv, server) == takes
    assert not sampled_calibration({**fspv, "migration": {"mode": "sync"}}, server)


def test_kmeans_reaches_bspvs_optimum_sooner():
    """On shuffled blobs FSPV with the sampled first step settles where BSPV does (the same
    optimum, to 1e-9) and reaches BSPV's third θ's objective sooner on the simulated clock:
    its first θ comes after an eighth of a pass, and the sampled first pass's next steps
    after an eighth and a quarter more (every worker its own instance and stratum, as in a
    real run).  (Before: both ran the same whole passes; then 24.7 ms against 32.4 ms with
    whole passes after the first eighth.)"""
    traces: dict[str, list[tuple[float, float]]] = {}
    for model, options in (("bsp", {"batch": "auto"}), ("fsp", {})):
        x, centres0 = blobs(n=WORKERS * SHARD, k=4, d=3, seed=1)
        trace: list[tuple[float, float]] = []
        Simulation(model, options, workers=WORKERS, data=x,
                   theta0=kmeans_theta0(centres0, stratum=True),
                   algorithm=KMeans(n_clusters=4, n_init=1), cost_s=COST_S, latency_s=LATENCY_S,
                   on_barrier=lambda s, e, t=trace: t.append((e["time_s"], s.objective())),
                   stop={"max_iterations": 10}, own_algorithms=True).run()
        traces[model] = trace
    bsp, fsp = traces["bsp"], traces["fsp"]
    assert fsp[-1][1] == pytest.approx(bsp[-1][1], rel=1e-9)
    target = bsp[2][1] * (1 + 1e-12)  # the optimum: the two sums differ in the last bits
    t_bsp = next(t for t, f in bsp if f <= target)
    t_fsp = next(t for t, f in fsp if f <= target)
    # 21.2 ms against 32.4 ms (0.65); without the sampled first pass 24.7 ms (0.76) fails it
    assert t_fsp <= 0.7 * t_bsp
    print(f"K-means to BSPV's third θ: FSPV {t_fsp * 1e3:.2f} ms, BSPV {t_bsp * 1e3:.2f} ms")
