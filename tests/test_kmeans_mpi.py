"""K-means end to end under real mpirun, against scikit-learn from the same centroids.

One job over the real transport with 4 workers: the run directory (summary, events, model,
held-out metrics) and the objective.  The same comparison for both data sets, both batch
settings and 2 or 4 workers runs in-process in
tests/test_models_inprocess.py::test_kmeans_bsp_matches_sklearn.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.datasets import make_blobs

from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi

WORKERS = 4


def test_kmeans_bsp_matches_sklearn_with_held_out_data(tmp_path):
    x, _ = make_blobs(30_000, n_features=8, centers=6, cluster_std=2.0, random_state=3)
    x_test, _ = make_blobs(3_000, n_features=8, centers=6, cluster_std=2.0, random_state=3)
    k = 6
    c0 = x[np.random.default_rng(0).choice(len(x), k, replace=False)]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x_test.npy", x_test)
    np.save(tmp_path / "c0.npy", c0)
    ref = SKKMeans(k, init=c0, n_init=1, algorithm="lloyd", tol=0, max_iter=300).fit(x)
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans",
                    params={"n_clusters": k, "init": "c0.npy"},
                    data={"path": "x.npy"}, test_data={"path": "x_test.npy"},
                    workers=WORKERS, sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": 300, "tolerance": 1e-6},
                    output={"progress": "none"})
    out = tmp_path / "run"
    mpirun(job, WORKERS, out)
    s = summary(out)
    assert s["workers"] == WORKERS and s["algorithm"] == "kmeans"
    assert s["final_objective"] == pytest.approx(ref.inertia_, rel=5e-3)
    ev = events(out)
    assert len(ev) == s["iterations"]
    assert all(len(e["workers"]["points"]) == WORKERS for e in ev)
    # Full batch: every worker processes its whole shard every iteration.
    assert sum(ev[0]["workers"]["points"]) == s["n_points"]
    model = np.load(out / "model.npz")
    assert model["centers"].shape[0] == k
    # The held-out set is evaluated with the final centroids, close to scikit-learn's.
    assert s["test"]["n_points"] == len(x_test)
    assert s["test"]["objective_per_point"] == pytest.approx(
        -ref.score(x_test) / len(x_test), rel=1e-2)
