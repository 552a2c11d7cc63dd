"""A single-node Slurm for tests, from the distribution's packages, in a temp folder.

`LocalSlurm` starts ``munged`` with a generated key, then ``slurmctld`` and ``slurmd`` with a
``slurm.conf`` it writes next to them: this host is the one node (``CPUs`` from
``os.cpu_count()``), processes tracked by their parents (``proctrack/linuxproc``: no cgroup,
so it works in a container; ``proctrack/pgid`` held each batch job 3 s after its script
ended), ``select/cons_tres``, no accounting, every state and spool directory,
socket, PID and log file in the folder, and free ports, so it neither reads nor disturbs a
Slurm or munge the host may already run (their default config, sockets and ports are never
used).  The client commands find the cluster through ``SLURM_CONF`` in `LocalSlurm.env`.
`LocalSlurm.stop` ends every daemon it started by the PID it recorded (SIGTERM, then
SIGKILL after a bound) and is safe to call twice.

Every wait here is bounded; `LocalSlurm.logs` gives the daemons' logs for a failure message.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

#: The daemons and client commands the tests need (Debian: slurmctld, slurmd, slurm-client
#: and munge).
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scontrol", "srun",
            "scancel")

#: Seconds a daemon has to come up (its socket, or the node idle in ``sinfo``).
START_S = 30.0

#: Slurm's KillWait: seconds between a cancelled job's SIGTERM and SIGKILL (flegel's master
#: saves θ and ends the job well within it).
KILL_WAIT_S = 10

#: Seconds a daemon has to end after SIGTERM before it is killed.
STOP_S = 10.0


def missing() -> str | None:
    """Why a local Slurm cannot start here (one line), or None when it can."""
    if os.geteuid() != 0:
        return "a local Slurm needs root (slurmd starts jobs as their user)"
    absent = [p for p in PROGRAMS if shutil.which(p, path=_sbin_path()) is None]
    if absent:
        return (f"Slurm/munge not installed ({', '.join(absent)} missing; Debian: apt-get "
                "install slurmctld slurmd slurm-client munge)")
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _which(program: str) -> str:
    found = shutil.which(program, path=_sbin_path())
    assert found is not None, program
    return found


def _free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free now (the kernel picks them; all held until all are picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _fnv1a(text: str) -> int:
    """32-bit FNV-1a, as MPICH hashes a PMI job ID into its world ID."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def mpich_segments(job_id: str, steps: int = 4) -> list[Path]:
    """The shared-memory segments MPICH (>= 4.2) names for the steps of a Slurm job.

    Under Slurm's PMI2 the PMI job ID of step S of job J is ``J.S``; MPICH names its
    node's segment ``/dev/shm/mpich_shm_<FNV-1a of the job ID>_<node>``.  A rank that
    ends without ``MPI_Finalize`` (``MPI_Abort``, SIGKILL) leaves it behind, and a later
    job with the same ID -- every fresh test cluster starts at the same ``FirstJobId`` --
    opens the stale segment and hangs in ``MPI_Init``.
    """
    return [Path(f"/dev/shm/mpich_{kind}_{_fnv1a(f'{job_id}.{step}'):x}_0")
            for step in range(steps) for kind in ("shm", "vci")]


def _wait_for(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout:.0f} s")
        time.sleep(0.1)


class LocalSlurm:
    """A one-node Slurm cluster living in ``folder``; `start` it, `stop` it.

    Parameters
    ----------
    folder : Path
        An empty folder for the key, the config, the daemons' state, sockets and logs.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.node = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.conf = folder / "slurm.conf"
        self.munge_socket = folder / "munge" / "munge.socket.2"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        # Job IDs unlike the last cluster's, so that no job meets what a killed one left
        # under its ID (mpich_segments); the ones submitted, to clean those up.
        self.first_job_id = random.randrange(1_000, 60_000_000)
        self.job_ids: list[str] = []

    # ------------------------------------------------------------------ start

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with the client commands pointed at this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_",
                                                                         "SRUN_", "SALLOC_"))}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self) -> None:
        """munged, then slurmctld and slurmd; returns once the node is idle in ``sinfo``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o755)  # munged refuses a group/world-writable path
        self._start_munge()
        self._write_conf()
        self._daemon("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)],
                     lambda: self._client(["scontrol", "ping"]).returncode == 0)
        self._daemon("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.node],
                     lambda: self._client(["sinfo", "-h", "-N", "-o", "%T"]).stdout.strip()
                     == "idle")

    def mpi_plugins(self) -> list[str]:
        """The MPI plugins ``srun --mpi=list`` offers (``pmi2``, ``pmix``, ``none`` ...)."""
        listing = self._client(["srun", "--mpi=list"])
        return [line.strip() for line in (listing.stdout + listing.stderr).splitlines()
                if line.startswith(("\t", " ")) and line.strip()]

    def _client(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([_which(cmd[0]), *cmd[1:]], env=self.env, capture_output=True,
                              text=True, timeout=10)

    def _start_munge(self) -> None:
        munge = self.munge_socket.parent
        munge.mkdir(mode=0o755)  # clients need to reach the socket
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._daemon("munged", [_which("munged"), "--foreground", "--key-file", str(key),
                                "--socket", str(self.munge_socket),
                                "--pid-file", str(munge / "munged.pid"),
                                "--log-file", str(munge / "munged.log"),
                                "--seed-file", str(munge / "munged.seed"), "--force"],
                     self.munge_socket.exists)

    def _write_conf(self) -> None:
        ctld_port, slurmd_port = _free_ports(2)
        for d in ("state", "spool"):
            (self.folder / d).mkdir()
        plugstack = self.folder / "plugstack.conf"
        plugstack.write_text("")
        self.conf.write_text(f"""\
# A one-node cluster for flegel's tests (tests/slurm_local.py).
ClusterName=flegeltest
FirstJobId={self.first_job_id}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
MailProg=/bin/true
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={self.folder / "state"}
SlurmdSpoolDir={self.folder / "spool"}
SlurmctldPidFile={self.folder / "slurmctld.pid"}
SlurmdPidFile={self.folder / "slurmd.pid"}
SlurmctldLogFile={self.folder / "slurmctld.log"}
SlurmdLogFile={self.folder / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={plugstack}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
# sbatch --wait polls after 2, 8, 32 s ... while the wait is under MinJobAge / 2: every 2 s.
MinJobAge=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait={KILL_WAIT_S}
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, name: str, cmd: list[str], ready: Callable[[], bool]) -> None:
        """Start a daemon in the foreground (so its PID is ours to end), in a session of its
        own, its output in its log; return once ``ready()``."""
        with open(self.folder / f"{name}.out", "wb") as out:
            self._procs[name] = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL,
                                                 stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
        def up() -> bool:
            self._check_alive()
            return bool(ready())
        try:
            _wait_for(name, up, START_S)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.logs()}") from None

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} (PID {proc.pid}) ended with {proc.returncode}\n"
                                   f"{self.logs()}")

    # ------------------------------------------------------------------ use and stop

    def sbatch(self, args: list[str], cwd: Path, env: dict[str, str]) -> str:
        """Submit a batch job; its ID."""
        proc = subprocess.run([_which("sbatch"), "--parsable", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed: {proc.stderr}\n{self.logs()}")
        self.job_ids.append(proc.stdout.strip().split(";")[0])
        return self.job_ids[-1]

    def srun(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float
             ) -> subprocess.CompletedProcess[str]:
        """``srun ARGS`` (an allocation of its own), bounded by ``timeout``."""
        return subprocess.run([_which("srun"), *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def queued(self) -> list[str]:
        """IDs of the jobs pending, running or completing."""
        return self._client(["squeue", "-h", "-o", "%i"]).stdout.split()

    def scancel(self, job_id: str, *options: str) -> None:
        self._client(["scancel", *options, job_id]).check_returncode()

    def sbatch_wait(self, args: list[str], cwd: Path, timeout: float,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``sbatch --wait ARGS``, bounded: on timeout the job is cancelled and waited for."""
        cmd = [_which("sbatch"), "--wait", "--parsable", *args]
        proc = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            report = self.logs()  # before the cancel: why the job waited or hung
            self._cancel_all()
            try:
                out, err = proc.communicate(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            self.job_ids += out.split(";")[0].split()  # "ID[;cluster]"
            raise TimeoutError(f"sbatch --wait {' '.join(args)}: job not over within "
                               f"{timeout:.0f} s (cancelled)\n{out}{err}\n{report}"
                               ) from None
        self.job_ids += out.split(";")[0].split()  # "ID[;cluster]"
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def logs(self, lines: int = 40) -> str:
        """The queue and the last ``lines`` of every daemon's output (its log, since each
        runs in the foreground), for a failure message."""
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            path = self.folder / f"{name}.out"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}:\n" + "\n".join(tail))
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            try:  # why a job waits (PartitionTimeLimit, Resources, ...)
                queue = self._client(["squeue", "-o", "%i %T %r %M %j"]).stdout
                parts.insert(0, f"--- squeue:\n{queue.rstrip()}")
            except subprocess.TimeoutExpired:
                pass
        return "\n".join(parts) or "(no daemon output)"

    def stop(self) -> None:
        """Cancel what is left of the jobs, then end slurmd, slurmctld and munged (SIGTERM,
        SIGKILL after a bound), then any process still carrying this cluster's
        ``SLURM_CONF`` (a job step's ``slurmstepd`` or a task it left): nothing outlives it."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self._cancel_all()
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.pop(name, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_S)
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            _wait_for("the cluster's processes gone", lambda: not self.leftovers(), STOP_S)
        except TimeoutError:
            pass  # the caller checks leftovers() and names them
        for job_id in self.job_ids:
            for segment in mpich_segments(job_id):
                segment.unlink(missing_ok=True)

    def _cancel_all(self) -> None:
        try:
            jobs = self.queued()
            if jobs:
                self._client(["scancel", "--full", *jobs])
                _wait_for("cancelled jobs", lambda: not self.queued(), STOP_S)
        except (subprocess.TimeoutExpired, TimeoutError):
            pass  # the daemons are ended next regardless, and their leftovers killed

    def job_processes(self) -> list[int]:
        """PIDs of the processes of its jobs (``slurmstepd``, the script, the ranks)."""
        daemons = {proc.pid for proc in self._procs.values()}
        return [pid for pid in self.leftovers() if pid not in daemons
                and _parent(pid) != self._procs["slurmctld"].pid]  # its slurmscriptd

    def leftovers(self) -> list[int]:
        """PIDs of processes started for this cluster still alive, daemons included (none
        once stopped): they carry its ``SLURM_CONF``."""
        mark = f"SLURM_CONF={self.conf}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile, or not readable
        return pids

    def __enter__(self) -> LocalSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
