"""flegel across hosts for real: the local cluster of ``deploy/local/cluster.sh`` (issue 20).

Three hosts, each a network and UTS namespace with its own hostname and address on one
bridge, links limited to 100 Mbit/s; jobs start through MPICH's own launcher (hydra, ssh
launcher entering the hosts), rank 0 on h1 and workers round-robin over h2, h3, h1, ...
MPICH then talks TCP between hosts (checked by the bandwidth the link allows).  Covered: a
BSP full-batch job gives the same model, bit for bit, as on one host and its summary names
the hosts; FSPV's async migration moves points between hosts and reaches its target; the
hostfile path (deploy/README.md, section 1) on the cluster's hostfile; and the faults --
SIGTERM to ``flegel run``, a host's link set down, a host's processes killed, ``down``
while a job runs -- each end the job promptly, say so in one line naming the rank and its
host, and leave no process on any host.

Needs root and network namespaces: skipped with a one-line reason otherwise.  The cluster
has a name and subnet of its own (``FLEGEL_CLUSTER``), never a developer's, and is always
taken down.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flegel.cli.report import describe
from tests.conftest import ROOT, child_env, summary, write_job

pytestmark = [pytest.mark.cluster, pytest.mark.mpi]

CLUSTER = ROOT / "deploy" / "local" / "cluster.sh"
HOSTS = 3
#: runtime.stall_timeout_s of the fault jobs.
STALL_S = 3.0
#: What the launcher adds after the master's decision: ranks left behind a host that went
#: away are killed :data:`flegel.cli.launch.RANKS_GONE_S` after mpiexec ended, plus start-up
#: noise of a loaded 2-core machine.
SLACK_S = 6.0


class Cluster:
    """A running local cluster: its name, the environment that selects it, its commands."""

    def __init__(self, name: str, subnet: str) -> None:
        self.name = name
        self.env = child_env()
        self.env.update(FLEGEL_CLUSTER=name, FLEGEL_CLUSTER_SUBNET=subnet,
                        FLEGEL=shutil.which("flegel", path=str(Path(sys.executable).parent))
                        or "flegel")
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.env["PATH"]])
        for var in [v for v in self.env if v.startswith(("PMI_", "PMIX_", "HYDRA_", "SLURM_"))]:
            del self.env[var]
        self.env.pop("FLEGEL_UNDER_MPI", None)

    def sh(self, *args: str, timeout: float = 60, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(CLUSTER), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"cluster.sh {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def start(self, job: Path, out: Path, *args: str) -> subprocess.Popen[str]:
        """``cluster.sh run JOB --out OUT`` in the background (its pid is flegel run's)."""
        return subprocess.Popen([str(CLUSTER), "run", str(job), "--out", str(out), *args],
                                env=self.env, cwd=job.parent, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def namespaces(self) -> list[str]:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in out.splitlines()
                if re.fullmatch(rf"{self.name}-h\d+", line.split()[0])]

    def pids(self) -> list[int]:
        """Every process on the cluster's hosts."""
        found: list[int] = []
        for ns in self.namespaces():
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                 text=True).stdout
            found += [int(p) for p in out.split()]
        return found


def _skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the local cluster needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the local cluster needs root (network namespaces)"
    for tool in ("ip", "tc", "nsenter", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"the local cluster needs '{tool}' (iproute2, util-linux)"
    return None


def _up(name: str, subnet: str, *args: str) -> Cluster:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    c = Cluster(name, subnet)
    c.sh("down")  # a cluster of this name left by a killed test run
    proc = c.sh("up", str(HOSTS), *args, check=False)
    if proc.returncode != 0:
        c.sh("down", check=False)
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        pytest.skip(f"no local cluster here: {lines[0] if lines else proc.returncode}")
    return c


def _down(c: Cluster) -> None:
    c.sh("down", timeout=60)
    assert c.namespaces() == [], "cluster.sh down left network namespaces"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = _up(f"t{os.getpid() % 10_000}", f"10.251.{os.getpid() % 250}", "--rate", "100mbit")
    try:
        yield c
    finally:
        _down(c)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' job files (and data) in one folder."""
    from tests.test_migration_mpi import sorted_blobs

    folder = tmp_path_factory.mktemp("cluster")
    blobs = {"source": "synthetic", "kind": "blobs", "n_points": 20_000, "n_features": 8,
             "centers": 5, "seed": 1}
    write_job(folder / "bspb.yaml", algorithm="kmeans",
              params={"n_clusters": 5, "init": "kmeans++"}, data=blobs, workers=4,
              sync={"model": "bspb"}, stop={"max_iterations": 20, "tolerance": None},
              output={"progress": "none"}, seed=0)
    # FSPV with async migration, as tests/test_migration_mpi.py: blobs sorted by cluster in
    # contiguous shards, worker 1 (on h2) a straggler; the target: 1% above Lloyd's optimum.
    k = 5
    ref = sorted_blobs(folder, 20_000, k)
    write_job(folder / "fspv.yaml", algorithm="kmeans", params={"n_clusters": k, "init": "c0.npy"},
              data={"path": "x.npy", "partition": "contiguous"}, workers=4,
              sync={"model": "fspv", "migration": {"mode": "async"}},
              stragglers=[{"pattern": "injected", "tau_ms": 32, "every": 1000, "workers": [1]}],
              # A time stop only, as tests/test_migration_mpi.py: a target stop could come
              # before the first migration round (seen at load 4-5: 0 points moved).
              stop={"max_iterations": 100_000, "tolerance": None, "max_time_s": 4},
              output={"progress": "none"}, seed=0)
    (folder / "fspv-target.txt").write_text(repr(float(ref * 1.01)))
    # Long enough to be interrupted: time-bounded, a short stall timeout.
    write_job(folder / "long.yaml", algorithm="kmeans",
              params={"n_clusters": 5, "init": "kmeans++"}, data=blobs, workers=3,
              sync={"model": "bspb"},
              stop={"max_iterations": 10_000_000, "tolerance": None, "max_time_s": 30},
              runtime={"stall_timeout_s": STALL_S}, output={"progress": "none"}, seed=0)
    return folder


def _hosts(out: Path) -> dict[int, str]:
    return {int(w["rank"]): w["host"] for w in summary(out)["per_worker"]}


# ------------------------------------------------------------------------------ the paths

def test_mpi_between_hosts_goes_over_the_limited_link(cluster: Cluster, tmp_path: Path) -> None:
    """Each rank sees its host's name, and a message between hosts crosses the 100 Mbit/s
    link (TCP): shared memory would move it 50-100 times faster."""
    script = tmp_path / "send.py"
    script.write_text(
        "import socket, time\nimport numpy as np\nfrom mpi4py import MPI\n"
        "c = MPI.COMM_WORLD\nbuf = np.zeros(4_000_000 // 8)\n"
        "names = c.gather(socket.gethostname())\nc.Barrier()\nt = time.perf_counter()\n"
        "if c.rank == 0:\n    c.Send(buf, dest=1)\n    c.Recv(buf[:1], source=1)\n"
        "    print(names, buf.nbytes / (time.perf_counter() - t) / 1e6)\n"
        "elif c.rank == 1:\n    c.Recv(buf, source=0)\n    c.Send(buf[:1], dest=0)\n")
    out = cluster.sh("mpiexec", "-n", "3", sys.executable, str(script)).stdout.split("]")
    assert eval(out[0] + "]") == ["h1", "h2", "h3"]
    mb_s = float(out[1])
    assert mb_s < 100e6 / 8 / 1e6 * 1.3, f"{mb_s:.1f} MB/s: not through the 100 Mbit/s link"


def test_table2_measures_the_link_on_its_counters(cluster: Cluster) -> None:
    """flegel paper's Table 2 finds the cluster and measures a link at its rate."""
    from flegel.cli.paper import network

    found = network.find(cluster.name)
    assert found is not None and found.hosts == ["h1", "h2", "h3"] and found.rate == "100mbit"
    assert found.link_bps() == 100e6 / 8
    assert network.find(f"{cluster.name}x") is None
    mb_s = network.link_mb_s(found)
    assert 0.5 * 12.5 < mb_s < 1.3 * 12.5, mb_s


def test_bspb_across_hosts_is_bit_for_bit_the_one_host_model(cluster: Cluster, jobs: Path,
                                                           tmp_path: Path) -> None:
    one, many = tmp_path / "one", tmp_path / "many"
    proc = subprocess.run([cluster.env["FLEGEL"], "run", str(jobs / "bspb.yaml"), "--out",
                           str(one)], env=cluster.env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    cluster.sh("run", str(jobs / "bspb.yaml"), "--out", str(many), timeout=120)
    assert (one / "model.npz").read_bytes() == (many / "model.npz").read_bytes()
    hosts = _hosts(many)
    assert hosts == {1: "h2", 2: "h3", 3: "h1", 4: "h2"}  # round-robin after rank 0 on h1
    assert len(set(_hosts(one).values())) == 1
    # The report's table (what flegel report prints) names each worker's host.
    rows = {int(line.split()[0]): line.split()[-1] for line in describe(many).splitlines()
            if re.match(r"\s+\d+\s+\d", line)}
    assert rows == hosts


def test_fspv_async_migration_moves_points_between_hosts(cluster: Cluster, jobs: Path,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "fspv"
    cluster.sh("run", str(jobs / "fspv.yaml"), "--out", str(out), timeout=120)
    s = summary(out)
    target = float((jobs / "fspv-target.txt").read_text())  # 1% above Lloyd's optimum
    assert s["stop_reason"] == "max_time" and s["final_objective"] <= target, s
    assert s["migration"]["points_moved"] > 0
    per = {w["rank"]: w for w in s["per_worker"]}
    even = s["n_points"] // len(per)
    assert per[1]["n_points"] < even  # the straggler on h2 gave points away ...
    # ... to workers on other hosts (moves are (from, to, points) per round).
    moves = [m for r in s["migration"]["round_log"] for m in r["moves"]]
    assert any(per[src]["host"] != per[dst]["host"] and n > 0 for src, dst, n in moves), moves


def test_hostfile_path_on_the_cluster(cluster: Cluster, jobs: Path, tmp_path: Path) -> None:
    """deploy/README.md, section 1: ``mpiexec -f HOSTFILE -n N flegel run JOB`` from the
    first host, the cluster's hostfile, hydra's ssh launcher entering the hosts."""
    hostfile = Path(f"/run/flegel-cluster/{cluster.name}/hostfile")
    assert hostfile.read_text().split() == ["h1:1", "h2:1", "h3:1"]
    out = tmp_path / "hf"
    cluster.sh("mpiexec", "-f", str(hostfile), "-n", "4", cluster.env["FLEGEL"], "run",
               str(jobs / "bspb.yaml"), "--out", str(out), "--set", "workers=3", timeout=120)
    assert summary(out)["workers"] == 3
    assert sorted(_hosts(out).values()) == ["h1", "h2", "h3"]


def test_data_missing_on_one_host_is_named_with_host_and_path(cluster: Cluster, jobs: Path,
                                                              tmp_path: Path) -> None:
    """The job's data folder is empty on h2 (its own mount there, the rest of the file
    system shared): the job ends before any work, exit 2, one line naming rank 1, its
    host and the path."""
    data, empty = tmp_path / "data", tmp_path / "empty"
    data.mkdir()
    empty.mkdir()
    shutil.copy(jobs / "x.npy", data / "x.npy")
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 3},
                    data={"path": "data/x.npy"}, workers=3, sync={"model": "bspb"},
                    stop={"max_iterations": 5}, output={"progress": "none"})
    mounts = Path(f"/run/flegel-cluster/{cluster.name}/h2.mounts")
    mounts.write_text(f"{empty} {data}\n")
    try:
        proc = cluster.start(job, tmp_path / "run")
        _, err = proc.communicate(timeout=120)
    finally:
        mounts.unlink()
    assert proc.returncode == 2, err
    _one_line(err, rf"error: \(on rank 1, host h2\) .*{re.escape(str(data / 'x.npy'))}: "
                   "file not found")


# ------------------------------------------------------------------------------ the faults

def _fault(c: Cluster, out: Path, job: Path, act: Callable[[subprocess.Popen[str]], object]
           ) -> tuple[int, str, float]:
    """Start ``job`` on the cluster, ``act`` once it trains (its first barrier is in
    events.jsonl); its exit code, stderr and the seconds from ``act`` to its end."""
    proc = c.start(job, out)
    deadline = time.monotonic() + 90
    while not ((out / "events.jsonl").exists()
               and '"t": 1,' in (out / "events.jsonl").read_text()):
        if proc.poll() is not None:
            raise AssertionError(f"the job ended early:\n{proc.communicate()}")
        assert time.monotonic() < deadline, "the job did not start training"
        time.sleep(0.2)
    t0 = time.monotonic()
    act(proc)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err, time.monotonic() - t0


def _nothing_left(c: Cluster, out: Path) -> None:
    """No process of the job anywhere: not on the cluster's hosts, not on this machine."""
    assert c.pids() == [], "processes left on the cluster's hosts"
    mine = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(out).encode() in (entry / "cmdline").read_bytes():
                    mine.append(int(entry.name))
            except OSError:
                continue
    assert mine == [], f"processes of the job left: {mine}"


def _one_line(err: str, pattern: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("flegel:")]
    assert lines and re.search(pattern, lines[0]), err
    return lines[0]


def test_sigterm_to_flegel_run_ends_every_rank_on_every_host(cluster: Cluster, jobs: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "term"
    # The process is flegel run: cluster.sh execs it.
    code, err, took = _fault(cluster, out, jobs / "long.yaml",
                             lambda proc: proc.send_signal(signal.SIGTERM))
    assert code == 128 + signal.SIGTERM, err
    _one_line(err, r"interrupted by SIGTERM; last θ \(iteration \d+\) saved")
    assert (out / "model.npz").exists() and took < 10
    _nothing_left(cluster, out)


def test_a_hosts_link_down_ends_the_job_naming_rank_and_host(cluster: Cluster, jobs: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "link"
    link = ["ip", "-n", f"{cluster.name}-h3", "link", "set", "eth0"]
    try:
        code, err, took = _fault(cluster, out, jobs / "long.yaml",
                                 lambda proc: subprocess.run([*link, "down"], check=True))
    finally:
        subprocess.run([*link, "up"], check=True)
    assert code == 3, err  # stalled
    # Worker 2 is on h3: the master names it after runtime.stall_timeout_s, θ kept.
    _one_line(err, r"worker 2 \(host h3, pid \d+\) has not reported for \d.* \(runtime\."
                   r"stall_timeout_s: 3\).*last θ \(iteration \d+\) saved")
    assert (out / "model.npz").exists()
    assert STALL_S <= took < STALL_S + SLACK_S, took
    _nothing_left(cluster, out)


def test_a_killed_host_ends_the_job_naming_rank_and_host(cluster: Cluster, jobs: Path,
                                                         tmp_path: Path) -> None:
    """Every process on h2 killed: hydra's mpiexec ends the whole job at once (a proxy's
    control connection closed), too soon for the master to save θ; the launcher names the
    worker and its host."""
    out = tmp_path / "kill"

    code, err, took = _fault(cluster, out, jobs / "long.yaml",
                             lambda proc: _kill_host(cluster, "h2"))
    assert code == 5, err  # a worker died
    _one_line(err, r"worker 1 \(host h2, pid \d+\) died")
    assert took < STALL_S + SLACK_S, took
    _nothing_left(cluster, out)


def _kill_host(cluster: Cluster, host: str) -> None:
    """SIGKILL every process of ``host`` of ``cluster`` (its network namespace)."""
    pids = subprocess.run(["ip", "netns", "pids", f"{cluster.name}-{host}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert pids, f"no process on {host}"
    subprocess.run(["kill", "-9", *pids], check=False)


def test_a_killed_host_with_two_workers_names_both(cluster: Cluster, jobs: Path,
                                                   tmp_path: Path) -> None:
    """Four workers: h2 holds workers 1 and 4.  Its MPI daemon ends first and both its
    ranks with it (flegel.cli.rankwatch): the line names both, each with its host."""
    out = tmp_path / "kill2"

    job = jobs / "long4.yaml"
    job.write_text((jobs / "long.yaml").read_text().replace("workers: 3", "workers: 4"))
    assert "workers: 4" in job.read_text()
    code, err, took = _fault(cluster, out, job, lambda proc: _kill_host(cluster, "h2"))
    assert code == 5, err
    _one_line(err, r"ranks 1 \(host h2, pid \d+\), 4 \(host h2, pid \d+\) died at once")
    assert took < STALL_S + SLACK_S, took
    _nothing_left(cluster, out)


def test_down_while_a_job_runs_ends_it_and_leaves_nothing(jobs: Path, tmp_path: Path) -> None:
    c = _up(f"d{os.getpid() % 10_000}", f"10.252.{os.getpid() % 250}")
    try:
        out = tmp_path / "down"
        code, err, took = _fault(c, out, jobs / "long.yaml", lambda proc: c.sh("down"))
    finally:
        _down(c)
    assert code == 128 + signal.SIGTERM, err
    _one_line(err, r"interrupted by SIGTERM; last θ \(iteration \d+\) saved")
    assert took < 12
    assert not Path(f"/run/flegel-cluster/{c.name}").exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{c.name}-" not in links
    _nothing_left(c, out)
    assert json.loads((out / "model.json").read_text())
