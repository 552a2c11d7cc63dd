"""The one reader interface every data format implements, and what readers share.

A :class:`Reader` turns a validated spec into facts and rows:

* :meth:`Reader.inspect` reads only what is cheap (a header, a line count, the first line)
  and returns a :class:`TableShape`;
* :meth:`Reader.read` returns one shard's ``(X, y)`` -- the rows the shard owns under
  :func:`flegel.data.partition.partition_rows` -- and never materializes more than that.

File formats subclass :class:`FileReader`, which adds the spec checks that do not need the
file (which label keys a format uses), finding a file in a folder, and the hooks
:func:`flegel.data.formats.detect_format` uses to tell a format from a file's name or content.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from flegel.data.checks import Bad
from flegel.data.errors import DataError
from flegel.data.files import FileSpec
from flegel.data.partition import Shard

__all__ = [
    "FileReader",
    "Reader",
    "RowError",
    "RowSink",
    "TableShape",
    "label_column_index",
    "stored_column",
    "to_labels",
]

S = TypeVar("S")

#: Makes the error for position ``j`` of a block of rows: ``(j, problem) -> DataError``.
RowError = Callable[[int, str], DataError]


@dataclass
class TableShape:
    """What an inspection found out about a source (the facts behind ``SourceInfo``).

    Attributes
    ----------
    n_rows : int
        Data points in the whole source (before ``limit``).
    n_features : int
        Columns of X.
    has_labels : bool
        Whether :meth:`Reader.read` returns labels.
    n_classes : int or None
        Distinct label values when cheaply known, else None.
    resolved : dict
        Spec keys the inspection derived from the file (e.g. LIBSVM ``n_features`` and
        ``zero_based``); merged into the spec they let a load skip deriving them again.
    """

    n_rows: int
    n_features: int
    has_labels: bool
    n_classes: int | None = None
    resolved: dict[str, Any] = field(default_factory=dict)


class Reader(ABC, Generic[S]):
    """Reads one kind of source, described by a validated spec of type ``S``."""

    #: The registry name (``"csv"``, ``"synthetic"``, ...).
    name: str = ""

    #: The partition this source always uses, whatever the spec says (None: the spec's).
    partition: str | None = None

    @abstractmethod
    def inspect(self, spec: S) -> TableShape:
        """Cheap facts about the source: its shape, labels and resolved spec keys.

        Parameters
        ----------
        spec : S
            The validated spec.

        Returns
        -------
        TableShape
        """

    @abstractmethod
    def read(self, spec: S, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
        """One shard's rows, and nothing more.

        Parameters
        ----------
        spec : S
            The validated spec.
        shard : Shard
            Which rows: ``shard.rows(n_rows)`` (see :mod:`flegel.data.partition`).

        Returns
        -------
        X : numpy.ndarray
            ``(n_i, d)``, C-contiguous, in the spec's dtype, rows in source order.
        y : numpy.ndarray or None
            ``(n_i,)`` labels, or None.
        """

    def content_error(self, spec: S, row: int, bad: Bad, n_features: int, key: str) -> DataError:
        """The error for a value of row ``row`` that the content checks refused.

        Readers word the place as a user finds it in the source (a text file's line, a
        LIBSVM feature index); this default names the row and column, 1-based.

        Parameters
        ----------
        spec : S
            The validated spec.
        row : int
            Global row id (0-based, as :func:`flegel.data.partition.partition_rows` counts).
        bad : Bad
            What :func:`flegel.data.checks.first_bad` found (column of X, or the label).
        n_features : int
            Columns of X.
        key : str
            Key path of the spec in the job.

        Returns
        -------
        DataError
        """
        where = f"row {row + 1}" + ("" if bad.column is None else f" column {bad.column + 1}")
        return DataError(f"{where} {bad.problem}", key=key)


class FileReader(Reader[FileSpec]):
    """A file format: a :class:`Reader` of :class:`~flegel.data.files.FileSpec`."""

    #: Whether labels may come from a column of the file (``label_column``).
    label_columns: bool = False

    #: Whether labels may come from a second file (``label_path``).
    label_files: bool = False

    #: Added to the "not used" message of ``label_column`` (where labels come from instead).
    label_column_hint: str = ""

    def check(self, fs: FileSpec, spec: Mapping[str, Any]) -> FileSpec:
        """Checks of the spec that need no file; returns the spec the reader will use.

        Parameters
        ----------
        fs : FileSpec
            The spec, validated key by key.
        spec : mapping
            The spec as written (for messages that quote a value).

        Returns
        -------
        FileSpec
            ``fs``, or a copy with keys this format fixes (LIBSVM drops ``label_column``).

        Raises
        ------
        DataError
            A label key the format does not use.
        """
        if fs.label_column is not None and not self.label_columns:
            raise fs.spec_error(
                f"not used by format {self.name!r}, expected null" + self.label_column_hint,
                "label_column",
            )
        if fs.label_path is not None and not self.label_files:
            raise fs.spec_error(f"not used by format {self.name!r}, expected null", "label_path")
        return fs

    def content_error(
        self, spec: FileSpec, row: int, bad: Bad, n_features: int, key: str
    ) -> DataError:
        """Binary arrays (npy, npz, MNIST, ratings): the element as NumPy indexes it.

        ``row`` and the column are 0-based here, as a user inspecting the array in NumPy
        would index it; a column counts the stored columns (the label column included).
        A bad label names the file or key it came from.
        """
        if bad.column is None:
            if spec.label_path is not None:
                return spec.error(
                    f"row {row} (0-based) {bad.problem}", field="label_path", path=spec.label_path
                )
            field = "label_column" if spec.label_column is not None else (
                "npz_label_key" if spec.fmt == "npz" else "path")
            return spec.error(f"row {row} (0-based) {bad.problem}", field=field)
        col = stored_column(spec, bad.column, n_features)
        return spec.error(f"element [{row}, {col}] (0-based) {bad.problem}")

    def label_file_next_to(self, path: Path) -> Path | None:
        """The label file that goes with ``path`` when the spec has no ``label_path`` key."""
        return None

    def find_in(self, folder: Path) -> Path | None:
        """The data file of this format inside ``folder`` (a data set's folder), or None."""
        return None

    def claims_name(self, name: str) -> bool:
        """Whether a file name (lower case, ``.gz`` removed) says it is this format."""
        return False

    def claims_magic(self, magic: bytes) -> bool:
        """Whether a file's first bytes (up to 6) say it is this format."""
        return False

    def claims_line(self, line: bytes) -> bool:
        """Whether a text file's first data line says it is this format."""
        return False


def label_column_index(fs: FileSpec, n_cols: int) -> int | None:
    """The spec's label column as a non-negative index, checked against the column count.

    Parameters
    ----------
    fs : FileSpec
        The spec (``label_column`` raw, possibly negative).
    n_cols : int
        Columns in the file.

    Returns
    -------
    int or None
        ``label_column % n_cols``, or None without a label column.

    Raises
    ------
    DataError
        The column is out of range, or it would leave no feature.
    """
    c = fs.label_column
    if c is None:
        return None
    if not -n_cols <= c < n_cols:
        raise fs.error(
            f"label column {c} is out of range for {n_cols} columns "
            f"(expected -{n_cols} .. {n_cols - 1})",
            field="label_column",
        )
    if n_cols < 2:
        raise fs.error(
            "has 1 column, expected at least 2 when one of them is the label column",
            field="label_column",
        )
    return c % n_cols


def stored_column(fs: FileSpec, column: int, n_features: int) -> int:
    """The file's column (0-based) of column ``column`` of X, past a label column before it.

    Parameters
    ----------
    fs : FileSpec
        The spec (``label_column``, raw).
    column : int
        Column of X (0-based).
    n_features : int
        Columns of X (the file has one more when a label column is taken from it).

    Returns
    -------
    int
    """
    if fs.label_column is None:
        return column
    label = fs.label_column % (n_features + 1)
    return column + (column >= label)


def to_labels(fs: FileSpec, raw: np.ndarray, bad_row: RowError) -> np.ndarray:
    """Labels in the spec's label dtype: int64 classes (checked integral) or float64 targets.

    Parameters
    ----------
    fs : FileSpec
        The spec (``label_dtype``).
    raw : numpy.ndarray
        The stored or parsed label values, one per row.
    bad_row : callable
        ``(j, problem) -> DataError`` for the row at position ``j`` of ``raw``.

    Returns
    -------
    numpy.ndarray
        ``(len(raw),)`` int64 or float64.

    Raises
    ------
    DataError
        A label that is not an integer while classes (int64) are wanted.
    """
    raw = np.asarray(raw).reshape(-1)
    if raw.dtype.kind in "biu" and fs.label_dtype == np.int64:
        return raw.astype(np.int64)
    vals = raw.astype(np.float64)  # a copy: never a view that keeps a whole block alive
    if fs.label_dtype == np.float64:
        return vals
    bad = ~np.isfinite(vals) | (vals != np.rint(vals))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise bad_row(
            j,
            f"has label {float(vals[j])!r}, expected an integer class label "
            "(set label_dtype: float64 for regression targets)",
        )
    return vals.astype(np.int64)


class RowSink:
    """A shard's X (and y), written block by block where they will stay.

    Joining per-block parts at the end holds the shard twice (a 21 MiB strided CSV shard
    raised the peak by 67 MiB).  Here every block is parsed straight into its rows of the
    final arrays, so a load peaks at the shard plus one block:

    * with a known row count (contiguous shards, limits) the arrays are allocated once;
    * a strided shard's count is only known at the end of the file, so the arrays grow by
      each block's rows with :meth:`numpy.ndarray.resize`.  That is ``realloc``, which for
      arrays of more than a few MiB (the ones that matter) is ``mremap`` on Linux: the pages
      move, they are not copied, and the shard is never held twice.  A second counting pass
      would cost a whole extra read (and decompression) of the file instead.

    New rows are zero (``np.zeros``, and ``resize`` zero-fills), which LIBSVM's absent
    features rely on.

    Parameters
    ----------
    d : int
        Columns of X.
    dtype : numpy.dtype
        X's dtype.
    label_dtype : numpy.dtype or None
        y's dtype, or None for a source without labels.
    n_rows : int, optional
        The shard's rows when known.
    """

    def __init__(
        self, d: int, dtype: np.dtype, label_dtype: np.dtype | None, n_rows: int | None = None
    ) -> None:
        cap = 0 if n_rows is None else n_rows
        self.X = np.zeros((cap, d), dtype=dtype)
        self.y = None if label_dtype is None else np.zeros(cap, dtype=label_dtype)
        self.n = 0

    def take(self, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Views of the next ``m`` rows of X and y, to be filled before the next call.

        The views must be dropped before the next :meth:`take`: growing moves the arrays.
        """
        lo, hi = self.n, self.n + m
        if hi > self.X.shape[0]:
            # Exactly the rows needed: no slack to zero-fill and trim again later.
            self.X.resize((hi, self.X.shape[1]), refcheck=False)
            if self.y is not None:
                self.y.resize(hi, refcheck=False)
        self.n = hi
        return self.X[lo:hi], None if self.y is None else self.y[lo:hi]

    def finish(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The filled X and y (C-contiguous; trimmed if a known count was an overestimate)."""
        if self.n < self.X.shape[0]:
            self.X.resize((self.n, self.X.shape[1]), refcheck=False)
            if self.y is not None:
                self.y.resize(self.n, refcheck=False)
        return self.X, self.y
