"""scikit-learn-style estimators over flegel's MPI runtime.

``from flegel import KMeans, GaussianMixture, FuzzyCMeans, LogisticRegression, NMF, CNN``:
each is a :class:`sklearn.base.BaseEstimator` with the right mixins.  Its parameters are the
algorithm's (the job's ``params``) plus the runtime's, beside them:

==============  ==========================================================================
``workers``     worker processes (MPI ranks 1..workers; rank 0 is the master), default 2
``sync``        a sync model name or preset (``"fsp"``, ``"bspv"``) or a ``sync`` mapping
``stragglers``  a list of straggler patterns (the job's ``stragglers``)
``stop``        a mapping of further ``stop`` keys (``target_objective``, ``max_time_s``);
                ``max_iter`` and ``tol`` are ``stop.max_iterations`` and ``stop.tolerance``
``random_state`` the job's ``seed`` (None: a fresh one drawn from NumPy's global RNG)
``out``         folder under which each fit makes its run directory (default: the system's
                temporary folder, ``flegel-runs``)
==============  ==========================================================================

``fit(X, y=None)`` takes the same path as ``flegel run``: it writes ``X`` (and ``y``) to
``.npy`` files in a new run directory with a job file, validates the job, launches
``workers + 1`` MPI ranks with the bundled launcher (:func:`flegel.launch.launch`), then reads
the model back (:mod:`flegel.model`).  The data files are removed after the run; the run
directory (``run_dir_``) keeps the model, the resolved job, the event log and the summary, so
``flegel.load(est.run_dir_)`` gives the estimator back.  Prediction runs in this process,
vectorized, through the algorithm's own kernels.

Parameters are stored as given (scikit-learn's convention) and validated by ``fit`` with
scikit-learn's messages; fitted attributes end in ``_``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import yaml
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    ClusterMixin,
    DensityMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from flegel.api import Algorithm
from flegel.model import JOB_FILE, SavedModel, read_model

__all__ = ["CNN", "NMF", "Estimator", "FlegelEstimator", "FuzzyCMeans", "GaussianMixture",
           "KMeans", "LogisticRegression", "fit", "from_saved", "load"]

#: Written beside the model by an estimator's fit: what the job file cannot hold
#: (the original class labels).
ESTIMATOR_FILE = "estimator.json"

#: Constraints of the runtime parameters every estimator has (scikit-learn's validation).
_RUNTIME_CONSTRAINTS: dict[str, list[Any]] = {
    "workers": [Interval(Integral, 1, None, closed="left")],
    "sync": [str, dict, None],
    "stragglers": [list, None],
    "stop": [dict, None],
    "random_state": ["random_state"],
    "out": [str, os.PathLike, None],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left"), None],
}
_RUNTIME = tuple(_RUNTIME_CONSTRAINTS)


# ------------------------------------------------------------------------ running a job
@contextlib.contextmanager
def _importable(path: Path | None) -> Iterator[None]:
    """Put ``path`` on the launched ranks' ``PYTHONPATH`` (a user's algorithm module)."""
    if path is None:
        yield
        return
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(path)] + ([old] if old else []))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _algorithm_name(algorithm: Any) -> tuple[str, Path | None]:
    """The job's ``algorithm`` string for a name or an Algorithm subclass, and the folder to
    put on ``PYTHONPATH`` so the ranks can import it."""
    if isinstance(algorithm, str):
        return algorithm, None
    if isinstance(algorithm, type) and issubclass(algorithm, Algorithm):
        module = algorithm.__module__
        if module == "__main__" or "<locals>" in algorithm.__qualname__:
            raise ValueError(
                f"algorithm {algorithm.__qualname__} is defined in {module!r} or inside a "
                "function: the MPI ranks cannot import it; move it into a module (a .py file)")
        file = getattr(sys.modules[module], "__file__", None)
        root = None
        if file is not None:
            root = Path(file).resolve().parent
            for _ in range(module.count(".")):
                root = root.parent
        return f"{module}:{algorithm.__qualname__}", root
    raise TypeError(f"algorithm must be a name ('kmeans', 'package.module:Class') or a "
                    f"flegel.Algorithm subclass, got {algorithm!r}")


def _new_run_dir(out: str | os.PathLike[str] | None, name: str, sync: str) -> Path:
    """A fresh ``<out>/<name>-<sync>-<time>`` directory."""
    base = Path(out).expanduser() if out is not None else \
        Path(tempfile.gettempdir()) / "flegel-runs"
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1, 1000):
        path = base / (f"{name}-{sync}-{stamp}" + (f"-{i}" if i > 1 else ""))
        try:
            path.mkdir()
            return path.resolve()
        except FileExistsError:
            continue
    return Path(tempfile.mkdtemp(prefix=f"{name}-{sync}-", dir=base)).resolve()


def run_job(doc: dict[str, Any], X: np.ndarray, y: np.ndarray | None = None,
            out: str | os.PathLike[str] | None = None,
            import_root: Path | None = None) -> SavedModel:
    """Train the job ``doc`` on ``X`` (and labels ``y``) under MPI; return the saved model.

    The path of ``flegel run``: ``X`` and ``y`` are written as ``.npy`` files into a new run
    directory with the job (``data`` replaced by them), the job is validated
    (:func:`flegel.config.load_job`), ``workers + 1`` ranks are launched
    (:func:`flegel.launch.launch`), and the model is read back.  The data files are removed
    afterwards (the job file too when the run succeeded).

    Raises
    ------
    flegel.config.JobError
        A bad job (a ``ValueError`` naming the key).
    RuntimeError
        The MPI run failed (its messages were printed above).
    """
    from flegel.config import load_job
    from flegel.launch import launch, under_mpi

    if under_mpi():
        raise RuntimeError("flegel: fit launches its own MPI job and cannot run inside one "
                           "(this process was started by mpirun); call it from a plain Python")
    doc = dict(doc)
    sync = doc.get("sync") or {}
    name = str(doc.get("name") or str(doc["algorithm"]).split(":")[-1].split(".")[-1].lower())
    run_dir = _new_run_dir(out, name, str(sync.get("model", "bsp")))
    # The inputs go to a folder of their own: the run directory must hold no run files
    # before the run (flegel.output.claim_run_dir), and they are removed after it.
    inputs = run_dir / "input"
    inputs.mkdir()
    x_file = inputs / "X.npy"
    np.save(x_file, np.ascontiguousarray(X))
    data: dict[str, Any] = {"path": x_file.name}
    files = [x_file]
    if y is not None:
        y_file = inputs / "y.npy"
        np.save(y_file, np.ascontiguousarray(y))
        data["label_path"] = y_file.name
        files.append(y_file)
    doc["data"] = data
    doc.setdefault("output", {})
    doc["output"] = {"progress": "none", **(doc["output"] or {})}
    job_file = inputs / JOB_FILE
    job_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    code = -1
    try:
        job = load_job(job_file)
        with _importable(import_root):
            code = launch(job["workers"] + 1, ["run", str(job_file), "--out", str(run_dir)])
    finally:
        for f in files:
            f.unlink(missing_ok=True)
        if code == 0:  # else the job file stays, to be read beside the messages
            job_file.unlink(missing_ok=True)
            inputs.rmdir()
    if code != 0:
        raise RuntimeError(f"flegel run failed (exit code {code}); its messages are above. "
                           f"Job file: {job_file}")
    return read_model(run_dir)


def _set_path(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set ``doc[a][b] = value`` for ``key = "a.b"`` (mappings merged, not replaced)."""
    parts = key.split(".")
    node = doc
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        elif not isinstance(nxt, dict):
            raise ValueError(f"override {key!r}: {p!r} is {nxt!r}, not a mapping")
        node = nxt
    last = parts[-1]
    if isinstance(value, Mapping) and isinstance(node.get(last), dict):
        node[last] = {**node[last], **value}
    else:
        node[last] = value


def fit(job_or_algorithm: Any, X: Any, y: Any = None, **overrides: Any) -> FlegelEstimator:
    """Train any algorithm -- a built-in or your own -- on in-memory data under MPI.

    Parameters
    ----------
    job_or_algorithm : str, Path, dict or Algorithm subclass
        A job file (its ``data`` is replaced by ``X``), a job mapping, a built-in name
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

    import_root = None
    if isinstance(job_or_algorithm, dict):
        doc = copy.deepcopy(job_or_algorithm)
    elif isinstance(job_or_algorithm, (str, Path)) and str(job_or_algorithm).endswith(
            (".yaml", ".yml")):
        doc = load_yaml(Path(job_or_algorithm))
    else:
        name, import_root = _algorithm_name(job_or_algorithm)
        doc = {"algorithm": name}
    if not isinstance(doc.get("algorithm"), str):
        name, import_root = _algorithm_name(doc.get("algorithm"))
        doc["algorithm"] = name
    out = overrides.pop("out", None)
    for key, value in overrides.items():
        if key == "sync" and isinstance(value, str):
            doc["sync"] = {"model": value}  # a model name resets the section, as --set does
        else:
            _set_path(doc, key, value)
    Xa = np.asarray(X)
    if Xa.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {Xa.shape}")
    saved = run_job(doc, Xa, None if y is None else np.asarray(y), out, import_root)
    return from_saved(saved)


# ------------------------------------------------------------------------ the estimators
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
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = dict(_RUNTIME_CONSTRAINTS)
    # The runtime parameters (set by each subclass's __init__ through _runtime_init).
    workers: int
    sync: Any
    stragglers: Any
    stop: Any
    random_state: Any
    out: Any
    max_iter: int
    tol: float | None

    # ------------------------------------------------------------------ the job
    def _algorithm_params(self) -> dict[str, Any]:
        return {alg: getattr(self, est) for est, alg in self.ALGORITHM_PARAMS.items()}

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool):
            return int(rs)
        return int(check_random_state(rs).randint(np.iinfo(np.int32).max))

    def _job(self) -> dict[str, Any]:
        """The job document of this estimator's parameters (``data`` is added by fit)."""
        sync = self.sync
        stop = {"max_iterations": self.max_iter, "tolerance": self.tol, **(self.stop or {})}
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

    def _fit_run(self, X: np.ndarray, y: np.ndarray | None = None) -> SavedModel:
        return run_job(self._job(), X, y, self.out)

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
        from flegel.config import resolve_algorithm

        return resolve_algorithm(self.ALGORITHM)(**self._algorithm_params())

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


def _runtime_init(self: Any, workers: int, sync: Any, stragglers: Any, stop: Any,
                  random_state: Any, out: Any, max_iter: int, tol: float | None) -> None:
    """Store the runtime parameters as given (one place for every estimator's __init__)."""
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
_INIT_SPEC = [str, os.PathLike, np.ndarray]


class _InitArray:
    """``init`` given as an array: saved as ``init.npy`` beside the job for the ranks."""

    @staticmethod
    def prepare(est: Any, key: str = "init") -> Any:
        value = getattr(est, key)
        if isinstance(value, np.ndarray):
            folder = Path(tempfile.mkdtemp(prefix="flegel-init-"))
            path = folder / "init.npy"
            np.save(path, np.asarray(value, dtype=np.float64))
            return str(path)
        return str(value) if isinstance(value, os.PathLike) else value


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
    ALGORITHM_PARAMS = {"n_clusters": "n_clusters", "init": "init", "n_init": "n_init"}
    _parameter_constraints = {
        **_RUNTIME_CONSTRAINTS,
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": _INIT_SPEC,
        "n_init": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, n_clusters: int = 8, *, init: Any = "k-means++", n_init: int = 10,
                 max_iter: int = 300, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None) -> None:
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

    def _algorithm_params(self) -> dict[str, Any]:
        params = super()._algorithm_params()
        params["init"] = _InitArray.prepare(self)
        return params

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
    max_iter, tol, workers, sync, stragglers, stop, random_state, out
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
    ALGORITHM_PARAMS = {"n_components": "n_components", "covariance_type": "covariance_type",
                        "reg_covar": "reg_covar", "init": "init"}
    _parameter_constraints = {
        **_RUNTIME_CONSTRAINTS,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "covariance_type": [StrOptions({"diag", "full"})],
        "reg_covar": [Interval(Real, 0.0, None, closed="left")],
        "init": [str, os.PathLike],
    }

    def __init__(self, n_components: int = 8, *, covariance_type: str = "diag",
                 reg_covar: float = 1e-6, init: Any = "kmeans++", max_iter: int = 100,
                 tol: float | None = 1e-4, workers: int = 2, sync: Any = None,
                 stragglers: Any = None, stop: Any = None, random_state: Any = None,
                 out: Any = None) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        self.init = init
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

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
    max_iter, tol, workers, sync, stragglers, stop, random_state, out
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
    ALGORITHM_PARAMS = {"n_clusters": "n_clusters", "m": "m", "init": "init"}
    _parameter_constraints = {
        **_RUNTIME_CONSTRAINTS,
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "m": [Interval(Real, 1.0, None, closed="neither")],
        "init": [str, os.PathLike],
    }

    def __init__(self, n_clusters: int = 8, *, m: float = 2.0, init: Any = "kmeans++",
                 max_iter: int = 300, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.init = init
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

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
    """L2-regularized logistic regression by mini-batch gradient descent on flegel's runtime.

    Parameters
    ----------
    learning_rate : float, default=0.1
    schedule : {"constant", "invscaling"}, default="constant"
    power_t : float, default=0.5
    alpha : float, default=1e-4
        L2 strength with ``SGDClassifier``'s meaning (α = 1 / (C · n) for scikit-learn's
        ``LogisticRegression(C)``).
    fit_intercept : bool, default=True
    init : "zeros" or path, default="zeros"
        Zero weights or a warm start (a run directory of a logistic-regression run).
    max_iter, tol, workers, sync, stragglers, stop, random_state, out
        As in :class:`KMeans` (``max_iter`` counts gradient steps under BSP full batch).

    Attributes
    ----------
    classes_ : ndarray
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_iter_ : int
    run_dir_ : Path
    """

    ALGORITHM = "logreg"
    ALGORITHM_PARAMS = {"learning_rate": "learning_rate", "schedule": "schedule",
                        "power_t": "power_t", "alpha": "alpha",
                        "fit_intercept": "fit_intercept", "init": "init"}
    _parameter_constraints = {
        **_RUNTIME_CONSTRAINTS,
        "learning_rate": [Interval(Real, 0.0, None, closed="neither")],
        "schedule": [StrOptions({"constant", "invscaling"})],
        "power_t": [Interval(Real, 0.0, None, closed="left")],
        "alpha": [Interval(Real, 0.0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "init": [str, os.PathLike],
    }

    def __init__(self, *, learning_rate: float = 0.1, schedule: str = "constant",
                 power_t: float = 0.5, alpha: float = 1e-4, fit_intercept: bool = True,
                 init: Any = "zeros", max_iter: int = 100, tol: float | None = 1e-4,
                 workers: int = 2, sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None) -> None:
        self.learning_rate = learning_rate
        self.schedule = schedule
        self.power_t = power_t
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.init = init
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

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

    Parameters
    ----------
    image_shape, n_filters, kernel_size, padding, pool_size, pooling, learning_rate,
    schedule, power_t, momentum, alpha, input_scale, device, dtype, chunk_size, init
        The algorithm's (:class:`flegel.algorithms.cnn.CNN`).
    max_iter, tol, workers, sync, stragglers, stop, random_state, out
        As in :class:`KMeans`.

    Attributes
    ----------
    classes_ : ndarray
    n_iter_ : int
    run_dir_ : Path
    """

    ALGORITHM = "cnn"
    ALGORITHM_PARAMS = {k: k for k in (
        "image_shape", "n_filters", "kernel_size", "padding", "pool_size", "pooling",
        "learning_rate", "schedule", "power_t", "momentum", "alpha", "input_scale", "device",
        "dtype", "chunk_size", "init")}
    _parameter_constraints = {
        **_RUNTIME_CONSTRAINTS,
        "image_shape": [tuple, list, None],
        "n_filters": [tuple, list],
        "kernel_size": [Interval(Integral, 1, None, closed="left")],
        "padding": [Interval(Integral, 0, None, closed="left")],
        "pool_size": [Interval(Integral, 1, None, closed="left")],
        "pooling": [StrOptions({"max", "avg"})],
        "learning_rate": [Interval(Real, 0.0, None, closed="neither")],
        "schedule": [StrOptions({"constant", "invscaling"})],
        "power_t": [Interval(Real, 0.0, None, closed="left")],
        "momentum": [Interval(Real, 0.0, 1.0, closed="left")],
        "alpha": [Interval(Real, 0.0, None, closed="left")],
        "input_scale": [Interval(Real, 0.0, None, closed="neither")],
        "device": [StrOptions({"cpu", "gpu", "auto"})],
        "dtype": [StrOptions({"float32", "float64"})],
        "chunk_size": [Interval(Integral, 1, None, closed="left"), None],
        "init": [str, os.PathLike],
    }

    def __init__(self, *, image_shape: Any = None, n_filters: Any = (6, 12),
                 kernel_size: int = 5, padding: int = 0, pool_size: int = 2,
                 pooling: str = "max", learning_rate: float = 0.05,
                 schedule: str = "constant", power_t: float = 0.5, momentum: float = 0.0,
                 alpha: float = 0.0, input_scale: float = 1.0, device: str = "cpu",
                 dtype: str = "float32", chunk_size: int | None = None, init: Any = "he",
                 max_iter: int = 100, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None) -> None:
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
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

    def _algorithm_params(self) -> dict[str, Any]:
        params = super()._algorithm_params()
        for key in ("image_shape", "n_filters"):  # YAML-friendly lists
            if params[key] is not None:
                params[key] = list(params[key])
        return params

    @staticmethod
    def _n_classes(arrays: dict[str, np.ndarray]) -> int:
        return int(arrays["dense_b"].shape[0])


class NMF(TransformerMixin, FlegelEstimator):
    """Non-negative matrix factorization X ≈ W H on flegel's runtime (rows are data points).

    Parameters
    ----------
    n_components : int, default=10
    solver : {"hals", "mu"}, default="hals"
    w_iter, h_iter : int, default=5
    init : {"nndsvda", "random"} or path, default="nndsvda"
    max_iter, tol, workers, sync, stragglers, stop, random_state, out
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
                        "h_iter": "h_iter", "init": "init"}
    _parameter_constraints = {
        **_RUNTIME_CONSTRAINTS,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "solver": [StrOptions({"hals", "mu"})],
        "w_iter": [Interval(Integral, 1, None, closed="left")],
        "h_iter": [Interval(Integral, 1, None, closed="left")],
        "init": [str, os.PathLike],
    }

    def __init__(self, n_components: int = 10, *, solver: str = "hals", w_iter: int = 5,
                 h_iter: int = 5, init: Any = "nndsvda", max_iter: int = 200,
                 tol: float | None = 1e-4, workers: int = 2, sync: Any = None,
                 stragglers: Any = None, stop: Any = None, random_state: Any = None,
                 out: Any = None) -> None:
        self.n_components = n_components
        self.solver = solver
        self.w_iter = w_iter
        self.h_iter = h_iter
        self.init = init
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

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

    def inverse_transform(self, W: Any) -> np.ndarray:
        """W H: the data approximated from their factors."""
        check_is_fitted(self, "model_")
        return np.asarray(W, dtype=np.float64) @ self.components_


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

    _parameter_constraints = {**_RUNTIME_CONSTRAINTS, "algorithm": [str, type],
                              "params": [dict, None]}

    def __init__(self, algorithm: Any = None, params: dict[str, Any] | None = None, *,
                 max_iter: int = 100, tol: float | None = 1e-4, workers: int = 2,
                 sync: Any = None, stragglers: Any = None, stop: Any = None,
                 random_state: Any = None, out: Any = None) -> None:
        self.algorithm = algorithm
        self.params = params
        _runtime_init(self, workers, sync, stragglers, stop, random_state, out, max_iter, tol)

    def _algorithm_params(self) -> dict[str, Any]:
        return dict(self.params or {})

    def _job(self) -> dict[str, Any]:
        doc = super()._job()
        doc["algorithm"], self._import_root = _algorithm_name(self.algorithm)
        return doc

    def _fit_run(self, X: np.ndarray, y: np.ndarray | None = None) -> SavedModel:
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

        name, _ = _algorithm_name(self.algorithm)
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
