"""The synchronization cost of finished runs, as ``flegel paper``'s Figs. 10 and 13 measure
it (:mod:`flegel.cli.paper.barriers`, FSP paper Sections 6.2 and 6.3): per run, its barriers, their
accumulated cost (Σ first report to broadcast), the mean first-to-last report spread against
the mean iteration, each worker's synchronization cost as a share of the run, how the
workers' iterations ended (over every barrier, and over the iterations with an interval η,
as Fig. 13's timer share), and how many barriers waited for the timer of a worker that did
nothing (:func:`idle_timer_barriers`).

Reads run folders only (``summary.json``, ``events.jsonl``), so runs made by another checkout
-- e.g. main's ``flegel paper --quick --only 10 --out A`` -- are measured the same way as this
one's, side by side::

    python bench/paper_barriers.py A B            # every run under A/runs and B/runs
    python bench/paper_barriers.py A --match fspv  # only runs whose folder name has "fspv"
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from flegel.cli.paper import barriers
from flegel.cli.paper.runner import RunResult
from flegel.rundir.reader import barrier_events, read_events, read_summary


def runs_under(folder: Path, match: str) -> list[Path]:
    """Run folders (with a ``summary.json``) at or under ``folder``/runs, sorted."""
    if (folder / "summary.json").exists():
        return [folder]
    root = folder / "runs" if (folder / "runs").is_dir() else folder
    return sorted(p.parent for p in root.glob("*/summary.json") if match in p.parent.name)


def idle_timer_barriers(path: Path) -> int:
    """Barriers a worker ended on its own timer having done no point while another worker
    ended on a full pass, at least half an η after the first report: the others waited for
    the timer of a worker that slept (an *Injected* straggler FSP did not pause at the first
    pass; a timer that merely beat the pause signal ends its barrier sooner).

    A barrier whose event records no η (``eta_ms`` absent or null: before FSP's first η, or
    another model) is skipped, not counted: with no interval there is no "half an η" to
    hold it against, and a threshold of 0 would count every such barrier."""
    held = 0
    for ev in barrier_events(read_events(path)):
        w = ev["workers"] if "barrier_s" in ev else None
        eta_ms = ev.get("eta_ms")
        if not w or eta_ms is None or float(eta_ms) <= 0:
            continue
        if "pass" in w["reason"] and any(
                r == "timer" and p == 0 for r, p in zip(w["reason"], w["points"])
        ) and ev["barrier_s"] * 1e3 >= 0.5 * float(eta_ms):
            held += 1
    return held


def ends(why: Counter[str]) -> str:
    """Each way an iteration ended, as a share of the commits counted (``-``: none)."""
    total = max(sum(why.values()), 1)
    return " ".join(f"{k} {100 * v / total:.0f}%" for k, v in why.most_common()) or "-"


def line(path: Path) -> str:
    summary = read_summary(path)
    r = RunResult(path.name, path, summary, None, None, 0.0)
    shares = barriers.cost_shares(r)
    n = int(summary.get("barriers", 0))
    timed = len(barriers.interval_barriers(r))
    held = idle_timer_barriers(path)
    return (f"{path.parent.parent.name}/{path.name}: {summary.get('coordination', '-')}, "
            f"{n} barriers in {barriers.training_s(r):.2f} s; accumulated over the {timed} "
            f"with an interval {barriers.accumulated_s(r):.3f} s "
            f"({1e3 * barriers.accumulated_s(r) / max(timed, 1):.2f} ms a barrier; the others "
            f"{barriers.untimed_s(r):.3f} s); reports spread "
            f"{1e3 * barriers.mean_spread_s(r):.2f} ms of "
            f"{1e3 * barriers.mean_iteration_s(r):.2f} ms an iteration; worker costs "
            f"(share of the run) {' '.join(f'{x:.2f}' for x in shares)}"
            f"{f' (max - min {max(shares) - min(shares):.2f})' if shares else ''}; ends: "
            f"{ends(barriers.reasons(r))} (over the {timed} with an interval, as Fig. 13's "
            f"timer share: {ends(barriers.reasons(r, interval_only=True))}); "
            f"held by an idle worker's timer: {held}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="flegel paper --out folders or runs")
    p.add_argument("--match", default="", help="only run folders whose name contains this")
    args = p.parse_args()
    for folder in args.folders:
        for path in runs_under(folder, args.match):
            print(line(path))


if __name__ == "__main__":
    main()
