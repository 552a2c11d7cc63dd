"""Workers 2..n refuse a numba compile exactly where numba's cache misses
(:func:`flegel.jit.without_compiling`, issue 19): per kernel, per argument types (dtype,
contiguity) and per kernel variant (K-means' threaded kernel beside its serial one).

In one process: each test makes its kernels afresh (no machine code in memory) with numba's
cache in a temporary folder (``numba.config.CACHE_DIR``, read when a dispatcher is made), so a
second kernel made from the same source finds on disk exactly what the first compiled.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from flegel.device import DeviceKernels, load_ahead
from flegel.jit import LazyKernel, NotCompiledError, after_first, njit, without_compiling
from tests.conftest import child_env

numba = pytest.importorskip("numba")

#: Two cached lazy kernels and one plain numba kernel (a user's algorithm module).
KERNELS = """
import numba
from flegel.jit import njit

@njit(cache=True)
def total(x):
    return x.sum()

@njit(cache=True)
def largest(x):
    return x.max()

@numba.njit(cache=True)
def plain(x):
    return x.sum() + 1.0

@numba.njit
def uncached(x):
    return x.sum() + 2.0

@numba.njit
def outer(x):
    return plain(x) * 2.0
"""


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """numba's cache in a fresh folder for the kernels made in this test."""
    folder = tmp_path / "numba-cache"
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def kernels(tmp_path, cache) -> Callable[[], ModuleType]:
    """A function making a fresh copy of :data:`KERNELS`' module (its kernels not compiled
    in this process; the same source file, so the same entries of numba's cache)."""
    path = tmp_path / "jj_kernels.py"
    path.write_text(KERNELS)
    made = []

    def fresh() -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"jj_kernels_{len(made)}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        made.append(module)
        return module

    return fresh


def test_float32_after_float64_is_not_cached(kernels):
    """The bug this replaces: numba's cache held the kernel for float64 data, so "compiled"
    said yes, and a float32 job had every worker compile at once.  Now float32 is a miss."""
    kernels().total(np.ones(4))  # worker 1 of a float64 job: compiles, saves
    later = kernels()
    assert without_compiling(lambda: later.total(np.ones(4)))  # float64: loaded
    assert not without_compiling(lambda: later.total(np.ones(4, np.float32)))
    later.total(np.ones(4, np.float32))  # worker 1 of the float32 job
    assert without_compiling(lambda: kernels().total(np.ones(4, np.float32)))


def test_contiguity_is_part_of_the_signature(kernels):
    """A strided view is another numba type (layout "A") than a contiguous array ("C")."""
    kernels().total(np.ones(8))
    later = kernels()
    assert without_compiling(lambda: later.total(np.ones(8)))
    assert not without_compiling(lambda: later.total(np.ones(8)[::2]))


def test_only_the_kernels_a_job_calls_are_asked_about(kernels):
    """A kernel never called (FCM's general m, logreg's multinomial kernel) is not asked
    about; one called but never compiled is refused even though another of its module was,
    and what was refused is named."""
    kernels().total(np.ones(3))
    later = kernels()
    assert without_compiling(lambda: later.total(np.ones(3)))
    with pytest.raises(NotCompiledError, match=r"largest\(array\(float64, 1d, C\)\)"):
        _raise_refused(later.largest, np.ones(3))
    assert later.largest(np.ones(3)) == 1.0  # outside the block: it compiles as usual


def _raise_refused(kernel: Callable[..., object], *args: object) -> None:
    """Call ``kernel`` under :func:`without_compiling` and raise what it refused."""
    caught: list[BaseException] = []

    def call() -> None:
        try:
            kernel(*args)
        except NotCompiledError as err:
            caught.append(err)
            raise

    assert not without_compiling(call)
    raise caught[0]


def test_a_plain_numba_kernel_is_refused_too(kernels):
    """A user's own ``numba.njit(cache=True)`` kernel: the same test, per signature (it was
    "every kernel of the module compiled for some types" before)."""
    assert not without_compiling(lambda: kernels().plain(np.ones(2)))
    kernels().plain(np.ones(2))
    assert without_compiling(lambda: kernels().plain(np.ones(2)))
    assert not without_compiling(lambda: kernels().plain(np.ones((2, 2))))
    # without cache=True worker 1's compile would not spare the others theirs: not refused
    assert without_compiling(lambda: kernels().uncached(np.ones(2)))
    # ... but a cached kernel it calls is, inside its typing
    with pytest.raises(NotCompiledError, match=r"plain\(array\(float32, 1d, C\)\)"):
        _raise_refused(kernels().outer, np.ones(2, np.float32))
    kernels().plain(np.ones(2, np.float32))
    assert without_compiling(lambda: kernels().outer(np.ones(2, np.float32)))


def test_a_refusal_swallowed_by_the_call_still_counts(kernels):
    """An algorithm that catches every error (a fallback path) or turns the refusal into
    another cannot hide it; an error of its own still propagates, after a refusal too."""
    module = kernels()

    def forgiving() -> None:
        try:
            module.total(np.ones(2))
        except Exception:  # noqa: BLE001 - what a user's fallback might do
            pass

    assert not without_compiling(forgiving)

    def failing() -> None:
        raise ValueError("the algorithm's own error")

    with pytest.raises(ValueError, match="own error"):
        without_compiling(failing)

    def wrapping() -> None:  # another error for the refusal: still the refusal
        try:
            module.total(np.ones(2))
        except NotCompiledError:
            raise RuntimeError("kernel failed") from None

    assert not without_compiling(wrapping)

    def forgiving_then_failing() -> None:  # a refusal swallowed, then an error of its own
        forgiving()
        raise ValueError("the algorithm's own error after a refusal")

    with pytest.raises(ValueError, match="after a refusal"):
        without_compiling(forgiving_then_failing)


class _FakeKernels(DeviceKernels):
    """An algorithm whose compiled kernel is :data:`KERNELS`' ``total`` (``kernel:
    compiled``, so :func:`flegel.device.load_ahead` loads it)."""

    def __init__(self, module: ModuleType) -> None:
        self._set_device("cpu", "compiled")
        self.module = module

    def load_compiled(self, n_features: int, dtype: np.dtype) -> None:
        self.module.total(np.zeros(n_features, dtype))


def test_load_ahead_leaves_a_cold_kernel_to_worker_1(kernels):
    """A worker other than the first loads its kernel ahead of θ⁽⁰⁾ only from numba's cache:
    on a cold cache (or another dtype) it says it did not load, and its warm-up waits for
    worker 1 (flegel/run.py)."""
    def ahead(first: bool, dtype: type = np.float64) -> bool:
        return load_ahead(_FakeKernels(kernels()), 100, 3, np.dtype(dtype), 10, first=first)

    assert not ahead(first=False)
    assert ahead(first=True)  # worker 1 compiles, saves
    assert ahead(first=False)
    assert not ahead(first=False, dtype=np.float32)


class _Counting:
    """An algorithm that changes its own state before its kernel call (a counter)."""

    def __init__(self, kernel: Callable[[np.ndarray], float]) -> None:
        self.kernel = kernel
        self.calls = 0

    def warm_up(self) -> None:
        self.calls += 1
        self.kernel(np.ones(3))


class _Uncopyable(_Counting):
    def __deepcopy__(self, memo: dict) -> _Uncopyable:
        raise TypeError("holds a handle")


def test_workers_2_to_n_warm_up_the_algorithm_once_as_worker_1(kernels):
    """Refused partway on a cold cache, the try ran on a copy: the algorithm's own state has
    moved once, as worker 1's (BSP's bit-for-bit runs); on a warm cache likewise.  An
    algorithm that cannot be copied keeps the old way (tried on itself, then again)."""
    module = kernels()
    algo = _Counting(module.total)
    compiled: list[float] = []
    assert not after_first(algo, _Counting.warm_up,
                           lambda: compiled.append(kernels().total(np.ones(3))))
    assert algo.calls == 1 and compiled == [3.0]
    warm = _Counting(kernels().total)
    assert after_first(warm, _Counting.warm_up, lambda: None) and warm.calls == 1
    stuck = _Uncopyable(module.largest)
    assert not after_first(stuck, _Counting.warm_up, lambda: kernels().largest(np.ones(3)))
    assert stuck.calls == 2


def test_another_threads_compile_is_not_refused(kernels):
    """Only the thread in the block is refused (a worker's warm-up, not another thread)."""
    module = kernels()
    results: list[object] = []

    def call() -> None:
        other = threading.Thread(target=lambda: results.append(module.total(np.ones(5))))
        other.start()
        other.join()

    assert without_compiling(call)
    assert results == [5.0]


def test_kernels_made_after_the_block_opened_are_watched(tmp_path, cache):
    """numba imported by the first kernel inside the block (a worker's load ahead of θ⁽⁰⁾)
    is watched from then on; a block that runs no kernel does not import numba."""
    (tmp_path / "one_kernel.py").write_text(
        "from flegel.jit import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from flegel.jit import without_compiling; "
            "print(without_compiling(lambda: None), 'numba' in sys.modules); "
            "import one_kernel; print(without_compiling(lambda: one_kernel.twice(1.0)))")
    env = {**child_env(), "NUMBA_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.stdout.split() == ["True", "False", "False"], out.stderr


@pytest.fixture
def two_threads():
    """numba runs two threads in this test (K-means then takes its parallel kernel)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip(f"numba has {numba.config.NUMBA_NUM_THREADS} thread(s)")
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


def _threaded_kmeans() -> LazyKernel:
    """A fresh copy of K-means' kernel (serial and parallel, no machine code in memory)."""
    import flegel.algorithms.kmeans as km

    serial = km._assign_accumulate
    return km._Threaded(njit(**serial.options)(serial.py_func), km._assign_tiles)


def _kmeans_args() -> tuple:
    k, d = 3, 4
    return (np.zeros((8, d)), np.zeros((d, k)), np.zeros(k),
            np.full(8, -1, dtype=np.int64), np.zeros(8), np.zeros((k, d)), np.zeros(k), 4)


def test_threaded_kmeans_kernel_is_not_the_serial_one(cache, two_threads):
    """``runtime.threads: 2`` after a run on one thread: the cache holds the serial kernel
    only, and the parallel one is refused (every worker compiled it at once before).  (Not
    compiled here: that it then loads is numba's cache, as in the tests above.)"""
    numba.set_num_threads(1)
    _threaded_kmeans()(*_kmeans_args())  # one thread: the serial kernel, saved
    assert without_compiling(lambda: _threaded_kmeans()(*_kmeans_args()))
    numba.set_num_threads(2)
    refused: list[str] = []

    def call() -> None:
        try:
            _threaded_kmeans()(*_kmeans_args())
        except NotCompiledError as err:
            refused.append(str(err))
            raise

    assert not without_compiling(call)
    assert refused and refused[0].startswith("_assign_tiles(")
