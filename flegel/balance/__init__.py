"""FSP workload balance, the pure parts (FSP paper §4.2): the balance monitor and planner.

Nothing here talks to workers or moves data: :mod:`flegel.balance.monitor` turns the
statistics the master gathers at a barrier into *super workers* and applies Eq. 8's
trigger; :mod:`flegel.balance.planner` estimates the remaining time (§3.3), splits it into
``d`` rounds and computes, with Eq. 9 (or its fallback), how many points each paired
super worker sends.  The asynchronous transfer itself (§4.3) belongs elsewhere.

Units, everywhere in this package: ``n`` in points, ``v`` in **seconds per point** (the time
one worker takes to process one data point once), ``p`` in traversal passes (possibly
fractional), times in seconds.  With these, ``T / (v · n)`` is a number of passes, which is
how the paper writes ``P̃ = P + T/(d·V·N)``.
"""

from __future__ import annotations

from flegel.balance.monitor import (
    DEFAULT_EPSILON,
    SuperWorker,
    Tolerance,
    WorkerStat,
    group,
    imbalanced,
    needs_migration,
)
from flegel.balance.planner import (
    DEFAULT_ROUNDS,
    Move,
    advance,
    cycle_finished,
    eq9_delta,
    fallback_delta,
    pair,
    pair_delta,
    pass_time,
    plan_round,
    predicted_passes,
    progress_rate,
    remaining_time,
)

__all__ = [
    "DEFAULT_EPSILON",
    "DEFAULT_ROUNDS",
    "Move",
    "SuperWorker",
    "Tolerance",
    "WorkerStat",
    "advance",
    "cycle_finished",
    "eq9_delta",
    "fallback_delta",
    "group",
    "imbalanced",
    "needs_migration",
    "pair",
    "pair_delta",
    "pass_time",
    "plan_round",
    "predicted_passes",
    "progress_rate",
    "remaining_time",
]
