"""Matrix factorization: NMF, with ``transform`` of new rows against the learned H."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from flegel.estimators.base import (
    RUNTIME_CONSTRAINTS,
    FlegelEstimator,
    algorithm_constraints,
    runtime_init,
)
from flegel.rundir.model import SavedModel

__all__ = ["NMF"]


class NMF(TransformerMixin, FlegelEstimator):
    """Non-negative matrix factorization X ≈ W H on flegel's runtime (rows are data points).

    Parameters
    ----------
    n_components : int, default=10
    solver : {"hals", "mu"}, default="hals"
    w_iter, h_iter : int, default=5
    init : {"nndsvda", "random"} or path, default="nndsvda"
    kernel : {"auto", "compiled", "array"}, default="auto"
        Which CPU HALS kernel runs (numba, NumPy, or NumPy until numba pays; :mod:`flegel.device`).
    max_iter, tol, workers, sync, stragglers, stop, random_state, out, verbose
        As in :class:`KMeans`.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        H.
    reconstruction_err_ : float
        Frobenius norm of X − W H on the training data (exact, W re-optimized per row).
    n_iter_ : int
    run_dir_ : Path
    """

    ALGORITHM = "nmf"
    ALGORITHM_PARAMS = {"n_components": "n_components", "solver": "solver", "w_iter": "w_iter",
                        "h_iter": "h_iter", "init": "init", "kernel": "kernel"}
    _parameter_constraints = {
        **RUNTIME_CONSTRAINTS,
        **algorithm_constraints(ALGORITHM, ALGORITHM_PARAMS),
        "init": [str, os.PathLike],
    }

    def __init__(self, n_components: int = 10, *, solver: str = "hals", w_iter: int = 5,
                 h_iter: int = 5, init: Any = "nndsvda", kernel: str = "auto",
                 max_iter: int = 200,
                 tol: float | None = 1e-4, workers: int = 2, sync: Any = None,
                 stragglers: Any = None, stop: Any = None, random_state: Any = None,
                 out: Any = None, verbose: int = 0) -> None:
        self.n_components = n_components
        self.solver = solver
        self.w_iter = w_iter
        self.h_iter = h_iter
        self.init = init
        self.kernel = kernel
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    def _set_fitted(self, saved: SavedModel) -> None:
        super()._set_fitted(saved)
        self.components_ = saved.arrays["components"]
        self.reconstruction_err_ = float(np.sqrt(max(self.objective_, 0.0)))

    def transform(self, X: Any) -> np.ndarray:
        """W ≥ 0 (n_samples, n_components) of new rows against the learned H."""
        algo, theta, X = self._theta(X)
        if X.size and float(X.min()) < 0:
            raise ValueError("Negative values in data passed to NMF.transform")
        return algo.transform(theta, X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True  # X ≥ 0, as for scikit-learn's NMF
        return tags

    def inverse_transform(self, W: Any) -> np.ndarray:
        """W H: the data approximated from their factors."""
        check_is_fitted(self, "model_")
        return np.asarray(W, dtype=np.float64) @ self.components_
