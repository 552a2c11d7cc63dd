"""BSP in-process: the real server and policies on a simulated clock (tests/fakes.py)."""

from __future__ import annotations

import pytest

from flegel.protocol import Reason
from flegel.sync.base import round_trip_s
from flegel.sync.bsp import auto_batch, grid_batch
from tests.fakes import Simulation


def test_bsp_full_every_barrier_has_every_full_pass():
    sim = Simulation("bsp", {"batch": "full"}, cost_s=[10e-6, 15e-6, 40e-6],
                     stop={"max_iterations": 12}).run()
    sizes = [len(s) for s in sim.shards]
    bars = sim.barrier_events()
    assert len(bars) == sim.server.version == 12
    for e in bars:
        assert e["workers"]["points"] == sizes
        assert e["workers"]["reason"] == ["pass"] * 3
    for r in sim.ranks:
        its = sim.iterations(r)
        assert len(its) == 12
        assert all(it.reason == Reason.PASS for it in its)
        # Each iteration is exactly one more pass over the shard.
        assert [it.header["passes"] for it in its] == pytest.approx(list(range(1, 13)))
    # Barrier: version v goes out only after every commit computed from v - 1 arrived, and
    # to every worker at the same instant.
    for v in range(1, 12):
        last = max(a.time for a in sim.arrivals if a.header["version"] == v - 1)
        sends = [p for p in sim.transport.params if p.version == v and not p.stop
                 and p.time > 0]
        assert sorted(p.rank for p in sends) == sim.ranks
        assert {p.time for p in sends} == {last}
    # The fast worker waited for the slow one every iteration (about 4x its pass).
    fast = sim.iterations(1)[1:]
    assert min(it.header["wait_s"] for it in fast) > 2.5 * max(it.header["compute_s"]
                                                                   for it in fast)


def test_bsp_auto_batch_from_calibration():
    lat = 50e-6
    sim = Simulation("bsp", {"batch": "auto", "overhead": 0.1}, cost_s=[10e-6, 10e-6, 30e-6],
                     latency_s=lat, stop={"max_iterations": 8}).run()
    pol = sim.policy
    calib = {it.rank: it.header for r in sim.ranks for it in sim.iterations(r)[:1]}
    assert all(h["points"] == len(s) for h, s in zip(calib.values(), sim.shards))
    per_point = max(h["compute_s"] / h["points"] for h in calib.values())
    raw = auto_batch(per_point, round_trip_s(lat, 0.0), 0.1, min(map(len, sim.shards)))
    expected = grid_batch(raw, min(map(len, sim.shards)))  # on the grid: deterministic
    assert pol.batch == expected
    # Analytically: the slowest worker's 30 µs per point, φ = 2·latency + 2 polls.
    analytic = (2 * lat + 2e-4) * 0.9 / (0.1 * 30e-6)
    assert abs(raw - analytic) <= 1
    assert 1 < expected < min(map(len, sim.shards))  # a real mini-batch, not clamped
    for r in sim.ranks:
        sent = [p for p in sim.transport.params_to(r) if not p.stop][1:]  # after θ⁰
        assert sent[0].instructions.batch == 0            # calibration: full pass
        assert {p.instructions.batch for p in sent[1:]} == {expected}
        for it in sim.iterations(r)[1:]:
            assert it.header["points"] == expected
            assert it.reason == Reason.BATCH


def test_bsp_fixed_batch_with_injected_straggler():
    """Injected suspension (τ per 1000 points) slows every barrier, never changes the work."""
    stragglers = [{"pattern": "injected", "tau_ms": 2.0, "every": 100, "workers": [2]}]
    plain = Simulation("bsp", {"batch": 50}, stop={"max_iterations": 10}).run()
    slow = Simulation("bsp", {"batch": 50}, stragglers=stragglers,
                      stop={"max_iterations": 10}).run()
    assert [e["workers"]["points"] for e in slow.barrier_events()] == [[50] * 3] * 10
    # 500 points on worker 2: 5 suspensions of 2 ms.
    assert slow.workers[2].slowed_s == pytest.approx(10e-3)
    assert slow.workers[1].slowed_s == 0
    assert slow.now == pytest.approx(plain.now + 10e-3, rel=0.05)
    assert slow.objective() == pytest.approx(plain.objective(), rel=1e-12)
