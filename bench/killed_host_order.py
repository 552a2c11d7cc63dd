"""In which order a killed host's processes, mpiexec and the other ranks end, timed from the
kill by an observer at real-time priority (issue 19: the killed-host launcher race).

Brings up the local cluster (``deploy/local/cluster.sh``; root, network namespaces) under
``FLEGEL_CLUSTER`` (default ``jl``) and ``FLEGEL_CLUSTER_SUBNET`` (default 10.88.0), runs
tests/test_cluster.py's long BSP job, kills every process of h2 once training runs, and
prints, per run, each process of the job as it ended (ms after the kill) and the launcher's
exit code and line; then takes the cluster down.  ``python bench/killed_host_order.py 4``.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import test_cluster as tc  # noqa: E402
from tests.conftest import write_job  # noqa: E402

#: Seconds a run may take to start training (its first event) before the bench gives up.
START_S = 120.0


def _training(out: Path, proc: subprocess.Popen[str]) -> None:
    """Return once the job in ``out`` trains (its first event); raise if it ended or did not
    start within :data:`START_S`."""
    deadline = time.monotonic() + START_S
    events = out / "events.jsonl"
    while not (events.exists() and '"t": 1,' in events.read_text()):
        if proc.poll() is not None:
            raise RuntimeError(f"the job ended before training (exit {proc.returncode}): "
                               f"{proc.communicate()[1]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the job did not train within {START_S:g} s")
        time.sleep(0.05)


def _job_processes(out: Path) -> dict[int, str]:
    """pidfd -> "what@host:pid" of mpiexec, the proxies and the ranks of the job in ``out``
    (those whose environment holds its launcher's status file, as its ranks' does)."""
    table: dict[int, tuple[list[bytes], list[bytes]]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                table[int(entry.name)] = (
                    Path(entry.path, "environ").read_bytes().split(b"\0"),
                    Path(entry.path, "cmdline").read_bytes().split(b"\0"))
            except OSError:
                continue
    markers = {v for env, cmd in table.values() if str(out).encode() in b" ".join(cmd)
               for v in env if v.startswith(b"FLEGEL_STATUS_FILE=")}
    found: dict[int, str] = {}
    for pid, (env, cmd) in table.items():
        if not markers & set(env) or cmd[0].endswith((b"sh", b"setpriv")):
            continue
        rank = [v.decode() for v in env if v.startswith(b"PMI_RANK=")]
        what = rank[0] if rank else os.path.basename(cmd[0].decode())
        host = subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"],
                              capture_output=True, text=True).stdout.strip()
        try:
            found[os.pidfd_open(pid)] = f"{what}@{host}:{pid}"
        except OSError:
            continue
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=int, nargs="?", default=4, help="kills to time (default 4)")
    runs = ap.parse_args().runs
    name = os.environ.get("FLEGEL_CLUSTER", "jl")
    c = tc._up(name, os.environ.get("FLEGEL_CLUSTER_SUBNET", "10.88.0"))
    folder = Path(tempfile.mkdtemp(prefix="killed-host-"))
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        blobs = {"source": "synthetic", "kind": "blobs", "n_points": 20_000,
                 "n_features": 8, "centers": 5, "seed": 1}
        write_job(folder / "long.yaml", algorithm="kmeans",
                  params={"n_clusters": 5, "init": "kmeans++"}, data=blobs, workers=3,
                  sync={"model": "bspb"},
                  stop={"max_iterations": 10_000_000, "tolerance": None, "max_time_s": 30},
                  runtime={"stall_timeout_s": tc.STALL_S}, output={"progress": "none"},
                  seed=0)
        for i in range(runs):
            out = folder / f"out{i}"
            proc = c.start(folder / "long.yaml", out)
            try:
                _training(out, proc)
            except RuntimeError:
                proc.kill()
                proc.communicate()
                raise
            fds = _job_processes(out)
            ended = []
            try:
                poller = select.poll()
                for fd in fds:
                    poller.register(fd, select.POLLIN)
                h2 = subprocess.run(["ip", "netns", "pids", f"{name}-h2"],
                                    capture_output=True, text=True).stdout.split()
                t0 = time.monotonic()
                subprocess.run(["kill", "-9", *h2])
                while fds:
                    ready = poller.poll(10_000)
                    if not ready:
                        break
                    t = (time.monotonic() - t0) * 1000
                    for fd, _ in ready:
                        ended.append(f"{t:.1f} {fds.pop(fd)}")
                        poller.unregister(fd)
                        os.close(fd)
            finally:
                for fd in fds:  # still running 10 s after the kill
                    os.close(fd)
            _, err = proc.communicate(timeout=60)
            line = [ln for ln in err.splitlines() if ln.startswith("flegel:")]
            print(f"run {i}: exit {proc.returncode}; ended (ms after the kill): "
                  f"{', '.join(ended)}\n  {line[0] if line else '(no flegel line)'}",
                  flush=True)
    finally:
        tc._down(c)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
