"""Memory per worker (issue 14): a shard load holds the shard and one chunk, never the file,
and the summary reports every rank's peak RSS.

Array reads go a chunk of the file at a time (``flegel.data.formats.arrays``): the first tests
shrink the chunk to a few rows so every shard spans many chunks, in every layout, and check the
rows against NumPy.  The memory tests load a shard in a fresh interpreter and compare its peak
RSS with the shard's bytes and the file's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import child_env, mpirun, summary, write_job

from flegel.data import DataError, files, load_shard, partition_rows
from flegel.data.formats.npy import npy_array
from flegel.data.sources import file_spec

MiB = 1 << 20


def _rows(n: int, shard: int, n_shards: int, partition: str) -> np.ndarray:
    return np.array(partition_rows(n, shard, n_shards, partition), dtype=np.int64)


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 40 bytes: a few rows, so shards span many chunks and rows straddle them."""
    monkeypatch.setattr(files, "BLOCK_BYTES", 40)


@pytest.mark.parametrize("partition", ["strided", "contiguous"])
@pytest.mark.parametrize("n_shards", [1, 3, 4])
@pytest.mark.parametrize("order", ["C", "F"])
def test_chunked_reads_match_numpy(tmp_path: Path, tiny_chunks: None, partition: str,
                                   n_shards: int, order: str) -> None:
    rng = np.random.default_rng(3)
    X = np.asarray(rng.integers(-50, 50, (37, 6)), dtype=np.float32, order=order)
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "s.npz", X=X)  # stored member: read through the map
    np.savez_compressed(tmp_path / "c.npz", X=X)  # compressed member: read as a stream
    for name in ("x.npy", "s.npz", "c.npz"):
        for s in range(n_shards):
            rows = _rows(37, s, n_shards, partition)
            spec = {"path": name, "partition": partition}
            got, y = load_shard(spec, s, n_shards, tmp_path)
            assert got.dtype == np.float64 and got.flags.c_contiguous and y is None
            np.testing.assert_array_equal(got, X[rows], err_msg=f"{name} shard {s}")
            # The label column is split off chunk by chunk; the others keep their order.
            got, y = load_shard({**spec, "label_column": 2}, s, n_shards, tmp_path)
            np.testing.assert_array_equal(got, np.delete(X[rows], 2, axis=1))
            np.testing.assert_array_equal(y, X[rows, 2].astype(np.int64))


@pytest.mark.parametrize("partition", ["strided", "contiguous"])
def test_chunked_reads_of_trailing_dimensions(tmp_path: Path, tiny_chunks: None,
                                              partition: str) -> None:
    """A (n, 2, 3) Fortran-order array: each stored run is one position of the trailing index,
    and lands in the column of that index's C order."""
    cube = np.asfortranarray(np.arange(23 * 6, dtype=np.int16).reshape(23, 2, 3))
    np.save(tmp_path / "f.npy", cube)
    np.savez_compressed(tmp_path / "f.npz", X=cube)
    flat = cube.reshape(23, 6)  # C order of the trailing index
    for name in ("f.npy", "f.npz"):
        for s in range(3):
            got, _ = load_shard({"path": name, "partition": partition}, s, 3, tmp_path)
            np.testing.assert_array_equal(got, flat[_rows(23, s, 3, partition)])


def test_truncated_file_names_the_row(tmp_path: Path) -> None:
    """A mapped array whose file is shorter than its header says (here: it shrank after the
    header was read) fails with the row where the data ends, not a failed ``mmap``."""
    np.save(tmp_path / "x.npy", np.ones((10, 4)))
    fs = file_spec({"path": "x.npy"}, tmp_path)
    arr = npy_array(fs, fs.path)
    raw = fs.path.read_bytes()
    fs.path.write_bytes(raw[: len(raw) - 3 * 32 - 5])  # 6 full rows of 32 bytes, and a bit
    with pytest.raises(DataError, match=r"x\.npy.*truncated: data ends at row 6, expected 10"):
        arr.read_rows(fs, range(0, 10, 2))


# --------------------------------------------------------------------------------------------
# Peak memory of a load, in a fresh interpreter
# --------------------------------------------------------------------------------------------

_LOAD = """
import json, sys
import numpy as np
from flegel.data import load_shard
from flegel.runtime.peak_memory import peak_rss_mib
spec, shard, n_shards, base = json.loads(sys.argv[1])
load_shard({**spec, "limit": 10}, shard, n_shards, base)  # imports, caches: the baseline
before = peak_rss_mib()
X, y = load_shard(spec, shard, n_shards, base)
print(json.dumps({"before": before, "after": peak_rss_mib(), "shard": X.nbytes / 2**20}))
"""


def _load_peak(spec: dict, shard: int, n_shards: int, base: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", _LOAD,
                           json.dumps([spec, shard, n_shards, str(base)])],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 MiB of float64 rows (12 columns), written a slab at a time."""
    path = tmp_path_factory.mktemp("mem") / "big.npy"
    n = 96 * MiB // (12 * 8)
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, 12))
    for i in range(0, n, 1 << 18):
        x[i:i + (1 << 18)] = np.arange(i, min(n, i + (1 << 18)))[:, None] % 7
    x.flush()
    del x
    return path


@pytest.mark.parametrize("partition", ["strided", "contiguous"])
@pytest.mark.parametrize("label", [False, True])
def test_load_holds_the_shard_not_the_file(big_file: Path, partition: str, label: bool) -> None:
    """Shard 1 of 4 is 24 MiB of a 96 MiB file.  Reading it grows the peak RSS by about the
    shard and one 8 MiB chunk: mapping the whole file (what strided loads did) would add the
    file's 96 MiB; splitting a label column off a whole-shard copy would add another shard."""
    spec = {"path": big_file.name, "partition": partition}
    if label:
        spec["label_column"] = 0
    got = _load_peak(spec, 1, 4, big_file.parent)
    grew = got["after"] - got["before"]
    assert got["shard"] > 20
    # The shard is really resident (the measurement sees it) ...
    assert grew > 0.8 * got["shard"], got
    # ... and little else: at most the shard plus two chunks.
    assert grew < got["shard"] + 2 * files.BLOCK_BYTES / MiB, got


# --------------------------------------------------------------------------------------------
# The summary reports peak RSS per rank
# --------------------------------------------------------------------------------------------


@pytest.mark.mpi
def test_summary_reports_peak_rss(tmp_path: Path) -> None:
    n, d = 40_000, 25  # 8 MB of float64 rows: 4 MB per worker
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((n, d)))
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 4},
                    data={"path": "x.npy"}, workers=2, sync={"model": "bsp"},
                    stop={"max_iterations": 2}, output={"trace_points": 0})
    mpirun(job, 2, tmp_path / "out", timeout=180)
    s = summary(tmp_path / "out")
    shard_mib = n * d * 8 / 2 / MiB
    assert [w["rank"] for w in s["per_worker"]] == [1, 2]
    for w in s["per_worker"]:
        # MiB, not KiB or bytes: at least the shard, far below a GiB per rank.
        assert shard_mib < w["peak_rss_mib"] < 1024, w
    assert 0 < s["master_peak_rss_mib"] < 1024
