"""Saved models: what a run leaves behind, read back for prediction and warm starts.

A run directory (:mod:`flegel.rundir.files`) holds the final model as ``model.npz`` (the arrays of
:meth:`flegel.Algorithm.finalize`, no pickle) and ``model.json`` (the algorithm's job name,
its parameters, the arrays' shapes), beside the resolved job ``job.yaml``.  This module is the
one place that finds and reads them:

* :func:`model_path` turns what a user wrote (a run directory or a ``model.npz``) into the
  archive's path, or says clearly what is missing;
* :func:`read_model` reads arrays and metadata into a :class:`SavedModel`;
* :func:`check_algorithm` checks that a saved model was trained by a given algorithm (warm
  starts, ``params.init``).

:func:`flegel.load` (in :mod:`flegel.estimators`, one layer up) turns a saved model into a
fitted scikit-learn-style estimator.  This module imports only NumPy and YAML, so the
algorithms can use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flegel.rundir import files

if TYPE_CHECKING:
    from flegel.api import Algorithm

__all__ = ["SavedModel", "check_algorithm", "model_path", "read_model"]


@dataclass
class SavedModel:
    """A model read from disk.

    Attributes
    ----------
    path : Path
        The ``model.npz`` archive.
    arrays : dict of str to ndarray
        Its arrays.
    meta : dict
        ``model.json`` beside it (empty for a bare archive).
    job : dict or None
        The resolved ``job.yaml`` of the run (None for a bare archive).
    summary : dict or None
        The run's ``summary.json`` (None for a bare archive).
    """

    path: Path
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None

    @property
    def run_dir(self) -> Path:
        """The folder holding the archive."""
        return self.path.parent

    @property
    def algorithm(self) -> str | None:
        """The job's ``algorithm`` name (``"kmeans"`` or ``"package.module:Class"``), if known."""
        name = self.meta.get("algorithm") or (self.job or {}).get("algorithm")
        return None if name is None else str(name)

    @property
    def params(self) -> dict[str, Any]:
        """The algorithm parameters the model was trained with (empty if unknown)."""
        params = self.meta.get("params")
        if params is None:
            params = (self.job or {}).get("params")
        return dict(params or {})

    def describe(self) -> str:
        """``"<path> (a <algorithm> model)"``, for messages."""
        what = f"a {self.algorithm} model" if self.algorithm else "a model of unknown algorithm"
        return f"{self.path} ({what})"


def model_path(spec: str | Path, base_dir: str | Path | None = None) -> Path:
    """Return the ``model.npz`` named by ``spec``: a run directory or the archive itself.

    Parameters
    ----------
    spec : str or Path
        A run directory (holding ``model.npz``) or the path of a ``.npz`` archive.
    base_dir : str or Path, optional
        Folder that a relative ``spec`` is relative to (a job file's folder); default the
        working directory.

    Raises
    ------
    FileNotFoundError
        When the directory holds no ``model.npz`` (the message says why: a run still going, a
        run that failed, or ``output.save_model: false``) or the archive does not exist.
    ValueError
        When ``spec`` names a file that is not a ``.npz`` archive.
    """
    path = Path(spec).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    path = path.resolve()
    if path.is_dir():
        found = path / files.MODEL
        if not found.is_file():
            if (path / files.JOB).is_file():
                why = (f"it is a run directory without {files.MODEL}: the run is still going, "
                       "failed, or had output.save_model: false")
            else:
                why = f"expected a run directory holding {files.MODEL} (written by flegel run)"
            raise FileNotFoundError(f"{path}: no model found; {why}")
        return found
    if path.suffix != ".npz":
        raise ValueError(f"{path}: expected a run directory or a {files.MODEL} archive, "
                         f"found a {path.suffix or 'suffix-less'} file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model archive (expected a run directory or "
                                f"a {files.MODEL})")
    return path


def read_model(spec: str | Path, base_dir: str | Path | None = None) -> SavedModel:
    """Read the model named by ``spec`` (see :func:`model_path`) with its metadata and job."""
    import yaml

    path = model_path(spec, base_dir)
    with np.load(path, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    meta_file = path.with_name(files.MODEL_META)
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    job_file = path.with_name(files.JOB)
    job = yaml.safe_load(job_file.read_text()) if job_file.is_file() else None
    summary_file = path.with_name(files.SUMMARY)
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    return SavedModel(path=path, arrays=arrays, meta=meta, job=job, summary=summary)


def trained_by(name: str, algorithm: Algorithm) -> bool:
    """Whether the job's ``algorithm`` string ``name`` names ``algorithm``'s class.

    ``"package.module:Class"`` matches on the class name and the module's last part
    (``algorithms.kmeans`` and ``flegel.algorithms.kmeans`` are one file); a built-in name
    (``"kmeans"``) matches the class's :attr:`~flegel.Algorithm.name`.  No import: a saved
    model is checked without loading its algorithm's module.
    """
    cls = type(algorithm)
    module, colon, qualname = name.partition(":")
    if colon:
        return any(qualname == c.__qualname__
                   and module.rsplit(".", 1)[-1] == c.__module__.rsplit(".", 1)[-1]
                   for c in cls.__mro__)
    return name == getattr(algorithm, "name", None)


def check_algorithm(model: SavedModel, algorithm: Algorithm, key: str = "init") -> None:
    """Raise ``ValueError`` unless ``model`` was trained by ``algorithm``'s class.

    A bare archive without ``model.json`` cannot be checked and passes (its shapes are still
    checked by the algorithm).  The message names both algorithms.
    """
    theirs = model.algorithm
    if theirs is None:
        return
    mine = type(algorithm)
    if not trained_by(theirs, algorithm):
        raise ValueError(
            f"{key}: {model.path} is a model of algorithm {theirs!r}, but this job trains "
            f"{getattr(algorithm, 'name', mine.__name__)!r} ({mine.__module__}.{mine.__name__}); "
            "warm-start from a run of the same algorithm")
