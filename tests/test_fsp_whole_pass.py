"""FSP's whole passes (issue 19, :class:`flegel.sync.fsp.FSP`): an algorithm that declares
``full_batch_update`` (logistic regression's L-BFGS) gets iterations that end when every
worker has finished its pass at θ, as long as no worker straggles; a straggler makes them
FSP's ordinary iterations again.  One process: the real server, policies and adjustor on the
simulated clock (tests/fakes.py); the algorithm is K-means with the declaration added, so only
FSP's rule is under test."""

from __future__ import annotations

import numpy as np

from flegel.algorithms.kmeans import KMeans
from flegel.protocol import Signal
from flegel.sync.fsp import PASS_EVIDENCE, WHOLE_PASS_WAIT, WHOLE_PHASE
from tests.fakes import Simulation, blobs

LAT = 50e-6


class FullBatchKMeans(KMeans):
    """K-means declaring a stronger update on a full batch at θ."""

    full_batch_update = True


def _run(**kwargs) -> Simulation:
    return Simulation("fsp", {}, algorithm=FullBatchKMeans(n_clusters=4), latency_s=LAT,
                      **kwargs).run()


def test_whole_passes_without_stragglers():
    """Workers 1.5x and 2.5x slower than the fastest are no stragglers: every iteration,
    calibration included, ends when all three finished their pass -- a full batch at θ --
    with no timer and no pause signal, though FSPV's default adjustor would probe shorter
    intervals.  (Before: the fastest worker's pass paused the other two.)"""
    sim = _run(cost_s=[10e-6, 15e-6, 25e-6], stop={"max_iterations": 20})
    bars = sim.barrier_events()
    assert len(bars) == 20
    sizes = [len(s) for s in sim.shards]
    for e in bars:
        assert e["workers"]["reason"] == ["pass"] * 3
        assert e["workers"]["points"] == sizes
    assert [e["phase"] for e in bars] == ["calibration"] + [WHOLE_PHASE] * 19
    assert sim.transport.signals_of(Signal.PAUSE) == []
    assert {p.instructions.eta_s for p in sim.transport.params if not p.stop} == {0.0}
    assert sim.policy.summary()["whole_pass_iterations"] == 20
    # A barrier per slowest pass (200 points x 25 µs = 5 ms) and its messages.
    gaps = np.diff([e["time_s"] for e in bars])
    assert gaps.max() < 5e-3 + 2e-3


def test_a_straggler_turns_whole_passes_off():
    """Worker 3 20x slower (a 40 ms pass against 2 ms): the calibration waits for it only
    WHOLE_PASS_WAIT times the first pass, it is called a straggler after PASS_EVIDENCE
    passes, and from then on FSPV runs its ordinary iterations: nobody waits for its pass,
    its partial work reaches every barrier."""
    sim = _run(cost_s=10e-6, slowdown={3: 20.0}, stop={"max_iterations": 40})
    bars = sim.barrier_events()
    first = bars[0]
    assert first["workers"]["reason"] == ["pass", "pass", "signal"]
    # Paused once the calibration ran WHOLE_PASS_WAIT times the first pass (a poll later),
    # not after its own 40 ms pass.
    start = sim.server.start
    first_pass = min(a.time for a in sim.arrivals if a.header["version"] == 0) - start
    (pause,) = [s for s in sim.transport.signals_of(Signal.PAUSE) if s.version == 0]
    assert pause.rank == 3
    assert WHOLE_PASS_WAIT * first_pass <= pause.time - start <= WHOLE_PASS_WAIT * first_pass + 2e-3
    assert first_pass < 3e-3
    whole = sim.policy.summary()["whole_pass_iterations"]
    assert 1 <= whole <= PASS_EVIDENCE
    ordinary = bars[PASS_EVIDENCE:]
    assert all(e["phase"] != WHOLE_PHASE for e in ordinary)
    straggler = [e["workers"]["points"][2] for e in ordinary]
    assert max(straggler) < len(sim.shards[2])
    assert sum(p > 0 for p in straggler) >= 0.8 * len(straggler)
    assert np.diff([e["time_s"] for e in ordinary]).max() < 40e-3 / 4


def test_whole_passes_return_when_the_straggler_recovers():
    """Worker 3 is 20x slower for the first 50 ms, then as fast as the others (what data
    migration does to a straggler's pass): whole passes resume, every point at θ."""
    sim = _run(cost_s=10e-6, slowdown={3: lambda t: 20.0 if t < 0.05 else 1.0},
               stop={"max_iterations": 120})
    bars = sim.barrier_events()
    early = [e for e in bars if e["time_s"] < 0.05]
    assert any(e["phase"] != WHOLE_PHASE for e in early[1:])
    late = bars[-10:]
    assert late[0]["time_s"] > 0.06
    assert all(e["phase"] == WHOLE_PHASE for e in late)
    assert all(e["workers"]["reason"] == ["pass"] * 3 for e in late)


def test_a_slowed_worker_with_few_points_is_no_straggler():
    """What migration leaves behind: worker 3 is 20x slower per point but holds 2 points (a
    0.4 ms pass against 3 ms): pass times decide, not speeds, so every iteration is a whole
    pass after the calibration -- the workers with full shards are no stragglers beside it
    either.  (The calibration, knowing no pass yet, waits WHOLE_PASS_WAIT times the first
    one, here the small shard's 0.4 ms, and pauses the others: one gradient step.)"""
    x, _ = blobs(n=600, seed=0)
    sim = _run(shards=[x[:299], x[299:598], x[598:]], cost_s=10e-6, slowdown={3: 20.0},
               stop={"max_iterations": 15})
    bars = sim.barrier_events()
    assert bars[0]["workers"]["reason"] == ["signal", "signal", "pass"]
    assert all(e["workers"]["reason"] == ["pass"] * 3 for e in bars[1:])
    assert sim.policy.summary()["whole_pass_iterations"] == 15


def test_other_algorithms_calibrate_on_a_whole_pass_then_keep_fsp_pass_rule():
    """Without the declaration (K-means) the calibration is a whole pass too, as BSPV's is
    (issue 19: the pass rule paused workers that had only waited for a core): workers 1.5x
    and 2.5x slower finish theirs.  Then FSP's pass rule: after the fastest pass a worker
    that can finish its own within twice that time does (1.5x), the one that cannot (2.5x)
    is paused (once its pass rests on PASS_EVIDENCE commits); no whole passes."""
    sim = Simulation("fsp", {}, cost_s=[10e-6, 15e-6, 25e-6], latency_s=LAT,
                     stop={"max_iterations": 5}).run()
    bars = sim.barrier_events()
    assert bars[0]["workers"]["reason"] == ["pass"] * 3
    assert bars[0]["workers"]["points"] == [len(s) for s in sim.shards]
    for e in bars[PASS_EVIDENCE:]:
        assert e["workers"]["reason"] == ["pass", "pass", "signal"]
        assert e["phase"] != WHOLE_PHASE
    assert "whole_pass_iterations" not in sim.policy.summary()


def test_the_calibration_pauses_a_straggler_at_its_bound():
    """K-means, worker 3 30x slower (a 60 ms pass against 2 ms; ``flegel paper``'s
    injected straggler is about that): the calibration pauses it once it ran
    WHOLE_PASS_WAIT times the first pass, not after its own pass."""
    sim = Simulation("fsp", {}, cost_s=10e-6, slowdown={3: 30.0}, latency_s=LAT,
                     stop={"max_iterations": 2}).run()
    assert sim.barrier_events()[0]["workers"]["reason"] == ["pass", "pass", "signal"]
    start = sim.server.start
    first_pass = min(a.time for a in sim.arrivals if a.header["version"] == 0) - start
    (pause,) = [s for s in sim.transport.signals_of(Signal.PAUSE) if s.version == 0]
    assert pause.rank == 3
    assert (WHOLE_PASS_WAIT * first_pass <= pause.time - start
            <= WHOLE_PASS_WAIT * first_pass + 2e-3)


def test_a_worker_that_waits_for_a_core_finishes_its_whole_pass():
    """Issue 19: worker 3 (twice as slow, no straggler) is held up 2.6x for a few iterations,
    as a rank that waits for a core on shared cores is.  Its pass then arrives beyond
    WHOLE_PASS_WAIT times the first arrival; the typical complete whole pass (its own 4 ms)
    bounds the wait instead, so it finishes the pass and every iteration stays a full batch
    at θ.  (Before: it was paused at 60-70% of its pass, and the iteration took a gradient
    step instead of an L-BFGS step.)  A straggler is still paused: see
    test_a_straggler_turns_whole_passes_off."""
    sim = _run(cost_s=[10e-6, 10e-6, 20e-6],
               slowdown={3: lambda t: 2.6 if 0.03 <= t < 0.045 else 1.0},
               stop={"max_iterations": 25})
    bars = sim.barrier_events()
    sizes = [len(s) for s in sim.shards]
    held = [e for e in bars if 0.03 <= e["time_s"] < 0.05]
    assert held, "the slowdown must fall on some iterations"
    for e in bars:
        assert e["phase"] in ("calibration", WHOLE_PHASE)
        assert e["workers"]["points"] == sizes, e
        assert e["workers"]["reason"] == ["pass"] * 3
    assert sim.transport.signals_of(Signal.PAUSE) == []
    # Worker 3's slowed pass (200 points x 20 µs x 2.6 = 10.4 ms) is the longest barrier.
    gaps = np.diff([e["time_s"] for e in bars])
    assert 8e-3 < gaps.max() < 12e-3


def test_the_typical_whole_pass_counts_only_the_whole_pass_phase():
    """Review of issue 19: the whole passes' history (``whole_log``, which bounds the next
    one) holds the iterations of the current run of the whole-pass phase only: not the
    calibration (before: its pass was logged too), and not those before a straggler turned
    whole passes off (cleared when they return)."""
    sim = _run(cost_s=10e-6, stop={"max_iterations": 4})
    bars = sim.barrier_events()
    assert [e["phase"] for e in bars] == ["calibration"] + [WHOLE_PHASE] * 3
    assert len(sim.policy.whole_log) == 3
    sim = _run(cost_s=10e-6, slowdown={3: lambda t: 20.0 if 0.02 <= t < 0.08 else 1.0},
               stop={"max_iterations": 150})
    phases = [e["phase"] for e in sim.barrier_events()]
    back = max(i for i, p in enumerate(phases) if p != WHOLE_PHASE) + 1
    assert WHOLE_PHASE in phases[1:back]  # whole passes ran, were turned off, came back
    assert len(sim.policy.whole_log) == min(len(phases) - back, 5)
