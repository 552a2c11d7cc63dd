"""FSP's overlap (issue 19, ``sync.overlap``): what the runs of a ``flegel paper`` run folder
(or any folder of run folders) say about the workers' time -- per run the stop reason, the
time to target, the final objective, and per worker its passes, its compute share
``compute_s / (compute_s + wait_s)`` (the horizons' figure, Fig. 8), and the wait and
suspension shares of the run's wall time; a slowed worker is marked ``*``.

Usage::

    python bench/fsp_overlap.py RUNS_DIR [RUNS_DIR ...] [--match kmeans-contiguous]
    python bench/fsp_overlap.py --job JOB.yaml --side NAME=KEY=VALUE,... [--side ...]
        [--repeat N] [--out DIR]

With ``--job`` it runs the job (e.g. the ``job.yaml`` a paper sitting left in a run folder)
once per ``--side`` -- ``--set`` overrides after the name, none for the job as it is --
sides alternating, ``--repeat`` rounds, and prints the same rows: paired figures of one
sitting.

Run it on the folders of two ``flegel paper --quick --only 7 --only 9a --only 10 --only 12
--out DIR`` sittings, one on main's code and one on this branch's, back to back: the
straggler's passes in 4 s and the final objectives, FSPV against BSPV, side by side.  Reads
the folders only (``summary.json``; no run is started).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from flegel.rundir.reader import read_summary, slowed_ranks


def runs_in(folder: Path, match: str) -> list[Path]:
    """The run folders under ``folder`` (a paper sitting's ``runs/``, or itself) whose name
    contains ``match``, by name."""
    base = folder / "runs" if (folder / "runs").is_dir() else folder
    return sorted(p for p in base.iterdir()
                  if (p / "summary.json").is_file() and match in p.name)


def row(run: Path) -> dict[str, Any]:
    """One run's figures (see the module docstring)."""
    s = read_summary(run)
    slow = slowed_ranks(s)
    wall = float(s.get("wall_time_s") or 0.0) or 1.0
    workers = []
    for w in s["per_worker"]:
        busy = w["compute_s"] + w["wait_s"]
        workers.append({"rank": w["rank"], "slow": w["rank"] in slow,
                        "passes": w["passes"],
                        "share": w["compute_s"] / busy if busy > 0 else 0.0,
                        "wait": w["wait_s"] / wall, "slowed": w.get("slowed_s", 0.0) / wall})
    return {"run": run.name, "stop": s.get("stop_reason"), "target_s": s.get("time_to_target_s"),
            "objective": s.get("final_objective"), "barriers": s.get("barriers"),
            "workers": workers}


def show(folder: Path, match: str) -> None:
    print(f"{folder} ({match or 'every run'})")
    print(f"{'run':44} {'stop':9} {'target':>7} {'objective':>11} {'barriers':>8}  "
          "per worker: passes / compute share / wait / slowed (of the wall time)")
    shares = []
    for run in runs_in(folder, match):
        r = row(run)
        target = f"{r['target_s']:.2f}" if r["target_s"] is not None else "-"
        objective = f"{r['objective']:.5g}" if r["objective"] is not None else "-"
        cells = "  ".join(f"{'*' if w['slow'] else ''}{w['passes']:.1f}/{w['share']:.2f}/"
                          f"{w['wait']:.2f}/{w['slowed']:.2f}" for w in r["workers"])
        print(f"{r['run']:44} {str(r['stop']):9} {target:>7} {objective:>11} "
              f"{str(r['barriers']):>8}  {cells}")
        if "fsp" in r["run"]:
            shares += [w["share"] for w in r["workers"] if not w["slow"]]
    if shares:
        print(f"FSP runs, unslowed workers: median compute share {statistics.median(shares):.2f} "
              f"({min(shares):.2f}-{max(shares):.2f}, {len(shares)} workers)")


def run_sides(job: Path, sides: list[str], repeat: int, out: Path) -> None:
    """Run ``job`` once per side per round, sides alternating; show each side's runs."""
    from flegel.cli.compare import run_one

    parsed = []
    for side in sides:
        name, _, sets = side.partition("=")
        parsed.append((name, [s for s in sets.split(",") if s]))
    for k in range(repeat):
        for name, sets in parsed:
            run_one(job, out / name / f"{name}-{k}", sets, timeout=120.0)
    for name, _ in parsed:
        show(out / name, "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", type=Path, nargs="*")
    ap.add_argument("--match", default="", help="only runs whose folder name contains this")
    ap.add_argument("--job", type=Path, default=None, help="run this job per --side")
    ap.add_argument("--side", action="append", default=[],
                    help="NAME=KEY=VALUE,...: one setting (--set overrides) of --job")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None,
                    help="where --job's runs go (default: a temporary folder)")
    args = ap.parse_args()
    if args.job is not None:
        import tempfile

        out = args.out or Path(tempfile.mkdtemp(prefix="fsp-overlap-"))
        run_sides(args.job, args.side or ["job="], args.repeat, out)
    for folder in args.folders:
        show(folder, args.match)


if __name__ == "__main__":
    main()
