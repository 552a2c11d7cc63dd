"""The algorithm API: what a user subclasses to run an iterative algorithm on flegel.

The hooks are Flegel's (FSP paper, Section 5.1, Fig. 5) with Python names:

=====================  ======================================  =====================================
Flegel                 flegel                                  meaning
=====================  ======================================  =====================================
initParameter()        ``init_parameter(info)``                θ⁽⁰⁾
updateDataPoint(...)   ``update_data_point(point, state, θ, t)``  one point's aggregator delta Δ
aggregate(a, b)        ``aggregate(target, delta)``            accumulate aggregators
updateParameter(a, θ)  ``update_parameter(agg, θ)``            new θ from an aggregate
terminationCheck(a,t)  ``termination_check(agg, t)``           stop?
voteToHalt()           ``vote_to_halt()``                      skip this point from now on
=====================  ======================================  =====================================

Conventions
-----------
* θ (``theta``) is a ``dict`` of NumPy arrays.  Every entry is broadcast to the workers, so an
  incremental-EM algorithm may keep its sufficient statistics inside θ (Section 2.2, Eq. 3).
* An aggregator is a ``dict`` of NumPy arrays (or floats) that always holds the key
  ``"objective"``: the change, caused by the points processed, of the sum of per-point losses
  (Flegel reports the objective change of what it processed; the runtime sums these changes
  into the *online objective* used for convergence checks and time-to-target).
* Objectives are minimized.  Likelihood-based algorithms report the negative log-likelihood.
* Per-point state (``init_state``) lives beside the points on the worker, survives across
  iterations and moves with the points when data migrate.
* The unit the runtime schedules is a :class:`~flegel.block.Block` of points.  The default
  :meth:`Algorithm.update_block` loops :meth:`Algorithm.update_data_point`, so a new algorithm
  works at once; built-ins override it with vectorized kernels.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from flegel.block import Block, PointState
from flegel.state import Stateful
from flegel.validation import Constraint

Params = dict[str, np.ndarray]
Aggregator = dict[str, Any]

__all__ = ["Algorithm", "DataInfo", "Params", "Aggregator"]


@dataclass
class DataInfo:
    """What ``init_parameter`` may know about the data before training.

    Attributes
    ----------
    n_features : int
        Number of columns of a data point.
    n_points : int
        Number of points over all workers.
    n_workers : int
        Number of workers.
    sample : ndarray of shape (m, n_features)
        A seeded uniform sample of the data gathered from all workers (at most
        ``sample_size`` rows in total), for data-dependent initialization such as k-means++.
    sample_y : ndarray of shape (m,) or None
        Labels of ``sample`` when the data are labelled.
    sample_sizes : tuple of int
        Rows of ``sample`` from each worker's shard, in rank order (its first
        ``sample_sizes[0]`` rows are worker 1's, ...); empty where not known.  K-means' M-step
        under FSP without migration re-labels a straggler's rows (``KMeans.stratify``).
    n_classes : int or None
        Number of distinct labels (``max(y) + 1`` over all shards) for labelled data.
    seed : int
        The job's seed.
    dtype : numpy dtype
        dtype of the data.
    base_dir : Path
        Folder of the job file: relative paths in ``params`` resolve against it.
    """

    n_features: int
    n_points: int
    n_workers: int
    sample: np.ndarray
    sample_y: np.ndarray | None = None
    sample_sizes: tuple[int, ...] = ()
    n_classes: int | None = None
    seed: int = 0
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float64))
    base_dir: Path = field(default_factory=Path.cwd)


class Stratification(Stateful, Protocol):
    """A worker's stratified estimate of its shard (:meth:`Algorithm.stratify`): FSP's worker
    policy checkpoints it as a nested state and arms it as the worker's first iteration
    begins, so the blocks run before (the warm-up, also after a resume) are not recorded."""

    def arm(self, sampled: bool = False, calibration: bool = False) -> None:
        """Record blocks from now on; ``sampled``: this iteration trains the same share of
        every shard, a uniform sample (FSPV's sampled first pass), whose estimate is taken
        whatever the sample's class shares; ``calibration``: it is FSPV's sampled calibration
        (the first such share, at θ⁰; K-means' skew test at θ⁰ applies there only)."""
        ...


class Algorithm:
    """Base class of every flegel algorithm.

    Subclasses take their hyper-parameters as keyword arguments in ``__init__`` (the job's
    ``params`` mapping is passed as keywords) and implement at least
    :meth:`init_parameter`, :meth:`update_data_point` (or :meth:`update_block`),
    :meth:`update_parameter` and :meth:`evaluate`.

    Class attributes
    ----------------
    name : str
        Short name shown in logs.
    needs_labels : bool
        The data must carry a label column (supervised algorithms).
    label_kind : {"any", "classes", "real"}
        What labels the algorithm takes, checked on every shard at load
        (:mod:`flegel.data.checks`): ``"classes"`` integers ``0 .. C-1``, ``"real"`` finite
        numbers, ``"any"`` no check (the default: labels the algorithm ignores).
    nonnegative_features : bool
        Every feature value must be >= 0 (NMF); default False.
    objective_name : str
        What the objective is, for reports (e.g. ``"inertia"``).
    full_batch_update : bool
        :meth:`update_parameter` takes a stronger step on a *full batch at the current θ*
        (every point, all computed at that θ) than on a partial or stale aggregate -- e.g.
        logistic regression's L-BFGS step.  FSP then ends an iteration whose interval
        covers every worker's pass when every worker has finished it, not the fastest
        (:mod:`flegel.sync.fsp`).  Default False: a partial aggregate is as good per point.
    progress_per_update : bool
        :meth:`update_parameter` makes about the same progress per call whatever the number
        of points aggregated -- a mini-batch step on the mean gradient (FSP paper Eq. 1),
        while the gradient's noise is small against the step.  FSPV then takes the shortest
        interval its probes allow: more updates, not larger batches
        (:mod:`flegel.interval.multistage`).  Default False: progress grows with the
        points aggregated (EM's statistics, a full-batch step).
    sampled_first_step : bool
        An M-step on part of a pass at θ⁽⁰⁾ is the M-step of a sample of the data: incremental
        EM with per-point sufficient statistics (GMM, FCM, NMF; K-means from a raw seeding,
        ``n_init=1``).  FSP then takes
        its first update after the same share of every worker's shuffled shard, not a whole
        pass -- an eighth, raised so that the smallest shard gives 1,000 points
        (:func:`flegel.interval.multistage.sample_fraction`) -- when all of these hold:
        ``interval: multistage`` (FSPV) with ``probes: interleaved``, no ``eta_ms``,
        ``shuffle`` on, no data migration, and every shard known and the sample less than
        half the smallest (``WHOLE_SAMPLE_SHARE``: shards of more than 2,000 points at
        the 1,000-point floor); otherwise a whole pass (with migration,
        ``cover_before_update``'s hold instead: :func:`flegel.sync.fsp.sampled_calibration`).
        FSP's default migration is async: a plain ``fspv`` job keeps the whole first pass;
        ``migration: {mode: off}`` (the ``fspv-off`` preset) takes the sample.  Default
        False.
    sampled_first_pass : bool
        Where ``sampled_first_step`` is taken, the next M-steps of the first pass may be too:
        the algorithm's M-step stands on a stratified estimate of each shard
        (:meth:`stratify`), so a step after a share of every shard is mini-batch EM's on that
        sample, not incremental EM's pulled back toward θ⁽⁰⁾ by the points trained at it.
        FSPV then runs the first pass as sampled iterations, each as large as the share
        trained so far, up to half of every shard, where no worker was paused
        (:data:`flegel.sync.fsp.SAMPLED_FIRST_PASS`; K-means).  Default False.
    cover_before_update : bool
        θ is a function of a *sum over every point's contribution*, and a point adds
        nothing to it before its first visit: incremental EM's statistics kept in θ (FSP
        paper Section 2.2, Eq. 3: K-means' per-cluster sums, GMM's and FCM's, NMF's ``WᵀW``
        and ``WᵀX``), or a gradient sum that a full batch at θ turns into a stronger step
        (logistic regression).  An M-step taken while some points are unvisited fits θ to
        the others only -- on contiguous shards of sorted data, without a slow worker's
        clusters -- and the run can settle in another basin.  FSP with data migration then
        holds θ (no update; the barrier still measures speeds and migration plans its first
        round, moving the points nobody trained to fast workers) until every point has been
        visited once, so the first update is the full-batch one (:mod:`flegel.sync.fsp`,
        "Coverage") -- not where ``sampled_first_step`` applies (FSPV's sampled
        calibration, a random sample of every shard).  Default False: an update on any batch is
        unbiased (a mini-batch gradient step, the CNN's), and a hold would only delay it.
    updates_theta_in_place : bool
        :meth:`update_parameter` may write θ's arrays in place.  The master then passes it
        a copy of θ's ``ndarray`` values (other values are passed as they are), so that θ
        stays the last good one if the update fails or hangs: a stuck master saves it
        (docs/exit-codes.md, code 3).  The copy costs little time but doubles θ's memory at
        the peak of each update.  Default True (safe for any subclass); set False when
        :meth:`update_parameter` only returns new arrays (every built-in algorithm does):
        no copy.  The nearest class that declares the flag or defines
        :meth:`update_parameter` decides (``flegel.runtime.server.copies_theta``): a
        subclass that overrides the method is copied unless it declares the flag itself;
        one that keeps its parent's method keeps the parent's flag.
    PARAMS : dict of str to flegel.validation.Constraint
        Each constructor parameter's constraint, declared once: ``__init__`` checks its
        arguments with :func:`flegel.validation.check_params`, whose
        :class:`~flegel.validation.ParameterError` names the parameter (a job reports it as
        ``params.<name>``; raise one yourself for a check of your own), and the
        scikit-learn estimators derive their parameter constraints from it.  Empty by
        default: a ``ValueError`` without a key is reported against ``params``.
    """

    PARAMS: ClassVar[dict[str, Constraint]] = {}
    name: str = "algorithm"
    needs_labels: bool = False
    label_kind: str = "any"
    nonnegative_features: bool = False
    objective_name: str = "objective"
    full_batch_update: bool = False
    progress_per_update: bool = False
    sampled_first_step: bool = False
    sampled_first_pass: bool = False
    cover_before_update: bool = False
    updates_theta_in_place: bool = True
    #: Set by :meth:`vote_to_halt` for the point being processed (a class default, so a
    #: subclass that does not call ``super().__init__()`` still works).
    _halt_flag: bool = False

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(
                f"{type(self).__name__} takes no parameters, got {sorted(params)}"
            )
        self._halt_flag = False

    # ---------------------------------------------------------------- hooks to implement
    def init_parameter(self, info: DataInfo) -> Params:
        """Return θ⁽⁰⁾, a dict of arrays (Flegel's ``initParameter``)."""
        raise NotImplementedError

    def validate(self, base_dir: Path) -> None:
        """Check the parameters against the file system before any work starts.

        Raise ``ValueError`` naming the parameter (e.g. a missing ``init`` file); the job
        validator turns it into a message about the job file.  Default: nothing to check.
        """

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        """Return the per-point state of ``n`` new points: arrays whose first axis has length n.

        The default has no state.  Incremental EM keeps each point's last statistics here
        (FSP paper Section 2.2, Eq. 3).
        """
        return {}

    def update_data_point(
        self, point: Any, state: PointState, theta: Params, t: int
    ) -> Aggregator:
        """Process one point and return its aggregator delta (Flegel's ``updateDataPoint``).

        Parameters
        ----------
        point : ndarray or tuple
            The point's features, or ``(features, label)`` for labelled data.
        state : PointState
            The point's persistent state; item assignment writes it back.
        theta : dict
            The current parameters (read only).
        t : int
            The global iteration number (1-based).
        """
        raise NotImplementedError

    def update_block(self, block: Block, theta: Params, t: int) -> Aggregator:
        """Process a block of points and return their summed aggregator delta.

        The default loops :meth:`update_data_point` and accumulates with :meth:`aggregate`;
        override it with a vectorized kernel for speed (README, Writing an algorithm).
        Write per-point state into ``block.state`` and set ``block.halt[i] = True`` to vote
        a point to halt.

        Before training, each worker calls it once to warm up (``flegel/run.py``): on a
        copy of its shard's first points (at most 8) with fresh :meth:`init_state`, θ⁽⁰⁾ and
        ``t = 1``, its result aggregated into a zero aggregator and dropped, so that a JIT
        compile (numba) happens before the training clock starts.  The call is made on the
        algorithm itself, so state it keeps (a counter, a random generator) has moved once
        on every worker when training starts.  Workers 2..n first try it on a deep copy with
        numba's compiling refused (worker 1 compiles, they load from numba's cache:
        :func:`flegel.jit.after_first`); an algorithm that cannot be deep-copied is tried
        on itself, and called again when the try was refused (cold cache only).
        """
        total: Aggregator | None = None
        for i in range(len(block)):
            self._halt_flag = False
            point = block.point(i)
            delta = self.update_data_point(point, PointState(block.state, i), theta, t)
            if self._halt_flag:
                block.halt[i] = True
            total = delta if total is None else self.aggregate(total, delta)
        if total is None:
            total = self.zero_aggregator(theta)
        return total

    def aggregate(self, target: Aggregator, delta: Aggregator) -> Aggregator:
        """Accumulate ``delta`` into ``target`` and return it (Flegel's ``aggregate``).

        The default adds entry by entry, which is right for sums of statistics and gradients.
        """
        out = dict(target)
        for key, value in delta.items():
            out[key] = out[key] + value if key in out else value
        return out

    def update_parameter(self, agg: Aggregator, theta: Params) -> Params:
        """Return the new θ from an aggregate of deltas (Flegel's ``updateParameter``)."""
        raise NotImplementedError

    def termination_check(self, agg: Aggregator, t: int) -> bool:
        """Return True to stop training (Flegel's ``terminationCheck``); default never."""
        return False

    def evaluate(self, theta: Params, block: Block) -> float:
        """Return the exact objective of θ on ``block``, as a sum over its points.

        Must be additive over points: the runtime sums it over the shards.  Used for the final
        objective and by reports, so sync models are compared on the true f(θ).
        """
        raise NotImplementedError

    def test_metrics(self, theta: Params, block: Block) -> dict[str, float]:
        """Metrics of θ on the job's held-out ``test_data`` (reported in ``summary.json``).

        The default reports the mean objective, and the accuracy when the algorithm has an
        ``evaluate_accuracy(theta, x, y)`` method and the test data are labelled.
        """
        out = {"objective_per_point": self.evaluate(theta, block) / max(len(block), 1)}
        acc = getattr(self, "evaluate_accuracy", None)
        if callable(acc) and block.y is not None:
            out["accuracy"] = float(acc(theta, block.x, block.y))
        return out

    def stratify(self, n_points: int, shard: int | None = None) -> Stratification | None:
        """The hook FSP's worker policy calls without data migration, once per worker, with
        its shard's ``n_points`` and the worker's index ``shard`` (rank - 1: its rows of
        ``DataInfo.sample`` are the ``shard``-th run of ``DataInfo.sample_sizes``): an
        algorithm that takes its M-step on a stratified estimate of each shard returns the
        worker's estimate (K-means, issue 19; FSP paper Section 2.2), others keep this
        default, None (exact incremental sums).

        The estimate's contract (:class:`Stratification`; ``algorithms/_stratum.py``
        implements it): one instance per worker; it records no block until FSP calls its
        ``arm()`` as the worker's first iteration begins (the start-up warm-up's blocks are
        never sent); ``restore`` continues from ``checkpoint_state`` in place and leaves it
        disarmed; ``update_block`` sends its corrections beside the exact deltas."""
        return None

    def finalize(self, theta: Params) -> dict[str, np.ndarray]:
        """Return the arrays saved as the model (default: all of θ)."""
        return dict(theta)

    # ---------------------------------------------------------------- helpers
    def vote_to_halt(self) -> None:
        """Exclude the point being processed from later iterations (Flegel's ``voteToHalt``)."""
        self._halt_flag = True

    def zero_aggregator(self, theta: Params) -> Aggregator:
        """Return an aggregator of zeros with the layout of this algorithm's deltas.

        The runtime needs the layout before training to pre-allocate message buffers.  When
        this method is not overridden, :func:`zero_aggregator` derives it from
        :meth:`update_block` on one sample point; override it when that is not possible or
        too costly.
        """
        raise NotImplementedError(
            f"{type(self).__name__}: the aggregator layout is derived from a sample point by "
            "flegel.api.zero_aggregator(algorithm, theta, x0, y0); override "
            "zero_aggregator(theta) to give it directly")

    # camelCase aliases, so algorithms ported from Flegel (Java) read the same
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for camel, snake in _CAMEL.items():
            if camel in cls.__dict__ and snake not in cls.__dict__:
                setattr(cls, snake, cls.__dict__[camel])

    def initParameter(self, info: DataInfo) -> Params:  # noqa: N802 - Flegel's name
        return self.init_parameter(info)

    def updateDataPoint(  # noqa: N802
        self, point: Any, state: PointState, theta: Params, t: int
    ) -> Aggregator:
        return self.update_data_point(point, state, theta, t)

    def updateParameter(self, agg: Aggregator, theta: Params) -> Params:  # noqa: N802
        return self.update_parameter(agg, theta)

    def terminationCheck(self, agg: Aggregator, t: int) -> bool:  # noqa: N802
        return self.termination_check(agg, t)

    def voteToHalt(self) -> None:  # noqa: N802
        self.vote_to_halt()


_CAMEL = {
    "initParameter": "init_parameter",
    "updateDataPoint": "update_data_point",
    "updateParameter": "update_parameter",
    "terminationCheck": "termination_check",
    "voteToHalt": "vote_to_halt",
}


def zero_aggregator(algorithm: Algorithm, theta: Params, x0: np.ndarray,
                    y0: Any = None) -> Aggregator:
    """The one way flegel builds an aggregator of zeros for ``algorithm``.

    Uses :meth:`Algorithm.zero_aggregator` when the algorithm overrides it; otherwise runs
    :meth:`Algorithm.update_block` on a block of the one point ``x0`` (label ``y0``) and
    zeroes what it returns.  The runtime calls this once, before training, to fix the wire
    layout of aggregators; every later zero aggregator is a copy of that layout's zeros.
    """
    if type(algorithm).zero_aggregator is not Algorithm.zero_aggregator:
        total = algorithm.zero_aggregator(theta)
    else:
        block = Block.from_arrays(x0[None, :], None if y0 is None else np.asarray([y0]),
                                  algorithm.init_state(1, x0.shape[0]))
        halt = algorithm._halt_flag
        total = algorithm.update_block(block, theta, 1)
        algorithm._halt_flag = halt
    return {k: np.zeros_like(np.asarray(v, dtype=np.float64)) if np.ndim(v) else 0.0
            for k, v in total.items()}


def arm(stratum: Stratification, sampled: bool, calibration: bool) -> None:
    """The one way flegel calls :meth:`Stratification.arm` (FSP's worker, as an iteration
    begins): only the flags that are set are passed, so a user's ``arm(self)`` (the protocol
    as first documented) and ``arm(self, sampled=False)`` keep working wherever their flags
    are not set, as on every window of FSPB and every window after FSPV's first pass."""
    flags = {"sampled": sampled, "calibration": calibration}
    stratum.arm(**{k: v for k, v in flags.items() if v})


def stratify(algorithm: Algorithm, n_points: int, shard: int) -> Stratification | None:
    """The one way flegel calls :meth:`Algorithm.stratify` (FSP's worker, without migration).

    ``shard`` (the worker's index) is passed only to an override that takes it: the hook
    gained the argument after ``stratify(self, n_points)`` was documented, and a user's
    override of that form keeps working (it simply has no master's sample of its shard).
    """
    try:
        inspect.signature(algorithm.stratify).bind(n_points, shard=shard)
    except TypeError:
        return algorithm.stratify(n_points)
    return algorithm.stratify(n_points, shard=shard)
