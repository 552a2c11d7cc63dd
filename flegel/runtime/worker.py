"""A worker rank over MPI: receive θ and instructions, run iterations, commit, report.

One loop serves every synchronization model (:mod:`flegel.runtime.loop`, driven here in real
time); what differs between models lives in their worker policy
(:class:`flegel.ports.WorkerPolicy`), which acts on the worker through the
:class:`flegel.ports.WorkerPort` this class implements (and, for FSP's data migration,
:class:`flegel.balance.ports.MigrationPort`).  Signals are polled with a
non-blocking ``Test``; every wait sleeps between polls instead of spinning a core.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from flegel.api import Algorithm
from flegel.block import Block
from flegel.ports import Arrays, WorkerPolicy
from flegel.protocol import (
    COMMIT,
    PARAMS,
    POLL_MAX_S,
    SIGNAL,
    EvalEnd,
    EvalReply,
    EvalRequest,
    Instructions,
    MigrationOrder,
    PeerMessage,
    Signal,
    Tag,
)
from flegel.runtime import comm as msg
from flegel.runtime.blocksize import BlockSizer, device_of
from flegel.runtime.cut import CUT
from flegel.runtime.exact import Evaluator
from flegel.runtime.layout import Layout
from flegel.runtime.loop import Totals, Wait, await_params, drive, strongest, work
from flegel.runtime.numerics import check_aggregator, layout_problem
from flegel.runtime.store import ShardStore
from flegel.runtime.stragglers import Stragglers


def seed_sizer(sizer: BlockSizer, stragglers: Stragglers, fixed_s: float,
               point_s: float) -> bool:
    """Seed a worker's block sizer from the kernel's cost measured at warm-up
    (:meth:`BlockSizer.seed`; FSP, :mod:`flegel.sync.seeded`), unless straggler patterns
    slow this worker; returns whether it was seeded.

    A pattern's delays come after a block, for its points (``injected``: τ per ``every``
    points), so a slowed worker's seeded first block of ~20,000 points (the horizon job's
    logistic regression) bunched 20 suspensions after it, all its work done at θ⁰, where
    the sizer's ramp from 64 points met its first suspension after ~1,200 points and then
    shrank its blocks: the straggler of ``bench/logreg_straggler.py`` ended 300 barriers
    anywhere from +0.06 % to +12 % above the optimum (6 runs) against +1.48-1.59 % unseeded.
    Such a worker keeps the ramp, as before.
    """
    if stragglers.patterns:
        return False
    return sizer.seed(fixed_s, point_s)


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


class Worker:
    """One worker rank; implements :class:`flegel.ports.WorkerPort` for its policy, the
    loop's :class:`~flegel.runtime.loop.WorkerHost` (:func:`~flegel.runtime.loop.work` runs on
    it) and the data migration's :class:`flegel.balance.ports.MigrationPort` (attached to
    the policy by the wiring).

    Parameters
    ----------
    comm : MPI.Comm
        The job's communicator; rank 0 is the master.
    algorithm : Algorithm
    store : ShardStore
        This worker's shard.
    theta_layout, agg_layout : Layout
        Buffer layouts announced by the master.
    policy : WorkerPolicy
        The sync model's worker side.
    stragglers : Stragglers
        Patterns that slow this worker (possibly none).
    block_ms : float
        Target compute time of one block.
    evaluator : Evaluator, optional
        Answers the master's exact-evaluation requests between blocks and while waiting
        (:mod:`flegel.runtime.exact`); None: the master makes none.
    """

    def __init__(self, comm: MPI.Comm, algorithm: Algorithm, store: ShardStore,
                 theta_layout: Layout, agg_layout: Layout, policy: WorkerPolicy,
                 stragglers: Stragglers, block_ms: float = 1.0,
                 evaluator: Evaluator | None = None) -> None:
        self.comm = comm
        self.algorithm = algorithm
        self.store = store
        self.theta_layout = theta_layout
        self.agg_layout = agg_layout
        self.policy = policy
        self.stragglers = stragglers
        self.sizer = BlockSizer(target_s=block_ms / 1000.0, device=device_of(algorithm))
        self.stats = WorkerStats()
        self._params_buf = np.empty(PARAMS.size + theta_layout.size)
        self._commit_buf = np.empty(COMMIT.size + agg_layout.size)
        self._signal_buf = np.empty(SIGNAL.size)
        self._params_req = comm.Irecv(self._params_buf, source=0, tag=Tag.PARAMS)
        self._signal_req = comm.Irecv(self._signal_buf, source=0, tag=Tag.SIGNAL)
        self._commit_req: MPI.Request | None = None
        self.last_wait_s = 0.0
        self._posted: list[tuple[int, MPI.Request]] = []  # (dest, its send)
        self.evaluator = evaluator
        self._eval_sent: list[MPI.Request] = []
        self._state_sent: list[MPI.Request] = []
        self.theta: Arrays = {}
        self.iteration_clock = 0
        self.debt_s = 0.0  # straggler suspension still to serve

    # -------------------------------------------------------------- WorkerPort
    def now(self) -> float:
        return time.perf_counter()

    @property
    def per_point_s(self) -> float | None:
        return self.sizer.per_point_s

    @property
    def slowed_point_s(self) -> float | None:
        return self.sizer.slowed_point_s

    @property
    def straggling(self) -> bool:
        return bool(self.stragglers.patterns)

    def mark(self) -> None:
        self.store.mark()

    def unmark(self) -> None:
        self.store.unmark()

    def rollback(self) -> None:
        self.store.rollback()

    @property
    def shard(self) -> ShardStore:
        return self.store

    @property
    def rank(self) -> int:
        return int(self.comm.rank)

    @property
    def peers(self) -> list[int]:
        return [r for r in range(1, self.comm.size) if r != self.comm.rank]

    def post(self, dest: int, message: PeerMessage) -> None:
        self._posted.append((dest, self.comm.isend(message, dest=dest, tag=Tag.MIGRATE)))

    def sends_pending(self, dest: int | None = None) -> int:
        if self._posted:
            self._posted = [(d, r) for d, r in self._posted if not r.Test()]
        return sum(1 for d, _ in self._posted if dest is None or d == dest)

    def receive(self, limit: int | None = None) -> list[tuple[int, PeerMessage]]:
        return self._receive_tagged(Tag.MIGRATE, limit)

    def orders(self) -> list[MigrationOrder]:
        return [m for _, m in self._receive_tagged(Tag.ORDER)]

    def pause(self) -> None:
        time.sleep(POLL_MAX_S)

    def eval_requests(self) -> list[EvalRequest | EvalEnd]:
        return [m for _, m in self._receive_tagged(Tag.EVAL)]

    def reply_eval(self, message: EvalReply) -> None:
        self._eval_sent = [r for r in self._eval_sent if not r.Test()]
        self._eval_sent.append(self.comm.isend(message, dest=0, tag=Tag.EVAL))

    @property
    def _eval_busy_s(self) -> float:
        return self.evaluator.busy_s if self.evaluator is not None else 0.0

    def side_work(self) -> None:
        if self.evaluator is not None:
            self.evaluator.step(self, rows=self.sizer.size)

    def _receive_tagged(self, tag: Tag, limit: int | None = None) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        status = MPI.Status()
        while (limit is None or len(out) < limit) and self.comm.iprobe(
                source=MPI.ANY_SOURCE, tag=tag, status=status):
            src = status.Get_source()
            out.append((src, self.comm.recv(source=src, tag=tag)))
        return out

    # -------------------------------------------------------------- checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """This worker's part of a checkpoint (:mod:`flegel.rundir.checkpoint`): its store, worker
        policy, straggler patterns, iteration count, the suspension still owed, totals."""
        import copy

        return {"store": self.store.checkpoint_state(), "policy": self.policy.checkpoint_state(),
                "stragglers": self.stragglers.checkpoint_state(),
                "clock": self.iteration_clock,
                "debt_s": self.debt_s, "stats": copy.copy(self.stats)}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state` (θ comes from the master, as at a fresh start)."""
        self.store.restore(state["store"])
        cut = state.get(CUT)
        if cut is not None:  # points in flight at the checkpoint (flegel.runtime.cut)
            self.store.settle_cut(cut["take_back"], cut["give_up"])
        self.policy.restore(state["policy"])
        self.stragglers.restore(state["stragglers"])
        self.iteration_clock, self.debt_s = state["clock"], state["debt_s"]
        self.stats = state["stats"]

    # -------------------------------------------------------------- messaging
    def wall_time(self) -> float:
        return time.time()

    def take_params(self) -> dict[str, float] | None:
        """The PARAMS header of instructions that arrived (θ kept in :attr:`theta` when it
        came with them), the worker's state sent first when they ask for it; None if none
        arrived."""
        if not self._params_req.Test():
            return None
        header = PARAMS.read(self._params_buf)
        if header["has_theta"]:
            self.theta = self.theta_layout.unpack(self._params_buf[PARAMS.size:])
        self._params_req = self.comm.Irecv(self._params_buf, source=0, tag=Tag.PARAMS)
        if header["checkpoint"]:
            # Before any work on these instructions: the state matches the master's snapshot.
            self._state_sent = [r for r in self._state_sent if not r.Test()]
            self._state_sent.append(self.comm.isend(self.checkpoint_state(), dest=0,
                                                    tag=Tag.CHECKPOINT))
        return header

    def wait_params(self) -> Generator[Wait, Any, dict[str, float]]:
        """:func:`~flegel.runtime.loop.await_params`, timed: the wait and the CPU it used
        (exact evaluations done meanwhile are work, not the cost of waiting).  A straggler
        suspension served meanwhile (the loop's "Overlap") is slowed time too, counted by
        the loop (:func:`~flegel.runtime.loop.serve`): the two overlap by it."""
        t0, c0 = time.perf_counter(), time.process_time()
        busy0 = self._eval_busy_s
        header = yield from await_params(self)
        self.last_wait_s = time.perf_counter() - t0
        self.stats.wait_s += self.last_wait_s
        busy = self._eval_busy_s - busy0
        self.stats.wait_cpu_s += max(time.process_time() - c0 - busy, 0.0)
        return header

    def receive_params(self) -> dict[str, float]:
        """Wait (without spinning) for the next instructions; θ comes with them when it
        changed (kept in :attr:`theta`).  The worker policy's side work goes on while it
        waits.  Return the PARAMS header."""
        header: dict[str, float] = drive(self.wait_params())
        return header

    def poll_signal(self, version: float) -> Signal:
        """Return the strongest signal meant for θ version ``version`` (NONE if none;
        :func:`~flegel.runtime.loop.strongest`)."""
        arrived = []
        while self._signal_req.Test():
            arrived.append(SIGNAL.read(self._signal_buf))
            self._signal_req = self.comm.Irecv(self._signal_buf, source=0, tag=Tag.SIGNAL)
        return strongest(arrived, version)

    def _commit(self, agg: Arrays, **header: float) -> None:
        if self._commit_req is not None:
            msg.wait(self._commit_req)
        # The layout here, before packing hides it (NaN travels: the master checks it).
        problem = layout_problem(agg, self.agg_layout)
        if problem is not None:
            check_aggregator(agg, self.agg_layout, self.rank, header["version"],
                             header["clock"])
        COMMIT.write(self._commit_buf, sent_at=time.time(), **header)
        self.agg_layout.pack(agg, self._commit_buf[COMMIT.size:])
        self._commit_req = self.comm.Isend(self._commit_buf, dest=0, tag=Tag.COMMIT)
        self.stats.commits += 1

    # -------------------------------------------------------------- one iteration
    def block_size(self) -> int:
        return self.sizer.size

    def slow(self, points: int, compute_s: float) -> tuple[float, float]:
        return self.stragglers.after_block(points, compute_s)

    def compute(self, block: Block, t: int) -> Generator[Wait, Any, tuple[Arrays, float]]:
        """Run the kernel and time it (a generator only to fit :func:`loop.iterate`)."""
        t0 = time.perf_counter()
        delta = self.algorithm.update_block(block, self.theta, t)
        return delta, time.perf_counter() - t0
        yield  # noqa: B901 - never reached: makes this a generator

    def began(self, version: int, instructions: Instructions) -> Generator[Wait, Any, None]:
        return
        yield  # noqa: B901 - never reached: makes this a generator

    def add(self, totals: Totals) -> None:
        s = self.stats
        s.points += totals.points
        s.compute_s += totals.compute_s
        s.slowed_s += totals.slowed_s
        s.aborted_points += totals.aborted

    def commit(self, agg: Arrays, fields: dict[str, float]) -> Generator[Wait, Any, None]:
        """:meth:`_commit` (a generator only to fit :func:`loop.work`)."""
        self._commit(agg, **fields)
        return
        yield  # noqa: B901 - never reached: makes this a generator

    def close(self) -> None:
        """Complete the last commit and cancel the receives still posted, so MPI finalizes
        cleanly."""
        if self._commit_req is not None:
            msg.wait(self._commit_req)
        for sent in self._eval_sent + self._state_sent:
            msg.wait(sent)
        for req in (self._params_req, self._signal_req):
            req.Cancel()
        MPI.Request.Waitall([self._params_req, self._signal_req])

    # -------------------------------------------------------------- main loop
    def run(self) -> dict[str, Any]:
        """Train until the master says stop; return this worker's end-of-run report."""
        self.stragglers.reset_clock()
        header: dict[str, float] = drive(work(self))
        side = self.policy.on_stop(self)
        if self.evaluator is not None:
            self.evaluator.drain(self, self.pause)
        self.close()
        s = self.stats
        held = ~self.store.inactive
        visits = self.store.visits[held]
        return {"rank": self.comm.rank, "host": socket.gethostname(),
                "n_points": self.store.n_held,
                # Counted, not indexed: x[held] would copy the shard at the run's end.
                "data_bytes": self.store.n_held * int(self.store.x[:1].nbytes),
                "passes": self.store.passes, "points": s.points, "compute_s": s.compute_s,
                "wait_s": s.wait_s, "wait_cpu_fraction": s.wait_cpu_s / max(s.wait_s, 1e-9),
                "slowed_s": s.slowed_s, "commits": s.commits,
                "aborted_points": s.aborted_points, "stragglers": self.stragglers.record(),
                "theta_version": header["version"],
                "device_shard": self.store.device_report(),
                "visits": {"min": int(visits.min()) if visits.size else 0,
                           "max": int(visits.max()) if visits.size else 0,
                           "sum": int(visits.sum()), "count": int(visits.size)},
                **side}
