"""deploy/slurm.sbatch under a real Slurm (issue 20).

The distribution's slurmctld, slurmd and munge, started for this module on this host alone
(tests/slurm_local.py), run the batch script with ``sbatch --wait`` on a tiny job both ways
it starts its ranks -- ``srun --mpi=pmi2`` (Slurm's PMI2 wires MPICH's ranks into one job)
and the ``mpiexec`` fallback (MPICH's hydra over a hostfile of the allocation; under Slurm
hydra starts its proxy with srun) -- and check the run directory against the same job
under a plain ``mpiexec``.  Then what a user does next: ``scancel --signal=TERM`` and a
plain ``scancel`` (θ saved, nothing left: no process, no MPICH segment in /dev/shm), a
batch script of just ``flegel run``, and ``srun --mpi=none`` (a clear line, not a job per
task).

Needs root and the packages (``.ci/run`` installs them when it runs as root); skips with
the reason otherwise.  The cluster is stopped, and every process it started ended, when the
module is done.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests import slurm_local
from tests.conftest import ROOT, child_env, mpirun, summary, write_job

pytestmark = [pytest.mark.cluster, pytest.mark.mpi]

#: Tasks of the small job: the master and 2 workers (the job file says 1: the ranks decide).
TASKS = 3

#: Slurm's KillWait here: seconds between a cancelled job's SIGTERM and SIGKILL.
KILL_WAIT_S = slurm_local.KILL_WAIT_S

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


def _submit_env(slurm: slurm_local.LocalSlurm, tmp_path: Path, launch: str) -> dict[str, str]:
    """The environment sbatch passes on to the job: flegel importable, this Python."""
    if launch == "srun" and "pmi2" not in slurm.mpi_plugins():
        pytest.skip("this Slurm's srun has no pmi2 plugin (srun --mpi=list)")
    env = slurm.env
    env.update({k: v for k, v in child_env().items() if k == "PYTHONPATH" or k.endswith(
        "_NUM_THREADS")})
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # mpiexec beside python
    env.update(FLEGEL_LAUNCH=launch, FLEGEL_PYTHON=sys.executable, TMPDIR=str(tmp_path))
    return env


def _batch(tmp_path: Path, job: Path, out: Path) -> list[str]:
    """sbatch's arguments: the script's #SBATCH lines ask for 17 tasks on 4 nodes, these
    override them for this one node (--overcommit: more tasks than CPUs; waiting ranks
    sleep).  5 minutes: the script's --signal=TERM@60 comes at 3 minutes at the earliest,
    long after any job here is over."""
    return ["--nodes=1", f"--ntasks={TASKS}", "--overcommit", "--time=5",
            f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}",
            str(ROOT / "deploy" / "slurm.sbatch"), str(job), "--out", str(out)]


def _output(tmp_path: Path, job_id: str) -> str:
    path = tmp_path / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else "(no job output)"


@pytest.mark.parametrize("launch", ["srun", "mpiexec"])
def test_batch_script_runs_under_slurm(slurm: slurm_local.LocalSlurm, job: Path,
                                       reference: Path, tmp_path: Path, launch: str) -> None:
    env = _submit_env(slurm, tmp_path, launch)
    out = tmp_path / "run"
    proc = slurm.sbatch_wait(_batch(tmp_path, job, out), cwd=tmp_path, timeout=JOB_S, env=env)
    job_id = proc.stdout.strip().split(";")[0]
    text = _output(tmp_path, job_id)
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


def test_flegel_run_alone_in_a_batch_script_starts_its_ranks(
        slurm: slurm_local.LocalSlurm, job: Path, tmp_path: Path) -> None:
    """A batch script of just ``flegel run`` (deploy/README.md): not under a launcher, it
    starts the job's ``workers`` + 1 ranks itself with MPICH's mpiexec, which starts its
    proxy with srun, as a step of the job."""
    env = _submit_env(slurm, tmp_path, "mpiexec")
    out = tmp_path / "run"
    proc = slurm.sbatch_wait(
        [f"--ntasks={TASKS}", "--overcommit", "--time=5", f"--output={tmp_path}/slurm-%j.out",
         "--wrap", f"{sys.executable} -m flegel run {job} --out {out}"],
        cwd=tmp_path, timeout=JOB_S, env=env)
    job_id = proc.stdout.strip().split(";")[0]
    context = f"{proc.stderr}\n{_output(tmp_path, job_id)}\n{slurm.logs()}"
    assert proc.returncode == 0, context
    s = summary(out)
    assert s["workers"] == 1 and [w["rank"] for w in s["per_worker"]] == [1], context
    assert re.search(rf"launch task StepId={job_id}\.0 ",
                     (slurm.folder / "slurmd.out").read_text()), context


def _running(slurm: slurm_local.LocalSlurm, tmp_path: Path, launch: str
             ) -> tuple[str, Path, Callable[[], str]]:
    """A job that trains until stopped (60 s at most), submitted and training: its ID,
    run directory, and what to show when a check fails.  ``launch``: the batch script's
    ``srun`` or ``mpiexec``, or ``alone`` (a batch script of just ``flegel run``)."""
    env = _submit_env(slurm, tmp_path, "mpiexec" if launch == "alone" else launch)
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 4},
                    data={"source": "synthetic", "kind": "blobs", "n_points": 8000,
                          "n_features": 4, "centers": 4, "seed": 2},
                    workers=TASKS - 1, sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": None, "tolerance": None, "max_time_s": 60},
                    output={"progress": "none"})
    out = tmp_path / "run"
    args = _batch(tmp_path, job, out) if launch != "alone" else [
        f"--ntasks={TASKS}", "--overcommit", "--time=5", f"--output={tmp_path}/slurm-%j.out",
        "--wrap", f"{sys.executable} -m flegel run {job} --out {out}"]
    job_id = slurm.sbatch(args, cwd=tmp_path, env=env)

    def context() -> str:
        return f"--- job {job_id}'s output:\n{_output(tmp_path, job_id)}\n{slurm.logs()}"

    # RunWriter creates events.jsonl once θ⁰ exists; a moment later the clock runs.
    deadline = time.monotonic() + JOB_S
    while not (out / "events.jsonl").exists():
        assert job_id in slurm.queued() and time.monotonic() < deadline, context()
        time.sleep(0.1)
    time.sleep(0.5)
    return job_id, out, context


def _gone(slurm: slurm_local.LocalSlurm, job_id: str, context: Callable[[], str]) -> float:
    """Seconds until the job has left the queue and none of its processes is left."""
    t0 = time.monotonic()
    while job_id in slurm.queued() or slurm.job_processes():
        assert time.monotonic() - t0 < KILL_WAIT_S + 10, (
            f"left: {slurm.job_processes()}\n{context()}")
        time.sleep(0.1)
    return time.monotonic() - t0


def _segments(slurm: slurm_local.LocalSlurm) -> set[Path]:
    """MPICH's shared-memory files the running job's processes map."""
    found = set()
    for pid in slurm.job_processes():
        try:
            lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
        except OSError:
            continue
        found |= {Path(f[5]) for f in (ln.split(maxsplit=5) for ln in lines)
                  if len(f) == 6 and f[5].startswith("/dev/shm/mpich_")}
    return found


def _theta_saved(out: Path, text: str, context: Callable[[], str]) -> None:
    """The master saved θ on SIGTERM and said so in one line."""
    assert (out / "model.json").exists(), context()
    model = json.loads((out / "model.json").read_text())
    assert model["stop_reason"] == "interrupted", context()
    with np.load(out / "model.npz") as theta:
        assert np.isfinite(theta["centers"]).all() and theta["centers"].shape == (4, 4)
    assert (f"flegel: interrupted by SIGTERM; last θ (iteration {model['theta_version']}) "
            f"saved in {out}/model.npz") in text, context()


@pytest.mark.parametrize("launch", ["srun", "mpiexec"])
def test_scancel_signal_term_saves_theta_and_ends_every_rank(
        slurm: slurm_local.LocalSlurm, tmp_path: Path, launch: str) -> None:
    """``scancel --signal=TERM`` (what deploy/README.md says, and what the script's
    ``--signal=TERM@60`` sends before the time limit) signals the job's steps once: every
    rank (srun's tasks, or the ranks under hydra's proxy, which ignores it) gets SIGTERM,
    the master saves θ and ends the job, and nothing of it is left."""
    job_id, out, context = _running(slurm, tmp_path, launch)
    segments = _segments(slurm)
    slurm.scancel(job_id, "--signal=TERM")
    _gone(slurm, job_id, context)
    # MPI_Abort skipped MPI_Finalize; the master removed MPICH's file itself.
    assert segments and not [p for p in segments if p.exists()], context()
    _theta_saved(out, _output(tmp_path, job_id), context)


@pytest.mark.parametrize("launch", ["srun", "mpiexec", "alone"])
def test_plain_scancel_saves_theta_and_ends_every_rank(
        slurm: slurm_local.LocalSlurm, tmp_path: Path, launch: str) -> None:
    """A plain ``scancel`` (or the time limit without ``--signal``) sends SIGTERM to every
    process of the job at once, then SIGKILL after KillWait.  Each rank gets it more than
    once -- from Slurm, and again from hydra's ``mpiexec`` or ``srun`` (and the launcher
    when ``flegel run`` starts the ranks) -- and takes the copies for the same stop
    (flegel.runtime.lifetime.SAME_STOP_S): the master saves θ, the job ends, nothing is
    left.  Before that rule the copy ended the rank at once: θ was lost in 3 of 4 runs."""
    job_id, out, context = _running(slurm, tmp_path, launch)
    segments = _segments(slurm)
    slurm.scancel(job_id)
    took = _gone(slurm, job_id, context)
    assert segments and not [p for p in segments if p.exists()], context()
    _theta_saved(out, _output(tmp_path, job_id), context)
    print(f"plain scancel ({launch}): gone in {took:.1f} s, θ saved")


def test_srun_without_pmi_says_how_to_start_the_ranks(slurm: slurm_local.LocalSlurm,
                                                      job: Path, tmp_path: Path) -> None:
    """``srun --mpi=none``: each task is an MPI world of one; each says what to use instead
    of starting ranks of its own (which ``flegel run`` alone would advise)."""
    env = _submit_env(slurm, tmp_path, "mpiexec")
    proc = slurm.srun([f"--ntasks={TASKS}", "--overcommit", "--time=5", "--mpi=none",
                       sys.executable, "-m", "flegel", "run", str(job), "--out",
                       str(tmp_path / "run")], cwd=tmp_path, env=env, timeout=JOB_S)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("flegel:")]
    assert proc.returncode == 1 and lines == TASKS * [
        f"flegel: needs at least 2 MPI ranks (a master and a worker); srun started {TASKS} "
        "tasks but MPI did not join them: start them with 'srun --mpi=pmi2' (see 'srun "
        "--mpi=list')"], proc.stderr
    assert not (tmp_path / "run").exists()
