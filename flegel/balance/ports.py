"""The data migration's extension of the ports (FSP paper Section 4.3).

The generic ports (:mod:`flegel.ports`) carry what every sync model needs; migration needs
more, on both sides, and only FSP uses it:

* :class:`MigrationPort` -- what a worker's :class:`~flegel.balance.migration.Migrator` needs
  of its worker: the shard's migration operations (:class:`MigratingShard`), its rank and
  peers, worker-to-worker messages (:data:`~flegel.protocol.PeerMessage`), the master's
  orders (:class:`~flegel.protocol.MigrationOrder`) and a pause;
* :class:`OrderPort` -- what the master's :class:`~flegel.balance.migration.Balancer` needs of
  the parameter server: sending an order.

The runtime implements both (:class:`flegel.runtime.worker.Worker`,
:class:`flegel.runtime.server.Server`, without importing this module), and so do the
simulated-clock fakes of the tests.  A policy reaches them through the extension point of
the generic ports: the wiring hands a worker policy its worker once
(:meth:`flegel.ports.WorkerPolicy.attach`), and a master policy holds the server it was made
with; FSP checks there that they implement these ports.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from flegel.protocol import MigrationOrder, PeerMessage, Points


class MigratingShard(Protocol):
    """What migration may do to a worker's shard (:class:`flegel.runtime.store.ShardStore`)."""

    #: Windows take the points never trained first (FSP's coverage).
    unseen_first: bool

    @property
    def marked(self) -> bool: ...

    @property
    def n_active(self) -> int: ...

    @property
    def n_unseen(self) -> int: ...

    def select_behind_cursor(self, count: int) -> np.ndarray: ...

    def shuffle(self, seed: int) -> None: ...

    def lock(self, rows: np.ndarray) -> None: ...

    def export(self, rows: np.ndarray) -> Points: ...

    def admit(self, payload: Points) -> np.ndarray: ...

    def reserve(self, extra: int) -> None: ...

    def retire(self, origin: int, count: int) -> Points: ...

    def reactivate(self, taken: Points) -> np.ndarray: ...


@runtime_checkable
class MigrationPort(Protocol):
    """A worker as its migrator sees it."""

    @property
    def shard(self) -> MigratingShard:
        """The worker's shard."""
        ...

    @property
    def rank(self) -> int:
        """This worker's rank."""
        ...

    @property
    def peers(self) -> list[int]:
        """The other workers' ranks."""
        ...

    def post(self, dest: int, message: PeerMessage) -> None:
        """Send ``message`` to worker ``dest`` without blocking (``Tag.MIGRATE``)."""
        ...

    def sends_pending(self, dest: int | None = None) -> int:
        """Messages :meth:`post` sent (to ``dest``; None: to anyone) that have not completed
        yet."""
        ...

    def receive(self, limit: int | None = None) -> list[tuple[int, PeerMessage]]:
        """``(source, message)`` of the worker messages that arrived, at most ``limit``
        (never blocks)."""
        ...

    def orders(self) -> list[MigrationOrder]:
        """Migration orders from the master that arrived (never blocks)."""
        ...

    def pause(self) -> None:
        """Sleep one poll interval (waiting without spinning a core)."""
        ...


@runtime_checkable
class OrderPort(Protocol):
    """The parameter server as the master's balancer sees it."""

    def order(self, rank: int, order: MigrationOrder) -> None:
        """Send a migration order to ``rank`` (it arrives before the next instructions)."""
        ...
