"""Knowing at once when a peer process dies: the master watches its workers, a worker its
master, through Linux pidfds.

MPI says nothing useful when a rank is killed (SIGKILL, the out-of-memory killer, a crash in
native code): hydra kills every other rank and reports a PID that is not the dead rank's.
When ``flegel run`` launches MPI itself it asks hydra not to clean up
(``-disable-auto-cleanup``), and every rank watches the processes of its peers on the same
host: one daemon thread per rank blocked in ``poll()`` on their pidfds (no CPU while they
live).  The master then names the dead worker by rank and real PID, saves the last θ and ends
the job (exit code 5), from the watching thread (:func:`on_death`); a worker whose master
died exits at once.  Peers on other hosts are not
watched: their silence is caught by ``runtime.stall_timeout_s``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import threading
import zlib
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from flegel.protocol import ExitCode
from flegel.runtime import comm as msg
from flegel.runtime.lifetime import STATUS_ENV, mark_done

#: Bytes of a host name kept for messages (a longer one is cut).
_NAME_BYTES = 64


def host_pids(comm: MPI.Comm) -> dict[int, tuple[int, int]]:
    """Every rank's (host id, pid), gathered without a spinning collective; every rank's
    host name and pid, for messages, are kept for :func:`where`."""
    name = socket.gethostname().encode()
    mine = np.array([zlib.crc32(name), os.getpid()], dtype=np.int64)
    table = np.empty((comm.size, 2), dtype=np.int64)
    names = np.zeros((comm.size, _NAME_BYTES), dtype=np.uint8)
    mine_name = np.frombuffer(name[:_NAME_BYTES].ljust(_NAME_BYTES, b"\0"), dtype=np.uint8)
    msg.wait_all([comm.Iallgather(mine, table), comm.Iallgather(mine_name, names)])
    for r in range(comm.size):
        host = bytes(names[r]).rstrip(b"\0").decode(errors="replace")
        _where[r] = f"host {host}, pid {int(table[r][1])}"
    return {r: (int(h), int(p)) for r, (h, p) in enumerate(table)}


#: rank -> "host H, pid P" (:func:`host_pids` fills it).
_where: dict[int, str] = {}


def where() -> dict[int, str]:
    """rank -> ``"host H, pid P"`` of every rank (empty before :func:`watch`)."""
    return dict(_where)


class PeerWatch:
    """Watch some peers' processes; call :meth:`dead` to learn which died (rank, pid).

    Parameters
    ----------
    peers : dict of int to int
        rank -> pid of the peers to watch (on this host).
    on_death : callable, optional
        Called from the watching thread with (rank, pid) of the first peer that died, while
        armed (a worker exits there: it has nothing to save).
    """

    def __init__(self, peers: dict[int, int],
                 on_death: Callable[[int, int], None] | None = None) -> None:
        self.peers = dict(peers)
        self.on_death = on_death
        self.armed = True
        self._dead: list[tuple[int, int]] = []
        self._fds: dict[int, int] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        for rank, pid in self.peers.items():
            try:
                self._fds[os.pidfd_open(pid)] = rank
            except (OSError, AttributeError):  # not Linux >= 5.3, or it is gone already
                continue
        # close() writes here to wake the poll: the thread must be gone before C's exit
        # handlers run (a thread woken by a peer's exit then raced them: a rare SIGSEGV).
        self._wake_r, self._wake_w = os.pipe()
        if self._fds:
            self._thread = threading.Thread(target=self._watch, daemon=True,
                                            name="flegel-peers")
            self._thread.start()

    def _watch(self) -> None:
        poller = select.poll()
        for fd in self._fds:
            poller.register(fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        left = len(self._fds)
        while left:
            for fd, _ in poller.poll():  # blocks in the kernel until a peer exits
                if fd == self._wake_r or self._closed:
                    return
                poller.unregister(fd)
                left -= 1
                rank = self._fds[fd]
                self._dead.append((rank, self.peers[rank]))
                if self.armed and self.on_death is not None:
                    self.on_death(rank, self.peers[rank])

    def close(self, timeout: float = 0.5) -> bool:
        """Stop watching: wake the thread, join it (at most ``timeout`` seconds) and close
        the file descriptors; no ``on_death`` call after it returns True.  A rank calls it
        before ``MPI_Finalize`` and C's ``exit``: no flegel thread may run beside their exit
        handlers.  False: the thread is still running (in ``on_death``); its fds stay open.
        """
        if self._closed:
            return True
        self._closed = True
        self.armed = False
        if self._thread is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        for fd in [*self._fds, self._wake_r, self._wake_w]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}
        return True

    def dead(self) -> list[tuple[int, int]]:
        """(rank, pid) of the watched peers that died while armed, in the order seen."""
        return list(self._dead) if self.armed else []

    def disarm(self) -> None:
        """Peers may end from now on (the run is over)."""
        self.armed = False


#: This rank's watch (one per process, like its signal handlers).
_current: PeerWatch | None = None


def watch(comm: MPI.Comm) -> None:
    """Start this rank's watch: the master watches its workers, a worker the master (when
    they share its host).  A worker whose master died exits at once (code 1)."""
    global _current
    table = host_pids(comm)
    host = table[comm.rank][0]
    if comm.rank == 0:
        _current = PeerWatch({r: pid for r, (h, pid) in table.items() if r != 0 and h == host})
        return

    def master_died(rank: int, pid: int) -> None:
        # A consequence, not a cause: flegel run must not take this exit for a death.
        mark_done(comm.rank)
        status = os.environ.get(STATUS_ENV)
        if not (status and os.path.exists(status)):  # else the master said why it ended
            sys.stderr.write(f"flegel: worker {comm.rank}: the master (rank 0, pid {pid}) "
                             "died; exiting\n")
            sys.stderr.flush()
        os._exit(ExitCode.FAILED)

    _current = PeerWatch({0: table[0][1]} if table[0][0] == host else {},
                         on_death=master_died)


def on_death(fn: Callable[[int, int], None]) -> None:
    """Call ``fn(rank, pid)`` from the watching thread when a watched peer dies while armed
    (at once if one died already).

    The master must act there, not at its next poll: MPICH ends a process that touches a
    dead peer (its next ``Test``), so the master's main loop would die without a word.
    """
    if _current is None:
        return
    _current.on_death = fn
    for rank, pid in _current.dead()[:1]:
        fn(rank, pid)


def disarm() -> None:
    """The run is over: peers may exit from now on."""
    if _current is not None:
        _current.disarm()


def close(timeout: float = 0.5) -> bool:
    """Stop this rank's watch and join its thread (:meth:`PeerWatch.close`); True when none
    runs any more."""
    return _current.close(timeout) if _current is not None else True
