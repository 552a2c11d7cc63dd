"""BSP's fixed block from the per-call cost (issue 23, item 3), in one process: the warm-up
measurement against a simulated kernel (its clock is the model ``a + b·n``, with noise and
preempted calls), the size rule on its power-of-two grid, the master's choice over the
workers, and the worker policy that applies it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flegel.runtime.blocksize import (
    BUDGET_S,
    DEVICES,
    FIRST,
    REPEATS,
    fixed_block,
    measure_call_cost,
)
from flegel.sync.bsp import AUTO, BLOCK, BSP, BlockChoice, BSPWorker, choose_block, measures_block


class SimulatedKernel:
    """``timed(n)`` of a kernel costing ``a + b·n`` seconds, each call scaled by
    ``1 + noise·u`` (u uniform in [0, 1]: a call is never faster than its cost) and a
    fraction ``spikes`` of calls preempted (5x); records the calls."""

    def __init__(self, a: float, b: float, noise: float = 0.0, spikes: float = 0.0,
                 seed: int = 0) -> None:
        self.a, self.b, self.noise, self.spikes = a, b, noise, spikes
        self.rng = np.random.default_rng(seed)
        self.calls: list[int] = []

    def __call__(self, n: int) -> float:
        self.calls.append(n)
        t = (self.a + self.b * n) * (1 + self.noise * self.rng.random())
        return t * 5 if self.rng.random() < self.spikes else t

    @property
    def spent_s(self) -> float:
        return sum(self.a + self.b * n for n in self.calls)


def share(a: float, b: float, n: int) -> float:
    """The per-call cost's share of a block of ``n`` points."""
    return a / (a + b * n)


# ------------------------------------------------------------------------------ the rule
def test_the_5ms_kernel_gets_blocks_where_calls_take_at_most_30_percent() -> None:
    # bench/blocksize_bench.py's BSPB kernel: 5 ms a call, 0.25 µs a point.  Fixed
    # 16,384-point blocks spend 55% of its time in calls.
    a, b = 5e-3, 2.5e-7
    assert share(a, b, BLOCK) > 0.5
    n = fixed_block(a, b, BLOCK)
    assert n == 131072 and share(a, b, n) <= 0.3
    assert a + b * n <= DEVICES["cpu"].max_block_s  # and within the CPU's cap on a block


@pytest.mark.parametrize("a", [1e-3, 3e-3, 5e-3, 6e-3])
@pytest.mark.parametrize("b", [5e-8, 2.5e-7, 1e-6])
def test_calls_take_at_most_30_percent_whenever_the_cap_allows(a: float, b: float) -> None:
    n = fixed_block(a, b, BLOCK)
    assert n >= BLOCK and n & (n - 1) == 0  # a power of two, at least the floor
    assert share(a, b, n) <= 0.3 or a + b * n / 2 > DEVICES["cpu"].max_block_s


def test_cheap_calls_keep_the_least_block() -> None:
    # K-means-like: tens of µs a call, tens of ns a point; and no fixed cost at all.
    assert fixed_block(4e-5, 4e-8, BLOCK) == BLOCK
    assert fixed_block(0.0, 1e-6, BLOCK) == BLOCK
    assert fixed_block(2e-5, 5e-5, BLOCK) == BLOCK  # slow points: never below the floor


def test_the_grid_absorbs_measurement_noise_away_from_its_boundaries() -> None:
    """Costs within ±25% of (5 ms, 0.25 µs) give one size: runs agree unless a measurement
    strays a factor √2 from the ideal size."""
    sizes = {fixed_block(5e-3 * fa, 2.5e-7 * fb, BLOCK)
             for fa in (0.9, 1.0, 1.1) for fb in (0.9, 1.0, 1.1)}
    assert sizes == {131072}


def test_a_gpu_gets_its_longer_cap() -> None:
    a, b = 6e-3, 1e-6  # a call costs as much as 6,000 points
    cpu, gpu = fixed_block(a, b, BLOCK, "cpu"), fixed_block(a, b, BLOCK, "gpu")
    assert gpu >= cpu and share(a, b, gpu) <= 0.3


def test_a_call_longer_than_the_cap_still_does_as_much_work_as_it_costs() -> None:
    a, b = 0.2, 1e-6  # 200 ms a call: over the CPU's 50 ms cap
    n = fixed_block(a, b, BLOCK)
    assert share(a, b, n) <= 0.5 * math.sqrt(2) + 1e-9  # rounding may halve it at worst
    assert fixed_block(1e-3, 0.0, BLOCK, most=1 << 20) == 1 << 20


# ------------------------------------------------------------------------ the measurement
@pytest.mark.parametrize("a, b", [(5e-3, 2.5e-7), (5e-3, 1e-6), (4e-5, 4e-8), (0.0, 5e-5)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warm_up_measures_a_and_b(a: float, b: float, seed: int) -> None:
    """Calls 0-10% slower than their cost and 10% of them preempted (5x): the fastest of
    three calls per size gives a within 10% of a call's cost and b within 10%; the size
    chosen from them is the one from the true costs."""
    kernel = SimulatedKernel(a, b, noise=0.1, spikes=0.1, seed=seed)
    fitted = measure_call_cost(kernel, 1_000_000)
    assert fitted is not None
    fa, fb = fitted
    assert abs(fa - a) <= 0.1 * (a + b * FIRST) + 1e-9
    assert fb == pytest.approx(b, rel=0.1)
    assert fixed_block(fa, fb, BLOCK) == fixed_block(a, b, BLOCK)


def test_warm_up_stays_within_its_budget() -> None:
    kernel = SimulatedKernel(5e-3, 2.5e-7)
    measure_call_cost(kernel, 10_000_000)
    assert kernel.spent_s <= BUDGET_S + REPEATS * (5e-3 + 2.5e-7 * max(kernel.calls))
    assert max(kernel.calls) == 32768  # stops once a call takes twice the smallest
    assert all(c == FIRST * 8 ** k for c, k in zip(sorted(set(kernel.calls)), range(9)))
    slow = SimulatedKernel(0.0, 1e-3)  # 1 ms a point: over budget at once, still two sizes
    assert measure_call_cost(slow, 10_000_000) is not None
    assert max(slow.calls) == FIRST * 8


def test_a_shard_too_small_to_time_two_sizes_is_not_measured() -> None:
    kernel = SimulatedKernel(5e-3, 1e-6)
    assert measure_call_cost(kernel, FIRST + 10) is None
    assert kernel.calls == []
    fitted = measure_call_cost(kernel, 1000)  # the last size is the shard
    assert fitted is not None and max(kernel.calls) == 1000


# ----------------------------------------------------------------- the master's choice
def test_the_master_takes_the_median_cost_and_records_it() -> None:
    rule = fixed_block
    costs: list[tuple[float, float, float] | None] = [
        (5e-3, 2.5e-7, 0.1), (5.2e-3, 2.6e-7, 0.12), (0.05, 1e-6, 0.3), None]
    choice = choose_block(costs, rule)
    assert choice == BlockChoice(131072, 5.2e-3, 2.6e-7, 0.3)
    assert choose_block([None, None], rule) == BlockChoice(BLOCK)


def test_only_bsp_with_block_auto_measures() -> None:
    assert measures_block("bsp", {"block": AUTO})
    assert measures_block("bsp", {})
    assert not measures_block("bsp", {"block": 4096})
    assert not measures_block("fsp", {"block": AUTO})


def test_the_worker_cuts_blocks_of_the_set_or_chosen_size() -> None:
    assert BSPWorker({"block": 4096}).block_size(None, 77) == 4096  # type: ignore[arg-type]
    auto = BSPWorker({"block": AUTO})
    assert auto.block_size(None, 77) == BLOCK  # type: ignore[arg-type]
    auto.block = 131072  # the master's choice (flegel/run.py)
    assert auto.block_size(None, 77) == 131072  # type: ignore[arg-type]
    assert auto.checkpoint_state()["block"] == 131072  # a resumed run goes on with it


def test_summary_records_the_block_and_its_measured_cost() -> None:
    from tests.fakes import Simulation

    sim = Simulation("bsp", {"batch": "full"}, cost_s=[10e-6, 10e-6, 10e-6],
                     stop={"max_iterations": 2}).run()
    out = sim.policy.summary()
    assert out["block"] == BLOCK and "call_cost" not in out
    assert isinstance(sim.policy, BSP)
    sim.policy.chose_block(BlockChoice(131072, 5e-3, 2.5e-7, 0.1))
    out = sim.policy.summary()
    assert out["block"] == 131072
    assert out["call_cost"] == {"fixed_s": 5e-3, "point_s": 2.5e-7, "measure_s": 0.1}
