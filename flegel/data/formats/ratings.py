"""MovieLens ratings (optionally gzipped) as a dense user x item matrix: rows are users.

``ratings.dat`` (``user::item::rating::timestamp``), ``ratings.csv`` (with its
``userId,movieId,rating,timestamp`` header) and ``u.data`` (tab-separated) are read; a
folder holding one of them is accepted as the path.  A user's row is its rank among the
sorted user ids, an item's column its rank among the kept item ids (all, or the ``n_items``
most rated); missing ratings are 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flegel.data.checks import Bad
from flegel.data.errors import DataError
from flegel.data.files import FileSpec, reading, show
from flegel.data.formats.base import FileReader, TableShape
from flegel.data.partition import Shard
from flegel.data.text import first_lines, first_non_number, iter_line_blocks, row_error

__all__ = ["RatingsDialect", "RatingsIndex", "RatingsReader", "ratings_index"]

_HEADER = re.compile(rb"^\s*userid\s*[,\t]\s*(movieid|itemid)", re.I)

#: File names looked for inside a MovieLens folder, in order.
_FILE_NAMES = ("ratings.csv", "ratings.dat", "ratings.csv.gz", "ratings.dat.gz")


@dataclass(frozen=True)
class RatingsDialect:
    """How a ratings file is laid out: header lines to skip and the field separator."""

    skip_lines: int
    sep: bytes  # "::" (ratings.dat), "," (ratings.csv) or "\t" (u.data)


@dataclass(frozen=True)
class RatingsIndex:
    """Dense ids of a ratings file: sorted raw user ids and the kept item ids (columns)."""

    users: np.ndarray
    items: np.ndarray
    n_ratings: int


def _dialect(fs: FileSpec) -> RatingsDialect:
    with reading(fs):
        head = first_lines(fs.path, 0, 2)
    if not head:
        raise fs.error("file is empty, expected ratings 'user::item::rating::timestamp'")
    lineno, line = head[0]
    sep = b"::" if b"::" in line else b"\t" if b"\t" in line else b","
    fields = line.split(sep)
    skip = 0
    if sep != b"::" and first_non_number(fields[:1]) is not None:
        # ratings.csv starts with "userId,movieId,rating,timestamp" (ratings.dat has none).
        if len(head) < 2:
            raise fs.error(f"has only a header line ({show(line)}), expected ratings")
        skip = lineno
        lineno, line = head[1]
        fields = line.split(sep)
    if len(fields) < 3 or first_non_number(fields[:3]) is not None:
        raise fs.error(
            f"row 1 (line {lineno}) is {show(line)}, expected "
            "'user::item::rating::timestamp' (ratings.dat) or 'userId,movieId,rating,...'"
        )
    return RatingsDialect(skip, sep)


def _parse_block(
    fs: FileSpec, lines: list[bytes], first_row: int, dia: RatingsDialect
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user ids, item ids, ratings) of a block of rating lines."""
    if dia.sep == b"::":
        # One C-level replace turns "u::i::r::t" into a single-character delimiter.
        lines = b"\n".join(lines).replace(b"::", b",").split(b"\n")
        sep = ","
    else:
        sep = dia.sep.decode()
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
                raise row_error(
                    fs,
                    first_row + j,
                    dia.skip_lines,
                    f"has {len(fields)} fields, expected user, item, rating",
                )
            bad = first_non_number(fields[:3])
            if bad is None:
                bad = next((c for c in (0, 1) if not float(fields[c]).is_integer()), None)
            if bad is not None:
                what = ("an integer user id", "an integer item id", "a number")[bad]
                raise row_error(
                    fs,
                    first_row + j,
                    dia.skip_lines,
                    f"field {bad + 1} is {show(fields[bad])}, expected {what}",
                )
        raise fs.error(f"rows {first_row + 1} .. cannot be parsed as ratings")
    assert arr is not None
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]


def _iter_ratings(
    fs: FileSpec, dia: RatingsDialect
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    g = 0
    with reading(fs):
        for lines in iter_line_blocks(fs.path, dia.skip_lines):
            if lines:
                yield _parse_block(fs, lines, g, dia)
            g += len(lines)


def ratings_index(fs: FileSpec) -> RatingsIndex:
    """Streaming pass collecting the sorted unique user and item ids (and item popularity).

    With ``n_items`` only the ``n_items`` most-rated items are kept as columns (ties go to the
    smaller id); the paper's ML25M matrix has 5,000 of the 62,423 movies.

    Parameters
    ----------
    fs : FileSpec
        The spec (``n_items``).

    Returns
    -------
    RatingsIndex
    """
    dia = _dialect(fs)
    users = np.empty(0, dtype=np.int64)
    items = np.empty(0, dtype=np.int64)
    counts = np.empty(0, dtype=np.int64)
    n = 0
    for u, i, _ in _iter_ratings(fs, dia):
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


class RatingsReader(FileReader):
    """MovieLens ratings: users are rows, items columns, no labels."""

    name = "movielens"

    def inspect(self, fs: FileSpec) -> TableShape:
        """Users (rows) and items (columns): one streaming pass over the file."""
        idx = ratings_index(fs)
        return TableShape(len(idx.users), len(idx.items), False, None)

    def read(self, fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
        """The shard's rows of the dense user x item rating matrix (missing ratings are 0).

        Two streaming passes per rank: the first collects the id maps (a user's row is its
        rank among the sorted user ids, so it is only known after seeing all users), the
        second keeps the ratings of this shard's users.  Neither holds more than a block of
        ratings.
        """
        dia = _dialect(fs)
        idx = ratings_index(fs)
        rows = shard.rows(len(idx.users))
        X = np.zeros((len(rows), len(idx.items)), dtype=fs.dtype)
        if not len(rows):
            return X, None
        for u, i, r in _iter_ratings(fs, dia):
            uidx = np.searchsorted(idx.users, u)
            keep = (
                (uidx >= rows.start) & (uidx < rows.stop) & ((uidx - rows.start) % rows.step == 0)
            )
            if not keep.any():
                continue
            col = np.searchsorted(idx.items, i[keep])
            col_ok = col < len(idx.items)
            col_ok[col_ok] = idx.items[col[col_ok]] == i[keep][col_ok]
            local = (uidx[keep] - rows.start) // rows.step
            X[local[col_ok], col[col_ok]] = r[keep][col_ok]
        return X, None

    def content_error(
        self, spec: FileSpec, row: int, bad: Bad, n_features: int, key: str
    ) -> DataError:
        """``user U, item I rating ...``: the ids as written in the file, not matrix indices."""
        with reading(spec):
            idx = ratings_index(spec)
        what = "" if bad.column is None else f", item {idx.items[bad.column]}"
        problem = bad.problem.replace("is ", "rating is ", 1)
        return spec.error(f"user {idx.users[row]}{what} {problem}")

    def find_in(self, folder: Path) -> Path | None:
        """``ratings.csv`` or ``ratings.dat`` (optionally gzipped) in a MovieLens folder."""
        for name in _FILE_NAMES:
            if (folder / name).is_file():
                return folder / name
        return None

    def claims_name(self, name: str) -> bool:
        """``ratings.dat``."""
        return name == "ratings.dat"

    def claims_line(self, line: bytes) -> bool:
        """``::`` separators or a ``userId,movieId`` header."""
        return b"::" in line or _HEADER.match(line) is not None
