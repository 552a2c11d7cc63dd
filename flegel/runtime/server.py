"""The master: parameter server and coordinator (rank 0).

:class:`Server` owns θ, the online objective, the stop criteria, the event log and what it
knows of each worker, and implements :class:`flegel.ports.ServerPort` for the sync model's
master policy, which decides when to apply what and whom to answer.  It talks to the workers
through a :class:`~flegel.runtime.transport.Transport` and reads time from an injected clock
only, so in-process tests run it with a fake transport and a simulated clock, driving its loop
one turn at a time (:meth:`Server.poll_once`).  Every wait polls and sleeps, so the idle master
uses ~1% of a core (README, How the runtime works).

Nothing hangs and nothing is lost (issues 13 and 21): the server enforces ``stop.max_time_s``
by its own clock at every poll, not only at barriers, and it bounds the whole run: a worker
that has not answered :data:`MAX_TIME_GRACE_S` plus one of its blocks after the time ran out
ends the job (exit code 3, :meth:`Server.check_time`); a worker silent past the stall timeout
(``runtime.stall_timeout_s``; by default :func:`auto_stall_timeout` of the slowest iteration
seen) ends it too, after the stall warnings; every aggregator is checked against the
aggregator layout and for NaN/inf as it arrives, and θ after every update, so a fault stops the
job at the iteration it appears in.  These end the job by raising
:class:`~flegel.runtime.faults.JobFault` with θ still the last good one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from flegel.api import Algorithm
from flegel.block import Block
from flegel.ports import Arrays, WorkerRecord
from flegel.protocol import ExitCode, Instructions, MigrationOrder, Signal, StopReason
from flegel.runtime import Backoff, watchdog
from flegel.runtime.exact import ExactObjective, FinalEvaluation
from flegel.runtime.faults import JobFault
from flegel.runtime.layout import Layout

# The job's time limits live apart (validating a job imports neither MPI nor the server);
# they are named here too, where they are applied.
from flegel.runtime.limits import (
    AUTO,
    MAX_TIME_GRACE_S,
    MAX_TIME_WARN_S,
    STALL_FACTOR,
    STALL_FLOOR_S,
    STALL_UNMEASURED_S,
)
from flegel.runtime.numerics import check_aggregator, check_theta
from flegel.runtime.stopping import StopCriteria
from flegel.runtime.transport import Transport


def auto_stall_timeout(slowest_s: float | None) -> float:
    """The automatic stall timeout: :data:`STALL_FACTOR` times the slowest iteration seen
    (``slowest_s``; None before the first), at least :data:`STALL_FLOOR_S`, and
    :data:`STALL_UNMEASURED_S` while nothing was measured.

    The papers leave failure detection out; a fixed bound is either too short for a long
    full-batch pass or minutes of silence for a job whose iterations take milliseconds, so
    the bound follows what the job measured, with a floor for scheduling noise.
    """
    if slowest_s is None:
        return STALL_UNMEASURED_S
    return max(STALL_FLOOR_S, STALL_FACTOR * slowest_s)


class MasterPolicy(Protocol):
    """What the server calls on a sync model's master policy (:class:`flegel.sync.base.
    MasterPolicy`): its hooks, and its checkpoint state (:class:`flegel.state.Stateful`)."""

    def start(self) -> None: ...

    def on_commit(self, rank: int, header: dict[str, float], agg: Arrays) -> None: ...

    def on_tick(self, now: float) -> None: ...

    def before_finish(self) -> None: ...

    def checkpoint_state(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...


class Checkpoints(Protocol):
    """The checkpoint writer as the server and the run wiring see it
    (:class:`flegel.rundir.checkpoint.Checkpointer`)."""

    #: Checkpoints taken so far (a resumed job's count goes on).
    sequence: int

    @property
    def pending(self) -> bool:
        """The last snapshot waits for workers' states."""
        ...

    def due(self, now_s: float, version: int) -> bool: ...

    def force(self) -> None: ...

    def resumed(self, sequence: int, now_s: float, version: int) -> None: ...

    def take(self, master: dict[str, Any], now_s: float, version: int,
             expect: list[int]) -> None: ...

    def collect(self) -> None: ...

    def drain(self, owed: set[int], pause: Callable[[], None]) -> None: ...

    def wait(self) -> None: ...


#: A reply held back for a checkpoint: ("send", rank, instructions) or ("order", rank, order).
Held = tuple[str, int, "Instructions | MigrationOrder"]


def _algorithm_state(algorithm: Algorithm) -> dict[str, Any] | None:
    """The algorithm's own state when it keeps any (:class:`flegel.state.Stateful`)."""
    from flegel.state import Stateful

    return algorithm.checkpoint_state() if isinstance(algorithm, Stateful) else None


class Trace:
    """θ snapshots spread over the run, for the exact objective trace (``objective_trace``).

    Sync models are compared on the true f(θ) (README, Comparing models and drawing runs): the
    online objective mixes losses computed under different θ and, before a full pass, misses
    unvisited points.  Every new θ is kept until twice ``limit`` are held; then every other one is
    dropped and snapshots are taken at most every ``spacing`` seconds (doubling at each thinning),
    so any run keeps between ``limit`` and ``2 * limit`` snapshots spread over its whole
    length.  After training, those not evaluated exactly during it are evaluated on every shard,
    within a budget (:class:`~flegel.runtime.exact.FinalEvaluation`).
    """

    def __init__(self, limit: int, spacing_s: float = 0.0) -> None:
        self.limit = limit
        self.spacing_s = spacing_s
        self.times: list[float] = []
        self.thetas: list[Arrays] = []

    def record(self, t: float, theta: Arrays) -> None:
        if self.limit <= 0 or (self.times and t - self.times[-1] < self.spacing_s):
            return
        self.times.append(t)
        # Copies: an algorithm may update θ's arrays in place.
        self.thetas.append({k: np.array(v, copy=True) for k, v in theta.items()})
        if len(self.times) >= 2 * self.limit:
            span = self.times[-1] - self.times[0]
            self.times, self.thetas = self.times[1::2], self.thetas[1::2]
            self.spacing_s = max(2 * self.spacing_s, span / self.limit)


def copies_theta(algorithm: object) -> bool:
    """Whether the master passes :meth:`~flegel.Algorithm.update_parameter` a copy of θ.

    The flag ``updates_theta_in_place`` belongs to the ``update_parameter`` it describes:
    the nearest class in the MRO that declares the flag or defines the method decides --
    its flag, or True (the safe copy) where it defines the method without one.  So a
    subclass of a built-in that overrides ``update_parameter`` is copied unless it declares
    the flag itself, and one that keeps the built-in's method keeps its ``False``.
    """
    for cls in type(algorithm).__mro__:
        if "updates_theta_in_place" in cls.__dict__:
            return bool(cls.__dict__["updates_theta_in_place"])
        if "update_parameter" in cls.__dict__:
            return True
    return True


class Server:
    """Rank 0's state; implements :class:`flegel.ports.ServerPort` (and the data migration's
    :class:`flegel.balance.ports.OrderPort`).

    :meth:`serve` runs the master loop in real time; :meth:`poll_once` is one turn of it,
    which the simulated-clock tests drive between their events.

    Parameters
    ----------
    transport : Transport
        Messaging with the workers.
    ranks : list of int
        Worker ranks.
    algorithm : Algorithm
    theta : dict
        θ⁽⁰⁾ (the workers hold it already: it was sent once, before training).
    zero : callable
        Returns a fresh aggregator of zeros (the wire layout's ``Layout.zeros``).
    stop : StopCriteria
    events : callable
        Receives one dict per event (written to ``events.jsonl``).
    progress : callable or None
        Receives ``(iteration, objective, elapsed_s)`` to display progress.
    trace_points : int
        At most this many θ snapshots are kept for the exact objective trace (0: none).
    stall_warning_s : float
        A worker silent this long while others wait (or for over twice its last iteration)
        is named on stderr, again at every multiple (docs/exit-codes.md, code 3).
    stall_timeout_s : float, "auto" or None
        A worker silent this long ends the job (:class:`JobFault`, exit code
        ``ExitCode.STALLED``); ``"auto"``: :func:`auto_stall_timeout` of the slowest
        iteration seen so far; None: never.
    clock : callable
        Monotonic seconds (a simulated clock in tests).
    """

    def __init__(self, transport: Transport, ranks: list[int], algorithm: Algorithm,
                 theta: Arrays,
                 zero: Callable[[], Arrays], stop: StopCriteria,
                 events: Callable[[dict[str, Any]], None],
                 progress: Callable[..., None] | None = None,
                 trace_points: int = 100, stall_warning_s: float = 10.0,
                 stall_timeout_s: float | str | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.transport = transport
        self.ranks = list(ranks)
        self.algorithm = algorithm
        self._copies_theta = copies_theta(algorithm)  # a class's answer: once
        self.theta = theta
        self.zero = zero
        self.stop = stop
        self.events = events
        self.progress = progress
        self.stall_warning_s = stall_warning_s
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        # The layouts fixed before training: every aggregator and every θ must keep them.
        self.theta_layout = Layout.of(theta)
        self.agg_layout = Layout.of(zero())
        self.shard_sizes: dict[int, int] = {}  # points of each worker's shard
        # The master's seeded sample of the data (DataInfo.sample, sample_y; run.py sets
        # it), and its rows per worker: what FSPV's gauge evaluates θ on.
        self.sample: tuple[np.ndarray, np.ndarray | None] | None = None
        self.sample_sizes: tuple[int, ...] = ()
        self.workers = {r: WorkerRecord(r) for r in self.ranks}
        self.version = 0
        self._theta_lock = threading.Lock()
        self.objective = 0.0
        self.reason: StopReason | None = None
        # Where each worker runs, "host H, pid P", for the messages that name it (run.py).
        self.where: dict[int, str] = {}
        # The slowest worker iteration seen (θ sent to commit), for the automatic stall
        # timeout; each worker's last one, for the stall warnings.
        self.slowest_s: float | None = None
        self._iteration_s: dict[int, float] = {}
        self._paused = False  # the busy workers were told to commit at stop.max_time_s
        #: The policy being served (:meth:`begin`): it settles what it holds when training
        #: ends (:meth:`finish`).
        self._policy: MasterPolicy | None = None
        self.time_to_target: float | None = None
        self.train_s = 0.0
        self.start = clock()
        self.trace = Trace(trace_points)
        # The exact objective of θ snapshots during training (run.py sets it; None: none).
        self.exact: ExactObjective | None = None
        # θ changes with every update and every roll-back; a worker that holds the current
        # one gets instructions without θ (θ⁰ is sent once, before training).
        self._theta_serial = 0
        self._held_serial = {r: 0 for r in self.ranks}
        self._warned = {r: 0 for r in self.ranks}
        # The latest instructions of each worker and the θ version they came with.
        self._sent: dict[int, tuple[int, Instructions]] = {}
        # Checkpoints (flegel/rundir/checkpoint.py; run.py sets it, None: none).  While one is due,
        # replies are held back until no worker computes (a quiescent point); the workers
        # whose next instructions ask for their state.
        self.checkpoint: Checkpoints | None = None
        self._held: list[Held] | None = None
        self._owed: set[int] = set()
        self._asked: set[int] = set()  # ... and those asked already

    # -------------------------------------------------------------- ServerPort
    def now(self) -> float:
        return self.clock() - self.start

    def worker(self, rank: int) -> WorkerRecord:
        return self.workers[rank]

    def total(self, aggs: Iterable[Arrays]) -> Arrays:
        out = self.zero()
        for agg in aggs:
            out = self.algorithm.aggregate(out, agg)
        return out

    def good(self) -> tuple[Arrays, int]:
        """θ and its version, as one pair (another thread saving it reads them here)."""
        with self._theta_lock:
            return self.theta, self.version

    def apply(self, agg: Arrays) -> float:
        t0 = self.clock()
        # On a copy (its ndarrays) unless the algorithm declares it never writes θ in place:
        # θ must stay the last good one until the update completes (a master stuck or
        # failing in it saves θ: flegel.runtime.watchdog).
        theta = self.theta
        if self._copies_theta:
            theta = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in theta.items()}
        theta = self.algorithm.update_parameter(agg, theta)
        # Checked before it replaces the last good θ.
        check_theta(theta, self.theta_layout, self.version + 1)
        with self._theta_lock:  # θ and its version change together (:meth:`good`)
            self.theta = theta
            self.version += 1
        self._theta_serial += 1
        self.objective += float(agg["objective"])
        now = self.now()
        if self.time_to_target is None and self.stop.reached_target(self.objective,
                                                                     self.min_passes()):
            self.time_to_target = now
        self.trace.record(now, self.theta)
        return self.clock() - t0

    def send(self, rank: int, instructions: Instructions) -> None:
        if self._held is not None:  # a checkpoint waits for a quiescent point
            self._held.append(("send", rank, instructions))
            return
        w = self.workers[rank]
        fresh = self._held_serial[rank] != self._theta_serial
        self._held_serial[rank] = self._theta_serial
        ask = rank in self._owed and not instructions.stop
        self._owed.discard(rank)
        if ask:
            self._asked.add(rank)
        self.transport.send_params(rank, {"version": self.version, **instructions.fields(),
                                          "checkpoint": float(ask)},
                                   self.theta if fresh else None)
        w.waiting = False
        w.started_at = self.now()
        self._warned[rank] = 0
        self._sent[rank] = (self.version, instructions)
        if instructions.stop:
            w.stopped = True

    def signal(self, ranks: Iterable[int], kind: Signal, version: int | None = None) -> None:
        """Send ``kind`` to the computing workers among ``ranks``.

        A worker already told to stop is skipped: it has cancelled its signal receive, and a
        signal nobody receives fails its ``MPI_Finalize`` (the hang after ``summary.json``,
        :func:`flegel.runtime.comm.drop_unreceived`).
        """
        v = self.version if version is None else version
        for r in ranks:
            if not self.workers[r].stopped:
                self.transport.send_signal(r, kind, v)

    def mark(self) -> object:
        return (self.theta, self.objective)

    def evaluate_sample(self, rows: np.ndarray) -> float | None:
        """The exact objective of θ on ``rows`` of the master's sample, as a sum
        (``Algorithm.evaluate``); None where there is no sample or the algorithm has no
        ``evaluate`` (FSPV's gauge, :mod:`flegel.interval.gauge`)."""
        if self.sample is None:
            return None
        x, y = self.sample
        try:
            return float(self.algorithm.evaluate(
                self.theta, Block.from_arrays(x[rows], None if y is None else y[rows])))
        except NotImplementedError:
            return None

    def rollback(self, token: object) -> None:
        self.theta, self.objective = token  # type: ignore[misc]
        self._theta_serial += 1

    @property
    def full_batch_update(self) -> bool:
        """Whether the algorithm takes a stronger step on a full batch at θ
        (:attr:`flegel.Algorithm.full_batch_update`)."""
        return bool(getattr(self.algorithm, "full_batch_update", False))

    @property
    def progress_per_update(self) -> bool:
        """Whether the algorithm progresses per update, not per point aggregated
        (:attr:`flegel.Algorithm.progress_per_update`)."""
        return bool(getattr(self.algorithm, "progress_per_update", False))

    @property
    def sampled_first_step(self) -> bool:
        """Whether an M-step on part of a pass at θ⁽⁰⁾ is one on a sample of the data
        (:attr:`flegel.Algorithm.sampled_first_step`)."""
        return bool(getattr(self.algorithm, "sampled_first_step", False))

    @property
    def sampled_first_pass(self) -> bool:
        """Whether the first pass's later M-steps may be sampled too
        (:attr:`flegel.Algorithm.sampled_first_pass`)."""
        return bool(getattr(self.algorithm, "sampled_first_pass", False))

    @property
    def sample_min_points(self) -> int:
        """Points every worker's sample must hold in FSPV's sampled calibration, 0 for no
        floor beyond the share's (``Algorithm.sample_min_points``, K-means': 50 · K)."""
        return int(getattr(self.algorithm, "sample_min_points", 0))

    @property
    def cover_before_update(self) -> bool:
        """Whether the algorithm's θ sums every point's contribution, so its first update
        waits until every point was visited (:attr:`flegel.Algorithm.cover_before_update`)."""
        return bool(getattr(self.algorithm, "cover_before_update", False))

    def unseen(self) -> int:
        """Points of the data set no worker has trained yet, by the workers' latest COMMIT
        headers (``seen``: trained at least once, wherever they are now).  Points on their way
        between workers count as unseen until they land: they are in no worker's ``seen``."""
        seen = sum(w.header.get("seen", 0.0) for w in self.workers.values())
        return max(int(sum(self.shard_sizes.values()) - seen), 0)

    def estimated_objective(self) -> float:
        """The online objective scaled up to the points not visited yet.

        Before every point has been visited once, the online objective (the sum of each
        point's last loss) lacks the unvisited points, and a first visit adds a whole loss.
        Scaling by ``N / visited`` gives a stable estimate from the start, which is what
        interval adjustors need to measure progress.
        """
        # Points trained at least once, wherever they are now (they migrate under FSP).
        visited = sum(w.header.get("seen", 0.0) for w in self.workers.values())
        total = sum(self.shard_sizes.values())
        if visited <= 0 or total <= 0:
            return self.objective
        return self.objective * total / visited

    def min_passes(self) -> float:
        """The fewest passes any worker completed; 0 while some point of the data set has
        never been trained.  Under migration a worker's passes count its native points only:
        a source that gave its untrained points away "completes a pass" over what it kept,
        while those points wait in a target's queue, and the online objective still lacks
        their loss."""
        fewest = min(w.passes for w in self.workers.values())
        seen = sum(w.header.get("seen", -1.0) for w in self.workers.values())
        total = sum(self.shard_sizes.values())
        if seen >= 0 and total and seen < total:
            return min(fewest, seen / total)
        return fewest

    def check_stop(self, agg: Arrays, iteration: int,
                   updated: bool = True) -> StopReason | None:
        """Apply the algorithm's and the built-in criteria (Section 5.3); the algorithm's only
        after an update (``updated``): an aggregate kept back for later (FSP's coverage) says
        nothing of convergence."""
        if updated and self.algorithm.termination_check(agg, iteration):
            return StopReason.ALGORITHM
        if all(w.n_active == 0 for w in self.workers.values()):
            return StopReason.HALTED
        # The convergence check's pass: the slowest worker's, over the data it holds now.
        work = {r: (float(w.points), float(w.n_active)) for r, w in self.workers.items()}
        # With exact evaluations the target is met on f(θ) (exact_step), never on the
        # online objective.
        found = self.stop.check(iteration, self.objective, self.min_passes(), self.now(),
                                work, use_target=self.exact is None, updated=updated)
        return None if found is None else StopReason(found)

    def finish(self, reason: StopReason) -> None:
        """End training for ``reason``: the policy settles what it holds (FSP's coverage:
        the aggregate of barriers that kept θ is applied), and every waiting worker is told
        to stop.  Not on an exact target, whose final θ is the evaluated snapshot that met
        it (a hold keeps θ⁰: only θ⁰ can meet it then)."""
        if self.reason is None:
            if reason is not StopReason.TARGET and self._policy is not None:
                self._policy.before_finish()
            self.reason = reason
            self.train_s = self.now()
        for r, w in self.workers.items():
            if not w.stopped and w.waiting:
                self.send(r, Instructions(stop=True))

    def _settle(self) -> None:
        """Let the policy settle on the way out of a fault; a failure there must not hide
        the fault itself."""
        if self._policy is None:
            return
        try:
            self._policy.before_finish()
        except Exception as err:  # noqa: BLE001 - the fault being raised matters more
            self._warn(f"could not apply what the policy held: {err}")

    def record(self, event: dict[str, Any]) -> None:
        self.events(event)

    def order(self, rank: int, order: MigrationOrder) -> None:
        """Send a migration order to ``rank`` (it arrives before the next instructions): the
        server's side of :class:`flegel.balance.ports.OrderPort`."""
        if self._held is not None:
            self._held.append(("order", rank, order))
            return
        self.transport.send_order(rank, order)

    @property
    def target_objective(self) -> float | None:
        return self.stop.target_objective

    @property
    def time_left_s(self) -> float | None:
        limit = self.stop.max_time_s
        return None if limit is None else max(limit - self.now(), 0.0)

    # -------------------------------------------------------------- faults
    def who(self, rank: int) -> str:
        """``worker R (host H, pid P)`` where the run wiring told where it runs."""
        where = self.where.get(rank)
        return f"worker {rank}" + (f" ({where})" if where else "")

    def stall_limit(self) -> float | None:
        """The stall timeout in force now (``stall_timeout_s``, resolved when automatic)."""
        if self.stall_timeout_s == AUTO:
            return auto_stall_timeout(self.slowest_s)
        assert not isinstance(self.stall_timeout_s, str)
        return self.stall_timeout_s

    def doing(self, rank: int) -> str:
        """What the master last told worker ``rank`` to do, for stall messages."""
        w = self.workers[rank]
        version, ins = self._sent.get(rank, (0, Instructions()))
        if ins.batch:
            task = f"a batch of {ins.batch} points"
        elif ins.eta_s:
            task = f"an interval of {ins.eta_s:.3g} s"
        else:
            task = "until signalled or a full pass"
        return (f"computing its iteration {w.commits + 1} ({task}) from θ version "
                f"{version}, {w.points} points processed before it")

    def check_stalls(self, now: float) -> None:
        """Raise :class:`JobFault` when a computing worker has been silent for
        ``stall_timeout_s`` since it was sent θ (the stall warnings come first)."""
        limit = self.stall_limit()
        if limit is None:
            return
        auto = " auto" if self.stall_timeout_s == AUTO else ""
        for r, w in self.workers.items():
            if w.waiting or w.stopped:
                continue
            late = now - w.started_at
            if late >= limit:
                raise JobFault(f"{self.who(r)} has not reported for {late:.1f} s "
                               f"(runtime.stall_timeout_s:{auto} {limit:g}); it was "
                               f"{self.doing(r)}", ExitCode.STALLED, StopReason.STALLED)

    def max_time_grace(self, rank: int) -> float:
        """Seconds worker ``rank`` may take to answer once ``stop.max_time_s`` passed: one
        of its blocks (as its last commit measured it) plus :data:`MAX_TIME_GRACE_S`."""
        return self.workers[rank].header.get("block_s", 0.0) + MAX_TIME_GRACE_S

    def check_time(self, now: float) -> None:
        """End training once ``stop.max_time_s`` passed on the master's own clock, whether
        or not a worker reached a barrier; busy workers are told to stop as they commit.

        ``max_time_s`` bounds the whole run, not only training: a worker still silent
        :meth:`max_time_grace` seconds after the time ran out (or after training ended or
        it was sent θ, if later) has stalled: it is named in a warning once it is late, and
        then it ends the job (exit code 3) with θ the last one applied.
        """
        limit = self.stop.max_time_s
        if limit is None or now < limit:
            return
        if self.reason is None:
            self.finish(StopReason.MAX_TIME)
        elif self._paused:  # whatever ended training, the bound holds
            self._check_late(now, limit)
            return
        self._paused = True
        # A worker computing until signalled (FSP) commits at once on PAUSE: a signal counts
        # only for the θ version the worker computes from.
        for r, w in self.workers.items():
            if not w.waiting and not w.stopped and r in self._sent:
                self.signal([r], Signal.PAUSE, self._sent[r][0])

    def _check_late(self, now: float, limit: float) -> None:
        """After ``stop.max_time_s``: warn once about each worker the master still waits
        for, and end the job when one is past its grace (:meth:`check_time`)."""
        for r, w in self.workers.items():
            if w.waiting or w.stopped:
                continue
            grace = self.max_time_grace(r)
            since = max(limit, self.train_s, w.started_at)
            if now - since >= grace:
                raise JobFault(f"{self.who(r)} did not answer within {grace:.1f} s after the "
                               f"training time ran out (stop.max_time_s: {limit:g}); it was "
                               f"{self.doing(r)}", ExitCode.STALLED, StopReason.MAX_TIME)
            late = now - since - (grace - MAX_TIME_GRACE_S)  # past the block it was on
            if late >= MAX_TIME_WARN_S and self._warned[r] >= 0:  # once: -1 marks it
                self._warned[r] = -1
                self._warn(f"{self.who(r)} has not answered {now - since:.1f} s after the "
                           f"training time ran out (stop.max_time_s: {limit:g}); waiting at "
                           f"most {grace - (now - since):.1f} s more; it is {self.doing(r)}")

    # -------------------------------------------------------------- checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """What the server needs to continue (:class:`flegel.state.Stateful`): θ, version,
        objectives, trace, the stop criteria's progress, the workers' records, training
        time so far."""
        import copy

        return copy.deepcopy({
            "theta": self.theta, "version": self.version, "objective": self.objective,
            "time_to_target": self.time_to_target, "elapsed_s": self.now(),
            "trace": self.trace, "stop": self.stop.checkpoint_state(), "workers": self.workers,
            "shard_sizes": self.shard_sizes, "sent": self._sent})

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state`; the clock goes on from its training time."""
        self.theta, self.version = state["theta"], state["version"]
        self.objective, self.time_to_target = state["objective"], state["time_to_target"]
        self.trace, self.workers = state["trace"], state["workers"]
        self.shard_sizes, self._sent = state["shard_sizes"], state["sent"]
        self.stop.restore(state["stop"])
        self.start = self.clock() - state["elapsed_s"]
        self._theta_serial += 1  # preload() sent this θ to every worker
        self._held_serial = {r: self._theta_serial for r in self.ranks}

    def checkpoint_step(self, policy: MasterPolicy) -> None:
        """Take a due checkpoint at the next quiescent point (:mod:`flegel.rundir.checkpoint`).

        Once due, replies are held back; when no worker computes and no point is in flight
        between workers, the master's state and the held replies are snapshotted, then the
        replies go out, each asking its worker for its state.  Nothing is held once training
        ends, and a checkpoint that finds points in flight is retried at the next poll.
        """
        if self.checkpoint is not None:
            with watchdog.own_io():  # flegel's own I/O: not bounded by a small stall timeout
                self._checkpoint_step(self.checkpoint, policy)

    def _checkpoint_step(self, cp: Checkpoints, policy: MasterPolicy) -> None:
        cp.collect()
        if self._held is None:
            if self.reason is not None or not cp.due(self.now(), self.version):
                return
            self._held = []
        live = [w for w in self.workers.values() if not w.stopped]
        if self.reason is None and any(not w.waiting for w in live):
            return  # someone is computing: not yet
        if (self.reason is not None or len(live) < len(self.workers)
                or any(w.header.get("in_flight", 0.0) for w in live)
                or (cp.pending and self._owed)):
            # Training ended, or points are in flight between workers, or the last
            # checkpoint waits on a worker not told yet: no snapshot here.
            self._release(self._held)
            return
        if cp.pending:
            return  # the last checkpoint's states are on their way (sent before computing)
        state = {"server": self.checkpoint_state(), "policy": policy.checkpoint_state(),
                 "held": self._held, "algorithm": _algorithm_state(self.algorithm)}
        cp.take(state, self.now(), self.version, [w.rank for w in live])
        self._owed, self._asked = {w.rank for w in live}, set()
        self._release(self._held)

    def _release(self, held: list[Held]) -> None:
        """Send replies held back for a checkpoint (or saved in one), in order."""
        self._held = None
        for _, rank, payload in held:
            if isinstance(payload, MigrationOrder):
                self.order(rank, payload)
            else:
                self.send(rank, payload)

    def resume(self, policy: MasterPolicy, snapshot: dict[str, Any]) -> None:
        """Continue from a checkpoint's master snapshot instead of ``policy.start()``:
        restore the server, the policy (and the algorithm, if it keeps state), and send the
        replies that were held when it was taken."""
        self.restore(snapshot["server"])
        policy.restore(snapshot["policy"])
        if snapshot.get("algorithm") is not None:
            from flegel.state import Stateful

            assert isinstance(self.algorithm, Stateful)  # it saved its state: it keeps one
            self.algorithm.restore(snapshot["algorithm"])
        self._release(snapshot["held"])

    # -------------------------------------------------------------- the loop
    def preload(self) -> None:
        """Send θ⁽⁰⁾ to every worker before training: the one time it travels (workers
        compile their kernels on it, and the first instructions come without θ)."""
        for r in self.ranks:
            self.transport.send_params(r, {"version": self.version}, self.theta)
            self._held_serial[r] = self._theta_serial

    @property
    def done(self) -> bool:
        return all(w.stopped for w in self.workers.values())

    def dispatch(self, rank: int, header: dict[str, float], agg: Arrays, policy: MasterPolicy,
                 latency_s: float = 0.0) -> None:
        """Record a commit of ``rank`` and hand it to ``policy`` (or stop the worker)."""
        w = self.workers[rank]
        header["latency_s"] = latency_s
        check_aggregator(agg, self.agg_layout, rank, header.get("version", 0.0),
                         header.get("clock", 0.0))
        w.header, w.arrived_at, w.waiting = header, self.now(), True
        took = w.arrived_at - w.started_at  # θ sent to commit: what a stall bound scales on
        self._iteration_s[rank] = took
        self.slowest_s = took if self.slowest_s is None else max(self.slowest_s, took)
        w.commits += 1
        w.points += int(header["points"])
        if self.reason is not None:
            self.send(rank, Instructions(stop=True))
        else:
            policy.on_commit(rank, header, agg)

    def tick(self, policy: MasterPolicy) -> None:
        """Nothing arrived: let ``policy`` act on timers; warn about silent workers."""
        now = self.now()
        self.check_time(now)  # training may end outside a barrier: finish settles the policy
        policy.on_tick(now)
        self.warn_stalls(now)
        self.check_stalls(now)
        if self.progress is not None:
            latest = None if self.exact is None else self.exact.latest
            if latest is not None and latest.value is not None:
                self.progress(self.version, latest.value, now, exact=latest.exact)
            else:
                self.progress(self.version, self.objective, now)

    def exact_step(self) -> None:
        """Take exact-evaluation replies, stop on an exact target, request the next one
        when the budget allows (:mod:`flegel.runtime.exact`)."""
        ex = self.exact
        if ex is None:
            return
        now = self.now()
        if ex.collect(self.transport, now) is not None and self.reason is None:
            hit = ex.reached(self.stop.target_objective)
            if hit is not None:
                # The snapshot that met the target is the final θ: its f(θ) is known.
                self.theta = hit.theta
                self._theta_serial += 1
                self.finish(StopReason.TARGET)
        # time_to_target: the online objective's crossing, which asks for an evaluation.
        if self.reason is None and ex.due(now, self.pass_s(), self.time_to_target):
            ex.request(self.transport, self.theta, self.version, now)

    def final_evaluation(self, budget: float | None) -> FinalEvaluation:
        """What to evaluate after training, and the trace from it
        (:class:`~flegel.runtime.exact.FinalEvaluation`): the trace's snapshots and the final
        θ, reusing the exact values found during training, the snapshots within ``budget``
        (``output.trace_budget``) of the training time.  One θ is estimated to cost what the
        last evaluation during training cost, else a pass at the training rate."""
        ex = self.exact
        during = [] if ex is None else ex.done
        cost = during[-1].cost_s if during else self.pass_s()
        return FinalEvaluation(self.trace.times, self.trace.thetas, self.theta, self.train_s,
                               during, cost, budget, self.stop.target_objective,
                               None if ex is None else (ex.n_points, ex.checksum))

    def pass_s(self) -> float | None:
        """The slowest worker's seconds for a pass over the points it holds, at the rate
        of its last iteration (None until every worker reported one)."""
        worst = 0.0
        for r, w in self.workers.items():
            rate = w.header.get("rate", 0.0)
            if rate <= 0:
                return None
            held = w.header.get("n_held", self.shard_sizes.get(r, 0))
            worst = max(worst, held / rate)
        return worst

    def warn_stalls(self, now: float) -> None:
        """Name a worker that has computed for long while others wait on the server.

        The one stall-warning mechanism for every model: a worker is late once it has been
        silent (since it was sent θ) for ``stall_warning_s`` while at least one other worker
        waits -- or, as under the asynchronous models where nobody waits for long, for over
        twice its own last iteration -- and it is named again at every further multiple
        (docs/exit-codes.md, code 3).  After ``stop.max_time_s`` :meth:`check_time` warns.
        """
        if self.reason is not None:
            return
        waiting = [r for r, w in self.workers.items() if w.waiting and not w.stopped]
        for r, w in self.workers.items():
            if w.waiting or w.stopped or self._warned[r] < 0:
                continue
            late = now - w.started_at
            # Its own last iteration; before its first, the slowest anyone took.
            usual = self._iteration_s.get(r, self.slowest_s)
            if not waiting and (usual is None or late < 2 * usual):
                continue
            if late >= self.stall_warning_s * (1 + self._warned[r]):
                self._warned[r] += 1
                who = f"worker(s) {waiting} wait" if waiting else (
                    f"an iteration took {usual:.3g} s")
                self._warn(f"{self.who(r)} has not reported for {late:.1f} s; {who}")

    def _warn(self, text: str) -> None:
        sys.stderr.write(f"flegel: warning: {text}\n")
        sys.stderr.flush()

    def begin(self, policy: MasterPolicy, resume: dict[str, Any] | None = None) -> None:
        """Start the training clock and ``policy`` (or continue from ``resume``, a
        checkpoint's master snapshot: :meth:`resume`)."""
        self.start = self.clock()
        self._policy = policy
        if resume is None:
            policy.start()
        else:
            self.resume(policy, resume)

    def poll_once(self, policy: MasterPolicy) -> bool:
        """One turn of the master loop; True when commits arrived (poll again at once),
        False when none did (wait before the next poll).

        The turn: take exact-evaluation replies and request the next evaluation
        (:meth:`exact_step`); hand every commit that arrived to ``policy``
        (:meth:`dispatch`), or, when none did, let it act on its timers (:meth:`tick`);
        then take a checkpoint if one is due and the workers are quiescent
        (:meth:`checkpoint_step`).  It reads time only from the injected clock and never
        sleeps, so the simulated-clock tests drive the very loop :meth:`serve` runs.
        """
        self.exact_step()
        commits = self.transport.poll()
        for c in commits:
            self.dispatch(c.rank, c.header, c.agg, policy, c.latency_s)
        if not commits:
            self.tick(policy)
        self.checkpoint_step(policy)
        return bool(commits)

    def close(self, pause: Callable[[], None]) -> None:
        """After the last worker was told to stop: complete what is still on its way
        (checkpoint states asked for, exact-evaluation replies), then close the transport.
        ``pause()`` runs between polls."""
        if self.checkpoint is not None:
            # States asked for are on their way: their sends must complete.
            self.checkpoint.drain(self._asked, pause)
        if self.exact is not None:
            # Every request answered before the transport closes (its sends must complete).
            self.exact.finish(self.transport, pause)
        self.transport.close()

    def serve(self, policy: MasterPolicy, watch: Callable[[], None] = lambda: None,
              resume: dict[str, Any] | None = None,
              ended: Callable[[], None] = lambda: None) -> None:
        """Run ``policy`` until every worker has been told to stop: :meth:`poll_once` until
        done, sleeping between polls that found nothing (backing off from ``POLL_S`` to
        ``POLL_MAX_S``).

        ``watch`` runs at every poll and may raise to end training at once (a signal: see
        :func:`flegel.runtime.lifetime.deferred`).  ``resume``: a checkpoint's master
        snapshot to continue from (:meth:`resume`).  ``ended`` runs as soon as the loop
        ends, before :meth:`close` (the master's watchdog leaves training there: draining
        checkpoints and writing the model are no turns of training).  The CPU figures of
        the summary are measured here, around the turns, not in them.
        """
        cpu0 = time.process_time()
        self.begin(policy, resume)
        backoff = Backoff()
        idle_wall = idle_cpu = 0.0
        try:
            while not self.done:
                watch()
                w0, c0 = self.clock(), time.process_time()
                if self.poll_once(policy):
                    backoff.reset()
                    continue
                backoff.sleep()
                # A turn that found nothing, and the sleep after it: what waiting costs (the
                # rest is barrier work).
                idle_wall += self.clock() - w0
                idle_cpu += time.process_time() - c0
        except JobFault:
            # A signal or a fault ends training: what the policy holds (FSP's coverage: the
            # aggregates of barriers that kept θ, each checked as it arrived) is applied
            # before the model is saved, not lost.
            if self.reason is None:
                self._settle()
            ended()
            raise
        elapsed = max(self.now(), 1e-9)
        self.cpu_fraction = (time.process_time() - cpu0) / elapsed
        self.idle_cpu_fraction = idle_cpu / max(idle_wall, 1e-9)
        self.idle_fraction = idle_wall / elapsed
        ended()

        def pause() -> None:
            watch()
            backoff.sleep()

        self.close(pause)
