"""The shard resident on the device under real ``mpirun`` (issue 23, item 5).

Each rank imports a ``cupy`` package that is ``tests/fakes.py``'s NumPy-backed stand-in
(separate device memory, CuPy's boundary) and logs every host-to-device copy of a 2-D
float32 array (the data are float32; θ and the aggregators are float64), so a test can
count the feature copies each worker made:

* BSP, K-means on ``device: gpu``: each worker copies its shard once (the old runtime copied
  every block of every iteration), reports it in ``summary.json``, and the model equals the
  CPU's;
* FSP with asynchronous data migration and a straggler: each worker copies its shard once
  and every migrated window once, when it arrives; the bytes the workers report are the
  shard plus the points that moved.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from tests.conftest import mpirun, summary, write_job

pytestmark = pytest.mark.mpi

D, K = 7, 5

FAKE_CUPY = textwrap.dedent('''
    """A stand-in "cupy" for tests/test_gpu_resident_mpi.py: tests/fakes.py's, logging."""
    import os

    import numpy as _np

    from tests.fakes import cupy_stand_in as _stand_in

    _fake = _stand_in(1)
    globals().update({k: v for k, v in vars(_fake).items() if not k.startswith("__")})
    _copy = _fake.asarray


    def asarray(a, dtype=None, copy=False):
        if type(a) is _np.ndarray and a.ndim == 2 and a.dtype == _np.float32:
            log = os.environ["FAKE_CUPY_LOG"]
            with open(os.path.join(log, "rank-" + os.environ.get("PMI_RANK", "x")), "a") as f:
                f.write(f"{a.shape[0]} {a.shape[1]}\\n")
        return _copy(a, dtype=dtype, copy=copy)


    def array(a, dtype=None, copy=True):
        return asarray(a, dtype=dtype, copy=True)
''')


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """float32 blobs sorted by cluster, initial centroids, and the fake cupy package."""
    tmp = tmp_path_factory.mktemp("resident")
    x, y = make_blobs(40_000, n_features=D, centers=K, cluster_std=1.0, random_state=4)
    x = x[np.argsort(y, kind="stable")].astype(np.float32)
    np.save(tmp / "x.npy", x)
    np.save(tmp / "c0.npy", x[np.random.default_rng(1).choice(len(x), K, replace=False)])
    (tmp / "cupy").mkdir()
    (tmp / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    return tmp


def _copies(log: Path) -> dict[int, list[int]]:
    """Rows of each logged feature copy, per worker rank."""
    out: dict[int, list[int]] = {}
    for f in log.glob("rank-*"):
        rank = int(f.name.split("-")[1])
        rows = [int(ln.split()[0]) for ln in f.read_text().splitlines()
                if int(ln.split()[1]) == D]
        if rank > 0:
            out[rank] = rows
    return out


def _run(folder: Path, name: str, monkeypatch: pytest.MonkeyPatch, device: str,
         **doc: Any) -> tuple[Path, dict[int, list[int]]]:
    log = folder / f"log-{name}-{device}"
    log.mkdir()
    monkeypatch.setenv("FAKE_CUPY_LOG", str(log))
    job = write_job(folder / f"{name}.yaml", algorithm="kmeans",
                    params={"n_clusters": K, "init": "c0.npy", "device": "gpu"},
                    data={"path": "x.npy", "partition": "contiguous", "dtype": "float32"},
                    output={"progress": "none"}, **doc)
    out = folder / f"run-{name}-{device}"
    mpirun(job, doc["workers"], out, f"params.device={device}", timeout=120)
    return out, _copies(log)


def test_bsp_copies_each_shard_once_and_matches_the_cpu(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"workers": 2, "sync": {"model": "bsp"},
           "stop": {"max_iterations": 6, "tolerance": None}}
    out, copies = _run(folder, "bsp", monkeypatch, "gpu", **doc)
    # 20,000 points a worker in 16,384-point blocks: 2 blocks x 6 iterations were 12
    # copies a worker; now one, of the whole shard.
    assert copies == {1: [20_000], 2: [20_000]}
    s = summary(out)
    shard_bytes = 20_000 * D * 4
    assert [w["device_shard"] for w in s["per_worker"]] == [
        {"resident": True, "bytes_in": shard_bytes, "index_bytes": 0}] * 2
    cpu, cpu_copies = _run(folder, "bsp", monkeypatch, "cpu", **doc)
    assert cpu_copies == {} and "device_shard" not in summary(cpu)["per_worker"][0]
    gpu_model, cpu_model = np.load(out / "model.npz"), np.load(cpu / "model.npz")
    np.testing.assert_allclose(gpu_model["centers"], cpu_model["centers"], rtol=1e-6)
    assert s["final_objective"] == pytest.approx(summary(cpu)["final_objective"], rel=1e-6)


def test_migrated_windows_are_copied_once_when_they_arrive(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workers = 4
    out, copies = _run(
        folder, "fsp", monkeypatch, "gpu", workers=workers,
        sync={"model": "fsp", "interval": "multistage", "migration": {"mode": "async"}},
        stragglers=[{"pattern": "injected", "tau_ms": 32, "every": 1000, "workers": [1]}],
        stop={"max_iterations": 100_000, "tolerance": None, "max_time_s": 3})
    s = summary(out)
    moved = s["migration"]["points_moved"]
    assert moved > 0, s["migration"]
    shard = 40_000 // workers
    assert sorted(copies) == [1, 2, 3, 4]
    assert all(rows[0] == shard for rows in copies.values())
    # after the shard: one copy per window admitted, together the points that moved
    assert sum(sum(rows[1:]) for rows in copies.values()) == moved
    per = {w["rank"]: w["device_shard"] for w in s["per_worker"]}
    assert sum(d["bytes_in"] for d in per.values()) == (40_000 + moved) * D * 4
    assert all(d["resident"] for d in per.values())
    assert per[1]["index_bytes"] > 0  # the straggler's blocks skip the rows it sent away


@pytest.mark.gpu
def test_on_a_real_gpu_each_shard_is_resident_and_the_model_is_the_cpus(
        tmp_path: Path) -> None:
    """With CuPy and a GPU (skipped without): the same BSP job on the GPU and the CPU."""
    from flegel import device as dev

    pytest.importorskip("cupy")
    dev.gpu_unavailable.cache_clear()
    if dev.gpu_unavailable() is not None:
        pytest.skip(dev.gpu_unavailable() or "")
    x, _ = make_blobs(40_000, n_features=D, centers=K, cluster_std=1.0, random_state=4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "c0.npy", x[:K])
    runs = {}
    for device in ("gpu", "cpu"):
        job = write_job(tmp_path / f"{device}.yaml", algorithm="kmeans",
                        params={"n_clusters": K, "init": "c0.npy", "device": device},
                        data={"path": "x.npy"}, workers=2, sync={"model": "bsp"},
                        stop={"max_iterations": 6, "tolerance": None},
                        output={"progress": "none"})
        runs[device] = tmp_path / f"run-{device}"
        mpirun(job, 2, runs[device], timeout=180)
    per = summary(runs["gpu"])["per_worker"]
    assert [w["device_shard"]["resident"] for w in per] == [True, True]
    assert [w["device_shard"]["bytes_in"] for w in per] == [20_000 * D * 8] * 2
    np.testing.assert_allclose(np.load(runs["gpu"] / "model.npz")["centers"],
                               np.load(runs["cpu"] / "model.npz")["centers"], rtol=1e-7)
