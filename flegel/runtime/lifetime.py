"""Process lifetime of a rank: signals, the parent's death, and ending the whole job.

No process outlives its job (docs/exit-codes.md, Processes; issue 13).  The chain is ``flegel run``
(the launcher) -> ``mpiexec`` -> the MPI daemon (hydra's proxy) -> the ranks, and each link
guards the next:

* the launcher forwards SIGINT/SIGTERM to ``mpiexec`` once, and asks the kernel to send
  ``mpiexec`` SIGTERM if the launcher dies, even by SIGKILL (``PR_SET_PDEATHSIG``,
  :func:`die_with_parent`); ``mpiexec`` forwards SIGINT/SIGTERM to every rank;
* each rank asks for SIGKILL if its own parent (the MPI daemon) dies, so a rank is never
  left behind a daemon that was killed;
* in a rank, SIGINT/SIGTERM are recorded, not raised, while the master serves training
  (:func:`deferred`): the master then stops at the next poll with θ consistent, saves it,
  and ends the job (:func:`end_job`).  Outside that, the master raises
  :class:`~flegel.runtime.faults.Interrupted` at once.  A worker never ends the job on a
  signal (the master would be killed before it saved θ): it waits for the master, and a
  timer ends it after :data:`GRACE_S` if the master cannot.  A second signal ends the rank
  at once, unless it comes within :data:`SAME_STOP_S` of the first: then it is the same
  stop delivered twice (a scheduler and a launcher each pass it on).

Nothing here spins: timers and the kernel do the waiting.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

from flegel.protocol import ExitCode
from flegel.runtime import shm_leftovers
from flegel.runtime.faults import Interrupted

#: Seconds a rank that got SIGINT/SIGTERM waits for the master to end the job before it
#: exits by itself (the launcher's whole budget is 10 s).
GRACE_S = 5.0

#: Seconds after a rank's first SIGINT/SIGTERM within which another counts as the same stop,
#: not as "end now".  Schedulers and launchers deliver one stop more than once: a plain
#: ``scancel`` (or Slurm's time limit) sends SIGTERM to every process of the job at once, and
#: hydra's ``mpiexec`` (or ``srun``, or ``flegel run``), which got it too, forwards it to the
#: ranks again.  Taking the repeat for a second, impatient signal lost θ in 3 of 4 plain
#: ``scancel`` runs under a real Slurm (issue 20).  The copies come within milliseconds; a
#: person's second Ctrl-C comes later than this (and a rank ends after :data:`GRACE_S`
#: regardless).
SAME_STOP_S = 1.0

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

#: Seconds between a failing rank's last line and ``MPI_Abort`` (see :func:`end_job`).
ABORT_GRACE_S = 0.3

#: Set by ``flegel run`` when it launches MPI: the file where the master writes the exit code
#: it ends the job with (:func:`end_job`).
STATUS_ENV = "FLEGEL_STATUS_FILE"


def _arm(signum: int, parent: int) -> None:
    """Ask the kernel for ``signum`` when this process's parent dies (Linux only); if the
    parent is not ``parent`` any more, it died before we asked: take the signal now."""
    libc = _libc()
    if libc is None:
        return
    libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


def outlive_parent() -> None:
    """Cancel :func:`install`'s SIGKILL on the MPI daemon's death: this rank's work is done
    and it is exiting.  Under a plain ``mpirun`` the daemon may exit as soon as every rank
    finalized; a rank still between ``MPI_Finalize`` and its exit then got SIGKILL, and
    hydra reported the finished job as killed (exit 9, seen under load)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)


def c_exit(code: int) -> NoReturn:
    """Exit as C's ``exit``: the C library's exit handlers run (MPICH's among them) and
    stdio is flushed, but not Python's teardown of its modules.  ``os._exit`` skipped
    MPICH's handlers: under a plain ``mpirun`` a finished rank was then reported killed by
    signal 9 in 2 of 12 runs (0 of 16 this way)."""
    libc = _libc()
    if libc is not None:
        libc.exit(int(code))
    os._exit(int(code))


@functools.cache
def _libc() -> Any:
    """The C library on Linux (loaded once, before any fork), else None."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """Return a function that makes the calling process's child get ``signum`` when the
    calling process dies, even by SIGKILL (``prctl(PR_SET_PDEATHSIG)``; Linux only).

    Pass it as ``subprocess.Popen(preexec_fn=...)``: it runs in the child before exec, and
    the setting survives exec.
    """
    parent = os.getpid()
    _libc()  # load it here: the child between fork and exec should only make system calls
    return lambda: _arm(signum, parent)


class _State:
    """What this rank's handlers know (one per process)."""

    signum: int | None = None
    at: float = 0.0  # time.monotonic() of the first signal
    deferring: bool = False
    master: bool = False


_state = _State()


def _exit_now(code: int) -> None:
    sys.stderr.flush()
    os._exit(code)


def same_stop(first_at: float, now: float) -> bool:
    """True when a stop signal at ``now`` repeats the one at ``first_at`` (both
    ``time.monotonic()``): it came within :data:`SAME_STOP_S`."""
    return now - first_at < SAME_STOP_S


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Record SIGINT/SIGTERM; a second one ends the rank at once, unless it is the first
    one delivered again (:data:`SAME_STOP_S`)."""
    if _state.signum is not None:
        if same_stop(_state.at, time.monotonic()):
            return
        _exit_now(ExitCode.for_signal(_state.signum))
    _state.signum, _state.at = signum, time.monotonic()
    # The last resort if the job cannot end cleanly (a rank stuck in a long C call).
    timer = threading.Timer(GRACE_S, _exit_now, (ExitCode.for_signal(signum),))
    timer.daemon = True
    timer.start()
    if _state.master and not _state.deferring:
        raise Interrupted(signum)


def install(master: bool) -> None:
    """Set up this rank's lifetime: signal handlers, SIGKILL when the MPI daemon that
    started it dies, and no MPICH file left behind.  Call once per rank, from the main
    thread, before any work and after a collective of the whole job (every rank of the node
    then has attached MPICH's shared memory)."""
    _state.master = master
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    with contextlib.suppress(OSError):
        # Our parent is the MPI daemon: if it is killed, so are we.
        _arm(signal.SIGKILL, os.getppid())
    # flegel run's first agreement, a collective, came before: every rank of this node has
    # attached MPICH's shared-memory file, so its name can go now and no end of the job,
    # SIGKILL included, leaves it in /dev/shm (flegel.runtime.shm_leftovers).
    shm_leftovers.unlink_mapped()


def pending() -> int | None:
    """The signal that asked this rank to end (None: none yet)."""
    return _state.signum


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within this block, SIGINT/SIGTERM are only recorded (:func:`pending`); the master's
    serve loop checks at every poll, so θ is never caught half-updated."""
    before = _state.deferring
    _state.deferring = True
    try:
        yield
    finally:
        _state.deferring = before


def check_pending() -> None:
    """Raise :class:`Interrupted` if a signal asked this rank to end."""
    if _state.signum is not None:
        raise Interrupted(_state.signum)


def tell_launcher(code: int, message: str | None = None) -> bool:
    """Leave the job's exit code (and a one-line ``message`` the launcher prints for us) in
    the file ``flegel run`` named; False when not launched by ``flegel run``.

    Written whole through a rename, so the launcher never reads half of it.  Only the
    process that won :func:`decide` calls it (to say more, e.g. where θ went).
    """
    status = os.environ.get(STATUS_ENV)
    if not status:
        return False
    replace_text(status, f"{int(code)}\n" + (f"{message}\n" if message else ""))
    return True


def replace_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole, through a rename, so a reader in another process
    never sees half of it; an OSError is dropped (the launcher's folder may be gone or on
    another host: the caller has nothing better to do).  Not fsync'd: these small files
    tell a live launcher something, they outlive no crash of the host."""
    with contextlib.suppress(OSError):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)


class _Decision:
    """The cause this process decided the job ends with (:func:`decide`)."""

    lock = threading.Lock()
    code: int | None = None


def decide(code: int, message: str | None = None) -> bool:
    """Claim the job's end for this cause: True for the first cause in the whole job, False
    when one was decided before (in this process, another of its threads; in another, the
    launcher's status file exists).

    The first real error decides the exit code (issue 21): a rank that dies because the job
    is ending, or a second fault found while θ is saved, is a consequence, never the cause.
    The caller that gets True says what happened and ends the job; one that gets False says
    nothing and lets the decider end it (:func:`await_end`).  Across processes the status
    file is created by ``link``, which fails if it exists: one winner however the ranks'
    ends are ordered.  Not launched by ``flegel run``: the first in this process wins.
    """
    with _Decision.lock:
        if _Decision.code is not None:
            return False
        status = os.environ.get(STATUS_ENV)
        if status and claim(status, code, message) is False:
            return False  # another rank decided (the master, or a worker ending it)
        _Decision.code = int(code)
        return True


def claim(status: str, code: int, message: str | None = None) -> bool | None:
    """Create the launcher's status file ``status`` with ``code`` and ``message``, unless it
    exists: True when this call created it, False when it existed (a cause was decided),
    None when it could not be written (the launcher's folder is not on this host).  The
    ranks claim through :func:`decide`; ``flegel run`` itself for a master that cannot
    (:mod:`flegel.runtime.watchdog`)."""
    tmp = f"{status}.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(f"{int(code)}\n" + (f"{message}\n" if message else ""))
        os.link(tmp, status)
    except FileExistsError:
        return False
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return True


def end_with(comm: Any, code: int, what: str, save: Callable[[], str]) -> None:
    """End the job for ``what`` (one line naming the rank and what happened), first saving
    θ (``save()`` says where); returns, saying nothing, when another cause came first
    (:func:`decide`: this is its consequence).

    The line reaches the launcher before θ is saved, in case saving takes longer than MPI
    lets this process live, and again with where θ went.
    """
    if not decide(code, what):
        return
    launched = tell_launcher(code, what)
    what = f"{what}; {save()}"
    if launched:  # the launcher prints it, whatever happens to this process
        tell_launcher(code, what)
    else:
        sys.stderr.write(f"flegel: {what}\n")
    end_job(comm, code)


def decided() -> int | None:
    """The exit code this process decided the job ends with (None: none yet)."""
    return _Decision.code


def await_end(comm: Any, code: int, timeout_s: float = GRACE_S) -> NoReturn:
    """Another cause decided the job's end (:func:`decide` returned False): wait for its
    decider to end the job, silently; if it has not within ``timeout_s``, end it here with
    the decided code (else ``code``)."""
    time.sleep(timeout_s)  # the decider's MPI_Abort ends this process meanwhile
    end_job(comm, _Decision.code if _Decision.code is not None else code)


def agreed_end(rank: int, code: int) -> None:
    """Every rank agreed to stop before any work (:mod:`flegel.runtime.agreement`; rank 0
    printed why): this rank's exit is no death, and rank 0's ``code`` is the job's."""
    mark_done(rank)
    if rank == 0:
        decide(code)


def done_marker(status: str, rank: int) -> str:
    """The file a rank creates beside the launcher's status file once it may exit normally
    (the launcher then does not take its exit for a death)."""
    return f"{status}.done{rank}"


def started_marker(status: str, rank: int) -> str:
    """The file a rank creates beside the launcher's status file as soon as flegel runs in
    it: a rank that exits without it never started (its Python failed before flegel)."""
    return f"{status}.started{rank}"


def finalizing_marker(status: str, rank: int) -> str:
    """The file a rank creates beside the launcher's status file as it enters
    ``MPI_Finalize``: a rank still running well after the run finished without it is stuck
    before (a thread or an exit handler that does not end), with it in ``MPI_Finalize``."""
    return f"{status}.finalizing{rank}"


def mark_finalizing() -> None:
    """Tell ``flegel run`` that this rank (``PMI_RANK``) enters ``MPI_Finalize`` (its work
    and its exit handlers are done): ``runtime.finish_timeout_s``
    (:data:`flegel.cli.launch.FINISH_S`)."""
    status, rank = os.environ.get(STATUS_ENV), os.environ.get("PMI_RANK")
    if status and rank is not None and rank.isdigit():
        with contextlib.suppress(OSError):
            open(finalizing_marker(status, int(rank)), "w").close()


def mark_started() -> None:
    """Tell ``flegel run`` that flegel runs in this rank (``PMI_RANK``): from now on its exit
    is a death, not a failed start (:class:`flegel.cli.rankwatch.RankWatch`).  The marker
    holds the rank's host name, for the launcher's message if it dies (issue 20)."""
    status, rank = os.environ.get(STATUS_ENV), os.environ.get("PMI_RANK")
    if status and rank is not None and rank.isdigit():
        with contextlib.suppress(OSError), open(started_marker(status, int(rank)), "w") as f:
            f.write(socket.gethostname())


def mark_done(rank: int) -> None:
    """Tell ``flegel run`` that this rank's work is over: its exit is not a death."""
    status = os.environ.get(STATUS_ENV)
    if status:
        with contextlib.suppress(OSError):
            open(done_marker(status, rank), "w").close()


def end_job(comm: Any, code: int) -> NoReturn:
    """End every rank of ``comm``'s job with exit status ``code``; never returns.

    ``MPI_Abort`` is the portable way to end all ranks; with some MPICH builds it returns
    on the calling rank, so this rank then exits by itself (no code after an abort may
    run: no "run directory" line, no summary of a job that did not finish).  The launcher
    returns ``code`` whatever MPI makes of the abort (hydra reports the status of the first
    rank it saw end).  Before it, the name of MPICH's shared-memory file of this node goes
    (:func:`flegel.runtime.shm_leftovers.unlink_mapped`), which ``MPI_Finalize`` would have
    removed.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if comm.rank == 0:
        decide(code)  # unless a cause was decided before (it keeps its code)
    # MPI_Abort skips MPI_Finalize, which removes MPICH's shared-memory file of this node.
    shm_leftovers.unlink_mapped()
    # Our lines reach the user through hydra's proxy, which MPI_Abort tears down: under a
    # plain mpirun on a loaded machine the message was lost (empty stderr, exit 1).  The
    # job is ending anyway; a moment lets the proxy pass the lines on.
    time.sleep(ABORT_GRACE_S)
    try:
        comm.Abort(code)
    finally:
        os._exit(code)
