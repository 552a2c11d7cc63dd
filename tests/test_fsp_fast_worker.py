"""FSP's coverage beside one *fast* worker (issue 19, Fig. 16b; :meth:`flegel.sync.fsp.FSP.
_straggler_hold`): one worker 8x as fast as the other three, K-means with async migration
on contiguous shards of cluster-sorted data, on the simulated clock (tests/fakes.py).

Coverage's whole passes after the first update (``COVER_STEPS``) were made for one straggler
whose points migration has moved away; beside a fast worker the others still hold their
shards, every whole pass is a slow worker's pass, and the fast worker waits through it as
under BSP.  Coverage itself (θ kept until every point was trained, the first update an
exact Lloyd step) is unchanged."""

from __future__ import annotations

import numpy as np

from flegel.sync.fsp import COVER_PHASE, WHOLE_PHASE
from tests.fakes import lloyd_step
from tests.test_fsp_coverage import _run
from tests.test_migration_inprocess import WORKERS

#: Worker 1 is the fast one (a GPU beside CPUs, as Fig. 16b's 4 ms against 32 ms).
FAST = {r: 8.0 for r in range(2, WORKERS + 1)}


def _covered(rows: list[tuple[int, int, str]]) -> int:
    return next(i for i, (_, unseen, _) in enumerate(rows) if unseen == 0)


def test_no_whole_slow_passes_after_coverage_beside_a_fast_worker():
    """θ is kept until every point was trained and the first update is Lloyd's on all the
    data, as before; then FSP's own iterations follow, not whole passes, so the fast worker
    trains on instead of waiting: over the next 8 barriers it trains over 4 times the
    points of any slow one and waits under a tenth of the time.  (Before: 4 whole passes,
    each a slow worker's pass, the fast worker idle 7/8 of each.)"""
    sim, watch = _run("async", slowdown=FAST, stop={"max_iterations": 12})
    coverage = sim.policy.summary()["coverage"]
    assert coverage["kept_barriers"] >= 1
    assert coverage["whole_passes"] == 0 and coverage["whole_passes_dropped"]
    assert not sim.policy.balancer.stragglers_seen  # the median worker is a slow one
    x = np.concatenate(sim.shards)
    np.testing.assert_allclose(watch.first_update, lloyd_step(x, sim.theta0["centers"]),
                               rtol=1e-9, atol=1e-9)
    bars = sim.barrier_events()
    covered = _covered(watch.rows)
    assert all(e["phase"] in ("calibration", COVER_PHASE) for e in bars[:covered + 1])
    after = bars[covered + 1:covered + 9]
    assert len(after) == 8 and all(e["phase"] != WHOLE_PHASE for e in after)
    trained = [sum(e["workers"]["points"][i] for e in after) for i in range(WORKERS)]
    assert trained[0] > 4 * max(trained[1:])
    # (A commit's wait_s is its wait for θ before the iteration: the first after coverage
    # carries the wait through the hold.)
    waited = sum(e["workers"]["wait_s"][0] for e in after[1:])
    assert waited < 0.1 * (after[-1]["time_s"] - after[0]["time_s"])


def test_the_straggler_keeps_its_exact_first_steps():
    """One straggler 20x slower (tests/test_fsp_coverage.py's case): the balancer
    recognised it at the calibration, and the whole passes -- exact Lloyd steps -- are all
    taken (its own pass still 3.3x the others' at the first update: no measure of passes
    decides)."""
    sim, watch = _run("async")
    coverage = sim.policy.summary()["coverage"]
    assert coverage["whole_passes"] == 4 and not coverage["whole_passes_dropped"]
    assert sim.policy.balancer.stragglers_seen == {WORKERS}
    x = np.concatenate(sim.shards)
    for v in (1, 2, 3, 4):
        np.testing.assert_allclose(watch.thetas[v + 1], lloyd_step(x, watch.thetas[v]),
                                   rtol=1e-9, atol=1e-9)

