"""Blocks of a whole pass (flegel/sync/whole_blocks.py; issue 19, Fig. 8): an FSP worker
without a timer takes a full-batch algorithm's whole pass in blocks of BLOCK_GROWTH times the
sizer's, unless its blocks carry straggler delays."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms.logreg import LogisticRegression
from flegel.api import DataInfo
from flegel.protocol import Instructions
from flegel.sync.whole_blocks import whole_on_course
from tests.fakes import Simulation

LAT = 50e-6


class _CountingLogReg(LogisticRegression):
    """Logistic regression that records each kernel call's block size (all workers)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[int] = []

    def update_block(self, block, theta, t):
        self.calls.append(len(block))
        return super().update_block(block, theta, t)


def test_fspv_takes_logistic_regressions_whole_passes_in_larger_blocks():
    """4 workers, shards of 400 points at 10 µs a point (a 4 ms pass), 1 ms blocks: the
    sizer's blocks are about 100 points (dithered: 90 and 110), so a whole pass took 4 or 5
    blocks, and the calibration the sizer's ramp from its first block.  Now a whole pass
    (the calibration's too, after its first block) takes blocks of BLOCK_GROWTH times the
    sizer's, at most two a pass, and every iteration is still a whole pass (L-BFGS) of
    every point."""
    rng = np.random.default_rng(0)
    n, d, workers = 1600, 5, 4
    x = rng.normal(size=(n, d))
    y = (x @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    alg = _CountingLogReg(kernel="array")
    theta0 = alg.init_parameter(DataInfo(n_features=d, n_points=n, n_workers=workers,
                                         sample=x, sample_y=y, n_classes=2))
    sim = Simulation("fsp", {"interval": "multistage", "migration": {"mode": "off"}},
                     workers=workers, shards=np.array_split(x, workers),
                     labels=np.array_split(y, workers), algorithm=alg, theta0=theta0,
                     cost_s=10e-6, block_ms=1.0, latency_s=LAT,
                     stop={"max_iterations": 8}).run()
    events = sim.barrier_events()
    assert [e["phase"] for e in events] == ["calibration"] + ["whole-pass"] * 7
    assert all(e["workers"]["reason"] == ["pass"] * workers for e in events)
    # before: the sizer's blocks of 90-110 points (dithered), 4-5 a pass, the calibration's
    # ramp from 64 points too
    assert len(alg.calls) <= 2 * len(events) * workers, alg.calls
    assert sum(c >= 3 * 110 for c in alg.calls) >= (len(events) - 1) * workers, alg.calls
    assert all(e["workers"]["points"] == [n // workers] * workers for e in events)


class _Port:
    """What whole_on_course reads of a worker: its sizer's costs and its algorithm."""

    def __init__(self, per: float | None, slowed: float | None, full_batch: bool) -> None:
        self.per_point_s = per
        self.slowed_point_s = slowed
        self.algorithm = LogisticRegression(solver="auto" if full_batch else "gd")


@pytest.mark.parametrize("port, instructions, migrating, on", [
    (_Port(1e-6, 1e-6, True), Instructions(), False, True),
    (_Port(1e-6, 1.5e-6, True), Instructions(), False, True),
    # a straggler's delays (an injected suspension, a persistent slowdown): the sizer's blocks
    (_Port(1e-6, 20e-6, True), Instructions(), False, False),
    (_Port(None, None, True), Instructions(), False, False),  # no block timed yet
    (_Port(1e-6, 1e-6, False), Instructions(), False, False),  # gradient steps: no whole pass
    (_Port(1e-6, 1e-6, True), Instructions(batch=100), False, False),  # a sampled batch
    (_Port(1e-6, 1e-6, True), Instructions(cover=1), False, False),  # coverage
    (_Port(1e-6, 1e-6, True), Instructions(), True, False),  # migration
])
def test_whole_on_course(port, instructions, migrating, on):
    assert whole_on_course(port, instructions, migrating) is on  # type: ignore[arg-type]
