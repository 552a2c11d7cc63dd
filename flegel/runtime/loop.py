"""A worker's loop: wait for instructions, run iterations, commit, until the stop flag.

The loop is written once, as generators that yield a :class:`Wait` wherever wall time
passes outside the kernel (a straggler's suspension or slowdown, a poll while waiting for
instructions: :class:`Poll`) and ask their host to run each block
(:meth:`LoopHost.compute`), take instructions that arrived (:meth:`WorkerHost.take_params`)
and send a commit (:meth:`WorkerHost.commit`).  The MPI worker
(:class:`flegel.runtime.worker.Worker`) drives them with real sleeps and measured kernel times
(:func:`drive`); the in-process simulation of the tests drives the very same loop on a
simulated clock, so a policy is tested against the loop that runs it:

* :func:`work` -- a worker's training, iteration after iteration until the stop flag;
* :func:`await_params` -- waiting for the next instructions, the policy's side work going on;
* :func:`iterate` -- one iteration: process blocks until the worker policy (or a full pass)
  ends it.

Between blocks the loop polls for signals and commits right after the block it is on (FSP
paper Section 3.1).  A completed traversal pass since the iteration began always ends the
iteration: θ is fixed within an iteration, so a second pass would only repeat work (Section
3.3).  Everything else that differs between sync models is the worker policy's.

**Overlap** (issue 19; FSP paper Section 6.1, and Section 7's ref. [57], overlapping
computation with parameter propagation).  The ``injected`` straggler pattern *suspends the
training thread* for τ ms every 1,000 points; a barrier signal is answered at once with the
work done so far, and the rest of the suspension is owed (``host.debt_s``).  A suspended
thread's sleep runs on in wall time while the worker's communication commits and waits for
θ, so under a policy that overlaps (:meth:`~flegel.ports.WorkerPolicy.overlaps`: FSP) the
wait for θ serves the suspension (:func:`await_params`), and the served part counts as
slowed time (:func:`serve`, the one place a suspension is served and counted, in a wait as
in an iteration) as well as a wait: the COMMIT header's ``wait_s`` stays the
elapsed wait, the paper's synchronization cost (Section 6.2, Fig. 10: from entering the
barrier to leaving it), and a straggler's ``slowed_s`` and ``wait_s`` overlap.  Before
this, a straggler paused at every barrier lost the suspension *and* every wait: measured
(``flegel paper --quick``, K-means on contiguous shards, one worker slowed by τ = 32 ms,
FSPV without migration, 4 s) it made 1.7 passes against BSPV's straggler's 4.2, and its
waits were half the run; with the suspension running on it made 3.0-3.3 (docs/sync/fsp.md,
"Overlap").  The work committed is the same either way: only the time at which a suspended
straggler computes again changes, so no step, whole pass or coverage hold changes meaning.

A suspension that falls due on a pass's last block is served (:func:`suspend`) before the
iteration ends on PASS and commits, in every model: the loop serves after each block and
only then looks for the end of the pass.  Under FSP's overlap the wait for θ could serve it
instead, the pass committed that much sooner (about 3 % of an FSP straggler's time against
BSPV's, by the reviewer's estimate; not measured here).  Kept as it is so that FSP and
BSPV's stragglers serve the same suspensions at the same point of a pass and differ by
their barriers only, and a pass's commit means the same in every model: a straggler's
commit of a whole pass carries its suspension.

A worker does not train blocks on the θ it holds while it waits (one version stale, SSP's
s = 1, carried into its next commit): a prototype (commit 6c0d6a7) raised the workers'
compute share 2-3x but not the time to target on 2 shared cores, where the CPU the stale
blocks take is the master's and the other ranks', and an exact step (coverage, whole
passes, the calibration, rolled-back probes) -- decided at the barrier after the worker
began such blocks -- would need them rolled back, migrated points included.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from flegel.api import Algorithm
from flegel.block import Block
from flegel.ports import Arrays, WorkerPolicy, WorkerPort
from flegel.protocol import POLL_MAX_S, POLL_S, Instructions, Reason, Signal
from flegel.runtime.blocksize import BlockSizer
from flegel.runtime.layout import Layout
from flegel.runtime.store import ShardStore
from flegel.runtime.stragglers import Stragglers


@dataclass(frozen=True)
class Wait:
    """Yielded by the loop: this many seconds pass (a sleep, real or simulated)."""

    seconds: float


@dataclass(frozen=True)
class Poll(Wait):
    """Yielded while waiting for instructions: at most ``seconds`` pass before the next poll
    (a driver may resume the loop as soon as instructions arrive)."""


@dataclass
class Totals:
    """What one iteration adds to the worker's totals (or a suspension served:
    :func:`serve`).

    ``slowed_s`` at an iteration's end is its blocking delays only: the suspension it
    served was added as it was served (:func:`serve`).
    """

    points: int = 0
    compute_s: float = 0.0
    slowed_s: float = 0.0
    aborted: int = 0


class LoopHost(WorkerPort, Protocol):
    """What one iteration needs of the worker that runs it (a
    :class:`~flegel.ports.WorkerPort` too, for the policy's hooks)."""

    store: ShardStore
    policy: WorkerPolicy
    algorithm: Algorithm
    sizer: BlockSizer
    agg_layout: Layout
    theta: Arrays
    debt_s: float
    #: The straggler patterns (their record forgives a suspension an abort drops).
    stragglers: Stragglers

    def now(self) -> float: ...

    def poll_signal(self, version: float) -> Signal: ...

    def block_size(self) -> int: ...

    def slow(self, points: int, compute_s: float) -> tuple[float, float]:
        """(suspension to serve, blocking delay) after a block (the straggler patterns)."""
        ...

    def compute(self, block: Block, t: int) -> Generator[Wait, Any, tuple[Arrays, float]]:
        """Run the kernel on ``block``; return its aggregator and the seconds it took."""
        ...

    def side_work(self) -> None:
        """Work that is no model's (exact evaluations, :mod:`flegel.runtime.exact`), a
        nonblocking step between blocks and while suspended."""
        ...

    def add(self, totals: Totals) -> None:
        """Add totals to the worker's: an iteration's, or a suspension served
        (:func:`serve`)."""
        ...


class WorkerHost(LoopHost, Protocol):
    """What a worker's whole loop (:func:`work`) needs of the worker that runs it."""

    #: Iterations committed so far (the COMMIT header's ``clock``; a checkpoint keeps it).
    iteration_clock: int
    #: Seconds the latest instructions were waited for (the COMMIT header's ``wait_s``).
    last_wait_s: float

    def wall_time(self) -> float:
        """The clock of the wire's ``sent_at`` stamps (``time.time()`` over MPI)."""
        ...

    def take_params(self) -> dict[str, float] | None:
        """The PARAMS header of instructions that arrived, θ taken in when it came with
        them; None if none arrived (never blocks)."""
        ...

    def wait_params(self) -> Generator[Wait, Any, dict[str, float]]:
        """Wait for the next instructions (:func:`await_params`, with the host's own
        accounting of the wait); return their PARAMS header."""
        ...

    def began(self, version: int, instructions: Instructions) -> Generator[Wait, Any, None]:
        """Right after the policy began an iteration, before its first block (nothing over
        MPI; the simulation records the iteration there)."""
        ...

    def commit(self, agg: Arrays, fields: dict[str, float]
               ) -> Generator[Wait, Any, None]:
        """Send the master ``agg`` behind a COMMIT header of ``fields`` (nonblocking)."""
        ...


def strongest(signals: Iterable[dict[str, float]], version: float) -> Signal:
    """The strongest of the SIGNAL headers ``signals`` meant for θ ``version`` (NONE if
    none).  Signals for an older version arrive after the worker already committed for it
    (e.g. it finished a pass just as the master paused everyone) and are dropped."""
    kind = Signal.NONE
    for sig in signals:
        if sig["version"] == version:
            kind = max(kind, Signal(int(sig["kind"])))
    return kind


def await_params(host: WorkerHost) -> Generator[Wait, Any, dict[str, float]]:
    """Wait for the next instructions; return their PARAMS header.

    Polls without spinning: a :class:`Poll` between polls, growing from
    :data:`~flegel.protocol.POLL_S` to :data:`~flegel.protocol.POLL_MAX_S`; the worker
    policy's side work (:meth:`~flegel.ports.WorkerPolicy.while_waiting`, migration) and the
    host's (exact evaluations) go on at every poll.  Where the policy overlaps the wait
    (:meth:`~flegel.ports.WorkerPolicy.overlaps`) the straggler suspension still owed
    (``host.debt_s``) is served meanwhile (:func:`serve`: counted as slowed time, and the
    wait stays the elapsed wait; see the module's notes, "Overlap").
    """
    delay = POLL_S
    overlap = host.policy.overlaps(host)
    last = host.now()
    while True:
        if overlap and host.debt_s > 0:
            # The suspension runs on while the worker waits ("Overlap"), served before
            # instructions are taken in: a checkpoint they ask for sees what is still owed
            # and, in the totals, what was served.
            now = host.now()
            serve(host, now - last)
            last = now
        if (header := host.take_params()) is not None:
            return header
        host.policy.while_waiting(host)
        host.side_work()
        yield Poll(delay)
        delay = min(delay * 1.5, POLL_MAX_S)


def serve(host: LoopHost, seconds: float) -> float:
    """Serve up to ``seconds`` of the straggler suspension owed (``host.debt_s``); return
    the part served.

    The one place a suspension is served and counted, in an iteration (:func:`suspend`) as
    in a wait for θ (:func:`await_params`): the debt drops (to zero at most: a sleep that
    overran it served no more than was owed) and the served part goes into the worker's
    totals at once (:meth:`WorkerHost.add`, as slowed time), so a checkpoint taken at any
    point of a wait or an iteration holds what was served so far, and no host repeats the
    accounting.
    """
    served = min(max(seconds, 0.0), host.debt_s)
    host.debt_s -= served
    if host.debt_s < 1e-12:
        served += host.debt_s
        host.debt_s = 0.0
    if served > 0:
        host.add(Totals(slowed_s=served))
    return served


def work(host: WorkerHost) -> Generator[Wait, Any, dict[str, float]]:
    """A worker's training (θ⁽⁰⁾ received): iterations until the master's stop flag.

    Each iteration begins the worker policy with the instructions that came with θ (and how
    long ago the master sent them), runs :func:`iterate`, and commits its aggregator with
    the COMMIT header's fields.  Returns the PARAMS header that carried the stop flag.
    """
    policy = host.policy
    header = yield from host.wait_params()
    while not header["stop"]:
        instructions = Instructions.from_header(header)
        policy.begin(host, instructions, host.wall_time() - header["sent_at"])
        yield from host.began(int(header["version"]), instructions)
        agg, meta, totals = yield from iterate(host, header["version"])
        host.add(totals)
        host.iteration_clock += 1
        yield from host.commit(agg, {"clock": host.iteration_clock,
                                     "version": header["version"],
                                     "wait_s": host.last_wait_s, **meta})
        header = yield from host.wait_params()
    return header


def suspend(host: LoopHost, version: float) -> Generator[Wait, Any, Reason | None]:
    """Serve the straggler suspension in slices; stop early for a signal or the deadline.

    Returns why the iteration ends if a signal interrupted it.  What is left of the
    suspension stays in ``host.debt_s``: served by the wait for θ that follows where the
    policy overlaps (FSP), else at the start of the next iteration.  What is served is
    counted as it is served (:func:`serve`).  The policy's side work
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
        serve(host, host.now() - t0)
        signal = host.poll_signal(version)
        if signal:
            reason = policy.on_signal(host, signal)
            if reason is not None:
                return reason
        if deadline is not None and host.now() >= deadline:
            break
    return None


def iterate(host: LoopHost, version: float
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
    blocked_s = 0.0  # blocking delays (the suspension served is counted by serve)
    charged = 0.0  # suspension this iteration's blocks added
    idle = 0.0  # waited for points to train (policy.idle)
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
        if policy.idle(host, points):
            # Nothing to train yet (points on their way here): wait without spinning; the
            # wait is no compute (compute_s, which speeds are measured on, leaves it out).
            t0 = host.now()
            policy.while_waiting(host)
            host.side_work()
            yield Wait(POLL_MAX_S)
            idle += host.now() - t0
            continue
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
            blocked_s += blocked
        if suspended:
            host.debt_s += suspended
            charged += suspended
            slowed += suspended
            reason = yield from suspend(host, version)
    slowed -= host.debt_s  # the header's: what is left is served (and counted) later
    elapsed = host.now() - start - idle
    totals = Totals(points=points, compute_s=compute, slowed_s=blocked_s)
    rate = points / compute if compute > 0 else 0.0
    # The delay these points cost, owed part included: ``slowed_s`` leaves out what a
    # signal left owed (FSP's coverage cap, ``FSP._dealt_pass``).
    incurred = blocked_s + charged
    if not policy.finish(host, reason):
        # The policy threw the work away (SpecSync's abort): nothing to apply, and the
        # suspension its blocks still owe is not served -- a slow machine that drops a
        # computation stops paying for it; the restart recomputes those points and pays
        # again (debt carried in from earlier iterations stays).  Issue 19: serving it
        # made each aborted iteration of a straggler cost a whole extra span.
        totals.aborted, points = points, 0
        agg = host.agg_layout.zeros()
        dropped = min(host.debt_s, charged)
        host.debt_s -= dropped
        host.stragglers.forgive(dropped)  # the record keeps only the time served
        # No points to pace: the restart recomputes them and incurs their delay again.
        incurred = 0.0
    meta = {"points": points, "compute_s": elapsed, "reason": float(reason),
            "passes": store.passes, "block_s": host.sizer.block_s, "rate": rate,
            "slowed_s": slowed, "n_active": store.n_active, "aborted": totals.aborted,
            "n_held": store.n_held, "in_flight": policy.in_flight, "seen": store.n_seen,
            "queued": store.n_queued, "behind": store.n_behind, "incurred_s": incurred}
    return agg, meta, totals


def drive(gen: Generator[Wait, Any, Any]) -> Any:
    """Run a loop generator in real time: every :class:`Wait` is a sleep."""
    try:
        while True:
            time.sleep(next(gen).seconds)
    except StopIteration as done:
        return done.value
