"""ElasticBSP keeps its promise (issue 14, item 7): on the simulated clock, with known
per-worker iteration times, the waits the barriers really cost match what ZipLine predicted
(ZipLine paper Sections 3-4; the diagnosis is in :mod:`flegel.sync.elastic`).

These are logic tests, not timing tests: time is :class:`tests.fakes.SimClock`, every block
"takes" ``points x cost_s`` (times a seeded jitter), so each run is deterministic.
"""

from __future__ import annotations

import functools
from collections import deque
from statistics import fmean

import numpy as np
import pytest

from flegel.sync.elastic import LATE_FLOOR, ElasticBSP
from flegel.sync.zipline import solve
from tests.fakes import Simulation

#: Per-point costs of the four workers: iterations of 200 points take 2, 2.6, 3.4 and 4.6 ms.
COSTS = [10e-6, 13e-6, 17e-6, 23e-6]
BATCH = 200
LAT = 50e-6


@functools.cache
def run(jitter: float = 0.0, block_points: int | None = None, seed: int = 0,
        iterations: int = 200, replan: bool = True) -> Simulation:
    """ElasticBSP (R = 15) on four workers of different speeds, ``iterations`` x 4 pushes;
    ``replan=False``: the paper's single plan per superstep (``sync.replan``).

    Each run is deterministic and the tests only read it: one run serves every test that
    asks for it (the ±30 % and ±60 % whole-iteration runs are read by two tests each).  A
    test must not change the returned simulation: the others would read its change."""
    return Simulation("elastic", {"batch": BATCH, "r": 15, "replan": replan}, workers=4,
                      points=4000 * 4, cost_s=COSTS, jitter=jitter, block_points=block_points,
                      latency_s=LAT, seed=seed, stop={"max_iterations": iterations},
                      max_sim_s=600.0).run()


def elastic(sim: Simulation) -> ElasticBSP:
    """The simulation's master policy, typed."""
    assert isinstance(sim.policy, ElasticBSP)
    return sim.policy


def waits(sims: list[Simulation]) -> tuple[float, float, float]:
    """Mean measured wait, ZipLine's mean d* and the mean expected wait over every barrier."""
    log = [b for sim in sims for b in elastic(sim).barriers]
    assert len(log) >= 20 * len(sims)  # enough barriers for a mean to say something
    return (fmean(b["wait_s"] for b in log), fmean(b["predicted_wait_s"] for b in log),
            fmean(b["expected_wait_s"] for b in log))


def test_exact_iteration_times_realise_zipline_exactly() -> None:
    """Without noise every barrier happens when and with the wait ZipLine predicted."""
    sim = run()
    log = elastic(sim).barriers
    assert len(log) >= 10
    for b in log:
        assert b["wait_s"] == pytest.approx(b["predicted_wait_s"], abs=1e-9)
        assert b["actual_s"] == pytest.approx(b["predicted_s"], abs=1e-9)
        assert b["expected_wait_s"] == pytest.approx(b["predicted_wait_s"], abs=1e-9)
        assert b["replans"] > 0  # re-planning ran, and changed nothing without noise
    # The interval each worker is predicted with is its real one: 200 points of compute
    # plus the push round trip (commit and reply, one latency each).
    for i, r in enumerate(sim.ranks):
        assert elastic(sim).interval(r) == pytest.approx(BATCH * COSTS[i] + 2 * LAT, rel=1e-9)
    # ZipLine's choice is the best barrier: d* is no larger than any worker's interval.
    assert max(b["predicted_wait_s"] for b in log) < BATCH * COSTS[0]


@pytest.mark.parametrize(("jitter", "block_points"), [(0.3, None), (0.6, None), (0.3, BATCH),
                                                      (0.6, BATCH)])
def test_noisy_iteration_times_keep_the_expected_wait(jitter: float,
                                                      block_points: int | None) -> None:
    """With seeded noise on every block (``block_points=None``: ~10 blocks per iteration) or
    on whole iterations (one block each, ±30 or ±60 %), the measured waits stay within a
    factor 2 of the expected wait ElasticBSP predicts, on either side."""
    sims = [run(jitter, block_points, seed=s) for s in range(3)]
    measured, d_star, expected = waits(sims)
    assert 0.5 * expected <= measured <= 2.0 * expected, (measured, expected)
    assert d_star <= expected  # noise only ever adds to the point forecast's wait
    if block_points is None and jitter <= 0.3:
        # Mild noise: even ZipLine's point forecast d* holds within 2x.
        assert measured <= 2.0 * d_star, (measured, d_star)


def test_the_papers_single_plan_misses_under_iteration_noise() -> None:
    """The same noisy runs with one plan per superstep (the paper's schedule, fixed up to R
    iterations ahead): the measured waits exceed the expected ones by more than 2x -- what
    the rolling re-plan removes (previous test)."""
    sims = [run(0.6, BATCH, seed=s, replan=False) for s in range(3)]
    assert not any(b["replans"] for sim in sims for b in elastic(sim).barriers)
    measured, d_star, expected = waits(sims)
    assert measured > 2.0 * expected
    assert measured > 5.0 * d_star


def test_a_late_worker_is_shifted_not_collapsed() -> None:
    """A worker past its predicted end gets its next end now and the later ones an interval
    apart; clipping them all to now let ZipLine "stop" it after iterations not yet begun."""
    sim = Simulation("elastic", {"batch": BATCH, "r": 5}, workers=2, cost_s=COSTS[:2])
    pol = elastic(sim)
    pol.batch = BATCH
    pol.spans = {r: deque([1.0] * 3, maxlen=8) for r in (1, 2)}
    pol.since = {1: [7.0, 8.0, 10.0], 2: [5.0, 6.0]}
    pol.started = {1: 10.0, 2: 6.0}  # worker 2 began at 6, due at 7: it is 3 s late
    pol._plan(1, 10.0, first=True)
    assert pol.target is not None
    # Worker 1 pushes at 10, 11, 12, ...; worker 2 next ends just after now (10 + a tenth of
    # its span: its spans do not vary), then 11.1, 12.1, ...: the barrier is right away
    # (worker 1's current push, worker 2's next), not 3 iterations on.
    assert pol.plan["predicted_wait_s"] == pytest.approx(LATE_FLOOR * 1.0)
    assert pol.target == {1: 3, 2: 3}
    # The clipped rows of the old code would have tied worker 2's first four ends at 10.
    clipped = np.maximum(np.array([[10.0, 11, 12, 13, 14], [7.0, 8, 9, 10, 11]]), 10.0)
    assert solve(clipped).index[1] == 3


def test_measured_waits_stay_within_1_5x_of_the_placing_plan() -> None:
    """Issue 19, item 6: with ±30 % noise on whole iterations the measured waits stay within
    1.5x of ``d`` of the (re-)plan that placed each barrier (1.48x when re-plans took
    ZipLine's point-forecast choice; the robust choice of :func:`solve_robust` gives 1.43x)."""
    sims = [run(0.3, BATCH, seed=s) for s in range(3)]
    log = [b for sim in sims for b in elastic(sim).barriers]
    measured = fmean(b["wait_s"] for b in log)
    placed = fmean(b["final_predicted_wait_s"] for b in log)
    assert measured <= 1.5 * placed, (measured, placed)
    # d* stays ZipLine's optimum of the first plan's point forecast: never above the
    # chosen plan's own d, which may give up some of d* for a smaller expected wait.
    assert all(b["predicted_wait_s"] >= 0.0 for b in log)


def test_a_running_worker_is_predicted_from_the_spans_still_possible() -> None:
    """Issue 19, item 6: a worker that has run past its median span is predicted at the
    median of the spans longer than what it has run (the conditional median), not at its
    unconditional median -- which lies in the past, so the old rule put it at "now", and it
    then arrived late by the rest of its iteration."""
    sim = Simulation("elastic", {"batch": BATCH, "r": 5}, workers=2, cost_s=COSTS[:2])
    pol = elastic(sim)
    pol.batch = BATCH
    pol.spans = {1: deque([1.0] * 4, maxlen=8),
                 2: deque([0.5, 0.5, 0.5, 0.5, 2.5, 2.5, 2.5, 3.5], maxlen=8)}
    pol.since = {1: [8.0, 9.0, 10.0], 2: [7.5, 8.5, 9.0]}
    pol.started = {1: 9.0, 2: 9.0}  # worker 2 has run 1.0: only its 2.5 and 3.5 spans remain
    pol._plan(1, 10.0, first=True)
    # Worker 2 ends at 9 + median(2.5, 2.5, 2.5, 3.5) = 11.5, then every 1.5 (its median
    # span): 13.0 meets worker 1's 13 (10, 11, 12, 13, ...).  The old rule, max(started +
    # median, now), put it at 10.5, 12.0, ...: a barrier at 12 ({1: 5, 2: 5}), too early.
    assert pol.target == {1: 6, 2: 5}
    assert pol.plan["final_ends"] == [pytest.approx(13.0), pytest.approx(13.0)]
    # A worker past every span on record: one median absolute deviation from now.
    end, errors = pol._next_end(2, 9.0 + 4.0)
    assert end == pytest.approx(13.0 + 1.0)  # |spans - 1.5| has median 1.0
    assert len(errors) == 8


def test_a_late_worker_of_identical_spans_is_not_predicted_now_nor_certain() -> None:
    """Identical spans (every first plan under ``batch: auto``) have a median absolute
    deviation of 0: a worker past them was predicted at exactly now, the collapse the module
    notes say was fixed; and one span left beyond what a worker ran gave the error sample
    [0.], a worker certain in its slowest tail."""
    sim = Simulation("elastic", {"batch": BATCH, "r": 5}, workers=2, cost_s=COSTS[:2])
    pol = elastic(sim)
    pol.spans = {1: deque([1.0] * 4, maxlen=8), 2: deque([1.0, 1.0, 1.0, 3.0], maxlen=8)}
    pol.started = {1: 9.0, 2: 9.0}
    end, errors = pol._next_end(1, 10.5)  # past every span of 1.0
    assert end == pytest.approx(10.5 + LATE_FLOOR * 1.0)
    end, errors = pol._next_end(2, 10.5)  # only the 3.0 span is still possible
    assert end == pytest.approx(12.0)
    assert sorted(errors) == pytest.approx([0.0, 0.0, 0.0, 2.0])  # spans - their median


def test_every_later_iteration_waits_for_the_masters_reply() -> None:
    """An iteration begins when the master answers the push before it, its own processing
    (update, records, the plan) after the push's arrival, which no span holds: that delay,
    measured on answers the simulated clock moved between, is in every cycle of every row
    (the waiting worker's and the others', from their second predicted end on)."""
    sim = Simulation("elastic", {"batch": BATCH, "r": 5}, workers=2, cost_s=COSTS[:2])
    pol = elastic(sim)
    pol.batch = BATCH
    # The measurement: a push answered at once, 0.3 s after its arrival.
    sim.clock.advance_to(1.0)
    pol.after_push(2, {"points": float(BATCH)}, 1.0)
    sim.clock.advance_to(1.3)
    pol.answer(2)
    assert list(pol.delays) == [pytest.approx(0.3)]
    pol.spans = {1: deque([1.0] * 4, maxlen=8), 2: deque([3.4] * 4, maxlen=8)}
    pol.since = {1: [8.0, 9.0, 10.0], 2: [5.8, 9.2]}
    pol.started = {1: 9.0, 2: 9.2}
    pol._plan(1, 10.0, first=True)
    # Worker 1: 10 (now), 11.3, 12.6, ...; worker 2: 12.6, 16.3, ...: they meet at 12.6
    # (d = 0).  With the delay counted once, worker 1's ends were 10, 11.3, 12.3, 13.3: the
    # barrier at 12.3/12.6, predicted 0.3 apart, would have been 0.6 apart.
    assert pol.plan["final_ends"] == [pytest.approx(12.6), pytest.approx(12.6)]
    assert pol.plan["predicted_wait_s"] == pytest.approx(0.0, abs=1e-9)
    assert pol.target == {1: 5, 2: 3}


def test_the_placing_plan_does_not_predict_arrivals_early() -> None:
    """Issue 19, item 6: with ±60 % noise on whole iterations, the ends the placing plan
    predicted for workers still running are unbiased: their real arrivals miss them by
    0.01 ms in the median (0.42 ms late with the unconditional median, a sixth of an
    iteration), and the measured waits stay within 1.6x of that plan's d (1.63x before)."""
    sims = [run(0.6, BATCH, seed=s) for s in range(3)]
    log = [b for sim in sims for b in elastic(sim).barriers]
    errors = [e for b in log for e in b["final_end_error_s"] if e != 0.0]
    assert len(errors) >= 100
    assert abs(float(np.median(errors))) <= 0.1e-3, np.median(errors)
    measured = fmean(b["wait_s"] for b in log)
    placed = fmean(b["final_predicted_wait_s"] for b in log)
    assert measured <= 1.6 * placed, (measured, placed)


def test_the_monitoring_phase_is_bounded_by_r() -> None:
    """Issue 19: with a straggler 30x slower, the monitoring phase (two pushes of every
    worker after a barrier, Fig. 5) let the fast workers push freely before any plan
    existed -- ASP (51 pushes each, one barrier in 180 pushes).  No worker runs more than
    ``R`` pushes ahead of the slowest one during monitoring, and the superstep's iteration
    difference stays within the lookahead's reach (``R`` in monitoring plus ``R``
    predicted)."""
    r = 5
    sim = Simulation("elastic", {"batch": 50, "r": r}, workers=3,
                     cost_s=[10e-6, 10e-6, 300e-6], latency_s=LAT,
                     stop={"max_iterations": 60}, max_sim_s=600.0).run()
    log = elastic(sim).barriers
    assert len(log) >= 3
    for b in log:
        assert max(b["monitoring_pushes"]) - min(b["monitoring_pushes"]) <= r, b
        assert max(b["iterations"]) - min(b["iterations"]) <= 2 * r, b
    # Not vacuous: the fast workers reached the bound (R pushes ahead of the straggler's
    # first) and waited there for its second push, which made the plan.
    assert all(b["monitoring_pushes"] == [r + 1, r + 1, 2] for b in log), log
    # Every barrier still gives all the same θ: the slowest worker pushed in each superstep.
    assert all(min(b["iterations"]) >= 1 for b in log)


def test_a_worker_whose_shard_is_smaller_than_the_batch_still_gets_barriers() -> None:
    """Review of issue 19: a push counted as an iteration of the kind predicted only with at
    least ``batch`` points, so a worker whose whole shard is smaller than the batch (an
    uneven split; ``batch: auto`` sizes on the fastest worker, capped at *its* shard) never
    recorded a span, no plan was ever made, and ElasticBSP placed no barrier at all.  Its
    whole-shard push is its full iteration."""
    rng = np.random.default_rng(0)
    shards = [rng.normal(size=(n, 2)) for n in (400, 400, 150)]
    sim = Simulation("elastic", {"batch": 200, "r": 5}, workers=3, shards=shards,
                     cost_s=[10e-6, 13e-6, 17e-6], latency_s=LAT,
                     stop={"max_iterations": 60}, max_sim_s=600.0).run()
    pol = elastic(sim)
    assert all(len(s) > 0 for s in pol.spans.values()), pol.spans
    assert len(pol.barriers) >= 3
