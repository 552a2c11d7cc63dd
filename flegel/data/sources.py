"""Spec-driven entry points of the data layer: inspect a source, load one shard of it.

A job's ``data:`` section is a *spec*, a plain dict whose keys are declared in
:mod:`flegel.data.keys` (:data:`~flegel.data.keys.FILE_SPEC` for files,
:data:`~flegel.data.keys.SYNTHETIC_SPEC` for generated data).  :func:`inspect_source`
validates it and reads only what is cheap (a ``.npy`` header, a line count, the first line)
so that a job fails before any work starts; :func:`load_shard` is called by every worker for
its own shard and never holds more than that shard.  Both hand the validated spec to the
format's reader (:mod:`flegel.data.formats`).

Synthetic sources take ``kind``, ``n_points`` and ``n_features`` from
:data:`flegel.data.synthetic.TABLE1` with ``like`` (explicit keys win; ``scale`` multiplies
``n_points``) and are always partitioned contiguously.

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

from flegel.data import formats
from flegel.data import synthetic as syn
from flegel.data.checks import Takes, first_bad
from flegel.data.errors import DataError
from flegel.data.files import FileSpec
from flegel.data.keys import (
    FILE_KEYS,
    FILE_SPEC,
    SYNTHETIC_KEYS,
    SYNTHETIC_SPEC,
    float_dtype,
)
from flegel.data.partition import Shard, partition_rows
from flegel.validation import Integer, Key

__all__ = [
    "FILE_KEYS",
    "SYNTHETIC_KEYS",
    "SourceInfo",
    "file_spec",
    "inspect_source",
    "load_shard",
    "partition_rows",
    "sample_shard",
    "synthetic_spec",
]


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
# Spec validation: every check and default comes from the Key declarations
# --------------------------------------------------------------------------------------------


def _err(key: str, name: str, problem: str) -> DataError:
    return DataError(problem, key=f"{key}.{name}")


def _checked(keys: Mapping[str, Key], name: str, key: str, value: Any) -> Any:
    """``value`` if it passes the check of key ``name``, else the DataError that says why."""
    if not keys[name].check(value):
        raise _err(key, name, f"expected {keys[name].expected}, found {value!r}")
    return value


def _get(spec: Mapping[str, Any], keys: Mapping[str, Key], name: str, key: str) -> Any:
    """The checked value of key ``name``, or its declared default when absent."""
    return _checked(keys, name, key, spec.get(name, keys[name].default))


def _int(spec: Mapping[str, Any], keys: Mapping[str, Key], name: str, key: str) -> int | None:
    value = _get(spec, keys, name, key)
    return None if value is None else int(value)


def _check_keys(spec: Mapping[str, Any], allowed: frozenset[str], key: str, what: str) -> None:
    for name in spec:
        if name not in allowed:
            close = difflib.get_close_matches(str(name), sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(allowed))
            raise _err(
                key, str(name), f"unknown key for a {what} source{hint}, expected one of {known}"
            )


def _dtype(spec: Mapping[str, Any], keys: Mapping[str, Key], key: str) -> np.dtype:
    dt = float_dtype(_get(spec, keys, "dtype", key))
    assert dt is not None  # the check passed
    return dt


def _path(value: Any, base_dir: Path, key: str, name: str) -> Path:
    """An absolute path (whatever the working folder) that exists."""
    _checked(FILE_SPEC, name, key, value)
    p = Path(os.path.expanduser(os.fspath(value)))
    if not p.is_absolute():
        p = Path(base_dir).expanduser() / p
    p = Path(os.path.abspath(p))
    if not p.exists():
        raise DataError("file not found, expected an existing file", key=f"{key}.{name}", path=p)
    return p


def _label_column(spec: Mapping[str, Any], key: str) -> int | None:
    value = _get(spec, FILE_SPEC, "label_column", key)
    if value is None:
        return None
    return {"first": 0, "last": -1}[value] if isinstance(value, str) else int(value)


def file_spec(spec: Mapping[str, Any], base_dir: Path | str, key: str = "data") -> FileSpec:
    """Validate a file spec, resolve its path and format, and fill the declared defaults.

    Parameters
    ----------
    spec : mapping
        The data spec (keys: :data:`flegel.data.keys.FILE_SPEC`).
    base_dir : Path or str
        Folder relative paths resolve against.
    key : str, optional
        Key path of the spec in the job, used in error messages.

    Returns
    -------
    FileSpec
        What the format's reader is given.

    Raises
    ------
    DataError
        An unknown key, a value its declaration rejects, a missing file, a format that
        cannot be told, a key the format does not use.
    """
    _check_keys(spec, FILE_KEYS, key, "file")
    if spec.get("path") is None:
        raise _err(key, "path", "missing, expected a file path (or source: synthetic)")
    path = _path(spec["path"], Path(base_dir), key, "path")

    fmt = _get(spec, FILE_SPEC, "format", key)
    fmt = formats.ALIASES.get(fmt, fmt)
    if path.is_dir():
        found = formats.find_in_folder(path, fmt)
        if found is None:
            raise DataError("is a directory, expected a file", key=f"{key}.path", path=path)
        path, fmt = found
    if fmt == "auto":
        fmt = formats.detect_format(path)
        if fmt is None:
            raise DataError(
                "format cannot be told from the name or content, expected one of "
                f"{', '.join(formats.FORMATS)} (set format)",
                key=f"{key}.format",
                path=path,
            )
    reader = formats.READERS[fmt]

    label_column = _label_column(spec, key)
    label_dtype = _get(spec, FILE_SPEC, "label_dtype", key)
    delimiter = _get(spec, FILE_SPEC, "delimiter", key)
    if delimiter in (None, "whitespace", " "):
        delimiter = None
    skip_header = _get(spec, FILE_SPEC, "skip_header", key)
    npz_key = _get(spec, FILE_SPEC, "npz_key", key)
    npz_label_key = _get(spec, FILE_SPEC, "npz_label_key", key)
    if label_column is not None and spec.get("npz_label_key") is not None:
        raise _err(
            key, "npz_label_key", "expected either label_column or npz_label_key, found both"
        )
    zero_based = _get(spec, FILE_SPEC, "zero_based", key)

    label_path: Path | None
    if spec.get("label_path") is not None:
        label_path = _path(spec["label_path"], Path(base_dir), key, "label_path")
    elif "label_path" not in spec:
        label_path = reader.label_file_next_to(path)
    else:
        label_path = None

    fs = FileSpec(
        path=path,
        fmt=fmt,
        key=key,
        dtype=_dtype(spec, FILE_SPEC, key),
        label_column=label_column,
        label_dtype=np.dtype(np.float64 if label_dtype == "float64" else np.int64),
        delimiter=delimiter,
        skip_header=None if skip_header in (None, "auto") else int(skip_header),
        npz_key=npz_key,
        npz_label_key=npz_label_key,
        npz_label_required=spec.get("npz_label_key") is not None,
        n_features=_int(spec, FILE_SPEC, "n_features", key),
        zero_based=None if zero_based == "auto" else zero_based,
        label_path=label_path,
        n_items=_int(spec, FILE_SPEC, "n_items", key),
        normalize=_get(spec, FILE_SPEC, "normalize", key),
    )
    fs = reader.check(fs, spec)
    if fs.label_path is not None and fs.label_column is not None:
        raise _err(key, "label_path", "expected either label_column or label_path, found both")
    return fs


def synthetic_spec(spec: Mapping[str, Any], key: str = "data") -> syn.SyntheticSpec:
    """Validate a synthetic spec, filling shape keys from TABLE1 for ``like``.

    Parameters
    ----------
    spec : mapping
        The data spec (keys: :data:`flegel.data.keys.SYNTHETIC_SPEC`).
    key : str, optional
        Key path of the spec in the job, used in error messages.

    Returns
    -------
    SyntheticSpec

    Raises
    ------
    DataError
        An unknown key, a value its declaration rejects, a missing ``kind`` or ``n_points``.
    """
    _check_keys(spec, SYNTHETIC_KEYS, key, "synthetic")
    keys = SYNTHETIC_SPEC
    merged: dict[str, Any] = {}
    like = _get(spec, keys, "like", key)
    if like is not None:
        merged.update(syn.TABLE1[str(like).lower()])
    merged.update({k: v for k, v in spec.items() if v is not None})
    kind = _checked(keys, "kind", key, merged.get("kind"))
    if "n_points" not in merged:
        raise _err(key, "n_points", "missing, expected the number of points (or like: <name>)")
    n_points = _int(merged, keys, "n_points", key)
    assert n_points is not None
    scale = float(_get(merged, keys, "scale", key))
    n_points = max(1, round(n_points * scale))
    n_features = _int(merged, keys, "n_features", key) or syn.DEFAULT_FEATURES[kind]
    if kind == "images" and n_features != 784:
        raise _err(key, "n_features", f"expected 784 (28 x 28 images), found {n_features}")
    _get(merged, keys, "partition", key)  # checked, then ignored
    model_seed = _int(merged, keys, "model_seed", key)
    return syn.SyntheticSpec(
        kind=kind,
        n_points=n_points,
        n_features=n_features,
        seed=int(_get(merged, keys, "seed", key)),
        dtype=_dtype(merged, keys, key),
        centers=int(_get(merged, keys, "centers", key)),
        cluster_std=float(_get(merged, keys, "cluster_std", key)),
        rank=int(_get(merged, keys, "rank", key)),
        noise=float(_get(merged, keys, "noise", key)),
        model_seed=model_seed,
    )


def _resolve(
    spec: Mapping[str, Any], base_dir: Path | str, key: str
) -> tuple[FileSpec | syn.SyntheticSpec, Mapping[str, Key]]:
    """The validated spec and the key declarations it was checked against."""
    if not isinstance(spec, Mapping):
        raise DataError(f"expected a mapping of data keys, found {type(spec).__name__}", key=key)
    source = spec.get("source", FILE_SPEC["source"].default)
    if source == "synthetic":
        return synthetic_spec(spec, key), SYNTHETIC_SPEC
    _checked(FILE_SPEC, "source", key, source)
    return file_spec(spec, base_dir, key), FILE_SPEC


def _request(
    spec: Mapping[str, Any], base_dir: Path | str, key: str
) -> tuple[FileSpec | syn.SyntheticSpec, formats.Reader[Any], int | None, str]:
    """Validated spec, its reader, ``limit`` and the partition the reader will use."""
    src, keys = _resolve(spec, base_dir, key)
    limit = _int(spec, keys, "limit", key)
    partition = _get(spec, keys, "partition", key)
    reader = formats.reader_for(src)
    return src, reader, limit, reader.partition or partition


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
        The data spec (keys: :data:`flegel.data.FILE_SPEC` or
        :data:`flegel.data.SYNTHETIC_SPEC`).
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
    src, reader, limit, partition = _request(spec, base_dir, key)
    shape = reader.inspect(src)
    if isinstance(src, FileSpec) and src.n_features is not None:
        if src.n_features != shape.n_features:
            raise DataError(
                f"has {shape.n_features} features, expected n_features {src.n_features}",
                key=f"{key}.n_features",
                path=src.path,
            )
    n = shape.n_rows if limit is None else min(shape.n_rows, limit)
    return SourceInfo(
        n,
        shape.n_features,
        shape.has_labels,
        src.dtype,
        shape.n_classes,
        dict(shape.resolved),
        partition,
    )


def load_shard(
    spec: Mapping[str, Any],
    shard: int,
    n_shards: int,
    base_dir: Path | str,
    *,
    key: str = "data",
    takes: Takes | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load one worker's shard of a data source, and nothing more, and check its content.

    Parameters
    ----------
    spec : mapping
        The data spec (keys: :data:`flegel.data.FILE_SPEC` or
        :data:`flegel.data.SYNTHETIC_SPEC`).
    shard : int
        This worker's shard index, ``0 <= shard < n_shards``.
    n_shards : int
        Number of shards (workers).
    base_dir : Path or str
        Folder relative paths resolve against (the job file's folder).
    key : str, optional
        Key path of the spec in the job, used in error messages.
    takes : Takes, optional
        What the algorithm takes (:meth:`flegel.data.checks.Takes.of`); every value of X
        must be finite whatever it says (default: only that).

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
        number of columns, a value that is not a number, a non-integer class label, ...), and
        content the checks refuse (:mod:`flegel.data.checks`: NaN or inf, labels or negative
        values the algorithm does not take), naming the row and column.
    ValueError
        ``shard`` / ``n_shards`` out of range.
    """
    if not Integer(lo=1).is_satisfied_by(n_shards):
        raise ValueError(f"n_shards must be a positive integer, found {n_shards!r}")
    if not Integer(0, n_shards - 1).is_satisfied_by(shard):
        raise ValueError(f"shard must be in 0 .. {n_shards - 1}, found {shard!r}")
    src, reader, limit, partition = _request(spec, base_dir, key)
    part = Shard(int(shard), int(n_shards), partition, limit)
    X, y = reader.read(src, part)
    bad = first_bad(X, y, takes or Takes())
    if bad is not None:
        # Error path only: the shard's row ids (a contiguous shard needs the row count).
        rows = part.open_rows() or part.rows(reader.inspect(src).n_rows)
        raise reader.content_error(src, rows[bad.row], bad, X.shape[1], key)
    return X, y


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
    if not Integer(lo=0).is_satisfied_by(k):
        raise ValueError(f"k must be a non-negative integer, found {k!r}")
    n = len(X)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, size=min(int(k), n), replace=False))
    return np.ascontiguousarray(X[idx]), None if y is None else np.asarray(y)[idx]
