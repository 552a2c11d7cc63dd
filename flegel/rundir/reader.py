"""What a run directory holds, read back as series (``flegel report``), no matplotlib.

A run directory (``flegel/rundir/writer.py``) holds ``events.jsonl`` (one record per barrier or
push), ``summary.json`` (written when the run ends) and ``job.yaml``; :class:`Run` reads the
first two once for everything drawn or printed about the run, and the functions below turn
them into series: the exact objective, the online one, every worker's columns over time,
its compute and wait.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flegel.rundir import files

#: One worker's column over time: (times in seconds, values).
Series = tuple[list[float], list[float]]

#: One worker's stretch between two of its reports: (start s, end s, compute seconds in it).
Interval = tuple[float, float, float]


def read_events(run: Path) -> list[dict[str, Any]]:
    """The records of ``run/events.jsonl``, in order (blank lines skipped)."""
    lines = (run / files.EVENTS).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def read_summary(run: Path) -> dict[str, Any]:
    """``run/summary.json``; empty for a run that did not finish (it is written last)."""
    path = run / files.SUMMARY
    if not path.exists():
        return {}
    out: dict[str, Any] = json.loads(path.read_text())
    return out


@dataclass(frozen=True)
class Run:
    """A run directory with its name on pictures and pages, its summary and events."""

    path: Path
    label: str
    summary: dict[str, Any]
    events: list[dict[str, Any]]

    @classmethod
    def read(cls, path: Path, label: str) -> Run:
        """Read ``path``'s summary and events."""
        return cls(path, label, read_summary(path), read_events(path))


def barrier_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of barriers (those with a ``workers`` record), in order."""
    return [e for e in events if "workers" in e]


def push_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of one worker's commit under a push model (ASP, SSP, ...): with ``rank``."""
    return [e for e in events if "rank" in e and "workers" not in e]


def exact_trace(summary: dict[str, Any]) -> Series:
    """The exact objective against training time, from ``summary.json``.

    Parameters
    ----------
    summary : dict
        A run's ``summary.json``.

    Returns
    -------
    (list of float, list of float)
        The times and exact objectives of ``objective_trace``: θ snapshots evaluated on
        every shard during training or after it, within ``output.trace_budget`` (those
        over it are named in ``final_evaluation.dropped_s``); its last point is the final
        θ.  Without a trace, the final objective alone at the end of training; empty for
        a summary with neither.
    """
    trace = summary.get("objective_trace") or []
    if trace:
        return [float(t) for t, _ in trace], [float(f) for _, f in trace]
    if "final_objective" in summary:
        return [float(summary.get("wall_time_s", 0.0))], [float(summary["final_objective"])]
    return [], []


def exact_during_run(summary: dict[str, Any]) -> tuple[Series, Series]:
    """The objective evaluated during training (``summary.json``'s ``exact_objective``).

    These are the values the progress line showed and the ``target_objective`` stop used
    (``flegel/runtime/exact.py``): f(θ) of a θ snapshot on every point, or an estimate when
    an evaluation could not cover the data exactly once.

    Parameters
    ----------
    summary : dict
        A run's ``summary.json``.

    Returns
    -------
    (Series, Series)
        The exact evaluations and the estimates, each as (times, values); empty for runs
        without evaluations during training.
    """
    exact: Series = ([], [])
    estimate: Series = ([], [])
    for e in (summary.get("exact_objective") or {}).get("trace", []):
        into = exact if e.get("exact", True) else estimate
        into[0].append(float(e["time_s"]))
        into[1].append(float(e["objective"]))
    return exact, estimate


def online_series(events: list[dict[str, Any]]) -> Series:
    """The online objective of every event against training time."""
    ev = [e for e in events if "objective" in e]
    return [float(e["time_s"]) for e in ev], [float(e["objective"]) for e in ev]


def worker_series(events: list[dict[str, Any]], column: str) -> dict[int, Series]:
    """Every worker's ``column`` against training time, from barrier and push events.

    Parameters
    ----------
    events : list of dict
        The records of ``events.jsonl``.
    column : str
        A per-worker column: of barrier events' ``workers`` (``passes``, ``held``,
        ``in_flight``, ``points``...) or of push events (``passes``, ``points``...).

    Returns
    -------
    dict of int to (list of float, list of float)
        rank -> (``time_s`` of every event that has the column for it, the worker's values).
        Empty when no event has the column.
    """
    out: dict[int, Series] = {}

    def add(rank: Any, time_s: Any, value: Any) -> None:
        times, values = out.setdefault(int(rank), ([], []))
        times.append(float(time_s))
        values.append(float(value))

    for e in events:
        if "workers" in e:
            w = e["workers"]
            for rank, value in zip(w["rank"], w.get(column, [])):
                add(rank, e["time_s"], value)
        elif "rank" in e and column in e:
            add(e["rank"], e["time_s"], e[column])
    return out


def worker_intervals(events: list[dict[str, Any]]) -> dict[int, list[Interval]]:
    """Every worker's stretches of the run, each with the compute time it reported in it.

    A barrier event closes a stretch for every worker (from the previous barrier); a push
    event closes one for its worker (from that worker's previous push).  What is not compute
    in a stretch is waiting (for the barrier, for θ) or slowed.

    Parameters
    ----------
    events : list of dict
        The records of ``events.jsonl``.

    Returns
    -------
    dict of int to list of (float, float, float)
        rank -> (start s, end s, compute s) in order; compute is capped at the stretch's
        length (the two clocks are read at slightly different moments).
    """
    out: dict[int, list[Interval]] = {}
    last: dict[int, float] = {}
    prev_barrier = 0.0
    for e in events:
        end = float(e["time_s"])
        if "workers" in e:
            w = e["workers"]
            for rank, compute in zip(w["rank"], w.get("compute_s", [])):
                out.setdefault(int(rank), []).append(
                    (prev_barrier, end, min(float(compute), end - prev_barrier)))
            prev_barrier = end
        elif "rank" in e and "compute_s" in e:
            rank = int(e["rank"])
            start = last.get(rank, 0.0)
            out.setdefault(rank, []).append((start, end, min(float(e["compute_s"]), end - start)))
            last[rank] = end
    return out


def binned_shares(intervals: list[Interval], n_bins: int, end: float
                  ) -> list[tuple[float, float, float]]:
    """Compute and wait per bin of time: each stretch spread evenly over the bins it spans.

    Parameters
    ----------
    intervals : list of (float, float, float)
        One worker's stretches (:func:`worker_intervals`).
    n_bins : int
        Equal bins over ``[0, end]``.
    end : float
        The end of the run (s).

    Returns
    -------
    list of (float, float, float)
        Per bin: its start, the seconds of it spent computing, the seconds waiting (their sum
        is at most the bin's width; less where the worker had no stretch, before its first).
    """
    width = end / n_bins if end > 0 else 1.0
    compute = [0.0] * n_bins
    covered = [0.0] * n_bins
    for start, stop, c in intervals:
        span = stop - start
        if span <= 0:
            continue
        first, last = int(start / width), min(int(stop / width), n_bins - 1)
        for b in range(first, last + 1):
            overlap = min(stop, (b + 1) * width) - max(start, b * width)
            if overlap > 0:
                covered[b] += overlap
                compute[b] += c * overlap / span
    return [(b * width, compute[b], covered[b] - compute[b]) for b in range(n_bins)]


def delta_f_per_worker(events: list[dict[str, Any]]) -> dict[int, float]:
    """Σ Δf per worker (FSP paper Fig. 12): the objective changes it reported, summed.

    Parameters
    ----------
    events : list of dict
        The records of ``events.jsonl``.

    Returns
    -------
    dict of int to float
        rank -> the sum of its ``delta_f`` over every barrier (empty for runs whose events
        carry no ``delta_f``).
    """
    series = worker_series(barrier_events(events), "delta_f")
    return {rank: float(sum(values)) for rank, (_, values) in sorted(series.items())}


def slowed_ranks(summary: dict[str, Any]) -> set[int]:
    """Ranks of the workers a straggler pattern slowed in a run's summary."""
    return {int(s["rank"]) for s in summary.get("stragglers", [])}
