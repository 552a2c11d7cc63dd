"""Which rows a shard owns: the one partitioning rule every reader shares.

:func:`partition_rows` is the single source of a shard's row ids.  :class:`Shard` carries a
load's request (shard ``index`` of ``count``, the partition, the ``limit``) to a reader, and
:func:`take` / :func:`picked` let a reader that sees the file a block of rows at a time pick
the shard's rows of each block with one slice.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["PARTITIONS", "Shard", "partition_rows", "picked", "take"]

#: The partitions a spec may name.
PARTITIONS = ("strided", "contiguous")


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
        return self.rows(sys.maxsize)


def take(rows: range, lo: int, hi: int) -> slice:
    """The slice, relative to ``lo``, of a block of rows ``lo .. hi - 1`` that lies in ``rows``.

    ``rows`` is an increasing arithmetic progression (what :func:`partition_rows` returns), so
    the intersection with a block is again one, and picking the shard's lines of a block is a
    C-speed list/array slice instead of a Python test per line.

    Parameters
    ----------
    rows : range
        The shard's row ids (step >= 1).
    lo, hi : int
        The block holds rows ``lo .. hi - 1``.

    Returns
    -------
    slice
        Positions within the block.
    """
    step = rows.step
    start = max(rows.start, lo)
    first = rows.start + -(-(start - rows.start) // step) * step
    stop = min(rows.stop, hi)
    if first >= stop:
        return slice(0, 0)
    return slice(first - lo, stop - lo, step)


def picked(rows: range, lo: int, sl: slice, count: int) -> range:
    """Global row ids of the ``count`` rows picked by ``sl`` (from :func:`take`) at ``lo``."""
    return range(lo + sl.start, lo + sl.start + count * rows.step, rows.step)
