"""The master: parameter server and coordinator (rank 0).

:class:`Server` owns θ, the message buffers, the online objective, the stop criteria and the
event log; a sync model's master policy (:mod:`flegel.sync`) decides when to apply what and
whom to answer.  Every wait polls with ``Test`` and sleeps, so the idle master uses ~1% of a
core (DESIGN §4).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from flegel.api import Algorithm
from flegel.runtime import Backoff
from flegel.runtime import comm as msg
from flegel.runtime.layout import Layout
from flegel.stopping import StopCriteria


class Trace:
    """θ snapshots spread over the run, evaluated exactly on every shard after training.

    Sync models are compared on the true f(θ) (DESIGN §3): the online objective mixes losses
    computed under different θ and, before a full pass, misses unvisited points.  Every new
    θ is kept until twice ``limit`` are held; then every other one is dropped and snapshots
    are taken at most every ``spacing`` seconds (doubling at each thinning), so any run keeps
    between ``limit`` and ``2 * limit`` snapshots spread over its whole length.
    """

    def __init__(self, limit: int, spacing_s: float = 0.0) -> None:
        self.limit = limit
        self.spacing_s = spacing_s
        self.times: list[float] = []
        self.thetas: list[dict] = []

    def record(self, t: float, theta: dict) -> None:
        if self.limit <= 0 or (self.times and t - self.times[-1] < self.spacing_s):
            return
        self.times.append(t)
        # Copies: an algorithm may update θ's arrays in place.
        self.thetas.append({k: np.array(v, copy=True) for k, v in theta.items()})
        if len(self.times) >= 2 * self.limit:
            span = self.times[-1] - self.times[0]
            self.times, self.thetas = self.times[1::2], self.thetas[1::2]
            self.spacing_s = max(2 * self.spacing_s, span / self.limit)


@dataclass
class WorkerRecord:
    """What the master knows of one worker."""

    rank: int
    header: dict = field(default_factory=dict)  # last commit header
    commits: int = 0
    points: int = 0
    stopped: bool = False
    arrived_at: float = 0.0  # perf_counter() when its last commit arrived


class Server:
    """Rank 0's state and messaging.

    Parameters
    ----------
    comm : MPI.Comm
    algorithm : Algorithm
    theta : dict
        θ⁽⁰⁾.
    theta_layout, agg_layout : Layout
    stop : StopCriteria
    events : callable
        Receives one dict per event (written to ``events.jsonl``).
    progress : callable or None
        Receives ``(iteration, objective, elapsed_s)`` to display progress.
    trace_points : int
        At most this many θ snapshots are kept for the exact objective trace (0: none).
    """

    def __init__(self, comm: MPI.Comm, algorithm: Algorithm, theta: dict,
                 theta_layout: Layout, agg_layout: Layout, stop: StopCriteria,
                 events: Any, progress: Any = None, trace_points: int = 100) -> None:
        self.comm = comm
        self.algorithm = algorithm
        self.theta = theta
        self.theta_layout = theta_layout
        self.agg_layout = agg_layout
        self.stop = stop
        self.events = events
        self.progress = progress
        self.ranks = list(range(1, comm.size))
        self.shard_sizes: dict[int, int] = {}  # points of each worker's shard
        self.workers = {r: WorkerRecord(r) for r in self.ranks}
        self.version = 0
        self.objective = 0.0  # online objective: sum of every committed objective change
        self.reason: str | None = None
        self.time_to_target: float | None = None
        self.start = time.perf_counter()
        self.trace = Trace(trace_points)
        #: Seconds a barrier may wait for its last reports before a warning names the workers.
        self.stall_warning_s = 10.0
        size = msg.Header.SIZE
        self._recv = {r: np.empty(size + agg_layout.size) for r in self.ranks}
        self._send = {r: np.empty(size + theta_layout.size) for r in self.ranks}
        self._send_req: dict[int, MPI.Request | None] = {r: None for r in self.ranks}
        self._sig = {r: np.empty(size) for r in self.ranks}
        self._sig_req: dict[int, MPI.Request | None] = {r: None for r in self.ranks}
        self._reqs = [comm.Irecv(self._recv[r], source=r, tag=msg.TAG_COMMIT) for r in self.ranks]

    # -------------------------------------------------------------- clock
    def elapsed(self) -> float:
        """Seconds of training so far."""
        return time.perf_counter() - self.start

    # -------------------------------------------------------------- θ
    def apply(self, agg: dict) -> None:
        """θ ← update_parameter(agg, θ); count a new θ version and the objective change."""
        self.theta = self.algorithm.update_parameter(agg, self.theta)
        self.version += 1
        self.objective += float(agg["objective"])
        now = self.elapsed()
        if self.time_to_target is None and self.stop.reached_target(self.objective,
                                                                     self.min_passes()):
            self.time_to_target = now
        self.trace.record(now, self.theta)

    def zero(self) -> dict:
        return self.algorithm.zero_aggregator(self.theta)

    # -------------------------------------------------------------- messages out
    def send_params(self, rank: int, *, batch: int = 0, eta_s: float = 0.0,
                    offset_s: float = 0.0, mark: int = 0,
                    rollback: bool = False, stop: bool = False,
                    theta: dict | None = None) -> None:
        """Send θ (or ``theta``) and the control header to one worker."""
        req = self._send_req[rank]
        if req is not None:
            msg.wait(req)
        buf = self._send[rank]
        msg.PARAMS.write(buf, version=self.version, stop=float(stop), batch=batch, eta_s=eta_s,
                       offset_s=offset_s, mark=mark,
                       rollback=float(rollback), sent_at=time.time())
        self.theta_layout.pack(self.theta if theta is None else theta, buf[msg.Header.SIZE:])
        self._send_req[rank] = self.comm.Isend(buf, dest=rank, tag=msg.TAG_PARAMS)
        self.workers[rank].header["_waiting"] = False
        if stop:
            self.workers[rank].stopped = True

    def signal(self, ranks: list[int], kind: float) -> None:
        """Send a control signal (pause, abort) about the current θ version."""
        for r in ranks:
            req = self._sig_req[r]
            if req is not None:
                msg.wait(req)
            msg.SIGNAL.write(self._sig[r], kind=kind, version=self.version, sent_at=time.time())
            self._sig_req[r] = self.comm.Isend(self._sig[r], dest=r, tag=msg.TAG_SIGNAL)

    # -------------------------------------------------------------- stopping
    def estimated_objective(self) -> float:
        """The online objective scaled up to the points not visited yet.

        Before every point has been visited once, the online objective (the sum of each
        point's last loss) lacks the unvisited points, and a first visit adds a whole loss.
        Scaling by ``N / visited`` gives a stable estimate from the start, which is what
        interval adjustors need to measure progress.
        """
        visited = sum(min(w.header.get("passes", 0.0), 1.0) * self.shard_sizes.get(r, 0)
                      for r, w in self.workers.items())
        total = sum(self.shard_sizes.values())
        if visited <= 0 or total <= 0:
            return self.objective
        return self.objective * total / visited

    def min_passes(self) -> float:
        return min(w.header.get("passes", 0.0) for w in self.workers.values())

    def check_stop(self, agg: dict, iteration: int) -> str | None:
        """Apply the algorithm's and the built-in criteria (Section 5.3)."""
        if self.algorithm.termination_check(agg, iteration):
            return "algorithm"
        if all(w.header.get("n_active", 1) == 0 for w in self.workers.values()):
            return "halted"
        return self.stop.check(iteration, self.objective, self.min_passes(), self.elapsed())

    def finish(self, reason: str) -> None:
        """Stop training: every worker still running gets the final θ with the stop flag."""
        if self.reason is None:
            self.reason = reason
            self.train_s = self.elapsed()
        for r, w in self.workers.items():
            if not w.stopped and self.waiting(r):
                self.send_params(r, stop=True)

    def waiting(self, rank: int) -> bool:
        """True while ``rank`` has committed and waits for θ (it always does under barriers)."""
        return self.workers[rank].header.get("_waiting", False)

    @property
    def done(self) -> bool:
        return all(w.stopped for w in self.workers.values())

    # -------------------------------------------------------------- main loop
    def serve(self, policy: Any) -> None:
        """Run ``policy`` until every worker has been told to stop."""
        self.start = time.perf_counter()
        cpu0 = time.process_time()
        policy.start()
        backoff = Backoff()
        idle_wall = idle_cpu = 0.0
        while not self.done:
            idx = MPI.Request.Testsome(self._reqs)
            if idx:
                backoff.reset()
                now = time.perf_counter()
                for i in idx:
                    rank = self.ranks[i]
                    buf = self._recv[rank]
                    header = msg.COMMIT.read(buf)
                    agg = self.agg_layout.unpack(buf[msg.Header.SIZE:])
                    self._reqs[i] = self.comm.Irecv(buf, source=rank, tag=msg.TAG_COMMIT)
                    w = self.workers[rank]
                    header["_waiting"] = True
                    header["latency_s"] = max(time.time() - header["sent_at"], 0.0)
                    w.header, w.arrived_at = header, now
                    w.commits += 1
                    w.points += int(header["points"])
                    if self.reason is not None:
                        self.send_params(rank, stop=True)
                    else:
                        policy.on_commit(rank, header, agg)
            else:
                w0, c0 = time.perf_counter(), time.process_time()
                policy.on_tick(w0)
                if self.progress is not None:
                    self.progress(self.version, self.objective, self.elapsed())
                backoff.sleep()
                idle_wall += time.perf_counter() - w0
                idle_cpu += time.process_time() - c0
        self.cpu_fraction = (time.process_time() - cpu0) / max(self.elapsed(), 1e-9)
        # CPU used while nothing arrived: what waiting costs (the rest is barrier work).
        self.idle_cpu_fraction = idle_cpu / max(idle_wall, 1e-9)
        self.idle_fraction = idle_wall / max(self.elapsed(), 1e-9)
        for req in self._reqs:
            req.Cancel()
        MPI.Request.Waitall(self._reqs)  # cancelled receives complete at once
        for req in self._send_req.values():
            if req is not None:
                msg.wait(req)

    def collect_results(self) -> list[dict]:
        """Receive every worker's end-of-run report (evaluated objective, totals)."""
        results = [msg.recv_object(self.comm, source=r)[0] for r in self.ranks]
        return sorted(results, key=lambda d: d["rank"])

    # -------------------------------------------------------------- asynchronous models
    def signal_version(self, ranks: list[int], kind: float, version: int) -> None:
        """Send a control signal about θ version ``version`` (not the current one).

        Under asynchronous models (SpecSync's abort) a worker computes from an older θ than
        the server's current version, and a worker drops signals for any version other than
        the one it computes from (so a signal that crosses its commit is harmless).
        """
        for r in ranks:
            req = self._sig_req[r]
            if req is not None:
                msg.wait(req)
            msg.SIGNAL.write(self._sig[r], kind=kind, version=version, sent_at=time.time())
            self._sig_req[r] = self.comm.Isend(self._sig[r], dest=r, tag=msg.TAG_SIGNAL)
