"""Block sizing with a fixed per-call cost (issue 14): the fit of time = a + b·n, and the
sizes the sizer picks from it, on a simulated clock; one small real run of an algorithm
that sleeps 5 ms per block call."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
from conftest import mpirun, summary, write_job

from flegel.runtime.blocksize import DEVICES, BlockSizer, CostModel, device_of

A_SLEEP = 5e-3  # the sleeping algorithm's fixed cost per block call


def noisy_times(rng: np.random.Generator, ns: np.ndarray, a: float, b: float,
                noise: float, spikes: float) -> np.ndarray:
    """Times ``a + b·n``, each scaled by ``1 + noise·u`` (u uniform in [-1, 1]); a fraction
    ``spikes`` of them take 5x longer (a preempted block)."""
    t = (a + b * ns) * (1 + noise * rng.uniform(-1, 1, len(ns)))
    t[rng.random(len(ns)) < spikes] *= 5
    return t


# --------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b", [(5e-3, 2e-7),    # the 5 ms sleeper, a cheap kernel
                                  (6e-3, 1e-5),    # a GPU CNN: 6 ms per call
                                  (2e-5, 1e-7),    # a CPU kernel: Python overhead per call
                                  (0.0, 1e-6)])    # no fixed cost at all
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_a_and_b_from_noisy_blocks(a: float, b: float, seed: int) -> None:
    """Known a and b, sizes of a settled sizer (two sizes, 2:1), 10% noise and 4% of blocks
    preempted (5x): the fit of the last 48 blocks is within 10% of a block's time on a, and
    of b itself; a block's predicted time is within 5%."""
    rng = np.random.default_rng(seed)
    nominal = max(10.0, (a / 0.15 if a else 1e-3) / b)
    ns = np.round(nominal * np.where(np.arange(200) % 2, 4 / 3, 2 / 3))
    ts = noisy_times(rng, ns, a, b, noise=0.1, spikes=0.04)
    model = CostModel()
    for n, t in zip(ns, ts, strict=True):
        model.add(float(n), float(t))
    fa, fb = model.fit()
    assert (fa, fb) == (model.fixed_s, model.point_s)
    block = a + b * nominal
    assert model.fixed_s >= 0
    assert abs(model.fixed_s - a) < 0.1 * block
    assert model.point_s == pytest.approx(b, rel=0.1)
    assert model.predict(nominal) == pytest.approx(block, rel=0.05)


def test_fit_from_varied_sizes_is_exact_without_noise() -> None:
    model = CostModel()
    for n in (64, 12, 48, 192, 768, 3000):
        model.add(n, 5e-3 + 2e-7 * n)
    model.fit()
    assert model.fixed_s == pytest.approx(5e-3, rel=1e-6)
    assert model.point_s == pytest.approx(2e-7, rel=1e-6)


def test_fit_without_a_fixed_cost_keeps_a_non_negative() -> None:
    """Pure per-point cost with noise gives a negative intercept about half the time: then
    a = 0 and b is the median cost per point."""
    zeros = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        ns = rng.integers(500, 1500, 48).astype(float)
        model = CostModel()
        for n, t in zip(ns, noisy_times(rng, ns, 0.0, 1e-6, 0.2, 0.0), strict=True):
            model.add(float(n), float(t))
        model.fit()
        assert model.fixed_s >= 0
        assert model.predict(1000) == pytest.approx(1e-3, rel=0.1)  # 20% noise
        zeros += model.fixed_s == 0
    assert zeros > 0  # the constraint was exercised


def test_fit_of_one_size_keeps_the_prior_fixed_cost() -> None:
    """Blocks of one size cannot separate a from b: a stays what it was, b takes the rest."""
    model = CostModel(fixed_s=1e-3)
    for _ in range(10):
        model.add(1000, 3e-3)
    model.fit()
    assert model.fixed_s == pytest.approx(1e-3)
    assert model.point_s == pytest.approx(2e-6)


def test_fit_outlasts_outliers_and_follows_a_real_change_of_cost() -> None:
    """A fifth of the blocks preempted (10x) leave the fit exact; a kernel that became 3x
    slower per point (θ grew, another tenant) is followed once most of the window saw it."""
    model = CostModel()
    for i in range(60):
        n = 1000 if i % 2 else 2000
        model.add(n, (1e-3 + 1e-6 * n) * (10 if i % 5 == 0 else 1))
    model.fit()
    assert model.point_s == pytest.approx(1e-6, rel=1e-6)
    assert model.fixed_s == pytest.approx(1e-3, rel=1e-6)
    for i in range(30):
        n = 1000 if i % 2 else 2000
        model.add(n, 1e-3 + 3e-6 * n)
    model.fit()
    assert model.point_s == pytest.approx(3e-6, rel=0.02)
    assert model.fixed_s == pytest.approx(1e-3, abs=1e-4)


# --------------------------------------------------------------------------------------------
# The sizes, on a simulated clock
# --------------------------------------------------------------------------------------------


def train(sizer: BlockSizer, a: float, b: float, seconds: float, seed: int = 0,
          noise: float = 0.1, spikes: float = 0.02) -> tuple[float, list[tuple[int, float]]]:
    """Run blocks of the sizer's sizes on a simulated clock for ``seconds`` of compute.

    Returns the share of the compute that went to the fixed cost (blocks x ``a`` / time),
    computed from the sizes chosen, and the (size, time) of every block.
    """
    rng = np.random.default_rng(seed)
    clock = fixed = 0.0
    blocks = []
    while clock < seconds:
        n = sizer.size
        t = float(noisy_times(rng, np.array([n]), a, b, noise, spikes)[0])
        sizer.observe(n, t)
        clock += t
        fixed += a
        blocks.append((n, t))
    return fixed / clock, blocks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sleeping_5ms_per_call_spends_at_most_30_percent_on_it(seed: int) -> None:
    """The issue's check: an algorithm that sleeps 5 ms per block call, on the CPU defaults.
    The old sizer (time = b·n, 1 ms blocks) shrank such blocks to one point: ~100% of the
    time went to the sleep."""
    sizer = BlockSizer(target_s=1e-3)
    share, blocks = train(sizer, A_SLEEP, 2e-7, seconds=2.0, seed=seed)
    assert share <= 0.30
    # Settled: the documented share (15%), and blocks under the 50 ms cap.
    late = blocks[len(blocks) // 2:]
    steady = len(late) * A_SLEEP / sum(t for _, t in late)
    assert 0.08 < steady < 0.22, steady
    # The cap holds for the fitted cost; the true one is within the fit's error.
    assert max(A_SLEEP + 2e-7 * n for n, _ in late) <= 1.1 * sizer.max_block_s
    assert sizer.fixed_fraction == pytest.approx(0.15, abs=0.05)


def test_cpu_kernel_keeps_one_millisecond_blocks() -> None:
    """A cheap per-call cost (20 µs of Python) leaves the 1 ms target in charge: blocks stay
    about 1 ms, so barriers are answered as promptly as before."""
    sizer = BlockSizer(target_s=1e-3)
    share, blocks = train(sizer, 2e-5, 1e-7, seconds=0.5)
    late = blocks[len(blocks) // 2:]
    assert np.mean([t for _, t in late]) == pytest.approx(1e-3, rel=0.2)
    assert share < 0.05
    assert sizer.nominal == pytest.approx((1e-3 - 2e-5) / 1e-7, rel=0.15)


def test_gpu_defaults_size_blocks_for_a_6ms_call() -> None:
    """The GPU CNN of the issue (about 6 ms per call, 10 µs per image): blocks of about
    40 ms, not one image (the old sizer's 67 s iterations)."""
    sizer = BlockSizer(target_s=1e-3, device="gpu")
    assert sizer.size == DEVICES["gpu"].initial
    share, blocks = train(sizer, 6e-3, 1e-5, seconds=3.0)
    assert share <= 0.25
    late = blocks[len(blocks) // 2:]
    assert 0.025 < np.mean([t for _, t in late]) < 0.06
    assert min(n for n, _ in late) > 1000


def test_the_cap_wins_over_the_share_but_work_stays_at_least_the_fixed_cost() -> None:
    """A 100 ms call can't keep to 15% under a 50 ms cap: blocks then take about twice the
    call (the cap gives way) and the fixed cost is about half the time, not all of it."""
    sizer = BlockSizer(target_s=1e-3, max_block_s=0.05)
    share, blocks = train(sizer, 0.1, 1e-6, seconds=10.0, noise=0.02, spikes=0.0)
    assert 0.4 < share < 0.6
    late = blocks[len(blocks) // 2:]
    assert max(t for _, t in late) < 0.25


def test_a_tighter_cap_buys_promptness_with_share() -> None:
    """The documented trade: with a 5 ms per-call cost the default 50 ms cap lets blocks
    reach the 15% share (33 ms); a 20 ms cap answers barriers sooner and pays about twice
    the share in calls."""
    share_default, _ = train(BlockSizer(target_s=1e-3), A_SLEEP, 1e-6, seconds=3.0)
    share_prompt, blocks = train(BlockSizer(target_s=1e-3, max_block_s=0.02), A_SLEEP, 1e-6,
                                 seconds=3.0)
    assert share_default < 0.2 < share_prompt < 0.5
    late = blocks[len(blocks) // 2:]
    assert max(A_SLEEP + 1e-6 * n for n, _ in late) <= 1.1 * 0.02


def test_straggler_delay_shrinks_blocks() -> None:
    """A worker whose blocks are followed by suspensions (a straggler pattern) takes smaller
    blocks, so its block plus suspension still takes about the block time."""
    sizer = BlockSizer(target_s=1e-3)
    for _ in range(20):
        n = sizer.size
        sizer.observe(n, 1e-7 * n)
    before = sizer.nominal
    for _ in range(20):
        n = sizer.size
        sizer.observe(n, 1e-7 * n, delay_s=9e-7 * n)  # 10x slower in all
    assert sizer.nominal < before / 2


def test_per_point_budget_fits_blocks_in_a_deadline() -> None:
    """FSP divides the time left by ``per_point_s``: with a fixed cost that is the mean cost
    of a nominal block's point, so a nominal block fits the time it was given."""
    sizer = BlockSizer(target_s=1e-3)
    train(sizer, A_SLEEP, 2e-7, seconds=1.0, noise=0.0, spikes=0.0)
    assert sizer.per_point_s is not None
    n = int(sizer.block_s / sizer.per_point_s)
    assert A_SLEEP + 2e-7 * n == pytest.approx(sizer.block_s, rel=0.02)


def test_device_of_algorithms() -> None:
    assert device_of(object()) == "cpu"
    assert device_of(types.SimpleNamespace(device="gpu")) == "gpu"
    assert device_of(types.SimpleNamespace(device="cpu")) == "cpu"
    cupy = types.SimpleNamespace(__name__="cupy")
    assert device_of(types.SimpleNamespace(device="auto", xp=cupy)) == "gpu"
    assert device_of(types.SimpleNamespace(device="auto", xp=np)) == "cpu"


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="fixed_share must be in"):
        BlockSizer(fixed_share=1.5)
    with pytest.raises(ValueError, match="device must be one of"):
        BlockSizer(device="tpu")


# --------------------------------------------------------------------------------------------
# One small real run
# --------------------------------------------------------------------------------------------

SLEEPER = '''
"""Sleeps 5 ms per block call and 1 µs per point; counts its calls in θ."""
import time

import numpy as np

from flegel import Algorithm


class Sleeper(Algorithm):
    def init_parameter(self, info):
        return {"mean": np.zeros(info.n_features), "calls": np.zeros(1)}

    def update_block(self, block, theta, t):
        time.sleep(0.005 + 1e-6 * len(block))
        return {"sum": block.x.sum(0), "calls": np.ones(1), "objective": 0.0}

    def update_parameter(self, agg, theta):
        return {"mean": theta["mean"], "calls": theta["calls"] + agg["calls"]}

    def evaluate(self, theta, block):
        return 0.0
'''


@pytest.mark.mpi
def test_real_run_of_a_sleeping_algorithm(tmp_path: Path) -> None:
    """2 workers, 60,000 points each, a push per full pass (ASP: its blocks are the sizer's;
    BSP cuts fixed blocks for determinism), about a second of training: the block calls
    counted in θ, times 5 ms, are at most 30% of the workers' compute time.  (With the old
    sizer one pass took 60,000 calls: five minutes.)"""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    np.save(tmp_path / "x.npy", np.ones((120_000, 2)))
    job = write_job(tmp_path / "job.yaml", algorithm="sleeper:Sleeper",
                    data={"path": "x.npy"}, workers=2, sync={"model": "asp", "batch": "full"},
                    stop={"max_iterations": 12, "tolerance": None},
                    output={"progress": "none", "trace_points": 0})
    mpirun(job, 2, tmp_path / "out", timeout=240)
    s = summary(tmp_path / "out")
    calls = float(np.load(tmp_path / "out" / "model.npz")["calls"][0])
    compute = sum(w["compute_s"] for w in s["per_worker"])
    # About 12 pushes (passes) per worker; under ASP a slowed worker may do fewer.
    assert sum(w["passes"] for w in s["per_worker"]) >= 20 and calls > 0
    share = calls * A_SLEEP / compute
    assert share <= 0.30, (calls, compute)
