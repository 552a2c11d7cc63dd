"""Fig. 7's logistic-regression rows, run after run (issue 19): ``flegel paper``'s LR workload
(quick scale, its data and job) under ``flegel run``, worker 1 slowed by the paper's
τ = 32 ms per 1,000 points, ``--runs`` times per sync model, the models interleaved; per run
the first evaluated snapshot at the paper's target, the final exact objective above the
optimum, the number of barriers and of L-BFGS (full-batch) updates.

The optimum is the exact minimum of the job's objective ``Σ logloss + n (α/2)‖w‖²`` (SciPy's
L-BFGS on the whole data, in one process); the paper's target is it plus the workload's slack
(1e-2), as BSPB's converged objective plus the slack is in ``flegel paper``.  The code run is
the ``flegel`` that ``python`` imports, so the same command compares two checkouts (the global
``python`` runs main's).  ``--barriers N`` stops each run after N barriers instead of
``--seconds`` (then 60 s at most): the objective per update, which the machine's load does
not change as it changes the updates a run gets in 4 s.  Usage::

    python bench/logreg_straggler.py [--runs 3] [--partition contiguous]
        [--syncs bspv,fspv-off] [--seconds 4] [--barriers N] [--tau 32] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

import flegel
from flegel.cli.compare import model_sets, run_one
from flegel.cli.paper.workloads import QUICK, workloads, write_data, write_job


def optimum(data: Path, alpha: float) -> float:
    """min over (w, b) of Σ logloss + n (α/2)‖w‖² on the rows of ``data`` (binary labels)."""
    z = np.load(data)
    x, y = np.asarray(z["X"], dtype=np.float64), np.asarray(z["y"], dtype=np.float64)
    n, d = x.shape

    def f(p: np.ndarray) -> tuple[float, np.ndarray]:
        m = x @ p[:d] + p[d]
        loss = np.logaddexp(0.0, m) - y * m
        r = 0.5 * (1.0 + np.tanh(0.5 * m)) - y
        g = np.concatenate([x.T @ r + n * alpha * p[:d], [r.sum()]])
        return float(loss.sum() + 0.5 * n * alpha * p[:d] @ p[:d]), g

    res = minimize(f, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                   options={"maxiter": 10_000, "gtol": 1e-10, "ftol": 1e-15})
    return float(res.fun)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partition", default="contiguous")
    ap.add_argument("--syncs", default="bspv,fspv-off")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--barriers", type=int, default=0, help="stop after N barriers")
    ap.add_argument("--tau", type=float, default=32.0, help="ms per 1,000 points, worker 1")
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    if args.keep is not None:
        measure(args, args.keep)
        return
    with tempfile.TemporaryDirectory(prefix="logreg_straggler_") as tmp:  # nothing left
        measure(args, Path(tmp))


def measure(args: argparse.Namespace, root: Path) -> None:
    """The runs, their data, jobs and run folders under ``root``."""
    w = workloads(QUICK)["logreg"]
    data = write_data(w, root / "data")
    job = write_job(w, QUICK, data, args.partition, root / "jobs")
    best = optimum(data, float(w.params["alpha"]))
    target = best * (1 + w.slack)
    slow = ([{"pattern": "injected", "tau_ms": args.tau, "every": 1000, "workers": [1]}]
            if args.tau > 0 else [])
    print(f"flegel from {Path(flegel.__file__).parent}; {args.partition}, worker 1 at "
          f"τ = {args.tau:g} ms; optimum {best:.7g}, target +{w.slack:g}", flush=True)
    hits: dict[str, list[float | None]] = {}
    for i in range(args.runs):
        for sync in args.syncs.split(","):
            stop = ([f"stop.max_iterations={args.barriers}", "stop.max_time_s=60"]
                    if args.barriers else [f"stop.max_time_s={args.seconds}"])
            s = run_one(job, root / f"{sync}-{i}", [*model_sets(sync),
                                                    f"stragglers={json.dumps(slow)}", *stop],
                        None)
            gap = s["final_objective"] / best - 1.0
            trace = s.get("objective_trace") or []
            hit = next((t for t, f in trace if f <= target), None)
            low = min([f for _, f in trace] + [s["final_objective"]]) / best - 1.0
            hits.setdefault(sync, []).append(hit)
            print(f"  {sync:9s} run {i + 1}: target at "
                  + ("-" if hit is None else f"{hit:.2f} s")
                  + f", best {100 * low:+.3f} %, final {100 * gap:+.3f} %, "
                  f"{s.get('barriers')} barriers in {s.get('wall_time_s', 0):.2f} s", flush=True)
    for sync, h in hits.items():
        got = sorted(t for t in h if t is not None)
        print(f"  {sync}: {len(got)} of {len(h)} reached the target"
              + (f", median {got[len(got) // 2]:.2f} s" if got else ""))


if __name__ == "__main__":
    main()
