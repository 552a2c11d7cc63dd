"""A worker's shard: points, their persistent state, halted points, the traversal cursor, and
the points that migrate in and out (FSP paper Section 4.3)."""

from __future__ import annotations

from typing import Any

import numpy as np

from flegel.block import Block
from flegel.device import DeviceRows, appended, resident_module, resident_rows

#: Global point ids are ``origin_rank << ID_SHIFT | row``: unique across workers, and a point
#: names the worker it was first loaded on (virtual migration sends points back there).
ID_SHIFT = 40


def global_ids(rank: int, n: int) -> np.ndarray:
    """The ids of the ``n`` points first loaded on worker ``rank``."""
    return (np.int64(rank) << ID_SHIFT) | np.arange(n, dtype=np.int64)


def origin_of(ids: np.ndarray) -> np.ndarray:
    """The rank each point was first loaded on."""
    return np.asarray(ids) >> ID_SHIFT


class ShardStore:
    """The points a worker holds, traversed round-robin across iterations.

    Round-robin traversal (FSP paper Section 3.1) means that wherever an iteration stops, the
    next one continues with the following point, so every point is visited evenly whatever the
    barrier times.  Points that voted to halt (Section 5.3) are skipped.  Per-point state is
    stored beside the points so that it survives iterations and moves with them.

    Migration (Section 4.3) adds three kinds of rows the cursor skips:

    * *inactive* rows: sent to another worker (kept, for virtual migration, until reactivated)
      or locked in the window being sent;
    * *queued* rows: migrated in (or reactivated) with a pass count that differs from this
      worker's.  Rows behind are trained first (the paper's priority queue) until they caught
      up; rows ahead rest until the traversal reaches their count.  Then they join the
      round-robin traversal as native points.  A row's *expected* count is the passes a
      native row at its position has: :attr:`cycles`, plus one once the cursor passed it.

    Every row counts its traversals in :attr:`visits`, so tests and summaries can show that
    no point is skipped or trained twice within a pass.

    On a GPU the features are also held on the device (:meth:`place`, issue 23): a block's
    ``x`` is then a slice of that device copy, and migrated points are copied there once,
    when they arrive.  The host copy stays the reference (exact evaluation, migration,
    checkpoints read it); labels and per-point state stay in host memory.

    Parameters
    ----------
    x : ndarray of shape (n, d)
    y : ndarray of shape (n,) or None
    state : dict of str to ndarray
        Per-point state arrays of first dimension n.
    ids : ndarray of int64, optional
        Global point ids (default ``0..n-1``).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray | None,
                 state: dict[str, np.ndarray], ids: np.ndarray | None = None) -> None:
        n = int(x.shape[0])
        self.n_native = n  # rows loaded from this worker's shard (the rest migrated in)
        self.x = np.ascontiguousarray(x)
        self.y = y
        self.state = state
        self.ids = np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
        self.visits = np.zeros(n, dtype=np.int64)
        self.halted = np.zeros(n, dtype=bool)
        self.inactive = np.zeros(n, dtype=bool)
        self.queued = np.zeros(n, dtype=bool)
        self.n_halted = 0
        self._skip = 0  # rows the cursor skips: halted, inactive or queued
        self._n_queued = 0
        self._queue = np.empty(0, dtype=np.int64)  # the queued rows
        self._behind = np.empty(0, dtype=np.int64)  # this sweep's rows to catch up ...
        self._qpos = 0                              # ... and how many were taken
        self._n_held = n
        self._n_trained = n  # rows neither halted nor inactive, and their visits
        self._visits_sum = 0
        self._n_seen = 0
        self.cursor = 0
        self.cycles = 0  # completed round-robin passes of the cursor
        self._mark: tuple[Any, ...] | None = None
        self._journal: list[tuple[Any, dict[str, np.ndarray]]] | None = None
        self._buffers: dict[str, np.ndarray] = {}  # growable storage of admitted rows
        #: The features on the device (:meth:`place`); None: blocks are host arrays.
        self.device: DeviceRows | None = None
        self._owner = "worker"  # how messages about the device copy name this worker
        self._on_gpu = False  # place() was asked by a GPU algorithm (resident or not)
        self.visited = 0  # points processed, over all passes
        self.scanned = 0  # rows the cursor has moved over (skipped ones included)
        #: Windows take the points never trained first (:meth:`select_behind_cursor`): set
        #: while FSP holds θ for coverage (:mod:`flegel.sync.fsp`).
        self.unseen_first = False

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_active(self) -> int:
        """Points this worker trains: held, not halted, not sent away."""
        return self._n_trained

    @property
    def n_held(self) -> int:
        """Points this worker holds (halted ones included, sent-away ones not)."""
        return self._n_held

    @property
    def passes(self) -> float:
        """Traversal passes of this worker's native data (fractional): the cursor's.  Points
        migrated in are brought up to this count first (Section 4.3), so it is the ``Pⱼ`` of
        Eq. 9; :attr:`mean_visits` is the mean over every point held, migrated ones
        included."""
        return self.cycles + self.cursor / max(len(self), 1)

    @property
    def n_queued(self) -> int:
        """Points migrated in (or reactivated) that have not joined the traversal yet."""
        return self._n_queued

    @property
    def n_behind(self) -> int:
        """Queued points still behind in passes (Section 4.3's catch-up left to train); the
        others of :attr:`n_queued` caught up, or came ahead, and only wait to join the
        traversal.  Vectorized over the queue: read once a commit."""
        if not self._n_queued:
            return 0
        rows = self._queue
        return int(np.count_nonzero(self.visits[rows] < self._expected(rows)))

    def _expected(self, rows: np.ndarray) -> np.ndarray:
        """Visits each of ``rows`` has when it is level with the traversal: this cycle's,
        one more for a row behind the cursor (trained already this cycle)."""
        return self.cycles + (rows < self.cursor)

    @property
    def n_seen(self) -> int:
        """Points held that were trained at least once."""
        return self._n_seen

    @property
    def n_unseen(self) -> int:
        """Points held that were never trained (migrated-in ones included)."""
        return self._n_held - self._n_seen

    @property
    def mean_visits(self) -> float:
        """Mean traversals of the points this worker trains."""
        return self._visits_sum / self._n_trained if self._n_trained else 0.0

    def _recount(self) -> None:
        """Every counter from scratch (halt votes, roll-backs: the rare, whole-shard changes)."""
        self.n_halted = int(np.count_nonzero(self.halted))
        self._skip = int(np.count_nonzero(self.halted | self.inactive | self.queued))
        self._n_queued = len(self._queue)
        trained = ~(self.halted | self.inactive)
        self._n_trained = int(np.count_nonzero(trained))
        self._n_held = len(self) - int(np.count_nonzero(self.inactive))
        self._visits_sum = int(self.visits[trained].sum())
        self._n_seen = int(np.count_nonzero(self.visits[~self.inactive]))

    # ------------------------------------------------------------------ on the device
    def place(self, algorithm: object, owner: str = "worker") -> bool:
        """Keep the features on the device ``algorithm``'s kernels run on, when that is a GPU
        (:func:`flegel.device.resident_module`): one host-to-device copy now, none per block.
        A shard that does not fit stays on the host, said in one line naming ``owner``
        (:func:`flegel.device.resident_rows`).  Call it once the rows are in their training
        order (after :meth:`shuffle` and :meth:`restore`; both keep a placed copy in step
        anyway).  Returns whether the shard is on the device."""
        xp = resident_module(algorithm)
        if xp is not None and self.device is None:
            self._owner = owner
            self._on_gpu = True
            self.device = resident_rows(xp, self.x, owner)
        return self.device is not None

    def device_report(self) -> dict[str, Any] | None:
        """For the worker's report (``summary.json``'s ``per_worker[].device_shard``): whether
        the shard is resident on the GPU now, and the feature and row-index bytes copied
        host-to-device for it; None when the kernels do not run on a GPU."""
        if not self._on_gpu:
            return None
        rows = self.device
        return {"resident": rows is not None,
                "bytes_in": None if rows is None else rows.bytes_in,
                "index_bytes": None if rows is None else rows.index_bytes}

    @property
    def kernel_x(self) -> Any:
        """The features as the kernels get them: the device copy when placed, else the
        host array."""
        return self.x if self.device is None else self.device.rows

    # ------------------------------------------------------------------ traversal
    def next_block(self, max_points: int) -> tuple[Block, slice | np.ndarray]:
        """Return the next block of at most ``max_points`` points.

        Queued (migrated-in) points come first.  Otherwise the block runs from the cursor and
        never wraps around the end of the shard (so it is a view); the next call starts again
        from the top.  Skipped rows are dropped by gathering, in which case the state must be
        written back with :meth:`commit_block`.
        """
        n = len(self)
        limit = max(1, int(max_points))
        sel: slice | np.ndarray
        behind = self._settle()
        if len(behind):
            sel = behind[:limit]
            self._qpos += len(sel)
        else:
            start = self.cursor
            stop = min(n, start + limit)
            sel = slice(start, stop)
            if self._skip:
                # Skipped rows cost no work: widen the window until it holds ``limit``
                # trained rows (a shard whose points mostly migrated away still trains
                # full blocks).
                while True:
                    skip = (self.halted[start:stop] | self.inactive[start:stop]
                            | self.queued[start:stop])
                    idx = np.flatnonzero(~skip) + start
                    if len(idx) >= limit or stop >= n:
                        break
                    stop = min(n, start + 2 * (stop - start))
                if len(idx) > limit:
                    idx = idx[:limit]
                    stop = int(idx[-1]) + 1
                sel = idx
            self.cursor = 0 if stop >= n else stop
            if self.cursor == 0:
                self.cycles += 1
            self.scanned += stop - start
        self._journal_rows(sel)
        x = self.x[sel] if self.device is None else self.device.take(sel)
        y = None if self.y is None else self.y[sel]
        state = {k: v[sel] for k, v in self.state.items()}
        return Block(x, y, state, np.zeros(x.shape[0], dtype=bool)), sel

    def commit_block(self, block: Block, sel: slice | np.ndarray) -> None:
        """Record a processed block: write back gathered state, count visits, apply halt
        votes, and let queued points that caught up join the traversal."""
        if not isinstance(sel, slice):
            for k, v in block.state.items():
                self.state[k][sel] = v
        self.visits[sel] += 1
        self.visited += len(block)
        self._visits_sum += len(block)
        self._n_seen += int(np.count_nonzero(self.visits[sel] == 1))
        if block.halt.any():
            idx = (np.arange(sel.start, sel.stop) if isinstance(sel, slice) else sel)[block.halt]
            self.halted[idx] = True
            self._recount()

    def _settle(self) -> np.ndarray:
        """Queued rows that caught up become native (Section 4.3); return those still behind.
        """
        if self._qpos < len(self._behind):
            return self._behind[self._qpos:]
        # A sweep trained every row behind once: look at the queue again.  Sweeps keep the
        # cost per block independent of the queue's length.
        self._qpos = 0
        if not self._n_queued:
            self._behind = self._queue
            return self._behind
        rows = self._queue
        expected = self._expected(rows)
        visits = self.visits[rows]
        done = visits == expected
        if done.any():
            self.queued[rows[done]] = False
            self._queue = rows[~done]
            self._skip -= int(np.count_nonzero(done))
            self._n_queued = len(self._queue)
        self._behind = self._queue[visits[~done] < expected[~done]]
        return self._behind

    def _enqueue(self, rows: np.ndarray) -> None:
        self.queued[rows] = True
        self._skip += len(rows)
        self._n_queued += len(rows)
        self._queue = np.concatenate([self._queue, rows]).astype(np.int64)
        self._behind, self._qpos = self._behind[:0], 0  # look again at the next block

    def full_block(self) -> Block:
        """Every point this worker holds (halted ones included, sent-away ones not) as one
        block, for exact evaluation."""
        if not self.inactive.any():
            return Block(self.x, self.y, self.state, np.zeros(len(self), dtype=bool))
        keep = np.flatnonzero(~self.inactive)
        return Block(self.x[keep], None if self.y is None else self.y[keep],
                     {k: v[keep] for k, v in self.state.items()},
                     np.zeros(len(keep), dtype=bool))

    def shuffle(self, seed: int) -> None:
        """Traverse the shard in a seeded random order: permute its rows (features, labels,
        per-point state, ids) once, before training (FSP, issue 19).

        On a shard of sorted data (a contiguous range of a file sorted by cluster or label)
        the first iterations of a worker cover one cluster after another; under flexible
        barriers θ is then fitted for a while without the clusters a slow worker has not
        reached, and training settles in another basin.  A no-op once anything was trained
        or moved.
        """
        n = len(self)
        if n != self.n_native or self.visited or self._mark is not None or n < 2:
            return
        perm = np.random.default_rng(seed).permutation(n)
        self.x = np.ascontiguousarray(self.x[perm])
        if self.device is not None:
            self.device.permute(perm)
        if self.y is not None:
            self.y = self.y[perm]
        self.state = {k: v[perm] for k, v in self.state.items()}
        self.ids = self.ids[perm]

    # ------------------------------------------------------------------ migration
    def select_behind_cursor(self, count: int) -> np.ndarray:
        """Rows to migrate: up to ``count`` active native rows just behind the cursor, taken
        bottom-up (the most recently trained first: Fig. 3), wrapping around the end.

        Those rows were trained this pass already, so sending them loses the target no pass.

        While :attr:`unseen_first` is set (FSP holds θ until every point was trained once,
        :mod:`flegel.sync.fsp`, "Coverage") only rows never trained are taken, the last in
        traversal order first (those this worker would reach last): a target trains them
        at once (they are behind its passes, Section 4.3's priority), and the hold ends
        when they are trained, not when this slow worker reaches them.  No trained row is
        taken then: the master counts points in flight as untrained, so a trained row on
        its way would hold θ for nothing (issue 19 review: on 20 kB/s links 40 kept
        barriers, the first update at 3.5 s against the straggler's 0.4 s pass); the rest
        of the order moves once the hold is over (the sender posts a shortfall).
        """
        if self.unseen_first:
            if count <= 0 or self.n_unseen <= 0:
                return np.empty(0, dtype=np.int64)
            return np.flatnonzero((self.visits == 0) & ~(self.halted | self.inactive
                                                         | self.queued))[::-1][:count]
        return self._behind_cursor(count)

    def _behind_cursor(self, count: int) -> np.ndarray:
        """:meth:`select_behind_cursor` in traversal order alone."""
        found: list[np.ndarray] = []
        n, need, scanned = len(self), count, 0
        chunk = max(2 * count, 256)
        pos = self.cursor  # scan [pos - chunk, pos) downwards, wrapping, at most n rows
        while need > 0 and scanned < n:
            size = min(chunk, n - scanned)
            idx = (pos - 1 - np.arange(size)) % n
            free = idx[~(self.halted[idx] | self.inactive[idx] | self.queued[idx])]
            found.append(free[:need])
            need -= len(found[-1])
            scanned += size
            pos = (pos - size) % n
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)

    def lock(self, rows: np.ndarray) -> None:
        """Take ``rows`` (trained ones: not halted, inactive or queued) out of local training
        (the window being sent)."""
        self.inactive[rows] = True
        self._skip += len(rows)
        self._tally(rows, -1)

    def _tally(self, rows: np.ndarray, sign: int) -> None:
        """Counters for trained rows that leave (-1) or join (+1) this worker, in time
        proportional to ``rows`` (a full recount per window would cost the shard)."""
        k = len(rows)
        visits = self.visits[rows]
        self._n_held += sign * k
        self._n_trained += sign * k
        self._visits_sum += sign * int(visits.sum())
        self._n_seen += sign * int(np.count_nonzero(visits))

    def export(self, rows: np.ndarray) -> dict[str, Any]:
        """The payload that moves ``rows`` to another worker: features, labels, per-point
        state, ids and visits."""
        return {"x": self.x[rows], "y": None if self.y is None else self.y[rows],
                "state": {k: v[rows] for k, v in self.state.items()},
                "ids": self.ids[rows], "visits": self.visits[rows]}

    def admit(self, payload: dict[str, Any]) -> np.ndarray:
        """Add migrated points; they train first until their passes caught up.

        Returns the new rows.
        """
        n0, k = len(self), len(payload["ids"])
        rows = {"x": payload["x"], "ids": payload["ids"], "visits": payload["visits"],
                "halted": np.zeros(k, dtype=bool), "inactive": np.zeros(k, dtype=bool),
                "queued": np.zeros(k, dtype=bool)}
        if self.y is not None:
            rows["y"] = payload["y"]
        for name, values in rows.items():
            setattr(self, name, self._grown(name, getattr(self, name), values))
        if self.device is not None:  # the one copy of these points to the device
            self.device = appended(self.device, self.x[n0:], self._owner)
        for key, v in self.state.items():
            self.state[key] = self._grown("state." + key, v, payload["state"][key])
        new = np.arange(n0, n0 + k)
        self._tally(new, +1)
        self._enqueue(new)
        return new

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` migrated points now, before training (an implementation
        choice for FSP paper §4.3's receiving queue; the paper does not say how it grows).

        The first :meth:`admit` past the room copies the whole shard into a buffer twice its
        size: done by the targets of a straggler's first window at once, that stalled each
        for 0.1-0.55 s of wall time at a load of 10-17 on 2 cores, every worker waiting for
        them at the next barrier (issue 19).  Rows beyond the shard are allocated, not
        touched, until points arrive.
        """
        n = len(self)
        names = ["x", "ids", "visits", "halted", "inactive", "queued"]
        if self.y is not None:
            names.append("y")
        for name in names:
            setattr(self, name, self._room(name, getattr(self, name), n + extra))
        for key, v in self.state.items():
            self.state[key] = self._room("state." + key, v, n + extra)

    def _room(self, name: str, view: np.ndarray, size: int) -> np.ndarray:
        buf = self._buffers.get(name)
        if buf is not None and len(buf) >= size and buf[:len(view)].base is view.base:
            return view
        buf = np.empty((size, *view.shape[1:]), dtype=view.dtype)
        buf[:len(view)] = view
        self._buffers[name] = buf
        return buf[:len(view)]

    def _grown(self, name: str, view: np.ndarray, rows: Any) -> np.ndarray:
        """``view`` with ``rows`` appended, in a buffer that doubles when full, so admitting
        a window costs the window, not the shard (amortized)."""
        n, k = len(view), len(rows)
        buf = self._buffers.get(name)
        if buf is None or len(buf) < n + k or buf[:n].base is not view.base:
            buf = np.empty((max(2 * n, n + k), *view.shape[1:]), dtype=view.dtype)
            buf[:n] = view
            self._buffers[name] = buf
        buf[n:n + k] = np.asarray(rows, dtype=view.dtype)
        return buf[:n + k]

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Rows holding the points ``ids`` (each must be here)."""
        order = np.argsort(self.ids, kind="stable")
        pos = np.searchsorted(self.ids[order], ids)
        rows = order[np.minimum(pos, len(order) - 1)]
        if len(ids) and not np.array_equal(self.ids[rows], ids):
            raise KeyError("some points are not held here")
        return rows

    def retire(self, origin: int, count: int) -> dict[str, Any]:
        """Virtual migration, target side: stop training up to ``count`` points that came
        from worker ``origin``, newest first; return their ids, state and visits (no data),
        which the origin needs to take them up again where they are."""
        rows = np.flatnonzero(~(self.inactive | self.queued | self.halted)
                              & (origin_of(self.ids) == origin))
        rows = rows[::-1][:count]
        self.lock(rows)
        return {"ids": self.ids[rows], "visits": self.visits[rows],
                "state": {k: v[rows] for k, v in self.state.items()}}

    def reactivate(self, taken: dict[str, Any]) -> np.ndarray:
        """Virtual migration, origin side: train again the points it still holds, with the
        state and visits they reached elsewhere.  Returns their rows."""
        rows = self.rows_of(np.asarray(taken["ids"], np.int64))
        for k, v in self.state.items():
            v[rows] = taken["state"][k]
        self.visits[rows] = taken["visits"]
        self.inactive[rows] = False
        self._skip -= len(rows)
        self._tally(rows, +1)
        self._enqueue(rows)
        return rows

    def settle_cut(self, take_back: np.ndarray, give_up: np.ndarray) -> None:
        """A resumed checkpoint's points in flight (:func:`flegel.runtime.cut.consistent_cut`):
        train again the points ``take_back`` (held here inactive; they keep their state and
        join as queued points do), stop training the points ``give_up`` (their newer copy is
        another worker's)."""
        if len(take_back):
            rows = self.rows_of(np.asarray(take_back, np.int64))
            self.inactive[rows] = False
            self.queued[rows] = True
            self._queue = np.concatenate([self._queue, rows]).astype(np.int64)
        if len(give_up):
            rows = self.rows_of(np.asarray(give_up, np.int64))
            self.inactive[rows] = True
            self.queued[rows] = False
            self._queue = self._queue[~np.isin(self._queue, rows)]
        self._behind, self._qpos = self._behind[:0], 0
        self._recount()

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything but the shard's own points, which a resumed worker loads again
        (:class:`flegel.state.Stateful`): per-point state, ids, visits, halted, inactive and
        queued rows, cursor, cycles, counters, the mark and its journal, and the points that
        migrated in (features and labels: their shard is another worker's)."""
        import copy

        skip = ("x", "y", "_buffers", "device", "_owner", "_on_gpu")
        out = {k: copy.deepcopy(v) for k, v in vars(self).items() if k not in skip}
        out["x_admitted"] = self.x[self.n_native:].copy()
        out["y_admitted"] = None if self.y is None else self.y[self.n_native:].copy()
        return out

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state`; this store holds the same shard, freshly loaded.

        Raises
        ------
        ValueError
            The shard is not the one the state was taken with (another row count).
        """
        if state["n_native"] != self.n_native:
            raise ValueError(f"checkpoint: expected a shard of {state['n_native']} rows, "
                             f"found {self.n_native}: the data changed since the checkpoint")
        state = dict(state)
        x_in, y_in = state.pop("x_admitted"), state.pop("y_admitted")
        if len(x_in):
            self.x = np.concatenate([self.x[:self.n_native], x_in])
            if self.y is not None:
                self.y = np.concatenate([self.y[:self.n_native], y_in])
        self._buffers = {}
        fresh = self.state
        for k, v in state.items():
            setattr(self, k, v)
        self._state_added_since(fresh)
        if self.device is not None:  # placed before: the rows changed, copy them again
            xp, self.device = self.device.xp, None  # (the old copy freed first)
            self.device = resident_rows(xp, self.x, self._owner)

    def _state_added_since(self, fresh: dict[str, np.ndarray]) -> None:
        """Give every row a per-point state key that the checkpoint did not have.

        A checkpoint written by an earlier version of the algorithm lacks a key it keeps now
        (K-means' Hamerly ``bound``): the key starts as a fresh store's first row has it,
        which :meth:`~flegel.api.Algorithm.init_state` sets alike for every row.
        """
        for key, v in fresh.items():
            if key in self.state or not len(v):
                continue
            rows = len(self.x)
            self.state[key] = np.repeat(v[:1], rows, axis=0)

    # ------------------------------------------------------------------ mark and roll back
    def mark(self) -> None:
        """Remember the traversal position; from now on journal the state of visited rows.

        :meth:`rollback` returns to this point.  Only the rows processed after the mark are
        copied (lazily, just before their first update), so marking every iteration (SpecSync)
        or every probe (FSPV) costs memory in proportion to the work since the mark.
        """
        self._mark = (self.cursor, self.cycles, self.visited, self.scanned,
                      self.halted.copy() if self.n_halted else None)
        self._journal = []

    def rollback(self) -> None:
        """Return to the last :meth:`mark`: traversal position, state, visits and halt votes.

        Migration is not undone: rows that arrived since the mark keep their place.
        """
        if self._mark is None:
            raise RuntimeError("rollback() without a mark()")
        for sel, saved in reversed(self._journal or []):
            for k, v in saved.items():
                (self.visits if k == "\0visits" else self.state[k])[sel] = v
        self.cursor, self.cycles, self.visited, self.scanned, halted = self._mark
        if halted is None:
            self.halted[:] = False
        else:
            self.halted[:len(halted)] = halted
        self._recount()
        self._journal = []

    def unmark(self) -> None:
        """Forget the mark and stop journaling."""
        self._mark = None
        self._journal = None

    @property
    def marked(self) -> bool:
        """True between :meth:`mark` and :meth:`unmark`."""
        return self._mark is not None

    def _journal_rows(self, sel: slice | np.ndarray) -> None:
        if self._journal is not None:
            saved = {k: v[sel].copy() for k, v in self.state.items()}
            saved["\0visits"] = self.visits[sel].copy()
            self._journal.append((sel, saved))
