"""Migration's costs to the barrier (issue 19, the migration row: NMF slower with async
migration than without), on the simulated clock and on the balancer alone.

* A target catching up on migrated points (Section 4.3's priority queue: each is trained
  until its passes caught up, P_target − P_source visits at the same θ) is paused at the
  pass grace, as a straggler is, instead of holding the barrier until its timer
  (:meth:`flegel.sync.fsp.FSP._catching_up`).
* A slow peer's share (``PEER_SHARE``) is split over its moves, not taken by the first
  (a straggler's points to every worker ahead whatever their load:
  ``tests/test_migration_churn.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from flegel.balance.migration import PEER_SHARE, Balancer, MigrationOptions
from flegel.sync import fsp
from tests.fakes import Simulation, overlapping
from tests.test_migration_churn import N_PER, settle

COST_S = 10e-6   # a point: a pass of 2,000 points takes 20 ms
ETA_MS = 100.0   # a fixed η of five passes: the passes end the iterations (Section 3.3)


@contextmanager
def without_catch_up_pause() -> Iterator[None]:
    """The master as before the rule: a catching-up target is never paused."""
    saved = fsp.FSP._catching_up
    fsp.FSP._catching_up = lambda self: []  # type: ignore[method-assign]
    try:
        yield
    finally:
        fsp.FSP._catching_up = saved  # type: ignore[method-assign]


def catch_up_run() -> Simulation:
    """Three workers, 2,000 points each of sorted clusters: worker 1 3x slower (slow, but no
    straggler to the balancer: its first round waits for measured speeds, so the points it
    sends are ~8 passes behind their target), worker 3 1.6x slower (not grouped with 2)."""
    x, _ = overlapping(6000)
    return Simulation("fsp", {"interval": "fixed", "eta_ms": ETA_MS,
                              "migration": {"mode": "async"}},
                      workers=3, data=x, cost_s=COST_S, slowdown={1: 3.0, 3: 1.6},
                      stop={"max_iterations": 40}).run()


def durations(sim: Simulation) -> list[tuple[dict, float]]:
    """(barrier event, its iteration's length in seconds), the calibration left out."""
    ev = sim.barrier_events()
    return [(e, e["time_s"] - p["time_s"]) for p, e in zip(ev, ev[1:])]


def test_a_catching_up_target_holds_no_barrier():
    """With the rule every iteration ends by the grace after its first pass (at most
    PASS_GRACE x the slowest first pass, 2 x 34 ms here), the catching-up target paused
    ('signal') with more points trained than it holds; without it the target trained its
    whole catch-up while the others waited: 104 ms against the others' 40 ms."""
    sim = catch_up_run()
    rows = durations(sim)
    catching = [(e, d) for e, d in rows
                if any(p > 2000 * 1.5 for p in e["workers"]["points"])]
    assert catching, "no migrated points were caught up on"
    assert any("signal" in e["workers"]["reason"] for e, _ in catching)
    assert max(d for _, d in rows) <= fsp.PASS_GRACE * 0.035, max(d for _, d in rows)
    with without_catch_up_pause():
        before = catch_up_run()
    worst = max(d for _, d in durations(before))
    assert worst > 1.4 * max(d for _, d in rows), worst
    # Fewer seconds for the same 40 iterations.
    assert sim.barrier_events()[-1]["time_s"] < before.barrier_events()[-1]["time_s"]


def test_a_slow_peer_splits_its_share_over_its_moves():
    """A peer 3x slower than three others of one speed (no straggler: under PEER_SPEED) is
    capped at PEER_SHARE of its points a round; the cap is split over the three targets, not
    sent to the first."""
    b = Balancer(MigrationOptions.of({"mode": "async"}))
    n = dict.fromkeys(range(1, 5), N_PER)
    v = {1: 3e-6, 2: 1e-6, 3: 1e-6, 4: 1e-6}
    p = {1: 4.0, 2: 12.0, 3: 12.0, 4: 12.0}
    # Speeds measured over a whole SPEED_WINDOW_S (peers may then move points).
    b.speed = {r: [(1.0, 1.0 / v[r])] for r in n}
    orders = settle(b, n, v, p, now=2.0)
    moved = {o.peer: o.points for o in orders.get(1, [])}
    assert set(moved) == {2, 3, 4}, moved
    assert sum(moved.values()) <= PEER_SHARE * N_PER
    assert max(moved.values()) - min(moved.values()) <= 1


@pytest.mark.parametrize("points", [np.int64(6000)])
def test_catch_up_run_keeps_every_point(points):
    """The paused catch-up loses no point: each is held by exactly one worker at the end."""
    sim = catch_up_run()
    assert sum(w.store.n_held for w in sim.workers.values()) == int(points)
