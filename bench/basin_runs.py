"""Which basin FSPV without migration ends in, run after run (issue 19, Figs. 7, 9a, 9b, 15):
``flegel paper``'s K-means (quick scale, its data and job) under ``flegel run``, worker 1
slowed by the paper's τ = 32 ms per 1,000 points, ``--runs`` times; per run the final exact
objective above BSPB's converged one (batch Lloyd from the same θ⁰, :mod:`basin_sim`) and the
first evaluated snapshot at the paper's target (+1e-3), then the count of runs that ended in
the target's basin.

The outcome is a draw between basins on a loaded machine (the straggler's share of each
interval follows the timing), so one run says little: ``--runs`` repeats it.  The code run is
the ``flegel`` that ``python`` imports, so the same command compares two checkouts (the global
``python`` runs main's).  Usage::

    python bench/basin_runs.py [--runs 5] [--partition contiguous] [--sync fspv-off]
        [--seconds 2] [--tau 32] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from basin_sim import paper_workload  # bench/ is on sys.path when run as a script

import flegel
from flegel.cli.compare import run_one
from flegel.cli.paper.workloads import QUICK, workloads, write_data, write_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--partition", default="contiguous")
    ap.add_argument("--sync", default="fspv-off")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--tau", type=float, default=32.0, help="ms per 1,000 points, worker 1")
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    if args.keep is not None:
        measure(args, args.keep)
        return
    with tempfile.TemporaryDirectory(prefix="basin_runs_") as tmp:  # nothing left behind
        measure(args, Path(tmp))


def measure(args: argparse.Namespace, root: Path) -> None:
    """The runs, their data, jobs and run folders under ``root``."""
    w = workloads(QUICK)["kmeans"]
    converged = paper_workload(root / "data").converged
    job = write_job(w, QUICK, write_data(w, root / "data"), args.partition, root / "jobs")
    target = converged * (1 + w.slack)
    slow = [{"pattern": "injected", "tau_ms": args.tau, "every": 1000, "workers": [1]}]
    print(f"flegel from {Path(flegel.__file__).parent}; {args.sync}, {args.partition}, worker 1"
          f" at τ = {args.tau:g} ms; BSPB converged {converged:.7g}, target +{w.slack:g}")
    good = 0
    for i in range(args.runs):
        s = run_one(job, root / f"run{i}", [f"sync.model={args.sync}",
                                            f"stragglers={json.dumps(slow)}",
                                            f"stop.max_time_s={args.seconds}",
                                            # every θ snapshot evaluated: time to target
                                            "output.trace_budget=100"], None)
        gap = s["final_objective"] / converged - 1.0
        hit = next((t for t, f in s.get("objective_trace") or [] if f <= target), None)
        good += gap <= w.slack
        print(f"  run {i + 1}: final {100 * gap:+.3f} %, target at "
              + ("-" if hit is None else f"{hit:.2f} s") + f", {s.get('barriers')} barriers",
              flush=True)
    print(f"  {good} of {args.runs} runs ended within the target's slack"
          + (f"; runs in {root}" if args.keep is not None else ""))


if __name__ == "__main__":
    main()
