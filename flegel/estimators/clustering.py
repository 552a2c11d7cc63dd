"""The clustering and density estimators: K-means, Gaussian mixture, fuzzy c-means."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from sklearn.base import ClusterMixin, DensityMixin, TransformerMixin

from flegel.estimators.base import (
    INIT_SPEC,
    RUNTIME_CONSTRAINTS,
    FlegelEstimator,
    algorithm_constraints,
    init_path,
    runtime_init,
)
from flegel.rundir.model import SavedModel

__all__ = ["FuzzyCMeans", "GaussianMixture", "KMeans"]


class KMeans(ClusterMixin, TransformerMixin, FlegelEstimator):
    """K-means clustering on flegel's MPI runtime (incremental EM; FSP paper Section 2.2).

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "random"}, path or ndarray of shape (n_clusters, n_features), \
default="k-means++"
        Greedy k-means++ on the data sample (scikit-learn's variant), random sample points,
        a warm start (a run directory of a K-means run or its ``model.npz``, a ``.npy``), or
        the initial centres.
    n_init : int, default=10
        Restarts ranked on the data sample (see :class:`flegel.algorithms.kmeans.KMeans`).
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the workers' kernel runs (CuPy on a GPU; :mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        Which CPU kernel runs (numba, NumPy, or NumPy until numba pays; :mod:`flegel.device`).
    max_iter : int, default=300
        ``stop.max_iterations``.
    tol : float or None, default=1e-4
        ``stop.tolerance``: relative change of the objective over a full pass.
    workers, sync, stragglers, stop, random_state, out
        The runtime's (module docstring).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray of shape (n_samples,)
        Cluster of each training point (after ``fit``; not after :func:`flegel.load`).
    inertia_ : float
        Sum of squared distances of the training points to their nearest centre (exact).
    n_iter_ : int
    run_dir_ : Path
        The run directory (model, job, events, summary).
    """

    ALGORITHM = "kmeans"
    MIN_SAMPLES_PARAM = "n_clusters"
    ALGORITHM_PARAMS = {"n_clusters": "n_clusters", "init": "init", "n_init": "n_init",
                        "device": "device", "kernel": "kernel"}
    _parameter_constraints = {
        **RUNTIME_CONSTRAINTS,
        **algorithm_constraints(ALGORITHM, ALGORITHM_PARAMS),
        "init": INIT_SPEC,
    }

    def __init__(self, n_clusters: int = 8, *, init: Any = "k-means++", n_init: int = 10,
                 device: str = "cpu", kernel: str = "auto", max_iter: int = 300,
                 tol: float | None = 1e-4, workers: int = 2, sync: Any = None,
                 stragglers: Any = None, stop: Any = None, random_state: Any = None,
                 out: Any = None, verbose: int = 0) -> None:
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.device = device
        self.kernel = kernel
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    def _job(self) -> dict[str, Any]:
        doc = super()._job()
        doc["params"]["init"] = init_path(self.init)  # an array of centres: saved for the ranks
        return doc

    def fit(self, X: Any, y: Any = None) -> KMeans:
        """Cluster ``X`` under MPI; return self."""
        super().fit(X)
        self.labels_ = self.predict(X)
        return self

    def _set_fitted(self, saved: SavedModel) -> None:
        super()._set_fitted(saved)
        self.cluster_centers_ = saved.arrays["centers"]
        self.inertia_ = self.objective_

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre of each row of ``X``."""
        algo, theta, X = self._theta(X)
        return algo.predict({"centers": theta["centers"]}, X)

    def transform(self, X: Any) -> np.ndarray:
        """Distances (n_samples, n_clusters) of the rows of ``X`` to the centres."""
        algo, theta, X = self._theta(X)
        return algo.transform({"centers": theta["centers"]}, X)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the inertia of ``X`` (scikit-learn's convention: higher is better)."""
        algo, theta, X = self._theta(X)
        return float(algo.score({"centers": theta["centers"]}, X))


class GaussianMixture(DensityMixin, FlegelEstimator):
    """Gaussian mixture model on flegel's MPI runtime (incremental EM).

    Parameters
    ----------
    n_components : int, default=8
    covariance_type : {"diag", "full"}, default="diag"
    reg_covar : float, default=1e-6
    init : "kmeans++" or path, default="kmeans++"
        k-means++ means on the sample, or a warm start (run directory, ``model.npz``, ``.npy``
        of means).
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the workers' kernel runs (CuPy on a GPU; :mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        Which CPU kernel runs (numba, NumPy, or NumPy until numba pays; :mod:`flegel.device`).
    max_iter, tol, workers, sync, stragglers, stop, random_state, out, verbose
        As in :class:`KMeans`.

    Attributes
    ----------
    weights_, means_, covariances_, precisions_cholesky_ : ndarray
    n_iter_ : int
    converged_ : bool
    lower_bound_ : float
        Mean log-likelihood of the training data at the final θ (exact).
    run_dir_ : Path
    """

    ALGORITHM = "gmm"
    MIN_SAMPLES_PARAM = "n_components"
    ALGORITHM_PARAMS = {"n_components": "n_components", "covariance_type": "covariance_type",
                        "reg_covar": "reg_covar", "init": "init", "device": "device",
                        "kernel": "kernel"}
    _parameter_constraints = {
        **RUNTIME_CONSTRAINTS,
        **algorithm_constraints(ALGORITHM, ALGORITHM_PARAMS),
        "init": [str, os.PathLike],
    }

    def __init__(self, n_components: int = 8, *, covariance_type: str = "diag",
                 reg_covar: float = 1e-6, init: Any = "kmeans++", device: str = "cpu",
                 kernel: str = "auto", max_iter: int = 100, tol: float | None = 1e-4,
                 workers: int = 2, sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None, verbose: int = 0) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        self.init = init
        self.device = device
        self.kernel = kernel
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    def _set_fitted(self, saved: SavedModel) -> None:
        super()._set_fitted(saved)
        for key in ("weights", "means", "covariances", "precisions_cholesky"):
            setattr(self, f"{key}_", saved.arrays[key])
        n = (saved.summary or {}).get("n_points")
        self.lower_bound_ = -self.objective_ / n if n else np.nan

    def predict(self, X: Any) -> np.ndarray:
        """Most responsible component of each row of ``X``."""
        algo, theta, X = self._theta(X)
        return algo.predict(theta, X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Responsibilities (n_samples, n_components)."""
        algo, theta, X = self._theta(X)
        return algo.predict_proba(theta, X)

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-likelihood of each row of ``X``."""
        algo, theta, X = self._theta(X)
        return algo.score_samples(theta, X)

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood of ``X``."""
        return float(self.score_samples(X).mean())


class FuzzyCMeans(ClusterMixin, FlegelEstimator):
    """Fuzzy c-means on flegel's MPI runtime.

    Parameters
    ----------
    n_clusters : int, default=8
    m : float, default=2.0
        Fuzzifier (> 1).
    init : "kmeans++" or path, default="kmeans++"
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the workers' kernel runs (CuPy on a GPU; :mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        Which CPU kernel runs (numba, NumPy, or NumPy until numba pays; :mod:`flegel.device`).
    max_iter, tol, workers, sync, stragglers, stop, random_state, out, verbose
        As in :class:`KMeans`.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray of shape (n_samples,)
        Centre of largest membership of each training point (after ``fit``).
    objective_ : float
        The FCM objective of the training data at the final centres (exact).
    n_iter_ : int
    run_dir_ : Path
    """

    ALGORITHM = "fcm"
    MIN_SAMPLES_PARAM = "n_clusters"
    ALGORITHM_PARAMS = {"n_clusters": "n_clusters", "m": "m", "init": "init",
                        "device": "device", "kernel": "kernel"}
    _parameter_constraints = {
        **RUNTIME_CONSTRAINTS,
        **algorithm_constraints(ALGORITHM, ALGORITHM_PARAMS),
        "init": [str, os.PathLike],
    }

    def __init__(self, n_clusters: int = 8, *, m: float = 2.0, init: Any = "kmeans++",
                 device: str = "cpu", kernel: str = "auto", max_iter: int = 300,
                 tol: float | None = 1e-4, workers: int = 2, sync: Any = None,
                 stragglers: Any = None, stop: Any = None, random_state: Any = None,
                 out: Any = None, verbose: int = 0) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.init = init
        self.device = device
        self.kernel = kernel
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    def fit(self, X: Any, y: Any = None) -> FuzzyCMeans:
        """Cluster ``X`` under MPI; return self."""
        super().fit(X)
        self.labels_ = self.predict(X)
        return self

    def _set_fitted(self, saved: SavedModel) -> None:
        super()._set_fitted(saved)
        self.cluster_centers_ = saved.arrays["centers"]

    def predict_memberships(self, X: Any) -> np.ndarray:
        """Memberships (n_samples, n_clusters), rows summing to 1."""
        algo, theta, X = self._theta(X)
        return algo.predict_memberships(theta, X)

    def predict(self, X: Any) -> np.ndarray:
        """Centre of largest membership of each row of ``X``."""
        algo, theta, X = self._theta(X)
        return algo.predict(theta, X)
