"""The typed seams between the runtime and the sync models.

A sync model is a pair of policies (docs/architecture.md): a *master policy* deciding when to apply
what and whom to answer, and a *worker policy* that decides when a worker's iteration ends.
Each acts on the runtime only through a port defined here:

* :class:`ServerPort` -- what a master policy may do with the parameter server: apply an
  aggregator, answer or signal a worker, mark and roll back θ, read the clock, the online
  objective and what it knows of each worker, check the stop criteria, record an event.
* :class:`WorkerPort` -- what a worker policy may do with the worker loop: read the clock and
  the block sizer's estimate, mark, roll back or unmark the shard.

A policy that needs more reaches it through an extension point: the wiring hands a worker
policy its worker once (:meth:`WorkerPolicy.attach`), and a master policy holds the server
it was made with; the policy checks that they implement its extension's port (FSP's data
migration: :mod:`flegel.balance.ports`).

The runtime implements the ports (:class:`flegel.runtime.server.Server`,
:class:`flegel.runtime.worker.Worker`); in-process tests implement them with a fake transport
and a simulated clock (``tests/fakes.py``).  This module imports :mod:`flegel.protocol` and
:mod:`flegel.state` (the checkpoint protocol of :class:`WorkerPolicy`), nothing else of
flegel.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from flegel.protocol import Instructions, Reason, Signal, StopReason
from flegel.state import AttributeState

#: An aggregator or θ: a dict of arrays (and floats).
Arrays = dict[str, Any]


@dataclass
class WorkerRecord:
    """What the master knows of one worker.

    Attributes
    ----------
    rank : int
    header : dict
        The COMMIT header of its latest commit (plus ``latency_s``, the commit's transit).
    commits, points : int
        Commits and points processed so far.
    stopped : bool
        It has been told to stop.
    waiting : bool
        It has committed and waits for θ.
    arrived_at : float
        Server clock (seconds since training began) when its latest commit arrived.
    started_at : float
        Server clock when it was last sent θ (its current iteration began).
    """

    rank: int
    header: dict[str, float] = field(default_factory=dict)
    commits: int = 0
    points: int = 0
    stopped: bool = False
    waiting: bool = False
    arrived_at: float = 0.0
    started_at: float = 0.0

    @property
    def passes(self) -> float:
        """Traversal passes over its shard completed so far."""
        return self.header.get("passes", 0.0)

    @property
    def n_active(self) -> int:
        """Points of its shard that have not voted to halt (its shard size before a commit)."""
        return int(self.header.get("n_active", 1))


class ServerPort(Protocol):
    """The parameter server as a master policy sees it."""

    #: Worker ranks, in order.
    ranks: list[int]
    #: Number of θ updates applied so far.
    version: int
    #: Online objective: the sum of every committed objective change (labelled as such).
    objective: float
    #: Points of each worker's shard as loaded, by rank.
    shard_sizes: dict[int, int]
    #: Rows of the master's sample of the data from each worker's shard, in rank order
    #: (``DataInfo.sample_sizes``; empty: no sample).
    sample_sizes: tuple[int, ...]

    def now(self) -> float:
        """Seconds since training began (the time base of every record)."""
        ...

    def worker(self, rank: int) -> WorkerRecord:
        """What the server knows of ``rank``."""
        ...

    def total(self, aggs: Iterable[Arrays]) -> Arrays:
        """The sum of ``aggs`` (``aggregate`` over a zero aggregator)."""
        ...

    def apply(self, agg: Arrays) -> float:
        """θ ← update_parameter(agg, θ); return the seconds the update took."""
        ...

    def send(self, rank: int, instructions: Instructions) -> None:
        """Answer ``rank`` (which waits) with the current θ and ``instructions``."""
        ...

    def signal(self, ranks: Iterable[int], kind: Signal, version: int | None = None) -> None:
        """Send ``kind`` to computing workers about θ ``version`` (default: the current)."""
        ...

    def mark(self) -> object:
        """A token of the current θ and online objective, for :meth:`rollback`."""
        ...

    def rollback(self, token: object) -> None:
        """Return θ and the online objective to what :meth:`mark` saw."""
        ...

    def evaluate_sample(self, rows: Any) -> float | None:
        """The exact objective of θ on ``rows`` of the master's sample, as a sum; None
        where there is no sample or the algorithm has no ``evaluate``."""
        ...

    def estimated_objective(self) -> float:
        """The online objective scaled up to points not visited yet."""
        ...

    def check_stop(self, agg: Arrays, iteration: int,
                   updated: bool = True) -> StopReason | None:
        """The algorithm's (only if θ was ``updated``) and the built-in stop criteria after
        ``iteration``."""
        ...

    def finish(self, reason: StopReason) -> None:
        """End training: every waiting worker gets the final θ with the stop flag."""
        ...

    def record(self, event: dict[str, Any]) -> None:
        """Append one record to ``events.jsonl``."""
        ...

    @property
    def full_batch_update(self) -> bool:
        """The algorithm takes a stronger step on a full batch at θ
        (``Algorithm.full_batch_update``)."""
        ...

    @property
    def progress_per_update(self) -> bool:
        """The algorithm progresses per update, not per point aggregated
        (``Algorithm.progress_per_update``)."""
        ...

    @property
    def sampled_first_step(self) -> bool:
        """An M-step on part of a pass at θ⁽⁰⁾ is one on a sample of the data
        (``Algorithm.sampled_first_step``)."""
        ...

    @property
    def sampled_first_pass(self) -> bool:
        """The first pass's later M-steps may be sampled too (``Algorithm.sampled_first_pass``)."""
        ...

    @property
    def sample_min_points(self) -> int:
        """Points every worker's sample must hold in FSPV's sampled calibration, 0 for no
        floor beyond the share's (``Algorithm.sample_min_points``)."""
        ...

    @property
    def cover_before_update(self) -> bool:
        """θ sums every point's contribution: its first update waits until every point was
        visited (``Algorithm.cover_before_update``)."""
        ...

    def unseen(self) -> int:
        """Points no worker has trained yet (in flight between workers included)."""
        ...

    @property
    def target_objective(self) -> float | None:
        """The job's target objective (``stop.target_objective``), if any."""
        ...

    @property
    def time_left_s(self) -> float | None:
        """Training time left before ``stop.max_time_s``, if set."""
        ...


class WorkerPort(Protocol):
    """The worker loop as a worker policy sees it."""

    def now(self) -> float:
        """A monotonic clock in seconds."""
        ...

    @property
    def per_point_s(self) -> float | None:
        """The block sizer's estimate of one point's compute time (None before any block)."""
        ...

    @property
    def slowed_point_s(self) -> float | None:
        """... plus the straggler delays per point the sizer has seen (None before any
        block): ``BlockSizer.slowed_point_s``."""
        ...

    @property
    def straggling(self) -> bool:
        """Whether straggler patterns (``stragglers``) slow this worker at any time of the
        run, whether or not their delays have come yet."""
        ...

    def mark(self) -> None:
        """Remember the traversal position; journal per-point state from here."""
        ...

    def unmark(self) -> None:
        """Forget the mark."""
        ...

    def rollback(self) -> None:
        """Return to the mark: traversal position, per-point state and halt votes."""
        ...


class WorkerPolicy(AttributeState):
    """The worker side of a sync model: when one iteration ends.

    The worker loop (:class:`flegel.runtime.worker.Worker`) is the same for every model.  It
    calls :meth:`begin` with each θ's instructions, asks :meth:`commit_reason` between blocks
    and :meth:`block_limit` before each block, hands a signal to :meth:`on_signal`, and calls
    :meth:`finish` with the aggregator when the iteration ends.  A completed traversal pass
    always ends an iteration (θ is fixed within one, so a second pass would repeat work; FSP
    paper Section 3.3); everything else a model wants is here.

    This base class ends an iteration after ``batch`` points (0: a full pass): BSP and the
    push models.
    """

    #: Checkpoints save every attribute but the options (:class:`~flegel.state.AttributeState`).
    NOT_STATE: ClassVar[tuple[str, ...]] = ("options",)

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = options or {}
        self.instructions = Instructions()

    def attach(self, worker: WorkerPort) -> None:
        """The extension point: the wiring hands over the worker itself, once, before
        training, for a policy that needs more of it than :class:`WorkerPort` (FSP's data
        migration takes its :class:`flegel.balance.ports.MigrationPort`).  Default:
        nothing."""

    def begin(self, port: WorkerPort, instructions: Instructions, sent_lag_s: float) -> None:
        """An iteration begins with ``instructions``; θ was sent ``sent_lag_s`` ago."""
        self.instructions = instructions
        if instructions.rollback:
            port.rollback()
        if instructions.mark > 0:
            port.mark()
        elif instructions.mark < 0:
            port.unmark()

    def commit_reason(self, port: WorkerPort, points: int) -> Reason | None:
        """Why to commit now, after ``points`` points this iteration; None to go on."""
        batch = self.instructions.batch
        if batch > 0 and points >= batch:
            return Reason.BATCH
        return None

    def block_size(self, port: WorkerPort, sized: int) -> int:
        """Points in the next block given the block sizer's choice ``sized`` (default: it).

        BSP fixes it, so an iteration's summation order does not depend on timing."""
        return sized

    def block_limit(self, port: WorkerPort, points: int) -> int | None:
        """The most points the next block may hold (None: no limit beyond the sizer's)."""
        batch = self.instructions.batch
        return batch - points if batch > 0 else None

    def on_signal(self, port: WorkerPort, kind: Signal) -> Reason | None:
        """A signal arrived for the θ this worker computes from; return why it commits."""
        return Reason.SIGNAL if kind == Signal.PAUSE else None

    def deadline(self) -> float | None:
        """The clock time by which the current iteration must end (None: none)."""
        return None

    def idle(self, port: WorkerPort, points: int) -> bool:
        """Whether the worker has nothing to train yet but its iteration goes on (after
        ``points`` points): the loop then sleeps a poll interval -- side work, migration and
        signals go on -- and asks again.  Default False.  A policy that says True must end
        the wait itself or be ended by a signal (FSP's coverage: the master's bound)."""
        return False

    def finish(self, port: WorkerPort, reason: Reason) -> bool:
        """The iteration ended for ``reason``; return False to throw its work away."""
        return True

    def overlaps(self, port: WorkerPort) -> bool:
        """Whether the worker's wait for θ after a commit overlaps its own lost time: a
        straggler's suspension (the ``injected`` pattern, a suspended training thread) runs
        on while it waits, as a sleeping thread's does while the communication thread
        commits and takes θ (FSP paper Section 6.1), instead of resuming only once θ came.
        Only a model whose barrier cuts a suspension short leaves one to serve (FSP's
        pause and timers); SpecSync's abort drops the suspension the aborted iteration
        added (:func:`flegel.runtime.loop.iterate`), so it never owes one at a commit.
        Default False: the wait is the model's (:mod:`flegel.runtime.loop`, "Overlap")."""
        return False

    @property
    def in_flight(self) -> int:
        """Points of this worker on their way to another worker, trained by neither
        (reported at each commit, the COMMIT header's ``in_flight``: the master takes no
        checkpoint while any are; FSP's data migration windows)."""
        return 0

    def between_blocks(self, port: WorkerPort) -> None:
        """Called before every block: cheap, nonblocking work beside training (migration)."""

    def while_waiting(self, port: WorkerPort) -> None:
        """Called at every poll while the worker waits for θ."""

    def on_stop(self, port: WorkerPort) -> dict[str, Any]:
        """Training is over: finish side work (drain migration); return figures for the
        worker's report."""
        return {}
