"""Readers for the file formats: each one reads only the rows of one shard.

Every worker of an MPI job calls these for its own shard, so no reader ever materializes all
rows of a file and then slices them:

* binary arrays (``.npy``, uncompressed members of ``.npz``, raw MNIST idx files) are memory
  mapped and only the shard's rows are copied out;
* compressed binary arrays (``savez_compressed`` members, ``.gz`` idx files) are decompressed
  as a stream of fixed-size records, keeping only the shard's records;
* text formats (CSV, LIBSVM, MovieLens ratings, each optionally gzipped) are read in blocks of
  :data:`BLOCK_BYTES`; a block is split into lines, the shard's lines are picked by slicing
  (row ``i`` of the file belongs to a shard through :func:`partition_rows`) and only those
  lines are parsed.  A strided shard must still *read* every line (the row ids are line
  counts), but it parses and keeps only its own.  A contiguous shard stops reading after its
  last row, and needs a cheap counting pass first to know where its range lies.
  MovieLens needs two passes per rank (the dense id maps, then the ratings of the shard's
  users); LIBSVM one extra pass unless ``n_features`` and ``zero_based`` are given.

Text shards are assembled from per-block parts, so the peak is about twice the shard; the
blocks themselves are a few MiB.

Rows of text files are the non-blank lines after the header (blank and whitespace-only lines
are skipped everywhere, so row numbers in messages and shard boundaries agree with what
:func:`count_rows` counts).  Error messages give the data row (1-based) and, because
users look files up by line, the physical line number.

The spec-level validation (which keys, which types) lives in :mod:`flegel.data.sources`;
this module receives an already validated :class:`FileSpec`.
"""

from __future__ import annotations

import gzip
import re
import struct
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from flegel.data.errors import DataError

__all__ = [
    "BLOCK_BYTES",
    "FORMATS",
    "FileSpec",
    "Layout",
    "Shard",
    "detect_format",
    "inspect_file",
    "load_file",
    "partition_rows",
]

#: Bytes read per step from a text or compressed file.  Large enough that per-block Python
#: overhead is negligible, small enough that a block of lines is a few MiB of memory.
BLOCK_BYTES = 1 << 23

#: The file formats a spec may name (besides ``"auto"``).
FORMATS = ("npy", "npz", "csv", "libsvm", "movielens", "mnist")

#: The longest physical line read while sniffing a file's first lines (header detection).
_HEAD_LINE_BYTES = 1 << 24

#: How many distinct label values an inspection pass tracks before giving up on n_classes.
_MAX_TRACKED_CLASSES = 1000


# --------------------------------------------------------------------------------------------
# Specs, layouts and shards
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSpec:
    """A validated file data spec (built by :mod:`flegel.data.sources`).

    Attributes mirror the spec keys; see :func:`flegel.data.sources.load_shard`.
    ``label_column`` is still raw (may be negative) because the column count is only known
    once the file is opened.  ``key`` is the key path of the spec in the job (``"data"``) and
    prefixes every error message.
    """

    path: Path
    fmt: str
    key: str = "data"
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float64))
    label_column: int | None = None
    label_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.int64))
    delimiter: str | None = "auto"
    skip_header: int | None = None
    npz_key: str = "X"
    npz_label_key: str | None = "y"
    npz_label_required: bool = False
    n_features: int | None = None
    zero_based: bool | None = None
    label_path: Path | None = None
    n_items: int | None = None
    normalize: bool = True

    def error(
        self, problem: str, *, field: str = "path", path: Path | str | None = None
    ) -> DataError:
        """A :class:`DataError` for key ``<key>.<field>`` naming ``path`` (default: the file)."""
        where = self.path if path is None else path
        return DataError(problem, key=f"{self.key}.{field}", path=where)


@dataclass
class Layout:
    """What an inspection found out about a file (turned into ``SourceInfo`` by sources).

    Attributes
    ----------
    n_rows : int
        Data points in the whole file (before ``limit``).
    n_features : int
        Columns of X.
    has_labels : bool
        Whether :func:`load_file` returns labels.
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


def partition_rows(n_rows: int, shard: int, n_shards: int, partition: str = "strided") -> range:
    """Row ids of one shard.

    Parameters
    ----------
    n_rows : int
        Rows in the (limited) source.
    shard, n_shards : int
        This shard's index in ``0 .. n_shards - 1`` and the number of shards.
    partition : {"strided", "contiguous"}
        ``"strided"``: shard ``w`` takes rows ``w, w + N, w + 2N, ...`` -- every shard sees
        every part of the file, so files sorted by label still give balanced shards.
        ``"contiguous"``: near-equal consecutive ranges, the first ``n_rows % N`` shards one
        row longer.

    Returns
    -------
    range
        Increasing row ids.  Over all shards every row appears exactly once and shard sizes
        differ by at most one.
    """
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} out of range for {n_shards} shards")
    if partition == "strided":
        return range(shard, n_rows, n_shards)
    if partition == "contiguous":
        q, r = divmod(n_rows, n_shards)
        start = shard * q + min(shard, r)
        return range(start, start + q + (1 if shard < r else 0))
    raise ValueError(f"partition must be 'strided' or 'contiguous', found {partition!r}")


@dataclass(frozen=True)
class Shard:
    """Which rows a load should return: shard ``index`` of ``count`` under a partition."""

    index: int
    count: int
    partition: str = "strided"
    limit: int | None = None

    def rows(self, n_total: int) -> range:
        """Row ids of this shard of a source with ``n_total`` rows (``limit`` applied)."""
        n = n_total if self.limit is None else min(n_total, self.limit)
        return partition_rows(n, self.index, self.count, self.partition)

    def open_rows(self) -> range | None:
        """Row ids without knowing the row count, or None if that needs the count.

        A strided shard is ``index, index + count, ...`` up to the limit or the end of the
        file, so a text reader can pick its rows in one pass.  A contiguous shard's start
        depends on the total, which the caller has to count first.
        """
        if self.partition != "strided":
            return None
        stop = sys.maxsize if self.limit is None else self.limit
        return range(self.index, stop, self.count)


def take(rows: range, lo: int, hi: int) -> slice:
    """The slice, relative to ``lo``, of a block of rows ``lo .. hi - 1`` that lies in ``rows``.

    ``rows`` is an increasing arithmetic progression (what :func:`partition_rows` returns), so
    the intersection with a block is again one, and picking the shard's lines of a block is a
    C-speed list/array slice instead of a Python test per line.
    """
    step = rows.step
    start = max(rows.start, lo)
    first = rows.start + -(-(start - rows.start) // step) * step
    stop = min(rows.stop, hi)
    if first >= stop:
        return slice(0, 0)
    return slice(first - lo, stop - lo, step)


def _picked(rows: range, lo: int, sl: slice, count: int) -> range:
    """Global row ids of the ``count`` lines picked by ``sl`` from a block starting at ``lo``."""
    return range(lo + sl.start, lo + sl.start + count * rows.step, rows.step)


# --------------------------------------------------------------------------------------------
# Opening files
# --------------------------------------------------------------------------------------------


@contextmanager
def _reading(fs: FileSpec, path: Path | None = None, key: str = "path") -> Iterator[None]:
    """Turn I/O and decompression failures inside the block into a :class:`DataError`."""
    try:
        yield
    except DataError:
        raise
    except FileNotFoundError as exc:
        raise fs.error("file not found, expected an existing file", field=key, path=path) from exc
    except IsADirectoryError as exc:
        raise fs.error("is a directory, expected a file", field=key, path=path) from exc
    except EOFError as exc:
        raise fs.error(
            f"compressed data ends early ({exc}), expected a complete file", field=key, path=path
        ) from exc
    except (OSError, zlib.error, zipfile.BadZipFile) as exc:
        raise fs.error(f"cannot be read ({exc})", field=key, path=path) from exc


def is_gzip(path: Path) -> bool:
    """Whether the file starts with the gzip magic (decided by content, not by name)."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_stream(path: Path) -> BinaryIO:
    """Open a file for binary reading, transparently decompressing gzip."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Read ``n`` bytes or fewer only at the end of the stream (streams may return short)."""
    parts = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _skip_bytes(f: BinaryIO, n: int) -> int:
    """Advance a (possibly compressed) stream by ``n`` bytes; returns how many were skipped."""
    done = 0
    while done < n:
        chunk = f.read(min(BLOCK_BYTES, n - done))
        if not chunk:
            break
        done += len(chunk)
    return done


def _show(raw: bytes | str, limit: int = 40) -> str:
    """A short printable form of a file fragment for messages."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


# --------------------------------------------------------------------------------------------
# Text files: lines in blocks
# --------------------------------------------------------------------------------------------


def _iter_bodies(path: Path) -> Iterator[bytes]:
    """Yield the file as chunks of whole lines (no trailing newline, ``\\r`` removed)."""
    with open_stream(path) as f:
        carry = b""
        while True:
            buf = f.read(BLOCK_BYTES)
            if not buf:
                break
            if carry:
                buf = carry + buf
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            carry = buf[cut + 1 :]
            body = buf[:cut]
            # CRLF files: a stray \r would end up in the last field of every line.
            yield body.replace(b"\r", b"") if b"\r" in body else body
        if carry:
            yield carry.replace(b"\r", b"") if b"\r" in carry else carry


def _is_row(line: bytes, comment: bytes | None) -> bool:
    if not line or line.isspace():
        return False
    return comment is None or not line.lstrip().startswith(comment)


def iter_blocks(
    path: Path, skip_lines: int = 0, comment: bytes | None = None
) -> Iterator[tuple[bytes, list[bytes]]]:
    """Yield ``(body, data lines)`` per block: the non-blank lines after ``skip_lines``.

    Parameters
    ----------
    path : Path
        A text file, optionally gzipped.
    skip_lines : int
        Physical lines (header) to drop first, blank or not.
    comment : bytes, optional
        Lines whose first non-blank characters are this are dropped too (LIBSVM ``#``).

    Notes
    -----
    ``body`` is the raw text of the block (for regex scans); the lines are filtered with a
    list comprehension, which iterates at C speed and does not copy the kept lines.
    """
    to_skip = skip_lines
    for body in _iter_bodies(path):
        lines = body.split(b"\n")
        if to_skip:
            drop = min(to_skip, len(lines))
            lines = lines[drop:]
            to_skip -= drop
        if comment is not None and comment in body:
            yield body, [ln for ln in lines if _is_row(ln, comment)]
        else:
            yield body, [ln for ln in lines if ln and not ln.isspace()]


def iter_line_blocks(
    path: Path, skip_lines: int = 0, comment: bytes | None = None
) -> Iterator[list[bytes]]:
    """Yield blocks of data lines (see :func:`iter_blocks`)."""
    for _, lines in iter_blocks(path, skip_lines, comment):
        yield lines


def count_rows(path: Path, skip_lines: int = 0, comment: bytes | None = None) -> int:
    """Number of data lines, as :func:`iter_line_blocks` yields them."""
    return sum(len(lines) for lines in iter_line_blocks(path, skip_lines, comment))


def first_lines(path: Path, skip_lines: int, want: int) -> list[tuple[int, bytes]]:
    """The first ``want`` non-blank lines after ``skip_lines``, with 1-based line numbers.

    Only the start of the file is read (``readline``), which is what keeps
    :func:`flegel.data.sources.inspect_source` cheap for column checks.
    """
    found: list[tuple[int, bytes]] = []
    with open_stream(path) as f:
        lineno = 0
        while len(found) < want:
            line = f.readline(_HEAD_LINE_BYTES)
            if not line:
                break
            lineno += 1
            if lineno <= skip_lines:
                continue
            line = line.rstrip(b"\r\n")
            if line and not line.isspace():
                found.append((lineno, line))
    return found


def physical_line(path: Path, skip_lines: int, row: int, comment: bytes | None = None) -> int:
    """1-based line number of data row ``row`` (0-based).  Only used to word errors."""
    with open_stream(path) as f:
        lineno = 0
        seen = -1
        while True:
            line = f.readline()
            if not line:
                return -1
            lineno += 1
            if lineno <= skip_lines:
                continue
            if _is_row(line.rstrip(b"\r\n"), comment):
                seen += 1
                if seen == row:
                    return lineno


def _row_error(
    fs: FileSpec,
    row: int,
    skip_lines: int,
    problem: str,
    comment: bytes | None = None,
    field: str = "path",
) -> DataError:
    """An error about data row ``row`` (0-based) worded with its row and line number."""
    line = physical_line(fs.path, skip_lines, row, comment)
    where = f"row {row + 1}" + (f" (line {line})" if line > 0 else "")
    return fs.error(f"{where} {problem}", field=field)


def _split_fields(line: bytes, delim: bytes | None) -> list[bytes]:
    return line.split() if delim is None else line.split(delim)


def _first_non_number(fields: list[bytes]) -> int | None:
    for j, tok in enumerate(fields):
        try:
            float(tok)
        except ValueError:
            return j
    return None


def _labels(
    fs: FileSpec,
    raw: np.ndarray,
    ids: range,
    skip_lines: int,
    field: str,
    comment: bytes | None = None,
) -> np.ndarray:
    """Convert parsed label values to the spec's label dtype, rejecting non-integer classes."""
    if fs.label_dtype == np.float64:
        return np.asarray(raw, dtype=np.float64)
    bad = ~np.isfinite(raw) | (raw != np.rint(raw))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise _row_error(
            fs,
            ids[j],
            skip_lines,
            f"has label {float(raw[j])!r}, expected an integer class label "
            "(set label_dtype: float64 for regression targets)",
            comment,
            field,
        )
    return raw.astype(np.int64)


def _finish(
    xs: list[np.ndarray], ys: list[np.ndarray] | None, d: int, fs: FileSpec
) -> tuple[np.ndarray, np.ndarray | None]:
    """Join per-block parts into the shard's C-contiguous X (and y)."""
    if xs:
        X = xs[0] if len(xs) == 1 else np.concatenate(xs, axis=0)
    else:
        X = np.empty((0, d), dtype=fs.dtype)
    X = np.ascontiguousarray(X, dtype=fs.dtype)
    if ys is None:
        return X, None
    if ys:
        y = ys[0] if len(ys) == 1 else np.concatenate(ys)
    else:
        y = np.empty(0, dtype=fs.label_dtype)
    return X, np.ascontiguousarray(y)


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CsvLayout:
    skip_lines: int
    n_cols: int
    label_col: int | None
    delim: bytes | None


def _sniff_delimiter(line: bytes) -> bytes | None:
    """``delimiter: auto``: comma if the line has one, else tab, semicolon, else blanks."""
    for sep in (b",", b"\t", b";"):
        if sep in line:
            return sep
    return None


def normalize_label_column(fs: FileSpec, n_cols: int) -> int | None:
    """The label column as a non-negative index, checked against the column count."""
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


def csv_layout(fs: FileSpec) -> _CsvLayout:
    """Header, column count and label column from the first lines of a CSV file."""
    skip = fs.skip_header or 0
    with _reading(fs):
        head = first_lines(fs.path, skip, 2)
    if not head:
        if skip:
            raise fs.error(
                f"has no data rows after the {skip} line(s) skipped by skip_header, "
                "expected at least one"
            )
        raise fs.error("file is empty, expected at least one data row")
    lineno, line = head[0]
    if any(b"\0" in ln for _, ln in head):
        raise fs.error("has binary data, expected CSV text (is the format right?)")
    if fs.delimiter == "auto":
        delim = _sniff_delimiter(head[-1][1])  # the first data line if there is a header
    else:
        delim = None if fs.delimiter is None else fs.delimiter.encode()
    fields = _split_fields(line, delim)
    if fs.skip_header is None and _first_non_number(fields) is not None:
        # A non-numeric first line is a header (e.g. "label,lepton_pT,...").
        if len(head) < 2:
            raise fs.error(
                f"has only a header line ({_show(line)}), expected at least one data row"
            )
        skip = lineno
        lineno, line = head[1]
        fields = _split_fields(line, delim)
    bad = _first_non_number(fields)
    if bad is not None:
        raise fs.error(
            f"row 1 (line {lineno}) column {bad + 1} is {_show(fields[bad])}, expected a number"
            + (" (is the delimiter right?)" if len(fields) == 1 else "")
        )
    n_cols = len(fields)
    return _CsvLayout(skip, n_cols, normalize_label_column(fs, n_cols), delim)


def inspect_csv(fs: FileSpec) -> Layout:
    """Columns from the first line, then one pass counting rows and checking column counts.

    Values are not parsed (that is the load's job), but a ragged file is cheap to catch here:
    a block whose delimiter count is what ``rows x (columns - 1)`` says almost surely has no
    ragged row (C-speed ``bytes.count``), and only a block that disagrees is scanned line by
    line to name the row.
    """
    lay = csv_layout(fs)
    n = 0
    with _reading(fs):
        for lines in iter_line_blocks(fs.path, lay.skip_lines):
            text = b"\n".join(lines)
            if lay.delim is None:
                fields = len(text.split())
            else:
                fields = text.count(lay.delim) + len(lines)
            if fields != len(lines) * lay.n_cols:
                for j, line in enumerate(lines):
                    found = len(_split_fields(line, lay.delim))
                    if found != lay.n_cols:
                        raise _row_error(
                            fs, n + j, lay.skip_lines, f"has {found} columns, expected {lay.n_cols}"
                        )
            n += len(lines)
    d = lay.n_cols - (lay.label_col is not None)
    return Layout(n, d, lay.label_col is not None, None, {"skip_header": lay.skip_lines})


def _parse_csv(fs: FileSpec, lines: list[bytes], ids: range, lay: _CsvLayout) -> np.ndarray:
    """Parse the picked lines with NumPy's C parser; on failure find and name the bad row."""
    delim = None if lay.delim is None else lay.delim.decode()
    try:
        arr = np.loadtxt(lines, delimiter=delim, dtype=np.float64, ndmin=2, comments=None)
    except ValueError:
        arr = None
    if arr is not None and arr.shape == (len(lines), lay.n_cols):
        return arr
    # Error path only: a Python pass over the block to say which row is wrong and how.
    for j, line in enumerate(lines):
        fields = _split_fields(line, lay.delim)
        if len(fields) != lay.n_cols:
            raise _row_error(
                fs, ids[j], lay.skip_lines, f"has {len(fields)} columns, expected {lay.n_cols}"
            )
        bad = _first_non_number(fields)
        if bad is not None:
            raise _row_error(
                fs,
                ids[j],
                lay.skip_lines,
                f"column {bad + 1} is {_show(fields[bad])}, expected a number",
            )
    raise fs.error(f"rows {ids[0] + 1} .. {ids[-1] + 1} cannot be parsed as numbers")


def load_csv(fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
    """Stream a CSV file and parse only the shard's lines (see the module docstring)."""
    lay = csv_layout(fs)
    rows = shard.open_rows()
    if rows is None:
        with _reading(fs):
            rows = shard.rows(count_rows(fs.path, lay.skip_lines))
    d = lay.n_cols - (lay.label_col is not None)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] | None = None if lay.label_col is None else []
    g = 0
    with _reading(fs):
        for lines in iter_line_blocks(fs.path, lay.skip_lines):
            lo, g = g, g + len(lines)
            sl = take(rows, lo, g)
            kept = lines[sl]
            if kept:
                ids = _picked(rows, lo, sl, len(kept))
                arr = _parse_csv(fs, kept, ids, lay)
                if lay.label_col is None:
                    xs.append(arr.astype(fs.dtype, copy=False))
                else:
                    assert ys is not None
                    raw = arr[:, lay.label_col]
                    ys.append(_labels(fs, raw, ids, lay.skip_lines, "label_column"))
                    xs.append(np.delete(arr, lay.label_col, axis=1).astype(fs.dtype, copy=False))
            if g >= rows.stop:
                break  # contiguous shards and limits stop reading early
    return _finish(xs, ys, d, fs)


# --------------------------------------------------------------------------------------------
# LIBSVM / SVMlight
# --------------------------------------------------------------------------------------------

# A feature index: the digits before ':' at the start of a token ("qid:3" does not match).
_SVM_INDEX = re.compile(rb"(?:^|[ \t])(\d+):")


def _svm_index_range(lines: list[bytes]) -> tuple[int, int] | None:
    """Smallest and largest feature index of a block of LIBSVM lines, or None if none.

    LIBSVM requires ascending indices within a line (scikit-learn enforces it too and so do
    the loads here), so only each line's first and last feature token need parsing: one split
    per line instead of a regex match per feature, ~30x less work on dense data like HIGGS.
    """
    ends = [ln.split(None, 2)[1:2] + ln.rsplit(None, 1)[-1:] for ln in lines]
    found = _SVM_INDEX.findall(b" ".join(b" ".join(e) for e in ends))
    if not found:
        return None
    idx = np.array(found).astype(np.int64)
    return int(idx.min()), int(idx.max())


def inspect_libsvm(fs: FileSpec) -> Layout:
    """One streaming pass: rows, smallest/largest feature index and the label values.

    The index range decides ``zero_based`` (``"auto"``: zero-based iff index 0 occurs, as in
    scikit-learn) and ``n_features`` (largest index, unless the spec gives it); both go into
    ``Layout.resolved`` so that loads need no pass of their own.
    """
    n = 0
    lo_idx: int | None = None
    hi_idx: int | None = None
    labels: set[bytes] | None = set()
    with _reading(fs):
        for body, lines in iter_blocks(fs.path, 0, b"#"):
            n += len(lines)
            if b"#" in body:
                lines = [ln.split(b"#", 1)[0] for ln in lines]
            if b"qid:" in body:
                lines = [
                    b" ".join(t for t in ln.split() if not t.startswith(b"qid:")) for ln in lines
                ]
            span = _svm_index_range(lines)
            if span is not None:
                lo_idx = span[0] if lo_idx is None else min(lo_idx, span[0])
                hi_idx = span[1] if hi_idx is None else max(hi_idx, span[1])
            if labels is not None:
                labels.update(ln.split(None, 1)[0] for ln in lines)
                if len(labels) > _MAX_TRACKED_CLASSES:
                    labels = None  # regression targets: n_classes is not meaningful
    if n == 0:
        raise fs.error("file is empty, expected lines 'label index:value ...'")
    zero_based = fs.zero_based if fs.zero_based is not None else lo_idx == 0
    if fs.zero_based is False and lo_idx == 0:
        raise fs.error(
            "has feature index 0, expected 1-based indices (zero_based is false)",
            field="zero_based",
        )
    if fs.n_features is not None:
        d = fs.n_features
        if hi_idx is not None and hi_idx + zero_based > d:
            raise fs.error(
                f"has feature index {hi_idx}, expected at most {d - zero_based} "
                f"for n_features {d} ({'0' if zero_based else '1'}-based)",
                field="n_features",
            )
    elif hi_idx is None:
        raise fs.error("has no 'index:value' features, expected at least one (or set n_features)")
    else:
        d = hi_idx + 1 if zero_based else hi_idx
    n_classes = None
    if labels is not None:
        try:
            values = {float(t) for t in labels}
        except ValueError:
            values = set()
        if values and all(v.is_integer() for v in values):
            n_classes = len(values)
    return Layout(n, d, True, n_classes, {"n_features": d, "zero_based": bool(zero_based)})


def _parse_libsvm(
    fs: FileSpec, lines: list[bytes], ids: range, d: int, zero_based: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Parse picked LIBSVM lines into a dense block and float labels."""
    k = len(lines)
    labels = np.empty(k, dtype=np.float64)
    counts = np.empty(k, dtype=np.int64)
    toks: list[bytes] = []
    for j, line in enumerate(lines):
        if b"#" in line:
            line = line.split(b"#", 1)[0]
        parts = line.split()
        try:
            labels[j] = float(parts[0])
        except ValueError:
            problem = f"has label {_show(parts[0])}, expected a number ('label index:value ...')"
            raise _row_error(fs, ids[j], 0, problem, b"#") from None
        feats = parts[1:]
        if feats and feats[0].startswith(b"qid:"):
            feats = feats[1:]  # SVMrank query ids are not features
        counts[j] = len(feats)
        toks.extend(feats)
    if not toks:
        return np.zeros((k, d), dtype=fs.dtype), labels
    joined = b" ".join(toks)
    pairs = None
    if joined.count(b":") == len(toks):
        try:
            pairs = np.loadtxt([joined.replace(b":", b" ")], dtype=np.float64, ndmin=1)
        except ValueError:
            pairs = None
    if pairs is None or pairs.size != 2 * len(toks):
        ends = np.cumsum(counts)
        for t, tok in enumerate(toks):
            i, sep, v = tok.partition(b":")
            if not sep or _first_non_number([i, v]) is not None or b":" in v:
                j = int(np.searchsorted(ends, t, side="right"))
                raise _row_error(
                    fs, ids[j], 0, f"has feature {_show(tok)}, expected 'index:value'", b"#"
                )
        raise fs.error(f"rows {ids[0] + 1} .. {ids[-1] + 1} cannot be parsed")
    pairs = pairs.reshape(-1, 2)
    idx = pairs[:, 0]
    cols = idx.astype(np.int64) - (0 if zero_based else 1)
    bad = (idx != np.rint(idx)) | (cols < 0) | (cols >= d)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        j = int(np.searchsorted(np.cumsum(counts), t, side="right"))
        base = "0" if zero_based else "1"
        hint = " (set zero_based: true)" if idx[t] == 0 and not zero_based else ""
        problem = (
            f"has feature index {idx[t]:g}, expected {base} .. {d - 1 + (not zero_based)} "
            f"for n_features {d} ({base}-based){hint}"
        )
        raise _row_error(fs, ids[j], 0, problem, b"#")
    ends = np.cumsum(counts)
    # Indices must ascend within a line (the LIBSVM format; inspection relies on it).
    steps = np.diff(cols)
    breaks = ends[:-1][(ends[:-1] > 0) & (ends[:-1] < len(cols))]
    steps[breaks - 1] = 1  # pairs across a line break don't count
    if (steps <= 0).any():
        t = int(np.flatnonzero(steps <= 0)[0]) + 1
        j = int(np.searchsorted(ends, t, side="right"))
        problem = (
            f"has feature index {idx[t]:g} after {idx[t - 1]:g}, expected indices in "
            "ascending order (LIBSVM format)"
        )
        raise _row_error(fs, ids[j], 0, problem, b"#")
    X = np.zeros((k, d), dtype=fs.dtype)
    X[np.repeat(np.arange(k), counts), cols] = pairs[:, 1]
    return X, labels


def load_libsvm(fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
    """Dense X of the shard's LIBSVM lines; labels int64 (or float64 with label_dtype).

    Without ``n_features`` *and* ``zero_based`` in the spec every rank first makes the
    inspection pass (pass ``SourceInfo.resolved`` to skip it).
    """
    d, zero_based = fs.n_features, fs.zero_based
    rows = shard.open_rows()
    if d is None or zero_based is None or rows is None:
        lay = inspect_libsvm(fs)
        d, zero_based = lay.resolved["n_features"], lay.resolved["zero_based"]
        if rows is None:
            rows = shard.rows(lay.n_rows)
    assert d is not None and zero_based is not None
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    g = 0
    with _reading(fs):
        for lines in iter_line_blocks(fs.path, 0, b"#"):
            lo, g = g, g + len(lines)
            sl = take(rows, lo, g)
            kept = lines[sl]
            if kept:
                ids = _picked(rows, lo, sl, len(kept))
                X, raw = _parse_libsvm(fs, kept, ids, d, zero_based)
                xs.append(X)
                ys.append(_labels(fs, raw, ids, 0, "path", b"#"))
            if g >= rows.stop:
                break
    return _finish(xs, ys, d, fs)


# --------------------------------------------------------------------------------------------
# MovieLens ratings -> dense user x item rows
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RatingsLayout:
    skip_lines: int
    sep: bytes  # "::" (ratings.dat), "," (ratings.csv) or "\t" (u.data)


@dataclass(frozen=True)
class RatingsIndex:
    """Dense ids of a ratings file: sorted raw user ids and the kept item ids (columns)."""

    users: np.ndarray
    items: np.ndarray
    n_ratings: int


def _ratings_layout(fs: FileSpec) -> _RatingsLayout:
    with _reading(fs):
        head = first_lines(fs.path, 0, 2)
    if not head:
        raise fs.error("file is empty, expected ratings 'user::item::rating::timestamp'")
    lineno, line = head[0]
    sep = b"::" if b"::" in line else b"\t" if b"\t" in line else b","
    fields = line.split(sep)
    skip = 0
    if sep != b"::" and _first_non_number(fields[:1]) is not None:
        # ratings.csv starts with "userId,movieId,rating,timestamp" (ratings.dat has none).
        if len(head) < 2:
            raise fs.error(f"has only a header line ({_show(line)}), expected ratings")
        skip = lineno
        lineno, line = head[1]
        fields = line.split(sep)
    if len(fields) < 3 or _first_non_number(fields[:3]) is not None:
        raise fs.error(
            f"row 1 (line {lineno}) is {_show(line)}, expected "
            "'user::item::rating::timestamp' (ratings.dat) or 'userId,movieId,rating,...'"
        )
    return _RatingsLayout(skip, sep)


def _parse_ratings(
    fs: FileSpec, lines: list[bytes], first_row: int, lay: _RatingsLayout
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user ids, item ids, ratings) of a block of rating lines."""
    if lay.sep == b"::":
        # One C-level replace turns "u::i::r::t" into a single-character delimiter.
        lines = b"\n".join(lines).replace(b"::", b",").split(b"\n")
        sep = ","
    else:
        sep = lay.sep.decode()
    try:
        arr = np.loadtxt(
            lines, delimiter=sep, usecols=(0, 1, 2), dtype=np.float64, ndmin=2, comments=None
        )
    except ValueError:
        arr = None
    ok = arr is not None and arr.shape[0] == len(lines)
    if ok:
        assert arr is not None
        ids = arr[:, :2]
        ok = bool(np.all(ids == np.rint(ids)))
    if not ok:
        for j, line in enumerate(lines):
            fields = line.split(sep.encode())
            if len(fields) < 3:
                raise _row_error(
                    fs,
                    first_row + j,
                    lay.skip_lines,
                    f"has {len(fields)} fields, expected user, item, rating",
                )
            bad = _first_non_number(fields[:3])
            if bad is None:
                bad = next((c for c in (0, 1) if not float(fields[c]).is_integer()), None)
            if bad is not None:
                what = ("an integer user id", "an integer item id", "a number")[bad]
                raise _row_error(
                    fs,
                    first_row + j,
                    lay.skip_lines,
                    f"field {bad + 1} is {_show(fields[bad])}, expected {what}",
                )
        raise fs.error(f"rows {first_row + 1} .. cannot be parsed as ratings")
    assert arr is not None
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]


def _iter_ratings(
    fs: FileSpec, lay: _RatingsLayout
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    g = 0
    with _reading(fs):
        for lines in iter_line_blocks(fs.path, lay.skip_lines):
            if lines:
                yield _parse_ratings(fs, lines, g, lay)
            g += len(lines)


def ratings_index(fs: FileSpec) -> RatingsIndex:
    """Streaming pass collecting the sorted unique user and item ids (and item popularity).

    With ``n_items`` only the ``n_items`` most-rated items are kept as columns (ties go to the
    smaller id); the paper's ML25M matrix has 5,000 of the 62,423 movies.
    """
    lay = _ratings_layout(fs)
    users = np.empty(0, dtype=np.int64)
    items = np.empty(0, dtype=np.int64)
    counts = np.empty(0, dtype=np.int64)
    n = 0
    for u, i, _ in _iter_ratings(fs, lay):
        n += len(u)
        users = np.union1d(users, u)
        bi, bc = np.unique(i, return_counts=True)
        merged, inv = np.unique(np.concatenate([items, bi]), return_inverse=True)
        counts = np.bincount(
            inv, weights=np.concatenate([counts, bc]), minlength=len(merged)
        ).astype(np.int64)
        items = merged
    if n == 0:
        raise fs.error("has no ratings, expected lines 'user::item::rating::timestamp'")
    if fs.n_items is not None and fs.n_items < len(items):
        # Most-rated first; lexsort's last key is primary, so ties fall back to the id.
        order = np.lexsort((items, -counts))[: fs.n_items]
        items = np.sort(items[order])
    return RatingsIndex(users, items, n)


def inspect_movielens(fs: FileSpec) -> Layout:
    """Users (rows) and items (columns) of a ratings file: one streaming pass over it."""
    idx = ratings_index(fs)
    return Layout(len(idx.users), len(idx.items), False, None)


def load_movielens(fs: FileSpec, shard: Shard) -> tuple[np.ndarray, None]:
    """The shard's rows of the dense user x item rating matrix (missing ratings are 0).

    Two streaming passes per rank: the first collects the id maps (a user's row is its rank
    among the sorted user ids, so it is only known after seeing all users), the second keeps
    the ratings of this shard's users.  Neither holds more than a block of ratings.
    """
    lay = _ratings_layout(fs)
    idx = ratings_index(fs)
    rows = shard.rows(len(idx.users))
    X = np.zeros((len(rows), len(idx.items)), dtype=fs.dtype)
    if not len(rows):
        return X, None
    for u, i, r in _iter_ratings(fs, lay):
        uidx = np.searchsorted(idx.users, u)
        keep = (uidx >= rows.start) & (uidx < rows.stop) & ((uidx - rows.start) % rows.step == 0)
        if not keep.any():
            continue
        col = np.searchsorted(idx.items, i[keep])
        col_ok = col < len(idx.items)
        col_ok[col_ok] = idx.items[col[col_ok]] == i[keep][col_ok]
        local = (uidx[keep] - rows.start) // rows.step
        X[local[col_ok], col[col_ok]] = r[keep][col_ok]
    return X, None


# --------------------------------------------------------------------------------------------
# Fixed-record binary arrays: .npy, .npz members, idx files
# --------------------------------------------------------------------------------------------


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
        return int(self.shape[0])

    @property
    def width(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64))

    def read_rows(self, fs: FileSpec, rows: range, key: str = "path") -> np.ndarray:
        """Rows ``rows`` as a ``(len(rows), width)`` array in the stored dtype (a copy)."""
        rows = range(rows.start, min(rows.stop, self.n), rows.step)
        if not len(rows):
            return np.empty((0, self.width), dtype=self.dtype)
        if self.offset is not None:
            with _reading(fs, self.path, key):
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
        with _reading(fs, self.path, key), self.opener() as f:
            if self.fortran:
                return self._stream_fortran(fs, f, rows, key)
            return self._stream(fs, f, rows, key)

    def _stream(self, fs: FileSpec, f: BinaryIO, rows: range, key: str) -> np.ndarray:
        """Read the stream record by record, keeping only ``rows``."""
        out = np.empty((len(rows), self.width), dtype=self.dtype)
        if not len(rows):
            return out
        rec = self.width * self.dtype.itemsize
        if _skip_bytes(f, rows.start * rec) != rows.start * rec:
            raise self._truncated(fs, key, rows.start)
        pos, k, last = rows.start, 0, rows[-1] + 1
        per = max(1, BLOCK_BYTES // max(rec, 1))
        while pos < last:
            m = min(per, last - pos)
            buf = _read_exact(f, m * rec)
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
        per = max(1, BLOCK_BYTES // item)
        for col in range(width):
            pos = k = 0
            while pos < self.n:
                m = min(per, self.n - pos)
                buf = _read_exact(f, m * item)
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


def _check_numeric(fs: FileSpec, arr: StoredArray, key: str) -> None:
    if arr.dtype.kind not in "biuf":
        raise fs.error(
            f"{arr.name} has dtype {arr.dtype}, expected a numeric (bool, int or float) array",
            field=key,
            path=arr.path,
        )


def _read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran flag and dtype from a ``.npy`` header at the stream position."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    # Version 3.0 only differs from 2.0 by UTF-8 field names in structured dtypes, which
    # are rejected anyway (not numeric); its layout is 2.0's, and there is no public 3.0 reader.
    return np.lib.format.read_array_header_2_0(f)


def _npz_header(fs: FileSpec, f: BinaryIO, member: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        return _read_npy_header(f)
    except ValueError as exc:
        raise fs.error(f"member {member!r} is not a .npy array ({exc})") from exc


def npy_array(fs: FileSpec, path: Path, key: str = "path") -> StoredArray:
    """Header of a ``.npy`` file via ``np.load(mmap_mode='r')`` (reads no data)."""
    with _reading(fs, path, key):
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic[:4] == b"PK\x03\x04":
            raise fs.error(
                "is an .npz archive, expected a .npy file (set format: npz)", field=key, path=path
            )
        if magic != b"\x93NUMPY":
            hint = (
                " (gzipped .npy files are not supported: decompress it)"
                if (magic[:2] == b"\x1f\x8b")
                else ""
            )
            raise fs.error(
                f"starts with {magic!r}, expected the .npy magic b'\\x93NUMPY'{hint}",
                field=key,
                path=path,
            )
        try:
            m = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            raise fs.error(
                f"cannot be mapped as an array ({exc}), expected a numeric .npy array",
                field=key,
                path=path,
            ) from exc
        shape, dtype, offset = tuple(m.shape), m.dtype, int(m.offset)
        fortran = bool(m.flags.f_contiguous and not m.flags.c_contiguous)
        del m
    arr = StoredArray(path, shape, dtype, offset, None, fortran, "array")
    _check_numeric(fs, arr, key)
    return arr


def npz_member(fs: FileSpec, name: str, key: str) -> StoredArray | None:
    """Locate array ``name`` in an ``.npz`` archive; None if the archive has no such array.

    A member stored without compression (``np.savez``) is a plain ``.npy`` image at a known
    offset of the archive, so it is memory-mapped like a ``.npy`` file.  A compressed member
    (``np.savez_compressed``) is decompressed as a stream.
    """
    path = fs.path
    with _reading(fs):
        try:
            zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise fs.error(f"is not an .npz (zip) archive ({exc})") from exc
        with zf:
            member = f"{name}.npy"
            if member not in zf.namelist():
                return None
            info = zf.getinfo(member)
            if info.compress_type == zipfile.ZIP_STORED:
                with open(path, "rb") as f:
                    f.seek(info.header_offset)
                    local = f.read(30)
                    if len(local) != 30 or local[:4] != b"PK\x03\x04":
                        raise fs.error(f"member {member!r} has a bad zip header")
                    name_len, extra_len = struct.unpack("<2H", local[26:30])
                    f.seek(info.header_offset + 30 + name_len + extra_len)
                    shape, fortran, dtype = _npz_header(fs, f, member)
                    offset = f.tell()
                arr = StoredArray(
                    path,
                    tuple(shape),
                    np.dtype(dtype),
                    offset,
                    None,
                    bool(fortran),
                    f"array {name!r}",
                )
            else:
                with zf.open(member) as f:
                    shape, fortran, dtype = _npz_header(fs, f, member)

                def opener(path: Path = path, member: str = member) -> BinaryIO:
                    # The member stream keeps the archive's file open after the ZipFile is
                    # closed (zipfile reference-counts it), so only the stream is returned.
                    with zipfile.ZipFile(path) as z:
                        stream = z.open(member)
                    _read_npy_header(stream)
                    return stream  # type: ignore[return-value]

                arr = StoredArray(
                    path,
                    tuple(shape),
                    np.dtype(dtype),
                    None,
                    opener,
                    bool(fortran),
                    f"array {name!r}",
                )
    _check_numeric(fs, arr, key)
    return arr


def npz_keys(fs: FileSpec) -> list[str]:
    with _reading(fs), zipfile.ZipFile(fs.path) as zf:
        return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]


_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def idx_array(fs: FileSpec, path: Path, key: str, labels: bool) -> StoredArray:
    """Header of an IDX file (MNIST): magic ``00 00 <type> <ndim>`` then big-endian dims."""
    what = "labels" if labels else "images"
    expect = "0x00000801 (labels, idx1)" if labels else "0x00000803 (images, idx3)"
    with _reading(fs, path, key):
        gz = is_gzip(path)
        with open_stream(path) as f:
            head = _read_exact(f, 4)
            if len(head) < 4:
                raise fs.error(
                    f"has {len(head)} bytes, expected an IDX header of magic {expect}",
                    field=key,
                    path=path,
                )
            dtype = _IDX_DTYPES.get(head[2])
            ndim = head[3]
            if head[:2] != b"\0\0" or dtype is None or ndim == 0:
                raise fs.error(
                    f"has magic 0x{int.from_bytes(head, 'big'):08x}, expected the IDX magic "
                    f"{expect}",
                    field=key,
                    path=path,
                )
            raw = _read_exact(f, 4 * ndim)
            if len(raw) != 4 * ndim:
                raise fs.error("IDX header is truncated", field=key, path=path)
            dims = struct.unpack(f">{ndim}I", raw)
        if labels and ndim != 1:
            raise fs.error(
                f"has {ndim} dimensions, expected 1 (a label file, magic {expect})",
                field=key,
                path=path,
            )
        if not labels and ndim < 2:
            raise fs.error(
                f"has {ndim} dimension, expected 3 (images, magic {expect})", field=key, path=path
            )
        offset = 4 + 4 * ndim
        arr = StoredArray(
            path,
            tuple(dims) if ndim > 1 else (dims[0], 1),
            dtype,
            None if gz else offset,
            None,
            False,
            what,
        )
        if gz:

            def opener(path: Path = path, offset: int = offset) -> BinaryIO:
                stream = gzip.open(path, "rb")
                stream.read(offset)
                return stream  # type: ignore[return-value]

            arr.opener = opener
        else:
            size = path.stat().st_size
            want = offset + arr.n * arr.width * dtype.itemsize
            if size < want:
                raise fs.error(
                    f"has {size} bytes, expected {want} for {arr.n} {what} of "
                    f"{arr.width * dtype.itemsize} bytes (truncated?)",
                    field=key,
                    path=path,
                )
    return arr


# --------------------------------------------------------------------------------------------
# Array-like formats: labels and conversion
# --------------------------------------------------------------------------------------------


@dataclass
class _ArraySource:
    X: StoredArray
    y: StoredArray | None
    label_col: int | None


def _to_x(fs: FileSpec, raw: np.ndarray, divisor: float | None = None) -> np.ndarray:
    X = np.ascontiguousarray(raw, dtype=fs.dtype)
    if divisor is not None:
        X /= divisor  # in place: no second shard-sized array
    return X


def _array_labels(fs: FileSpec, raw: np.ndarray, rows: range, key: str) -> np.ndarray:
    """Labels from a stored array: int64 classes (checked integral) or float64."""
    raw = np.asarray(raw).reshape(-1)
    if raw.dtype.kind in "biu" and fs.label_dtype == np.int64:
        return raw.astype(np.int64)
    vals = raw.astype(np.float64)
    if fs.label_dtype == np.float64:
        return vals
    bad = ~np.isfinite(vals) | (vals != np.rint(vals))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise fs.error(
            f"row {rows[j] + 1} has label {float(vals[j])!r}, expected an integer class label "
            "(set label_dtype: float64 for regression targets)",
            field=key,
        )
    return vals.astype(np.int64)


def _check_label_array(fs: FileSpec, X: StoredArray, y: StoredArray, key: str) -> None:
    if y.width != 1 or y.n != X.n:
        raise fs.error(
            f"{y.name} has shape {y.shape}, expected ({X.n},): one label per row of {X.name}",
            field=key,
            path=y.path,
        )


def _array_source(fs: FileSpec) -> _ArraySource:
    """Headers of X and labels for the npy / npz / mnist formats (no data read)."""
    if fs.fmt == "mnist":
        X = idx_array(fs, fs.path, "path", labels=False)
        y = idx_array(fs, fs.label_path, "label_path", labels=True) if fs.label_path else None
        if y is not None and y.n != X.n:
            raise fs.error(
                f"has {y.n} labels, expected {X.n} (one per image in {fs.path})",
                field="label_path",
                path=fs.label_path,
            )
        return _ArraySource(X, y, None)
    if fs.fmt == "npy":
        X = npy_array(fs, fs.path)
        y = npy_array(fs, fs.label_path, "label_path") if fs.label_path else None
        label_key = "label_path"
    else:
        X = npz_member(fs, fs.npz_key, "npz_key")
        if X is None:
            raise fs.error(
                f"has no array {fs.npz_key!r} (arrays: {', '.join(npz_keys(fs)) or 'none'}), "
                "expected the features under npz_key",
                field="npz_key",
            )
        y = None
        label_key = "npz_label_key"
        if fs.label_column is None and fs.npz_label_key is not None:
            y = npz_member(fs, fs.npz_label_key, "npz_label_key")
            if y is None and fs.npz_label_required:
                raise fs.error(
                    f"has no array {fs.npz_label_key!r} (arrays: {', '.join(npz_keys(fs))}), "
                    "expected the labels under npz_label_key",
                    field="npz_label_key",
                )
    if X.n == 0:
        raise fs.error(
            f"{X.name} has shape {X.shape}, expected at least one row",
            field="npz_key" if fs.fmt == "npz" else "path",
        )
    if len(X.shape) < 2:
        raise fs.error(
            f"{X.name} has shape {X.shape}, expected 2 dimensions (rows x features)",
            field="npz_key" if fs.fmt == "npz" else "path",
        )
    if y is not None:
        _check_label_array(fs, X, y, label_key)
    label_col = None
    if fs.label_column is not None:
        if len(X.shape) != 2:
            raise fs.error(
                f"{X.name} has shape {X.shape}, expected 2 dimensions to take a label column from",
                field="label_column",
            )
        label_col = normalize_label_column(fs, X.width)
    return _ArraySource(X, y, label_col)


def _inspect_arrays(fs: FileSpec) -> Layout:
    src = _array_source(fs)
    n_classes = None
    if fs.fmt == "mnist" and src.y is not None and src.y.n <= 10_000_000:
        # An idx label file is one byte per image: reading it is cheap and gives n_classes.
        labels = src.y.read_rows(fs, range(src.y.n), "label_path")
        n_classes = int(len(np.unique(labels)))
    d = src.X.width - (src.label_col is not None)
    return Layout(src.X.n, d, src.y is not None or src.label_col is not None, n_classes)


def _load_arrays(fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
    src = _array_source(fs)
    rows = shard.rows(src.X.n)
    divisor = None
    if fs.fmt == "mnist" and fs.normalize and src.X.dtype == np.uint8:
        divisor = 255.0  # pixels to [0, 1]
    raw = src.X.read_rows(fs, rows, "npz_key" if fs.fmt == "npz" else "path")
    if src.label_col is not None:
        c = src.label_col
        y = _array_labels(fs, raw[:, c], rows, "label_column")
        X = np.empty((len(rows), src.X.width - 1), dtype=fs.dtype)
        # Two slice copies instead of np.delete: no temporary in the stored dtype.
        X[:, :c] = raw[:, :c]
        X[:, c:] = raw[:, c + 1 :]
        return X, y
    X = _to_x(fs, raw, divisor)
    if src.y is None:
        return X, None
    key = {"mnist": "label_path", "npy": "label_path"}.get(fs.fmt, "npz_label_key")
    return X, _array_labels(fs, src.y.read_rows(fs, rows, key), rows, key)


# --------------------------------------------------------------------------------------------
# Format detection and dispatch
# --------------------------------------------------------------------------------------------

_MOVIELENS_HEADER = re.compile(rb"^\s*userid\s*[,\t]\s*(movieid|itemid)", re.I)


def movielens_file(path: Path) -> Path | None:
    """The ratings file inside a MovieLens folder (``ratings.csv`` or ``ratings.dat``)."""
    for name in ("ratings.csv", "ratings.dat", "ratings.csv.gz", "ratings.dat.gz"):
        if (path / name).is_file():
            return path / name
    return None


def detect_format(path: Path) -> str | None:
    """Guess a file's format from its name, then from its first bytes; None if unknown.

    Names: ``.npy``, ``.npz``, ``*idx?-ubyte`` (MNIST), ``.libsvm/.svm/.svmlight``,
    ``ratings.dat``; content: the npy/zip/IDX magics, ``::`` separators or a
    ``userId,movieId`` header (MovieLens), ``label index:value`` tokens (LIBSVM), else CSV.
    """
    name = path.name.lower()
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(".npy"):
        return "npy"
    if base.endswith(".npz"):
        return "npz"
    if "ubyte" in base or base.endswith((".idx1", ".idx3")):
        return "mnist"
    if base.endswith((".libsvm", ".svm", ".svmlight")):
        return "libsvm"
    if base == "ratings.dat":
        return "movielens"
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic == b"\x93NUMPY":
            return "npy"
        if magic[:4] == b"PK\x03\x04":
            return "npz"
        if magic[:2] == b"\0\0" and len(magic) >= 4 and magic[2] in _IDX_DTYPES:
            return "mnist"
        head = [ln for _, ln in first_lines(path, 0, 8) if not ln.lstrip().startswith(b"#")]
    except (OSError, EOFError, zlib.error):
        return None
    if not head:
        return "csv"  # an empty text file: the CSV reader gives the clearest message
    line = head[0]
    if b"::" in line or _MOVIELENS_HEADER.match(line):
        return "movielens"
    toks = line.split(b"#", 1)[0].split()
    if len(toks) >= 2 and all(b":" in t for t in toks[1:]) and b"," not in line:
        return "libsvm"
    return "csv"


_INSPECT: dict[str, Callable[[FileSpec], Layout]] = {
    "npy": _inspect_arrays,
    "npz": _inspect_arrays,
    "mnist": _inspect_arrays,
    "csv": inspect_csv,
    "libsvm": inspect_libsvm,
    "movielens": inspect_movielens,
}

_LOAD: dict[str, Callable[[FileSpec, Shard], tuple[np.ndarray, np.ndarray | None]]] = {
    "npy": _load_arrays,
    "npz": _load_arrays,
    "mnist": _load_arrays,
    "csv": load_csv,
    "libsvm": load_libsvm,
    "movielens": load_movielens,
}


def inspect_file(fs: FileSpec) -> Layout:
    """Cheap facts about a file (see :func:`flegel.data.sources.inspect_source`)."""
    return _INSPECT[fs.fmt](fs)


def load_file(fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
    """One shard of a file (see :func:`flegel.data.sources.load_shard`)."""
    return _LOAD[fs.fmt](fs, shard)
