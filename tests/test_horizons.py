"""The every-horizon comparison of FSPV and BSPV (flegel/cli/paper/horizons.py): targets
from BSPV's own trace, times from both traces, bounds where FSPV never got there."""

from __future__ import annotations

import pytest

from flegel.cli.paper.horizons import (
    HorizonRow,
    best_by,
    compare,
    first_reach,
    geo_mean_ratio,
)
from flegel.cli.paper.runner import Ratio, Time


def test_targets_are_bspv_objectives_at_each_horizon_and_ratios_bspv_over_fspv():
    bspv = [[0.1, 10.0], [0.3, 8.0], [0.6, 6.0], [1.5, 5.0], [3.0, 4.5]]
    fspv = [[0.05, 9.0], [0.2, 7.5], [0.4, 5.5], [1.0, 4.9], [2.0, 4.8]]
    rows = compare(bspv, fspv, fspv_wall_s=4.0, horizons=(0.2, 0.5, 1.0, 2.0, 4.0))
    # 0.2 s: BSPV's best so far is 10 (at 0.1 s), FSPV had 9 at 0.05 s.
    assert [r.horizon_s for r in rows] == [0.2, 0.5, 1.0, 2.0]  # 4 s is past BSPV's trace
    assert [r.target for r in rows] == [10.0, 8.0, 6.0, 5.0]
    # BSPV's targets are its own snapshots: their times.  FSPV's crossings fall between its
    # snapshots, interpolated (first_reach): 8 between 9 at 0.05 s and 7.5 at 0.2 s, ...
    assert [r.bspv.s for r in rows] == [0.1, 0.3, 0.6, 1.5]
    assert [r.fspv.s for r in rows] == pytest.approx([0.05, 0.15, 0.35, 0.9])
    ratios = [2.0, 2.0, 0.6 / 0.35, 1.5 / 0.9]
    assert [r.ratio.value for r in rows] == pytest.approx(ratios)
    assert all(r.ratio.qualifier == "" for r in rows)
    assert geo_mean_ratio(rows).value == pytest.approx(
        (ratios[0] * ratios[1] * ratios[2] * ratios[3]) ** 0.25)


def test_a_target_fspv_never_reached_is_a_bound_and_the_floor_merges_horizons():
    bspv = [[0.1, 10.0], [0.4, 6.0], [0.9, 5.0], [1.9, 4.0]]
    fspv = [[0.1, 9.0], [0.3, 6.5], [2.0, 6.2]]
    rows = compare(bspv, fspv, fspv_wall_s=2.0, horizons=(0.2, 0.5, 1.0, 2.0))
    assert rows[1].fspv.reached is False and rows[1].ratio.qualifier == "<"
    assert rows[1].ratio.value == pytest.approx(0.4 / 2.0)
    # No target below the floor (BSPB's converged objective): 1 s and 2 s would measure
    # the basin BSPV settled in; they merge into the 0.5 s row.
    floored = compare(bspv, fspv, fspv_wall_s=2.0, horizons=(0.2, 0.5, 1.0, 2.0), floor=6.5)
    assert [r.target for r in floored] == [10.0, 6.5]
    # FSPV's snapshot is at the floor; BSPV crossed it between 10 at 0.1 s and 6 at 0.4 s.
    assert floored[1].fspv.s == pytest.approx(0.3)
    assert floored[1].bspv.s == pytest.approx(0.1 + 0.3 * 3.5 / 4.0)


def test_trace_helpers():
    trace = [[0.1, 3.0], [0.2, float("nan")], [0.3, 2.0]]
    # No time is credited across the NaN: 2.5 is first seen at 0.3 s.
    assert first_reach(trace, 2.5) == 0.3 and first_reach(trace, 1.0) is None
    assert first_reach(trace, 2.0) == 0.3 and first_reach(trace, 3.5) == 0.1
    assert best_by(trace, 0.25) == 3.0 and best_by(trace, 0.05) is None


def test_fspv_is_not_charged_the_way_to_its_next_snapshot():
    """Issue 19: both sides fall along the same line, 1 per 10 ms, each sampled every 40 ms
    but FSPV 30 ms out of phase.  BSPV's 0.2 s target is its own snapshot; FSPV crossed it at
    the same time, between two of its snapshots.  Taking FSPV's next snapshot read 0.2/0.23
    = 0.87x; interpolated, the two are level."""
    bspv = [[t / 1000, 100 - t / 10] for t in range(0, 401, 40)]
    fspv = [[t / 1000, 100 - t / 10] for t in range(30, 401, 40)]
    (row, *_) = compare(bspv, fspv, fspv_wall_s=0.4, horizons=(0.2,))
    assert row.target == pytest.approx(80.0)
    assert row.bspv.s == pytest.approx(0.2)
    assert row.fspv.s == pytest.approx(0.2)
    assert row.ratio.value == pytest.approx(1.0)


def test_a_step_curve_is_read_within_the_snapshots_around_its_crossing():
    """f(θ) is a step function of versions: one every 12.5 ms, a snapshot every 50 ms.  The
    version that crossed 75 was made at 50 ms (the snapshot); the chord from 0 ms reads an
    earlier time, within the documented bound (first_reach: the spacing less one version)."""
    versions = [(k * 0.0125, 100.0 - 25.0 * (k >= 4) - 1.0 * k) for k in range(9)]
    trace = [[t, f] for t, f in versions[::4]]  # 0, 50, 100 ms
    got = first_reach(trace, 75.0)
    crossed = next(t for t, f in versions if f <= 75.0)
    assert crossed == pytest.approx(0.05)
    assert got is not None and 0.0 < got <= 0.05
    assert crossed - got < 0.05 - 0.0125


def test_the_median_of_ratios_that_may_be_bounds():
    from flegel.cli.paper.horizons import median_ratio
    from flegel.cli.paper.runner import Ratio

    assert median_ratio([Ratio(2.3), Ratio(0.75), Ratio(1.97)]) == Ratio(1.97)
    assert median_ratio([Ratio(1.0), Ratio(4.0)]).value == pytest.approx(2.0)
    # A lower bound above the middle does not move it; two of three lower bounds do.
    assert median_ratio([Ratio(1.0), Ratio(1.2, ">"), Ratio(0.8)]) == Ratio(1.0)
    assert median_ratio([Ratio(1.5, ">"), Ratio(1.2, ">"), Ratio(0.8)]) == Ratio(1.2, ">")
    assert median_ratio([Ratio(0.5, "<"), Ratio(0.7, "<"), Ratio(2.0)]) == Ratio(0.7, "<")
    # Bounds both ways around the middle: unknown.
    assert median_ratio([Ratio(1.5, ">"), Ratio(0.7, "<")]).qualifier == "?"
    assert median_ratio([]).qualifier == "?"


def test_medians_by_horizon_over_pairs_whose_rows_differ():
    from flegel.cli.paper.horizons import medians

    a = compare([[0.1, 10.0], [0.5, 6.0]], [[0.05, 9.0], [0.2, 5.0]], 1.0, (0.2, 0.5))
    b = compare([[0.1, 7.0], [0.5, 6.0]], [[0.2, 6.5], [0.4, 5.0]], 1.0, (0.2, 0.5))
    c = compare([[0.1, 7.0], [0.3, 6.0]], [[0.2, 6.5]], 0.3, (0.2, 0.5))  # ends at 0.3 s
    rows = medians([a, b, c], ends=[0.5, 0.5, 0.3], horizons=(0.2, 0.5))
    assert [r.horizon_s for r in rows] == [0.2, 0.5]
    assert [len(r.pairs) for r in rows] == [3, 2]  # c's trace ends at 0.3 s: no 0.5 s
    ratios = sorted(p.ratio.value for p in (a[0], b[0], c[0]))
    assert rows[0].ratio.value == pytest.approx(ratios[1])
    assert rows[1].ratio.value == pytest.approx((a[1].ratio.value * b[1].ratio.value) ** 0.5)
    # A horizon of one pair in three is that pair's ratio: left out.
    assert [r.horizon_s for r in medians([a, c, c], [0.5, 0.3, 0.3], (0.2, 0.5))] == [0.2]
    assert [r.horizon_s for r in medians([a], [0.5], (0.2, 0.5))] == [0.2, 0.5]


def row(h: float, tb: float, tf: float, pair: int = 0, target: float = 1.0) -> HorizonRow:
    return HorizonRow(h, target, Time(tb, True), Time(tf, True), pair=pair)


def test_a_pair_whose_horizon_merged_counts_with_its_earlier_ratio() -> None:
    """The reviewer's case: pair 0's BSPV reached the floor by 0.2 s (level, 1.00x), so it
    has no 0.5 s row -- the same target as at 0.2 s.  Leaving it out made 0.5 s the median
    of the two pairs where BSPV was later, 1.26x; carried forward, it is 1.00x."""
    from flegel.cli.paper.horizons import medians

    pairs = [[row(0.2, 0.1, 0.1, 0)],
             [row(0.2, 0.1, 0.1, 1, 2.0), row(0.5, 0.4, 0.4, 1)],
             [row(0.2, 0.1, 0.1, 2, 2.0), row(0.5, 0.4, 0.25, 2)]]
    rows = medians(pairs, ends=[1.0, 1.0, 1.0], horizons=(0.2, 0.5))
    assert [r.horizon_s for r in rows] == [0.2, 0.5]
    assert rows[1].ratio == Ratio(1.0)
    assert [p.pair for p in rows[1].pairs] == [0, 1, 2]
    assert [p["carried"] for p in rows[1].as_dict()["pairs"]] == [True, False, False]
    # Carried only up to the end of the pair's BSPV trace.
    assert len(medians(pairs, ends=[0.3, 1.0, 1.0], horizons=(0.2, 0.5))[1].pairs) == 2
    # Two pairs in three merged: the majority has no 0.5 s row of its own, none is shown.
    assert [r.horizon_s for r in medians([pairs[0], pairs[0], pairs[2]], [1.0] * 3,
                                         (0.2, 0.5))] == [0.2]


def test_a_failed_pair_counts_unknown_and_in_the_majority() -> None:
    from flegel.cli.paper.horizons import medians

    good = [row(0.2, 0.1, 0.1), row(0.5, 0.4, 0.2)]
    rows = medians([good, None, good], [1.0, 0.0, 1.0], (0.2, 0.5))
    assert [r.failed for r in rows] == [1, 1]
    assert rows[0].ratio == Ratio(1.0)  # two of three level: the unknown third is outvoted
    assert rows[1].ratio == Ratio(2.0)
    assert rows[0].as_dict()["failed"] == 1
    # One good pair in three is no majority: nothing shown.
    assert medians([good, None, None], [1.0, 0.0, 0.0], (0.2, 0.5)) == []
    assert medians([good, None], [1.0, 0.0], (0.2, 0.5)) == []


def test_a_run_lasts_what_its_rows_need():
    from pathlib import Path

    from flegel.cli.paper.horizons import run_length
    from flegel.cli.paper.runner import RunResult

    def ref(trace: list[list[float]]) -> RunResult:
        return RunResult("r", Path("r"), {"objective_trace": trace, "wall_time_s": 5.0},
                         None, None, 5.0)

    hs = (0.2, 0.5, 1.0, 2.0, 4.0)
    # The reference reached the target at 0.09 s: runs of 0.5 s (2.5 x 0.09, at least 0.5).
    assert run_length(ref([[0.09, 1.0], [1.1, 0.9]]), 1.0, hs) == 0.5
    # At 0.39 s (NMF): 0.98 s, rounded up to the 1 s horizon; at 0.7 s 1.75 s, to 2 s.
    assert run_length(ref([[0.2, 2.0], [0.39, 1.0]]), 1.0, hs) == 1.0
    assert run_length(ref([[0.2, 2.0], [0.7, 1.0]]), 1.0, hs) == 2.0
    # Late or never, or no reference: the longest horizon.
    assert run_length(ref([[0.2, 2.0], [3.0, 1.0]]), 1.0, hs) == 4.0
    assert run_length(ref([[0.2, 2.0]]), 1.0, hs) == 4.0
    assert run_length(None, 1.0, hs) == 4.0
