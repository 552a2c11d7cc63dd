"""The FSP paper's Table 2 on the local cluster: migration over a limited link (issue 20).

Table 2 (Section 6.6) reports, at a non-limited and a limited bandwidth (about half), the
link's raw throughput (*iPerf*), the throughput of a job that *Only* transfers as many bytes
as migration moved, and that of migration in a *Normal* training job, and says FSPV's
speedup loses less than 2 % at half the bandwidth.  Here, on the hosts of
``deploy/local/cluster.sh`` (one host per rank, links limited by a token bucket):

* **link** (the paper's *iPerf*): one 32 MB MPI message from h2 to h3;
* **Only** (the paper's "empty job ... which does nothing but *Only* transfers equal-size
  data as done in a *Normal* job"): an MPI job that sends the bytes migration moved, between
  the same ranks on the same hosts, in windows of migration's sizes (its rounds' moves from
  ``summary.json``, each in about :data:`~flegel.balance.migration.WINDOWS_PER_MOVE`
  windows of at least ``window`` points), one at a time, back to back;
* **Normal**: FSPV with asynchronous migration (K-means on blobs sorted by cluster in
  contiguous shards, worker 1 an *Injected* straggler) to a target objective.

Every throughput is measured the same way, on the link, not by the programs: the bytes h2
(the straggler's host, the source of most moves; the link job's sender) puts on its link
(the kernel's counter of its veth's end, sampled every :data:`SAMPLE_S`), over the samples
where the link carried more than :data:`BUSY` of its rate, busy runs no more than
:data:`JOIN_IDLE` samples apart joined into one stretch with the idle samples between, less
the first and last sample of each stretch (:meth:`LinkMeter.busy`: they hold idle time
too).  That is what the
paper's tools measure ("peer-to-peer network throughput") and it needs nothing from flegel.
The time to target is the run's own (``time_to_target_s``).  The hosts share this machine's
cores: the figures show what the link does to migration, not what a cluster's CPUs would.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flegel.balance.migration import DEFAULT_WINDOW, Migrator
from flegel.cli.compare import RunFailedError
from flegel.cli.paper.runner import Runner, RunResult

#: Where ``cluster.sh`` keeps a cluster's state (its hosts, limits, hostfile).
STATE = Path("/run/flegel-cluster")
#: Seconds between two readings of the links' byte counters.
SAMPLE_S = 0.02
#: A sample counts as busy when the links carried more than this share of their rate.
BUSY = 0.25
#: Busy runs at most this many idle samples apart are one stretch, the idle samples counted
#: (:meth:`LinkMeter.stretches`): a transfer's pause between two windows (a wake-up of
#: source and target) is the transfer's own loss.  Split there, the part-idle samples beside
#: the pause would become a stretch's edges and be left out, and a transfer in spaced
#: windows (*Normal*) would read faster than one back to back (*Only*).  Three samples are
#: chosen to span such pauses and not the idle between a Normal job's migration rounds
#: (docs/benchmarks.md, "Where Table 2's last 6-7 % went", has the samples).
JOIN_IDLE = 3
#: Bytes of the link measurement's one message.
LINK_BYTES = 32 << 20
#: Seconds the round-trip measurement (:func:`round_trip_us`) may take: 200 small messages
#: and an mpiexec start-up across two hosts take a few seconds.
RTT_TIMEOUT_S = 30.0

#: The Only job: rank r of the hostfile's round robin is on host h(r+1), as in the run.
_ONLY = """
import sys, json
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
moves = json.loads(sys.argv[1])
c.Barrier()
for src, dst, chunks in moves:
    for n in chunks:
        buf = np.zeros(n, np.uint8)
        if c.rank == src:
            c.Send(buf, dest=dst, tag=7)
        elif c.rank == dst:
            c.Recv(buf, source=src, tag=7)
c.Barrier()
"""

#: The link job: one message from rank 1 (h2) to rank 2 (h3).
_LINK = """
import sys
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
buf = np.zeros(int(sys.argv[1]), np.uint8)
c.Barrier()
if c.rank == 1:
    c.Send(buf, dest=2)
elif c.rank == 2:
    c.Recv(buf, source=1)
c.Barrier()
"""


#: The round-trip job: rank 0 (h1, the master's host) and rank 1 (h2) bounce a 64-byte
#: message (a pause signal's size) ``argv[1]`` times; rank 0 prints the median in µs.
_PING = """
import sys, time
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
buf, times = np.zeros(8), []
c.Barrier()
for _ in range(int(sys.argv[1])):
    if c.rank == 0:
        t0 = time.perf_counter()
        c.Send(buf, dest=1)
        c.Recv(buf, source=1)
        times.append(time.perf_counter() - t0)
    elif c.rank == 1:
        c.Recv(buf, source=0)
        c.Send(buf, dest=0)
if c.rank == 0:
    print(f"{1e6 * float(np.median(times)):.0f}")
"""


def cluster_script() -> Path:
    """``deploy/local/cluster.sh`` of this checkout."""
    return Path(__file__).resolve().parents[3] / "deploy" / "local" / "cluster.sh"


@dataclass
class Cluster:
    """A local cluster that is up (:func:`find`)."""

    name: str
    hosts: list[str]
    rate: str

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ, FLEGEL_CLUSTER=self.name)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
        for var in [v for v in env if v.startswith(("PMI_", "PMIX_", "HYDRA_"))]:
            del env[var]
        env.pop("FLEGEL_UNDER_MPI", None)
        return env

    def sh(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``cluster.sh ARGS`` on this cluster; raises with its stderr when it fails."""
        proc = subprocess.run([str(cluster_script()), *args], env=self.env, text=True,
                              capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"cluster.sh {' '.join(args[:2])} failed ({proc.returncode}): "
                               f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc

    def link_bps(self) -> float:
        """The links' rate in bytes per second (``tc``'s units)."""
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", self.rate.lower())
        if not m:
            raise ValueError(f"cluster {self.name}: no link rate ({self.rate})")
        return float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8


def find(name: str | None = None) -> Cluster | None:
    """The cluster ``name`` (``FLEGEL_CLUSTER``, default ``flegel``) when it is up and this
    process may use it (root), else None."""
    name = name or os.environ.get("FLEGEL_CLUSTER", "flegel")
    state = STATE / name
    if os.geteuid() != 0 or not (state / "hosts.list").exists():
        return None
    limits = dict(line.split("=", 1) for line in (state / "limits").read_text().split())
    return Cluster(name, (state / "hosts.list").read_text().split(), limits.get("rate", "none"))


@dataclass
class LinkMeter:
    """Bytes the named hosts put on their links, sampled every :data:`SAMPLE_S` by a
    thread (it sleeps between samples) while the meter is open (``with``)."""

    cluster: Cluster
    hosts: list[str]
    samples: list[tuple[float, int]] = field(default_factory=list)

    def _read(self) -> int:
        # The bridge's end of a host's veth receives what the host sends.
        return sum(int(Path(f"/sys/class/net/{self.cluster.name}-{h}/statistics/rx_bytes")
                       .read_text()) for h in self.hosts)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.samples.append((time.perf_counter(), self._read()))

    def __enter__(self) -> LinkMeter:
        self._stop = threading.Event()
        self.samples = [(time.perf_counter(), self._read())]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def intervals(self) -> list[tuple[float, int]]:
        """The intervals between consecutive samples.

        Returns
        -------
        list of (float, int)
            Each interval's ``(seconds, bytes)``, in order.
        """
        return [(t1 - t0, b1 - b0) for (t0, b0), (t1, b1) in zip(self.samples, self.samples[1:])]

    def is_busy(self) -> list[bool]:
        """Whether each of :meth:`intervals` carried more than :data:`BUSY` of the rate.

        Returns
        -------
        list of bool
            One flag per interval.
        """
        floor = BUSY * self.cluster.link_bps()
        return [dt > 0 and db / dt > floor for dt, db in self.intervals()]

    def spans(self) -> list[tuple[int, int]]:
        """The busy stretches as ``[start, stop)`` ranges of :meth:`intervals`.

        A stretch starts and ends with a busy interval; busy runs at most :data:`JOIN_IDLE`
        idle intervals apart are joined into one, the idle ones inside it.

        Returns
        -------
        list of (int, int)
            The stretches' ``(start, stop)``, in order.
        """
        out: list[tuple[int, int]] = []
        for i, busy in enumerate(self.is_busy()):
            if not busy:
                continue
            if out and i - out[-1][1] <= JOIN_IDLE:
                out[-1] = (out[-1][0], i + 1)
            else:
                out.append((i, i + 1))
        return out

    def stretches(self) -> list[list[tuple[float, int]]]:
        """The busy stretches (:meth:`spans`).

        Returns
        -------
        list of list of (float, int)
            Each stretch's intervals, ``(seconds, bytes)``, idle ones inside included.
        """
        iv = self.intervals()
        return [iv[a:b] for a, b in self.spans()]

    def busy(self, edges: bool = False) -> tuple[float, float]:
        """Bytes and seconds of the link carrying a transfer.

        A transfer starts and ends somewhere inside a sample, so the first and last samples
        of a stretch hold idle time the counter cannot tell from the transfer's: they are
        left out.  The samples inside a stretch are the link carrying the transfer, the
        idle between windows included (:data:`JOIN_IDLE`), so a transfer's pauses count for
        every column alike.  A stretch of two samples or fewer says nothing and is left
        out.  docs/benchmarks.md ("Where Table 2's last 6-7 % went") has what this changed;
        ``python bench/table2_samples.py`` prints both readings per run.

        Parameters
        ----------
        edges : bool, default False
            Read every busy interval instead (idle ones and stretches' edges alike): the
            reading before this meter, for comparison.

        Returns
        -------
        (float, float)
            Bytes and seconds.
        """
        if edges:
            kept = [iv for iv, busy in zip(self.intervals(), self.is_busy()) if busy]
        else:
            kept = [iv for run in self.stretches() for iv in run[1:-1]]
        return float(sum(db for _, db in kept)), float(sum(dt for dt, _ in kept))

    def dump(self) -> dict[str, Any]:
        """The samples and what :meth:`busy` made of them (written beside a run to audit a
        figure; ``bench/table2_samples.py`` reads it back with :meth:`load`).

        Returns
        -------
        dict of str to Any
            ``rate``, ``hosts``, ``samples``, the stretches' lengths and the busy bytes
            and seconds.
        """
        total, seconds = self.busy()
        return {"rate": self.cluster.rate, "hosts": self.hosts, "samples": self.samples,
                "stretches": [len(run) for run in self.stretches()],
                "busy_bytes": total, "busy_s": seconds}

    @classmethod
    def load(cls, dump: dict[str, Any], name: str = "dump") -> LinkMeter:
        """A meter of :meth:`dump`'s samples (nothing sampled: not to be opened).

        Parameters
        ----------
        dump : dict of str to Any
            What :meth:`dump` returned (read from ``link-samples.json``).
        name : str, default "dump"
            The cluster's name (not in a dump; no counter is read).

        Returns
        -------
        LinkMeter
        """
        hosts = list(dump["hosts"])
        meter = cls(Cluster(name, hosts, dump["rate"]), hosts)
        meter.samples = [(float(t), int(b)) for t, b in dump["samples"]]
        return meter

    def mb_s(self, edges: bool = False) -> float:
        """Throughput of :meth:`busy` in MB/s.

        Parameters
        ----------
        edges : bool, default False
            As :meth:`busy`'s.

        Returns
        -------
        float
            MB/s (10^6 bytes), NaN when no stretch is longer than two samples.
        """
        total, seconds = self.busy(edges)
        return total / seconds / 1e6 if seconds > 0 else float("nan")


def _mpiexec(cluster: Cluster, script: str, *args: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
    try:
        cluster.sh("mpiexec", "-n", str(len(cluster.hosts)), sys.executable, f.name, *args)
    finally:
        os.unlink(f.name)


def round_trip_us(cluster: Cluster, n: int = 200, timeout: float = RTT_TIMEOUT_S) -> float:
    """The median round trip of a small message between h1 (the master's host) and h2, in
    µs: a pause signal and its answer's way, as the paper's Gigabit Ethernet had it.  Raises
    :class:`subprocess.TimeoutExpired` after ``timeout`` seconds (a side note on a figure's
    page: it must not hold the figure up as long as a run may take)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(_PING)
    try:
        out = cluster.sh("mpiexec", "-n", "2", sys.executable, f.name, str(n),
                         timeout=timeout).stdout
    finally:
        os.unlink(f.name)
    return float(out.strip().splitlines()[-1])


def link_meter(cluster: Cluster) -> LinkMeter:
    """The meter of one :data:`LINK_BYTES` message h2 -> h3 (the link column)."""
    with LinkMeter(cluster, ["h2"]) as meter:
        _mpiexec(cluster, _LINK, str(LINK_BYTES))
    return meter


def only_windows(points: int, window: int) -> list[int]:
    """The windows, in points, of a move of ``points``: what the migrator sends one after
    the other (:meth:`~flegel.balance.migration.Migrator.window_points`, the last window
    the rest), so *Only* sends what migration does.

    Parameters
    ----------
    points : int
        The move's points.
    window : int
        ``sync.migration.window``.

    Returns
    -------
    list of int
        The windows' points, none empty.
    """
    size = Migrator.window_points(window, points)
    return [k for k in [size] * (points // size) + [points % size] if k]


def link_mb_s(cluster: Cluster) -> float:
    """The link's throughput: one :data:`LINK_BYTES` message h2 -> h3."""
    return link_meter(cluster).mb_s()


def fspv_job(folder: Path, n_points: int, workers: int, slack: float) -> Path:
    """The Normal job's data and job file in ``folder``: K-means (K=16, 28 features,
    k-means++) on blobs sorted by cluster, contiguous shards, worker 1 an *Injected*
    straggler (τ = 32 ms per 1,000 points), FSPV with async migration, target = the inertia
    of the blobs' own centers × (1 + ``slack``).

    The target is the generating centers', not Lloyd's optimum from one start: K-means has
    local optima, and from random points FSPV ended 3 % above Lloyd's in some runs and 4 %
    below in others (on one host, 200,000 points), so a target from one start was missed
    by runs that were not slow."""
    import yaml
    from sklearn.datasets import make_blobs

    k = 16
    x, y, centers = make_blobs(n_points, n_features=28, centers=k, cluster_std=2.0,
                               random_state=3, return_centers=True)
    order = np.argsort(y, kind="stable")
    x, y = x[order], y[order]
    np.save(folder / "x.npy", x)
    ref = float(((x - centers[y]) ** 2).sum())
    job = {"algorithm": "kmeans", "params": {"n_clusters": k, "init": "kmeans++"},
           "data": {"path": "x.npy", "partition": "contiguous"}, "workers": workers,
           "sync": {"model": "fspv", "migration": {"mode": "async"}},
           "stragglers": [{"pattern": "injected", "tau_ms": 32, "every": 1000,
                           "workers": [1]}],
           "stop": {"max_iterations": 10_000_000, "tolerance": None,
                    "target_objective": ref * (1 + slack), "max_time_s": 30},
           "output": {"progress": "none"}, "seed": 0}
    path = folder / "fspv.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


@dataclass
class Row:
    """Table 2's figures at one link rate."""

    rate: str
    link: float
    only: float
    normal: float
    time_to_target_s: float | None
    bytes_moved: int
    summary: dict[str, Any]
    #: Per column (``link``, ``only``, ``normal``), the repeats whose meter read no stretch
    #: (NaN: a transfer too short to read), left out of the median (:func:`median`).
    too_short: dict[str, int] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Normal's throughput over Only's: the figure Table 2's claim is held to."""
        return self.normal / self.only


def measure(cluster: Cluster, job: Path, out: Path) -> Row:
    """Table 2's row at the cluster's current rate: link, Normal (the run into ``out``),
    then Only with the moves Normal made; the three meters' samples go to
    ``out/link-samples.json`` (``python bench/table2_samples.py`` prints them), written
    after each column so a failed one loses none before it."""
    out.mkdir(parents=True, exist_ok=True)
    dumps: dict[str, Any] = {}

    def save(name: str, meter: LinkMeter) -> None:
        dumps[name] = meter.dump()
        (out / "link-samples.json").write_text(json.dumps(dumps))

    link = link_meter(cluster)
    save("link", link)
    # The straggler's link (worker 1, on h2), which carries most of what migration moves:
    # one link, as the link column (moves between other workers on other links at the same
    # time would add up past one link's rate).
    normal = LinkMeter(cluster, ["h2"])
    try:
        with normal:
            cluster.sh("run", str(job), "--out", str(out), "--force")
    finally:
        save("normal", normal)
    s = json.loads((out / "summary.json").read_text())
    mig = s.get("migration") or {}
    per_point = mig.get("bytes_moved", 0) / max(mig.get("points_moved", 1), 1)
    window = int((s["sync"].get("migration") or {}).get("window", DEFAULT_WINDOW))
    moves = [[src, dst, [int(k * per_point) for k in only_windows(n, window)]]
             for r in mig.get("round_log", []) for src, dst, n in r["moves"] if n > 0]
    only = LinkMeter(cluster, ["h2"])
    try:
        with only:
            _mpiexec(cluster, _ONLY, json.dumps(moves))
    finally:
        save("only", only)
    return Row(cluster.rate, link.mb_s(), only.mb_s(), normal.mb_s(), s.get("time_to_target_s"),
               int(mig.get("bytes_moved", 0)), s)


def _cell(row: Row, name: str) -> str:
    """A throughput's cell: "too short" for NaN (no stretch to read), and how many repeats
    the median left out for that."""
    value, short = getattr(row, name), row.too_short.get(name, 0)
    text = f"{value:.1f}" if math.isfinite(value) else "too short"
    return text + (f" ({short} too short)" if short and math.isfinite(value) else "")


def table(rows: list[Row]) -> list[str]:
    """Markdown lines: one row per rate."""
    lines = ["| link rate | link (MB/s) | Only (MB/s) | Normal: migration (MB/s) | "
             "Normal / Only | MB moved | FSPV time to target (s) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ttt = ("not reached" if r.time_to_target_s is None
               else f"{r.time_to_target_s:.2f}")
        ratio = r.ratio
        lines.append(f"| {r.rate} | {_cell(r, 'link')} | {_cell(r, 'only')} | "
                     f"{_cell(r, 'normal')} | "
                     f"{f'{ratio:.2f}' if math.isfinite(ratio) else '-'} | "
                     f"{r.bytes_moved / 1e6:.1f} | {ttt} |")
    return lines


#: Table 2's claim: migration keeps within 4 % of *Only*'s throughput.
WITHIN = 0.96


def holds(rows: list[Row]) -> bool:
    """Whether migration kept within :data:`WITHIN` of *Only* at every rate; a ratio that
    is not a number (a column too short to read) does not hold."""
    return all(math.isfinite(x) and x >= WITHIN for x in (r.ratio for r in rows))


def median(rows: list[Row]) -> Row:
    """Each figure's median over repeats of one rate; a run that missed its target counts as
    slower than any that reached it (None when that is the median).  The run of the median
    time to target gives the summary and the bytes moved.  A throughput that read NaN (no
    stretch) is left out of its column's median, counted in :attr:`Row.too_short`; a column
    with none finite is NaN."""
    def med(values: list[float]) -> float:
        finite = [v for v in values if math.isfinite(v)]
        return float(np.median(finite)) if finite else float("nan")

    times = [math.inf if r.time_to_target_s is None else r.time_to_target_s for r in rows]
    order = sorted(range(len(rows)), key=lambda i: times[i])
    mid = rows[order[len(rows) // 2]]
    t = sorted(times)[len(rows) // 2] if len(rows) % 2 else med(times)
    columns = ("link", "only", "normal")
    values = {c: [float(getattr(r, c)) for r in rows] for c in columns}
    short = {c: sum(not math.isfinite(v) for v in values[c]) for c in columns}
    return Row(rows[0].rate, med(values["link"]), med(values["only"]), med(values["normal"]),
               None if math.isinf(t) else t, mid.bytes_moved, mid.summary,
               {c: n for c, n in short.items() if n})


def run_table2(cluster: Cluster, folder: Path, rates: tuple[str, ...] = ("200mbit", "100mbit"),
               n_points: int = 200_000, slack: float = 0.001, repeat: int = 3,
               say: Any = print) -> list[Row]:
    """Table 2 at each of ``rates`` (the cluster's links reshaped, then put back as they
    were), each figure the median of ``repeat`` measurements (the rates alternate, so load
    from elsewhere falls on both alike); ``cluster`` needs one host per rank (5 for 4
    workers)."""
    job = fspv_job(folder, n_points, len(cluster.hosts) - 1, slack)
    before = cluster.rate
    runs: dict[str, list[Row]] = {rate: [] for rate in rates}
    try:
        for k in range(repeat):
            for rate in rates:
                cluster.sh("shape", "--rate", rate)
                cluster.rate = rate
                runs[rate].append(measure(cluster, job, folder / f"run-{rate}-{k}"))
                say(f"{k + 1}/{repeat} " + table(runs[rate][-1:])[-1])
        rows = [median(runs[rate]) for rate in rates]
    finally:
        cluster.sh("shape", *(["--rate", before] if before != "none" else []))
        cluster.rate = before
    return rows


def on_cluster(job: Path, folder: Path, sets: list[str], timeout: float) -> dict[str, Any]:
    """``flegel run`` across the local cluster's hosts -- one rank a host, TCP between them
    (a :data:`~flegel.cli.paper.runner.Launcher`): its summary, or
    :class:`~flegel.cli.compare.RunFailedError` when no cluster is up, the run fails or it
    runs past ``timeout``."""
    cluster = find()
    if cluster is None:
        raise RunFailedError("no local cluster is up")
    args = ["run", str(job), "--out", str(folder), "--force", "--set", "output.progress=none"]
    for s in sets:
        args += ["--set", s]
    try:
        cluster.sh(*args, timeout=timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        raise RunFailedError(str(exc)) from exc
    summary: dict[str, Any] = json.loads((folder / "summary.json").read_text())
    return summary


def paper_run(runner: Runner, algorithm: str, partition: str, sync: str, stragglers: str,
              sets: tuple[str, ...] = ()) -> RunResult:
    """One ``flegel paper`` setting (:meth:`Runner.run`'s arguments, the same job, target and
    keys) run across the local cluster's hosts (:func:`on_cluster`) in
    ``runs/<algorithm>-<partition>-<sync>-cluster-<digest>``; a failed run or no cluster up
    gives a failed :class:`RunResult`.  The cluster's runs are not shared with local ones."""
    return runner.run(algorithm, partition, sync, stragglers, sets, where="cluster",
                      launch=on_cluster)
