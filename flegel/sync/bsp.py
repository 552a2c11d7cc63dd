"""Bulk Synchronous Parallel: full batch (BSPB) and mini-batch with automatic size (BSPV).

Every worker processes the same pre-assigned workload -- all its points (``batch: full``) or
``b`` points (``batch: <b>`` or ``auto``) -- then waits at a global barrier (FSP paper
Section 6.1, "Frameworks for Comparison").
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from flegel.ports import ServerPort
from flegel.protocol import Instructions
from flegel.schema import Key, any_of, is_int, number, one_of
from flegel.sync.base import BarrierPolicy, round_trip_s


def auto_batch(per_point_s: float, barrier_s: float, overhead: float,
               max_batch: int) -> int:
    """Mini-batch size from the cost-benefit rule of BSPV.

    The FSP paper's BSPV "automatically seeks an optimal batch size based on cost-benefit
    analysis [10]" (Yin, Zhang and Gao, *Accelerating EM algorithms with frequent updates*,
    CLUSTER 2012) at the start of training.  Smaller batches refresh θ sooner (benefit); each
    batch pays one barrier φ (cost).  We take the smallest batch whose barrier costs at most a
    fraction ``overhead`` (ρ) of the iteration, on the slowest worker:

        b · c / (b · c + φ) ≥ 1 − ρ   ⇔   b = ⌈ φ (1 − ρ) / (ρ c) ⌉,

    with c the slowest worker's measured compute time per point and φ the measured barrier
    cost, clamped to [1, ``max_batch``].
    """
    if per_point_s <= 0:
        return max_batch
    b = math.ceil(barrier_s * (1.0 - overhead) / (overhead * per_point_s))
    return int(min(max(b, 1), max_batch))


class BSP(BarrierPolicy):
    """Master policy of BSP.

    Options
    -------
    batch : "full", "auto" or int
        Points per worker per iteration; ``auto`` runs a full-batch calibration iteration,
        then applies :func:`auto_batch`.
    overhead : float
        ρ of :func:`auto_batch` (default 0.1).
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        "batch": Key("'full', 'auto' or a positive number of points per worker",
                     any_of(one_of("full", "auto"), is_int(1)), "full",
                     "points per worker per iteration: all of them (BSPB), chosen after a "
                     "calibration iteration (BSPV), or a fixed number"),
        "overhead": number("largest share of an iteration the barrier may take, for batch: "
                           "auto (ρ)", 0.1, lo=0, hi=1, lo_open=True, hi_open=True),
    }

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        b = options["batch"]
        self.batch = 0 if b in ("full", "auto") else int(b)
        self.per_point_s: float | None = None
        self.phi_s: float | None = None

    def instructions(self, rank: int) -> Instructions:
        return Instructions(batch=self.batch)

    def after_barrier(self, commits: dict[int, dict[str, float]], agg: dict[str, Any]) -> None:
        if self.options["batch"] != "auto" or self.phi_s is not None:
            return
        # Calibration: the slowest worker's cost per point (stragglers included: it sets the
        # pace of every barrier) and one barrier's pure messaging and update cost.
        self.per_point_s = max(h["compute_s"] / max(h["points"], 1) for h in commits.values())
        latency = sorted(h["latency_s"] for h in commits.values())[len(commits) // 2]
        self.phi_s = round_trip_s(latency, self.apply_s)
        smallest = min(int(h["n_active"]) for h in commits.values())
        self.batch = auto_batch(self.per_point_s, self.phi_s, self.options["overhead"],
                                max(smallest, 1))

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["batch"] = self.batch or "full"
        if self.phi_s is not None:
            out.update(per_point_s=self.per_point_s, barrier_cost_s=self.phi_s)
        return out
