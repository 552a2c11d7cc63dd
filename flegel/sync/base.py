"""What every synchronization model shares: the master-policy base, the round-trip estimate,
and barriers -- one of the two mechanisms the models are built from (the other, immediate
pushes, is :mod:`flegel.sync.asynchronous`).

A sync model is a master policy acting on the parameter server through
:class:`flegel.ports.ServerPort` and a worker policy (:class:`flegel.ports.WorkerPolicy`,
named by the master policy's ``WORKER``) consulted by the generic worker loop.  Adding a
model means adding a module here, not touching the others.
"""

from __future__ import annotations

from typing import Any, ClassVar

from flegel.ports import Arrays, ServerPort, WorkerPolicy
from flegel.protocol import POLL_S, Instructions, Reason
from flegel.state import AttributeState
from flegel.validation import Key


def round_trip_s(latency_s: float, apply_s: float) -> float:
    """One synchronization's pure cost: the commit and the reply messages (each measured as
    ``latency_s``), the update of θ, and one poll on each side."""
    return 2 * latency_s + apply_s + 2 * POLL_S


class MasterPolicy(AttributeState):
    """Base of a sync model's master side.

    Checkpoints save and restore a policy through ``checkpoint_state()``/``restore()``
    (:class:`flegel.state.AttributeState`: every attribute but the server and the options);
    a model whose attributes are not plain data overrides them.

    Parameters
    ----------
    server : ServerPort
        The parameter server, as far as a policy may act on it.
    options : dict
        The job's validated ``sync`` section.
    """

    #: Options of the ``sync`` section this model accepts.
    OPTIONS: ClassVar[dict[str, Key]] = {}
    #: The worker side of this model.
    WORKER: ClassVar[type[WorkerPolicy]] = WorkerPolicy
    NOT_STATE: ClassVar[tuple[str, ...]] = ("server", "options")

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        self.server = server
        self.options = options

    def start(self) -> None:
        """Send the first instructions to every worker (they hold θ⁽⁰⁾ already)."""
        raise NotImplementedError

    def on_commit(self, rank: int, header: dict[str, float], agg: Arrays) -> None:
        """A worker committed ``agg``; it waits for θ until answered."""
        raise NotImplementedError

    def on_tick(self, now: float) -> None:
        """Called whenever no message arrived (timers: interval η, predicted barriers)."""

    def before_finish(self) -> None:
        """Training is about to end (``Server.finish``: ``stop.max_time_s`` ran out between
        barriers, a barrier's stop criterion; or a signal or fault ended the serve loop):
        settle what is pending.  Called more than once at most harmlessly.  Default:
        nothing."""

    def summary(self) -> dict[str, Any]:
        """Model-specific figures added to ``summary.json``."""
        return {}


class BarrierPolicy(MasterPolicy):
    """Global barriers: collect one commit from every worker, apply their aggregate, answer all.

    Subclasses say what each worker does next (:meth:`instructions`) and may adjust after a
    barrier (:meth:`after_barrier`).  Records per barrier the barrier cost (first commit to
    broadcast, FSP paper Fig. 10) and the spread between the first and the last report.

    A subclass may keep θ at a barrier (:meth:`keeps_theta`: FSP's coverage): the barrier
    happens -- commits, speeds, migration, stop criteria -- but θ is not updated; the
    aggregate is carried and applied with the next barrier's, so no work is lost (the
    aggregators are sums, ``Algorithm.aggregate``).  A run that stops while θ is kept
    applies what it carried.
    """

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.pending: dict[int, tuple[dict[str, float], Arrays]] = {}
        self.iteration = 0
        self.apply_s = 0.0
        self.barrier_s: list[float] = []
        self.spread_s: list[float] = []
        #: The aggregate of barriers that kept θ, applied with the next update (None: none),
        #: and whether the latest barrier kept θ.
        self.carried: Arrays | None = None
        self.kept = False

    def before_finish(self) -> None:
        """Apply what kept barriers carried: the run's work is not lost."""
        if self.carried is not None:
            self.apply_s = self.server.apply(self.carried)
            self.carried = None

    def keeps_theta(self, commits: dict[int, dict[str, float]]) -> bool:
        """Whether this barrier keeps θ as it is and carries its aggregate to the next
        (default: never).  ``commits`` are the barrier's COMMIT headers."""
        return False

    def instructions(self, rank: int) -> Instructions:
        """What ``rank`` does in its next iteration."""
        return Instructions()

    def after_barrier(self, commits: dict[int, dict[str, float]], agg: Arrays) -> None:
        """Adjust batch or interval from the commits of the barrier just completed."""

    def before_broadcast(self, commits: dict[int, dict[str, float]]) -> None:
        """Training goes on: act before the next instructions go out (migration orders)."""

    def broadcast(self) -> None:
        for r in self.server.ranks:
            self.server.send(r, self.instructions(r))

    def start(self) -> None:
        self.broadcast()

    def on_commit(self, rank: int, header: dict[str, float], agg: Arrays) -> None:
        self.pending[rank] = (header, agg)
        if len(self.pending) == len(self.server.ranks):
            self.barrier()

    def barrier(self) -> None:
        srv = self.server
        arrivals = [srv.worker(r).arrived_at for r in self.pending]
        total = srv.total(agg for _, agg in self.pending.values())
        # Each worker's objective change: Σ Δf per worker shows who trained what (FSP Fig. 12).
        commits = {r: {**h, "delta_f": float(a["objective"])}
                   for r, (h, a) in self.pending.items()}
        if self.carried is not None:
            total = srv.total([self.carried, total])
            self.carried = None
        self.kept = self.keeps_theta(commits)
        if self.kept:
            self.carried, self.apply_s = total, 0.0
        else:
            self.apply_s = srv.apply(total)
        self.iteration += 1
        self.pending = {}
        self.after_barrier(commits, total)
        reason = srv.check_stop(total, self.iteration, updated=not self.kept)
        if reason is not None and self.carried is not None:
            # Training ends while θ is kept: what was carried is not lost.
            self.apply_s = srv.apply(self.carried)
            self.carried = None
        cost = srv.now() - min(arrivals)
        spread = max(arrivals) - min(arrivals)
        self.barrier_s.append(cost)
        self.spread_s.append(spread)
        srv.record(self.event(commits, cost, spread))
        if reason is not None:
            srv.finish(reason)
        else:
            self.before_broadcast(commits)
            self.broadcast()

    def event(self, commits: dict[int, dict[str, float]], cost: float,
              spread: float) -> dict[str, Any]:
        """The ``events.jsonl`` record of one barrier."""
        ranks = sorted(commits)

        def col(key: str, nd: int = 6) -> list[float]:
            return [round(commits[r][key], nd) for r in ranks]

        return {"t": self.iteration, "time_s": round(self.server.now(), 6),
                "objective": self.server.objective, "barrier_s": round(cost, 6),
                "spread_s": round(spread, 6),
                "workers": {"rank": ranks, "points": [int(commits[r]["points"]) for r in ranks],
                            "compute_s": col("compute_s"), "wait_s": col("wait_s"),
                            "passes": col("passes", 4), "delta_f": col("delta_f"),
                            "reason": [
                                Reason(int(commits[r]["reason"])).name.lower() for r in ranks]}}

    def summary(self) -> dict[str, Any]:
        n = max(len(self.barrier_s), 1)
        return {"barriers": len(self.barrier_s),
                "mean_barrier_s": sum(self.barrier_s) / n,
                "mean_spread_s": sum(self.spread_s) / n}
