"""Why FSPV's logistic regression stalled on contiguous shards with a straggler (issue 19,
Fig. 7): gradient steps (Eq. 1, ``flegel paper``'s fixed η = 0.5) on ``flegel paper``'s quick LR
data (label-sorted, 4 contiguous shards), exact schedules in one process, no MPI, no clock.

Per step, the gradient of the mean objective is taken as

* ``full``: over every point (BSPB's gradient step; BSPV's with a whole-shard batch);
* ``reweighted``: every point of shards 0, 2, 3 and a ``--share`` of shard 1 (the
  straggler's), averaged over the points taken -- FSPV's batch mean, where shard 1 (one
  class) counts ``--share`` of a fast one;
* ``stratified``: the same points, each shard's sums scaled by n_i / m_i
  (:class:`flegel.algorithms._stratum.GradientStratum`, what FSP sends now).

Printed: the exact objective's gap above the optimum (SciPy's L-BFGS) after chosen steps.
Usage::

    python bench/logreg_reweighted.py [--steps 50,100,200,300,600] [--share 0.1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from logreg_straggler import optimum  # bench/ is on sys.path when run as a script

from flegel.cli.paper.workloads import QUICK, workloads, write_data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="50,100,200,300,600")
    ap.add_argument("--share", type=float, default=0.1, help="of shard 1 per step")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    w = workloads(QUICK)["logreg"]
    alpha, eta = float(w.params["alpha"]), float(w.params["learning_rate"])
    with tempfile.TemporaryDirectory(prefix="logreg_reweighted_") as tmp:
        data = write_data(w, Path(tmp))
        best = optimum(data, alpha)
        z = np.load(data)
        x, y = np.asarray(z["X"], dtype=np.float64), np.asarray(z["y"], dtype=np.float64)
    n, d = x.shape
    shards = np.array_split(np.arange(n), 4)
    show = sorted(int(s) for s in args.steps.split(","))
    print(f"optimum {best:.7g}; η = {eta:g}, shard 1's share {args.share:g} a step")
    for how in ("full", "reweighted", "stratified"):
        rng = np.random.default_rng(args.seed)
        coef, b, gaps = np.zeros(d), 0.0, []
        for t in range(1, show[-1] + 1):
            gc, gb, count = np.zeros(d), 0.0, 0.0
            for i, s in enumerate(shards):
                take = s if i != 1 or how == "full" else rng.choice(
                    s, max(int(args.share * len(s)), 1), replace=False)
                m = x[take] @ coef + b
                r = 0.5 * (1.0 + np.tanh(0.5 * m)) - y[take]
                scale = len(s) / len(take) if how == "stratified" else 1.0
                gc += scale * (x[take].T @ r)
                gb += scale * float(r.sum())
                count += scale * len(take)
            coef = coef - eta * (gc / count + alpha * coef)
            b -= eta * gb / count
            if t in show:
                m = x @ coef + b
                f = float((np.logaddexp(0.0, m) - y * m).sum() + 0.5 * n * alpha * coef @ coef)
                gaps.append(f"{t}: {100 * (f / best - 1):+.2f} %")
        print(f"  {how:10s} " + ", ".join(gaps), flush=True)


if __name__ == "__main__":
    main()
