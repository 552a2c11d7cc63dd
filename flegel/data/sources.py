"""Spec-driven entry points of the data layer: inspect a source, load one shard of it.

A job's ``data:`` section is a *spec*, a plain dict.  :func:`inspect_source` validates it and
reads only what is cheap (a ``.npy`` header, a line count, the first line) so that a job
fails before any work starts; :func:`load_shard` is called by every worker for its own shard
and never holds more than that shard (see :mod:`flegel.data.loaders`).

File specs
----------
``path`` (required)
    The file; relative paths resolve against ``base_dir`` (the job file's folder), ``~`` is
    expanded.  A MovieLens folder holding ``ratings.csv`` / ``ratings.dat`` is accepted.
``format``
    ``"auto"`` (default: by name, then by content), ``"npy"``, ``"npz"``, ``"csv"``,
    ``"libsvm"``, ``"movielens"`` or ``"mnist"``.  Text formats may be gzipped (detected by
    content).
``dtype``
    ``"float64"`` (default) or ``"float32"``: the dtype of X.
``label_column``
    npy / npz / csv: the column holding the label (``0`` / ``"first"``, ``-1`` / ``"last"``,
    any index); the other columns are X.  Default None: no labels.
``label_dtype``
    ``"auto"`` (default), ``"int64"`` or ``"float64"``.  ``auto`` means int64 for every file
    format (class labels; a non-integer label is an error that says to set float64) and float64
    for synthetic regression.  Use ``float64`` for regression targets.
``label_path``
    npy: a separate ``.npy`` of labels; mnist: the ``*-labels-idx1-ubyte[.gz]`` file (found
    next to ``*-images-idx3-ubyte`` automatically when the key is absent; ``null`` for none).
``delimiter``
    csv: field separator (one character); ``null`` or ``"whitespace"`` for runs of blanks.
    Default ``"auto"``: ``","`` if the first data line has a comma, else tab, ``";"``, else
    blanks.
``skip_header``
    csv: physical lines to skip.  Absent (or ``"auto"``): a non-numeric first line is a header.
``npz_key`` / ``npz_label_key``
    npz: array names of X (default ``"X"``) and labels (default ``"y"``, used if present;
    required if given explicitly; ``null`` for none).
``n_features`` / ``zero_based``
    libsvm: number of features (default: the largest index) and index base (default
    ``"auto"``: 0-based iff index 0 occurs).  Without both, every load first scans the file;
    ``SourceInfo.resolved`` carries them.  For other formats ``n_features`` is only checked
    against the file.
``n_items``
    movielens: keep only the ``n_items`` most-rated items as columns (default: all).
``normalize``
    mnist: scale ubyte pixels to [0, 1] (default true).
``limit``
    Use only the first ``limit`` rows of the source (MovieLens: users).
``partition``
    ``"strided"`` (default) or ``"contiguous"``, see :func:`partition_rows`.

Synthetic specs
---------------
``{"source": "synthetic", "kind": ..., "n_points": ..., "n_features": ..., "seed": 0, ...}``
with ``kind`` one of :data:`flegel.data.synthetic.KINDS` and the generator parameters
``centers`` (8), ``cluster_std`` (1.0), ``rank`` (10), ``noise`` (0.1); or
``{"source": "synthetic", "like": "higgs", "scale": 0.01}`` to take ``kind``, ``n_points``
and ``n_features`` from :data:`flegel.data.synthetic.TABLE1` (explicit keys win; ``scale``
multiplies ``n_points``).  Synthetic sources are always partitioned contiguously.

Labels
------
Classification labels are int64 (csv, libsvm, npy/npz labels, mnist, synthetic blobs /
classification / images), regression targets float64 (synthetic regression, or any labelled
file with ``label_dtype: float64``).  MovieLens and synthetic nonnegative have no labels.
LIBSVM labels are returned as written (e.g. -1/+1).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flegel.data import loaders
from flegel.data import synthetic as syn
from flegel.data.errors import DataError
from flegel.data.loaders import FileSpec, Shard, partition_rows

__all__ = [
    "FILE_KEYS",
    "SYNTHETIC_KEYS",
    "SourceInfo",
    "inspect_source",
    "load_shard",
    "partition_rows",
    "sample_shard",
]

#: Keys a file spec may hold.
FILE_KEYS = frozenset(
    {
        "source",
        "path",
        "format",
        "dtype",
        "label_column",
        "label_dtype",
        "label_path",
        "delimiter",
        "skip_header",
        "npz_key",
        "npz_label_key",
        "n_features",
        "zero_based",
        "n_items",
        "normalize",
        "limit",
        "partition",
    }
)

#: Keys a synthetic spec may hold.
SYNTHETIC_KEYS = frozenset(
    {
        "source",
        "kind",
        "like",
        "scale",
        "n_points",
        "n_features",
        "centers",
        "cluster_std",
        "seed",
        "model_seed",
        "dtype",
        "rank",
        "noise",
        "limit",
        "partition",
    }
)

_FORMAT_ALIASES = {"svmlight": "libsvm", "idx": "mnist"}
_PARTITIONS = ("strided", "contiguous")


@dataclass
class SourceInfo:
    """Cheap facts about a data source, known before any rank loads it.

    Attributes
    ----------
    n_rows : int
        Data points that will be used (after ``limit``); MovieLens: users.
    n_features : int
        Columns of X; MovieLens: items.
    has_labels : bool
        Whether :func:`load_shard` returns a y.
    dtype : numpy.dtype
        dtype of X.
    n_classes : int or None
        Number of distinct class labels when cheaply known (synthetic, MNIST, LIBSVM),
        else None.
    resolved : dict
        Spec keys the inspection derived from the file (LIBSVM ``n_features`` and
        ``zero_based``, CSV ``skip_header``).  ``load_shard({**spec, **info.resolved}, ...)``
        skips deriving them again on every rank.
    partition : str
        The partition :func:`load_shard` really uses: the spec's, except ``"contiguous"`` for
        synthetic sources.  ``partition_rows(n_rows, shard, n_shards, info.partition)`` gives
        the global row ids of a shard.
    """

    n_rows: int
    n_features: int
    has_labels: bool
    dtype: np.dtype
    n_classes: int | None = None
    resolved: dict[str, Any] = field(default_factory=dict)
    partition: str = "strided"


# --------------------------------------------------------------------------------------------
# Spec validation
# --------------------------------------------------------------------------------------------


def _err(key: str, name: str, problem: str) -> DataError:
    return DataError(problem, key=f"{key}.{name}")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int(spec: Mapping[str, Any], name: str, key: str, default: int | None, minimum: int) -> Any:
    value = spec.get(name, default)
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise _err(key, name, f"expected {what}, found {value!r}")
    return int(value)


def _float(spec: Mapping[str, Any], name: str, key: str, default: float, positive: bool) -> float:
    value = spec.get(name, default)
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not np.isfinite(value) or value < 0 or (positive and value == 0):
        what = "a positive number" if positive else "a number >= 0"
        raise _err(key, name, f"expected {what}, found {value!r}")
    return float(value)


def _choice(spec: Mapping[str, Any], name: str, key: str, default: str, allowed: Sequence[str]):
    value = spec.get(name, default)
    if value not in allowed:
        raise _err(key, name, f"expected one of {', '.join(map(repr, allowed))}, found {value!r}")
    return value


def _check_keys(spec: Mapping[str, Any], allowed: frozenset[str], key: str, what: str) -> None:
    for name in spec:
        if name not in allowed:
            close = difflib.get_close_matches(str(name), sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(allowed))
            raise _err(
                key, str(name), f"unknown key for a {what} source{hint}, expected one of {known}"
            )


def _dtype(spec: Mapping[str, Any], key: str) -> np.dtype:
    value = spec.get("dtype", "float64")
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise _err(key, "dtype", f"expected 'float64' or 'float32', found {value!r}")
    return dt


def _path(value: Any, base_dir: Path, key: str, name: str) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise _err(key, name, f"expected a file path, found {value!r}")
    p = Path(os.path.expanduser(os.fspath(value)))
    if not p.is_absolute():
        p = Path(base_dir).expanduser() / p
    return Path(os.path.abspath(p))  # absolute in messages, whatever the working folder


def _exists(p: Path, key: str, name: str) -> None:
    if not p.exists():
        raise DataError("file not found, expected an existing file", key=f"{key}.{name}", path=p)


def _label_column(spec: Mapping[str, Any], key: str) -> int | None:
    value = spec.get("label_column")
    if value is None:
        return None
    if value == "first":
        return 0
    if value == "last":
        return -1
    if not _is_int(value):
        raise _err(
            key,
            "label_column",
            f"expected a column index, 'first', 'last' or null, found {value!r}",
        )
    return int(value)


def _file_spec(spec: Mapping[str, Any], base_dir: Path, key: str) -> FileSpec:
    """Validate a file spec and resolve its path and format."""
    _check_keys(spec, FILE_KEYS, key, "file")
    if "path" not in spec or spec["path"] is None:
        raise _err(key, "path", "missing, expected a file path (or source: synthetic)")
    path = _path(spec["path"], base_dir, key, "path")
    _exists(path, key, "path")

    fmt = spec.get("format", "auto")
    fmt = _FORMAT_ALIASES.get(fmt, fmt) if isinstance(fmt, str) else fmt
    if fmt not in ("auto", *loaders.FORMATS):
        raise _err(
            key,
            "format",
            f"expected one of 'auto', {', '.join(map(repr, loaders.FORMATS))}, found "
            f"{spec.get('format')!r}",
        )
    if path.is_dir():
        ratings = loaders.movielens_file(path)
        if ratings is None or fmt not in ("auto", "movielens"):
            raise DataError("is a directory, expected a file", key=f"{key}.path", path=path)
        path, fmt = ratings, "movielens"
    if fmt == "auto":
        fmt = loaders.detect_format(path)
        if fmt is None:
            raise DataError(
                "format cannot be told from the name or content, expected one of "
                f"{', '.join(loaders.FORMATS)} (set format)",
                key=f"{key}.format",
                path=path,
            )

    label_column = _label_column(spec, key)
    if label_column is not None and fmt in ("movielens", "mnist"):
        raise _err(
            key,
            "label_column",
            f"not used by format {fmt!r}, expected null"
            + (" (labels come from label_path)" if fmt == "mnist" else ""),
        )
    if fmt == "libsvm":
        if label_column not in (None, 0):
            raise _err(
                key,
                "label_column",
                f"expected null or 0 for format 'libsvm' (the label is the first token), "
                f"found {spec.get('label_column')!r}",
            )
        label_column = None

    label_dtype = _choice(spec, "label_dtype", key, "auto", ("auto", "int64", "float64"))
    delimiter = spec.get("delimiter", "auto")
    if delimiter in (None, "whitespace", " "):
        delimiter = None
    elif delimiter != "auto" and (not isinstance(delimiter, str) or len(delimiter) != 1):
        raise _err(
            key, "delimiter", f"expected one character, 'whitespace' or 'auto', found {delimiter!r}"
        )
    skip_header = spec.get("skip_header")
    skip_header = None if skip_header == "auto" else _int(spec, "skip_header", key, None, 0)

    npz_key = spec.get("npz_key", "X")
    if not isinstance(npz_key, str) or not npz_key:
        raise _err(key, "npz_key", f"expected an array name, found {npz_key!r}")
    npz_label_key = spec.get("npz_label_key", "y")
    if npz_label_key is not None and (not isinstance(npz_label_key, str) or not npz_label_key):
        raise _err(key, "npz_label_key", f"expected an array name or null, found {npz_label_key!r}")
    if label_column is not None and spec.get("npz_label_key") is not None:
        raise _err(
            key, "npz_label_key", "expected either label_column or npz_label_key, found both"
        )

    zero_based = spec.get("zero_based", "auto")
    if zero_based == "auto":
        zero_based = None
    elif zero_based is not None and not isinstance(zero_based, bool):
        raise _err(key, "zero_based", f"expected true, false or 'auto', found {zero_based!r}")

    label_path = None
    if spec.get("label_path") is not None:
        label_path = _path(spec["label_path"], base_dir, key, "label_path")
        _exists(label_path, key, "label_path")
    elif fmt == "mnist" and "label_path" not in spec:
        # MNIST ships train-images-idx3-ubyte next to train-labels-idx1-ubyte.
        for images, labels in (("images-idx3", "labels-idx1"), ("images.idx3", "labels.idx1")):
            guess = path.with_name(path.name.replace(images, labels))
            if guess != path and guess.is_file():
                label_path = guess
                break
    if label_path is not None and fmt not in ("npy", "mnist"):
        raise _err(key, "label_path", f"not used by format {fmt!r}, expected null")
    if label_path is not None and label_column is not None:
        raise _err(key, "label_path", "expected either label_column or label_path, found both")

    normalize = spec.get("normalize", True)
    if not isinstance(normalize, bool):
        raise _err(key, "normalize", f"expected true or false, found {normalize!r}")

    return FileSpec(
        path=path,
        fmt=fmt,
        key=key,
        dtype=_dtype(spec, key),
        label_column=label_column,
        label_dtype=np.dtype(np.float64 if label_dtype == "float64" else np.int64),
        delimiter=delimiter,
        skip_header=skip_header,
        npz_key=npz_key,
        npz_label_key=npz_label_key,
        npz_label_required=spec.get("npz_label_key") is not None,
        n_features=_int(spec, "n_features", key, None, 1),
        zero_based=zero_based,
        label_path=label_path,
        n_items=_int(spec, "n_items", key, None, 1),
        normalize=normalize,
    )


def _synthetic_spec(spec: Mapping[str, Any], key: str) -> syn.SyntheticSpec:
    """Validate a synthetic spec, filling shape keys from TABLE1 for ``like``."""
    _check_keys(spec, SYNTHETIC_KEYS, key, "synthetic")
    merged: dict[str, Any] = {}
    like = spec.get("like")
    if like is not None:
        entry = syn.TABLE1.get(str(like).lower())
        if entry is None:
            raise _err(
                key, "like", f"expected one of {', '.join(map(repr, syn.TABLE1))}, found {like!r}"
            )
        merged.update(entry)
    merged.update({k: v for k, v in spec.items() if v is not None})
    kind = _choice(merged, "kind", key, None, syn.KINDS)
    if "n_points" not in merged:
        raise _err(key, "n_points", "missing, expected the number of points (or like: <name>)")
    n_points = _int(merged, "n_points", key, None, 1)
    scale = _float(merged, "scale", key, 1.0, positive=True)
    n_points = max(1, round(n_points * scale))
    n_features = _int(merged, "n_features", key, syn.DEFAULT_FEATURES[kind], 1)
    if kind == "images" and n_features != 784:
        raise _err(key, "n_features", f"expected 784 (28 x 28 images), found {n_features}")
    _choice(merged, "partition", key, "strided", _PARTITIONS)  # checked, then ignored
    return syn.SyntheticSpec(
        kind=kind,
        n_points=n_points,
        n_features=n_features,
        seed=_int(merged, "seed", key, 0, 0),
        dtype=_dtype(merged, key),
        centers=_int(merged, "centers", key, 8, 1),
        cluster_std=_float(merged, "cluster_std", key, 1.0, positive=True),
        rank=_int(merged, "rank", key, 10, 1),
        noise=_float(merged, "noise", key, 0.1, positive=False),
        model_seed=(None if merged.get("model_seed") is None
                    else _int(merged, "model_seed", key, 0, 0)),
    )


def _resolve(
    spec: Mapping[str, Any], base_dir: Path | str, key: str
) -> FileSpec | syn.SyntheticSpec:
    if not isinstance(spec, Mapping):
        raise DataError(f"expected a mapping of data keys, found {type(spec).__name__}", key=key)
    source = spec.get("source", "file")
    if source == "synthetic":
        return _synthetic_spec(spec, key)
    if source != "file":
        raise _err(key, "source", f"expected 'file' or 'synthetic', found {source!r}")
    return _file_spec(spec, Path(base_dir), key)


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def inspect_source(
    spec: Mapping[str, Any], base_dir: Path | str, *, key: str = "data"
) -> SourceInfo:
    """Validate a data spec and report the source's shape without loading it.

    Parameters
    ----------
    spec : mapping
        The data spec (see the module docstring).
    base_dir : Path or str
        Folder relative paths resolve against (the job file's folder).
    key : str, optional
        Key path of the spec in the job, used in error messages.

    Returns
    -------
    SourceInfo

    Raises
    ------
    DataError
        Unknown or ill-typed keys, missing files, unreadable or empty files, a first line
        without numbers, a label column out of range, a bad magic, missing npz arrays, ...

    Notes
    -----
    Cost: headers only for npy / npz / mnist; one pass counting lines for csv (no parsing);
    one pass for libsvm (index range and labels) and movielens (id sets).
    """
    src = _resolve(spec, base_dir, key)
    limit = _int(spec, "limit", key, None, 1)
    partition = _choice(spec, "partition", key, "strided", _PARTITIONS)
    if isinstance(src, syn.SyntheticSpec):
        partition = "contiguous"
        n, d, has_labels, n_classes = syn.synthetic_shape(src)
        resolved: dict[str, Any] = {}
        dtype = src.dtype
    else:
        lay = loaders.inspect_file(src)
        n, d, has_labels, n_classes = lay.n_rows, lay.n_features, lay.has_labels, lay.n_classes
        resolved = dict(lay.resolved)
        dtype = src.dtype
        if src.n_features is not None and src.n_features != d:
            raise DataError(
                f"has {d} features, expected n_features {src.n_features}",
                key=f"{key}.n_features",
                path=src.path,
            )
    if limit is not None:
        n = min(n, limit)
    return SourceInfo(n, d, has_labels, dtype, n_classes, resolved, partition)


def load_shard(
    spec: Mapping[str, Any],
    shard: int,
    n_shards: int,
    base_dir: Path | str,
    *,
    key: str = "data",
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load one worker's shard of a data source, and nothing more.

    Parameters
    ----------
    spec : mapping
        The data spec (see the module docstring).
    shard : int
        This worker's shard index, ``0 <= shard < n_shards``.
    n_shards : int
        Number of shards (workers).
    base_dir : Path or str
        Folder relative paths resolve against (the job file's folder).
    key : str, optional
        Key path of the spec in the job, used in error messages.

    Returns
    -------
    X : numpy.ndarray
        ``(n_i, d)`` C-contiguous in the spec's dtype: the rows :func:`partition_rows` gives
        this shard, in file order.
    y : numpy.ndarray or None
        ``(n_i,)`` int64 class labels or float64 targets (see the module docstring), or None.

    Raises
    ------
    DataError
        As :func:`inspect_source`, plus problems in this shard's rows (a row with the wrong
        number of columns, a value that is not a number, a non-integer class label, ...).
    ValueError
        ``shard`` / ``n_shards`` out of range.
    """
    if not _is_int(n_shards) or n_shards < 1:
        raise ValueError(f"n_shards must be a positive integer, found {n_shards!r}")
    if not _is_int(shard) or not 0 <= shard < n_shards:
        raise ValueError(f"shard must be in 0 .. {n_shards - 1}, found {shard!r}")
    src = _resolve(spec, base_dir, key)
    limit = _int(spec, "limit", key, None, 1)
    partition = _choice(spec, "partition", key, "strided", _PARTITIONS)
    if isinstance(src, syn.SyntheticSpec):
        # Chunks are i.i.d.: contiguous shards generate only their own chunks.
        n = src.n_points if limit is None else min(src.n_points, limit)
        return syn.generate_rows(src, partition_rows(n, shard, n_shards, "contiguous"))
    return loaders.load_file(src, Shard(int(shard), int(n_shards), partition, limit))


def sample_shard(
    X: np.ndarray,
    y: np.ndarray | None,
    k: int,
    seed: int | Sequence[int] | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """A seeded uniform sample of ``k`` rows of a shard, without replacement.

    Used to gather initialization samples (e.g. K-means centers) from every worker.

    Parameters
    ----------
    X : numpy.ndarray
        The shard's points.
    y : numpy.ndarray or None
        Its labels.
    k : int
        Rows wanted; all rows if the shard has fewer.
    seed : int, sequence of int or None
        Seed of ``np.random.default_rng`` (e.g. ``[job_seed, rank]``).

    Returns
    -------
    Xs, ys : numpy.ndarray, numpy.ndarray or None
        Copies of the sampled rows, in shard order.
    """
    if not _is_int(k) or k < 0:
        raise ValueError(f"k must be a non-negative integer, found {k!r}")
    n = len(X)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, size=min(int(k), n), replace=False))
    return np.ascontiguousarray(X[idx]), None if y is None else np.asarray(y)[idx]
