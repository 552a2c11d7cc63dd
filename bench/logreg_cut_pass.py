"""What one cut pass costs FSPV's logistic regression without stragglers (issue 19, Fig. 8):
L-BFGS driven by ``LogisticRegression.update_parameter`` in one process on ``flegel
paper``'s LR workload (110,000 x 28, 4 shards, strided or contiguous of the label-sorted
rows, the page's job parameters), every aggregate a full batch at θ (BSPV's and FSPV's whole
passes) except the ones a pattern cuts: an aggregate at θ of a share of each worker's shard
(a worker paused mid-pass, or cut by a timer), which takes the estimated L-BFGS step
(``LogisticRegression._stratified_batch``).  Prints, per pattern, the exact objective of
θ₀, θ₁, ... and the first θ at or below the target (the exact path's θ₄, about the 0.2 s
horizon's target of the page).

No clock, no MPI: the θ sequences are the algorithm's, whatever the machine's load.  The
aggregates are the workers' ``update_block`` pieces, one block per worker and iteration,
each worker's stratum armed (FSP without migration): on strided shards the skew test
switches it off (the batch sums stand for every shard), on contiguous ones of the sorted
rows it stays on.  Usage::

    python bench/logreg_cut_pass.py [--iterations 12] [--target-index 4]
        [--partition strided]

Measured: see ``algorithms/_quasinewton.py`` (``LBFGS``, "Estimated pairs").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from flegel.algorithms.logreg import LogisticRegression
from flegel.api import DataInfo
from flegel.cli.paper.workloads import QUICK, workloads, write_data
from flegel.data import sample_shard
from flegel.data.partition import partition_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.cut_passes import cut_path  # noqa: E402

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
    """The page's LR data on 4 shards in a shuffled order, the job's algorithm on the master
    and one instance per worker, each with its stratum armed as FSP's worker policy arms it
    without migration (``LogisticRegression.stratify``)."""

    def __init__(self, partition: str) -> None:
        w = workloads(QUICK)["logreg"]
        with tempfile.TemporaryDirectory() as tmp:
            d = np.load(write_data(w, Path(tmp)))
            self.x, self.y = np.asarray(d["X"], dtype=np.float64), d["y"]
        self.params = w.params
        n = len(self.x)
        shards = [np.asarray(partition_rows(n, k, WORKERS, partition)) for k in range(WORKERS)]
        rng = np.random.default_rng(0)
        self.orders = [rng.permutation(s) for s in shards]
        # the runtime's initialization sample (flegel.run: sample_size 10,000 over 4)
        parts = [sample_shard(self.x[s], self.y[s], 10_000 // WORKERS, k)
                 for k, s in enumerate(shards)]
        self.sample = np.concatenate([p[0] for p in parts])
        self.sample_y = np.concatenate([p[1] for p in parts])

    def path(self, cuts: dict[int, list[float]], iterations: int) -> list[float]:
        """Exact objectives of θ₀ .. θ_iterations; update t aggregates every worker's first
        ``cuts[t]`` share of its shard (a whole pass where not named), all at θ_{t-1}."""
        info = DataInfo(n_features=self.x.shape[1], n_points=len(self.x), n_workers=WORKERS,
                        sample=self.sample, sample_y=self.sample_y, n_classes=2)
        return cut_path(lambda: LogisticRegression(kernel="array", **self.params), info,
                        self.x, self.y, self.orders, cuts, iterations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--target-index", type=int, default=4,
                    help="the target: the exact path's objective at this θ")
    ap.add_argument("--partition", default="strided", help="strided or contiguous")
    args = ap.parse_args()
    problem = Problem(args.partition)
    paths = {name: problem.path(cuts, args.iterations) for name, cuts in PATTERNS.items()}
    target = paths["exact"][args.target_index]
    print(f"target: the exact path's θ{args.target_index}, {target:,.1f}")
    for name, objectives in paths.items():
        hit = next((i for i, f in enumerate(objectives) if f <= target * (1 + 1e-9)), None)
        print(f"  {name:28s} reached at θ{hit}: "
              + " ".join(f"{f:,.0f}" for f in objectives))


if __name__ == "__main__":
    main()
