"""Messaging primitives that never spin a core while waiting.

MPICH's blocking receive and barrier busy-poll: on an oversubscribed machine a waiting rank
burns a full core and becomes a fake straggler (DESIGN §4, measured 100% of a core).  Every
wait here is ``Test`` plus a short ``sleep`` instead (1-3% of a core).
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from flegel.protocol import Tag
from flegel.runtime import Backoff


def wait(req: MPI.Request) -> None:
    """Complete ``req`` without spinning."""
    backoff = Backoff()
    while not req.Test():
        backoff.sleep()


def wait_all(reqs: list[MPI.Request]) -> None:
    """Complete every request in ``reqs`` without spinning."""
    backoff = Backoff()
    while not MPI.Request.Testall(reqs):
        backoff.sleep()


def recv_object(comm: MPI.Comm, source: int = MPI.ANY_SOURCE,
                tag: int = Tag.OBJECT) -> tuple[Any, int]:
    """Receive a pickled object without spinning; return it and its source rank."""
    status = MPI.Status()
    backoff = Backoff()
    while not comm.Iprobe(source=source, tag=tag, status=status):
        backoff.sleep()
    src = status.Get_source()
    return comm.recv(source=src, tag=tag), src


def send_object(comm: MPI.Comm, obj: Any, dest: int, tag: int = Tag.OBJECT) -> None:
    """Send a pickled object and wait for completion without spinning."""
    wait(comm.isend(obj, dest=dest, tag=tag))


def bcast_object(comm: MPI.Comm, obj: Any, root: int = 0) -> Any:
    """Broadcast a pickled object with point-to-point messages (no spinning collective)."""
    if comm.rank == root:
        reqs = [comm.isend(obj, dest=r, tag=Tag.OBJECT) for r in range(comm.size) if r != root]
        wait_all(reqs)
        return obj
    return recv_object(comm, source=root)[0]
