"""Built-in algorithms (GMM, FCM, logistic regression, NMF, CNN) against scikit-learn / NumPy
references, run in-process with :func:`flegel.local.fit_local`."""

from __future__ import annotations

import copy
import inspect
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_iris, make_blobs, make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from flegel import Algorithm, Block, PointState
from flegel.algorithms.cnn import CNN
from flegel.algorithms.fcm import FuzzyCMeans
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.kmeans import KMeans
from flegel.algorithms.logreg import LogisticRegression
from flegel.algorithms.nmf import NMF
from flegel.device import gpu_unavailable
from flegel.local import fit_local, make_info
from flegel.validation import ParameterError
from tests.fakes import cupy_stand_in


# ---------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    x, _ = make_blobs(4000, 6, centers=4, cluster_std=[1.0, 2.0, 0.5, 1.5], random_state=0)
    return x


@pytest.fixture(scope="module")
def binary_data() -> tuple[np.ndarray, np.ndarray]:
    x, y = make_classification(2000, 12, n_informative=6, random_state=0)
    return StandardScaler().fit_transform(x), y


@pytest.fixture(scope="module")
def nonneg_matrix() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.random((600, 6)) @ rng.random((6, 50)) + 0.1 * rng.random((600, 50))


def _assert_same_aggregate(a: dict, b: dict, rtol: float = 1e-9, atol: float = 1e-9) -> None:
    assert set(a) == set(b)
    for key in a:
        np.testing.assert_allclose(np.asarray(a[key], dtype=float),
                                   np.asarray(b[key], dtype=float), rtol=rtol, atol=atol,
                                   err_msg=key)


def _check_point_path(alg, x: np.ndarray, y: np.ndarray | None, *, rtol: float = 1e-9,
                      atol: float = 1e-9) -> None:
    """update_data_point over a tiny block == update_block on it (two passes, so the second
    pass has non-trivial old state), aggregators and states alike."""
    theta = alg.init_parameter(make_info(x, y))
    n, d = x.shape
    sa = alg.init_state(n, d)
    sb = {k: v.copy() for k, v in sa.items()}
    for t in (1, 2):
        agg_block = alg.update_block(Block.from_arrays(x, y, sa), theta, t)
        agg_point = alg.zero_aggregator(theta)
        for i in range(n):
            point = x[i] if y is None else (x[i], y[i])
            agg_point = alg.aggregate(agg_point,
                                      alg.update_data_point(point, PointState(sb, i), theta, t))
        _assert_same_aggregate(agg_block, agg_point, rtol, atol)
        for key in sa:
            np.testing.assert_allclose(sa[key], sb[key], rtol=rtol, atol=atol, err_msg=key)
        theta = alg.update_parameter(agg_block, theta)


def _non_increasing(values, rel: float = 1e-9) -> bool:
    v = np.asarray(values, dtype=float)
    return bool(np.all(np.diff(v) <= rel * np.abs(v[:-1]) + 1e-12))


# ---------------------------------------------------------------------------- GMM
@pytest.mark.parametrize("covariance_type", ["diag", "full"])
def test_gmm_matches_sklearn(blobs, covariance_type):
    from sklearn.mixture import GaussianMixture as SkGMM

    alg = GaussianMixture(n_components=4, covariance_type=covariance_type)
    theta0 = alg.init_parameter(make_info(blobs, None))
    res = fit_local(alg, blobs, max_iterations=40, tolerance=None, block_size=1000)
    cov0 = alg.covariances(theta0)
    precisions = 1.0 / cov0 if covariance_type == "diag" else np.linalg.inv(cov0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = SkGMM(4, covariance_type=covariance_type, weights_init=theta0["weights"],
                   means_init=theta0["means"], precisions_init=precisions, reg_covar=1e-6,
                   max_iter=40, tol=0.0).fit(blobs)
    sk_nll = -sk.score(blobs) * len(blobs)
    assert res.objective_ == pytest.approx(sk_nll, rel=5e-3)
    # the online objective of the last full pass is the NLL of the previous θ: close, not above
    assert _non_increasing(res.history_, rel=1e-9)
    np.testing.assert_allclose(res.theta_["means"], sk.means_, atol=1e-6)
    out = alg.finalize(res.theta_)
    np.testing.assert_allclose(out["covariances"], sk.covariances_, rtol=1e-5, atol=1e-8)


def test_gmm_minibatch_reaches_full_batch(blobs):
    alg = GaussianMixture(n_components=4)
    full = fit_local(alg, blobs, max_iterations=60, tolerance=1e-9)
    mini = fit_local(alg, blobs, batch=500, block_size=250, max_iterations=200, tolerance=None)
    assert mini.objective_ == pytest.approx(full.objective_, rel=1e-3)


def test_gmm_init_file_and_validate(tmp_path, blobs):
    means = blobs[:3].copy()
    np.save(tmp_path / "means.npy", means)
    np.savez(tmp_path / "init.npz", means=means, weights=np.array([0.2, 0.3, 0.5]),
             covariances=np.ones((3, 6)))
    for name in ("means.npy", "init.npz"):
        alg = GaussianMixture(n_components=3, init=name)
        alg.validate(tmp_path)
        theta = alg.init_parameter(make_info(blobs, None, base_dir=tmp_path))
        np.testing.assert_array_equal(theta["means"], means)
    assert theta["weights"] == pytest.approx([0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="does not exist"):
        GaussianMixture(n_components=3, init="missing.npy").validate(tmp_path)
    with pytest.raises(ValueError, match="shape"):
        GaussianMixture(n_components=4, init="means.npy").validate(tmp_path)
    with pytest.raises(ValueError, match="npy"):
        GaussianMixture(n_components=3, init="means.txt").validate(tmp_path)


def test_gmm_point_path(blobs):
    _check_point_path(GaussianMixture(n_components=3), blobs[:9], None)
    _check_point_path(GaussianMixture(n_components=3, covariance_type="full"), blobs[:9], None)


# ---------------------------------------------------------------------------- FCM
def _numpy_fcm(x: np.ndarray, centers: np.ndarray, m: float, n_iter: int):
    """Textbook FCM (Bezdek): alternate memberships and centres; returns centres and J per
    iteration (J of the memberships computed from the previous centres)."""
    c = centers.copy()
    objectives = []
    for _ in range(n_iter):
        d2 = np.maximum(((x[:, None, :] - c[None, :, :]) ** 2).sum(axis=2), 1e-100)
        u = d2 ** (-1.0 / (m - 1.0))
        u /= u.sum(axis=1, keepdims=True)
        um = u ** m
        objectives.append(float((um * d2).sum()))
        c = (um.T @ x) / um.sum(axis=0)[:, None]
    return c, objectives


@pytest.mark.parametrize("m", [2.0, 1.5])
def test_fcm_matches_numpy_and_decreases(blobs, m):
    alg = FuzzyCMeans(n_clusters=4, m=m)
    theta0 = alg.init_parameter(make_info(blobs, None))
    res = fit_local(alg, blobs, max_iterations=25, tolerance=None, block_size=700)
    centers, objectives = _numpy_fcm(blobs, theta0["centers"], m, 25)
    np.testing.assert_allclose(res.theta_["centers"], centers, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.history_, objectives, rtol=1e-8)
    assert _non_increasing(res.history_)
    # evaluate(θ) is J with optimal memberships: at most the last online objective
    assert res.objective_ <= res.history_[-1] * (1 + 1e-12)


def test_fcm_point_path(blobs):
    _check_point_path(FuzzyCMeans(n_clusters=3, m=1.7), blobs[:8], None)


# ---------------------------------------------------------------------------- logistic regression
def test_logreg_binary_matches_sklearn(binary_data):
    from sklearn.linear_model import LogisticRegression as SkLR

    x, y = binary_data
    c = 1.0
    sk = SkLR(C=c, tol=1e-10, max_iter=1000).fit(x, y)
    alg = LogisticRegression(learning_rate=2.0, alpha=1.0 / (c * len(x)))
    res = fit_local(alg, x, y, max_iterations=150, tolerance=None)
    sk_theta = {"coef": sk.coef_[0], "intercept": sk.intercept_, "step": np.zeros(1)}
    ours, ref = alg.log_loss(res.theta_, x, y), alg.log_loss(sk_theta, x, y)
    assert ours == pytest.approx(ref, rel=5e-3)
    # the penalized objective: ours minimizes the same function (sklearn's objective / C)
    assert res.objective_ <= alg.evaluate(sk_theta, Block.from_arrays(x, y)) * (1 + 1e-3)
    assert alg.evaluate_accuracy(res.theta_, x, y) == pytest.approx(sk.score(x, y), abs=0.01)


def test_logreg_multinomial_iris():
    from sklearn.linear_model import LogisticRegression as SkLR

    x, y = load_iris(return_X_y=True)
    x = StandardScaler().fit_transform(x)
    sk = SkLR(C=1.0, tol=1e-10, max_iter=2000).fit(x, y)
    alg = LogisticRegression(learning_rate=1.0, alpha=1.0 / len(x))
    res = fit_local(alg, x, y, max_iterations=800, tolerance=None)
    assert res.theta_["coef"].shape == (4, 3)
    sk_theta = {"coef": sk.coef_.T, "intercept": sk.intercept_, "step": np.zeros(1)}
    assert alg.log_loss(res.theta_, x, y) == pytest.approx(alg.log_loss(sk_theta, x, y),
                                                           rel=2e-2)
    assert alg.evaluate_accuracy(res.theta_, x, y) >= 0.95
    # mini-batch with a decaying step also trains
    mini = LogisticRegression(learning_rate=0.5, schedule="invscaling", alpha=1e-3)
    res = fit_local(mini, x, y, batch=16, max_iterations=300, tolerance=None)
    assert mini.evaluate_accuracy(res.theta_, x, y) >= 0.9


def test_logreg_point_path(binary_data):
    x, y = binary_data
    _check_point_path(LogisticRegression(alpha=0.01), x[:7], y[:7])
    xi, yi = load_iris(return_X_y=True)
    _check_point_path(LogisticRegression(fit_intercept=False), xi[::30], yi[::30])


def test_logreg_rejects_bad_labels(binary_data):
    x, y = binary_data
    with pytest.raises(ValueError, match="labels"):
        LogisticRegression().init_parameter(make_info(x, np.where(y == 0, -1, 1)))


# ---------------------------------------------------------------------------- NMF
def test_nmf_matches_sklearn(nonneg_matrix):
    from sklearn.decomposition import NMF as SkNMF  # noqa: N811

    x = nonneg_matrix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = SkNMF(n_components=6, max_iter=1000, tol=1e-6, random_state=0).fit(x)
    alg = NMF(n_components=6)
    res = fit_local(alg, x, max_iterations=200, tolerance=None, block_size=256)
    assert np.sqrt(res.objective_) == pytest.approx(sk.reconstruction_err_, rel=2e-2)
    assert _non_increasing(res.history_)
    assert np.all(res.theta_["components"] >= 0)
    # the statistics in θ describe the current W of every row
    w = np.zeros((len(x), 6))
    theta = alg.init_parameter(make_info(x, None))
    state = alg.init_state(len(x), x.shape[1])
    for _ in range(3):
        agg = alg.update_block(Block.from_arrays(x, None, state), theta, 1)
        theta = alg.update_parameter(agg, theta)
    w = state["w"]
    np.testing.assert_allclose(theta["wtw"], w.T @ w, rtol=1e-9)
    np.testing.assert_allclose(theta["wtx"], w.T @ x, rtol=1e-9)


def test_nmf_mu_and_minibatch(nonneg_matrix):
    x = nonneg_matrix
    mu = NMF(n_components=6, solver="mu", init="random")
    res = fit_local(mu, x, max_iterations=100, tolerance=None)
    assert _non_increasing(res.history_)
    full = fit_local(NMF(n_components=6), x, max_iterations=100, tolerance=None)
    mini = fit_local(NMF(n_components=6), x, batch=150, max_iterations=400, tolerance=None)
    assert mini.objective_ <= full.objective_ * 1.05


def test_nmf_point_path(nonneg_matrix):
    _check_point_path(NMF(n_components=3), nonneg_matrix[:6], None)
    _check_point_path(NMF(n_components=3, solver="mu"), nonneg_matrix[:6], None)


def test_nmf_hals_equals_the_per_row_coordinate_steps(nonneg_matrix):
    """The NumPy HALS, every row at once, takes each row's exact coordinate steps in order."""
    from flegel.algorithms.nmf import _hals_rows

    x = nonneg_matrix[:40]
    rng = np.random.default_rng(2)
    H = rng.random((4, x.shape[1]))
    G, XHt = H @ H.T, x @ H.T
    W = rng.random((len(x), 4))
    ref = W.copy()
    for _ in range(3):
        for i in range(len(x)):
            for k in range(4):
                v = ref[i, k] + (XHt[i, k] - ref[i] @ G[:, k]) / G[k, k]
                ref[i, k] = max(v, 0.0)
    Wt = W.T.copy()
    _hals_rows(Wt, XHt.T.copy(), G, 3)
    np.testing.assert_allclose(Wt.T, ref, rtol=1e-10, atol=1e-12)


def test_nmf_compiled_kernel_takes_the_array_kernels_steps():
    """The numba HALS kernel (sweeps, loss, ΔW and the write-back in one pass over tiles) and
    the NumPy one give the same iterates up to rounding: rows on their first visit mixed with
    revisited ones in one block, a block longer than one chunk and a tile, a component whose H
    row starts at zero (its coordinate left alone until the M-step revives it), 30 passes."""
    rng = np.random.default_rng(5)
    x = rng.random((700, 4)) @ rng.random((4, 30)) + 0.01 * rng.random((700, 30))
    runs = {}
    for kernel in ("array", "compiled"):
        alg = NMF(n_components=4, kernel=kernel)
        theta = alg.init_parameter(make_info(x, None, seed=0))
        theta["components"][2] = 0.0
        state = alg.init_state(len(x), x.shape[1])
        objectives = []
        for t in range(30):
            blocks = [slice(0, 300), slice(0, 700)] if t == 0 else [slice(0, 700)]
            agg = alg.zero_aggregator(theta)
            for sl in blocks:
                block = Block(x[sl], None, {k: v[sl] for k, v in state.items()},
                              np.zeros(sl.stop - sl.start, dtype=bool))
                agg = alg.aggregate(agg, alg.update_block(block, theta, t + 1))
            theta = alg.update_parameter(agg, theta)
            objectives.append(agg["objective"])
        runs[kernel] = theta, state, objectives
    (th_a, st_a, ob_a), (th_c, st_c, ob_c) = runs["array"], runs["compiled"]
    for key in ("components", "wtw", "wtx"):
        np.testing.assert_allclose(th_c[key], th_a[key], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(st_c["w"], st_a["w"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(st_c["loss"], st_a["loss"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ob_c, ob_a, rtol=1e-9, atol=1e-6)
    # the statistics describe the rows' W, as the array kernel's do
    np.testing.assert_allclose(th_c["wtw"], st_c["w"].T @ st_c["w"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(th_c["wtx"], st_c["w"].T @ x, rtol=1e-9, atol=1e-9)
    _check_point_path(NMF(n_components=3, kernel="compiled"), x[:6], None)


def test_nmf_plans_its_compiled_kernel_by_the_jobs_work():
    """kernel: auto runs numba from the first block when max_iterations passes of n·d·r
    units pay its start-up, else NumPy (flegel.device); solver: mu has no compiled kernel."""
    assert not NMF(10).plan_kernels(20_000, 200, 10)
    assert NMF(10).plan_kernels(20_000, 200, 100)
    assert not NMF(10).plan_kernels(20_000, 200, None)
    assert NMF(10, kernel="compiled").plan_kernels(20, 2, 1)
    assert not NMF(10, kernel="array").plan_kernels(20_000, 200, 10_000)
    assert not NMF(10, solver="mu").plan_kernels(20_000, 200, 10_000)
    assert not NMF(10, solver="mu", kernel="compiled").plan_kernels(20_000, 200, 10_000)


def test_nmf_top_singular_matches_the_exact_svd():
    from flegel.algorithms.nmf import _top_singular

    rng = np.random.default_rng(3)
    a = rng.random((300, 6)) @ rng.random((6, 40)) + 0.01 * rng.random((300, 40))
    u, s, vt = _top_singular(a, 4, seed=0)
    u_ref, s_ref, vt_ref = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(s, s_ref[:4], rtol=1e-8)
    np.testing.assert_allclose(np.abs(u.T @ u_ref[:, :4]), np.eye(4), atol=1e-6)
    np.testing.assert_allclose(np.abs(vt @ vt_ref[:4].T), np.eye(4), atol=1e-6)


def test_nmf_starts_neither_numba_nor_scikit_learn():
    """A small NMF fit pays no JIT and no scikit-learn import (issue 23: 3.1 s of a 30 x 3
    fit's start-up went there)."""
    import subprocess

    code = ("import sys, numpy as np\n"
            "from flegel.algorithms.nmf import NMF\n"
            "from flegel.local import fit_local\n"
            "x = np.abs(np.random.default_rng(0).normal(size=(30, 3)))\n"
            "fit_local(NMF(n_components=2), x, max_iterations=20)\n"
            "print(sorted(m for m in ('numba', 'sklearn') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------- CNN
@pytest.fixture(scope="module")
def digits():
    x, y = load_digits(return_X_y=True)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def test_cnn_digits_accuracy(digits):
    xtr, xte, ytr, yte = digits
    # 8×8 digits: the paper's 5×5 kernels with padding 2 (8×8 → pool 4×4 → pool 2×2)
    alg = CNN(image_shape=(8, 8), kernel_size=5, padding=2, input_scale=1 / 16,
              learning_rate=0.05, momentum=0.9)
    batch = 32
    res = fit_local(alg, xtr, ytr, batch=batch, max_iterations=20 * len(xtr) // batch,
                    tolerance=None)
    assert alg.evaluate_accuracy(res.theta_, xte, yte) >= 0.95


def test_cnn_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    alg = CNN(image_shape=(9, 9), kernel_size=3, padding=1, pooling="avg", dtype="float64",
              alpha=0.01)
    x, y = rng.random((5, 81)), rng.integers(0, 3, 5)
    theta = alg.init_parameter(make_info(x, y))
    block = Block.from_arrays(x, y, alg.init_state(5, 81))
    agg = alg.update_block(block, theta, 1)
    for key in ("conv1_w", "conv2_w", "conv2_b", "dense_w"):
        for _ in range(3):
            idx = tuple(int(rng.integers(0, s)) for s in theta[key].shape)
            plus = {k: v.copy() for k, v in theta.items()}
            minus = {k: v.copy() for k, v in theta.items()}
            plus[key][idx] += 1e-6
            minus[key][idx] -= 1e-6
            numeric = (alg.evaluate(plus, block) - alg.evaluate(minus, block)) / 2e-6
            analytic = agg[f"grad_{key}"][idx] + 5 * alg.alpha * theta[key][idx] * (
                key.endswith("_w"))
            assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def test_cnn_point_path(digits):
    xtr, _, ytr, _ = digits
    _check_point_path(CNN(image_shape=(8, 8), kernel_size=3, padding=1, dtype="float64"),
                      xtr[:5], ytr[:5])
    _check_point_path(CNN(image_shape=(8, 8), kernel_size=3, padding=1), xtr[:5], ytr[:5],
                      rtol=1e-4, atol=1e-5)


def test_cnn_device_switch(monkeypatch, digits, no_gpu_cache, tmp_path):
    xtr, _, ytr, _ = digits
    kwargs = dict(image_shape=(8, 8), kernel_size=3, padding=1, dtype="float64")
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    monkeypatch.setenv("FLEGEL_DEVICE_NOTED", "1")  # the auto fallback's line: test_device
    with pytest.raises(ValueError, match=r"^CNN\(device='gpu'\): CuPy could not be imported"
                                         r".*flegel\[gpu\].*device='cpu'$"):
        CNN(device="gpu", **kwargs).validate(tmp_path)  # before any work, in one line
    assert CNN(device="auto", **kwargs).xp is np

    gpu_unavailable.cache_clear()
    monkeypatch.setitem(sys.modules, "cupy", cupy_stand_in(0))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        _ = CNN(device="gpu", **kwargs).xp

    gpu_unavailable.cache_clear()
    fake = cupy_stand_in(1)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    gpu, cpu = CNN(device="gpu", **kwargs), CNN(device="cpu", **kwargs)
    assert gpu.xp is fake
    theta = cpu.init_parameter(make_info(xtr[:20], ytr[:20]))
    a = gpu.update_block(Block.from_arrays(xtr[:20], ytr[:20], gpu.init_state(20, 64)),
                         theta, 1)
    b = cpu.update_block(Block.from_arrays(xtr[:20], ytr[:20], cpu.init_state(20, 64)),
                         theta, 1)
    _assert_same_aggregate(a, b, rtol=1e-12)
    assert all(type(v) is np.ndarray and v.dtype == np.float64
               for k, v in a.items() if k.startswith("grad_"))
    block = Block.from_arrays(xtr[:20], ytr[:20], cpu.init_state(20, 64))
    assert gpu.evaluate(theta, block) == pytest.approx(cpu.evaluate(theta, block), rel=1e-12)
    np.testing.assert_allclose(gpu.predict_proba(theta, xtr[:20]),
                               cpu.predict_proba(theta, xtr[:20]), rtol=1e-12)


@pytest.mark.gpu
def test_cnn_gpu_matches_cpu(digits, no_gpu_cache):
    pytest.importorskip("cupy")
    if gpu_unavailable() is not None:
        pytest.skip(gpu_unavailable() or "")
    xtr, _, ytr, _ = digits
    kwargs = dict(image_shape=(8, 8), kernel_size=5, padding=2, dtype="float64")
    gpu, cpu = CNN(device="gpu", **kwargs), CNN(device="cpu", **kwargs)
    theta = cpu.init_parameter(make_info(xtr, ytr))
    for _ in range(3):  # θ stays on the device across blocks, then changes
        a = gpu.update_block(Block.from_arrays(xtr, ytr, gpu.init_state(len(xtr), 64)),
                             theta, 1)
        b = cpu.update_block(Block.from_arrays(xtr, ytr, cpu.init_state(len(xtr), 64)),
                             theta, 1)
        _assert_same_aggregate(a, b, rtol=1e-8, atol=1e-8)
        theta = cpu.update_parameter(b, theta)


# ---------------------------------------------------------------------------- per-point only
def _iris():
    x, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(x)[::3], y[::3]


@pytest.mark.parametrize("factory, data", [
    (lambda: GaussianMixture(n_components=3), lambda: (make_blobs(60, 4, random_state=0)[0],
                                                       None)),
    (lambda: GaussianMixture(n_components=2, covariance_type="full"),
     lambda: (make_blobs(60, 3, random_state=1)[0], None)),
    (lambda: FuzzyCMeans(n_clusters=3, m=1.8), lambda: (make_blobs(60, 4, random_state=2)[0],
                                                        None)),
    (lambda: LogisticRegression(alpha=0.01, learning_rate=0.5), _iris),
    (lambda: NMF(n_components=3), lambda: (np.random.default_rng(3).random((60, 8)), None)),
    (lambda: CNN(image_shape=(8, 8), kernel_size=3, padding=1, dtype="float64",
                 momentum=0.5),
     lambda: (load_digits().data[:60], load_digits().target[:60])),
], ids=["gmm-diag", "gmm-full", "fcm", "logreg", "nmf", "cnn"])
def test_per_point_path_alone_fits_the_same(factory, data):
    """An instance whose update_block is the base class's loop over update_data_point (the
    per-point path only) trains exactly like the vectorized kernel, mini-batch included."""
    x, y = data()
    alg = factory()
    point_only = copy.copy(alg)
    point_only.__class__ = type("PointOnly", (type(alg),),
                                {"update_block": Algorithm.update_block})
    a = fit_local(alg, x, y, batch=25, block_size=10, max_iterations=5, tolerance=None)
    b = fit_local(point_only, x, y, batch=25, block_size=10, max_iterations=5, tolerance=None)
    assert set(a.theta_) == set(b.theta_)
    for key in a.theta_:
        np.testing.assert_allclose(a.theta_[key], b.theta_[key], rtol=1e-8, atol=1e-10,
                                   err_msg=key)
    np.testing.assert_allclose(a.history_, b.history_, rtol=1e-8, atol=1e-8)


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("factory, match", [
    (lambda: GaussianMixture(n_components=0), "n_components"),
    (lambda: GaussianMixture(covariance_type="spherical"), "covariance_type"),
    (lambda: GaussianMixture(reg_covar=-1.0), "reg_covar"),
    (lambda: GaussianMixture(init=3), "init"),
    (lambda: FuzzyCMeans(m=1.0), "m must"),
    (lambda: FuzzyCMeans(n_clusters=2.5), "n_clusters"),
    (lambda: LogisticRegression(learning_rate=0.0), "learning_rate"),
    (lambda: LogisticRegression(schedule="optimal"), "schedule"),
    (lambda: LogisticRegression(alpha=-1e-3), "alpha"),
    (lambda: LogisticRegression(fit_intercept="yes"), "fit_intercept"),
    (lambda: NMF(n_components=True), "n_components"),
    (lambda: NMF(solver="cd"), "solver"),
    (lambda: NMF(w_iter=0), "w_iter"),
    (lambda: NMF(kernel="numba"), "kernel"),
    (lambda: CNN(device="tpu"), "device"),
    (lambda: CNN(n_filters=(0,)), "n_filters"),
    (lambda: CNN(image_shape=(28,)), "image_shape"),
    (lambda: CNN(momentum=1.0), "momentum"),
    (lambda: CNN(padding=-1), "padding"),
])
def test_parameter_validation(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


def test_cnn_geometry_errors():
    x = np.zeros((4, 50))
    with pytest.raises(ValueError, match="square"):
        CNN().init_parameter(make_info(x, np.zeros(4, dtype=int)))
    with pytest.raises(ValueError, match="too small"):
        CNN(image_shape=(5, 10)).init_parameter(make_info(x, np.zeros(4, dtype=int)))


# ---------------------------------------------------------------------------- predictions
# Each algorithm's prediction methods against scikit-learn's with the same fitted parameters.
def test_kmeans_predict_transform_score_match_sklearn(blobs):
    from sklearn.cluster import KMeans as SkKMeans

    alg = KMeans(n_clusters=4, n_init=3)
    res = fit_local(alg, blobs, max_iterations=50)
    centers = res.theta_["centers"]
    sk = SkKMeans(4, init=centers, n_init=1, max_iter=1).fit(blobs)
    sk.cluster_centers_ = centers  # the same centres: only the prediction code differs
    theta = alg.finalize(res.theta_)
    np.testing.assert_array_equal(alg.predict(theta, blobs), sk.predict(blobs))
    np.testing.assert_allclose(alg.transform(theta, blobs), sk.transform(blobs), rtol=1e-9)
    assert alg.score(theta, blobs) == pytest.approx(sk.score(blobs), rel=1e-9)
    assert -alg.score(theta, blobs) == pytest.approx(res.objective_, rel=1e-9)


def test_kmeans_greedy_plusplus_is_as_good_as_sklearns(blobs):
    """The NumPy greedy k-means++ seeds as well as scikit-learn's (mean potential over
    seeds), with 2 + log K candidates per step; it is seeded and deterministic."""
    from sklearn.cluster import kmeans_plusplus

    from flegel.algorithms._common import kmeans_plusplus_sample, squared_distances

    x, _ = make_blobs(3000, 5, centers=12, cluster_std=1.5, random_state=4)

    def potential(c: np.ndarray) -> float:
        return float(squared_distances(x, c).min(axis=1).sum())

    ours = [potential(kmeans_plusplus_sample(x, 12, s)) for s in range(20)]
    theirs = [potential(kmeans_plusplus(x, 12, random_state=s)[0]) for s in range(20)]
    assert np.mean(ours) <= 1.15 * np.mean(theirs)
    np.testing.assert_array_equal(kmeans_plusplus_sample(x, 12, 3),
                                  kmeans_plusplus_sample(x, 12, 3))


def test_kmeans_n_init_keeps_the_best_restart():
    from flegel.algorithms.kmeans import KMeans, lloyd

    x, _ = make_blobs(2000, 4, centers=10, cluster_std=2.0, random_state=7)
    info = make_info(x, None, seed=5)
    best = KMeans(n_clusters=10, n_init=6).init_parameter(info)["centers"]
    singles = [lloyd(info.sample, KMeans(n_clusters=10, n_init=1).init_parameter(
        make_info(x, None, seed=5 + i))["centers"]) for i in range(6)]
    # the best of the six restarts (seeds 5..10), refined on the sample, starts training
    assert lloyd(info.sample, best)[1] == pytest.approx(min(f for _, f in singles), rel=1e-9)
    assert KMeans(n_clusters=10, n_init=1).init_parameter(info)["centers"].shape == (10, 4)


def test_gmm_predictions_match_sklearn(blobs):
    from sklearn.mixture import GaussianMixture as SkGMM

    for cov in ("diag", "full"):
        alg = GaussianMixture(n_components=3, covariance_type=cov)
        res = fit_local(alg, blobs, max_iterations=20, tolerance=None)
        theta = alg.finalize(res.theta_)
        sk = SkGMM(3, covariance_type=cov)
        sk.weights_, sk.means_ = theta["weights"], theta["means"]
        sk.covariances_, sk.precisions_cholesky_ = theta["covariances"], \
            theta["precisions_cholesky"]
        np.testing.assert_allclose(alg.score_samples(theta, blobs), sk.score_samples(blobs),
                                   rtol=1e-9)
        np.testing.assert_allclose(alg.predict_proba(theta, blobs), sk.predict_proba(blobs),
                                   atol=1e-9)
        np.testing.assert_array_equal(alg.predict(theta, blobs), sk.predict(blobs))
        assert -alg.score_samples(theta, blobs).sum() == pytest.approx(res.objective_,
                                                                       rel=1e-9)


def test_fcm_predict_is_the_nearest_centre(blobs):
    alg = FuzzyCMeans(n_clusters=4)
    theta = alg.finalize(fit_local(alg, blobs, max_iterations=10).theta_)
    d2 = ((blobs[:, None, :] - theta["centers"][None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(alg.predict(theta, blobs), d2.argmin(axis=1))
    u = alg.predict_memberships(theta, blobs)
    np.testing.assert_allclose(u.sum(axis=1), 1.0)


def test_logreg_predictions_match_sklearn(binary_data):
    from sklearn.linear_model import LogisticRegression as SkLR

    x, y = binary_data
    for xx, yy in ((x, y), _iris()):
        alg = LogisticRegression(learning_rate=0.5)
        theta = alg.finalize(fit_local(alg, xx, yy, max_iterations=30, tolerance=None).theta_)
        sk = SkLR().fit(xx, yy)  # then given flegel's weights
        sk.coef_ = theta["coef"][None, :] if theta["coef"].ndim == 1 else theta["coef"].T
        sk.intercept_ = theta["intercept"]
        np.testing.assert_allclose(alg.decision_function(theta, xx), sk.decision_function(xx),
                                   rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(alg.predict_proba(theta, xx), sk.predict_proba(xx),
                                   rtol=1e-7, atol=1e-12)
        np.testing.assert_array_equal(alg.predict(theta, xx), sk.predict(xx))


def test_nmf_transform_matches_sklearn(nonneg_matrix):
    from sklearn.decomposition import non_negative_factorization

    alg = NMF(n_components=6)
    theta = alg.finalize(fit_local(alg, nonneg_matrix, max_iterations=50).theta_)
    new = nonneg_matrix[:100] * 1.1  # new rows, against the learned H
    W = alg.transform(theta, new)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        W_sk, _, _ = non_negative_factorization(new, H=theta["components"], n_components=6,
                                                update_H=False, solver="cd", max_iter=500,
                                                tol=1e-10, init="custom")
    assert W.min() >= 0
    err = np.linalg.norm(new - W @ theta["components"])
    err_sk = np.linalg.norm(new - W_sk @ theta["components"])
    assert err == pytest.approx(err_sk, rel=1e-3)


def test_cnn_predict_proba_and_predict(digits):
    xtr, _, ytr, _ = digits
    alg = CNN(image_shape=(8, 8), kernel_size=3, padding=1, input_scale=1 / 16)
    theta = alg.finalize(fit_local(alg, xtr[:200], ytr[:200], batch=50, max_iterations=4,
                                   tolerance=None).theta_)
    p = alg.predict_proba(theta, xtr[:50])
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_array_equal(alg.predict(theta, xtr[:50]), p.argmax(axis=1))


# ---------------------------------------------------------------------------- warm starts
def _save_run(folder, algorithm: str, arrays: dict) -> None:
    """A run directory as flegel run writes it: model.npz, model.json, job.yaml."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "model.npz", **arrays)
    (folder / "model.json").write_text(json.dumps({"algorithm": algorithm, "params": {}}))
    (folder / "job.yaml").write_text(f"algorithm: {algorithm}\n")


@pytest.mark.parametrize("factory, name, arrays, x, y", [
    (lambda i: __import__("flegel.algorithms.kmeans", fromlist=["KMeans"]).KMeans(3, init=i),
     "kmeans", {"centers": np.arange(12.0).reshape(3, 4)}, np.ones((20, 4)), None),
    (lambda i: GaussianMixture(3, init=i), "gmm",
     {"means": np.arange(12.0).reshape(3, 4), "weights": np.full(3, 1 / 3),
      "covariances": np.ones((3, 4))}, np.ones((20, 4)), None),
    (lambda i: FuzzyCMeans(3, init=i), "fcm", {"centers": np.arange(12.0).reshape(3, 4)},
     np.ones((20, 4)), None),
    (lambda i: LogisticRegression(init=i), "logreg",
     {"coef": np.arange(4.0), "intercept": np.array([0.5])}, np.ones((20, 4)),
     np.arange(20) % 2),
    (lambda i: NMF(2, init=i), "nmf", {"components": np.ones((2, 4))}, np.ones((20, 4)), None),
    (lambda i: CNN(image_shape=(4, 4), n_filters=(2,), kernel_size=3, pool_size=1, init=i),
     "cnn", None, np.ones((20, 16)), np.arange(20) % 3),
], ids=["kmeans", "gmm", "fcm", "logreg", "nmf", "cnn"])
def test_warm_start_from_a_run_directory(tmp_path, factory, name, arrays, x, y):
    """params.init takes a run directory or its model.npz, for every algorithm; a model of
    another algorithm or of other shapes gets an error naming both."""
    if arrays is None:  # the CNN's own θ⁽⁰⁾ as the saved model
        alg = factory("he")
        arrays = alg.finalize(alg.init_parameter(make_info(x, y, seed=1)))
    _save_run(tmp_path / "run", name, arrays)
    for init in ("run", "run/model.npz"):
        alg = factory(init)
        alg.validate(tmp_path)
        theta = alg.init_parameter(make_info(x, y, base_dir=tmp_path))
        for key, value in arrays.items():
            if key in theta:
                np.testing.assert_array_equal(theta[key], value, err_msg=key)
    other = "nmf" if name != "nmf" else "kmeans"
    _save_run(tmp_path / "other", other, arrays)
    with pytest.raises(ValueError, match=f"model of algorithm '{other}'.*trains '{name}'"):
        factory("other").validate(tmp_path)
    wrong = {k: np.concatenate([v, v]) if v.ndim else v for k, v in arrays.items()}
    _save_run(tmp_path / "wrong", name, wrong)
    with pytest.raises(ValueError, match=r"has shape \(.*\), but .* needs \("):
        factory("wrong").init_parameter(make_info(x, y, base_dir=tmp_path))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "job.yaml").write_text(f"algorithm: {name}\n")
    with pytest.raises(ValueError, match="no model found.*run directory without model.npz"):
        factory("empty").validate(tmp_path)


@pytest.mark.parametrize("factory, key, message", [
    (lambda: KMeans(n_clusters=0), "n_clusters", "n_clusters must be an integer >= 1, got 0"),
    (lambda: FuzzyCMeans(m=1.0), "m", "m must be a finite number > 1.0, got 1.0"),
    (lambda: NMF(solver="cd"), "solver", "solver must be one of 'hals', 'mu', got 'cd'"),
    (lambda: LogisticRegression(fit_intercept="yes"), "fit_intercept",
     "fit_intercept must be True or False, got 'yes'"),
    (lambda: GaussianMixture(init=3), "init", "init must be one of 'kmeans++', a run "
     "directory or the path of a .npy/.npz file, got 3"),
    (lambda: KMeans(device="tpu"), "device", "device must be one of 'cpu', 'gpu', 'auto', "
     "got 'tpu'"),
    (lambda: CNN(momentum=1.0), "momentum",
     "momentum must be a finite number >= 0.0 and < 1.0, got 1.0"),
])
def test_a_bad_parameter_error_carries_its_name(factory, key, message):
    """The job reports params.<key> from the error's key, never by reading its words."""
    with pytest.raises(ParameterError) as info:
        factory()
    assert info.value.key == key and str(info.value) == message


def test_parameters_are_declared_once_and_stored_converted():
    for cls in (KMeans, GaussianMixture, FuzzyCMeans, LogisticRegression, NMF, CNN):
        init = inspect.signature(cls.__init__).parameters
        assert set(cls.PARAMS) == set(init) - {"self"}, cls
    km = KMeans(n_clusters=np.int64(3), init=Path("c.npy"))
    assert type(km.n_clusters) is int and km.init == "c.npy"
    assert CNN(n_filters=[4], image_shape=[28, 28]).n_filters == (4,)


# ------------------------------------------- logistic regression on raw features (issue 22)
def test_preconditioner_round_trip_and_chain_rule():
    from flegel.algorithms._quasinewton import Preconditioner

    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 3.0, size=(50, 4))
    pre = Preconditioner(*Preconditioner.estimate(x, center=True))
    for shape in ((4,), (4, 3)):
        coef, b = rng.normal(size=shape), rng.normal(size=(1,) if len(shape) == 1 else (3,))
        back = pre.from_u(pre.to_u(coef, b), shape)
        np.testing.assert_allclose(back[0], coef, rtol=1e-12)
        np.testing.assert_allclose(back[1], b, rtol=1e-12)

        # f(coef, b) = Σ (x·coef + b)² / 2: its gradient in u by the chain rule vs. numbers
        def f(u, shape=shape):
            c, bb = pre.from_u(u, shape)
            return 0.5 * float(((x @ c + (bb if len(shape) == 2 else bb[0])) ** 2).sum())

        z = x @ coef + (b if len(shape) == 2 else b[0])
        g = pre.grad_u(x.T @ z, z.sum(axis=0, keepdims=len(shape) == 1))
        u = pre.to_u(coef, b)
        num = [(f(u + e) - f(u - e)) / 2e-6 for e in np.eye(len(u)) * 1e-6]
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-4)


def _digits_even_odd():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x, y % 2


def test_logreg_lbfgs_converges_on_raw_features_to_sklearns_optimum():
    """Raw pixels (0..16): full batches run L-BFGS, which stops on scikit-learn's tol (the
    largest gradient entry of the mean objective) at scikit-learn's optimum."""
    from sklearn.linear_model import LogisticRegression as SkLR

    x, y = _digits_even_odd()
    alg = LogisticRegression(alpha=1.0 / len(x), tol=1e-5)  # = scikit-learn's C=1
    res = fit_local(alg, x, y, max_iterations=300, tolerance=None)
    assert res.converged_ and res.n_iter_ < 200
    sk = SkLR(C=1.0, tol=1e-8, max_iter=5000).fit(x, y)
    sk_theta = {"coef": sk.coef_[0], "intercept": sk.intercept_}
    ref = alg.evaluate(sk_theta, Block.from_arrays(x, y))
    assert res.objective_ <= ref * (1 + 1e-6)
    assert alg.evaluate_accuracy(res.theta_, x, y) == pytest.approx(sk.score(x, y), abs=0.005)


def test_logreg_incremental_steps_adapt_to_the_scale():
    """Mini-batches (not a full batch at the current θ) take gradient steps of 1/L in
    standardised coordinates: the same accuracy on raw and on 100×-scaled features, where a
    fixed step of 0.1 diverges on the scaled ones."""
    x, y = _digits_even_odd()
    accs = []
    for scale in (1.0, 100.0):
        alg = LogisticRegression()
        res = fit_local(alg, x * scale, y, batch=256, max_iterations=120, tolerance=None)
        accs.append(alg.evaluate_accuracy(res.theta_, x * scale, y))
    assert min(accs) >= 0.9 and abs(accs[0] - accs[1]) <= 0.01
    fixed = LogisticRegression(learning_rate=0.1, solver="gd")
    res = fit_local(fixed, x * 100.0, y, batch=256, max_iterations=120, tolerance=None)
    assert fixed.evaluate_accuracy(res.theta_, x * 100.0, y) < min(accs)


def test_logreg_tol_stops_incremental_training_on_the_pass_gradient():
    x, y = _digits_even_odd()
    loose = LogisticRegression(tol=1e-1)
    res = fit_local(loose, x, y, batch=300, max_iterations=200, tolerance=None)
    assert res.converged_ and res.n_iter_ < 200
    none = LogisticRegression(tol=None)
    res = fit_local(none, x, y, batch=300, max_iterations=20, tolerance=None)
    assert not res.converged_ and res.n_iter_ == 20


def test_logreg_keeps_the_lbfgs_memory_across_partial_aggregates():
    """Issue 19: every fifth aggregate is a third of the data (FSP, a short BSPV batch): it
    takes a gradient step, but the L-BFGS pairs of the full batches stay, and the next full
    batch restarts the line search there with them -- 10x closer to the optimum after 60
    updates than starting L-BFGS afresh after each partial one (main: 8e-4 above it)."""
    from flegel.local import make_info

    x, y = _digits_even_odd()
    alg = LogisticRegression(alpha=1.0 / len(x))
    theta = alg.init_parameter(make_info(x, y))
    full, part = np.arange(len(x)), np.arange(0, len(x), 3)
    pairs = []
    for t in range(60):
        rows = part if t % 5 == 4 else full
        block = Block.from_arrays(x[rows], y[rows], alg.init_state(len(rows), x.shape[1]))
        theta = alg.update_parameter(alg._update_rows(block, theta, t), theta)
        assert alg._lbfgs is not None
        pairs.append(len(alg._lbfgs.pairs))
    assert pairs[4] == pairs[3] >= 3 and pairs[5] == pairs[4] + 1  # kept, then one more
    assert max(pairs) == 10  # the memory fills up: no reset along the way
    opt = LogisticRegression(alpha=1.0 / len(x), tol=1e-9)
    best = fit_local(opt, x, y, max_iterations=2000, tolerance=None).objective_ / len(x)
    assert alg.evaluate(theta, Block.from_arrays(x, y)) / len(x) - best < 3e-4


def test_full_batch_update_declared_by_logreg_only():
    """Issue 19: logistic regression declares that a full batch at θ is a stronger step
    (L-BFGS), so FSP waits for every worker's pass; with ``solver="gd"`` it is not, and the
    other five algorithms' sums are as good per point whatever the batch."""
    assert LogisticRegression().full_batch_update
    assert LogisticRegression(solver="lbfgs").full_batch_update
    assert not LogisticRegression(solver="gd").full_batch_update
    for alg in (KMeans(n_clusters=2), GaussianMixture(n_components=2), FuzzyCMeans(),
                NMF(n_components=2), CNN(n_filters=(2,), kernel_size=3)):
        assert not alg.full_batch_update, alg.name


def test_cnn_auto_input_scale_makes_training_scale_free():
    """input_scale="auto" (1 / max |x| of the sample): raw bytes and [0, 1] pixels train the
    same network, and the scale is saved with the model."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(60, 36)).astype(np.float64)
    y = (x[:, :18].sum(axis=1) > x[:, 18:].sum(axis=1)).astype(np.int64)
    runs = []
    for data in (x, x / 255.0):
        alg = CNN(n_filters=(2,), kernel_size=3, dtype="float64")
        runs.append((alg, fit_local(alg, data, y, max_iterations=5, tolerance=None)))
    (a, ra), (b, rb) = runs
    np.testing.assert_allclose(ra.theta_["dense_w"], rb.theta_["dense_w"], rtol=1e-9)
    assert float(ra.theta_["input_scale"][0]) == pytest.approx(1.0 / x.max())
    assert a.finalize(ra.theta_)["input_scale"][0] == pytest.approx(1.0 / x.max())
    np.testing.assert_allclose(a.predict_proba(ra.theta_, x), b.predict_proba(rb.theta_, x / 255),
                               rtol=1e-9)
