"""Migration's costs to the barrier (issue 19, the migration row: NMF slower with async
migration than without), on the simulated clock and on the balancer alone.

* A target catching up on migrated points (Section 4.3's priority queue: each is trained
  until its passes caught up, P_target − P_source visits at the same θ) is paused at the
  pass grace, or at PASS_GRACE times its own predicted pass if longer, instead of holding
  the barrier until its timer (:meth:`flegel.sync.fsp.FSP._catching_up`).
* A slow peer's share (``PEER_SHARE``) is split over its moves, not taken by the first
  (a straggler's points to every worker ahead whatever their load:
  ``tests/test_migration_churn.py``).
"""

from __future__ import annotations

import pytest

from flegel.balance.migration import PEER_SHARE, Balancer, MigrationOptions
from flegel.interval.base import Plan
from flegel.protocol import POLL_S
from flegel.sync import fsp
from tests.fakes import Simulation, overlapping
from tests.test_migration_churn import N_PER, settle

COST_S = 10e-6   # a point: a pass of 2,000 points takes 20 ms
ETA_MS = 100.0   # a fixed η of five passes: the passes end the iterations (Section 3.3)
SLOWDOWN = {1: 3.0, 3: 1.6}
LATENCY_S = 50e-6  # the simulation's default one-way latency
BLOCK_S = 0.2e-3   # ... and block length: a pause is seen at a block's end


def catch_up_run() -> Simulation:
    """Three workers, 2,000 points each of sorted clusters: worker 1 3x slower (slow, but no
    straggler to the balancer: its first round waits for measured speeds, so the points it
    sends are ~8 passes behind their target), worker 3 1.6x slower (not grouped with 2)."""
    x, _ = overlapping(6000)
    return Simulation("fsp", {"interval": "fixed", "eta_ms": ETA_MS,
                              "migration": {"mode": "async"}},
                      workers=3, data=x, cost_s=COST_S, slowdown=SLOWDOWN,
                      latency_s=LATENCY_S, block_ms=1e3 * BLOCK_S,
                      stop={"max_iterations": 40}).run()


@pytest.fixture(scope="module")
def with_pause() -> Simulation:
    """The run with the rule (about 8 s of simulation: once for the module)."""
    return catch_up_run()


@pytest.fixture(scope="module")
def without_pause() -> Simulation:
    """The master as before the rule: a catching-up target is never paused."""
    mp = pytest.MonkeyPatch()
    mp.setattr(fsp.FSP, "_catching_up", lambda self: [])
    try:
        return catch_up_run()
    finally:
        mp.undo()


def durations(sim: Simulation) -> list[tuple[dict, float]]:
    """(barrier event, its iteration's length in seconds), the calibration left out."""
    ev = sim.barrier_events()
    return [(e, e["time_s"] - p["time_s"]) for p, e in zip(ev, ev[1:])]


def catching(e: dict) -> list[int]:
    """The workers of a barrier event that trained more points than they hold: a catch-up."""
    w = e["workers"]
    return [k for k, (p, n) in enumerate(zip(w["points"], w["held"])) if p > n]


def bound_s(e: dict) -> float:
    """How long the iteration of barrier event ``e`` may last under the rule: PASS_GRACE x
    its first arrival (the first pass, ``compute_s`` after θ arrived, and the tick, block
    and messages' latency with which the master sees it: the grace doubles those too), or
    PASS_GRACE x a catching-up worker's own pass at its own point count if longer; plus a
    tick, a block and the messages' latency for the pause to be seen."""
    w = e["workers"]
    seen = POLL_S + BLOCK_S + 3 * LATENCY_S
    first = min(w["compute_s"]) + seen
    own = [w["held"][k] * COST_S * SLOWDOWN.get(w["rank"][k], 1.0) for k in catching(e)]
    return min(fsp.PASS_GRACE * max([first, *own]), 1e-3 * ETA_MS) + seen


def test_a_catching_up_target_holds_no_barrier(with_pause, without_pause):
    """With the rule every iteration of a catch-up ends by its bound (:func:`bound_s`; the
    others hold no migrated points and end as without migration), the catching-up target
    paused ('signal') with more points trained than it holds; without it the target
    trained its whole catch-up while the others waited, past that bound."""
    rows = [(e, d) for e, d in durations(with_pause) if catching(e)]
    assert rows, "no migrated points were caught up on"
    for e, d in rows:
        assert d <= bound_s(e), (e["t"], d, bound_s(e))
    # The catching-up worker itself was paused (on main it ran its catch-up to the end).
    assert all(e["workers"]["reason"][k] == "signal" for e, _ in rows for k in catching(e)
               if e["workers"]["points"][k] > 1.5 * e["workers"]["held"][k])
    before = [(e, d) for e, d in durations(without_pause) if catching(e)]
    assert any(d > bound_s(e) for e, d in before), [(e["t"], d) for e, d in before]
    # The figures docs/sync/fsp.md cites (``pytest -s -k holds_no_barrier``).
    print(f"\nlongest catch-up iteration {1e3 * max(d for _, d in rows):.1f} ms with the "
          f"pause, {1e3 * max(d for _, d in before):.1f} ms without; 40 iterations end at "
          f"{with_pause.barrier_events()[-1]['time_s']:.3f} s against "
          f"{without_pause.barrier_events()[-1]['time_s']:.3f} s")
    # Fewer seconds for the same 40 iterations.
    assert (with_pause.barrier_events()[-1]["time_s"]
            < without_pause.barrier_events()[-1]["time_s"])


def test_catch_up_run_keeps_every_point_and_catches_up(with_pause):
    """The paused catch-up loses no point: each is held by exactly one worker at the end,
    none is still queued or behind (the COMMIT header ``behind`` that the pause reads says
    so too), and every point held was visited at least as often as its worker's passes."""
    workers = with_pause.workers.values()
    assert sum(w.store.n_held for w in workers) == 6000
    for w in workers:
        s = w.store
        assert s.n_queued == 0 and s.n_behind == 0
        assert with_pause.server.worker(w.rank).header["behind"] == 0
        assert int(s.visits[~s.inactive].min()) >= int(s.passes), (w.rank, s.passes)


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


@pytest.mark.parametrize("flag", ["mark", "rollback"])
def test_a_probe_that_marks_or_rolls_back_has_no_receivers(with_pause, flag):
    """Before a probe that marks or rolls back θ no points move, and last barrier's
    receivers are forgotten: none of them is paused as catching up in the probe (it would
    skew g(η)).  (The finished run's policy, changed here: last in the module, nothing reads
    it after.)"""
    policy = with_pause.policy
    policy._receivers = {2, 3}
    policy.plan = Plan(0.1, **{flag: True})
    policy.before_broadcast({})
    assert policy._receivers == set()
    # Nor a worker whose last commit had points behind: the probe pauses no catch-up.
    worker = policy.server.worker(policy.server.ranks[0])
    worker.header["behind"] = 1.0
    assert policy._catching_up() == []
