"""``flegel report``: pictures and one page per run, from what runs leave behind.

``flegel report RUN [RUN ...]`` (or the folder of a ``flegel compare``) reads each run
directory's ``summary.json``, ``events.jsonl`` and ``job.yaml`` and writes into ``--out``
(default: the single run's folder, a compare folder itself, else the first run's folder):

* ``objective.png``: the EXACT objective against training time (``summary.json``'s
  ``objective_trace``: θ snapshots evaluated on every shard after training), every run
  overlaid; the online objective is drawn thin and dotted beside it, labelled "online
  (per-point losses as last seen)" -- under FSP and the asynchronous models it is the
  objective of no θ (FSP paper Fig. 14);
* ``timeline.png``: per-worker compute and wait over the whole run (Fig. 10b), binned when
  there are too many iterations to draw one by one; one panel per run;
* ``passes.png``: traversal passes per worker at the end, a group of bars per run (Fig. 12);
* ``passes_time.png``: every worker's passes over time, one panel per run (barrier events
  and the asynchronous models' push events both carry them);
* ``delta_f.png``: Σ Δf per worker (Fig. 12), for barrier models;
* ``held.png``: points held by every worker over time, for runs that migrated data;
* ``report.html``: one self-contained page (PNGs embedded as base64) with the run's
  figures, its summary and per-worker tables and its job; with several runs it is an
  overview of them all and every run gets its own page, ``report-<run>.html``.

Slowed workers (``summary.json``'s ``stragglers``) are drawn dashed or in red.  The series
are computed in :mod:`flegel.rundir.reader`, without matplotlib (:func:`exact_trace`,
:func:`worker_series`, :func:`worker_intervals`, :func:`binned_shares`); matplotlib is
imported only when a picture is drawn.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flegel.cli.report_page import Picture, page
from flegel.rundir import files
from flegel.rundir.reader import (
    Interval,
    Run,
    Series,
    barrier_events,
    binned_shares,
    delta_f_per_worker,
    exact_during_run,
    exact_trace,
    online_series,
    push_events,
    read_events,
    read_summary,
    slowed_ranks,
    worker_intervals,
    worker_series,
)

PLOT_HINT = "plots need matplotlib: pip install 'flegel[plot]'"

#: The online objective's label wherever it is drawn or printed (issue 12): it sums every
#: point's loss as of the last time the point was processed, under whatever θ was current.
ONLINE_LABEL = "online (per-point losses as last seen)"

#: A worker's timeline is drawn interval by interval up to this many intervals; beyond it
#: the run is cut into :data:`TIMELINE_BINS` equal bins of time (a figure of thousands of
#: slivers shows nothing).
TIMELINE_MAX_INTERVALS = 200
TIMELINE_BINS = 120


#: The record readers and series, re-exported: ``flegel.cli.report`` is what users import.
__all__ = ["Interval", "Series", "barrier_events", "binned_shares", "delta_f_per_worker",
           "describe", "draw", "exact_during_run", "exact_trace", "online_series",
           "pictures", "push_events", "slowed_ranks", "worker_intervals", "worker_series"]

_events = read_events
_summary = read_summary


# ------------------------------------------------------------------ the per-worker table


def run_labels(runs: list[Path]) -> list[str]:
    """Short distinct labels: the folder names, with their parents where names repeat."""
    names = [r.name for r in runs]
    if len(set(names)) == len(names):
        return names
    return [f"{r.parent.name}/{r.name}" if names.count(r.name) > 1 else r.name for r in runs]


def describe(run: Path) -> str:
    """A table of one run's per-worker figures: final passes, Σ Δf, points held.

    Parameters
    ----------
    run : Path
        A run directory.

    Returns
    -------
    str
        One line per worker (empty when the run has no barrier events), then the run's
        migration figures when it migrated data.
    """
    ev = _events(run)
    summary = _summary(run)
    passes = worker_series(barrier_events(ev), "passes")
    if not passes:
        return ""
    dfs = delta_f_per_worker(ev)
    held = worker_series(ev, "held")
    slowed = slowed_ranks(summary)
    # The worker's host (summary.json's per_worker[].host): where a run spans several.
    hosts = {int(w["rank"]): str(w["host"]) for w in summary.get("per_worker", [])
             if w.get("host")}
    lines = [f"{run}", f"  {'worker':>6} {'passes':>8} {'sum delta_f':>14} {'held':>19}"
             + ("  host" if hosts else "")]
    for rank, (_, p) in sorted(passes.items()):
        h = held.get(rank)
        h_txt = f"{f'{int(h[1][0])} -> {int(h[1][-1])}' if h else '-':>19}"
        lines.append(f"  {rank:>6} {p[-1]:8.2f} {dfs.get(rank, 0.0):14.6g} {h_txt}"
                     + (f"  {hosts.get(rank, '-')}" if hosts else "")
                     + ("  (slowed)" if rank in slowed else ""))
    mig = summary.get("migration")
    if mig:
        lines.append(f"  migration {mig.get('mode', '?')}: {mig.get('points_moved', 0)} points "
                     f"moved in {mig.get('rounds', 0)} rounds, "
                     f"{100 * mig.get('bytes_fraction', 0.0):.1f}% of the data's bytes")
    pp = summary.get("point_passes")
    if pp:
        lines.append(f"  passes per point: min {pp['min']}, mean {pp['mean']:.2f}, "
                     f"max {pp['max']}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the pictures

def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend.

    Raises
    ------
    ImportError
        Without matplotlib, with a one-line message naming the ``plot`` extra.
    """
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(f"flegel: {PLOT_HINT}") from err

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes; the figure is closed (pyplot keeps every open one)."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")  # legends beside the axes
    plt.close(fig)
    return buf.getvalue()


#: How each objective series is drawn (matplotlib keywords), and its name in the legend.
#: Colour and marker say which run; the line and the marker's fill say which series.
_STYLES: dict[str, tuple[dict[str, Any], str]] = {
    "during": ({"lw": 1.8, "ms": 5}, "exact f(θ), evaluated during the run"),
    "estimate": ({"ls": "none", "marker": "x", "ms": 4}, "estimate, during the run"),
    "snapshots": ({"lw": 0.9, "ms": 5, "mfc": "none"},
                  "exact f(θ), θ snapshots after training"),
    "final": ({"ls": "none", "marker": "*", "ms": 11}, "exact f(θ) of the final θ only"),
    "online": ({"lw": 0.9, "ls": ":", "alpha": 0.8}, ONLINE_LABEL),
    "clipped": ({"ls": "none", "ms": 5, "alpha": 0.8}, "online, off the frame (▲ above, ▼ below)"),
    "target": ({"lw": 0.7, "ls": "--", "alpha": 0.6}, "target"),
}

#: One marker per run (with one colour per run: up to 20 runs tell apart).
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", "h", ">", "p", "d")


def _run_style(i: int, n: int) -> tuple[str, str]:
    """Colour and marker of run ``i`` of ``n``: tab10's colours up to 10 runs (gray last),
    tab20's beyond; the markers cycle on a different period, so no two of 20 runs look the same."""
    color = f"C{_TAB10[i % 10]}" if n <= 10 else _tab20(i)
    return color, _MARKERS[i % len(_MARKERS)]


#: tab10's colours with its gray (C7) last: the legend of series is drawn in gray.
_TAB10 = (0, 1, 2, 3, 4, 5, 6, 8, 9, 7)


def _tab20(i: int) -> Any:
    import matplotlib

    return matplotlib.colormaps["tab20"](i % 20)


def _objective_limits(values: list[float]) -> tuple[float, float] | None:
    """The y-range that frames ``values`` (the exact objective) with a margin; None when
    there is none.  The online objective starts far below them (its sum fills up over the
    first pass) and estimates scatter: both would squash the curves that matter into a line,
    so they are clipped to this frame instead (:func:`_clip_online`)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    pad = max(0.06 * (hi - lo), 1e-6 * max(abs(lo), abs(hi)), 1e-12)
    return lo - pad, hi + pad


def _clip_online(ax: Any, t: list[float], f: list[float], frame: tuple[float, float] | None,
                 color: Any) -> bool:
    """Draw the online series inside ``frame``: the dotted line clipped to it, and every
    point off it as a triangle on the frame's edge (pointing the way it went).  Returns
    whether any point was off the frame."""
    if not t:
        return False
    if frame is None:
        ax.plot(t, f, color=color, **_STYLES["online"][0])
        return False
    lo, hi = frame
    ax.plot(t, [min(max(v, lo), hi) for v in f], color=color, **_STYLES["online"][0])
    above = [(x, hi) for x, v in zip(t, f) if v > hi]
    below = [(x, lo) for x, v in zip(t, f) if v < lo]
    for pts, marker in ((above, "^"), (below, "v")):
        if pts:
            step = max(1, len(pts) // 12)  # a few triangles say it; hundreds would hide it
            xs, ys = zip(*pts[::step])
            ax.plot(xs, ys, color=color, marker=marker, clip_on=False,
                    **_STYLES["clipped"][0])
    return bool(above or below)


def _gap_axes(ax: Any, runs: list[Run], best: float, styles: list[tuple[str, str]]) -> None:
    """The relative gap ``(f − f_best) / |f_best|`` of every run's exact objective, on a log
    axis (f_best: the lowest exact value of all runs): where the runs differ by 0.1 % or by
    1e-6, which the objective's own axis cannot show when they start far apart."""
    scale = abs(best) if best != 0 else 1.0
    floor = None
    series = []
    for run, (color, marker) in zip(runs, styles):
        t, f = exact_trace(run.summary)
        (et, ef), _ = exact_during_run(run.summary)
        for kind, (ts, fs) in (("during", (et, ef)), ("snapshots", (t, f))):
            gaps = [(x, (v - best) / scale) for x, v in zip(ts, fs) if math.isfinite(v)]
            series.append((kind, gaps, color, marker))
            positive = [g for _, g in gaps if g > 0]
            if positive:
                floor = min(positive) if floor is None else min(floor, min(positive))
    floor = (floor or 1e-12) / 3  # where the best run's own points sit (its gap is 0)
    for kind, gaps, color, marker in series:
        if gaps:
            xs, ys = zip(*gaps)
            ax.plot(xs, [max(g, floor) for g in ys], color=color, marker=marker,
                    **_STYLES[kind][0])
    ax.set_yscale("log")
    ax.set_ylabel("relative gap to\nthe best f(θ)")
    ax.grid(alpha=0.3, which="both")


def objective_picture(runs: list[Run]) -> Picture:
    """The exact objective against time for every run overlaid, the online one beside it.

    One colour and one marker per run; the line (and the marker's fill) says which series it
    is -- a legend of runs and one of series, both outside the axes.  The y axis frames the
    exact values; the online curve and estimates are clipped to it, with triangles where
    they leave it.  With several runs a second panel shows each run's relative gap to the
    best exact objective on a log axis.
    """
    from matplotlib.lines import Line2D

    plt = _pyplot()
    several = len(runs) > 1 and any(exact_trace(r.summary)[0] for r in runs)
    if several:
        fig, (ax, gap_ax) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(9, 4.8))
    used: set[str] = set()
    styles = [_run_style(i, len(runs)) for i in range(len(runs))]
    exact_values: list[float] = []
    for run in runs:
        exact_values += exact_trace(run.summary)[1] + exact_during_run(run.summary)[0][1]
        target = run.summary.get("target_objective")
        if target is not None:
            exact_values.append(float(target))
    frame = _objective_limits(exact_values)

    def draw(kind: str, t: list[float], f: list[float], color: Any, marker: str) -> None:
        if not t:
            return
        style = dict(_STYLES[kind][0])
        if kind in ("during", "snapshots"):
            style["marker"] = marker
        if frame is not None and kind == "estimate":  # estimates off the frame: on its edge
            f = [min(max(v, frame[0]), frame[1]) for v in f]
        ax.plot(t, f, color=color, **style)
        used.add(kind)

    for run, (color, marker) in zip(runs, styles):
        t, f = exact_trace(run.summary)
        (et, ef), (st, sf) = exact_during_run(run.summary)
        draw("during", et, ef, color, marker)
        draw("estimate", st, sf, color, marker)
        if len(t) > 1:
            draw("snapshots", t, f, color, marker)
        elif not et:  # nothing but the final θ: a star at the end
            draw("final", t, f, color, marker)
        ot, of = online_series(run.events)
        if ot:
            used.add("online")
        if _clip_online(ax, ot, of, frame, color):
            used.add("clipped")
        target = run.summary.get("target_objective")
        if target is not None:
            ax.axhline(float(target), color=color, **_STYLES["target"][0])
            used.add("target")
    if frame is not None:
        ax.set_ylim(*frame)
    ax.ticklabel_format(axis="y", useOffset=False)  # the values as they are, no "+7.4e5"
    ax.set_ylabel(f"objective ({runs[0].summary.get('objective_name', 'f')})")
    ax.grid(alpha=0.3)
    bottom = ax
    if several:
        best = min(v for v in exact_values if math.isfinite(v)) if any(
            math.isfinite(v) for v in exact_values) else 0.0
        _gap_axes(gap_ax, runs, best, styles)
        bottom = gap_ax
    bottom.set_xlabel("training time (s)")
    # Figure legends beside the axes (the saved image's bounding box takes them in whole).
    fig.legend(handles=[Line2D([], [], color=c, marker=m, lw=2, label=run.label)
                        for run, (c, m) in zip(runs, styles)],
               fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.97), title="run")
    series_handles = []
    for kind, (style, name) in _STYLES.items():
        if kind in used:
            style = dict(style)
            if kind in ("during", "snapshots"):
                style["marker"] = "o"
            if kind == "clipped":
                style["marker"] = "^"
            series_handles.append(Line2D([], [], color="gray", label=name, **style))
    fig.legend(handles=series_handles, fontsize=7, loc="lower left",
               bbox_to_anchor=(1.0, 0.1))
    caption = ("Exact objective f(θ) against training time, one colour and marker per run: "
               "the solid line is f(θ) evaluated during the run (what the progress line "
               "showed and the target stop used; crosses: estimates on part of the data), "
               "the thin line with open markers θ snapshots evaluated on every shard after "
               "training.  Dotted: the online objective (per-point losses as last seen), "
               "which under FSP and the asynchronous models is the objective of no θ; "
               "dashed: the target.  The y axis frames the exact values: the online curve "
               "and estimates are clipped to it, triangles marking where they leave it.")
    if several:
        caption += (" Below: each run's relative gap (f − f_best) / |f_best| to the lowest "
                    "exact objective of all runs, on a log axis (the best run's own points "
                    "sit on the floor).")
    if "final" in used:
        caption += (" A star marks a run with no exact trace (the final θ only): set "
                    "output.trace_points to trace it.")
    return Picture(files.OBJECTIVE_PNG, caption, _png(fig))


def timeline_picture(runs: list[Run]) -> Picture:
    """Per-worker compute and wait over the whole run, one panel per run; binned when long.

    Raises
    ------
    ValueError
        When no run has per-worker compute times in its events.
    """
    plt = _pyplot()
    panels = [(run, worker_intervals(run.events)) for run in runs]
    panels = [(run, iv) for run, iv in panels if iv]
    if not panels:
        raise ValueError("no events with per-worker compute times")
    rows = max(len(iv) for _, iv in panels)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(9, 0.6 + len(panels) * (0.5 + 0.4 * rows)))
    binned_any = False
    for ax, (run, intervals) in zip(axes[:, 0], panels):
        end = max(iv[-1][1] for iv in intervals.values())
        binned = max(len(iv) for iv in intervals.values()) > TIMELINE_MAX_INTERVALS
        binned_any |= binned
        slowed = slowed_ranks(run.summary)
        for rank, iv in intervals.items():
            if binned:
                bars = binned_shares(iv, TIMELINE_BINS, end)
                compute = [(s, c) for s, c, _ in bars]
                wait = [(s + c, w) for s, c, w in bars]
            else:
                compute = [(s, c) for s, _, c in iv]
                wait = [(s + c, e - s - c) for s, e, c in iv]
            ax.broken_barh(compute, (rank - 0.4, 0.8), color="tab:blue", lw=0)
            ax.broken_barh(wait, (rank - 0.4, 0.8), color="tab:orange", alpha=0.5, lw=0)
        ranks = sorted(intervals)
        ax.set_yticks(ranks)
        ax.set_yticklabels([f"worker {r}" + (" (slowed)" if r in slowed else "")
                            for r in ranks], fontsize=8)
        ax.set_xlim(0, end)
        ax.set_title(run.label + (f"  ({TIMELINE_BINS} bins)" if binned else ""), fontsize=9)
    axes[-1, 0].set_xlabel("training time (s)  (blue: computing, orange: waiting)")
    caption = ("Every worker's compute (blue) and the rest of its time, waiting at the "
               "barrier or for θ (orange), over the whole run.  A slowed worker's "
               "suspensions within an iteration count as compute: it is busy, only slower; "
               "a suspension served while it waits for θ (FSP's overlap) is drawn as "
               "waiting.")
    if binned_any:
        caption += (f" Runs of more than {TIMELINE_MAX_INTERVALS} iterations are drawn in "
                    f"{TIMELINE_BINS} bins of equal time: in each bin the blue part is the "
                    "time spent computing.")
    return Picture(files.TIMELINE_PNG, caption, _png(fig))


def _grouped_bars(ax: Any, runs: list[Run], values: list[dict[int, float]]) -> None:
    """A group of bars per worker rank, one bar per run; slowed workers' bars in red."""
    from matplotlib.patches import Patch

    ranks = sorted({r for v in values for r in v})
    width = 0.8 / max(len(runs), 1)
    one = len(runs) == 1
    for i, (run, v) in enumerate(zip(runs, values)):
        slowed = slowed_ranks(run.summary)
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(ranks))]
        colors = [("tab:red" if one else f"C{i % 10}") if r in slowed
                  else ("tab:green" if one else f"C{i % 10}") for r in ranks]
        bars = ax.bar(xs, [v.get(r, 0.0) for r in ranks], width=width, color=colors,
                      edgecolor="black", lw=0.5)
        for bar, r in zip(bars, ranks):
            if r in slowed and not one:
                bar.set_hatch("//")
                bar.set_edgecolor("tab:red")
    ax.set_xticks(range(len(ranks)))
    ax.set_xticklabels([str(r) for r in ranks])
    ax.set_xlabel("worker (red: slowed)" if one else "worker (hatched red: slowed)")
    if not one:
        ax.legend(handles=[Patch(color=f"C{i % 10}", label=run.label)
                           for i, run in enumerate(runs)], fontsize=7)


def passes_picture(runs: list[Run]) -> Picture:
    """Traversal passes completed by each worker at the end (Fig. 12), a bar per run.

    Raises
    ------
    ValueError
        When no run has per-worker figures in its summary.
    """
    plt = _pyplot()
    values = [{int(w["rank"]): float(w["passes"]) for w in r.summary.get("per_worker", [])}
              for r in runs]
    if not any(values):
        raise ValueError(f"no {files.SUMMARY} with per-worker passes")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    _grouped_bars(ax, runs, values)
    ax.set_ylabel("traversal passes")
    return Picture(files.PASSES_PNG, "Passes over its data each worker completed by the end.",
                   _png(fig))


def delta_f_picture(runs: list[Run]) -> Picture:
    """Σ Δf per worker (Fig. 12): a bar per worker and run of its summed objective changes.

    Raises
    ------
    ValueError
        When no run has barrier events with ``delta_f``.
    """
    plt = _pyplot()
    values = [delta_f_per_worker(r.events) for r in runs]
    keep = [i for i, v in enumerate(values) if v]
    if not keep:
        raise ValueError("no barrier events with per-worker delta_f")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    _grouped_bars(ax, [runs[i] for i in keep], [values[i] for i in keep])
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_ylabel("Σ Δf (objective change reported)")
    return Picture(files.DELTA_F_PNG, "Σ Δf per worker: the objective changes each worker "
                   "reported at the barriers, summed (how much its training moved f).",
                   _png(fig))


def series_picture(runs: list[Run], name: str, column: str, ylabel: str, caption: str
                   ) -> Picture:
    """One panel per run, side by side on a shared y scale: a line per worker of ``column``.

    Parameters
    ----------
    runs : list of Run
        The runs; those whose events lack ``column`` are left out.
    name : str
        The PNG's file name.
    column : str
        A per-worker column of the events (``passes``, ``held``...).
    ylabel : str
        The y axis's label.
    caption : str
        What the picture shows, for the page.

    Raises
    ------
    ValueError
        When no run has the column.
    """
    plt = _pyplot()
    panels = [(run, worker_series(run.events, column)) for run in runs]
    panels = [p for p in panels if p[1]]
    if not panels:
        raise ValueError(f"no events with per-worker {column!r}")
    fig, axes = plt.subplots(1, len(panels), figsize=(0.5 + 4.5 * len(panels), 3.8),
                             sharey=True, squeeze=False)
    for ax, (run, series) in zip(axes[0], panels):
        slowed = slowed_ranks(run.summary)
        for rank, (times, values) in sorted(series.items()):
            ax.plot(times, values, lw=1.3, color=f"C{(rank - 1) % 10}",
                    ls="--" if rank in slowed else "-",
                    label=f"worker {rank}" + (" (slowed)" if rank in slowed else ""))
        ax.set_title(run.label, fontsize=9)
        ax.set_xlabel("training time (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
    return Picture(name, caption, _png(fig))


#: Every picture after the objective: (what, how to draw it from the runs).  A picture the
#: runs' records do not allow raises ValueError and is skipped with a line saying why.
PICTURES: list[tuple[str, Callable[[list[Run]], Picture]]] = [
    ("timeline", timeline_picture),
    ("passes", passes_picture),
    ("passes over time", lambda runs: series_picture(
        runs, files.PASSES_TIME_PNG, "passes", "traversal passes",
        "Every worker's traversal passes over time (dashed: slowed).")),
    ("sum of delta_f per worker", delta_f_picture),
    ("points held over time", lambda runs: series_picture(
        runs, files.HELD_PNG, "held", "points held",
        "Points every worker held over time: data migration at work.")),
]


def pictures(runs: list[Run], say: Callable[[str], None] = print) -> list[Picture]:
    """Every picture the runs' records allow, the objective first.

    Parameters
    ----------
    runs : list of Run
        The runs, drawn overlaid or side by side.
    say : callable
        Told one line per picture left out, with why.
    """
    made = [objective_picture(runs)]
    for what, draw_one in PICTURES:
        try:
            made.append(draw_one(runs))
        except ValueError as exc:
            say(f"no {what}: {exc}")
    return made


def _slug(label: str) -> str:
    """A file-name-safe form of a run's label."""
    return re.sub(r"[^\w.-]+", "_", label).strip("_") or "run"


def draw(runs: list[Path], out: Path, labels: list[str] | None = None) -> list[Path]:
    """Write every picture the runs allow and the HTML page(s) into ``out``; return the paths.

    Parameters
    ----------
    runs : list of Path
        Run directories.
    out : Path
        The folder to write into (created).
    labels : list of str, optional
        The runs' names in legends and titles (default: their folder names).

    Returns
    -------
    list of Path
        The PNGs, then ``report.html`` (the run's page, or with several runs an overview)
        and, with several runs, each run's own page ``report-<label>.html``.

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    out.mkdir(parents=True, exist_ok=True)
    read = [Run.read(r, label) for r, label in zip(runs, labels or run_labels(runs))]
    made: list[Path] = []
    pics = pictures(read)
    for pic in pics:
        (out / pic.name).write_bytes(pic.png)
        made.append(out / pic.name)
    if len(read) == 1:
        (out / files.REPORT).write_text(page(read, pics))
        return made + [out / files.REPORT]
    links = {run.label: files.run_report(_slug(run.label)) for run in read}
    for run in read:
        own = pictures([run], say=lambda _: None)
        (out / links[run.label]).write_text(page([run], own))
    (out / files.REPORT).write_text(page(read, pics, links))
    return made + [out / files.REPORT] + [out / name for name in links.values()]


# ------------------------------------------------------------------ the command

def add_parser(sub: Any, name: str) -> None:
    """Declare ``flegel report``'s arguments on the CLI's sub-parsers."""
    p = sub.add_parser(name, help=(
        "draw the exact objective, timeline, passes, Σ Δf and points-held plots of run "
        "folders and write one HTML page per run (several runs, or a compare folder, are "
        "overlaid or drawn side by side)"))
    p.add_argument("runs", nargs="+", help="run directories, or the folder of a flegel compare")
    p.add_argument("--out", default=None, help=(
        f"folder for the PNGs and {files.REPORT} (default: the run's folder; for a compare "
        "folder, that folder; for several runs, the first run's folder)"))


def expand(paths: list[Path]) -> tuple[list[Path], list[str] | None, Path | None]:
    """Run directories from the command line: a ``flegel compare`` folder gives its runs.

    Parameters
    ----------
    paths : list of Path
        Run directories, or folders holding ``compare.json``.

    Returns
    -------
    (list of Path, list of str or None, Path or None)
        The run directories; their labels when a compare folder named them ("model /
        stragglers"), else None; the compare folder when exactly one was given alone, else
        None.

    Raises
    ------
    ValueError
        A path that is neither, named with what it lacks.
    """
    runs: list[Path] = []
    labels: list[str] = []
    named = False
    for p in paths:
        if (p / files.EVENTS).exists():
            runs.append(p)
            labels.append("")
            continue
        if not (p / files.COMPARE).exists():
            raise ValueError(f"{p}: not a run directory (no {files.EVENTS}) nor a compare "
                             f"folder (no {files.COMPARE})")
        rows = json.loads((p / files.COMPARE).read_text()).get("runs", [])
        for row in rows:
            # compare.json names each run by its path then; the folder may have moved since.
            run = Path(row["dir"])
            if not (run / files.EVENTS).exists():
                run = p / run.name
            if not (run / files.EVENTS).exists():
                raise ValueError(f"{p / files.COMPARE}: run {row['dir']!r}: not found "
                                 f"(no {files.EVENTS} there nor in the compare folder)")
            runs.append(run)
            labels.append(f"{row['sync']} / {row['stragglers']}")
            named = True
    if not runs:
        raise ValueError(f"{paths[0]}: {files.COMPARE} lists no runs")
    default_labels = run_labels(runs)
    out_labels = [given or default for given, default in zip(labels, default_labels)]
    compare_dir = paths[0] if named and len(paths) == 1 else None
    return runs, (out_labels if named else None), compare_dir


def main(args: argparse.Namespace) -> int:
    """Run ``flegel report``: print each run's per-worker table, write pictures and pages."""
    try:
        runs, labels, compare_dir = expand([Path(r) for r in args.runs])
    except ValueError as exc:
        sys.stderr.write(f"flegel: error: {exc}\n")
        return 2
    try:
        _pyplot()
    except ImportError:
        sys.stderr.write(f"flegel: error: {PLOT_HINT}\n")
        return 2
    out = Path(args.out) if args.out else (compare_dir or runs[0])
    for r in runs:
        text = describe(r)
        if text:
            print(text)
    for m in draw(runs, out, labels):
        print(m)
    return 0
