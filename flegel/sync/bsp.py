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
* a worker cuts its iteration into blocks of one fixed size (:class:`BSPWorker`), not the
  block sizer's timed choice, so the order in which it sums its points' contributions is
  always the same.

The block size (``sync.block``) is :data:`BLOCK` points unless the algorithm's calls cost
enough to need larger ones (a GPU launch: ~5 ms a call).  With ``block: auto`` (the default)
worker 1 times its kernel at warm-up (the workers run the same kernel; one measuring costs
the others no CPU), the master picks from its per-call and per-point costs the power of two
that keeps the per-call cost to 15% of a block
(:func:`choose_block`, :func:`flegel.runtime.blocksize.fixed_block`), at least
:data:`BLOCK`.  That grid makes the size the same in every run; ``summary.json`` records it
(``block``, with the measured ``call_cost``), and ``sync.block: <that size>`` replays it
without measuring.  A shard no larger than :data:`BLOCK` points is one block whatever the
size, so nothing is measured.

``batch: auto`` chooses the batch from one measured calibration iteration, so it depends on
timing.  The choice is put on a coarse grid (:func:`grid_batch`: the shard split into a power
of two of batches), so two runs pick the same batch unless their measurements fall on either
side of a grid boundary -- which a loaded machine can make happen (docs/determinism.md); the
chosen ``batch`` is in ``summary.json``, and setting ``sync.batch`` to it replays a run
exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
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


#: The least points per block under BSP (``sync.block: auto``, the default; the block is
#: fixed, so a worker sums its points in the same order in every run).  BSP answers no
#: signals within an iteration, but each block pays the runtime's per-block work (store,
#: aggregation, block statistics: about 40 µs), and a ``max_time`` stop or an exact
#: evaluation waits for the block in progress.  16,384 points are about 0.6 ms of K-means
#: on 28 features, where 4,096 points spent a fifth of a pass on that fixed cost
#: (bench/kmeans_bench.py: 1M x 28, K = 16, a pass went from 1.03x to 0.77x scikit-learn's
#: Lloyd iteration); an algorithm slower than ~50 µs a point (a CNN on the CPU) is better
#: served by a smaller ``sync.block``.
BLOCK = 16384

#: ``sync.block``'s value that chooses the block from the measured per-call cost.
AUTO = "auto"


def measures_block(model: str, options: dict[str, Any]) -> bool:
    """Whether the workers time their kernel at warm-up for the master to choose the block
    (BSP with ``block: auto``)."""
    return model == "bsp" and options.get("block", AUTO) == AUTO


@dataclass(frozen=True)
class BlockChoice:
    """The block size chosen before training, and from what (``summary.json``).

    Attributes
    ----------
    block : int
        Points per block.
    fixed_s, point_s : float or None
        The median of the workers' measured per-call and per-point costs (None: nothing was
        measured, every shard being a single block of :data:`BLOCK` points).
    measure_s : float or None
        The longest a worker took to measure them (part of ``compile_s``).
    """

    block: int
    fixed_s: float | None = None
    point_s: float | None = None
    measure_s: float | None = None


def choose_block(costs: list[tuple[float, float, float] | None],
                 size: Callable[[float, float, int], int]) -> BlockChoice:
    """The block for every worker from their measured ``(a, b, seconds spent measuring)``
    (None: not measured).

    The medians of ``a`` and ``b`` over the workers that measured (worker 1 alone under
    :mod:`flegel.run`), then ``size(a, b, BLOCK)``: the runtime's rule
    (:func:`flegel.runtime.blocksize.fixed_block`, a power of two, at least :data:`BLOCK`).
    """
    measured = [c for c in costs if c is not None]
    if not measured:
        return BlockChoice(BLOCK)
    a, b = _median([c[0] for c in measured]), _median([c[1] for c in measured])
    return BlockChoice(size(a, b, BLOCK), a, b, max(c[2] for c in measured))


def _median(values: list[float]) -> float:
    """The median (``statistics`` costs every rank 2 ms of imports)."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


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
    """Worker side of BSP: the base policy's batches, in blocks of :attr:`block` points
    (``sync.block``, or the master's choice under ``block: auto``: :data:`BLOCK` until it
    is made).  A checkpoint keeps :attr:`block`, so a resumed run goes on with it."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        b = self.options.get("block", AUTO)
        self.block = BLOCK if b == AUTO else int(b)

    def block_size(self, port: WorkerPort, sized: int) -> int:
        return self.block


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
        "block": Key(Described(any_of(one_of(AUTO), is_int(1)),
                               "'auto' or a positive number of points"), AUTO,
                     "points per block within an iteration, fixed so the sums are the same "
                     "in every run: auto (16,384, or a larger power of two when the "
                     "algorithm's per-call cost measured at warm-up needs it; summary.json's "
                     "block replays it) or a number; each block costs ~40 µs of runtime work "
                     "and a max_time stop waits for the block in progress: lower it for an "
                     "algorithm slower than ~50 µs a point"),
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
        block = options.get("block", AUTO)
        self.block = BlockChoice(BLOCK if block == AUTO else int(block))

    def chose_block(self, choice: BlockChoice) -> None:
        """The block the wiring chose for ``block: auto`` (:func:`choose_block`)."""
        self.block = choice

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
        out["block"] = self.block.block
        if self.block.fixed_s is not None:
            out["call_cost"] = {"fixed_s": self.block.fixed_s, "point_s": self.block.point_s,
                                "measure_s": self.block.measure_s}
        if self.phi_s is not None:
            out.update(per_point_s=self.per_point_s, barrier_cost_s=self.phi_s)
        return out
