"""A worker's shard: points, their persistent state, halted points and the traversal cursor."""

from __future__ import annotations

import numpy as np

from flegel.block import Block


class ShardStore:
    """The points a worker holds, traversed round-robin across iterations.

    Round-robin traversal (FSP paper Section 3.1) means that wherever an iteration stops, the
    next one continues with the following point, so every point is visited evenly whatever the
    barrier times.  Points that voted to halt (Section 5.3) are skipped.  Per-point state is
    stored beside the points so that it survives iterations and can move with them.

    Parameters
    ----------
    x : ndarray of shape (n, d)
    y : ndarray of shape (n,) or None
    state : dict of str to ndarray
        Per-point state arrays of first dimension n.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray | None,
                 state: dict[str, np.ndarray]) -> None:
        self.x = np.ascontiguousarray(x)
        self.y = y
        self.state = state
        self.halted = np.zeros(len(self.x), dtype=bool)
        self.n_halted = 0
        self.cursor = 0
        self._mark: tuple | None = None
        self._journal: list | None = None
        self.visited = 0  # points processed, over all passes
        self.scanned = 0  # rows the cursor has moved over (halted ones included)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_active(self) -> int:
        """Number of points that have not voted to halt."""
        return len(self) - self.n_halted

    @property
    def passes(self) -> float:
        """Traversal passes completed so far (fractional)."""
        return self.scanned / max(len(self), 1)

    def next_block(self, max_points: int) -> tuple[Block, slice | np.ndarray]:
        """Return the next block of at most ``max_points`` points from the cursor.

        The block never wraps around the end of the shard (so it is a view); the next call
        starts again from the top.  Halted points are dropped by gathering, in which case the
        state must be written back with :meth:`commit_block`.
        """
        n = len(self)
        start = self.cursor
        stop = min(n, start + max(1, int(max_points)))
        sel: slice | np.ndarray = slice(start, stop)
        if self.n_halted:
            idx = np.flatnonzero(~self.halted[start:stop]) + start
            sel = idx
        self._journal_rows(sel)
        x = self.x[sel]
        y = None if self.y is None else self.y[sel]
        state = {k: v[sel] for k, v in self.state.items()}
        self.cursor = 0 if stop >= n else stop
        self.scanned += stop - start
        return Block(x, y, state, np.zeros(x.shape[0], dtype=bool)), sel

    def commit_block(self, block: Block, sel: slice | np.ndarray) -> None:
        """Record a processed block: write back gathered state and apply halt votes."""
        if not isinstance(sel, slice):
            for k, v in block.state.items():
                self.state[k][sel] = v
        self.visited += len(block)
        if block.halt.any():
            idx = (np.arange(sel.start, sel.stop) if isinstance(sel, slice) else sel)[block.halt]
            self.halted[idx] = True
            self.n_halted = int(self.halted.sum())

    def full_block(self) -> Block:
        """All points (halted ones included) as one block, for exact evaluation."""
        return Block(self.x, self.y, self.state, np.zeros(len(self), dtype=bool))

    def mark(self) -> None:
        """Remember the traversal position; from now on journal the state of visited rows.

        :meth:`rollback` returns to this point.  Only the rows processed after the mark are
        copied (lazily, just before their first update), so marking every iteration (SpecSync)
        or every probe (FSPV) costs memory in proportion to the work since the mark.
        """
        self._mark = (self.cursor, self.visited, self.scanned, self.halted.copy()
                      if self.n_halted else None)
        self._journal = []

    def rollback(self) -> None:
        """Return to the last :meth:`mark`: traversal position, state and halt votes."""
        if self._mark is None:
            raise RuntimeError("rollback() without a mark()")
        for sel, saved in reversed(self._journal):
            for k, v in saved.items():
                self.state[k][sel] = v
        self.cursor, self.visited, self.scanned, halted = self._mark
        self.halted[:] = False if halted is None else halted
        self.n_halted = int(self.halted.sum())
        self._journal = []

    def unmark(self) -> None:
        """Forget the mark and stop journaling."""
        self._mark = None
        self._journal = None

    def _journal_rows(self, sel: slice | np.ndarray) -> None:
        if self._journal is not None and self.state:
            self._journal.append((sel, {k: v[sel].copy() for k, v in self.state.items()}))
