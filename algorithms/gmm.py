"""Gaussian mixture model by incremental EM (FSP paper Section 2.2, Eq. 2-3; Table 1: GMM).

Each point keeps its responsibilities r_i (a row of K numbers) and its loss
``-log p(x_i | θ)`` as state.  A delta holds the signed changes of the sufficient statistics
caused by the points processed, ``Δs_i = s_i(new r_i) - s_i(old r_i)`` (Eq. 3):

* ``nk``  = Σ_i r_ik,
* ``sx``  = Σ_i r_ik x_i,
* ``sxx`` = Σ_i r_ik x_i²  (diagonal) or Σ_i r_ik x_i x_iᵀ (full),

which are kept inside θ, so the M-step sees the statistics of the *current* responsibilities of
every point however few points an iteration processed.  Under full-batch BSP this is exactly the
classic EM iteration of scikit-learn's :class:`sklearn.mixture.GaussianMixture`.

Kernel (diagonal): the block is laid out once as ``z = [x², x]`` (b × 2d); the log-densities of
all components are one GEMM ``z @ [-½P; μP]`` and the changes of ``sxx`` and ``sx`` are one GEMM
``Δrᵀ z``; a numba pass in between does the log-sum-exp, the new responsibilities, their changes
and the loss.  Full covariance does one (b × d) · (d × d) GEMM per component each way.

Kernels (:mod:`flegel.device`): the E-step between the GEMMs is either the compiled numba pass
or the array kernel :func:`_responsibilities_array`, the same math in whole-array operations
on ``xp`` (NumPy, or CuPy with ``device: gpu``, where the GEMMs run on the device too and the
block's state is copied in and out once).  The GEMM operands derived from θ are made once per
θ (:class:`~algorithms._common.ThetaCache`), so on a GPU they stay on the device between
barriers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flegel import Algorithm, Block, DataInfo
from flegel.device import DeviceKernels, to_host
from flegel.jit import njit
from flegel.validation import Integer, Options, Real

from ._common import (
    DEVICE_PARAMS,
    LOG_2PI,
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
    validate_init_file,
)
from ._stratum import OneStratumPerWorker, PassStratum

_INITS = ("kmeans++",)
_COVARIANCE_TYPES = ("diag", "full")
_EPS = 10.0 * np.finfo(np.float64).eps  # added to nk, as scikit-learn does
_DEGENERATE = 1e-9  # a component with nk below this fraction of the total keeps its shape
_EXP_FLOOR = -708.0  # exp(x) of x below this is subnormal or 0: the E-step takes it as 0
#: The sufficient statistics (Eq. 3), summed in θ over every point's latest responsibilities.
_STATS = ("nk", "sx", "sxx")
#: θ's and the aggregate's keys of the stratified M-step (GaussianMixture.stratify): the
#: workers' current corrections of each statistic and the count of strata on.
_STRATUM_KEYS = ("stratum_nk", "stratum_sx", "stratum_sxx", "stratum_active")


@njit(cache=True, nogil=True)
def _responsibilities(logp: np.ndarray, resp: np.ndarray, loss: np.ndarray,
                      dresp: np.ndarray) -> float:  # pragma: no cover - compiled
    """E-step of a block from its weighted log-densities ``logp`` (b × K).

    Writes the new responsibilities into ``resp`` and their changes into ``dresp``, the new
    loss ``-log p(x_i)`` into ``loss``, and returns the change of the summed loss.
    """
    n, k = logp.shape
    dobj = 0.0
    for i in range(n):
        m = logp[i, 0]
        for j in range(1, k):
            if logp[i, j] > m:
                m = logp[i, j]
        s = 0.0
        for j in range(k):
            v = logp[i, j] - m
            # below _EXP_FLOOR exp() is subnormal or 0 (< 3e-308, nothing next to the 1 of
            # the maximum) and libm's underflow path costs ~3x a whole row on a trained
            # model, whose far components sit thousands of nats down
            e = np.exp(v) if v > _EXP_FLOOR else 0.0
            dresp[i, j] = e
            s += e
        inv = 1.0 / s
        for j in range(k):
            r = dresp[i, j] * inv
            dresp[i, j] = r - resp[i, j]
            resp[i, j] = r
        new = -(m + np.log(s))
        dobj += new - loss[i]
        loss[i] = new
    return dobj


def _responsibilities_array(xp: Any, logp: Any, resp: Any, loss: Any, dresp: Any) -> float:
    """The array kernel: :func:`_responsibilities` in whole-array operations on ``xp``.

    Same arguments and result (``resp``, ``loss`` and ``dresp`` are written in place; all on
    ``xp``'s device): a row-wise log-sum-exp shifted by the row maximum, the new
    responsibilities ``exp(logp − m) / s``, their changes and the loss ``−(m + log s)``.
    """
    m = logp.max(axis=1, keepdims=True)
    e = xp.exp(logp - m)
    s = e.sum(axis=1, keepdims=True)
    e *= 1.0 / s  # the new responsibilities
    xp.subtract(e, resp, out=dresp)
    resp[...] = e
    new = -(m[:, 0] + xp.log(s[:, 0]))
    dobj = float((new - loss).sum())
    loss[...] = new
    return dobj


def _precisions_cholesky_full(cov: np.ndarray) -> np.ndarray:
    """Cholesky factors L_k of the precisions (P_k = L_k L_kᵀ), as scikit-learn computes them."""
    # Imported here: scipy.linalg costs every rank ~0.3 CPU-s, and only full covariances
    # need it (issue 23: small fits).
    from scipy.linalg import solve_triangular

    k, d, _ = cov.shape
    out = np.empty_like(cov)
    eye = np.eye(d)
    for j in range(k):
        try:
            chol = np.linalg.cholesky(cov[j])
        except np.linalg.LinAlgError as err:
            raise ValueError(
                "GaussianMixture: a component's covariance is not positive definite "
                "(singleton or collapsed component); increase reg_covar") from err
        out[j] = solve_triangular(chol, eye, lower=True).T
    return out


def _host(a: Any) -> np.ndarray:
    """A contiguous NumPy float64 array of an aggregator entry (copied off a GPU)."""
    return np.ascontiguousarray(to_host(a), dtype=np.float64)


def _stratified(theta: dict[str, np.ndarray]) -> bool:
    """Whether θ carries the stratified M-step's statistics (init_parameter's θ; a θ made by
    hand or by an older flegel may not)."""
    return all(k in theta for k in _STRATUM_KEYS)


class GaussianMixture(OneStratumPerWorker, DeviceKernels, RowKernel, Algorithm):
    """Gaussian mixture model fitted by incremental EM.

    FSP paper Section 2.2 (Eq. 3) and Table 1 (GMM).  The objective is the negative
    log-likelihood ``-Σ_i log Σ_k w_k N(x_i | μ_k, Σ_k)``, minimized.

    Parameters
    ----------
    n_components : int, default=8
        Number of mixture components K.
    covariance_type : {"diag", "full"}, default="diag"
        Diagonal covariance per component, or a full (d × d) covariance per component.
    reg_covar : float, default=1e-6
        Non-negative value added to the diagonal of every covariance (scikit-learn's
        ``reg_covar``); it is also the floor of each variance.
    init : "kmeans++" or path, default="kmeans++"
        ``"kmeans++"``: means by k-means++ on the seeded data sample, uniform weights and, for
        every component, the variance (or covariance) of the sample.  Otherwise a warm start:
        a run directory of a GMM run (or its ``model.npz``), a ``.npy`` file of initial means
        (K, d) or a ``.npz`` archive holding ``means`` and optionally ``weights`` (K,) and
        ``covariances`` ((K, d) diag, (K, d, d) full); relative paths resolve against the job
        file's folder.
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the training kernel runs: NumPy/numba, or CuPy on the current CUDA device
        (:mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        On the CPU: numba, the NumPy array kernel, or (``auto``) numba from the first block
        when the job's known work (``max_iterations`` passes) pays its start-up, else the
        array kernel until the work done would have, then numba (:mod:`flegel.device`).

    Notes
    -----
    θ holds ``weights``, ``means``, ``precisions_cholesky`` (scikit-learn's convention: for
    ``diag`` the (K, d) array ``1/σ``, for ``full`` the (K, d, d) factors L with
    ``Σ⁻¹ = L Lᵀ``) and the statistics ``nk``, ``sx``, ``sxx``.  :meth:`finalize` adds
    ``covariances``.  As in scikit-learn, ``10·eps`` is added to ``nk`` in the M-step; a
    component whose ``nk`` falls below 1e-9 of the total keeps its previous mean and covariance.
    Per-point state is ``resp`` (K floats) and ``loss``, i.e. 8(K+1) bytes per point.

    Under FSP without data migration the M-step weighs each shard up to its size while its
    first pass runs (:meth:`stratify`; issue 19, Fig. 7): θ's ``stratum_nk``,
    ``stratum_sx``, ``stratum_sxx`` hold the workers' corrections, added to the exact
    statistics for the M-step only, and ``stratum_active`` the count of shards weighed up;
    all zeros once every first pass is done, and always outside FSP.
    """

    #: update_parameter returns new arrays: the master passes θ without a copy.
    updates_theta_in_place = False

    name = "gmm"
    #: Incremental EM (Eq. 3): an M-step on part of the first pass is one on a sample of the
    #: data, so FSPV takes its first after a share of every shard (flegel.interval.multistage).
    sampled_first_step = True
    objective_name = "negative log-likelihood"
    #: θ keeps the sufficient statistics of every point's latest responsibilities (Eq. 3): FSP's
    #: first M-step waits until every point has them (``Algorithm.cover_before_update``).
    cover_before_update = True

    # The parameters, as set_params stores them from PARAMS.
    n_components: int
    covariance_type: str
    reg_covar: float
    init: str
    PARAMS = {**DEVICE_PARAMS, "n_components": Integer(lo=1),
              "covariance_type": Options(_COVARIANCE_TYPES),
              "reg_covar": Real(lo=0.0, finite=True), "init": InitSpec(_INITS)}

    def __init__(self, n_components: int = 8, covariance_type: str = "diag",
                 reg_covar: float = 1e-6, init: str = "kmeans++", device: str = "cpu",
                 kernel: str = "auto") -> None:
        super().__init__()
        set_params(self, locals())
        self._set_device(device, kernel)
        self._operands: ThetaCache[tuple[Any, ...]] = ThetaCache()
        self._stratum: PassStratum | None = None
        self._shared = False  # stratify was called by several workers (stratify's notes)

    # ------------------------------------------------------------------ set-up
    def validate(self, base_dir: Path) -> None:
        self.check_device()
        validate_init_file(self.init, base_dir, _INITS, "means", self.n_components, self)

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        k, d = self.n_components, info.n_features
        full = self.covariance_type == "full"
        sample = np.asarray(info.sample, dtype=np.float64)
        path = resolve_init_path(self.init, info.base_dir, _INITS)
        arrays: dict[str, np.ndarray] = {}
        if path is not None:
            arrays = load_init_arrays(path, "means", self)
            means = expect_shape(path, "means", arrays["means"], (k, d),
                                 f"gmm with n_components={k} on {d} features")
        else:
            means = kmeans_plusplus_sample(sample, k, info.seed)
        weights = np.array(arrays.get("weights", np.full(k, 1.0 / k)), dtype=np.float64)
        if weights.shape != (k,) or np.any(weights < 0) or weights.sum() <= 0:
            raise ValueError(f"init: weights must be {k} non-negative numbers, "
                             f"got shape {weights.shape}")
        weights /= weights.sum()
        if path is not None and "covariances" in arrays:
            cov = expect_shape(path, "covariances", arrays["covariances"],
                               (k, d, d) if full else (k, d),
                               f"gmm with covariance_type={self.covariance_type!r}")
        elif full:
            cov = np.cov(sample, rowvar=False, bias=True).reshape(d, d) if len(sample) > 1 \
                else np.zeros((d, d))
            cov = np.repeat((cov + self.reg_covar * np.eye(d))[None], k, axis=0)
        else:
            var = sample.var(axis=0) if len(sample) > 1 else np.zeros(d)
            cov = np.repeat((var + self.reg_covar)[None], k, axis=0)
        if full:
            pchol = _precisions_cholesky_full(cov)
            sxx = np.zeros((k, d, d))
        else:
            if np.any(cov <= 0):
                raise ValueError("GaussianMixture: initial variances must be positive; "
                                 "increase reg_covar")
            pchol = 1.0 / np.sqrt(cov)
            sxx = np.zeros((k, d))
        return {"weights": weights, "means": means, "precisions_cholesky": pchol,
                "nk": np.zeros(k), "sx": np.zeros((k, d)), "sxx": sxx,
                "stratum_nk": np.zeros(k), "stratum_sx": np.zeros((k, d)),
                "stratum_sxx": np.zeros_like(sxx), "stratum_active": np.zeros(1)}

    def stratify(self, n_points: int, shard: int | None = None) -> PassStratum | None:
        """Take the M-step on this worker's shard weighed up to its size while its first
        pass runs (:class:`algorithms._stratum.PassStratum`): FSP calls it on every worker
        without data migration (issue 19, Fig. 7).  θ keeps the exact sums; the correction
        ``(n/m − 1) · E`` travels in the aggregate and θ (``stratum_nk``, ``stratum_sx``,
        ``stratum_sxx``).  Returns the stratum, which FSP's worker policy checkpoints.

        One per worker: None from a second call on the same instance
        (:class:`~._stratum.OneStratumPerWorker`)."""
        return self._claim_stratum(lambda: PassStratum(n_points))

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        return {"resp": np.zeros((n, self.n_components)), "loss": np.zeros(n)}

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        agg: dict[str, Any] = {k: np.zeros_like(theta[k]) for k in _STATS}
        agg["objective"] = 0.0
        if _stratified(theta):  # θ made by init_parameter (not by hand)
            agg.update({k: np.zeros_like(theta[k]) for k in _STRATUM_KEYS})
        return agg

    # ------------------------------------------------------------------ kernels
    @staticmethod
    def _diag_weights(theta: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """GEMM operand (2d × K) and constant (K,) of the diagonal log-densities of z=[x², x]."""
        mu, pchol, w = theta["means"], theta["precisions_cholesky"], theta["weights"]
        prec = pchol * pchol
        d = mu.shape[1]
        with np.errstate(divide="ignore"):
            const = (np.log(w) - 0.5 * d * LOG_2PI + np.log(pchol).sum(axis=1)
                     - 0.5 * np.einsum("kj,kj->k", mu * mu, prec))
        gemm = np.concatenate([-0.5 * prec.T, (mu * prec).T], axis=0)
        return gemm, const

    def _operands_on(self, xp: Any, theta: dict[str, np.ndarray]) -> tuple[Any, ...]:
        """The operands of the log-densities on ``xp``: ``(gemm, const)`` for ``diag``
        (:meth:`_diag_weights`), ``(L, μL, const)`` for ``full`` (the precision factors
        (K, d, d), each mean times its factor (K, d), and ``log w_k − ½d log 2π + log|L_k|``)."""
        if self.covariance_type == "diag":
            return tuple(xp.asarray(a) for a in self._diag_weights(theta))
        mu, pchol, w = theta["means"], theta["precisions_cholesky"], theta["weights"]
        logdet = np.log(np.diagonal(pchol, axis1=1, axis2=2)).sum(axis=1)
        with np.errstate(divide="ignore"):
            const = np.log(w) - 0.5 * mu.shape[1] * LOG_2PI + logdet
        mup = np.einsum("kd,kde->ke", mu, pchol)
        return xp.asarray(pchol), xp.asarray(mup), xp.asarray(const)

    def _design(self, xp: Any, x: Any) -> Any:
        """The rows the GEMMs take, in float64 on ``xp``: ``z = [x², x]`` (b × 2d) for
        ``diag``, ``x`` itself for ``full``."""
        if self.covariance_type == "full":
            return xp.asarray(x, dtype=np.float64)
        b, d = x.shape
        z = xp.empty((b, 2 * d))
        xp.multiply(x, x, out=z[:, :d])
        z[:, d:] = x
        return z

    def _log_prob_on(self, xp: Any, z: Any, ops: tuple[Any, ...]) -> Any:
        """Weighted log-densities ``log w_k + log N(x | μ_k, Σ_k)`` (b × K) of the rows
        ``z`` (:meth:`_design`) from :meth:`_operands_on`, all on ``xp``: one GEMM for
        ``diag``, one (b × d) · (d × d) GEMM per component for ``full``."""
        if self.covariance_type == "diag":
            logp = z @ ops[0]
            logp += ops[1]
            return logp
        pchol, mup, const = ops
        logp = xp.empty((z.shape[0], len(const)))
        for j in range(len(const)):  # one GEMM per component
            y = z @ pchol[j]
            y -= mup[j]
            logp[:, j] = xp.einsum("ij,ij->i", y, y)
        logp *= -0.5
        logp += const
        return logp

    def _log_prob(self, x: np.ndarray, theta: dict[str, np.ndarray]) -> np.ndarray:
        """:meth:`_log_prob_on` with NumPy (evaluation and prediction run on the host)."""
        return self._log_prob_on(np, self._design(np, x), self._operands_on(np, theta))

    def work_units(self, b: int, d: int) -> float:
        """Work units (:mod:`flegel.device`) of a block of ``b`` points: the multiply-adds of
        its GEMMs up to a constant, b·d·K (``diag``) or b·d²·K (``full``)."""
        k = self.n_components
        return float(b * d * k * (d if self.covariance_type == "full" else 1))

    def pass_units(self, n: int, d: int) -> float:
        """Work units of a pass over ``n`` points (:meth:`work_units`), as ``kernel: auto``
        plans a job of known length (:mod:`flegel.device`)."""
        return self.work_units(n, d)

    def _update_rows(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        """The vectorized kernel of a block; both hooks run it (one piece of math).

        The E-step is numba's :func:`_responsibilities` when :meth:`use_compiled` says so,
        else :func:`_responsibilities_array` on :attr:`xp`; on a GPU the block and its state
        are copied to the device once and the state and the statistics back.
        """
        b, d = block.x.shape
        full = self.covariance_type == "full"
        stratum = self._stratum
        if stratum is not None and (not stratum.armed or stratum.done
                                    or not _stratified(theta)):
            stratum = None  # nothing to send: the zero aggregator's stratum keys
        # the first block decides whether E is the shard's sums (PassStratum): every
        # point of it untrained (responsibilities all zero before their first E-step)
        # (a sum of the mask, not np.count_nonzero: the state may live on a GPU)
        first_visits = (int((~block.state["resp"].any(axis=1)).sum())
                        if stratum is not None and stratum.valid is None else 0)
        compiled = self.use_compiled(self.work_units(b, d))
        xp = self.xp  # NumPy whenever the compiled kernel runs
        ops = self._operands.get(theta, lambda th: self._operands_on(xp, th))
        with on_device(xp, block.state["resp"], block.state["loss"]) as (resp, loss):
            z = self._design(xp, xp.asarray(block.x))
            logp = self._log_prob_on(xp, z, ops)
            dresp = xp.empty_like(resp)
            dobj = (_responsibilities(logp, resp, loss, dresp) if compiled
                    else _responsibilities_array(xp, logp, resp, loss, dresp))
            nk = dresp.sum(axis=0)
            stats = dresp.T @ z  # [sxx | sx] for diag, sx for full
            if full:
                sx = stats
                sxx = xp.stack([(z * dresp[:, j:j + 1]).T @ z
                                for j in range(self.n_components)])
            else:
                sx, sxx = stats[:, d:], stats[:, :d]
        out: dict[str, Any] = {"nk": _host(nk), "sx": _host(sx), "sxx": _host(sxx),
                               "objective": float(dobj)}
        if stratum is not None:
            piece = stratum.observe(t, b, {k: out[k] for k in _STATS},
                                    first_visits=first_visits)
            out.update({f"stratum_{k}": piece[k] for k in _STATS},
                       stratum_active=piece["active"])
        elif _stratified(theta):  # no piece: the zero aggregator's keys
            out.update({k: np.zeros_like(theta[k]) for k in _STRATUM_KEYS})
        return out

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        nk = theta["nk"] + agg["nk"]
        sx = theta["sx"] + agg["sx"]
        sxx = theta["sxx"] + agg["sxx"]
        new = {"weights": theta["weights"], "means": theta["means"],
               "precisions_cholesky": theta["precisions_cholesky"],
               "nk": nk, "sx": sx, "sxx": sxx}
        if _stratified(theta):
            # the M-step's statistics: the exact sums plus the workers' current corrections
            # (PassStratum; zeros unless FSP runs without migration)
            active = theta["stratum_active"] + agg.get("stratum_active", 0.0)
            if abs(float(active[0])) < 0.5:
                # no stratum on: every correction was taken back, so their sum is 0 -- exactly,
                # not up to the rounding of the pieces (exact incremental EM's θ, bit for bit)
                new.update({f"stratum_{k}": np.zeros_like(theta[k]) for k in _STATS},
                           stratum_active=np.zeros(1))
            else:
                new.update({f"stratum_{k}": theta[f"stratum_{k}"] + agg[f"stratum_{k}"]
                            for k in _STATS}, stratum_active=active)
                nk, sx, sxx = (new[k] + new[f"stratum_{k}"] for k in _STATS)
        total = float(np.maximum(nk, 0.0).sum())
        if total <= 0.0:
            return new
        nkc = np.maximum(nk, 0.0) + _EPS
        ok = nk >= _DEGENERATE * total
        weights = nkc / nkc.sum()
        means = theta["means"].copy()
        means[ok] = sx[ok] / nkc[ok, None]
        pchol = theta["precisions_cholesky"].copy()
        if ok.any():
            if self.covariance_type == "diag":
                var = np.maximum(sxx[ok] / nkc[ok, None] - means[ok] ** 2, 0.0) + self.reg_covar
                if not np.all(var > 0.0):
                    raise ValueError("GaussianMixture: a component has zero variance "
                                     "(collapsed on identical points); set reg_covar > 0")
                pchol[ok] = 1.0 / np.sqrt(var)
            else:
                m = means[ok]
                cov = sxx[ok] / nkc[ok, None, None] - m[:, :, None] * m[:, None, :]
                cov = 0.5 * (cov + cov.transpose(0, 2, 1))
                cov += self.reg_covar * np.eye(cov.shape[1])
                pchol[ok] = _precisions_cholesky_full(cov)
        new.update(weights=weights, means=means, precisions_cholesky=pchol)
        return new

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        total = 0.0
        for sl in chunks(len(block)):
            total -= float(logsumexp_rows(self._log_prob(block.x[sl], theta)).sum())
        return total

    # ------------------------------------------------------------------ results
    def covariances(self, theta: dict[str, np.ndarray]) -> np.ndarray:
        """Return the covariances ((K, d) diag or (K, d, d) full) of θ."""
        pchol = theta["precisions_cholesky"]
        if self.covariance_type == "diag":
            return 1.0 / (pchol * pchol)
        prec = pchol @ pchol.transpose(0, 2, 1)
        return np.linalg.inv(prec)

    def predict_proba(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Return the responsibilities (n × K) of the rows of ``x`` under θ."""
        logp = self._log_prob(np.asarray(x), theta)
        return np.exp(logp - logsumexp_rows(logp)[:, None])

    def predict(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Most responsible component of each row of ``x``."""
        return np.argmax(self._log_prob(np.asarray(x), theta), axis=1)

    def score_samples(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Log-likelihood ``log p(x_i | θ)`` of each row of ``x`` (scikit-learn's
        ``score_samples``)."""
        x = np.asarray(x)
        out = np.empty(len(x))
        for sl in chunks(len(x)):
            out[sl] = logsumexp_rows(self._log_prob(x[sl], theta))
        return out

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"weights": theta["weights"], "means": theta["means"],
                "covariances": self.covariances(theta),
                "precisions_cholesky": theta["precisions_cholesky"]}
