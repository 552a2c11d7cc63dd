"""Repeat ``flegel paper``'s runs of one workload, back to back, to see past one run's noise.

``flegel paper`` runs each setting once; on a shared machine one run's time to target can be
off by 1.5x either way (issue 19: the CNN's FSPV against BSPV read 0.79x on one page and
1.2-1.5x in three pairs the same hour).  This script builds the same workload, job and
target as ``flegel paper --quick`` (:class:`flegel.cli.paper.runner.Runner`: BSPB's reference
run without stragglers, plus the workload's slack), then runs the given sync presets in
turn, ``--repeat`` times (each round every preset once, so load drifts alike), and prints
every time to target, FSP's final η, the points migration moved, and per preset the median
and its ratio to the first preset's median.

Usage::

    python bench/paper_pairs.py [--algorithm cnn] [--partition contiguous]
        [--syncs bspv,fspv-off,fspv-async] [--stragglers injected:tau=32,workers=1]
        [--repeat 3] [--set KEY=VALUE ...] [--target F] [--keep DIR] [--phases]
        [--straggler]

Imports whichever ``flegel`` the interpreter finds (no path of its own), so the same file
measures another checkout: ``cd /tmp && python /path/to/bench/paper_pairs.py`` with that
checkout's interpreter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import flegel
from flegel.cli.paper.runner import Runner, RunResult, Time
from flegel.cli.paper.workloads import QUICK


def describe(r: RunResult) -> str:
    """One run in a line: time to target, iterations, final η, points moved."""
    s: dict[str, Any] = r.summary or {}
    eta = s.get("final_eta_ms")
    moved = (s.get("migration") or {}).get("points_moved")
    return (f"{r.time.text():>6} s  iterations {s.get('iterations', '-'):>4}  "
            f"eta {'-' if eta is None else f'{eta:.1f} ms':>9}  "
            f"moved {'-' if moved is None else moved}" + (f"  FAILED {r.error}" if r.error
                                                         else ""))


def _events(r: RunResult) -> list[dict[str, Any]]:
    """The run's events.jsonl, parsed (empty without one)."""
    path = Path(r.folder) / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def phases(r: RunResult) -> str | None:
    """Where a run's time went (``--phases``), from its events.jsonl: the end of the
    calibration, the first migration round, the iterations up to the target and their mean
    length before and after that round, and the longest iteration after the calibration (a
    catch-up of migrated points held the barrier for it, issue 19).  None without
    events.jsonl."""
    s: dict[str, Any] = r.summary or {}
    events = _events(r)
    if not events:
        return None
    target = r.target if r.target is not None else -float("inf")
    rounds = (s.get("migration") or {}).get("round_log") or []
    first_round: float | None = rounds[0]["time_s"] if rounds else None
    # The first event ends the calibration: counted as that, not as an iteration.
    calib = float(events[0]["time_s"])
    times: list[float] = []
    before: list[float] = []
    after: list[float] = []
    prev, reached = calib, None
    for e in events[1:]:
        t = float(e["time_s"])
        (after if first_round is not None and prev >= first_round else before).append(t - prev)
        times.append(t - prev)
        prev = t
        if reached is None and float(e.get("objective", float("inf"))) <= target:
            reached = int(e["t"])
            break

    def mean_ms(xs: list[float]) -> str:
        return f"{1e3 * sum(xs) / len(xs):5.1f}" if xs else "    -"

    return (f"    calibration {calib:.3f} s  first round "
            f"{'-' if first_round is None else f'{first_round:.3f} s'}  iterations to target "
            f"{reached if reached is not None else '-'}  mean ms before/after the round "
            f"{mean_ms(before)}/{mean_ms(after)}  longest {1e3 * max(times, default=0):.0f} ms")


def straggler(r: RunResult) -> str | None:
    """The slow worker's first pass (``--straggler``), from a run's events.jsonl: when its
    first full pass was committed (under FSPV on contiguous shards of sorted data, without
    migration, a one-pass problem reaches the target no sooner: the slow shard's points have
    no statistics before), over how many barriers, how many of its commits carried no point,
    and the sums of its iterations' elapsed times and its waits for θ up to then (BSPV's
    straggler makes the pass in one iteration; issue 19, brief gm).  The slow worker is the
    first of the summary's stragglers, else the one with the fewest passes.  None without
    events.jsonl."""
    s: dict[str, Any] = r.summary or {}
    events = _events(r)
    if not events:
        return None
    slow = s.get("stragglers") or []
    ranks = events[0]["workers"]["rank"]
    last = events[-1]["workers"]["passes"]
    rank = int(slow[0]["rank"]) if slow else ranks[min(range(len(ranks)), key=last.__getitem__)]
    i = ranks.index(rank)
    elapsed = waited = 0.0
    empty = 0
    for e in events:
        w = e["workers"]
        elapsed += w["compute_s"][i]
        waited += w["wait_s"][i]
        empty += w["points"][i] == 0
        if w["passes"][i] >= 1.0:
            return (f"    straggler {rank}: first pass at {e['time_s']:.3f} s after "
                    f"{e['t']} barriers, {empty} commits of no point; iterations "
                    f"{elapsed:.3f} s, waits for θ {waited:.3f} s")
    return f"    straggler {rank}: no full pass in {len(events)} barriers"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithm", default="cnn")
    ap.add_argument("--partition", default="contiguous")
    ap.add_argument("--syncs", default="bspv,fspv-off,fspv-async",
                    help="comma-separated presets, each optionally with its own keys: "
                         "'fspv-off|sync.interval=fixed;sync.eta_ms=15'")
    ap.add_argument("--stragglers", default="injected:tau=32,workers=1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a further job key for every run (repeatable)")
    ap.add_argument("--target", type=float, default=None,
                    help="the target objective (default: flegel paper's, from a reference "
                         "run, which under load stops short and sets an easier one)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this folder")
    ap.add_argument("--phases", action="store_true",
                    help="also print where each run's time went (calibration, first "
                         "migration round, iterations and their mean length, the longest)")
    ap.add_argument("--straggler", action="store_true",
                    help="also print when the slow worker's first full pass came, its "
                         "commits of no point, its iterations' and waits' sums up to it")
    args = ap.parse_args(argv)
    syncs = args.syncs.split(",")
    with tempfile.TemporaryDirectory(prefix="paper-pairs-") as tmp:
        out = args.keep or Path(tmp)
        target = args.target
        if target is None:
            first = Runner(QUICK, out / "reference", say=lambda _: None)
            target = first.target(args.algorithm, args.partition)
        print(f"flegel {Path(flegel.__file__).parent}; {args.algorithm}/{args.partition}, "
              f"{args.stragglers}; target {target}")
        if target is None:
            raise SystemExit("the reference run failed")
        times: dict[str, list[Time]] = {s: [] for s in syncs}
        for k in range(args.repeat):
            runner = Runner(QUICK, out / f"round{k}", say=lambda _: None)
            runner.targets[args.algorithm, args.partition] = target
            for s in syncs:
                preset, _, extra = s.partition("|")
                sets = tuple(args.set) + tuple(x for x in extra.split(";") if x)
                r = runner.run(args.algorithm, args.partition, preset, args.stragglers, sets)
                times[s].append(r.time)
                print(f"  round {k} {s:12} {describe(r)}", flush=True)
                for on, what in ((args.phases, phases), (args.straggler, straggler)):
                    line = what(r) if on else None
                    if line is not None:
                        print(line, flush=True)
        base = statistics.median(t.s for t in times[syncs[0]])
        print(f"median time to target (s), and {syncs[0]}'s median over it "
              "('>': a run did not reach the target, its time is a lower bound, and so is a "
              "median counting it):")
        for s in syncs:
            m = statistics.median(t.s for t in times[s])
            bound = "" if all(t.reached for t in times[s]) else ">"
            print(f"  {s:12} {bound:1}{m:6.2f}  {base / m:5.2f}x  (runs: "
                  + ", ".join(t.text() for t in times[s]) + ")")


if __name__ == "__main__":
    main()
