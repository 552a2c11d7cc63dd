"""K-means' Hamerly bounds (issue 23, algorithms/_kmeans_bounds.py): ``update_block`` with the
bounds switched on and off gives the labels, scores' loss and centres of the kernel without
bounds, pass for pass, and scikit-learn's Lloyd result.  No timings here:
``bench/algorithms_bench.py --vs-sklearn --only kmeans`` measures the steady pass and
``bench/kmeans_bench.py --short`` the 12-iteration job."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms import _kmeans_bounds as kb
from flegel.algorithms import kmeans as km
from flegel.algorithms.kmeans import KMeans
from flegel.block import Block

BLOCK = 4096


@pytest.fixture
def one_thread():
    """numba on one thread (the bounds serve the serial kernel, ``flegel run``'s default)."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def blocks(x: np.ndarray, state: dict) -> list[Block]:
    return [Block(x[s:s + BLOCK], None, {k: v[s:s + BLOCK] for k, v in state.items()},
                  np.zeros(len(x[s:s + BLOCK]), dtype=bool)) for s in range(0, len(x), BLOCK)]


def plain_pass(alg: KMeans, x: np.ndarray, theta: dict, labels: np.ndarray,
               scores: np.ndarray) -> dict:
    """One pass of the kernel without bounds over the same blocks, aggregated the same way."""
    ct = np.ascontiguousarray(theta["centers"].T, dtype=x.dtype)
    csq = np.einsum("ij,ij->j", ct, ct)
    agg = alg.zero_aggregator(theta)
    for s in range(0, len(x), BLOCK):
        part = alg.zero_aggregator(theta)
        part["objective"] = float(km._assign_accumulate(
            x[s:s + BLOCK], ct, csq, labels[s:s + BLOCK], scores[s:s + BLOCK], part["sums"],
            part["counts"], km._TILE))
        agg = alg.aggregate(agg, part)
    return agg


def lloyd_both(x: np.ndarray, centers: np.ndarray, passes: int,
               jump: float = 0.0) -> tuple[KMeans, dict, dict, list[tuple[float, float]]]:
    """``passes`` Lloyd iterations through ``update_block`` (bounds as the switch decides) and
    through the kernel without bounds, checked equal after each; ``jump`` adds a random shift
    of that size to every centre before each pass (centres that keep moving)."""
    rng = np.random.default_rng(1)
    alg = KMeans(len(centers), init="random", n_init=1, kernel="compiled")
    theta = {"centers": centers.copy(), "sums": np.zeros(centers.shape),
             "counts": np.zeros(len(centers)), "drift": np.zeros(1)}
    ref = {k: v.copy() for k, v in theta.items()}
    state = alg.init_state(len(x), x.shape[1])
    labels, scores = np.full(len(x), -1), np.zeros(len(x))
    switch = []
    for t in range(1, passes + 1):
        if jump:
            shift = rng.normal(0, jump, centers.shape)
            new = theta["centers"] + shift
            theta["drift"] = theta["drift"] + kb.centre_move(theta["centers"], new)
            theta["centers"] = new
            ref["centers"] = ref["centers"] + shift
        agg = alg.zero_aggregator(theta)
        for block in blocks(x, state):
            agg = alg.aggregate(agg, alg.update_block(block, theta, t))
        switch.append((float(alg._bounds.on), float(alg._bounds.stats[1])))
        ragg = plain_pass(alg, x, ref, labels, scores)
        np.testing.assert_array_equal(state["label"], labels, err_msg=f"pass {t}")
        np.testing.assert_allclose(agg["objective"], ragg["objective"], rtol=1e-9,
                                   atol=1e-9 * abs(scores).sum())
        theta = alg.update_parameter(agg, theta)
        ref = alg.update_parameter(ragg, ref)
        alg.thetas = [*getattr(alg, "thetas", []), {k: v.copy() for k, v in theta.items()}]
        np.testing.assert_array_equal(theta["centers"], ref["centers"], err_msg=f"pass {t}")
        np.testing.assert_array_equal(theta["counts"], ref["counts"])
    return alg, theta, state, switch


def blobs(n: int, d: int, k: int, noise: float, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 5, (k, d))
    x = (centres[rng.integers(0, k, n)] + rng.normal(0, noise, (n, d))).astype(dtype)
    return x, centres + rng.normal(0, 1.0, centres.shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bounds_give_the_plain_kernels_labels_and_centres(one_thread, dtype):
    x, c0 = blobs(30_000, 12, 8, 2.5, dtype)
    alg, _, state, switch = lloyd_both(x, c0, 9)
    # the switch went on (trial at pass 3) and the bounds held for most points afterwards
    assert switch[2][0] == 1.0 and switch[-1][0] == 1.0
    assert switch[-1][1] > 0.5 * len(x)
    assert (state["bound"] >= 0).all()


def test_bounds_off_when_centres_keep_moving(one_thread):
    # every centre jumps by more than most points' margins before each pass: bounds fail, the
    # switch goes off after its check and waits twice as long; labels stay the plain kernel's
    x, c0 = blobs(120_000, 6, 5, 1.0)
    alg, _, state, switch = lloyd_both(x, c0, 6, jump=6.0)
    assert [on for on, _ in switch] == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert alg._bounds.backoff == 4
    assert (state["bound"] == kb.NO_BOUND).all()  # lost while off


def test_bounds_match_sklearn_lloyd(one_thread):
    from sklearn.cluster import KMeans as SKKMeans

    x, c0 = blobs(20_000, 7, 6, 3.0)
    _, theta, state, switch = lloyd_both(x, c0, 12)
    assert any(on for on, _ in switch)
    sk = SKKMeans(6, init=c0, n_init=1, max_iter=12, tol=0.0, algorithm="lloyd").fit(x)
    # scikit-learn's labels are those of its centres, one E-step after our last one's
    np.testing.assert_allclose(theta["centers"], sk.cluster_centers_, rtol=1e-9, atol=1e-9)
    labels, _ = km.nearest(theta["centers"], x)
    np.testing.assert_array_equal(labels, sk.labels_)


def test_an_older_theta_gets_the_plain_kernels_labels(one_thread):
    # a point that migrates to a worker on an older θ (or a stale θ under ASP/SSP): its bound
    # is valid through |drift − the drift it was set at|, backwards too
    x, c0 = blobs(30_000, 5, 6, 2.5)
    alg, _, state, _ = lloyd_both(x, c0, 8)
    assert (state["bound"] >= 0).mean() > 0.5
    old = alg.thetas[1]
    labels, scores = state["label"].copy(), state["score"].copy()
    agg = alg.zero_aggregator(old)
    for block in blocks(x, state):
        agg = alg.aggregate(agg, alg.update_block(block, old, 9))
    ragg = plain_pass(alg, x, old, labels, scores)
    np.testing.assert_array_equal(state["label"], labels)
    np.testing.assert_array_equal(agg["counts"], ragg["counts"])
    np.testing.assert_allclose(agg["sums"], ragg["sums"], rtol=0, atol=1e-9)


def test_threads_or_array_kernel_drop_the_bounds(one_thread):
    x, c0 = blobs(5000, 4, 3, 1.0)
    alg, theta, state, _ = lloyd_both(x, c0, 5)
    assert (state["bound"] >= 0).any()
    alg.kernel = "array"
    alg._set_device("cpu", "array")
    for block in blocks(x, state):
        alg.update_block(block, theta, 6)
    assert (state["bound"] == kb.NO_BOUND).all()


def test_switch_rule():
    s = kb.BoundSwitch()
    assert [s.setting(t) for t in (1, 1, 2)] == [False, False, False]
    assert s.setting(3)  # trial
    assert s.setting(4)  # nothing checked in the trial: stays on
    s.stats[:] = (kb.BoundSwitch.MIN_CHECKED, kb.BoundSwitch.MIN_CHECKED)
    assert s.setting(4)
    s.stats[:] = (kb.BoundSwitch.MIN_CHECKED, 0.4 * kb.BoundSwitch.MIN_CHECKED)
    assert not s.setting(4)  # within the iteration: off
    assert s.backoff == 4
    assert [s.setting(t) for t in range(5, 9)] == [False, False, False, True]


def test_tolerance_covers_the_products_rounding():
    assert kb.bound_tolerance(np.dtype(np.float32), 28) > 28 * np.finfo(np.float32).eps
    assert kb.bound_tolerance(np.dtype(np.float64), 28) < 1e-10
