"""FSP data migration (FSP paper Section 4.3) under real mpirun.

Four workers on data sorted by cluster in contiguous partitions, worker 1 an injected
straggler: migration moves points off it, every point ends on exactly one worker, and the
model still fits.  Failures while points are moving -- on the sending straggler or on a
fast worker receiving them -- end the whole job with the failing rank's traceback, and no
process is left behind.

The planner, the store's admission and the in-process runs are in
tests/test_balance_planner.py, tests/test_migration_store.py and
tests/test_models_inprocess.py.
"""

from __future__ import annotations

import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.datasets import make_blobs

from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi

N, WORKERS, K = 40_000, 4, 5
STRAGGLER = 1
STRAGGLERS = [{"pattern": "injected", "tau_ms": 32, "every": 1000, "workers": [STRAGGLER]}]


def sorted_blobs(folder: Path, n: int, k: int) -> float:
    """Write ``x.npy``, blobs sorted by cluster (each contiguous partition holds one or two
    clusters), and ``c0.npy``, initial centroids, into ``folder``; return scikit-learn's
    Lloyd inertia from those centroids."""
    x, y = make_blobs(n, n_features=6, centers=k, cluster_std=1.0, random_state=4)
    x = x[np.argsort(y, kind="stable")]
    c0 = x[np.random.default_rng(1).choice(n, k, replace=False)]
    np.save(folder / "x.npy", x)
    np.save(folder / "c0.npy", c0)
    return float(SKKMeans(k, init=c0, n_init=1, algorithm="lloyd", tol=0).fit(x).inertia_)


@pytest.fixture(scope="module")
def sorted_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """:func:`sorted_blobs` in a folder of its own."""
    tmp = tmp_path_factory.mktemp("migration")
    return tmp, sorted_blobs(tmp, N, K)


def _job(folder: Path, mode: str, algorithm: str = "kmeans", **params: Any) -> Path:
    return write_job(folder / f"job-{mode}.yaml", algorithm=algorithm,
                     params={"n_clusters": K, "init": "c0.npy", **params},
                     data={"path": "x.npy", "partition": "contiguous"}, workers=WORKERS,
                     sync={"model": "fsp", "interval": "multistage",
                           "migration": {"mode": mode}},
                     stragglers=STRAGGLERS,
                     # A time stop only: a tolerance stop could come before the balance
                     # monitor has the barriers it needs to act (seen once in CI).
                     stop={"max_iterations": 100_000, "tolerance": None, "max_time_s": 3},
                     output={"progress": "none"})


def _check_migrated_run(out: Path, ref: float) -> dict[str, Any]:
    s = summary(out)
    mig = s["migration"]
    assert mig["points_moved"] > 0, (mig, s["stop_reason"], s["iterations"])
    # A point may move more than once, so the fraction may pass 1.
    assert mig["rounds"] >= 1 and mig["bytes_fraction"] > 0
    # Every point ends on exactly one worker.
    per = {w["rank"]: w for w in s["per_worker"]}
    assert sum(w["n_points"] for w in per.values()) == N
    assert s["n_points"] == N
    # The straggler gave points away.
    assert per[STRAGGLER]["n_points"] < N // WORKERS
    # Traversals of every point wherever it was trained: the summary's spread is the
    # workers' (each point counted once, on the worker holding it at the end) ...
    pp = s["point_passes"]
    assert pp["min"] == min(w["point_passes"]["min"] for w in per.values())
    assert pp["max"] == max(w["point_passes"]["max"] for w in per.values())
    assert pp["min"] <= pp["mean"] <= pp["max"]
    # ... and no point was left to the straggler's pace (FSP paper Section 4.1, from idle
    # CPU to idle data): the least-trained one traversed many times more often than the
    # straggler's processing could have traversed its own shard.
    assert pp["min"] > 5 * per[STRAGGLER]["points"] / (N // WORKERS), (pp, per[STRAGGLER])
    # The model still fits: within a few percent of Lloyd's inertia from the same start.
    assert s["final_objective"] == pytest.approx(ref, rel=0.03)
    # Barrier events carry the points held and in flight per worker.
    ev = [e for e in events(out) if "workers" in e]
    assert ev and all("held" in e["workers"] and "in_flight" in e["workers"] for e in ev)
    first = ev[0]["workers"]
    assert first["held"] == [N // WORKERS] * WORKERS and first["in_flight"] == [0] * WORKERS
    straggler = first["rank"].index(STRAGGLER)
    assert min(e["workers"]["held"][straggler] for e in ev) < N // WORKERS
    return s


def test_async_migration_moves_points_off_the_straggler(sorted_data: tuple[Path, float]
                                                        ) -> None:
    folder, ref = sorted_data
    out = folder / "run-async"
    mpirun(_job(folder, "async"), WORKERS, out, timeout=120)
    s = _check_migrated_run(out, ref)
    assert s["migration"]["mode"] == "async"


def test_sync_migration_moves_points_at_the_barrier(sorted_data: tuple[Path, float]) -> None:
    folder, ref = sorted_data
    out = folder / "run-sync"
    mpirun(_job(folder, "sync"), WORKERS, out, timeout=60)
    s = _check_migrated_run(out, ref)
    assert s["migration"]["mode"] == "sync"


# ------------------------------------------------------------------ faults

FAULTY = textwrap.dedent('''
    """K-means that fails on purpose once data migration is under way."""
    import os
    from pathlib import Path

    import numpy as np

    from flegel.algorithms.kmeans import KMeans

    RANK = int(os.environ.get("PMI_RANK", "-1"))


    class Faulty(KMeans):
        """``side="source"``: rank ``fail_rank`` raises at its first block after some worker
        trained points migrated to it.  ``side="target"``: a worker other than ``fail_rank``
        raises at its first block holding points that migrated to it."""

        def __init__(self, n_clusters=8, init="kmeans++", side="source", fail_rank=1,
                     flag="migrated"):
            super().__init__(n_clusters, init)
            self.side, self.fail_rank, self.flag = side, fail_rank, flag

        def init_state(self, n, n_features):
            # Each point remembers the worker it started on, and travels with it.
            return {**super().init_state(n, n_features),
                    "home": np.full(n, RANK, dtype=np.int64)}

        def update_block(self, block, theta, t):
            if (block.state["home"] != RANK).any():
                Path(self.flag).touch()
                if self.side == "target" and RANK != self.fail_rank:
                    raise RuntimeError(f"deliberate failure on rank {RANK}, receiving points")
            if (self.side == "source" and RANK == self.fail_rank
                    and os.path.exists(self.flag)):
                raise RuntimeError(f"deliberate failure on rank {RANK}, sending points")
            return super().update_block(block, theta, t)
''')


def _flegel_processes(job: Path) -> list[str]:
    proc = subprocess.run(["pgrep", "-af", f"flegel run {job}"], capture_output=True,
                          text=True)
    return [ln for ln in proc.stdout.splitlines() if "pgrep" not in ln]


@pytest.mark.parametrize("side", ["source", "target"])
def test_failure_during_migration_ends_the_job(sorted_data: tuple[Path, float], tmp_path: Path,
                                               side: str) -> None:
    folder, _ = sorted_data
    for name in ("x.npy", "c0.npy"):
        (tmp_path / name).symlink_to(folder / name)
    (tmp_path / "faultymod.py").write_text(FAULTY)
    flag = tmp_path / "migrated"
    job = _job(tmp_path, "async", algorithm="faultymod:Faulty", side=side,
               fail_rank=STRAGGLER, flag=str(flag))
    # Small windows: the straggler is still sending when the failure comes.
    start = time.monotonic()
    proc = mpirun(job, WORKERS, tmp_path / "run", "sync.migration.window=256",
                  "stop.max_time_s=20", timeout=90, check=False)
    took = time.monotonic() - start
    assert flag.exists(), "no migrated point was ever trained: migration did not start"
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    want = "sending" if side == "source" else "receiving"
    line = next(ln for ln in proc.stderr.splitlines()
                if ln.startswith("RuntimeError: deliberate failure on rank"))
    assert want in line, proc.stderr
    rank = int(line.split("deliberate failure on rank ")[1].split(",")[0])
    assert (rank == STRAGGLER) == (side == "source")
    assert f"flegel: rank {rank} (worker) failed" in proc.stderr
    assert took < 60
    time.sleep(0.5)
    assert _flegel_processes(job) == []
