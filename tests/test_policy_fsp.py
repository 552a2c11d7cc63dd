"""FSP in-process (FSP paper Sections 3, 5.2): the real server, master policy, interval
adjustors and worker policy on a simulated clock (tests/fakes.py)."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.protocol import POLL_S, Instructions, Reason, Signal
from flegel.sync.fsp import OFFSET_BOUND
from tests.fakes import Simulation, counting, slow_then_fast

LAT = 50e-6


def broadcasts(sim: Simulation) -> dict[int, float]:
    """θ version -> server time it was broadcast (the iteration computing from it began)."""
    out: dict[int, float] = {}
    for p in sim.transport.params:
        if p.time > 0 and not p.stop:
            out.setdefault(p.version, p.time - sim.server.start)
    return out


@pytest.mark.parametrize("coordination", ["centralized", "semi"])
def test_fsp_fixed_barriers_every_eta_with_a_straggler(coordination):
    eta = 0.5e-3
    block = 0.1e-3
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": eta * 1e3, "eta_min_ms": 0.1,
                             "coordination": coordination},
                     slowdown={3: 4.0}, block_ms=block * 1e3, latency_s=LAT,
                     stop={"max_iterations": 30}).run()
    bars = sim.barrier_events()
    assert len(bars) == 30
    # Iteration 1 calibrates: it ends when the fast workers complete a pass.
    assert bars[0]["workers"]["reason"][:2] == ["pass", "pass"]
    timed = "signal" if coordination == "centralized" else "timer"
    sizes = [len(s) for s in sim.shards]
    for e in bars[1:]:
        assert e["eta_ms"] == pytest.approx(eta * 1e3)
        assert e["workers"]["reason"] == [timed] * 3
        pts = e["workers"]["points"]
        # The straggler's partial work reaches every barrier; nobody does a full pass.
        assert 0 < pts[2] < sizes[2] and max(pts) < min(sizes)
        # The fast workers did not wait for it: about 4x its points in the same interval.
        assert pts[0] >= 3 * pts[2] and pts[1] >= 3 * pts[2]
    times = [e["time_s"] for e in bars]
    gaps = np.diff(times[1:])
    # A barrier every η, plus at most a poll, one block and the messages (the straggler's
    # pass, 8 ms, is far away).
    assert gaps.min() >= eta - 1e-9
    assert gaps.max() <= eta + POLL_S + block + 4 * LAT, gaps
    for r in sim.ranks:
        its = sim.iterations(r)[2:]
        assert max(it.header["wait_s"] for it in its) < block + 4 * LAT
        sent = [p.instructions for p in sim.transport.params_to(r) if p.time > 0][1:]
        if coordination == "semi":
            assert {i.eta_s for i in sent[:-1]} == {eta}  # the worker times η itself
        else:
            assert {i.eta_s for i in sent} == {0.0}       # the master does
    pauses = sim.transport.signals_of(Signal.PAUSE)
    later = [s for s in pauses if s.version >= 1]
    if coordination == "centralized":
        start = broadcasts(sim)
        assert len(later) == 3 * 29  # one per worker per timed iteration
        for s in later:
            after = s.time - sim.server.start - start[s.version]
            assert eta <= after <= eta + POLL_S + 1e-12
    else:
        assert later == []  # semi-centralized: no signal at all after calibration


@pytest.mark.parametrize("coordination", ["centralized", "semi"])
def test_fsp_full_pass_triggers_early_barrier(coordination):
    """The fastest worker's full pass ends the iteration long before η = 100 s: a worker
    that cannot finish its own pass within PASS_GRACE times that pass (worker 3, 4x
    slower) is paused the moment the pass arrives; one that can (worker 2, 1.5x) finishes
    its pass."""
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 1e5, "coordination": coordination},
                     cost_s=[10e-6, 15e-6, 40e-6], latency_s=LAT,
                     stop={"max_iterations": 10}).run()
    bars = sim.barrier_events()
    assert len(bars) == 10
    arrivals = {(a.rank, int(a.header["version"])): a.time for a in sim.arrivals}
    pauses = sim.transport.signals_of(Signal.PAUSE)
    # The calibration is a whole pass: worker 3's pass, 4x the first, is within its bound.
    assert bars[0]["workers"]["reason"] == ["pass"] * 3
    # Iteration 2: worker 3's pass rests on one commit, no evidence yet (PASS_EVIDENCE):
    # it finishes its pass under its own timer (semi), or is paused at PASS_GRACE · t_p.
    assert bars[1]["workers"]["reason"] == (["pass"] * 3 if coordination == "semi"
                                            else ["pass", "pass", "signal"])
    for v, e in enumerate(bars[2:], start=2):
        assert e["workers"]["reason"] == ["pass", "pass", "signal"]
        sent = [s for s in pauses if s.version == v]
        assert [s.rank for s in sent] == [3]
        # Its pass is known: paused when worker 1's arrives.
        assert sent[0].time == arrivals[(1, v)]
    passes = [it.header["passes"] for it in sim.iterations(1)]
    assert passes == pytest.approx(list(range(1, 11)))
    # ~ one pass of worker 2 per barrier, and worker 3's 8 ms pass twice.
    assert sim.now < 2 * 8e-3 + 8 * (3e-3 + 0.5e-3)


def test_fsp_a_pass_waits_for_workers_that_can_finish_theirs():
    """Issue 19: workers of about the same speed all finish their pass (the first pass no
    longer pauses them at once, which made them commit a fraction of it: [200, 180, 166]
    points here before the fix), while a straggler is paused at once."""
    from flegel.sync.fsp import PASS_GRACE

    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 1e5, "coordination": "semi"},
                     cost_s=[10e-6, 11e-6, 12e-6, 100e-6], workers=4, points=800,
                     latency_s=LAT, stop={"max_iterations": 8}).run()
    bars = sim.barrier_events()
    # (From iteration 3: the straggler's pass rests on PASS_EVIDENCE commits.)
    for e in bars[2:]:
        assert e["workers"]["reason"] == ["pass", "pass", "pass", "signal"]
        assert e["workers"]["points"][:3] == [200, 200, 200]
        assert 0 < e["workers"]["points"][3] < 200
    # An iteration lasts about the slowest of the three passes, well within the grace.
    times = [e["time_s"] for e in bars]
    assert max(np.diff(times[2:])) < PASS_GRACE * 2e-3 + 1e-3


def _spread_run(coordination: str) -> Simulation:
    return Simulation("fsp", {"interval": "fixed", "eta_ms": 2, "coordination": coordination},
                      points=3000, block_ms=1.0, jitter=0.3,
                      stragglers=[{"pattern": "persistent", "factor": 4, "workers": [3]}],
                      latency_s=LAT, stop={"max_iterations": 60}).run()


def test_semi_centralized_narrows_spread():
    """Section 5.2: with worker 3 persistently 4x slower (it sleeps after each block, so it
    cannot answer during that sleep) and noisy block times, semi-centralized workers commit
    on their own timers η − δᵢ, cutting their last block to the deadline; the offsets δᵢ learn
    the straggler's late response.  Reports reach the master much closer together than under
    the centralized pause signal, which every worker answers after the block it is on.
    (Simulated with seeded noise, so the margin is deterministic; with blocks longer than η
    -- block_ms 3, η 2 ms -- the straggler's first block alone overruns its deadline and semi
    does not narrow the spread.)"""
    eta = 2e-3
    spread = {}
    for coordination in ("centralized", "semi"):
        sim = _spread_run(coordination)
        ev = sim.barrier_events()[10:]
        spread[coordination] = float(np.median([e["spread_s"] for e in ev]))
        if coordination == "semi":
            offsets = np.array([e["offsets_ms"] for e in ev]) / 1e3
            # δᵢ both ways (Section 5.2): bounded by OFFSET_BOUND·η either side.
            assert np.abs(offsets).max() <= OFFSET_BOUND * eta + 1e-12
            assert all(e["workers"]["reason"] == ["timer"] * 3 for e in ev)
            # The straggler learned the largest offset: it starts its last block earlier.
            last = sim.policy.offsets
            assert last[3] > 5 * max(last[1], last[2])
    assert spread["semi"] < 0.5 * spread["centralized"], spread


def test_fsp_suspended_straggler_answers_the_pause_promptly():
    """Injected suspension (τ per 1000 points): the suspended worker answers a pause
    within a 1 ms slice with the work done so far; barriers stay prompt."""
    eta, block = 1e-3, 0.1e-3
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 1, "coordination": "centralized"},
                     stragglers=[{"pattern": "injected", "tau_ms": 5, "every": 100,
                                  "workers": [3]}],
                     block_ms=block * 1e3, latency_s=LAT, stop={"max_iterations": 40}).run()
    bars = sim.barrier_events()[1:]
    assert max(e["spread_s"] for e in bars) <= 1e-3 + block + 2 * LAT
    assert sim.workers[3].slowed_s > 0.5 * sim.now
    assert sim.workers[1].slowed_s == 0
    assert sum(e["workers"]["points"][2] for e in bars) > 0
    gaps = np.diff([e["time_s"] for e in bars])
    assert gaps.max() <= eta + POLL_S + 1e-3 + block + 4 * LAT


def test_fsp_work_follows_the_current_speed():
    """No workload is pre-assigned: a worker slowed 4x for the first 20 ms contributes a
    quarter of the points while slow and as much as the others afterwards."""
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 1, "coordination": "centralized"},
                     slowdown={3: slow_then_fast(4.0, 0.02)}, block_ms=0.1, latency_s=LAT,
                     stop={"max_iterations": 40}).run()
    bars = sim.barrier_events()[1:]
    slow = [e["workers"]["points"] for e in bars if e["time_s"] < 0.018]
    fast = [e["workers"]["points"] for e in bars if e["time_s"] > 0.024]
    assert len(slow) >= 5 and len(fast) >= 5
    ratio_slow = np.mean([p[2] / p[0] for p in slow])
    ratio_fast = np.mean([p[2] / p[0] for p in fast])
    assert 0.15 < ratio_slow < 0.35
    assert 0.85 < ratio_fast < 1.15


def test_fsp_binary_search_adjusts_eta():
    sim = Simulation("fsp", {"interval": "binary", "coordination": "semi",
                             "eta_min_ms": 0.05},
                     points=1500, slowdown={3: 2.0}, latency_s=LAT,
                     stop={"max_iterations": 10}).run()
    adj = sim.policy.adjustor
    hist = adj.history
    assert len(set(hist)) >= 2
    # η⁰ is the calibration iteration's valid time (up to the fastest full pass: its
    # arrival); each trial halves it.
    first_pass = min(a.time for a in sim.arrivals if a.header["version"] == 0)
    assert hist[0] == pytest.approx(first_pass, rel=0.2)
    for a, b in zip(hist, hist[1:]):
        assert b == pytest.approx(a / 2) or b == pytest.approx(2 * a)  # trial or back
    # Every iteration after calibration ran with the η the adjustor chose, and the workers
    # were told that η.
    etas = [e["eta_ms"] / 1e3 for e in sim.barrier_events()[1:]]
    assert set(np.round(etas, 9)) <= set(np.round(hist, 9))
    sent = {round(p.instructions.eta_s, 9) for p in sim.transport.params
            if p.time > 0 and not p.stop and p.version >= 1}
    assert sent == set(np.round(etas, 9))
    # Trials run in runs of λ = 2 iterations, each at half the η before them.
    events = sim.barrier_events()
    trial = [i for i, e in enumerate(events) if e["phase"] == "trial"]
    assert trial and len(trial) % 2 == 0
    for i, j in zip(trial[::2], trial[1::2]):
        assert j == i + 1
        eta = events[i]["eta_ms"]
        assert events[j]["eta_ms"] == pytest.approx(eta)
        assert events[i - 1]["eta_ms"] == pytest.approx(2 * eta)


def test_fsp_multistage_paper_probes_mark_then_roll_back():
    sim = Simulation("fsp", {"interval": "multistage", "coordination": "centralized",
                             "probe_ms": 0.4, "eta_min_ms": 0.05, "probes": "rollback"},
                     points=1500, slowdown={3: 2.0}, latency_s=LAT, jitter=0.2,
                     stop={"max_iterations": 30}).run()
    params = [p for p in sim.transport.params if p.time > 0 and not p.stop]
    marks = [p for p in params if p.instructions.mark == 1]
    rollbacks = [p for p in params if p.instructions.rollback]
    assert marks and rollbacks
    v_mark, v_roll = marks[0].version, rollbacks[0].version
    assert sorted(p.rank for p in marks if p.version == v_mark) == sim.ranks
    # Two probe iterations with η_p, then every worker returns to the mark (and drops it).
    assert v_roll == v_mark + 2
    for p in rollbacks:
        assert p.instructions.mark == -1
    # The master rolled θ back: the θ sent with the roll-back is the θ sent with the mark.
    for r in sim.ranks:
        m = next(p for p in marks if p.rank == r and p.version == v_mark)
        b = next(p for p in rollbacks if p.rank == r and p.version == v_roll)
        assert m.theta is not None and b.theta is not None
        for k in m.theta:
            np.testing.assert_array_equal(m.theta[k], b.theta[k])
        # ... and every worker's shard went back to where the first probe began.
        it_m = next(it for it in sim.iterations(r) if it.version == v_mark)
        it_b = next(it for it in sim.iterations(r) if it.version == v_roll)
        assert it_m.instructions.mark == 1 and it_b.instructions.rollback
        assert it_b.start.same_as(it_m.start)
        # (The probe did move the shard on: the roll-back undid real work.)
        assert not sim.iterations(r)[sim.iterations(r).index(it_b) - 1].end.same_as(
            it_m.start)
    # The second probe runs 2η_p; then a stage with the fitted η.
    adj = sim.policy.adjustor
    assert adj.stages, "no stage was fitted"
    ev = {e["t"]: e for e in sim.barrier_events()}
    assert adj.stages[0]["eta_p_s"] == pytest.approx(0.4e-3)
    assert ev[v_mark + 1]["eta_ms"] == pytest.approx(adj.stages[0]["eta_p_s"] * 1e3)
    assert ev[v_roll + 1]["eta_ms"] == pytest.approx(2 * adj.stages[0]["eta_p_s"] * 1e3)
    assert adj.history and adj.history[0] == pytest.approx(adj.stages[0]["eta_s"])


# --------------------------------------------------------------------------- issue 19
def test_fsp_semi_worker_computes_its_interval_when_theta_arrives_late():
    """A worker whose θ reaches it well after the master sent it (here a 10 ms one-way
    latency, standing for a rank that waited for a core) still computes for its interval:
    the timer credits at most a poll's lag (MAX_LAG_CREDIT_S), so no commit is empty.
    Anchored at the send time (before issue 19's fix) every timer of η = 5 ms had expired
    on arrival and every commit carried 0 points."""
    from flegel.sync.fsp import MAX_LAG_CREDIT_S

    eta = 5e-3
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": eta * 1e3, "coordination": "semi"},
                     points=30_000, cost_s=1e-6, block_ms=0.5, latency_s=10e-3,
                     stop={"max_iterations": 12}).run()
    timed = [it for r in sim.ranks for it in sim.iterations(r)[1:]
             if it.header["reason"] == Reason.TIMER]
    assert timed, "no iteration ended on its timer"
    for it in timed:
        # Each computed for about its interval, less the credited lag (offsets are 0 here,
        # all workers alike).
        assert it.header["points"] * 1e-6 >= eta - MAX_LAG_CREDIT_S - 1e-3


def test_fsp_eta_max_is_the_fastest_pass_in_wall_time():
    """The longest useful η is the fastest worker's full pass in the time it took for its
    points (compute_s less injected sleeps), not in kernel time alone (``rate``): a pass
    whose kernel takes 1 ms but whose points took 4 ms allows η up to 4 ms."""
    sim = Simulation("fsp", {"interval": "multistage"}, stop={"max_iterations": 1})
    policy = sim.policy
    commits = {1: {"n_active": 1000.0, "points": 500.0, "compute_s": 2e-3, "slowed_s": 0.0,
                   "rate": 1e6},
               2: {"n_active": 1000.0, "points": 500.0, "compute_s": 9e-3, "slowed_s": 6e-3,
                   "rate": 1e6}}
    policy._update_eta_max(commits)
    assert policy.eta_max_s == pytest.approx(4e-3)  # worker 1: 2 ms for half its points
    # Worker 2's injected 6 ms do not count: 3 ms for half its points, a 6 ms pass.
    policy._update_eta_max({2: commits[2]})
    assert policy.eta_max_s == pytest.approx(6e-3)


def test_fsp_pass_prediction_counts_kernel_time_and_injected_delays_not_waits_for_a_core():
    """The pass a worker is predicted to take (who may finish within the grace after the
    first pass) is its fastest recent kernel time per point plus its injected delays per
    point: a worker whose iteration, or kernel, took 10x its time because it waited for a
    core is not a straggler (it would be paused at once, commit nothing, and never measure
    itself again); one whose blocks were suspended is."""
    sim = Simulation("fsp", {"interval": "multistage"}, stop={"max_iterations": 1})
    policy = sim.policy
    policy.passes.observe({
        1: {"n_active": 1000.0, "points": 500.0, "compute_s": 10e-3, "slowed_s": 0.0,
            "rate": 5e5},     # 1 ms of kernel for 500 points, 10 ms of wall time
        2: {"n_active": 1000.0, "points": 100.0, "compute_s": 40e-3, "slowed_s": 39.8e-3,
            "rate": 5e5},     # suspended 39.8 ms
        3: {"n_active": 1000.0, "points": 0.0, "compute_s": 1e-4, "slowed_s": 0.0,
            "rate": 0.0}})    # paused before its first block: nothing learnt
    assert policy.passes.pass_s[1] == pytest.approx(2e-3)
    assert policy.passes.pass_s[2] == pytest.approx(2e-3 + 0.398)
    assert 3 not in policy.passes.pass_s
    # Next iteration worker 1's kernel waited for a core (10x its time): the fastest of its
    # recent kernel times stands.  Worker 2 processed 400 points and served no suspension
    # (what was left of one came in the last iteration): its delays count over both.
    policy.passes.observe({
        1: {"n_active": 1000.0, "points": 500.0, "compute_s": 10e-3, "slowed_s": 0.0,
            "rate": 5e4},
        2: {"n_active": 1000.0, "points": 400.0, "compute_s": 1e-3, "slowed_s": 0.0,
            "rate": 5e5},
        3: {"n_active": 1000.0, "points": 0.0, "compute_s": 3e-2, "slowed_s": 3e-2,
            "rate": 0.0}})    # suspended the whole iteration: nothing of its kernel yet
    assert policy.passes.pass_s[1] == pytest.approx(2e-3)
    assert policy.passes.pass_s[2] == pytest.approx(2e-3 + 1000 * 39.8e-3 / 500)
    assert 3 not in policy.passes.pass_s
    # A commit of nothing, without a suspension (paused before it ran): forgotten.
    policy.passes.observe({1: {"n_active": 1000.0, "points": 0.0, "compute_s": 1e-4,
                               "slowed_s": 0.0, "rate": 0.0}})
    assert 1 not in policy.passes.pass_s


def predict(policy, passes: dict[int, float]) -> None:
    """Give the policy's pass predictor these passes, each on PASS_EVIDENCE commits."""
    from flegel.sync.fsp import PASS_EVIDENCE

    for r in passes:
        policy.passes.forget(r)
    for _ in range(PASS_EVIDENCE):
        policy.passes.observe({r: {"n_active": 1000.0, "points": 1000.0, "rate": 1000.0 / p,
                                   "slowed_s": 0.0} for r, p in passes.items()})
    assert policy.passes.pass_s == pytest.approx(passes)


@pytest.mark.parametrize("coordination", ["semi", "centralized"])
def test_fsp_after_a_pass_the_master_pauses_only_stragglers_when_timers_run(coordination):
    """Issue 19: after the first full pass (t_p = 2 ms after the broadcast) the master
    pauses at once only a worker whose own pass is beyond PASS_GRACE · t_p (a straggler).
    Semi-centralized with η, the others' own timers end their iterations -- a worker whose
    θ arrived late, having not yet run, is not paused before it starts (it committed 0
    points when the master paused everyone at PASS_GRACE · t_p after the broadcast);
    centralized, the master pauses them at min(PASS_GRACE · t_p, η)."""
    from flegel.interval import Plan
    from flegel.sync.fsp import PASS_GRACE

    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 5, "coordination": coordination},
                     stop={"max_iterations": 1})
    policy = sim.policy
    policy.pending = {}
    policy.signalled, policy.pause_at, policy.paused = False, None, set()
    policy.plan = Plan(5e-3)
    now = sim.server.now()
    policy.iter_start = now - 2e-3
    predict(policy, {1: 2e-3, 2: 2.5e-3, 3: 0.9})   # worker 3: a straggler's 0.9 s pass
    before = len(sim.transport.signals_of(Signal.PAUSE))
    policy._on_pass(1)
    sent = sim.transport.signals_of(Signal.PAUSE)[before:]
    assert [s.rank for s in sent] == [3]
    if coordination == "semi":
        # Predictions inflated alike (a loaded machine: 3x their kernel time) and a pass
        # that came in at its kernel time: no peer is taken for a straggler.
        policy.pending, policy.signalled, policy.pause_at = {}, False, None
        policy.paused = set()
        policy.iter_start = now - 0.7e-3
        predict(policy, {1: 2.1e-3, 2: 3e-3, 3: 0.9})
        policy._on_pass(1)
        assert [s.rank for s in sim.transport.signals_of(Signal.PAUSE)[before + 1:]] == [3]
        before += 1
    if coordination == "semi":
        assert policy.pause_at == float("inf")
        policy.on_tick(now + 1.0)
        assert len(sim.transport.signals_of(Signal.PAUSE)) == before + 1
    else:
        assert policy.pause_at == pytest.approx(policy.iter_start + min(PASS_GRACE * 2e-3,
                                                                        5e-3))
        policy.on_tick(policy.pause_at - 1e-6)
        assert len(sim.transport.signals_of(Signal.PAUSE)) == before + 1
        policy.on_tick(policy.pause_at)
        assert [s.rank for s in sim.transport.signals_of(Signal.PAUSE)[before:]] == [3, 2]


@pytest.mark.parametrize("slowed_block, left", [(3, 1), (2, 2)])
def test_fsp_a_timer_does_not_cut_the_last_block_of_a_pass(slowed_block, left):
    """Issue 19: a worker whose timer expires with at most one block of its pass left
    finishes the pass (where ranks share cores: a worker that waited for a core past its
    deadline).  Passes of 4 blocks of 50 points (2 ms), η = 3 ms; worker 2's block of an
    iteration starting at 19 ms takes 10x its time (5 ms): slowed in its 3rd block, it is
    past its deadline with its last block left and commits the whole pass (before the fix:
    150 of 200 points on its timer); slowed in its 2nd, two blocks are left and its timer
    ends the iteration."""
    at = 0.019 + 0.5e-3 * (slowed_block - 1)
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": 3, "coordination": "semi"},
                     cost_s=10e-6, block_points=50, latency_s=LAT,
                     slowdown={2: lambda t: 10.0 if at <= t < at + 0.3e-3 else 1.0},
                     stop={"max_iterations": 20}).run()
    (late,) = [it for it in sim.iterations(2) if it.ended - it.began > 4e-3]
    if left == 1:
        assert late.reason == Reason.PASS and late.header["points"] == 200
    else:
        assert late.reason == Reason.TIMER and late.header["points"] == 100
    assert all(it.reason == Reason.PASS and it.header["points"] == 200
               for r in sim.ranks for it in sim.iterations(r) if it is not late)


#: K-means that records each kernel call's block size (all workers together).
_CountingKMeans = counting(KMeans)


@pytest.mark.parametrize("eta_ms, one_block", [(8.0, True), (1.5, False)])
def test_fsp_a_worker_on_course_takes_its_pass_in_fewer_blocks(eta_ms, one_block):
    """Issue 19 (FSPWorker, "Blocks on course"): with a timer of 4 passes (a barrier per
    pass) a worker whose rest of the pass fits COURSE_MARGIN times before its timer takes
    blocks of BLOCK_GROWTH times the sizer's 1 ms: its 2 ms pass of 200 points in one block,
    as BSPV takes it, where the sizer's blocks of about 100 points cut it in two (before the
    change).  With a timer shorter than the pass it may be cut, and keeps the sizer's
    blocks."""
    algo = _CountingKMeans(n_clusters=4)
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": eta_ms, "coordination": "semi"},
                     algorithm=algo, cost_s=10e-6, block_ms=1.0, latency_s=LAT,
                     stop={"max_iterations": 12})
    sim.run()
    later = algo.calls[-3 * 6:]  # the kernel calls of (at least) the last few iterations
    if one_block:
        assert all(e["workers"]["reason"] == ["pass"] * 3 for e in sim.barrier_events())
        assert set(later) == {200}
    else:
        assert max(later) <= 1.2 * 100  # the sizer's 1 ms block (dithered by 10%)


class _Clock:
    """A worker port on a hand-set clock: what FSPWorker's timer rules read."""

    def __init__(self, per_point_s: float) -> None:
        self.t = 0.0
        self.per_point_s = per_point_s
        self.slowed_point_s = per_point_s

    def now(self) -> float:
        return self.t


class _Shard:
    n_active = 2000


@pytest.mark.parametrize("eta_ms, cut", [(14.0, False), (3.0, True)])
def test_fsp_a_worker_that_got_no_core_until_past_its_timer_finishes_a_short_pass(eta_ms, cut):
    """Issue 19 (FSPWorker, "A late pass is finished"): a worker whose whole interval went by
    before it ran (no core: its first block comes after its deadline) used to commit on its
    timer after a block limited to the time left, 1 point ([1, 2000, 1, 1] at a load of 11).
    At a barrier per pass (η = 14 ms, over 4 passes of 2,000 points at 1.5 µs: off the
    boundary) its pass, 3 ms, is at most LATE_PASS_SHARE of η: it finishes the pass.  With η
    under a pass (probes) the timer cuts as before."""
    from flegel.sync.fsp import FSPWorker

    worker = FSPWorker({"coordination": "semi"})
    worker.shard = _Shard()
    port = _Clock(per_point_s=1.5e-6)
    worker.begin(port, Instructions(eta_s=eta_ms / 1e3), 0.0)
    port.t = 2 * eta_ms / 1e3  # it runs only now, past its deadline, nothing done yet
    worker.block_size(port, 400)
    reason, limit = worker.commit_reason(port, 0), worker.block_limit(port, 0)
    if cut:
        assert reason == Reason.TIMER and limit == 1
    else:
        assert reason is None and limit is None
        # ... for the whole iteration: half-way through its pass the timer still leaves it
        # be (the loop's pass rule ends the iteration).
        assert worker.commit_reason(port, 1000) is None
        # ... but a worker slowed after the decision is cut an interval past it (hard cap).
        port.t = 3.5 * eta_ms / 1e3
        assert worker.commit_reason(port, 1000) == Reason.TIMER


@pytest.mark.parametrize("straggler", [
    {"pattern": "persistent", "factor": 20, "workers": [4]},
    {"pattern": "injected", "tau_ms": 2, "every": 1, "workers": [4]},
])
def test_fsp_a_slowed_worker_is_neither_a_late_pass_nor_on_course(straggler):
    """Review of issue 19: the late-pass rule and the blocks on course judge a worker by its
    per-point cost *with* its straggler delays (the block sizer's ``per_point_s``).  At η of
    about 4 passes (8 ms; 150 points at 10 µs) worker 4, slowed 20x (or 2 ms after each
    block), looked as fast as its peers on its kernel time alone: its timer never cut its
    pass and it took 4x blocks, so a barrier waited 30 ms for it (before the fix).  Now its
    commits end by its timer or the master's signal and no barrier interval exceeds η by
    more than a block of its and the messages."""
    eta = 8e-3
    sim = Simulation("fsp", {"interval": "fixed", "eta_ms": eta * 1e3, "coordination": "semi"},
                     workers=4, cost_s=10e-6, block_ms=1.0, latency_s=LAT,
                     stragglers=[straggler], stop={"max_iterations": 40}).run()
    bars = sim.barrier_events()
    assert len(bars) == 40
    times = [0.0] + [e["time_s"] for e in bars]
    # The calibration waits for the fast workers' pass; later barriers come every η at most.
    assert max(np.diff(times[1:])) <= eta + POLL_S + 3e-3, np.diff(times)
    assert all(it.reason in (Reason.TIMER, Reason.SIGNAL) for it in sim.iterations(4)[1:])
