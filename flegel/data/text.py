"""Text-file plumbing shared by the text formats (CSV, LIBSVM, MovieLens ratings).

Text files, optionally gzipped, are read in blocks of :data:`TEXT_BLOCK_BYTES` (or the smaller
:data:`flegel.data.files.BLOCK_BYTES`);
a block is split into lines and only the shard's lines are handed on (picked with one slice,
see :func:`flegel.data.partition.take`).  A strided shard must still *read* every line (the
row ids are line counts), but it parses and keeps only its own.  A contiguous shard stops
reading after its last row, and needs a cheap counting pass first to know where its range
lies.  Readers write each block's rows straight into the shard's arrays
(:class:`flegel.data.formats.base.RowSink`), so a load peaks at the shard plus one block; a
block is a few MiB of text, a few times that as a list of lines.

Rows are the non-blank lines after the header: blank and whitespace-only lines are skipped
everywhere, so row numbers in messages and shard boundaries agree with what
:func:`count_rows` counts.  Error messages give the data row (1-based) and, because users
look files up by line, the physical line number (:func:`row_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from flegel.data import files
from flegel.data.errors import DataError
from flegel.data.files import FileSpec, open_stream
from flegel.data.partition import picked, take

__all__ = [
    "TEXT_BLOCK_BYTES",
    "count_rows",
    "first_lines",
    "first_non_number",
    "iter_blocks",
    "iter_line_blocks",
    "physical_line",
    "row_error",
    "row_errors",
    "shard_lines",
    "split_fields",
]

#: The longest physical line read while sniffing a file's first lines (header detection).
_HEAD_LINE_BYTES = 1 << 24

#: Bytes of text per block.  A block lives several times over while it is parsed (the text,
#: its lines, the picked lines joined, the parsed numbers): 8 MiB blocks cost ~50 MiB of peak
#: memory beside the shard, 1 MiB blocks ~7 MiB, at no measurable cost in speed.
TEXT_BLOCK_BYTES = 1 << 20


def _iter_bodies(path: Path) -> Iterator[bytes]:
    """Yield the file as chunks of whole lines (no trailing newline, ``\\r`` removed)."""
    size = min(files.BLOCK_BYTES, TEXT_BLOCK_BYTES)  # tests shrink files.BLOCK_BYTES
    with open_stream(path) as f:
        carry = b""
        while True:
            buf = f.read(size)
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
            del buf  # not held while the block is parsed
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

    Yields
    ------
    body : bytes
        The raw text of the block (for C-speed scans such as ``bytes.count``).
    lines : list of bytes
        Its data lines.

    Notes
    -----
    The lines are filtered with a list comprehension, which iterates at C speed and does not
    copy the kept lines.
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


def shard_lines(
    path: Path, rows: range, skip_lines: int = 0, comment: bytes | None = None
) -> Iterator[tuple[list[bytes], range]]:
    """Yield ``(lines, row ids)``: a shard's data lines, a block at a time.

    Parameters
    ----------
    path : Path
        A text file, optionally gzipped.
    rows : range
        The shard's row ids (from :mod:`flegel.data.partition`).
    skip_lines, comment
        As :func:`iter_blocks`.

    Yields
    ------
    lines : list of bytes
        The shard's lines of one block (never empty).
    ids : range
        Their global row ids.

    Notes
    -----
    Reading stops after the block holding ``rows``' last row (contiguous shards, limits).
    """
    g = 0
    for lines in iter_line_blocks(path, skip_lines, comment):
        lo, g = g, g + len(lines)
        sl = take(rows, lo, g)
        kept = lines[sl]
        if kept:
            yield kept, picked(rows, lo, sl, len(kept))
        if g >= rows.stop:
            break


def first_lines(path: Path, skip_lines: int, want: int) -> list[tuple[int, bytes]]:
    """The first ``want`` non-blank lines after ``skip_lines``, with 1-based line numbers.

    Only the start of the file is read (``readline``), which is what keeps inspections cheap
    for header and column checks.
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
    """1-based line number of data row ``row`` (0-based), -1 if there is none.

    Only used to word errors, so it simply reads the file up to that line.
    """
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


def row_error(
    fs: FileSpec,
    row: int,
    skip_lines: int,
    problem: str,
    comment: bytes | None = None,
    field: str = "path",
) -> DataError:
    """An error about data row ``row`` (0-based) worded with its row and line number.

    Parameters
    ----------
    fs : FileSpec
        The spec of the file.
    row : int
        The data row (0-based, as :func:`count_rows` counts).
    skip_lines, comment
        As :func:`iter_blocks`: they map the row to its physical line.
    problem : str
        The rest of the message (``"has 5 columns, expected 3"``).
    field : str, optional
        The spec key the error belongs to.

    Returns
    -------
    DataError
        ``"<key>.<field>: <file>: row R (line L) <problem>"``.
    """
    line = physical_line(fs.path, skip_lines, row, comment)
    where = f"row {row + 1}" + (f" (line {line})" if line > 0 else "")
    return fs.error(f"{where} {problem}", field=field)


def row_errors(
    fs: FileSpec,
    ids: range,
    skip_lines: int,
    comment: bytes | None = None,
    field: str = "path",
) -> Callable[[int, str], DataError]:
    """``(j, problem) -> DataError`` about row ``ids[j]``, worded by :func:`row_error`."""
    return lambda j, problem: row_error(fs, ids[j], skip_lines, problem, comment, field)


def split_fields(line: bytes, delim: bytes | None) -> list[bytes]:
    """The fields of a line: split at ``delim``, or at runs of blanks when it is None."""
    return line.split() if delim is None else line.split(delim)


def first_non_number(fields: list[bytes]) -> int | None:
    """Index of the first field that does not parse as a float, or None."""
    for j, tok in enumerate(fields):
        try:
            float(tok)
        except ValueError:
            return j
    return None
