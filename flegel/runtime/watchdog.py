"""The master's own bound: a master stuck in its own code ends the job within the user's bounds.

The server bounds every wait on a worker (``stop.max_time_s``, ``runtime.stall_timeout_s``:
:mod:`flegel.runtime.server`), but nothing bounded the master itself: a user's
``aggregate``, ``update_parameter`` or ``termination_check`` that loops for ever, a
deadlocked C extension or a blocked file write left ``flegel run`` waiting for ever, with
every worker waiting on the master (issue 19; docs/exit-codes.md, code 3).  Two layers, as
a hang may hold the GIL or not:

* in the master, :class:`Watchdog`, a thread: the master *beats* at every turn of its loops
  (every poll of the serve loop and of its waits on workers outside training); silent past
  its :func:`master_deadline`, it is stuck: the thread writes every thread's Python stack to
  the run directory (``faulthandler``), saves the last good θ (the server's θ is never
  half-updated: ``update_parameter`` works on a copy, :meth:`flegel.runtime.server.Server.
  apply`) and ends the job with exit code 3 and one line naming rank 0, its host and PID,
  what it was doing (the innermost frame of the user's code) and where the stack went;
* in ``flegel run``'s launcher (:mod:`flegel.cli.launch`), for a master whose Python cannot
  run (a C call holding the GIL): the thread rewrites a small state file beside the
  launcher's status file every :data:`TICK_S` with its deadline (:func:`state_path`); once
  that deadline is :data:`LAUNCH_SLACK_S` past and the job has not ended, the launcher sends
  rank 0 :data:`DUMP_SIGNAL`, whose C handler (``faulthandler.register``, without the GIL)
  writes the stack, and whose Python handler, when the interpreter gets to run it (a regular
  expression checks for signals; a C loop may not), ends the job as the thread would; if the
  job has not ended :data:`ANSWER_S` later and the deadline did not move (the master
  answered: it was not stuck), the launcher names rank 0 itself (θ not saved) and kills the
  job.  A cause claimed does not lift the launcher's bound: a master still running far past
  its deadline (its save hangs) is killed, the claimed code kept.

What "stuck" means (the papers say nothing of a failing master; this is the choice): the
master has not completed a turn of its loop -- a poll, with whatever updates and barriers
it ran -- for the phase's bound: in training ``runtime.stall_timeout_s`` (its ``auto`` rule,
as for a worker: 10 times the slowest iteration, at least 60 s, 300 s before one was
measured), and with ``stop.max_time_s: T`` at most until ``T`` + :data:`MASTER_GRACE_S` after
training began (the workers' grace after ``T``, :data:`~flegel.runtime.limits.
MAX_TIME_GRACE_S`, plus a second for the master's own decision about a stuck worker, which
comes at ``T`` + 5 s + a block); outside training (loading, compiling, the final evaluation)
the bound of those phases' waits on workers, ``runtime.stall_timeout_s`` but at least 60 s
(300 s under ``auto``).  A master that is deciding something itself is never cut: with
``max_time_s`` it must also have been silent for :data:`SILENT_MIN_S`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import site
import socket
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from flegel.protocol import ExitCode
from flegel.runtime import lifetime
from flegel.runtime.limits import AUTO, MAX_TIME_GRACE_S, PHASE_MIN_S, STALL_UNMEASURED_S

#: Seconds past ``stop.max_time_s`` (from training's start) before a silent master is stuck:
#: the workers' grace, and a second for the master's own decision about a stuck worker
#: (``T`` + 5 s + one block, at most 250 ms on a GPU).
MASTER_GRACE_S = MAX_TIME_GRACE_S + 1.0
#: Seconds a master must have been silent before the ``max_time_s`` bound cuts it: one that
#: answers is deciding the job's end itself.
SILENT_MIN_S = 1.0
#: Past ``max_time_s`` and its grace the master may still be in a legitimate turn (the
#: server waits up to a worker's last block past the grace, then updates θ): a turn counts
#: as stuck only when silent this many times the longest turn seen in training (the
#: ``auto`` stall rule's factor), at least :data:`SILENT_MIN_S`.
TURN_FACTOR = 10.0
#: Seconds between the thread's looks (and its rewrites of the launcher's state file).
TICK_S = 0.5
#: Seconds past the master's deadline (as last written) before the launcher acts: the
#: thread acts first when it can run.
LAUNCH_SLACK_S = 2.0
#: Seconds the launcher gives the master, after :data:`DUMP_SIGNAL`, to save θ and end the
#: job before it kills the job itself.
ANSWER_S = 3.0
#: The signal that makes a rank write every thread's Python stack (from C, without the
#: GIL: ``faulthandler``); on the master, once it is stuck, it also ends the job.  Not
#: SIGUSR1: hydra (``-disable-auto-cleanup``) sends SIGUSR1 to every surviving rank when one
#: ends abnormally, so each printed its stack above the job's one line, and the handler
#: replaced MPICH's own.
DUMP_SIGNAL = signal.SIGUSR2

_FLEGEL_DIR = str(Path(__file__).resolve().parents[1])
#: Where libraries live: the standard library and the installed packages (a venv's, the
#: system's ``dist-packages``, the user's site): their frames are nobody's own code.
_LIBRARY_DIRS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib",
                                                           "platlib")}
                      | set(site.getsitepackages()) | {site.getusersitepackages()})
#: The job's algorithm's own files (its class and the classes it derives from), named even
#: when installed among the packages: :func:`own_code`.
_OWN_FILES: set[str] = set()

#: One frame: (file, line, function).
Frame = tuple[str, int, str]


def state_path(status: str) -> str:
    """The master's state file beside the launcher's status file: its deadline, PID and run
    directory, for the launcher's bound (JSON, rewritten whole)."""
    return f"{status}.master"


def stack_path(status: str) -> str:
    """Where rank 0's C handler writes its stack beside the launcher's status file (the
    master then moves it into the run directory; the launcher copies it there)."""
    return f"{status}.stack0"


def master_deadline(last_beat: float, silence_s: float | None, train_start: float | None = None,
                    max_time_s: float | None = None, longest_turn_s: float = 0.0
                    ) -> float | None:
    """When a master whose last completed turn was at ``last_beat`` counts as stuck.

    Parameters
    ----------
    last_beat : float
        The clock's time of the master's last completed turn.
    silence_s : float or None
        The phase's bound on the master's silence (None: none).
    train_start, max_time_s : float or None
        In training with ``stop.max_time_s``: when training began and the limit; the master
        is then stuck at ``train_start + max_time_s +`` :data:`MASTER_GRACE_S` at the
        latest, if it has been silent by then :data:`SILENT_MIN_S` and :data:`TURN_FACTOR`
        times ``longest_turn_s``.
    longest_turn_s : float
        The longest turn the master completed in training so far.

    Returns
    -------
    float or None
        The clock's time, or None: no bound.
    """
    found = None if silence_s is None else last_beat + silence_s
    if train_start is not None and max_time_s is not None:
        silent = max(SILENT_MIN_S, TURN_FACTOR * longest_turn_s)
        timed = max(train_start + max_time_s + MASTER_GRACE_S, last_beat + silent)
        found = timed if found is None else min(found, timed)
    return found


def own_code(cls: type) -> None:
    """The job's algorithm is ``cls``: its files (and those of the classes it derives from,
    flegel's base class aside) are the code a stuck master's line names first."""
    for klass in cls.__mro__:
        file = getattr(sys.modules.get(klass.__module__), "__file__", None)
        if file and not file.startswith(_FLEGEL_DIR):
            _OWN_FILES.add(file)


def _is_user(file: str) -> bool:
    """A frame to name: the job's algorithm's own files (:func:`own_code`), else any file
    neither flegel's nor a library's (the standard library, ``site-packages``,
    ``dist-packages``): a script or module of the job's."""
    if file in _OWN_FILES:
        return True
    return not (file.startswith(_FLEGEL_DIR) or file.startswith(_LIBRARY_DIRS)
                or "/site-packages/" in file or "/dist-packages/" in file
                or file.startswith("<"))


def top_frame(frames: list[Frame]) -> Frame | None:
    """The frame to name (``frames`` innermost first): the innermost of the user's code,
    else the innermost (None: no frame)."""
    for frame in frames:
        if _is_user(frame[0]):
            return frame
    return frames[0] if frames else None


def frames_of(frame: FrameType | None) -> list[Frame]:
    """A Python stack, innermost first."""
    out: list[Frame] = []
    while frame is not None:
        out.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return out


def main_frames_in_dump(text: str) -> list[Frame]:
    """The main thread's frames in a ``faulthandler`` dump, innermost first: the thread
    whose outermost frame is not a thread's start (``threading.py``)."""
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
        elif line.startswith('  File "') and threads:
            file, _, rest = line[len('  File "'):].partition('", line ')
            number, _, func = rest.partition(" in ")
            with contextlib.suppress(ValueError):
                threads[-1].append((file, int(number), func.strip()))
    for frames in threads:
        if frames and not frames[-1][0].endswith("threading.py"):
            return frames
    return threads[0] if threads else []


def describe(frame: Frame | None) -> str:
    """``update_parameter (file:line)``, for the one line."""
    if frame is None:
        return "no Python frame"
    file, line, func = frame
    return f"{func} ({file}:{line})"


@dataclass(frozen=True)
class Stuck:
    """The master was silent past its bound."""

    phase: str
    silent_s: float
    bound: str  # the job keys that set it, for the line


class Watchdog:
    """The master's watch on itself (see the module's docstring); one per master.

    Parameters
    ----------
    on_stuck : callable
        Called once, from the watch's thread (or the main thread's :data:`DUMP_SIGNAL`
        handler, with the interrupted frame), when the master is stuck; ends the job.
    clock : callable
        Monotonic seconds (tests pass their own).
    state : str or None
        The launcher's state file (:func:`state_path`); None: not launched by ``flegel
        run``.
    """

    def __init__(self, on_stuck: Callable[[Stuck, FrameType | None], None],
                 clock: Callable[[], float] = time.monotonic, state: str | None = None) -> None:
        self.on_stuck = on_stuck
        self.clock = clock
        self.state = state
        #: Where the stack goes once the run directory exists (``master-stack.txt``).
        self.stack_to: Path | None = None
        self.phase = "starting"
        self._silence: Callable[[], float | None] = lambda: None
        self._bound = ""
        self._train_start: float | None = None
        self._max_time_s: float | None = None
        self.last_beat = clock()
        self.longest_turn_s = 0.0  # in training (:data:`TURN_FACTOR`)
        self._own_io = 0  # flegel's own I/O under way (nested): :meth:`own_io`
        self._stop = threading.Event()
        self._fired = threading.Lock()
        # One writer of the state file at a time (the main thread's enter, the thread's
        # look): one temporary file, and a stale deadline never written over a newer one.
        self._writes = threading.Lock()
        self._thread: threading.Thread | None = None
        #: The file the dump signal's C handler writes to (kept open for it).
        self.stack_file: IO[Any] | None = None

    def enter(self, phase: str, silence: Callable[[], float | None], bound: str,
              max_time_s: float | None = None) -> None:
        """Begin ``phase`` (``"training"`` starts the ``max_time_s`` clock), bounded by
        ``silence()`` (read at every look: the automatic stall timeout grows) described by
        ``bound``."""
        now = self.clock()
        self.phase, self._silence, self._bound = phase, silence, bound
        self._train_start = now if max_time_s is not None else None
        self._max_time_s = max_time_s
        self.last_beat = now
        # At once, not at the thread's next look: a master may hang before it (holding the
        # GIL, the thread then never looks again).
        self._write(self.deadline())

    def beat(self) -> None:
        """The master completed a turn of its loop."""
        now = self.clock()
        if self._train_start is not None:
            self.longest_turn_s = max(self.longest_turn_s, now - self.last_beat)
        self.last_beat = now

    def deadline(self) -> float | None:
        """When the master counts as stuck (the clock's time; None: never)."""
        silence = self._silence()
        if self._own_io and silence is not None:
            silence = max(silence, PHASE_MIN_S)
        return master_deadline(self.last_beat, silence, self._train_start, self._max_time_s,
                               self.longest_turn_s)

    @contextlib.contextmanager
    def own_io(self) -> Iterator[None]:
        """flegel's own I/O inside a turn (writing a checkpoint, waiting on its writer):
        bounded as outside training (``runtime.stall_timeout_s`` at least
        :data:`~flegel.runtime.limits.PHASE_MIN_S`), not by a small stall timeout meant for
        the user's code; ``max_time_s`` + the grace still holds.  Its end counts as a beat,
        but not as a turn: a checkpoint write must not lengthen :attr:`longest_turn_s`,
        which lets the master stay silent past ``max_time_s`` for 10x it."""
        self._own_io += 1
        try:
            yield
        finally:
            self._own_io -= 1
            self.last_beat = self.clock()

    def bound(self) -> str:
        """The job keys that bound the master now, with their values, for the lines."""
        parts = []
        if self._max_time_s is not None and self._train_start is not None:
            parts.append(f"stop.max_time_s: {self._max_time_s:g} and {MASTER_GRACE_S:g} s of "
                         "grace")
        silence = self._silence()
        if silence is not None:
            parts.append(f"{self._bound} {silence:g} s")
        return "; ".join(parts)

    def look(self, now: float | None = None) -> Stuck | None:
        """The master's state at ``now``: :class:`Stuck` once past its deadline."""
        now = self.clock() if now is None else now
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return None
        return Stuck(self.phase, now - self.last_beat, self.bound())

    def fire(self, stuck: Stuck, frame: FrameType | None = None) -> bool:
        """Hand ``stuck`` to ``on_stuck``, once (the thread and the signal handler race);
        False when the other came first."""
        if not self._fired.acquire(blocking=False):
            return False
        self.on_stuck(stuck, frame)
        return True

    def start(self) -> None:
        """Start the thread (a daemon: it never keeps the master alive)."""
        self._thread = threading.Thread(target=self._run, daemon=True, name="flegel-watchdog")
        self._thread.start()

    def stop(self) -> None:
        """The master's work is done: no bound any more (the launcher's
        ``runtime.finish_timeout_s`` takes over)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(TICK_S + 1.0)  # not past a look that would write a deadline again
        self._write(None)

    def _echo_stack(self) -> None:
        """A request for the stack alone (``kill -USR2``): the C handler wrote it into the
        launcher's folder; the user reads it on stderr."""
        if self.stack_file is not None:
            with contextlib.suppress(OSError, ValueError):
                _echo(self.stack_file)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            stuck = self.look()
            if stuck is not None:
                self.fire(stuck)
                return
            self._write(self.deadline())

    def _write(self, deadline: float | None) -> None:
        """Tell the launcher the deadline (None: none) as ``time.monotonic()`` seconds
        (one clock for every process of a Linux host: a step of the wall clock changes
        nothing) and as wall-clock seconds (for a launcher on another host)."""
        if self.state is None:
            return
        wall = mono = None
        if deadline is not None:
            mono = time.monotonic() + deadline - self.clock()
            wall = time.time() + deadline - self.clock()
        doc = {"pid": os.getpid(), "host": socket.gethostname(), "deadline": wall,
               "monotonic": mono,
               "phase": self.phase, "bound": self.bound(),
               "stack": None if self.stack_to is None else str(self.stack_to)}
        # Bounded: a signal handler on the main thread may interrupt the main thread's own
        # write; it then skips rather than waits on itself.
        if not self._writes.acquire(timeout=1.0):
            return
        try:
            lifetime.replace_text(self.state, json.dumps(doc))
        finally:
            self._writes.release()

    def on_dump_signal(self, signum: int, frame: FrameType | None) -> None:
        """:data:`DUMP_SIGNAL` on the main thread (its C handler wrote the stack first):
        end the job if the master is stuck (the launcher's call); otherwise it was a request
        for the stack alone."""
        stuck = self.look()
        if stuck is None:
            self._echo_stack()
            return
        if not self.fire(stuck, frame):
            # The thread is ending the job (it got the GIL while this handler ran): let it
            # run, not the stuck code this handler would return to.
            threading.Event().wait(ANSWER_S + 10.0)



def _echo(out: IO[Any]) -> None:
    """Copy what the C handler wrote into ``out`` (a file) to stderr, and empty it."""
    fd = out.fileno()
    size = os.lseek(fd, 0, os.SEEK_CUR)
    if size:
        sys.stderr.write(os.pread(fd, size, 0).decode(errors="replace"))
        sys.stderr.flush()
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)


def read_state(status: str) -> dict[str, Any] | None:
    """The master's state file (:func:`state_path`) as the launcher reads it (None: none,
    or half written)."""
    try:
        with open(state_path(status)) as f:
            found: dict[str, Any] = json.load(f)
    except (OSError, ValueError):
        return None
    return found


def past_deadline(state: dict[str, Any] | None) -> float | None:
    """Seconds the master is past the deadline in its state file (negative: before it;
    None: no deadline).  On the master's host on ``time.monotonic()`` (system-wide on
    Linux); from another host on the wall clock."""
    if state is None:
        return None
    mono, wall = state.get("monotonic"), state.get("deadline")
    if state.get("host") == socket.gethostname() and isinstance(mono, (int, float)):
        return time.monotonic() - mono
    return time.time() - wall if isinstance(wall, (int, float)) else None


def install_dump(master: Watchdog | None, status: str | None) -> IO[Any] | None:
    """Make :data:`DUMP_SIGNAL` write every thread's stack, from C (``faulthandler``): on
    rank 0 launched by ``flegel run`` into :func:`stack_path` (returned, to keep it open),
    elsewhere to stderr (``kill -USR2 PID`` shows where a rank is).  On the master, the
    signal then ends a stuck job (:meth:`Watchdog.on_dump_signal`)."""
    out: IO[Any] | None = None
    if master is not None:
        signal.signal(DUMP_SIGNAL, master.on_dump_signal)
        if status:
            with contextlib.suppress(OSError):
                out = open(stack_path(status), "w+")  # noqa: SIM115 - held for the process
    faulthandler.register(DUMP_SIGNAL, file=out if out is not None else sys.stderr,
                          all_threads=True, chain=master is not None)
    return out


def uninstall_dump() -> None:
    """The rank's work is done: take :data:`DUMP_SIGNAL` back from ``faulthandler`` and
    ignore it.  Its dump walks every thread's state without a lock; run inside C's exit
    handlers it read a state being freed and segfaulted (two core dumps: faulthandler_user
    -> dump_frame, under exit -> libmpi's handler; the signal was then SIGUSR1, which hydra
    sends as peer ranks end)."""
    with contextlib.suppress(ValueError, OSError):
        faulthandler.unregister(DUMP_SIGNAL)
        signal.signal(DUMP_SIGNAL, signal.SIG_IGN)


def phase_bound(timeout_s: float | str | None) -> float | None:
    """The bound on the master's silence outside training: ``runtime.stall_timeout_s``, at
    least :data:`PHASE_MIN_S` (``auto``: :data:`~flegel.runtime.limits.STALL_UNMEASURED_S`);
    None: none."""
    if timeout_s == AUTO:
        return STALL_UNMEASURED_S
    assert not isinstance(timeout_s, str)
    return None if timeout_s is None else max(timeout_s, PHASE_MIN_S)


#: The master's watchdog (one per process: :func:`start_master`), for :func:`beat`.
_current: list[Watchdog] = []


def beat() -> None:
    """The master completed a turn of one of its loops (a no-op elsewhere)."""
    if _current:
        _current[0].beat()


def enter(phase: str, silence: Callable[[], float | None], bound: str,
          max_time_s: float | None = None) -> None:
    """:meth:`Watchdog.enter` on the master's watchdog (a no-op elsewhere)."""
    if _current:
        _current[0].enter(phase, silence, bound, max_time_s)


def own_io() -> contextlib.AbstractContextManager[None]:
    """:meth:`Watchdog.own_io` on the master's watchdog (nothing elsewhere)."""
    return _current[0].own_io() if _current else contextlib.nullcontext()


def current() -> Watchdog | None:
    """The master's watchdog (None: none in this process)."""
    return _current[0] if _current else None


def start_master(comm: Any, save: Callable[[], str], timeout_s: float | str | None) -> Watchdog:
    """Set up rank 0's watchdog (its thread, the state file for the launcher and the dump
    signal) in its first phase, loading; ``save()`` saves the last good θ and says where
    (:class:`flegel.run._Saver`); ``timeout_s`` is ``runtime.stall_timeout_s``."""
    status = os.environ.get(lifetime.STATUS_ENV)
    dog = Watchdog(lambda stuck, frame: end_stuck(comm, dog, stuck, frame, save),
                   state=state_path(status) if status else None)
    _current[:] = [dog]
    enter_phase("starting the job", timeout_s)
    dog.stack_file = install_dump(dog, status)
    dog.start()
    return dog


def _phase_keys(timeout_s: float | str | None) -> str:
    """The keys of the bound outside training, for the lines (its value follows)."""
    if timeout_s == AUTO:
        return "runtime.stall_timeout_s: auto, outside training"
    return f"runtime.stall_timeout_s, at least {PHASE_MIN_S:g} s outside training:"


def training_keys(timeout_s: float | str | None) -> str:
    """The keys of the bound in training, for the lines (its value follows)."""
    return "runtime.stall_timeout_s: auto" if timeout_s == AUTO else "runtime.stall_timeout_s:"


def enter_phase(phase: str, timeout_s: float | str | None) -> None:
    """:func:`enter` a phase outside training, bounded by :func:`phase_bound`."""
    bound = phase_bound(timeout_s)
    enter(phase, lambda: bound, _phase_keys(timeout_s))


def finished() -> None:
    """The master's work is done (the run directory is written): :meth:`Watchdog.stop`."""
    if _current:
        _current[0].stop()


def _stack(dog: Watchdog, frame: FrameType | None) -> str:
    """Write every thread's stack into the run directory; say where it is.  From the dump
    signal its C handler wrote it already (:func:`stack_path`): it is moved there."""
    status = os.environ.get(lifetime.STATUS_ENV)
    if dog.stack_to is None:  # no run directory yet
        with contextlib.suppress(OSError, ValueError):
            if frame is not None and dog.stack_file is not None:
                _echo(dog.stack_file)
            else:
                faulthandler.dump_traceback(sys.stderr, all_threads=True)
        return "on stderr above"
    target = dog.stack_to
    with contextlib.suppress(OSError):
        if frame is not None and status and os.path.getsize(stack_path(status)):
            os.replace(stack_path(status), target)
        else:
            with open(target, "w") as f:
                faulthandler.dump_traceback(f, all_threads=True)
    return str(target)


def end_stuck(comm: Any, dog: Watchdog, stuck: Stuck, frame: FrameType | None,
              save: Callable[[], str]) -> None:
    """End the job of a stuck master: its stack, one line, the last good θ, exit code 3.

    Runs on the watchdog's thread (the main thread is stuck), or on the main thread from
    the dump signal's handler (``frame``: where the signal interrupted it).  Another cause
    decided first: nothing (this is its consequence).
    """
    if frame is None:
        main = threading.main_thread().ident
        frames = frames_of(sys._current_frames().get(main or 0))
    else:
        frames = frames_of(frame)
    where = _stack(dog, frame)
    what = (f"rank 0 (master, host {socket.gethostname()}, pid {os.getpid()}) was stuck: "
            f"silent for {stuck.silent_s:.1f} s while {stuck.phase} ({stuck.bound}); it was "
            f"in {describe(top_frame(frames))}; its stack is in {where}")
    lifetime.end_with(comm, ExitCode.STALLED, what, save)
