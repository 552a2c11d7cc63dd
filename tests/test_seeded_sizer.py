"""FSP's block sizer seeded from the kernel's cost measured at warm-up (issue 19, Fig. 8;
BlockSizer.seed, flegel.run): the first block is the size the sizer aims at, not the
device's 64 points, and everything after it is as before."""

from __future__ import annotations

import pytest

from flegel.runtime.blocksize import BlockSizer
from flegel.runtime.worker import seed_sizer
from flegel.sync import PRESETS
from flegel.sync.seeded import seeds_sizer
from tests.fakes import Simulation, fspv_logreg
from tests.test_blocksize import train


@pytest.mark.parametrize("a, b, target_s", [(2e-5, 4e-8, 1e-3),   # logreg's CPU kernel
                                            (0.0, 1e-6, 1e-3),    # no fixed cost
                                            (5e-3, 2e-7, 1e-3)])  # a 5 ms call: the share
def test_seeded_first_block_is_the_size_the_sizer_settles_at(a, b, target_s):
    """Seeded with the true a and b, the first block is the nominal size an unseeded sizer
    reaches after training on the same kernel (within its dither and the fit's noise)."""
    seeded = BlockSizer(target_s=target_s)
    seeded.seed(a, b)
    ramped = BlockSizer(target_s=target_s)
    assert ramped.size == 64
    train(ramped, a, b, seconds=1.0, noise=0.0, spikes=0.0)
    assert seeded.size == pytest.approx(ramped.nominal, rel=0.05)
    assert seeded.size > 64


def test_seeding_decides_nothing_else_before_the_first_block():
    """The costs a policy reads (a straggler's delays, a late pass, blocks on course) stay
    unknown until this worker has timed a block, as without a seed; its timings then drive
    the sizer as before, so a worker slower than the measurement shrinks its blocks."""
    sizer = BlockSizer(target_s=1e-3)
    sizer.seed(2e-5, 4e-8)
    assert sizer.point_s is None and sizer.per_point_s is None
    assert sizer.slowed_point_s is None and sizer.block_s == 0.0
    first = sizer.size
    sizer.observe(first, 20 * 4e-8 * first, delay_s=0.0)  # 20x slower than measured
    assert sizer.per_point_s is not None
    for _ in range(6):
        sizer.observe(sizer.size, 20 * 4e-8 * sizer.size)
    assert sizer.nominal < first / 10


@pytest.mark.parametrize("fixed_s, point_s", [
    (1e-5, 0.0), (-1e-5, 1e-6), (float("nan"), 1e-6), (1e-5, float("nan"))])
def test_a_bad_measurement_leaves_the_device_default(fixed_s, point_s):
    sizer = BlockSizer(target_s=1e-3)
    assert sizer.seed(fixed_s, point_s) is False
    assert sizer.size == sizer.nominal == 64
    assert sizer.seed(1e-5, 1e-6) is True and sizer.size > 64  # a good one seeds


def _fspv_logreg(seeded: bool, stragglers: list | None = None) -> tuple[Simulation, list]:
    """FSPV's logistic regression: 4 workers, shards of 4,000 points at 1 µs a point (a 4 ms
    pass), 1 ms blocks (the sizer aims at 1,000 points)."""
    sim = fspv_logreg(16_000, 1e-6, 4, own_algorithms=True, stragglers=stragglers or [])
    if seeded:
        for w in sim.workers.values():  # what worker 1 measured, as flegel.run broadcasts it
            seed_sizer(w.sizer, w.stragglers, 0.0, 1e-6)
    sim.run()
    return sim, [sim.workers[r].algorithm for r in sorted(sim.workers)]


def test_fsp_presets_are_seeded_and_bsp_is_not():
    fsp = [p["model"] for name, p in PRESETS.items() if name.startswith("fsp")]
    assert fsp and all(seeds_sizer(m) for m in fsp)
    assert not any(seeds_sizer(p["model"]) for name, p in PRESETS.items()
                   if not name.startswith("fsp"))


def test_seeded_calibration_starts_with_the_sizers_block():
    """The calibration (a whole pass) begins with the seeded 1,000-point block, then takes
    blocks on course (4x the sizer's): two blocks a worker, against the ramp from 64 points
    (64, then 4x 256, then the rest: three) unseeded; the steps are the same."""
    sim, algs = _fspv_logreg(seeded=True)
    base, base_algs = _fspv_logreg(seeded=False)
    events = sim.barrier_events()
    assert events[0]["phase"] == "calibration"
    assert all(e["workers"]["points"] == [4000] * 4 for e in events)
    assert [a.calls[0] for a in algs] == [1000] * 4
    assert [a.calls[0] for a in base_algs] == [64] * 4
    calibration = [a.calls[:2] for a in algs]
    assert all(sum(c) == 4000 for c in calibration), calibration
    assert all(sum(a.calls[:2]) < 4000 for a in base_algs)


@pytest.mark.parametrize("pattern", [
    {"pattern": "persistent", "factor": 20.0, "workers": [1]},
    {"pattern": "injected", "tau_ms": 32.0, "every": 1000, "workers": [1]}])
def test_a_slowed_worker_keeps_the_ramp(pattern):
    """A worker that straggler patterns slow is not seeded (seed_sizer): its delays come
    after a block, for its points, so a seeded first block bunched them after it.  Its first
    blocks and its calibration are as unseeded; the other workers are seeded."""
    sim, algs = _fspv_logreg(seeded=True, stragglers=[pattern])
    base, base_algs = _fspv_logreg(seeded=False, stragglers=[pattern])
    assert algs[0].calls[:6] == base_algs[0].calls[:6]
    assert algs[0].calls[0] == 64
    assert [a.calls[0] for a in algs[1:]] == [1000] * 3
    assert sim.barrier_events()[0]["workers"]["points"][0] == \
        base.barrier_events()[0]["workers"]["points"][0]
