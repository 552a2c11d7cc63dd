"""One worker iteration: process blocks until the worker policy (or a full pass) ends it.

The loop is written once, as a generator that yields a :class:`Wait` wherever wall time
passes outside the kernel (a straggler's suspension or slowdown) and asks its host to run
each block (:meth:`LoopHost.compute`).  The MPI worker (:class:`flegel.runtime.worker.Worker`)
drives it with real sleeps and measured kernel times (:func:`drive`); the in-process
simulation of the tests drives the very same loop on a simulated clock, so a policy is tested
against the loop that runs it.

Between blocks the loop polls for signals and commits right after the block it is on (FSP
paper Section 3.1).  A completed traversal pass since the iteration began always ends the
iteration: θ is fixed within an iteration, so a second pass would only repeat work (Section
3.3).  Everything else that differs between sync models is the worker policy's.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

from flegel.ports import Arrays, WorkerPolicy
from flegel.protocol import Reason, Signal
from flegel.runtime.blocksize import BlockSizer
from flegel.runtime.store import ShardStore


@dataclass(frozen=True)
class Wait:
    """Yielded by the loop: this many seconds pass (a sleep, real or simulated)."""

    seconds: float


@dataclass
class Totals:
    """What one iteration adds to the worker's totals."""

    points: int = 0
    compute_s: float = 0.0
    slowed_s: float = 0.0
    aborted: int = 0


class LoopHost(Protocol):
    """What the loop needs of the worker that runs it (a :class:`~flegel.ports.WorkerPort`
    too, for the policy's hooks)."""

    store: ShardStore
    policy: WorkerPolicy
    algorithm: Any
    sizer: BlockSizer
    agg_layout: Any
    theta: Arrays
    debt_s: float

    def now(self) -> float: ...

    def poll_signal(self, version: float) -> Signal: ...

    def block_size(self) -> int: ...

    def slow(self, points: int, compute_s: float) -> tuple[float, float]:
        """(suspension to serve, blocking delay) after a block (the straggler patterns)."""
        ...

    def compute(self, block: Any, t: int) -> Generator[Wait, Any, tuple[Arrays, float]]:
        """Run the kernel on ``block``; return its aggregator and the seconds it took."""
        ...

    def side_work(self) -> None:
        """Work that is no model's (exact evaluations, :mod:`flegel.runtime.exact`), a
        nonblocking step between blocks and while suspended."""
        ...


def suspend(host: Any, version: float) -> Generator[Wait, Any, Reason | None]:
    """Serve the straggler suspension in slices; stop early for a signal or the deadline.

    Returns why the iteration ends if a signal interrupted it.  What is left of the
    suspension stays in ``host.debt_s`` for the next iteration.  The policy's side work
    (migration) goes on during the suspension, as a communication thread would while a
    slowed training thread sleeps; its time counts as served.
    """
    policy = host.policy
    deadline = policy.deadline()
    while host.debt_s > 0:
        t0 = host.now()
        yield Wait(min(host.debt_s, 1e-3))
        policy.while_waiting(host)
        host.side_work()
        host.debt_s -= host.now() - t0
        if host.debt_s < 1e-12:
            host.debt_s = 0.0
        signal = host.poll_signal(version)
        if signal:
            reason = policy.on_signal(host, signal)
            if reason is not None:
                return reason
        if deadline is not None and host.now() >= deadline:
            break
    return None


def iterate(host: Any, version: float
            ) -> Generator[Wait, Any, tuple[Arrays, dict[str, float], Totals]]:
    """One iteration from θ version ``version``: the aggregate, the COMMIT header fields and
    the totals it adds."""
    store, policy = host.store, host.policy
    start = host.now()
    scanned0 = store.scanned
    t = int(version) + 1
    agg = host.agg_layout.zeros()
    points = 0
    compute = 0.0
    slowed = host.debt_s  # served now (or carried on: subtracted at the end)
    reason = yield from suspend(host, version)
    while reason is None:
        signal = host.poll_signal(version)
        if signal and (reason := policy.on_signal(host, signal)) is not None:
            break
        left = len(store) - (store.scanned - scanned0)
        if left <= 0:
            reason = Reason.PASS
            break
        if (reason := policy.commit_reason(host, points)) is not None:
            break
        policy.between_blocks(host)
        host.side_work()
        n = min(policy.block_size(host, host.block_size()), left)
        limit = policy.block_limit(host, points)
        if limit is not None:
            n = min(n, max(limit, 1))
        block, sel = store.next_block(n)
        dt = 0.0
        if len(block):
            delta, dt = yield from host.compute(block, t)
            agg = host.algorithm.aggregate(agg, delta)
        store.commit_block(block, sel)
        points += len(block)
        compute += dt
        suspended, blocked = host.slow(len(block), dt)
        host.sizer.observe(len(block), dt, suspended + blocked)
        if blocked:
            yield Wait(blocked)
            slowed += blocked
        if suspended:
            host.debt_s += suspended
            slowed += suspended
            reason = yield from suspend(host, version)
    slowed -= host.debt_s  # what is left is served (and counted) next iteration
    elapsed = host.now() - start
    totals = Totals(points=points, compute_s=compute, slowed_s=slowed)
    rate = points / compute if compute > 0 else 0.0
    if not policy.finish(host, reason):
        # The policy threw the work away (SpecSync's abort): nothing to apply.
        totals.aborted, points = points, 0
        agg = host.agg_layout.zeros()
    meta = {"points": points, "compute_s": elapsed, "reason": float(reason),
            "passes": store.passes, "block_s": host.sizer.block_s, "rate": rate,
            "slowed_s": slowed, "n_active": store.n_active, "aborted": totals.aborted,
            "n_held": store.n_held, "in_flight": policy.in_flight, "seen": store.n_seen,
            "queued": store.n_queued}
    return agg, meta, totals


def drive(gen: Generator[Wait, Any, Any]) -> Any:
    """Run a loop generator in real time: every :class:`Wait` is a sleep."""
    try:
        while True:
            time.sleep(next(gen).seconds)
    except StopIteration as done:
        return done.value
