"""The master's MPI messaging: θ and instructions out, commits in, signals out.

:class:`MpiTransport` is the only part of the parameter server that touches MPI; the
server's logic (:class:`flegel.runtime.server.Server`) sees a :class:`Transport`, which
in-process tests replace with a fake.  Every send is nonblocking and every wait polls with
``Test`` and sleeps (:mod:`flegel.runtime.comm`), so no rank spins a core (README, How the
runtime works).
"""

from __future__ import annotations

import time
from typing import NamedTuple, Protocol

import numpy as np
from mpi4py import MPI

from flegel.protocol import (
    COMMIT,
    PARAMS,
    SIGNAL,
    EvalEnd,
    EvalReply,
    EvalRequest,
    MigrationOrder,
    Signal,
    Tag,
)
from flegel.runtime import comm as msg
from flegel.runtime.layout import Layout


class Commit(NamedTuple):
    """One received commit."""

    rank: int
    header: dict[str, float]   # the COMMIT header
    agg: dict                  # the aggregator
    #: Its transit, measured on receipt against the sender's ``sent_at`` (the wire's clock,
    #: ``time.time()``, is the transport's business: the server reads only its own clock).
    latency_s: float


class Transport(Protocol):
    """How the parameter server talks to its workers."""

    def send_params(self, rank: int, fields: dict[str, float], theta: dict | None) -> None:
        """Send a PARAMS header (and θ, unless None: the worker holds it already)."""
        ...

    def send_signal(self, rank: int, kind: Signal, version: int) -> None:
        """Send a control signal about θ ``version``."""
        ...

    def send_order(self, rank: int, order: MigrationOrder) -> None:
        """Send a small pickled migration order (it precedes the next PARAMS)."""
        ...

    def poll(self) -> list[Commit]:
        """Commits that arrived since the last poll (never blocks)."""
        ...

    def send_eval(self, rank: int, message: EvalRequest | EvalEnd) -> None:
        """Send an exact-evaluation request (pickled, with its θ snapshot) or its end."""
        ...

    def poll_evals(self) -> list[tuple[int, EvalReply]]:
        """Exact-evaluation replies that arrived (never blocks)."""
        ...

    def close(self) -> None:
        """Cancel pending receives and complete pending sends."""
        ...


class MpiTransport:
    """:class:`Transport` over an MPI communicator (rank 0 is the master).

    Parameters
    ----------
    comm : MPI.Comm
    theta_layout, agg_layout : Layout
        Buffer layouts of θ and of an aggregator.
    """

    def __init__(self, comm: MPI.Comm, theta_layout: Layout, agg_layout: Layout) -> None:
        self.comm = comm
        self.theta_layout = theta_layout
        self.agg_layout = agg_layout
        self.ranks = list(range(1, comm.size))
        self._recv = {r: np.empty(COMMIT.size + agg_layout.size) for r in self.ranks}
        self._send = {r: np.empty(PARAMS.size + theta_layout.size) for r in self.ranks}
        self._send_req: dict[int, MPI.Request | None] = {r: None for r in self.ranks}
        self._sig = {r: np.empty(SIGNAL.size) for r in self.ranks}
        self._sig_req: dict[int, MPI.Request | None] = {r: None for r in self.ranks}
        self._reqs = [comm.Irecv(self._recv[r], source=r, tag=Tag.COMMIT) for r in self.ranks]
        self._orders: list[MPI.Request] = []

    def send_params(self, rank: int, fields: dict[str, float], theta: dict | None) -> None:
        req = self._send_req[rank]
        if req is not None:
            msg.wait(req)
        buf = self._send[rank]
        PARAMS.write(buf, sent_at=time.time(), has_theta=float(theta is not None), **fields)
        n = PARAMS.size
        if theta is not None:
            self.theta_layout.pack(theta, buf[n:])
            n += self.theta_layout.size
        # A shorter message into the worker's full-size receive is fine in MPI.
        self._send_req[rank] = self.comm.Isend(buf[:n], dest=rank, tag=Tag.PARAMS)

    def send_signal(self, rank: int, kind: Signal, version: int) -> None:
        req = self._sig_req[rank]
        if req is not None:
            msg.wait(req)
        SIGNAL.write(self._sig[rank], kind=float(kind), version=version, sent_at=time.time())
        self._sig_req[rank] = self.comm.Isend(self._sig[rank], dest=rank, tag=Tag.SIGNAL)

    def send_order(self, rank: int, order: MigrationOrder) -> None:
        self._orders = [r for r in self._orders if not r.Test()]
        self._orders.append(self.comm.isend(order, dest=rank, tag=Tag.ORDER))

    def send_eval(self, rank: int, message: EvalRequest | EvalEnd) -> None:
        self._orders = [r for r in self._orders if not r.Test()]
        self._orders.append(self.comm.isend(message, dest=rank, tag=Tag.EVAL))

    def poll_evals(self) -> list[tuple[int, EvalReply]]:
        out: list[tuple[int, EvalReply]] = []
        status = MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=Tag.EVAL, status=status):
            src = status.Get_source()
            out.append((src, self.comm.recv(source=src, tag=Tag.EVAL)))
        return out

    def poll(self) -> list[Commit]:
        msg.check_faults(self.comm)  # a worker that failed reported it: end the job
        idx = MPI.Request.Testsome(self._reqs)
        out: list[Commit] = []
        for i in idx or ():
            rank = self.ranks[i]
            buf = self._recv[rank]
            header = COMMIT.read(buf)
            agg = self.agg_layout.unpack(buf[COMMIT.size:])
            self._reqs[i] = self.comm.Irecv(buf, source=rank, tag=Tag.COMMIT)
            out.append(Commit(rank, header, agg, max(time.time() - header["sent_at"], 0.0)))
        return out

    def close(self) -> None:
        for req in self._reqs:
            req.Cancel()
        MPI.Request.Waitall(self._reqs)  # cancelled receives complete at once
        for sent in (*self._send_req.values(), *self._sig_req.values(), *self._orders):
            if sent is not None:
                msg.wait(sent)
