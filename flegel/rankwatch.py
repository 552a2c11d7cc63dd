"""The launcher's own watch on the ranks' processes: which one died first, by rank and PID.

MPI cannot be trusted to say which rank died: hydra reports a PID that is not the dead
rank's, and MPICH ends any rank that touches a dead peer, often before the master can say a
word (:mod:`flegel.runtime.peers` tries; this is the sure way).  ``flegel run`` finds its
ranks by the environment it gave them (its own status file's path, hydra's ``PMI_RANK``),
then one thread waits in ``poll()`` on their pidfds (Linux >= 5.3) until the first exits.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: Seconds between looks for the ranks' processes while they start (a directory listing).
LOOK_S = 0.2


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
    """

    def __init__(self, proc: subprocess.Popen[bytes], n_ranks: int, marker: str,
                 done: Callable[[int], bool] = lambda rank: False,
                 on_death: Callable[[], None] = lambda: None) -> None:
        self.proc = proc
        self.n_ranks = n_ranks
        self.marker = marker.encode()
        self.done = done
        self.on_death = on_death
        self.first: list[tuple[int, int]] = []  # the ranks found dead at the first wake-up
        if os.path.isdir("/proc") and hasattr(os, "pidfd_open"):
            threading.Thread(target=self._watch, daemon=True, name="flegel-ranks").start()

    def _watch(self) -> None:
        ranks: dict[int, int] = {}
        while len(ranks) < self.n_ranks:
            if self.proc.poll() is not None:
                return
            time.sleep(LOOK_S)
            ranks = _ranks_with(self.marker)
        fds: dict[int, int] = {}
        for rank, pid in ranks.items():
            try:
                fds[os.pidfd_open(pid)] = rank
            except OSError:
                self.first.append((rank, pid))  # gone already
        if self.first:
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        while fds:
            ready = poller.poll()  # blocks in the kernel until a rank exits
            dead = sorted((fds[fd], ranks[fds[fd]]) for fd, _ in ready
                          if not self.done(fds[fd]))
            for fd, _ in ready:
                poller.unregister(fd)
                os.close(fd)
                del fds[fd]
            if dead:  # not a rank that finished its work and exited
                self.first = dead
                self.on_death()
                break
        for fd in fds:
            os.close(fd)

    def dead_worker(self) -> tuple[int, int] | None:
        """(rank, pid) of the worker that died first, when that is clear: it was the only
        rank found dead at the first wake-up (the others die of its death after it)."""
        if len(self.first) == 1 and self.first[0][0] != 0:
            return self.first[0]
        return None
