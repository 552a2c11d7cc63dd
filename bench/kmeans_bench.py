"""K-means per-pass benchmark (foundation issue): flegel against scikit-learn and its own kernel.

Prints, measured in one run on the same data (default 1,000,000 x 28 float64, K = 16) with one
thread everywhere:

* sklearn: one Lloyd iteration of ``sklearn.cluster.KMeans`` -- its per-iteration routine
  ``lloyd_iter_chunked_dense``, the code ``KMeans.fit`` runs once per iteration (fit's own
  validation and final labelling excluded);
* kernel: one call of flegel's vectorized ``update_block`` over all points (the bare kernel);
* flegel: one full pass under ``flegel run`` with 1 worker, BSP full batch: the median time
  between consecutive barriers in ``events.jsonl`` (block scheduling, messaging and the
  barrier included);
* the master's CPU use during that run.

Usage: ``python bench/kmeans_bench.py [--points N] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from threadpoolctl import threadpool_limits

from flegel.algorithms.kmeans import KMeans
from flegel.block import Block
from flegel.data import load_shard

ROOT = Path(__file__).resolve().parents[1]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=28)
    ap.add_argument("--clusters", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="200,000 points, fewer repeats")
    args = ap.parse_args()
    if args.quick:
        args.points, args.iterations = 200_000, 5
    spec = {"source": "synthetic", "kind": "blobs", "n_points": args.points,
            "n_features": args.features, "centers": args.clusters, "seed": 7}
    x, _ = load_shard(spec, 0, 1, ROOT)
    k = args.clusters
    c0 = x[np.random.default_rng(0).choice(len(x), k, replace=False)].copy()
    r = args.iterations

    with threadpool_limits(1):
        from sklearn.cluster import KMeans as SKKMeans
        from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense

        sk_state = (np.ones(len(x)), c0.copy(), np.zeros_like(c0), np.zeros(k),
                    np.zeros(len(x), dtype=np.int32), np.zeros(k))

        def sk_iteration():
            w, old, new, wic, labels, shift = sk_state
            lloyd_iter_chunked_dense(x, w, old, new, wic, labels, shift, 1, True)

        SKKMeans(k, init=c0, n_init=1, max_iter=1).fit(x[:1000])  # warm-up

        algo = KMeans(n_clusters=k)
        theta = {"centers": c0.copy(), "sums": np.zeros((k, x.shape[1])), "counts": np.zeros(k)}

        def kernel():
            block = Block.from_arrays(x, None, algo.init_state(len(x), x.shape[1]))
            algo.update_block(block, theta, 1)

        kernel()  # JIT warm-up
        state = algo.init_state(len(x), x.shape[1])
        # Interleave the two so machine noise hits both alike; keep the best of each.
        sk_times, kernel_times = [], []
        for _ in range(r):
            sk_times.append(best_of(sk_iteration, 1))
            kernel_times.append(best_of(lambda: algo.update_block(
                Block.from_arrays(x, None, state), theta, 1), 1))
        sk_iter, t_kernel = min(sk_times), min(kernel_times)

    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "c0.npy", c0)
        job = {"algorithm": "kmeans", "params": {"n_clusters": k, "init": "c0.npy"},
               "data": spec, "workers": 1, "sync": {"model": "bsp", "batch": "full"},
               "stop": {"max_iterations": r + 1, "tolerance": None},
               "output": {"progress": "none"}}
        path = Path(tmp) / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        out = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "flegel", "run", str(path), "--out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        s = json.loads((out / "summary.json").read_text())
        stamps = [json.loads(line)["time_s"] for line in open(out / "events.jsonl")]
    t_flegel = float(np.median(np.diff(stamps)))

    print(f"K-means per pass: {args.points:,} x {args.features} float64, K = {k}, 1 thread")
    print(f"  scikit-learn Lloyd iteration : {sk_iter * 1e3:9.1f} ms")
    print(f"  flegel bare kernel (1 call)  : {t_kernel * 1e3:9.1f} ms")
    print(f"  flegel full pass (1 worker)  : {t_flegel * 1e3:9.1f} ms")
    print(f"  ratio flegel / scikit-learn  : {t_flegel / sk_iter:9.3f}   (target <= 1.0)")
    print(f"  runtime overhead vs kernel   : {100 * (t_flegel / t_kernel - 1):8.1f} %  "
          "(target <= 10%)")
    print(f"  master CPU while idle        : {100 * s['master_idle_cpu_fraction']:8.2f} % of a "
          f"core (idle {100 * s['master_idle_fraction']:.0f}% of the run); "
          f"whole run {100 * s['master_cpu_fraction']:.2f} %")


if __name__ == "__main__":
    main()
