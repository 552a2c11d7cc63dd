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
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from flegel.store import ShardStore

#: ``runtime.exact_budget`` by default: the share of time spent on exact evaluations.
DEFAULT_BUDGET = 0.05
#: Rows a worker evaluates per step (between two training blocks), at least.
CHUNK_ROWS = 4096
#: Multiplier of ids in the checksum (odd, so every id maps to a distinct residue mod 2⁶⁴).
_MIX = np.uint64(0x9E3779B97F4A7C15)


def id_checksum(ids: np.ndarray) -> int:
    """An order-free checksum of point ids (sum of mixed ids mod 2⁶⁴): equal sums over two
    sets of ids of the same size mean, with overwhelming probability, the same set."""
    with np.errstate(over="ignore"):
        return int((np.asarray(ids, dtype=np.int64).astype(np.uint64) * _MIX).sum(
            dtype=np.uint64))


# ================================================================================ master
class EvalTransport(Protocol):
    """What the master needs to reach the workers for evaluations."""

    def send_eval(self, rank: int, message: dict[str, Any]) -> None: ...

    def poll_evals(self) -> list[tuple[int, dict[str, Any]]]: ...


@dataclass
class Evaluation:
    """One exact evaluation of a θ snapshot."""

    id: int
    version: int
    time_s: float            # when θ was snapshotted (training time)
    theta: dict[str, np.ndarray] = field(repr=False)
    replies: dict[int, dict[str, Any]] = field(default_factory=dict)
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
    def due(self, now: float, pass_s: float | None = None) -> bool:
        """Whether to request an evaluation now.

        Parameters
        ----------
        now : float
            Training time (s).
        pass_s : float, optional
            The slowest worker's seconds for one pass at its training rate (the cost
            estimate before the first evaluation); None: unknown yet.
        """
        if self.pending is not None:
            return False
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
            transport.send_eval(r, {"kind": "evaluate", "id": self._ids, "theta": snap})
            self.sent[r] += 1

    def collect(self, transport: EvalTransport, now: float) -> Evaluation | None:
        """Take the replies that arrived; return the evaluation they completed, if any."""
        finished = None
        for rank, reply in transport.poll_evals():
            self.replied[rank] += 1
            ev = self.pending
            if ev is None or reply["id"] != ev.id:
                continue  # an answer to a request made before the end: nothing to do
            ev.replies[rank] = reply
            if len(ev.replies) == len(self.ranks):
                self._complete(ev, now)
                finished = ev
        return finished

    def _complete(self, ev: Evaluation, now: float) -> None:
        replies = ev.replies.values()
        total = float(sum(r["value"] for r in replies))
        count = int(sum(r["count"] for r in replies))
        checksum = sum(int(r["checksum"]) for r in replies) % (1 << 64)
        ev.exact = count == self.n_points and checksum == self.checksum
        ev.value = total if ev.exact or count == 0 else total * self.n_points / count
        ev.done_s = now
        ev.cost_s = max(float(r["seconds"]) for r in replies)
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
    def finish(self, transport: EvalTransport, wait: Any) -> None:
        """After training: tell every worker no request follows (it answers those still
        queued first: same tag, same order), and take every reply still owed, so that no
        message is left unreceived.  ``wait()`` runs between polls (it sleeps, and may
        raise to end a stalled job)."""
        for r in self.ranks:
            transport.send_eval(r, {"kind": "end"})
        while any(self.replied[r] < self.sent[r] for r in self.ranks):
            for rank, _ in transport.poll_evals():
                self.replied[rank] += 1
            wait()
        self.pending = None


# ================================================================================ worker
class EvalPort(Protocol):
    """What a worker's evaluator needs from the worker."""

    @property
    def shard(self) -> ShardStore: ...

    def eval_requests(self) -> list[dict[str, Any]]: ...

    def reply_eval(self, message: dict[str, Any]) -> None: ...


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

    def __init__(self, algorithm: Any, chunk_rows: int = CHUNK_ROWS) -> None:
        self.algorithm = algorithm
        self.chunk_rows = chunk_rows
        self.queue: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None
        self.ended = False
        self.busy_s = 0.0  # seconds spent evaluating, over the run

    def _take(self, port: EvalPort) -> None:
        """Queue the requests that arrived; note the master's ``end``."""
        for message in port.eval_requests():
            if message["kind"] == "end":
                self.ended = True
            else:
                self.queue.append(message)

    def step(self, port: EvalPort, rows: int = 0) -> None:
        """Take new requests; evaluate one chunk of the current one (nonblocking)."""
        self._take(port)
        if self.current is None and self.queue:
            req = self.queue.pop(0)
            self.current = {"id": req["id"], "theta": req["theta"], "row": 0, "value": 0.0,
                            "count": 0, "checksum": 0, "seconds": 0.0}
        if self.current is not None:
            self._chunk(port, max(rows, self.chunk_rows))

    def _chunk(self, port: EvalPort, rows: int) -> None:
        from flegel.block import Block

        cur = self.current
        assert cur is not None
        t0 = time.perf_counter()
        store = port.shard
        start = cur["row"]
        stop = min(len(store), start + rows)
        keep = np.flatnonzero(~store.inactive[start:stop]) + start
        if len(keep):
            block = Block(store.x[keep], None if store.y is None else store.y[keep],
                          {k: v[keep] for k, v in store.state.items()},
                          np.zeros(len(keep), dtype=bool))
            cur["value"] += float(self.algorithm.evaluate(cur["theta"], block))
            cur["count"] += len(keep)
            cur["checksum"] = (cur["checksum"] + id_checksum(store.ids[keep])) % (1 << 64)
        cur["row"] = stop
        took = time.perf_counter() - t0
        cur["seconds"] += took
        self.busy_s += took
        if stop >= len(store):
            port.reply_eval({k: cur[k] for k in ("id", "value", "count", "checksum",
                                                  "seconds")})
            self.current = None

    def drain(self, port: EvalPort, pause: Any) -> None:
        """After training: answer every request until the master's ``end`` (requests that
        came after the stop are answered without evaluating: nobody reads them)."""
        while not self.ended or self.current is not None or self.queue:
            self._take(port)
            for req in ([self.current] if self.current else []) + self.queue:
                port.reply_eval({"id": req["id"], "value": 0.0, "count": 0, "checksum": 0,
                                 "seconds": 0.0, "skipped": True})
            self.current, self.queue = None, []
            if not self.ended:
                pause()
