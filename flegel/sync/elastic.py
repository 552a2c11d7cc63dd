"""Elastic Bulk Synchronous Parallel (ElasticBSP paper, ICDM 2019, Sections II-III; ZipLine
paper, Machine Learning 2021, Section 3 and Fig. 5).

Between barriers the workers push ASP-style (the server applies each push at once and answers
at once).  Each superstep has two phases (Fig. 5):

1. *Monitoring*: the server records push times until every worker has pushed at least twice
   since the last barrier, so it knows each worker's latest iteration interval.
2. *Prediction*: it predicts the next ``R`` iteration end times of every worker from its latest
   interval (:func:`flegel.zipline.predict`) and places the barrier where the wait of the
   fastest worker, ``max(Z) − min(Z)``, is smallest (:func:`flegel.zipline.solve`, ZipLine
   or a variant).  The chosen set ``Z*`` tells each worker after which of its iterations to
   stop: the server holds that worker's reply after the chosen push.  When every worker has
   made its barrier push, all receive the same θ -- the barrier (weights synchronized, Section
   II) -- and the phases repeat.

Details:

* When the prediction is made, the worker whose push completed the monitoring phase waits for
  its reply, so its current push is a candidate (index 0 of :func:`~flegel.zipline.predict`);
  the others are already computing their next iteration, so their candidates start one
  interval after their latest push.  A predicted end earlier than now (a worker running late)
  is moved to now: it cannot end in the past.
* Recorded per barrier: the predicted barrier time ``t_sync`` and wait ``d*``, the actual
  barrier time (the last barrier push) and wait (last − first barrier push), and the pushes
  (iterations) of every worker in the superstep; one ``events.jsonl`` line per barrier with
  the θ ``version`` every worker receives.

Determinism
-----------
ElasticBSP cannot give the same model twice, whatever the seed: between barriers the server
applies each push as it arrives (ASP-style), so the order of the updates -- and which θ each
worker computes from -- follows the workers' timing.  What is reproducible is the plan: for
the same push times, :func:`flegel.zipline.predict` and :func:`flegel.zipline.solve` choose
the same barrier (they are pure functions of the times).  For a bit-reproducible model use
BSP (``docs/determinism.md``).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from flegel.ports import ServerPort
from flegel.schema import Key, choice, integer
from flegel.sync.asynchronous import PushPolicy
from flegel.zipline import METHODS, predict, solve


class ElasticBSP(PushPolicy):
    """Master policy of ElasticBSP.

    Options
    -------
    r : int
        Lookahead ``R``: predicted iteration ends per worker (default 15).
    method : str
        The barrier solver of :func:`flegel.zipline.solve` (default ``"fast"``, exact).
    batch, overhead
        See :class:`~flegel.sync.asynchronous.PushPolicy`.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        **PushPolicy.OPTIONS,
        "r": integer("lookahead R: predicted iteration ends per worker", 15, lo=1),
        "method": choice("the barrier solver of flegel.zipline.solve ('fast' is exact)",
                         METHODS, "fast", expected="one of " + ", ".join(METHODS)),
    }

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.R = int(options["r"])
        self.method = options["method"]
        self.since: dict[int, list[float]] = {r: [] for r in server.ranks}  # push times
        self.target: dict[int, int] | None = None  # pushes since the barrier before stopping
        self.plan: dict[str, Any] = {}
        self.barriers: list[dict[str, Any]] = []
        self.solve_s = 0.0
        # The policy is built before the training clock starts: compile the solver now, so
        # the first barrier is not late by a JIT compilation (~1.5 s for "fast").
        solve(predict([np.arange(2.0)] * 2, 2), self.method)

    # ---------------------------------------------------------------- phases
    def after_push(self, rank: int, header: dict[str, float], t: float) -> None:
        self.since[rank].append(t)
        if self.target is None and all(len(v) >= 2 for v in self.since.values()):
            self._predict(rank, t)

    def _predict(self, waiting: int, t: float) -> None:
        """Prediction phase: choose every worker's barrier push with ZipLine."""
        ranks = self.server.ranks
        t0 = time.perf_counter()
        ahead = predict([np.asarray(self.since[r]) for r in ranks], self.R + 1)
        rows = []
        for i, r in enumerate(ranks):
            row = ahead[i, :-1] if r == waiting else ahead[i, 1:]
            rows.append(np.maximum(row, t))
        res = solve(np.vstack(rows), self.method)
        self.solve_s += time.perf_counter() - t0
        self.target = {r: len(self.since[r]) + int(res.index[i]) + (r != waiting)
                       for i, r in enumerate(ranks)}
        self.plan = {"planned_at_s": t, "predicted_s": float(res.t_sync),
                     "predicted_wait_s": float(res.d)}

    def hold(self, rank: int) -> bool:
        return self.target is not None and len(self.since[rank]) >= self.target[rank]

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
                  "wait_s": round(max(ends) - min(ends), 6),
                  "iterations": [len(self.since[r]) for r in ranks]}
        self.barriers.append(record)
        srv.record(record)
        self.target = None
        self.since = {r: [] for r in ranks}
        for r in ranks:
            self.answer(r)  # no push is applied in between: one θ, one version for all

    def summary(self) -> dict[str, Any]:
        b = self.barriers
        err = [x["actual_s"] - x["predicted_s"] for x in b]
        return {**super().summary(), "r": self.R, "method": self.method,
                "barriers": len(b),
                "mean_barrier_wait_s": float(np.mean([x["wait_s"] for x in b])) if b else 0.0,
                "mean_predicted_wait_s": (float(np.mean([x["predicted_wait_s"] for x in b]))
                                          if b else 0.0),
                "mean_prediction_error_s": float(np.mean(err)) if b else 0.0,
                "solve_s": self.solve_s,
                "barrier_log": b[-1000:]}
