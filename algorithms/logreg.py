"""Logistic regression: L-BFGS on full batches, scale-free gradient steps on mini-batches
(FSP paper Section 2.1, Eq. 1; Table 1: LR).

The points processed between two barriers form the mini-batch B of Eq. (1): a delta holds the
summed gradient of their losses, their count, their summed loss and the θ version they were
computed at.  ``update_parameter`` looks at the aggregate:

* a **full batch at the current θ** (every point, all computed at the θ being updated: BSPB,
  or a one-process full pass) gives the exact objective and gradient, and with
  ``solver="auto"`` (or ``"lbfgs"``) one L-BFGS evaluation follows (:mod:`._quasinewton`),
  as scikit-learn's default solver does;
* a **stratified batch at θ** (FSP's partial aggregates whose every point is at θ and every
  shard's estimate taken at θ this iteration, module notes below) gives estimates of them,
  and one L-BFGS evaluation marked as estimated follows: it is never Armijo-tested, its
  curvature pairs are screened and its step bounded, and the next exact evaluation re-bases
  the line search (:meth:`._quasinewton.LBFGS.step`);
* anything else (BSPV, FSP, ASP, SSP, ...: partial or stale sums) takes the gradient step of
  Eq. (1), ``θ ← θ − η_t (Σ_B ∇F_i / |B| + α θ)``.  With ``learning_rate="auto"`` the step is
  taken in internally standardised coordinates (the features' mean and deviation from the
  job's sample) with η = 1 / L, L a Lipschitz estimate from the same sample: the step adapts
  to the data's scale, and θ stays in the original units.  A number is Eq. (1)'s η as given,
  in the original coordinates (the paper's experiments).  The L-BFGS memory survives such
  a step: the next full batch at θ restarts the line search there with the pairs kept
  (:meth:`LogisticRegression._lbfgs_step`; issue 19).

Under FSP without data migration a gradient step's mean is a **stratified estimate** of the
full gradient (:meth:`LogisticRegression.stratify`, :class:`._stratum.GradientStratum`): each
worker's gradient sums scaled by n_i / m_i (its shard's points over those it trained at the
latest θ), a worker that trained nothing since counted with its last estimate -- on shards
whose class shares differ from the data's (sorted data); the points of the shards without an
estimate (a shuffled shard, whose batch mean is unbiased) count with the batch mean of their
workers' blocks.  The iteration's batch mean weighs each shard by the points it trained:
with a straggler on a contiguous shard of label-sorted data (Fig. 7: ~160 of its 27,500
points an iteration, while each fast worker passes its whole shard) its class counted ~1/170
of a fast shard and the steps settled a reweighted optimum, +8-10 % above the true one, where
FSPV now tracks full-gradient descent (docs/sync/fsp.md, "Logistic regression on sorted
shards: the stratified gradient").

**A straggler's shard, sampled at θ** (issue 19, Fig. 7; :meth:`LogisticRegression.
_stratified_batch`).  An aggregate whose every point was computed at θ and in which every
worker's estimate was taken on this iteration's window alone (at least
``_stratum.MIN_POINTS`` points, none pooled from an older θ: ``fresh_count`` equals θ's
``shard_count``) is a *stratified batch at θ*: each shard's objective and gradient sums
estimated from its points at θ (a fast worker's whole shard: exact), the shards without an
estimate (shuffled) by the batch mean of their blocks at θ.  It takes an L-BFGS step on
those estimates, marked as estimated (never ``tol``'s test): two estimates are of different
samples, so an estimate is never Armijo-tested nor the reference of an exact evaluation's
test (a lucky-low one kept as the reference rejected every later exact point: a straggler
until 0.03 s simulated, then 142 exact evaluations, none accepted), a pair with an estimated
end is kept only with a plausible curvature (and steers the first exact step after it:
``LBFGS``'s notes, "Estimated pairs"), and a step is at most twice the last move or the
steepest-descent step ``|∇f|/L``, whichever is longer (``LBFGS.step``; the screen keeps H
positive definite, the bound and the line search bound the steps: ``LBFGS``'s notes).
With one straggler FSP runs no whole passes, so before this every update was Eq. (1)'s
gradient step, and at the paper's η = 0.5 the quick LR data needs ~347 of them to the +1 %
target against 6-7 L-BFGS evaluations on full batches (one process, exact sums): at a
barrier of 10-25 ms on the shared development machine FSPV needed 3.4-3.7 s or never got
there in 4 s.  Offline (the straggler's shard one of four, the others exact;
the project's L-BFGS): a window of 160 / 400 / 1,000 points of the straggler's shard at each
θ reaches the target in 9 / 7 / 6 evaluations; one every fourth θ and gradient steps between
in 21.  A window only at an older θ must not feed it: L-BFGS on the fast shards at θ plus
the straggler's estimate from four θ ago never reached the target in 120 evaluations (it
settles where the stale gradient balances).  Measured (``bench/logreg_straggler.py --runs 1
--syncs fspv-off``, ``flegel paper``'s LR job, worker 1 at τ = 32 ms, 4 s, load 1.6-3.3,
with the estimates made safe for L-BFGS as below): contiguous, the target at 0.17-0.34 s
against gradient steps' 2.73 s and never; strided 0.10 and 0.11 s against 2.89 and 3.06 s.

The model declares it (``full_batch_update``, unless ``solver="gd"``), so FSP ends an
iteration when every worker has finished its pass at θ while no worker straggles
(:class:`flegel.sync.fsp.FSP`, "Whole passes"): FSPV then runs the update rule BSPV runs --
BSPV's calibration picks the whole shard as its batch here -- and both take the same L-BFGS
steps.  Without it FSPV's iterations ended with the fastest worker's pass, only 5-24 of ~400
aggregates were full batches, and FSPV reached BSPV's 0.2 s objective 10x later (issue 19).

``tol`` has scikit-learn's meaning: training stops (``stop_reason: algorithm``) once the
largest entry of the gradient of the mean objective ``(1/n) Σ logloss + (α/2)‖w‖²`` is at most
``tol`` -- at an L-BFGS iterate, or for gradient steps averaged over the last full pass of
mini-batch gradients (computed at the several θ of that pass: an estimate, the best a
mini-batch run has without an extra pass).

Binary labels (0/1) use the sigmoid loss of Section 2.1; with more than two classes
(``info.n_classes > 2``) the model is multinomial (softmax) with one weight column per class.
Kernel: one GEMM (GEMV for binary) forward, stable log-loss, one GEMM for the gradient.

Kernels (:mod:`flegel.device`): the loss pass between the GEMMs is numba's or the array
kernel (:func:`_binary_array`, :func:`_multinomial_array`: the same math in whole-array
operations on ``xp``, NumPy, or CuPy with ``device: gpu``, where the GEMMs run on the device
too, the block's losses are copied in and out once and the weights stay on the device until
θ changes).  Evaluation always uses the NumPy array kernel, so it never starts numba.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flegel import Algorithm, Block, DataInfo
from flegel.device import DeviceKernels, to_host
from flegel.jit import njit
from flegel.validation import AnyOf, Boolean, Nullable, Options, Real

from ._common import (
    DEVICE_PARAMS,
    InitSpec,
    RowKernel,
    ThetaCache,
    chunks,
    expect_shape,
    learning_rate_at,
    load_init_arrays,
    on_device,
    resolve_init_path,
    set_params,
    softmax_rows,
    validate_init_file,
)
from ._quasinewton import LBFGS, Preconditioner
from ._stratum import GradientStratum, OneStratumPerWorker

_SCHEDULES = ("constant", "invscaling")
_INITS = ("zeros",)
_SOLVERS = ("auto", "lbfgs", "gd")
#: θ's and the aggregate's keys of the stratified gradient (LogisticRegression.stratify).
_SHARD_KEYS = ("shard_grad_coef", "shard_grad_intercept", "shard_count")
#: The aggregate's batch gradient sums and points of the blocks whose worker has no estimate
#: in θ (its stratum off: a shuffled shard's, or none yet): the M-step stands them for the
#: shards without an estimate (LogisticRegression.update_parameter).
_UNSTRAT_KEYS = ("unstrat_grad_coef", "unstrat_grad_intercept", "unstrat_count")
#: The stratum sample's class counts (its skew test, GradientStratum).
_CLASSES = "classes"
#: The aggregate's (not θ's) sums of the estimates taken wholly at the block's θ this
#: iteration -- a worker's ``n / m`` times its window's loss sum, and its shard's points --,
#: and the loss sums of the blocks without an estimate: a stratified batch at θ
#: (:meth:`LogisticRegression._stratified_batch`) takes an L-BFGS step on them.
_FRESH_KEYS = ("fresh_loss", "fresh_count", "unstrat_loss")


def _has_shards(theta: dict[str, np.ndarray]) -> bool:
    """Whether θ carries the stratified gradient (init_parameter's θ; a θ made by hand with
    only some of the keys takes none of them)."""
    return all(k in theta for k in _SHARD_KEYS)


def _first_bad_label(y: np.ndarray, n_classes: int) -> int:
    """Index of the first label that is not an integer in [0, n_classes), or -1 (NumPy:
    a few passes over the labels, no numba start-up for a check this cheap)."""
    bad = ~((y >= 0) & (y < n_classes))
    if y.dtype.kind == "f":
        bad |= y != np.trunc(y)  # NaN is bad too: it fails every comparison above
    return int(np.argmax(bad)) if bad.any() else -1


@njit(cache=True, nogil=True)
def _binary_kernel(z: np.ndarray, y: np.ndarray, penalty: float,
                   loss: np.ndarray) -> float:  # pragma: no cover - compiled
    """Binary log-loss of margins ``z`` (overwritten by the residual σ(z) − y); writes each
    point's loss (+ ``penalty``) into ``loss`` and returns the change of the summed loss.
    Labels must have been checked (0/1)."""
    dobj = 0.0
    for i in range(z.shape[0]):
        zi = z[i]
        yi = float(y[i])
        e = np.exp(-abs(zi))
        new = max(zi, 0.0) - yi * zi + np.log1p(e) + penalty
        # σ(z) with the numerator chosen, one division: a select, not a branch -- FSP
        # traverses a shard shuffled, where the sign of z flips at random and the branch
        # mispredicted (the loop 0.61 against 0.49 ms a 27,500-point pass; the same bits)
        z[i] = (1.0 if zi >= 0.0 else e) / (1.0 + e) - yi
        dobj += new - loss[i]
        loss[i] = new
    return dobj


@njit(cache=True, nogil=True)
def _multinomial_kernel(z: np.ndarray, y: np.ndarray, penalty: float,
                        loss: np.ndarray) -> float:  # pragma: no cover - compiled
    """Softmax cross-entropy of logits ``z`` (b × C, overwritten by the residual
    softmax − onehot); writes each point's loss (+ ``penalty``) into ``loss`` and returns the
    change of the summed loss.  Labels must have been checked (integers in [0, C))."""
    n, c = z.shape
    dobj = 0.0
    for i in range(n):
        yi = int(y[i])
        m = z[i, 0]
        for j in range(1, c):
            if z[i, j] > m:
                m = z[i, j]
        zy = z[i, yi]
        s = 0.0
        for j in range(c):
            e = np.exp(z[i, j] - m)
            z[i, j] = e
            s += e
        new = m + np.log(s) - zy + penalty
        inv = 1.0 / s
        for j in range(c):
            z[i, j] *= inv
        z[i, yi] -= 1.0
        dobj += new - loss[i]
        loss[i] = new
    return dobj


def _binary_array(xp: Any, z: Any, y: Any, penalty: float, loss: Any) -> float:
    """The array kernel of :func:`_binary_kernel`, in whole-array operations on ``xp``.

    Same arguments and result (``z`` becomes the residual σ(z) − y, ``loss`` is written in
    place; all on ``xp``'s device): the log-loss ``max(z, 0) − yz + log1p(e^{−|z|})`` and
    σ(z) from ``e^{−|z|}`` on the side that cannot overflow.
    """
    e = xp.exp(-xp.abs(z))
    new = xp.maximum(z, 0.0) - y * z + xp.log1p(e) + penalty
    p = xp.where(z >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))
    xp.subtract(p, y, out=z)
    dobj = float((new - loss).sum())
    loss[...] = new
    return dobj


def _multinomial_array(xp: Any, z: Any, y: Any, penalty: float, loss: Any) -> float:
    """The array kernel of :func:`_multinomial_kernel`, in whole-array operations on ``xp``.

    Same arguments and result (``z`` becomes the residual softmax − onehot, ``loss`` is
    written in place; all on ``xp``'s device): the cross-entropy ``m + log s − z_y`` with
    ``m`` the row maximum and ``s = Σ exp(z − m)``.
    """
    rows = xp.arange(z.shape[0])
    yi = y.astype(xp.int64)
    m = z.max(axis=1, keepdims=True)
    zy = z[rows, yi]
    z -= m
    xp.exp(z, out=z)
    s = z.sum(axis=1, keepdims=True)
    new = m[:, 0] + xp.log(s[:, 0]) - zy + penalty
    z *= 1.0 / s
    z[rows, yi] -= 1.0
    dobj = float((new - loss).sum())
    loss[...] = new
    return dobj


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function, overflow-free."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


class LogisticRegression(OneStratumPerWorker, DeviceKernels, RowKernel, Algorithm):
    """L2-regularized logistic regression (binary or multinomial): L-BFGS or gradient steps.

    FSP paper Section 2.1 (Eq. 1) and Table 1 (LR); the module docstring says which optimiser
    runs when.

    Parameters
    ----------
    learning_rate : "auto" or float, default="auto"
        Step size η₀ of gradient steps: ``"auto"`` is 1 / L in standardised coordinates (L a
        Lipschitz estimate of the data's sample), a number (> 0) is η₀ in the original
        coordinates.  L-BFGS iterations need none.
    solver : {"auto", "lbfgs", "gd"}, default="auto"
        ``auto`` and ``lbfgs``: L-BFGS whenever an aggregate is a full batch at the current θ
        (exact) or, under FSP, a stratified batch at θ (estimated), gradient steps otherwise;
        ``gd``: always gradient steps (Eq. 1, the paper's LR).
    tol : float or None, default=None
        Stop once the largest entry of the mean objective's gradient is at most ``tol``
        (scikit-learn's ``tol`` of ``LogisticRegression``); None: only the job's ``stop``
        criteria end training.
    schedule : {"constant", "invscaling"}, default="constant"
        ``constant``: η_t = η₀; ``invscaling``: η_t = η₀ / t^power_t, t the number of
        parameter updates so far (1-based, kept in θ as ``step``).
    power_t : float, default=0.5
        Exponent of the ``invscaling`` schedule (>= 0).
    alpha : float, default=1e-4
        L2 penalty strength (>= 0) on the weights (not the intercept), with scikit-learn's
        ``SGDClassifier`` meaning: the minimized function is
        ``(1/n) Σ_i logloss_i + (α/2) ‖w‖²``.  scikit-learn's ``LogisticRegression(C=C)``
        minimizes ``C Σ_i logloss_i + ½ ‖w‖²``, the same function up to a factor when
        **α = 1 / (C · n)** (n the number of training points).
    fit_intercept : bool, default=True
        Learn an intercept (θ always holds ``intercept``; it stays 0 when False).
    init : "zeros" or path, default="zeros"
        θ⁽⁰⁾: zero weights, or a warm start: a run directory of a logistic-regression run (or
        its ``model.npz``) holding ``coef`` and ``intercept`` of the same shapes (relative to
        the job file's folder).
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the training kernel runs: NumPy/numba, or CuPy on the current CUDA device
        (:mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        On the CPU: numba, the NumPy array kernel, or (``auto``) numba from the first block
        when the job's known work (``max_iterations`` passes) pays its start-up, else the
        array kernel until the work done would have, then numba (:mod:`flegel.device`).

    Notes
    -----
    θ: ``coef`` of shape (d,) for binary or (d, C) for C > 2 classes, ``intercept`` of shape
    (1,) or (C,), and ``step`` (1,); beside them the preconditioner's sample statistics and,
    for FSP without migration, the sum of the workers' shard-gradient estimates
    (``shard_grad_coef``, ``shard_grad_intercept``, ``shard_count``: :meth:`stratify`; zeros
    under every other model) and the sample's class counts (``class_shares``, its skew test;
    without it the estimate stays off).  The aggregate carries beside them the batch sums of
    the blocks whose worker has no estimate in θ (``unstrat_grad_coef``,
    ``unstrat_grad_intercept``, ``unstrat_count``), never kept in θ.
    The per-point loss, kept in state so that the
    ``"objective"`` deltas are exact changes, is ``F_i = logloss_i + (α/2) ‖w‖²`` -- every point
    carries its share of the penalty, so ``Σ_i F_i = n · [(1/n) Σ logloss + (α/2)‖w‖²]`` is
    exactly n times the function the gradient steps minimize (and 1/C times scikit-learn's
    objective).  :meth:`evaluate` returns the same sum for a θ; :meth:`log_loss` returns the
    unpenalized part.  Labels must be 0/1 (binary) or 0..C−1 (multinomial).
    """

    #: update_parameter returns new arrays: the master passes θ without a copy.
    updates_theta_in_place = False

    name = "logreg"
    needs_labels = True
    label_kind = "classes"
    objective_name = "log-loss"

    # The parameters, as set_params stores them from PARAMS.
    learning_rate: Any
    solver: str
    tol: float | None
    schedule: str
    power_t: float
    alpha: float
    fit_intercept: bool
    init: str
    PARAMS = {**DEVICE_PARAMS,
              "learning_rate": AnyOf(Options(("auto",)), Real(lo=0.0, lo_open=True,
                                                               finite=True)),
              "solver": Options(_SOLVERS), "tol": Nullable(Real(lo=0.0, finite=True)),
              "schedule": Options(_SCHEDULES), "power_t": Real(lo=0.0, finite=True),
              "alpha": Real(lo=0.0, finite=True), "fit_intercept": Boolean(),
              "init": InitSpec(_INITS)}

    def __init__(self, learning_rate: Any = "auto", schedule: str = "constant",
                 power_t: float = 0.5, alpha: float = 1e-4, fit_intercept: bool = True,
                 init: str = "zeros", device: str = "cpu", kernel: str = "auto",
                 solver: str = "auto", tol: float | None = None) -> None:
        super().__init__()
        set_params(self, locals())
        self._set_device(device, kernel)
        self._weights: ThetaCache[tuple[Any, Any]] = ThetaCache()
        # The master's optimiser state (never sent): the L-BFGS machine, the θ version it
        # asked to evaluate, the last pass's mini-batch gradient sums, and the stop flag.
        self._lbfgs: LBFGS | None = None
        self._trial_step = -1.0
        self._pass: list[Any] = [0.0, 0.0, 0.0]
        self._converged = False
        # A worker's estimate of its shard's gradient (stratify), and whether several
        # workers of one process asked for one (then none has it).
        self._stratum: GradientStratum | None = None
        self._shared = False
        self._zeros: tuple[Any, dict[str, np.ndarray]] | None = None  # _block_zeros' cache
        # A worker's fresh estimate sent so far in its current window: (t, loss, points)
        # (_fresh_piece).
        self._fresh: tuple[int, float, float] = (-1, 0.0, 0.0)

    #: The first update waits until every point's gradient is in the aggregate, all at θ⁰
    #: (``Algorithm.cover_before_update``): FSP's first step is then the full batch's L-BFGS
    #: step, as BSPV's is, not a gradient step without a slow worker's shard.
    cover_before_update = True

    @property
    def full_batch_update(self) -> bool:  # type: ignore[override]
        """True unless ``solver="gd"``: a full batch at θ is an L-BFGS step (FSP then lets a
        pass-long iteration end when every worker finished its pass, :mod:`flegel.sync.fsp`)."""
        return self.solver != "gd"

    def stratify(self, n_points: int, shard: int | None = None) -> GradientStratum | None:
        """Take gradient steps on a stratified estimate of every shard's gradient instead of
        the sum over the points an iteration trained (:class:`~._stratum.GradientStratum`):
        FSP calls it on every worker without data migration (issue 19, Fig. 7).  The
        estimate's changes travel in the aggregate (``shard_grad_coef``,
        ``shard_grad_intercept``, ``shard_count``), θ holds their sum, and a gradient step
        uses the estimates in θ and, for shards without one, the batch mean of their workers'
        blocks (:meth:`_stratified_mean`).  Returns the stratum,
        which FSP's worker policy checkpoints.

        One per worker: None from a second call on the same instance
        (:class:`~._stratum.OneStratumPerWorker`).  ``shard`` (the worker's index) is not
        read: the estimate is the worker's own, not a master's sample of its shard."""
        return self._claim_stratum(lambda: GradientStratum(n_points, shares=_CLASSES))

    # ------------------------------------------------------------------ set-up
    def validate(self, base_dir: Path) -> None:
        self.check_device()
        validate_init_file(self.init, base_dir, _INITS, "coef", None, self)

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        if info.n_classes is None:
            raise ValueError("LogisticRegression needs labelled data (a label column)")
        n_classes = int(info.n_classes)
        if info.sample_y is not None and len(info.sample_y):
            self._check_labels(np.asarray(info.sample_y), 2 if n_classes <= 2 else n_classes)
        d = info.n_features
        if n_classes <= 2:
            coef, intercept = np.zeros(d), np.zeros(1)
        else:
            coef, intercept = np.zeros((d, n_classes)), np.zeros(n_classes)
        path = resolve_init_path(self.init, info.base_dir, _INITS)
        if path is not None:
            arrays = load_init_arrays(path, "coef", self)
            job = f"logreg with {n_classes} classes on {d} features"
            coef = expect_shape(path, "coef", arrays["coef"], coef.shape, job)
            intercept = expect_shape(path, "intercept", arrays.get("intercept", intercept),
                                     intercept.shape, job)
        self._lbfgs, self._trial_step, self._converged = None, -1.0, False
        self._pass = [0.0, 0.0, 0.0]
        sample = np.asarray(info.sample, dtype=np.float64)
        # the data's class counts in the sample: the strata's skew test (stratify; zeros,
        # no sample labels: no test)
        n_labels = n_classes if n_classes > 2 else 2
        shares = np.zeros(n_labels)
        if info.sample_y is not None and len(info.sample_y):
            shares = np.bincount(np.asarray(info.sample_y).astype(np.int64),
                                 minlength=n_labels).astype(np.float64)
        shift, scale = Preconditioner.estimate(sample, self.fit_intercept)
        lip = Preconditioner(shift, scale).lipschitz(
            sample, 0.25 if n_classes <= 2 else 0.5, self.alpha, self.fit_intercept)
        return {"coef": coef, "intercept": intercept, "step": np.zeros(1),
                "shift": shift, "scale": scale, "lipschitz": np.array([lip]),
                "n_points": np.array([float(info.n_points)]), "class_shares": shares,
                **self._shard_zeros(coef, intercept)}

    @staticmethod
    def _shard_zeros(coef: np.ndarray, intercept: np.ndarray,
                     keys: tuple[str, str, str] = _SHARD_KEYS) -> dict[str, np.ndarray]:
        """The stratified gradient's keys (:meth:`stratify`), zero: in θ the sum of every
        worker's latest estimate of its shard's gradient sums and of its points, in the
        aggregate their changes (``keys``: :data:`_SHARD_KEYS`) and the sums of the blocks
        without an estimate (:data:`_UNSTRAT_KEYS`)."""
        return {keys[0]: np.zeros_like(coef), keys[1]: np.zeros_like(intercept),
                keys[2]: np.zeros(1)}

    def _block_zeros(self, coef: np.ndarray, intercept: np.ndarray) -> dict[str, np.ndarray]:
        """:meth:`_shard_zeros` of both key sets, made once per shape and read-only: a block
        without a stratum (every model but FSP without migration) sends these, so its cost
        is none (the aggregate's sums make new arrays, :meth:`Algorithm.aggregate`)."""
        shape = (coef.shape, intercept.shape)
        if self._zeros is None or self._zeros[0] != shape:
            zeros = {**self._shard_zeros(coef, intercept),
                     **self._shard_zeros(coef, intercept, _UNSTRAT_KEYS),
                     **{k: np.zeros(1) for k in _FRESH_KEYS}}
            for v in zeros.values():
                v.flags.writeable = False
            self._zeros = (shape, zeros)
        return self._zeros[1]

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        return {"loss": np.zeros(n)}

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        agg: dict[str, Any] = {"grad_coef": np.zeros_like(theta["coef"]),
                               "grad_intercept": np.zeros_like(theta["intercept"]),
                               "count": 0.0, "objective": 0.0, "loss": 0.0, "at_step": 0.0}
        if _has_shards(theta):
            agg.update(self._shard_zeros(theta["coef"], theta["intercept"]))
            agg.update(self._shard_zeros(theta["coef"], theta["intercept"], _UNSTRAT_KEYS))
            agg.update({k: np.zeros(1) for k in _FRESH_KEYS})
        return agg

    @staticmethod
    def _check_labels(y: np.ndarray, n_classes: int) -> None:
        """Raise ``ValueError`` unless every label is an integer in [0, n_classes)."""
        y = np.ascontiguousarray(y)
        if y.dtype.kind not in "iuf":
            raise ValueError(f"LogisticRegression: labels must be numbers, got dtype {y.dtype}")
        bad = _first_bad_label(y, n_classes) if len(y) else -1
        if bad >= 0:
            what = "0 or 1" if n_classes == 2 else f"integers in [0, {n_classes - 1}]"
            raise ValueError(f"LogisticRegression: labels must be {what}, found {y[bad].item()}")

    # ------------------------------------------------------------------ kernels
    @staticmethod
    def _loss_pass(xp: Any, coef: Any, intercept: Any, x: Any, y: Any, penalty: float,
                   loss: Any, compiled: bool) -> tuple[float, Any]:
        """Forward GEMM + loss pass (numba's kernel when ``compiled``, else the array kernel
        on ``xp``; everything on ``xp``'s device): writes per-point losses (+ ``penalty``)
        into ``loss``; returns the change of their sum and the residual ∂loss/∂z ((b,)
        binary, (b, C) multinomial).  Labels must have been checked."""
        multi = coef.ndim == 2
        res = x @ coef
        res += intercept if multi else intercept[0]
        if compiled:
            dobj = (_multinomial_kernel if multi else _binary_kernel)(res, y, penalty, loss)
        else:
            dobj = (_multinomial_array if multi else _binary_array)(xp, res, y, penalty, loss)
        return float(dobj), res

    def _penalty(self, theta: dict[str, np.ndarray]) -> float:
        coef = theta["coef"]
        return 0.5 * self.alpha * float(np.vdot(coef, coef))

    def work_units(self, b: int, d: int, n_classes: int) -> float:
        """Work units (:mod:`flegel.device`) of a block of ``b`` points: b·d·C (C = 1 for
        binary), the multiply-adds of each of its two GEMMs."""
        return float(b * d * n_classes)

    def _update_rows(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        """The vectorized kernel of a block; both hooks run it (one piece of math).

        The loss pass is numba's when :meth:`use_compiled` says so, else the array kernel
        on :attr:`xp`; on a GPU the block and its losses are copied to the device once and
        the losses and the gradients back.
        """
        if block.y is None:
            raise ValueError("LogisticRegression needs labelled data (a label column)")
        coef = theta["coef"]
        y = np.ascontiguousarray(block.y)
        self._check_labels(y, coef.shape[1] if coef.ndim == 2 else 2)
        b, d = block.x.shape
        compiled = self.use_compiled(self.work_units(b, d, coef.shape[1] if coef.ndim == 2
                                                     else 1))
        xp = self.xp  # NumPy whenever the compiled kernel runs
        w, w0 = self._weights.get(theta, lambda th: (xp.asarray(th["coef"]),
                                                     xp.asarray(th["intercept"])))
        with on_device(xp, block.state["loss"]) as (loss,):
            x = xp.asarray(block.x, dtype=np.float64)
            dobj, res = self._loss_pass(xp, w, w0, x, xp.asarray(y), self._penalty(theta),
                                        loss, compiled)
            grad_coef = x.T @ res
            grad_intercept = res.sum(axis=0, keepdims=coef.ndim == 1)
            loss_sum = float(loss.sum())
        grad_intercept = np.ascontiguousarray(to_host(grad_intercept), dtype=np.float64)
        if not self.fit_intercept:
            grad_intercept[...] = 0.0
        # at_step: Σ (θ version × points), so the master can tell a full batch at its θ
        step = float(theta["step"][0]) if "step" in theta else 0.0
        agg = {"grad_coef": to_host(grad_coef), "grad_intercept": grad_intercept,
               "count": float(b), "objective": dobj, "loss": loss_sum, "at_step": step * b}
        if _has_shards(theta):
            agg.update(self._shard_piece(agg, y, theta, t))
        return agg

    def _shard_piece(self, agg: dict, y: np.ndarray, theta: dict[str, np.ndarray], t: int
                     ) -> dict[str, np.ndarray]:
        """The change of this worker's estimate of its shard's gradient sums that the block
        (labels ``y``) makes (:meth:`stratify`; zeros without a stratum, before it is armed,
        or once the skew test found the shard shuffled) and, where the worker has no
        estimate in θ after it, the block's batch sums as :data:`_UNSTRAT_KEYS` (the M-step
        stands them for that shard: :meth:`update_parameter`)."""
        stratum = self._stratum
        coef = theta["coef"]
        zeros = self._block_zeros(coef, theta["intercept"])
        if stratum is None or not stratum.armed:
            return zeros
        if stratum.done:
            return {**zeros, **self._unstrat(agg)}
        points = int(agg["count"])
        reference = None if stratum.sorted else theta.get("class_shares")
        counts = None if stratum.sorted else np.bincount(
            y.astype(np.int64, copy=False), minlength=coef.shape[1] if coef.ndim == 2 else 2
        ).astype(np.float64)
        fresh = None
        # the skew test first: a shuffled shard's stratum switches off for good there
        if stratum.screen(t, counts, points, reference):
            fresh = {"shard_grad_coef": np.asarray(agg["grad_coef"], dtype=np.float64),
                     "shard_grad_intercept": np.asarray(agg["grad_intercept"],
                                                        dtype=np.float64),
                     "shard_count": np.array([float(points)]),
                     "shard_loss": np.array([float(agg["loss"])])}
            if counts is not None:
                fresh[_CLASSES] = counts
        piece = stratum.observe(t, points, {k: zeros[k] for k in _SHARD_KEYS}, fresh,
                                reference=reference)
        out = {k: piece[k] for k in _SHARD_KEYS}
        out.update({k: zeros[k] for k in (*_UNSTRAT_KEYS, "unstrat_loss")} if stratum.on
                   else self._unstrat(agg))
        out.update(self._fresh_piece(stratum, t))
        return out

    def _fresh_piece(self, stratum: GradientStratum, t: int) -> dict[str, np.ndarray]:
        """This block's change of the worker's *fresh* estimate (:data:`_FRESH_KEYS`): its
        shard's loss sum ``n / m · L`` and points ``n`` where its estimate is taken on
        iteration ``t``'s window alone (at least ``_stratum.MIN_POINTS`` points, so the
        stratum pooled no earlier window: every point at this block's θ; the stratum's
        ``fresh_estimate``), else zeros.  Sent as the change since the window's last block,
        so a commit's pieces add up to the estimate its last block made."""
        last_t, last_loss, last_count = self._fresh
        if last_t != t:
            last_loss = last_count = 0.0
        loss = count = 0.0
        if stratum.on and stratum.t == t and stratum.fresh_estimate:
            loss = stratum.n / stratum.sampled * float(stratum.fresh["shard_loss"][0])
            count = float(stratum.n)
        self._fresh = (t, loss, count)
        return {"fresh_loss": np.array([loss - last_loss]),
                "fresh_count": np.array([count - last_count])}

    @staticmethod
    def _unstrat(agg: dict) -> dict[str, Any]:
        """The block's batch sums as :data:`_UNSTRAT_KEYS`: its worker has no estimate in θ."""
        # copies: a policy that accumulated in place would otherwise add them twice
        return {"unstrat_grad_coef": agg["grad_coef"].copy(),
                "unstrat_grad_intercept": agg["grad_intercept"].copy(),
                "unstrat_count": np.array([agg["count"]]),
                "unstrat_loss": np.array([agg["loss"]])}

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        """θ one version on (module notes): the shard estimates' changes added to θ; a full
        batch at θ takes the L-BFGS step on the batch's exact sums, a stratified batch at θ
        (:meth:`_stratified_batch`) an estimated L-BFGS step on the stratified mean
        (:meth:`_stratified_mean`: the estimates in θ, and the batch mean of the workers
        without one for their shards' points); anything else a gradient step on the batch
        mean or, under :meth:`stratify`, on the stratified mean."""
        theta = self._with_shards(agg, theta)
        count = float(agg["count"])
        if count <= 0.0:
            return dict(theta)
        g_coef = agg["grad_coef"] / count + self.alpha * theta["coef"]
        g_int = agg["grad_intercept"] / count
        if "shift" not in theta:  # a θ of an older layout: Eq. (1) as it was
            return self._plain_step(theta, g_coef, g_int)
        step = float(theta["step"][0])
        n = float(theta["n_points"][0])
        at_theta = abs(float(agg["at_step"]) - step * count) < 0.5
        if at_theta and count >= n - 0.5 and self.solver != "gd":
            return self._lbfgs_step(theta, float(agg["loss"]) / count, g_coef, g_int)
        # The L-BFGS memory stays: its pairs are secant pairs of the objective at θ, and
        # the next full batch at θ restarts the line search there (LBFGS.restart).
        self._check_pass(agg, theta, count, n)
        if _has_shards(theta):
            g_coef, g_int = self._stratified_mean(agg, theta, n, g_coef, g_int)
            f = self._stratified_batch(agg, theta, n) if at_theta else None
            if f is not None and self.solver != "gd":
                return self._lbfgs_step(theta, f, g_coef, g_int, exact=False)
        if self.learning_rate != "auto":
            return self._plain_step(theta, g_coef, g_int)
        pre = Preconditioner(theta["shift"], theta["scale"])
        eta = learning_rate_at(1.0 / float(theta["lipschitz"][0]), self.schedule,
                               self.power_t, step + 1.0)
        u = pre.to_u(theta["coef"], theta["intercept"]) - eta * pre.grad_u(g_coef, g_int)
        return self._at(theta, *pre.from_u(u, theta["coef"].shape))

    def _stratified_mean(self, agg: dict, theta: dict[str, np.ndarray], n: float,
                         g_coef: np.ndarray, g_int: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """The mean objective's gradient of a gradient step (:meth:`stratify`): the sum of
        the estimates in θ (shards whose stratum is on, ``shard_count`` points) plus, for
        the ``n − shard_count`` points of the shards without one (a shuffled shard's stratum
        is off: its batch mean is unbiased), the batch mean of the blocks of those workers
        (:data:`_UNSTRAT_KEYS`) -- each shard weighed by its points, not by the points it
        trained this iteration.  One balanced (straddling) shard among sorted ones keeps
        the others' estimates.  The batch mean ``(g_coef, g_int)`` where no estimate is in
        θ, or where some shard has none and no block without one came in."""
        est = float(theta["shard_count"][0])
        rest = float(agg[_UNSTRAT_KEYS[2]][0]) if _UNSTRAT_KEYS[2] in agg else 0.0
        if est < 0.5 or (est < n - 0.5 and rest <= 0.0):
            return g_coef, g_int
        sc, si = theta["shard_grad_coef"], theta["shard_grad_intercept"]
        if rest > 0.0 and est < n - 0.5:
            w = (n - est) / rest
            sc = sc + w * agg["unstrat_grad_coef"]
            si = si + w * agg["unstrat_grad_intercept"]
        return sc / n + self.alpha * theta["coef"], si / n

    def _stratified_batch(self, agg: dict, theta: dict[str, np.ndarray], n: float
                          ) -> float | None:
        """The mean objective at θ of a *stratified batch* at θ, or None (module notes,
        "A straggler's shard, sampled at θ"): every block of ``agg`` at θ (the caller's
        test), every estimate in θ taken at θ this iteration (``fresh_count`` is
        ``shard_count``: no worker's estimate is an older θ's or pooled earlier windows),
        and the shards without an estimate, if any, stood for by the batch mean of their
        workers' blocks (on shuffled shards every stratum is off: the batch mean at θ, as
        the gradient step's).  Each shard's loss sum is then its worker's ``n / m`` times
        its window's (a fast worker's whole shard: its exact sum), as the gradient of
        :meth:`_stratified_mean` is: an estimate of θ's objective from points at θ alone,
        never a sum of losses seen at other θ.  None without a stratum on any worker (data
        migration, one instance shared in a process): no shard is estimated and no block's
        points go to the batch mean (``est < n`` with ``rest`` 0)."""
        if _FRESH_KEYS[0] not in agg:
            return None  # an aggregate made without these keys (a defence: blocks add them)
        est = float(theta["shard_count"][0])
        fresh = float(agg["fresh_count"][0])
        rest = float(agg[_UNSTRAT_KEYS[2]][0])
        if abs(fresh - est) > 0.5 or (est < n - 0.5 and rest <= 0.0):
            return None
        if est < 0.5 and rest < float(agg["count"]) - 0.5:
            return None  # a block neither estimated nor batch-mean (a stratum not armed)
        loss = float(agg["fresh_loss"][0])
        if est < n - 0.5:
            loss += (n - est) / rest * float(agg["unstrat_loss"][0])
        return loss / n

    def termination_check(self, agg: dict, t: int) -> bool:
        """True once the mean objective's gradient met ``tol`` (set by the update)."""
        return self._converged

    def _at(self, theta: dict[str, np.ndarray], coef: np.ndarray,
            intercept: np.ndarray) -> dict[str, np.ndarray]:
        """θ at (coef, intercept), one version on."""
        if not self.fit_intercept:
            intercept = np.zeros_like(theta["intercept"])
        return {**theta, "coef": coef, "intercept": intercept.reshape(theta["intercept"].shape),
                "step": theta["step"] + 1.0}

    def _met_tol(self, g_coef: np.ndarray, g_int: np.ndarray) -> bool:
        if self.tol is None:
            return False
        top = max(float(np.max(np.abs(g_coef))) if g_coef.size else 0.0,
                  float(np.max(np.abs(g_int))) if self.fit_intercept else 0.0)
        return top <= self.tol

    def _lbfgs_step(self, theta: dict[str, np.ndarray], f: float, g_coef: np.ndarray,
                    g_int: np.ndarray, exact: bool = True) -> dict[str, np.ndarray]:
        """One L-BFGS evaluation: ``f`` and ∇f (``g_coef``, ``g_int``) at θ, the point
        asked for last -- a full batch's exact ones, or (``exact=False``) a stratified
        batch's estimates at θ (:meth:`_stratified_batch`), which never meet ``tol``.

        When θ is not that point (gradient steps on partial aggregates came in between --
        FSP, BSPV with an occasional short batch --, a roll-back) the line search restarts
        at θ with the curvature memory kept (:meth:`LBFGS.restart`), so a run whose
        aggregates are only sometimes full batches keeps the quasi-Newton progress of the
        earlier ones (issue 19).  Only aggregates whose every point is at θ reach here: a
        stale aggregate, or a shard's estimate from an older θ, never feeds L-BFGS.  The
        Armijo test compares exact evaluations only; an estimate is taken without it, its
        pairs screened and its step bounded (``exact``; :meth:`LBFGS.step`).  A fresh
        machine starts only with the run (or a resumed one: the memory is never saved).
        """
        pre = Preconditioner(theta["shift"], theta["scale"])
        step = float(theta["step"][0])
        u = pre.to_u(theta["coef"], theta["intercept"])
        g_u = pre.grad_u(g_coef, g_int)
        if not self.fit_intercept:
            g_u[g_coef.size:] = 0.0
        if self._lbfgs is None:
            self._lbfgs = LBFGS(float(theta["lipschitz"][0]))
            nxt = self._lbfgs.step(u, f, g_u, exact)
        elif self._trial_step != step:
            nxt = self._lbfgs.restart(u, f, g_u, exact)
        else:
            nxt = self._lbfgs.step(u, f, g_u, exact)
        if exact and self._lbfgs.accepted and self._met_tol(g_coef, g_int):
            self._converged = True
            nxt = u  # stay at the iterate that met the tolerance
        self._trial_step = step + 1.0
        return self._at(theta, *pre.from_u(nxt, theta["coef"].shape))

    def _check_pass(self, agg: dict, theta: dict[str, np.ndarray], count: float,
                    n: float) -> None:
        """Accumulate mini-batch gradients; after each full pass, test ``tol`` on their mean
        (plus the penalty's gradient at the current θ)."""
        if self.tol is None:
            return
        gc, gi, c = self._pass
        self._pass = [agg["grad_coef"] + gc, agg["grad_intercept"] + gi, c + count]
        if self._pass[2] >= n - 0.5:
            gc, gi, c = self._pass
            self._pass = [0.0, 0.0, 0.0]
            self._converged = self._met_tol(gc / c + self.alpha * theta["coef"], gi / c)

    def _plain_step(self, theta: dict[str, np.ndarray], g_coef: np.ndarray,
                    g_int: np.ndarray) -> dict[str, np.ndarray]:
        """Eq. (1) with the given η in the original coordinates, on the mean objective's
        gradient (``g_coef`` with the penalty's part, ``g_int``)."""
        step = theta["step"] + 1.0
        rate = 0.1 if self.learning_rate == "auto" else float(self.learning_rate)
        eta = learning_rate_at(rate, self.schedule, self.power_t, float(step[0]))
        coef = theta["coef"] - eta * g_coef
        intercept = theta["intercept"]
        if self.fit_intercept:
            intercept = intercept - eta * g_int
        return {**theta, "coef": coef, "intercept": intercept, "step": step}

    @staticmethod
    def _with_shards(agg: dict, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """θ with the aggregate's changes of the workers' shard estimates added
        (:meth:`stratify`); θ itself where it has none of those keys (an older layout, or
        one made by hand)."""
        if not _has_shards(theta) or _SHARD_KEYS[0] not in agg:
            return theta
        return {**theta, **{k: theta[k] + agg[k] for k in _SHARD_KEYS}}

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        assert block.y is not None  # needs_labels: the job check guarantees labelled data
        return self.log_loss(theta, block.x, block.y) + len(block) * self._penalty(theta)

    # ------------------------------------------------------------------ helpers
    def log_loss(self, theta: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
        """Return the summed log-loss (no penalty) of θ on ``x``, ``y`` (the NumPy array
        kernel, a chunk at a time)."""
        coef, intercept = theta["coef"], theta["intercept"]
        total = 0.0
        for sl in chunks(len(x)):
            xx = np.asarray(x[sl], dtype=np.float64)
            yy = np.ascontiguousarray(y[sl])
            self._check_labels(yy, coef.shape[1] if coef.ndim == 2 else 2)
            total += self._loss_pass(np, coef, intercept, xx, yy, 0.0, np.zeros(len(xx)),
                                     False)[0]
        return float(total)

    def decision_function(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Margins ``x·w + b`` of the rows of ``x``: (n,) binary, (n, C) multinomial."""
        coef, intercept = theta["coef"], theta["intercept"]
        z = np.asarray(x, dtype=np.float64) @ coef
        z += intercept[0] if coef.ndim == 1 else intercept
        return z

    def predict_proba(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Class probabilities (n × C; C = 2 for binary) of the rows of ``x``."""
        z = self.decision_function(theta, x)
        if z.ndim == 1:
            p = _sigmoid(z)
            return np.column_stack([1.0 - p, p])
        return softmax_rows(z, out=z)

    def predict(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Most probable label of each row of ``x``."""
        return np.argmax(self.predict_proba(theta, x), axis=1)

    def evaluate_accuracy(self, theta: dict[str, np.ndarray], x: np.ndarray,
                          y: np.ndarray) -> float:
        """Fraction of the rows of ``x`` whose predicted label equals ``y``."""
        return float(np.mean(self.predict(theta, x) == np.asarray(y).astype(np.int64)))

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"coef": theta["coef"], "intercept": theta["intercept"]}
