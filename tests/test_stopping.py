"""The decoupled convergence check (FSP paper Section 5.3): a check per full pass of the
slowest worker over the data it holds now, comparing the online objective between checks."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from flegel.runtime.stopping import StopCriteria


def test_check_fires_when_the_slowest_worker_completes_a_pass():
    stop = StopCriteria(max_iterations=None, tolerance=1e-3)
    # Worker 1 is fast (100 points), worker 2 the straggler (100 points, 4x slower).
    assert stop.check(1, 100.0, 0.25, 0.1, {1: (100, 100), 2: (25, 100)}) is None
    assert stop.checks == 0
    assert stop.passes_since_check({1: (300, 100), 2: (75, 100)}) == pytest.approx(0.75)
    assert stop.check(2, 90.0, 0.75, 0.3, {1: (300, 100), 2: (75, 100)}) is None
    assert stop.checks == 0  # the straggler has not completed its first pass
    assert stop.check(3, 80.0, 1.0, 0.4, {1: (400, 100), 2: (100, 100)}) is None
    assert stop.checks == 1  # first check: nothing to compare with yet
    # Fast worker's passes alone do not trigger a check.
    assert stop.check(4, 80.0, 1.5, 0.6, {1: (1000, 100), 2: (150, 100)}) is None
    assert stop.checks == 1
    # The straggler's second pass: the objective is compared and it did not change.
    assert stop.check(5, 80.0, 2.0, 0.8, {1: (1200, 100), 2: (200, 100)}) == "converged"
    assert stop.checks == 2


def test_check_compares_the_objective_between_checks_honestly():
    """Between checks the objective fell by 10%: not converged, however many barriers (and
    however small each barrier's change) happened in between."""
    stop = StopCriteria(max_iterations=None, tolerance=1e-2)
    f = 100.0
    reasons = []
    for it in range(1, 401):  # 400 short barriers, 4 of them per straggler pass
        f *= 0.9 ** (1 / 4)  # 10% per pass: each barrier changes f by only ~2.6%
        points = it * 25
        reasons.append(stop.check(it, f, points / 100, it * 0.01,
                                  {1: (4 * points, 100), 2: (points, 100)}))
    assert all(r is None for r in reasons)
    assert stop.checks == 100  # one per straggler pass, not one per barrier


def test_check_follows_the_data_the_slowest_worker_holds_now():
    """Migration shrinks the straggler's shard: its passes over the data it holds now, and so
    the checks, come faster (after 40 points, not the 100 it held before)."""
    stop = StopCriteria(max_iterations=None, tolerance=1e-6)
    stop.check(1, 10.0, 1.0, 1.0, {1: (400, 100), 2: (100, 100)})
    assert stop.checks == 1
    # The straggler now holds 40 points (60 migrated to worker 1, which holds 160).
    work = {1: (700, 160), 2: (130, 40)}
    assert stop.passes_since_check(work) == pytest.approx(0.75)
    stop.check(2, 9.0, 1.3, 1.2, work)
    assert stop.checks == 1  # 30 of its 40 points: not yet
    work = {1: (800, 160), 2: (140, 40)}
    assert stop.passes_since_check(work) == pytest.approx(1.0)
    stop.check(3, 8.0, 1.5, 1.3, work)
    assert stop.checks == 2  # a full pass over the 40 points it holds now


def test_receiver_of_data_can_be_the_slowest():
    stop = StopCriteria(max_iterations=None, tolerance=1e-6)
    stop.check(1, 10.0, 1.0, 1.0, {1: (100, 100), 2: (100, 100)})
    # Worker 1 received 100 points and processed 150 since: 0.75 of a pass over 200.
    assert stop.passes_since_check({1: (250, 200), 2: (400, 100)}) == pytest.approx(0.75)
    stop.check(2, 9.0, 1.0, 2.0, {1: (250, 200), 2: (400, 100)})
    assert stop.checks == 1
    stop.check(3, 9.0, 1.0, 2.5, {1: (300, 200), 2: (500, 100)})
    assert stop.checks == 2


def test_worker_without_data_does_not_hold_the_check_back():
    stop = StopCriteria(max_iterations=None, tolerance=1e-6)
    assert stop.passes_since_check({1: (100, 100), 2: (5, 0)}) == pytest.approx(1.0)
    assert math.isinf(stop.passes_since_check({1: (0, 0)}))


def test_check_without_work_uses_min_passes():
    """One process, one shard (flegel.local): the check follows ``min_passes``."""
    stop = StopCriteria(max_iterations=None, tolerance=1e-3)
    assert stop.check(1, 10.0, 0.5, 0.1) is None and stop.checks == 0
    assert stop.check(2, 10.0, 1.0, 0.2) is None and stop.checks == 1
    assert stop.check(3, 10.0, 1.5, 0.3) is None and stop.checks == 1
    assert stop.check(4, 10.0, 2.0, 0.4) == "converged"


def test_other_criteria_unchanged():
    work = {1: (0, 100)}
    assert StopCriteria(max_iterations=3).check(3, 1.0, 0.0, 0.0, work) == "max_iterations"
    assert StopCriteria(max_time_s=1.0).check(1, 1.0, 0.0, 2.0, work) == "max_time"
    target = StopCriteria(target_objective=5.0)
    assert target.check(1, 4.0, 0.5, 0.0, work) is None  # not every point visited yet
    assert target.check(2, 4.0, 1.0, 0.0, work) == "target"


class _Recording(StopCriteria):
    """StopCriteria that records, at every check, the work it was given."""

    log: list[dict[int, tuple[float, float]]]

    def check(self, iteration: int, objective: float, min_passes: float, elapsed_s: float,
              work: Mapping[int, tuple[float, float]] | None = None,
              use_target: bool = True, updated: bool = True) -> str | None:
        before = self.checks
        reason = super().check(iteration, objective, min_passes, elapsed_s, work, use_target,
                               updated)
        if self.checks > before and work is not None:
            self.log.append(dict(work))
        return reason


@pytest.mark.parametrize("interval", ["fixed", "multistage"])
def test_check_fires_as_the_stragglers_passes_advance_in_process(interval):
    """FSP with worker 3 four times slower, on the simulated clock (the real server and
    policies): one convergence check per full pass of the straggler over its shard, while
    the fast workers make about four times as many passes."""
    from tests.fakes import Simulation

    options = ({"interval": "fixed", "eta_ms": 0.5} if interval == "fixed"
               else {"interval": "multistage", "probe_ms": 0.2, "eta_min_ms": 0.05})
    sim = Simulation("fsp", {**options, "coordination": "semi"}, points=1500,
                     slowdown={3: 4.0}, stop={"max_iterations": 400, "tolerance": 1e-12})
    rec = _Recording(max_iterations=400, tolerance=1e-12)
    rec.log = []
    sim.server.stop = sim.stop_criteria = rec
    sim.run()
    straggler, fast = sim.server.worker(3), sim.server.worker(1)
    size = straggler.n_active
    passes = straggler.points / size
    assert fast.points / fast.n_active > 3 * passes
    assert passes >= 3
    # A check at every straggler pass (a check waits for the barrier after the pass, so
    # the last pass may still be open), none in between.
    assert math.floor(passes) - 1 <= rec.checks <= math.floor(passes)
    straggler_points = [w[3][0] for w in rec.log]
    for k, p in enumerate(straggler_points, start=1):
        assert p >= k * size  # never before the straggler's k-th full pass
    for a, b in zip(straggler_points, straggler_points[1:]):
        assert b - a >= size  # one more full pass between checks
        assert b - a < 1.5 * size  # ... and not much more: it fired as the pass completed


def test_a_barrier_that_kept_theta_takes_no_convergence_baseline():
    """FSP's coverage keeps θ at some barriers (``updated`` False): the online objective
    there (0.0 before any point was trained) is no baseline for the relative change, and
    the first check comes at the first update.  (Before: the baseline was taken during the
    hold, and the first update's change was measured against it.)"""
    stop = StopCriteria(max_iterations=None, tolerance=1e-2)
    work = {1: (100.0, 100.0)}
    assert stop.check(1, 0.0, 1.0, 0.0, work, updated=False) is None
    assert stop.checks == 0
    assert stop.check(2, 50.0, 2.0, 0.0, {1: (200.0, 100.0)}) is None
    assert stop.checks == 1
    assert stop.check(3, 50.0, 3.0, 0.0, {1: (300.0, 100.0)}) == "converged"
