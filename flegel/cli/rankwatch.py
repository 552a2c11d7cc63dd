"""The launcher's own watch on the ranks' processes: which one died first, by rank and PID.

MPI cannot be trusted to say which rank died: hydra reports a PID that is not the dead
rank's, and MPICH ends any rank that touches a dead peer, often before the master can say a
word (:mod:`flegel.runtime.peers` tries; this is the sure way).  ``flegel run`` finds its
ranks by the environment it gave them (its own status file's path, hydra's ``PMI_RANK``),
then one thread waits in ``poll()`` on their pidfds (Linux >= 5.3), and on ``mpiexec``'s,
and notes what ended at each wake-up (:class:`Wake`) until every rank found has ended.

A rank can also die before it is found: its Python exits at start-up (a broken
``sitecustomize``, a missing module, the wrong interpreter on a node) before flegel or MPI
runs.  MPICH then leaves the other ranks waiting in ``MPI_Init`` for ever, spinning a core
each.  So a rank is watched from the moment it is found, and with a start-up bound (on one
host, where every rank shows in ``/proc``) a rank still missing after it counts as dead.

The first rank seen dead is not always the first to die.  When a host's processes are
killed, its MPI daemon (hydra's proxy, a small C process) is gone within a millisecond or
two, while its rank, a large Python process, takes 10-30 ms to exit (the kernel frees its
memory first): ``mpiexec`` meanwhile sees the host go, ends, and the ranks elsewhere die of
that, the master (which touched the dead peer) possibly before the killed rank (measured on
the local cluster, ``deploy/local/cluster.sh``; a CI run saw the master alone first and
named nobody).  So the watch also watches each rank's daemon (its parent process): a daemon
that ends while a rank it started still runs has lost that rank, whenever the rank's own end
shows.  What ends after ``mpiexec`` ended is a consequence.  The one limit left: the watch
must get the CPU between the killed daemon's end and ``mpiexec``'s, the killed rank's own
exit time; a wake-up later than that finds the whole job ended at once and names every rank.

The watch sees only the processes in this host's ``/proc``: every rank of a one-host job
(and of the local cluster, whose hosts share a kernel), not the ranks on other hosts of a
real cluster.  Without pidfds (macOS, Linux < 5.3, a seccomp filter) nothing is watched,
and the launcher says so once.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Seconds between looks for the ranks' processes while they start (a directory listing).
LOOK_S = 0.2
#: Seconds within which every rank of a one-host job must have started (a process exists
#: from its exec, well under a second after ``mpiexec`` starts even on a loaded machine).
#: Over several hosts, the watch stops looking for ranks this long after the start: ranks
#: on other hosts never show here, and a look reads every process's environment.
STARTUP_S = 15.0
#: Seconds a rank may still be missing once another rank was found: hydra starts a host's
#: ranks in one loop, milliseconds apart.
STARTUP_GAP_S = 5.0

_warned: list[bool] = []  # the missing-pidfd warning was given (once per process)


def _ranks_with(marker: bytes) -> dict[int, int]:
    """rank -> pid of this user's processes whose environment holds ``marker``."""
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(entry.path, "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in env:
            for var in env:
                if var.startswith(b"PMI_RANK="):
                    found[int(var[9:])] = int(entry.name)
    return found


def _stat(pid: int, field: int) -> int | None:
    """Field ``field`` (1-based, as proc(5) numbers them) of ``/proc/PID/stat``, from field
    4 on (None: the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return int(stat.rpartition(")")[2].split()[field - 3])


def _parent(pid: int) -> int | None:
    """The parent process of ``pid`` (None: it is gone)."""
    return _stat(pid, 4)


def _start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (None: it is gone): with the PID, it
    names one process (a PID is reused only by a process started later)."""
    return _stat(pid, 22)


@dataclass(frozen=True)
class Wake:
    """What one wake-up of the watch found ended, in the order the wake-ups came.

    Attributes
    ----------
    dead : tuple of (rank, pid)
        Ranks found dead (a rank whose work was over is not: see ``RankWatch.done``).
    lost : tuple of (rank, pid)
        Ranks not yet seen dead whose MPI daemon (their parent process) ended: they ended
        with it, or will (each rank dies with its daemon, :mod:`flegel.runtime.lifetime`).
    launcher_ended : bool
        ``mpiexec`` had ended by this wake-up.
    """

    dead: tuple[tuple[int, int], ...] = ()
    lost: tuple[tuple[int, int], ...] = ()
    launcher_ended: bool = False


def cause(wakes: Sequence[Wake]) -> list[tuple[int, int]]:
    """The ranks (rank, pid) whose end ended the job, as far as the watch can tell.

    The first wake-up that found a rank dead or lost decides: its workers, or the master
    when it ended alone.  A worker beside the master is the cause: MPICH ends a process that
    touches a dead peer, and on a loaded machine that comes within the same wake-up (issue
    21); a master dying first and a worker at once of something else is far less likely.
    Nothing is named when ``mpiexec`` was seen ended before any rank: the ranks then died of
    its end (a signal, a kill), which is not theirs to answer for.
    """
    for wake in wakes:
        named = sorted(set(wake.dead) | set(wake.lost))
        if named:
            workers = [d for d in named if d[0] != 0]
            return workers or named
        if wake.launcher_ended:
            return []
    return []


class RankWatch:
    """Find the ``n_ranks`` ranks started with ``marker`` in their environment and note
    what ended, wake-up by wake-up (:attr:`wakes`); :attr:`first` is the cause.

    Parameters
    ----------
    proc : Popen
        ``mpiexec`` (not yet waited for: its pidfd is opened here).
    n_ranks : int
    marker : str
        ``NAME=value`` set in the ranks' environment, unique to this launch.
    done : callable
        ``done(rank)``: the rank's work is over, its exit is not a death.
    on_death : callable
        Called (from the watching thread) when a rank died or was lost, once.
    startup_s : float or None
        Seconds within which every rank must have been found, and at most
        :data:`STARTUP_GAP_S` after the first one was; a rank missing then counts as dead
        (:attr:`missing`).  None: no bound (ranks on other hosts never show here).
    on_missing : callable, optional
        Called instead of ``on_death`` when a rank is missing (the others are still in
        ``MPI_Init``: nothing to save, the job may end at once).
    started : callable, optional
        ``started(rank)``: flegel runs in the rank.  A rank found but ending before it
        started counts as missing too (its Python exited at start-up, after hydra started
        it: whether it is seen alive first is a race).
    """

    def __init__(self, proc: subprocess.Popen[bytes], n_ranks: int, marker: str,
                 done: Callable[[int], bool] = lambda rank: False,
                 on_death: Callable[[], None] = lambda: None,
                 startup_s: float | None = None,
                 on_missing: Callable[[], None] | None = None,
                 started: Callable[[int], bool] = lambda rank: True) -> None:
        self.proc = proc
        self.n_ranks = n_ranks
        self.marker = marker.encode()
        self.done = done
        self.on_death = on_death
        self.startup_s = startup_s
        self.on_missing = on_death if on_missing is None else on_missing
        self.started = started
        #: What each wake-up of the watching thread found ended, in order.
        self.wakes: list[Wake] = []
        #: Ranks never found within ``startup_s`` (their process ended, or never began).
        self.missing: list[int] = []
        #: rank -> pid of every rank found so far (:meth:`wait_gone` waits for them).
        self.pids: dict[int, int] = {}
        self._starts: dict[int, int | None] = {}  # rank -> its process's start time
        #: pid -> the ranks it started, of every MPI daemon watched and not yet ended.
        self.daemons: dict[int, list[int]] = {}
        self._told = False  # on_death was called
        self._thread: threading.Thread | None = None
        self._launcher_fd: int | None = None
        # Decided here, before anyone waits for mpiexec (its PID cannot have been reused
        # yet): without pidfds (macOS, Linux < 5.3, a seccomp filter) no process can be
        # watched, and the user is told once what is lost.
        try:
            if not os.path.isdir("/proc"):
                raise OSError("no /proc")
            self._launcher_fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError) as exc:
            if not _warned:
                _warned.append(True)
                sys.stderr.write(f"flegel: warning: no pidfds here ({exc}); rank watch "
                                 "unavailable: a dead or missing rank is named by MPI only\n")
            return
        self._thread = threading.Thread(target=self._watch, daemon=True, name="flegel-ranks")
        self._thread.start()

    @property
    def first(self) -> list[tuple[int, int]]:
        """(rank, pid) of the ranks whose end ended the job (:func:`cause`); empty while
        none ended."""
        return cause(list(self.wakes))

    @property
    def watching(self) -> bool:
        """The watching thread runs (it ends once every rank found has ended)."""
        return self._thread is not None and self._thread.is_alive()

    def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (at most ``timeout_s``) for the watching thread to take in the ranks' ends,
        once they are gone: on a loaded machine the launcher otherwise read :attr:`first`
        before the thread had woken up (issue 21: exit 9 and no line for a killed worker)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _watch(self) -> None:
        ranks = self.pids
        fds: dict[int, int] = {}  # pidfd -> rank
        daemons: dict[int, int] = {}  # pidfd -> pid of a daemon that started ranks
        under = self.daemons  # daemon pid -> the ranks it started
        gone: set[int] = set()  # ranks seen dead or done
        poller = select.poll()
        assert self._launcher_fd is not None  # opened in __init__
        ended = False
        poller.register(self._launcher_fd, select.POLLIN)
        begun = time.monotonic()
        deadline = None if self.startup_s is None else begun + self.startup_s
        gap = STARTUP_GAP_S if self.startup_s is None else min(STARTUP_GAP_S, self.startup_s)
        try:
            while True:
                dead: list[tuple[int, int]] = []
                looking = (not ended and len(ranks) < self.n_ranks
                           and (deadline is not None or time.monotonic() < begun + STARTUP_S))
                if looking:
                    for rank, pid in _ranks_with(self.marker).items():
                        if rank in ranks:
                            continue
                        ranks[rank] = pid
                        try:
                            fd = os.pidfd_open(pid)
                        except OSError:  # gone already
                            gone.add(rank)
                            if not self.done(rank):
                                dead.append((rank, pid))
                            continue
                        self._starts[rank] = _start_time(pid)  # the pidfd pins the PID
                        fds[fd] = rank
                        poller.register(fd, select.POLLIN)
                        self._watch_daemon(rank, pid, daemons, under, poller)
                        if deadline is not None:  # the others follow within milliseconds
                            deadline = min(deadline, time.monotonic() + gap)
                    if dead and self._ended(Wake(tuple(sorted(dead)), (), ended)):
                        return
                    dead = []
                    looking = len(ranks) < self.n_ranks
                if looking and deadline is not None and time.monotonic() >= deadline:
                    self.missing = sorted(set(range(self.n_ranks)) - set(ranks))
                    self.on_missing()
                    return
                if not looking and not fds:
                    return  # every rank found here has ended
                # Sleep in the kernel until something ends; look again for ranks starting.
                ready = poller.poll(int(LOOK_S * 1000) if looking else None)
                lost: list[tuple[int, int]] = []
                was_ended = ended
                for fd, _ in ready:
                    poller.unregister(fd)
                    if fd == self._launcher_fd:
                        ended = True
                        continue
                    os.close(fd)
                    if fd in fds:
                        rank = fds.pop(fd)
                        gone.add(rank)
                        if not self.done(rank):  # not a rank that finished its work
                            dead.append((rank, ranks[rank]))
                    else:
                        lost += [(r, ranks[r]) for r in under.pop(daemons.pop(fd))
                                 if r not in gone and not self.done(r)]
                lost = sorted(set(lost) - set(dead))
                if (dead or lost or ended != was_ended) and \
                        self._ended(Wake(tuple(sorted(dead)), tuple(lost), ended)):
                    return
        finally:
            for fd in [*fds, *daemons]:
                os.close(fd)
            if self._launcher_fd is not None:
                os.close(self._launcher_fd)
                self._launcher_fd = None

    def _watch_daemon(self, rank: int, pid: int, daemons: dict[int, int],
                      under: dict[int, list[int]], poller: select.poll) -> None:
        """Watch the MPI daemon that started ``rank`` (its parent process) too: hydra's
        proxy, not ``mpiexec`` (watched already) nor init (the rank was orphaned)."""
        daemon = _parent(pid)
        if daemon is None or daemon <= 1 or daemon in (self.proc.pid, os.getpid()):
            return
        if daemon not in under:
            try:
                fd = os.pidfd_open(daemon)
            except OSError:
                return
            if _parent(pid) != daemon:  # it ended between the two looks (its PID reused?)
                os.close(fd)
                return
            daemons[fd] = daemon
            under[daemon] = []
            poller.register(fd, select.POLLIN)
        under[daemon].append(rank)

    def _ended(self, wake: Wake) -> bool:
        """Note ``wake``; True when the watch is over (a rank never started)."""
        self.wakes.append(wake)
        if self._told or not (wake.dead or wake.lost):
            return False
        early = [rank for rank, _ in wake.dead if not self.started(rank)]
        if early and self.startup_s is not None:  # never started: as if never found
            self.missing = sorted(early)
            self.on_missing()
            return True
        self._told = True
        self.on_death()
        return False

    def _open(self) -> dict[int, int]:
        """pidfd -> rank of every rank found that still runs.  A rank's PID may have been
        reused since it ended: the process must have started when the rank did (checked
        after the pidfd is open, which pins the process)."""
        fds: dict[int, int] = {}
        if not hasattr(os, "pidfd_open"):
            return fds
        for rank, pid in list(self.pids.items()):
            try:
                fd = os.pidfd_open(pid)
            except OSError:  # gone already (or no pidfds here)
                continue
            began = _start_time(pid)
            if began is not None and began == self._starts.get(rank):
                fds[fd] = rank
            else:
                os.close(fd)
        return fds

    def alive(self) -> list[tuple[int, int]]:
        """(rank, pid) of the ranks found that still run."""
        fds = self._open()
        try:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            ended = {fd for fd, _ in poller.poll(0)}
            return sorted((rank, self.pids[rank]) for fd, rank in fds.items()
                          if fd not in ended)
        finally:
            for fd in fds:
                os.close(fd)

    def kill_all(self) -> None:
        """SIGKILL every rank found that still runs."""
        fds = self._open()
        for fd in fds:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(fd)

    def wait_gone(self, timeout_s: float) -> list[int]:
        """Return once every rank found has exited: the launcher must not return before its
        ranks are gone (a scheduler that sees it exit reuses the node; issue 21).

        Waits in ``poll()`` on the ranks' pidfds for at most ``timeout_s``; a rank still
        alive then is killed (SIGKILL) and waited for a second more.  Returns the ranks that
        had to be killed.
        """
        fds = self._open()
        killed: list[int] = []
        try:
            if fds and _wait_exits(fds, timeout_s):
                for fd, rank in fds.items():
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                        killed.append(rank)
                    except ProcessLookupError:
                        continue
                _wait_exits(fds, 1.0)
        finally:
            for fd in fds:
                os.close(fd)
        return sorted(killed)


def _wait_exits(fds: dict[int, int], timeout_s: float) -> bool:
    """Sleep in ``poll()`` until every process of ``fds`` (pidfds) exited or ``timeout_s``
    passed; True if some are still alive."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    left = len(fds)
    deadline = time.monotonic() + timeout_s
    while left:
        wait_ms = int(max(deadline - time.monotonic(), 0) * 1000)
        ready = poller.poll(wait_ms)
        if not ready:
            return True
        for fd, _ in ready:
            poller.unregister(fd)
            left -= 1
    return False
