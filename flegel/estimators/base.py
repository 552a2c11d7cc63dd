"""What every flegel estimator shares: the runtime parameters beside the algorithm's, their
scikit-learn-style validation, ``fit`` through :func:`flegel.estimators.running.run_job`, and
the fitted attributes read from the saved model (see :mod:`flegel.estimators` for the
parameters' meaning)."""

from __future__ import annotations

import os
import tempfile
import warnings
from numbers import Integral
from numbers import Real as RealNumber
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from flegel.api import Algorithm
from flegel.estimators.running import run_job
from flegel.rundir.files import ESTIMATOR as ESTIMATOR_FILE
from flegel.rundir.model import SavedModel
from flegel.validation import (
    AnyOf,
    Boolean,
    Constraint,
    Described,
    Integer,
    Items,
    Nullable,
    Options,
    PathName,
    Real,
    Text,
)

__all__ = ["ESTIMATOR_FILE", "FlegelEstimator", "INIT_SPEC", "RUNTIME_CONSTRAINTS",
           "algorithm_constraints", "init_path", "runtime_init", "sklearn_constraint"]

#: Constraints of the runtime parameters every estimator has (scikit-learn's validation).
RUNTIME_CONSTRAINTS: dict[str, list[Any]] = {
    "workers": [Interval(Integral, 1, None, closed="left")],
    "sync": [str, dict, None],
    "stragglers": [list, None],
    "stop": [dict, None],
    "random_state": ["random_state"],
    "out": [str, os.PathLike, None],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(RealNumber, 0, None, closed="left"), None],
    "verbose": ["verbose"],
}

#: Stop reasons that end a run before its tolerance was met (summary.json's stop_reason).
UNCONVERGED = ("max_iterations", "max_time")


class FlegelEstimator(BaseEstimator):
    """Base of flegel's estimators: the runtime parameters, ``fit`` under MPI, loading.

    A subclass names its algorithm (:attr:`ALGORITHM`), lists the parameters that are the
    algorithm's (:attr:`ALGORITHM_PARAMS`, estimator name -> the algorithm's name) and sets its
    fitted attributes from the saved model in :meth:`_set_fitted`.
    """

    #: The job's ``algorithm`` (a built-in name).
    ALGORITHM: ClassVar[str] = ""
    #: Estimator parameter -> the algorithm's parameter.
    ALGORITHM_PARAMS: ClassVar[dict[str, str]] = {}
    #: Whether ``fit`` needs ``y``.
    SUPERVISED: ClassVar[bool] = False
    #: The parameter that ``fit`` needs at least as many rows as (n_clusters, ...), if any.
    MIN_SAMPLES_PARAM: ClassVar[str | None] = None
    #: ``tol`` is the algorithm's own parameter (its ``termination_check`` applies it, with
    #: scikit-learn's meaning) rather than the runtime's relative-change ``stop.tolerance``.
    TOL_IN_ALGORITHM: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = dict(RUNTIME_CONSTRAINTS)
    # The runtime parameters (set by each subclass's __init__ through runtime_init).
    workers: int
    sync: Any
    stragglers: Any
    stop: Any
    random_state: Any
    out: Any
    max_iter: int
    tol: float | None
    verbose: int

    # ------------------------------------------------------------------ the job
    def _algorithm_params(self) -> dict[str, Any]:
        params = {alg: getattr(self, est) for est, alg in self.ALGORITHM_PARAMS.items()}
        if self.TOL_IN_ALGORITHM:
            params["tol"] = self.tol
        return params

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool):
            return int(rs)
        return int(check_random_state(rs).randint(np.iinfo(np.int32).max))

    def _job(self) -> dict[str, Any]:
        """The job document of this estimator's parameters (``data`` is added by fit)."""
        sync = self.sync
        tolerance = None if self.TOL_IN_ALGORITHM else self.tol
        stop = {"max_iterations": self.max_iter, "tolerance": tolerance, **(self.stop or {})}
        doc: dict[str, Any] = {
            "algorithm": self.ALGORITHM, "params": self._algorithm_params(),
            "workers": self.workers, "seed": self._seed(),
            "sync": {"model": sync} if isinstance(sync, str) else (dict(sync) if sync else None),
            "stop": stop,
        }
        if self.stragglers:
            doc["stragglers"] = list(self.stragglers)
        return doc

    def _check_x(self, X: Any, reset: bool) -> np.ndarray:
        """scikit-learn's input validation: a finite 2-D float array; at predict time (reset
        False) the number of features must match the fit's (ValueError otherwise)."""
        out: np.ndarray = validate_data(self, X, reset=reset, dtype=[np.float64, np.float32])
        return out

    def _check_samples(self, X: np.ndarray) -> None:
        """What the ranks would refuse, checked before anything is launched, in
        scikit-learn's words: one row per worker (each holds a shard), one per cluster or
        component, and no negative value for an algorithm that declares
        ``nonnegative_features``."""
        n = X.shape[0]
        if n < self.workers:
            raise ValueError(f"n_samples={n} should be >= workers={self.workers}: every "
                             "worker holds a shard of the data")
        if self.MIN_SAMPLES_PARAM is not None:
            k = getattr(self, self.MIN_SAMPLES_PARAM)
            if n < k:
                raise ValueError(f"n_samples={n} should be >= {self.MIN_SAMPLES_PARAM}={k}.")
        if getattr(type(self._algorithm()), "nonnegative_features", False) and X.size \
                and float(X.min()) < 0:
            raise ValueError(f"Negative values in data passed to {type(self).__name__} "
                             "(input X)")

    def _check_fit_data(self, X: np.ndarray) -> None:
        """What the algorithm would refuse about ``X``, checked before launching (a
        subclass adds its own; the default has nothing more to check)."""

    def _fit_run(self, X: np.ndarray, y: np.ndarray | None = None) -> SavedModel:
        self._check_samples(X)
        self._check_fit_data(X)
        self._algorithm()  # the algorithm's own parameter checks, before any process starts
        saved = run_job(self._job(), X, y, self.out, verbose=getattr(self, "verbose", 0))
        self._warn_unconverged(saved)
        return saved

    def _warn_unconverged(self, saved: SavedModel, stacklevel: int = 4) -> None:
        """scikit-learn's ``ConvergenceWarning`` when the run stopped at ``max_iter`` (or the
        time limit) before meeting a tolerance it had (summary.json's ``stop_reason``)."""
        summary = saved.summary or {}
        reason = summary.get("stop_reason")
        stop = self.stop or {}
        had_tol = self.tol is not None or stop.get("tolerance") is not None \
            or stop.get("target_objective") is not None
        if reason in UNCONVERGED and not summary.get("converged", False) and had_tol:
            limit = (f"max_iter={self.max_iter}" if reason == "max_iterations"
                     else "the time limit")
            warnings.warn(f"{type(self).__name__} stopped at {limit} after "
                          f"{summary.get('iterations', '?')} iterations without meeting its "
                          f"tolerance (tol={self.tol}); increase max_iter or scale the data. "
                          f"Run directory: {saved.run_dir}", ConvergenceWarning,
                          stacklevel=stacklevel)

    def fit(self, X: Any, y: Any = None) -> FlegelEstimator:
        """Train on ``X`` under MPI with ``workers`` worker processes; return self."""
        self._validate_params()
        X = self._check_x(X, reset=True)
        saved = self._fit_run(X)
        self._set_fitted(saved)
        return self

    # ------------------------------------------------------------------ the model
    def _algorithm(self) -> Any:
        """The algorithm object of the fitted parameters (its kernels serve prediction)."""
        from flegel.job.algorithms import resolve_algorithm

        # Prediction never depends on the initialization: the default init avoids re-saving
        # an init array (K-means) and re-checking a warm-start path that may be gone.
        params = {k: v for k, v in self._algorithm_params().items() if k != "init"}
        return resolve_algorithm(self.ALGORITHM)(**params)

    def _set_fitted(self, saved: SavedModel) -> None:
        """Set the fitted attributes common to every estimator, from the saved model."""
        self.run_dir_ = saved.run_dir
        self.model_ = saved.arrays
        summary = saved.summary or {}
        self.n_iter_ = int(summary.get("iterations", saved.meta.get("theta_version", 0)))
        self.objective_ = float(saved.meta.get("final_objective",
                                               summary.get("final_objective", np.nan)))
        self.converged_ = bool(summary.get("converged", False))
        if not hasattr(self, "n_features_in_") and "n_features" in summary:
            self.n_features_in_ = int(summary["n_features"])
        self._algo = self._algorithm()

    def _theta(self, X: Any) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
        """(algorithm, fitted arrays, validated X) for a prediction method."""
        check_is_fitted(self, "model_")
        return self._algo, self.model_, self._check_x(X, reset=False)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


def runtime_init(self: Any, workers: int, sync: Any, stragglers: Any, stop: Any,
                 random_state: Any, out: Any, max_iter: int, tol: float | None,
                 verbose: int = 0) -> None:
    """Store the runtime parameters as given (one place for every estimator's __init__)."""
    self.verbose = verbose
    self.workers = workers
    self.sync = sync
    self.stragglers = stragglers
    self.stop = stop
    self.random_state = random_state
    self.out = out
    self.max_iter = max_iter
    self.tol = tol


#: ``init`` is a keyword or a path (any string: the algorithm checks it when the job is
#: validated, naming the keywords), or for K-means the initial centres.
INIT_SPEC = [str, os.PathLike, np.ndarray]


def sklearn_constraint(rule: Constraint) -> list[Any]:
    """One of :mod:`flegel.validation`'s constraints as scikit-learn's parameter validation
    states it (``Interval``, ``StrOptions``, types), so an estimator checks an algorithm's
    parameter by the algorithm's own declaration, in scikit-learn's words.

    Raises
    ------
    TypeError
        For a constraint without a scikit-learn counterpart (an estimator declares that
        parameter itself).
    """
    if isinstance(rule, Nullable):
        return [*sklearn_constraint(rule.inner), None]
    if isinstance(rule, AnyOf):
        return [c for inner in rule.constraints for c in sklearn_constraint(inner)]
    if isinstance(rule, Described) and isinstance(rule.rule, Constraint):
        return sklearn_constraint(rule.rule)
    if isinstance(rule, Integer):
        return [Interval(Integral, rule.lo, rule.hi, closed=_closed(
            rule.lo is not None, rule.hi is not None))]
    if isinstance(rule, Real):
        return [Interval(RealNumber, rule.lo, rule.hi, closed=_closed(
            rule.lo is not None and not rule.lo_open, rule.hi is not None and not rule.hi_open))]
    if isinstance(rule, Boolean):
        return ["boolean"]
    if isinstance(rule, Options) and all(isinstance(v, str) for v in rule.values):
        return [StrOptions(set(rule.values))]
    if isinstance(rule, Items):
        return [tuple, list]
    if isinstance(rule, PathName):
        return [str, os.PathLike]
    if isinstance(rule, Text):
        return [str]
    raise TypeError(f"no scikit-learn constraint for {rule!r}")


def _closed(left: bool, right: bool) -> str:
    return {(True, True): "both", (True, False): "left", (False, True): "right",
            (False, False): "neither"}[(left, right)]


def algorithm_constraints(algorithm: str, names: dict[str, str]) -> dict[str, list[Any]]:
    """scikit-learn's ``_parameter_constraints`` of an estimator's algorithm parameters,
    derived from the algorithm's ``PARAMS`` (declared once, there).

    Parameters
    ----------
    algorithm : str
        The built-in algorithm (``ALGORITHM``).
    names : dict of str to str
        Estimator parameter -> the algorithm's (``ALGORITHM_PARAMS``); those the algorithm
        does not declare are left out.
    """
    from flegel.job.algorithms import resolve_algorithm

    cls: type[Algorithm] = resolve_algorithm(algorithm)
    params = cls.PARAMS
    return {est: sklearn_constraint(params[alg]) for est, alg in names.items()
            if alg in params}


def init_path(value: Any) -> Any:
    """``init`` for the job: an array of initial values is saved as ``init.npy`` (in a fresh
    temporary folder) and its path returned; a keyword or a path goes as given."""
    if isinstance(value, np.ndarray):
        path = Path(tempfile.mkdtemp(prefix="flegel-init-")) / "init.npy"
        np.save(path, np.asarray(value, dtype=np.float64))
        return str(path)
    return str(value) if isinstance(value, os.PathLike) else value
