"""Flexible Synchronous Parallel (FSP paper, Sections 3 and 5.2).

No workload is pre-assigned.  The master ends an iteration after an interval η; every worker
commits right after the block it is on, whatever it processed, and all continue from the same
new θ (Section 3.1), so convergence is kept (Section 3.2).  A worker that completes a full pass
since the last barrier commits at once and the master pauses the others: the barrier happens
at once (Section 3.3).  Iteration 1 is a calibration iteration without a timer, which ends when
the fastest worker completes a pass: it measures speeds and gives FSPB its η⁰.

Coordination (Section 5.2, Fig. 6):

* ``centralized``: two-phase -- the master broadcasts a pause signal after η, workers report,
  the master broadcasts θ and η.
* ``semi``: each worker times its own interval η − δᵢ.  δᵢ is estimated from worker i's
  measured response delay: how late, after its own timer, its report reaches the master (the
  block it finishes, a suspension it serves, messaging).  With δᵢ = eᵢ − minⱼ eⱼ (smoothed),
  slow responders commit earlier and reports reach the master together.  The master, which
  sees every arrival, computes δᵢ and sends it with θ and η (a choice: the paper has each
  worker monitor itself; the estimate is the same and needs no extra messages).  Knowing its
  deadline ahead, a worker also shrinks its last block to end on it, and its timer starts at
  the master's send time when the clocks agree (see :mod:`flegel.runtime.worker`).

Every barrier records η, its cost (first report to broadcast, Fig. 10), the spread between
the first and the last report, and each worker's offset.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from flegel.interval import Observation, Plan, make_adjustor
from flegel.runtime import SIGNAL_PAUSE
from flegel.sync.base import BarrierPolicy, Reason

#: Weight of the newest measurement when smoothing the semi-centralized offsets δᵢ.
OFFSET_SMOOTHING = 0.5


class FSP(BarrierPolicy):
    """Master policy of FSP.

    Options
    -------
    interval : {"fixed", "binary", "multistage"}
        The interval adjustor (FSP, FSPB, FSPV).
    eta_ms : float or None
        Fixed η (``fixed``), or η⁰ for ``binary`` (default: the calibration iteration).
    coordination : {"semi", "centralized"}
    factor : float
        λ of the binary search (paper: 2).
    probe_ms : float
        η_p of the multi-stage probes (paper: 200 ms).
    stage_tolerance : float
        Shortfall against the prediction that opens a new FSPV stage.
    eta_min_ms : float
        Smallest interval an adjustor may choose.
    """

    OPTIONS = {
        "interval": ("multistage", "'fixed', 'binary' or 'multistage'"),
        "eta_ms": (None, "a positive number of milliseconds or null"),
        "coordination": ("semi", "'semi' or 'centralized'"),
        "factor": (2.0, "a number > 1 (FSPB's λ)"),
        "probe_ms": (200.0, "a positive number of milliseconds (FSPV's probe η)"),
        "stage_tolerance": (0.5, "a number between 0 and 1"),
        "eta_min_ms": (1.0, "a positive number of milliseconds"),
    }

    @staticmethod
    def check_options(o: dict[str, Any]) -> tuple[str, str] | None:
        def pos(v: Any) -> bool:
            return not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0

        if o["interval"] not in ("fixed", "binary", "multistage"):
            return "interval", FSP.OPTIONS["interval"][1]
        if o["coordination"] not in ("semi", "centralized"):
            return "coordination", FSP.OPTIONS["coordination"][1]
        if o["eta_ms"] is not None and not pos(o["eta_ms"]):
            return "eta_ms", FSP.OPTIONS["eta_ms"][1]
        if o["interval"] == "fixed" and o["eta_ms"] is None:
            return "eta_ms", "a positive number of milliseconds (interval: fixed needs η)"
        if not pos(o["factor"]) or o["factor"] <= 1:
            return "factor", FSP.OPTIONS["factor"][1]
        for key in ("probe_ms", "eta_min_ms"):
            if not pos(o[key]):
                return key, FSP.OPTIONS[key][1]
        if not pos(o["stage_tolerance"]) or o["stage_tolerance"] >= 1:
            return "stage_tolerance", FSP.OPTIONS["stage_tolerance"][1]
        return None

    def __init__(self, server, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        kind = options["interval"]
        extra: dict[str, Any] = {"eta_min_s": options["eta_min_ms"] / 1e3}
        if kind == "binary":
            extra["factor"] = options["factor"]
        elif kind == "multistage":
            extra.update(probe_s=options["probe_ms"] / 1e3,
                         stage_tolerance=options["stage_tolerance"])
        self.adjustor = make_adjustor(kind, **extra)
        self.semi = options["coordination"] == "semi"
        self.plan = Plan(0.0, phase="calibration")  # no timer: ends with the first full pass
        self.offsets = {r: 0.0 for r in server.ranks}
        self.signalled = False
        self.iter_start = 0.0
        self.first_arrival: float | None = None
        self.eta_max_s = float("inf")
        self._mark_theta: tuple[dict, float] | None = None
        self.eta_log: list[float] = []
        self.plan_phase_done = "calibration"
        self._start_estimate = 0.0

    # ---------------------------------------------------------------- sending
    def instructions(self, rank: int) -> dict[str, Any]:
        eta = self.plan.eta_s
        mark = 1 if self.plan.mark else (-1 if self.plan.drop_mark else 0)
        return {"batch": 0, "eta_s": eta if self.semi else 0.0,
                "offset_s": self.offsets[rank] if self.semi else 0.0,
                "mark": mark, "rollback": self.plan.rollback}

    def broadcast(self) -> None:
        srv = self.server
        if self.plan.mark:
            self._mark_theta = (srv.theta, srv.objective)
        if self.plan.rollback and self._mark_theta is not None:
            # FSPV's second probe restarts from the same θ as the first (Section 3.3).
            srv.theta, srv.objective = self._mark_theta
        self.signalled = False
        self.first_arrival = None
        self._start_estimate = srv.estimated_objective()
        super().broadcast()
        self.iter_start = time.perf_counter()

    # ---------------------------------------------------------------- receiving
    def on_commit(self, rank: int, header: dict, agg: dict) -> None:
        if self.first_arrival is None:
            self.first_arrival = self.server.workers[rank].arrived_at
        if int(header["reason"]) == Reason.PASS and not self.signalled:
            self._pause_all(rank)  # a full pass: barrier at once (Section 3.3)
        super().on_commit(rank, header, agg)

    def on_tick(self, now: float) -> None:
        super().on_tick(now)
        eta = self.plan.eta_s
        if not self.semi and eta > 0 and not self.signalled and now - self.iter_start >= eta:
            self._pause_all()

    def _pause_all(self, reporting: int | None = None) -> None:
        """Signal every worker still computing (not ``reporting``, which just committed)."""
        self.signalled = True
        running = [r for r in self.server.ranks if r not in self.pending and r != reporting]
        self.server.signal(running, SIGNAL_PAUSE)

    # ---------------------------------------------------------------- the barrier
    def after_barrier(self, commits: dict[int, dict], agg: dict) -> None:
        srv = self.server
        now = time.perf_counter()
        arrivals = {r: srv.workers[r].arrived_at for r in commits}
        first = min(arrivals.values())
        self._update_eta_max(commits)
        if self.semi and self.plan.eta_s > 0:
            self._update_offsets(commits, arrivals)
        # Progress on the estimated objective: a first visit of a point adds its whole loss
        # to the online objective, which is not a step backwards (Server.estimated_objective).
        progress = self._start_estimate - srv.estimated_objective()
        obs = Observation(eta_s=self.plan.eta_s, progress=progress,
                          valid_s=first - self.iter_start, wall_s=now - self.iter_start,
                          barrier_s=now - first, eta_max_s=self.eta_max_s)
        self.eta_log.append(self.plan.eta_s)
        if self.plan.phase == "calibration":
            eta0 = (self.options["eta_ms"] / 1e3 if self.options["eta_ms"] is not None
                    else obs.valid_s)
            self.plan = self.adjustor.start(eta0, self.eta_max_s)
        else:
            self.plan = self.adjustor.observe(obs)

    def _update_eta_max(self, commits: dict[int, dict]) -> None:
        """The longest useful η: a full pass of the fastest worker (Section 3.3)."""
        passes = [h["n_active"] / h["rate"] for h in commits.values() if h["rate"] > 0]
        if passes:
            self.eta_max_s = float(min(passes))

    def _update_offsets(self, commits: dict[int, dict], arrivals: dict[int, float]) -> None:
        """δᵢ from each worker's response delay after its own timer (Section 5.2)."""
        timed = {r for r, h in commits.items() if int(h["reason"]) == Reason.TIMER}
        if len(timed) < 2:
            return
        eta = self.plan.eta_s
        delay = {r: arrivals[r] - self.iter_start - (eta - self.offsets[r]) for r in timed}
        base = min(delay.values())
        a = OFFSET_SMOOTHING
        for r, e in delay.items():
            new = (1 - a) * self.offsets[r] + a * (e - base)
            self.offsets[r] = float(min(max(new, 0.0), eta / 2))

    def event(self, commits: dict[int, dict], cost: float, spread: float) -> dict[str, Any]:
        ev = super().event(commits, cost, spread)
        ev["eta_ms"] = round(self.eta_log[-1] * 1e3, 4) if self.eta_log else None
        ev["phase"] = self.plan_phase_done
        if self.semi:
            ev["offsets_ms"] = [round(self.offsets[r] * 1e3, 4) for r in sorted(commits)]
        return ev

    def barrier(self) -> None:
        self.plan_phase_done = self.plan.phase
        super().barrier()

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        etas = np.asarray(self.eta_log[1:] or [0.0])
        out.update(interval=self.options["interval"], coordination=self.options["coordination"],
                   final_eta_ms=self.plan.eta_s * 1e3, mean_eta_ms=float(etas.mean() * 1e3),
                   eta_history_ms=[e * 1e3 for e in self.adjustor.history])
        stages = getattr(self.adjustor, "stages", None)
        if stages is not None:
            out["stages"] = stages
        return out
