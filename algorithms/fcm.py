"""Fuzzy c-means by incremental EM-style alternation (FSP paper Section 2.2; Table 1: FCM).

Each point keeps its weighted memberships ``u_ik^m`` (K numbers) and its loss
``Σ_k u_ik^m ‖x_i − c_k‖²`` as state.  A delta holds the signed changes of the statistics
``su_k = Σ_i u_ik^m`` and ``sux_k = Σ_i u_ik^m x_i`` caused by the points processed (the
incremental update of Eq. 3), and the M-step sets ``c_k = sux_k / su_k``.  Under full-batch
BSP this is the standard FCM iteration (Bezdek), whose objective never increases.

Kernel: squared distances through one BLAS product per block, a numba pass computing the
memberships in log space (``u_ik = softmax_k(−log d²_ik / (m−1))``, so a point on a centre or a
fuzzifier close to 1 cannot overflow), their changes and the loss, then one GEMM ``Δuᵐᵀ x``.

Kernels (:mod:`flegel.device`): the pass between the GEMMs is either numba's or the array
kernel :func:`_memberships_array`, the same math in whole-array operations on ``xp`` (NumPy,
or CuPy with ``device: gpu``, where the GEMMs run on the device too, the block's state is
copied in and out once and the centres stay on the device until θ changes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flegel import Algorithm, Block, DataInfo
from flegel.device import DeviceKernels, to_host
from flegel.jit import njit
from flegel.validation import Integer, Real

from ._common import (
    DEVICE_PARAMS,
    InitSpec,
    RowKernel,
    ThetaCache,
    chunks,
    expect_shape,
    kmeans_plusplus_sample,
    load_init_arrays,
    logsumexp_rows,
    on_device,
    resolve_init_path,
    set_params,
    squared_distances,
    validate_init_file,
)

_INITS = ("kmeans++",)
_D2_FLOOR = 1e-300  # squared distances are floored here before taking logs
_DEGENERATE = 1e-12  # a centre whose Σ u^m falls below this fraction of the total stays put


@njit(cache=True, nogil=True)
def _memberships(d2: np.ndarray, m: float, um: np.ndarray, loss: np.ndarray,
                 dum: np.ndarray) -> float:  # pragma: no cover - compiled
    """E-step of a block from its squared distances ``d2`` (b × K), any fuzzifier m.

    Writes ``u^m`` into ``um`` and its change into ``dum``, the loss Σ_k u^m d² into ``loss``;
    returns the change of the summed loss.  Log space: ``u^m = exp(m (a_k − lse(a)))`` with
    ``a_k = −log(d²_k) / (m − 1)``.
    """
    n, k = d2.shape
    p = 1.0 / (m - 1.0)
    a = np.empty(k)
    dobj = 0.0
    for i in range(n):
        amax = -np.inf
        for j in range(k):
            a[j] = -p * np.log(max(d2[i, j], 1e-300))
            if a[j] > amax:
                amax = a[j]
        s = 0.0
        for j in range(k):
            s += np.exp(a[j] - amax)
        lse = amax + np.log(s)
        new = 0.0
        for j in range(k):
            w = np.exp(m * (a[j] - lse))  # u^m
            dum[i, j] = w - um[i, j]
            um[i, j] = w
            new += w * d2[i, j]
        dobj += new - loss[i]
        loss[i] = new
    return dobj


@njit(cache=True, nogil=True)
def _memberships_m2(d2: np.ndarray, um: np.ndarray, loss: np.ndarray,
                    dum: np.ndarray) -> float:  # pragma: no cover - compiled
    """:func:`_memberships` for m = 2 (the default): ``u_k ∝ 1/d²_k``, no transcendentals."""
    n, k = d2.shape
    w = np.empty(k)
    dobj = 0.0
    for i in range(n):
        s = 0.0
        for j in range(k):
            w[j] = 1.0 / max(d2[i, j], 1e-300)
            s += w[j]
        inv = 1.0 / s
        new = 0.0
        for j in range(k):
            u = w[j] * inv
            v = u * u
            dum[i, j] = v - um[i, j]
            um[i, j] = v
            new += v * d2[i, j]
        dobj += new - loss[i]
        loss[i] = new
    return dobj


def _memberships_array(xp: Any, d2: Any, m: float, um: Any, loss: Any, dum: Any) -> float:
    """The array kernel: :func:`_memberships` (and :func:`_memberships_m2` for m = 2) in
    whole-array operations on ``xp``.

    Same arguments and result (``um``, ``loss`` and ``dum`` are written in place; all on
    ``xp``'s device).  For m = 2, ``u_k = (1/d²_k) / Σ_j 1/d²_j``; otherwise the log-space
    form ``u^m = exp(m (a_k − lse(a)))``, ``a_k = −log(d²_k) / (m − 1)``.
    """
    d2f = xp.maximum(d2, _D2_FLOOR)
    if m == 2.0:
        w = 1.0 / d2f
        w *= 1.0 / w.sum(axis=1, keepdims=True)  # u
        w *= w  # u^m
    else:
        a = xp.log(d2f)
        a *= -1.0 / (m - 1.0)
        a -= logsumexp_rows(a)[:, None]
        a *= m
        w = xp.exp(a, out=a)
    xp.subtract(w, um, out=dum)
    um[...] = w
    new = xp.einsum("ij,ij->i", w, d2)
    dobj = float((new - loss).sum())
    loss[...] = new
    return dobj


class FuzzyCMeans(DeviceKernels, RowKernel, Algorithm):
    """Fuzzy c-means clustering by incremental alternation.

    FSP paper Section 2.2 (EM-style alternation with incremental statistics, Eq. 3) and
    Table 1 (FCM).  Minimizes the standard FCM objective ``J = Σ_i Σ_k u_ik^m ‖x_i − c_k‖²``
    with memberships ``u_ik = 1 / Σ_j (‖x_i − c_k‖ / ‖x_i − c_j‖)^{2/(m−1)}``.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters K.
    m : float, default=2.0
        Fuzzifier, > 1 (close to 1: nearly hard k-means; large: very fuzzy).
    init : "kmeans++" or path, default="kmeans++"
        ``"kmeans++"`` on the seeded data sample, or a warm start: a run directory of an FCM
        run (or its ``model.npz``), a ``.npy`` file (K, d) of initial centres or a ``.npz``
        holding ``centers``, relative to the job file's folder.
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the training kernel runs: NumPy/numba, or CuPy on the current CUDA device
        (:mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        On the CPU: numba, the NumPy array kernel, or (``auto``) numba from the first block
        when the job's known work (``max_iterations`` passes) pays its start-up, else the
        array kernel until the work done would have, then numba (:mod:`flegel.device`).

    Notes
    -----
    θ holds ``centers`` (K, d) and the statistics ``su`` (K,) and ``sux`` (K, d).  Per-point
    state is ``um`` (the K weighted memberships u^m) and ``loss``.  :meth:`evaluate` returns the
    objective of θ with optimal memberships, ``J_i = (Σ_k d²_ik^{−1/(m−1)})^{−(m−1)}``.  A
    centre whose Σ u^m vanishes keeps its position.
    """

    #: update_parameter returns new arrays: the master passes θ without a copy.
    updates_theta_in_place = False

    name = "fcm"
    #: Incremental EM (Eq. 3): an M-step on part of the first pass is one on a sample of the
    #: data, so FSPV takes its first after a share of every shard (flegel.interval.multistage).
    sampled_first_step = True
    objective_name = "fcm objective"
    #: θ keeps the statistics of every point's latest memberships (Eq. 3): FSP's first M-step
    #: waits until every point has them (``Algorithm.cover_before_update``).
    cover_before_update = True

    # The parameters, as set_params stores them from PARAMS.
    n_clusters: int
    m: float
    init: str
    PARAMS = {**DEVICE_PARAMS, "n_clusters": Integer(lo=1),
              "m": Real(lo=1.0, lo_open=True, finite=True), "init": InitSpec(_INITS)}

    def __init__(self, n_clusters: int = 8, m: float = 2.0, init: str = "kmeans++",
                 device: str = "cpu", kernel: str = "auto") -> None:
        super().__init__()
        set_params(self, locals())
        self._set_device(device, kernel)
        self._centers: ThetaCache[Any] = ThetaCache()

    # ------------------------------------------------------------------ set-up
    def validate(self, base_dir: Path) -> None:
        self.check_device()
        validate_init_file(self.init, base_dir, _INITS, "centers", self.n_clusters, self)

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        k, d = self.n_clusters, info.n_features
        path = resolve_init_path(self.init, info.base_dir, _INITS)
        if path is not None:
            centers = expect_shape(path, "centers",
                                   load_init_arrays(path, "centers", self)["centers"], (k, d),
                                   f"fcm with n_clusters={k} on {d} features")
        else:
            centers = kmeans_plusplus_sample(info.sample, k, info.seed)
        return {"centers": centers, "su": np.zeros(k), "sux": np.zeros((k, d))}

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        return {"um": np.zeros((n, self.n_clusters)), "loss": np.zeros(n)}

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        return {"su": np.zeros_like(theta["su"]), "sux": np.zeros_like(theta["sux"]),
                "objective": 0.0}

    # ------------------------------------------------------------------ kernels
    def work_units(self, b: int, d: int) -> float:
        """Work units (:mod:`flegel.device`) of a block of ``b`` points: b·d·K, the
        multiply-adds of each of its two GEMMs."""
        return float(b * d * self.n_clusters)

    def _update_rows(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        """The vectorized kernel of a block; both hooks run it (one piece of math).

        The pass between the GEMMs is numba's when :meth:`use_compiled` says so, else
        :func:`_memberships_array` on :attr:`xp`; on a GPU the block and its state are
        copied to the device once and the state and the statistics back.
        """
        compiled = self.use_compiled(self.work_units(*block.x.shape))
        xp = self.xp  # NumPy whenever the compiled kernel runs
        centers = self._centers.get(theta, lambda th: xp.asarray(th["centers"]))
        with on_device(xp, block.state["um"], block.state["loss"]) as (um, loss):
            x = xp.asarray(block.x, dtype=np.float64)
            d2 = squared_distances(x, centers)
            dum = xp.empty_like(um)
            if not compiled:
                dobj = _memberships_array(xp, d2, self.m, um, loss, dum)
            elif self.m == 2.0:
                dobj = _memberships_m2(d2, um, loss, dum)
            else:
                dobj = _memberships(d2, self.m, um, loss, dum)
            su, sux = dum.sum(axis=0), dum.T @ x
        return {"su": to_host(su), "sux": np.ascontiguousarray(to_host(sux)),
                "objective": float(dobj)}

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        su = theta["su"] + agg["su"]
        sux = theta["sux"] + agg["sux"]
        total = float(np.maximum(su, 0.0).sum())
        centers = theta["centers"].copy()
        ok = su > _DEGENERATE * total
        if total > 0.0 and ok.any():
            centers[ok] = sux[ok] / su[ok, None]
        return {"centers": centers, "su": su, "sux": sux}

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        p = 1.0 / (self.m - 1.0)
        total = 0.0
        for sl in chunks(len(block)):
            d2 = squared_distances(np.asarray(block.x[sl], dtype=np.float64), theta["centers"])
            a = -p * np.log(np.maximum(d2, _D2_FLOOR))
            total += float(np.exp(-(self.m - 1.0) * logsumexp_rows(a)).sum())
        return total

    # ------------------------------------------------------------------ results
    def predict_memberships(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Return the memberships u (n × K, rows sum to 1) of the rows of ``x`` under θ."""
        d2 = squared_distances(np.asarray(x, dtype=np.float64), theta["centers"])
        a = -np.log(np.maximum(d2, _D2_FLOOR)) / (self.m - 1.0)
        return np.exp(a - logsumexp_rows(a)[:, None])

    def predict(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Index of the centre of largest membership (the nearest centre) of each row."""
        return np.argmax(self.predict_memberships(theta, x), axis=1)

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"centers": theta["centers"], "su": theta["su"]}
