"""K-means result quality on the main job (issue 12, item 5): flegel with its defaults against
scikit-learn's ``KMeans`` with its defaults, on the same data.

Prints, for the data of ``jobs/kmeans.yaml`` (200,000 x 28 synthetic blobs, K = 16):

* ``flegel run jobs/kmeans.yaml`` (its defaults: greedy k-means++, ``n_init=10`` restarts on
  the sample, BSPV): the exact final inertia, twice (the same seed gives the same model);
* ``flegel.KMeans(n_clusters=16)`` (the estimator's defaults: 2 workers, BSP full batch);
* scikit-learn's ``KMeans(n_clusters=16)`` (its defaults: ``n_init="auto"``, one greedy
  k-means++ run) for ``random_state`` 0..4, and ``n_init=10``;
* the relative difference of flegel's inertia to each, and the master's cost of choosing the
  restarts (``init_parameter`` on the sample).

Usage: ``python bench/kmeans_quality.py``
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "jobs" / "kmeans.yaml"


def flegel_run(out: Path) -> dict:
    """One ``flegel run`` of the main job; its summary."""
    subprocess.run([sys.executable, "-m", "flegel", "run", str(JOB), "--out", str(out),
                    "--set", "output.progress=none"], check=True, capture_output=True,
                   timeout=600)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    from sklearn.cluster import KMeans as SkKMeans

    import flegel
    from flegel.algorithms.kmeans import KMeans as KMeansAlgorithm
    from flegel.data import load_shard
    from flegel.job.validate import load_job
    from flegel.local import make_info

    job = load_job(JOB)
    x, _ = load_shard(job.data, 0, 1, job.base_dir)
    k = job.params["n_clusters"]
    print(f"data: {x.shape[0]} x {x.shape[1]}, K = {k}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [flegel_run(Path(tmp) / f"run{i}") for i in (1, 2)]
        ours = runs[0]["final_objective"]
        for i, s in enumerate(runs, 1):
            print(f"flegel run (defaults) #{i}: inertia {s['final_objective']:.6e}, "
                  f"{s['iterations']} iterations, batch {s.get('batch')}, "
                  f"training {s['wall_time_s']:.3f} s")
        t0 = time.perf_counter()
        est = flegel.KMeans(n_clusters=k, random_state=0, out=tmp).fit(x)
        print(f"flegel.KMeans(n_clusters={k}).fit: inertia {est.inertia_:.6e}, "
              f"{est.n_iter_} iterations, {time.perf_counter() - t0:.1f} s with launch")
    with threadpool_limits(1):
        for rs in range(5):
            sk = SkKMeans(k, random_state=rs).fit(x)
            print(f"sklearn KMeans(n_clusters={k}, random_state={rs}) (defaults): inertia "
                  f"{sk.inertia_:.6e}; flegel / sklearn - 1 = {ours / sk.inertia_ - 1:+.2e}")
        sk10 = SkKMeans(k, n_init=10, random_state=0).fit(x)
        print(f"sklearn KMeans(n_init=10): inertia {sk10.inertia_:.6e}; "
              f"flegel / sklearn - 1 = {ours / sk10.inertia_ - 1:+.2e}")
        info = make_info(x, None, seed=job.seed, n_workers=job.workers)
        for n_init in (1, 10):
            alg = KMeansAlgorithm(n_clusters=k, n_init=n_init)
            alg.init_parameter(info)  # warm caches
            t0 = time.perf_counter()
            alg.init_parameter(info)
            print(f"init on the master, n_init={n_init}: {time.perf_counter() - t0:.3f} s "
                  f"(sample of {len(info.sample)} rows)")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
