"""The classifiers: logistic regression and the CNN, with scikit-learn's label handling."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import validate_data

from flegel.estimators.base import (
    ESTIMATOR_FILE,
    RUNTIME_CONSTRAINTS,
    FlegelEstimator,
    algorithm_constraints,
    runtime_init,
)
from flegel.rundir.model import SavedModel

__all__ = ["CNN", "LogisticRegression"]


class _Classifier(ClassifierMixin, FlegelEstimator):
    """What the classifiers share: label encoding (``classes_``) and ``fit(X, y)``."""

    SUPERVISED = True

    def fit(self, X: Any, y: Any = None) -> _Classifier:
        """Train on ``X`` and labels ``y`` under MPI; return self."""
        from sklearn.utils.multiclass import check_classification_targets

        self._validate_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target "
                             "y is None.")
        X, y = validate_data(self, X, y, reset=True, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        classes, encoded = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in "
                             f"the data, but the data contain only one class: {classes[0]!r}")
        saved = self._fit_run(X, encoded.astype(np.int64))
        (saved.run_dir / ESTIMATOR_FILE).write_text(json.dumps(
            {"estimator": type(self).__name__, "classes": classes.tolist()}))
        self.classes_ = classes
        self._set_fitted(saved)
        return self

    def _set_fitted(self, saved: SavedModel) -> None:
        super()._set_fitted(saved)
        if not hasattr(self, "classes_"):
            extra = saved.run_dir / ESTIMATOR_FILE
            n = self._n_classes(saved.arrays)
            self.classes_ = (np.asarray(json.loads(extra.read_text())["classes"])
                             if extra.is_file() else np.arange(n))

    @staticmethod
    def _n_classes(arrays: dict[str, np.ndarray]) -> int:
        raise NotImplementedError

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class of each row of ``X`` (labels of ``classes_``)."""
        proba = self.predict_proba(X)  # checks that the model is fitted first
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Log of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (n_samples, n_classes), columns in the order of ``classes_``."""
        algo, theta, X = self._theta(X)
        return algo.predict_proba(theta, X)


class LogisticRegression(_Classifier):
    """L2-regularized logistic regression on flegel's runtime: L-BFGS under full-batch BSP
    (the default), scale-free gradient steps under the other sync models
    (:mod:`flegel.algorithms.logreg`).

    Parameters
    ----------
    learning_rate : "auto" or float, default="auto"
        Gradient steps' size: ``"auto"`` adapts it to the data's scale (1 / L in internally
        standardised coordinates); a number is the step in the original units.
    solver : {"auto", "lbfgs", "gd"}, default="auto"
        L-BFGS on full batches (and, under FSP, on stratified batches at θ) and gradient
        steps otherwise (``auto``, ``lbfgs``), or always gradient steps (``gd``, the FSP
        paper's Eq. 1).
    schedule : {"constant", "invscaling"}, default="constant"
    power_t : float, default=0.5
    alpha : float, default=1e-4
        L2 strength with ``SGDClassifier``'s meaning (α = 1 / (C · n) for scikit-learn's
        ``LogisticRegression(C)``).
    fit_intercept : bool, default=True
    init : "zeros" or path, default="zeros"
        Zero weights or a warm start (a run directory of a logistic-regression run).
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the workers' kernel runs (CuPy on a GPU; :mod:`flegel.device`).
    kernel : {"auto", "compiled", "array"}, default="auto"
        Which CPU kernel runs (numba, NumPy, or NumPy until numba pays; :mod:`flegel.device`).
    tol : float or None, default=1e-4
        scikit-learn's meaning: stop once the largest entry of the gradient of the mean
        objective is at most ``tol`` (averaged over the last pass under mini-batch models).
    max_iter, workers, sync, stragglers, stop, random_state, out, verbose
        As in :class:`KMeans` (``max_iter`` counts barriers: L-BFGS evaluations under BSP
        full batch).

    Attributes
    ----------
    classes_ : ndarray
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_iter_ : int
    run_dir_ : Path
    """

    ALGORITHM = "logreg"
    TOL_IN_ALGORITHM = True
    ALGORITHM_PARAMS = {"learning_rate": "learning_rate", "solver": "solver",
                        "schedule": "schedule",
                        "power_t": "power_t", "alpha": "alpha",
                        "fit_intercept": "fit_intercept", "init": "init", "device": "device",
                        "kernel": "kernel"}
    _parameter_constraints = {
        **RUNTIME_CONSTRAINTS,
        **algorithm_constraints(ALGORITHM, ALGORITHM_PARAMS),
        "init": [str, os.PathLike],
    }

    def __init__(self, *, learning_rate: Any = "auto", solver: str = "auto",
                 schedule: str = "constant",
                 power_t: float = 0.5, alpha: float = 1e-4, fit_intercept: bool = True,
                 init: Any = "zeros", device: str = "cpu", kernel: str = "auto",
                 max_iter: int = 100, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None, verbose: int = 0) -> None:
        self.learning_rate = learning_rate
        self.solver = solver
        self.schedule = schedule
        self.power_t = power_t
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.init = init
        self.device = device
        self.kernel = kernel
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    @staticmethod
    def _n_classes(arrays: dict[str, np.ndarray]) -> int:
        coef = arrays["coef"]
        return 2 if coef.ndim == 1 else int(coef.shape[1])

    def _set_fitted(self, saved: SavedModel) -> None:
        super()._set_fitted(saved)
        coef = saved.arrays["coef"]
        # scikit-learn's layout: one row per class (one row for binary problems)
        self.coef_ = coef[None, :] if coef.ndim == 1 else coef.T
        self.intercept_ = saved.arrays["intercept"]

    def decision_function(self, X: Any) -> np.ndarray:
        """Margins: (n_samples,) for two classes, (n_samples, n_classes) otherwise."""
        algo, theta, X = self._theta(X)
        return algo.decision_function(theta, X)


class CNN(_Classifier):
    """Convolutional network classifier (conv-ReLU-pool layers + softmax) on flegel's runtime.

    ``fit`` checks the data's shape before anything is launched.  With ``image_shape`` given,
    ``X`` must have ``H·W·C`` features and every layer must fit the image (``ValueError``,
    scikit-learn's words, otherwise).  Without it the shape is inferred: a square number of
    features is a square single-channel image (28×28 for MNIST), any other number a one-row
    image ``(1, n_features)`` (tabular data); and of ``n_filters`` the layers that fit the
    inferred image are kept (none for a small or one-row image: the network is then its
    softmax layer).  The fitted ``image_shape_`` and ``n_filters_`` say what was trained.

    Parameters
    ----------
    image_shape, n_filters, kernel_size, padding, pool_size, pooling, learning_rate,
    schedule, power_t, momentum, alpha, input_scale, device, dtype, chunk_size, init
        The algorithm's (:class:`flegel.algorithms.cnn.CNN`).
    max_iter, tol, workers, sync, stragglers, stop, random_state, out, verbose
        As in :class:`KMeans`.

    Attributes
    ----------
    classes_ : ndarray
    image_shape_ : tuple of int
        ``(H, W, C)`` of the images trained on (given or inferred).
    n_filters_ : tuple of int
        The convolutional layers trained (those of ``n_filters`` that fit the image).
    n_iter_ : int
    run_dir_ : Path
    """

    ALGORITHM = "cnn"
    ALGORITHM_PARAMS = {k: k for k in (
        "image_shape", "n_filters", "kernel_size", "padding", "pool_size", "pooling",
        "learning_rate", "schedule", "power_t", "momentum", "alpha", "input_scale", "device",
        "dtype", "chunk_size", "init")}
    _parameter_constraints = {
        **RUNTIME_CONSTRAINTS,
        **algorithm_constraints(ALGORITHM, ALGORITHM_PARAMS),
        "init": [str, os.PathLike],
    }

    def __init__(self, *, image_shape: Any = None, n_filters: Any = (6, 12),
                 kernel_size: int = 5, padding: int = 0, pool_size: int = 2,
                 pooling: str = "max", learning_rate: float = 0.05,
                 schedule: str = "constant", power_t: float = 0.5, momentum: float = 0.0,
                 alpha: float = 0.0, input_scale: Any = "auto", device: str = "cpu",
                 dtype: str = "float32", chunk_size: int | None = None, init: Any = "he",
                 max_iter: int = 100, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None, verbose: int = 0) -> None:
        self.image_shape = image_shape
        self.n_filters = n_filters
        self.kernel_size = kernel_size
        self.padding = padding
        self.pool_size = pool_size
        self.pooling = pooling
        self.learning_rate = learning_rate
        self.schedule = schedule
        self.power_t = power_t
        self.momentum = momentum
        self.alpha = alpha
        self.input_scale = input_scale
        self.device = device
        self.dtype = dtype
        self.chunk_size = chunk_size
        self.init = init
        runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol,
                     verbose)

    def _algorithm_params(self) -> dict[str, Any]:
        params = super()._algorithm_params()
        # What fit found the data to be (inferred shape, the layers that fit), once known.
        params["image_shape"] = getattr(self, "image_shape_", params["image_shape"])
        params["n_filters"] = getattr(self, "n_filters_", params["n_filters"])
        for key in ("image_shape", "n_filters"):  # YAML-friendly lists
            if params[key] is not None:
                params[key] = list(params[key])
        return params

    def _check_fit_data(self, X: np.ndarray) -> None:
        """The image shape and the layers, checked (given) or inferred, before launching."""
        from flegel.job.algorithms import resolve_algorithm

        d = X.shape[1]
        algo_cls = resolve_algorithm(self.ALGORITHM)
        if self.image_shape is not None:
            h, w, c = (*self.image_shape, 1)[:3]
            if h * w * c != d:
                raise ValueError(f"X has {d} features, but {type(self).__name__} is expecting "
                                 f"{h * w * c} features as input (image_shape="
                                 f"{tuple(self.image_shape)}).")
            layers = tuple(self.n_filters)
            # The algorithm's own check of the layers, raised here rather than on rank 0
            algo_cls(image_shape=(h, w, c), n_filters=layers, kernel_size=self.kernel_size,
                     padding=self.padding, pool_size=self.pool_size).layer_shapes(d)
        else:
            side = math.isqrt(d)
            h, w, c = (side, side, 1) if side * side == d else (1, d, 1)
            layers = tuple(self.n_filters)
            while layers:
                try:
                    algo_cls(image_shape=(h, w, c), n_filters=layers,
                             kernel_size=self.kernel_size, padding=self.padding,
                             pool_size=self.pool_size).layer_shapes(d)
                    break
                except ValueError:
                    layers = layers[:-1]
        self.image_shape_ = (h, w, c)
        self.n_filters_ = layers

    @staticmethod
    def _n_classes(arrays: dict[str, np.ndarray]) -> int:
        return int(arrays["dense_b"].shape[0])

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Plain SGD with a fixed step (FSP paper Eq. 1) for max_iter steps: scikit-learn's
        # checks fit a handful of steps on unscaled blobs, short of their 0.83 accuracy
        # (MLPClassifier-like models that stop early declare the same).
        tags.classifier_tags.poor_score = True
        return tags
