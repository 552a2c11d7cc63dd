"""What K-means' stratified M-step (issue 19; ``flegel.algorithms._stratum``) costs a worker per
first pass, in one process: ``flegel paper``'s quick K-means shard (27,500 x 28, 16 blobs,
blocks of 1,000, θ version up every ``--per`` blocks, θ's counts even) passed by
``KMeans.update_block`` without the stratum (FSP with migration, BSP), with it on a shuffled
shard (Fig. 8's workers) and on a sorted one (Figs. 7, 9a, 9b, 15's contiguous shards), there
with the estimate n/m · F and with the master's sample (θ's ``stratum_shards``: the worker
sends −E and counts its window, no sums); the median of ``--repeat`` passes each (the rows
taken in turn), and the stratum's extra over the plain pass.  Then the master's side: one
M-step with one shard's 2,500-row sample re-labelled (``KMeans._resampled``) and without.

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


def _theta(centers: np.ndarray, resampled: bool) -> dict[str, np.ndarray]:
    theta = {"centers": centers, "sums": np.zeros((K, D)), "counts": np.full(K, 1e5),
             "stratum_sums": np.zeros((K, D)), "stratum_counts": np.zeros(K),
             "stratum_active": np.zeros(1), "drift": np.zeros(1)}
    if resampled:
        # the master's 2,500-row sample of each of 4 shards (KMeans._set_samples)
        theta["stratum_shards"], theta["stratum_rows"] = np.zeros(4), np.full(4, 2_500.0)
    return theta


def one_pass(x: np.ndarray, centers: np.ndarray, stratified: bool, per: int,
             kernel: str, resampled: bool = False) -> float:
    """Seconds of one first pass of ``update_block`` over ``x``."""
    alg = KMeans(n_clusters=K, n_init=1, kernel=kernel)
    alg.load_compiled(D, x.dtype)
    if stratified:
        stratum = alg.stratify(len(x), 0) if resampled else alg.stratify(len(x))
        assert stratum is not None
        stratum.arm()  # FSPWorker.begin: the first iteration
    theta = _theta(centers, resampled)
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
    rows = {"plain (no stratum)": (shuffled_x, False, False),
            "shuffled shard": (shuffled_x, True, False),
            "sorted shard, n/m·F": (sorted_x, True, False),
            "sorted, master's": (sorted_x, True, True)}
    if not hasattr(KMeans, "_resampled"):  # a checkout before the master's sample
        rows.pop("sorted, master's")
    for x, on, rs in rows.values():
        one_pass(x, centers, on, args.per, args.kernel, rs)  # warm
    runs: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.repeat):  # the rows in turn: a loaded host's swings hit them alike
        for name, (x, on, rs) in rows.items():
            runs[name].append(one_pass(x, centers, on, args.per, args.kernel, rs))
    times = {name: float(np.median(ts)) for name, ts in runs.items()}
    base = times["plain (no stratum)"]
    print(f"first pass of {N:,} x {D} in blocks of {M:,}, K = {K}, kernel {args.kernel}, "
          f"median of {args.repeat}")
    for name, t in times.items():
        print(f"  {name:20s} {t * 1e3:8.2f} ms   {t / base:5.2f}x plain")
    if hasattr(KMeans, "_resampled"):
        master_step(sorted_x, centers, args.repeat)


def master_step(x: np.ndarray, centers: np.ndarray, repeat: int) -> None:
    """The master's M-step with one shard's sample (2,500 rows, ``flegel paper``'s 10,000
    over 4 workers) re-labelled, with all four, against a plain one."""
    rng = np.random.default_rng(1)
    alg = KMeans(n_clusters=K, n_init=1)
    alg._samples = [x[rng.choice(len(x), 2_500, replace=False)] for _ in range(4)]
    out = {}
    for name, on in (("plain M-step", 0), ("one shard re-labelled", 1),
                     ("all 4 shards re-labelled", 4)):
        theta = _theta(centers, True)
        agg = alg.zero_aggregator(theta)
        agg["stratum_active"][0] = float(on)
        agg["stratum_shards"][:on] = float(len(x))
        ts = []
        for _ in range(max(repeat, 20)):
            start = time.perf_counter()
            alg.update_parameter(agg, theta)
            ts.append(time.perf_counter() - start)
        out[name] = float(np.median(ts))
        print(f"  master: {name:22s} {out[name] * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
