"""The launcher's watch on its ranks (flegel/cli/rankwatch.py), in one process, on a process
table of real processes that stand for mpiexec, hydra's proxies and the ranks.

The stand-ins carry what the watch looks for -- this launch's marker and ``PMI_RANK`` in
their environment, a rank's daemon as its parent -- and the test ends them in the order a
loaded machine may: no MPI, no timing left to chance beyond the watch's own wake-ups (each
step waits well past one).  The killed-host case is the local cluster's, measured there
(tests/test_cluster.py): h2's proxy ended 1.5-2.5 ms after the kill, its rank 10-30 ms
later, ``mpiexec`` with it, the master 5-28 ms after that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flegel.cli import launch
from flegel.cli.rankwatch import RankWatch, Wake, cause
from flegel.runtime.lifetime import STATUS_ENV, done_marker, finalizing_marker

pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux")
                                     and hasattr(os, "pidfd_open")),
                                reason="the watch needs Linux pidfds")

#: A daemon (hydra's proxy): starts the ranks named on its command line, then sleeps.
DAEMON = (
    "import os, subprocess, sys, time\n"
    "for r in sys.argv[1:]:\n"
    "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
    "                     env={**os.environ, 'PMI_RANK': r})\n"
    "time.sleep(120)\n")

#: Seconds each step waits: far more than one wake-up of the watch, even under load.
STEP_S = 0.4


class Job:
    """mpiexec, daemons and ranks as plain processes; every one is ended at the end."""

    def __init__(self, tmp_path: Path, hosts: list[list[int]]) -> None:
        self.status = tmp_path / "status"
        self.marker = f"{STATUS_ENV}={self.status}"
        env = {**os.environ, STATUS_ENV: str(self.status)}
        env.pop("PMI_RANK", None)
        self.n_ranks = sum(len(h) for h in hosts)
        sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
        # Its own process group, as flegel run starts mpiexec (the launcher kills the group).
        self.mpiexec = subprocess.Popen(sleep, env=env, start_new_session=True)
        self.daemons = [subprocess.Popen([sys.executable, "-c", DAEMON, *map(str, ranks)],
                                         env=env) for ranks in hosts]

    def watch(self, **kwargs: object) -> RankWatch:
        watch = RankWatch(self.mpiexec, self.n_ranks, self.marker,  # type: ignore[arg-type]
                          **kwargs)
        deadline = time.monotonic() + 30
        while len(watch.pids) < self.n_ranks:
            assert time.monotonic() < deadline, f"ranks not found: {watch.pids}"
            time.sleep(0.05)
        time.sleep(STEP_S)  # their daemons are watched from the same look
        return watch

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(STEP_S)

    def end(self, watch: RankWatch | None) -> None:
        for pid in (watch.pids.values() if watch is not None else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in (*self.daemons, self.mpiexec):
            proc.kill()
            proc.wait()


@pytest.fixture
def job_of(tmp_path: Path) -> Iterator[list[Job]]:
    made: list[Job] = []
    yield made
    for job in made:
        job.end(getattr(job, "watched", None))


def _start(job_of: list[Job], tmp_path: Path, hosts: list[list[int]],
           **kwargs: object) -> tuple[Job, RankWatch]:
    job = Job(tmp_path, hosts)
    job_of.append(job)
    watch = job.watch(**kwargs)
    job.watched = watch  # type: ignore[attr-defined]
    return job, watch


def test_a_killed_host_is_named_though_the_master_is_seen_dead_before_its_rank(
        job_of: list[Job], tmp_path: Path) -> None:
    """h2's daemon ends first; the master (on h1) dies of the job's end before h2's rank
    has finished exiting: the launcher must still name rank 1, not the master or nobody
    (the CI failure: exit 255 and no line)."""
    job, watch = _start(job_of, tmp_path, [[0, 2], [1]])
    died: list[bool] = []
    watch.on_death = lambda: died.append(True)
    ranks = dict(watch.pids)
    job.kill(job.daemons[1].pid)  # every process of h2: the daemon first ...
    job.kill(ranks[0])  # ... the master meanwhile ...
    job.kill(ranks[1])  # ... h2's rank last (a large process takes long to exit)
    job.kill(job.mpiexec.pid)
    job.kill(ranks[2])
    job.kill(job.daemons[0].pid)
    watch.settle()
    assert watch.first == [(1, ranks[1])]
    assert watch.dead_worker() == (1, ranks[1])
    assert died == [True]  # the launcher's bound on the job's end starts once
    assert watch.wakes[0] == Wake(lost=((1, ranks[1]),))


def test_a_worker_seen_dead_first_is_named(job_of: list[Job], tmp_path: Path) -> None:
    job, watch = _start(job_of, tmp_path, [[0, 1, 2]])
    ranks = dict(watch.pids)
    job.kill(ranks[2])
    job.kill(ranks[0])  # MPICH ends the master that touched the dead peer
    job.kill(job.mpiexec.pid)
    assert watch.first == [(2, ranks[2])]


def test_the_ends_after_mpiexec_ended_are_its_consequence(job_of: list[Job],
                                                          tmp_path: Path) -> None:
    """mpiexec killed (the launcher killed by SIGKILL, say): its ranks die of it and none
    of them is named as the cause."""
    job, watch = _start(job_of, tmp_path, [[0, 1, 2]])
    ranks = dict(watch.pids)
    job.kill(job.mpiexec.pid)
    job.kill(ranks[1])
    job.kill(job.daemons[0].pid)
    assert watch.first == []
    assert watch.wakes[0] == Wake(launcher_ended=True)


def test_a_daemon_ending_after_its_ranks_finished_loses_nobody(job_of: list[Job],
                                                               tmp_path: Path) -> None:
    done: set[int] = set()
    job, watch = _start(job_of, tmp_path, [[0], [1]], done=lambda rank: rank in done)
    ranks = dict(watch.pids)
    done.update((0, 1))  # their work is over: they may exit, and their daemons after them
    job.kill(ranks[1])
    job.kill(job.daemons[1].pid)
    job.kill(ranks[0])
    job.kill(job.mpiexec.pid)
    watch.settle()
    assert watch.first == [] and all(not (w.dead or w.lost) for w in watch.wakes)


def test_cause_reads_the_first_wake_that_found_an_end() -> None:
    m, w1, w2 = (0, 10), (1, 11), (2, 12)
    assert cause([]) == []
    assert cause([Wake(dead=(m,)), Wake(dead=(w1,))]) == [m]  # the master alone, first
    assert cause([Wake(dead=(m, w1))]) == [w1]  # a worker beside the master: the worker
    assert cause([Wake(dead=(m, w1, w2))]) == [w1, w2]  # which one is unknown: both
    assert cause([Wake(lost=(w2,)), Wake(dead=(m,), launcher_ended=True)]) == [w2]
    assert cause([Wake(launcher_ended=True), Wake(dead=(w1,), launcher_ended=True)]) == []


def test_alive_and_kill_all_touch_only_this_launchs_ranks(job_of: list[Job],
                                                          tmp_path: Path) -> None:
    job, watch = _start(job_of, tmp_path, [[0, 1]])
    ranks = dict(watch.pids)
    job.kill(ranks[1])
    assert watch.alive() == [(0, ranks[0])]
    watch.pids[1] = job.daemons[0].pid  # a PID reused by another process: not the rank
    assert watch.alive() == [(0, ranks[0])]
    watch.kill_all()
    time.sleep(STEP_S)
    assert watch.alive() == [] and job.daemons[0].poll() is None


def test_the_launcher_ends_a_job_stuck_after_the_master_finished(
        job_of: list[Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The master wrote the run directory (its done marker); rank 1 never reaches
    MPI_Finalize, so rank 0 waits in its own: FINISH_S later the launcher names rank 1,
    kills the job and returns the job's code, 0."""
    monkeypatch.setattr(launch, "FINISH_S", 1.0)
    monkeypatch.setattr(launch, "FINISH_LOOK_S", 0.1)
    job, watch = _start(job_of, tmp_path, [[0, 1]])
    ranks = dict(watch.pids)
    Path(done_marker(str(job.status), 0)).touch()
    Path(done_marker(str(job.status), 1)).touch()
    Path(finalizing_marker(str(job.status), 0)).touch()
    stuck = launch._Job(job.mpiexec)
    result: list[int] = []
    waiting = threading.Thread(target=lambda: result.append(stuck.wait(job.status, watch)),
                               daemon=True)
    t0 = time.monotonic()
    waiting.start()
    waiting.join(20)
    assert result == [0], "flegel run waited on, or lost the job's code"
    assert 1.0 <= time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert err == (f"flegel: warning: rank 1 (pid {ranks[1]}) had not reached MPI_Finalize "
                   "1 s after the run finished (a thread or an exit handler that does not "
                   "end?); killed: the run directory is complete\n")
    assert watch.wait_gone(2.0) == []  # every rank was killed with the job


def test_a_signal_after_the_job_was_ending_keeps_the_first_cause(tmp_path: Path) -> None:
    """A worker died and the master decided the job's end (exit 5, the status file); a
    Ctrl-C while it saves θ is forwarded, but the first real error keeps the exit code."""
    status = tmp_path / "status"
    status.write_text("5\nworker 2 (pid 1) died while computing; last θ saved\n")
    mpiexec = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                               start_new_session=True)
    try:
        job = launch._Job(mpiexec, status)
        job.on_signal(signal.SIGINT, None)  # forwarded: the stand-in ends of it
        assert job.wait(status) == 5
    finally:
        mpiexec.kill()
        mpiexec.wait()
    # Before any cause the signal decides, as ever.
    status.unlink()
    mpiexec = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                               start_new_session=True)
    try:
        job = launch._Job(mpiexec, status)
        job.on_signal(signal.SIGTERM, None)
        assert job.wait(status) == 128 + signal.SIGTERM
    finally:
        mpiexec.kill()
        mpiexec.wait()
