"""FSPV against BSPV with one injected straggler: the speedup in time to target, in one run.

K-means (K = 16, kmeans++) on 200,000 x 28 synthetic blobs, 4 workers, worker 1 suspended
32 ms every 1,000 points (FSP paper Section 6.1).  The target is BSPB's converged online
objective + 1% (no straggler); both runs stop at the target or after 20 s, and time to
target is read from the exact objective of θ snapshots (``summary.json``).

Usage: ``python bench/fsp_speedup.py`` -- to compare two checkouts, run it from each with
``PYTHONPATH=<checkout>`` (it imports flegel from wherever Python finds it).  ``--json OUT``
also writes the times and the speedup to OUT (for ``bench/suite.py``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import yaml

from flegel.cli.compare import run_one

JOB = {"algorithm": "kmeans", "params": {"n_clusters": 16, "init": "kmeans++"},
       "data": {"source": "synthetic", "kind": "blobs", "n_points": 200_000,
                "n_features": 28, "centers": 16, "cluster_std": 8.0, "seed": 11},
       "workers": 4, "sync": {"model": "bsp"}, "seed": 0,
       "stop": {"max_iterations": 100_000, "tolerance": 1e-5, "max_time_s": 20},
       "output": {"progress": "none", "trace_points": 100}}
STRAGGLER = [{"pattern": "injected", "tau_ms": 32, "every": 1000, "workers": "1"}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write the times and the speedup to OUT (for bench/suite.py)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        job = folder / "job.yaml"
        job.write_text(yaml.safe_dump(JOB))
        ref = run_one(job, folder / "ref", ["sync.model=bspb", "stragglers=[]"], None)
        target = ref["online_objective"] * 1.01
        times: dict[str, float | None] = {}
        for name in ("bspv", "fspv"):
            s = run_one(job, folder / name, [f"sync.model={name}",
                                              f"stragglers={json.dumps(STRAGGLER)}",
                                              f"stop.target_objective={target!r}"], None)
            times[name] = s.get("time_to_target_s")
        bspv, fspv = times["bspv"], times["fspv"]
        print(f"time to target (s): BSPV {bspv}, FSPV {fspv}")
        speedup = (bspv or JOB["stop"]["max_time_s"]) / fspv if fspv else None
        if speedup is not None:
            print(f"speedup FSPV / BSPV: {speedup:.2f}x"
                  + ("" if bspv else " (lower bound: BSPV missed the target)"))
    if args.json:
        args.json.write_text(json.dumps({"target": target, "bspv_s": bspv, "fspv_s": fspv,
                                         "speedup": speedup,
                                         "lower_bound": bool(fspv and not bspv)}, indent=2))


if __name__ == "__main__":
    main()
