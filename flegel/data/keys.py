"""The keys of a job's ``data:`` section, declared once.

:data:`FILE_SPEC` and :data:`SYNTHETIC_SPEC` map every key a file spec or a synthetic spec
may hold to a :class:`flegel.validation.Key`: what it must be (the text messages show after
"expected"), the check, the default the loaders use, and one line of documentation (the job
reference is generated from them).  :mod:`flegel.data.sources` validates specs and fills
defaults from these declarations only; checks that need the file itself (existence, column
counts, array shapes) belong to the readers in :mod:`flegel.data.formats`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from flegel.data.formats import ALIASES, FORMATS
from flegel.data.partition import PARTITIONS
from flegel.data.synthetic import DEFAULT_FEATURES, KINDS, TABLE1, SyntheticSpec
from flegel.validation import REQUIRED, Key

__all__ = [
    "DTYPES",
    "FILE_KEYS",
    "FILE_SPEC",
    "SYNTHETIC_KEYS",
    "SYNTHETIC_SPEC",
    "float_dtype",
    "is_int",
]

#: The dtypes X may have.
DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def float_dtype(value: Any) -> np.dtype | None:
    """``value`` as one of :data:`DTYPES`, or None if it names no such dtype."""
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError):
        return None
    return dt if dt in DTYPES else None


def _listing(values: Any) -> str:
    return ", ".join(map(repr, values))


def _one_of(values: tuple[Any, ...]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v in values


def _int_at_least(minimum: int) -> Callable[[Any], bool]:
    return lambda v: v is None or (is_int(v) and v >= minimum)


def _number(positive: bool) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        return ok and bool(np.isfinite(v)) and v >= 0 and not (positive and v == 0)

    return check


def _is_path(v: Any) -> bool:
    return isinstance(v, (str, os.PathLike)) and bool(str(v).strip())


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


POSITIVE_INT = "a positive integer"
NON_NEGATIVE_INT = "an integer >= 0"

_DTYPE = Key(
    "'float64' or 'float32'",
    lambda v: float_dtype(v) is not None,
    "float64",
    "dtype of X (float32 halves memory and traffic)",
)
_LIMIT = Key(
    POSITIVE_INT,
    _int_at_least(1),
    None,
    "use only the first `limit` rows of the source (MovieLens: users); null: all",
)
_PARTITION = Key(
    f"one of {_listing(PARTITIONS)}",
    _one_of(PARTITIONS),
    "strided",
    "rows per worker: 'strided' deals them round-robin (balanced even for files sorted by "
    "label), 'contiguous' gives each worker one range",
)

#: Every key of a file spec (``data: {path: ...}``).
FILE_SPEC: dict[str, Key] = {
    "source": Key(
        "'file' or 'synthetic'",
        lambda v: v in ("file", "synthetic"),
        "file",
        "where rows come from: 'file' reads `path`, 'synthetic' generates them",
    ),
    "path": Key(
        "a file path",
        _is_path,
        REQUIRED,
        "the data file, or a MovieLens folder holding ratings.csv / ratings.dat; relative "
        "to the job file's folder, `~` expanded",
    ),
    "format": Key(
        f"one of 'auto', {_listing(FORMATS)}",
        _one_of(("auto", *FORMATS, *ALIASES)),
        "auto",
        "file format; 'auto' tells it from the name, then the content (text formats may be "
        "gzipped, detected by content; 'svmlight' and 'idx' are aliases)",
    ),
    "dtype": _DTYPE,
    "label_column": Key(
        "a column index, 'first', 'last' or null",
        lambda v: v is None or (isinstance(v, str) and v in ("first", "last")) or is_int(v),
        None,
        "npy / npz / csv: the column holding the label (0 or 'first', -1 or 'last', any "
        "index); the other columns are X; null: no label column",
    ),
    "label_dtype": Key(
        "one of 'auto', 'int64', 'float64'",
        _one_of(("auto", "int64", "float64")),
        "auto",
        "labels as 'int64' class labels or 'float64' regression targets; 'auto' is int64 "
        "for files (a non-integer label is an error)",
    ),
    "label_path": Key(
        "a file path",
        lambda v: v is None or _is_path(v),
        None,
        "npy: a separate .npy of labels; mnist: the labels-idx1 file (found next to the "
        "images-idx3 file when the key is absent; null for none)",
    ),
    "delimiter": Key(
        "one character, 'whitespace' or 'auto'",
        lambda v: v in (None, "whitespace", "auto") or (isinstance(v, str) and len(v) == 1),
        "auto",
        "csv: field separator; 'whitespace' (or null) for runs of blanks; 'auto': ',' if "
        "the first data line has one, else tab, ';', else blanks",
    ),
    "skip_header": Key(
        NON_NEGATIVE_INT,
        lambda v: v == "auto" or _int_at_least(0)(v),
        "auto",
        "csv: physical lines to skip before the data; 'auto': one if the first line is not "
        "numeric (a header)",
    ),
    "npz_key": Key(
        "an array name",
        _is_name,
        "X",
        "npz: the array holding X",
    ),
    "npz_label_key": Key(
        "an array name or null",
        lambda v: v is None or _is_name(v),
        "y",
        "npz: the array holding the labels (the default is used only if present; a name "
        "given explicitly must exist); null: no labels",
    ),
    "n_features": Key(
        POSITIVE_INT,
        _int_at_least(1),
        None,
        "libsvm: columns of X (null: the largest index; give it with zero_based to save "
        "every worker a pass over the file); other formats: checked against the file",
    ),
    "zero_based": Key(
        "true, false or 'auto'",
        lambda v: v is None or v == "auto" or isinstance(v, bool),
        "auto",
        "libsvm: whether feature indices start at 0; 'auto': true iff index 0 occurs",
    ),
    "n_items": Key(
        POSITIVE_INT,
        _int_at_least(1),
        None,
        "movielens: keep only the n_items most-rated items as columns; null: all items",
    ),
    "normalize": Key(
        "true or false",
        lambda v: isinstance(v, bool),
        True,
        "mnist: scale ubyte pixels to [0, 1]",
    ),
    "limit": _LIMIT,
    "partition": _PARTITION,
}

# The generator's own parameters keep their defaults in SyntheticSpec (the generator is also
# used directly); the keys below take them from there.
_GENERATOR = {f.name: f.default for f in dataclasses.fields(SyntheticSpec)}

#: Every key of a synthetic spec (``data: {source: synthetic, ...}``).
SYNTHETIC_SPEC: dict[str, Key] = {
    "source": Key(
        "'synthetic'",
        lambda v: v == "synthetic",
        REQUIRED,
        "'synthetic': rows are generated, identical whatever the number of workers",
    ),
    "kind": Key(
        f"one of {_listing(KINDS)}",
        _one_of(KINDS),
        REQUIRED,
        "what is generated: Gaussian 'blobs', two-class 'classification', linear "
        "'regression', low-rank 'nonnegative' rows, 28 x 28 digit-like 'images' (required "
        "unless `like` gives it)",
    ),
    "like": Key(
        f"one of {_listing(TABLE1)}",
        lambda v: v is None or str(v).lower() in TABLE1,
        None,
        "take kind, n_points and n_features from a data set of the FSP paper's Table 1 "
        "(keys given explicitly win)",
    ),
    "scale": Key(
        "a positive number",
        _number(positive=True),
        1.0,
        "multiplies n_points (e.g. 0.01 with `like` for a laptop-sized stand-in)",
    ),
    "n_points": Key(
        POSITIVE_INT,
        _int_at_least(1),
        REQUIRED,
        "rows of the data set (required unless `like` gives it)",
    ),
    "n_features": Key(
        POSITIVE_INT,
        _int_at_least(1),
        None,
        "columns of X; null: "
        + ", ".join(f"{d} for {kind}" for kind, d in DEFAULT_FEATURES.items())
        + " (images must be 784)",
    ),
    "centers": Key(
        POSITIVE_INT,
        _int_at_least(1),
        _GENERATOR["centers"],
        "blobs: number of blobs (uniform in [-10, 10]^d)",
    ),
    "cluster_std": Key(
        "a positive number",
        _number(positive=True),
        _GENERATOR["cluster_std"],
        "blobs: standard deviation around each center",
    ),
    "seed": Key(
        NON_NEGATIVE_INT,
        _int_at_least(0),
        _GENERATOR["seed"],
        "seed of the rows (and of the model unless model_seed is given)",
    ),
    "model_seed": Key(
        NON_NEGATIVE_INT,
        _int_at_least(0),
        _GENERATOR["model_seed"],
        "seed of the shared model (centers, hyperplane, basis, templates) only; keep it and "
        "change seed for a held-out split of the same problem; null: seed",
    ),
    "dtype": _DTYPE,
    "rank": Key(
        POSITIVE_INT,
        _int_at_least(1),
        _GENERATOR["rank"],
        "nonnegative: rank of the noise-free matrix",
    ),
    "noise": Key(
        "a number >= 0",
        _number(positive=False),
        _GENERATOR["noise"],
        "std of the noise: classification margin, regression target, nonnegative entries, "
        "image pixels",
    ),
    "limit": _LIMIT,
    "partition": dataclasses.replace(
        _PARTITION, doc="accepted and checked, but synthetic sources are always contiguous"
    ),
}

#: Keys a file spec may hold.
FILE_KEYS = frozenset(FILE_SPEC)

#: Keys a synthetic spec may hold.
SYNTHETIC_KEYS = frozenset(SYNTHETIC_SPEC)
