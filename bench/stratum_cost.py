"""What K-means' stratified M-step (issue 19; ``flegel.algorithms._stratum``) costs a worker per
first pass, in one process: ``flegel paper``'s quick K-means shard (27,500 x 28, 16 blobs,
blocks of 1,000, θ version up every ``--per`` blocks, θ's counts even) passed by
``KMeans.update_block`` without the stratum (FSP with migration, BSP), with it on a shuffled
shard (Fig. 8's workers) and on a sorted one (Figs. 7, 9a, 9b, 15's contiguous shards); the
median of ``--repeat`` passes each, and the stratum's extra over the plain pass.

The code timed is the ``flegel`` that ``python`` imports, so the same command compares two
checkouts.  Usage::

    python bench/stratum_cost.py [--repeat 7] [--per 4] [--kernel auto]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from flegel.algorithms.kmeans import KMeans
from flegel.block import Block

N, D, K, M = 27_500, 28, 16, 1_000


def one_pass(x: np.ndarray, centers: np.ndarray, stratified: bool, per: int,
             kernel: str) -> float:
    """Seconds of one first pass of ``update_block`` over ``x``."""
    alg = KMeans(n_clusters=K, n_init=1, kernel=kernel)
    alg.load_compiled(D, x.dtype)
    if stratified:
        alg.stratify(len(x))
    theta = {"centers": centers, "sums": np.zeros((K, D)), "counts": np.full(K, 1e5),
             "stratum_sums": np.zeros((K, D)), "stratum_counts": np.zeros(K),
             "drift": np.zeros(1)}
    blocks = [Block.from_arrays(x[a:a + M], None, alg.init_state(len(x[a:a + M]), D))
              for a in range(0, len(x), M)]
    start = time.perf_counter()
    for i, b in enumerate(blocks):
        alg.update_block(b, theta, 1 + i // per)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--per", type=int, default=4, help="blocks per θ version")
    ap.add_argument("--kernel", default="auto")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    means = rng.normal(scale=10.0, size=(K, D))
    y = np.sort(rng.integers(0, K, N))
    sorted_x = means[y] + rng.normal(scale=4.0, size=(N, D))
    shuffled_x = sorted_x[rng.permutation(N)]
    centers = means + rng.normal(size=(K, D))
    rows = {"plain (no stratum)": (shuffled_x, False), "shuffled shard": (shuffled_x, True),
            "sorted shard": (sorted_x, True)}
    times = {}
    for name, (x, on) in rows.items():
        one_pass(x, centers, on, args.per, args.kernel)  # warm
        times[name] = float(np.median([one_pass(x, centers, on, args.per, args.kernel)
                                       for _ in range(args.repeat)]))
    base = times["plain (no stratum)"]
    print(f"first pass of {N:,} x {D} in blocks of {M:,}, K = {K}, kernel {args.kernel}, "
          f"median of {args.repeat}")
    for name, t in times.items():
        print(f"  {name:20s} {t * 1e3:8.2f} ms   {t / base:5.2f}x plain")


if __name__ == "__main__":
    main()
