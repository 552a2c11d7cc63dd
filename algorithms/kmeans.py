"""K-means as incremental EM (FSP paper Section 2.2), written only against flegel's public API.

Each point keeps its last cluster and its last score (squared distance minus ‖x‖²) as state.
A delta holds the signed changes of the per-cluster sums S and counts C caused by points that
moved (Eq. 3), so the master's statistics stay exact whatever points an iteration processed:
``S_j -= x, S_j' += x, C_j -= 1, C_j' += 1`` and the M-step sets ``μ_j = S_j / C_j``.  Under
full-batch BSP this is exactly Lloyd's algorithm.

Kernels (:mod:`flegel.device`): the compiled one takes distances through one BLAS product per
tile, ``‖x‖² − 2x·c + ‖c‖²``, then one numba pass that takes the argmin, the loss and
accumulates the signed changes of only the points whose cluster changed; on one thread, once
a worker's centres settle, Hamerly's bound spares most points the product
(:mod:`algorithms._kmeans_bounds`, same labels).  The array kernel
does the same math in whole-array operations on ``xp`` (NumPy, or CuPy with ``device:
gpu``): the moved points' changes are one (K × m) signed one-hot matrix times their features.
With ``kernel: auto`` a job whose whole work (``max_iterations`` passes over the shard) pays
numba's start-up runs numba from its first block, loaded before training; a shorter one starts
on the array kernel and switches to numba once its work would have paid numba's start-up
(:mod:`flegel.device`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flegel import Algorithm, Block, DataInfo, PointState
from flegel.device import DeviceKernels, to_host
from flegel.jit import LazyKernel, make_dispatcher, njit
from flegel.validation import Integer

# the module, not its kernel: the bounded kernel stays in its module's namespace
from . import _kmeans_bounds as hamerly
from ._common import (
    DEVICE_PARAMS,
    InitSpec,
    expect_shape,
    kmeans_plusplus_sample,
    load_init_arrays,
    resolve_init_path,
    set_params,
    squared_distances,
    validate_init_file,
)
from ._stratum import (
    BALANCED,
    MIN_POINTS,
    OneStratumPerWorker,
    Stratum,
    class_sums,
    load_class_sums,
    skew,
)

_INITS = ("kmeans++", "random")


#: Points per GEMM tile: the (tile x K) distance block stays in L1/L2 cache.
_TILE = 2048
#: Points per tile of the NumPy array kernel (fastest of 1,024-16,384 on 1M x 28, K = 16).
_ARRAY_TILE = 4096
#: Points per tile on a GPU: a whole block at once (each kernel launch costs microseconds).
_GPU_TILE = 1 << 20


#: ``numba.prange`` in :func:`_assign_tiles`, bound when that kernel is compiled (importing
#: numba here would cost every process that imports this module, flegel/jit.py).
prange = range


def _assign_tiles(x: np.ndarray, ct: np.ndarray, csq: np.ndarray, labels: np.ndarray,
                  scores: np.ndarray, sums: np.ndarray, counts: np.ndarray,
                  tile: int) -> float:  # pragma: no cover
    """:func:`_assign_accumulate` with the tiles shared among numba's threads (``prange``).

    Each tile goes through the serial kernel (``_tile_kernel``, bound at compile time) into its
    own partial sums, counts and loss change, which are then added in tile order: what the
    serial kernel adds, in its order.  One tile or less: the serial kernel, no threads.
    """
    n, d = x.shape
    k = ct.shape[1]
    tile = max(1, tile)
    ntiles = (n + tile - 1) // tile
    if ntiles <= 1:
        return _tile_kernel(x, ct, csq, labels, scores, sums, counts, tile)
    psums = np.empty((ntiles, k, d))
    pcounts = np.empty((ntiles, k))
    pobj = np.empty(ntiles)
    for b in prange(ntiles):
        start = b * tile
        stop = min(n, start + tile)
        ps = psums[b]
        pc = pcounts[b]
        for j in range(k):
            pc[j] = 0.0
            for f in range(d):
                ps[j, f] = 0.0
        pobj[b] = _tile_kernel(x[start:stop], ct, csq, labels[start:stop], scores[start:stop],
                               ps, pc, tile)
    total = 0.0
    for b in range(ntiles):
        total += pobj[b]
        for j in range(k):
            counts[j] += pcounts[b, j]
            for f in range(d):
                sums[j, f] += psums[b, j, f]
    return total


class _Threaded(LazyKernel):
    """A serial kernel whose calls go to a parallel one while numba runs more than one thread
    (``runtime.threads``).

    The parallel kernel (Python source ``parallel``) calls the serial one per tile, as
    ``_tile_kernel``, in a ``prange`` loop: both names are bound in this module just before
    numba compiles it, at the first call with more than one thread (with ``kernel: compiled``,
    a worker's warm-up, before the training clock).  It is compiled only then: a run with one
    thread never compiles it.  Its compile, like any numba compile, is what
    :func:`flegel.jit.without_compiling` refuses on workers 2..n (numba's compile event, for
    the exact argument types: a cache holding only the serial kernel, or only the float64
    one, is a miss).  Each block forks and joins the threads: on cores shared with other work
    a preempted thread holds up every block.
    """

    def __init__(self, serial: LazyKernel, parallel: Callable[..., float]) -> None:
        super().__init__(serial.py_func, serial.options)
        self.parallel_py = parallel
        self._parallel: Callable[..., float] | None = None
        self._threads: Callable[[], int] | None = None

    def parallel_dispatcher(self) -> Callable[..., float]:
        """The parallel kernel's numba dispatcher (compiled at its first call)."""
        if self._parallel is None:
            import numba

            globals().update(prange=numba.prange, _tile_kernel=self.dispatcher())
            self._parallel = make_dispatcher(self.parallel_py,
                                             {"cache": True, "nogil": True, "parallel": True})
        return self._parallel

    def dispatcher(self) -> Callable[..., float]:
        """The serial kernel's numba dispatcher (numba is imported here, the first time)."""
        if self._compiled is None:
            compiled = super().dispatcher()
            import numba

            # numba's thread count, asked per call (it may change) unless its pool has one
            # thread (``flegel run``'s default): then numba's threading layer never starts.
            pool = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
            self._threads = numba.get_num_threads if pool > 1 else None
            return compiled
        return self._compiled

    def __call__(self, *args: object) -> float:
        compiled = self._compiled
        if compiled is None:
            compiled = self.dispatcher()
        if self._threads is not None and self._threads() > 1:
            return self.parallel_dispatcher()(*args)
        return compiled(*args)

    def serial(self) -> bool:
        """Whether calls now go to the serial kernel (numba runs one thread)."""
        self.dispatcher()
        return self._threads is None or self._threads() <= 1


def _threaded(parallel: Callable[..., float]) -> Callable[[Callable[..., float]], _Threaded]:
    """Decorator: a numba kernel (cached, fastmath) as the serial one of :class:`_Threaded`."""
    def decorate(fn: Callable[..., float]) -> _Threaded:
        return _Threaded(njit(cache=True, nogil=True, fastmath=True)(fn), parallel)

    return decorate


@_threaded(_assign_tiles)
def _assign_accumulate(x: np.ndarray, ct: np.ndarray, csq: np.ndarray, labels: np.ndarray,
                       scores: np.ndarray, sums: np.ndarray, counts: np.ndarray,
                       tile: int) -> float:  # pragma: no cover
    """Assign each point to its nearest centre and accumulate the moves; return the change
    of the summed loss.

    Per tile of ``tile`` points: one BLAS product ``g = x @ (−2 centers.T)`` (the tile x K
    block stays in cache), then the argmin of ``‖c‖² − 2x·c`` fused with the accumulation.  A
    revisited point whose old centre no other centre matches or beats keeps it without the
    argmin (the same result, ties to the first centre; 0.90x the CPU time of the argmin for
    every point on a steady 1M x 28, K = 16 pass).  Only
    points whose cluster changed touch the sums and counts, so late iterations cost little
    beyond the GEMM.  Running the tile loop inside numba avoids a Python-level BLAS call per
    tile.  A tile's moves go to partial sums added to ``sums``/``counts`` after the tile (the
    order :func:`_assign_tiles` keeps with several threads).

    A point's loss is ‖x‖² + s with score s = min_j (‖c_j‖² − 2x·c_j).  ‖x‖² never changes,
    so the state keeps s and the loss change of a revisited point is the change of s; ‖x‖²
    is computed only on a point's first visit.  Scaling the centres by −2 is exact, so the
    scores are those of ``‖c‖² − 2(x·c)``.
    """
    n, d = x.shape
    k = ct.shape[1]
    tile = max(1, min(tile, n))
    ctm2 = np.empty_like(ct)
    for f in range(d):
        for j in range(k):
            ctm2[f, j] = -2.0 * ct[f, j]
    g = np.empty((tile, k), dtype=x.dtype)
    psum = np.empty((k, d))
    pcount = np.empty(k)
    total = 0.0
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        gs = g[:stop - start]
        np.dot(x[start:stop], ctm2, gs)
        psum[:] = 0.0
        pcount[:] = 0.0
        dobj = 0.0
        for r in range(stop - start):
            i = start + r
            old = labels[i]
            full = True
            if old >= 0:
                # a revisit keeps its centre unless another scores at most as low: a count
                # the compiler vectorizes, where the argmin below is a branch per centre
                bestv = np.float64(csq[old]) + np.float64(gs[r, old])
                at_most = 0
                for j in range(k):
                    at_most += np.float64(csq[j]) + np.float64(gs[r, j]) <= bestv
                if at_most <= 1:  # the old centre alone
                    best = old
                    full = False
            if full:
                bestv = np.inf
                best = 0
                for j in range(k):
                    v = np.float64(csq[j]) + np.float64(gs[r, j])  # float64 for float32 data
                    if v < bestv:
                        bestv = v
                        best = j
            if old < 0:
                xsq = 0.0
                for f in range(d):
                    xsq += x[i, f] * x[i, f]
                dobj += xsq + bestv
            else:
                dobj += bestv - scores[i]
            scores[i] = bestv
            if old != best:
                for f in range(d):
                    psum[best, f] += x[i, f]
                pcount[best] += 1.0
                if old >= 0:
                    for f in range(d):
                        psum[old, f] -= x[i, f]
                    pcount[old] -= 1.0
                labels[i] = best
        total += dobj
        for j in range(k):
            counts[j] += pcount[j]
            for f in range(d):
                sums[j, f] += psum[j, f]
    return total


#: The serial kernel as :func:`_assign_tiles` calls it: its Python source until numba compiles
#: that kernel (then its dispatcher, :meth:`_Threaded.parallel_dispatcher`).
_tile_kernel: Callable[..., float] = _assign_accumulate.py_func


def _assign_accumulate_array(xp: Any, x: Any, ct: Any, csq: Any, labels: Any, scores: Any,
                             sums: Any, counts: Any, tile: int) -> float:
    """The array kernel: :func:`_assign_accumulate` in whole-array operations on ``xp``.

    Same arguments and result (``labels``, ``scores``, ``sums`` and ``counts`` are updated in
    place; they and the inputs live on ``xp``'s device).  Per tile, as scikit-learn's Lloyd
    iteration: one product for the scores into a buffer reused across tiles (the centres
    scaled by −2 once per call), ``‖c‖²`` added over the flat buffer (a broadcast over rows of
    K columns costs twice as much in NumPy), the nearest centre, then the changes of the points
    whose cluster changed as one signed one-hot matrix times their features -- over the whole
    tile when most points moved (a first visit), else over the moved points only.

    The nearest centre: NumPy's argmin over K = 16 columns runs once per row (11-15 ms of a
    1M-point pass, as much as half the product), so on the CPU a tile whose points all have a
    centre takes it only where it may have changed (:func:`_kept_centres`); a first visit
    and a GPU (one argmin kernel a tile) take the argmin of every row.  The result is the
    argmin's either way (ties to the first centre, as the compiled kernel).

    Against the numba kernel on 1M x 28, K = 16, both on one thread (``python
    bench/kmeans_bench.py --kernels``): 2.1-2.6x on a steady pass with the argmin of every
    row, 1.6-2.1x with the check, in the same runs (CPU time at load 9-13; the product alone
    is about 0.9x numba's whole pass); a first visit 2.3-3.8x either way.  numba's kernel then
    took the same check (0.90x its time): 1.85-2.02x of that.
    """
    n, k = x.shape[0], ct.shape[1]
    if n == 0:
        return 0.0
    ctm2 = ct * -2.0
    m0 = min(tile, n)
    g_buf = xp.empty((m0, k), dtype=xp.result_type(x.dtype, ct.dtype))
    flat = m0 * k <= 1 << 18  # a tiled copy of ‖c‖² of at most 2 MiB
    csq_flat = xp.tile(csq, m0) if flat else None
    offsets = xp.arange(m0) * k
    ks = xp.arange(k)[:, None]
    check = xp is np and _word_view(k) is not None
    dobj = 0.0
    for start in range(0, n, tile):
        xs = x[start:start + tile]
        m = len(xs)
        g = g_buf[:m]
        xp.matmul(xs, ctm2, out=g)
        gf = g.reshape(-1)
        if csq_flat is not None:
            xp.add(gf, csq_flat[:m * k], out=gf)
        else:
            g += csq
        old = labels[start:start + m]
        sc = scores[start:start + m]
        first = old < 0
        n_first = int(xp.count_nonzero(first))
        best: Any = None
        moved: Any = None
        if check and not n_first:
            bestv, moved, to = _kept_centres(g, old, offsets[:m])
            n_moved = len(moved)
        else:
            best = g.argmin(axis=1)
            bestv = gf[offsets[:m] + best]
            n_moved = int(xp.count_nonzero(old != best))
        if n_first:
            # a first visit's loss is ‖x‖² + s: counting −‖x‖² as its previous score adds it
            if n_first == m:
                sc[...] = -xp.einsum("ij,ij->i", xs, xs)
            else:
                xf = xs[first]
                sc[first] = -xp.einsum("ij,ij->i", xf, xf)
        dobj += float((bestv - sc).sum())
        sc[...] = bestv
        if not n_moved:
            continue
        if best is None:  # the moved rows' new centres only
            best = old.copy()
            best[moved] = to
        if 4 * n_moved >= m:  # most moved: the whole tile (an unmoved point adds +1 − 1 = 0)
            onehot = (best[None, :] == ks).astype(sums.dtype)
            if n_first < m:
                onehot -= old[None, :] == ks
            sums += onehot @ xs
        else:
            if moved is None:
                moved = xp.flatnonzero(old != best)
            onehot = (best[moved][None, :] == ks).astype(sums.dtype)
            onehot -= old[moved][None, :] == ks
            sums += onehot @ xs[moved]
        counts += onehot.sum(axis=1)
        old[...] = best
    return dobj


def _word_view(k: int) -> tuple[np.dtype, int] | None:
    """The unsigned integer type that a row of K booleans reads as a whole number of, and
    how many of them (at most 16; None past that: the check would cost what the argmin
    does)."""
    for size in (8, 4, 2, 1):
        if k % size == 0:
            words = k // size
            return (np.dtype(f"u{size}"), words) if words <= 16 else None
    return None  # pragma: no cover - size 1 divides every k


def _kept_centres(g: np.ndarray, old: np.ndarray,
                  offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nearest centre of each row of ``g`` (m x K scores) for points that all have a
    centre (``old``), as the argmin takes it (ties to the first centre): each row's best
    score, the rows whose centre changed and their new centres.

    A point keeps its centre when no other centre scores at most as low: one comparison of
    the flat scores with each row's old score repeated K times, the old centre's own entry
    cleared, and each row's K booleans read as a few machine words (:func:`_word_view`), so
    that "any" is an OR of whole words, not a reduction per row.  The rows where some other
    centre scores as low or lower -- the points that moved, and ties -- take the argmin.
    """
    m, k = g.shape
    gf = g.reshape(-1)
    at = offsets + old
    bestv = gf[at]
    le = gf <= np.repeat(bestv, k)
    le[at] = False
    view = _word_view(k)
    assert view is not None
    dtype, words = view
    w = le.view(dtype)
    other = w if words == 1 else np.bitwise_or(w[0::words], w[1::words])
    for i in range(2, words):
        other |= w[i::words]
    rows = np.flatnonzero(other)
    if not len(rows):
        return bestv, rows, rows
    sub = g[rows]
    pick = sub.argmin(axis=1)
    bestv[rows] = sub[np.arange(len(rows)), pick]
    changed = pick != old[rows]
    return bestv, rows[changed], pick[changed]


def nearest(centers: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid of each row of ``x`` and its squared distance (clipped at 0).

    Tiles of ``_TILE`` rows, so the (tile x K) distance block stays in cache: one BLAS product
    ``‖c‖² − 2x·c`` per tile, as in the training kernel.
    """
    x = np.asarray(x)
    ct = np.ascontiguousarray(centers.T, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
    csq = np.einsum("ij,ij->j", ct, ct)
    labels = np.empty(len(x), dtype=np.int64)
    d2 = np.empty(len(x))
    for s in range(0, len(x), _TILE):
        xs = x[s:s + _TILE]
        score = csq[None, :] - 2.0 * (xs @ ct)
        labels[s:s + _TILE] = score.argmin(axis=1)
        best = score[np.arange(len(xs)), labels[s:s + _TILE]]
        d2[s:s + _TILE] = np.maximum(np.einsum("ij,ij->i", xs, xs) + best, 0.0)
    return labels, d2


def lloyd(x: np.ndarray, centers: np.ndarray, max_iter: int = 100,
          tol: float = 1e-4) -> tuple[np.ndarray, float]:
    """Lloyd's algorithm on an in-memory ``x`` (the data sample) from ``centers``.

    Used to rank restarts (``n_init``); stops when the inertia improves by less than ``tol``
    (relative).  Returns the centres and their inertia on ``x``.
    """
    centers = np.array(centers, dtype=np.float64)
    k = len(centers)
    prev = np.inf
    for _ in range(max_iter):
        labels, d2 = nearest(centers, x)
        f = float(d2.sum())
        if prev - f <= tol * f:
            return centers, f
        prev = f
        counts = np.bincount(labels, minlength=k).astype(np.float64)
        sums = (labels[None, :] == np.arange(k)[:, None]).astype(np.float64) @ x  # one GEMM
        nonempty = counts > 0
        centers[nonempty] = sums[nonempty] / counts[nonempty, None]
    return centers, float(nearest(centers, x)[1].sum())


#: FSPV's sampled first step (issue 19, i20k review): every worker's sample holds at least
#: this many points per cluster.  A choice: Lloyd's step moves a centre to the mean of its
#: points, whose error is σ/√n; at 50 points a centre's sampling error is a seventh of the
#: cluster's spread, and with K near the sample's size (1,000 points a worker otherwise) a
#: cluster held 0-2 points and its centre jumped to one of them, a step back from a
#: k-means++ start refined by Lloyd on the init sample.
SAMPLE_POINTS_PER_CLUSTER = 50


#: Most rows of a shard's sample the master re-labels at each M-step (KMeans._resampled): a
#: seeded uniform subsample of a larger one.  The master's M-step pays about 0.33 ms per shard
#: on at 2,500 rows (docs/sync/fsp.md, "A sleeping straggler: the master's sample"), and a
#: job's ``runtime.sample_size`` of 100,000 would have made that ~13 ms a barrier; 2,500 rows
#: hold ~+0.04 % of sampling error on ``flegel paper``'s K-means (target +0.1 %).
MASTER_SAMPLE_ROWS = 2_500

#: θ's keys of the stratified M-step (KMeans.stratify): all of them, or none is used.
_STRATUM_KEYS = ("stratum_sums", "stratum_counts", "stratum_active")
#: θ's keys of the master's sample (KMeans._set_samples) that the M-step keeps as they are.
_FIXED_SAMPLE_KEYS = ("stratum_rows", "stratum_balanced")
#: ... and all of them: the weights of the shards on, then the fixed ones.
_SAMPLE_KEYS = ("stratum_shards", *_FIXED_SAMPLE_KEYS)


def _balanced(samples: list[np.ndarray], centers: np.ndarray) -> bool:
    """The skew test at θ⁰ on the master's samples (algorithms._stratum, "The skew test at
    θ⁰"): whether every shard's sample, labelled at ``centers``, has class shares within
    :data:`~algorithms._stratum.BALANCED` of all the samples' -- shuffled shards, whose sampled
    calibration then keeps exact sums (``Stratum.calibrated_exact``).  All or none: the
    calibration's exact sums weigh a shard by its trained points, the master's sample by its
    n, so one sorted shard among them keeps every shard on the master's sample, as before.
    False where a shard's sample is under MIN_POINTS rows (no test: its worker's n/m · F),
    and where the samples use fewer than 2 classes (centres that label everything one class,
    duplicates in a file, tell no shard apart: every one would read balanced)."""
    if any(len(p) < MIN_POINTS for p in samples):
        return False
    k = len(centers)
    counts = [np.bincount(nearest(centers, p)[0], minlength=k) for p in samples]
    total = np.sum(counts, axis=0)
    if np.count_nonzero(total) < 2:
        return False
    return all(skew(c, total) <= BALANCED for c in counts)


def _stratified(theta: dict[str, np.ndarray]) -> bool:
    """Whether θ carries the stratified M-step's statistics (init_parameter's θ; a θ made by
    hand with only some of the keys takes none of them)."""
    return all(k in theta for k in _STRATUM_KEYS)


class KMeans(OneStratumPerWorker, DeviceKernels, Algorithm):
    """K-means clustering by incremental EM.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters K.
    init : {"kmeans++", "random"} or path, default="kmeans++"
        ``kmeans++``: greedy k-means++ as scikit-learn seeds (``2 + log K`` candidates per
        step) on the seeded data sample; ``random`` picks K sample points; or a warm start: a run
        directory of a K-means run, its ``model.npz``, or a ``.npy`` file (K, d) of initial
        centroids (relative to the job file's folder).
    n_init : int, default=10
        Restarts: with n_init > 1, that many seedings (seeds ``seed``, ``seed + 1``, ...) are
        each refined by Lloyd's algorithm on the data sample (``runtime.sample_size`` rows,
        10,000 by default) and the one with the lowest inertia on the sample starts training.
        Cheap (the sample, not the data) and it avoids most local optima that one seeding
        falls into.  Ignored for a warm start.
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the training kernel runs: NumPy/numba, or CuPy on the current CUDA device
        (:mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        On the CPU: numba, the NumPy array kernel, or (``auto``) numba from the first block
        when the job's known work (``max_iterations`` passes) pays its start-up, else the
        array kernel until the work done would have, then numba (:mod:`flegel.device`).

    Notes
    -----
    The objective is the sum of squared distances to the nearest centroid, scikit-learn's
    ``inertia_``, so results compare directly.  A cluster that loses all its points keeps its
    last centroid.

    Under FSP without data migration the M-step runs on a stratified estimate of each shard
    while its first pass runs (:meth:`stratify`).  A job that stops before every worker's
    first pass is done writes ``model.npz`` with ``centers`` from that estimate (the exact
    sums plus the corrections, ``stratum_sums``/``stratum_counts``) and ``counts`` the exact
    ones: the points per cluster by their latest labels, the straggler's unvisited points in
    none (see :meth:`finalize`).  Once every first pass is done the corrections are exactly 0
    and ``centers`` are ``sums / counts``.
    """

    #: update_parameter returns new arrays: the master passes θ without a copy.
    updates_theta_in_place = False

    name = "kmeans"
    objective_name = "inertia"
    #: θ keeps the per-cluster sums of every point's latest label (Eq. 3): FSP's first M-step
    #: waits until every point has one (``Algorithm.cover_before_update``).
    cover_before_update = True
    # The parameters, as set_params stores them from PARAMS.
    n_clusters: int
    init: str
    n_init: int
    PARAMS = {**DEVICE_PARAMS, "n_clusters": Integer(lo=1), "init": InitSpec(_INITS),
              "n_init": Integer(lo=1)}

    def __init__(self, n_clusters: int = 8, init: str = "kmeans++", n_init: int = 10,
                 device: str = "cpu", kernel: str = "auto") -> None:
        super().__init__()
        # scikit-learn spells it "k-means++": accept both
        init = "kmeans++" if init == "k-means++" else init
        set_params(self, locals())
        self._set_device(device, kernel)
        self._bounds = hamerly.BoundSwitch()
        self._stratum: Stratum | None = None
        self._shared = False  # stratify was called by several workers (stratify's notes)
        #: The master's sample of each shard (init_parameter): the stratified M-step
        #: re-labels it at θ (_resampled).
        self._samples: list[np.ndarray] | None = None

    def stratify(self, n_points: int, shard: int | None = None) -> Stratum | None:
        """Take the M-step on a stratified estimate of this worker's shard (``n_points``)
        instead of its stale exact sums while its fresh labels still move
        (:mod:`algorithms._stratum`): FSP calls it on every worker without data migration
        (issue 19, Figs. 7, 9a, 9b, 15).  θ keeps the exact sums; the estimate's correction
        travels in the aggregate and θ (``stratum_sums``, ``stratum_counts``).  Returns the
        stratum, which FSP's worker policy checkpoints.

        Where the master holds each worker's share of the initialization sample (θ's
        ``stratum_shards``, from ``DataInfo.sample_sizes``) and FSP names the worker's
        ``shard`` (its index, rank - 1), the estimate is that sample re-labelled at θ at every
        M-step (:meth:`_resampled`): a straggler asleep for many barriers leaves no stale
        estimate behind (algorithms._stratum, "The master's sample").

        One per worker: None from a second call on the same instance
        (:class:`~._stratum.OneStratumPerWorker`)."""
        return self._claim_stratum(lambda: Stratum(n_points, shares="counts", shard=shard))

    def validate(self, base_dir: Path) -> None:
        self.check_device()
        validate_init_file(self.init, base_dir, _INITS, "centers", self.n_clusters, self)

    @property
    def sampled_first_step(self) -> bool:  # type: ignore[override]
        """Incremental EM (Eq. 3): θ keeps each cluster's sum and count over the points'
        latest labels, so an M-step after part of the first pass is Lloyd's step on a sample
        at θ⁰ -- mini-batch K-means' start -- and FSPV takes its first after a share of every
        shuffled shard (:func:`flegel.sync.fsp.sampled_calibration`; issue 19, Fig. 8).

        Only from a raw seeding (``n_init=1``, ``init`` random or kmeans++; not a file).
        With ``n_init > 1`` every seeding is refined by Lloyd on the init sample, so θ⁰ starts
        near a fixed point, where a step on an eighth of the data is a step back: measured
        (``python bench/em_schedules.py --algorithms kmeans --seed 1,2,3 --set init=kmeans++
        --set n_init=10``) the first step on 1/8 left θ 1e-3 above the converged objective
        against the whole pass's 3e-8, and the target came after 2 M-steps and 1.125 passes
        against 1 and 1.000 under 2 of 3 shuffles; from one kmeans++ seeding (``--set
        n_init=1``) 1.125 passes against 2.000.  A file may be a converged model: the same."""
        return self.n_init == 1 and self.init in _INITS

    @property
    def sampled_first_pass(self) -> bool:  # type: ignore[override]
        """Where the sampled first step is taken, FSPV's next M-steps of the first pass are
        sampled too (:data:`flegel.sync.fsp.SAMPLED_FIRST_PASS`): the stratum
        (:meth:`stratify`) takes each on the latest share's points, mini-batch K-means' step,
        where exact sums would mix in the points labelled at θ⁰ (docs/sync/fsp.md, "FSPV's
        sampled first pass on K-means")."""
        return self.sampled_first_step

    @property
    def sample_min_points(self) -> int:
        """Points every worker's sample must hold for FSPV's sampled first step
        (:func:`flegel.sync.fsp.sample_share`): :data:`SAMPLE_POINTS_PER_CLUSTER` per cluster."""
        return SAMPLE_POINTS_PER_CLUSTER * self.n_clusters

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        k, d = self.n_clusters, info.n_features
        path = resolve_init_path(self.init, info.base_dir, _INITS)
        if path is not None:
            arrays = load_init_arrays(path, "centers", self)
            centers = expect_shape(path, "centers", arrays["centers"], (k, d),
                                   f"kmeans with n_clusters={k} on {d} features")
        else:
            centers = self._best_seeding(np.asarray(info.sample, dtype=np.float64), info.seed)
        theta = {"centers": centers, "sums": np.zeros((k, d)), "counts": np.zeros(k),
                 "stratum_sums": np.zeros((k, d)), "stratum_counts": np.zeros(k),
                 "stratum_active": np.zeros(1), "drift": np.zeros(1)}
        self._set_samples(info, theta)
        return theta

    def _set_samples(self, info: DataInfo, theta: dict[str, np.ndarray]) -> None:
        """The master's sample of each shard (``DataInfo.sample_sizes``, in rank order) for
        the stratified M-step (:meth:`_resampled`): θ's ``stratum_shards`` (the weights of the
        shards on) and ``stratum_rows`` (each sample's rows, at most
        :data:`MASTER_SAMPLE_ROWS`; 0 where under MIN_POINTS: too few rows stand for a
        shard -- one row would put its whole weight on one cluster -- and that shard's
        stratum takes its workers' n/m · F).  Per shard: one small sample leaves the others'
        on.  No sizes (a DataInfo made elsewhere): none, every stratum takes n/m · F."""
        sizes = tuple(int(n) for n in info.sample_sizes)
        if not sizes:
            return
        if len(sizes) != info.n_workers:
            raise ValueError(f"kmeans: {len(sizes)} sample sizes for {info.n_workers} workers "
                             "(DataInfo.sample_sizes holds one per worker, or none)")
        sample = np.asarray(info.sample, dtype=np.float64)
        rng = np.random.default_rng(info.seed)
        samples = []
        for part in np.split(sample, np.cumsum(sizes)[:-1]):
            if len(part) > MASTER_SAMPLE_ROWS:  # a uniform subsample of a uniform sample
                part = part[np.sort(rng.choice(len(part), MASTER_SAMPLE_ROWS, replace=False))]
            # a copy: a view would keep the whole joined sample alive for the run
            samples.append(part.copy() if len(part) >= MIN_POINTS else part[:0].copy())
        if not any(len(p) for p in samples):
            return
        self._samples = samples
        theta["stratum_shards"] = np.zeros(info.n_workers)
        theta["stratum_rows"] = np.array([float(len(p)) for p in samples])
        # only where FSPV's sampled calibration may run (a raw seeding): the one window
        # that reads it (Stratum.calibrated_exact); a file's θ⁰ may be any model
        balanced = self.sampled_first_step and _balanced(samples, theta["centers"])
        theta["stratum_balanced"] = np.array([float(balanced)])

    def _seeding(self, sample: np.ndarray, seed: int) -> np.ndarray:
        """One seeding of ``init`` on the sample."""
        if self.init == "random":
            rng = np.random.default_rng(seed)
            if len(sample) < self.n_clusters:
                raise ValueError(f"n_clusters={self.n_clusters} exceeds the {len(sample)} "
                                 "points sampled")
            return sample[rng.choice(len(sample), self.n_clusters, replace=False)].copy()
        return kmeans_plusplus_sample(sample, self.n_clusters, seed)

    def _best_seeding(self, sample: np.ndarray, seed: int) -> np.ndarray:
        """The restarts of ``n_init``: the best of n seedings refined on the sample."""
        if self.n_init == 1:
            return self._seeding(sample, seed)
        best, best_f = None, np.inf
        for i in range(self.n_init):
            centers, f = lloyd(sample, self._seeding(sample, seed + i))
            if f < best_f:  # ties keep the earliest seed: deterministic
                best, best_f = centers, f
        assert best is not None
        return best

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        # Hamerly's bound and θ's drift when it was set (algorithms/_kmeans_bounds.py)
        return {"label": np.full(n, -1, dtype=np.int64), "score": np.zeros(n),
                "bound": np.full(n, hamerly.NO_BOUND), "bound_drift": np.zeros(n)}

    def pass_units(self, n: int, d: int) -> float:
        """Work units (:mod:`flegel.device`) of ``n`` points: n·d·K, the product's
        multiply-adds."""
        return float(n * d * self.n_clusters)

    def load_compiled(self, n_features: int, dtype: np.dtype) -> None:
        """Load (or compile) the numba kernel for ``dtype`` data: one call on a few zeros with
        the argument types of :meth:`update_block` (numba loads machine code per type)."""
        dtype = np.dtype(dtype) if np.dtype(dtype).kind == "f" else np.dtype(np.float64)
        k = self.n_clusters
        args = (np.zeros((8, n_features), dtype), np.zeros((n_features, k), dtype),
                np.zeros(k, dtype), np.full(8, -1, dtype=np.int64), np.zeros(8))
        acc = (np.zeros((k, n_features)), np.zeros(k), _TILE)
        _assign_accumulate(*args, *acc)
        load_class_sums(n_features, dtype)  # the stratum's sample (KMeans.stratify)
        if _assign_accumulate.serial():  # one thread: the kernel with bounds too
            hamerly.assign_bounded(*args, np.full(8, hamerly.NO_BOUND), np.zeros(8), *acc, 0.0,
                                   False, 0.0, np.zeros(2))

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        agg = {"sums": np.zeros_like(theta["sums"]), "counts": np.zeros_like(theta["counts"]),
               "objective": 0.0}
        if _stratified(theta):  # θ made by init_parameter (not by hand)
            agg["stratum_sums"] = np.zeros_like(theta["sums"])
            agg["stratum_counts"] = np.zeros_like(theta["counts"])
            agg["stratum_active"] = np.zeros(1)
            if "stratum_shards" in theta:
                agg["stratum_shards"] = np.zeros_like(theta["stratum_shards"])
        return agg

    def update_data_point(self, point: np.ndarray, state: PointState,
                          theta: dict[str, np.ndarray], t: int) -> dict:
        c = theta["centers"]
        dist = ((c - point) ** 2).sum(axis=1)
        best = int(np.argmin(dist))
        agg = self.zero_aggregator(theta)
        old = int(state["label"])
        if old != best:
            agg["sums"][best] += point
            agg["counts"][best] += 1
            if old >= 0:
                agg["sums"][old] -= point
                agg["counts"][old] -= 1
            state["label"] = best
        state["bound"] = hamerly.NO_BOUND
        score = float(dist[best] - point @ point)
        agg["objective"] = float(dist[best]) if old < 0 else score - float(state["score"])
        state["score"] = score
        return agg

    def update_block(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        stratum = self._stratum
        if stratum is None or not stratum.armed or stratum.done or not _stratified(theta):
            # not armed: the warm-up's blocks, never sent (Stratum's notes); done: exact sums
            # for good, nothing to sample or send (the zero aggregator's stratum keys)
            return self._update_block(block, theta, t)
        labels = block.state["label"]
        # the master holds a sample of this shard (Stratum.resampled); it stands for the shard
        # unless the window is a sampled first pass's (fresh at every barrier: n/m · F)
        stratum.resampled = (stratum.shard is not None and "stratum_rows" in theta
                             and "stratum_shards" in theta
                             and theta["stratum_rows"][stratum.shard] >= MIN_POINTS)
        # every shard's sample at θ⁰ is balanced: the calibration's window keeps exact sums
        stratum.balanced = "stratum_balanced" in theta and theta["stratum_balanced"][0] > 0.5
        old = labels.copy() if stratum.wants_sample(t) else None
        agg = self._update_block(block, theta, t)
        fresh, moved, first = None, 0, 0
        # the skew test's reference class shares.  With the master's samples some strata on
        # send −E, whose shards' counts are in neither θ's counts nor its corrections (the
        # master adds them at the M-step), so θ's exact counts: every point once, at its
        # latest label -- a straggler's untrained points at an old θ's, so the shares of the
        # data under mixed θ versions, not all the data's at θ, but a sorted shard's window
        # is still ~0.7 apart from them.  Without the samples: exact counts plus corrections.
        reference = (theta["counts"] if "stratum_rows" in theta
                     else theta["counts"] + theta["stratum_counts"])
        if old is not None:
            # counts first: the skew test reads class shares only, and a shuffled shard's
            # stratum switches off there without a sum taken (Stratum.screen)
            counts = np.bincount(labels, minlength=self.n_clusters).astype(np.float64)
            if stratum.screen(t, counts, len(labels), reference):
                fresh = {"counts": counts} if not stratum.wants_sums else {
                    "sums": class_sums(to_host(block.x), labels, self.n_clusters),
                    "counts": counts}
            moved = int(np.count_nonzero(old != labels))
            first = int(np.count_nonzero(old < 0))
        piece = stratum.observe(t, len(labels), {"sums": agg["sums"], "counts": agg["counts"]},
                                fresh, moved, first, reference)
        agg["stratum_sums"], agg["stratum_counts"] = piece["sums"], piece["counts"]
        agg["stratum_active"] = piece["active"]
        if piece["shipped"][0]:  # this shard's weight n while the master's sample stands for it
            agg["stratum_shards"][stratum.shard] = piece["shipped"][0] * stratum.n
        return agg

    def _update_block(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        # on a GPU, a device array when the shard is resident there (flegel.device)
        x = np.ascontiguousarray(block.x) if self.xp is np else block.x
        ct = np.ascontiguousarray(theta["centers"].T, dtype=x.dtype)
        csq = np.einsum("ij,ij->j", ct, ct)
        agg = self.zero_aggregator(theta)
        labels, scores = block.state["label"], block.state["score"]
        bounds = block.state["bound"]
        compiled = self.use_compiled(self.pass_units(*x.shape))
        # θ without a drift (made by hand, not by init_parameter): no bounds
        if (compiled and "drift" in theta and _assign_accumulate.serial()
                and self._bounds.setting(t)):
            agg["objective"] = float(hamerly.assign_bounded(
                x, ct, csq, labels, scores, bounds, block.state["bound_drift"], agg["sums"],
                agg["counts"], _TILE, float(theta["drift"][0]), True,
                hamerly.bound_tolerance(x.dtype, x.shape[1]), self._bounds.stats))
            return agg
        bounds[...] = hamerly.NO_BOUND  # the kernels below do not keep the bounds valid
        if compiled:
            agg["objective"] = float(_assign_accumulate(
                x, ct, csq, labels, scores, agg["sums"], agg["counts"], _TILE))
            return agg
        xp = self.xp
        if xp is np:
            agg["objective"] = _assign_accumulate_array(
                np, x, ct, csq, labels, scores, agg["sums"], agg["counts"], _ARRAY_TILE)
            return agg
        # on a GPU: one copy of the block and its state in, the state and the changes out
        host = (labels, scores, agg["sums"], agg["counts"])
        d_labels, d_scores, d_sums, d_counts = (xp.asarray(a) for a in host)
        agg["objective"] = _assign_accumulate_array(
            xp, xp.asarray(x), xp.asarray(ct), xp.asarray(csq), d_labels, d_scores, d_sums,
            d_counts, _GPU_TILE)
        for h, d in zip(host, (d_labels, d_scores, d_sums, d_counts)):
            h[...] = to_host(d)
        return agg

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        sums = theta["sums"] + agg["sums"]
        counts = theta["counts"] + agg["counts"]
        centers = theta["centers"].copy()
        new = {"centers": centers, "sums": sums, "counts": counts}
        est_sums, est_counts = sums, counts
        if _stratified(theta):
            # the M-step's statistics: the exact sums plus the workers' current corrections
            # (algorithms._stratum; zeros unless FSP runs without migration)
            new["stratum_active"] = theta["stratum_active"] + agg["stratum_active"]
            if abs(float(new["stratum_active"][0])) < 0.5:
                # no stratum on: every correction was taken back, so the sum is 0 -- exactly,
                # not up to the pieces' rounding (exact incremental EM's θ, bit for bit)
                new["stratum_active"] = np.zeros(1)
                new["stratum_sums"] = np.zeros_like(theta["stratum_sums"])
                new["stratum_counts"] = np.zeros_like(theta["stratum_counts"])
            else:
                new["stratum_sums"] = theta["stratum_sums"] + agg["stratum_sums"]
                new["stratum_counts"] = theta["stratum_counts"] + agg["stratum_counts"]
            est_sums, est_counts = sums + new["stratum_sums"], counts + new["stratum_counts"]
            if "stratum_shards" in theta:
                new["stratum_shards"] = (theta["stratum_shards"] + agg["stratum_shards"]
                                         if new["stratum_active"][0] else
                                         np.zeros_like(theta["stratum_shards"]))
                s_est, c_est = self._resampled(theta["centers"], new["stratum_shards"])
                est_sums, est_counts = est_sums + s_est, est_counts + c_est
            new.update({k: theta[k] for k in _FIXED_SAMPLE_KEYS if k in theta})
        else:
            # a θ made by hand with some of the keys: kept as they are (the server checks
            # that θ keeps its layout), unused
            new.update({k: theta[k] for k in (*_STRATUM_KEYS, *_SAMPLE_KEYS) if k in theta})
        nonempty = est_counts > 0.5
        centers[nonempty] = est_sums[nonempty] / est_counts[nonempty, None]
        if "drift" in theta:
            new["drift"] = theta["drift"] + hamerly.centre_move(theta["centers"], centers)
        return new

    def _resampled(self, centers: np.ndarray,
                   weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The master's estimate of the shards whose stratum is on (``weights``: n_i, 0 where
        off): each one's sample labelled at ``centers`` -- Lloyd's E-step on it -- scaled by
        n_i / its rows (Horvitz-Thompson, algorithms._stratum's "The master's sample")."""
        k, d = centers.shape
        sums, counts = np.zeros((k, d)), np.zeros(k)
        on = np.flatnonzero(weights > 0.5)
        if not len(on):
            return sums, counts
        if self._samples is None:
            raise RuntimeError("kmeans: θ's stratum_shards are on but this instance holds no "
                               "samples of the shards (init_parameter with "
                               "DataInfo.sample_sizes makes them)")
        for i in on:
            x = self._samples[i]
            labels = nearest(centers, x)[0]
            scale = float(weights[i]) / len(x)
            sums += scale * class_sums(x, labels, k)
            counts += scale * np.bincount(labels, minlength=k)
        return sums, counts

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        return float(nearest(theta["centers"], block.x)[1].sum())

    # ------------------------------------------------------------------ results
    def predict(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Index of the nearest centroid of each row of ``x``."""
        return nearest(theta["centers"], x)[0]

    def score(self, theta: dict[str, np.ndarray], x: np.ndarray) -> float:
        """Minus the inertia of the rows of ``x`` (scikit-learn's ``KMeans.score``)."""
        return -float(nearest(theta["centers"], x)[1].sum())

    def transform(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Euclidean distances (n × K) of the rows of ``x`` to the centroids."""
        return np.sqrt(squared_distances(np.asarray(x, dtype=np.float64), theta["centers"]))

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``centers`` and ``counts``, the exact per-cluster counts of the points' latest
        labels.  Not the stratified estimate's counts (``counts + stratum_counts``) where a
        job stopped during a straggler's first pass and the centres are that estimate's means
        (class notes): the estimate's are fractional, scaled from a sample, and match no
        labelling of the data, while the exact counts are what a warm start or a reader of
        the labels checks against; the two agree once every first pass is done."""
        return {"centers": theta["centers"], "counts": theta["counts"]}
