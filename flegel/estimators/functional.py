"""The module-level functions: :func:`flegel.fit` (any algorithm in one call) and
:func:`flegel.load` (the fitted estimator of a run directory, back from disk)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from flegel.estimators.base import FlegelEstimator
from flegel.estimators.classifiers import CNN, LogisticRegression
from flegel.estimators.clustering import FuzzyCMeans, GaussianMixture, KMeans
from flegel.estimators.decomposition import NMF
from flegel.estimators.generic import Estimator
from flegel.estimators.running import algorithm_name, run_job, set_path
from flegel.rundir.files import JOB as JOB_FILE
from flegel.rundir.files import MODEL_META
from flegel.rundir.model import SavedModel, read_model

__all__ = ["BUILTIN", "fit", "from_saved", "load"]


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


#: The estimators of the built-in algorithms.
ESTIMATORS: tuple[type[FlegelEstimator], ...] = (
    KMeans, GaussianMixture, FuzzyCMeans, LogisticRegression, NMF, CNN)

#: Built-in algorithm names (:data:`flegel.job.algorithms.BUILTIN_ALGORITHMS`) -> their
#: estimator, read from each estimator's ``ALGORITHM``.
BUILTIN: dict[str, type[FlegelEstimator]] = {cls.ALGORITHM: cls for cls in ESTIMATORS}


def from_saved(saved: SavedModel) -> FlegelEstimator:
    """The fitted estimator of a saved model, with the parameters of its run."""
    from flegel.job.algorithms import BUILTIN_ALGORITHMS
    from flegel.job.sections import STOP, TOP

    name = saved.algorithm
    if name is None:
        raise ValueError(f"{saved.path}: no {JOB_FILE} or {MODEL_META} beside it says which "
                         "algorithm trained this model; use flegel.rundir.model.read_model for the "
                         "bare arrays")
    by_target = {v: k for k, v in BUILTIN_ALGORITHMS.items()}
    key = name if name in BUILTIN else by_target.get(name)
    job = saved.job or {}
    stop = dict(job.get("stop") or {})
    runtime: dict[str, Any] = {
        # A job.yaml written by an older flegel may lack a key: the declared default.
        "max_iter": stop.pop("max_iterations", STOP["max_iterations"].default),
        "tol": stop.pop("tolerance", STOP["tolerance"].default),
        "workers": job.get("workers", TOP["workers"].default), "sync": job.get("sync"),
        "stragglers": job.get("stragglers") or None,
        "stop": {k: v for k, v in stop.items() if v is not None} or None,
        "random_state": job.get("seed"), "out": str(saved.run_dir.parent)}
    if key is None:
        est: FlegelEstimator = Estimator(name, saved.params, **runtime)
    else:
        cls = BUILTIN[key]
        inverse = {alg: est for est, alg in cls.ALGORITHM_PARAMS.items()}
        params = {inverse[k]: v for k, v in saved.params.items() if k in inverse}
        if cls.TOL_IN_ALGORITHM:  # the estimator's tol is the algorithm's (scikit-learn's)
            runtime["tol"] = saved.params.get("tol", runtime["tol"])
        est = cls(**params, **runtime)
    est._set_fitted(saved)
    return est


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
        under which the run directory is made; ``verbose`` (0, 1, 2) what the run shows on
        ``sys.stdout``, as for the estimators.

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
    from flegel.job.yaml_file import load_yaml

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
    verbose = int(overrides.pop("verbose", 0))
    for key, value in overrides.items():
        if key == "sync" and isinstance(value, str):
            doc["sync"] = {"model": value}  # a model name resets the section, as --set does
        else:
            set_path(doc, key, value)
    Xa = np.asarray(X)
    if Xa.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {Xa.shape}")
    saved = run_job(doc, Xa, None if y is None else np.asarray(y), out, import_root, job_dir,
                    verbose=verbose)
    est = from_saved(saved)
    est._warn_unconverged(saved, stacklevel=3)
    return est
