"""The estimator of any algorithm (a user's own), and the generic :func:`fit`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data

from flegel.estimators.base import RUNTIME_CONSTRAINTS, FlegelEstimator, runtime_init
from flegel.estimators.running import algorithm_name, run_job, set_path
from flegel.model import SavedModel

__all__ = ["Estimator", "fit"]


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
    max_iter, tol, workers, sync, stragglers, stop, random_state, out
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
                 random_state: Any = None, out: Any = None) -> None:
        self.algorithm = algorithm
        self.params = params
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

    def _algorithm_params(self) -> dict[str, Any]:
        return dict(self.params or {})

    def _job(self) -> dict[str, Any]:
        doc = super()._job()
        doc["algorithm"], self._import_root = algorithm_name(self.algorithm)
        return doc

    def _fit_run(self, X: np.ndarray, y: np.ndarray | None = None) -> SavedModel:
        self._check_samples(X)
        doc = self._job()
        return run_job(doc, X, y, self.out, self._import_root)

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
        from flegel.config import resolve_algorithm

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


def fit(job_or_algorithm: Any, X: Any, y: Any = None, **overrides: Any) -> FlegelEstimator:
    """Train any algorithm -- a built-in or your own -- on in-memory data under MPI.

    Parameters
    ----------
    job_or_algorithm : str, Path, dict or Algorithm subclass
        A job file (its ``data`` is replaced by ``X``; its relative paths keep their meaning,
        the job is written beside it), a job mapping, a built-in name
        (``"kmeans"``), ``"package.module:Class"``, or a :class:`flegel.Algorithm` subclass
        defined in an importable module.
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,), optional
        Labels, for supervised algorithms (integers 0..C-1).
    **overrides
        Job keys: ``params={...}``, ``workers=4``, ``sync="fsp"``, ``seed=1``, ``stop={...}``,
        or dotted paths given as a dict, ``**{"sync.model": "fsp"}``.  ``out`` is the folder
        under which the run directory is made.

    Returns
    -------
    FlegelEstimator
        The fitted estimator (:func:`flegel.load` of the run directory).

    Examples
    --------
    >>> import flegel
    >>> est = flegel.fit("kmeans", X, params={"n_clusters": 3}, workers=2)  # doctest: +SKIP
    >>> est.predict(X)  # doctest: +SKIP
    """
    from flegel.config import load_yaml

    import_root = job_dir = None
    if isinstance(job_or_algorithm, dict):
        doc = copy.deepcopy(job_or_algorithm)
    elif isinstance(job_or_algorithm, (str, Path)) and str(job_or_algorithm).endswith(
            (".yaml", ".yml")):
        doc = load_yaml(Path(job_or_algorithm))
        job_dir = Path(job_or_algorithm).resolve().parent
    else:
        name, import_root = algorithm_name(job_or_algorithm)
        doc = {"algorithm": name}
    if not isinstance(doc.get("algorithm"), str):
        name, import_root = algorithm_name(doc.get("algorithm"))
        doc["algorithm"] = name
    out = overrides.pop("out", None)
    for key, value in overrides.items():
        if key == "sync" and isinstance(value, str):
            doc["sync"] = {"model": value}  # a model name resets the section, as --set does
        else:
            set_path(doc, key, value)
    Xa = np.asarray(X)
    if Xa.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {Xa.shape}")
    saved = run_job(doc, Xa, None if y is None else np.asarray(y), out, import_root, job_dir)
    from flegel.estimators.loading import from_saved

    return from_saved(saved)
