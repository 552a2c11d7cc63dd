"""The push models in-process -- ASP, SSP, DSSP, SpecSync, ElasticBSP: the real server and
policies on a simulated clock (tests/fakes.py)."""

from __future__ import annotations

import pytest

from flegel.protocol import Reason, Signal
from tests.fakes import Simulation

LAT = 50e-6
SLOW = {3: 4.0}  # worker 3 computes 4x slower


def start_gaps(sim: Simulation) -> list[tuple[int, int]]:
    """(rank, clock gap) of every iteration start, rebuilt from the messages alone: a
    worker's clock is its applied pushes, and θ sent while a commit is dispatched goes out
    after that commit counted."""
    clocks = {r: 0 for r in sim.ranks}
    params = sim.transport.params
    bounds = [a.sent_from for a in sim.arrivals] + [len(params)]
    out = [(p.rank, 0) for p in params[:bounds[0]] if p.time > 0]
    for i, a in enumerate(sim.arrivals):
        if int(a.header["reason"]) != Reason.ABORT:
            clocks[a.rank] += 1
        for p in params[bounds[i]:bounds[i + 1]]:
            if not p.stop:
                out.append((p.rank, clocks[p.rank] - min(clocks.values())))
    return out


def test_asp_never_holds():
    sim = Simulation("asp", {"batch": 50}, slowdown=SLOW, latency_s=LAT,
                     stop={"max_iterations": 20}).run()
    params = sim.transport.params
    for a in sim.arrivals:
        answered = [p for p in params[a.sent_from:] if p.rank == a.rank]
        # Every push is answered at once, by the push itself.
        assert answered and answered[0].time == a.time
        assert a.version_after == a.version_before + (0 if a.late else 1)
    assert set(sim.policy.held_s.values()) == {0.0}
    for r in sim.ranks:
        assert max(it.header["wait_s"] for it in sim.iterations(r)[1:]) == pytest.approx(
            2 * LAT)
    # Nobody waits, so the straggler computes from old θ: its pushes are stale.
    pushes = sim.push_events()
    assert len(pushes) == sim.server.version == 60
    for e, a in zip(pushes, [a for a in sim.arrivals if not a.late]):
        assert e["staleness"] == a.version_before - int(a.header["version"])
    assert max(e["staleness"] for e in pushes if e["rank"] == 3) >= 4
    assert max(g for _, g in start_gaps(sim)) > 3


@pytest.mark.parametrize("s", [0, 1, 3])
def test_ssp_clock_gap_never_exceeds_s(s):
    sim = Simulation("ssp", {"s": s, "batch": 50}, slowdown=SLOW, latency_s=LAT,
                     stop={"max_iterations": 15}).run()
    gaps = start_gaps(sim)
    assert max(g for _, g in gaps) == s  # the bound holds, and it was reached
    assert max(e["gap"] for e in sim.push_events()) == s
    assert sim.policy.gap_stat.max == s
    # The fast workers were held for the straggler; the straggler never was.
    assert sim.policy.held_s[1] > 0 and sim.policy.held_s[2] > 0
    assert sim.policy.held_s[3] == 0


def test_dssp_gap_within_s_upper_and_r_star_in_range():
    s_lower, s_upper = 1, 4
    sim = Simulation("dssp", {"s_lower": s_lower, "s_upper": s_upper, "batch": 50},
                     slowdown=SLOW, latency_s=LAT, stop={"max_iterations": 20}).run()
    gaps = [g for _, g in start_gaps(sim)]
    assert max(gaps) <= s_upper
    assert max(gaps) > s_lower  # the controller granted extra iterations beyond s_L
    decisions = sim.policy.decisions
    assert decisions
    for _, rank, gap, r in decisions:
        assert gap > s_lower
        assert 0 <= r <= s_upper - gap + 1
        assert rank != 3  # only a fastest worker asks the controller
    assert any(r > 0 for *_, r in decisions)


def test_specsync_abort_rolls_back_and_discards_the_work():
    sim = Simulation("specsync", {"adaptive": False, "abort_time_ms": 1.5, "abort_rate": 0.67,
                                  "batch": 50},
                     slowdown=SLOW, latency_s=LAT, stop={"max_iterations": 20}).run()
    aborted = [a for a in sim.arrivals
               if int(a.header["reason"]) == Reason.ABORT and not a.late]
    assert len(aborted) >= 3
    assert {a.rank for a in aborted} == {3}  # the straggler sees others push while it works
    assert sim.policy.aborts[3] == len(aborted)
    signals = sim.transport.signals_of(Signal.ABORT)
    its = sim.iterations(3)
    assert len(signals) == sum(it.reason == Reason.ABORT for it in its)  # a late one too
    for a in aborted:
        # Nothing applied: no new θ, no points, the thrown-away points reported.
        assert a.version_after == a.version_before
        assert a.header["points"] == 0 and a.header["aborted"] > 0
    for i, it in enumerate(its):
        if it.reason != Reason.ABORT:
            continue
        # The abort signal was for the θ it computed from.
        assert any(s.version == it.version and s.rank == 3 for s in signals)
        # Its shard is back where the iteration began: cursor, passes, per-point state.
        assert it.end is not None and it.end.same_as(it.start)
        assert it.header["passes"] == pytest.approx(it.start.scanned / len(sim.shards[2]))
        if i + 1 == len(its):
            continue  # aborted as training ended: the answer was the stop flag
        # It restarts from a fresher θ on the same points, and the restart is not aborted.
        nxt = its[i + 1]
        assert nxt.version > it.version
        assert nxt.start.same_as(it.start)
        assert nxt.reason != Reason.ABORT
    # Every applied point of worker 3 was computed once: aborted work is not counted.
    applied = sum(int(it.header["points"]) for it in its)
    assert applied == sim.server.workers[3].points
    assert sim.policy.aborted_points[3] == sum(int(a.header["aborted"]) for a in aborted)


def test_elastic_barriers_give_every_worker_the_same_theta():
    sim = Simulation("elastic", {"batch": 50}, cost_s=[10e-6, 14e-6, 33e-6], latency_s=LAT,
                     stop={"max_iterations": 40}).run()
    barriers = sim.policy.barriers
    assert len(barriers) >= 3
    params = [p for p in sim.transport.params if p.time > 0 and not p.stop]
    for b in barriers:
        t = b["time_s"] + sim.server.start
        at = [p for p in params if abs(p.time - t) < 1e-6]
        # All workers are answered together, with the same θ version.
        assert sorted(p.rank for p in at) == sim.ranks
        assert {p.version for p in at} == {b["version"]}
        for r in sim.ranks:
            assert any(it.version == b["version"] for it in sim.iterations(r))
        # Every worker pushed in the superstep; faster workers more often.
        its = b["iterations"]
        assert min(its) >= 2 and its[0] > its[2]
    # Between barriers the workers push ASP-style: most answers go to one worker at a time.
    assert len(params) > 3 * len(barriers) + 3
