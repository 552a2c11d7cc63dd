"""What every synchronization model shares: commit reasons, the master-policy interface, and
the two mechanisms the models are built from -- barriers and immediate (asynchronous) pushes.

A sync model is a master policy plugged into :meth:`flegel.runtime.master.Server.serve`; the
worker loop is generic and follows the header of each θ it receives (batch, η, offset,
snapshot / roll-back).  Adding a model means adding a module here, not touching the others.
"""

from __future__ import annotations

import enum
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flegel.runtime.master import Server


class Reason(enum.IntEnum):
    """Why a worker committed."""

    BATCH = 1   # processed the batch it was given
    PASS = 2    # completed a traversal pass since the iteration began
    SIGNAL = 3  # the master's pause signal (flexible barrier, centralized)
    TIMER = 4   # its own interval η − δ expired (flexible barrier, semi-centralized)
    ABORT = 5   # told to abort and restart from a fresher θ (SpecSync)


class MasterPolicy:
    """Base of a sync model's master side.

    Parameters
    ----------
    server : Server
        The master's state and messaging.
    options : dict
        The job's validated ``sync`` section.
    """

    #: Options of the ``sync`` section this model accepts: name -> (default, description).
    OPTIONS: dict[str, tuple[Any, str]] = {}

    def __init__(self, server: Server, options: dict[str, Any]) -> None:
        self.server = server
        self.options = options

    def start(self) -> None:
        """Send θ⁽⁰⁾ and the first instructions to every worker."""
        raise NotImplementedError

    def on_commit(self, rank: int, header: dict, agg: dict) -> None:
        """A worker committed ``agg``; it waits for θ until answered."""
        raise NotImplementedError

    def on_tick(self, now: float) -> None:
        """Called whenever no message arrived (timers: interval η, predicted barriers)."""

    def summary(self) -> dict[str, Any]:
        """Model-specific figures added to ``summary.json``."""
        return {}


class BarrierPolicy(MasterPolicy):
    """Global barriers: collect one commit from every worker, apply their aggregate, answer all.

    Subclasses say what each worker does next (:meth:`instructions`) and may adjust after a
    barrier (:meth:`after_barrier`).  Records per barrier the barrier cost (first commit to
    broadcast, FSP paper Fig. 10) and the spread between the first and the last report.
    """

    def __init__(self, server: Server, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.pending: dict[int, tuple[dict, dict]] = {}
        self.iteration = 0
        self.barrier_s: list[float] = []
        self.spread_s: list[float] = []
        self._warned = 0

    def on_tick(self, now: float) -> None:
        """Name the workers a barrier has waited on for long (DESIGN §7)."""
        if not self.pending or len(self.pending) == len(self.server.ranks):
            return
        first = min(self.server.workers[r].arrived_at for r in self.pending)
        late = now - first
        if late >= self.server.stall_warning_s * (1 + self._warned):
            self._warned += 1
            missing = [r for r in self.server.ranks if r not in self.pending]
            sys.stderr.write(f"flegel: warning: barrier {self.iteration + 1} has waited "
                             f"{late:.1f} s for worker(s) {missing}\n")
            sys.stderr.flush()

    def instructions(self, rank: int) -> dict[str, Any]:
        """Keyword arguments of :meth:`Server.send_params` for ``rank``'s next iteration."""
        return {}

    def after_barrier(self, commits: dict[int, dict], agg: dict) -> None:
        """Adjust batch or interval from the commits of the barrier just completed."""

    def broadcast(self) -> None:
        for r in self.server.ranks:
            self.server.send_params(r, **self.instructions(r))

    def start(self) -> None:
        self.broadcast()

    def on_commit(self, rank: int, header: dict, agg: dict) -> None:
        self.pending[rank] = (header, agg)
        if len(self.pending) == len(self.server.ranks):
            self.barrier()

    def barrier(self) -> None:
        srv = self.server
        arrivals = [srv.workers[r].arrived_at for r in self.pending]
        total = srv.zero()
        for _, agg in self.pending.values():
            total = srv.algorithm.aggregate(total, agg)
        t0 = time.perf_counter()
        srv.apply(total)
        self.apply_s = time.perf_counter() - t0
        self.iteration += 1
        commits = {r: h for r, (h, _) in self.pending.items()}
        self.pending = {}
        self._warned = 0
        self.after_barrier(commits, total)
        reason = srv.check_stop(total, self.iteration)
        cost = time.perf_counter() - min(arrivals)
        spread = max(arrivals) - min(arrivals)
        self.barrier_s.append(cost)
        self.spread_s.append(spread)
        srv.events(self.event(commits, cost, spread))
        if reason is not None:
            srv.finish(reason)
        else:
            self.broadcast()

    def event(self, commits: dict[int, dict], cost: float, spread: float) -> dict[str, Any]:
        """The ``events.jsonl`` record of one barrier."""
        ranks = sorted(commits)

        def col(key: str, nd: int = 6) -> list:
            return [round(commits[r][key], nd) for r in ranks]

        return {"t": self.iteration, "time_s": round(self.server.elapsed(), 6),
                "objective": self.server.objective, "barrier_s": round(cost, 6),
                "spread_s": round(spread, 6),
                "workers": {"rank": ranks, "points": [int(commits[r]["points"]) for r in ranks],
                            "compute_s": col("compute_s"), "wait_s": col("wait_s"),
                            "passes": col("passes", 4), "reason": [
                                Reason(int(commits[r]["reason"])).name.lower() for r in ranks]}}

    def summary(self) -> dict[str, Any]:
        n = max(len(self.barrier_s), 1)
        return {"barriers": len(self.barrier_s),
                "mean_barrier_s": sum(self.barrier_s) / n,
                "mean_spread_s": sum(self.spread_s) / n}
