"""Fixed-record binary arrays, read a shard at a time: the mechanism under npy, npz and mnist.

A :class:`StoredArray` is ``shape[0]`` records of a fixed size inside a file:

* when the records lie uncompressed at a known offset (``.npy``, ``np.savez`` members, raw
  idx files) the file is memory mapped and only the shard's rows are copied out;
* otherwise (``np.savez_compressed`` members, ``.gz`` idx files) the data is decompressed as
  a stream of records, keeping only the shard's records.

:class:`ArrayReader` is the :class:`~flegel.data.formats.base.FileReader` of such formats: a
format only says where X and the labels are (:meth:`ArrayReader.arrays`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
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

    def read_rows(self, fs: FileSpec, rows: range, key: str = "path") -> np.ndarray:
        """Rows ``rows`` as a ``(len(rows), width)`` array in the stored dtype (a copy).

        Parameters
        ----------
        fs : FileSpec
            The spec (for messages).
        rows : range
            Increasing row ids; ids past the end are dropped.
        key : str, optional
            The spec key naming this array, for messages.

        Returns
        -------
        numpy.ndarray
        """
        rows = range(rows.start, min(rows.stop, self.n), rows.step)
        if not len(rows):
            return np.empty((0, self.width), dtype=self.dtype)
        if self.offset is not None:
            with reading(fs, self.path, key):
                try:
                    mm = np.memmap(
                        self.path,
                        dtype=self.dtype,
                        mode="r",
                        offset=self.offset,
                        shape=self.shape,
                        order="F" if self.fortran else "C",
                    )
                except ValueError as exc:  # the data is shorter than the header says
                    raise fs.error(
                        f"{self.name} is truncated ({exc}), expected {self.n} rows of "
                        f"{self.width * self.dtype.itemsize} bytes",
                        field=key,
                        path=self.path,
                    ) from exc
                # Slicing the map touches only the pages of the shard's rows.
                part = mm[rows.start : rows.stop : rows.step]
                out = np.ascontiguousarray(part).reshape(len(rows), self.width)
                del mm, part
                return out
        assert self.opener is not None
        with reading(fs, self.path, key), self.opener() as f:
            if self.fortran:
                return self._stream_fortran(fs, f, rows, key)
            return self._stream(fs, f, rows, key)

    def _stream(self, fs: FileSpec, f: BinaryIO, rows: range, key: str) -> np.ndarray:
        """Read the stream record by record, keeping only ``rows``."""
        out = np.empty((len(rows), self.width), dtype=self.dtype)
        if not len(rows):
            return out
        rec = self.width * self.dtype.itemsize
        if skip_bytes(f, rows.start * rec) != rows.start * rec:
            raise self._truncated(fs, key, rows.start)
        pos, k, last = rows.start, 0, rows[-1] + 1
        per = max(1, files.BLOCK_BYTES // max(rec, 1))
        while pos < last:
            m = min(per, last - pos)
            buf = read_exact(f, m * rec)
            if len(buf) != m * rec:
                raise self._truncated(fs, key, pos + len(buf) // max(rec, 1))
            block = np.frombuffer(buf, dtype=self.dtype).reshape(m, self.width)
            got = block[take(rows, pos, pos + m)]
            out[k : k + len(got)] = got
            k += len(got)
            pos += m
        return out

    def _stream_fortran(self, fs: FileSpec, f: BinaryIO, rows: range, key: str) -> np.ndarray:
        """Stream a Fortran-order array: ``width`` runs of ``n`` values, one per column.

        Every run holds one value of every row, so each run is read through and the shard's
        values are picked from it: memory stays at the shard plus one block.
        """
        width, item = self.width, self.dtype.itemsize
        out = np.empty((len(rows), width), dtype=self.dtype)
        per = max(1, files.BLOCK_BYTES // item)
        for col in range(width):
            pos = k = 0
            while pos < self.n:
                m = min(per, self.n - pos)
                buf = read_exact(f, m * item)
                if len(buf) != m * item:
                    raise self._truncated(fs, key, pos + len(buf) // item)
                got = np.frombuffer(buf, dtype=self.dtype)[take(rows, pos, pos + m)]
                out[k : k + len(got), col] = got
                k += len(got)
                pos += m
        trailing = self.shape[1:]
        if len(trailing) > 1:
            # Column c is the Fortran-order position of the trailing index; X is their C order.
            out = out.reshape((len(rows), *trailing[::-1]))
            out = np.ascontiguousarray(out.transpose(0, *range(len(trailing), 0, -1)))
            out = out.reshape(len(rows), width)
        return out

    def _truncated(self, fs: FileSpec, key: str, at: int) -> DataError:
        return fs.error(
            f"{self.name} is truncated: data ends at row {at}, expected {self.n} rows",
            field=key,
            path=self.path,
        )


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
        raw = src.X.read_rows(fs, rows, src.x_key)
        if src.label_col is not None:
            c = src.label_col
            y = to_labels(fs, raw[:, c], _bad_row(fs, rows, "label_column"))
            X = np.empty((len(rows), src.X.width - 1), dtype=fs.dtype)
            # Two slice copies instead of np.delete: no temporary in the stored dtype.
            X[:, :c] = raw[:, :c]
            X[:, c:] = raw[:, c + 1 :]
            return X, y
        X = np.ascontiguousarray(raw, dtype=fs.dtype)
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
