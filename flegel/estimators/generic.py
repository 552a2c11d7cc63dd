"""The estimator of any algorithm (a user's own), and the generic :func:`fit`."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data

from flegel.estimators.base import RUNTIME_CONSTRAINTS, FlegelEstimator, runtime_init
from flegel.estimators.running import algorithm_name, run_job
from flegel.rundir.model import SavedModel

__all__ = ["Estimator"]


class Estimator(FlegelEstimator):
    """A fitted model of any algorithm (a user's own), as :func:`flegel.fit` and
    :func:`flegel.load` return it when no built-in estimator fits.

    Prediction methods are those of the algorithm: ``predict``, ``predict_proba``,
    ``transform`` and ``decision_function`` call the algorithm's method of that name with the
    fitted arrays as θ, when it has one.

    Parameters
    ----------
    algorithm : str or Algorithm subclass
        ``"package.module:Class"`` or the class.
    params : dict or None
        The algorithm's parameters.
    max_iter, tol, workers, sync, stragglers, stop, random_state, out, verbose
        As in :class:`KMeans`.

    Attributes
    ----------
    model_ : dict of str to ndarray
        The saved arrays (``Algorithm.finalize``).
    objective_ : float
        The exact objective of the final θ on the training data.
    n_iter_ : int
    run_dir_ : Path
    """

    _parameter_constraints = {**RUNTIME_CONSTRAINTS, "algorithm": [str, type],
                              "params": [dict, None]}

    def __init__(self, algorithm: Any = None, params: dict[str, Any] | None = None, *,
                 max_iter: int = 100, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None, verbose: int = 0) -> None:
        self.algorithm = algorithm
        self.params = params
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    def _algorithm_params(self) -> dict[str, Any]:
        return dict(self.params or {})

    def _job(self) -> dict[str, Any]:
        doc = super()._job()
        doc["algorithm"], self._import_root = algorithm_name(self.algorithm)
        return doc

    def _fit_run(self, X: np.ndarray, y: np.ndarray | None = None) -> SavedModel:
        self._check_samples(X)
        doc = self._job()
        saved = run_job(doc, X, y, self.out, self._import_root, verbose=self.verbose)
        self._warn_unconverged(saved)
        return saved

    def fit(self, X: Any, y: Any = None) -> Estimator:
        """Train on ``X`` (and integer labels ``y``) under MPI; return self."""
        self._validate_params()
        if y is None:
            X = self._check_x(X, reset=True)
            saved = self._fit_run(X)
        else:
            X, y = validate_data(self, X, y, reset=True, dtype=[np.float64, np.float32])
            saved = self._fit_run(X, np.asarray(y))
        self._set_fitted(saved)
        return self

    def _algorithm(self) -> Any:
        from flegel.job.algorithms import resolve_algorithm

        name, _ = algorithm_name(self.algorithm)
        return resolve_algorithm(name)(**self._algorithm_params())

    def _call(self, method: str, X: Any) -> np.ndarray:
        algo, theta, X = self._theta(X)
        fn = getattr(algo, method, None)
        if not callable(fn):
            raise AttributeError(f"{type(algo).__name__} has no {method}(theta, x) method")
        return np.asarray(fn(theta, X))

    def predict(self, X: Any) -> np.ndarray:
        """The algorithm's ``predict(theta, X)``."""
        return self._call("predict", X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """The algorithm's ``predict_proba(theta, X)``."""
        return self._call("predict_proba", X)

    def transform(self, X: Any) -> np.ndarray:
        """The algorithm's ``transform(theta, X)``."""
        return self._call("transform", X)

    def decision_function(self, X: Any) -> np.ndarray:
        """The algorithm's ``decision_function(theta, X)``."""
        return self._call("decision_function", X)
