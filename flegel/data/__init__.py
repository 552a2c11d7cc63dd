"""The data layer: every worker loads only its own shard of a data source.

A data source is described by a *spec* (the ``data:`` section of a job): a file in one of the
supported formats (``.npy``, ``.npz``, CSV, LIBSVM, MovieLens ratings, MNIST idx; text formats
optionally gzipped) or a deterministic synthetic generator.  :func:`inspect_source` validates
a spec cheaply before a job starts; :func:`load_shard` returns one shard's ``(X, y)``.

The spec keys are declared in :data:`FILE_SPEC` and :data:`SYNTHETIC_SPEC`
(:mod:`flegel.data.keys`); each format is one module of :mod:`flegel.data.formats` behind one
reader interface; :func:`partition_rows` says which rows a shard owns.
"""

from flegel.data.errors import DataError
from flegel.data.keys import FILE_KEYS, FILE_SPEC, SYNTHETIC_KEYS, SYNTHETIC_SPEC
from flegel.data.partition import partition_rows
from flegel.data.sources import SourceInfo, inspect_source, load_shard, sample_shard
from flegel.data.synthetic import TABLE1

__all__ = [
    "FILE_KEYS",
    "FILE_SPEC",
    "SYNTHETIC_KEYS",
    "SYNTHETIC_SPEC",
    "TABLE1",
    "DataError",
    "SourceInfo",
    "inspect_source",
    "load_shard",
    "partition_rows",
    "sample_shard",
]
