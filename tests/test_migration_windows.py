"""How fast a straggler's points leave it (FSP paper Section 4.3, issue 19), in one process.

* the balancer recognises a straggler from its speeds at every barrier, so the first round
  moves all it must (not :data:`~flegel.balance.migration.PEER_SHARE` per move);
* a burst of slowness shorter than :data:`~flegel.balance.migration.STRAGGLER_BARRIERS`
  barriers makes no straggler;
* the migrator keeps one window in flight per target, and sends a move in at most
  :data:`~flegel.balance.migration.WINDOWS_PER_MOVE` windows (never under ``window``).
"""

from __future__ import annotations

import math

import numpy as np

from flegel.balance.migration import (
    PEER_SHARE,
    STRAGGLER_BARRIERS,
    WINDOWS_PER_MOVE,
    Balancer,
    MigrationOptions,
    Migrator,
)
from flegel.balance.monitor import WorkerStat
from flegel.balance.planner import Move
from flegel.protocol import MigrationOrder, OrderKind, PeerMessage, Window
from flegel.runtime.store import ID_SHIFT, ShardStore
from tests.test_migration_churn import N_PER, settle


def test_the_first_round_moves_a_stragglers_points_beyond_the_peer_share():
    """A straggler 50x slower than three equal workers: the first round it can be planned
    at moves nearly all its points, not PEER_SHARE of them per move."""
    b = Balancer(MigrationOptions.of({"mode": "async"}))
    n = dict.fromkeys(range(1, 5), N_PER)
    v = {1: 50e-6, 2: 1e-6, 3: 1e-6, 4: 1e-6}
    orders = settle(b, n, v, {1: 0.05, 2: 3.0, 3: 3.0, 4: 3.0}, now=0.2)
    sent = sum(o.points for o in orders.get(1, []) if o.kind == OrderKind.SEND)
    assert b.straggler(1)
    assert sent > 0.9 * N_PER > 3 * PEER_SHARE * N_PER


def _stats(slow: bool) -> list[WorkerStat]:
    return [WorkerStat(1, N_PER, 50e-6 if slow else 1e-6, 1.0),
            *(WorkerStat(r, N_PER, 1e-6, 1.0) for r in (2, 3, 4))]


def test_a_burst_shorter_than_the_straggler_barriers_makes_no_straggler():
    b = Balancer(MigrationOptions.of({"mode": "async"}))
    for _ in range(STRAGGLER_BARRIERS - 1):
        b.note_stragglers(_stats(slow=True))
    assert not b.straggler(1)
    b.note_stragglers(_stats(slow=False))  # a barrier at its usual speed: the count restarts
    for _ in range(STRAGGLER_BARRIERS - 1):
        b.note_stragglers(_stats(slow=True))
    assert not b.straggler(1)
    b.note_stragglers(_stats(slow=True))
    assert b.straggler(1)
    assert not any(b.straggler(r) for r in (2, 3, 4))


class Port:
    """A worker as its migrator sees it: a real shard, orders put in by the test, posts
    kept, and sends that complete when the test says so."""

    def __init__(self, n: int) -> None:
        ids = (np.int64(1) << ID_SHIFT) | np.arange(n, dtype=np.int64)
        self.shard = ShardStore(np.zeros((n, 2)), None, {"v": np.zeros(n)}, ids=ids)
        self.rank, self.peers = 1, [2, 3, 4]
        self.inbox: list[MigrationOrder] = []
        self.posts: list[tuple[int, PeerMessage]] = []
        self.pending: list[int] = []  # the targets of the sends not completed, oldest first

    def post(self, dest: int, message: PeerMessage) -> None:
        self.posts.append((dest, message))
        self.pending.append(dest)

    def sends_pending(self, dest: int | None = None) -> int:
        return sum(1 for d in self.pending if dest is None or d == dest)

    def receive(self, limit: int | None = None) -> list[tuple[int, PeerMessage]]:
        return []

    def orders(self) -> list[MigrationOrder]:
        out, self.inbox = self.inbox, []
        return out

    def pause(self) -> None:
        pass

    def windows(self) -> list[tuple[int, int]]:
        return [(d, len(m.points["ids"])) for d, m in self.posts if isinstance(m, Window)]


def _sending(points_to: dict[int, int]) -> tuple[Port, Migrator]:
    """An async migrator (64-point windows) on a 10,000-point worker, after its first step
    on send orders of ``points_to`` (target rank: points)."""
    port = Port(10_000)
    m = Migrator(MigrationOptions.of({"mode": "async", "window": 64}))
    port.inbox = [MigrationOrder(OrderKind.SEND, d, n, 1) for d, n in points_to.items()]
    m.step(port)
    return port, m


def test_one_window_in_flight_per_target_and_a_move_in_at_most_four_windows():
    port, m = _sending({2: 3000, 3: 100})
    size = math.ceil(3000 / WINDOWS_PER_MOVE)
    # One window to each target at once: the large move in quarters, the small one in
    # windows of the configured size.
    assert port.windows() == [(2, size), (3, 64)]
    assert m.in_flight == size + 64
    m.step(port)  # nothing completed: nothing more leaves
    assert len(port.windows()) == 2
    del port.pending[0]  # the oldest send completed
    m.step(port)
    assert port.windows()[2:] == [(2, size)]
    port.pending.clear()
    while m.quota:
        m.step(port)
        port.pending.clear()
    to = {t: [k for d, k in port.windows() if d == t] for t in (2, 3)}
    assert sum(to[2]) == 3000 and len(to[2]) == WINDOWS_PER_MOVE
    assert to[3] == [64, 36]
    assert m.points_moved == 3100


def test_room_reserved_before_training_takes_a_stragglers_share_without_a_copy():
    """Migrator.attached reserves a peer's even share of a shard like this one; admitting
    that many points then copies only them, never the shard (FSP paper §4.3)."""
    target = Port(9_000)
    Migrator(MigrationOptions.of({"mode": "async"})).attached(target)
    source = Port(9_000)
    source.shard.x[:] = np.arange(18_000, dtype=float).reshape(9_000, 2)
    before = target.shard.x.base
    rows = source.shard.select_behind_cursor(3_000)  # 9,000 / 3 peers
    source.shard.lock(rows)
    payload = source.shard.export(rows)
    target.shard.admit(payload)
    assert target.shard.x.base is before and target.shard.ids.base is not None
    np.testing.assert_array_equal(target.shard.x[9_000:], payload["x"])
    np.testing.assert_array_equal(target.shard.ids[9_000:], payload["ids"])
    assert target.shard.n_active == 12_000
    target.shard.admit(source.shard.export(source.shard.select_behind_cursor(10)))
    assert target.shard.x.base is not before  # past the room: grown as before
    assert len(target.shard) == 12_010


def test_a_migrator_checkpointed_before_its_per_target_windows_resumes():
    """A checkpoint of the previous version pickled a Migrator without ``ordered`` (and with
    one ``window`` in all): resumed, it has a new migrator's attributes and takes orders."""
    import pickle

    m = Migrator(MigrationOptions.of({"mode": "async"}))
    del m.ordered, m.windows
    m.window = None  # the old single window in flight
    old = pickle.loads(pickle.dumps(m))
    old.resumed()
    assert old.ordered == {} and old.windows == [] and old.in_flight == 0


def test_a_target_that_took_its_window_first_gets_the_next_one():
    """Sends complete as each target takes its window, not in the order they were posted:
    the target whose send completed gets the next window, the one still in flight none."""
    port, m = _sending({2: 3000, 3: 3000})
    size = math.ceil(3000 / WINDOWS_PER_MOVE)
    assert port.windows() == [(2, size), (3, size)]
    port.pending.remove(3)  # target 3 took its window; target 2's is still in flight
    m.step(port)
    assert port.windows()[2:] == [(3, size)]
    assert [t for t, _ in m.windows] == [2, 3] and m.in_flight == 2 * size


def test_a_peer_sends_at_most_its_share_in_a_round_whatever_its_targets():
    """PEER_SHARE caps what a source that is no straggler sends in a round, all its moves
    together: paired with three targets it sent 3 x 25% (issue 19 review)."""
    b = Balancer(MigrationOptions.of({"mode": "async"}))
    b.speed = {r: [(1.0, 1e6)] for r in (1, 2, 3, 4)}  # every speed measured
    stats = [WorkerStat(1, 10_000, 1e-6, 1.0)] + [WorkerStat(r, 10_000, 1e-6, 500.0)
                                                  for r in (2, 3, 4)]
    moves = b.keep_some([Move(1, r, 5_000) for r in (2, 3, 4)], stats, 10.0)
    assert moves and sum(m.points for m in moves) <= PEER_SHARE * 10_000, moves
