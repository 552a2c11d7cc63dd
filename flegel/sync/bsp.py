"""Bulk Synchronous Parallel: full batch (BSPB) and mini-batch with automatic size (BSPV).

Every worker processes the same pre-assigned workload -- all its points (``batch: full``) or
``b`` points (``batch: <b>`` or ``auto``) -- then waits at a global barrier (FSP paper
Section 6.1, "Frameworks for Comparison").

Determinism
-----------
The same job and seed give the same model, bit for bit, with ``batch: full`` or a fixed
``batch``: nothing in an iteration depends on timing.  Two things would otherwise make
floating-point sums differ from run to run, and are fixed here:

* the master sums the workers' aggregators in rank order, not in arrival order
  (:meth:`BSP.barrier`);
* a worker cuts its iteration into blocks of a fixed :data:`BLOCK` points
  (:class:`BSPWorker`), not the block sizer's timed choice, so the order in which it sums its
  points' contributions is always the same.

``batch: auto`` chooses the batch from one measured calibration iteration, so it depends on
timing.  The choice is put on a coarse grid (:func:`grid_batch`: the shard split into a power
of two of batches), so two runs pick the same batch unless their measurements fall on either
side of a grid boundary -- which a loaded machine can make happen (docs/determinism.md); the
chosen ``batch`` is in ``summary.json``, and setting ``sync.batch`` to it replays a run
exactly.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from flegel.ports import ServerPort, WorkerPolicy, WorkerPort
from flegel.protocol import Instructions
from flegel.sync.base import BarrierPolicy, round_trip_s
from flegel.validation import Described, Key, any_of, is_int, number, one_of


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


#: Points per block under BSP by default (``sync.block``): fixed, so a worker sums its points
#: in the same order in every run.  BSP answers no signals within an iteration, but each
#: block pays the runtime's per-block work (store, aggregation, block statistics: about
#: 40 µs), and a ``max_time`` stop or an exact evaluation waits for the block in progress.
#: 16,384 points are about 0.6 ms of K-means on 28 features, where 4,096 points spent a
#: fifth of a pass on that fixed cost (bench/kmeans_bench.py: 1M x 28, K = 16, a pass went
#: from 1.03x to 0.77x scikit-learn's Lloyd iteration); an algorithm slower than ~50 µs a
#: point (a CNN on the CPU) is better served by a smaller ``sync.block``.
BLOCK = 16384


def grid_batch(batch: int, n: int) -> int:
    """Put a mini-batch size on the grid ``ceil(n / 2**j)``: the nearest (in log scale)
    split of ``n`` points into a power of two of batches.

    A timed choice (:func:`auto_batch`) varies a little from run to run; on this grid it
    changes only when it crosses a boundary between two splits (a factor of √2 apart).
    """
    if batch >= n or n <= 1:
        return max(min(batch, n), 1)
    j = round(math.log2(n / max(batch, 1)))
    return max(1, math.ceil(n / 2 ** j))


class BSPWorker(WorkerPolicy):
    """Worker side of BSP: the base policy's batches, in blocks of ``sync.block`` points
    (:data:`BLOCK` by default)."""

    def block_size(self, port: WorkerPort, sized: int) -> int:
        return int(self.options.get("block", BLOCK))


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
        "batch": Key(Described(any_of(one_of("full", "auto"), is_int(1)),
                               "'full', 'auto' or a positive number of points per worker"), "full",
                     "points per worker per iteration: all of them (BSPB), chosen after a "
                     "calibration iteration (BSPV), or a fixed number"),
        "block": Key(Described(is_int(1), "a positive number of points"), BLOCK,
                     "points per block within an iteration, fixed so the sums are the same "
                     "in every run; each block costs ~40 µs of runtime work and a max_time "
                     "stop waits for the block in progress: lower it for an algorithm "
                     "slower than ~50 µs a point"),
        "overhead": number("largest share of an iteration the barrier may take, for batch: "
                           "auto (ρ)", 0.1, lo=0, hi=1, lo_open=True, hi_open=True),
    }

    WORKER = BSPWorker

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        b = options["batch"]
        self.batch = 0 if b in ("full", "auto") else int(b)
        self.per_point_s: float | None = None
        self.phi_s: float | None = None

    def instructions(self, rank: int) -> Instructions:
        return Instructions(batch=self.batch)

    def barrier(self) -> None:
        # Sum the aggregators in rank order: floating-point addition is not associative, and
        # arrival order changes from run to run.
        self.pending = dict(sorted(self.pending.items()))
        super().barrier()

    def after_barrier(self, commits: dict[int, dict[str, float]], agg: dict[str, Any]) -> None:
        if self.options["batch"] != "auto" or self.phi_s is not None:
            return
        # Calibration: the slowest worker's cost per point (stragglers included: it sets the
        # pace of every barrier) and one barrier's pure messaging and update cost.
        self.per_point_s = max(h["compute_s"] / max(h["points"], 1) for h in commits.values())
        latency = sorted(h["latency_s"] for h in commits.values())[len(commits) // 2]
        self.phi_s = round_trip_s(latency, self.apply_s)
        smallest = max(min(int(h["n_active"]) for h in commits.values()), 1)
        self.batch = grid_batch(auto_batch(self.per_point_s, self.phi_s,
                                           self.options["overhead"], smallest), smallest)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["batch"] = self.batch or "full"
        if self.phi_s is not None:
            out.update(per_point_s=self.per_point_s, barrier_cost_s=self.phi_s)
        return out
