"""Blocks of a whole pass (flegel/sync/whole_blocks.py; issue 19, Fig. 8): an FSP worker
without a timer takes a whole pass (any algorithm's calibration, a full-batch algorithm's
passes) in blocks of BLOCK_GROWTH times the sizer's, unless its blocks carry straggler
delays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flegel.algorithms.logreg import LogisticRegression
from flegel.algorithms.nmf import NMF
from flegel.protocol import Instructions
from flegel.sync.whole_blocks import whole_on_course
from tests.fakes import Simulation, counting, fspv_logreg


def _whole_passes(options: dict) -> tuple[Any, list[dict]]:
    """8 iterations of FSPV (``options`` added) on logistic regression: 4 workers, shards of
    400 points at 10 µs a point (a 4 ms pass), 1 ms blocks; the algorithm and the barriers."""
    sim = fspv_logreg(1600, 10e-6, 8, options).run()
    return sim.algorithm, sim.barrier_events()


def test_fspv_takes_logistic_regressions_whole_passes_in_larger_blocks():
    """4 workers, shards of 400 points at 10 µs a point (a 4 ms pass), 1 ms blocks: the
    sizer's blocks are about 100 points (dithered: 90 and 110), so a whole pass took 4 or 5
    blocks, and the calibration the sizer's ramp from its first block.  Now a whole pass
    (the calibration's too, after its first block) takes blocks of BLOCK_GROWTH times the
    sizer's, at most two a pass, and every iteration is still a whole pass (L-BFGS) of
    every point."""
    n, workers = 1600, 4
    alg, events = _whole_passes({})
    assert [e["phase"] for e in events] == ["calibration"] + ["whole-pass"] * 7
    assert all(e["workers"]["reason"] == ["pass"] * workers for e in events)
    # before: the sizer's blocks of 90-110 points (dithered), 4-5 a pass, the calibration's
    # ramp from 64 points too
    assert len(alg.calls) <= 2 * len(events) * workers, alg.calls
    assert sum(c >= 3 * 110 for c in alg.calls) >= (len(events) - 1) * workers, alg.calls
    assert all(e["workers"]["points"] == [n // workers] * workers for e in events)


class _Port:
    """What whole_on_course reads of a worker: its sizer's costs and whether straggler
    patterns slow it (its algorithm is not read: any algorithm's whole pass is one)."""

    def __init__(self, per: float | None, slowed: float | None,
                 straggling: bool = False, algorithm: Any = None) -> None:
        self.per_point_s = per
        self.slowed_point_s = slowed
        self.straggling = straggling
        self.algorithm = algorithm if algorithm is not None else LogisticRegression()


@pytest.mark.parametrize("port, instructions, migrating, on", [
    (_Port(1e-6, 1e-6), Instructions(), None, True),
    (_Port(1e-6, 1.5e-6), Instructions(), None, True),
    # a straggler's delays (an injected suspension, a persistent slowdown): the sizer's blocks
    (_Port(1e-6, 20e-6), Instructions(), None, False),
    (_Port(None, None), Instructions(), None, False),  # no block timed yet
    # straggler patterns whose delays have not come yet (a late or transient pattern)
    (_Port(1e-6, 1e-6, straggling=True), Instructions(), None, False),
    # an algorithm without full-batch updates: its calibration is a whole pass all the same
    (_Port(1e-6, 1e-6, algorithm=NMF(n_components=2)), Instructions(), None, True),
    (_Port(1e-6, 1e-6), Instructions(batch=100), None, False),  # a sampled batch
    (_Port(1e-6, 1e-6), Instructions(cover=1), None, False),  # coverage
    (_Port(1e-6, 1e-6), Instructions(), object(), False),  # migration
])
def test_whole_on_course(port, instructions, migrating, on):
    assert whole_on_course(port, instructions, migrating) is on  # type: ignore[arg-type]


def test_centralized_coordination_keeps_the_sizer_s_blocks():
    """Centralized, the master sends no timer at all (η iterations end on its signal), so a
    worker cannot tell a whole pass from an η iteration: its blocks stay the sizer's, 4-5 a
    pass, and it answers the master's signal within one (FSPWorker._on_course)."""
    alg, events = _whole_passes({"coordination": "centralized"})
    assert len(alg.calls) > 3 * len(events) * 4, alg.calls
    assert max(alg.calls) <= 2 * 110, alg.calls


def test_any_algorithms_calibration_takes_larger_blocks():
    """NMF (no ``full_batch_update``), shards of 2,000 points at 5 µs a point (a 10 ms
    pass), 1 ms blocks: its calibration is a whole pass (half a shard would be the sample:
    ``sample_fraction``), and a whole pass without a timer is the iteration's rule, not the
    algorithm's -- after the sizer's first block, blocks of BLOCK_GROWTH times its own.
    Before: a sample of 1,000 points in the sizer's ramp from 64 points and its ~200-point
    blocks."""
    rng = np.random.default_rng(0)
    workers, shard = 4, 2_000
    x = rng.random((workers * shard, 6)) @ rng.random((6, 12))
    alg = counting(NMF)(n_components=3, kernel="array")
    sim = Simulation("fsp", {"interval": "multistage", "migration": {"mode": "off"}},
                     workers=workers, data=x, algorithm=alg, cost_s=5e-6, block_ms=1.0,
                     latency_s=50e-6, stop={"max_iterations": 1},
                     theta0={"components": rng.random((3, 12)) + 0.1,
                             "wtw": np.zeros((3, 3)), "wtx": np.zeros((3, 12))}).run()
    first = sim.barrier_events()[0]
    assert first["phase"] == "calibration"
    assert first["workers"]["points"] == [shard] * workers
    assert first["workers"]["reason"] == ["pass"] * workers
    assert len(alg.calls) <= 4 * workers, alg.calls  # 64, then 4x the sizer's (~220)


def _nmf_passes(cost_s: list[float], iterations: int) -> Simulation:
    """FSP at a fixed η of 100 ms on NMF, 4 workers with their own algorithm: shards of 2,000
    points at ``cost_s`` a point (5 µs: a 10 ms pass, ``flegel paper``'s NMF pass is 4.8
    ms), 1 ms blocks (the sizer's ~200 points, four times that a pass of 800)."""
    rng = np.random.default_rng(0)
    workers, shard = 4, 2_000
    x = rng.random((workers * shard, 6)) @ rng.random((6, 12))
    return Simulation("fsp", {"interval": "fixed", "eta_ms": 100, "coordination": "semi"},
                      workers=workers, data=x, algorithm=counting(NMF)(n_components=3,
                                                                       kernel="array"),
                      own_algorithms=True, cost_s=cost_s, block_ms=1.0, latency_s=50e-6,
                      stop={"max_iterations": iterations},
                      theta0={"components": rng.random((3, 12)) + 0.1,
                              "wtw": np.zeros((3, 3)), "wtx": np.zeros((3, 12))}).run()


def test_a_steady_worker_on_course_takes_its_pass_in_bsps_block():
    """Issue 19, Fig. 8 (whole_blocks, "Steady workers"): a worker on course for its timer
    took blocks of BLOCK_GROWTH times the sizer's, so a pass of more than four sizer blocks
    (NMF's) ran in two or more where BSPV takes one, each paying NMF's per-call set-up.  Now
    the master says which workers it plans no pause for (``Instructions.steady``: predicted
    within PASS_GRACE of the fastest) and those take BSP's block: every whole pass after the
    calibration (nothing predicted yet: not steady) in one block (before: 3 a pass)."""
    sim = _nmf_passes([5e-6] * 4, 8)
    assert all(e["workers"]["reason"] == ["pass"] * 4 for e in sim.barrier_events())
    for r in sim.ranks:
        calls = sim.workers[r].algorithm.calls
        assert calls[-7:] == [2_000] * 7, calls
        sent = [p.header for p in sim.transport.params_to(r)[1:] if not p.header["stop"]]
        # the calibration's instructions: not steady (nothing predicted yet)
        assert [bool(h.get("steady")) for h in sent] == [False] + [True] * 7


def test_a_worker_predicted_slow_keeps_the_sizer_s_blocks():
    """... but a worker the master may pause at the first pass (worker 4, 3x slower: its
    predicted pass is beyond PASS_GRACE times the fastest) is not steady: it keeps blocks of
    BLOCK_GROWTH times the sizer's, so it answers that pause within one of them."""
    sim = _nmf_passes([5e-6, 5e-6, 5e-6, 15e-6], 8)
    assert not any(p.header.get("steady") for p in sim.transport.params_to(4))
    assert max(sim.workers[4].algorithm.calls) <= 4 * 1.1 * 1e-3 / 15e-6 + 1
    assert sim.workers[1].algorithm.calls[-7:] == [2_000] * 7
