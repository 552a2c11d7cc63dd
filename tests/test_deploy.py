"""deploy/ works as written: the MPIJob, the image, the Slurm script and the hostfile.

There is no container runtime here, and these tests do not need a Slurm (tests/test_slurm.py
runs the batch script under a real one, where it can start one), so each path runs the way
it would in its place, on this machine: the MPIJob launcher's command line (the image's
entry point, then mpirun from the mpich wheel) on a tiny job in a folder laid out as the
image's home; the batch script under a simulated Slurm allocation, with an ``srun`` stand-in
that starts the tasks through MPICH's launcher and gives each the variables srun gives a
task (and, for the mpiexec path, an ``scontrol`` stand-in); the hostfile through hydra's
parser.  Every run is a real ``mpiexec`` with a timeout (hydra's fork launcher, so no ssh is
needed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flegel.cli.launch import find_mpiexec, under_mpi
from tests.conftest import ROOT, child_env, summary, write_job

DEPLOY = ROOT / "deploy"

#: Overrides that make any of the ready jobs tiny.
TINY = ["--set", "data.n_points=2000", "--set", "stop.max_iterations=5",
        "--set", "output.progress=none"]


def _mpiexec() -> str:
    found = find_mpiexec()
    if found is None:
        pytest.skip("no MPI launcher installed")
    return found


def _manifest() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "mpijob.yaml").read_text())
    return doc


def _container(spec: dict[str, Any], role: str) -> dict[str, Any]:
    containers = spec["mpiReplicaSpecs"][role]["template"]["spec"]["containers"]
    assert len(containers) == 1, role
    out: dict[str, Any] = containers[0]
    return out


def _dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _local_env(**extra: str) -> dict[str, str]:
    """The environment of a command run here: flegel importable, hydra forking locally."""
    env = child_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env["HYDRA_LAUNCHER"] = "fork"  # every "host" is this machine: no ssh
    for var in [v for v in env if v.startswith(("SLURM_", "PMI_", "PMIX_", "HYDRA_HOST"))]:
        del env[var]
    env.pop("FLEGEL_UNDER_MPI", None)
    env.update(extra)
    return env


# ------------------------------------------------------------------ the MPIJob and the image

def test_mpijob_has_every_field_the_operator_requires() -> None:
    doc = _manifest()
    assert doc["apiVersion"] == "kubeflow.org/v2beta1"
    assert doc["kind"] == "MPIJob"
    spec = doc["spec"]
    assert spec["mpiImplementation"] == "MPICH"
    assert set(spec["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    assert spec["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1
    for role in ("Launcher", "Worker"):
        c = _container(spec, role)
        assert c["image"] and c["name"] and c["command"], role
    # mpirun starts exactly the ranks the workers' slots hold (the launcher runs none).
    launcher = _container(spec, "Launcher")["command"]
    n = int(launcher[launcher.index("-n") + 1])
    assert n == spec["mpiReplicaSpecs"]["Worker"]["replicas"] * spec["slotsPerWorker"]
    assert n >= 2  # a master and at least one worker


def test_worker_pods_run_the_sshd_the_image_configures() -> None:
    spec = _manifest()["spec"]
    worker = _container(spec, "Worker")
    sshd = worker["command"]
    assert sshd[0] == "/usr/sbin/sshd" and "-D" in "".join(sshd[1:2])
    config = sshd[sshd.index("-f") + 1]
    docker = _dockerfile()
    # The image installs sshd and puts that config where the pod reads it, on the port the
    # readiness probe and the ssh client (ssh_config) use.
    assert re.search(r"apt-get install[^\n]*openssh-server", docker)
    assert f"COPY --chown=mpiuser deploy/sshd_config {config}" in docker
    port = int(re.search(r"ARG SSH_PORT=(\d+)", docker).group(1))  # type: ignore[union-attr]
    assert worker["readinessProbe"]["tcpSocket"]["port"] == port
    assert 'echo "    Port ${SSH_PORT}" >> /etc/ssh/ssh_config' in docker
    # The keys the operator mounts are the ones sshd reads, and both run as that user.
    assert spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert "HostKey /home/mpiuser/.ssh/id_rsa" in (DEPLOY / "sshd_config").read_text()
    assert "useradd --create-home --uid 1000 mpiuser" in docker
    for role in ("Launcher", "Worker"):
        assert _container(spec, role)["securityContext"]["runAsUser"] == 1000


def test_image_copies_what_it_installs_and_runs() -> None:
    docker = _dockerfile()
    for src in re.findall(r"^COPY (?:--chown=\S+ )?(.+?) \S+$", docker, re.MULTILINE):
        for path in src.split():
            assert (ROOT / path).exists(), f"deploy/Dockerfile copies {path}, not in the checkout"
    assert "[mpi,plot]" in docker  # MPICH (the mpich wheel) with flegel
    assert 'ENTRYPOINT ["/entrypoint.sh"]' in docker
    cmd = yaml.safe_load(re.search(r"^CMD (.+)$", docker, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert cmd[:2] == ["flegel", "run"] and (ROOT / cmd[2]).exists()


@pytest.mark.mpi
def test_launcher_command_runs_a_tiny_job_as_in_the_image(tmp_path: Path) -> None:
    """The launcher pod's command, run here: /entrypoint.sh, then mpirun from the mpich
    wheel, in a home laid out as the image's (jobs/ copied there), on 3 ranks."""
    home = tmp_path / "home"
    shutil.copytree(ROOT / "jobs", home / "jobs")
    command = list(_container(_manifest()["spec"], "Launcher")["command"])
    assert command[0] == "/entrypoint.sh" and command[1] == "mpirun"
    command[0] = str(DEPLOY / "entrypoint.sh")
    command[1] = _mpiexec()
    command[command.index("-n") + 1] = "3"
    command[command.index("python")] = sys.executable
    hosts = tmp_path / "hostfile"
    hosts.write_text("localhost:3\n")  # the operator's hostfile, read by the entry point
    env = _local_env(K_MPI_JOB_ROLE="launcher", FLEGEL_HOSTFILE=str(hosts))
    proc = _run(command + TINY, home, env)
    out = home / command[command.index("--out") + 1]
    assert f"run directory: {out.relative_to(home)}" in proc.stdout
    s = summary(out)
    assert s["workers"] == 2 and [w["rank"] for w in s["per_worker"]] == [1, 2]


def test_entry_point_passes_the_command_through(tmp_path: Path) -> None:
    hosts = tmp_path / "hostfile"
    hosts.write_text("# comment\nlocalhost:2\n")
    env = _local_env(K_MPI_JOB_ROLE="launcher", FLEGEL_HOSTFILE=str(hosts))
    proc = _run([str(DEPLOY / "entrypoint.sh"), "sh", "-c", "echo ran $0 $1", "a", "b"],
                tmp_path, env, timeout=30)
    assert proc.stdout == "ran a b\n"


# ------------------------------------------------------------------ Slurm and the hostfile

def _tiny_job(tmp_path: Path) -> Path:
    # workers: 1 in the file -- under a launcher the ranks it is given decide.
    return write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 3},
                     data={"source": "synthetic", "kind": "blobs", "n_points": 2000,
                           "n_features": 3, "centers": 3, "seed": 1},
                     workers=1, sync={"model": "bsp"}, stop={"max_iterations": 5},
                     output={"progress": "none"})


SRUN = """#!/bin/bash
# srun stand-in: skip srun's options, start SLURM_NTASKS tasks through MPICH's launcher
# (its PMI wires them up as Slurm's PMI2 would), each with the variables srun gives a task.
while [[ $1 == --* ]]; do shift; done
args=()
for ((r = 0; r < SLURM_NTASKS; r++)); do
  [ "$r" -gt 0 ] && args+=(":")
  args+=(-n 1 -env SLURM_PROCID "$r" -env SLURM_LOCALID "$r" -env SLURM_NODEID 0
         -env SLURM_STEP_ID 0 -env SLURM_STEP_NUM_TASKS "$SLURM_NTASKS"
         -env SLURM_STEP_NUM_NODES 1 "$@")
done
exec {mpiexec} "${{args[@]}}"
"""


def _fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN.replace("{mpiexec}", _mpiexec()).replace("{{", "{")
                                  .replace("}}", "}"))
    (bin_dir / "scontrol").write_text("#!/bin/bash\n# scontrol show hostnames: one host\n"
                                      "echo localhost\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _allocation(tmp_path: Path, ntasks: int, launch: str) -> dict[str, str]:
    """The environment of a batch script in a one-node allocation of ``ntasks`` tasks."""
    env = _local_env(SLURM_JOB_ID="4242", SLURM_JOBID="4242", SLURM_NTASKS=str(ntasks),
                     SLURM_NPROCS=str(ntasks), SLURM_NNODES="1", SLURM_JOB_NUM_NODES="1",
                     SLURM_TASKS_PER_NODE=str(ntasks), SLURM_JOB_NODELIST="localhost",
                     SLURM_NODELIST="localhost", SLURM_PROCID="0", SLURM_LOCALID="0",
                     FLEGEL_LAUNCH=launch, FLEGEL_PYTHON=sys.executable,
                     TMPDIR=str(tmp_path))
    env["PATH"] = os.pathsep.join([str(_fake_bin(tmp_path)), env["PATH"]])
    return env


@pytest.mark.mpi
@pytest.mark.parametrize("launch", ["srun", "mpiexec"])
def test_batch_script_runs_one_rank_per_task(tmp_path: Path, launch: str) -> None:
    job = _tiny_job(tmp_path)
    env = _allocation(tmp_path, 3, launch)
    _run(["bash", str(DEPLOY / "slurm.sbatch"), str(job), "--out", "run"], tmp_path, env)
    s = summary(tmp_path / "run")
    # 3 tasks: the master and 2 workers, although the job file says 1.
    assert s["workers"] == 2 and [w["rank"] for w in s["per_worker"]] == [1, 2]
    if launch == "mpiexec":
        assert (tmp_path / "flegel-hosts.4242").read_text() == "localhost:3\n"


def test_batch_script_expands_slurms_tasks_per_node(tmp_path: Path) -> None:
    """17 tasks on 4 nodes ("5,4(x3)") become a hostfile of host:slots, rank 0's host first;
    mpiexec is a stand-in that prints its hostfile (FLEGEL_MPIEXEC names it)."""
    env = _allocation(tmp_path, 17, "mpiexec")
    env.update(SLURM_NNODES="4", SLURM_TASKS_PER_NODE="5,4(x3)")
    bin_dir = Path(env["PATH"].split(os.pathsep)[0])
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'n1\\nn2\\nn3\\nn4\\n'\n")
    (bin_dir / "mpiexec").write_text('#!/bin/bash\ncat "$2"; echo "$3 $4"\n')
    (bin_dir / "mpiexec").chmod(0o755)
    env["FLEGEL_MPIEXEC"] = str(bin_dir / "mpiexec")  # not the one beside the Python
    proc = _run(["bash", str(DEPLOY / "slurm.sbatch"), "job.yaml"], tmp_path, env, timeout=30)
    assert proc.stdout == "n1:5\nn2:4\nn3:4\nn4:4\n-n 17\n"


def test_batch_script_takes_the_mpiexec_beside_its_python(tmp_path: Path) -> None:
    """The mpich wheel's mpiexec, beside FLEGEL_PYTHON, not an MPI a module put on PATH."""
    env = _allocation(tmp_path, 3, "mpiexec")
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    bin_dir = Path(env["PATH"].split(os.pathsep)[0])
    for where, said in ((venv, "beside"), (bin_dir, "path")):
        (where / "mpiexec").write_text(f"#!/bin/bash\necho {said}\n")
        (where / "mpiexec").chmod(0o755)
    env["FLEGEL_PYTHON"] = str(venv / "python")
    proc = _run(["bash", str(DEPLOY / "slurm.sbatch"), "job.yaml"], tmp_path, env, timeout=30)
    assert proc.stdout == "beside\n"


def test_batch_script_names_a_missing_python(tmp_path: Path) -> None:
    env = _allocation(tmp_path, 3, "srun")
    env["FLEGEL_PYTHON"] = str(tmp_path / "nowhere" / "python")
    proc = subprocess.run(["bash", str(DEPLOY / "slurm.sbatch"), "job.yaml"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == (f"flegel: no {env['FLEGEL_PYTHON']} on {os.uname().nodename} "
                           "(set FLEGEL_PYTHON)\n")


def test_batch_script_needs_a_job(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(DEPLOY / "slurm.sbatch")], capture_output=True,
                          text=True, timeout=30, env=_allocation(tmp_path, 3, "srun"))
    assert proc.returncode == 2 and "usage: sbatch deploy/slurm.sbatch JOB.yaml" in proc.stderr


def test_hostfile_example_is_host_colon_slots() -> None:
    lines = [ln for ln in (DEPLOY / "hostfile").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    slots = [int(ln.split(":")[1]) for ln in lines if re.fullmatch(r"[\w.-]+:\d+", ln)]
    assert len(slots) == len(lines) >= 2
    # The command the file gives starts exactly the ranks its slots hold.
    n = int(re.search(r"mpiexec -f deploy/hostfile -n (\d+)",  # type: ignore[union-attr]
                      (DEPLOY / "hostfile").read_text()).group(1))
    assert n == sum(slots)


@pytest.mark.mpi
def test_hydra_reads_the_hostfile_format(tmp_path: Path) -> None:
    """The example's comment lines and a host:slots line, through mpiexec -f (forked here)."""
    comments = [ln for ln in (DEPLOY / "hostfile").read_text().splitlines()
                if ln.startswith("#")]
    hosts = tmp_path / "hostfile"
    hosts.write_text("\n".join(comments + ["localhost:2"]) + "\n")
    proc = _run([_mpiexec(), "-f", str(hosts), "-n", "2", sys.executable, "-c",
                 "from mpi4py import MPI; print(f'size={MPI.COMM_WORLD.size}')"], tmp_path,
                _local_env(), timeout=60)
    assert re.findall(r"size=(\d+)", proc.stdout) == ["2", "2"]


# ------------------------------------------------------------------ is flegel under a launcher

SLURM_BATCH = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "17", "SLURM_PROCID": "0",
               "SLURM_NNODES": "4"}


@pytest.mark.parametrize(("env", "expected"), [
    ({}, False),
    (SLURM_BATCH, False),  # the batch script itself: flegel run starts its own ranks
    ({**SLURM_BATCH, "SLURM_STEP_ID": "0", "PMI_RANK": "3", "PMI_SIZE": "17",
      "PMI_FD": "5"}, True),  # an srun task with Slurm's PMI2
    ({**SLURM_BATCH, "PMIX_RANK": "3"}, True),  # an srun task with PMIx
    ({**SLURM_BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "17"},
     True),  # an srun task without a PMI plugin: never a job of its own per task
    ({**SLURM_BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"},
     False),  # srun -n 1 flegel run: it starts its ranks itself
    ({"PMI_RANK": "0", "PMI_SIZE": "3"}, True),  # MPICH's mpiexec
    ({"OMPI_COMM_WORLD_SIZE": "3"}, True),  # Open MPI's mpirun
])
def test_under_mpi_tells_a_launched_rank_from_a_shell(monkeypatch: pytest.MonkeyPatch,
                                                      env: dict[str, str],
                                                      expected: bool) -> None:
    for var in list(os.environ):
        if var.startswith(("SLURM_", "PMI", "OMPI_", "MPI_", "FLEGEL_UNDER")):
            monkeypatch.delenv(var)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert under_mpi() is expected
