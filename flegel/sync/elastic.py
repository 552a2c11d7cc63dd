"""Elastic Bulk Synchronous Parallel (ElasticBSP paper, ICDM 2019, Sections II-III; ZipLine
paper, Machine Learning 2021, Sections 3-4 and Fig. 5).

Between barriers the workers push ASP-style (the server applies each push at once and answers
at once).  Each superstep has two phases (Fig. 5):

1. *Monitoring*: the server records push times until every worker has pushed at least twice
   since the last barrier (and has at least one iteration of the current batch size on
   record).
2. *Prediction*: it predicts the next ``R`` iteration end times of every worker and places the
   barrier where the wait of the first worker to arrive, ``max(Z) − min(Z)``, is smallest
   (:func:`flegel.sync.zipline.solve`, ZipLine or a variant).  The chosen set ``Z*`` tells each
   worker after which of its iterations to stop: the server holds that worker's reply after
   the chosen push.  When every worker has made its barrier push, all receive the same θ --
   the barrier (weights synchronized, Section II) -- and the phases repeat.

What "wait" means
-----------------
Predicted and measured waits are the same quantity on the same clock: the master's arrival
times of pushes.  ZipLine's ``d*`` is ``max(Z) − min(Z)`` of predicted push arrivals; the
measured wait of a barrier is the last barrier push's arrival minus the first one's -- the
time the first worker there is held beyond an ordinary push (its reply would otherwise have
left at once), which is the paper's τ_wait (Section 3).  A worker's own ``wait_s`` (commit
sent to θ received) adds the push round trip that every iteration pays under any model.

Why the waits missed their prediction (issue 14, item 7), and what is done instead
---------------------------------------------------------------------------------
Measured waits were 5-15x ZipLine's ``d*`` on the sync benchmark.  Replaying the policy on the
simulated clock (``tests/test_elastic_waits.py``) with known iteration times isolates four
causes; with no noise the prediction was already exact:

* **One interval, extrapolated R times.**  The paper predicts from the latest interval alone
  (Section 4; :func:`flegel.sync.zipline.predict` keeps that for the authors' data).  Its error is
  multiplied by the iteration index: a worker descheduled once (2 cores shared by 5 ranks) is
  predicted slow for the whole lookahead.  The interval is now the median of the worker's
  last :data:`WINDOW` iteration *spans* (θ sent to push arrived, time held excluded), kept
  across barriers; a calibration pass (``batch: auto``) or a pass's shorter remainder is
  not a sample.  Anchoring is at the start of the current iteration, not the last push.
* **Late workers collapsed onto "now".**  A predicted end already in the past was clipped to
  now, so several iterations of a late worker got the same time and ZipLine could "stop" it
  after iterations it had not begun (predicted wait 0, real waits of whole iterations).  A
  late worker's row is now shifted: its next end is now, the next ones an interval apart
  (since issue 19: the conditional median of its spans, below).
* **A plan fixed up to R iterations ahead.**  Each end time k iterations ahead is off by the
  sum of k iterations' noise.  The plan is now remade at every push of a worker that has not
  reached its barrier (rolling horizon): held workers keep their known push times, the others
  are re-predicted from the newest data, and the barrier may move at most
  :data:`SLACK` intervals of the slowest worker past the superstep's first plan (without
  that bound the horizon would recede: a later coincidence is always found).  A worker's
  last decision -- stop here or go on -- is so taken one iteration ahead.  The job option
  ``sync.replan: false`` keeps the paper's single plan, to compare against.
* **``d*`` is the minimum of many noisy candidates.**  It is the wait if every prediction
  were exact, biased low by the choice itself.  The policy also records the *expected* wait
  of its choice, :func:`flegel.sync.zipline.expected_wait`: each uncertain end perturbed by the
  worker's own past prediction errors (span − median, one iteration's worth, since the
  rolling plan corrects the rest).  Both are reported (``predicted_wait_s`` = ZipLine's
  ``d*``, ``expected_wait_s``) beside the measured ``wait_s``.

Why the waits still exceeded the placing plan's ``d`` (issue 19, item 6)
-----------------------------------------------------------------------
On MPI runs the measured wait was 1.6-2.0x the ``d`` of the plan that placed the barrier
(2.2x the first plan's ``d*``); on the simulated clock 1.5x with ±30 % noise per iteration
and 1.9x with ±60 %.  The last re-plan is made at the last push short of a target, so every
worker still running is predicted one iteration ahead, and ZipLine takes those predictions
as exact: of its candidate sets it picks one whose ends coincide only if every uncertain
worker is exactly on time (typically an uncertain end at the edge of the set, where any
error adds to the wait).  The re-plans now choose with
:func:`flegel.sync.zipline.solve_robust`: ZipLine is also solved on forecasts shifted by
draws of each worker's own past errors, and of the sets found the one with the smallest
wait averaged over common draws is taken (known ends -- held workers' pushes, the waiting
worker's current one -- are never perturbed).  On the simulated clock that takes the ratio
from 1.48 to 1.43 (±30 % per iteration) and 1.90 to 1.63 (±60 %), with lower measured waits
(``tests/test_elastic_waits.py``); on ``bench/sync_bench.py --waits --quick --repeats 3
--models elastic`` (2 shared cores, load 14-15) from medians of 2.19 and 2.28 (the point
choice) to 1.45 and 1.48, in two alternating rounds.  The first plan records ZipLine's
``d*`` and barrier time of the point forecast as before.  The paper's single plan
(``replan: false``) keeps the paper's choice.

Predicted too early (issue 19, item 6, second part)
---------------------------------------------------
Each barrier now also records, for the plan that placed it, ZipLine's ``d*`` of its forecast,
who made it and every worker's real minus predicted push arrival
(``bench/sync_bench.py --waits --barriers`` prints them per barrier).  With the robust choice
in place, workers still arrived 0.53-0.55 ms (median; mean 0.5-1.2 ms) later than that plan
predicted, against waits of 3-5 ms, and on the simulated clock 0.10 ms (±30 % per
iteration) and 0.42 ms (±60 %), where the master takes no time: a bias, not noise.  Two
causes, neither the horizon ``R`` (a placing plan looks one iteration ahead) nor the release
(excluded from both the wait and ``d``):

* **A running worker predicted at its unconditional median.**  A re-plan is made at a push,
  and the other workers are then often near the end of their iteration.  Given that one has
  not pushed yet after running ``e``, only its spans longer than ``e`` are still possible:
  its end is now ``started`` + the median of those (:meth:`ElasticBSP._next_end`), and
  one past every span on record is put one median absolute deviation from now (at least a
  tenth of its median span: identical spans have a deviation of 0).  The old
  ``max(started + median, now)`` put several such workers at exactly "now", where ZipLine
  found a perfect coincidence: 5-6 of 115-126 barriers a run were placed with ``d = 0`` and
  waited 1-8 ms.
* **The waiting worker's next iteration starts at the master's answer**, after its update,
  records and this plan (``solve_robust``: ~0.3 ms on a free core), which no span holds: its
  next ends now start after the median of the master's recent arrival-to-answer delays, and
  so does every worker's iteration after its next one (a cycle is a span plus that delay).

What remains is the wait's own spread: with unbiased ends, ``E[max − min]`` of the real ends
exceeds ``max − min`` of their predictions whenever two or more are uncertain (1.44x and 1.53x
on the simulated clock at ±30 % and ±60 % per iteration).  The figures, main against this
change, are in ``docs/sync/elastic.md``.

Recorded per barrier: the first plan's barrier time ``predicted_s``, ``d*`` and expected wait,
the actual barrier time (the last barrier push) and wait, ``d`` of the last plan (the one
that placed the barrier, ``final_predicted_wait_s``), ZipLine's ``d*`` of that plan's forecast
(``final_d_star_s``), the worker whose push made it (``final_planned_by``), the last worker
to arrive (``last_rank``), every worker's real minus predicted arrival against it
(``final_end_error_s``), how often the plan was remade, and the pushes (iterations) of every
worker in the superstep and in its monitoring phase (``monitoring_pushes``); one
``events.jsonl`` line per barrier with the θ ``version`` every worker receives.

The monitoring phase is bounded by ``R`` (issue 19)
---------------------------------------------------
Fig. 5's monitoring phase lasts until every worker has pushed twice; the paper bounds the
iteration difference of a superstep through the lookahead ``R`` only.  With a straggler whose
push took a whole pass, the fast workers pushed 220-265 times each before the first plan
(clock gaps up to 516): ASP on class-pure shards.  Now a worker ``R`` pushes ahead of the
slowest one of the superstep waits (:meth:`ElasticBSP._at_bound`), and the first plan takes
its push as its barrier push.

Determinism
-----------
ElasticBSP cannot give the same model twice, whatever the seed: between barriers the server
applies each push as it arrives (ASP-style), so the order of the updates -- and which θ each
worker computes from -- follows the workers' timing.  What is reproducible is the plan: for
the same push times, the prediction and :func:`flegel.sync.zipline.solve` choose the same barrier
(pure functions of the times; the expected wait's draws are seeded by the barrier number).
For a bit-reproducible model use BSP (``docs/determinism.md``).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any, ClassVar

import numpy as np

from flegel.ports import ServerPort
from flegel.sync.asynchronous import PushPolicy
from flegel.sync.zipline import METHODS, expected_wait, predict, solve, solve_robust
from flegel.validation import Key, boolean, choice, integer

#: Iteration spans per worker whose median is its predicted interval (module notes).
WINDOW = 8
#: How far a re-plan may move the barrier past the superstep's first plan, in intervals of
#: the slowest worker (module notes).
SLACK = 0.5
#: Fewer spans than this still possible for a running worker: their spread says nothing (one
#: span left gives the error sample [0.]), so its unconditional errors stand in.
MIN_LEFT = 3
#: A worker past every span on record whose spans do not vary (median absolute deviation 0:
#: one span, or a first plan under ``batch: auto``) is put this share of its median span
#: from now, not at now itself (module notes: late workers collapsed onto "now").
LATE_FLOOR = 0.1


class ElasticBSP(PushPolicy):
    """Master policy of ElasticBSP.

    Options
    -------
    r : int
        Lookahead ``R``: predicted iteration ends per worker (default 15).
    method : str
        The barrier solver of :func:`flegel.sync.zipline.solve` (default ``"fast"``, exact).
    replan : bool
        Remake the plan at every push of a worker short of its barrier (the rolling horizon
        of the module notes; default true).  False: the paper's one plan per superstep,
        for comparisons (``tests/test_elastic_waits.py``, ``bench/sync_bench.py --waits-sim``).
    batch, overhead
        See :class:`~flegel.sync.asynchronous.PushPolicy`.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        **PushPolicy.OPTIONS,
        "r": integer("lookahead R: predicted iteration ends per worker", 15, lo=1),
        "method": choice("the barrier solver of flegel.sync.zipline.solve ('fast' is exact)",
                         METHODS, "fast", expected="one of " + ", ".join(METHODS)),
        "replan": boolean("remake the plan at every push of a worker short of the barrier "
                          "(false: the paper's one plan per superstep, for comparisons)", True),
    }

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.R = int(options["r"])
        self.method = options["method"]
        self.replan = bool(options["replan"])
        self.since: dict[int, list[float]] = {r: [] for r in server.ranks}  # push times
        #: Pushes of the slowest worker since the barrier (:meth:`_at_bound`), kept at each
        #: push: the bound is asked once per held worker at every release.
        self._fewest = 0
        #: Latest iteration spans per worker, kept across barriers (module notes).
        self.spans: dict[int, deque[float]] = {r: deque(maxlen=WINDOW) for r in server.ranks}
        self._batch_of: dict[int, int | None] = {r: None for r in server.ranks}
        #: Arrival of a push answered at once, and the latest arrival-to-answer delays.
        self._unheld: dict[int, float] = {}
        self.delays: deque[float] = deque(maxlen=WINDOW)
        self.target: dict[int, int] | None = None  # pushes since the barrier before stopping
        self.plan: dict[str, Any] = {}
        self.barriers: list[dict[str, Any]] = []
        self.solve_s = 0.0
        # The policy is built before the training clock starts: compile the solver now, so
        # the first barrier is not late by a JIT compilation (~1.5 s for "fast").
        solve(predict([np.arange(2.0)] * 2, 2), self.method)

    # ---------------------------------------------------------------- phases
    def on_answer(self, rank: int, t: float) -> None:
        self._batch_of[rank] = self.batch  # the batch its new iteration runs
        arrived = self._unheld.pop(rank, None)
        if arrived is not None:
            self.delays.append(t - arrived)

    def after_push(self, rank: int, header: dict[str, float], t: float) -> None:
        self.since[rank].append(t)
        self._fewest = min(len(v) for v in self.since.values())
        batch, span = self._batch_of[rank], self.span[rank]
        # A calibration pass (batch: auto) or a pass's shorter remainder is not an iteration
        # of the kind predicted: its span would bias the interval.  A shard smaller than the
        # batch (an uneven split) makes every push a whole pass: that is its full iteration,
        # or the worker records no span and no plan is ever made.
        need = min(batch, max(int(header.get("n_active", batch or 0)), 1)) if batch else 0
        full = batch == 0 or (batch is not None and int(header["points"]) >= need)
        if batch is not None and batch == self.batch and full and span is not None:
            self.spans[rank].append(span)
        if self.target is None:
            if all(len(v) >= 2 for v in self.since.values()) and all(self.spans.values()):
                self._plan(rank, t, first=True)
        elif self.replan and len(self.since[rank]) < self.target[rank]:
            self._plan(rank, t, first=False)
        if not self.hold(rank):
            self._unheld[rank] = t  # answered at once: on_answer times the master's delay

    def interval(self, rank: int) -> float:
        """Predicted iteration interval of ``rank``: the median of its latest spans.

        The paper (Section 4) extrapolates the latest interval alone; one descheduled
        iteration then skews all ``R`` predicted ends by its excess times their index.  The
        median of the last :data:`WINDOW` spans ignores such outliers (module notes).
        """
        # statistics.median: ~1 µs on 8 numbers, against ~30 µs for numpy's (every push).
        return float(statistics.median(self.spans[rank]))

    def _plan(self, waiting: int, t: float, first: bool) -> None:
        """Prediction phase: predict, place the barrier with ZipLine, set every target.

        ``waiting`` just pushed at ``t`` and waits for its reply.  ``first``: the superstep's
        first plan; otherwise a re-plan (module notes), in which workers already held at
        the barrier keep their push and no barrier past the horizon is chosen.
        """
        ranks = self.server.ranks
        t0 = time.perf_counter()
        steps = np.arange(self.R, dtype=np.float64)
        limit = np.inf if first else self.plan["horizon_s"]
        # At the barrier: on re-plans the workers held there; on the first plan those held
        # at the monitoring bound (:meth:`_at_bound`), whose push is as final.
        fixed = {r for r in ranks if r != waiting
                 and (r in self.held if first else self.hold(r))}
        step_of = {r: self.interval(r) for r in ranks}
        # Every iteration after the next one also waits for the master's answer to the push
        # before it (spans run from answer to push): a cycle is a span plus that delay.
        delay = self._reply_delay()
        rows, valid, errors = [], [], []
        for r in ranks:
            err = np.empty(0)  # a known end
            if r in fixed:
                row = np.full(self.R, self.since[r][-1])  # at the barrier: its push is known
            elif r == waiting:
                # Its current push is a candidate; its next iteration begins once the master
                # has answered this push (its own processing, not in the spans).
                step = step_of[r]
                row = t + (step + delay) * steps  # row[0]: t, its current push
                err = np.asarray(self.spans[r]) - step
            else:
                first_end, err = self._next_end(r, t)
                row = first_end + (step_of[r] + delay) * steps
            # Past the horizon a row repeats its last allowed end: ZipLine may not pick
            # beyond it (the index is mapped back to that end below).
            k = max(1, int(np.count_nonzero(row <= limit)))
            row[k:] = row[k - 1]
            valid.append(k)
            rows.append(row)
            errors.append(err)
        times = np.vstack(rows)
        if self.replan:
            # Choose on the expected wait, not the point forecast's (module notes, issue 19):
            # a held worker's push is known, the waiting worker's current one too; every
            # other end may miss by one of its worker's past errors.
            zl = solve(times, self.method)  # ZipLine's d* of this plan's point forecast
            res = solve_robust(times, errors, seed=len(self.barriers), method=self.method,
                               known=[1 if r == waiting else 0 for r in ranks], best=zl)
        else:
            res = zl = solve(times, self.method)  # the paper's choice, for comparisons
        index = [min(int(res.index[i]), valid[i] - 1) for i in range(len(ranks))]
        self.target = {r: len(self.since[r]) + (0 if r in fixed else index[i] + (r != waiting))
                       for i, r in enumerate(ranks)}
        if first:
            # The promise of this superstep: d* and the expected wait of the same choice.
            # The waiting worker's current push is known; every other end carries one
            # iteration's worth of error (the re-plans correct the rest).
            ends = [float(times[i, index[i]]) for i in range(len(ranks))]
            noise = [np.empty(0) if r == waiting and index[i] == 0 else errors[i]
                     for i, r in enumerate(ranks)]
            expected = expected_wait(ends, noise, seed=len(self.barriers))
            slowest = max(step_of.values())
            # ZipLine's d* and earliest optimal barrier of the point forecast (the paper's
            # prediction), whatever set was chosen (res.d >= d*).
            self.plan = {"planned_at_s": t, "predicted_s": float(zl.t_sync),
                         "predicted_wait_s": float(zl.d), "expected_wait_s": expected,
                         "horizon_s": float(res.t_sync) + SLACK * slowest, "replans": 0,
                         # Pushes of every worker in the monitoring phase (bounded by R).
                         "monitored": [len(self.since[r]) for r in ranks]}
        else:
            self.plan["replans"] += 1
        # The plan that placed the barrier (the last one): d of its chosen set, ZipLine's d*
        # of its forecast, the end it predicted for every worker and who triggered it.
        self.plan["final_wait_s"] = float(res.d)
        self.plan["final_d_star_s"] = float(zl.d)
        self.plan["final_ends"] = [float(times[i, index[i]]) for i in range(len(ranks))]
        self.plan["final_by"] = waiting
        self.solve_s += time.perf_counter() - t0

    def _next_end(self, rank: int, t: float) -> tuple[float, np.ndarray]:
        """When ``rank``, still computing at ``t``, is predicted to push next, and the sample
        of errors that prediction may make.

        Its iteration began at ``started``; of its past spans only those longer than the
        time it has already run are still possible, so the end is ``started`` plus the median
        of those (the conditional median: a worker about to finish is not predicted at its
        unconditional median, which lies in the past or just ahead and which it then
        misses late -- issue 19, item 6).  A worker already past every span on record is
        predicted one median absolute deviation from now, and at least :data:`LATE_FLOOR` of
        its median span (a deviation of 0 put it at exactly now).  With fewer than
        :data:`MIN_LEFT` spans still possible, the error sample is the unconditional one
        (spans less their median, none ending before ``t``): one span left would make it
        certain, [0.].
        """
        spans = np.asarray(self.spans[rank])
        med = float(np.median(spans))
        unconditional = spans - med
        ran = t - self.started[rank]
        left = spans[spans > ran]
        if left.size:
            end = self.started[rank] + float(np.median(left))
            if left.size >= MIN_LEFT:
                return end, left - (end - self.started[rank])
        else:
            mad = float(np.median(np.abs(unconditional)))
            end = t + max(mad, LATE_FLOOR * med)
        # It has not pushed by t: no error earlier than that.
        return end, np.maximum(unconditional, t - end)

    def _reply_delay(self) -> float:
        """The master's median time from a push's arrival to its answer, for a worker it
        does not hold (its update, records and this plan; recent answers)."""
        return float(statistics.median(self.delays)) if self.delays else 0.0

    def hold(self, rank: int) -> bool:
        if self.target is None:
            return self._at_bound(rank)
        return len(self.since[rank]) >= self.target[rank]

    def _at_bound(self, rank: int) -> bool:
        """Monitoring phase: ``rank`` has pushed ``R`` times more than the slowest worker
        since the barrier, and waits for the plan (or for that worker's next push).

        The paper bounds the iteration difference within a superstep by the lookahead
        (ZipLine paper Section 3: "a small iteration difference β exists that is defined
        within the R future intervals"; "a bound in R also ensures that ElasticBSP does not
        behave as the ASP model") and leaves the monitoring phase unbounded, since it assumes
        two pushes of every worker take about as long for all (Fig. 5).  With a straggler
        they do not: one push of a worker 30x slower let the others push hundreds of times
        before any plan existed (issue 19).  flegel's choice, modelled on the paper's R:
        during monitoring no worker runs more than ``R`` pushes ahead of the slowest worker
        of the superstep (SSP's rule with s = R, counted since the barrier); a worker held
        there is, to the first plan, a worker already at its barrier (its push is known).
        The slowest worker is never held by it, so monitoring always ends.
        """
        pushes = len(self.since[rank])
        return pushes > 0 and pushes - self._fewest >= self.R

    def release(self) -> None:
        super().release()
        if self.target is not None and all(r in self.held for r in self.server.ranks):
            self._barrier()

    def _barrier(self) -> None:
        """Every worker made its barrier push: all continue from the same θ."""
        srv = self.server
        ranks = srv.ranks
        ends = [self.since[r][-1] for r in ranks]
        record = {"barrier": len(self.barriers) + 1, "time_s": round(self.now(), 6),
                  "objective": srv.objective, "version": srv.version,
                  "predicted_s": round(self.plan["predicted_s"], 6),
                  "actual_s": round(max(ends), 6),
                  "predicted_wait_s": round(self.plan["predicted_wait_s"], 6),
                  "expected_wait_s": round(self.plan["expected_wait_s"], 6),
                  "wait_s": round(max(ends) - min(ends), 6),
                  "final_predicted_wait_s": round(self.plan["final_wait_s"], 6),
                  "final_d_star_s": round(self.plan["final_d_star_s"], 6),
                  "final_planned_by": self.plan["final_by"],
                  "last_rank": ranks[int(np.argmax(ends))],
                  # Real minus predicted push arrival per worker, against the last plan.
                  "final_end_error_s": [round(a - p, 6)
                                        for a, p in zip(ends, self.plan["final_ends"])],
                  "replans": self.plan["replans"],
                  "monitoring_pushes": self.plan["monitored"],
                  "iterations": [len(self.since[r]) for r in ranks]}
        self.barriers.append(record)
        srv.record(record)
        self.target = None
        self.since = {r: [] for r in ranks}
        self._fewest = 0
        for r in ranks:
            self.answer(r)  # no push is applied in between: one θ, one version for all

    def summary(self) -> dict[str, Any]:
        b = self.barriers

        def mean(key: str) -> float:
            return float(np.mean([x[key] for x in b])) if b else 0.0

        err = [x["actual_s"] - x["predicted_s"] for x in b]
        return {**super().summary(), "r": self.R, "method": self.method, "replan": self.replan,
                "barriers": len(b),
                "mean_barrier_wait_s": mean("wait_s"),
                "mean_predicted_wait_s": mean("predicted_wait_s"),
                "mean_expected_wait_s": mean("expected_wait_s"),
                "mean_prediction_error_s": float(np.mean(err)) if b else 0.0,
                "solve_s": self.solve_s,
                "barrier_log": b[-1000:]}
