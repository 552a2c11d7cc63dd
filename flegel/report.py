"""``flegel report``: pictures of runs (needs the ``plot`` extra, matplotlib).

* ``objective.png``: objective vs time, several runs overlaid (FSP paper Fig. 14);
* ``timeline.png``: per-worker timeline of compute and wait of one run (Fig. 10b);
* ``passes.png``: traversal passes per worker (Fig. 12).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_objectives(runs: list[Path], out: Path, labels: list[str] | None = None) -> Path:
    """Objective (online) against training time for every run, overlaid."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, run in enumerate(runs):
        ev = _events(run)
        label = labels[i] if labels else run.name
        ax.plot([e["time_s"] for e in ev], [e["objective"] for e in ev], label=label, lw=1.4)
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("objective (online)")
    ax.set_yscale("symlog" if any(e["objective"] <= 0 for r in runs for e in _events(r))
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
    ev = [e for e in _events(run) if "workers" in e][:max_iterations]
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


def plot_passes(run: Path, out: Path) -> Path:
    """Traversal passes completed by each worker (Fig. 12)."""
    plt = _pyplot()
    summary = json.loads((run / "summary.json").read_text())
    workers = summary["per_worker"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([str(w["rank"]) for w in workers], [w["passes"] for w in workers], color="tab:green")
    slowed = {s["rank"] for s in summary.get("stragglers", [])}
    for i, w in enumerate(workers):
        if w["rank"] in slowed:
            ax.patches[i].set_color("tab:red")
    ax.set_xlabel("worker (red: slowed)")
    ax.set_ylabel("traversal passes")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def add_parser(sub: Any, name: str) -> None:
    p = sub.add_parser(name, help="draw objective, timeline and passes plots of run folders")
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
        sys.stderr.write("flegel: error: plots need matplotlib: pip install 'flegel[plot]'\n")
        return 2
    out = Path(args.out) if args.out else runs[0]
    out.mkdir(parents=True, exist_ok=True)
    made = [plot_objectives(runs, out / "objective.png")]
    try:
        made.append(plot_timeline(runs[0], out / "timeline.png"))
    except ValueError as exc:
        print(f"no timeline: {exc}")
    made.append(plot_passes(runs[0], out / "passes.png"))
    for m in made:
        print(m)
    return 0
