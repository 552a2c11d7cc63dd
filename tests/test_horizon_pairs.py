"""Fig. 8's horizon rows take more pairs, two at a time, where the runs are short, until the
median's side of 1 is decided (``flegel.cli.paper.horizons.measure``'s ``most``, issue 19):
canned runs, no MPI job."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from flegel.cli.paper import fsp_figures, horizons
from flegel.cli.paper.common import Ctx
from flegel.cli.paper.horizons import MedianRow, decided, side
from flegel.cli.paper.runner import Ratio, Runner, RunResult
from flegel.cli.paper.workloads import QUICK


class Scripted(Runner):
    """A runner whose trace runs are canned: pair ``i``'s FSPV reaches BSPV's 0.2 s target
    (5.0, reached by BSPV at 0.2 s) at ``0.2 / ratios[i]`` seconds; every run "took"
    ``seconds``.  Asked for a pair past the script, the test fails."""

    ratios: list[float]
    seconds: float
    asked: list[str]

    def _run(self, algorithm: str, partition: str, sync: str, stragglers: str,
             sets: list[str], target: float | None, name: str | None, where: str = "",
             launch: Any = None, key_extra: tuple[str, ...] = ()) -> RunResult:
        self.asked.append(str(name))
        pair = (name or "").rsplit("-", 1)[-1]
        i = int(pair) - 1 if pair.isdigit() else 0
        ratios = getattr(self, "by", {}).get(algorithm, self.ratios)
        assert i < len(ratios), f"pair {i + 1} asked for, past the script"
        length = float(sets[0].split("=")[1])
        if sync == "bspv":
            trace = [[0.1, 10.0], [0.2, 5.0], [length, 4.9]]
        else:
            trace = [[0.2 / ratios[i], 5.0], [length, 4.9]]
        summary = {"objective_trace": trace, "wall_time_s": length, "per_worker": []}
        key = json.dumps([algorithm, partition, sync, stragglers, sets, name])
        return RunResult(key, Path(key), summary, None, None, self.seconds)


def scripted(tmp_path: Path, ratios: list[float], reach_s: float = 0.1,
             seconds: float = 1.0) -> Scripted:
    """The floor 5.0, which the reference reaches at ``reach_s``: runs of 0.5 s (2.5 x 0.1 s,
    at least 0.5 s), only the 0.2 s horizon compared; 0.7 s gives runs of 2 s."""
    runner = Scripted(QUICK, tmp_path, say=lambda _: None)
    runner.ratios, runner.seconds, runner.asked = ratios, seconds, []
    runner.targets["kmeans", "strided"] = 5.0
    runner.references["kmeans", "strided"] = RunResult(
        "ref", tmp_path, {"objective_trace": [[reach_s / 2, 9.0], [reach_s, 5.0]],
                          "wall_time_s": 3.0}, None, None, 3.0)
    return runner


def ratios_of(m: horizons.Measured) -> list[float]:
    return [round(p.ratio.value, 6) for p in m.rows[0].pairs]


def test_two_pairs_on_one_side_are_decided_and_take_no_more(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.25, 1.6])
    m = horizons.measure(runner, "kmeans", repeat=2, most=4)
    assert m.length_s == 0.5 and [r.horizon_s for r in m.rows] == [0.2]
    assert ratios_of(m) == [1.25, 1.6] and not m.undecided and not m.budget_stopped


def test_a_split_row_takes_two_more_pairs_one_in_each_order(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.25, 0.8, 1.1, 2.0])
    m = horizons.measure(runner, "kmeans", repeat=2, most=4)
    # 1 above, 1 below: two more, 3 of 4 above decides it.
    assert ratios_of(m) == [1.25, 0.8, 1.1, 2.0] and not m.undecided
    assert m.rows[0].ratio.value > 1
    # As many pairs in each order: BSPV first, FSPV first, BSPV first, FSPV first.
    assert runner.asked == ["trace-bspv", "trace-fspv-off", "trace-fspv-off-2",
                            "trace-bspv-2", "trace-bspv-3", "trace-fspv-off-3",
                            "trace-fspv-off-4", "trace-bspv-4"]
    assert [p.order for p in m.pairs] == ["bspv-fspv", "fspv-bspv"] * 2


def test_a_short_row_split_around_1_runs_the_most_pairs_and_says_undecided(
        tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.2, 0.8, 1.0, 1.25])
    m = horizons.measure(runner, "kmeans", repeat=2, most=4)
    # A level pair (1.0) is on neither side: 2 above, 1 below of 4 is no majority.
    assert ratios_of(m) == [1.2, 0.8, 1.0, 1.25] and m.undecided and not m.budget_stopped


def test_the_label_is_on_the_pairs_run_up_to_six(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [0.9, 1.2, 0.8, 1.3, 0.85, 0.7])
    m = horizons.measure(runner, "kmeans", repeat=2, most=6)
    # 1-1, then 2-2 of 4, then 4 of 6 below: decided below.
    assert len(m.pairs) == 6 and not m.undecided and m.rows[0].ratio.value < 1


def test_a_long_row_keeps_its_pairs_and_says_when_they_split(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.2, 0.8], reach_s=0.7)
    m = horizons.measure(runner, "kmeans", repeat=2, most=4)
    assert m.length_s == 2.0 and len(m.pairs) == 2 and m.undecided
    runner = scripted(tmp_path, [1.2, 1.3], reach_s=0.7)
    assert not horizons.measure(runner, "kmeans", repeat=2, most=4).undecided


def test_without_most_the_pairs_are_repeat_as_before(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.2, 0.8])
    m = horizons.measure(runner, "kmeans", repeat=2)
    assert len(m.pairs) == 2 and m.undecided and not m.budget_stopped


def test_one_budget_over_the_rows_stops_further_pairs(tmp_path: Path) -> None:
    # Each pair "took" 2 x 20 s: two more are estimated at 80 s.
    runner = scripted(tmp_path, [1.2, 0.8, 1.3, 1.4], seconds=20.0)
    budget = horizons.PairBudget(79.0)
    m = horizons.measure(runner, "kmeans", repeat=2, most=4, budget=budget)
    assert len(m.pairs) == 2 and m.undecided and m.budget_stopped
    assert budget.left_s == 79.0
    # Room for two more: they run and are spent, and the next row finds the rest.
    budget = horizons.PairBudget(100.0)
    m = horizons.measure(runner, "kmeans", repeat=2, most=4, budget=budget)
    assert len(m.pairs) == 4 and not m.undecided and budget.left_s == pytest.approx(20.0)
    m = horizons.measure(scripted(tmp_path, [1.2, 0.8, 1.3, 1.4], seconds=20.0), "kmeans",
                         repeat=2, most=4, budget=budget)
    assert len(m.pairs) == 2 and m.budget_stopped


def test_side_counts_a_bound_only_where_its_whole_interval_is_on_one_side() -> None:
    assert [side(Ratio(v, q)) for v, q in [(1.5, ""), (1.5, ">"), (1.2, "<"), (0.9, "<"),
                                           (0.9, ">"), (1.0, ""), (math.nan, "?")]] \
        == [1, 1, 0, -1, 0, 0, 0]


def test_decided_needs_every_row_and_a_majority_of_the_pairs_run() -> None:
    def row(h: float, *ratios: float) -> MedianRow:
        return MedianRow(h, tuple(horizons.HorizonRow(
            h, 1.0, horizons.Time(r, True), horizons.Time(1.0, True)) for r in ratios))

    assert decided([row(0.2, 1.1, 1.2)], 2)
    assert not decided([row(0.2, 1.1, 0.9)], 2)
    assert decided([row(0.2, 1.1, 1.2, 1.3, 0.9)], 4)
    assert not decided([row(0.2, 1.1, 1.2, 0.8, 0.9)], 4)
    assert not decided([row(0.2, 1.1, 1.2), row(0.5, 1.1, 0.9)], 2)
    assert decided([], 4)


def test_fig8s_table_and_headline_say_undecided_rows_and_the_spent_budget(
        tmp_path: Path) -> None:
    """Through ``fsp_figures.horizon_table`` and ``fig8_headline``: K-means decided at two
    pairs, GMM split after four, FCM split at two with the figure's budget spent by GMM."""
    runner = scripted(tmp_path, [], seconds=10.0)
    runner.by = {"kmeans": [1.5, 1.25], "gmm": [1.2, 0.8, 1.0, 1.25], "fcm": [0.9, 1.1]}
    for a in ("gmm", "fcm"):
        runner.targets[a, "strided"] = 5.0
        runner.references[a, "strided"] = runner.references["kmeans", "strided"]
    (tmp_path / "pictures").mkdir()
    ctx = Ctx(runner, tmp_path / "pictures", say=lambda _: None)
    # A median of two pairs is their geometric mean (K-means: 1.37x).  Quick's budget, 60 s:
    # GMM's two more pairs are estimated at 40 s and spend 40 s; FCM's two more (40 s) no
    # longer fit in the 20 s left.
    assert ctx.mode.pairs_budget_s == 60.0 and ctx.mode.pairs_most == 4
    h = fsp_figures.horizon_table(ctx, ("kmeans", "gmm", "fcm"), "strided")
    assert h.undecided == ["gmm", "fcm"] and h.budget_stopped == ["fcm"]
    assert len(h.runs) == 2 * (2 + 4 + 2)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in h.table[2:]}
    assert "| 1.37x | - |" in rows["kmeans"] and "| 2 pairs: 0.2 s: 1.50x, 1.25x |" \
        in rows["kmeans"] and "undecided" not in rows["kmeans"]
    assert "(undecided) | 4 pairs: 0.2 s: 1.20x, 0.80x, 1.00x, 1.25x |" in rows["gmm"]
    assert "(undecided, budget spent) | 2 pairs: 0.2 s: 0.90x, 1.10x |" in rows["fcm"]
    ours, mean = fsp_figures.fig8_headline(h.means, h.every, {}, tuple(h.undecided),
                                           tuple(h.budget_stopped))
    assert mean.value == pytest.approx(math.prod(m.value for m in h.means) ** (1 / 3))
    assert ours.startswith(f"{mean.text()} (FSPV vs BSPV, geometric mean over algorithms "
                           "and horizons); lowest algorithm ")
    assert ours.endswith("; undecided rows: gmm, fcm (stopped by the pairs' budget: fcm)")
    # No undecided row: no clause.
    assert "undecided" not in fsp_figures.fig8_headline(h.means, h.every, {})[0]
