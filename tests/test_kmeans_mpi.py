"""K-means end to end under real mpirun, against scikit-learn from the same centroids."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.datasets import load_digits, make_blobs

from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi


def _dataset(tmp_path, name):
    if name == "blobs":
        x, _ = make_blobs(30_000, n_features=8, centers=6, cluster_std=2.0, random_state=3)
        k = 6
    else:  # a real data set that ships with scikit-learn
        x = load_digits().data.astype(np.float64)
        k = 10
    rng = np.random.default_rng(0)
    c0 = x[rng.choice(len(x), k, replace=False)]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "c0.npy", c0)
    ref = SKKMeans(k, init=c0, n_init=1, algorithm="lloyd", tol=0, max_iter=300).fit(x)
    return k, ref.inertia_


@pytest.mark.parametrize("data", ["blobs", "digits"])
@pytest.mark.parametrize("batch", ["full", "auto"])
@pytest.mark.parametrize("workers", [2, 4])
def test_kmeans_bsp_matches_sklearn(tmp_path, data, batch, workers):
    k, ref = _dataset(tmp_path, data)
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans",
                    params={"n_clusters": k, "init": "c0.npy"},
                    data={"path": "x.npy"}, workers=workers,
                    sync={"model": "bsp", "batch": batch},
                    stop={"max_iterations": 300, "tolerance": 1e-6},
                    output={"progress": "none"})
    out = tmp_path / "run"
    mpirun(job, workers, out)
    s = summary(out)
    assert s["workers"] == workers and s["algorithm"] == "kmeans"
    assert s["final_objective"] == pytest.approx(ref, rel=5e-3)
    ev = events(out)
    assert len(ev) == s["iterations"]
    assert all(len(e["workers"]["points"]) == workers for e in ev)
    if batch == "full":
        # Full batch: every worker processes its whole shard every iteration.
        assert sum(ev[0]["workers"]["points"]) == s["n_points"]
    model = np.load(out / "model.npz")
    assert model["centers"].shape[0] == k
