"""Fig. 8's horizon rows take more pairs where the runs are short, until the median's side of
1 is decided (``flegel.cli.paper.horizons.measure``'s ``most``, issue 19): canned runs, no
MPI job."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from flegel.cli.paper import horizons
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
             launch: Any = None) -> RunResult:
        self.asked.append(str(name))
        tag = (name or "").rsplit("-", 1)[-1]
        i = int(tag) - 1 if tag.isdigit() else 0
        assert i < len(self.ratios), f"pair {i + 1} asked for, past the script"
        length = float(sets[0].split("=")[1])
        if sync == "bspv":
            trace = [[0.1, 10.0], [0.2, 5.0], [length, 4.9]]
        else:
            trace = [[0.2 / self.ratios[i], 5.0], [length, 4.9]]
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


def test_a_short_row_stops_once_a_majority_of_the_most_pairs_is_on_one_side(
        tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.25, 1.6, 1.1, 2.0, 2.0])
    m = horizons.measure(runner, "kmeans", repeat=2, most=5)
    # Two pairs agree, but 2 of 5 is no majority: a third decides it (3 of 5 above 1).
    assert m.length_s == 0.5 and [r.horizon_s for r in m.rows] == [0.2]
    assert ratios_of(m) == [1.25, 1.6, 1.1] and not m.undecided
    assert m.rows[0].ratio.value == pytest.approx(1.25)
    # The order still alternates: BSPV first, FSPV first, BSPV first.
    assert runner.asked == ["trace-bspv", "trace-fspv-off", "trace-fspv-off-2",
                            "trace-bspv-2", "trace-bspv-3", "trace-fspv-off-3"]


def test_a_short_row_split_around_1_runs_the_most_pairs_and_says_undecided(
        tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.2, 0.8, 1.0, 1.25, 0.75])
    m = horizons.measure(runner, "kmeans", repeat=2, most=5)
    # A level pair (1.0) is on neither side: 2 above, 2 below after 5 pairs.
    assert ratios_of(m) == [1.2, 0.8, 1.0, 1.25, 0.75] and m.undecided
    assert m.rows[0].ratio.value == pytest.approx(1.0)


def test_pairs_against_the_majority_do_not_stop_it_early(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [0.9, 1.2, 0.8, 0.85, 2.0])
    m = horizons.measure(runner, "kmeans", repeat=2, most=5)
    # 1 below, 1 above; 2 below; 3 below of the most 5: decided below at pair 4.
    assert ratios_of(m) == [0.9, 1.2, 0.8, 0.85] and not m.undecided
    assert m.rows[0].ratio.value < 1


def test_a_long_row_keeps_its_pairs_and_says_when_they_split(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.2, 0.8], reach_s=0.7)
    m = horizons.measure(runner, "kmeans", repeat=2, most=5)
    assert m.length_s == 2.0 and len(m.pairs) == 2 and m.undecided
    runner = scripted(tmp_path, [1.2, 1.3], reach_s=0.7)
    assert not horizons.measure(runner, "kmeans", repeat=2, most=5).undecided


def test_without_most_the_pairs_are_repeat_as_before(tmp_path: Path) -> None:
    runner = scripted(tmp_path, [1.2, 0.8])
    m = horizons.measure(runner, "kmeans", repeat=2)
    assert len(m.pairs) == 2 and m.undecided


def test_the_budget_stops_further_pairs(tmp_path: Path) -> None:
    # Each pair "took" 2 x 20 s: a third would take the two pairs' 80 s to 120 s.
    runner = scripted(tmp_path, [1.2, 0.8, 1.3], seconds=20.0)
    m = horizons.measure(runner, "kmeans", repeat=2, most=5, budget_s=110.0)
    assert len(m.pairs) == 2 and m.undecided
    # With room for one more pair (120 s), but not a fourth (160 s): three.
    runner = scripted(tmp_path, [1.2, 0.8, 1.3, 1.4], seconds=20.0)
    assert len(horizons.measure(runner, "kmeans", repeat=2, most=5,
                                budget_s=130.0).pairs) == 3


def test_side_counts_a_bound_only_where_its_whole_interval_is_on_one_side() -> None:
    assert [side(Ratio(v, q)) for v, q in [(1.5, ""), (1.5, ">"), (1.2, "<"), (0.9, "<"),
                                           (0.9, ">"), (1.0, ""), (math.nan, "?")]] \
        == [1, 1, 0, -1, 0, 0, 0]


def test_decided_needs_every_row_and_a_majority_of_the_most() -> None:
    def row(h: float, *ratios: float) -> MedianRow:
        return MedianRow(h, tuple(horizons.HorizonRow(
            h, 1.0, horizons.Time(r, True), horizons.Time(1.0, True)) for r in ratios))

    assert decided([row(0.2, 1.1, 1.2, 1.3)], 5)
    assert not decided([row(0.2, 1.1, 1.2)], 5)
    assert decided([row(0.2, 1.1, 1.2)], 3)
    assert not decided([row(0.2, 1.1, 1.2, 1.3), row(0.5, 1.1, 0.9, 1.3)], 5)
    assert decided([], 5)
