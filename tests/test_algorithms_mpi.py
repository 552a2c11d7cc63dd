"""The built-in algorithms end to end under real mpirun (2 workers), against references.

* every algorithm converges under BSP: full batch, automatic batch and a fixed mini-batch;
* GMM's negative log-likelihood matches scikit-learn's diagonal GaussianMixture from the same
  initialization, NMF's Frobenius error matches scikit-learn's NMF at the same rank, FCM's
  objective matches a plain NumPy fuzzy c-means from the same centres, logistic regression
  reaches the optimum of scikit-learn's LogisticRegression and reports its held-out accuracy,
  the CNN learns a tiny image set well above chance;
* K-means, GMM and logistic regression under FSP and ElasticBSP (when those models are
  installed) reach the objective BSP reaches, within a few percent.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.datasets import make_blobs
from sklearn.decomposition import NMF as SKNMF
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SKLogisticRegression
from sklearn.mixture import GaussianMixture as SKGaussianMixture

from flegel import sync as sync_models
from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi

WORKERS = 2
STOP = {"max_iterations": 1000, "tolerance": 1e-7}
#: Sync models beyond BSP that must reach BSP's objective; skipped until they are installed.
OTHER_MODELS = ("fsp", "elastic")


def _run(tmp_path, algorithm, params, data, sync, *, stop=None, test_data=None,
         timeout=120) -> dict:
    doc = {"algorithm": algorithm, "params": params, "data": data, "workers": WORKERS,
           "sync": sync, "stop": stop or STOP, "output": {"progress": "none"}}
    if test_data is not None:
        doc["test_data"] = test_data
    job = write_job(tmp_path / "job.yaml", **doc)
    out = tmp_path / "run"
    mpirun(job, WORKERS, out, timeout=timeout)
    s = summary(out)
    assert s["algorithm"] == algorithm and s["workers"] == WORKERS
    assert np.isfinite(s["final_objective"])
    ev = events(out)
    assert s["iterations"] >= 1 and len(ev) >= 1
    if sync["model"] == "bsp":
        assert len(ev) == s["iterations"]  # one event per barrier
    if sync.get("batch") == "full":
        # Full batch: every worker processes its whole shard every iteration.
        assert sum(ev[0]["workers"]["points"]) == s["n_points"]
    return s


def _require(model: str) -> None:
    if model not in sync_models.available():
        pytest.skip(f"sync model {model!r} is not installed yet")


# --------------------------------------------------------------------------- data sets
def _blobs(tmp_path, n=4000, d=5, k=4, std=1.5, seed=3):
    """Well-separated blobs in x.npy and k initial points (from the data) in init.npy."""
    x, _ = make_blobs(n, n_features=d, centers=k, cluster_std=std, center_box=(-12, 12),
                      random_state=seed)
    init = x[np.random.default_rng(seed).choice(n, k, replace=False)]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "init.npy", init)
    return x, init


def _classification(n, d=10, noise=0.3, seed=0):
    """Two classes split by a fixed hyperplane with margin noise (Bayes accuracy ~0.9)."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(123).standard_normal(d)
    w /= np.linalg.norm(w)
    x = rng.standard_normal((n, d))
    y = (x @ w + 0.5 + noise * rng.standard_normal(n) > 0).astype(np.int64)
    return x, y


def _logreg_files(tmp_path, n_train=4000, n_test=2000):
    x, y = _classification(n_train + n_test)
    np.savez(tmp_path / "train.npz", X=x[:n_train], y=y[:n_train])
    np.savez(tmp_path / "test.npz", X=x[n_train:], y=y[n_train:])
    return x[:n_train], y[:n_train]


LOGREG = {"learning_rate": 2.0, "alpha": 1e-3}


def _logreg_optimum(x, y, alpha):
    """Σ_i logloss_i + n α/2 ‖w‖² at scikit-learn's optimum (C = 1 / (α n))."""
    n = len(x)
    ref = SKLogisticRegression(C=1.0 / (alpha * n), tol=1e-10, max_iter=10_000).fit(x, y)
    z = x @ ref.coef_[0] + ref.intercept_[0]
    logloss = np.logaddexp(0.0, z) - y * z
    return float(logloss.sum() + 0.5 * n * alpha * ref.coef_[0] @ ref.coef_[0])


def _gmm_reference(x, means, reg_covar=1e-6):
    """scikit-learn's diagonal GMM from flegel's initialization for ``init: means.npy``:
    uniform weights and, for every component, the variance of the data sample (here all of
    the data) plus ``reg_covar``."""
    k = len(means)
    precisions = np.repeat(1.0 / (x.var(axis=0) + reg_covar)[None], k, axis=0)
    ref = SKGaussianMixture(k, covariance_type="diag", reg_covar=reg_covar,
                            weights_init=np.full(k, 1.0 / k), means_init=means,
                            precisions_init=precisions, tol=1e-10, max_iter=2000).fit(x)
    return -ref.score(x) * len(x)


def _fcm_reference(x, centers, m=2.0, iterations=500):
    """Bezdek's fuzzy c-means iteration in plain NumPy; returns the final objective."""
    c = centers.copy()
    for _ in range(iterations):
        d2 = np.maximum(((x[:, None, :] - c[None]) ** 2).sum(2), 1e-300)
        inv = d2 ** (-1.0 / (m - 1.0))
        u = inv / inv.sum(1, keepdims=True)
        um = u ** m
        c_new = (um.T @ x) / um.sum(0)[:, None]
        if np.abs(c_new - c).max() < 1e-12:
            c = c_new
            break
        c = c_new
    d2 = np.maximum(((x[:, None, :] - c[None]) ** 2).sum(2), 1e-300)
    # With optimal memberships a point's loss is (Σ_k d²_k^(-1/(m-1)))^-(m-1).
    return float(((d2 ** (-1.0 / (m - 1.0))).sum(1) ** (-(m - 1.0))).sum())


# --------------------------------------------------------------------------- BSP
#: Full batch, the automatic batch (which on data this small is often a whole shard), and a
#: fixed mini-batch of a quarter of each shard, so that the incremental path is always run.
BATCHES = ["full", "auto", "quarter"]


def _bsp(batch: str, n_points: int) -> dict:
    if batch == "quarter":
        return {"model": "bsp", "batch": max(1, n_points // WORKERS // 4)}
    return {"model": "bsp", "batch": batch}


@pytest.mark.parametrize("batch", BATCHES)
def test_gmm_bsp_matches_sklearn(tmp_path, batch):
    x, means = _blobs(tmp_path)
    np.save(tmp_path / "means.npy", means)
    ref = _gmm_reference(x, means)
    s = _run(tmp_path, "gmm", {"n_components": len(means), "covariance_type": "diag",
                               "init": "means.npy"},
             {"path": "x.npy"}, _bsp(batch, len(x)))
    assert s["converged"], s["stop_reason"]
    assert s["objective_name"] == "negative log-likelihood"
    assert s["final_objective"] == pytest.approx(ref, rel=5e-3)


@pytest.mark.parametrize("batch", BATCHES)
def test_fcm_bsp_matches_numpy_fcm(tmp_path, batch):
    x, centers = _blobs(tmp_path, n=3000, k=4, std=2.0)
    ref = _fcm_reference(x, centers)
    s = _run(tmp_path, "fcm", {"n_clusters": len(centers), "m": 2.0, "init": "init.npy"},
             {"path": "x.npy"}, _bsp(batch, len(x)))
    assert s["converged"], s["stop_reason"]
    assert s["final_objective"] == pytest.approx(ref, rel=5e-3)


@pytest.mark.parametrize("batch", BATCHES)
def test_logreg_bsp_reaches_optimum_and_test_accuracy(tmp_path, batch):
    x, y = _logreg_files(tmp_path)
    ref = _logreg_optimum(x, y, LOGREG["alpha"])
    s = _run(tmp_path, "logreg", LOGREG, {"path": "train.npz"},
             _bsp(batch, len(x)), test_data={"path": "test.npz"})
    assert s["converged"], s["stop_reason"]
    assert s["final_objective"] == pytest.approx(ref, rel=1e-2)
    test = s["test"]
    assert test["n_points"] == 2000
    assert test["accuracy"] > 0.8
    assert 0 < test["objective_per_point"] < 0.5


def _nonnegative(n=600, d=40, rank=5, noise=0.1, seed=4):
    rng = np.random.default_rng(seed)
    x = rng.random((n, rank)) @ rng.random((rank, d)) + noise * rng.standard_normal((n, d))
    return np.maximum(x, 0.0)


@pytest.mark.parametrize("batch", BATCHES)
def test_nmf_bsp_matches_sklearn(tmp_path, batch):
    x = _nonnegative()
    np.save(tmp_path / "x.npy", x)
    rank = 5
    with warnings.catch_warnings():  # scikit-learn may stop at max_iter on this tolerance
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = SKNMF(rank, init="nndsvda", solver="cd", tol=1e-8, max_iter=5000).fit(x)
    s = _run(tmp_path, "nmf", {"n_components": rank}, {"path": "x.npy"},
             _bsp(batch, len(x)), stop={"max_iterations": 1000, "tolerance": 1e-6})
    # The objective is the squared Frobenius error; scikit-learn reports its square root.
    assert np.sqrt(s["final_objective"]) == pytest.approx(ref.reconstruction_err_, rel=2e-2)
    noise_floor = 0.1 * np.sqrt(x.size)
    assert np.sqrt(s["final_objective"]) < 1.2 * noise_floor


def _images(tmp_path, n_train=600, n_test=300):
    """A tiny split of flegel's synthetic digit-like images (one seed: the same classes)."""
    from flegel.data.synthetic import SyntheticSpec, generate_rows

    x, y = generate_rows(SyntheticSpec("images", n_train + n_test, 784, seed=5),
                         range(n_train + n_test))
    np.savez(tmp_path / "train.npz", X=x[:n_train], y=y[:n_train])
    np.savez(tmp_path / "test.npz", X=x[n_train:], y=y[n_train:])
    return n_train


@pytest.mark.parametrize("batch", BATCHES)
def test_cnn_bsp_learns_tiny_images(tmp_path, batch):
    n = _images(tmp_path)
    params = {"n_filters": [4, 8], "learning_rate": 0.1, "momentum": 0.5, "device": "cpu"}
    s = _run(tmp_path, "cnn", params, {"path": "train.npz"}, _bsp(batch, n),
             stop={"max_iterations": 300, "tolerance": None, "target_objective": 0.1 * n},
             test_data={"path": "test.npz"})
    assert s["final_objective"] < 0.3 * n  # chance: n log(10) = 2.3 n
    assert s["test"]["n_points"] == 300
    assert s["test"]["accuracy"] > 0.6  # chance: 0.1


# --------------------------------------------------------------------------- FSP, ElasticBSP
def _kmeans_case(tmp_path):
    x, c0 = _blobs(tmp_path, n=6000, d=6, k=5)
    ref = SKKMeans(len(c0), init=c0, n_init=1, algorithm="lloyd", tol=0, max_iter=300).fit(x)
    return "kmeans", {"n_clusters": len(c0), "init": "init.npy"}, {"path": "x.npy"}, \
        ref.inertia_, None


def _gmm_case(tmp_path):
    x, means = _blobs(tmp_path)
    np.save(tmp_path / "means.npy", means)
    return "gmm", {"n_components": len(means), "init": "means.npy"}, {"path": "x.npy"}, \
        _gmm_reference(x, means), None


def _logreg_case(tmp_path):
    x, y = _logreg_files(tmp_path)
    return "logreg", LOGREG, {"path": "train.npz"}, _logreg_optimum(x, y, LOGREG["alpha"]), \
        {"path": "test.npz"}


CASES = {"kmeans": _kmeans_case, "gmm": _gmm_case, "logreg": _logreg_case}


@pytest.mark.parametrize("algorithm", list(CASES))
@pytest.mark.parametrize("model", OTHER_MODELS)
def test_other_models_reach_bsp_objective(tmp_path, model, algorithm):
    """FSP and ElasticBSP reach the objective of full-batch BSP (the scikit-learn
    reference, which BSP matches above and in test_kmeans_mpi) within a few percent."""
    _require(model)
    name, params, data, ref, test_data = CASES[algorithm](tmp_path)
    s = _run(tmp_path, name, params, data, {"model": model},
             stop={"max_iterations": 5000, "tolerance": 1e-6},
             test_data=test_data)
    assert s["sync"]["model"] == model
    assert s["final_objective"] == pytest.approx(ref, rel=3e-2)
    if test_data is not None:
        assert s["test"]["accuracy"] > 0.8
