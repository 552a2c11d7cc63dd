"""``flegel report``: pictures of runs (needs the ``plot`` extra, matplotlib).

``flegel report RUN [RUN ...]`` writes, into ``--out`` (default: the first run's folder):

* ``objective.png``: objective vs time, every run overlaid (FSP paper Fig. 14);
* ``timeline.png``: per-worker timeline of compute and wait of the first run (Fig. 10b);
* ``passes.png``: traversal passes per worker at the end, a group of bars per run (Fig. 12);
* ``passes_time.png``: every worker's traversal passes over time, one panel per run side by
  side on a shared scale, so runs with and without data migration compare at a glance;
* ``delta_f.png``: Σ Δf per worker (Fig. 12): the sum of the objective changes each worker
  reported at the barriers, i.e. how much its training moved the objective;
* ``held.png``: points held by every worker over time, one panel per run that migrated data
  (barrier events carry ``held`` only with ``sync.migration`` on).

The last three need barrier events (BSP, FSP); push models' runs have none and are left out
of them.  Slowed workers (``summary.json``'s ``stragglers``) are drawn dashed or in red.
The figures are computed by :func:`worker_series` and :func:`delta_f_per_worker`, which need
no matplotlib; :func:`describe` prints them as a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: One worker's column over time: (times in seconds, values).
Series = tuple[list[float], list[float]]

PLOT_HINT = "plots need matplotlib: pip install 'flegel[plot]'"


def _events(run: Path) -> list[dict[str, Any]]:
    lines = (run / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _summary(run: Path) -> dict[str, Any]:
    path = run / "summary.json"
    if not path.exists():
        return {}
    out: dict[str, Any] = json.loads(path.read_text())
    return out


def barrier_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of barriers (those with a ``workers`` record), in order."""
    return [e for e in events if "workers" in e]


def worker_series(events: list[dict[str, Any]], column: str) -> dict[int, Series]:
    """Every worker's ``column`` of the barrier events against training time.

    Parameters
    ----------
    events : list of dict
        The records of ``events.jsonl``.
    column : str
        A per-worker column of ``workers``: ``passes``, ``held``, ``in_flight``, ``points``...

    Returns
    -------
    dict of int to (list of float, list of float)
        rank -> (``time_s`` of every barrier that has the column, the worker's values).
        Empty when no barrier event has the column.
    """
    out: dict[int, Series] = {}
    for e in barrier_events(events):
        w = e["workers"]
        if column not in w:
            continue
        for rank, value in zip(w["rank"], w[column]):
            times, values = out.setdefault(int(rank), ([], []))
            times.append(float(e["time_s"]))
            values.append(float(value))
    return out


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
    return {rank: float(sum(values))
            for rank, (_, values) in sorted(worker_series(events, "delta_f").items())}


def slowed_ranks(summary: dict[str, Any]) -> set[int]:
    """Ranks of the workers a straggler pattern slowed in a run's summary."""
    return {int(s["rank"]) for s in summary.get("stragglers", [])}


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
    passes = worker_series(ev, "passes")
    if not passes:
        return ""
    dfs = delta_f_per_worker(ev)
    held = worker_series(ev, "held")
    slowed = slowed_ranks(summary)
    lines = [f"{run}", f"  {'worker':>6} {'passes':>8} {'sum delta_f':>14} {'held':>19}"]
    for rank, (_, p) in sorted(passes.items()):
        h = held.get(rank)
        h_txt = f"{f'{int(h[1][0])} -> {int(h[1][-1])}' if h else '-':>19}"
        lines.append(f"  {rank:>6} {p[-1]:8.2f} {dfs.get(rank, 0.0):14.6g} {h_txt}"
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


def plot_objectives(runs: list[Path], out: Path, labels: list[str] | None = None) -> Path:
    """Objective (online) against training time for every run, overlaid."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    all_events = [_events(r) for r in runs]
    names = labels or run_labels(runs)
    for ev, label in zip(all_events, names):
        ax.plot([e["time_s"] for e in ev], [e["objective"] for e in ev], label=label, lw=1.4)
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("objective (online)")
    ax.set_yscale("symlog" if any(e["objective"] <= 0 for ev in all_events for e in ev)
                  else "log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_timeline(run: Path, out: Path, max_iterations: int = 200) -> Path:
    """Per-worker compute (dark) and wait (light) segments of a barrier model's run."""
    plt = _pyplot()
    ev = barrier_events(_events(run))[:max_iterations]
    if not ev:
        raise ValueError(f"{run}: no barrier events to draw")
    ranks = ev[0]["workers"]["rank"]
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(ranks)))
    prev_end = 0.0
    for e in ev:
        w = e["workers"]
        for j, r in enumerate(w["rank"]):
            start = prev_end
            ax.broken_barh([(start, w["compute_s"][j])], (r - 0.4, 0.8), color="tab:blue")
            ax.broken_barh([(start + w["compute_s"][j],
                             max(e["time_s"] - start - w["compute_s"][j], 0.0))],
                           (r - 0.4, 0.8), color="tab:orange", alpha=0.5)
        prev_end = e["time_s"]
    ax.set_yticks(ranks)
    ax.set_yticklabels([f"worker {r}" for r in ranks])
    ax.set_xlabel("training time (s)  (blue: compute, orange: waiting at the barrier)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _grouped_bars(ax: Any, runs: list[Path], labels: list[str],
                  values: list[dict[int, float]]) -> None:
    """A group of bars per worker rank, one bar per run; slowed workers' bars in red."""
    from matplotlib.patches import Patch

    ranks = sorted({r for v in values for r in v})
    width = 0.8 / max(len(runs), 1)
    one = len(runs) == 1
    for i, (run, v) in enumerate(zip(runs, values)):
        slowed = slowed_ranks(_summary(run))
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(ranks))]
        colors = [("tab:red" if one else f"C{i}") if r in slowed
                  else ("tab:green" if one else f"C{i}") for r in ranks]
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
        ax.legend(handles=[Patch(color=f"C{i}", label=label) for i, label in enumerate(labels)],
                  fontsize=8)


def plot_passes(run: Path | list[Path], out: Path, labels: list[str] | None = None) -> Path:
    """Traversal passes completed by each worker at the end (Fig. 12), a bar per run."""
    plt = _pyplot()
    runs = run if isinstance(run, list) else [run]
    values = [{int(w["rank"]): float(w["passes"]) for w in _summary(r).get("per_worker", [])}
              for r in runs]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    _grouped_bars(ax, runs, labels or run_labels(runs), values)
    ax.set_ylabel("traversal passes")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_delta_f(runs: list[Path], out: Path, labels: list[str] | None = None) -> Path:
    """Σ Δf per worker (Fig. 12): a bar per worker and run of its summed objective changes.

    Raises
    ------
    ValueError
        When no run has barrier events with ``delta_f``.
    """
    plt = _pyplot()
    values = [delta_f_per_worker(_events(r)) for r in runs]
    keep = [i for i, v in enumerate(values) if v]
    if not keep:
        raise ValueError("no barrier events with per-worker delta_f")
    names = labels or run_labels(runs)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    _grouped_bars(ax, [runs[i] for i in keep], [names[i] for i in keep],
                  [values[i] for i in keep])
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_ylabel("Σ Δf (objective change reported)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_worker_series(runs: list[Path], out: Path, column: str, ylabel: str,
                       labels: list[str] | None = None) -> Path:
    """One panel per run, side by side on a shared y scale: a line per worker of ``column``.

    Parameters
    ----------
    runs : list of Path
        Run directories; those whose barrier events lack ``column`` are left out.
    out : Path
        The PNG to write.
    column : str
        A per-worker column of the barrier events (``passes``, ``held``...).
    ylabel : str
        The y axis's label.
    labels : list of str, optional
        Panel titles (default: the run folders' names).

    Raises
    ------
    ValueError
        When no run has the column.
    """
    plt = _pyplot()
    names = labels or run_labels(runs)
    panels = [(run, name, worker_series(_events(run), column))
              for run, name in zip(runs, names)]
    panels = [p for p in panels if p[2]]
    if not panels:
        raise ValueError(f"no barrier events with per-worker {column!r}")
    fig, axes = plt.subplots(1, len(panels), figsize=(0.5 + 4.5 * len(panels), 3.8),
                             sharey=True, squeeze=False)
    for ax, (run, name, series) in zip(axes[0], panels):
        slowed = slowed_ranks(_summary(run))
        for rank, (times, values) in sorted(series.items()):
            ax.plot(times, values, lw=1.3, color=f"C{(rank - 1) % 10}",
                    ls="--" if rank in slowed else "-",
                    label=f"worker {rank}" + (" (slowed)" if rank in slowed else ""))
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("training time (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def draw(runs: list[Path], out: Path, labels: list[str] | None = None) -> list[Path]:
    """Write every picture that the runs' records allow into ``out``; return their paths.

    Pictures a run cannot have (a timeline without barrier events, points held without
    migration) are skipped with a line on stdout.

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    labels = labels or run_labels(runs)
    made = [plot_objectives(runs, out / "objective.png", labels)]
    try:
        made.append(plot_timeline(runs[0], out / "timeline.png"))
    except ValueError as exc:
        print(f"no timeline: {exc}")
    if any((r / "summary.json").exists() for r in runs):
        made.append(plot_passes(runs, out / "passes.png", labels))
    for name, what, fn in (
            ("passes_time.png", "passes over time",
             lambda p: plot_worker_series(runs, p, "passes", "traversal passes", labels)),
            ("delta_f.png", "sum of delta_f per worker",
             lambda p: plot_delta_f(runs, p, labels)),
            ("held.png", "points held over time",
             lambda p: plot_worker_series(runs, p, "held", "points held", labels))):
        try:
            made.append(fn(out / name))
        except ValueError as exc:
            print(f"no {what}: {exc}")
    return made


def add_parser(sub: Any, name: str) -> None:
    p = sub.add_parser(name, help="draw objective, timeline, passes, Σ Δf and points-held "
                                  "plots of run folders (several runs are overlaid or drawn "
                                  "side by side)")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--out", default=None, help="folder for the PNGs (default: the first run)")


def main(args: argparse.Namespace) -> int:
    runs = [Path(r) for r in args.runs]
    for r in runs:
        if not (r / "events.jsonl").exists():
            sys.stderr.write(f"flegel: error: {r}: not a run directory (no events.jsonl)\n")
            return 2
    try:
        _pyplot()
    except ImportError:
        sys.stderr.write(f"flegel: error: {PLOT_HINT}\n")
        return 2
    out = Path(args.out) if args.out else runs[0]
    out.mkdir(parents=True, exist_ok=True)
    for r in runs:
        text = describe(r)
        if text:
            print(text)
    for m in draw(runs, out):
        print(m)
    return 0
