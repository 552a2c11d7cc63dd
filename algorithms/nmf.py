"""Non-negative matrix factorization X ≈ W H by alternating updates with incremental statistics
(FSP paper Section 2.1 and Table 1: NMF, trained like a GD algorithm, with the statistics of
Section 2.2, Eq. 3).

The rows of X are the data points.  Row i's factor w_i (rank r) is that point's state; H (r × d)
is global.  Processing a block updates the w_i of its rows given H (a few HALS / projected
coordinate sweeps, or multiplicative updates), then its delta holds the changes of the two
statistics that H's update needs, ``A = Σ_i w_iᵀ w_i`` (r × r) and ``B = Σ_i w_iᵀ x_i`` (r × d):
``ΔA = W_newᵀ W_new − W_oldᵀ W_old`` and ``ΔB = (W_new − W_old)ᵀ X``.  θ keeps A and B, so they
always describe the current w_i of every point whichever rows an iteration processed, and the
M-step updates H from them alone, since ``‖X − WH‖² = tr(Hᵀ A H) − 2 tr(Bᵀ H) + ‖X‖²``.
Under full-batch BSP this is scikit-learn's coordinate-descent (HALS) NMF iteration.

Kernels: ``X Hᵀ`` (one GEMM) serves both the W sweeps and the loss; ``ΔWᵀ X`` is the second
GEMM.  Between the two, the *array* kernel sweeps every row of a chunk at once in NumPy (r² per
row and sweep, three array operations a coordinate step); the *compiled* one (numba) does the
sweeps, the loss, ``ΔW`` and the write-back of a chunk in one pass over 256-row tiles that stay
in L1 cache, so chunks can be small enough (256 rows) for the second GEMM to read X from L2.
With ``kernel: auto`` a job whose known work pays numba's start-up runs the compiled kernel from
its first block, a shorter one starts on the array kernel and switches once its work would have
paid (:mod:`flegel.device`): a small fit starts no JIT (issue 23).  The two give the same
iterates up to rounding (the order of a few sums; a test holds them within 1e-9 relative over
30 passes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flegel import Algorithm, Block, DataInfo
from flegel.device import DeviceKernels
from flegel.jit import njit
from flegel.validation import Integer, Options

from ._common import (
    DEVICE_PARAMS,
    InitSpec,
    RowKernel,
    chunks,
    expect_shape,
    load_init_arrays,
    resolve_init_path,
    set_params,
    validate_init_file,
)

_INITS = ("nndsvda", "random")
_SOLVERS = ("hals", "mu")
_EPS = float(np.finfo(np.float32).eps)  # denominator floor of multiplicative updates (sklearn)
#: Rows per chunk of a block (:meth:`NMF._update_rows`): 4,096 x 200 float64 is 6.5 MB, in
#: cache from the first product to the second; 2,048-8,192 measured alike, a whole
#: 16,384-row block 1 ms slower per 20,000 rows.
_CHUNK = 4096
#: Rows per chunk of the compiled kernel: 256 x 200 float64 (400 kB) is still in L2 (1 MB a
#: core here) when the second product reads it: that product took 2.0 ms of a 20,000-row pass
#: at 256 rows, 3.0 ms at 1,024, 4.1-5.4 ms at 4,096; the pass 0.87-0.91x scikit-learn's MU
#: iteration at 256 rows against 0.89-1.03x at 1,024 and 1.10x at 4,096 (CPU time, load 9-11;
#: 64-192 rows no better: more calls).
_COMPILED_CHUNK = 256
#: Rows per tile inside the compiled kernel: a tile's W, X Hᵀ / g_kk and work row (r x 256
#: float64 each) stay in L1 through the sweeps.
_TILE = 256


def _hals_rows(Wt: np.ndarray, XHt_t: np.ndarray, G: np.ndarray, n_iter: int) -> None:
    """HALS sweeps on each row w_i of W given H: minimize ‖x_i − w_i H‖² over w_i ≥ 0.

    Transposed operands, so that every step reads and writes contiguous rows: ``Wt = Wᵀ``
    (r × b, updated in place), ``XHt_t = H Xᵀ`` (r × b), ``G = H Hᵀ`` (r × r).  Each
    coordinate step is exact.  The rows of W are independent, so each step is taken for every
    row at once, component k from the components before it, already updated: the per-row
    Gauss-Seidel order.  On 16,384 x 200, rank 10, five sweeps take about 2 ms where numba's
    per-row loop took 10.4 ms, and NMF no longer starts numba at all (0.3-1 s of every
    worker's start-up on a small fit, issue 23).
    """
    _HalsSteps(G).sweep(Wt, XHt_t, n_iter)


class _HalsSteps:
    """What :func:`_hals_rows` derives from ``G = H Hᵀ`` alone, made once per block and used
    for each of its chunks: the components with ``g_kk > 0`` (a component with an all-zero
    row of H is left as it is) and the step coefficients ``coef[k, j] = g_jk / g_kk``
    (``coef[k, k] = 0``), so that a step is ``w_k ← max(0, xh_k / g_kk − coef[k] · w)``."""

    def __init__(self, G: np.ndarray) -> None:
        diag = np.diag(G).copy()
        self.steps = [k for k in range(len(G)) if diag[k] > 0.0]
        self.active = diag > 0.0
        self.scale = np.where(diag > 0.0, diag, 1.0)[:, None]
        self.coef = np.ascontiguousarray(G.T / self.scale)  # C order: one numba signature
        np.fill_diagonal(self.coef, 0.0)

    def sweep(self, Wt: np.ndarray, XHt_t: np.ndarray, n_iter: int) -> None:
        """``n_iter`` sweeps on ``Wt`` (r × b, in place) given ``XHt_t = H Xᵀ`` (r × b)."""
        coef = self.coef
        xg = XHt_t / self.scale  # both terms scaled once, not per step
        col = np.empty(Wt.shape[1])
        for _ in range(n_iter):
            for k in self.steps:
                np.dot(coef[k], Wt, out=col)
                np.subtract(xg[k], col, out=col)
                np.maximum(col, 0.0, out=Wt[k])


@njit(cache=True)
def _hals_chunk(XHt_t: np.ndarray, w: np.ndarray, xsq: np.ndarray, loss: np.ndarray,
                fresh: np.ndarray, coef: np.ndarray, scale: np.ndarray, active: np.ndarray,
                G: np.ndarray, gsum: float, n_iter: int, change_t: np.ndarray,
                sum_t: np.ndarray) -> float:  # pragma: no cover  (numba)
    """The compiled kernel of one chunk of b rows: what :meth:`NMF._update_rows`'s array path
    does between its two products, in one pass over tiles of :data:`_TILE` rows.

    ``XHt_t = H Xᵀ`` (r × b); ``w`` (b × r), ``loss`` (b): the rows' state, updated in place;
    ``fresh``: rows started from the best constant ``c·1`` (``c = Σ_k xh_k / Σ G``, at least
    0); ``coef``, ``scale``, ``active``: :class:`_HalsSteps`'s step coefficients, ``g_kk``
    (1 where 0) and the components with ``g_kk > 0``.  Writes ``change_t = (W_new − W_old)ᵀ``
    and ``sum_t = (W_new + W_old)ᵀ`` (r × b) for the statistics' products and returns the
    change of the rows' summed losses.  Each coordinate step is :func:`_hals_rows`'s
    ``w_k ← max(0, xh_k / g_kk − Σ_j coef_kj w_j)``, vectorized over the tile's rows (the
    inner loops run over rows, so the compiler vectorizes them; no reduction across rows).
    """
    r, b = XHt_t.shape
    tile = _TILE
    wt = np.empty((r, tile))
    wo = np.empty((r, tile))
    xg = np.empty((r, tile))
    col = np.empty(tile)
    acc = np.empty(tile)
    dobj = 0.0
    for t0 in range(0, b, tile):
        m = min(b, t0 + tile) - t0
        for i in range(m):
            for k in range(r):
                wo[k, i] = w[t0 + i, k]
        for k in range(r):
            sk = scale[k]
            for i in range(m):
                xg[k, i] = XHt_t[k, t0 + i] / sk
                wt[k, i] = wo[k, i]
        for i in range(m):
            if fresh[t0 + i]:
                c = 0.0
                if gsum > 0.0:
                    for k in range(r):
                        c += XHt_t[k, t0 + i]
                    c = max(c / gsum, 0.0)
                for k in range(r):
                    wt[k, i] = c
        for _ in range(n_iter):
            for k in range(r):
                if not active[k]:
                    continue
                for i in range(m):
                    col[i] = xg[k, i]
                # four components a pass over the tile: a quarter of col's loads and stores
                # (5 sweeps of 4,096 rows: 168 µs against 223 µs one at a time)
                j = 0
                while j + 3 < r:
                    c0, c1, c2, c3 = coef[k, j], coef[k, j + 1], coef[k, j + 2], coef[k, j + 3]
                    for i in range(m):
                        col[i] -= ((c0 * wt[j, i] + c1 * wt[j + 1, i])
                                   + (c2 * wt[j + 2, i] + c3 * wt[j + 3, i]))
                    j += 4
                while j < r:
                    c0 = coef[k, j]
                    for i in range(m):
                        col[i] -= c0 * wt[j, i]
                    j += 1
                for i in range(m):
                    wt[k, i] = max(col[i], 0.0)
        # ‖x_i − w_i H‖² = ‖x_i‖² + Σ_k w_ik ((G w_i)_k − 2 xh_ik), clipped at 0
        for i in range(m):
            acc[i] = xsq[t0 + i]
        for k in range(r):
            for i in range(m):
                col[i] = -2.0 * XHt_t[k, t0 + i]
            j = 0
            while j + 3 < r:
                g0, g1, g2, g3 = G[j, k], G[j + 1, k], G[j + 2, k], G[j + 3, k]
                for i in range(m):
                    col[i] += ((g0 * wt[j, i] + g1 * wt[j + 1, i])
                               + (g2 * wt[j + 2, i] + g3 * wt[j + 3, i]))
                j += 4
            while j < r:
                g0 = G[j, k]
                for i in range(m):
                    col[i] += g0 * wt[j, i]
                j += 1
            for i in range(m):
                acc[i] += wt[k, i] * col[i]
        for i in range(m):
            new = max(acc[i], 0.0)
            dobj += new - loss[t0 + i]
            loss[t0 + i] = new
        for k in range(r):
            for i in range(m):
                change_t[k, t0 + i] = wt[k, i] - wo[k, i]
                sum_t[k, t0 + i] = wt[k, i] + wo[k, i]
        for i in range(m):
            for k in range(r):
                w[t0 + i, k] = wt[k, i]
    return dobj


def _top_singular(a: np.ndarray, r: int, seed: int) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """The ``r`` leading singular triplets of ``a`` by a randomized SVD (Halko, Martinsson &
    Tropp 2011), as scikit-learn's ``randomized_svd`` computes them (10 oversamples, 7 power
    iterations when r < 0.1·min(shape), else 4) with QR normalization, in NumPy: importing
    scikit-learn costs the master about a second of a small fit (issue 23)."""
    n, d = a.shape
    p = min(r + 10, n, d)
    n_iter = 7 if r < 0.1 * min(n, d) else 4
    q = np.random.default_rng(seed).standard_normal((d, p))
    q, _ = np.linalg.qr(a @ q)
    for _ in range(n_iter):
        q, _ = np.linalg.qr(a.T @ q)
        q, _ = np.linalg.qr(a @ q)
    u_b, s, vt = np.linalg.svd(q.T @ a, full_matrices=False)
    return (q @ u_b)[:, :r], s[:r], vt[:r]


def _nndsvda(sample: np.ndarray, r: int, seed: int) -> np.ndarray:
    """H of the NNDSVD-a initialization (Boutsidis & Gallopoulos) computed on the sample;
    zeros are filled with the sample mean (scikit-learn's ``init="nndsvda"``)."""
    U, S, Vt = _top_singular(sample, r, seed)
    H = np.zeros((r, sample.shape[1]))
    H[0] = np.sqrt(S[0]) * np.abs(Vt[0])
    for j in range(1, r):
        x, y = U[:, j], Vt[j]
        xp, yp = np.maximum(x, 0), np.maximum(y, 0)
        xn, yn = np.abs(np.minimum(x, 0)), np.abs(np.minimum(y, 0))
        xpn, ypn = np.linalg.norm(xp), np.linalg.norm(yp)
        xnn, ynn = np.linalg.norm(xn), np.linalg.norm(yn)
        mp, mn = xpn * ypn, xnn * ynn
        if mp > mn:
            v, sigma, norm = yp, mp, ypn
        else:
            v, sigma, norm = yn, mn, ynn
        if norm > 0:
            H[j] = np.sqrt(S[j] * sigma) * v / norm
    H[H == 0] = sample.mean()
    return H


class NMF(DeviceKernels, RowKernel, Algorithm):
    """Non-negative matrix factorization, rows as data points.

    FSP paper Section 2.1 (gradient-type training, Eq. 1) with the incremental statistics of
    Section 2.2 (Eq. 3); Table 1 (NMF).  Minimizes the squared Frobenius error
    ``Σ_i ‖x_i − w_i H‖²`` over W ≥ 0, H ≥ 0.

    Parameters
    ----------
    n_components : int, default=10
        Rank r.
    solver : {"hals", "mu"}, default="hals"
        ``hals``: exact projected coordinate steps (scikit-learn's ``solver="cd"``) for W rows
        and H rows; ``mu``: Lee-Seung multiplicative updates.
    w_iter : int, default=5
        Sweeps over a row's w_i each time the row is processed (cheap: r² per sweep).
    h_iter : int, default=5
        Sweeps over H in each M-step (cheap: r² d per sweep).
    init : {"nndsvda", "random"} or path, default="nndsvda"
        H⁽⁰⁾: NNDSVD-a on the seeded data sample, scikit-learn's scaled ``|N(0,1)|`` random
        init, or a warm start: a run directory of an NMF run (or its ``model.npz``), a ``.npy``
        file (r, d) or a ``.npz`` holding ``components``, relative to the job file's folder.
        A row's w_i starts, on its first visit, at the best constant vector ``c·1`` given H
        and is then refined by the sweeps.
    kernel : {"auto", "compiled", "array"}, default="auto"
        The HALS row kernel: numba, NumPy, or (``auto``) numba from the first block when the
        job's known work (``max_iterations`` passes) pays its start-up, else NumPy until the
        work done would have (:mod:`flegel.device`).  ``solver: mu`` always runs NumPy.

    Notes
    -----
    The objective is the squared Frobenius error **without** the ½: ``sqrt(objective)`` is
    scikit-learn's ``reconstruction_err_``.  θ holds ``components`` (H) and the statistics
    ``wtw`` (A) and ``wtx`` (B); per-point state is ``w`` (r floats), ``loss`` and ``xsq``
    (‖x_i‖², from the row's first visit).  The data must be non-negative.  The online objective
    (the sum of the losses kept in state) is the error of each row's w_i at its last visit;
    :meth:`evaluate` gives the error of H with every row's w_i re-optimized (50 HALS sweeps
    from its state), ≤ the online value.  Use :meth:`transform` for the W of new rows.

    **Cut passes** (FSP, Section 3.1: a barrier after part of every worker's pass; issue 19,
    Fig. 8).  θ's ``wtw`` and ``wtx`` keep every row's latest contribution, so an update after
    part of a pass is HALS's H step on *all* the rows, those not visited since the last
    update one step stale -- nothing is estimated or rescaled -- and the cursor goes on where
    the pass was cut: block coordinate descent on the exact objective (the paper names
    coordinate descent among the strategies FSP applies to, Section 2), every update a
    descent.  The FSP paper gives no NMF formula beyond Table 1 (trained "by GD").  Measured
    in one process (``python bench/nmf_cut_pass.py``: ``flegel paper``'s NMF, 8,000 x 400,
    rank 10, 4 strided shards each in a shuffled order, exact objective of each θ): updates
    after a half or a quarter of every shard reached the whole-pass path's θ₁₁ (BSPV's 0.2 s
    horizon on the page) at θ₁₃ / θ₁₄ and its θ₂₇ (0.5 s) at θ₂₉ / θ₃₁, in 6.5 / 3.5 and
    14.5 / 7.75 passes against 11 and 27; the converged objective + 1 % after 27 / 19.5
    passes, whole passes not within 40: an update gains about what one after a whole pass
    does.  Cutting pays only where a worker's pass takes longer than an iteration's cost φ;
    the page's shards of 2,000 rows pass in ~4 ms of CPU, under φ (7-30 ms there), so FSPV
    keeps a barrier per pass on them, as BSPV does.  ``progress_per_update`` (FSPV's
    shortest interval) was tried and is not declared: it never acted on the page's runs
    without stragglers and FSPV with a straggler and migration read slower with it
    (docs/benchmarks.md, "NMF's cut passes").
    """

    #: update_parameter returns new arrays: the master passes θ without a copy.
    updates_theta_in_place = False

    name = "nmf"
    nonnegative_features = True
    objective_name = "squared Frobenius error"
    #: θ keeps WᵀW and WᵀX over every row's latest w_i (Eq. 3), so an update of H after part
    #: of the first pass is HALS's step on a sample of rows at H⁰: FSPV takes its first after
    #: a share of every shuffled shard (``sampled_first_step``,
    #: flegel.sync.fsp.sampled_calibration; issue 19, Fig. 8), and under migration FSP's
    #: first update of H waits until every row has one (``cover_before_update``).
    sampled_first_step = True
    cover_before_update = True

    # The parameters, as set_params stores them from PARAMS.
    n_components: int
    solver: str
    w_iter: int
    h_iter: int
    init: str
    PARAMS = {"n_components": Integer(lo=1), "solver": Options(_SOLVERS),
              "w_iter": Integer(lo=1), "h_iter": Integer(lo=1), "init": InitSpec(_INITS),
              "kernel": DEVICE_PARAMS["kernel"]}

    def __init__(self, n_components: int = 10, solver: str = "hals", w_iter: int = 5,
                 h_iter: int = 5, init: str = "nndsvda", kernel: str = "auto") -> None:
        super().__init__()
        set_params(self, locals())
        self._set_device("cpu", kernel)  # no GPU kernel: the CPU's two

    def plan_kernels(self, n_points: int, n_features: int, passes: int | None) -> bool:
        # MU has no compiled kernel: a job would start numba (~1.2 s cold) for nothing.
        return self.solver != "mu" and super().plan_kernels(n_points, n_features, passes)

    # ------------------------------------------------------------------ set-up
    def validate(self, base_dir: Path) -> None:
        validate_init_file(self.init, base_dir, _INITS, "components", self.n_components, self)

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        r, d = self.n_components, info.n_features
        sample = np.asarray(info.sample, dtype=np.float64)
        self._check_nonnegative(sample)
        path = resolve_init_path(self.init, info.base_dir, _INITS)
        if path is not None:
            H = expect_shape(path, "components",
                             load_init_arrays(path, "components", self)["components"], (r, d),
                             f"nmf with n_components={r} on {d} features")
            if np.any(H < 0):
                raise ValueError(f"init: components in {path} must be non-negative")
        elif self.init == "nndsvda":
            if r > min(sample.shape):
                raise ValueError(f"init='nndsvda' needs n_components <= min(sample rows, "
                                 f"n_features) = {min(sample.shape)}; use init='random'")
            H = _nndsvda(sample, r, info.seed)
        else:
            rng = np.random.default_rng(info.seed)
            scale = np.sqrt(max(sample.mean(), 0.0) / r) if len(sample) else 1.0
            H = scale * np.abs(rng.standard_normal((r, d)))
        return {"components": H, "wtw": np.zeros((r, r)), "wtx": np.zeros((r, d))}

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        # xsq: ‖x_i‖², computed on the row's first visit (−1 before): a pass then reads X
        # only in its two products
        return {"w": np.zeros((n, self.n_components)), "loss": np.zeros(n),
                "xsq": np.full(n, -1.0)}

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        return {"wtw": np.zeros_like(theta["wtw"]), "wtx": np.zeros_like(theta["wtx"]),
                "objective": 0.0}

    def pass_units(self, n: int, d: int) -> float:
        """Work units (:mod:`flegel.device`) of ``n`` rows: n·d·r, one product's
        multiply-adds.  (The compiled kernel saves about a fifth of a pass; numba's start-up
        is then paid after ~200 passes of 20,000 x 200 at rank 10, 8e9 units: about the
        ski-rental threshold.)"""
        return float(n * d * self.n_components)

    def load_compiled(self, n_features: int, dtype: np.dtype) -> None:
        """Load (or compile) the numba kernel: one call on a few zeros with the argument types
        of :meth:`_update_rows` (the data are always taken as float64)."""
        r, b = self.n_components, 8
        _hals_chunk(np.zeros((r, b)), np.zeros((b, r)), np.zeros(b), np.zeros(b),
                    np.zeros(b, dtype=bool), np.zeros((r, r)), np.ones(r),
                    np.ones(r, dtype=bool), np.zeros((r, r)), 0.0, 1, np.empty((r, b)),
                    np.empty((r, b)))

    @staticmethod
    def _check_nonnegative(x: np.ndarray) -> None:
        if x.size and float(x.min()) < 0.0:
            raise ValueError("NMF needs non-negative data, found negative values")

    # ------------------------------------------------------------------ kernels
    def _solve_rows(self, Wt: np.ndarray, XHt_t: np.ndarray, G: np.ndarray, n_iter: int,
                    solver: str | None = None, fresh: np.ndarray | None = None,
                    hals: _HalsSteps | None = None) -> None:
        """Refine the rows of W in place given H, transposed (``Wt = Wᵀ``, r × b) as
        :func:`_hals_rows` takes them, through ``XHt_t = H Xᵀ`` and ``G = H Hᵀ``.  ``fresh``:
        the rows to start from the best constant (default: the rows of W that are zero);
        ``hals``: the steps made from ``G`` already (made here if not given)."""
        new = ~Wt.any(axis=0) if fresh is None else fresh
        if new.any():
            gsum = float(G.sum())
            c = XHt_t[:, new].sum(axis=0) / gsum if gsum > 0 else np.zeros(int(new.sum()))
            Wt[:, new] = np.maximum(c, 0.0)
        if (solver or self.solver) == "hals":
            (hals or _HalsSteps(G)).sweep(Wt, XHt_t, n_iter)
        else:
            for _ in range(n_iter):
                Wt *= XHt_t / np.maximum(G @ Wt, _EPS)  # G = H Hᵀ is symmetric

    @staticmethod
    def _row_losses(x: np.ndarray, Wt: np.ndarray, XHt_t: np.ndarray, G: np.ndarray,
                    xsq: np.ndarray | None = None) -> np.ndarray:
        """‖x_i − w_i H‖² = ‖x_i‖² − 2 w_i·(x_i Hᵀ) + w_i G w_iᵀ, clipped at 0 (W and X Hᵀ
        transposed, as :meth:`_solve_rows` takes them; ``xsq``: the ‖x_i‖², if known)."""
        loss = np.einsum("ij,ij->i", x, x) if xsq is None else xsq.copy()
        loss -= 2.0 * np.einsum("ki,ki->i", Wt, XHt_t)
        loss += np.einsum("ki,ki->i", G.T @ Wt, Wt)
        return np.maximum(loss, 0.0, out=loss)

    def _update_rows(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        """The vectorized kernel of a block; both hooks run it (one piece of math).

        The block is taken in chunks of :data:`_CHUNK` rows, each through both products while
        its rows of X are still in cache: ``H Xᵀ`` for the W sweeps and the loss, then
        ``(W_new − W_old)ᵀ X`` for ΔB.  Taking the block whole read X twice from memory: 0.5-1 ms
        more of the 13-15 ms pass on 20,000 x 200, rank 10 (CPU time, issue 23).
        The chunks' deltas are summed in chunk order, so a block's result does not depend on
        anything but the block.  W is worked on transposed (r × b, :func:`_hals_rows`).  The
        data's sign is checked on the rows visited for the first time (the loader checked
        every row already; a row's values do not change)."""
        x = np.asarray(block.x, dtype=np.float64)
        w_state, xsq, loss_state = block.state["w"], block.state["xsq"], block.state["loss"]
        first = xsq < 0.0
        if first.all():
            self._check_nonnegative(x)
            xsq[...] = np.einsum("ij,ij->i", x, x)
        elif first.any():
            self._check_nonnegative(x[first])
            xf = x[first]
            xsq[first] = np.einsum("ij,ij->i", xf, xf)
        H = theta["components"]
        G = H @ H.T
        hals = _HalsSteps(G) if self.solver == "hals" else None
        r, d = H.shape
        s = np.zeros((r, r))
        wtx = np.zeros((r, d))
        dobj = 0.0
        if hals is not None and self.use_compiled(self.pass_units(*x.shape)):
            gsum = float(G.sum())
            scale = np.ascontiguousarray(hals.scale[:, 0])
            for sl in chunks(len(x), _COMPILED_CHUNK):
                xc = x[sl]
                XHt_t = H @ xc.T
                change, total = np.empty_like(XHt_t), np.empty_like(XHt_t)
                dobj += _hals_chunk(XHt_t, w_state[sl], xsq[sl], loss_state[sl], first[sl],
                                    hals.coef, scale, hals.active, G, gsum, self.w_iter,
                                    change, total)
                s += change @ total.T
                wtx += change @ xc
            return {"wtw": 0.5 * (s + s.T), "wtx": wtx, "objective": dobj}
        for sl in chunks(len(x), _CHUNK):
            xc = x[sl]
            XHt_t = H @ xc.T
            w_old = w_state[sl]
            Wt_old = w_old.T.copy()
            Wt = Wt_old.copy()
            self._solve_rows(Wt, XHt_t, G, self.w_iter, fresh=first[sl], hals=hals)
            loss = self._row_losses(xc, Wt, XHt_t, G, xsq[sl])
            old_loss = loss_state[sl]
            dobj += float(loss.sum() - old_loss.sum())
            old_loss[...] = loss
            # ΔA = W_newᵀW_new − W_oldᵀW_old is the symmetric part of (W_new − W_old)ᵀ(W_new
            # + W_old): one product, not two
            total = Wt + Wt_old
            change = np.subtract(Wt, Wt_old, out=Wt_old)
            s += change @ total.T
            wtx += change @ xc
            w_old[...] = Wt.T
        return {"wtw": 0.5 * (s + s.T), "wtx": wtx, "objective": dobj}

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        A = theta["wtw"] + agg["wtw"]
        B = theta["wtx"] + agg["wtx"]
        H = theta["components"].copy()
        if self.solver == "hals":
            for _ in range(self.h_iter):
                for k in range(H.shape[0]):
                    if A[k, k] > 0.0:
                        row = H[k] + (B[k] - A[k] @ H) / A[k, k]
                        H[k] = np.maximum(row, 0.0)
        else:
            for _ in range(self.h_iter):
                H *= np.maximum(B, 0.0) / np.maximum(A @ H, _EPS)
        return {"components": H, "wtw": A, "wtx": B}

    def transform(self, theta: dict[str, np.ndarray], x: np.ndarray,
                  n_iter: int = 50) -> np.ndarray:
        """Return W ≥ 0 (n × r) for the rows of ``x`` given θ's H (``n_iter`` HALS sweeps)."""
        x = np.asarray(x, dtype=np.float64)
        H = theta["components"]
        G = H @ H.T
        Wt = np.zeros((H.shape[0], len(x)))
        self._solve_rows(Wt, H @ x.T, G, n_iter, "hals")
        return Wt.T.copy()

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        """Squared Frobenius error of θ's H with each row's best w_i given H: 50 HALS sweeps
        (whatever the solver) from the row's state, or from scratch for a block without it."""
        H = theta["components"]
        G = H @ H.T
        total = 0.0
        have = "w" in block.state
        for sl in chunks(len(block)):
            x = np.asarray(block.x[sl], dtype=np.float64)
            XHt_t = H @ x.T
            Wt = block.state["w"][sl].T.copy() if have else np.zeros((H.shape[0], len(x)))
            self._solve_rows(Wt, XHt_t, G, 50, "hals")
            total += float(self._row_losses(x, Wt, XHt_t, G).sum())
        return total

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"components": theta["components"]}
