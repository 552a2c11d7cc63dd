"""The exact objective of θ during training, at a bounded cost (issue 12, "decide and draw on
the exact objective").

The online objective (the sum of each point's loss as last seen) is the objective of no θ
under FSP and the asynchronous models: it ran 46% high after one pass and stopped target runs
early.  Progress lines, plots and the target stop use f(θ) instead, evaluated on *all* the
data by the workers that hold it:

* the master snapshots θ and sends it to every worker (:class:`ExactObjective`,
  :meth:`~ExactObjective.request`); at most one evaluation is in flight;
* each worker (:class:`Evaluator`) evaluates the snapshot on the points it holds, a chunk at
  a time between its training blocks and while it waits (so it still answers barriers
  promptly), and replies with its sum, the points it evaluated and a checksum of their ids;
* the master adds the replies.  The value is **exact** when the points evaluated are every
  point of the data set exactly once (count and id checksum match).  Under asynchronous data
  migration a window in flight during the evaluation may be counted twice or not at all;
  such a value is kept as an estimate (the mean per point times N) for progress and plots,
  and never used for the target stop.

Cost bound: an evaluation costs each worker about one pass without updates; its cost is
the slowest worker's evaluation seconds.  A request is made only when the evaluations so
far plus the next one's estimated cost stay within ``budget`` (``runtime.exact_budget``, 5%
by default) of the training time they end at: ``spent + est ≤ budget · (now + est)``.  The
estimate is the last evaluation's cost, and before the first one the slowest worker's
time for a pass at its training rate (an evaluation of θ⁽⁰⁾ at the start would cost a
short run a third of its time: measured on the main job).  The plots' curve from θ⁽⁰⁾ on
comes from the θ snapshots evaluated after training (``objective_trace``).

The target stop: once an exact value is at or below ``stop.target_objective``, training
stops and the evaluated snapshot becomes the final θ, so the final objective is the value
that met the target (later θs are usually better, but only this one is known to be).

Near the target: on the budget alone the evaluation that sees the target comes up to
``cost / budget`` (20 evaluations' cost) after θ reached it -- and before the first
evaluation the estimate is a training pass, which a straggler's injected delay or a CNN's
backward pass makes far dearer than an evaluation: on ``flegel paper --quick``'s last page
101 target runs trained 50.6 s past their time to target (one of main's runs here, the CNN
under FSPV at load 13: at the target at 0.57 s, no evaluation in its 4 s).  The online
objective tells when to look: once it is at or below the target, after every worker's first
pass (the server's ``time_to_target``,
:meth:`flegel.runtime.stopping.StopCriteria.reached_target`), the next θ is evaluated at
once, whatever the budget says, and later evaluations may take ``NEAR_BUDGET`` (25%) of
the training time from the end of that one on (counted from there, in this process: a share
counted from the start would let a late crossing spend the allowance saved up before it in
back-to-back evaluations, and a resumed run start with all of it): a run whose exact
objective is at the target is about to end.  The stop is still decided on the exact value
alone.  Once on, the near rule stays on (the online objective may rise again, or FSPV's probe
roll θ back): it then costs at most that share.  It does not make time to target later where
the online objective lags the exact one, as it does on K-means, GMM and LR -- where it runs
ahead (the CNN, below) the evaluations between the two crossings may delay the exact one by
up to one evaluation plus that share.  The online objective is a barrier's losses at
the θs it trained from, so where the exact objective falls it lags it (K-means, GMM, LR on
the page's contiguous shards, BSPV and FSPV, with and without a straggler: its crossing came
0.00-0.40 s *after* the exact one in 37 of 40 runs, never in 3 of GMM's, whose slack is
1e-5), and the evaluation it asks for costs the workers time after the target was reached,
not before; where it runs ahead (the CNN's SGD, whose exact values swing by 30% from one θ to
the next: 0.6-1.7 s before in 8 of 14 runs) the larger share bounds what the evaluations that
miss cost.  ``python bench/target_stop.py --main <main's python> --rounds 2`` (16 settings,
32 runs a side, load 15-19 on 2 cores): the training past time to target summed 30.8 s on
main, 11.2 s here (K-means, GMM, LR: 0.07-0.46 s a run, 0.09-3.30 s on main; the CNN, whose
evaluation costs 0.4-0.85 s at that load, 0.66-2.60 s, 0.68-2.84 s on main), training time
75.4 s on main against 55.9 s here, time to target 24.7 s on main against 24.6 s here (here /
main, the geometric mean of the settings' medians: 0.975); one round more (load 10-16): 16.1 s
on main against 6.2 s here past the target, 34.2 s against 25.3 s of training, time to target
11.1 s against 10.2 s (here / main 0.903).  (Measured with the share counted from the start
of the run; the review's window from the crossing came after.)
The CNN is what is left: its evaluation at the online crossing misses in most runs, and the
next one waits for the larger share.

After training (issue 14: its cost was 26 s of a 58 s run of ``kmeans_higgs``, as much as
loading and training together), :class:`FinalEvaluation` gives the summary's
``final_objective`` and ``objective_trace`` (the exact objective of the θ snapshots that
:class:`~flegel.runtime.server.Trace` keeps, ``output.trace_points``, and which time to
target is measured on) at a bounded cost:

* **reuse**: a θ evaluated exactly during training (the same arrays, found by
  :func:`fingerprint`) is never evaluated again; those evaluations join the trace too, so
  the trace holds every exact value the run knows;
* **one pass**: the θs left are evaluated together, each worker reading its points once,
  a chunk at a time, and evaluating every θ on each chunk (:func:`evaluate_snapshots`,
  the same :class:`Tally` as during training), not once per θ;
* **a budget**: the snapshots evaluated after training cost at most ``budget``
  (``output.trace_budget``) of the training time, estimated as one evaluation during
  training cost (else a pass at the training rate) per snapshot.  When more are pending, an
  evenly spread subset is chosen; with a target objective half of it is spread over the
  stretch where the exact values known so far cross the target (where time to target
  lies).  The rest are dropped and named in the summary's ``final_evaluation``
  (``dropped_s``: their times).  The final θ is always evaluated (or reused when it was
  evaluated during training, as after a target stop): the final objective stays exact.
  By default, without a target objective, where the trace only draws, the budget is the
  share exact evaluations may take during training (``runtime.exact_budget``, 5%), once more
  (on ``kmeans_higgs``: 2 θs evaluated after training, 1.2-1.5 s, where every snapshot,
  20-40, took 9-30 s); with one, there is none: time to target is measured on the trace,
  and a snapshot left out could only make it later or coarser, so every snapshot is
  evaluated, once, in the one pass.

Time to target keeps its meaning: the time of the first snapshot of the trace whose exact
objective is at or below the target (the evaluations during training are snapshots too).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from flegel.api import Algorithm
from flegel.block import Block
from flegel.ports import Arrays
from flegel.protocol import EvalEnd, EvalReply, EvalRequest
from flegel.runtime.blocksize import device_of
from flegel.runtime.store import ShardStore

#: ``runtime.exact_budget`` by default: the share of time spent on exact evaluations.
DEFAULT_BUDGET = 0.05
#: The share of time evaluations may take once the online objective reached the target
#: (module notes, "Near the target"): such a run is about to end.
NEAR_BUDGET = 0.25
#: Rows a worker evaluates per step (between two training blocks), at least; after training,
#: rows per chunk on the CPU (every θ is evaluated on a chunk while it is in cache: 1.5x
#: faster than a θ at a time over the whole shard for K-means on 1.4M x 28 points).
CHUNK_ROWS = 4096
#: Rows per chunk after training on a GPU: a kernel call's fixed cost is larger there.
GPU_CHUNK_ROWS = 1 << 18
#: Multiplier of ids in the checksum (odd, so every id maps to a distinct residue mod 2⁶⁴).
_MIX = np.uint64(0x9E3779B97F4A7C15)


def id_checksum(ids: np.ndarray) -> int:
    """An order-free checksum of point ids (sum of mixed ids mod 2⁶⁴): equal sums over two
    sets of ids of the same size mean, with overwhelming probability, the same set."""
    with np.errstate(over="ignore"):
        return int((np.asarray(ids, dtype=np.int64).astype(np.uint64) * _MIX).sum(
            dtype=np.uint64))


def fingerprint(theta: Arrays) -> bytes:
    """A digest of θ's arrays (names, dtypes, shapes, bytes): equal digests mean the same θ,
    so a value found for one snapshot serves every copy of it."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(theta):
        a = np.ascontiguousarray(theta[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.digest()


@dataclass
class Tally:
    """One pass over the points a worker holds, evaluating one or more θs a chunk at a time.

    The one evaluation mechanism: during training (one θ, a chunk between blocks,
    :class:`Evaluator`) and after it (every pending θ on each chunk,
    :func:`evaluate_snapshots`).
    """

    thetas: list[Arrays]
    values: list[float]
    count: int = 0      # points evaluated
    checksum: int = 0   # their ids' :func:`id_checksum`
    seconds: float = 0.0
    row: int = 0        # the next row of the store

    @classmethod
    def of(cls, thetas: Sequence[Arrays]) -> Tally:
        return cls(list(thetas), [0.0] * len(thetas))

    def advance(self, algorithm: Algorithm, store: ShardStore, rows: int) -> bool:
        """Evaluate every θ on the next ``rows`` rows of ``store`` (rows sent away to
        another worker skipped: they count there); True once the pass reached the end."""
        t0 = time.perf_counter()
        start = self.row
        stop = min(len(store), start + rows)
        inactive = store.inactive[start:stop]
        # A view of the rows where none is inactive: no copy of the data.
        sel: slice | np.ndarray = (slice(start, stop) if not inactive.any()
                                   else np.flatnonzero(~inactive) + start)
        ids = store.ids[sel]
        if len(ids):
            block = Block(store.x[sel], None if store.y is None else store.y[sel],
                          {k: v[sel] for k, v in store.state.items()},
                          np.zeros(len(ids), dtype=bool))
            for i, theta in enumerate(self.thetas):
                self.values[i] += float(algorithm.evaluate(theta, block))
            self.count += len(ids)
            self.checksum = (self.checksum + id_checksum(ids)) % (1 << 64)
        self.row = stop
        self.seconds += time.perf_counter() - t0
        return stop >= len(store)

    def reply(self, request: int = 0) -> EvalReply:
        """What a worker tells the master about the pass (``request``: the id of the request
        it answers during training; 0 after training)."""
        return EvalReply(request, list(self.values), self.count, self.checksum, self.seconds)


def evaluate_snapshots(algorithm: Algorithm, store: ShardStore,
                       thetas: Sequence[Arrays]) -> EvalReply:
    """After training: f of every θ of ``thetas`` on the points this worker holds, in one
    pass over them, each chunk read once for every θ.  The chunks have a fixed size
    (:data:`CHUNK_ROWS`, :data:`GPU_CHUNK_ROWS` for an algorithm on a GPU), not the timed
    block size: the same θ on the same shard sums to the same value, bit for bit
    (``docs/determinism.md``).  Returns :meth:`Tally.reply` (nothing evaluated when
    ``thetas`` is empty)."""
    rows = GPU_CHUNK_ROWS if device_of(algorithm) == "gpu" else CHUNK_ROWS
    tally = Tally.of(thetas)
    if tally.thetas:
        while not tally.advance(algorithm, store, rows):
            pass
    return tally.reply()


# ================================================================================ master
class EvalTransport(Protocol):
    """What the master needs to reach the workers for evaluations."""

    def send_eval(self, rank: int, message: EvalRequest | EvalEnd) -> None: ...

    def poll_evals(self) -> list[tuple[int, EvalReply]]: ...


@dataclass
class Evaluation:
    """One exact evaluation of a θ snapshot."""

    id: int
    version: int
    time_s: float            # when θ was snapshotted (training time)
    theta: dict[str, np.ndarray] = field(repr=False)
    replies: dict[int, EvalReply] = field(default_factory=dict)
    value: float | None = None
    exact: bool = False
    done_s: float | None = None
    cost_s: float = 0.0


class ExactObjective:
    """The master's side: schedule evaluations, add the replies, keep the trace.

    Parameters
    ----------
    ranks : list of int
        The workers.
    n_points : int
        Points in the data set.
    checksum : int
        :func:`id_checksum` of every point id of the data set.
    budget : float
        Share of time spent on evaluations (0 < budget < 1).
    """

    def __init__(self, ranks: list[int], n_points: int, checksum: int,
                 budget: float = DEFAULT_BUDGET) -> None:
        if not 0 < budget < 1:
            raise ValueError(f"exact-objective budget must be in (0, 1), got {budget}")
        self.ranks = list(ranks)
        self.n_points = n_points
        self.checksum = checksum
        self.budget = budget
        self.pending: Evaluation | None = None
        self.done: list[Evaluation] = []
        self.sent: dict[int, int] = {r: 0 for r in self.ranks}
        self.replied: dict[int, int] = {r: 0 for r in self.ranks}
        self._ids = 0

    # ------------------------------------------------------------------ scheduling
    def due(self, now: float, pass_s: float | None = None,
            near_s: float | None = None) -> bool:
        """Whether to request an evaluation now: within the budget, or near the target
        (module notes, "Near the target").

        Parameters
        ----------
        now : float
            Training time (s).
        pass_s : float, optional
            The slowest worker's seconds for one pass at its training rate (the cost
            estimate before the first evaluation); None: unknown yet.
        near_s : float, optional
            When the online objective first reached the target (``stop.target_objective``,
            after every worker's first pass); None: it has not, or there is no target.

        Returns
        -------
        bool
            Whether to request one (never while one is in flight).
        """
        if self.pending is not None:
            return False
        if near_s is not None:
            since = [e for e in self.done if e.time_s >= near_s]
            if not since:
                return True  # the first θ since the crossing: at once, whatever it costs
            # The larger share counts from the end of that first evaluation, in this
            # process (a resumed run's too), so no allowance saved up over the run before
            # the crossing is spent at once in back-to-back evaluations (review of ts).
            first = since[0]
            start = first.done_s if first.done_s is not None else first.time_s + first.cost_s
            later = sum(e.cost_s for e in since[1:])
            last = self.done[-1].cost_s
            if later + last <= NEAR_BUDGET * max(now - start + last, 0.0):
                return True
        est = self.done[-1].cost_s if self.done else pass_s
        if est is None:
            return False
        spent = sum(e.cost_s for e in self.done)
        return spent + est <= self.budget * (now + est)

    def request(self, transport: EvalTransport, theta: dict[str, np.ndarray], version: int,
                now: float) -> None:
        """Snapshot θ and ask every worker to evaluate it."""
        snap = {k: np.array(v, copy=True) for k, v in theta.items()}
        self._ids += 1
        self.pending = Evaluation(self._ids, version, now, snap)
        for r in self.ranks:
            transport.send_eval(r, EvalRequest(self._ids, snap))
            self.sent[r] += 1

    def collect(self, transport: EvalTransport, now: float) -> Evaluation | None:
        """Take the replies that arrived; return the evaluation they completed, if any."""
        finished = None
        for rank, reply in transport.poll_evals():
            self.replied[rank] += 1
            ev = self.pending
            if ev is None or reply.id != ev.id:
                continue  # an answer to a request made before the end: nothing to do
            ev.replies[rank] = reply
            if len(ev.replies) == len(self.ranks):
                self._complete(ev, now)
                finished = ev
        return finished

    def _complete(self, ev: Evaluation, now: float) -> None:
        # in rank order, not arrival order: the same θ gives the same bits in every run
        replies = [ev.replies[r] for r in sorted(ev.replies)]
        total = float(sum(r.value for r in replies))
        count = int(sum(r.count for r in replies))
        checksum = sum(int(r.checksum) for r in replies) % (1 << 64)
        ev.exact = count == self.n_points and checksum == self.checksum
        ev.value = total if ev.exact or count == 0 else total * self.n_points / count
        ev.done_s = now
        ev.cost_s = max(float(r.seconds) for r in replies)
        self.pending = None
        self.done.append(ev)

    # ------------------------------------------------------------------ reading
    @property
    def latest(self) -> Evaluation | None:
        return self.done[-1] if self.done else None

    def reached(self, target: float | None) -> Evaluation | None:
        """The latest evaluation, if it is exact and at or below ``target``."""
        ev = self.latest
        if target is None or ev is None or not ev.exact or ev.value is None:
            return None
        return ev if ev.value <= target else None

    def trace(self) -> list[dict[str, Any]]:
        """Every completed evaluation, for summary.json and the reports."""
        return [{"time_s": round(e.time_s, 6), "version": e.version, "objective": e.value,
                 "exact": e.exact, "cost_s": round(e.cost_s, 6)} for e in self.done]

    def summary(self, train_s: float) -> dict[str, Any]:
        cost = sum(e.cost_s for e in self.done)
        return {"evaluations": len(self.done), "budget": self.budget,
                "cost_s": round(cost, 6),
                "cost_fraction": round(cost / train_s, 4) if train_s > 0 else None,
                "inexact": sum(not e.exact for e in self.done)}

    # ------------------------------------------------------------------ the end
    def finish(self, transport: EvalTransport, wait: Callable[[], None]) -> None:
        """After training: tell every worker no request follows (it answers those still
        queued first: same tag, same order), and take every reply still owed, so that no
        message is left unreceived.  ``wait()`` runs between polls (it sleeps, and may
        raise to end a stalled job)."""
        for r in self.ranks:
            transport.send_eval(r, EvalEnd())
        while any(self.replied[r] < self.sent[r] for r in self.ranks):
            for rank, _ in transport.poll_evals():
                self.replied[rank] += 1
            wait()
        self.pending = None


# ================================================================================ after training
@dataclass
class _Snapshot:
    """A θ of the trace: when it was taken, and its exact objective once known."""

    time_s: float
    key: bytes                  # :func:`fingerprint` of θ
    value: float | None = None
    reused: bool = False        # known from an evaluation during training


def _spread(k: int, m: int) -> list[int]:
    """``m`` of the indices ``0..k-1`` (m ≤ k), evenly spread: the middle of each of m
    equal stretches."""
    return [int((j + 0.5) * k / m) for j in range(m)]


class FinalEvaluation:
    """After training: the exact objective of the final θ and of the trace's snapshots,
    each θ evaluated at most once, all in one pass, the snapshots within a budget (the
    module docstring says how).

    Use: :attr:`thetas` go to every worker, which answers :func:`evaluate_snapshots`;
    :meth:`complete` takes the answers; then :attr:`final_objective`, :meth:`trace` and
    :meth:`summary` hold the results.

    Parameters
    ----------
    times, thetas : sequences
        The trace's snapshots (:class:`flegel.runtime.server.Trace`), in time order.
    final : dict
        The final θ: the model saved.
    train_s : float
        Training time; the final θ's point of the trace.
    during : list of Evaluation
        The evaluations made during training; exact ones are reused.
    cost_s : float or None
        Estimated seconds one θ costs the slowest worker; None: unknown (no cap).
    budget : float or None
        Share of ``train_s`` the snapshots may cost; None: every one is evaluated.
    target : float or None
        ``stop.target_objective``: the snapshots where it is crossed come first.
    expected : (int, int) or None
        Points of the data set and :func:`id_checksum` of their ids, to check that every
        point was evaluated once; None: not checked.
    """

    def __init__(self, times: Sequence[float], thetas: Sequence[Arrays], final: Arrays,
                 train_s: float, during: Sequence[Evaluation] = (),
                 cost_s: float | None = None, budget: float | None = None,
                 target: float | None = None, expected: tuple[int, int] | None = None
                 ) -> None:
        self.train_s = train_s
        self.budget = budget
        self.cost_s = cost_s
        self.expected = expected
        known = {fingerprint(e.theta): e for e in during if e.exact and e.value is not None}
        self.snapshots = [_Snapshot(t, fingerprint(th)) for t, th in zip(times, thetas)]
        by_key = {s.key: th for s, th in zip(self.snapshots, thetas)}
        for s in self.snapshots:
            if s.key in known:
                s.value, s.reused = known[s.key].value, True
        # Evaluations during training of θs the trace did not keep join it as they are.
        self.extra = [_Snapshot(e.time_s, k, e.value, True) for k, e in known.items()
                      if k not in by_key]
        final_key = self._final_key = fingerprint(final)
        self.final_objective: float | None = (known[final_key].value if final_key in known
                                              else None)
        self.final_reused = self.final_objective is not None
        # Distinct θs without a value, in time order; a copy of the final θ waits for it.
        pending = list(dict.fromkeys(s.key for s in self.snapshots
                                     if s.value is None and s.key != final_key))
        chosen = self._choose(pending, target)
        left_out = set(pending) - set(chosen)
        self.dropped = [s for s in self.snapshots if s.key in left_out]
        self.keys = ([] if self.final_reused else [final_key]) + chosen
        #: The θs every worker evaluates, in one pass.
        self.thetas: list[Arrays] = [final if k == final_key else by_key[k] for k in self.keys]
        self.measured_s: float | None = None
        self.exact: bool | None = None

    def _cap(self, pending: int) -> int:
        """How many pending snapshots the budget allows."""
        if self.budget is None or not self.cost_s or self.cost_s <= 0:
            return pending
        return min(pending, int(self.budget * self.train_s / self.cost_s))

    def _choose(self, pending: list[bytes], target: float | None) -> list[bytes]:
        """The pending θs to evaluate: all within the budget, else an evenly spread subset,
        half of it (or what the rest leaves) where the known values cross ``target``."""
        n = self._cap(len(pending))
        if n >= len(pending):
            return pending
        first: dict[bytes, float] = {}  # each pending θ's first time in the trace
        for s in self.snapshots:
            first.setdefault(s.key, s.time_s)
        inside: list[bytes] = []
        if target is not None:
            known = sorted([(s.time_s, s.value) for s in self.snapshots + self.extra
                            if s.value is not None]
                           + ([(self.train_s, self.final_objective)]
                              if self.final_objective is not None else []))
            hi = next((t for t, v in known if v <= target), float("inf"))
            lo = max((t for t, v in known if v > target and t < hi), default=-float("inf"))
            inside = [k for k in pending if lo < first[k] < hi]
        near = set(inside)
        outside = [k for k in pending if k not in near]
        m = min(len(inside), max((n + 1) // 2, n - len(outside)))
        picked = {inside[i] for i in _spread(len(inside), m)}
        picked |= {outside[i] for i in _spread(len(outside), n - m)}
        return [k for k in pending if k in picked]

    def complete(self, replies: Sequence[EvalReply]) -> None:
        """Add the workers' :func:`evaluate_snapshots` answers: the final objective and the
        snapshots' values."""
        values = [float(sum(r.values[i] for r in replies)) for i in range(len(self.keys))]
        got = dict(zip(self.keys, values))
        if not self.final_reused:
            self.final_objective = values[0]
        for s in self.snapshots:
            if s.value is None and s.key in got:
                s.value = got[s.key]
        if self.keys:
            self.measured_s = max(r.seconds for r in replies)
            if self.expected is not None:
                count = sum(r.count for r in replies)
                checksum = sum(r.checksum for r in replies) % (1 << 64)
                self.exact = (count, checksum) == self.expected

    def trace(self) -> list[tuple[float, float]]:
        """``objective_trace``: every snapshot with an exact value, in time order, then the
        final θ at the end of training -- unless the final θ is a snapshot the trace holds
        *before* later ones: a target stop keeps the snapshot that met the target
        (:meth:`flegel.runtime.server.Server.exact_step`) while training went on until the
        stop took effect, and that θ's point at the end would draw a rise no training step
        made (``flegel paper``'s Fig. 14 counted it as one).  Its value is in the trace at
        the time it was reached."""
        known = self.snapshots + self.extra
        points = sorted((s.time_s, float(s.value)) for s in known if s.value is not None)
        assert self.final_objective is not None, "complete() first"
        kept = [s.time_s for s in known if s.value is not None and s.key == self._final_key]
        if kept and any(t > max(kept) for t, _ in points):
            return points
        return points + [(self.train_s, self.final_objective)]

    def summary(self) -> dict[str, Any]:
        """``final_evaluation`` of summary.json: what was reused, evaluated, dropped."""
        return {"snapshots": len(self.snapshots),
                "reused": sum(s.reused for s in self.snapshots) + len(self.extra),
                "evaluated": len(self.keys), "final_reused": self.final_reused,
                "dropped": len(self.dropped),
                "dropped_s": [round(s.time_s, 6) for s in self.dropped],
                "budget": self.budget,
                "estimated_s": (None if self.cost_s is None
                                else round(self.cost_s * len(self.keys), 6)),
                "cost_s": None if self.measured_s is None else round(self.measured_s, 6),
                "exact": self.exact}


# ================================================================================ worker
class EvalPort(Protocol):
    """What a worker's evaluator needs from the worker."""

    @property
    def shard(self) -> ShardStore: ...

    def eval_requests(self) -> list[EvalRequest | EvalEnd]: ...

    def reply_eval(self, message: EvalReply) -> None: ...


class Evaluator:
    """A worker's side: evaluate requested θ snapshots on the points it holds, a chunk per
    step.

    Parameters
    ----------
    algorithm : Algorithm
        Its ``evaluate(theta, block)`` is additive over points.
    chunk_rows : int
        Rows evaluated per step at least (more when training blocks are larger).
    """

    def __init__(self, algorithm: Algorithm, chunk_rows: int = CHUNK_ROWS) -> None:
        self.algorithm = algorithm
        self.chunk_rows = chunk_rows
        self.queue: list[EvalRequest] = []
        self.current: tuple[int, Tally] | None = None  # the request's id, its pass
        self.ended = False
        self.busy_s = 0.0  # seconds spent evaluating, over the run

    def _take(self, port: EvalPort) -> None:
        """Queue the requests that arrived; note the master's ``end``."""
        for message in port.eval_requests():
            if isinstance(message, EvalEnd):
                self.ended = True
            else:
                self.queue.append(message)

    def step(self, port: EvalPort, rows: int = 0) -> None:
        """Take new requests; evaluate one chunk of the current one (nonblocking)."""
        self._take(port)
        if self.current is None and self.queue:
            req = self.queue.pop(0)
            self.current = (req.id, Tally.of([req.theta]))
        if self.current is not None:
            rid, tally = self.current
            spent = tally.seconds
            done = tally.advance(self.algorithm, port.shard, max(rows, self.chunk_rows))
            self.busy_s += tally.seconds - spent
            if done:
                port.reply_eval(tally.reply(rid))
                self.current = None

    def drain(self, port: EvalPort, pause: Callable[[], None]) -> None:
        """After training: answer every request until the master's ``end`` (requests that
        came after the stop are answered without evaluating: nobody reads them)."""
        while not self.ended or self.current is not None or self.queue:
            self._take(port)
            ids = ([self.current[0]] if self.current else []) + [r.id for r in self.queue]
            for rid in ids:
                port.reply_eval(EvalReply(rid, [], 0, 0, 0.0, skipped=True))
            self.current, self.queue = None, []
            if not self.ended:
                pause()
