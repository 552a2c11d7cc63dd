"""Back from disk: the fitted estimator of a run directory (:func:`flegel.load`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flegel.estimators.base import FlegelEstimator
from flegel.estimators.classifiers import CNN, LogisticRegression
from flegel.estimators.clustering import FuzzyCMeans, GaussianMixture, KMeans
from flegel.estimators.decomposition import NMF
from flegel.estimators.generic import Estimator
from flegel.model import JOB_FILE, SavedModel, read_model

__all__ = ["BUILTIN", "from_saved", "load"]


def load(run_dir: str | Path) -> FlegelEstimator:
    """Return the fitted estimator saved in a run directory.

    Parameters
    ----------
    run_dir : str or Path
        A run directory (``model.npz``, ``model.json`` and ``job.yaml`` inside, as written by
        ``flegel run``, :func:`flegel.fit` or an estimator's ``fit``), or its ``model.npz``.

    Returns
    -------
    FlegelEstimator
        For a built-in algorithm its estimator (:class:`flegel.KMeans`, ...), with the
        parameters of the run and the fitted attributes (``cluster_centers_``, ``coef_``,
        ``run_dir_``, ...); for a user's algorithm a :class:`flegel.estimators.Estimator`.

    Raises
    ------
    FileNotFoundError
        When the directory holds no model.

    Examples
    --------
    >>> import flegel
    >>> km = flegel.load("runs/kmeans-bsp-20260101-120000")  # doctest: +SKIP
    >>> km.predict(X)  # doctest: +SKIP
    """
    return from_saved(read_model(run_dir))


#: Built-in algorithm names -> their estimator.
BUILTIN: dict[str, type[FlegelEstimator]] = {
    "kmeans": KMeans, "gmm": GaussianMixture, "fcm": FuzzyCMeans,
    "logreg": LogisticRegression, "nmf": NMF, "cnn": CNN,
}


def from_saved(saved: SavedModel) -> FlegelEstimator:
    """The fitted estimator of a saved model, with the parameters of its run."""
    from flegel.config import BUILTIN_ALGORITHMS

    name = saved.algorithm
    if name is None:
        raise ValueError(f"{saved.path}: no {JOB_FILE} or model.json beside it says which "
                         "algorithm trained this model; use flegel.model.read_model for the "
                         "bare arrays")
    by_target = {v: k for k, v in BUILTIN_ALGORITHMS.items()}
    key = name if name in BUILTIN else by_target.get(name)
    job = saved.job or {}
    stop = dict(job.get("stop") or {})
    runtime: dict[str, Any] = {
        "max_iter": stop.pop("max_iterations", 100), "tol": stop.pop("tolerance", 1e-4),
        "workers": job.get("workers", 2), "sync": job.get("sync"),
        "stragglers": job.get("stragglers") or None,
        "stop": {k: v for k, v in stop.items() if v is not None} or None,
        "random_state": job.get("seed"), "out": str(saved.run_dir.parent)}
    if key is None:
        est: FlegelEstimator = Estimator(name, saved.params, **runtime)
    else:
        cls = BUILTIN[key]
        inverse = {alg: est for est, alg in cls.ALGORITHM_PARAMS.items()}
        params = {inverse[k]: v for k, v in saved.params.items() if k in inverse}
        est = cls(**params, **runtime)
    est._set_fitted(saved)
    return est
