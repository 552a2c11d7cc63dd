"""Interval adjustors on synthetic objective curves (FSP paper Section 3.3), and the
semi-centralized offsets η ± δᵢ (Section 5.2)."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.interval import Observation, make_adjustor
from flegel.interval.multistage import (
    PROBE_PASS_FRACTION,
    STAGE_CONFIRM,
    STAGE_WINDOW,
    TRUST_FACTOR,
    best_interval,
    eq7_gain,
)
from flegel.sync.fsp import OFFSET_BOUND
from flegel.sync.offsets import center_offsets


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

    adj = make_adjustor("multistage", probe_s=0.2, probes="rollback")
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
    adj = make_adjustor("multistage", probe_s=0.1, window=3, probes="rollback")
    plan = adj.start(0.1, 1.0)
    for _ in range(4 + 6):  # probes, then two windows of the stage: strong progress
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
    assert adj.refits == 1 and adj.summary()["stage_refits"] == 1


def test_fixed_holds():
    adj = make_adjustor("fixed")
    assert _drive(adj, lambda e: 1.0, eta0=0.3).eta_s == pytest.approx(0.3)


def test_multistage_probes_short_passes_at_an_eighth():
    assert PROBE_PASS_FRACTION == pytest.approx(1 / 8)
    adj = make_adjustor("multistage", probe_s=0.2, probes="rollback")
    assert adj.start(0.01, 0.08).eta_s == pytest.approx(0.01)
    # Passes longer than 8 η_p: the paper's 200 ms.
    adj = make_adjustor("multistage", probe_s=0.2, probes="rollback")
    assert adj.start(0.01, 4.0).eta_s == pytest.approx(0.2)


# --------------------------------------------------------------------------- FSPB, decaying
def _decaying(eta_star, phi=0.01, tau=float("inf"), noise=0.0, seed=0):
    """A progress model with a known optimal interval, whose progress decays over time.

    Per valid second, progress is ``g(η) = 1 − η/η_z`` (finer barriers give fresher θ); an
    iteration of η costs η + φ of wall time, so progress per wall second is
    ``g(η)·η/(η + φ)``, maximal at ``η* = −φ + sqrt(φ² + φ·η_z)`` (Eq. 7) -- η_z is chosen to
    put η* at ``eta_star``.  Everything decays as ``exp(−t/τ)`` (training slows down as it
    converges, the paper's reason why Δf and Δf' are not comparable), with multiplicative
    noise.  Returns ``observe(eta) -> Observation``.
    """
    eta_z = ((eta_star + phi) ** 2 - phi ** 2) / phi
    rng = np.random.default_rng(seed)
    clock = [0.0]

    def observe(eta):
        wall = eta + phi
        rate = (1 - eta / eta_z) * eta / (eta + phi)
        decay = np.exp(-(clock[0] + wall / 2) / tau)
        clock[0] += wall
        progress = rate * wall * decay * (1 + noise * rng.standard_normal())
        return Observation(eta_s=eta, progress=progress, valid_s=eta, wall_s=wall,
                           barrier_s=phi, eta_max_s=10.0)

    return observe


@pytest.mark.parametrize("eta_star", [0.03, 0.06, 0.13, 0.3])
@pytest.mark.parametrize("tau", [float("inf"), 5.0, 1.0])
def test_binary_settles_within_lambda_of_the_optimum_while_progress_decays(eta_star, tau):
    """FSPB keeps halving while η/λ's progress per unit time beats η's, then holds, even
    though progress decays over time (τ = 1 s is a few rounds of the search): each trial
    is bracketed by two iterations of η (Section 3.3)."""
    observe = _decaying(eta_star, tau=tau)
    adj = make_adjustor("binary", factor=2.0)
    plan = adj.start(1.0, 10.0)
    for _ in range(100):
        plan = adj.observe(observe(plan.eta_s))
    assert adj.state == "hold"
    assert eta_star / 2 <= plan.eta_s <= eta_star * 2, adj.history
    # It halved at every round until a trial lost, then went back one step and held.
    rounds = adj.summary()["search_rounds"]
    assert [r["finer_wins"] for r in rounds] == [True] * (len(rounds) - 1) + [False]
    assert adj.history[-1] == pytest.approx(adj.history[-3])
    assert len(rounds) >= 3


@pytest.mark.parametrize("seed", range(5))
def test_binary_with_noise_settles_within_lambda(seed):
    observe = _decaying(0.1, tau=2.0, noise=0.02, seed=seed)
    adj = make_adjustor("binary", factor=2.0)
    plan = adj.start(1.0, 10.0)
    for _ in range(100):
        plan = adj.observe(observe(plan.eta_s))
    assert adj.state == "hold" and 0.05 <= plan.eta_s <= 0.2, adj.history


def test_binary_round_brackets_the_trial():
    """One round: η, λ iterations of η/λ, η again; a win starts the next round at η/λ."""
    observe = _decaying(0.1)
    adj = make_adjustor("binary", factor=2.0)
    plan = adj.start(1.0, 10.0)
    seen = [(plan.phase, plan.eta_s)]
    for _ in range(8):
        plan = adj.observe(observe(plan.eta_s))
        seen.append((plan.phase, plan.eta_s))
    assert seen == [("base", 1.0), ("trial", 0.5), ("trial", 0.5), ("base", 1.0),
                    ("base", 0.5), ("trial", 0.25), ("trial", 0.25), ("base", 0.5),
                    ("base", 0.25)]


# --------------------------------------------------------------------------- FSPV stages
def _stage_run(noise, seed, steps, drop_at=None, drop=0.2):
    """FSPV on g(η) = 2 − 1.5η per valid second (positive on the whole range), with
    multiplicative noise per iteration; from iteration ``drop_at`` progress is ``drop``
    times as large (a real change of rate)."""
    rng = np.random.default_rng(seed)
    phi = 0.02
    adj = make_adjustor("multistage", probe_s=0.05)
    plan = adj.start(0.5, 1.0)
    first = None
    for k in range(steps):
        eta = plan.eta_s
        scale = drop if drop_at is not None and k >= drop_at else 1.0
        progress = scale * (2 - 1.5 * eta) * eta * (1 + noise * rng.standard_normal())
        plan = adj.observe(Observation(eta, progress, eta, eta + phi, phi, 1.0))
        if adj.refits and first is None:
            first = k
    return adj, first


@pytest.mark.parametrize("noise", [0.3, 1.0, 3.0])
@pytest.mark.parametrize("seed", range(3))
def test_multistage_stationary_noisy_rate_never_opens_a_stage(noise, seed):
    """Per-iteration noise up to three times the rate, 2000 iterations: one stage."""
    adj, _ = _stage_run(noise, seed, 2000)
    assert adj.refits == 0 and len(adj.stages) == 1
    assert adj.summary()["stage_refits"] == 0


@pytest.mark.parametrize("noise", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("seed", range(3))
def test_multistage_real_change_of_rate_opens_a_stage(noise, seed):
    """The rate drops to a fifth at iteration 300: a new stage within a few windows."""
    adj, first = _stage_run(noise, seed, 500, drop_at=300)
    assert adj.refits >= 1 and first is not None
    assert 300 <= first < 300 + (STAGE_CONFIRM + 2) * STAGE_WINDOW
    stage = adj.stages[0]
    assert stage["left_at_rate"] < 0.5 * stage["measured_rate"]
    assert adj.stages[1]["refit"] and not stage["refit"]


def test_multistage_one_bad_iteration_does_not_open_a_stage():
    adj, _ = _stage_run(0.1, 0, 100)
    plan = adj.observe(Observation(adj.eta_s, -50.0, adj.eta_s, adj.eta_s + 0.02, 0.02, 1.0))
    rng = np.random.default_rng(1)
    for _ in range(200):
        eta = plan.eta_s
        progress = (2 - 1.5 * eta) * eta * (1 + 0.1 * rng.standard_normal())
        plan = adj.observe(Observation(eta, progress, eta, eta + 0.02, 0.02, 1.0))
    assert adj.refits == 0


# --------------------------------------------------------------------------- δᵢ (Section 5.2)
def test_center_offsets_mean_zero_bounded_order_kept():
    bound = 0.25
    offsets = center_offsets({1: 0.1, 2: 0.1, 3: 0.1, 4: 2.0}, bound)
    values = np.array(list(offsets.values()))
    assert values.sum() == pytest.approx(0.0, abs=1e-12)
    assert np.all(np.abs(values) <= bound + 1e-15)
    # The late responder keeps the largest offset (shortest interval); the early ones get
    # a longer interval than η.
    assert offsets[4] == pytest.approx(bound)
    assert all(offsets[r] == pytest.approx(-bound / 3) for r in (1, 2, 3))
    # Inside the bound it is a plain shift to mean 0.
    inner = center_offsets({1: 0.0, 2: 0.02, 3: 0.04}, bound)
    assert [inner[r] for r in (1, 2, 3)] == pytest.approx([-0.02, 0.0, 0.02])
    assert center_offsets({1: 0.3}, 0.0) == {1: 0.0}


def test_semi_offsets_are_signed_both_ways_in_process():
    """Section 5.2's η ± δᵢ on the simulated clock: with worker 3 persistently 4x slower,
    it learns a positive offset (a shorter interval, its report arrives late otherwise) and
    the fast workers negative ones (a longer interval); the offsets average 0 at every
    barrier and stay within ±OFFSET_BOUND·η; the workers were told them."""
    from tests.fakes import Simulation

    eta = 2e-3
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 2, "coordination": "semi"},
                     points=3000, block_ms=1.0, jitter=0.3,
                     stragglers=[{"pattern": "persistent", "factor": 4, "workers": [3]}],
                     latency_s=50e-6, stop={"max_iterations": 60}).run()
    ev = sim.barrier_events()[10:]
    offsets = np.array([e["offsets_ms"] for e in ev]) / 1e3
    assert np.abs(offsets).max() <= OFFSET_BOUND * eta + 1e-9
    assert np.abs(offsets.mean(axis=1)).max() <= 1e-6
    last = sim.policy.offsets
    assert last[3] > 0 > max(last[1], last[2])
    sent = [p.instructions.offset_s for p in sim.transport.params
            if p.rank == 1 and p.time > 0 and not p.stop]
    assert min(sent) < 0  # a fast worker was told to compute longer than η


# --------------------------------------------------------------------------- FSPV, interleaved
def test_multistage_interleaved_probes_abba_without_rollback_and_fit_eq7():
    """Interleaved probes (issue 19): η/√2 and √2·η around the first interval, in the order
    η₁ η₁ η₂ η₂ η₂ η₂ η₁ η₁, no mark, no roll-back; on an exactly linear g the fit finds
    Eq. 7's optimum."""
    observe = _decaying(0.06, phi=0.01)
    adj = make_adjustor("multistage")
    plan = adj.start(0.05, 10.0)
    seen = []
    for _ in range(8):
        assert plan.phase == "probe" and not plan.mark and not plan.rollback
        seen.append(plan.eta_s)
        plan = adj.observe(observe(plan.eta_s))
    lo, hi = 0.05 / np.sqrt(2), 0.05 * np.sqrt(2)
    assert seen == pytest.approx([lo, lo, hi, hi, hi, hi, lo, lo])
    assert plan.phase == "run" and plan.eta_s == pytest.approx(0.06, rel=1e-6)


def test_multistage_interleaved_never_below_phi_and_within_trust():
    """η* below the barrier cost φ is not taken (φ is the floor), and η* is kept within
    TRUST_FACTOR of the probes."""
    adj = make_adjustor("multistage")
    observe = _decaying(0.008, phi=0.01)  # the model's optimum is below φ
    plan = adj.start(0.02, 10.0)
    for _ in range(8):
        plan = adj.observe(observe(plan.eta_s))
    assert plan.eta_s == pytest.approx(0.01)
    adj = make_adjustor("multistage")
    observe = _decaying(1.0, phi=0.01)  # far above the probes
    plan = adj.start(0.02, 10.0)
    for _ in range(8):
        plan = adj.observe(observe(plan.eta_s))
    assert plan.eta_s == pytest.approx(0.02 * np.sqrt(2) * TRUST_FACTOR)


@pytest.mark.parametrize("tau", [1.0, 0.3, 0.1])
def test_multistage_interleaved_probes_see_through_a_fast_decay(tau):
    """Progress decaying as e^(−t/τ) over the probes (right after the calibration pass,
    issue 19) does not pass for "shorter intervals train faster": the per-iteration rates
    are fitted with a shared decay and compared at one time, so η* is Eq. 7's optimum
    (0.06 s).  Pooling each slot's iterations (before issue 19) read the first run of η₁,
    taken while progress was fastest, as η₁'s advantage: η* 0.055, 0.035 and 0.021 s, the
    last near the barrier cost φ = 0.01 s."""
    observe = _decaying(0.06, phi=0.01, tau=tau)
    adj = make_adjustor("multistage")
    plan = adj.start(0.05, 10.0)
    for _ in range(8):
        plan = adj.observe(observe(plan.eta_s))
    assert plan.phase == "run" and plan.eta_s == pytest.approx(0.06, rel=0.02)


def test_multistage_interleaved_pools_when_a_probe_made_no_progress():
    """Near convergence a probe iteration may show no progress (or a rise of the online
    objective): no logarithm then, each slot's iterations are pooled."""
    adj = make_adjustor("multistage")
    plan = adj.start(0.05, 10.0)
    progress = iter([1.0, -0.5, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0])
    for _ in range(8):
        eta = plan.eta_s
        plan = adj.observe(Observation(eta, next(progress), eta, eta + 0.01, 0.01, 10.0))
    lo, hi = 0.05 / np.sqrt(2), 0.05 * np.sqrt(2)
    assert adj.g == pytest.approx([2.5 / (4 * lo), 8.0 / (4 * hi)])


def test_multistage_an_optimum_at_the_pass_is_a_barrier_per_pass():
    """When Eq. 7's optimum lies at or past the fastest worker's pass (here: progress per
    valid second does not fall with η), FSPV sets η to PASS_REACH passes, so the pass --
    not a timer racing it -- calls each barrier; probes past the pass are fitted as the
    pass they ran for.  Before issue 19 η was clamped to the measured pass itself."""
    from flegel.interval.multistage import PASS_REACH

    pass_s, phi = 0.02, 0.005

    def obs(eta):
        ran = min(eta, pass_s)  # the pass calls the barrier
        return Observation(eta_s=eta, progress=3.0 * ran, valid_s=ran, wall_s=ran + phi,
                           barrier_s=phi, eta_max_s=pass_s)

    adj = make_adjustor("multistage")
    plan = adj.start(0.018, pass_s)  # BSPV's interval, just short of a pass: probes
    seen = []
    for _ in range(8):
        seen.append(plan.eta_s)
        plan = adj.observe(obs(plan.eta_s))
    assert max(seen) == pytest.approx(0.018 * np.sqrt(2))  # past the pass
    assert min(seen) == pytest.approx(0.018 / np.sqrt(2))
    assert plan.phase == "run" and plan.eta_s == pytest.approx(PASS_REACH * pass_s)


def test_multistage_starts_at_a_barrier_per_pass_without_probes_where_bspv_takes_the_shard():
    """Issue 19: when BSPV's interval (η⁰) is already a pass or more -- BSPV's batch is
    then the whole shard -- FSPV starts at a barrier per pass and probes nothing; the stage
    is judged as any other, and one that falls behind its line opens a probing stage.
    Before, eight probe iterations around the pass came first."""
    from flegel.interval.multistage import PASS_REACH

    pass_s, phi = 0.002, 0.005
    adj = make_adjustor("multistage")
    plan = adj.start(0.01, pass_s)
    assert plan.phase == "run" and plan.eta_s == pytest.approx(PASS_REACH * pass_s)
    assert adj.stages == [pytest.approx(adj.stages[0])] and adj.stages[0]["probed"] is False
    assert adj.history == [pytest.approx(PASS_REACH * pass_s)]
    rate = 100.0
    for _ in range(4 * adj.window):  # on its line: it stays
        plan = adj.observe(Observation(plan.eta_s, rate * (pass_s + phi), pass_s,
                                       pass_s + phi, phi, pass_s))
        assert plan.phase == "run"
    for _ in range(4 * adj.window):  # progress drops to a tenth: a new stage probes
        plan = adj.observe(Observation(plan.eta_s, rate / 10 * (pass_s + phi), pass_s,
                                       pass_s + phi, phi, pass_s))
        if plan.phase == "probe":
            break
    assert plan.phase == "probe" and adj.refits == 1


def test_multistage_fit_imports_nothing_while_workers_wait():
    """Issue 19: the first fit ran ``np.median``, whose first call imports ``numpy.ma``
    (27-43 ms of the master's time at a load of 5-8, while every worker waited for θ).  In
    a fresh interpreter a whole probing stage and its fit leave ``numpy.ma`` unimported."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from flegel.interval import Observation, make_adjustor\n"
        "adj = make_adjustor('multistage')\n"
        "plan = adj.start(0.005, 1.0)\n"
        "for i in range(8):\n"
        "    e = plan.eta_s\n"
        "    plan = adj.observe(Observation(e, 10.0 * e / (1 + i), e, e + 0.002, 0.002, 1.0))\n"
        "assert plan.phase == 'run', plan\n"
        "print('numpy.ma' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "False"
