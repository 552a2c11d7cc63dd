"""Messaging primitives that never spin a core while waiting.

MPICH's blocking receive and barrier busy-poll: on an oversubscribed machine a waiting rank
burns a full core and becomes a fake straggler (measured: 100% of a core; README, How the
runtime works).  Every wait here is ``Test`` plus a short ``sleep`` instead (1-3% of a core).

A wait may be *watched*: a callable run at every poll that raises
:class:`~flegel.runtime.faults.JobFault` to end it (a worker's FAULT message, a deadline),
so the master never waits forever on a worker that failed or stalled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from flegel.protocol import ExitCode, StopReason, Tag
from flegel.runtime import Backoff
from flegel.runtime.faults import JobFault

#: Called at every poll of a watched wait; raises to end the wait.
Watch = Callable[[], None]


def _never() -> None:
    pass


def wait(req: MPI.Request, watch: Watch = _never) -> None:
    """Complete ``req`` without spinning."""
    backoff = Backoff()
    while not req.Test():
        watch()
        backoff.sleep()


def wait_all(reqs: list[MPI.Request], watch: Watch = _never) -> None:
    """Complete every request in ``reqs`` without spinning."""
    backoff = Backoff()
    while not MPI.Request.Testall(reqs):
        watch()
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


def received(comm: MPI.Comm, tag: int) -> list[tuple[int, Any]]:
    """Every pickled message with ``tag`` that has arrived, as ``(source, object)``; never
    waits."""
    out: list[tuple[int, Any]] = []
    status = MPI.Status()
    while comm.iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status):
        src = status.Get_source()
        out.append((src, comm.recv(source=src, tag=tag)))
    return out


def drop_unreceived(comm: MPI.Comm) -> list[tuple[int, int]]:
    """Receive and drop every message that reached this rank and was never received; return
    their ``(source, tag)``.  For a rank whose work is over, just before ``MPI_Finalize``.

    A message nobody receives fails MPICH's ``MPI_Finalize`` on its receiver ("Communicator
    ... being freed has 1 unmatched message(s)"), and the other ranks then wait in theirs for
    ever (hydra's barrier), after the run directory was written.  Seen: an FSP pause signal
    crossing the stop, the worker's receive for it already cancelled (the master no longer
    signals a stopped worker; this stays as the fallback).  Between the master and a worker
    each side's last message to the other was received, and a pair's messages arrive in
    order, so whatever else it sent is here: an empty probe means nothing is left from it.
    Between two workers (migration) no such order across senders holds.
    """
    dropped: list[tuple[int, int]] = []
    status = MPI.Status()
    while comm.iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
        src, tag = status.Get_source(), status.Get_tag()
        comm.Recv([bytearray(max(status.Get_count(MPI.BYTE), 1)), MPI.BYTE], source=src,
                  tag=tag)
        dropped.append((src, tag))
    return dropped


def bcast_object(comm: MPI.Comm, obj: Any, root: int = 0, watch: Watch = _never) -> Any:
    """Broadcast a pickled object with point-to-point messages (no spinning collective)."""
    if comm.rank == root:
        reqs = [comm.isend(obj, dest=r, tag=Tag.OBJECT) for r in range(comm.size) if r != root]
        wait_all(reqs, watch)
        return obj
    return recv_object(comm, source=root)[0]


def gather_objects(comm: MPI.Comm, ranks: list[int],
                   watch: Callable[[list[int]], None] = lambda missing: None,
                   tag: int = Tag.OBJECT) -> dict[int, Any]:
    """Receive one pickled object from each of ``ranks`` (in any order) without spinning;
    ``watch(missing)`` runs at every idle poll with the ranks not heard from yet."""
    out: dict[int, Any] = {}
    backoff = Backoff()
    while len(out) < len(ranks):
        got = False
        for r in ranks:
            if r not in out and comm.Iprobe(source=r, tag=tag):
                out[r] = comm.recv(source=r, tag=tag)
                got = True
        if not got:
            watch([r for r in ranks if r not in out])
            backoff.sleep()
    return out


# ----------------------------------------------------------------------------- faults
def send_fault(comm: MPI.Comm, code: int, text: str, grace_s: float) -> None:
    """Tell the master this worker failed (``text``: one line), then give the master
    ``grace_s`` to save θ and end the job; the caller ends it if the master could not."""
    req = comm.isend({"rank": comm.rank, "pid": os.getpid(), "code": int(code),
                      "text": text}, dest=0, tag=Tag.FAULT)
    deadline = time.monotonic() + grace_s
    backoff = Backoff()
    while time.monotonic() < deadline:
        req.Test()  # progress the send; the master's abort ends this process
        backoff.sleep()


def check_faults(comm: MPI.Comm) -> None:
    """Raise :class:`JobFault` if a worker reported its failure (on the master)."""
    if comm.Iprobe(source=MPI.ANY_SOURCE, tag=Tag.FAULT):
        fault = comm.recv(source=MPI.ANY_SOURCE, tag=Tag.FAULT)
        raise WorkerFault(fault)


class WorkerFault(JobFault):
    """A worker's failure, as it reported it (its traceback is on its own stderr)."""

    def __init__(self, fault: dict[str, Any]) -> None:
        code = int(fault.get("code", ExitCode.FAILED))
        reason = StopReason.NUMERIC if code == ExitCode.NUMERIC else StopReason.FAILED
        super().__init__(f"worker {fault['rank']} (pid {fault['pid']}) failed: "
                         f"{fault['text']}", code, reason)
        self.rank = int(fault["rank"])
