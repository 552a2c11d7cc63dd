"""The synchronization cost as the FSP paper measures it (Section 6.2, Fig. 10; Section 6.3,
Fig. 13), read from a run's ``events.jsonl`` and ``summary.json``.

The paper: "We define the cost as the elapsed time from the point where a worker enters a
barrier at the end of an iteration, to the point where it leaves the barrier."  Two views:

* **per worker** (Fig. 10): a worker enters the barrier when it commits and leaves it when
  the next θ reaches it -- the COMMIT header's ``wait_s``, which each iteration's event
  records for the wait *before* it.  Summed over the iterations after the first: the wait
  for θ⁰ at start-up (the master loading data, the other ranks starting) is no barrier.
  Fig. 10a plots the difference between the workers' costs; runs of different length compare
  by the cost's share of the run's training time.
* **per iteration** (Fig. 13): the barrier from the first report to the broadcast of the next
  θ on the master's clock (``barrier_s``: the first worker to enter waits that long, plus the
  message times, the same under both coordinations), summed over the run: the "accumulated
  synchronization cost" of Fig. 13b, in seconds of the run's time (the paper's 10.1 s cut is
  23.9 % of its 42.3 s runtime cut, so the sum is over iterations, not workers).  Under
  centralized coordination the pause signal's way to the workers is not in it: they compute
  until it arrives, so it costs no utilization (the paper's Fig. 6a puts the extra cost in
  the fast workers' wait for the slow ones' reports, which is in it).

  Only over the iterations that a coordination ends: those with an interval η
  (:func:`interval_barriers`).  FSP's iterations without one -- the calibration, whole
  passes, coverage, the sampled first pass (:data:`~flegel.sync.fsp.UNTIMED_PHASES`) -- end
  when every worker finished its pass (or share) under either coordination: their barrier is
  the straggler's pass beyond the fastest worker's, the same wait whoever times η, and one
  such barrier outweighed a run's η iterations.  Measured (``flegel paper --quick --only
  13`` on this host, load 4-12, the CNN with a 2x *Natural* straggler): the calibration's
  barrier was 0.98 s semi and 2.73 s centralized against 0.28 s and 0.12 s over the 28 and 8
  η iterations, so Σ ``barrier_s`` over every barrier read 2.26x where the η iterations read
  0.42x; logistic regression's semi runs had no η iteration at all (whole passes).
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

from flegel.cli.paper.runner import RunResult
from flegel.rundir.files import EVENTS
from flegel.rundir.reader import barrier_events, read_events
from flegel.sync.fsp import UNTIMED_PHASES


def _barriers(run: RunResult) -> list[dict[str, Any]]:
    """The run's barrier events that carry a barrier's cost, in order ([] for a failed run)."""
    if not run.ok or not (run.folder / EVENTS).exists():
        return []
    return list(_read_barriers(run.folder, (run.folder / EVENTS).stat().st_mtime_ns))


@functools.lru_cache(maxsize=256)
def _read_barriers(folder: Path, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    """:func:`_barriers` read once per events file (a figure's row asks for them several
    times; ``mtime_ns`` keys a rewritten file anew).  The events are only read."""
    return tuple(ev for ev in barrier_events(read_events(folder)) if "barrier_s" in ev)


def interval_barriers(run: RunResult) -> list[dict[str, Any]]:
    """The run's barrier events of iterations with an interval η (module notes): all but
    FSP's :data:`~flegel.sync.fsp.UNTIMED_PHASES`; an event without a phase (another model)
    counts."""
    return [ev for ev in _barriers(run) if ev.get("phase") not in UNTIMED_PHASES]


def untimed_s(run: RunResult) -> float:
    """Σ ``barrier_s`` over the iterations without an interval
    (:data:`~flegel.sync.fsp.UNTIMED_PHASES`): what :func:`accumulated_s` leaves out (NaN
    if failed)."""
    if not run.ok:
        return float("nan")
    return sum(float(ev["barrier_s"]) for ev in _barriers(run)
               if ev.get("phase") in UNTIMED_PHASES)


def worker_costs(run: RunResult) -> list[float]:
    """Each worker's accumulated synchronization cost in seconds (module notes: the waits for
    θ after its commits; not the start-up wait), in rank order; [] without barriers."""
    bars = _barriers(run)
    if len(bars) < 2:
        return []
    ranks = bars[0]["workers"]["rank"]
    total = dict.fromkeys(ranks, 0.0)
    for ev in bars[1:]:
        for r, w in zip(ev["workers"]["rank"], ev["workers"]["wait_s"]):
            total[r] = total.get(r, 0.0) + float(w)
    return [total[r] for r in sorted(total)]


def training_s(run: RunResult) -> float:
    """The run's training time (``wall_time_s``), at least 1 ns."""
    return max(float((run.summary or {}).get("wall_time_s", 0.0)), 1e-9)


def cost_shares(run: RunResult) -> list[float]:
    """:func:`worker_costs` as shares of the run's training time."""
    t = training_s(run)
    return [c / t for c in worker_costs(run)]


def mean_spread_s(run: RunResult) -> float:
    """Mean time from the first report of a barrier to its last (NaN without barriers)."""
    return float((run.summary or {}).get("mean_spread_s", float("nan")))


def mean_iteration_s(run: RunResult) -> float:
    """Training time per barrier (NaN without barriers)."""
    n = int((run.summary or {}).get("barriers", 0))
    return training_s(run) / n if n else float("nan")


def accumulated_s(run: RunResult) -> float:
    """The accumulated synchronization cost (module notes): Σ ``barrier_s`` over the
    iterations with an interval η (:func:`interval_barriers`; NaN if failed)."""
    if not run.ok or "mean_barrier_s" not in (run.summary or {}):
        return float("nan")
    return sum(float(ev["barrier_s"]) for ev in interval_barriers(run))


def reasons(run: RunResult, interval_only: bool = False) -> Counter[str]:
    """How the workers' iterations ended (``timer``, ``signal``, ``pass``, ...), counted over
    every commit of every barrier (``interval_only``: of :func:`interval_barriers`)."""
    bars = interval_barriers(run) if interval_only else _barriers(run)
    return Counter(r for ev in bars for r in ev["workers"]["reason"])
