"""Migration at the level of a worker's shard (FSP paper Section 4.3): windows behind the
cursor, the target's priority queue, virtual migration; per-point traversals counted."""

from __future__ import annotations

import numpy as np

from flegel.runtime.store import ID_SHIFT, ShardStore, origin_of


def _store(rank: int, n: int) -> ShardStore:
    x = np.arange(n * 2, dtype=float).reshape(n, 2) + 1000 * rank
    ids = (np.int64(rank) << ID_SHIFT) | np.arange(n, dtype=np.int64)
    return ShardStore(x, None, {"v": np.zeros(n)}, ids=ids)


def _train(s: ShardStore, points: int, block: int = 4) -> list[np.ndarray]:
    """Process about ``points`` points; return the ids of every block."""
    done, seen = 0, []
    while done < points:
        b, sel = s.next_block(block)
        b.state["v"][:] += 1
        s.commit_block(b, sel)
        seen.append(s.ids[sel])
        done += max(len(b), 1)
    return seen


def _active_ids(*stores: ShardStore) -> np.ndarray:
    return np.concatenate([s.ids[~s.inactive] for s in stores])


def test_window_is_taken_bottom_up_behind_the_cursor():
    s = _store(1, 10)
    _train(s, 6, block=3)
    assert s.cursor == 6
    assert list(s.select_behind_cursor(4)) == [5, 4, 3, 2]
    s.lock(np.array([5, 4]))
    assert list(s.select_behind_cursor(3)) == [3, 2, 1]
    # Wraps around the end: the rows of the previous pass come last.
    assert list(s.select_behind_cursor(8)) == [3, 2, 1, 0, 9, 8, 7, 6]


def test_while_theta_is_kept_windows_carry_untrained_rows_only():
    """FSP's coverage (``unseen_first``): the rows never trained leave, the last in traversal
    order first, and no trained row once they ran out (the master counts a point in
    flight as untrained, so a trained one would hold θ for nothing)."""
    s = _store(1, 10)
    _train(s, 6, block=3)
    s.unseen_first = True
    assert list(s.select_behind_cursor(3)) == [9, 8, 7]
    assert list(s.select_behind_cursor(8)) == [9, 8, 7, 6]
    s.lock(np.array([9, 8, 7, 6]))
    assert len(s.select_behind_cursor(4)) == 0
    s.unseen_first = False
    assert list(s.select_behind_cursor(2)) == [5, 4]


def test_points_move_once_and_the_target_trains_them_first():
    a, b = _store(1, 40), _store(2, 40)
    _train(a, 20)
    _train(b, 120)  # b is three passes ahead
    rows = a.select_behind_cursor(8)
    a.lock(rows)
    payload = a.export(rows)
    new = b.admit(payload)
    ids = _active_ids(a, b)
    assert len(ids) == 80 and len(np.unique(ids)) == 80  # every point active exactly once
    assert b.queued[new].all()
    first = _train(b, 4)[0]
    assert set(first) <= set(payload["ids"])  # migrated points are trained first
    # They catch up with b's passes, then join its round robin as native points.
    _train(b, 8 * b.cycles)
    assert not b.queued.any()
    assert b.visits[new].min() >= b.cycles


def test_no_point_is_skipped_or_trained_twice_within_a_pass_while_migrating():
    a, b = _store(1, 64), _store(2, 64)
    rng = np.random.default_rng(0)
    for step in range(60):
        _train(a, 4)
        _train(b, 16)
        if step % 5 == 0:
            rows = a.select_behind_cursor(int(rng.integers(1, 6)))
            a.lock(rows)
            b.admit(a.export(rows))
        ids = _active_ids(a, b)
        assert len(ids) == 128 and len(np.unique(ids)) == 128
    # Visits never run ahead of a worker's passes: a point is never trained twice in one.
    for s_ in (a, b):
        held = ~s_.inactive
        assert s_.visits[held].max() <= s_.cycles + 1


def test_one_pass_visits_each_native_point_exactly_once():
    b = _store(2, 50)
    _train(b, 50, block=7)
    a = _store(1, 30)
    rows = a.select_behind_cursor(10)
    a.lock(rows)
    b.admit(a.export(rows))
    start_cycles = b.cycles
    before = b.visits.copy()
    while b.cycles == start_cycles:
        _train(b, 1, block=5)
    # Every native point: one visit this pass; migrated ones caught up to the pass count.
    delta = b.visits - before
    native = np.arange(50)
    assert (delta[native] == 1).all()
    assert (b.visits[50:] >= start_cycles).all()


def test_virtual_migration_reactivates_without_data():
    a, b = _store(1, 20), _store(2, 20)
    _train(a, 10)
    rows = a.select_behind_cursor(6)
    a.lock(rows)
    b.admit(a.export(rows))
    _train(b, 80)
    assert a.n_held == 14 and b.n_held == 26
    # Balance needs them back: b retires its copies (ids, state, visits; no features) ...
    taken = b.retire(origin=1, count=4)
    assert set(taken) == {"ids", "state", "visits"} and len(taken["ids"]) == 4
    assert (origin_of(taken["ids"]) == 1).all()
    # ... and a takes them up again with the state they reached on b.
    back = a.reactivate(taken)
    assert (a.state["v"][back] == taken["state"]["v"]).all()
    ids = _active_ids(a, b)
    assert len(ids) == 40 and len(np.unique(ids)) == 40
    assert a.n_held == 18 and b.n_held == 22


def test_full_block_holds_only_points_held_here():
    a, b = _store(1, 12), _store(2, 12)
    rows = a.select_behind_cursor(0) if a.cursor else np.array([11, 10, 9])
    a.lock(rows)
    b.admit(a.export(rows))
    assert len(a.full_block()) == 9 and len(b.full_block()) == 15


def test_counters_kept_per_window_match_a_full_recount():
    """Locks, admissions and reactivations update the shard's counters in time proportional
    to the window; they must equal a recount from scratch at every step."""
    rng = np.random.default_rng(1)
    a, b = _store(1, 3000), _store(2, 3000)

    def counters(s: ShardStore) -> tuple[int, ...]:
        return (s.n_active, s.n_held, s._visits_sum, s.n_seen, s._skip, s._n_queued)

    for i in range(300):
        _train(a, 100, block=100)
        _train(b, 400, block=100)
        if i % 7 == 0:
            rows = a.select_behind_cursor(int(rng.integers(1, 200)))
            a.lock(rows)
            b.admit(a.export(rows))
        if i % 23 == 0 and i:
            a.reactivate(b.retire(origin=1, count=50))
        for s in (a, b):
            kept = counters(s)
            s._recount()
            assert kept == counters(s), i
    assert a.n_held + b.n_held == 6000


def test_shuffle_permutes_rows_together_once_before_training():
    """FSP's shuffled traversal (issue 19): features, labels, state and ids move together;
    nothing changes once a point was trained."""
    x = np.arange(20, dtype=float).reshape(10, 2)
    y = np.arange(10)
    s = ShardStore(x.copy(), y.copy(), {"a": np.arange(10) * 10}, ids=np.arange(10) + 100)
    s.shuffle(3)
    assert sorted(s.ids.tolist()) == list(range(100, 110)) and s.ids.tolist() != sorted(s.ids)
    rows = s.ids - 100
    assert np.array_equal(s.x, x[rows]) and np.array_equal(s.y, y[rows])
    assert np.array_equal(s.state["a"], rows * 10)
    before = s.ids.copy()
    s.visited = 1
    s.shuffle(4)
    assert np.array_equal(s.ids, before)


# ------------------------------------------------- a checkpoint taken with a window in transit
def _resumed(*stores: ShardStore) -> list[ShardStore]:
    """Each store's checkpoint state, settled by the cut and restored into a fresh store."""
    from flegel.runtime.cut import consistent_cut

    states = {rank: {"store": s.checkpoint_state()} for rank, s in enumerate(stores, 1)}
    cuts = consistent_cut(states)
    out = []
    for rank, s in enumerate(stores, 1):
        fresh = _store(rank, s.n_native)
        fresh.restore(states[rank]["store"])
        if rank in cuts:
            fresh.settle_cut(cuts[rank]["take_back"], cuts[rank]["give_up"])
        out.append(fresh)
    return out


def test_a_window_in_transit_at_a_checkpoint_is_trained_again_by_its_source():
    """The source locked the window (sent), the target had not admitted it: in neither
    snapshot the points are trained; after the cut the source trains them, once."""
    a, b = _store(1, 12), _store(2, 12)
    _train(a, 8), _train(b, 8)
    rows = a.select_behind_cursor(4)
    a.export(rows)
    a.lock(rows)  # sent; the checkpoint comes before b admits it
    assert len(_active_ids(a, b)) == 20
    ra, rb = _resumed(a, b)
    ids = _active_ids(ra, rb)
    assert len(ids) == 24 and len(np.unique(ids)) == 24
    assert ra.n_active == 12 and rb.n_active == 12 and ra.n_queued == 4
    _train(ra, 16)  # the taken-back points train with the others
    assert (ra.visits[rows] > a.visits[rows]).all()


def test_a_window_in_both_snapshots_is_trained_by_the_target_alone():
    """The source's snapshot came before it sent, the target's after it admitted (and
    trained) the window: the target's copy, the most trained, stays."""
    a, b = _store(1, 12), _store(2, 12)
    _train(a, 8), _train(b, 8)
    rows = a.select_behind_cursor(4)
    snapshot_a = a.checkpoint_state()
    b.admit(a.export(rows))
    _train(b, 8)
    a2 = _store(1, 12)
    a2.restore(snapshot_a)
    ra, rb = _resumed(a2, b)
    ids = _active_ids(ra, rb)
    assert len(ids) == 24 and len(np.unique(ids)) == 24
    assert ra.n_active == 8 and rb.n_active == 16
    assert set(origin_of(rb.ids[~rb.inactive])) == {1, 2}


def test_a_consistent_checkpoint_is_left_as_it_is():
    from flegel.runtime.cut import consistent_cut

    a, b = _store(1, 12), _store(2, 12)
    _train(a, 8)
    rows = a.select_behind_cursor(4)
    b.admit(a.export(rows))
    a.lock(rows)
    assert consistent_cut({1: {"store": a.checkpoint_state()},
                           2: {"store": b.checkpoint_state()}}) == {}


def test_a_resumed_fsp_worker_expects_no_message_sent_before_the_checkpoint():
    """Message counts of the checkpoint would make the drain at the end wait for a window
    no one sends again (the cut settled it on the points)."""
    from flegel.sync.fsp import FSPWorker

    before = FSPWorker({"migration": {"mode": "async"}})
    assert before.migrator is not None
    before.migrator.sent, before.migrator.received = {2: 4}, {2: 3}
    before.migrator.expected, before.migrator.quota = {2: 100}, {2: 50}
    after = FSPWorker({"migration": {"mode": "async"}})
    after.restore(before.checkpoint_state())
    assert after.migrator is not None
    assert (after.migrator.sent, after.migrator.received, after.migrator.expected) == ({}, {}, {})
    assert after.migrator.quota == {2: 50}  # orders still to carry out stay


def test_a_checkpoint_without_a_state_key_the_algorithm_keeps_now_restores_it_fresh():
    """An older version's checkpoint (K-means before its Hamerly bound): the new key starts
    as init_state sets it, on every row, migrated-in rows included."""
    old = ShardStore(np.ones((4, 2)), None, {"label": np.arange(4)})
    saved = old.checkpoint_state()
    saved["x_admitted"] = np.zeros((2, 2))  # two rows had migrated in
    saved["state"] = {"label": np.arange(6)}
    new = ShardStore(np.ones((4, 2)), None, {"label": np.full(4, -1), "bound": np.full(4, -1.0)})
    new.restore(saved)
    assert list(new.state["label"]) == [0, 1, 2, 3, 4, 5]
    assert new.state["bound"].shape == (6,) and (new.state["bound"] == -1.0).all()


def test_n_behind_counts_only_queued_points_still_behind_in_passes():
    """``n_behind`` (the COMMIT header ``behind``, FSP's catch-up pause) counts the queued
    points still behind the target's passes; points migrated in ahead of them are queued
    too (``n_queued``) but have nothing to catch up: a target holding only those is not
    catching up."""
    ahead, behind, target = _store(1, 10), _store(2, 10), _store(3, 10)
    _train(ahead, 40), _train(target, 20)          # 4 passes, 2 passes
    target.admit(ahead.export(ahead.select_behind_cursor(3)))
    assert target.n_queued == 3 and target.n_behind == 0
    target.admit(behind.export(behind.select_behind_cursor(2)))  # never trained
    assert target.n_queued == 5 and target.n_behind == 2
    _train(target, 8)  # the catch-up first: 2 passes of the 2 behind, then the traversal
    assert target.n_behind == 0
