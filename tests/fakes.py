"""In-process fakes for testing the sync models: a simulated clock, a fake transport, and a
deterministic discrete-event simulation of the master and its workers.

:class:`Simulation` runs the *real* parameter server (:class:`flegel.runtime.server.Server`),
the *real* master policy of a sync model and, on every simulated worker, the *real* worker
policy (``cls.WORKER``), a real :class:`flegel.runtime.store.ShardStore`, a real
:class:`flegel.runtime.blocksize.BlockSizer`, real straggler patterns
(:mod:`flegel.runtime.stragglers`) and a
real algorithm (K-means by default), so aggregators, θ and convergence are real.  Only time and
messaging are simulated:

* time is a :class:`SimClock` that jumps from event to event (a heap ordered by time); a block
  of ``n`` points "takes" ``n · cost_s · slowdown(t)`` seconds (optionally with seeded
  relative noise, ``jitter``), straggler patterns add their delays to the simulated clock, and
  the master runs the real loop's turn (:meth:`Server.poll_once`) at each commit's arrival
  and, when nothing arrived, every ``poll_s`` (a tick);
* messages (:class:`FakeTransport`) arrive after a constant ``latency_s``; θ and aggregators
  cross the "wire" through their real :class:`flegel.runtime.layout.Layout` and headers
  through the real :data:`flegel.protocol.PARAMS` / :data:`~flegel.protocol.COMMIT` /
  :data:`~flegel.protocol.SIGNAL` layouts, so a misspelt field fails as it would on MPI;
  migration orders (``send_order``) arrive after the same latency, before any PARAMS sent
  after them;
* data migration (FSP paper Section 4.3): every worker implements
  :class:`flegel.ports.WorkerPort` and the migration extension,
  :class:`flegel.balance.ports.MigrationPort` (attached to its policy as ``flegel.run``
  does), and the server the master's :class:`~flegel.balance.ports.OrderPort`; the orders
  and messages are the typed records of :mod:`flegel.protocol`.  Workers hold their points
  with the
  real run's global ids (``rank << ID_SHIFT | row``).  Worker-to-worker messages
  (:class:`Network`) leave each worker's link one after the other at ``bandwidth_Bps`` and
  arrive ``latency_s`` after their last byte left, so a window is really in flight for a
  while; a send is complete (``sends_pending``) once it arrived.  ``pause()`` (the
  migrator's waits: synchronous migration, the drain at stop) advances simulated time by
  one poll interval while the rest of the simulation goes on.

The simulated worker (:class:`SimWorker`) runs the runtime's own worker loop,
:func:`flegel.runtime.loop.work` (waits for instructions, iterations, commits) -- the generator
the MPI worker drives in real time -- on the simulated clock: the kernel runs for real and its
time is the cost model's, and what takes time is yielded (:class:`Sleep`, the loop's ``Wait``),
as are sends (:class:`Send`) and the polls of a worker waiting for θ (the loop's ``Poll``,
with the real back-off from ``POLL_S`` to ``POLL_MAX_S``; a waiting worker is resumed as soon
as θ arrives).  ``while_waiting`` runs at every poll, ``on_stop`` after the stop flag (its
report is kept in :attr:`SimWorker.side`).

What is *not* modelled: MPI itself (buffers, request completion, message ordering beyond
"FIFO per send time"), wall-clock effects (scheduling, CPU contention, the master's back-off
between polls -- it ticks at a fixed ``poll_s``), the time the master spends applying an update
(``apply`` is instantaneous on the simulated clock), clock skew between hosts, MPI's rendezvous
(a worker-to-worker send completes when it arrives, taken or not), and the run directory
(checkpoints are taken by the master loop's turn only where a test gives the server a
checkpoint writer, ``tests/test_checkpoint.py``).  ``pause()`` runs the rest of the
simulation inline (the pausing worker's frame stays on the stack), so a worker pausing while
another pauses resumes at the later of the two ends: waits may end up to one poll late.
No threads, no wall clock, no randomness beyond seeded generators: two runs with the same
arguments give identical results.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import heapq
import types
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flegel.api import Algorithm, DataInfo, zero_aggregator
from flegel.block import Block
from flegel.job.sections import sync_keys
from flegel.ports import Arrays, WorkerPolicy
from flegel.protocol import (
    COMMIT,
    PARAMS,
    POLL_MAX_S,
    POLL_S,
    SIGNAL,
    Instructions,
    MigrationOrder,
    PeerMessage,
    Reactivate,
    Reason,
    Signal,
    Window,
)
from flegel.runtime.blocksize import BlockSizer
from flegel.runtime.layout import Layout
from flegel.runtime.loop import Poll, Totals, Wait, await_params, strongest, work
from flegel.runtime.server import Server
from flegel.runtime.stopping import StopCriteria
from flegel.runtime.store import ID_SHIFT, ShardStore, origin_of
from flegel.runtime.stragglers import Stragglers
from flegel.runtime.transport import Commit
from flegel.sync import policy_class
from flegel.validation import check_section


# --------------------------------------------------------------------------- options
def sync_options(model: str, **given: Any) -> dict[str, Any]:
    """A complete, validated ``sync`` section for ``model``: ``given`` plus every default.

    Goes through the job schema as :mod:`flegel.job.validate` does
    (:func:`flegel.job.sections.sync_keys` and :func:`flegel.validation.check_section`, then
    the model's ``check_options`` when it has one).

    Raises
    ------
    ValueError
        For an unknown or invalid option.
    """
    cls = policy_class(model)
    section = {"model": model, **given}
    if model == "fsp" and "migration" not in given:
        # Policy tests check FSP without migration unless they ask for it (its default is
        # async; tests/test_migration_*.py ask).
        section["migration"] = {"mode": "off"}
    out = check_section("sync", section, sync_keys(cls))
    check = getattr(cls, "check_options", None)
    if check is not None:
        problem = check(out)
        if problem is not None:
            raise ValueError(f"sync.{problem[0]}: expected {problem[1]}, found "
                             f"{out.get(problem[0])!r}")
    return out


# --------------------------------------------------------------------------- data
def blobs(n: int = 600, k: int = 4, d: int = 3, seed: int = 0,
          std: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points in ``k`` well-separated Gaussian blobs, shuffled so that every shard sees
    every blob, and K-means starting centres near the true ones (every sync model then finds
    the same optimum).  Returns ``(x, centres0)``."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10.0, 10.0, size=(k, d))
    labels = rng.integers(0, k, size=n)
    x = centers[labels] + rng.normal(0.0, std, size=(n, d))
    return x, centers + rng.normal(0.0, 1.5, size=(k, d))


def overlapping(n: int = 20_000, seed: int = 3, k: int = 8,
                d: int = 8) -> tuple[np.ndarray, Arrays]:
    """``n`` points of ``k`` overlapping clusters in ``d``-D, sorted by cluster (so that each
    shard holds a few), and K-means θ⁽⁰⁾ from random points: ``bench/migration_sim.py``'s
    data and the migration tests'."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-6, 6, size=(k, d))
    x = centers[np.sort(rng.integers(0, k, size=n))] + rng.normal(0, 2.0, size=(n, d))
    return x, kmeans_theta0(x[rng.choice(n, k, replace=False)])


def counting(base: type[Algorithm]) -> type[Algorithm]:
    """A subclass of the algorithm class ``base`` that records each kernel call's block size
    in ``calls`` (every worker's, or one worker's with ``own_algorithms``): what the tests of
    block sizes read."""

    class Counting(base):  # type: ignore[valid-type, misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.calls: list[int] = []

        def update_block(self, block: Block, theta: Arrays, t: int) -> Any:
            self.calls.append(len(block))
            return super().update_block(block, theta, t)

    Counting.__name__ = Counting.__qualname__ = f"Counting{base.__name__}"
    return Counting


def fspv_logreg(n: int, cost_s: float, iterations: int, options: Mapping[str, Any] = (),
                **given: Any) -> Simulation:
    """FSPV (``options`` added) on logistic regression that records its block sizes
    (:func:`counting`): 4 workers, ``n`` separable-ish points of 5 features, ``cost_s`` a
    point, 1 ms blocks, ``iterations`` barriers; ``given``: further :class:`Simulation`
    arguments.  Not run yet (a test may seed the workers' sizers first)."""
    from flegel.algorithms.logreg import LogisticRegression

    rng = np.random.default_rng(0)
    d, workers = 5, 4
    x = rng.normal(size=(n, d))
    y = (x @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    alg = counting(LogisticRegression)(kernel="array")
    theta0 = alg.init_parameter(DataInfo(n_features=d, n_points=n, n_workers=workers,
                                         sample=x, sample_y=y, n_classes=2))
    return Simulation("fsp", {"interval": "multistage", "migration": {"mode": "off"},
                              **dict(options)},
                      workers=workers, shards=np.array_split(x, workers),
                      labels=np.array_split(y, workers), algorithm=alg, theta0=theta0,
                      cost_s=cost_s, block_ms=1.0, latency_s=50e-6,
                      stop={"max_iterations": iterations}, **given)


def kmeans_theta0(centres: np.ndarray, stratum: bool = False) -> Arrays:
    """θ⁽⁰⁾ of :class:`flegel.algorithms.kmeans.KMeans` with the given centres; ``stratum``:
    with the stratified M-step's keys and the drift, as ``init_parameter`` makes it (the
    estimate runs where every worker has its own instance, ``own_algorithms``)."""
    k, d = centres.shape
    theta = {"centers": np.array(centres, dtype=np.float64), "sums": np.zeros((k, d)),
             "counts": np.zeros(k)}
    if stratum:
        theta.update(stratum_sums=np.zeros((k, d)), stratum_counts=np.zeros(k),
                     stratum_active=np.zeros(1), drift=np.zeros(1))
    return theta


# --------------------------------------------------------------------------- clock
class SimClock:
    """Simulated seconds: a float that only the simulation advances.  Call it to read it
    (the ``clock`` argument of :class:`~flegel.runtime.server.Server`)."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = float(t)

    def __call__(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        """Move the clock to ``t`` (never backwards)."""
        if t < self.t:
            raise ValueError(f"the clock cannot go back from {self.t} to {t}")
        self.t = float(t)


# --------------------------------------------------------------------------- transport
@dataclass(frozen=True)
class SentParams:
    """One PARAMS message: the full wire header and θ (None: the worker holds it)."""

    time: float
    rank: int
    header: dict[str, float]
    theta: Arrays | None

    @property
    def version(self) -> int:
        return int(self.header["version"])

    @property
    def instructions(self) -> Instructions:
        return Instructions.from_header(self.header)

    @property
    def stop(self) -> bool:
        return bool(self.header["stop"])


@dataclass(frozen=True)
class SentOrder:
    """One migration order (``Tag.ORDER``)."""

    time: float
    rank: int
    message: MigrationOrder


@dataclass(frozen=True)
class SentSignal:
    """One SIGNAL message."""

    time: float
    rank: int
    kind: Signal
    version: int


class FakeTransport:
    """:class:`flegel.runtime.transport.Transport` on a simulated clock.

    Records every send with its simulated time, and hands each message to ``deliver`` with
    its arrival time (send time + ``latency_s``).  :meth:`poll` returns what the simulation
    put in :attr:`inbox`: at each commit's arrival time it does so and runs one turn of the
    master loop (:meth:`Server.poll_once`).  Headers
    are written and read back through the real wire headers, θ through its real
    :class:`~flegel.runtime.layout.Layout`.

    Parameters
    ----------
    clock : SimClock
    latency_s : float
        One-way messaging latency.
    theta_layout : Layout
        Layout of θ on the wire.
    deliver : callable
        ``deliver(at, rank, kind, message)`` with kind ``"params"`` (message: (header, θ or
        None)), ``"signal"`` (message: the SIGNAL header) or ``"order"`` (message: the
        migration order).
    """

    def __init__(self, clock: SimClock, latency_s: float, theta_layout: Layout,
                 deliver: Callable[[float, int, str, Any], None]) -> None:
        self.clock = clock
        self.latency_s = latency_s
        self.theta_layout = theta_layout
        self.deliver = deliver
        self.params: list[SentParams] = []
        self.signals: list[SentSignal] = []
        self.orders: list[SentOrder] = []
        self.inbox: list[Commit] = []
        self.closed = False

    def send_params(self, rank: int, fields: dict[str, float], theta: dict | None) -> None:
        if self.closed:
            raise RuntimeError("send_params after close")
        now = self.clock()
        buf = np.empty(PARAMS.size + self.theta_layout.size)
        PARAMS.write(buf, sent_at=now, has_theta=float(theta is not None), **fields)
        header = PARAMS.read(buf)
        wire = None
        if theta is not None:
            wire = self.theta_layout.unpack(self.theta_layout.pack(theta, buf[PARAMS.size:]))
        self.params.append(SentParams(now, rank, header, wire))
        self.deliver(now + self.latency_s, rank, "params", (header, wire))

    def send_signal(self, rank: int, kind: Signal, version: int) -> None:
        if self.closed:
            raise RuntimeError("send_signal after close")
        now = self.clock()
        buf = np.empty(SIGNAL.size)
        SIGNAL.write(buf, kind=float(kind), version=version, sent_at=now)
        self.signals.append(SentSignal(now, rank, Signal(int(kind)), int(version)))
        self.deliver(now + self.latency_s, rank, "signal", SIGNAL.read(buf))

    def send_order(self, rank: int, order: MigrationOrder) -> None:
        """A migration order; it arrives after the latency, before any PARAMS sent after it
        (the simulation delivers orders before PARAMS of the same instant)."""
        if self.closed:
            raise RuntimeError("send_order after close")
        now = self.clock()
        self.orders.append(SentOrder(now, rank, order))
        self.deliver(now + self.latency_s, rank, "order", order)

    def poll(self) -> list[Commit]:
        out, self.inbox = self.inbox, []
        return out

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ queries
    def params_to(self, rank: int) -> list[SentParams]:
        """Every PARAMS message sent to ``rank``, in order (θ⁰'s preload first)."""
        return [p for p in self.params if p.rank == rank]

    def signals_of(self, kind: Signal) -> list[SentSignal]:
        """Every signal of ``kind``, in order."""
        return [s for s in self.signals if s.kind == kind]


# --------------------------------------------------------------------------- network
def message_bytes(message: Any) -> int:
    """Bytes a worker-to-worker message puts on the wire: its arrays' bytes, 8 per scalar
    (field names, dict keys and pickling overhead are not counted)."""
    if dataclasses.is_dataclass(message):
        return sum(message_bytes(getattr(message, f.name))
                   for f in dataclasses.fields(message))
    if isinstance(message, dict):
        return sum(message_bytes(v) for v in message.values())
    if isinstance(message, (list, tuple)):
        return sum(message_bytes(v) for v in message)
    if isinstance(message, np.ndarray):
        return int(message.nbytes)
    return 0 if message is None or isinstance(message, str) else 8


@dataclass(frozen=True)
class Post:
    """One worker-to-worker message (``WorkerPort.post``).

    ``kind`` names the message's type (``window``, ``shortfall``, ``reactivate``, ``fin``);
    ``bytes`` is everything on the wire (:func:`message_bytes`); ``data_bytes`` the features
    and labels it carries (what ``Migrator.bytes_moved`` counts); ``ids`` the points it
    moves (empty for a ``fin``).
    """

    time: float
    src: int
    dest: int
    kind: str
    bytes: int
    data_bytes: int
    ids: np.ndarray = field(repr=False)
    arrival: float
    message: PeerMessage = field(repr=False)


class Network:
    """Worker-to-worker messaging on the simulated clock.

    A worker's messages leave its link one after the other at ``bandwidth_Bps`` (a window's
    bytes take ``bytes / bandwidth_Bps`` to leave) and arrive ``latency_s`` after their last
    byte left; messages between two workers therefore arrive in the order they were posted
    (MPI's non-overtaking rule).  A send is complete once its message arrived.

    Parameters
    ----------
    clock : SimClock
    latency_s : float
    bandwidth_Bps : float
        Bytes per second of each worker's link.
    """

    def __init__(self, clock: SimClock, latency_s: float, bandwidth_Bps: float) -> None:
        if bandwidth_Bps <= 0:
            raise ValueError(f"bandwidth must be positive, found {bandwidth_Bps}")
        self.clock = clock
        self.latency_s = latency_s
        self.bandwidth_Bps = bandwidth_Bps
        self.posts: list[Post] = []
        self._link_free: dict[int, float] = {}            # rank -> its link's next free time
        self._mail: dict[int, list[tuple[float, int, Post]]] = {}  # dest -> (arrival, seq, post)
        self._pending: dict[int, list[tuple[int, float]]] = {}  # src -> (dest, arrival)
        self._seq = 0

    def post(self, src: int, dest: int, message: PeerMessage) -> Post:
        """Send ``message`` from ``src`` to ``dest``; return its record."""
        now = self.clock()
        size = message_bytes(message)
        start = max(now, self._link_free.get(src, now))
        done = start + size / self.bandwidth_Bps
        self._link_free[src] = done
        points = getattr(message, "points", None)
        data = 0
        ids = np.empty(0, dtype=np.int64)
        if isinstance(points, dict):
            ids = np.asarray(points["ids"], dtype=np.int64)
            if "x" in points:
                y = points.get("y")
                data = int(np.asarray(points["x"]).nbytes
                           + (0 if y is None else np.asarray(y).nbytes))
        record = Post(now, src, dest, type(message).__name__.lower(), size, data, ids,
                      done + self.latency_s, message)
        self.posts.append(record)
        self._seq += 1
        heapq.heappush(self._mail.setdefault(dest, []), (record.arrival, self._seq, record))
        self._pending.setdefault(src, []).append((dest, record.arrival))
        return record

    def sends_pending(self, src: int, dest: int | None = None) -> int:
        """Messages ``src`` posted (to ``dest``; None: to anyone) that have not arrived yet."""
        now = self.clock()
        left = [(d, t) for d, t in self._pending.get(src, []) if t > now]
        self._pending[src] = left
        return sum(1 for d, _ in left if dest is None or d == dest)

    def receive(self, dest: int, limit: int | None = None) -> list[tuple[int, PeerMessage]]:
        """``(source, message)`` of the messages that arrived at ``dest``, in arrival order,
        at most ``limit``."""
        now = self.clock()
        box = self._mail.get(dest, [])
        out: list[tuple[int, PeerMessage]] = []
        while box and box[0][0] <= now and (limit is None or len(out) < limit):
            _, _, record = heapq.heappop(box)
            out.append((record.src, record.message))
        return out

    def untaken(self) -> list[Post]:
        """Messages posted and not received yet (in flight or waiting in a mailbox)."""
        return [rec for box in self._mail.values() for _, _, rec in box]

    def sent(self, src: int, dest: int, kind: str | None = None) -> list[Post]:
        """What ``src`` posted to ``dest`` (of ``kind``), in order."""
        return [p for p in self.posts
                if p.src == src and p.dest == dest and (kind is None or p.kind == kind)]


# --------------------------------------------------------------------------- worker
#: The worker is busy (computing or slowed) for ``seconds``: the loop's own :class:`Wait`.
Sleep = Wait


@dataclass(frozen=True)
class Send:
    """The worker sends a commit (nonblocking: it goes on at once)."""

    header: dict[str, float]
    agg: Arrays


@dataclass(frozen=True)
class Hang:
    """The worker never does anything again (a silent worker)."""


Command = Sleep | Poll | Send | Hang


@dataclass(frozen=True)
class Snapshot:
    """A shard's traversal position and per-point state at one moment."""

    cursor: int
    scanned: int
    visited: int
    state: dict[str, np.ndarray]

    @classmethod
    def of(cls, store: ShardStore) -> Snapshot:
        return cls(store.cursor, store.scanned, store.visited,
                   {k: v.copy() for k, v in store.state.items()})

    def same_as(self, other: Snapshot) -> bool:
        """Same position and the same per-point state."""
        return ((self.cursor, self.scanned, self.visited)
                == (other.cursor, other.scanned, other.visited)
                and self.state.keys() == other.state.keys()
                and all(np.array_equal(self.state[k], other.state[k]) for k in self.state))


@dataclass
class Iteration:
    """One iteration of a simulated worker, from θ received to commit sent."""

    rank: int
    version: int
    instructions: Instructions
    began: float
    start: Snapshot                # shard right after the policy's begin (mark/rollback done)
    ended: float = float("nan")
    reason: Reason | None = None
    header: dict[str, float] = field(default_factory=dict)
    end: Snapshot | None = None    # shard after the policy's finish (an abort rolled back)
    signals: list[tuple[float, Signal]] = field(default_factory=list)  # seen, when


def _const(value: float) -> Callable[[float], float]:
    return lambda t: value


class SimWorker:
    """One simulated worker; implements :class:`flegel.ports.WorkerPort` on the sim clock.

    Its :meth:`run` generator runs the runtime's worker loop (:func:`flegel.runtime.loop.work`)
    as :meth:`flegel.runtime.worker.Worker.run` does; what takes wall time there yields a
    :class:`Sleep` here; it implements the loop's ``WorkerHost`` on the simulated clock.

    Parameters
    ----------
    rank : int
    clock : SimClock
    algorithm : Algorithm
    store : ShardStore
    policy : WorkerPolicy
    agg_layout : Layout
        Layout of aggregators on the wire.
    cost_s : float
        Compute time of one point.
    slowdown : callable
        Sim time -> factor multiplying ``cost_s`` (a slower CPU; the block sizer sees it).
    stragglers : Stragglers
        Real straggler patterns, driven by simulated time.
    block_ms : float
        The block sizer's target.
    block_points : int or None
        A fixed block size instead of the sizer's.
    silent : bool
        Receive the first instructions, then never answer again.
    jitter : float
        Each block's duration is scaled by ``1 + jitter·u``, u uniform in [-1, 1] from
        ``rng`` (noise that puts workers' blocks out of phase, as on a real machine).
    rng : numpy Generator, optional
        Seeded source of the jitter.
    peers : sequence of int
        The other workers' ranks (``WorkerPort.peers``).
    network : Network, optional
        Worker-to-worker messaging (``post``, ``receive``, ``sends_pending``).
    sleep : callable, optional
        ``sleep(seconds)``: let simulated time pass inline, the rest of the simulation going
        on (``WorkerPort.pause``; :meth:`Simulation._sleep_inline`).
    """

    def __init__(self, rank: int, clock: SimClock, algorithm: Algorithm, store: ShardStore,
                 policy: WorkerPolicy, agg_layout: Layout, cost_s: float,
                 slowdown: Callable[[float], float], stragglers: Stragglers,
                 block_ms: float = 1.0, block_points: int | None = None,
                 silent: bool = False, jitter: float = 0.0,
                 rng: np.random.Generator | None = None, peers: Sequence[int] = (),
                 network: Network | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        self._rank = rank
        self.clock = clock
        self.algorithm = algorithm
        self.store = store
        self.policy = policy
        self.agg_layout = agg_layout
        self.cost_s = cost_s
        self.slowdown = slowdown
        self.stragglers = stragglers
        self.sizer = BlockSizer(target_s=block_ms / 1000.0)
        self.block_points = block_points
        self.silent = silent
        self.jitter = jitter
        self.rng = rng if rng is not None else np.random.default_rng(rank)
        self.theta: Arrays = {}
        self.iteration_clock = 0
        self.debt_s = 0.0
        self._peers = [int(r) for r in peers]
        self.network = network
        self._sleep = sleep
        self.order_inbox: list[MigrationOrder] = []
        self.side: dict[str, Any] = {}  # what policy.on_stop returned
        # Poll while waiting for θ only when the policy does work there (as the real loop
        # does; skipping the no-op polls keeps the other models' event counts down).
        self.polls_while_waiting = (type(policy).while_waiting
                                    is not WorkerPolicy.while_waiting)
        self.signal_inbox: list[tuple[float, dict[str, float]]] = []
        self.params_inbox: list[tuple[dict[str, float], Arrays | None]] = []
        self.iterations: list[Iteration] = []
        self.final_header: dict[str, float] | None = None
        self.points = 0
        self.aborted_points = 0
        self.slowed_s = 0.0
        self.wait_s = 0.0
        self.last_wait_s = 0.0
        self.stragglers.clock = self.now
        self._current: Iteration | None = None

    # ------------------------------------------------------------------ WorkerPort
    def now(self) -> float:
        return self.clock()

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
        return self._rank

    @property
    def peers(self) -> list[int]:
        return list(self._peers)

    def _net(self) -> Network:
        if self.network is None:
            raise RuntimeError(f"worker {self.rank} has no network (migration needs one)")
        return self.network

    def post(self, dest: int, message: PeerMessage) -> None:
        self._net().post(self.rank, dest, message)

    def sends_pending(self, dest: int | None = None) -> int:
        return 0 if self.network is None else self.network.sends_pending(self.rank, dest)

    def receive(self, limit: int | None = None) -> list[tuple[int, PeerMessage]]:
        return [] if self.network is None else self.network.receive(self.rank, limit)

    def orders(self) -> list[MigrationOrder]:
        out, self.order_inbox = self.order_inbox, []
        return out

    def pause(self) -> None:
        """Sleep one poll interval (``POLL_MAX_S``) of simulated time; the rest of the
        simulation goes on meanwhile."""
        if self._sleep is None:
            raise RuntimeError(f"worker {self.rank} cannot pause outside a Simulation")
        self._sleep(POLL_MAX_S)

    # ------------------------------------------------------------------ state
    @property
    def finished(self) -> bool:
        """It received the stop flag and left its loop."""
        return self.final_header is not None

    def side_work(self) -> None:
        """No exact evaluations on the simulated clock (the server here makes none)."""

    def slow(self, points: int, compute_s: float) -> tuple[float, float]:
        """:meth:`flegel.runtime.stragglers.Stragglers.after_block`, on the simulated clock."""
        return self.stragglers.after_block(points, compute_s)

    def poll_signal(self, version: float) -> Signal:
        """Signals delivered by now, for ``version``: the strongest (older ones dropped)."""
        now = self.now()
        arrived = [sig for at, sig in self.signal_inbox if at <= now]
        self.signal_inbox = [(at, sig) for at, sig in self.signal_inbox if at > now]
        kind = strongest(arrived, version)
        if kind and self._current is not None:
            self._current.signals.append((now, kind))
        return kind

    # ------------------------------------------------------------------ WorkerHost
    def wall_time(self) -> float:
        return self.now()

    def take_params(self) -> dict[str, float] | None:
        if not self.params_inbox:
            return None
        header, theta = self.params_inbox.pop(0)
        if header["has_theta"]:
            assert theta is not None
            self.theta = theta
        return header

    def wait_params(self) -> Generator[Command, Any, dict[str, float]]:
        """The loop's wait for θ (:func:`flegel.runtime.loop.await_params`), timed as
        :meth:`flegel.runtime.worker.Worker.wait_params` times it (a suspension served
        meanwhile is slowed time too: the loop counts it, through :meth:`add`)."""
        t0 = self.now()
        header = yield from await_params(self)
        self.last_wait_s = self.now() - t0
        self.wait_s += self.last_wait_s
        return header

    def block_size(self) -> int:
        return self.block_points or self.sizer.size

    def compute(self, block: Block, t: int) -> Generator[Command, Any, tuple[Arrays, float]]:
        """The kernel, real; its time, simulated (per-point cost, slowdown, jitter)."""
        delta = self.algorithm.update_block(block, self.theta, t)
        dt = len(block) * self.cost_s * self.slowdown(self.now())
        if self.jitter:
            dt *= 1.0 + self.jitter * self.rng.uniform(-1.0, 1.0)
        if dt > 0:
            yield Sleep(dt)
        return delta, dt

    def began(self, version: int, instructions: Instructions) -> Generator[Command, Any, None]:
        """Record the iteration (the shard as the policy's begin left it); a silent worker
        hangs here."""
        self._current = Iteration(self.rank, version, instructions, self.now(),
                                  Snapshot.of(self.store))
        self.iterations.append(self._current)
        if self.silent:
            yield Hang()

    def add(self, totals: Totals) -> None:
        self.points += totals.points
        self.slowed_s += totals.slowed_s
        self.aborted_points += totals.aborted

    def commit(self, agg: Arrays, fields: dict[str, float]) -> Generator[Command, Any, None]:
        """Through the real COMMIT header and aggregator layout, then :class:`Send`."""
        buf = np.empty(COMMIT.size + self.agg_layout.size)
        COMMIT.write(buf, sent_at=self.now(), **fields)
        wire = self.agg_layout.unpack(self.agg_layout.pack(agg, buf[COMMIT.size:]))
        commit = COMMIT.read(buf)
        assert self._current is not None
        self._current.reason = Reason(int(fields["reason"]))
        self._current.ended = self.now()
        self._current.header = commit
        self._current.end = Snapshot.of(self.store)
        self._current = None
        yield Send(commit, wire)

    def run(self) -> Generator[Command, Any, None]:
        """The worker's life: θ⁰ (preloaded once), then the runtime's loop until the stop
        flag, then the policy's ``on_stop``."""
        yield from self.wait_params()
        self.stragglers.reset_clock()
        header = yield from work(self)
        self.side = self.policy.on_stop(self)
        self.final_header = header


# --------------------------------------------------------------------------- simulation
class SimulationCapError(RuntimeError):
    """The simulation reached its cap on simulated time or events before the server was
    done: a policy that never finishes fails a test instead of hanging it."""


@dataclass
class Arrival:
    """One commit as the server received it."""

    time: float
    rank: int
    header: dict[str, float]
    version_before: int
    version_after: int
    sent_from: int   # index of the first PARAMS message sent while it was dispatched
    late: bool       # it arrived after training ended (answered with the stop flag)
    agg: Arrays = field(repr=False, default_factory=dict)


#: Event kinds, in the order they are processed at one instant: commits first (the server
#: polls before it ticks), then deliveries to workers (migration orders before the PARAMS
#: they precede), then workers resuming, then the tick.
_COMMIT, _ORDER, _PARAMS, _SIGNAL, _RESUME, _TICK = range(6)


def slow_then_fast(factor: float, until_s: float) -> Callable[[float], float]:
    """A transient slowdown: ``factor`` times slower until ``until_s``, normal afterwards."""
    return lambda t: factor if t < until_s else 1.0


def noisy_speed(seed: int, lo: float = 1.0, hi: float = 2.5,
                period_s: float = 0.05) -> Callable[[float], float]:
    """A speed factor redrawn uniformly in [lo, hi] every ``period_s`` of simulated time:
    a worker whose speed only fluctuates (ranks sharing cores), no straggler."""
    factors = np.random.default_rng(seed).uniform(lo, hi, size=100_000)
    return lambda t: float(factors[int(t / period_s) % len(factors)])


class Simulation:
    """The real server, master policy and worker policies of one sync model, on simulated
    time (see the module docstring for what is and is not modelled).

    Parameters
    ----------
    model : str
        A key of :data:`flegel.sync.MODELS`.
    options : mapping, optional
        The ``sync`` options given (completed with defaults by :func:`sync_options`).
    workers : int
        Number of workers (ranks 1..workers).
    points : int
        Size of the default data set (:func:`blobs`).
    data : ndarray, optional
        All points, split into ``workers`` contiguous shards (default: ``points`` points of
        :func:`blobs`).
    shards : sequence of ndarray, optional
        The shards themselves (overrides ``data``).
    labels : sequence of ndarray, optional
        Each shard's labels (a supervised algorithm's), in the order of ``shards``.
    algorithm : Algorithm, optional
        Default: K-means (4 clusters, or as many as ``theta0`` has).
    theta0 : dict, optional
        θ⁽⁰⁾ (default: for the default data and algorithm, centres near the true ones
        (:func:`blobs`); otherwise ``algorithm.init_parameter`` on the data).
    cost_s : float or sequence
        Compute time per point, one for all or one per worker.
    slowdown : mapping
        rank -> a factor, or a function of sim time returning one, multiplying its cost.
    stragglers : list of dict
        Job-style straggler entries (``pattern``, ``workers`` and options; defaults filled
        from :mod:`flegel.runtime.stragglers`), applied on the simulated clock.
    silent : iterable of int
        Ranks that receive their first instructions and then never answer.
    latency_s : float
        One-way message latency.
    bandwidth_Bps : float
        Bytes per second of each worker's link for worker-to-worker (migration) messages
        (:class:`Network`).
    on_barrier : callable, optional
        ``on_barrier(sim, event)`` right after each barrier's event is recorded (every worker
        has committed and waits; the next θ and orders are not sent yet): where tests check
        invariants over every worker's shard.
    poll_s : float
        The master's tick interval (its poll loop).
    block_ms, block_points
        The workers' block sizer target, or a fixed block size.
    jitter : float
        Relative noise of every block's duration (seeded, see :class:`SimWorker`).
    stop : mapping
        :class:`flegel.runtime.stopping.StopCriteria` arguments.
    stall_warning_s, trace_points
        As for :class:`~flegel.runtime.server.Server`.
    seed : int
    max_sim_s, max_events : float, int
        Caps: past either, :meth:`run` raises :class:`SimulationCapError`.
    own_algorithms : bool
        Give every worker its own copy of ``algorithm`` (one instance per process, as in a
        real run; K-means' stratified estimate, ``KMeans.stratify``, needs it).  Default: one
        instance shared by the workers.
    sample_rows : int or None
        Give ``algorithm.init_parameter`` each worker's seeded uniform sample of this many
        rows of its shard, in rank order, with ``DataInfo.sample_sizes``, as ``flegel.run``
        does (K-means' master sample of each shard, ``KMeans._resampled``); a ``theta0``
        given is laid over the θ it makes, and the master's sample keys are made again on it
        (``_set_samples``: K-means' ``stratum_balanced`` decided at the θ⁰ the run starts
        from).  Default: the whole data as the sample, no sizes.
    """

    def __init__(self, model: str, options: Mapping[str, Any] | None = None, *,
                 workers: int = 3, points: int = 600, data: np.ndarray | None = None,
                 shards: Sequence[np.ndarray] | None = None,
                 labels: Sequence[np.ndarray] | None = None,
                 algorithm: Algorithm | None = None, theta0: Arrays | None = None,
                 cost_s: float | Sequence[float] = 10e-6,
                 slowdown: Mapping[int, float | Callable[[float], float]] | None = None,
                 stragglers: Sequence[Mapping[str, Any]] = (), silent: Iterable[int] = (),
                 latency_s: float = 50e-6, bandwidth_Bps: float = 1e8,
                 on_barrier: Callable[[Simulation, dict[str, Any]], None] | None = None,
                 poll_s: float = POLL_S, block_ms: float = 0.2,
                 block_points: int | None = None, jitter: float = 0.0,
                 stop: Mapping[str, Any] | None = None, stall_warning_s: float = 10.0,
                 trace_points: int = 0, seed: int = 0, max_sim_s: float = 60.0,
                 max_events: int = 2_000_000, own_algorithms: bool = False,
                 sample_rows: int | None = None) -> None:
        self.model = model
        self.options = sync_options(model, **dict(options or {}))
        self.clock = SimClock()
        self.latency_s = latency_s
        self.poll_s = poll_s
        self.max_sim_s = max_sim_s
        self.max_events = max_events
        self.ranks = list(range(1, workers + 1))
        default = algorithm is None and data is None and shards is None
        if shards is None:
            if data is None:
                data, centres0 = blobs(n=points, seed=seed)
                if default and theta0 is None:
                    theta0 = kmeans_theta0(centres0)
            shards = np.array_split(np.asarray(data), workers)
        if len(shards) != workers:
            raise ValueError(f"{len(shards)} shards for {workers} workers")
        self.shards = [np.ascontiguousarray(s) for s in shards]
        self.labels = (None if labels is None
                       else [np.ascontiguousarray(y) for y in labels])
        x_all = np.concatenate(self.shards)
        if algorithm is None:
            from flegel.algorithms.kmeans import KMeans

            algorithm = KMeans(n_clusters=4 if theta0 is None else len(theta0["centers"]))
        self.algorithm = algorithm
        if sample_rows is not None:  # flegel.run's samples: each worker's share, in rank order
            rng = np.random.default_rng(seed)
            samples = [s[np.sort(rng.choice(len(s), min(sample_rows, len(s)), replace=False))]
                       for s in self.shards]
            info = DataInfo(n_features=x_all.shape[1], n_points=len(x_all), n_workers=workers,
                            sample=np.concatenate(samples), seed=seed, dtype=x_all.dtype,
                            base_dir=Path.cwd(), sample_sizes=tuple(map(len, samples)))
            given = theta0
            theta0 = {**algorithm.init_parameter(info), **(given or {})}
            if given is not None and hasattr(algorithm, "_set_samples"):
                # the master's samples decided again on the θ⁰ given (K-means' skew test at
                # θ⁰, stratum_balanced, reads its centres), not on init_parameter's seeding
                algorithm._set_samples(info, theta0)
        elif theta0 is None:
            info = DataInfo(n_features=x_all.shape[1], n_points=len(x_all), n_workers=workers,
                            sample=x_all, seed=seed, dtype=x_all.dtype, base_dir=Path.cwd())
            theta0 = algorithm.init_parameter(info)
        self.theta0 = theta0
        agg_layout = Layout.of(zero_aggregator(algorithm, theta0, x_all[0]))
        theta_layout = Layout.of(theta0)
        self.transport = FakeTransport(self.clock, latency_s, theta_layout, self._deliver)
        self.network = Network(self.clock, latency_s, bandwidth_Bps)
        self.on_barrier = on_barrier
        self.events: list[dict[str, Any]] = []
        self.stop_criteria = StopCriteria(**{"max_iterations": 30, "tolerance": None,
                                             **dict(stop or {})})
        self.server = Server(self.transport, self.ranks, algorithm, theta0, agg_layout.zeros,
                             self.stop_criteria, self._record, progress=None,
                             trace_points=trace_points, stall_warning_s=stall_warning_s,
                             clock=self.clock)
        self.server.shard_sizes = {r: len(s) for r, s in zip(self.ranks, self.shards)}
        if sample_rows is not None and self.labels is None:  # the master's sample (the gauge)
            self.server.sample, self.server.sample_sizes = (info.sample, None), info.sample_sizes
        cls = policy_class(model)
        costs = ([float(cost_s)] * workers if isinstance(cost_s, (int, float))
                 else [float(c) for c in cost_s])
        if len(costs) != workers:
            raise ValueError(f"{len(costs)} costs for {workers} workers")
        slow = dict(slowdown or {})
        specs = [dict(s) for s in stragglers]
        silent = set(silent)
        self.workers: dict[int, SimWorker] = {}
        for i, r in enumerate(self.ranks):
            f = slow.get(r, 1.0)
            n = len(self.shards[i])
            # Global ids as in the real run (flegel/run.py): rank << ID_SHIFT | row.
            ids = (np.int64(r) << ID_SHIFT) | np.arange(n, dtype=np.int64)
            store = ShardStore(self.shards[i], None if self.labels is None else self.labels[i],
                               algorithm.init_state(n, x_all.shape[1]), ids=ids)
            self.workers[r] = SimWorker(
                r, self.clock, copy.deepcopy(algorithm) if own_algorithms else algorithm, store,
                cls.WORKER(self.options), agg_layout,
                costs[i], f if callable(f) else _const(float(f)),
                Stragglers.for_rank(specs, r, seed), block_ms=block_ms,
                block_points=block_points, silent=r in silent, jitter=jitter,
                rng=np.random.default_rng([seed, r]),
                peers=[p for p in self.ranks if p != r], network=self.network,
                sleep=self._sleep_inline)
            self.workers[r].policy.attach(self.workers[r])  # as flegel.run does
        self.policy = cls(self.server, self.options)
        self.arrivals: list[Arrival] = []
        self.n_events = 0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._gens: dict[int, Generator[Command, Any, None]] = {}
        self._waiting: set[int] = set()
        self._tokens = {r: 0 for r in self.ranks}  # a resume is valid for one step only
        self._active: list[int] = []  # ranks whose generator is running (nested by pause)
        self._started = False
        self._t0 = 0.0

    # ------------------------------------------------------------------ events
    def _push(self, at: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, payload))

    def _deliver(self, at: float, rank: int, kind: str, message: Any) -> None:
        kinds = {"params": _PARAMS, "signal": _SIGNAL, "order": _ORDER}
        self._push(at, kinds[kind], (rank, message))

    def _record(self, event: dict[str, Any]) -> None:
        """The server's event sink: keep the event; after a barrier's, call ``on_barrier``."""
        self.events.append(event)
        if self.on_barrier is not None and "workers" in event:
            self.on_barrier(self, event)

    def _step(self, rank: int, value: Any = None) -> None:
        """Resume ``rank``'s generator with ``value`` until it sleeps, waits or ends."""
        if rank in self._active:
            raise RuntimeError(f"worker {rank} resumed while it runs (a pause re-entered it)")
        gen = self._gens[rank]
        w = self.workers[rank]
        self._tokens[rank] += 1  # any resume scheduled before is stale now
        self._active.append(rank)
        try:
            while True:
                try:
                    cmd = gen.send(value)
                except StopIteration:
                    return
                value = None
                if isinstance(cmd, Poll):
                    # Waiting for θ: resumed when it arrives, and after the poll interval
                    # when the policy works at polls (skipping no-op polls keeps the other
                    # models' event counts down).
                    if w.params_inbox:
                        continue
                    self._waiting.add(rank)
                    if w.polls_while_waiting:
                        self._push(self.clock() + cmd.seconds, _RESUME,
                                   (rank, self._tokens[rank]))
                    return
                if isinstance(cmd, Sleep):
                    self._push(self.clock() + cmd.seconds, _RESUME, (rank, self._tokens[rank]))
                    return
                if isinstance(cmd, Send):
                    self._push(self.clock() + self.latency_s, _COMMIT,
                               (rank, cmd.header, cmd.agg))
                    continue
                if isinstance(cmd, Hang):
                    return
                raise TypeError(f"unknown command {cmd!r}")
        finally:
            self._active.remove(rank)

    def _sleep_inline(self, seconds: float) -> None:
        """``WorkerPort.pause`` of the running worker: process every event due within
        ``seconds`` (other workers train, messages arrive, barriers happen), then move the
        clock there.  A worker resumed meanwhile that pauses too nests another such loop; the
        outer one then resumes at the later end (at most one poll late)."""
        until = self.clock() + seconds
        if until - self._t0 > self.max_sim_s:  # a wait that never ends must not hang a test
            raise SimulationCapError(f"{self.model}: a worker still pauses after "
                                     f"{self.max_sim_s} simulated s")
        self._run_events(until)
        if self.clock() < until:
            self.clock.advance_to(until)

    def _handle(self, kind: int, payload: Any) -> None:
        srv = self.server
        if kind == _COMMIT:
            rank, header, agg = payload
            before, sent, late = srv.version, len(self.transport.params), srv.reason is not None
            self.transport.inbox.append(Commit(rank, dict(header), agg, self.latency_s))
            srv.poll_once(self.policy)
            self.arrivals.append(Arrival(self.clock(), rank, header, before, srv.version, sent,
                                         late, agg))
        elif kind == _ORDER:
            rank, message = payload
            self.workers[rank].order_inbox.append(message)
        elif kind == _PARAMS:
            rank, message = payload
            w = self.workers[rank]
            w.params_inbox.append(message)
            if rank in self._waiting:
                self._waiting.discard(rank)
                self._step(rank)
        elif kind == _SIGNAL:
            rank, sig = payload
            self.workers[rank].signal_inbox.append((self.clock(), sig))
        elif kind == _RESUME:
            rank, token = payload
            if token == self._tokens[rank]:  # else: params woke it before this poll's end
                self._waiting.discard(rank)
                self._step(rank)
        elif kind == _TICK:
            if not srv.done:
                srv.poll_once(self.policy)  # nothing arrives between events: a tick
                self._push(self._tick_time(payload + 1), _TICK, payload + 1)

    def _tick_time(self, k: int) -> float:
        return self._t0 + k * self.poll_s

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        """Preload θ⁰, let it arrive, start the training clock and the master policy."""
        if self._started:
            return
        self._started = True
        for r in self.ranks:
            self._gens[r] = self.workers[r].run()
            self._step(r)
        self.server.preload()
        self._drain(until=self.latency_s)
        self._t0 = self.clock()
        self.server.begin(self.policy)
        self._push(self._tick_time(1), _TICK, 1)

    def _drain(self, until: float) -> None:
        while self._heap and self._heap[0][0] <= until:
            at, kind, _, payload = heapq.heappop(self._heap)
            self.clock.advance_to(at)
            self._handle(kind, payload)

    def run(self, strict: bool = True) -> Simulation:
        """Run until every worker has been told to stop and has left its loop.

        With ``strict`` (default), reaching ``max_sim_s`` or ``max_events`` first raises
        :class:`SimulationCapError`; otherwise the run just ends there.
        """
        self.start()
        try:
            if not self._run_events(None, strict):
                return self
        except SimulationCapError:
            if strict:
                raise
            return self  # a cap hit inside a worker's pause
        if self.server.done:
            self.server.close(lambda: self._sleep_inline(POLL_MAX_S))
        return self

    def _run_events(self, until: float | None, strict: bool = True) -> bool:
        """Process events in time order (up to ``until``, or all); False if a cap was hit
        without ``strict`` (with it, :class:`SimulationCapError`)."""
        srv = self.server
        while self._heap and (until is None or self._heap[0][0] <= until):
            at, kind, _, payload = heapq.heappop(self._heap)
            self.n_events += 1
            if at - self._t0 > self.max_sim_s or self.n_events > self.max_events:
                if strict:
                    raise SimulationCapError(
                        f"{self.model}: not done after {self.n_events} events and "
                        f"{self.clock() - self._t0:.3f} simulated s (version {srv.version}, "
                        f"stopped {[r for r, w in srv.workers.items() if w.stopped]})")
                return False
            self.clock.advance_to(at)
            self._handle(kind, payload)
        return True

    # ------------------------------------------------------------------ results
    @property
    def now(self) -> float:
        """Simulated seconds since training began."""
        return self.server.now()

    def objective(self, theta: Arrays | None = None) -> float:
        """The exact objective of ``theta`` (default: the server's) on all the data."""
        th = self.server.theta if theta is None else theta
        ys = self.labels or [None] * len(self.shards)
        return float(sum(self.algorithm.evaluate(th, Block.from_arrays(s, y))
                         for s, y in zip(self.shards, ys)))

    def iterations(self, rank: int) -> list[Iteration]:
        """``rank``'s iterations, in order."""
        return self.workers[rank].iterations

    # ------------------------------------------------------------------ migration
    @property
    def n_points(self) -> int:
        """Points of the whole data set."""
        return sum(len(s) for s in self.shards)

    def global_index(self, ids: np.ndarray) -> np.ndarray:
        """Positions in the concatenated data (:attr:`shards` in rank order) of point ids."""
        ids = np.asarray(ids, dtype=np.int64)
        starts = np.cumsum([0] + [len(s) for s in self.shards])
        origin = origin_of(ids)
        return starts[origin - 1] + (ids - (origin << ID_SHIFT))

    def in_transit(self) -> list[Post]:
        """Worker messages that move points (windows, reactivations) and were not received
        yet: their points are held by no worker at the moment."""
        return [p for p in self.network.untaken() if len(p.ids)]

    def census(self) -> tuple[np.ndarray, np.ndarray]:
        """Per point of the data set (:meth:`global_index` order): on how many workers it is
        active (held: not sent away), and in how many messages it travels."""
        active = np.zeros(self.n_points, dtype=np.int64)
        moving = np.zeros(self.n_points, dtype=np.int64)
        for w in self.workers.values():
            st = w.store
            np.add.at(active, self.global_index(st.ids[~st.inactive]), 1)
        for p in self.in_transit():
            np.add.at(moving, self.global_index(p.ids), 1)
        return active, moving

    def point_visits(self) -> np.ndarray:
        """Traversals of every point, wherever it is trained now (the active copy's count;
        a point in transit counts what it carries)."""
        out = np.full(self.n_points, -1, dtype=np.int64)
        for w in self.workers.values():
            st = w.store
            keep = ~st.inactive
            out[self.global_index(st.ids[keep])] = st.visits[keep]
        for p in self.in_transit():
            moving = p.message
            assert isinstance(moving, (Window, Reactivate))
            out[self.global_index(p.ids)] = moving.points["visits"]
        return out

    def barrier_events(self) -> list[dict[str, Any]]:
        """Events of barrier models (one per barrier, with per-worker columns)."""
        return [e for e in self.events if "workers" in e]

    def push_events(self) -> list[dict[str, Any]]:
        """Events of push models (one per push)."""
        return [e for e in self.events if "rank" in e and "staleness" in e]


# ------------------------------------------------------------------ a stand-in for CuPy
class DeviceArray(np.ndarray):
    """An array "on the device" of :func:`cupy_stand_in`: NumPy memory, CuPy's rules.

    Operations between device arrays give device arrays; an operation that mixes in a host
    array (a plain ``numpy.ndarray`` with at least one dimension) raises ``TypeError``, as
    CuPy does, so a kernel that forgot to copy an operand to the device fails here too.
    ``get()`` is the device-to-host copy.  Named as CuPy's module, so code that asks an
    array for its module (``algorithms/_common.py``) finds the stand-in.
    """

    __module__ = "cupy"

    def get(self) -> np.ndarray:
        """A host copy (``cupy.ndarray.get``)."""
        return np.array(self.view(np.ndarray), copy=True)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _reject_host(inputs, kwargs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(o) for o in kwargs["out"])
        return _on_device(getattr(ufunc, method)(*(_plain(a) for a in inputs), **kwargs))


def _plain(a: Any) -> Any:
    return a.view(np.ndarray) if isinstance(a, DeviceArray) else a


def _on_device(a: Any) -> Any:
    if type(a) is np.ndarray:
        return a.view(DeviceArray)
    if isinstance(a, (tuple, list)):
        return type(a)(_on_device(v) for v in a)
    return a


def _reject_host(args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
    for a in [*args, *kwargs.values()]:
        for v in (a if isinstance(a, (tuple, list)) else (a,)):
            if type(v) is np.ndarray and v.ndim > 0:
                raise TypeError("stand-in cupy: a host (NumPy) array in a device operation; "
                                "copy it with xp.asarray first")


def cupy_stand_in(n_devices: int = 1) -> types.ModuleType:
    """A stand-in ``cupy`` module that is NumPy underneath and keeps CuPy's boundary.

    For the GPU branches of the kernels on a machine without a GPU (install it with
    ``monkeypatch.setitem(sys.modules, "cupy", cupy_stand_in())`` and clear
    ``flegel.device.gpu_unavailable``'s cache).  Unlike ``tests/test_device.py``'s
    ``numpy_as_cupy``, device memory is separate: ``asarray``/``array`` of a host array
    copy it into a :class:`DeviceArray` and record the copy in the module's ``transfers``
    list (the host arrays copied, in order), so a test can count host-to-device copies;
    every other function takes device arrays only and gives device arrays.
    ``cuda.runtime.getDeviceCount()`` says ``n_devices``.
    """
    fake = types.ModuleType("cupy")
    transfers: list[Any] = []

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            _reject_host(args, kwargs)
            out = kwargs.get("out")
            if out is not None:
                kwargs["out"] = (tuple(_plain(o) for o in out) if isinstance(out, tuple)
                                 else _plain(out))
            return _on_device(fn(*(_plain(a) for a in args), **kwargs))
        return call

    def asarray(a: Any, dtype: Any = None, copy: bool = False) -> DeviceArray:
        if isinstance(a, DeviceArray):  # already on the device: a cast at most
            if not copy and (dtype is None or a.dtype == np.dtype(dtype)):
                return a
            return a.astype(dtype or a.dtype)
        transfers.append(a)
        return np.array(a, dtype=dtype, copy=True).view(DeviceArray)

    for name in dir(np):
        if name.startswith("_"):
            continue
        obj = getattr(np, name)
        if callable(obj) and not isinstance(obj, type):
            obj = wrap(obj)
        setattr(fake, name, obj)
    fake.asarray = asarray  # type: ignore[attr-defined]
    fake.array = functools.partial(asarray, copy=True)  # type: ignore[attr-defined]
    fake.lib = types.SimpleNamespace(  # type: ignore[attr-defined]
        stride_tricks=types.SimpleNamespace(as_strided=wrap(np.lib.stride_tricks.as_strided)))
    fake.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=types.SimpleNamespace(getDeviceCount=lambda: n_devices))
    fake.transfers = transfers  # type: ignore[attr-defined]
    return fake


def lloyd_step(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Lloyd's step in plain NumPy (a reference apart from :mod:`flegel.algorithms.kmeans`):
    each centre moves to the mean of its nearest points; a centre without points stays."""
    d2 = ((x[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
    labels = d2.argmin(axis=1)
    out = centers.copy()
    for k in range(len(centers)):
        if np.any(labels == k):
            out[k] = x[labels == k].mean(axis=0)
    return out
