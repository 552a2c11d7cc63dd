"""deploy/slurm.sbatch under a real Slurm (issue 20): the distribution's slurmctld, slurmd and
munge, started for this module on this host alone (tests/slurm_local.py), run the batch
script with ``sbatch --wait`` on a tiny job both ways it starts its ranks -- ``srun
--mpi=pmi2`` (Slurm's PMI2 wires MPICH's ranks into one job) and the ``mpiexec`` fallback
(MPICH's hydra over a hostfile of the allocation; under Slurm hydra starts its proxy with
srun) -- and check the run directory against the same job under a plain ``mpiexec``.

Needs root and the packages (``.ci/run`` installs them when it runs as root); skips with
the reason otherwise.  The cluster is stopped, and every process it started ended, when the
module is done.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests import slurm_local
from tests.conftest import ROOT, child_env, mpirun, summary, write_job

pytestmark = [pytest.mark.cluster, pytest.mark.mpi]

#: Tasks of the small job: the master and 2 workers (the job file says 1: the ranks decide).
TASKS = 3

#: Seconds one batch job may take, queueing included (a tiny job takes a few).
JOB_S = 90


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_local.LocalSlurm]:
    reason = slurm_local.missing()
    if reason:
        pytest.skip(reason)
    cluster = slurm_local.LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        left = cluster.leftovers()
        assert not left, f"processes of the local Slurm left running: {left}"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    return write_job(folder / "job.yaml", algorithm="kmeans", params={"n_clusters": 3},
                     data={"source": "synthetic", "kind": "blobs", "n_points": 2000,
                           "n_features": 3, "centers": 3, "seed": 1},
                     workers=1, sync={"model": "bsp"}, stop={"max_iterations": 5},
                     output={"progress": "none"})


@pytest.fixture(scope="module")
def reference(job: Path) -> Path:
    """The same job under a plain mpiexec on this host, with as many ranks."""
    out = job.parent / "reference"
    mpirun(job, TASKS - 1, out)
    return out


@pytest.mark.parametrize("launch", ["srun", "mpiexec"])
def test_batch_script_runs_under_slurm(slurm: slurm_local.LocalSlurm, job: Path,
                                       reference: Path, tmp_path: Path, launch: str) -> None:
    if launch == "srun" and "pmi2" not in slurm.mpi_plugins():
        pytest.skip("this Slurm's srun has no pmi2 plugin (srun --mpi=list)")
    env = slurm.env
    env.update({k: v for k, v in child_env().items() if k == "PYTHONPATH" or k.endswith(
        "_NUM_THREADS")})
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # mpiexec beside python
    env.update(FLEGEL_LAUNCH=launch, FLEGEL_PYTHON=sys.executable, TMPDIR=str(tmp_path))
    out = tmp_path / "run"
    # The script's #SBATCH lines ask for 17 tasks on 4 nodes; the command line overrides
    # them for this one node.  --overcommit: more tasks than CPUs (waiting ranks sleep).
    proc = slurm.sbatch_wait(
        ["--nodes=1", f"--ntasks={TASKS}", "--overcommit", "--time=2",
         f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}",
         str(ROOT / "deploy" / "slurm.sbatch"), str(job), "--out", str(out)],
        cwd=tmp_path, timeout=JOB_S, env=env)
    job_id = proc.stdout.strip().split(";")[0]
    output = (tmp_path / f"slurm-{job_id}.out")
    text = output.read_text() if output.exists() else "(no job output)"
    context = (f"sbatch exited {proc.returncode}: {proc.stderr}\n--- job {job_id}'s output:\n"
               f"{text}\n{slurm.logs()}")
    assert proc.returncode == 0, context
    assert f"run directory: {out}" in text, context

    s = summary(out)
    # One rank per task: the master and TASKS - 1 workers, although the job file says 1.
    assert s["workers"] == TASKS - 1, context
    assert [w["rank"] for w in s["per_worker"]] == list(range(1, TASKS)), context
    assert s["stop_reason"] == summary(reference)["stop_reason"]
    with np.load(out / "model.npz") as got, np.load(reference / "model.npz") as want:
        assert sorted(got.files) == sorted(want.files)
        for name in want.files:  # BSP: bit for bit the plain mpiexec run's model
            assert np.array_equal(got[name], want[name]), name
    # The ranks were a step of this job: srun's own, or the one hydra started its proxy in.
    assert re.search(rf"launch task StepId={job_id}\.0 ",
                     (slurm.folder / "slurmd.out").read_text()), context
    if launch == "mpiexec":
        hosts = tmp_path / f"flegel-hosts.{job_id}"
        assert hosts.read_text() == f"{slurm.node}:{TASKS}\n"
