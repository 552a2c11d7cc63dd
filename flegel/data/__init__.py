"""The data layer: every worker loads only its own shard of a data source.

A data source is described by a *spec* (the ``data:`` section of a job): a file in one of the
supported formats (``.npy``, ``.npz``, CSV, LIBSVM, MovieLens ratings, MNIST idx; text formats
optionally gzipped) or a deterministic synthetic generator.  :func:`inspect_source` validates
a spec cheaply before a job starts; :func:`load_shard` returns one shard's ``(X, y)``.
See :mod:`flegel.data.sources` for the spec keys.
"""

from flegel.data.errors import DataError
from flegel.data.sources import (
    FILE_KEYS,
    SYNTHETIC_KEYS,
    SourceInfo,
    inspect_source,
    load_shard,
    partition_rows,
    sample_shard,
)
from flegel.data.synthetic import TABLE1

__all__ = [
    "FILE_KEYS",
    "SYNTHETIC_KEYS",
    "TABLE1",
    "DataError",
    "SourceInfo",
    "inspect_source",
    "load_shard",
    "partition_rows",
    "sample_shard",
]
