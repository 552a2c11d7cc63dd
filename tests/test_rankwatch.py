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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flegel.cli import launch, rankwatch
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

#: Seconds any one step may take: far more than a wake-up of the watch even under load; the
#: tests wait for what they need (a wake-up noted, a process gone), never a fixed time.
BOUND_S = 10.0


def _until(ready: Callable[[], object], timeout_s: float = BOUND_S) -> None:
    """Wait (sleeping) until ``ready()`` is true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s"
        time.sleep(0.01)


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

    def watch(self, **kwargs: Any) -> RankWatch:
        watch = RankWatch(self.mpiexec, self.n_ranks, self.marker, **kwargs)
        _until(lambda: len(watch.pids) == self.n_ranks, 30)
        # Their daemons are watched from the same look.
        _until(lambda: sorted(watch.daemons) == sorted(d.pid for d in self.daemons))
        return watch

    def kill(self, pid: int, watch: RankWatch | None = None) -> None:
        """SIGKILL ``pid``; with ``watch``, wait until a wake-up of it noted the end."""
        woken = len(watch.wakes) if watch is not None else 0
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if watch is not None:
            _until(lambda: len(watch.wakes) > woken)

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
           **kwargs: Any) -> tuple[Job, RankWatch]:
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
    job.kill(job.daemons[1].pid, watch)  # every process of h2: the daemon first ...
    job.kill(ranks[0], watch)  # ... the master meanwhile ...
    job.kill(ranks[1], watch)  # ... h2's rank last (a large process takes long to exit)
    job.kill(job.mpiexec.pid, watch)
    job.kill(ranks[2], watch)
    job.kill(job.daemons[0].pid)  # its ranks ended: no wake-up, the watch is over
    watch.settle(BOUND_S)
    assert not watch.watching
    assert watch.first == [(1, ranks[1])]
    assert died == [True]  # the launcher's bound on the job's end starts once
    assert watch.wakes[0] == Wake(lost=((1, ranks[1]),))


def test_a_worker_seen_dead_first_is_named(job_of: list[Job], tmp_path: Path) -> None:
    job, watch = _start(job_of, tmp_path, [[0, 1, 2]])
    ranks = dict(watch.pids)
    job.kill(ranks[2], watch)
    job.kill(ranks[0], watch)  # MPICH ends the master that touched the dead peer
    job.kill(job.mpiexec.pid, watch)
    assert watch.first == [(2, ranks[2])]


def test_the_ends_after_mpiexec_ended_are_its_consequence(job_of: list[Job],
                                                          tmp_path: Path) -> None:
    """mpiexec killed (the launcher killed by SIGKILL, say): its ranks die of it and none
    of them is named as the cause."""
    job, watch = _start(job_of, tmp_path, [[0, 1, 2]])
    ranks = dict(watch.pids)
    job.kill(job.mpiexec.pid, watch)
    job.kill(ranks[1], watch)
    job.kill(job.daemons[0].pid, watch)  # ranks 0 and 2 are lost with it
    assert watch.first == []
    assert watch.wakes[0] == Wake(launcher_ended=True)
    assert watch.wakes[-1].lost == ((0, ranks[0]), (2, ranks[2]))


def test_a_daemon_ending_after_its_ranks_finished_loses_nobody(job_of: list[Job],
                                                               tmp_path: Path) -> None:
    done: set[int] = set()
    job, watch = _start(job_of, tmp_path, [[0], [1]], done=lambda rank: rank in done)
    ranks = dict(watch.pids)
    done.update((0, 1))  # their work is over: they may exit, and their daemons after them
    job.kill(ranks[1])
    job.kill(job.daemons[1].pid)
    _until(lambda: job.daemons[1].pid not in watch.daemons)  # the watch took its end in
    job.kill(job.mpiexec.pid, watch)
    job.kill(ranks[0])
    watch.settle(BOUND_S)
    assert not watch.watching
    assert watch.first == [] and all(not (w.dead or w.lost) for w in watch.wakes)
    assert watch.wakes and watch.wakes[-1].launcher_ended


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
    job.kill(ranks[1], watch)
    assert watch.alive() == [(0, ranks[0])]
    time.sleep(0.05)  # a later clock tick: another process's start time differs
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, STATUS_ENV: str(job.status), "PMI_RANK": "1"})
    try:
        watch.pids[1] = other.pid  # rank 1's PID reused by another process: not the rank
        assert watch.alive() == [(0, ranks[0])]
        watch.kill_all()
        _until(lambda: watch.alive() == [])
        assert other.poll() is None and job.daemons[0].poll() is None
    finally:
        other.kill()
        other.wait()


def test_the_launcher_ends_a_job_stuck_after_the_master_finished(
        job_of: list[Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The master wrote the run directory (its done marker); rank 1 never reaches
    MPI_Finalize, so rank 0 waits in its own: ``finish_s`` later the launcher names rank 1,
    kills the job and returns 3 (rank 1's exit handlers were cut off)."""
    monkeypatch.setattr(launch, "FINISH_LOOK_S", 0.1)
    job, watch = _start(job_of, tmp_path, [[0, 1]])
    ranks = dict(watch.pids)
    Path(done_marker(str(job.status), 0)).touch()
    Path(done_marker(str(job.status), 1)).touch()
    Path(finalizing_marker(str(job.status), 0)).touch()
    stuck = launch._Job(job.mpiexec, job.status)
    result: list[int] = []
    waiting = threading.Thread(
        target=lambda: result.append(stuck.wait(watch, finish_s=1.0)), daemon=True)
    t0 = time.monotonic()
    waiting.start()
    waiting.join(30)
    assert result == [3], "flegel run waited on, or took the cut-off job for a success"
    assert time.monotonic() - t0 >= 1.0
    err = capsys.readouterr().err
    assert err == (f"flegel: warning: rank 1 (pid {ranks[1]}) had not reached MPI_Finalize "
                   "1 s after the run finished (a thread or an exit handler that does not "
                   "end? runtime.finish_timeout_s); killed: the run directory is complete\n")
    assert watch.wait_gone(2.0) == []  # every rank was killed with the job


def test_a_job_whose_ranks_all_reached_mpi_finalize_keeps_code_0(
        job_of: list[Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every rank still running had reached MPI_Finalize (stuck in its barrier): the run
    is complete, and the launcher kills the job with the run's code, 0."""
    monkeypatch.setattr(launch, "FINISH_LOOK_S", 0.1)
    job, watch = _start(job_of, tmp_path, [[0, 1]])
    for rank in (0, 1):
        Path(done_marker(str(job.status), rank)).touch()
        Path(finalizing_marker(str(job.status), rank)).touch()
    assert launch._Job(job.mpiexec, job.status).wait(watch, finish_s=0.5) == 0
    assert "still in or after MPI_Finalize 0.5 s after" in capsys.readouterr().err
    assert watch.wait_gone(2.0) == []


def _stand_in() -> subprocess.Popen[bytes]:
    """A process standing for mpiexec, in its own process group as flegel run starts it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)


def test_a_signal_after_the_run_finished_keeps_its_code(tmp_path: Path) -> None:
    """The master wrote the run directory (its done marker; no rank decided an early end):
    a SIGTERM then, while the ranks finalize, does not turn the complete run into 143."""
    status = tmp_path / "status"
    Path(done_marker(str(status), 0)).touch()
    mpiexec = _stand_in()
    try:
        job = launch._Job(mpiexec, status)
        job.on_signal(signal.SIGTERM, None)  # forwarded: the stand-in dies of it
        assert not job.stopped
        assert job.wait() == 0
    finally:
        mpiexec.kill()
        mpiexec.wait()


def test_without_pidfds_the_launcher_waits_in_a_thread_and_still_ends_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No pidfds (macOS, an old kernel, a seccomp filter): mpiexec's end is waited for by a
    thread, the finish bound still ends a job stuck after the master finished, and the rank
    watch says once that it is unavailable."""
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    monkeypatch.setattr(rankwatch, "_warned", [])
    monkeypatch.setattr(launch, "FINISH_LOOK_S", 0.1)
    status = tmp_path / "status"
    Path(done_marker(str(status), 0)).touch()
    mpiexec = _stand_in()
    try:
        job = launch._Job(mpiexec, status)
        watch = RankWatch(mpiexec, 2, f"{STATUS_ENV}={status}")
        RankWatch(mpiexec, 2, f"{STATUS_ENV}={status}")  # a second one says nothing more
        assert not watch.watching and watch.alive() == []
        assert job.wait(watch, finish_s=0.5) == 0
        assert job.cut_short and mpiexec.poll() is not None
    finally:
        mpiexec.kill()
        mpiexec.wait()
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "rank watch unavailable" in line] == [
        "flegel: warning: no pidfds here ([Errno 38] Function not implemented); rank watch "
        "unavailable: a dead or missing rank is named by MPI only"]
    assert err[-1] == ("flegel: warning: the job still ran 0.5 s after the run finished; "
                       "killed: the run directory is complete")


def test_a_signal_after_the_job_was_ending_keeps_the_first_cause(tmp_path: Path) -> None:
    """A worker died and the master decided the job's end (exit 5, the status file); a
    Ctrl-C while it saves θ is forwarded, but the first real error keeps the exit code."""
    status = tmp_path / "status"
    status.write_text("5\nworker 2 (pid 1) died while computing; last θ saved\n")
    mpiexec = _stand_in()
    try:
        job = launch._Job(mpiexec, status)
        job.on_signal(signal.SIGINT, None)  # forwarded: the stand-in ends of it
        assert job.wait() == 5
    finally:
        mpiexec.kill()
        mpiexec.wait()
    # Before any cause the signal decides, as ever.
    status.unlink()
    mpiexec = _stand_in()
    try:
        job = launch._Job(mpiexec, status)
        job.on_signal(signal.SIGTERM, None)
        assert job.wait() == 128 + signal.SIGTERM
    finally:
        mpiexec.kill()
        mpiexec.wait()


def test_the_relay_holds_a_workers_word_that_its_master_died() -> None:
    """A worker's "the master died" line is a consequence: the relay holds it back (the
    launcher prints it only where it names no cause itself), and passes everything else as
    it comes (tests/test_cluster.py: where a host with two workers went, that line came
    before the launcher's naming the host's two ranks)."""
    read, write = os.pipe()
    orphan = b"flegel: worker 3: the master (rank 0, pid 4863) died; exiting\n"
    os.write(write, b"progress 1\n" + orphan + b"flegel: something else\n")
    os.close(write)
    sink = _Sink()
    held: list[bytes] = []
    with os.fdopen(read, "rb") as source:
        launch._relay(source, sink, lambda: False, held)
    assert held == [orphan]
    assert sink.data == b"progress 1\nflegel: something else\n"


class _Sink:
    """A byte sink that keeps what it was given."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        pass
