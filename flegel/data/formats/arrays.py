"""Fixed-record binary arrays, read a shard at a time: the mechanism under npy, npz and mnist.

A :class:`StoredArray` is ``shape[0]`` records of a fixed size inside a file:

* when the records lie uncompressed at a known offset (``.npy``, ``np.savez`` members, raw
  idx files) the file is memory mapped a chunk at a time and the shard's rows are copied out;
* otherwise (``np.savez_compressed`` members, ``.gz`` idx files) the data is decompressed as
  a stream of records, keeping only the shard's records.

Either way a load holds the shard and one chunk, never the whole file (issue 14): a worker's
memory is its shard's bytes plus a fixed baseline, whatever the partition.

:class:`ArrayReader` is the :class:`~flegel.data.formats.base.FileReader` of such formats: a
format only says where X and the labels are (:meth:`ArrayReader.arrays`).
"""

from __future__ import annotations

import mmap
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flegel.data import files
from flegel.data.errors import DataError
from flegel.data.files import FileSpec, read_exact, reading, skip_bytes
from flegel.data.formats.base import FileReader, RowError, TableShape, to_labels
from flegel.data.partition import Shard, take

__all__ = ["ArrayReader", "ArraySource", "StoredArray", "check_numeric", "read_npy_header"]


@dataclass
class StoredArray:
    """A binary array of ``shape[0]`` records inside a file, readable a shard at a time.

    Attributes
    ----------
    path : Path
        The file.
    shape : tuple of int
        Stored shape; X is ``(shape[0], prod(shape[1:]))``.
    dtype : numpy.dtype
        Stored dtype (may be big-endian).
    offset : int or None
        Byte offset of the data in ``path`` when it can be memory-mapped, else None.
    opener : callable or None
        When not mappable: returns a stream positioned at the start of the data.
    fortran : bool
        Stored in Fortran order.
    name : str
        How messages call it (``"array 'X'"``, ``"images"``).
    """

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int | None
    opener: Callable[[], BinaryIO] | None = None
    fortran: bool = False
    name: str = "array"

    @property
    def n(self) -> int:
        """Number of records (rows)."""
        return int(self.shape[0])

    @property
    def width(self) -> int:
        """Values per record (columns of X)."""
        return int(np.prod(self.shape[1:], dtype=np.int64))

    def read_rows(
        self, fs: FileSpec, rows: range, key: str = "path", dtype: np.dtype | None = None
    ) -> np.ndarray:
        """Rows ``rows`` as a new ``(len(rows), width)`` array.

        Parameters
        ----------
        fs : FileSpec
            The spec (for messages).
        rows : range
            Increasing row ids; ids past the end are dropped.
        key : str, optional
            The spec key naming this array, for messages.
        dtype : numpy.dtype, optional
            The dtype of the result (default: the stored dtype).  Values are converted a chunk
            at a time, so no shard-sized array in the stored dtype is ever held.

        Returns
        -------
        numpy.ndarray
        """
        rows = self._clip(rows)
        out = np.empty((len(rows), self.width), dtype=dtype or self.dtype)
        self._gather(fs, rows, key, _into(out, None, None))
        return out

    def read_split(
        self, fs: FileSpec, rows: range, column: int, dtype: np.dtype, key: str = "path"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``rows`` without ``column`` (in ``dtype``), and that column (stored dtype).

        For a label stored as a column of X: the two are split a chunk at a time, so the
        shard is held once, not once with the label column and once without.

        Parameters
        ----------
        fs : FileSpec
            The spec (for messages).
        rows : range
            Increasing row ids; ids past the end are dropped.
        column : int
            The column to split off, ``0 .. width - 1``.
        dtype : numpy.dtype
            The dtype of the other columns.
        key : str, optional
            The spec key naming this array, for messages.

        Returns
        -------
        X : numpy.ndarray
            ``(len(rows), width - 1)`` in ``dtype``.
        column : numpy.ndarray
            ``(len(rows),)`` in the stored dtype.
        """
        rows = self._clip(rows)
        X = np.empty((len(rows), self.width - 1), dtype=dtype)
        col = np.empty(len(rows), dtype=self.dtype)
        self._gather(fs, rows, key, _into(X, col, column))
        return X, col

    def _clip(self, rows: range) -> range:
        return range(rows.start, min(rows.stop, self.n), rows.step)

    def _gather(self, fs: FileSpec, rows: range, key: str, sink: Sink) -> None:
        """Pass the shard's rows to ``sink`` a chunk of the file at a time.

        The file is read as *runs* of records: one run of ``n`` rows for C order; for Fortran
        order, one run per column (``n`` values each), which land in that column.  Of each
        run only the stretch from the shard's first to its last row is read, in chunks of
        about :data:`flegel.data.files.BLOCK_BYTES`, and the shard's rows of a chunk are
        picked with one slice (:func:`flegel.data.partition.take`).  So memory stays at the
        shard plus one chunk, whatever the partition: a strided shard needs a quarter of the
        rows of every chunk (4 workers), but never maps or holds the whole file (issue 14).
        """
        if not len(rows):
            return
        if self.fortran:
            # Run r holds the values of the Fortran-order position r of the trailing index;
            # X's columns are the C order of that index.
            trailing = self.shape[1:]
            order = np.arange(self.width).reshape(trailing, order="F").ravel()
            columns = np.argsort(order).tolist()
            runs, per_record = self.width, 1
        else:
            columns, runs, per_record = [0], 1, self.width
        first, last = rows.start, rows[-1] + 1
        rec = per_record * self.dtype.itemsize
        per = max(1, files.BLOCK_BYTES // rec)
        k = 0

        def pick(run: int, pos: int, chunk: np.ndarray) -> None:
            nonlocal k
            got = chunk[take(rows, pos, pos + len(chunk))]
            sink(k, columns[run], got)
            k += len(got)

        with reading(fs, self.path, key):
            if self.offset is not None:
                self._check_size(fs, key)
                with open(self.path, "rb") as f:
                    for run in range(runs):
                        k = 0
                        base = self.offset + run * self.n * rec
                        for pos in range(first, last, per):
                            m = min(per, last - pos)
                            _mapped(f, base + pos * rec, m, per_record, self.dtype,
                                    partial(pick, run, pos))
                return
            assert self.opener is not None
            with self.opener() as stream:
                at = 0  # stream position, in records from the start of the data
                for run in range(runs):
                    k = 0
                    skip = (run * self.n + first - at) * rec
                    if skip_bytes(stream, skip) != skip:
                        raise self._truncated(fs, key, first)
                    for pos in range(first, last, per):
                        m = min(per, last - pos)
                        buf = read_exact(stream, m * rec)
                        if len(buf) != m * rec:
                            raise self._truncated(fs, key, pos + len(buf) // rec)
                        pick(run, pos, np.frombuffer(buf, self.dtype).reshape(m, per_record))
                    at = run * self.n + last

    def _check_size(self, fs: FileSpec, key: str) -> None:
        """A mapped array's file must hold every record its header promises."""
        want = int(self.offset or 0) + self.n * self.width * self.dtype.itemsize
        size = self.path.stat().st_size
        if size < want:
            rec = self.width * self.dtype.itemsize
            raise self._truncated(fs, key, max(0, size - int(self.offset or 0)) // max(rec, 1))

    def _truncated(self, fs: FileSpec, key: str, at: int) -> DataError:
        return fs.error(
            f"{self.name} is truncated: data ends at row {at}, expected {self.n} rows",
            field=key,
            path=self.path,
        )


#: Takes ``(k, column, rows)``: ``rows`` (a ``(m, w)`` array in the stored dtype) are the
#: shard's rows ``k .. k + m - 1``, stored columns ``column .. column + w - 1``.
Sink = Callable[[int, int, np.ndarray], None]


def _into(X: np.ndarray, col: np.ndarray | None, column: int | None) -> Sink:
    """A sink that copies into X (converting to its dtype), or with ``column`` given, copies
    that stored column into ``col`` and the others into X."""

    def put(k: int, lo: int, got: np.ndarray) -> None:
        m, w = got.shape
        at, hi = slice(k, k + m), lo + w
        if column is None:
            X[at, lo:hi] = got
            return
        assert col is not None
        if lo < column:  # stored columns before the split one keep their index
            X[at, lo : min(hi, column)] = got[:, : min(hi, column) - lo]
        if lo <= column < hi:
            col[at] = got[:, column - lo]
        b = max(lo, column + 1)  # after it, they move one to the left
        if hi > b:
            X[at, b - 1 : hi - 1] = got[:, b - lo :]

    return put


def _mapped(
    f: BinaryIO, start: int, m: int, width: int, dtype: np.dtype,
    visit: Callable[[np.ndarray], None],
) -> None:
    """Map ``m`` records of ``width`` values at byte ``start`` of ``f``, show them to
    ``visit``, then unmap them.

    Mapping one chunk at a time (instead of the whole file) keeps the pages a shard reads
    from counting against the worker's memory only while their chunk is being picked from.
    """
    size = m * width * dtype.itemsize
    base = start - start % mmap.ALLOCATIONGRANULARITY
    mm = mmap.mmap(f.fileno(), start - base + size, access=mmap.ACCESS_READ, offset=base)
    try:
        chunk = np.frombuffer(mm, dtype=dtype, count=m * width, offset=start - base)
        visit(chunk.reshape(m, width))
        del chunk
    finally:
        mm.close()


def check_numeric(fs: FileSpec, arr: StoredArray, key: str) -> None:
    """Reject arrays that are not bool, int or float (strings, objects, structured)."""
    if arr.dtype.kind not in "biuf":
        raise fs.error(
            f"{arr.name} has dtype {arr.dtype}, expected a numeric (bool, int or float) array",
            field=key,
            path=arr.path,
        )


def read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran flag and dtype from a ``.npy`` header at the stream position."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    # Version 3.0 only differs from 2.0 by UTF-8 field names in structured dtypes, which
    # are rejected anyway (not numeric); its layout is 2.0's, and there is no public 3.0 reader.
    return np.lib.format.read_array_header_2_0(f)


@dataclass
class ArraySource:
    """Where an array format's X and labels are (headers only, no data read).

    Attributes
    ----------
    X : StoredArray
        The features (or, with ``label_col``, features and label).
    y : StoredArray or None
        A separate label array.
    label_col : int or None
        The label's column of X (non-negative), if labels come from a column.
    x_key, y_key : str
        Spec keys that name X and y in messages.
    """

    X: StoredArray
    y: StoredArray | None
    label_col: int | None
    x_key: str = "path"
    y_key: str = "label_path"


class ArrayReader(FileReader):
    """A format of fixed-record binary arrays: inspection and loads from :meth:`arrays`."""

    @abstractmethod
    def arrays(self, fs: FileSpec) -> ArraySource:
        """Headers of X and the labels, checked (no data read)."""

    def n_classes(self, fs: FileSpec, src: ArraySource) -> int | None:
        """Distinct labels when cheap to know (default: not known)."""
        return None

    def divisor(self, fs: FileSpec, src: ArraySource) -> float | None:
        """A number X is divided by after loading (default: none)."""
        return None

    def inspect(self, fs: FileSpec) -> TableShape:
        """Shape from the headers (see :meth:`Reader.inspect`)."""
        src = self.arrays(fs)
        d = src.X.width - (src.label_col is not None)
        has_labels = src.y is not None or src.label_col is not None
        return TableShape(src.X.n, d, has_labels, self.n_classes(fs, src))

    def read(self, fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
        """The shard's records of X (and labels), see :meth:`Reader.read`."""
        src = self.arrays(fs)
        rows = shard.rows(src.X.n)
        if src.label_col is not None:
            X, raw = src.X.read_split(fs, rows, src.label_col, fs.dtype, src.x_key)
            return X, to_labels(fs, raw, _bad_row(fs, rows, "label_column"))
        X = src.X.read_rows(fs, rows, src.x_key, fs.dtype)
        divisor = self.divisor(fs, src)
        if divisor is not None:
            X /= divisor  # in place: no second shard-sized array
        if src.y is None:
            return X, None
        labels = src.y.read_rows(fs, rows, src.y_key)
        return X, to_labels(fs, labels, _bad_row(fs, rows, src.y_key))


def _bad_row(fs: FileSpec, rows: range, key: str) -> RowError:
    """Errors about position ``j`` of a shard: row numbers only (records have no lines)."""
    return lambda j, problem: fs.error(f"row {rows[j] + 1} {problem}", field=key)
