"""The ``device`` and ``kernel`` parameters (flegel.device): the kernel choice, the GPU checks
and fallback, and K-means' array kernel against its compiled one."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from flegel import device as dev
from flegel.algorithms.kmeans import KMeans
from flegel.local import full_pass


def numpy_as_cupy(n_devices: int = 1) -> types.ModuleType:
    """A stand-in "cupy" module that is NumPy underneath, with ``n_devices`` CUDA devices.

    It lets the GPU branch of a kernel (device copies, the array kernel on ``xp``) run on a
    machine without a GPU; the real CuPy path is covered by the ``gpu`` tests.
    """
    fake = types.ModuleType("cupy")
    fake.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    fake.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=types.SimpleNamespace(getDeviceCount=lambda: n_devices))
    return fake


def lloyd_passes(algo: KMeans, x: np.ndarray, k: int, passes: int,
                 block: int = 3000) -> tuple[dict[str, Any], dict[str, np.ndarray], list[float]]:
    """Run ``passes`` full-batch iterations of ``algo`` in blocks; return θ, state, objectives."""
    theta = {"centers": x[:k].copy(), "sums": np.zeros((k, x.shape[1])), "counts": np.zeros(k)}
    state = algo.init_state(len(x), x.shape[1])
    objectives = []
    for _ in range(passes):
        total = full_pass(algo, x, None, theta, state, block)
        objectives.append(total["objective"])
        theta = algo.update_parameter(total, theta)
    return theta, state, objectives


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20_000, 5))
    x[:5000] += 5.0
    x[5000:9000] -= 4.0
    return x


def test_kernel_choice_fixed_and_auto_switch_at_a_fixed_amount_of_work() -> None:
    assert all(dev.KernelChoice("compiled").compiled(1e12) for _ in range(3))
    assert not any(dev.KernelChoice("array").compiled(1e12) for _ in range(3))
    choice = dev.KernelChoice("auto", switch_units=100.0)
    used = [choice.compiled(30.0) for _ in range(6)]
    # 30, 60, 90 and 120 units on the array kernel; the 4th call crosses 100, the 5th switches
    assert used == [False, False, False, False, True, True]
    again = dev.KernelChoice("auto", switch_units=100.0)
    assert [again.compiled(30.0) for _ in range(6)] == used  # the same calls, the same switch


def test_a_job_of_known_length_is_planned_before_its_first_call() -> None:
    """kernel: auto with the job's whole work known: numba from the first call when it is at
    least PLAN_UNITS, else the array kernel with the ski-rental meter still running."""
    long = dev.KernelChoice("auto", switch_units=100.0)
    assert long.plan(dev.PLAN_UNITS) and long.planned
    assert [long.compiled(30.0) for _ in range(3)] == [True, True, True]
    short = dev.KernelChoice("auto", switch_units=100.0)
    assert not short.plan(dev.PLAN_UNITS / 2)
    assert [short.compiled(30.0) for _ in range(6)] == [False, False, False, False, True, True]
    unknown = dev.KernelChoice("auto")
    assert not unknown.plan(None) and not unknown.compiled(1.0)
    assert dev.KernelChoice("compiled").plan(None)
    assert not dev.KernelChoice("array").plan(1e30)


def test_kmeans_plans_the_short_job_of_issue_23_onto_numba() -> None:
    """12 iterations of 1M x 28, K = 16 (5.4e9 units) run numba from the first block; a small
    fit never starts it; a job without max_iterations keeps the meter."""
    assert not KMeans(n_clusters=16).use_compiled(1.0)  # unplanned: the meter first
    job = KMeans(n_clusters=16)
    assert job.plan_kernels(1_000_000, 28, 12)
    assert job.use_compiled(1.0)
    small = KMeans(n_clusters=2)
    assert not small.plan_kernels(30, 3, 100) and not small.use_compiled(1.0)
    assert not KMeans(n_clusters=16).plan_kernels(1_000_000, 28, None)
    assert not KMeans(n_clusters=16, kernel="array").plan_kernels(1_000_000, 28, 12)


def test_load_ahead_loads_the_planned_kernel_for_the_data_type() -> None:
    """The worker's load before θ⁽⁰⁾ (flegel/run.py): numba's dispatcher is made and called
    on a few zeros of the data's type, so the first block finds it loaded."""
    from flegel.algorithms import kmeans as km

    assert not dev.load_ahead(KMeans(n_clusters=2), 30, 3, np.dtype(np.float64), 100)
    assert dev.load_ahead(KMeans(n_clusters=3), 1_000_000, 28, np.dtype(np.float32), 1000)
    kernel = km._assign_accumulate  # serial, or parallel when numba runs several threads
    loaded = [d for d in (kernel.dispatcher(), kernel._parallel) if d is not None]
    assert any(sig[0].dtype.name == "float32" for d in loaded for sig in d.signatures)


@pytest.mark.parametrize("kernel", ["array", "auto"])
def test_kmeans_array_kernel_matches_the_compiled_one(blobs: np.ndarray, kernel: str) -> None:
    ref_theta, ref_state, ref_obj = lloyd_passes(KMeans(n_clusters=4, kernel="compiled"),
                                                 blobs, 4, 6)
    algo = KMeans(n_clusters=4, kernel=kernel)
    if kernel == "auto":  # switch half way through the run
        algo._choice.switch_units = 3 * blobs.size * 4
    theta, state, obj = lloyd_passes(algo, blobs, 4, 6)
    np.testing.assert_array_equal(state["label"], ref_state["label"])
    np.testing.assert_allclose(state["score"], ref_state["score"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(theta["centers"], ref_theta["centers"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(obj, ref_obj, rtol=1e-9)
    assert theta["counts"].sum() == len(blobs)


def test_kmeans_gpu_branch_copies_in_and_out(blobs: np.ndarray, no_gpu_cache: None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", numpy_as_cupy(1))
    gpu = KMeans(n_clusters=4, device="gpu")
    assert gpu.xp is sys.modules["cupy"] and not gpu.use_compiled(1.0)
    theta, state, obj = lloyd_passes(gpu, blobs, 4, 4)
    ref_theta, ref_state, ref_obj = lloyd_passes(KMeans(n_clusters=4, kernel="array"), blobs,
                                                 4, 4)
    np.testing.assert_array_equal(state["label"], ref_state["label"])
    np.testing.assert_allclose(theta["centers"], ref_theta["centers"], rtol=1e-12)
    np.testing.assert_allclose(obj, ref_obj, rtol=1e-9)


def test_gpu_without_cupy_fails_before_work_and_auto_falls_back_once(
        tmp_path: Any, no_gpu_cache: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    monkeypatch.delenv(dev._NOTED_ENV, raising=False)
    with pytest.raises(ValueError, match=r"KMeans\(device='gpu'\): CuPy could not be imported"
                                         r".*flegel\[gpu\].*device='cpu'"):
        KMeans(n_clusters=2, device="gpu").validate(tmp_path)
    auto = KMeans(n_clusters=2, device="auto")
    auto.validate(tmp_path)
    assert auto.xp is np and auto.xp is np
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KMeans(device='auto') runs on the CPU" in err


def test_gpu_without_a_device_says_so(no_gpu_cache: None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", numpy_as_cupy(0))
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        dev.array_module("gpu", "GMM")


@pytest.mark.parametrize(("params", "message"), [
    ({"device": "tpu"}, "device must be one of 'cpu', 'gpu', 'auto', got 'tpu'"),
    ({"kernel": "fast"}, "kernel must be one of 'auto', 'compiled', 'array', got 'fast'"),
])
def test_bad_device_or_kernel_names_the_parameter(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KMeans(n_clusters=2, **params)


@pytest.mark.gpu
def test_kmeans_cupy_kernel_matches_cpu(blobs: np.ndarray, no_gpu_cache: None) -> None:
    pytest.importorskip("cupy")
    if dev.gpu_unavailable() is not None:
        pytest.skip(dev.gpu_unavailable() or "")
    theta, state, obj = lloyd_passes(KMeans(n_clusters=4, device="gpu"), blobs, 4, 4)
    ref_theta, ref_state, ref_obj = lloyd_passes(KMeans(n_clusters=4, kernel="compiled"),
                                                 blobs, 4, 4)
    np.testing.assert_array_equal(state["label"], ref_state["label"])
    np.testing.assert_allclose(theta["centers"], ref_theta["centers"], rtol=1e-9)
    np.testing.assert_allclose(obj, ref_obj, rtol=1e-7)
