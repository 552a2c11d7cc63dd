"""FSP's one estimate of each worker's pass (issue 19's clean-up, :mod:`flegel.sync.passes`):
kernel time plus injected delays, used for the pause at the first pass, for whole passes'
straggler test and for their bound.  One process: the predictor alone, and the real master
policy on the simulated clock (tests/fakes.py)."""

from __future__ import annotations

import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.sync.fsp import PASS_EVIDENCE, WHOLE_PASS_WAIT
from flegel.sync.passes import PASS_HISTORY, PassPredictor
from tests.fakes import Simulation


def commit(points: float, rate: float, slowed: float = 0.0, wall: float | None = None,
           n: float = 1000.0) -> dict[str, float]:
    """A COMMIT header's fields the predictor reads (``compute_s`` is the wall time)."""
    kernel = points / rate if rate else 0.0
    return {"points": points, "rate": rate, "slowed_s": slowed, "n_active": n,
            "compute_s": wall if wall is not None else kernel + slowed}


def test_typical_stragglers_and_evidence():
    p = PassPredictor()
    assert p.typical() == 0.0 and p.fastest() == 0.0 and p.stragglers(4.0, 1) == []
    p.observe({1: commit(500, 5e5), 2: commit(500, 4e5), 3: commit(500, 5e5, slowed=0.1),
               4: commit(500, 5e4)})
    # 2 ms, 2.5 ms, 2 ms + 1000 * 0.1 / 500 = 202 ms, 20 ms
    assert p.pass_s == pytest.approx({1: 2e-3, 2: 2.5e-3, 3: 0.202, 4: 20e-3})
    assert p.fastest() == pytest.approx(2e-3)
    assert p.typical() == pytest.approx(2.5e-3)  # the lower median
    assert p.stragglers(4.0, 2) == []  # one commit is no evidence
    assert p.stragglers(4.0, 1) == [3, 4]
    p.observe({r: commit(500, 5e5) for r in (1, 2, 4)} | {3: commit(0, 0.0, slowed=0.05)})
    # Worker 4's kernel is fast now (its fastest of the last PASS_HISTORY counts); worker 3
    # slept through the iteration: its delays count over both commits.
    assert p.pass_s[4] == pytest.approx(2e-3)
    assert p.pass_s[3] == pytest.approx(2e-3 + 1000 * 0.15 / 500)
    assert p.stragglers(4.0, 2) == [3] and p.evidence(3) == 2
    # A commit of nothing, without a delay (paused before it ran): a worker slowed by its
    # pattern loses one commit of evidence (issue 19, i19s), then is forgotten.
    p.observe({3: commit(0, 0.0)})
    assert p.evidence(3) == 1 and p.stragglers(4.0, 1) == [3]
    p.observe({3: commit(0, 0.0)})
    assert 3 not in p.pass_s and p.evidence(3) == 0 and p.stragglers(4.0, 1) == []
    # ... and one never slowed by a pattern is forgotten at once.
    p.observe({4: commit(0, 0.0)})
    assert 4 not in p.pass_s and p.evidence(4) == 0


def test_the_evidence_decrement_recomputes_the_prediction():
    """A commit of nothing (paused before it ran) takes the oldest commit off a pattern-slowed
    worker's evidence, and its delay off the prediction at once: a slow-down that has left
    the history predicts no slow pass for one more iteration."""
    p = PassPredictor()
    p.observe({1: commit(500, 5e5, slowed=0.1)})
    p.observe({1: commit(500, 5e5)})
    assert p.pass_s[1] == pytest.approx(2e-3 + 1000 * 0.1 / 1000)
    p.observe({1: commit(0, 0.0)})
    assert p.evidence(1) == 1 and p.pass_s[1] == pytest.approx(2e-3)


def test_history_is_bounded():
    p = PassPredictor()
    p.observe({1: commit(500, 5e4)})            # a preempted kernel: 20 ms
    for _ in range(PASS_HISTORY):
        p.observe({1: commit(500, 2.5e5)})      # 4 ms
    assert p.pass_s[1] == pytest.approx(4e-3) and p.evidence(1) == PASS_HISTORY
    p.observe({1: commit(500, 5e5)})
    assert p.pass_s[1] == pytest.approx(2e-3)


class FullBatchKMeans(KMeans):
    """K-means declaring a stronger update on a full batch at θ."""

    full_batch_update = True


def test_a_wait_for_a_core_keeps_whole_passes_an_injected_delay_does_not():
    """Whole passes judge stragglers on the same estimate as the pause at the first pass:
    a worker whose iterations took 10x its kernel time in wall time (it waited for a core)
    is no straggler; one whose extra time was injected suspension is.  (The wall-time
    estimate whole passes used before called both stragglers.)"""
    sim = Simulation("fsp", {}, algorithm=FullBatchKMeans(n_clusters=4),
                     stop={"max_iterations": 1})
    policy = sim.policy
    fast = {r: commit(500, 5e5, wall=3e-3) for r in (1, 2)}
    for _ in range(PASS_EVIDENCE + 1):
        policy.passes.observe(fast | {3: commit(500, 5e5, wall=30e-3)})
    assert policy._balanced()
    assert policy._whole_bound(policy.iter_start) == pytest.approx(WHOLE_PASS_WAIT * 2e-3)
    policy.passes.forget(3)
    for _ in range(PASS_EVIDENCE):
        policy.passes.observe(fast | {3: commit(500, 5e5, slowed=27e-3)})
    assert not policy._balanced()


def test_the_prediction_is_checkpointed():
    sim = Simulation("fsp", {}, stop={"max_iterations": 6}).run()
    state = sim.policy.checkpoint_state()
    fresh = Simulation("fsp", {}, stop={"max_iterations": 1}).policy
    fresh.restore(state)
    assert fresh.passes.pass_s == sim.policy.passes.pass_s
    assert fresh.passes.pass_s and fresh.passes.evidence(1) == sim.policy.passes.evidence(1)
