"""Where FSPV's and BSPV's time to the first horizon's target went (issue 19): the runs that
``python bench/fsp_claims.py --only horizons --repeat N --keep DIR --json OUT`` kept, read
back barrier by barrier.

At ``flegel paper``'s quick scale the one-pass problems (K-means, GMM, FCM) reach the first
horizon's target within a handful of iterations, so a pair's ratio is (iterations to the
target) x (time per iteration) on each side.  Per pair this prints, for BSPV and FSPV:

* ``its``: the barriers up to the snapshot that reached the target;
* ``ms/it``: the mean wall time of those iterations (the calibration included);
* ``cal ms``: the calibration iteration's wall time;
* ``cut``: commits before the target that carried less than the worker's whole shard
  (a timer or a pause cut its pass), and their reasons;
* ``warm``: the median slowest worker's time for an iteration after the first three (a warm
  pass, where the side runs a barrier per pass) and ``bar``: the median barrier (first report
  to the next θ), both in ms: at this scale a warm pass of GMM or FCM costs a fraction of a
  barrier, and the first pass (``cal ms`` for BSPV) several warm ones;
* ``interp``: the pair's ratio re-read from both traces with this checkout's
  :func:`flegel.cli.paper.horizons.first_reach` (the crossing interpolated between
  snapshots), so that runs kept by another version's ``fsp_claims.py`` are read by one rule.

Time per iteration is the machine's load (ranks sharing cores); the iterations and the cut
passes are the sync model's.

``--steps`` also prints, per pair and side, each θ update up to the target (issue 19, j8):
when it was applied (ms from the start of training), the slowest worker's time in its
iteration (``comp``: the events' ``compute_s``, its wall time from taking θ in to its commit,
waits for a core included), the reports' spread (first report to last, ``spread``) and the
master's own part (``master``: last report to θ, barrier less spread) -- where one side
loses milliseconds to the other in the first iterations.  Usage::

    python bench/fsp_timeline.py DIR OUT [--algorithms kmeans,...] [--steps]
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from flegel.cli.paper.horizons import first_reach
from flegel.rundir.reader import read_events, read_summary


def target_barrier(events: list[dict[str, Any]], trace: list[list[float]], target: float
                   ) -> int | None:
    """How many barriers of ``events`` it took to the first snapshot of ``trace`` at or below
    ``target``; None where the trace never got there or there are no events.  A snapshot is
    taken at a barrier: that barrier is the event nearest the snapshot's time (one rule for
    :func:`to_target` and :func:`steps`)."""
    hit = next((float(t) for t, f in trace if f <= target), None)
    if hit is None or not events:
        return None
    return 1 + min(range(len(events)), key=lambda i: abs(events[i]["time_s"] - hit))


def to_target(run: Path, target: float, sizes: list[float] | None = None) -> dict[str, Any]:
    """Barriers, their mean time and the cut passes up to the first snapshot at or below
    ``target`` (None figures if the run never reached it), and ``reach_s``: when the trace
    crosses ``target`` (:func:`~flegel.cli.paper.horizons.first_reach`)."""
    trace = read_summary(run)["objective_trace"]
    reach = {"reach_s": first_reach(trace, target)}  # interpolated (horizons.first_reach)
    evs = read_events(run)
    later = [e for e in evs[3:] if "compute_s" in e["workers"] and "barrier_s" in e]
    warm = {"warm_ms": 1e3 * float(np.median([max(e["workers"]["compute_s"]) for e in later]))
            if later else None,
            "bar_ms": 1e3 * float(np.median([e["barrier_s"] for e in later])) if later else None}
    n = target_barrier(evs, trace, target)
    if n is None:
        return {"its": None, "ms_per_it": None, "cal_ms": None, "cut": [], **warm, **reach}
    full = sizes or [max(e["workers"]["points"][k] for e in evs)
                     for k in range(len(evs[0]["workers"]["points"]))]
    cut = [f"{e['t']}:{r}" for e in evs[:n]
           for p, r, m in zip(e["workers"]["points"], e["workers"]["reason"], full) if p < m]
    return {"its": n, "ms_per_it": 1e3 * evs[n - 1]["time_s"] / n,
            "cal_ms": 1e3 * evs[0]["time_s"], "cut": cut, **warm, **reach}


def steps(run: Path, target: float) -> list[dict[str, float]]:
    """Each θ update of ``run`` up to the first snapshot at or below ``target`` (every one
    where the run never reached it): when it was applied, the slowest worker's time in its
    iteration (NaN where an older run's events lack ``compute_s``), the reports' spread and
    the master's part of its barrier, in ms (module notes, ``--steps``).  The target's
    barrier by :func:`target_barrier`, as :func:`to_target`."""
    evs = read_events(run)
    n = target_barrier(evs, read_summary(run)["objective_trace"], target)
    out = []
    for e in evs[:n]:
        bar, spread = e.get("barrier_s", 0.0), e.get("spread_s", 0.0)
        comp = e["workers"].get("compute_s")
        out.append({"at": 1e3 * e["time_s"], "comp": 1e3 * max(comp) if comp else math.nan,
                    "spread": 1e3 * spread, "master": 1e3 * (bar - spread)})
    return out


def run_dir(rep: Path, algorithm: str, sync: str, pair: int = 1) -> Path:
    """The kept trace run of ``sync`` on ``algorithm``: in one repeat's folder (an older
    ``fsp_claims.py``: a folder per pair), or the ``pair``-th of the one folder (pairs
    tagged ``-2``, ``-3``, ... after the sync, :meth:`Runner.trace_run`)."""
    tag = "" if pair == 1 else f"-{pair}"
    name = re.compile(rf"{re.escape(algorithm)}-[a-z]+-trace-{re.escape(sync)}{tag}-[0-9a-f]+")
    (found,) = sorted(d for d in (rep / "runs").iterdir() if name.fullmatch(d.name))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("keep", type=Path, help="fsp_claims.py's --keep folder")
    ap.add_argument("json", type=Path, help="fsp_claims.py's --json file")
    ap.add_argument("--algorithms", default=None, help="comma-separated (default: all)")
    ap.add_argument("--steps", action="store_true",
                    help="also each θ update up to the target: applied at, comp, spread, "
                         "master (ms)")
    args = ap.parse_args()
    figures = json.loads(args.json.read_text())["horizons"]
    names = args.algorithms.split(",") if args.algorithms else [
        a for a in figures if not a.startswith("_")]
    print(f"{'pair':12s} {'ratio':>6s} {'interp':>6s}   {'BSPV its':>8s} {'ms/it':>6s}"
          f" {'cal ms':>6s} {'warm':>5s} {'bar':>5s}   {'FSPV its':>8s} {'ms/it':>6s}"
          f" {'cal ms':>6s} {'warm':>5s} {'bar':>5s}  FSPV cut passes (t:reason)")
    for a in names:
        if "repeats" in figures[a] or "pairs" not in (figures[a]["rows"] or [{}])[0]:
            # An older fsp_claims.py: a folder per pair.
            reps = figures[a].get("repeats") or [figures[a]]
            firsts = [(i, rep["rows"][0]) for i, rep in enumerate(reps) if rep["rows"]]
            folders = {i: args.keep / "horizons" / (f"rep{i}" if len(reps) > 1 else "")
                       for i, _ in firsts}
            pair_of = {i: 1 for i, _ in firsts}
        else:
            # One folder; each pair's first row is among the first horizon's pairs, which
            # name their pair (a failed pair has none; older files without "pair": in order).
            firsts = [(int(r.get("pair", i)), r)
                      for i, r in enumerate(figures[a]["rows"][0]["pairs"])]
            folders = {i: args.keep / "horizons" for i, _ in firsts}
            pair_of = {i: i + 1 for i, _ in firsts}
        for i, row in firsts:
            folder, k = folders[i], pair_of[i]
            b = to_target(run_dir(folder, a, "bspv", k), row["target"])
            f = to_target(run_dir(folder, a, "fspv-off", k), row["target"])
            tb, tf = b["reach_s"], f["reach_s"]
            interp = f"{tb / tf:5.2f}x" if tb and tf else f"{'-':>6s}"

            def cells(x: dict[str, Any]) -> str:
                tail = (f" {x['warm_ms']:5.1f} {x['bar_ms']:5.1f}" if x["warm_ms"] is not None
                        else f" {'-':>5s} {'-':>5s}")
                if x["its"] is None:
                    return f"{'-':>8s} {'-':>6s} {'-':>6s}" + tail
                return f"{x['its']:8d} {x['ms_per_it']:6.1f} {x['cal_ms']:6.1f}" + tail

            print(f"{a + ' #' + str(i + 1):12s} {row['ratio']:5.2f}x {interp}   {cells(b)}"
                  f"   {cells(f)}  {' '.join(f['cut']) or '-'}")
            if args.steps:
                for side in ("bspv", "fspv-off"):
                    st = steps(run_dir(folder, a, side, k), row["target"])
                    print(f"    {side:8s} θ at / comp / spread / master (ms): " + "  ".join(
                        f"{x['at']:.1f}/{x['comp']:.1f}/{x['spread']:.1f}/{x['master']:.1f}"
                        for x in st))


if __name__ == "__main__":
    main()
