"""CSV and other delimited text (optionally gzipped): one data point per line.

The first lines decide the dialect (:func:`dialect`): a non-numeric first line is a header
(unless ``skip_header`` says how many lines to skip), the delimiter is sniffed from the first
data line (``delimiter: auto``), and that line's field count is the column count.  Loads parse
only the shard's lines (:func:`parse_block`): a compiled kernel first
(:func:`flegel.data.fastparse.csv_kernel`, exact and several times faster than
:func:`numpy.loadtxt`), NumPy's C parser when the kernel gives up, and a Python pass that
names the bad row when that fails too.  Rows go straight into the shard's arrays
(:class:`~flegel.data.formats.base.RowSink`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flegel.data.checks import Bad
from flegel.data.errors import DataError
from flegel.data.files import FileSpec, reading, show
from flegel.data.formats.base import (
    FileReader,
    RowSink,
    TableShape,
    label_column_index,
    stored_column,
    to_labels,
)
from flegel.data.partition import Shard
from flegel.data.text import (
    count_rows,
    first_lines,
    first_non_number,
    iter_line_blocks,
    row_error,
    row_errors,
    shard_lines,
    split_fields,
)

__all__ = ["CsvDialect", "CsvReader", "dialect", "parse_block"]


@dataclass(frozen=True)
class CsvDialect:
    """How a CSV file is laid out: lines to skip, columns, the label column, the delimiter."""

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


def dialect(fs: FileSpec) -> CsvDialect:
    """Header, column count and label column from the first lines of a CSV file.

    Parameters
    ----------
    fs : FileSpec
        The spec (``skip_header``, ``delimiter``, ``label_column``).

    Returns
    -------
    CsvDialect

    Raises
    ------
    DataError
        An empty file, a header without data, binary data, a first row that is not numbers.
    """
    skip = fs.skip_header or 0
    with reading(fs):
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
    fields = split_fields(line, delim)
    if fs.skip_header is None and first_non_number(fields) is not None:
        # A non-numeric first line is a header (e.g. "label,lepton_pT,...").
        if len(head) < 2:
            raise fs.error(
                f"has only a header line ({show(line)}), expected at least one data row"
            )
        skip = lineno
        lineno, line = head[1]
        fields = split_fields(line, delim)
    bad = first_non_number(fields)
    if bad is not None:
        raise fs.error(
            f"row 1 (line {lineno}) column {bad + 1} is {show(fields[bad])}, expected a number"
            + (" (is the delimiter right?)" if len(fields) == 1 else "")
        )
    n_cols = len(fields)
    return CsvDialect(skip, n_cols, label_column_index(fs, n_cols), delim)


def parse_fast(lines: list[bytes], dia: CsvDialect) -> np.ndarray | None:
    """The lines as numbers by the compiled kernel, or None when it gives up.

    Parameters
    ----------
    lines : list of bytes
        The lines to parse (none blank).
    dia : CsvDialect
        The file's dialect.

    Returns
    -------
    numpy.ndarray or None
        ``(len(lines), n_cols)`` float64, exactly what :func:`numpy.loadtxt` gives; None for
        a block the careful parser must handle (a multi-byte delimiter, a ragged row, a field
        that is not a number...).
    """
    if dia.delim is not None and len(dia.delim) != 1:
        return None
    # Imported here: numba's import is only paid by a process that parses (not the master).
    from flegel.data.fastparse import OK, csv_kernel, parse_slow, slow_slots

    text = b"\n".join(lines)
    out = np.empty((len(lines), dia.n_cols), dtype=np.float64)
    slow = slow_slots(out.size)
    delim = -1 if dia.delim is None else dia.delim[0]
    buf = np.frombuffer(text, dtype=np.uint8)
    status, n_slow = csv_kernel(buf, delim, out, slow)
    if status != OK:
        return None
    if n_slow:
        vals = parse_slow(buf, slow[:n_slow])
        if vals is None:
            return None
        out.reshape(-1)[slow[:n_slow, 2]] = vals
    return out


def parse_block(fs: FileSpec, lines: list[bytes], ids: range, dia: CsvDialect) -> np.ndarray:
    """Parse the picked lines: fast kernel, else NumPy's C parser; on failure name the bad row.

    Parameters
    ----------
    fs : FileSpec
        The spec (for messages).
    lines : list of bytes
        The lines to parse.
    ids : range
        Their row ids.
    dia : CsvDialect
        The file's dialect.

    Returns
    -------
    numpy.ndarray
        ``(len(lines), n_cols)`` float64.
    """
    fast = parse_fast(lines, dia)
    if fast is not None:
        return fast
    delim = None if dia.delim is None else dia.delim.decode()
    try:
        arr = np.loadtxt(lines, delimiter=delim, dtype=np.float64, ndmin=2, comments=None)
    except ValueError:
        arr = None
    if arr is not None and arr.shape == (len(lines), dia.n_cols):
        return arr
    # Error path only: a Python pass over the block to say which row is wrong and how.
    for j, line in enumerate(lines):
        fields = split_fields(line, dia.delim)
        if len(fields) != dia.n_cols:
            raise row_error(
                fs, ids[j], dia.skip_lines, f"has {len(fields)} columns, expected {dia.n_cols}"
            )
        bad = first_non_number(fields)
        if bad is not None:
            raise row_error(
                fs,
                ids[j],
                dia.skip_lines,
                f"column {bad + 1} is {show(fields[bad])}, expected a number",
            )
    raise fs.error(f"rows {ids[0] + 1} .. {ids[-1] + 1} cannot be parsed as numbers")


class CsvReader(FileReader):
    """Delimited text: every non-blank line after the header is a row.

    It claims no file by name or content: text that no other format claims is read as CSV.
    """

    name = "csv"
    label_columns = True

    def inspect(self, fs: FileSpec) -> TableShape:
        """Columns from the first line, then one pass counting rows and checking column counts.

        Values are not parsed (that is the load's job), but a ragged file is cheap to catch
        here: a block whose delimiter count is what ``rows x (columns - 1)`` says almost
        surely has no ragged row (C-speed ``bytes.count``), and only a block that disagrees is
        scanned line by line to name the row.
        """
        dia = dialect(fs)
        n = 0
        with reading(fs):
            for lines in iter_line_blocks(fs.path, dia.skip_lines):
                text = b"\n".join(lines)
                if dia.delim is None:
                    fields = len(text.split())
                else:
                    fields = text.count(dia.delim) + len(lines)
                if fields != len(lines) * dia.n_cols:
                    for j, line in enumerate(lines):
                        found = len(split_fields(line, dia.delim))
                        if found != dia.n_cols:
                            raise row_error(
                                fs,
                                n + j,
                                dia.skip_lines,
                                f"has {found} columns, expected {dia.n_cols}",
                            )
                n += len(lines)
        d = dia.n_cols - (dia.label_col is not None)
        return TableShape(n, d, dia.label_col is not None, None, {"skip_header": dia.skip_lines})

    def content_error(
        self, spec: FileSpec, row: int, bad: Bad, n_features: int, key: str
    ) -> DataError:
        """``row R (line L) column C ...``, the column counted in the file (1-based)."""
        dia = dialect(spec)
        if bad.column is None:
            assert dia.label_col is not None  # labels come from the label column
            col, field = dia.label_col, "label_column"
        else:
            col, field = stored_column(spec, bad.column, n_features), "path"
        with reading(spec):
            return row_error(spec, row, dia.skip_lines, f"column {col + 1} {bad.problem}",
                             field=field)

    def read(self, fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
        """Stream the file and parse only the shard's lines (see :mod:`flegel.data.text`)."""
        dia = dialect(fs)
        rows = shard.open_rows()
        if rows is None:
            with reading(fs):
                rows = shard.rows(count_rows(fs.path, dia.skip_lines))
        c = dia.label_col
        d = dia.n_cols - (c is not None)
        # A contiguous shard's size is known from the count; a strided one's grows per block.
        sink = RowSink(d, fs.dtype, None if c is None else fs.label_dtype,
                       len(rows) if shard.partition != "strided" else None)
        with reading(fs):
            for lines, ids in shard_lines(fs.path, rows, dia.skip_lines):
                arr = parse_block(fs, lines, ids, dia)
                X, y = sink.take(len(lines))
                if c is None or y is None:
                    X[...] = arr
                    continue
                bad_row = row_errors(fs, ids, dia.skip_lines, field="label_column")
                y[...] = to_labels(fs, arr[:, c], bad_row)
                X[:, :c] = arr[:, :c]
                X[:, c:] = arr[:, c + 1 :]
        return sink.finish()
