"""Interval adjustors on synthetic objective curves (FSP paper Section 3.3)."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.interval import Observation, make_adjustor
from flegel.interval.multistage import best_interval, eq7_gain


def _obs(eta, progress_rate, phi=0.01, eta_max=10.0):
    """One iteration of length eta whose progress per wall second is progress_rate(eta)."""
    wall = eta + phi
    return Observation(eta_s=eta, progress=progress_rate(eta) * wall, valid_s=eta,
                       wall_s=wall, barrier_s=phi, eta_max_s=eta_max)


def _drive(adj, rate, steps=60, eta0=1.0):
    plan = adj.start(eta0, 10.0)
    for _ in range(steps):
        plan = adj.observe(_obs(plan.eta_s, rate))
    return plan


def test_binary_halves_while_finer_pays_off_then_holds():
    # Progress per wall second is best at eta = 0.125 (peak of a concave curve in log eta).
    def rate(eta):
        return 1.0 - (np.log2(eta) - np.log2(0.125)) ** 2 / 50

    adj = make_adjustor("binary", factor=2.0)
    plan = _drive(adj, rate)
    assert plan.eta_s == pytest.approx(0.125)
    assert adj.state == "hold"
    # It tried 1/16 once, found it worse and went back.
    assert adj.history == pytest.approx([1.0, 0.5, 0.25, 0.125, 0.0625, 0.125])


def test_binary_stops_at_once_when_finer_does_not_pay():
    adj = make_adjustor("binary", factor=2.0)
    plan = _drive(adj, lambda eta: eta)  # coarser is always better
    assert plan.eta_s == pytest.approx(1.0)
    assert adj.history == pytest.approx([1.0, 0.5, 1.0])


def test_binary_never_below_eta_min():
    adj = make_adjustor("binary", factor=2.0, eta_min_s=0.1)
    plan = _drive(adj, lambda eta: 1.0 / eta)  # finer always better
    # 1 -> 0.5 -> 0.25 -> 0.125 -> 0.1 (clamped), and no finer.
    assert plan.eta_s == pytest.approx(0.1) and adj.state == "hold"


@pytest.mark.parametrize("a, b, phi", [(-2.0, 1.0, 0.01), (-0.5, 3.0, 0.05),
                                       (-10.0, 2.0, 0.002), (1.0, 0.5, 0.02)])
def test_best_interval_maximizes_eq7(a, b, phi):
    lo, hi = 1e-3, 2.0
    eta = best_interval(a, b, phi, lo, hi)
    grid = np.linspace(lo, hi, 200_001)
    brute = grid[np.argmax(eq7_gain(grid, a, b, phi))]
    assert eq7_gain(np.array([eta]), a, b, phi)[0] >= eq7_gain(np.array([brute]), a, b,
                                                                 phi)[0] - 1e-9
    assert eta == pytest.approx(brute, rel=1e-3, abs=1e-4)


def test_best_interval_none_without_progress():
    assert best_interval(-1.0, -0.5, 0.01, 1e-3, 1.0) is None


def test_multistage_probes_rolls_back_and_picks_eq7_maximizer():
    a, b, phi = -4.0, 2.0, 0.02   # g(eta) = a*eta + b per valid second

    def obs(eta):
        return Observation(eta_s=eta, progress=(a * eta + b) * eta, valid_s=eta,
                           wall_s=eta + phi, barrier_s=phi, eta_max_s=1.0)

    adj = make_adjustor("multistage", probe_s=0.2)
    plan = adj.start(0.5, 2.0)  # passes of 2 s: the 200 ms probe fits (at most 1/8 pass)
    assert plan.mark and plan.eta_s == pytest.approx(0.2) and plan.phase == "probe1"
    plan = adj.observe(obs(plan.eta_s))
    assert not plan.rollback and plan.eta_s == pytest.approx(0.2)
    plan = adj.observe(obs(plan.eta_s))
    assert plan.rollback and plan.eta_s == pytest.approx(0.4) and plan.phase == "probe2"
    plan = adj.observe(obs(plan.eta_s))
    plan = adj.observe(obs(plan.eta_s))
    expected = -phi + np.sqrt(phi * phi - b * phi / a)
    assert plan.phase == "run" and plan.eta_s == pytest.approx(expected, rel=1e-6)
    stage = adj.stages[-1]
    assert stage["a"] == pytest.approx(a) and stage["b"] == pytest.approx(b)


def test_multistage_opens_new_stage_when_behind_prediction():
    adj = make_adjustor("multistage", probe_s=0.1, min_stage_iterations=3)
    plan = adj.start(0.1, 1.0)
    for _ in range(4):  # probes: strong progress
        plan = adj.observe(Observation(plan.eta_s, 10 * plan.eta_s, plan.eta_s,
                                       plan.eta_s + 0.01, 0.01, 1.0))
    assert plan.phase == "run"
    for _ in range(20):  # progress collapses: a new stage must start with probes
        plan = adj.observe(Observation(plan.eta_s, 0.0, plan.eta_s, plan.eta_s + 0.01,
                                       0.01, 1.0))
        if plan.phase == "probe1":
            break
    assert plan.phase == "probe1" and plan.mark
    assert len(adj.stages) == 1 and "measured_rate" in adj.stages[0]


def test_fixed_holds():
    adj = make_adjustor("fixed")
    assert _drive(adj, lambda e: 1.0, eta0=0.3).eta_s == pytest.approx(0.3)


def test_multistage_probes_short_passes_at_an_eighth():
    adj = make_adjustor("multistage", probe_s=0.2)
    assert adj.start(0.01, 0.08).eta_s == pytest.approx(0.01)
