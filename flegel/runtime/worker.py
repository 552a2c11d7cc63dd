"""The worker loop: process blocks, commit when the sync model says, wait for θ.

One loop serves every synchronization model.  The master drives it through the header of each
θ it sends (see :data:`flegel.runtime.comm.PARAMS`): a batch of points (BSP, ASP and the SSP
family), an interval η with a per-worker offset (FSP, semi-centralized coordination), pause and
abort signals (FSP centralized coordination, SpecSync), snapshot and roll-back (FSPV probes).
Between blocks the worker polls for signals with a non-blocking ``Test``, and it commits right
after the block it is on (FSP paper Section 3.1).  A completed traversal pass since the
iteration began always ends the iteration: θ is fixed within an iteration, so a second pass
would only repeat work (Section 3.3).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from flegel.api import Algorithm
from flegel.blocksize import BlockSizer
from flegel.runtime import comm as msg
from flegel.runtime.layout import Layout
from flegel.store import ShardStore
from flegel.stragglers import Stragglers
from flegel.sync.base import Reason


@dataclass
class WorkerStats:
    """Totals a worker reports at the end of the run."""

    points: int = 0
    compute_s: float = 0.0
    wait_s: float = 0.0
    wait_cpu_s: float = 0.0  # CPU time used while waiting: shows that waiting does not spin
    slowed_s: float = 0.0
    commits: int = 0
    aborted_points: int = 0
    extra: dict = field(default_factory=dict)


class Worker:
    """One worker rank.

    Parameters
    ----------
    comm : MPI.Comm
        The job's communicator; rank 0 is the master.
    algorithm : Algorithm
    store : ShardStore
        This worker's shard.
    theta_layout, agg_layout : Layout
        Buffer layouts announced by the master.
    stragglers : Stragglers
        Patterns that slow this worker (possibly none).
    block_ms : float
        Target compute time of one block.
    """

    def __init__(self, comm: MPI.Comm, algorithm: Algorithm, store: ShardStore,
                 theta_layout: Layout, agg_layout: Layout, stragglers: Stragglers,
                 block_ms: float = 1.0) -> None:
        self.comm = comm
        self.algorithm = algorithm
        self.store = store
        self.theta_layout = theta_layout
        self.agg_layout = agg_layout
        self.stragglers = stragglers
        self.sizer = BlockSizer(target_s=block_ms / 1000.0)
        self.stats = WorkerStats()
        self._params_buf = np.empty(msg.Header.SIZE + theta_layout.size)
        self._commit_buf = np.empty(msg.Header.SIZE + agg_layout.size)
        self._signal_buf = np.empty(msg.Header.SIZE)
        self._params_req = comm.Irecv(self._params_buf, source=0, tag=msg.TAG_PARAMS)
        self._signal_req = comm.Irecv(self._signal_buf, source=0, tag=msg.TAG_SIGNAL)
        self._commit_req: MPI.Request | None = None
        self.clock = 0
        self.debt_s = 0.0  # straggler suspension still to serve

    # -------------------------------------------------------------- messaging
    def _receive_params(self) -> tuple[dict, dict]:
        """Wait (without spinning) for the next θ; return its header and θ."""
        t0, c0 = time.perf_counter(), time.process_time()
        msg.wait(self._params_req)
        header = msg.PARAMS.read(self._params_buf)
        theta = self.theta_layout.unpack(self._params_buf[msg.Header.SIZE:])
        self._params_req = self.comm.Irecv(self._params_buf, source=0, tag=msg.TAG_PARAMS)
        self._last_wait = time.perf_counter() - t0
        self.stats.wait_s += self._last_wait
        self.stats.wait_cpu_s += time.process_time() - c0
        return header, theta

    def _poll_signal(self, version: float) -> float:
        """Return the kind of a signal meant for θ version ``version`` (0.0 if none).

        Signals for an older version arrive after this worker already committed for it
        (e.g. it finished a pass just as the master paused everyone) and are dropped.
        """
        kind = 0.0
        while self._signal_req.Test():
            sig = msg.SIGNAL.read(self._signal_buf)
            self._signal_req = self.comm.Irecv(self._signal_buf, source=0, tag=msg.TAG_SIGNAL)
            if sig["version"] == version:
                kind = max(kind, sig["kind"])
        return kind

    def _commit(self, agg: dict, **header: float) -> None:
        if self._commit_req is not None:
            msg.wait(self._commit_req)
        msg.COMMIT.write(self._commit_buf, sent_at=time.time(), **header)
        self.agg_layout.pack(agg, self._commit_buf[msg.Header.SIZE:])
        self._commit_req = self.comm.Isend(self._commit_buf, dest=0, tag=msg.TAG_COMMIT)
        self.stats.commits += 1

    def _suspend(self, version: float, deadline: float | None) -> float:
        """Serve the straggler suspension in slices; stop early for a signal or the timer.

        Returns the signal kind that interrupted it (0.0 if none).  What is left of the
        suspension stays in :attr:`debt_s` for the next iteration.
        """
        while self.debt_s > 0:
            step = min(self.debt_s, 1e-3)
            time.sleep(step)
            self.debt_s -= step
            signal = self._poll_signal(version)
            if signal:
                return signal
            if deadline is not None and time.perf_counter() >= deadline:
                return 0.0
        return 0.0

    # -------------------------------------------------------------- one iteration
    def _iterate(self, header: dict, theta: dict) -> tuple[dict, dict]:
        """Process blocks until the commit condition; return the aggregate and its header."""
        algo, store = self.algorithm, self.store
        version = header["version"]
        batch = int(header["batch"])
        eta = header["eta_s"]
        start = time.perf_counter()
        deadline = None
        if eta > 0:
            # Semi-centralized timers start when the master sent θ, not when this worker
            # noticed it (its poll may lag by up to a poll interval), so all workers time the
            # same interval.  A lag outside [0, 50 ms) means clocks disagree across hosts:
            # then the local receipt time is used.
            lag = time.time() - header["sent_at"]
            anchor = start - lag if 0.0 <= lag < 0.05 else start
            deadline = anchor + max(eta - header["offset_s"], 0.0)
        scanned0 = store.scanned
        t = int(version) + 1
        agg = self.agg_layout.zeros()
        points = 0
        compute = 0.0
        reason = Reason.BATCH
        slowed = self.debt_s  # served now (or carried on: subtracted at the end)
        pending = self._suspend(version, deadline)
        while True:
            signal = pending or self._poll_signal(version)
            pending = 0.0
            if signal == msg.SIGNAL_PAUSE:
                reason = Reason.SIGNAL
                break
            if signal == msg.SIGNAL_ABORT:
                reason = Reason.ABORT
                break
            if batch > 0 and points >= batch:
                reason = Reason.BATCH
                break
            if store.scanned - scanned0 >= len(store):
                reason = Reason.PASS
                break
            if deadline is not None and time.perf_counter() >= deadline:
                reason = Reason.TIMER
                break
            n = self.sizer.size
            if deadline is not None and self.sizer.per_point_s:
                # A self-timed worker knows its deadline ahead: it shrinks the last block to
                # end on it instead of overrunning it by up to a block (Section 5.2).
                left = deadline - time.perf_counter()
                n = min(n, max(1, int(left / self.sizer.per_point_s)))
            if batch > 0:
                n = min(n, batch - points)
            n = min(n, len(store) - (store.scanned - scanned0))
            t0 = time.perf_counter()
            block, sel = store.next_block(n)
            if len(block):
                agg = algo.aggregate(agg, algo.update_block(block, theta, t))
            store.commit_block(block, sel)
            dt = time.perf_counter() - t0
            points += len(block)
            compute += dt
            suspended, blocked = self.stragglers.after_block(len(block), dt)
            self.sizer.observe(len(block), dt, suspended + blocked)
            if blocked:
                time.sleep(blocked)
                slowed += blocked
            if suspended:
                self.debt_s += suspended
                slowed += suspended
                pending = self._suspend(version, deadline)
        slowed -= self.debt_s  # what is left is served (and counted) next iteration
        elapsed = time.perf_counter() - start
        self.stats.points += points
        self.stats.compute_s += compute
        self.stats.slowed_s += slowed
        rate = points / compute if compute > 0 else 0.0
        meta = {"points": points, "compute_s": elapsed, "reason": float(reason),
                "passes": store.passes, "block_s": self.sizer.block_s, "rate": rate,
                "slowed_s": slowed, "n_active": store.n_active}
        return agg, meta

    def _close(self) -> None:
        """Cancel the receives still posted, so MPI finalizes cleanly."""
        for req in (self._params_req, self._signal_req):
            req.Cancel()
        MPI.Request.Waitall([self._params_req, self._signal_req])

    # -------------------------------------------------------------- main loop
    def run(self) -> dict:
        """Train until the master says stop; return this worker's end-of-run report."""
        self.stragglers.reset_clock()
        header, theta = self._receive_params()
        while not header["stop"]:
            if header["rollback"]:
                self.store.rollback()
            if header["mark"] > 0:
                self.store.mark()
            elif header["mark"] < 0:
                self.store.unmark()
            agg, meta = self._iterate(header, theta)
            if meta["reason"] == float(Reason.ABORT):
                # SpecSync: throw the partial work away and restart from a fresher θ.
                self.stats.aborted_points += meta["points"]
                self.store.rollback()
                agg = self.agg_layout.zeros()
                meta["aborted"] = meta.pop("points")
                meta["points"] = 0
            self.clock += 1
            self._commit(agg, clock=self.clock, version=header["version"],
                         wait_s=self._last_wait, **meta)
            header, theta = self._receive_params()
        if self._commit_req is not None:
            msg.wait(self._commit_req)
        self._close()
        objective = self.algorithm.evaluate(theta, self.store.full_block())
        s = self.stats
        return {"rank": self.comm.rank, "objective": float(objective), "n_points": len(self.store),
                "passes": self.store.passes, "points": s.points, "compute_s": s.compute_s,
                "wait_s": s.wait_s, "wait_cpu_fraction": s.wait_cpu_s / max(s.wait_s, 1e-9),
                "slowed_s": s.slowed_s, "commits": s.commits,
                "aborted_points": s.aborted_points, "stragglers": self.stragglers.record(),
                "theta_version": header["version"], **s.extra}
