"""Numeric faults and stalls end the job at once, with θ the last good one (issue 13).

In-process: the real server and sync policies on the simulated clock (tests/fakes.py); the
MPI side (θ saved, exit codes, processes) is in tests/test_lifetime_mpi.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.protocol import ExitCode, StopReason
from flegel.runtime.faults import JobFault
from flegel.runtime.layout import Layout
from flegel.runtime.numerics import layout_problem, nonfinite_key
from tests.fakes import Simulation, blobs, kmeans_theta0


class PoisonedKMeans(KMeans):
    """K-means whose aggregators go bad from iteration ``at`` on: NaN or a (1, k) shape."""

    def __init__(self, at: int, fault: str) -> None:
        super().__init__(n_clusters=4)
        self.at, self.fault = at, fault

    def update_block(self, block, theta, t):
        agg = super().update_block(block, theta, t)
        if t >= self.at:
            if self.fault == "nan":
                agg["sums"][1, 0] = np.nan
            elif self.fault == "inf-objective":
                agg["objective"] = float("inf")
            elif self.fault == "shape":
                agg["counts"] = agg["counts"][None, :]  # (1, k): NumPy would broadcast it
        return agg


class DivergingKMeans(KMeans):
    """K-means whose update_parameter returns inf centres at iteration ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__(n_clusters=4)
        self.at, self.calls = at, 0

    def update_parameter(self, agg, theta):
        self.calls += 1
        out = super().update_parameter(agg, theta)
        if self.calls >= self.at:
            out["centers"] = out["centers"] * np.inf
        return out


def _sim(model: str, options: dict, algorithm: KMeans, **kw) -> Simulation:
    x, centres = blobs(n=600, seed=1)
    return Simulation(model, options, data=x, algorithm=algorithm,
                      theta0=kmeans_theta0(centres), stop={"max_iterations": 50}, **kw)


def _fault(sim: Simulation) -> JobFault:
    with pytest.raises(JobFault) as caught:
        sim.run()
    return caught.value


def _finite(theta: dict) -> bool:
    return all(np.isfinite(np.asarray(v)).all() for v in theta.values())


@pytest.mark.parametrize("model,options", [("bsp", {"batch": 50}), ("asp", {}),
                                           ("fsp", {"interval": "fixed", "eta_ms": 0.5})])
def test_nan_in_an_aggregator_stops_at_that_iteration(model, options):
    sim = _sim(model, options, PoisonedKMeans(at=3, fault="nan"))
    fault = _fault(sim)
    text = str(fault)
    assert fault.code == ExitCode.NUMERIC and fault.reason == StopReason.NUMERIC
    assert "entry 'sums' holds 1 NaN of 12 values" in text
    # The rank and the iteration of the bad commit, from what the simulation delivered.
    bad = [a for a in sim.arrivals if not np.isfinite(a.agg["sums"]).all()]
    assert not bad  # the faulty commit never reached the policy
    assert "for iteration 3 " in text and text.startswith("worker ")
    rank = int(text.split()[1].split("'")[0])
    assert rank in sim.ranks
    # θ is the last good one: finite, from the iterations before the fault.
    assert _finite(sim.server.theta)
    if model == "bsp":  # iterations 1 and 2 were applied, iteration 3 was not
        assert sim.server.version == 2


def test_inf_objective_is_named_by_its_key():
    fault = _fault(_sim("bsp", {"batch": "full"}, PoisonedKMeans(at=2, fault="inf-objective")))
    assert "entry 'objective' holds inf" in str(fault)
    assert "iteration 2 " in str(fault)


def test_an_aggregator_of_the_wrong_shape_is_not_broadcast():
    # What a worker would commit at iteration 2: counts of shape (1, k), which NumPy would
    # broadcast into θ's (k,).  (The MPI worker checks before packing; here the server.)
    sim = _sim("bsp", {"batch": 50}, KMeans(n_clusters=4))
    sim.start()
    agg = sim.server.zero()
    agg["counts"] = np.ones((1, 4))
    header = {"version": 1.0, "clock": 2.0, "points": 50.0}
    with pytest.raises(JobFault) as caught:
        sim.server.dispatch(2, header, agg, sim.policy)
    assert caught.value.code == ExitCode.NUMERIC
    assert str(caught.value) == (
        "worker 2's aggregator for iteration 2 (its commit 2): entry 'counts' has shape "
        "(1, 4), expected (4,); update_block must always return the layout of its first "
        "aggregator")
    assert sim.server.workers[2].commits == 0  # never handed to the policy


def test_theta_gone_infinite_keeps_the_last_finite_theta():
    sim = _sim("bsp", {"batch": "full"}, DivergingKMeans(at=4))
    fault = _fault(sim)
    assert fault.code == ExitCode.NUMERIC
    assert str(fault).startswith("θ after the update of iteration 4: entry 'centers' holds")
    assert sim.server.version == 3 and _finite(sim.server.theta)


def test_layout_problems_are_named():
    layout = Layout.of({"w": np.zeros(3), "n": np.zeros(2, dtype=np.int64), "objective": 0.0})
    ok = {"w": np.ones(3), "n": np.ones(2, dtype=np.int64), "objective": 1.5}
    assert layout_problem(ok, layout) is None
    assert "entry 'n' is missing" in layout_problem({"w": np.ones(3), "objective": 0.0},
                                                    layout)
    assert "entry 'extra' is not in the layout" in layout_problem({**ok, "extra": 1.0}, layout)
    assert "entry 'w' has shape (1, 3), expected (3,)" in layout_problem(
        {**ok, "w": np.ones((1, 3))}, layout)
    # A float where an integer is expected would be truncated on the wire.
    assert "entry 'n' has dtype float64, expected int64" in layout_problem(
        {**ok, "n": np.ones(2)}, layout)
    assert nonfinite_key(ok, layout.keys) is None
    assert nonfinite_key({**ok, "objective": float("nan")}, layout.keys) == "objective"


def test_a_silent_worker_ends_the_job_after_the_warnings(capsys):
    x, centres = blobs(n=600, seed=1)
    sim = Simulation("bsp", {"batch": "full", "block": 4096}, data=x,
                     theta0=kmeans_theta0(centres),
                     silent=[3], stall_warning_s=1.0, poll_s=1e-3, max_sim_s=10.0)
    sim.server.stall_timeout_s = 2.5
    fault = _fault(sim)
    assert fault.code == ExitCode.STALLED and fault.reason == StopReason.STALLED
    text = str(fault)
    assert text.startswith("worker 3 has not reported for 2.5 s")
    assert "runtime.stall_timeout_s: 2.5" in text and "computing its iteration 1" in text
    assert sim.now == pytest.approx(2.5, abs=2e-3)
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(warnings) == 2 and all("worker 3" in w for w in warnings)


def test_max_time_is_enforced_by_the_master_clock_mid_iteration():
    # One full-batch iteration: 10,000 points per worker at 20 µs = 0.2 s, in BSP blocks of
    # 4,096 points (82 ms).  The limit falls inside it: the master stops at 0.05 s by its own
    # clock, and the workers commit after the block they are on, not after their batch.
    x, centres = blobs(n=30_000, seed=1)
    sim = Simulation("bsp", {"batch": "full", "block": 4096}, data=x,
                     theta0=kmeans_theta0(centres),
                     cost_s=2e-5, poll_s=1e-3,
                     stop={"max_iterations": 100, "max_time_s": 0.05})
    sim.run()
    assert sim.server.reason == StopReason.MAX_TIME
    assert sim.server.train_s == pytest.approx(0.05, abs=2e-3)
    assert sim.now < 0.1 and sim.server.version == 0
