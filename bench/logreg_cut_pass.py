"""What one cut pass costs FSPV's logistic regression without stragglers (issue 19, Fig. 8):
L-BFGS driven by ``LogisticRegression.update_parameter`` in one process on ``flegel paper``'s
LR workload (110,000 x 28, 4 strided shards, the page's job parameters), every aggregate a
full batch at θ (BSPV's and FSPV's whole passes) except the ones a pattern cuts: an
aggregate at θ of a share of each worker's shard (a worker paused mid-pass, or cut by a
timer), which takes the estimated L-BFGS step (``LogisticRegression._stratified_batch``).
Prints, per pattern, the exact objective of θ₀, θ₁, ... and the first θ at or below the
target (the exact path's θ₄, about the 0.2 s horizon's target of the page).

No clock, no MPI: the θ sequences are the algorithm's, whatever the machine's load.  The
aggregates are built as a worker's blocks send them on strided shards (every stratum off:
the batch sums stand for all shards, ``unstrat_*``).  Usage::

    python bench/logreg_cut_pass.py [--iterations 12] [--target-index 4]

Measured: see ``algorithms/_quasinewton.py`` (``LBFGS``, "Estimated pairs").
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from flegel.algorithms.logreg import LogisticRegression
from flegel.api import DataInfo
from flegel.cli.paper.workloads import QUICK, workloads, write_data
from flegel.data import sample_shard

WORKERS = 4
#: Cut iterations: {update t (θ_{t-1} -> θ_t): each worker's share of its shard at θ}.
PATTERNS: dict[str, dict[int, list[float]]] = {
    "exact": {},
    "one 79 % shard at θ2": {3: [0.79, 1, 1, 1]},
    "two empty shards at θ2": {3: [1, 0, 1, 0]},
    "one 79 % shard at θ4": {5: [0.79, 1, 1, 1]},
    "a run's cuts (main, pair 4)": {2: [0.79, 1, 1, 1], 3: [0.83, 0.065, 1, 0.74],
                                    4: [1, 1, 1, 0.12], 6: [1, 0, 1, 0],
                                    7: [1, 1, 1, 0.27]},
}


class Problem:
    """The page's LR data, strided shards in a shuffled order, and the job's algorithm."""

    def __init__(self) -> None:
        w = workloads(QUICK)["logreg"]
        with tempfile.TemporaryDirectory() as tmp:
            d = np.load(write_data(w, Path(tmp)))
            self.x, self.y = d["X"].astype(np.float64), d["y"].astype(np.float64)
        self.params = w.params
        n = len(self.x)
        shards = [np.arange(k, n, WORKERS) for k in range(WORKERS)]
        rng = np.random.default_rng(0)
        self.orders = [rng.permutation(s) for s in shards]
        # the runtime's initialization sample (flegel.run: sample_size 10,000 over 4)
        parts = [sample_shard(self.x[s], self.y[s], 10_000 // WORKERS, k)
                 for k, s in enumerate(shards)]
        self.sample = np.concatenate([p[0] for p in parts])
        self.sample_y = np.concatenate([p[1] for p in parts])

    def start(self) -> tuple[LogisticRegression, dict[str, np.ndarray]]:
        alg = LogisticRegression(kernel="array", **self.params)
        info = DataInfo(n_features=self.x.shape[1], n_points=len(self.x), n_workers=WORKERS,
                        sample=self.sample, sample_y=self.sample_y, n_classes=2)
        return alg, alg.init_parameter(info)

    def sums(self, alg: LogisticRegression, theta: dict, rows: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, float]:
        """Gradient sums and the objective's sum (the per-point penalty in) over ``rows``."""
        x, y = self.x[rows], self.y[rows]
        z = x @ theta["coef"] + theta["intercept"][0]
        e = np.exp(-np.abs(z))
        loss = np.maximum(z, 0) - y * z + np.log1p(e)
        r = np.where(z >= 0, 1 / (1 + e), e / (1 + e)) - y
        penalty = 0.5 * alg.alpha * float(theta["coef"] @ theta["coef"])
        return x.T @ r, np.array([r.sum()]), float(loss.sum() + len(rows) * penalty)

    def aggregate(self, alg: LogisticRegression, theta: dict, shares: list[float]) -> dict:
        """Every worker's first ``share`` of its shuffled shard, all at θ."""
        agg = alg.zero_aggregator(theta)
        rows = np.concatenate([o[:round(s * len(o))] for o, s in zip(self.orders, shares)])
        gc, gi, loss = self.sums(alg, theta, rows)
        c = float(len(rows))
        agg.update(grad_coef=gc, grad_intercept=gi, count=c, loss=loss,
                   at_step=float(theta["step"][0]) * c,
                   unstrat_grad_coef=gc.copy(), unstrat_grad_intercept=gi.copy(),
                   unstrat_count=np.array([c]), unstrat_loss=np.array([loss]))
        return agg

    def path(self, cuts: dict[int, list[float]], iterations: int) -> list[float]:
        """Exact objectives of θ₀ .. θ_iterations."""
        alg, theta = self.start()
        every = np.arange(len(self.x))
        out = [self.sums(alg, theta, every)[2]]
        for t in range(1, iterations + 1):
            theta = alg.update_parameter(
                self.aggregate(alg, theta, cuts.get(t, [1.0] * WORKERS)), theta)
            out.append(self.sums(alg, theta, every)[2])
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--target-index", type=int, default=4,
                    help="the target: the exact path's objective at this θ")
    args = ap.parse_args()
    problem = Problem()
    paths = {name: problem.path(cuts, args.iterations) for name, cuts in PATTERNS.items()}
    target = paths["exact"][args.target_index]
    print(f"target: the exact path's θ{args.target_index}, {target:,.1f}")
    for name, objectives in paths.items():
        hit = next((i for i, f in enumerate(objectives) if f <= target * (1 + 1e-9)), None)
        print(f"  {name:28s} reached at θ{hit}: "
              + " ".join(f"{f:,.0f}" for f in objectives))


if __name__ == "__main__":
    main()
