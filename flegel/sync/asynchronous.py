"""Immediate pushes: the mechanism shared by ASP, SSP, DSSP, SpecSync and ElasticBSP.

Every commit of a worker is one *push* (a mini-batch's aggregator).  The master applies it at
once (θ ← update_parameter, one new θ version per push) and answers the worker with the fresh
θ, unless the model's :meth:`PushPolicy.hold` says the worker must wait; a held worker is
answered later, as soon as :meth:`PushPolicy.release` finds the condition gone (SSP: the slowest
worker caught up; ElasticBSP: every worker reached the barrier).  A model is a few hooks:
:meth:`~PushPolicy.hold`, what it learns from each push (:meth:`~PushPolicy.after_push`),
what it tells a worker with θ (:meth:`~PushPolicy.instructions`) and, for SpecSync, what
happens when a worker starts (:meth:`~PushPolicy.on_answer`) or aborts an iteration
(:meth:`~PushPolicy.on_abort`).

What every model records
------------------------
* per worker: its clock (pushes so far), pushes, and time held by the master;
* the *staleness* of every update: the number of θ versions applied between the θ the worker
  computed from and this update (``server.version`` just before applying − header
  ``version``); 0 means the worker saw every earlier update;
* the *clock gap* of every iteration: how many pushes the worker is ahead of the slowest worker
  when it starts the iteration (its clock − the smallest clock).  This is the iteration
  difference the SSP family bounds (SSP: ≤ s; DSSP: ≤ s_U);
* one ``events.jsonl`` line per push: ``t`` (θ version after the push), ``time_s``,
  ``objective`` (online), ``rank``, ``points``, ``compute_s``, ``wait_s``, ``staleness``,
  ``version`` (the θ version it was computed from), ``gap`` and ``passes`` (the worker's
  traversal passes so far).

Iterations
----------
There is no global iteration without barriers.  For the stop criteria (``max_iterations``)
and the summary's ``iterations``, one iteration is **n pushes** (n = number of workers): the
same amount of work as one BSP iteration with the same batch.  ``theta_versions`` in the
summary is the number of θ updates (= pushes).

Mini-batch size
---------------
``batch: auto`` (default) uses BSP's cost-benefit rule (:func:`flegel.sync.bsp.auto_batch`):
each worker's first push is a calibration push over its whole shard; the first one to arrive
(the fastest worker's) fixes the batch so that the push round trip φ costs at most a fraction
ρ (``overhead``) of an iteration on that worker, hence on every slower one too (BSP sizes
its batch on the slowest worker because the barrier waits for it; here nobody waits).  The
other calibration passes are ordinary pushes.  ``batch: full`` pushes once per pass; an
integer fixes the batch.

Not changed after issue 19: sizing on the fastest worker caps at the whole shard when
points are cheap, so a straggler's push can take a whole pass, and the models that count
pushes (SSP, DSSP, ElasticBSP) then hold the fast workers to a few of them.  Sizing on the
slowest worker instead (BSP's rule) would shrink the batch by the speed ratio and let the
push round trip take up to that ratio times ρ of a fast worker's iteration -- the cost
``overhead`` promises to bound -- so neither choice is what every user expects: for those
models under stragglers, give ``batch`` a number (the comparisons of ``flegel paper`` use
1,000 points, as the papers fix one mini-batch for every model).
"""

from __future__ import annotations

from typing import Any, ClassVar

from flegel import validation
from flegel.ports import Arrays, ServerPort
from flegel.protocol import Instructions, Reason
from flegel.sync.base import MasterPolicy, round_trip_s
from flegel.sync.bsp import auto_batch
from flegel.validation import Described, Key, any_of, number, one_of


class RunningStat:
    """Count, mean and maximum of a stream of numbers, in constant memory."""

    __slots__ = ("n", "total", "max")

    def __init__(self) -> None:
        self.n, self.total, self.max = 0, 0.0, 0.0

    def add(self, x: float) -> None:
        self.n += 1
        self.total += x
        self.max = max(self.max, x) if self.n > 1 else x

    def as_dict(self) -> dict[str, float]:
        return {"max": self.max, "mean": self.total / self.n if self.n else 0.0}


class PushPolicy(MasterPolicy):
    """Apply every push at once; answer at once unless :meth:`hold` says to wait.

    Options
    -------
    batch : "auto", "full" or int
        Points per push (see the module docstring).
    overhead : float
        ρ of :func:`flegel.sync.bsp.auto_batch` for ``batch: auto``.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        "batch": Key(Described(any_of(one_of("auto", "full"), validation.is_int(1)),
                               "'auto', 'full' or a positive number of points per push"), "auto",
                     "points per push: chosen after a calibration pass, a full pass, or a "
                     "fixed number"),
        "overhead": number("largest share of an iteration a push round trip may take, for "
                           "batch: auto (ρ)", 0.1, lo=0, hi=1, lo_open=True, hi_open=True),
    }

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        ranks = server.ranks
        self.n = len(ranks)
        b = options["batch"]
        #: Points per push; 0 = a full pass.  None while ``auto`` waits for its calibration.
        self.batch: int | None = None if b == "auto" else (0 if b == "full" else int(b))
        self.per_point_s: float | None = None
        self.phi_s: float | None = None
        self.clock = {r: 0 for r in ranks}
        self.pushes = 0
        self.held: set[int] = set()
        self._held_at: dict[int, float] = {}
        self.held_s = {r: 0.0 for r in ranks}
        self.started = {r: 0.0 for r in ranks}      # when its current iteration began
        self.computing = {r: 0 for r in ranks}      # the θ version it computes from
        self.start_gap = {r: 0 for r in ranks}      # its clock gap then
        self.last_push = {r: 0.0 for r in ranks}   # arrival of its latest push
        #: Span of its latest iteration: from θ sent to push arrived, time held excluded.
        self.span: dict[int, float | None] = {r: None for r in ranks}
        self.staleness = RunningStat()
        self.staleness_of = {r: RunningStat() for r in ranks}
        self.gap_stat = RunningStat()

    # ------------------------------------------------------------------ clocks
    def now(self) -> float:
        """Seconds since training began (the time base of every record)."""
        return self.server.now()

    def gap(self, rank: int) -> int:
        """How many pushes ``rank`` is ahead of the slowest worker."""
        return self.clock[rank] - min(self.clock.values())

    def slowest(self) -> int:
        """The worker with the fewest pushes (ties: the one that pushed least recently)."""
        return min(self.clock, key=lambda r: (self.clock[r], self.last_push[r]))

    # ------------------------------------------------------------------ model hooks
    def hold(self, rank: int) -> bool:
        """True while ``rank``, which just pushed, must wait before its next iteration."""
        return False

    def after_push(self, rank: int, header: dict[str, float], t: float) -> None:
        """Learn from a push of ``rank`` that arrived at ``t`` (already applied and counted)."""

    def instructions(self, rank: int) -> Instructions:
        """What ``rank`` does in its next iteration."""
        return Instructions(batch=self.batch or 0)

    def on_answer(self, rank: int, t: float) -> None:
        """``rank`` was just sent θ at ``t``: its next iteration begins."""

    def on_abort(self, rank: int, header: dict[str, float], t: float) -> None:
        """``rank`` threw its iteration away (SpecSync) and restarts from the current θ."""

    # ------------------------------------------------------------------ mechanism
    def start(self) -> None:
        for r in self.server.ranks:
            self.answer(r)

    def answer(self, rank: int) -> None:
        """Send ``rank`` the current θ: its next iteration starts now."""
        t = self.now()
        if rank in self.held:
            self.held.discard(rank)
            self.held_s[rank] += t - self._held_at.pop(rank)
        gap = self.gap(rank)
        self.gap_stat.add(gap)
        self.start_gap[rank] = gap
        self.started[rank] = t
        self.computing[rank] = self.server.version
        self.server.send(rank, self.instructions(rank))
        self.on_answer(rank, t)

    def release(self) -> None:
        """Answer every held worker whose hold condition is gone."""
        for r in sorted(self.held):
            if not self.hold(r):
                self.answer(r)

    def on_commit(self, rank: int, header: dict[str, float], agg: Arrays) -> None:
        srv = self.server
        t = srv.worker(rank).arrived_at
        self.held.add(rank)
        self._held_at[rank] = t
        if int(header["reason"]) == Reason.ABORT:
            # Nothing to apply and no clock tick: the worker restarts the same iteration.
            self.on_abort(rank, header, t)
            self.release()
            return
        stale = srv.version - int(header["version"])
        apply_s = srv.apply(agg)
        self.pushes += 1
        self.clock[rank] += 1
        self.last_push[rank] = t
        self.span[rank] = t - self.started[rank]
        self.staleness.add(stale)
        self.staleness_of[rank].add(stale)
        if self.batch is None:
            self._calibrate(header, apply_s)
        self.after_push(rank, header, t)
        srv.record({"t": srv.version, "time_s": round(t, 6), "objective": srv.objective,
                    "rank": rank, "points": int(header["points"]),
                    "compute_s": round(header["compute_s"], 6),
                    "wait_s": round(header["wait_s"], 6), "staleness": stale,
                    "version": int(header["version"]), "gap": self.start_gap[rank],
                    "passes": round(header["passes"], 4)})
        reason = srv.check_stop(agg, self.pushes // self.n)
        if reason is not None:
            srv.finish(reason)  # held workers wait for θ, so they get the stop flag too
            return
        self.release()

    def _calibrate(self, header: dict[str, float], apply_s: float) -> None:
        """``batch: auto`` from the first calibration push (a full pass on that worker)."""
        self.per_point_s = header["compute_s"] / max(header["points"], 1)
        # One push round trip: commit and reply messages, the update, a poll on each side.
        self.phi_s = round_trip_s(header["latency_s"], apply_s)
        self.batch = auto_batch(self.per_point_s, self.phi_s,
                                self.options["overhead"],
                                max(int(header["n_active"]), 1))

    # ------------------------------------------------------------------ results
    def summary(self) -> dict[str, Any]:
        srv = self.server
        out: dict[str, Any] = {
            "iterations": self.pushes // self.n,  # n pushes = one iteration (module docstring)
            "pushes": self.pushes,
            "theta_versions": srv.version,
            "batch": "full" if self.batch in (None, 0) else self.batch,
            "staleness": self.staleness.as_dict(),
            "clock_gap": self.gap_stat.as_dict(),
            "push_stats": [{"rank": r, "pushes": self.clock[r],
                            "staleness_max": self.staleness_of[r].max,
                            "staleness_mean": self.staleness_of[r].as_dict()["mean"],
                            "held_s": self.held_s[r]} for r in srv.ranks],
        }
        if self.phi_s is not None:
            out.update(per_point_s=self.per_point_s, push_cost_s=self.phi_s)
        return out
