"""FSPV's calibration against BSPV's (issue 19: "the calibration must not cost more than
BSPV's own"): the time of the first barrier, alternated run by run.

Each round runs ``flegel paper``'s workload of one algorithm (4 workers, strided shards, no
straggler) for three iterations under BSPV, then under FSPV, and reads the first event of
each run's ``events.jsonl``: when the first barrier ended (training clock) and the slowest
worker's compute in it.  Alternating puts both under the same load; the medians are printed.
For logistic regression both calibrations are a full batch at θ⁽⁰⁾, the first L-BFGS
evaluation (:class:`flegel.sync.fsp.FSP`, "Whole passes").

Usage::

    python bench/fsp_calibration.py [--algorithm logreg] [--rounds 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from flegel.cli.compare import model_sets, run_one
from flegel.cli.paper.runner import Runner
from flegel.cli.paper.workloads import QUICK

SYNCS = ("bspv", "fspv-off")


def first_barrier(run: Path) -> tuple[float, float]:
    """(end of the first barrier, slowest worker's compute in it), milliseconds."""
    with open(run / "events.jsonl") as f:
        event = json.loads(f.readline())
    return 1e3 * event["time_s"], 1e3 * max(event["workers"]["compute_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithm", default="logreg", help="one of flegel paper's algorithms")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this folder")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="fsp_calibration_"))
    job = Runner(QUICK, root, say=lambda _: None).job(args.algorithm, "strided")
    sets = ["stop.max_iterations=3", "stop.max_time_s=null", "stop.tolerance=null"]
    found: dict[str, list[tuple[float, float]]] = {s: [] for s in SYNCS}
    for i in range(args.rounds):
        for sync in SYNCS:
            out = root / f"{sync}-{i}"
            run_one(job, out, model_sets(sync) + sets, timeout=120.0)
            found[sync].append(first_barrier(out))
    print(f"{args.algorithm}: first barrier (calibration), {args.rounds} alternated rounds")
    for sync, rows in found.items():
        v = np.asarray(rows)
        print(f"  {sync:9s} ends at {np.median(v[:, 0]):6.1f} ms median "
              f"({' '.join(f'{x:.1f}' for x in v[:, 0])}); slowest worker's compute "
              f"{np.median(v[:, 1]):.1f} ms")
    b, f = (np.median(np.asarray(found[s])[:, 0]) for s in SYNCS)
    print(f"  FSPV / BSPV {f / b:.2f}x (<= 1: FSPV's calibration costs no more)")
    print(f"runs in {root}")


if __name__ == "__main__":
    main()
