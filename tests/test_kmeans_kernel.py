"""K-means kernels (issue 14 item 5): the numba kernel ``_assign_accumulate`` against a NumPy
reference, its parallel form (``runtime.threads`` > 1) against the serial one bit for bit, and
``nearest``.  No timings here: bench/kmeans_bench.py measures them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flegel.algorithms import kmeans as km
from flegel.algorithms.kmeans import KMeans
from flegel.block import Block


def reference_pass(x: np.ndarray, centers: np.ndarray, labels: np.ndarray,
                   scores: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """One pass as the kernel defines it, in NumPy: the first nearest centre, the score
    ``‖c‖² − 2x·c`` (float64), the loss change and the signed sums/counts of the moves.
    Updates ``labels``/``scores`` in place."""
    ct = np.ascontiguousarray(centers.T, dtype=x.dtype)
    csq = np.einsum("ij,ij->j", ct, ct).astype(np.float64)
    v = csq - 2.0 * (x @ ct).astype(np.float64)
    best = v.argmin(axis=1)  # the first index among ties, as scikit-learn
    bestv = v[np.arange(len(x)), best]
    x64 = x.astype(np.float64)
    first = labels < 0
    dobj = float(np.sum((x64[first] ** 2).sum(axis=1) + bestv[first])
                 + np.sum(bestv[~first] - scores[~first]))
    k, d = centers.shape
    sums, counts = np.zeros((k, d)), np.zeros(k)
    moved = labels != best
    np.add.at(sums, best[moved], x64[moved])
    np.add.at(counts, best[moved], 1.0)
    left = moved & ~first
    np.subtract.at(sums, labels[left], x64[left])
    np.subtract.at(counts, labels[left], 1.0)
    labels[:] = best
    scores[:] = bestv
    return dobj, sums, counts


def kernel_pass(x: np.ndarray, centers: np.ndarray, labels: np.ndarray, scores: np.ndarray,
                tile: int = km._TILE,
                kernel: Any = km._assign_accumulate) -> tuple[float, np.ndarray, np.ndarray]:
    """One pass of ``kernel`` (the numba one by default) as ``update_block`` calls it."""
    ct = np.ascontiguousarray(centers.T, dtype=x.dtype)
    csq = np.einsum("ij,ij->j", ct, ct)
    k, d = centers.shape
    sums, counts = np.zeros((k, d)), np.zeros(k)
    dobj = kernel(x, ct, csq, labels, scores, sums, counts, tile)
    return float(dobj), sums, counts


@pytest.fixture
def numba_threads():
    """Set numba's thread count for a test; restored after."""
    import numba

    before = numba.get_num_threads()

    def set_threads(n: int) -> None:
        if n > numba.config.NUMBA_NUM_THREADS:
            pytest.skip(f"numba has {numba.config.NUMBA_NUM_THREADS} thread(s) (NUMBA_NUM_THREADS)")
        numba.set_num_threads(n)

    yield set_threads
    numba.set_num_threads(before)


@pytest.mark.parametrize("n,d,k,dtype,tile", [
    (5000, 28, 16, np.float64, 2048),   # several tiles, the last one short
    (3000, 5, 3, np.float64, 1000),     # tiles of another size
    (2500, 12, 7, np.float32, 2048),    # float32 data: scores still float64
    (1, 3, 2, np.float64, 2048),
    (0, 3, 2, np.float64, 2048),
])
def test_kernel_matches_reference(numba_threads, n, d, k, dtype, tile):
    numba_threads(1)
    rng = np.random.default_rng(n + d + k)
    x = rng.normal(size=(n, d)).astype(dtype)
    first = rng.normal(size=(k, d))
    second = first + 0.3 * rng.normal(size=(k, d))  # some points move on the second pass
    ref_labels, ref_scores = np.full(n, -1), np.zeros(n)
    labels, scores = np.full(n, -1), np.zeros(n)
    for centers in (first, second):
        want = reference_pass(x, centers, ref_labels, ref_scores)
        got = kernel_pass(x, centers, labels, scores, tile)
        np.testing.assert_array_equal(labels, ref_labels)
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-6 if dtype == np.float32 else 1e-12,
                                   atol=1e-9)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(got[2], want[2])


def test_ties_go_to_the_first_centre(numba_threads):
    """Duplicate centres: every point takes the lowest index among equals, as scikit-learn's
    Lloyd does, whether it is new or was elsewhere."""
    numba_threads(1)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3000, 4))
    centers = np.repeat(x[:4], 3, axis=0)  # centres 3i, 3i+1, 3i+2 are equal
    labels, scores = np.full(len(x), -1), np.zeros(len(x))
    kernel_pass(x, centers, labels, scores)
    assert set(np.unique(labels)) <= {0, 3, 6, 9}
    labels[:] = rng.integers(0, 12, len(x))  # revisited points that sat on a twin
    kernel_pass(x, centers, labels, scores)
    assert set(np.unique(labels)) <= {0, 3, 6, 9}


def array_pass(x: np.ndarray, centers: np.ndarray, labels: np.ndarray, scores: np.ndarray,
               tile: int = km._ARRAY_TILE) -> tuple[float, np.ndarray, np.ndarray]:
    """One pass of the NumPy array kernel."""
    return kernel_pass(x, centers, labels, scores, tile,
                       lambda *a: km._assign_accumulate_array(np, *a))


@pytest.mark.parametrize("k", [16, 10, 7, 3, 200])  # 8-, 2-, 1-byte words; 200: no check
def test_array_kernel_takes_the_argmin_on_revisits(k):
    """The array kernel's revisits take a point's centre only where another may score as
    low (``_kept_centres``): the result is still the argmin's, ties to the first centre."""
    rng = np.random.default_rng(k)
    x = rng.normal(size=(5000, 6))
    first = rng.normal(size=(k, 6))
    ref_labels, ref_scores = np.full(len(x), -1), np.zeros(len(x))
    labels, scores = np.full(len(x), -1), np.zeros(len(x))
    for centers in (first, first + 0.05 * rng.normal(size=(k, 6)), first):
        want = reference_pass(x, centers, ref_labels, ref_scores)
        got = array_pass(x, centers, labels, scores, tile=2048)
        np.testing.assert_array_equal(labels, ref_labels)
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(got[2], want[2])
    # twins: revisited points sitting on the later of two equal centres move to the first
    twins = np.repeat(x[:8], 2, axis=0)[:k] if k <= 16 else rng.normal(size=(k, 6))
    labels[:] = np.minimum(rng.integers(0, k, len(x)) | 1, k - 1)
    ref_labels[:] = labels
    want = reference_pass(x, twins, ref_labels, ref_scores)
    array_pass(x, twins, labels, scores)
    np.testing.assert_array_equal(labels, ref_labels)
    if k <= 16:
        assert (labels % 2 == 0).all()


def test_two_threads_give_one_threads_results_bit_for_bit(numba_threads):
    """The parallel kernel sums each tile apart and adds the tiles in order: the serial
    kernel's order, so the thread count changes no bit of the labels, scores, sums, counts or
    loss change."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(9000, 28))
    passes = [rng.normal(size=(16, 28)) for _ in range(3)]
    results = {}
    for threads in (1, 2):
        numba_threads(threads)
        labels, scores = np.full(len(x), -1), np.zeros(len(x))
        out = []
        for centers in passes:
            dobj, sums, counts = kernel_pass(x, centers, labels, scores, tile=1000)
            out.append((dobj, sums, counts, labels.copy(), scores.copy()))
        results[threads] = out
    assert km._assign_accumulate._parallel is not None  # the two-thread calls went there
    for one, two in zip(results[1], results[2]):
        assert one[0] == two[0]
        for a, b in zip(one[1:], two[1:]):
            np.testing.assert_array_equal(a, b)


def test_update_block_the_same_with_two_threads(numba_threads):
    """Through the algorithm: ``update_block`` on a block of several tiles."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3 * km._TILE + 17, 6))
    algo = KMeans(n_clusters=5, kernel="compiled")  # numba, not the array kernel
    theta = {"centers": rng.normal(size=(5, 6)), "sums": np.zeros((5, 6)),
             "counts": np.zeros(5)}
    aggs = []
    for threads in (1, 2):
        numba_threads(threads)
        block = Block.from_arrays(x, None, algo.init_state(len(x), 6))
        aggs.append((algo.update_block(block, theta, 1), block.state["label"].copy()))
    (one, labels_one), (two, labels_two) = aggs
    np.testing.assert_array_equal(labels_one, labels_two)
    assert one["objective"] == two["objective"]
    np.testing.assert_array_equal(one["sums"], two["sums"])
    np.testing.assert_array_equal(one["counts"], two["counts"])
    assert one["counts"].sum() == len(x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_nearest_matches_full_distances(dtype):
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(5000, 9)) * 10).astype(dtype)
    centers = rng.normal(size=(6, 9)) * 10
    labels, d2 = km.nearest(centers, x)
    full = ((x.astype(np.float64)[:, None, :] - centers[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(labels, full.argmin(axis=1))
    rtol = 1e-5 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(d2, full.min(axis=1), rtol=rtol, atol=1e-6 * full.max())
    assert d2.dtype == np.float64 and labels.dtype == np.int64
    assert (d2 >= 0).all()
    empty = km.nearest(centers, x[:0])
    assert empty[0].shape == (0,) and empty[1].shape == (0,)


def test_parallel_kernel_used_when_the_dispatcher_was_asked_for_first(numba_threads):
    """A worker asks for the dispatcher before any call (``DeviceKernels.load_compiled``): its
    calls with two threads still go to the parallel kernel."""
    numba_threads(2)
    kernel = km._Threaded(km.njit(**km._assign_accumulate.options)(km._assign_accumulate.py_func),
                          km._assign_tiles)
    kernel.dispatcher()
    rng = np.random.default_rng(8)
    x = rng.normal(size=(5000, 3))
    ct = np.ascontiguousarray(x[:4].T)
    labels, scores = np.full(len(x), -1), np.zeros(len(x))
    kernel(x, ct, (ct ** 2).sum(0), labels, scores, np.zeros((4, 3)), np.zeros(4), 1000)
    assert kernel._parallel is not None
    assert np.bincount(labels, minlength=4).sum() == len(x)
