"""What the master and the workers say to each other: tags, reasons, signals, header fields.

The bottom of flegel's layers (``docs/architecture.md``): the runtime, the sync models and
the run wiring import this module, and it imports nothing from flegel.  Everything that
crosses the wire is named here once:

* :class:`Tag` -- MPI message tags;
* :class:`Reason` -- why a worker committed;
* :class:`Signal` -- control signals from the master to a computing worker;
* :class:`StopReason` -- why training ended;
* :class:`Header` and its three instances :data:`COMMIT`, :data:`PARAMS`, :data:`SIGNAL` --
  the named float64 fields at the front of every buffer message, each as long as its fields;
* :class:`Instructions` -- what a master policy tells one worker together with θ;
* the pickled messages, typed records sent as they are (their classes are here, on every
  rank): the data migration's :class:`MigrationOrder` (master -> worker, ``Tag.ORDER``) and
  :data:`PeerMessage` -- :class:`Window`, :class:`Shortfall`, :class:`Reactivate`,
  :class:`Fin` (worker -> worker, ``Tag.MIGRATE``; FSP paper Section 4.3); the exact
  evaluation's :class:`EvalRequest`, :class:`EvalEnd` (master -> worker) and
  :class:`EvalReply` (worker -> master, ``Tag.EVAL``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np

#: Shortest and longest sleep between polls while waiting.  A wait starts polling every
#: 0.1 ms (a reply right after a commit is seen at once) and backs off to 1 ms (a long wait at a
#: straggler's barrier costs ~2% of a core instead of the full core a blocking MPICH call burns,
#: README, How the runtime works).
POLL_S = 1e-4
POLL_MAX_S = 1e-3


class Tag(enum.IntEnum):
    """MPI message tags."""

    PARAMS = 11   # master -> worker: PARAMS header (+ θ unless the worker already holds it)
    COMMIT = 12   # worker -> master: COMMIT header + aggregator
    SIGNAL = 13   # master -> worker: SIGNAL header (pause, abort)
    OBJECT = 14   # pickled start-up and end-of-run messages
    ORDER = 15    # master -> worker: a migration order (pickled, small)
    MIGRATE = 16  # worker -> worker: a window of points, a reactivation, or a final count
    FAULT = 17    # worker -> master: this worker failed (pickled: rank, pid, exit code, text)
    EVAL = 18     # master <-> worker: evaluate a θ snapshot exactly / the partial sum (pickled)
    CHECKPOINT = 19  # worker -> master: this worker's state for a checkpoint (pickled)


class Reason(enum.IntEnum):
    """Why a worker committed."""

    BATCH = 1   # processed the batch it was given
    PASS = 2    # completed a traversal pass since the iteration began
    SIGNAL = 3  # the master's pause signal (flexible barrier, centralized)
    TIMER = 4   # its own interval η − δ expired (flexible barrier, semi-centralized)
    ABORT = 5   # told to abort and restart from a fresher θ (SpecSync)


class Signal(enum.IntEnum):
    """Control signals the master sends to a computing worker."""

    NONE = 0
    PAUSE = 1  # commit now (flexible barrier, centralized coordination)
    ABORT = 2  # drop the current work and restart from a fresher θ (SpecSync)


class StopReason(str, enum.Enum):
    """Why training ended (``summary.json``'s ``stop_reason``)."""

    CONVERGED = "converged"            # relative change below the tolerance (Section 5.3)
    TARGET = "target"                  # objective at or below stop.target_objective
    MAX_ITERATIONS = "max_iterations"
    MAX_TIME = "max_time"
    ALGORITHM = "algorithm"            # the algorithm's termination_check said stop
    HALTED = "halted"                  # every point voted to halt
    # The job ended early; the last good θ is saved (docs/exit-codes.md).
    INTERRUPTED = "interrupted"        # SIGINT or SIGTERM
    STALLED = "stalled"                # a worker silent past runtime.stall_timeout_s
    NUMERIC = "numeric_fault"          # NaN/inf or a wrong layout in an aggregator or θ
    FAILED = "failed"                  # an exception on a rank, or a worker process died

    def __str__(self) -> str:
        return self.value


#: Stop reasons that mean the model converged.
CONVERGED = frozenset({StopReason.CONVERGED, StopReason.TARGET, StopReason.ALGORITHM,
                       StopReason.HALTED})


class ExitCode(enum.IntEnum):
    """Exit status of ``flegel run``, one per way a job ends (``docs/exit-codes.md``)."""

    OK = 0
    FAILED = 1        # an exception on a rank (its traceback is printed)
    BAD_JOB = 2       # the job file or its data is invalid; nothing ran
    STALLED = 3       # a worker was silent past runtime.stall_timeout_s
    NUMERIC = 4       # NaN/inf or a wrong layout in an aggregator or in θ
    WORKER_DIED = 5   # a worker process died (killed, out of memory, crashed)
    INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + 2, the shell's convention
    TERMINATED = 143   # SIGTERM: 128 + 15

    @classmethod
    def for_signal(cls, signum: int) -> int:
        """The exit status for a job ended by signal ``signum``: ``128 + signum``."""
        return 128 + int(signum)


class Header:
    """Named float64 fields at the front of a message buffer.

    Parameters
    ----------
    fields : tuple of str
        Field names, in buffer order.  The header is :attr:`size` floats long, one per
        field: a buffer's payload (θ, an aggregator) starts there.
    """

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self.size = len(fields)
        self.index = {name: i for i, name in enumerate(fields)}

    def write(self, buf: np.ndarray, **values: float) -> None:
        """Zero the header of ``buf`` and write ``values`` (unknown names raise KeyError)."""
        buf[: self.size] = 0.0
        for k, v in values.items():
            buf[self.index[k]] = v

    def read(self, buf: np.ndarray) -> dict[str, float]:
        """The header fields of ``buf`` as a dict."""
        return {k: float(buf[i]) for k, i in self.index.items()}


#: Worker -> master, in front of an aggregator.
COMMIT = Header((
    "clock",        # the worker's own iteration count (1-based)
    "version",      # θ version the work was computed from
    "points",       # points processed in this commit
    "compute_s",    # time spent computing (injected straggler sleeps included)
    "wait_s",       # time waited for θ before this iteration began
    "passes",       # traversal passes completed, cumulative
    "reason",       # why the worker committed (Reason)
    "sent_at",      # time.time() when sent
    "block_s",      # current estimate of one block's compute time
    "rate",         # points per second of pure compute (no injected delay)
    "slowed_s",     # time lost to injected stragglers in this commit
    "n_active",     # points of the shard that have not voted to halt
    "aborted",      # points whose work was thrown away (SpecSync)
    "n_held",       # points the worker holds (migrated-away ones excluded)
    "in_flight",    # points locked in windows being sent (migration)
    "seen",         # points held that were trained at least once
    "queued",       # points migrated in (or reactivated) not yet in the traversal
    "behind",       # ... of which still behind in passes: the catch-up left to train
    "incurred_s",   # injected delay this commit's blocks incurred, served now or owed
))

#: Master -> worker, in front of θ.
PARAMS = Header((
    "version",      # θ version (global iteration count under barrier models)
    "stop",         # 1: training is over, evaluate θ and report
    "batch",        # points to process before the next commit (0: no batch limit)
    "eta_s",        # flexible-barrier interval for the next iteration (0: none)
    "offset_s",     # this worker's semi-centralized offset δ_i
    "rollback",     # 1: return to the last mark (FSPV probes)
    "mark",         # 1: mark position and journal state from here; -1: drop the mark
    "sent_at",      # time.time() when sent
    "has_theta",    # 1: θ follows the header; 0: θ is the one the worker holds already
    "orders",       # migration orders sent with this θ (Tag.ORDER messages)
    "checkpoint",   # 1: send your state (Tag.CHECKPOINT) before computing (rundir/checkpoint.py)
    "cover",        # θ is held until every point was trained once: 1 train only those, 2 ...
                    # and points are on their way to you: wait for them (Instructions.cover)
    "sampled",      # 1: the batch is a step of FSPV's sampled first pass (Instructions.sampled)
    "steady",       # 1: no pause at the first pass is planned for you (Instructions.steady)
))

#: Master -> worker control signal.
SIGNAL = Header(("kind", "version", "sent_at"))


@dataclass(frozen=True)
class Instructions:
    """What a master policy tells one worker with θ: how its next iteration ends.

    Attributes
    ----------
    batch : int
        Points to process before committing (0: no batch limit).
    eta_s : float
        Interval of a self-timed flexible barrier (0: none; FSP semi-centralized).
    offset_s : float
        The worker's offset δᵢ: it commits after η − δᵢ (FSP paper Section 5.2).
    mark : int
        1: mark the traversal position and journal state from here; -1: drop the mark.
    rollback : bool
        Return to the last mark before starting (FSPV's second probe).
    stop : bool
        Training is over: evaluate θ and report.
    orders : int
        Migration orders (``Tag.ORDER`` messages) sent just before these instructions.
    cover : int
        The master holds θ until every point has been trained once (FSP's coverage,
        :mod:`flegel.sync.fsp`).  0: no hold; 1: train only the points this worker holds
        that no worker has trained yet, and commit when none is left; 2: as 1, and points
        no worker has trained are on their way to this worker (migration): with none to
        train yet, wait for them (the master's bound ends the wait).
    sampled : bool
        The batch is the master's sampled share of every shard in FSPV's sampled first pass
        (:data:`flegel.sync.fsp.SAMPLED_PHASE`): a stratum takes its estimate whatever the
        window's class shares (no skew test).  Not set for the sampled calibration.
    steady : bool
        FSP without data migration: the master predicts this worker's pass within the grace
        of the fastest worker's, so it plans no pause for it at the first pass
        (``FSP._on_pass``); on course for its pass, the worker may take it in blocks as
        large as BSP's (:mod:`flegel.sync.whole_blocks`, "Steady workers").
    """

    batch: int = 0
    eta_s: float = 0.0
    offset_s: float = 0.0
    mark: int = 0
    rollback: bool = False
    stop: bool = False
    orders: int = 0
    cover: int = 0
    sampled: bool = False
    steady: bool = False

    @property
    def calibration(self) -> bool:
        """Whether this is FSPV's sampled calibration: a share of every shard (``batch``),
        not a sampled step of the first pass (``sampled``)."""
        return self.batch > 0 and not self.sampled

    def fields(self) -> dict[str, float]:
        """The :data:`PARAMS` header fields these instructions fill."""
        # Not dataclasses.asdict, which deep-copies each value: 159 µs a call against 16 µs
        # (timeit at a load of 12), a call per worker a barrier: 12-15 % of the master's CPU
        # in training on `flegel paper`'s NMF (cProfile on CPU time, BSPV and FSPV alike;
        # issue 19).  Every field is a scalar.
        return {k: float(getattr(self, k)) for k in _INSTRUCTION_NAMES}

    @classmethod
    def from_header(cls, header: dict[str, float]) -> Instructions:
        """Read instructions back from a :data:`PARAMS` header."""
        return cls(batch=int(header["batch"]), eta_s=header["eta_s"],
                   offset_s=header["offset_s"], mark=int(header["mark"]),
                   rollback=bool(header["rollback"]), stop=bool(header["stop"]),
                   orders=int(header["orders"]), cover=int(header.get("cover", 0.0)),
                   sampled=bool(header.get("sampled", 0.0)),
                   steady=bool(header.get("steady", 0.0)))


#: The fields of :class:`Instructions`, in order (:meth:`Instructions.fields`).
_INSTRUCTION_NAMES = tuple(f.name for f in dataclass_fields(Instructions))


# ------------------------------------------------------------------ data migration (§4.3)
#: Points travelling between workers with their per-point state: the dict of arrays of
#: :meth:`flegel.runtime.store.ShardStore.export` (ids, features, labels, state, visits) or
#: of ``retire`` (no features: virtual migration).
Points = dict[str, Any]


class OrderKind(str, enum.Enum):
    """What a :class:`MigrationOrder` asks of its worker."""

    SEND = "send"      # send ``points`` of your points to ``peer``
    RETURN = "return"  # give ``points`` parked copies back to ``peer``, their origin
    EXPECT = "expect"  # ``points`` will arrive from ``peer`` (synchronous migration waits)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class MigrationOrder:
    """Master -> worker (``Tag.ORDER``): one order of a planning round, sent before the
    instructions that count it (:attr:`Instructions.orders`)."""

    kind: OrderKind
    peer: int     # the target (send, return) or the source (expect)
    points: int
    round: int    # the planning round: a new round's orders replace what is left of the last


@dataclass(frozen=True)
class Window:
    """Worker -> worker (``Tag.MIGRATE``): a window of points, features and state."""

    points: Points


@dataclass(frozen=True)
class Shortfall:
    """Worker -> worker: this many of the points ordered to the receiver will not come (the
    sender had none left to give), so a synchronous receiver stops waiting for them."""

    points: int


@dataclass(frozen=True)
class Reactivate:
    """Worker -> worker: take these points of yours up again (virtual migration: ids,
    per-point state and visits, never the features); ``ordered`` is what was ordered back,
    which the receiver counts as arrived even if fewer were found."""

    points: Points
    ordered: int


@dataclass(frozen=True)
class Fin:
    """Worker -> worker, at stop: the messages the sender sent the receiver in all."""

    sent: int


#: A worker-to-worker message of the data migration.
PeerMessage = Window | Shortfall | Reactivate | Fin


# ------------------------------------------------------------------ exact evaluation
@dataclass(frozen=True)
class EvalRequest:
    """Master -> worker (``Tag.EVAL``): evaluate this θ snapshot on the points you hold."""

    id: int
    theta: dict[str, np.ndarray]


@dataclass(frozen=True)
class EvalEnd:
    """Master -> worker: no request follows (answer those still queued first)."""


@dataclass(frozen=True)
class EvalReply:
    """Worker -> master: partial sums over the worker's points, one per θ evaluated.

    During training one θ, the request ``id``'s (``Tag.EVAL``); after training every θ the
    master still lacks, in one pass (``id`` 0, in the worker's end-of-run report).  ``count``
    points were evaluated, their ids summing to ``checksum``
    (:func:`flegel.runtime.exact.id_checksum`), in ``seconds``; ``skipped``: not evaluated
    (a request that came after the stop: nobody reads it)."""

    id: int
    values: list[float]
    count: int
    checksum: int
    seconds: float
    skipped: bool = False

    @property
    def value(self) -> float:
        """The partial sum of the one θ of a request during training."""
        return self.values[0] if self.values else 0.0
