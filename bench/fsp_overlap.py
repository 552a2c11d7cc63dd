"""FSP's overlap (issue 19, ``sync.overlap``): what the runs of a ``flegel paper`` run folder
(or any folder of run folders) say about the workers' time -- per run the stop reason, the
time to target, the final objective, and per worker its passes, its compute share
``compute_s / (compute_s + wait_s)`` (the horizons' figure, Fig. 8), and the wait and
suspension shares of the run's wall time; a slowed worker is marked ``*``.

Usage::

    python bench/fsp_overlap.py RUNS_DIR [RUNS_DIR ...] [--match kmeans-contiguous]
    python bench/fsp_overlap.py --job JOB.yaml --side NAME=KEY=VALUE [--side ...]
        [--repeat N] [--timeout SECONDS] [--out DIR]

With ``--job`` it runs the job (e.g. the ``job.yaml`` a paper sitting left in a run folder)
once per side -- a side is a NAME and the ``--set`` overrides given for it, one
``--side NAME=KEY=VALUE`` per override (repeat the name for more; ``--side NAME=`` for the
job as it is; a value may hold commas: ``--side on=sync={model: fsp, overlap: true}``) --
sides alternating in the order first named, ``--repeat`` rounds, each run bounded by
``--timeout``, and prints the same rows: paired figures of one sitting.

Run it on the folders of two ``flegel paper --quick --only 7 --only 9a --only 10 --only 12
--out DIR`` sittings, one on main's code and one on this branch's, back to back: the
straggler's passes in 4 s and the final objectives, FSPV against BSPV, side by side.  Given
folders only, it reads them (``summary.json``) and starts no run.  The compute-share line
covers the FSP runs, by the summary's ``sync.model``.
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
    return {"run": run.name, "model": (s.get("sync") or {}).get("model"),
            "stop": s.get("stop_reason"), "target_s": s.get("time_to_target_s"),
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
        if r["model"] == "fsp":
            shares += [w["share"] for w in r["workers"] if not w["slow"]]
    if shares:
        print(f"FSP runs, unslowed workers: median compute share {statistics.median(shares):.2f} "
              f"({min(shares):.2f}-{max(shares):.2f}, {len(shares)} workers)")


def parse_sides(sides: list[str]) -> dict[str, list[str]]:
    """``NAME=KEY=VALUE`` per ``--side`` -> each side's ``--set`` overrides, sides in the
    order first named (``NAME=`` names a side with none).  Split at the first ``=`` only:
    a value may hold commas and ``=``."""
    parsed: dict[str, list[str]] = {}
    for side in sides:
        name, _, setting = side.partition("=")
        parsed.setdefault(name, [])
        if setting:
            parsed[name].append(setting)
    return parsed


def run_sides(job: Path, sides: list[str], repeat: int, out: Path, timeout: float) -> None:
    """Run ``job`` once per side per round, sides alternating; show each side's runs."""
    from flegel.cli.compare import run_one

    parsed = parse_sides(sides)
    for k in range(repeat):
        for name, sets in parsed.items():
            run_one(job, out / name / f"{name}-{k}", sets, timeout=timeout)
    for name in parsed:
        show(out / name, "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", type=Path, nargs="*")
    ap.add_argument("--match", default="", help="only runs whose folder name contains this")
    ap.add_argument("--job", type=Path, default=None, help="run this job per --side")
    ap.add_argument("--side", action="append", default=[],
                    help="NAME=KEY=VALUE: one --set override of side NAME of --job "
                         "(repeat the name for more; NAME= for none)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds each --job run may take (default 120)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where --job's runs go (default: a temporary folder)")
    args = ap.parse_args()
    if args.job is not None:
        import tempfile

        out = args.out or Path(tempfile.mkdtemp(prefix="fsp-overlap-"))
        run_sides(args.job, args.side or ["job="], args.repeat, out, args.timeout)
    for folder in args.folders:
        show(folder, args.match)


if __name__ == "__main__":
    main()
