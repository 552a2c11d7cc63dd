"""Checkpoint and resume under real MPI launches (issue 13, item 7).

* BSP full batch: a run whose launcher is killed with SIGKILL mid-training, resumed with
  ``flegel run --resume``, ends with the same model, bit for bit, and the same iteration count
  as the same job run without interruption (the job is deterministic: docs/determinism.md).
* FSP (timing-dependent, so close rather than identical): a run stopped by max_iterations and
  resumed with a larger limit continues from its checkpoint to about the uninterrupted model.
* Refusals, each one line and exit 2: no checkpoint in RUN_DIR, a corrupt manifest, another
  number of workers.

The in-process logic (the quiescent point under every model, each part's state, the files)
is tests/test_checkpoint.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from flegel.cli.launch import find_mpiexec
from tests.conftest import ROOT, child_env, summary, write_job

pytestmark = pytest.mark.mpi

#: BSP full batch GMM; a persistent straggler slows worker 2 so that the kill lands mid-run
#: (it only sleeps: BSP full batch computes the same whatever the timing).
BSP_JOB = {"algorithm": "gmm", "params": {"n_components": 3, "covariance_type": "diag"},
           "data": {"source": "synthetic", "kind": "blobs", "n_points": 4000, "n_features": 4,
                    "centers": 3, "cluster_std": 3.0, "seed": 3},
           "workers": 2, "seed": 7, "sync": {"model": "bsp", "batch": "full"},
           "stop": {"max_iterations": 24, "tolerance": None},
           "stragglers": [{"pattern": "persistent", "workers": [2], "factor": 40.0}],
           "output": {"progress": "none"}}


def _flegel(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flegel", *args], capture_output=True,
                          text=True, timeout=timeout, env=child_env(), cwd=ROOT)


def _model(out: Path) -> dict[str, np.ndarray]:
    with np.load(out / "model.npz") as archive:
        return {k: archive[k] for k in archive.files}


def _manifest(out: Path) -> dict | None:
    try:
        return json.loads((out / "checkpoint" / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _left(tag: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-af", str(tag)], capture_output=True, text=True)
    return [ln for ln in found.stdout.splitlines() if "pgrep" not in ln]


def test_bsp_resumed_after_sigkill_gives_the_same_model(tmp_path):
    job = write_job(tmp_path / "job.yaml", **BSP_JOB)
    a, b = tmp_path / "a", tmp_path / "b"
    done = _flegel("run", str(job), "--out", str(a))
    assert done.returncode == 0, done.stderr

    proc = subprocess.Popen([sys.executable, "-m", "flegel", "run", str(job), "--out", str(b),
                             "--set", "output.checkpoint.every_iterations=1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=child_env(), cwd=ROOT)
    t0 = time.monotonic()
    while (m := _manifest(b)) is None or m["iteration"] < 6:
        if proc.poll() is not None or time.monotonic() - t0 > 90:
            proc.kill()
            pytest.fail(f"no checkpoint at iteration 6: {proc.communicate()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # nothing can be saved now but the checkpoint
    proc.communicate(timeout=10)
    t0 = time.monotonic()
    while _left(b):
        assert time.monotonic() - t0 < 10, _left(b)
        time.sleep(0.1)
    killed_at = _manifest(b)["iteration"]
    assert 6 <= killed_at < 24
    assert not (b / "summary.json").exists()

    resumed = _flegel("run", "--resume", str(b))
    assert resumed.returncode == 0, resumed.stderr
    sa, sb = summary(a), summary(b)
    assert sa["iterations"] == sb["iterations"] == 24
    ma, mb = _model(a), _model(b)
    assert set(ma) == set(mb)
    for key in ma:
        np.testing.assert_array_equal(ma[key], mb[key], err_msg=key)
    assert sa["final_objective"] == sb["final_objective"]
    assert sa["online_objective"] == sb["online_objective"]
    # The event log goes on from the checkpoint: every iteration once.
    events = [json.loads(line) for line in (b / "events.jsonl").read_text().splitlines()]
    assert [e["t"] for e in events] == list(range(1, 25))
    # Training still moved θ after the checkpoint: the comparison is not of a converged model.
    assert events[-1]["objective"] != events[killed_at - 1]["objective"]


FSP_JOB = {"algorithm": "kmeans", "params": {"n_clusters": 4},
           "data": {"source": "synthetic", "kind": "blobs", "n_points": 20000,
                    "n_features": 8, "centers": 4, "seed": 3},
           "workers": 2, "seed": 7,
           "sync": {"model": "fsp", "interval": "multistage", "probe_ms": 5},
           "stop": {"max_iterations": 40, "tolerance": None},
           "output": {"progress": "none", "checkpoint": {"every_iterations": 5}}}


def test_fsp_resumed_with_a_larger_limit_continues_to_the_same_optimum(tmp_path):
    job = write_job(tmp_path / "job.yaml", **FSP_JOB)
    a, b = tmp_path / "a", tmp_path / "b"
    assert _flegel("run", str(job), "--out", str(a)).returncode == 0
    first = _flegel("run", str(job), "--out", str(b), "--set", "stop.max_iterations=20")
    assert first.returncode == 0, first.stderr
    at = _manifest(b)["iteration"]
    assert 10 <= at < 20  # the last checkpoint before the end (none is taken at the end)

    resumed = _flegel("run", "--resume", str(b), "--set", "stop.max_iterations=40")
    assert resumed.returncode == 0, resumed.stderr
    sa, sb = summary(a), summary(b)
    assert sb["iterations"] == 40
    assert sb["final_objective"] == pytest.approx(sa["final_objective"], rel=1e-3)
    centers = np.sort(_model(b)["centers"], axis=0)
    np.testing.assert_allclose(centers, np.sort(_model(a)["centers"], axis=0), rtol=1e-2,
                               atol=1e-2)
    # The interval adjustor went on from its state: its history is the first run's, extended.
    assert len(sb["eta_history_ms"]) >= 1
    # The master's sample reached FSPV's gauge (flegel.run), before and after the resume; it
    # measures unless its floor was too dear on this host's timing of it.
    for s in (sa, sb):
        assert s["gauge_gave_up"] is None or s["gauge_gave_up"].startswith("too dear"), s
        assert (s["progress_measure"] == "gauge") == (s["gauge_gave_up"] is None)

    # Another number of workers is refused by every rank with one line, before any work.
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no MPI launcher installed")
    other = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "flegel", "run",
                            "--resume", str(b)], capture_output=True, text=True, timeout=60,
                           env=child_env(), cwd=ROOT)
    assert other.returncode == 2, other.stderr
    assert "written by 2 workers, the resumed job has 1; resume with the same number of " \
        "workers" in other.stderr
    assert "Traceback" not in other.stderr


def test_resume_refusals_name_the_file(tmp_path):
    job = write_job(tmp_path / "job.yaml", **{**BSP_JOB, "stragglers": []})
    run_dir = tmp_path / "run"
    assert _flegel("run", str(job), "--out", str(run_dir),
                   "--set", "stop.max_iterations=2").returncode == 0
    none = _flegel("run", "--resume", str(run_dir))
    assert none.returncode == 2
    assert none.stderr.strip() == (
        f"flegel: error: {run_dir}/checkpoint/manifest.json: expected a checkpoint to resume "
        "from, found none (the job writes checkpoints with output.checkpoint: {every_s: S} "
        "or {every_iterations: N}, and the first one after that interval)")
    (run_dir / "checkpoint").mkdir()
    (run_dir / "checkpoint" / "manifest.json").write_text("{\"format\": 1, ")
    corrupt = _flegel("run", "--resume", str(run_dir))
    assert corrupt.returncode == 2
    assert corrupt.stderr.startswith(f"flegel: error: {run_dir}/checkpoint/manifest.json: "
                                     "expected a checkpoint manifest (JSON), found a corrupt "
                                     "file")
    assert len(corrupt.stderr.strip().splitlines()) == 1
    both = _flegel("run", str(job), "--resume", str(run_dir))
    assert both.returncode == 2 and "expected a job file or --resume RUN_DIR" in both.stderr
