"""Messaging primitives that never spin a core while waiting.

MPICH's blocking receive and barrier busy-poll: on an oversubscribed machine a waiting rank
burns a full core and becomes a fake straggler (DESIGN §4, measured 100% of a core).  Every
wait here is ``Test`` plus a short ``sleep`` instead (1-3% of a core).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from flegel import runtime
from flegel.runtime import Backoff

# Message tags.
TAG_PARAMS = 11   # master -> worker: header + θ
TAG_COMMIT = 12   # worker -> master: header + aggregator
TAG_SIGNAL = 13   # master -> worker: small control header (pause, abort, ...)
TAG_OBJECT = 14   # pickled start-up and end-of-run messages



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
                tag: int = TAG_OBJECT) -> tuple[Any, int]:
    """Receive a pickled object without spinning; return it and its source rank."""
    status = MPI.Status()
    backoff = Backoff()
    while not comm.Iprobe(source=source, tag=tag, status=status):
        backoff.sleep()
    src = status.Get_source()
    return comm.recv(source=src, tag=tag), src


def send_object(comm: MPI.Comm, obj: Any, dest: int, tag: int = TAG_OBJECT) -> None:
    """Send a pickled object and wait for completion without spinning."""
    wait(comm.isend(obj, dest=dest, tag=tag))


def bcast_object(comm: MPI.Comm, obj: Any, root: int = 0) -> Any:
    """Broadcast a pickled object with point-to-point messages (no spinning collective)."""
    if comm.rank == root:
        reqs = [comm.isend(obj, dest=r, tag=TAG_OBJECT) for r in range(comm.size) if r != root]
        wait_all(reqs)
        return obj
    return recv_object(comm, source=root)[0]


class Header:
    """Named float64 fields at the front of a message buffer."""

    SIZE = 16

    def __init__(self, fields: tuple[str, ...]) -> None:
        if len(fields) > self.SIZE:
            raise ValueError("too many header fields")
        self.index = {name: i for i, name in enumerate(fields)}

    def write(self, buf: np.ndarray, **values: float) -> None:
        buf[: self.SIZE] = 0.0
        for k, v in values.items():
            buf[self.index[k]] = v

    def read(self, buf: np.ndarray) -> dict[str, float]:
        return {k: float(buf[i]) for k, i in self.index.items()}


#: Worker -> master, in front of an aggregator.
COMMIT = Header((
    "clock",        # the worker's own iteration count (1-based)
    "version",      # θ version the work was computed from
    "points",       # points processed in this commit
    "compute_s",    # time spent computing (injected straggler sleeps included)
    "wait_s",       # time waited for θ before this iteration began
    "passes",       # traversal passes completed, cumulative
    "reason",       # why the worker committed (see sync.base.Reason)
    "sent_at",      # time.time() when sent
    "block_s",      # current estimate of one block's compute time
    "rate",         # points per second of pure compute (no injected delay)
    "slowed_s",     # time lost to injected stragglers in this commit
    "n_active",     # points of the shard that have not voted to halt
    "aborted",      # points whose work was thrown away (SpecSync)
))

#: Master -> worker, in front of θ.
PARAMS = Header((
    "version",      # θ version (global iteration count under barrier models)
    "stop",         # 1: training is over, evaluate θ and report
    "batch",        # points to process before the next commit (0: until signalled)
    "eta_s",        # flexible-barrier interval for the next iteration
    "offset_s",     # this worker's semi-centralized offset δ_i
    "rollback",     # 1: return to the last mark (FSPV probes)
    "mark",         # 1: mark position and journal state from here; -1: drop the mark
    "sent_at",
))

#: Master -> worker control signal.
SIGNAL = Header(("kind", "version", "sent_at"))
SIGNAL_PAUSE = runtime.SIGNAL_PAUSE
SIGNAL_ABORT = runtime.SIGNAL_ABORT
