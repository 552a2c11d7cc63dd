"""Start the MPI job ourselves when ``flegel run`` is not under mpirun (README, first lines).

One command then works on a fresh machine: the bundled MPI (the ``mpich`` wheel of the
``mpi`` extra) launches ``workers + 1`` ranks of ``python -m flegel``.

The launcher owns the job's lifetime (issue 13, ``docs/exit-codes.md``):

* ``mpiexec`` runs in its own session, so a terminal's Ctrl-C reaches the launcher only and
  the launcher forwards exactly one SIGINT (``mpiexec`` treats a second one as "force
  abort"); SIGTERM is forwarded the same way.  ``mpiexec`` passes the signal to every rank,
  the master saves θ and ends the job, and the launcher exits with ``128 + signal``.  A
  second signal kills the job, unless it is the first delivered again (within
  :data:`~flegel.runtime.lifetime.SAME_STOP_S`: a scheduler signals every process of a job).
* If the job has not ended :data:`KILL_AFTER_S` after the signal, the launcher kills
  ``mpiexec``'s whole process group; each rank dies with its MPI daemon
  (:mod:`flegel.runtime.lifetime`).
* If the launcher itself is killed, even by SIGKILL, the kernel sends ``mpiexec`` SIGTERM
  (``PR_SET_PDEATHSIG``), and the same chain ends every rank.
* Once the master has written the run directory, the job must end within
  ``runtime.finish_timeout_s`` (default :data:`FINISH_S`): a rank stuck in ``MPI_Finalize``
  or at its exit is named and the job killed; the exit code stays the run's, 0, unless a
  rank was killed before ``MPI_Finalize`` (its exit handlers did not end): 3.
* A master stuck in its own code ends the job by itself (:mod:`flegel.runtime.watchdog`);
  one that cannot run Python (a C call holding the GIL) is the launcher's: once the
  deadline the master last wrote is :data:`~flegel.runtime.watchdog.LAUNCH_SLACK_S` past,
  the launcher has rank 0 write its stack (a C signal handler) and end the job, and if it
  has not :data:`~flegel.runtime.watchdog.ANSWER_S` later, names rank 0 itself and kills
  the job: exit 3.
* MPICH's shared-memory files that an aborted or killed job leaves in ``/dev/shm`` are
  removed once every rank has ended (:mod:`flegel.runtime.shm_leftovers`).
* MPI's own noise on these paths ("Sending Ctrl-C to processes", MPICH's
  "application called MPI_Abort" line) is dropped from stderr: the master has already said
  in one line what happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO

from flegel.cli.rankwatch import STARTUP_S, RankWatch
from flegel.protocol import ExitCode
from flegel.runtime import shm_leftovers, watchdog
from flegel.runtime.lifetime import (
    STATUS_ENV,
    claim,
    die_with_parent,
    done_marker,
    finalizing_marker,
    same_stop,
    started_marker,
)
from flegel.runtime.timings import LAUNCH_ENV, PROGRESS_ENV, process_start

#: Environment variables set by MPI launchers (hydra, PMIx, Open MPI, Slurm's PMI).
_MPI_ENV = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
            "FLEGEL_UNDER_MPI")

#: Seconds after a forwarded signal before the launcher kills the MPI job outright (the
#: master needs well under a second to save θ; the whole job must end within 10 s).
KILL_AFTER_S = 7.0

#: Seconds the launcher waits for ranks still alive once ``mpiexec`` ended without a signal
#: (they die with their MPI daemon within milliseconds) before it kills them.
RANKS_GONE_S = 3.0

#: Seconds between a rank found never to have started and the end of the job: MPI's
#: daemon passes on that rank's own last lines meanwhile.
MISSING_GRACE_S = 1.0

#: Seconds the job may run on once the master finished (the run directory written: its
#: done marker), unless the job sets ``runtime.finish_timeout_s``: every rank is then only
#: running its exit handlers, finalizing MPI and exiting, well under a second each.  A rank
#: stuck there (in ``MPI_Finalize``, whose barrier holds every other rank in theirs too, or
#: at its exit: a thread or exit handler that does not end) would otherwise keep ``flegel
#: run`` waiting for ever; the launcher then kills the job.
FINISH_S = 10.0

#: Seconds between the launcher's looks for the master's done marker while the job runs
#: (a stat; the launcher otherwise sleeps in ``poll()`` on ``mpiexec``'s pidfd).
FINISH_LOOK_S = 1.0

#: Lines of the MPI launcher and library that repeat what flegel says in its own line.
_NOISE = re.compile(
    rb"^(\[mpiexec@[^\]]*\] (Sending Ctrl-C to processes as requested|Press Ctrl-C again to "
    rb"force abort)|Abort\(\d+\) on node \d+ \(rank \d+ in comm \d+\): application called "
    rb"MPI_Abort.*)\r?\n", re.MULTILINE)

#: hydra's report of a rank that ended badly: its PID is not the dead rank's, and the master
#: has named the rank, its real PID and the exit code already when it ended the job.
_BANNER = re.compile(
    rb"^(\r?\n(?==)|=+|=   .*|YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*|This "
    rb"typically refers to a problem with your application\.|Please see the FAQ page for "
    rb"debugging suggestions)\r?\n", re.MULTILINE)


#: A worker's line when its master died (:func:`flegel.runtime.peers.watch`): a consequence.
#: The relay holds it back, and the launcher prints it only where it names no cause itself:
#: where a host with two workers went, the master, ended by hydra, was seen dead by the
#: worker beside it, whose line came before the launcher's naming the host's two ranks
#: (tests/test_cluster.py, a killed host with two workers: the first line is the cause).
_ORPHAN = re.compile(rb"^flegel: worker \d+: the master \(rank 0, pid \d+\) died; exiting"
                     rb"\r?\n", re.MULTILINE)


def under_mpi() -> bool:
    """True when this process was started by an MPI launcher.

    A task of an ``srun`` step of several tasks counts even without a PMI variable (srun
    with no PMI plugin): each task must not start an MPI job of its own.  A Slurm batch
    script alone (``SLURM_*`` set, no step of several tasks) does not count: ``flegel run``
    there starts its ranks itself.
    """
    return (any(v in os.environ for v in _MPI_ENV)
            or int(os.environ.get("SLURM_STEP_NUM_TASKS", "1") or 1) > 1)


def find_mpiexec() -> str | None:
    """The launcher beside this Python (the mpich wheel puts it there), else beside the
    interpreter a virtual environment was made from when mpi4py is that install's (a venv
    with system site packages), else on PATH.

    Beside the interpreter before PATH: on PATH ``mpiexec`` may be a version manager's
    shim (pyenv's is a shell script that looks the command up: 0.1-0.3 s on every launch,
    issue 23) for the very same file.
    """
    folders = [Path(sys.executable).parent]
    if _mpi4py_in(Path(sys.base_prefix)):  # the base install's mpi4py: its launcher
        folders.append(Path(sys.base_prefix) / "bin")
    for folder in folders:
        here = folder / "mpiexec"
        if here.exists():
            return str(here)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def _mpi4py_in(prefix: Path) -> bool:
    """Whether the mpi4py this Python imports is installed under ``prefix`` (found without
    importing it: importing ``mpi4py.MPI`` would initialize MPI here)."""
    import importlib.util

    spec = importlib.util.find_spec("mpi4py")
    origin = getattr(spec, "origin", None)
    return origin is not None and Path(origin).resolve().is_relative_to(prefix.resolve())


def _relay(source: IO[bytes], sink: IO[bytes], quiet: Callable[[], bool],
           held: list[bytes] | None = None) -> None:
    """Copy ``source`` to ``sink`` as it comes, without MPI's redundant lines.

    A thread blocked in ``read`` (it costs nothing while nothing comes); chunks pass at once,
    so a progress line redrawn with ``\\r`` still shows live.  hydra's banner about a dead
    rank goes too when ``quiet()`` says flegel names the rank itself.  A worker's line that
    its master died goes to ``held`` (where given) instead: :data:`_ORPHAN`.
    """
    fd = source.fileno()
    while chunk := os.read(fd, 1 << 16):
        chunk = _NOISE.sub(b"", chunk)
        if held is not None and (orphans := _ORPHAN.findall(chunk)):
            held.extend(orphans)
            chunk = _ORPHAN.sub(b"", chunk)
        if chunk and _BANNER.search(chunk) and quiet():
            chunk = _BANNER.sub(b"", chunk)
        if chunk:
            sink.write(chunk)
            sink.flush()


def _read_status(status: Path) -> tuple[int | None, str | None]:
    """The exit code the master ended the job with (None: it did not end it early) and the
    line it left for the launcher to print (:func:`flegel.runtime.lifetime.tell_launcher`)."""
    try:
        lines = status.read_text().splitlines()
        return int(lines[0]), (lines[1] if len(lines) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None, None


def _code_in(status: Path) -> int | None:
    return _read_status(status)[0]


class _Job:
    """The running ``mpiexec`` and what the launcher received (signals, a rank's death).

    Parameters
    ----------
    proc : Popen
        ``mpiexec``, started in its own session (its process group is the job's), not yet
        waited for: its pidfd is opened here.
    status : Path or None
        The job's status file (:data:`~flegel.runtime.lifetime.STATUS_ENV`); the ranks'
        done and finalizing markers lie beside it.  None: no rank can decide the end.
    """

    def __init__(self, proc: subprocess.Popen[bytes], status: Path | None = None) -> None:
        self.proc = proc
        self.status = status
        self.signum: int | None = None
        #: A rank's death was seen (the watch), or a rank decided the job's end (the status
        #: file), before the first signal: that came first and decides the exit code.
        self.death_seen = False
        self.after_cause = False
        self.kill_at: float | None = None
        self.signal_at = 0.0  # time.monotonic() of the first signal
        #: The master finished and the job was killed ``finish_s`` later.
        self.cut_short = False
        #: ... and a rank killed then had not reached ``MPI_Finalize``: its exit handlers or
        #: threads were cut off, so the job is not counted a success.
        self.cut_before_finalize = False
        #: time.monotonic() when the master was found stuck past its deadline and sent the
        #: dump signal (:meth:`_master_bound`), and the state it had written.
        self.stuck_at: float | None = None
        self._stuck: dict[str, object] = {}
        #: Set when ``mpiexec`` ended, where there are no pidfds (macOS, Linux < 5.3, a
        #: seccomp filter): a thread waits for it in the kernel (Popen.wait with a timeout
        #: would poll it about 25 times a second).
        self._gone: threading.Event | None = None
        self._reaper: threading.Thread | None = None  # started by the first wait
        try:  # before anyone waits for mpiexec: its PID cannot have been reused yet
            self._pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._pidfd = None
            self._gone = threading.Event()

    def _reap(self) -> None:
        """Wait for ``mpiexec`` (blocking in ``waitpid``) and say it ended."""
        self.proc.wait()
        assert self._gone is not None
        self._gone.set()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Forward the first SIGINT/SIGTERM to ``mpiexec``; a second one kills the job
        (one within :data:`~flegel.runtime.lifetime.SAME_STOP_S` is the first again)."""
        if self.signum is not None:
            if not same_stop(self.signal_at, time.monotonic()):
                self.kill()
            return
        self.signum, self.signal_at = signum, time.monotonic()
        # A rank decided the end (the status file), or the run finished (the master's done
        # marker: the run directory is complete): the signal does not decide the code.
        self.after_cause = self.death_seen or (self.status is not None and (
            self.status.exists() or os.path.exists(done_marker(str(self.status), 0))))
        self.kill_at = self.signal_at + KILL_AFTER_S
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    @property
    def stopped(self) -> bool:
        """A signal ended the job: it came before any other cause (the first real error
        decides the exit code: a signal sent while the job was already ending for a dead
        worker, say, is a consequence)."""
        return self.signum is not None and not self.after_cause

    def kill(self) -> None:
        """Kill ``mpiexec`` and its daemons (their process group); ranks die with them."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_if_running(self) -> None:
        """Kill the job unless it ended already (a rank died :data:`KILL_AFTER_S` ago)."""
        if self.proc.poll() is None:
            self.kill()

    def wait_ranks(self, watch: RankWatch) -> None:
        """After ``mpiexec`` ended: wait for the ranks it leaves (they end with their MPI
        daemon, or finish saving θ after a signal) until the signal's kill time, or
        :data:`RANKS_GONE_S`; kill any left then."""
        left = RANKS_GONE_S
        if self.kill_at is not None:
            left = max(self.kill_at - time.monotonic(), left)
        killed = watch.wait_gone(left)
        if killed:
            sys.stderr.write(f"flegel: rank(s) {', '.join(map(str, killed))} still ran after "
                             "mpiexec ended; killed\n")

    def _ended(self, timeout_s: float | None) -> bool:
        """Sleep until ``mpiexec`` ends or ``timeout_s`` passed (None: no bound); True if it
        ended (not yet waited for)."""
        if self._gone is not None:
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, daemon=True,
                                                name="flegel-mpiexec")
                self._reaper.start()
            return self._gone.wait(timeout_s)
        assert self._pidfd is not None
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(None if timeout_s is None else int(timeout_s * 1000) + 1))

    def wait(self, watch: RankWatch | None = None, finish_s: float = FINISH_S) -> int:
        """Wait for ``mpiexec`` (sleeping in the kernel) and return the job's exit code.

        Bounded once the job must end: :data:`KILL_AFTER_S` after a signal, and
        ``finish_s`` (``runtime.finish_timeout_s``) after the master finished (its done
        marker, looked for every :data:`FINISH_LOOK_S`); ``watch`` names the ranks still
        running then.  Before that, a master stuck past its own deadline is ended
        (:meth:`_master_bound`).
        """
        status = self.status
        assert status is not None, "the job's status file"
        master_done = done_marker(str(status), 0)
        finish_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if self.kill_at is not None:
                    left = max(self.kill_at - now, 0.0)
                elif finish_at is not None:
                    left = max(finish_at - now, 0)
                else:
                    left = FINISH_LOOK_S
                # At most a second asleep: a signal's handler runs while the kernel wait
                # resumes, and its kill time must then take effect.
                if self._ended(min(left, FINISH_LOOK_S)):
                    rc = self.proc.wait()
                    break
                now = time.monotonic()
                if self.kill_at is not None and now >= self.kill_at:
                    sys.stderr.write(f"flegel: the job did not end {KILL_AFTER_S:g} s after "
                                     f"{signal.Signals(self.signum or 15).name}; killing it\n")
                    self.kill()
                    self.kill_at = None
                    finish_at = None
                elif finish_at is not None and now >= finish_at and self.kill_at is None:
                    self._cut_short(status, watch, finish_s)
                    finish_at = None
                elif finish_at is None and not self.cut_short and os.path.exists(master_done):
                    finish_at = now + finish_s
                elif finish_at is None and self.kill_at is None and not self.cut_short:
                    self._master_bound(status, watch)
        finally:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        if self.stopped:
            return ExitCode.for_signal(self.signum or signal.SIGTERM)
        code = _code_in(status)
        if code is not None:
            return code
        if self.cut_before_finalize:  # an exit handler or a thread was cut off
            return ExitCode.STALLED
        if self.cut_short or (self.signum is not None and os.path.exists(master_done)):
            return ExitCode.OK  # the master finished: the run directory is complete
        return ExitCode.for_signal(-rc) if rc < 0 else rc

    def _master_bound(self, status: Path, watch: RankWatch | None) -> None:
        """End a job whose master is stuck and cannot end it (its Python cannot run).

        The master's watchdog writes its deadline (:func:`flegel.runtime.watchdog.
        read_state`); :data:`~flegel.runtime.watchdog.LAUNCH_SLACK_S` past it, with no
        cause decided, rank 0 gets :data:`~flegel.runtime.watchdog.DUMP_SIGNAL` (when its
        PID is known on this host): its C handler writes every thread's stack, and its
        Python handler, if the interpreter runs it, saves θ and ends the job.
        :data:`~flegel.runtime.watchdog.ANSWER_S` later the state file is read again: a
        master whose deadline moved answered (it was not stuck), and the launcher stands
        down; else it claims the job's end itself (one line naming rank 0, code 3) and
        kills the job; if the master claimed it and is still saving, it gets
        :data:`KILL_AFTER_S` more.  A cause claimed by anyone does not lift the bound: a
        master still running that long past its deadline (its save hangs) is killed, the
        claimed code kept.
        """
        now = time.monotonic()
        if self.stuck_at is None:
            state = watchdog.read_state(str(status))
            late = watchdog.past_deadline(state)
            if state is None or late is None or late < watchdog.LAUNCH_SLACK_S:
                return
            if status.exists():  # claimed: the claimer ends the job, within a bound
                if late >= watchdog.LAUNCH_SLACK_S + watchdog.ANSWER_S + KILL_AFTER_S:
                    sys.stderr.write(
                        f"flegel: rank 0 did not end the job {late:.0f} s past its deadline "
                        f"while {state.get('phase')}, its end claimed; killing it\n")
                    self.kill()
                return
            pid = watch.pids.get(0) if watch is not None else None
            if pid is None and state.get("host") == socket.gethostname():
                pid = int(state["pid"])  # else another host's PID: no process here
            self.stuck_at, self._stuck = now, {**state, "pid": pid or state.get("pid")}
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, watchdog.DUMP_SIGNAL)
            return
        if now < self.stuck_at + watchdog.ANSWER_S:
            return
        if status.exists():  # the master is ending the job: saving θ
            if now >= self.stuck_at + watchdog.ANSWER_S + KILL_AFTER_S:
                self.kill()
            return
        late = watchdog.past_deadline(watchdog.read_state(str(status)))
        if late is None or late < watchdog.LAUNCH_SLACK_S:
            self.stuck_at = None  # it answered: its deadline moved (or it ended its bound)
            return
        claim(str(status), ExitCode.STALLED, _stuck_line(status, self._stuck))
        self.kill()

    def _cut_short(self, status: Path, watch: RankWatch | None, finish_s: float) -> None:
        """End a job still running ``finish_s`` after the master finished.

        Say which ranks still run, and where, then kill ``mpiexec`` with its daemons and the
        ranks the watch sees in this host's ``/proc`` (the ranks cancelled their death with
        the MPI daemon before ``MPI_Finalize``, so a rank on this host is killed itself; one
        on another host ends when its host's daemon ends, as hydra's ``mpiexec`` goes).

        Parameters
        ----------
        status : Path
            The job's status file: the ranks' finalizing markers lie beside it.
        watch : RankWatch or None
            The ranks' processes; None: no rank is named.
        finish_s : float
            ``runtime.finish_timeout_s``, for the line.
        """
        self.cut_short = True
        alive = watch.alive() if watch is not None else []
        # MPI_Finalize holds every rank until all are in it: name the ones never there.
        before = [(rank, pid) for rank, pid in alive
                  if not os.path.exists(finalizing_marker(str(status), rank))]
        named = before or alive
        where = ", ".join(f"{rank} ({_where(status, rank, pid)})" for rank, pid in named)
        ranks = f"rank{'s' if len(named) > 1 else ''} {where}"
        self.cut_before_finalize = bool(before)
        if before:
            said = (f"{ranks} had not reached MPI_Finalize {finish_s:g} s after the run "
                    "finished (a thread or an exit handler that does not end? "
                    "runtime.finish_timeout_s)")
        elif alive:
            said = f"{ranks} still in or after MPI_Finalize {finish_s:g} s after the run finished"
        else:
            said = f"the job still ran {finish_s:g} s after the run finished"
        sys.stderr.write(f"flegel: warning: {said}; killed: the run directory is complete\n")
        self.kill()  # mpiexec first: it must not see its ranks die and report them
        if watch is not None:
            watch.kill_all()


def launch(n_ranks: int, args: list[str], progress: str = "none", *,
           stdout: IO[bytes] | None = None, stderr: IO[bytes] | None = None,
           origin: float | None = None, finish_s: float = FINISH_S) -> int:
    """Run ``python -m flegel ARGS`` on ``n_ranks`` MPI ranks; return the exit code.

    ``progress`` is the job's ``output.progress``: unless ``none``, the launcher says it is
    launching, and rank 0 carries on with the job's phases (:mod:`flegel.runtime.progress`).
    ``stdout`` and ``stderr`` receive the ranks' output (byte streams with ``write`` and
    ``flush``); by default it goes to this process's, through their file descriptors when
    they have no byte buffer.  An estimator's fit passes its own, so it never needs a
    terminal (``sys.stdout`` may be a ``StringIO`` or a notebook's stream).  ``origin``
    (``time.time()`` seconds) is when the job started, for ``launch_s`` and the progress
    lines: by default this process's start (``flegel run``); a fit passes its own start, as
    its process may have run for hours.  ``finish_s`` is the job's
    ``runtime.finish_timeout_s``: how long its ranks may run on once the master finished.
    """
    mpiexec = find_mpiexec()
    if mpiexec is None:
        sys.stderr.write("flegel: no MPI launcher found; install one with "
                         "pip install 'flegel[mpi]' (the mpich wheel) or run under mpirun\n")
        return 2
    # The ranks measure launch_s from the job's start (flegel.runtime.timings).
    start = process_start() if origin is None else origin
    env = dict(os.environ, FLEGEL_UNDER_MPI="1", **{LAUNCH_ENV: repr(start),
                                                      PROGRESS_ENV: progress})
    # One BLAS/OpenMP thread per rank unless the user set it (README, How the runtime works).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    if progress != "none":
        from flegel.runtime.progress import Progress

        # Plain, as rank 0's lines will be: its output reaches the terminal through a pipe.
        Progress("plain").phase(f"launching {n_ranks} ranks", time.time() - start)
    shm_before = shm_leftovers.present()
    try:
        with tempfile.TemporaryDirectory(prefix="flegel-") as tmp:
            status = Path(tmp) / "status"
            env[STATUS_ENV] = str(status)
            return _run(mpiexec, n_ranks, args, env, status, (stdout, stderr), finish_s)
    finally:
        # Every rank on this host has ended (_run waits for them): MPICH's files an aborted
        # or killed job left would pile up in memory (flegel.runtime.shm_leftovers).  A
        # failure here must not replace the job's exit code with a traceback.
        with contextlib.suppress(OSError):
            shm_leftovers.remove_new(shm_before)


def _run(mpiexec: str, n_ranks: int, args: list[str], env: dict[str, str],
         status: Path, sinks: tuple[IO[bytes] | None, IO[bytes] | None] = (None, None),
         finish_s: float = FINISH_S) -> int:
    """Run the MPI job and relay its output; return its exit code (see :func:`launch`)."""
    cmd = [mpiexec, "-n", str(n_ranks)]
    if (Path(mpiexec).parent / "hydra_pmi_proxy").exists() and "HYDRA_HOST_FILE" not in env:
        # A dead rank must not take every other rank with it at once: the master names it,
        # saves θ and ends the job (flegel.runtime.peers; all ranks are on this host).  Not
        # over several hosts: there hydra's mpiexec then died of SIGPIPE at the end of 2 to
        # 6 in 14 finished jobs (exit 141; issue 20, deploy/local/cluster.sh).  Ignoring
        # SIGPIPE in mpiexec cures that (14 of 14 ended 0), but gains nothing: a worker
        # killed on another host still ended the master at once in 4 of 5 tries (UCX over
        # TCP aborts the rank that talks to a dead peer), so θ was lost as before.
        cmd.append("-disable-auto-cleanup")
    cmd += [sys.executable, "-m", "flegel", *args]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=die_with_parent(signal.SIGTERM))
    job = _Job(proc, status)
    previous = {s: signal.signal(s, job.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def kill_later(delay_s: float) -> None:
        timer = threading.Timer(delay_s, job.kill_if_running)
        timer.daemon = True
        timer.start()

    def missing() -> None:  # the others wait in MPI_Init: nothing to save, end soon
        # ... but not at once: the proxy may still hold the dead rank's own lines (the
        # message says "see the lines above"; a kill at once lost them under load).
        kill_later(MISSING_GRACE_S)

    def died() -> None:  # whatever the ranks left are doing, the job ends within a bound
        job.death_seen = True
        kill_later(KILL_AFTER_S)

    one_host = "HYDRA_HOST_FILE" not in env  # every rank shows in this host's /proc
    watch = RankWatch(proc, n_ranks, f"{STATUS_ENV}={status}",
                      done=lambda rank: os.path.exists(done_marker(str(status), rank)),
                      on_death=died, startup_s=STARTUP_S if one_host else None,
                      on_missing=missing,
                      started=lambda rank: os.path.exists(started_marker(str(status), rank)))

    def quiet() -> bool:  # hydra's report of a dead rank is redundant (and wrong) now
        return _code_in(status) is not None or bool(watch.first) or job.cut_short

    assert proc.stdout is not None and proc.stderr is not None
    # The caller's sinks (an estimator's captured output) are its own to close.
    outs = [given or _binary(std) for given, std in zip(sinks, (sys.stdout, sys.stderr))]
    held: list[bytes] = []  # the workers' lines that their master died (_ORPHAN)
    relays = [threading.Thread(target=_relay, args=(src, out, quiet, held), daemon=True)
              for src, out in zip((proc.stdout, proc.stderr), outs)]
    for relay in relays:
        relay.start()
    try:
        code = job.wait(watch, finish_s)
        # mpiexec may end before its ranks (hydra on SIGTERM): none may outlive this call.
        job.wait_ranks(watch)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    for relay in relays:
        relay.join(timeout=2.0)  # the last lines (the master's message) come out first
    _close(proc, relays, outs, keep=[given for given in sinks if given is not None])
    watch.settle()  # every rank is gone: the watch has seen who died first
    told, message = _read_status(status)
    # The ranks whose end ended the job (a worker whose host's MPI daemon died counts from
    # that moment, before its own end shows): rankwatch.cause.
    workers = [d for d in watch.first if d[0] != 0]
    if message:  # the master left it here: it may not have lived to print it
        sys.stderr.write(f"flegel: {message}\n")
    elif watch.missing and told is None and not job.stopped:
        # MPI would have waited for it for ever: the others were in MPI_Init
        ranks = ", ".join(map(str, watch.missing))
        sys.stderr.write(f"flegel: rank {ranks} did not start (its Python exited before "
                         "flegel ran: see the lines above); the job was ended\n")
        code = ExitCode.WORKER_DIED if 0 not in watch.missing else ExitCode.FAILED
    elif len(workers) == 1 and told is None and not job.stopped and code != 0:
        # The master died of it before it could say so (MPICH ends a rank that touches a
        # dead peer; hydra ends the job when a host goes): the launcher names the worker.
        sys.stderr.write(f"flegel: worker {workers[0][0]} ({_where(status, *workers[0])}) "
                         "died; the job ended before the master could save θ\n")
        code = ExitCode.WORKER_DIED
    elif workers and told is None and not job.stopped and code != 0:
        # Several were found dead at once (a loaded machine wakes the watch late, or a host
        # with several workers went) and the master said nothing: all are named.
        ranks = ", ".join(f"{rank} ({_where(status, rank, pid)})" for rank, pid in workers)
        sys.stderr.write(f"flegel: ranks {ranks} died at once; the job ended before the "
                         "master could save θ\n")
        code = ExitCode.WORKER_DIED
    else:  # no cause named here: the workers' word that their master died is all there is
        for line in held:
            sys.stderr.write(line.decode(errors="replace"))
    return code


def _stuck_line(status: Path, state: dict[str, object]) -> str:
    """The launcher's line for a master that could not end its stuck job: rank 0, host,
    PID, where it was (its stack, moved into the run directory) and that θ was lost."""
    dump = Path(watchdog.stack_path(str(status)))
    target = state.get("stack")  # master-stack.txt in the run directory, once it exists
    where = str(dump)
    if isinstance(target, str):
        with contextlib.suppress(OSError):
            shutil.copyfile(dump, target)
            where = target
    try:
        frames = watchdog.main_frames_in_dump(dump.read_text(errors="replace"))
    except OSError:
        frames = []
    return (f"rank 0 (master, host {state.get('host')}, pid {state.get('pid')}) was stuck "
            f"while {state.get('phase')} ({state.get('bound')}) and could not end the job: "
            "its Python did not run (a C call holding the GIL?); it was in "
            f"{watchdog.describe(watchdog.top_frame(frames))}; its stack is in {where}; "
            "killed: θ not saved (the last checkpoint is kept)")


def _where(status: Path, rank: int, pid: int) -> str:
    """``host H, pid P`` of a rank on another host than the launcher's, its host as the rank
    wrote it in its start marker (:func:`flegel.runtime.lifetime.mark_started`); ``pid P``
    on this host."""
    try:
        host = Path(started_marker(str(status), rank)).read_text().strip()
    except OSError:
        host = ""
    return f"host {host}, pid {pid}" if host and host != socket.gethostname() else f"pid {pid}"


def _binary(stream: IO[str]) -> IO[bytes]:
    """The byte stream under a text stream (its file descriptor when it has no buffer:
    :func:`_close` closes that one)."""
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else open(stream.fileno(), "wb", closefd=False)


def _close(proc: subprocess.Popen[bytes], relays: list[threading.Thread],
           sinks: list[IO[bytes]], keep: list[IO[bytes]]) -> None:
    """Close what the launch opened once its relays are done: ``mpiexec``'s pipes and the
    byte streams :func:`_binary` opened (no unclosed file or pipe is left, issue 21).  A
    relay still reading (a process outside the job holds the pipe) keeps its own."""
    assert proc.stdout is not None and proc.stderr is not None
    for relay, pipe, sink in zip(relays, (proc.stdout, proc.stderr), sinks):
        if relay.is_alive():
            continue
        pipe.close()
        if sink not in (getattr(sys.stdout, "buffer", None), getattr(sys.stderr, "buffer", None),
                        *keep):
            sink.close()  # closefd=False: the descriptor itself stays open
