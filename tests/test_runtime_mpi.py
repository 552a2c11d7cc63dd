"""The runtime under real mpirun: user algorithms, failures, launch modes, idle CPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans
from sklearn.datasets import make_blobs

from tests.conftest import ROOT, child_env, events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi

USER_ALGO = textwrap.dedent('''
    """A user's K-means that implements only update_data_point (no update_block)."""
    import os

    import numpy as np

    from flegel import Algorithm


    class PointMeans(Algorithm):
        def __init__(self, k=3, fail_rank=None, fail_after=0):
            super().__init__()
            self.k, self.fail_rank, self.fail_after = k, fail_rank, fail_after
            self.calls = 0

        def init_parameter(self, info):
            return {"c": np.load(os.path.join(info.base_dir, "c0.npy")),
                    "s": np.zeros((self.k, info.n_features)), "n": np.zeros(self.k)}

        def init_state(self, n, d):
            return {"label": np.full(n, -1), "loss": np.zeros(n)}

        def update_data_point(self, point, state, theta, t):
            self.calls += 1
            if (self.fail_rank is not None and os.environ.get("PMI_RANK") == str(self.fail_rank)
                    and self.calls > self.fail_after):
                raise RuntimeError("deliberate failure in update_data_point")
            d = ((theta["c"] - point) ** 2).sum(1)
            j = int(d.argmin())
            s = np.zeros_like(theta["s"])
            n = np.zeros_like(theta["n"])
            old = int(state["label"])
            if old != j:
                s[j] += point
                n[j] += 1
                if old >= 0:
                    s[old] -= point
                    n[old] -= 1
                state["label"] = j
            obj = float(d[j] - state["loss"])
            state["loss"] = d[j]
            return {"s": s, "n": n, "objective": obj}

        def update_parameter(self, agg, theta):
            s, n = theta["s"] + agg["s"], theta["n"] + agg["n"]
            c = theta["c"].copy()
            c[n > 0] = s[n > 0] / n[n > 0, None]
            return {"c": c, "s": s, "n": n}

        def evaluate(self, theta, block):
            d = ((block.x[:, None, :] - theta["c"][None]) ** 2).sum(2)
            return float(d.min(1).sum())
''')


def _user_job(tmp_path, **params):
    (tmp_path / "usermeans.py").write_text(USER_ALGO)
    x, _ = make_blobs(3000, n_features=3, centers=3, random_state=1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "c0.npy", x[:3])
    ref = SKKMeans(3, init=x[:3], n_init=1, algorithm="lloyd", tol=0).fit(x).inertia_
    job = write_job(tmp_path / "job.yaml", algorithm="usermeans:PointMeans",
                    params={"k": 3, **params}, data={"path": "x.npy"}, workers=2,
                    sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": 100, "tolerance": 1e-7},
                    output={"progress": "none"})
    return job, ref


def test_user_algorithm_with_only_update_data_point(tmp_path):
    job, ref = _user_job(tmp_path)
    out = tmp_path / "run"
    mpirun(job, 2, out)
    s = summary(out)
    assert s["final_objective"] == pytest.approx(ref, rel=5e-3)
    assert s["converged"]


@pytest.mark.parametrize("fail_after", [0, 2000])
def test_worker_exception_ends_job_promptly(tmp_path, fail_after):
    # fail_after=0: at the first point; 2000: mid-run, after some barriers.
    job, _ = _user_job(tmp_path, fail_rank=2, fail_after=fail_after)
    start = time.monotonic()
    proc = mpirun(job, 2, tmp_path / "run", timeout=60, check=False)
    took = time.monotonic() - start
    assert proc.returncode != 0
    assert "rank 2" in proc.stderr and "deliberate failure" in proc.stderr
    assert "Traceback" in proc.stderr
    assert took < 30


# An exception on the master before training (init_parameter): the "exception on the
# master" row of tests/test_fault_matrix.py.


def test_self_launch_without_mpirun(tmp_path):
    """`flegel run job.yaml` starts workers + 1 ranks itself."""
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 4},
                    data={"source": "synthetic", "kind": "blobs", "n_points": 20000,
                          "n_features": 5, "centers": 4, "seed": 2},
                    workers=3, sync={"model": "bsp", "batch": "auto"},
                    output={"progress": "plain"})
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(job), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=child_env(),
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    s = summary(out)
    assert s["workers"] == 3 and s["iterations"] >= 1
    assert (out / "job.yaml").exists() and (out / "model.json").exists()
    assert "done" in proc.stdout


def test_outputs_and_time_to_target(tmp_path):
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 8},
                    data={"source": "synthetic", "kind": "blobs", "n_points": 20000,
                          "n_features": 8, "centers": 8, "seed": 3},
                    workers=2, sync={"model": "bsp", "batch": 2000},
                    stop={"max_iterations": 200, "tolerance": None, "target_objective": 1e12},
                    output={"progress": "none"},
                    # The target is met on an exact evaluation, which the default 5% budget
                    # first allows after ~20 passes; tolerance 0 could stop the run as
                    # "converged" before that on a slow machine (CI, stop 25).  Half the
                    # time lets the first evaluation start after one pass.
                    runtime={"exact_budget": 0.5})
    out = tmp_path / "run"
    mpirun(job, 2, out)
    s = summary(out)
    for key in ("algorithm", "sync", "workers", "iterations", "final_objective",
                "wall_time_s", "converged", "time_to_target_s"):
        assert key in s
    assert s["time_to_target_s"] is not None and s["stop_reason"] == "target"
    assert s["converged"] and s["time_to_target_s"] <= s["wall_time_s"]
    ev = events(out)
    assert {"t", "time_s", "objective", "barrier_s", "spread_s", "workers"} <= set(ev[0])
    assert {"points", "compute_s", "wait_s", "passes"} <= set(ev[0]["workers"])
    assert ev[0]["workers"]["points"] == [2000, 2000]
    model = np.load(out / "model.npz")
    assert set(model.files) == {"centers", "counts"}


def test_idle_master_and_waiting_workers_do_not_spin(tmp_path):
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 8},
                    data={"source": "synthetic", "kind": "blobs", "n_points": 500000,
                          "n_features": 16, "centers": 8, "seed": 3},
                    workers=2, sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": 30, "tolerance": None},
                    output={"progress": "none"},
                    stragglers=[{"pattern": "persistent", "factor": 3, "workers": [2]}])
    out = tmp_path / "run"
    mpirun(job, 2, out)
    s = summary(out)
    assert s["iterations"] == 30 and s["wall_time_s"] > 0.3
    # The idle master must not spin: a spinning poll uses the whole core (>= 0.5 even when
    # it shares one); polling with 0.1-1 ms sleeps measured 2-5.1% on these shared 2-core
    # machines (5.1% in a CI run beside a busy suite), so the bound is 10%, as for workers.
    assert s["master_idle_fraction"] > 0.5
    assert s["master_idle_cpu_fraction"] < 0.1
    # Worker 1 waits at every barrier for the slowed worker 2, without burning its core: a
    # spinning wait uses the whole core; polling with sleeps measured 4-5.5% of it on these
    # shared 2-core machines (before the architecture change as after), so the bound is 10%.
    w1, w2 = s["per_worker"]
    assert w1["wait_s"] > 0.3 * s["wall_time_s"]
    assert w1["wait_cpu_fraction"] < 0.1
    assert s["stragglers"] == [{"rank": 2, "pattern": "persistent", "factor": 3,
                                "lost_s": pytest.approx(w2["slowed_s"], rel=1e-3, abs=1e-5)}]
