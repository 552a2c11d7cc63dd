"""Fuzzy c-means by incremental EM-style alternation (FSP paper Section 2.2; Table 1: FCM).

Each point keeps its weighted memberships ``u_ik^m`` (K numbers) and its loss
``Σ_k u_ik^m ‖x_i − c_k‖²`` as state.  A delta holds the signed changes of the statistics
``su_k = Σ_i u_ik^m`` and ``sux_k = Σ_i u_ik^m x_i`` caused by the points processed (the
incremental update of Eq. 3), and the M-step sets ``c_k = sux_k / su_k``.  Under full-batch
BSP this is the standard FCM iteration (Bezdek), whose objective never increases.

Kernel: squared distances through one BLAS product per block, a numba pass computing the
memberships in log space (``u_ik = softmax_k(−log d²_ik / (m−1))``, so a point on a centre or a
fuzzifier close to 1 cannot overflow), their changes and the loss, then one GEMM ``Δuᵐᵀ x``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flegel import Algorithm, Block, DataInfo
from flegel.jit import njit

from ._common import (
    RowKernel,
    check_float,
    check_init_spec,
    check_int,
    chunks,
    expect_shape,
    kmeans_plusplus_sample,
    load_init_arrays,
    logsumexp_rows,
    resolve_init_path,
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


class FuzzyCMeans(RowKernel, Algorithm):
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

    Notes
    -----
    θ holds ``centers`` (K, d) and the statistics ``su`` (K,) and ``sux`` (K, d).  Per-point
    state is ``um`` (the K weighted memberships u^m) and ``loss``.  :meth:`evaluate` returns the
    objective of θ with optimal memberships, ``J_i = (Σ_k d²_ik^{−1/(m−1)})^{−(m−1)}``.  A
    centre whose Σ u^m vanishes keeps its position.
    """

    name = "fcm"
    objective_name = "fcm objective"

    def __init__(self, n_clusters: int = 8, m: float = 2.0, init: str = "kmeans++") -> None:
        super().__init__()
        self.n_clusters = check_int("n_clusters", n_clusters)
        self.m = check_float("m", m, low=1.0, low_open=True)
        self.init = check_init_spec(init, _INITS)

    # ------------------------------------------------------------------ set-up
    def validate(self, base_dir: Path) -> None:
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
    def _update_rows(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        """The vectorized kernel of a block; both hooks run it (one piece of math)."""
        x = np.asarray(block.x, dtype=np.float64)
        d2 = squared_distances(x, theta["centers"])
        um = block.state["um"]
        dum = np.empty_like(um)
        if self.m == 2.0:
            dobj = _memberships_m2(d2, um, block.state["loss"], dum)
        else:
            dobj = _memberships(d2, self.m, um, block.state["loss"], dum)
        return {"su": dum.sum(axis=0), "sux": dum.T @ x, "objective": float(dobj)}

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
