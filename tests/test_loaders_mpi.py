"""File loaders under real mpirun: 3 workers read a UCI-style CSV.gz (label first) and a
LIBSVM file, and together they cover every row exactly once.

The row count alone cannot tell a dropped row plus a duplicated one from a correct split, so
the full-batch K-means objective is also compared with scikit-learn's Lloyd iteration on the
whole file from the same centroids: it sums every row's distance exactly once.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.datasets import make_blobs

from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi

WORKERS = 3
N_ROWS = 3001  # not a multiple of the worker count: shards differ by a row
K = 4


def _data(seed: int, d: int):
    x, y = make_blobs(N_ROWS, n_features=d, centers=K, cluster_std=1.5, center_box=(-8, 8),
                      random_state=seed)
    return np.round(x, 6), y  # what the text file will hold, exactly


def _write_csv_gz(path, x, y) -> None:
    """HIGGS-style: no header, the class label in the first column."""
    with gzip.open(path, "wt") as f:
        for label, row in zip(y, x, strict=True):
            f.write(f"{float(label):.1f}," + ",".join(f"{v:.6f}" for v in row) + "\n")


def _write_libsvm(path, x, y) -> None:
    """1-based ``index:value`` pairs, zeros left out, labels -1/+1 as in LIBSVM data sets."""
    with open(path, "w") as f:
        for label, row in zip(y, x, strict=True):
            pairs = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row) if v != 0.0)
            f.write(f"{'+1' if label % 2 else '-1'} {pairs}\n")


def _check_covers_every_row(tmp_path, x, data_spec):
    c0 = x[np.random.default_rng(0).choice(len(x), K, replace=False)]
    np.save(tmp_path / "c0.npy", c0)
    ref = SKKMeans(K, init=c0, n_init=1, algorithm="lloyd", tol=0, max_iter=300).fit(x)
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans",
                    params={"n_clusters": K, "init": "c0.npy"}, data=data_spec,
                    workers=WORKERS, sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": 300, "tolerance": 1e-8},
                    output={"progress": "none"})
    out = tmp_path / "run"
    mpirun(job, WORKERS, out)
    s = summary(out)
    assert s["workers"] == WORKERS
    assert s["n_points"] == N_ROWS
    assert s["n_features"] == x.shape[1]  # the label column is not a feature
    shards = [w["n_points"] for w in s["per_worker"]]
    assert sum(shards) == N_ROWS
    assert max(shards) - min(shards) <= 1  # round-robin (strided) deal
    # Full batch: an iteration visits every row of every shard once.
    first = events(out)[0]["workers"]["points"]
    assert sorted(first) == sorted(shards)
    assert s["final_objective"] == pytest.approx(ref.inertia_, rel=1e-6)


def test_csv_gz_label_first_column_covers_every_row(tmp_path):
    x, y = _data(seed=7, d=6)
    _write_csv_gz(tmp_path / "uci.csv.gz", x, y)
    _check_covers_every_row(tmp_path, x, {"path": "uci.csv.gz", "label_column": 0})


def test_libsvm_covers_every_row(tmp_path):
    x, y = _data(seed=8, d=5)
    x[np.abs(x) < 0.5] = 0.0  # a sparse-looking file: some pairs are left out
    _write_libsvm(tmp_path / "data.libsvm", x, y)
    _check_covers_every_row(tmp_path, x, {"path": "data.libsvm"})
