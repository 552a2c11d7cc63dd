"""FSP data migration, the pure parts: balance monitor (Eq. 8) and planner (Eq. 9), §4.2.

Units: n in points, v in seconds per point, p in passes, T in seconds.  The hand-worked
cases use t = T/d and, for a pair ⟨i behind, j ahead⟩, Eq. 9 in its solved form
x* = (C·Nᵢ − t·Nⱼ)/(t·β + C), C = Vᵢ((Pⱼ − Pᵢ)Nⱼ + t/Vⱼ), β = |𝕎ᵢ|/|𝕎ⱼ|.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from flegel.balance import (
    DEFAULT_EPSILON,
    DEFAULT_ROUNDS,
    Move,
    SuperWorker,
    Tolerance,
    WorkerStat,
    advance,
    cycle_finished,
    eq9_delta,
    fallback_delta,
    group,
    imbalanced,
    needs_migration,
    pair,
    pair_delta,
    pass_time,
    plan_round,
    predicted_passes,
    progress_rate,
    remaining_time,
)


def sw(ranks: tuple[int, ...] | int, n: float, v: float, p: float) -> SuperWorker:
    ranks = (ranks,) if isinstance(ranks, int) else ranks
    return SuperWorker(ranks, n, v, p)


def lhs9(i: SuperWorker, j: SuperWorker, t: float, x: float) -> float:
    """Eq. 9, left side, as printed."""
    return i.p + t / ((i.n - x) * i.v)


def rhs9(i: SuperWorker, j: SuperWorker, t: float, x: float) -> float:
    """Eq. 9, right side, as printed."""
    beta = i.size / j.size
    return j.p + (t - (j.p - i.p) * beta * x * j.v) / ((j.n + beta * x) * j.v)


# -- Eq. 9, worked by hand -----------------------------------------------------------------


def test_eq9_equal_passes_different_speeds() -> None:
    # N = 1000 each, Vᵢ = 3 s/pt (slow), Vⱼ = 1 s/pt, P = 0 both, T = 6000 s, d = 1: t = 6000.
    # P̃ᵢ = 0 + 6000/(3·1000) = 2, P̃ⱼ = 0 + 6000/(1·1000) = 6 -> i behind (source).
    # C = 3·(0·1000 + 6000/1) = 18000; x* = (18000·1000 − 6000·1000)/(6000·1 + 18000)
    #   = 12,000,000/24,000 = 500.
    # Check: i keeps 500 pts: 6000/(500·3) = 4 passes; j holds 1500: 6000/(1500·1) = 4.
    i, j = sw(0, 1000, 3.0, 0.0), sw(1, 1000, 1.0, 0.0)
    assert predicted_passes(i, 6000.0, 1) == 2.0
    assert predicted_passes(j, 6000.0, 1) == 6.0
    assert eq9_delta(i, j, 6000.0, 1) == pytest.approx(500.0)
    assert pair_delta(i, j, 6000.0, 1) == (pytest.approx(500.0), False)
    assert lhs9(i, j, 6000.0, 500.0) == pytest.approx(4.0)
    assert rhs9(i, j, 6000.0, 500.0) == pytest.approx(4.0)
    # Integer 500 (or 499 if the float lands just below: floor never overshoots).
    (m,) = plan_round([i, j], 6000.0, 1)
    assert (m.source, m.target) == (0, 1) and m.points in (499, 500)


def test_eq9_with_pass_gap_and_beta() -> None:
    # 𝕎ᵢ = 2 workers {0, 1}: N = 100, V = 1, P = 0.  𝕎ⱼ = 1 worker {2}: N = 100, V = 1, P = 1.
    # β = 2/1 = 2.  T = 400, d = 4: t = 100.
    # P̃ᵢ = 0 + 100/100 = 1, P̃ⱼ = 1 + 100/100 = 2 -> i behind.
    # C = 1·((1 − 0)·100 + 100/1) = 200; x* = (200·100 − 100·100)/(100·2 + 200) = 10000/400 = 25.
    # Left: 0 + 100/(75·1) = 4/3.  Right: 1 + (100 − 1·2·25·1)/((100 + 50)·1) = 1 + 50/150 = 4/3.
    # Compensation left: 100 − 1·2·25·1 = 50 ≥ 0 -> Eq. 9 holds (no fallback).
    # Each source sends 25, the single target receives β·25 = 50.
    i, j = sw((0, 1), 100, 1.0, 0.0), sw(2, 100, 1.0, 1.0)
    x, fell_back = pair_delta(i, j, 400.0, 4)
    assert x == pytest.approx(25.0) and not fell_back
    assert lhs9(i, j, 100.0, 25.0) == pytest.approx(4 / 3)
    assert rhs9(i, j, 100.0, 25.0) == pytest.approx(4 / 3)
    assert plan_round([i, j], 400.0, 4) == [Move(0, 2, 25), Move(1, 2, 25)]


def test_fallback_when_split_cannot_cover_compensation() -> None:
    # N = 100, V = 1 both, Pᵢ = 0, Pⱼ = 10, β = 1, t = 100 (T = 100, d = 1).
    # P̃ᵢ = 1, P̃ⱼ = 11.  C = 1·(10·100 + 100) = 1100;
    # x* = (1100·100 − 100·100)/(100 + 1100) = 100000/1200 = 83.33.
    # Compensation: 100 − 10·1·83.33·1 = −733.3 < 0 -> fallback (Nᵢ − Δ)Vᵢ = βΔVⱼ:
    # (100 − Δ)·1 = Δ·1 -> Δ = 50 (< x*, as the equivalence in the module docstring says).
    i, j = sw(0, 100, 1.0, 0.0), sw(1, 100, 1.0, 10.0)
    assert eq9_delta(i, j, 100.0, 1) == pytest.approx(1000 / 12)
    assert fallback_delta(i, j) == 50.0
    assert pair_delta(i, j, 100.0, 1) == (50.0, True)
    assert plan_round([i, j], 100.0, 1) == [Move(0, 1, 50)]


def test_fallback_with_beta_below_one() -> None:
    # 𝕎ᵢ = {0}: N = 90, V = 1, P = 0.  𝕎ⱼ = {1, 2}: N = 100, V = 1, P = 10.  β = 1/2.  t = 100.
    # C = 1·(10·100 + 100) = 1100; x* = (1100·90 − 100·100)/(100·0.5 + 1100) = 89000/1150 = 77.39.
    # Compensation: 100 − 10·0.5·77.39·1 = −286.96 < 0 -> fallback:
    # (90 − Δ)·1 = 0.5·Δ·1 -> Δ = 90/1.5 = 60; each target gets βΔ = 30.
    i, j = sw(0, 90, 1.0, 0.0), sw((1, 2), 100, 1.0, 10.0)
    x, fell_back = pair_delta(i, j, 100.0, 1)
    assert fell_back and x == pytest.approx(60.0)
    assert plan_round([i, j], 100.0, 1) == [Move(0, 1, 30), Move(0, 2, 30)]


def test_no_move_when_balanced_and_source_is_the_behind_one() -> None:
    # Identical workers: P̃ equal -> x* = (C·N − t·N)/(t + C) with C = t -> 0.
    a, b = sw(0, 500, 0.5, 2.0), sw(1, 500, 0.5, 2.0)
    assert eq9_delta(a, b, 100.0, 2) == 0.0
    assert plan_round([a, b], 100.0, 2) == []
    # Asking the ahead worker to send gives 0 (direction: behind -> ahead only).
    i, j = sw(0, 1000, 3.0, 0.0), sw(1, 1000, 1.0, 0.0)
    assert eq9_delta(j, i, 6000.0, 1) == 0.0


def test_integer_split_among_members_is_even_and_rank_ordered() -> None:
    # 𝕎ᵢ = {0, 1, 2}, 𝕎ⱼ = {3, 4}: β = 3/2.  Same P, Vᵢ = 3, Vⱼ = 1, N = 1000 each, t = 6000.
    # x* = (18000·1000 − 6000·1000)/(6000·1.5 + 18000) = 12e6/27000 = 444.44 -> ⌊x*⌋ = 444,
    # ⌊β·x*⌋ = ⌊666.67⌋ = 666; S = min(3·444, 2·666) = min(1332, 1332) = 1332.
    # Sources 444 each; targets 666 each; north-west corner: 0->3 444, 1->3 222, 1->4 222, 2->4 444.
    i, j = sw((0, 1, 2), 1000, 3.0, 0.0), sw((3, 4), 1000, 1.0, 0.0)
    assert eq9_delta(i, j, 6000.0, 1) == pytest.approx(12e6 / 27000)
    assert plan_round([i, j], 6000.0, 1) == [
        Move(0, 3, 444), Move(1, 3, 222), Move(1, 4, 222), Move(2, 4, 444)]


def test_source_member_keeps_at_least_one_point() -> None:
    # Grouped within a tolerance, members may hold fewer points than the mean N: a member
    # with 3 points sends at most 2.
    i = SuperWorker((0, 1), 6.0, 1000.0, 0.0, sizes=(9, 3))
    j = sw(2, 6, 1.0, 0.0)
    moves = plan_round([i, j], 100.0, 1)
    sent = {r: sum(m.points for m in moves if m.source == r) for r in (0, 1)}
    assert sent[1] <= 2 and sent[0] <= 8 and sum(sent.values()) > 0


# -- pairing -------------------------------------------------------------------------------


def _by_passes(ps: list[float]) -> list[SuperWorker]:
    # Same N and V: P̃ order is P order.
    return [sw(r, 100, 1.0, p) for r, p in enumerate(ps)]


def test_pairing_min_with_max_then_inwards_even() -> None:
    ws = _by_passes([3.0, 0.0, 2.0, 1.0])  # order by P̃: r1, r3, r2, r0
    got = [(a.ranks[0], b.ranks[0]) for a, b in pair(ws, 10.0, 1)]
    assert got == [(1, 0), (3, 2)]


def test_pairing_odd_count_leaves_the_median_unpaired() -> None:
    ws = _by_passes([4.0, 0.0, 2.0, 1.0, 3.0])  # order: r1, r3, r2, r4, r0 -> median r2
    got = [(a.ranks[0], b.ranks[0]) for a, b in pair(ws, 10.0, 1)]
    assert got == [(1, 0), (3, 4)]
    assert all(2 not in (a.ranks[0], b.ranks[0]) for a, b in pair(ws, 10.0, 1))
    assert pair(ws[:1], 10.0, 1) == []


def test_pairing_uses_predicted_not_current_passes() -> None:
    # r0 is ahead now (P = 5) but so slow that P̃ = 5 + 100/(100·10) = 5.1;
    # r1: P = 1, P̃ = 1 + 100/(100·0.01) = 101.  r0 is behind -> r0 sends.
    slow, fast = sw(0, 100, 10.0, 5.0), sw(1, 100, 0.01, 1.0)
    ((a, b),) = pair([fast, slow], 100.0, 1)
    assert (a.ranks, b.ranks) == ((0,), (1,))
    assert all(m.source == 0 for m in plan_round([fast, slow], 100.0, 1))


def test_empty_super_workers_are_not_paired() -> None:
    ws = [sw(0, 0, 1.0, 0.0), sw(1, 100, 2.0, 0.0), sw(2, 100, 1.0, 0.0)]
    assert [(a.ranks[0], b.ranks[0]) for a, b in pair(ws, 10.0, 1)] == [(1, 2)]


def test_bad_inputs_are_refused() -> None:
    w = sw(0, 10, 1.0, 0.0)
    for T in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            plan_round([w, sw(1, 10, 1.0, 0.0)], T, 1)
    with pytest.raises(ValueError):
        plan_round([w, sw(1, 10, 1.0, 0.0)], 1.0, 0)
    with pytest.raises(ValueError):
        plan_round([w, sw(0, 10, 1.0, 0.0)], 1.0, 1)  # rank 0 twice
    with pytest.raises(ValueError):
        WorkerStat(0, 10, 0.0, 0.0)
    with pytest.raises(ValueError):
        Move(1, 1, 3)
    with pytest.raises(ValueError):
        Move(1, 2, 0)


# -- grouping into super workers -------------------------------------------------------------


def test_grouping_speed_boundary_is_inclusive() -> None:
    tol = Tolerance(v_rel=0.25, n_rel=0.0, p_abs=0.0)
    same = [WorkerStat(0, 100, 2.0, 1.0), WorkerStat(1, 100, 2.5, 1.0)]  # 2.5 = 1.25·2.0
    assert [g.ranks for g in group(same, tol)] == [(0, 1)]
    apart = [WorkerStat(0, 100, 2.0, 1.0), WorkerStat(1, 100, 2.5000001, 1.0)]
    assert [g.ranks for g in group(apart, tol)] == [(0,), (1,)]


def test_grouping_points_and_passes_boundaries() -> None:
    tol = Tolerance(v_rel=0.0, n_rel=0.01, p_abs=0.5)
    # |100 − 99| = 1 ≤ 0.01·100; |100 − 98| = 2 > 1.
    assert len(group([WorkerStat(0, 100, 1.0, 0.0), WorkerStat(1, 99, 1.0, 0.0)], tol)) == 1
    assert len(group([WorkerStat(0, 100, 1.0, 0.0), WorkerStat(1, 98, 1.0, 0.0)], tol)) == 2
    # |1.5 − 1.0| = 0.5 ≤ 0.5; 0.5000001 > 0.5.
    assert len(group([WorkerStat(0, 100, 1.0, 1.0), WorkerStat(1, 100, 1.0, 1.5)], tol)) == 1
    assert len(group([WorkerStat(0, 100, 1.0, 1.0), WorkerStat(1, 100, 1.0, 1.5000001)],
                     tol)) == 2


def test_grouping_is_complete_linkage_with_mean_statistics() -> None:
    # 1.0 ~ 1.08 (≤ 1.1) and 1.08 ~ 1.16, but 1.16 > 1.1·1.0: no chaining into one group.
    stats = [WorkerStat(5, 100, 1.16, 2.0), WorkerStat(3, 100, 1.0, 2.0),
             WorkerStat(4, 101, 1.08, 2.05), WorkerStat(7, 10, 1.0, 2.0)]
    groups = group(stats)  # default: 10% speed, 1% points, 0.1 pass
    assert [g.ranks for g in groups] == [(3, 4), (5,), (7,)]
    g = groups[0]
    assert g.size == 2 and g.sizes == (100, 101)
    assert (g.n, g.v, g.p) == pytest.approx((100.5, 1.04, 2.025))
    assert Tolerance() == Tolerance(0.10, 0.01, 0.1)


# -- Eq. 8 -----------------------------------------------------------------------------------


def test_eq8_exactly_epsilon_does_not_trigger_slightly_above_does() -> None:
    assert DEFAULT_EPSILON == 1.0
    assert not imbalanced([1.0, 3.0])  # mean 2, |3 − 2| = 1 = ϵ
    assert imbalanced([1.0, 3.0 + 1e-9])
    assert not imbalanced([2.0, 2.25], 0.125)  # mean 2.125, deviation 0.125 exactly
    assert imbalanced([2.0, 2.25], 0.124)
    assert not imbalanced([1.5, 1.5, 1.5], 0.0)
    assert imbalanced([1.5, 1.5, 1.5 + 1e-12], 0.0)
    assert not imbalanced([7.0])
    for bad in (-0.1, 1.1):
        with pytest.raises(ValueError):
            imbalanced([0.0, 1.0], bad)


def test_eq8_mean_is_over_super_workers() -> None:
    # Three homogeneous workers at P = 1 and one at P = 3.  Over workers: mean 1.5, |3 − 1.5|
    # = 1.5 > 1.  Over the K = 2 super workers (as Eq. 8 is printed): mean 2, deviation 1 ≤ 1.
    stats = [WorkerStat(r, 100, 1.0, 1.0) for r in range(3)] + [WorkerStat(3, 100, 0.5, 3.0)]
    assert imbalanced([s.p for s in stats])
    assert not needs_migration(stats)
    assert needs_migration(stats, 0.5)
    assert not needs_migration(group(stats))


def test_cycle_ends_at_d_rounds_or_when_eq8_holds() -> None:
    ws = [sw(0, 10, 1.0, 0.0), sw(1, 10, 1.0, 2.5)]
    assert not cycle_finished(1, DEFAULT_ROUNDS, ws)
    assert cycle_finished(DEFAULT_ROUNDS, DEFAULT_ROUNDS, ws)
    assert cycle_finished(1, DEFAULT_ROUNDS, [sw(0, 10, 1.0, 0.0), sw(1, 10, 1.0, 2.0)])


# -- remaining time (§3.3) -------------------------------------------------------------------


def test_remaining_time_from_linear_progress() -> None:
    # f falls 0.5 per second: 10 -> 8 over 4 s.  Target 3 from 8: 5 / 0.5 = 10 s.
    rate = progress_rate([0.0, 1.0, 2.0, 3.0, 4.0], [10.0, 9.5, 9.0, 8.5, 8.0])
    assert rate == pytest.approx(-0.5)
    assert remaining_time(8.0, 3.0, rate) == pytest.approx(10.0)
    assert remaining_time(8.0, 12.0, 2.0) == pytest.approx(2.0)  # maximizing
    assert remaining_time(8.0, 3.0, 0.5) == math.inf  # moving away
    assert remaining_time(8.0, 3.0, 0.0) == math.inf
    assert remaining_time(3.0, 3.0, -0.5) == 0.0
    with pytest.raises(ValueError):
        progress_rate([1.0, 1.0], [2.0, 3.0])


# -- properties ------------------------------------------------------------------------------


@st.composite
def populations(draw: st.DrawFn) -> tuple[list[SuperWorker], list[WorkerStat], float, int]:
    k = draw(st.integers(1, 6))
    supers: list[SuperWorker] = []
    stats: list[WorkerStat] = []
    rank = 0
    for _ in range(k):
        size = draw(st.integers(1, 4))
        n = draw(st.integers(1, 20_000))
        v = draw(st.floats(1e-5, 1.0))
        p = draw(st.floats(0.0, 50.0))
        ranks = tuple(range(rank, rank + size))
        rank += size
        supers.append(SuperWorker(ranks, float(n), v, p))
        stats.extend(WorkerStat(r, n, v, p) for r in ranks)
    T = draw(st.floats(1e-2, 1e5))
    d = draw(st.integers(1, 8))
    return supers, stats, T, d


@settings(max_examples=400, deadline=None)
@given(populations())
def test_round_conserves_points_and_never_overdraws(
        pop: tuple[list[SuperWorker], list[WorkerStat], float, int]) -> None:
    supers, stats, T, d = pop
    moves = plan_round(supers, T, d)
    have = {s.rank: s.n for s in stats}
    sent = dict.fromkeys(have, 0)
    for m in moves:
        assert m.points > 0
        sent[m.source] += m.points
    assert all(sent[r] < have[r] or sent[r] == 0 for r in have)  # Δ ∈ [0, N)
    sources = {m.source for m in moves}
    assert sources.isdisjoint({m.target for m in moves})
    after = advance(stats, moves, T, d)
    assert sum(s.n for s in after) == sum(s.n for s in stats)
    assert all(s.n >= 1 for s in after)


@settings(max_examples=400, deadline=None)
@given(populations())
def test_round_does_not_widen_the_predicted_spread(
        pop: tuple[list[SuperWorker], list[WorkerStat], float, int]) -> None:
    supers, stats, T, d = pop
    before = [predicted_passes(w, T, d) for w in supers]
    after = [s.p for s in advance(stats, plan_round(supers, T, d), T, d)]
    slack = 1e-9 * (1.0 + max(before))
    assert max(after) - min(after) <= max(before) - min(before) + slack
    assert min(after) >= min(before) - slack and max(after) <= max(before) + slack


@st.composite
def behind_ahead(draw: st.DrawFn) -> tuple[SuperWorker, SuperWorker, float]:
    def one(rank: int) -> SuperWorker:
        size = draw(st.integers(1, 4))
        return SuperWorker(tuple(range(rank, rank + size)), float(draw(st.integers(1, 20_000))),
                           draw(st.floats(1e-5, 1.0)), draw(st.floats(0.0, 50.0)))
    a, b = one(0), one(10)
    t = draw(st.floats(1e-2, 1e5))
    if predicted_passes(a, t, 1) > predicted_passes(b, t, 1):
        a, b = b, a
    return a, b, t


@settings(max_examples=400, deadline=None)
@given(behind_ahead())
def test_eq9_solution_solves_eq9_and_fallback_iff_it_moves_less(
        case: tuple[SuperWorker, SuperWorker, float]) -> None:
    i, j, t = case
    x = eq9_delta(i, j, t, 1)
    assert 0.0 <= x < i.n
    scale = 1.0 + abs(lhs9(i, j, t, 0.0)) + abs(rhs9(i, j, t, 0.0))
    assert lhs9(i, j, t, x) == pytest.approx(rhs9(i, j, t, x), rel=1e-7, abs=1e-9 * scale)
    delta, fell_back = pair_delta(i, j, t, 1)
    xf = fallback_delta(i, j)
    assume(abs(xf - x) > 1e-9 * (1.0 + x))  # away from the tie, where both agree
    assert fell_back == (xf < x)
    assert delta == (xf if fell_back else x) and delta <= x


# -- a fixed cost per pass (module docstring, "A fixed cost per pass") ----------------------


def lhs9a(i: SuperWorker, j: SuperWorker, t: float, x: float) -> float:
    """Eq. 9's left side with the fixed cost per pass: a pass takes Aᵢ + (Nᵢ − x)Vᵢ."""
    return i.p + t / (i.a + (i.n - x) * i.v)


def rhs9a(i: SuperWorker, j: SuperWorker, t: float, x: float) -> float:
    """Eq. 9's right side with the fixed cost per pass: Aⱼ + (Nⱼ + βx)Vⱼ."""
    beta = i.size / j.size
    return j.p + (t - (j.p - i.p) * beta * x * j.v) / (j.a + (j.n + beta * x) * j.v)


def test_a_fixed_cost_per_pass_is_in_the_predicted_passes() -> None:
    # N = 70, V = 32 µs, A = 7 ms: a pass takes 7 + 2.24 ms; t = 9.24 s -> 1,000 passes.
    w = SuperWorker((1,), 70.0, 32e-6, 5.0, a=7e-3)
    assert pass_time(w) == pytest.approx(9.24e-3)
    assert predicted_passes(w, 9.24, 1) == pytest.approx(1005.0)
    # A = 0 is the paper's model, P + t/(V·N).
    assert predicted_passes(sw(1, 70, 32e-6, 5.0), 2.24, 1) == pytest.approx(1005.0)


def test_eq9_with_fixed_costs_meets_where_both_sides_do() -> None:
    # 𝕎ᵢ: N = 1000, V = 3, A = 500; 𝕎ⱼ: N = 1000, V = 1, A = 500; P = 0 both; t = 6000.
    # Left: 6000/(500 + 3(1000 − x)); right: 6000/(500 + 1000 + x) -> 3500 − 3x = 1500 + x,
    # x = 500: both pass 6000/2000 = 3 times.
    i = SuperWorker((0,), 1000.0, 3.0, 0.0, a=500.0)
    j = SuperWorker((1,), 1000.0, 1.0, 0.0, a=500.0)
    x = eq9_delta(i, j, 6000.0, 1)
    assert x == pytest.approx(500.0)
    assert lhs9a(i, j, 6000.0, x) == pytest.approx(rhs9a(i, j, 6000.0, x)) == pytest.approx(3.0)


def test_a_source_whose_fixed_cost_alone_keeps_it_behind_sends_every_point() -> None:
    """The straggler of issue 19: ~70 points at 32 µs a point (its injected delays), and a
    pass costs it an iteration's wait anyway (7 ms), as much as the others' whole pass.  On
    V·N alone it looks nearly balanced (2.24 ms against the others' 2.1 ms of compute per
    pass): Eq. 9 sends 13 of its 70 points, to catch up the passes it lags; with the fixed
    costs no share of its points lets it keep pace, and all go (the caller leaves it its
    floor)."""
    straggler = SuperWorker((1,), 70.0, 32e-6, 216.0, a=7e-3)
    fast = SuperWorker((2, 3, 4), 133_000.0, 2.1e-3 / 133_000, 285.0, a=4.9e-3)
    paper = [SuperWorker(w.ranks, w.n, w.v, w.p) for w in (straggler, fast)]
    assert eq9_delta(*paper, 1.0, 1) == pytest.approx(12.68, abs=0.01)
    assert eq9_delta(straggler, fast, 1.0, 1) == 70.0
    (m1, m2, m3) = plan_round([straggler, fast], 1.0, 1)
    assert (m1.source, m1.points + m2.points + m3.points) == (1, 69)  # it keeps one


@st.composite
def behind_ahead_fixed(draw: st.DrawFn) -> tuple[SuperWorker, SuperWorker, float]:
    i, j, t = draw(behind_ahead())
    i = SuperWorker(i.ranks, i.n, i.v, i.p, a=draw(st.floats(0.0, 1e3)))
    j = SuperWorker(j.ranks, j.n, j.v, j.p, a=draw(st.floats(0.0, 1e3)))
    if predicted_passes(i, t, 1) > predicted_passes(j, t, 1):
        i, j = j, i
    return i, j, t


@settings(max_examples=400, deadline=None)
@given(behind_ahead_fixed())
def test_eq9_with_fixed_costs_solves_it_or_sends_everything(
        case: tuple[SuperWorker, SuperWorker, float]) -> None:
    i, j, t = case
    x = eq9_delta(i, j, t, 1)
    assert 0.0 <= x <= i.n
    scale = 1.0 + abs(lhs9a(i, j, t, 0.0)) + abs(rhs9a(i, j, t, 0.0))
    if x < i.n:
        assert lhs9a(i, j, t, x) == pytest.approx(rhs9a(i, j, t, x), rel=1e-6,
                                                  abs=1e-9 * scale)
    else:  # every point goes only when the source stays behind even with none left
        assert i.a > 0 and lhs9a(i, j, t, x) <= rhs9a(i, j, t, x) + 1e-9 * scale
    if i.a == j.a == 0:
        assert x < i.n


@settings(max_examples=200, deadline=None)
@given(populations(), st.floats(0.0, 10.0))
def test_round_with_fixed_costs_conserves_points(
        pop: tuple[list[SuperWorker], list[WorkerStat], float, int], a: float) -> None:
    supers, stats, T, d = pop
    supers = [SuperWorker(w.ranks, w.n, w.v, w.p, w.sizes, a=a) for w in supers]
    stats = [WorkerStat(s.rank, s.n, s.v, s.p, a=a) for s in stats]
    moves = plan_round(supers, T, d)
    after = advance(stats, moves, T, d)
    assert sum(s.n for s in after) == sum(s.n for s in stats)
    assert all(s.n >= 1 for s in after) and all(s.a == a for s in after)


def test_eq9_with_fixed_costs_takes_an_empty_target_without_a_fixed_cost():
    """A target holding no point and no fixed cost (A = 0) against a source with one: its
    pass time is 0 at Δ = 0 (it divided by zero; issue 19 review)."""
    from flegel.balance.planner import _eq9_bisect

    i = SuperWorker((1,), 1000.0, 1e-6, 0.0, a=1e-3)
    j = SuperWorker((2,), 0.0, 1e-6, 5.0)
    delta = _eq9_bisect(i, j, 1.0)
    assert 0 < delta <= 1000


@st.composite
def behind_ahead_fixed(draw: st.DrawFn) -> tuple[SuperWorker, SuperWorker, float]:
    """A pair with fixed costs per pass (A = 0 for some), the first behind at the end of t."""
    def one(rank: int) -> SuperWorker:
        a = draw(st.one_of(st.just(0.0), st.floats(1e-4, 0.1)))
        return SuperWorker((rank,), float(draw(st.sampled_from([1, 5, 20, 70, 1000, 133_000]))),
                           draw(st.floats(1e-7, 1e-3)), draw(st.floats(0.0, 500.0)), a=a)
    i, j = one(1), one(2)
    t = draw(st.floats(0.1, 30.0))
    if predicted_passes(i, t, 4) > predicted_passes(j, t, 4):
        i, j = j, i
    return i, j, t


@settings(max_examples=400, deadline=None)
@given(behind_ahead_fixed())
def test_with_fixed_costs_the_fallback_moves_no_more_than_eq9(
        case: tuple[SuperWorker, SuperWorker, float]) -> None:
    """The module docstring's "Δ ≤ x*" (shown in closed form for A = 0) holds with fixed
    costs per pass too: the fallback never pushes a pair past each other."""
    i, j, t = case
    x = eq9_delta(i, j, t, 4)
    delta, fell_back = pair_delta(i, j, t, 4)
    assert delta <= x + 1e-9 * (1.0 + x)
