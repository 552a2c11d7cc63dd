"""Ranks agree before any work: a problem on one rank ends every rank with one message, exit 2.

Each rank checks what it alone can see (its file system when it validates the job, its own
shard when it loads it, docs/exit-codes.md), then all ranks take part in :func:`agree`: if any rank
found a problem, rank 0 prints the first one (the lowest failing rank's) once, and every rank
raises :class:`Rejected`, which the command line turns into exit code 2 -- no traceback, no
``MPI_Abort``, nothing left running.

The vote is a non-blocking all-gather of one flag per rank, completed by polling (MPICH's
blocking collectives busy-poll, and a master waiting here while workers load large shards
would burn a core, :mod:`flegel.runtime.comm`); only the failing rank's message then
travels, point to point, to rank 0.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from mpi4py import MPI

from flegel.runtime import Backoff
from flegel.runtime import comm as msg

__all__ = ["Rejected", "agree", "agreed"]

T = TypeVar("T")


class Rejected(Exception):  # noqa: N818 - a decision, not an error of this rank
    """Raised on every rank when some rank found a problem during an agreement.

    Rank 0 has already printed the problem; the command line exits with code 2.

    Parameters
    ----------
    message : str
        The problem as printed (without the ``flegel: error:`` prefix).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def agree(comm: MPI.Comm, problem: str | None,
          watch: Callable[[], None] | None = None) -> None:
    """Vote on whether every rank may go on; collective over ``comm``.

    Parameters
    ----------
    comm : MPI.Comm
        The job's communicator; every rank must call this at the same step.
    problem : str or None
        This rank's problem, worded for the user, or None.
    watch : callable, optional
        Called at every idle poll while the vote is open (the master's watch for a worker's
        fault or silence, ``runtime.stall_timeout_s``); it ends the wait by raising.

    Raises
    ------
    Rejected
        On every rank, when any rank passed a problem.  Rank 0 has printed the first failing
        rank's problem to stderr (naming the rank when it is not rank 0, and its host
        when that is not rank 0's).
    """
    flags = np.zeros(comm.size, dtype=np.int8)
    mine = np.array([problem is not None], dtype=np.int8)
    req = comm.Iallgather(mine, flags)
    backoff = Backoff()
    while not req.Test():
        if watch is not None:
            watch()
        backoff.sleep()
    failed = np.flatnonzero(flags)
    if not len(failed):
        return
    first = int(failed[0])
    if comm.rank == first and first != 0:
        # Its host too: on several hosts, a file may be missing on one (issue 20).
        msg.send_object(comm, (problem, socket.gethostname()), dest=0)
    text = problem
    if comm.rank == 0:
        if first != 0:
            told, host = msg.recv_object(comm, source=first)[0]
            where = f", host {host}" if host != socket.gethostname() else ""
            text = f"(on rank {first}{where}) {told}"
        others = len(failed) - 1
        more = f" [and {others} more rank{'s' if others > 1 else ''}]" if others else ""
        sys.stderr.write(f"flegel: error: {text}{more}\n")
        sys.stderr.flush()
    raise Rejected(str(text))


def agreed(comm: MPI.Comm, problems: tuple[type[BaseException], ...],
           fn: Callable[..., T], *args: Any, watch: Callable[[], None] | None = None) -> T:
    """Run ``fn(*args)`` on this rank, then :func:`agree` on whether it went well everywhere.

    Parameters
    ----------
    comm : MPI.Comm
        The job's communicator; every rank must call this at the same step.
    problems : tuple of exception types
        The exceptions that are the user's to fix (a bad job, bad data): they become this
        rank's vote.  Any other exception propagates (a bug: the caller aborts with the
        traceback).
    fn : callable
        This rank's part.
    *args
        Its arguments.
    watch : callable, optional
        As :func:`agree`.

    Returns
    -------
    T
        What ``fn`` returned, when every rank succeeded.

    Raises
    ------
    Rejected
        On every rank, when ``fn`` raised one of ``problems`` on any rank.
    """
    try:
        result = fn(*args)
    except problems as exc:
        agree(comm, str(exc), watch)  # raises Rejected on every rank
        raise
    agree(comm, None, watch)
    return result
