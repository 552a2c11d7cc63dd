"""The launcher's own watch on the ranks' processes: which one died first, by rank and PID.

MPI cannot be trusted to say which rank died: hydra reports a PID that is not the dead
rank's, and MPICH ends any rank that touches a dead peer, often before the master can say a
word (:mod:`flegel.runtime.peers` tries; this is the sure way).  ``flegel run`` finds its
ranks by the environment it gave them (its own status file's path, hydra's ``PMI_RANK``),
then one thread waits in ``poll()`` on their pidfds (Linux >= 5.3) until the first exits.

A rank can also die before it is found: its Python exits at start-up (a broken
``sitecustomize``, a missing module, the wrong interpreter on a node) before flegel or MPI
runs.  MPICH then leaves the other ranks waiting in ``MPI_Init`` for ever, spinning a core
each.  So a rank is watched from the moment it is found, and with a start-up bound (on one
host, where every rank shows in ``/proc``) a rank still missing after it counts as dead.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: Seconds between looks for the ranks' processes while they start (a directory listing).
LOOK_S = 0.2
#: Seconds within which every rank of a one-host job must have started (a process exists
#: from its exec, well under a second after ``mpiexec`` starts even on a loaded machine).
STARTUP_S = 15.0
#: Seconds a rank may still be missing once another rank was found: hydra starts a host's
#: ranks in one loop, milliseconds apart.
STARTUP_GAP_S = 5.0


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


class RankWatch:
    """Find the ``n_ranks`` ranks started with ``marker`` in their environment and note
    which died first (:attr:`first`: rank, pid).

    Parameters
    ----------
    proc : Popen
        ``mpiexec``; the watch stops when it ends.
    n_ranks : int
    marker : str
        ``NAME=value`` set in the ranks' environment, unique to this launch.
    done : callable
        ``done(rank)``: the rank's work is over, its exit is not a death.
    on_death : callable
        Called (from the watching thread) when a rank died.
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
        self.first: list[tuple[int, int]] = []  # the ranks found dead at the first wake-up
        #: Ranks never found within ``startup_s`` (their process ended, or never began).
        self.missing: list[int] = []
        #: rank -> pid of every rank found so far (:meth:`wait_gone` waits for them).
        self.pids: dict[int, int] = {}
        self._thread: threading.Thread | None = None
        if os.path.isdir("/proc") and hasattr(os, "pidfd_open"):
            self._thread = threading.Thread(target=self._watch, daemon=True,
                                            name="flegel-ranks")
            self._thread.start()

    def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (at most ``timeout_s``) for the watching thread to take in the ranks' ends,
        once they are gone: on a loaded machine the launcher otherwise read :attr:`first`
        before the thread had woken up (issue 21: exit 9 and no line for a killed worker)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _watch(self) -> None:
        ranks = self.pids
        fds: dict[int, int] = {}  # pidfd -> rank
        poller = select.poll()
        deadline = None if self.startup_s is None else time.monotonic() + self.startup_s
        gap = STARTUP_GAP_S if self.startup_s is None else min(STARTUP_GAP_S, self.startup_s)
        try:
            while True:
                for rank, pid in _ranks_with(self.marker).items():
                    if rank in ranks:
                        continue
                    ranks[rank] = pid
                    try:
                        fd = os.pidfd_open(pid)
                    except OSError:  # gone already
                        if self.done(rank):
                            continue
                        self._died([(rank, pid)])
                        return
                    fds[fd] = rank
                    poller.register(fd, select.POLLIN)
                    if deadline is not None:  # the others follow within milliseconds
                        deadline = min(deadline, time.monotonic() + gap)
                if len(ranks) == self.n_ranks:
                    timeout_ms = None  # every rank found: sleep in the kernel until one exits
                elif self.proc.poll() is not None:
                    return
                elif deadline is not None and time.monotonic() >= deadline:
                    self.missing = sorted(set(range(self.n_ranks)) - set(ranks))
                    self.on_missing()
                    return
                else:
                    timeout_ms = int(LOOK_S * 1000)  # look again for ranks still starting
                ready = poller.poll(timeout_ms)
                dead = sorted((fds[fd], ranks[fds[fd]]) for fd, _ in ready
                              if not self.done(fds[fd]))
                for fd, _ in ready:
                    poller.unregister(fd)
                    os.close(fd)
                    del fds[fd]
                if dead:  # not a rank that finished its work and exited
                    self._died(dead)
                    return
                if not fds and len(ranks) == self.n_ranks:
                    return  # every rank finished its work
        finally:
            for fd in fds:
                os.close(fd)

    def _died(self, dead: list[tuple[int, int]]) -> None:
        early = [rank for rank, _ in dead if not self.started(rank)]
        if early and self.startup_s is not None:  # never started: as if never found
            self.missing = sorted(early)
            self.on_missing()
            return
        self.first = dead
        self.on_death()

    def wait_gone(self, timeout_s: float) -> list[int]:
        """Return once every rank found has exited: the launcher must not return before its
        ranks are gone (a scheduler that sees it exit reuses the node; issue 21).

        Waits in ``poll()`` on the ranks' pidfds for at most ``timeout_s``; a rank still
        alive then is killed (SIGKILL) and waited for a second more.  Returns the ranks that
        had to be killed.
        """
        fds: dict[int, int] = {}  # pidfd -> rank
        for rank, pid in list(self.pids.items()):
            try:
                fds[os.pidfd_open(pid)] = rank
            except OSError:  # gone already (or no pidfds here)
                continue
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

    def dead_worker(self) -> tuple[int, int] | None:
        """(rank, pid) of the worker that died first, when that is clear: it was the only
        worker found dead at the first wake-up (the others die of its death after it).

        The master may be found dead beside it: MPICH ends a process that touches a dead
        peer, and on a loaded machine that comes within the same wake-up (issue 21: exit 9,
        no line, once in ten fault matrices).  The worker is the cause then: a master dying
        first and a worker dying at once of something else is far less likely than that."""
        workers = [d for d in self.first if d[0] != 0]
        return workers[0] if len(workers) == 1 else None


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
