"""The shard resident on the device (issue 23, item 5; flegel/device.py, ``DeviceRows``).

Through the NumPy-backed CuPy stand-in of ``tests/fakes.py``, whose device memory is separate
and which records every host-to-device copy:

* training copies a shard's features to the device once, not once per block, and gives the
  NumPy path's results (every algorithm with the ``device`` parameter);
* points migrated in are copied once, when they arrive; blocks that skip rows (points sent
  away, halted, queued) gather on the device and copy only row indices; a shuffle, a
  reactivation (virtual migration) and a roll-back copy no features; a restored checkpoint
  copies its rows once;
* a shard that does not fit falls back to per-block copies with one line naming the sizes,
  with the same results;
* ``bench/gpu_bench.py`` runs end to end on the stand-in, and without a GPU skips in one line;
* ``gpu`` tests: the same on a real GPU with CuPy (skipped without).

The MPI path (a worker places its shard after loading it; migration between real ranks) is
in ``tests/test_gpu_resident_mpi.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel import Algorithm
from flegel import device as dev
from flegel.algorithms.cnn import CNN
from flegel.algorithms.fcm import FuzzyCMeans
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.kmeans import KMeans
from flegel.algorithms.logreg import LogisticRegression
from flegel.local import fit_local
from flegel.runtime.store import ShardStore
from tests.conftest import ROOT, child_env


def feature_copies(fake: Any, d: int, least_rows: int = 64) -> list[int]:
    """Row counts of the host-to-device copies of feature rows (2-D, ``d`` columns, more
    than a θ's handful of rows) the stand-in recorded."""
    return [len(a) for a in fake.transfers
            if getattr(a, "ndim", 0) == 2 and a.shape[1] == d and len(a) >= least_rows]


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(9_000, 6))
    x[:3000] += 4.0
    x[3000:5000] -= 3.0
    return x


def _labels(x: np.ndarray, n_classes: int) -> np.ndarray:
    w = np.random.default_rng(2).normal(size=(x.shape[1], n_classes))
    return np.argmax(x @ w, axis=1)


#: name -> (factory taking device/kernel keywords, classes or None, relative tolerance)
CASES: dict[str, tuple[Callable[..., Algorithm], int | None, float]] = {
    "kmeans": (lambda **kw: KMeans(n_clusters=4, n_init=1, **kw), None, 1e-9),
    "gmm": (lambda **kw: GaussianMixture(n_components=3, **kw), None, 1e-9),
    "fcm": (lambda **kw: FuzzyCMeans(n_clusters=3, **kw), None, 1e-9),
    "logreg": (lambda **kw: LogisticRegression(learning_rate=0.5, **kw), 3, 1e-9),
    # float32 compute: the device and the host sum in different orders
    "cnn": (lambda **kw: CNN(image_shape=(2, 3), kernel_size=2, padding=1, n_filters=(3,),
                             pool_size=1, **kw), 3, 1e-4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_training_copies_the_shard_once_and_matches_numpy(
        blobs: np.ndarray, name: str, stand_in: Any) -> None:
    """fit_local (the runtime's store and block loop): 4 iterations of 6 blocks each copied
    24 blocks of features to the device; now the shard goes once."""
    factory, n_classes, rtol = CASES[name]
    y = None if n_classes is None else _labels(blobs, n_classes)
    kw: dict[str, Any] = dict(block_size=1500, max_iterations=4, tolerance=None, seed=1)
    gpu = fit_local(factory(device="gpu"), blobs, y, **kw)
    copies = feature_copies(stand_in, blobs.shape[1])
    # the shard once; then, for the CNN alone, the final exact evaluation's pass, which
    # copies the host blocks its evaluate() reads (measured: 9,000 = the shard; 0 for the
    # others)
    assert copies[0] == len(blobs)
    assert sum(copies[1:]) == (len(blobs) if name == "cnn" else 0)
    ref = fit_local(factory(device="cpu"), blobs, y, **kw)
    for key, value in ref.theta_.items():
        np.testing.assert_allclose(gpu.theta_[key], value, rtol=rtol, atol=rtol,
                                   err_msg=f"theta {key}")
    np.testing.assert_allclose(gpu.history_, ref.history_, rtol=rtol)
    assert gpu.objective_ == pytest.approx(ref.objective_, rel=rtol)


def _store(x: np.ndarray, rank: int = 1) -> ShardStore:
    from flegel.runtime.store import global_ids

    algo = KMeans(n_clusters=2)
    return ShardStore(x, None, algo.init_state(len(x), x.shape[1]),
                      ids=global_ids(rank, len(x)))


def _one_pass(store: ShardStore, block: int = 700) -> list[Any]:
    """One pass of blocks; each block's features checked against the host rows."""
    blocks = []
    todo = store.n_active
    while todo > 0:
        b, sel = store.next_block(min(block, todo))
        assert type(b.x).__module__ == "cupy"  # a device array: no copy made for it
        np.testing.assert_array_equal(dev.to_host(b.x), store.x[sel])
        store.commit_block(b, sel)
        todo -= len(b)
        blocks.append(sel)
    return blocks


def test_migrated_points_are_copied_once_and_sent_ones_cost_nothing(
        blobs: np.ndarray, stand_in: Any) -> None:
    d = blobs.shape[1]
    source, target = _store(blobs[:4000], rank=1), _store(blobs[4000:], rank=2)
    assert source.place(KMeans(n_clusters=2, device="gpu"), "worker 1")
    assert target.place(KMeans(n_clusters=2, device="gpu"), "worker 2")
    assert feature_copies(stand_in, d) == [4000, 5000]
    _one_pass(source)
    # a window of 900 points moves: locked and exported at the source, admitted at the target
    rows = source.select_behind_cursor(900)
    source.lock(rows)
    payload = source.export(rows)
    target.admit(payload)
    assert feature_copies(stand_in, d) == [4000, 5000, 900]
    assert target.device is not None and target.device.n == len(target) == 5900
    # the source's blocks now skip the sent rows: gathered on the device, indices copied
    before = len(stand_in.transfers)
    source_sels = _one_pass(source)
    assert any(not isinstance(s, slice) for s in source_sels)
    _one_pass(target)  # the queued (migrated) rows first, then the native ones
    assert feature_copies(stand_in, d) == [4000, 5000, 900]
    assert all(a.dtype == np.int64 and a.ndim == 1 for a in stand_in.transfers[before:])
    assert source.device is not None and source.device.index_bytes > 0
    assert source.device.bytes_in == 4000 * d * 8
    assert target.device.bytes_in == 5900 * d * 8
    # virtual migration: the target retires them, the source takes them up again, no copy
    taken = target.retire(origin=1, count=900)
    source.reactivate(taken)
    _one_pass(source)
    assert feature_copies(stand_in, d) == [4000, 5000, 900]
    # a roll-back to a mark re-reads the same device rows
    source.mark()
    _one_pass(source)
    source.rollback()
    _one_pass(source)
    assert feature_copies(stand_in, d) == [4000, 5000, 900]


def test_shuffle_and_restore_keep_the_device_copy_in_step(blobs: np.ndarray,
                                                          stand_in: Any) -> None:
    d = blobs.shape[1]
    store = _store(blobs[:3000])
    store.place(KMeans(n_clusters=2, device="gpu"))
    store.shuffle(seed=4)  # permuted on the device: no copy
    assert feature_copies(stand_in, d) == [3000]
    np.testing.assert_array_equal(dev.to_host(store.kernel_x), store.x)
    other = _store(blobs[3000:4000], rank=2)
    store.admit(other.export(np.arange(500)))
    _one_pass(store)
    saved = store.checkpoint_state()
    assert "device" not in saved
    fresh = _store(blobs[:3000])
    fresh.shuffle(seed=4)
    fresh.place(KMeans(n_clusters=2, device="gpu"))
    fresh.restore(saved)  # 3000 shard rows + 500 admitted: copied again, once
    assert feature_copies(stand_in, d) == [3000, 500, 3000, 3500]
    np.testing.assert_array_equal(dev.to_host(fresh.kernel_x), store.x)
    _one_pass(fresh)


def test_cpu_and_user_algorithms_keep_host_blocks(blobs: np.ndarray, stand_in: Any) -> None:
    """Only an algorithm whose kernels run on a GPU gets device blocks."""
    store = _store(blobs[:2000])
    assert not store.place(KMeans(n_clusters=2))  # device: cpu
    assert not store.place(object())  # no device parameter (a user's algorithm)
    b, _ = store.next_block(500)
    assert type(b.x) is np.ndarray and store.kernel_x is store.x
    assert stand_in.transfers == []


def _with_free_memory(fake: Any, free: int) -> None:
    """Give the stand-in CUDA's memGetInfo, with ``free`` bytes free."""
    fake.cuda.runtime.memGetInfo = lambda: (free, 80 * 2**30)


def test_a_shard_that_does_not_fit_falls_back_to_per_block_copies(
        blobs: np.ndarray, stand_in: Any, capsys: pytest.CaptureFixture[str]) -> None:
    d = blobs.shape[1]
    _with_free_memory(stand_in, blobs.nbytes)  # twice the shard needs: 50% does not fit
    kw: dict[str, Any] = dict(block_size=1500, max_iterations=3, tolerance=None, seed=1)
    gpu = fit_local(KMeans(n_clusters=4, n_init=1, device="gpu"), blobs, **kw)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("fit_local: the shard (0.00 GiB) does not fit in 50% of the GPU's free memory "
            "(0.00 GiB free); each block is copied to the GPU instead (slower)") in err
    assert feature_copies(stand_in, d) == [1500] * 18  # 6 blocks x 3 iterations, as before
    ref = fit_local(KMeans(n_clusters=4, n_init=1, kernel="array"), blobs, **kw)
    np.testing.assert_allclose(gpu.theta_["centers"], ref.theta_["centers"], rtol=1e-9)
    _with_free_memory(stand_in, 2 * blobs.nbytes + 8)
    store = _store(blobs)
    assert store.place(KMeans(n_clusters=2, device="gpu"), "worker 3")
    assert capsys.readouterr().err == ""


def test_out_of_memory_on_the_copy_or_a_window_falls_back_in_one_line(
        blobs: np.ndarray, stand_in: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = stand_in.asarray
    room = {"rows": 10**9}

    class OutOfMemoryError(MemoryError):  # cupy.cuda.memory.OutOfMemoryError's name
        pass

    def asarray(a: Any, *args: Any, **kw: Any) -> Any:
        if getattr(a, "ndim", 0) == 2 and len(a) > room["rows"]:
            raise OutOfMemoryError("out of memory allocating 1,234 bytes")
        return copy(a, *args, **kw)

    monkeypatch.setattr(stand_in, "asarray", asarray)
    room["rows"] = 1000
    store = _store(blobs[:3000])
    assert not store.place(KMeans(n_clusters=2, device="gpu"), "worker 2")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "worker 2: the shard (0.00 GiB) ran the GPU out of " \
        "memory (unknown free); each block is copied to the GPU instead" in err
    b, _ = store.next_block(500)
    assert type(b.x) is np.ndarray  # the kernels copy it, as before
    # a window that does not fit beside a resident shard ends the residency
    room["rows"] = 5000
    store = _store(blobs[:3000])
    assert store.place(KMeans(n_clusters=2, device="gpu"), "worker 2")
    store.admit(_store(blobs[3000:], rank=3).export(np.arange(200)))  # fits in the buffer
    assert store.device is not None
    store.admit(_store(blobs[3000:], rank=3).export(np.arange(200, 6000)))
    assert store.device is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "worker 2: 5800 migrated points" in err
    assert "do not fit beside the shard on the GPU" in err
    b, sel = store.next_block(10_000)
    np.testing.assert_array_equal(b.x, store.x[sel])


def test_device_rows_grow_by_doubling(stand_in: Any) -> None:
    rows = dev.DeviceRows(stand_in, np.arange(12.0).reshape(4, 3))
    for k in (1, 1, 5):
        rows.append(np.full((k, 3), float(k)))
    assert rows.n == 11 and rows.nbytes >= 11 * 24
    assert feature_copies(stand_in, 3, least_rows=1) == [4, 1, 1, 5]
    np.testing.assert_array_equal(dev.to_host(rows.take(slice(4, 6))), np.ones((2, 3)))
    np.testing.assert_array_equal(dev.to_host(rows.take(np.array([10, 0]))),
                                  [[5.0] * 3, [0.0, 1.0, 2.0]])


# ------------------------------------------------------------------ bench/gpu_bench.py
#: tests/fakes.py's stand-in as an importable ``cupy`` package, with the CUDA calls the
#: benchmark makes besides the kernels'.
STAND_IN_PACKAGE = """
import types

from tests.fakes import cupy_stand_in as _stand_in

_fake = _stand_in(1)
globals().update({k: v for k, v in vars(_fake).items() if not k.startswith("__")})
cuda.Device = lambda *a: types.SimpleNamespace(synchronize=lambda: None)
cuda.runtime.getDeviceProperties = lambda i: {"name": b"stand-in"}
"""


def _bench(tmp_path: Path, package: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(package)
    return subprocess.run([sys.executable, "bench/gpu_bench.py", *args], cwd=ROOT,
                          env=child_env(tmp_path), capture_output=True, text=True,
                          timeout=120)


def test_gpu_bench_runs_end_to_end_on_the_stand_in(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = _bench(tmp_path, STAND_IN_PACKAGE, "--points", "3000", "--block", "1000",
                  "--passes", "1", "--algorithms", "kmeans,logreg", "--no-cnn",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "GPU: stand-in" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith(
        "headline: kmeans per pass GPU (resident shard) / one CPU core: ratio ")
    doc = json.loads(out.read_text())
    assert doc["target"] == pytest.approx(1 / 30)
    for name in ("kmeans", "logreg"):
        row = doc["kernels"][name]
        assert all(isinstance(row[c], float) for c in ("1 core", "array", "GPU", "GPU copy"))
        # per pass, the resident shard copies no features; per-block copies move all of them
        assert row["GPU copy MB/pass"] - row["GPU MB/pass"] == pytest.approx(3000 * 28 * 8 / 1e6)
        assert row["GPU MB/pass"] < 0.2 * row["GPU copy MB/pass"]


def test_gpu_bench_without_a_gpu_says_so_in_one_line(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "raise ImportError('no CUDA here')\n", "--quick")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("gpu_bench: skipped: no GPU: CuPy could not be imported "
                           "(no CUDA here)\n")


# ------------------------------------------------------------------ on a real GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_cupy_resident_training_matches_numpy(blobs: np.ndarray, name: str,
                                              no_gpu_cache: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("cupy")
    if dev.gpu_unavailable() is not None:
        pytest.skip(dev.gpu_unavailable() or "")
    factory, n_classes, rtol = CASES[name]
    y = None if n_classes is None else _labels(blobs, n_classes)
    kw: dict[str, Any] = dict(block_size=1500, max_iterations=4, tolerance=None, seed=1)
    gpu = fit_local(factory(device="gpu"), blobs, y, **kw)
    # resident, not fallen back to per-block copies (which would say so in one line)
    err = capsys.readouterr().err
    assert "does not fit" not in err and "out of memory" not in err, err
    ref = fit_local(factory(device="cpu"), blobs, y, **kw)
    for key, value in ref.theta_.items():
        # cuBLAS sums in another order than OpenBLAS (the CNN in float32)
        tol = 1e-3 if name == "cnn" else 1e-7
        np.testing.assert_allclose(gpu.theta_[key], value, rtol=tol, atol=tol,
                                   err_msg=f"theta {key}")


@pytest.mark.gpu
def test_cupy_device_rows_take_append_permute(no_gpu_cache: None) -> None:
    cupy = pytest.importorskip("cupy")
    if dev.gpu_unavailable() is not None:
        pytest.skip(dev.gpu_unavailable() or "")
    host = np.arange(40.0).reshape(10, 4)
    rows = dev.resident_rows(cupy, host, "test")
    assert rows is not None and rows.bytes_in == host.nbytes
    assert isinstance(rows.take(slice(2, 5)), cupy.ndarray)
    np.testing.assert_array_equal(rows.take(slice(2, 5)).get(), host[2:5])
    np.testing.assert_array_equal(rows.take(np.array([9, 0, 3])).get(), host[[9, 0, 3]])
    extra = np.full((25, 4), 7.0)
    rows.append(extra)
    np.testing.assert_array_equal(rows.rows.get(), np.concatenate([host, extra]))
    perm = np.random.default_rng(0).permutation(35)
    rows.permute(perm)
    np.testing.assert_array_equal(rows.rows.get(), np.concatenate([host, extra])[perm])
    assert dev._free_bytes(cupy) is not None  # CUDA's memGetInfo and CuPy's pool answer
