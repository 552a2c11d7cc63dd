"""The ``device`` and ``kernel`` parameters of GMM, FCM, logistic regression and the CNN
(issue 14, item 4; the mechanism and K-means are tested in ``tests/test_device.py``).

* the array kernel equals the compiled (numba) one over several iterations, alone and with
  ``kernel: auto`` switching half way;
* the GPU branch, run through a NumPy-backed stand-in for CuPy (``tests/fakes.py``) that
  refuses host arrays in device operations and counts host-to-device copies: same results,
  and θ copied to the device once per θ, not once per block;
* ``device: gpu`` without CuPy fails in ``validate`` (and ``flegel validate``, exit 2) in one
  line;
* ``gpu`` tests comparing CuPy with the CPU kernel, skipped without CuPy and a GPU.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_digits

from flegel import Algorithm, Block
from flegel import device as dev
from flegel.algorithms._common import ThetaCache
from flegel.algorithms.cnn import CNN
from flegel.algorithms.fcm import FuzzyCMeans
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.logreg import LogisticRegression
from flegel.cli.commands import main
from flegel.local import full_pass, make_info
from tests.bench_scripts import load_bench
from tests.conftest import write_job

Arrays = dict[str, Any]


# ------------------------------------------------------------------ data and the cases
@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12_000, 5))
    x[:3000] += 5.0
    x[3000:6000] -= 4.0
    x[6000:8000, :2] += 3.0
    return x


def _labels(x: np.ndarray, n_classes: int) -> np.ndarray:
    """Noisy labels from a fixed linear rule (learnable, not separable)."""
    rng = np.random.default_rng(2)
    w = rng.normal(size=(x.shape[1], n_classes))
    return np.argmax(x @ w + rng.normal(scale=2.0, size=(len(x), n_classes)), axis=1)


#: name -> (factory taking device/kernel keywords, number of classes or None)
CASES: dict[str, tuple[Callable[..., Algorithm], int | None]] = {
    "gmm-diag": (lambda **kw: GaussianMixture(n_components=4, **kw), None),
    "gmm-full": (lambda **kw: GaussianMixture(n_components=3, covariance_type="full", **kw),
                 None),
    "fcm-m2": (lambda **kw: FuzzyCMeans(n_clusters=4, **kw), None),
    "fcm-m1.6": (lambda **kw: FuzzyCMeans(n_clusters=4, m=1.6, **kw), None),
    "logreg-binary": (lambda **kw: LogisticRegression(learning_rate=0.5, **kw), 2),
    "logreg-multinomial": (lambda **kw: LogisticRegression(learning_rate=0.5, alpha=1e-3,
                                                           **kw), 3),
}


def passes(algo: Algorithm, x: np.ndarray, y: np.ndarray | None, n_passes: int,
           block: int = 2500) -> tuple[Arrays, Arrays, list[float]]:
    """``n_passes`` full-batch iterations of ``algo`` in blocks; θ, the state, objectives."""
    theta = algo.init_parameter(make_info(x, y, seed=3))
    state = algo.init_state(len(x), x.shape[1])
    objectives = []
    for _ in range(n_passes):
        total = full_pass(algo, x, y, theta, state, block)
        objectives.append(float(total["objective"]))
        theta = algo.update_parameter(total, theta)
    return theta, state, objectives


def run_case(name: str, x: np.ndarray, n_passes: int = 5, **kw: Any) -> tuple[
        Algorithm, Arrays, Arrays, list[float]]:
    factory, n_classes = CASES[name]
    algo = factory(**kw)
    y = None if n_classes is None else _labels(x, n_classes)
    return (algo, *passes(algo, x, y, n_passes))


def assert_same(got: tuple[Arrays, Arrays, list[float]],
                ref: tuple[Arrays, Arrays, list[float]], rtol: float = 1e-9) -> None:
    (theta, state, obj), (ref_theta, ref_state, ref_obj) = got, ref
    for key in ref_state:
        np.testing.assert_allclose(state[key], ref_state[key], rtol=rtol, atol=rtol,
                                   err_msg=f"state {key}")
    for key in ref_theta:
        np.testing.assert_allclose(theta[key], ref_theta[key], rtol=rtol, atol=rtol,
                                   err_msg=f"theta {key}")
    np.testing.assert_allclose(obj, ref_obj, rtol=rtol)


# ------------------------------------------------------------------ array == compiled
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("kernel", ["array", "auto"])
def test_array_kernel_matches_the_compiled_one(blobs: np.ndarray, name: str,
                                               kernel: str) -> None:
    ref = run_case(name, blobs, kernel="compiled")[1:]
    factory, n_classes = CASES[name]
    algo = factory(kernel=kernel)
    if kernel == "auto":  # switch to numba half way through the run
        units_per_pass = sum(
            _units(algo, min(2500, len(blobs) - s), blobs.shape[1], n_classes)
            for s in range(0, len(blobs), 2500))
        algo._choice.switch_units = 2.5 * units_per_pass
    y = None if n_classes is None else _labels(blobs, n_classes)
    got = passes(algo, blobs, y, 5)
    assert_same(got, ref)
    if kernel == "auto":
        assert algo._choice.units >= algo._choice.switch_units  # it did switch


def test_gmm_components_thousands_of_nats_apart(blobs: np.ndarray) -> None:
    """Far components: exp() underflows, which numba's E-step skips below -708 (a subnormal
    next to 1); the two kernels still agree."""
    rng = np.random.default_rng(4)
    centres = rng.normal(scale=60.0, size=(4, blobs.shape[1]))  # thousands of nats apart
    far = centres[rng.integers(4, size=len(blobs))] + blobs
    ref = passes(GaussianMixture(n_components=4, kernel="compiled"), far, None, 4)
    got = passes(GaussianMixture(n_components=4, kernel="array"), far, None, 4)
    assert_same(got, ref)
    assert np.mean(ref[1]["resp"] == 0.0) > 0.5  # most responsibilities underflowed


def _units(algo: Any, b: int, d: int, n_classes: int | None) -> float:
    if isinstance(algo, LogisticRegression):
        return algo.work_units(b, d, 1 if n_classes == 2 else int(n_classes or 1))
    return algo.work_units(b, d)


def test_work_units() -> None:
    """n·d·K for diagonal GMM and FCM, n·d²·K for full covariance, n·d·C for logreg (C = 1
    for binary): what kernel auto meters (flegel.device.SWITCH_UNITS)."""
    assert GaussianMixture(n_components=4).work_units(100, 5) == 100 * 5 * 4
    assert GaussianMixture(n_components=4, covariance_type="full").work_units(100, 5) == \
        100 * 25 * 4
    assert FuzzyCMeans(n_clusters=3).work_units(100, 5) == 1500
    assert LogisticRegression().work_units(100, 5, 3) == 1500


@pytest.mark.parametrize("name", ["gmm-diag", "fcm-m2", "logreg-multinomial"])
def test_array_kernel_never_starts_numba(blobs: np.ndarray, name: str) -> None:
    """kernel: array (and auto before its switch) calls no numba kernel, evaluation included
    (a CPU worker that never switches never pays numba's start-up)."""
    import flegel.algorithms.fcm as fcm
    import flegel.algorithms.gmm as gmm
    import flegel.algorithms.logreg as logreg

    kernels = [gmm._responsibilities, fcm._memberships, fcm._memberships_m2,
               logreg._binary_kernel, logreg._multinomial_kernel]
    before = [k._compiled for k in kernels]
    for k in kernels:
        k._compiled = _refuse  # type: ignore[assignment]
    try:
        algo, theta, _, _ = run_case(name, blobs[:3000], n_passes=2, kernel="array")
        factory, n_classes = CASES[name]
        y = None if n_classes is None else _labels(blobs[:3000], n_classes)
        algo.evaluate(theta, Block.from_arrays(blobs[:3000], y))
    finally:
        for k, b in zip(kernels, before):
            k._compiled = b


def _refuse(*args: Any) -> None:
    raise AssertionError("a numba kernel ran")


# ------------------------------------------------------------------ the GPU branch
@pytest.mark.parametrize("name", list(CASES))
def test_gpu_branch_matches_and_copies_theta_once_per_theta(
        blobs: np.ndarray, name: str, stand_in: Any) -> None:
    ref = run_case(name, blobs, n_passes=4, kernel="compiled")[1:]
    algo, *got = run_case(name, blobs, n_passes=4, device="gpu")
    assert algo.xp is stand_in and not algo.use_compiled(1.0)
    assert_same(tuple(got), ref)  # type: ignore[arg-type]
    # θ's operands went to the device once per θ (4 passes: 4 θs), not once per block (20)
    cache = next(v for v in vars(algo).values() if isinstance(v, ThetaCache))
    assert cache.misses == 4


def test_gpu_branch_state_comes_back_to_the_host(blobs: np.ndarray, stand_in: Any) -> None:
    """The block's state is copied back (the stand-in's device memory is separate)."""
    algo = GaussianMixture(n_components=3, device="gpu")
    x = blobs[:500]
    theta = algo.init_parameter(make_info(x, None))
    state = algo.init_state(len(x), x.shape[1])
    agg = algo.update_block(Block.from_arrays(x, None, state), theta, 1)
    assert type(state["resp"]) is np.ndarray
    np.testing.assert_allclose(state["resp"].sum(axis=1), 1.0)
    assert agg["objective"] == pytest.approx(state["loss"].sum())
    assert all(type(v) is np.ndarray for k, v in agg.items() if k != "objective")


# ------------------------------------------------------------------ the CNN keeps θ resident
@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    return x[:300] / 16.0, y[:300]


def _theta_copies(fake: Any, theta: Arrays) -> int:
    """Host-to-device copies of θ's arrays the stand-in recorded."""
    ids = {id(v) for v in theta.values()}
    return sum(id(a) in ids for a in fake.transfers)


def test_cnn_keeps_theta_on_the_device_until_it_changes(
        digits: tuple[np.ndarray, np.ndarray], stand_in: Any) -> None:
    x, y = digits
    cnn = CNN(image_shape=(8, 8), kernel_size=3, padding=1, n_filters=(4,), device="gpu")
    cpu = CNN(image_shape=(8, 8), kernel_size=3, padding=1, n_filters=(4,))
    theta = cnn.init_parameter(make_info(x, y))
    n_params = len(cnn._param_keys(theta))
    state = cnn.init_state(len(x), x.shape[1])

    def blocks(th: Arrays) -> Arrays:
        total = cnn.zero_aggregator(th)
        for s in range(0, len(x), 50):  # 6 blocks with one θ
            part = Block(x[s:s + 50], y[s:s + 50], {"loss": state["loss"][s:s + 50]},
                         np.zeros(len(x[s:s + 50]), dtype=bool))
            total = cnn.aggregate(total, cnn.update_block(part, th, 1))
        return total

    total = blocks(theta)
    assert _theta_copies(stand_in, theta) == n_params  # once, not once per block
    # the exact evaluator's snapshot between blocks does not evict the training θ
    snapshot = {k: v.copy() for k, v in theta.items()}
    cnn.evaluate(snapshot, Block.from_arrays(x[:50], y[:50]))
    blocks(theta)
    assert _theta_copies(stand_in, theta) == n_params
    assert _theta_copies(stand_in, snapshot) == n_params
    # a new θ (a barrier) is copied once, and the results are the CPU's
    new = cnn.update_parameter(total, theta)
    got = blocks(new)
    assert _theta_copies(stand_in, new) == n_params
    ref_state = cpu.init_state(len(x), x.shape[1])
    ref = cpu.update_block(Block.from_arrays(x, y, ref_state), new, 1)
    for key in ref:  # (the objective is a change of the losses, which differ before)
        if key != "objective":
            np.testing.assert_allclose(got[key], ref[key], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state["loss"], ref_state["loss"], rtol=1e-4)
    # a caller that replaces an entry of the same dict gets it copied too
    new["dense_b"] = new["dense_b"] + 1.0
    blocks(new)
    assert _theta_copies(stand_in, new) == n_params + (n_params - 1)


def test_theta_cache_by_identity_and_not_pickled() -> None:
    made: list[int] = []
    cache: ThetaCache[int] = ThetaCache(slots=2)

    def make(th: Arrays) -> int:
        made.append(1)
        return len(made)

    a, b, c = ({"w": np.zeros(2)} for _ in range(3))
    assert [cache.get(t, make) for t in (a, a, b, a, b)] == [1, 1, 2, 1, 2]
    assert cache.get(c, make) == 3 and cache.get(a, make) == 4  # a was the oldest of 2
    a["w"] = np.ones(2)  # the same dict with a new array: a new θ
    assert cache.get(a, make) == 5 and cache.misses == 5
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.get(a, make) == 6 and cache.get(a, make) == 5


# ------------------------------------------------------------------ no GPU here
@pytest.mark.parametrize("cls, owner", [
    (GaussianMixture, "GaussianMixture"), (FuzzyCMeans, "FuzzyCMeans"),
    (LogisticRegression, "LogisticRegression"), (CNN, "CNN")])
def test_gpu_without_cupy_fails_in_validate_in_one_line(
        cls: type, owner: str, tmp_path: Any, no_gpu_cache: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(ValueError) as err:
        cls(device="gpu").validate(tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{owner}(device='gpu'): CuPy could not be imported")
    assert "flegel[gpu]" in message and "device='cpu'" in message


@pytest.mark.parametrize("cls", [GaussianMixture, FuzzyCMeans, LogisticRegression])
def test_bad_device_or_kernel_names_the_parameter(cls: type) -> None:
    with pytest.raises(ValueError, match="device must be one of 'cpu', 'gpu', 'auto'"):
        cls(device="tpu")
    with pytest.raises(ValueError, match="kernel must be one of 'auto', 'compiled', 'array'"):
        cls(kernel="fast")


@pytest.mark.parametrize("algorithm, params", [
    ("gmm", {"n_components": 3}), ("fcm", {"n_clusters": 3}), ("logreg", {}),
    ("kmeans", {"n_clusters": 3})])
def test_job_with_device_gpu_exits_2_naming_the_key(
        algorithm: str, params: dict[str, Any], tmp_path: Any, no_gpu_cache: None,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    kind = "classification" if algorithm == "logreg" else "blobs"
    path = write_job(tmp_path / "job.yaml", algorithm=algorithm,
                     params={**params, "device": "gpu"},
                     data={"source": "synthetic", "kind": kind, "n_points": 500,
                           "n_features": 4, "seed": 0},
                     workers=2, sync={"model": "bsp", "batch": "full"})
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "params.device" in err and "device='gpu'" in err
    assert "CuPy could not be imported" in err and "Traceback" not in err


# ------------------------------------------------------------------ on a real GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_cupy_kernel_matches_cpu(blobs: np.ndarray, name: str, no_gpu_cache: None) -> None:
    pytest.importorskip("cupy")
    if dev.gpu_unavailable() is not None:
        pytest.skip(dev.gpu_unavailable() or "")
    ref = run_case(name, blobs, n_passes=4, kernel="compiled")[1:]
    got = run_case(name, blobs, n_passes=4, device="gpu")[1:]
    # cuBLAS sums in another order than OpenBLAS: agree to about 1e-9 relative
    assert_same(got, ref, rtol=1e-7)  # type: ignore[arg-type]


@pytest.mark.gpu
def test_cupy_cnn_keeps_theta_resident(digits: tuple[np.ndarray, np.ndarray],
                                       no_gpu_cache: None) -> None:
    pytest.importorskip("cupy")
    if dev.gpu_unavailable() is not None:
        pytest.skip(dev.gpu_unavailable() or "")
    x, y = digits
    cnn = CNN(image_shape=(8, 8), kernel_size=3, padding=1, device="gpu", dtype="float64")
    cpu = CNN(image_shape=(8, 8), kernel_size=3, padding=1, dtype="float64")
    theta = cnn.init_parameter(make_info(x, y))
    for _ in range(3):
        a = cnn.update_block(Block.from_arrays(x, y, cnn.init_state(len(x), 64)), theta, 1)
        b = cpu.update_block(Block.from_arrays(x, y, cpu.init_state(len(x), 64)), theta, 1)
        for key in b:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-8, atol=1e-8)
    assert cnn._params.misses == 1


# ------------------------------------------------------------------ bench/gpu_bench.py
def test_gpu_bench_rows_through_the_stand_in(stand_in: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The benchmark's GPU rows (first run for real on a GPU machine) work end to end on the
    stand-in: every variant timed, the ratios and the headline taken from them."""
    import argparse

    bench = load_bench("gpu_bench")
    stand_in.cuda.Device = lambda: type("D", (), {"synchronize": lambda self: None})()
    args = argparse.Namespace(algorithms=[a for a in bench.ALGORITHMS if a != "cnn"],
                              points=3000, features=6, passes=1, block=1000, no_cnn=True)
    rows = bench.kernel_rows(args, None)
    columns = ("1 core", "array", "GPU", "GPU copy")
    assert all(isinstance(rows[a][c], float) for a in rows for c in columns)
    assert all(rows[a]["speedup"] > 0 for a in rows)
    cnn = bench.cnn_rows(args)
    assert cnn == {"skipped": "--no-cnn"}
    what, ratio = bench.headline(rows, cnn)
    assert what == "kmeans per pass GPU (resident shard) / one CPU core"
    assert ratio == 1 / rows["kmeans"]["speedup"]
    assert "skipped: --no-cnn" in capsys.readouterr().out
