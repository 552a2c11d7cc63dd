"""FSP benchmark (FSP issue): BSPB, BSPV, FSPB, FSPV with and without an injected straggler,
a fixed-η sweep (FSP paper Fig. 15), and semi-centralized against centralized coordination.

K-means on a HIGGS-shaped synthetic set (28 dimensions, overlapping clusters so training takes
many passes).  Every run of one invocation shares the target objective: the converged online
objective of BSPB without stragglers plus ``--slack``; time to target is read from the exact
objective of θ snapshots (``summary.json``: ``time_to_target_s``).  A run that has not reached
the target after ``--max-time`` seconds is shown as ``>max`` and its speedups as lower bounds.

Usage: ``python bench/fsp_bench.py [--workers 4] [--points 1000000] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import yaml

from flegel.cli.compare import run_one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--stragglers", type=int, default=None,
                    help="injected workers (default: a quarter of the workers)")
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--tau-ms", type=float, default=32.0)
    ap.add_argument("--max-time", type=float, default=60.0)
    ap.add_argument("--slack", type=float, default=0.01)
    ap.add_argument("--sweep-ms", default="2,5,10,20,50,100")
    ap.add_argument("--quick", action="store_true", help="200,000 points, 20 s per run")
    args = ap.parse_args()
    if args.quick:
        args.points, args.max_time, args.sweep_ms = 200_000, 20.0, "5,20,80"
    n_slow = args.stragglers if args.stragglers is not None else max(1, args.workers // 4)
    slow = f"1-{n_slow}"
    straggle = [{"pattern": "injected", "tau_ms": args.tau_ms, "every": 1000,
                 "workers": slow}]
    job = {"algorithm": "kmeans", "params": {"n_clusters": 16, "init": "kmeans++"},
           "data": {"source": "synthetic", "kind": "blobs", "n_points": args.points,
                    "n_features": 28, "centers": 16, "cluster_std": 8.0, "seed": 11},
           "workers": args.workers, "sync": {"model": "bsp"}, "seed": 0,
           "stop": {"max_iterations": 100000, "tolerance": 1e-5,
                    "max_time_s": args.max_time},
           "output": {"progress": "none", "trace_points": 100}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        ref = run_one(path, tmp / "ref", ["sync.model=bspb", "stragglers=[]"], None)
        f = ref["online_objective"]
        target = f + args.slack * abs(f)
        print(f"K-means, {args.points:,} x 28, K=16, {args.workers} workers; target objective "
              f"{target:.6g} (BSPB converged +{args.slack:g}); runs capped at "
              f"{args.max_time:g} s")

        def run(name: str, sync: list[str], stragglers: list) -> dict:
            sets = sync + [f"stragglers={json.dumps(stragglers)}",
                           f"stop.target_objective={target!r}"]
            s = run_one(path, tmp / name, sets, None)
            return {"t": s.get("time_to_target_s"), "wall": s["wall_time_s"],
                    "final": s["final_objective"], "iters": s["iterations"],
                    "spread_ms": 1e3 * s.get("mean_spread_s", 0.0),
                    "barrier_ms": 1e3 * s.get("mean_barrier_s", 0.0),
                    "eta_ms": s.get("mean_eta_ms"),
                    "passes": [w["passes"] for w in s["per_worker"]]}

        def fmt(t: float | None) -> str:
            return f"{t:8.2f}" if t is not None else f"{'>' + format(args.max_time, 'g'):>8}"

        results: dict[str, dict[str, dict]] = {}
        slowed = f"{n_slow} of {args.workers} injected, tau={args.tau_ms:g} ms"
        for label, st in (("no stragglers", []), (slowed, straggle)):
            rows = {}
            for name in ("bspb", "bspv", "fspb", "fspv"):
                rows[name] = run(f"{name}-{len(st)}", [f"sync.model={name}"], st)
            results[label] = rows
            print(f"\n{label}")
            print(f"  {'sync':<6} {'to target s':>11} {'final obj':>11} {'iters':>6} "
                  f"{'barrier ms':>10} {'spread ms':>9}  passes per worker")
            for name, r in rows.items():
                passes = " ".join(f"{p:.1f}" for p in r["passes"])
                print(f"  {name:<6} {fmt(r['t']):>11} {r['final']:11.5g} {r['iters']:6d} "
                      f"{r['barrier_ms']:10.2f} {r['spread_ms']:9.2f}  {passes}")
            fv, bv = rows["fspv"]["t"], rows["bspv"]["t"]
            if fv is not None:
                bound = "" if bv is not None else " (lower bound)"
                print(f"  FSPV vs BSPV: {(bv or args.max_time) / fv:.2f}x{bound}")

        print(f"\nfixed-eta sweep ({n_slow} of {args.workers} injected)")
        sweep = {}
        for eta in [float(e) for e in args.sweep_ms.split(",")]:
            r = run(f"fixed-{eta:g}", ["sync.model=fsp", "sync.interval=fixed",
                                       f"sync.eta_ms={eta}"], straggle)
            sweep[eta] = r
            print(f"  eta {eta:7g} ms: {fmt(r['t'])} s to target")
        reached = [r["t"] for r in sweep.values() if r["t"] is not None]
        fspv = results[list(results)[1]]["fspv"]["t"]
        if reached and fspv is not None:
            best = min(reached)
            print(f"  FSPV {fspv:.2f} s vs best fixed eta {best:.2f} s: "
                  f"{100 * (fspv / best - 1):+.1f}% (target: within 15%)")

        print(f"\ncoordination ({n_slow} of {args.workers} injected, FSPV)")
        for coord in ("centralized", "semi"):
            r = run(f"coord-{coord}", ["sync.model=fspv", f"sync.coordination={coord}"],
                    straggle)
            print(f"  {coord:<11}: mean spread {r['spread_ms']:.2f} ms, mean barrier "
                  f"{r['barrier_ms']:.2f} ms, {fmt(r['t'])} s to target")


if __name__ == "__main__":
    main()
