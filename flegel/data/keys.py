"""The keys of a job's ``data:`` section, declared once.

:data:`FILE_SPEC` and :data:`SYNTHETIC_SPEC` map every key a file spec or a synthetic spec
may hold to a :class:`flegel.validation.Key`: its constraint (the check and the words messages
show after "expected", :mod:`flegel.validation`'s vocabulary), the default the loaders use, and
one line of documentation (the job reference is generated from them).
:mod:`flegel.data.sources` validates specs and fills defaults from these declarations only;
checks that need the file itself (existence, column counts, array shapes) belong to the
readers in :mod:`flegel.data.formats`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from flegel.data.formats import ALIASES, FORMATS
from flegel.data.partition import PARTITIONS
from flegel.data.synthetic import DEFAULT_FEATURES, KINDS, TABLE1, SyntheticSpec
from flegel.validation import (
    REQUIRED,
    AnyOf,
    Boolean,
    Constraint,
    Described,
    Integer,
    Key,
    Nullable,
    Options,
    PathName,
    Real,
    Text,
)

__all__ = [
    "DTYPES",
    "FILE_KEYS",
    "FILE_SPEC",
    "SYNTHETIC_KEYS",
    "SYNTHETIC_SPEC",
    "float_dtype",
]

#: The dtypes X may have.
DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def float_dtype(value: Any) -> np.dtype | None:
    """``value`` as one of :data:`DTYPES`, or None if it names no such dtype."""
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError):
        return None
    return dt if dt in DTYPES else None


def _is_float_dtype(value: Any) -> bool:
    return float_dtype(value) is not None


def _is_character(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 1


def _names_a_table1_set(value: Any) -> bool:
    return value is None or str(value).lower() in TABLE1


def _or_absent(rule: Constraint, words: str | None = None) -> Described:
    """``rule``, or None: null stands for the key's default (the loaders read an absent key
    as None), so the words do not offer it."""
    return Described(Nullable(rule), rule.describe() if words is None else words)


def _listed(options: Options) -> Described:
    """Options worded as a list: "one of 'a', 'b', 'c'"."""
    return Described(options, options.describe(python=True))


POSITIVE_INT = Integer(lo=1)
#: The data keys word this bound as a comparison ("an integer >= 0").
NON_NEGATIVE_INT = Integer(lo=0)
#: A positive finite number, worded "a positive number" as the job reference always had it.
POSITIVE = Described(Real(lo=0, lo_open=True, finite=True), "a positive number")

_DTYPE = Key(
    Described(_is_float_dtype, "'float64' or 'float32'"),
    "float64",
    "dtype of X (float32 halves memory and traffic)",
)
_LIMIT = Key(
    _or_absent(POSITIVE_INT),
    None,
    "use only the first `limit` rows of the source (MovieLens: users); null: all",
)
_PARTITION = Key(
    _listed(Options(PARTITIONS)),
    "strided",
    "rows per worker: 'strided' deals them round-robin (balanced even for files sorted by "
    "label), 'contiguous' gives each worker one range",
)

#: Every key of a file spec (``data: {path: ...}``).
FILE_SPEC: dict[str, Key] = {
    "source": Key(
        Options(("file", "synthetic")),
        "file",
        "where rows come from: 'file' reads `path`, 'synthetic' generates them",
    ),
    "path": Key(
        PathName("a file path"),
        REQUIRED,
        "the data file, or a MovieLens folder holding ratings.csv / ratings.dat; relative "
        "to the job file's folder, `~` expanded",
    ),
    "format": Key(
        _listed(Options(("auto", *FORMATS), also=ALIASES)),
        "auto",
        "file format; 'auto' tells it from the name, then the content (text formats may be "
        "gzipped, detected by content; 'svmlight' and 'idx' are aliases)",
    ),
    "dtype": _DTYPE,
    "label_column": Key(
        Described(Nullable(AnyOf(Options(("first", "last")), Integer())),
                  "a column index, 'first', 'last' or null"),
        None,
        "npy / npz / csv: the column holding the label (0 or 'first', -1 or 'last', any "
        "index); the other columns are X; null: no label column",
    ),
    "label_dtype": Key(
        _listed(Options(("auto", "int64", "float64"))),
        "auto",
        "labels as 'int64' class labels or 'float64' regression targets; 'auto' is int64 "
        "for files (a non-integer label is an error)",
    ),
    "label_path": Key(
        _or_absent(PathName("a file path")),
        None,
        "npy: a separate .npy of labels; mnist: the labels-idx1 file (found next to the "
        "images-idx3 file when the key is absent; null for none)",
    ),
    "delimiter": Key(
        _or_absent(AnyOf(Described(_is_character, "one character"),
                         Options(("whitespace", "auto")))),
        "auto",
        "csv: field separator; 'whitespace' (or null) for runs of blanks; 'auto': ',' if "
        "the first data line has one, else tab, ';', else blanks",
    ),
    "skip_header": Key(
        _or_absent(AnyOf(NON_NEGATIVE_INT, Options(("auto",))),
                   NON_NEGATIVE_INT.describe(python=True)),
        "auto",
        "csv: physical lines to skip before the data; 'auto': one if the first line is not "
        "numeric (a header)",
    ),
    "npz_key": Key(
        Text("an array name"),
        "X",
        "npz: the array holding X",
    ),
    "npz_label_key": Key(
        Nullable(Text("an array name")),
        "y",
        "npz: the array holding the labels (the default is used only if present; a name "
        "given explicitly must exist); null: no labels",
    ),
    "n_features": Key(
        _or_absent(POSITIVE_INT),
        None,
        "libsvm: columns of X (null: the largest index; give it with zero_based to save "
        "every worker a pass over the file); other formats: checked against the file",
    ),
    "zero_based": Key(
        _or_absent(Options((True, False, "auto"))),
        "auto",
        "libsvm: whether feature indices start at 0; 'auto': true iff index 0 occurs",
    ),
    "n_items": Key(
        _or_absent(POSITIVE_INT),
        None,
        "movielens: keep only the n_items most-rated items as columns; null: all items",
    ),
    "normalize": Key(
        Boolean(),
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
        Options(("synthetic",)),
        REQUIRED,
        "'synthetic': rows are generated, identical whatever the number of workers",
    ),
    "kind": Key(
        _listed(Options(KINDS)),
        REQUIRED,
        "what is generated: Gaussian 'blobs', two-class 'classification', linear "
        "'regression', low-rank 'nonnegative' rows, 28 x 28 digit-like 'images' (required "
        "unless `like` gives it)",
    ),
    "like": Key(
        Described(_names_a_table1_set, Options(TABLE1).describe(python=True)),
        None,
        "take kind, n_points and n_features from a data set of the FSP paper's Table 1 "
        "(keys given explicitly win)",
    ),
    "scale": Key(
        POSITIVE,
        1.0,
        "multiplies n_points (e.g. 0.01 with `like` for a laptop-sized stand-in)",
    ),
    "n_points": Key(
        _or_absent(POSITIVE_INT),
        REQUIRED,
        "rows of the data set (required unless `like` gives it)",
    ),
    "n_features": Key(
        _or_absent(POSITIVE_INT),
        None,
        "columns of X; null: "
        + ", ".join(f"{d} for {kind}" for kind, d in DEFAULT_FEATURES.items())
        + " (images must be 784)",
    ),
    "centers": Key(
        _or_absent(POSITIVE_INT),
        _GENERATOR["centers"],
        "blobs: number of blobs (uniform in [-10, 10]^d)",
    ),
    "cluster_std": Key(
        POSITIVE,
        _GENERATOR["cluster_std"],
        "blobs: standard deviation around each center",
    ),
    "seed": Key(
        _or_absent(NON_NEGATIVE_INT, NON_NEGATIVE_INT.describe(python=True)),
        _GENERATOR["seed"],
        "seed of the rows (and of the model unless model_seed is given)",
    ),
    "model_seed": Key(
        _or_absent(NON_NEGATIVE_INT, NON_NEGATIVE_INT.describe(python=True)),
        _GENERATOR["model_seed"],
        "seed of the shared model (centers, hyperplane, basis, templates) only; keep it and "
        "change seed for a held-out split of the same problem; null: seed",
    ),
    "dtype": _DTYPE,
    "rank": Key(
        _or_absent(POSITIVE_INT),
        _GENERATOR["rank"],
        "nonnegative: rank of the noise-free matrix",
    ),
    "noise": Key(
        Described(Real(lo=0, finite=True), "a number >= 0"),
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
