"""bench/fsp_timeline.py: a horizon run read back barrier by barrier (issue 19)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def timeline() -> ModuleType:
    return load_bench("fsp_timeline")


def write_run(folder: Path, barriers: list[tuple[float, list[int], list[str]]],
              trace: list[tuple[float, float]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(
        json.dumps({"t": i + 1, "time_s": t, "workers": {"points": p, "reason": r}}) + "\n"
        for i, (t, p, r) in enumerate(barriers)))
    (folder / "summary.json").write_text(json.dumps({"objective_trace": trace}))
    return folder


def test_iterations_time_and_cut_passes_to_the_target(timeline, tmp_path):
    run = write_run(tmp_path / "runs" / "kmeans-strided-trace-fspv-off-abc", [
        (0.010, [100, 100], ["pass", "pass"]),
        (0.020, [100, 60], ["pass", "timer"]),
        (0.040, [100, 100], ["pass", "pass"]),
        (0.050, [100, 90], ["pass", "signal"])],
        [(0.0099, 9.0), (0.0199, 5.0), (0.0399, 2.0), (0.0499, 1.0)])
    out = timeline.to_target(run, 2.0)
    assert out["its"] == 3
    assert out["ms_per_it"] == pytest.approx(40.0 / 3)
    assert out["cal_ms"] == pytest.approx(10.0)
    assert out["cut"] == ["2:timer"]  # the cut at barrier 4 came after the target
    assert timeline.to_target(run, 0.5)["its"] is None
    assert timeline.run_dir(tmp_path, "kmeans", "fspv-off") == run
    assert out["warm_ms"] is None  # no compute_s / barrier_s recorded
    # fsp_claims.py's later pairs in the same folder: tagged after the sync.
    second = (tmp_path / "runs" / "kmeans-strided-trace-fspv-off-2-d4bbc7")
    second.mkdir()
    assert timeline.run_dir(tmp_path, "kmeans", "fspv-off", pair=2) == second
    assert timeline.run_dir(tmp_path, "kmeans", "fspv-off") == run


def test_warm_pass_and_barrier(timeline, tmp_path):
    """``warm``: the median slowest worker's time of the iterations after the first three;
    ``bar``: their median barrier."""
    run = tmp_path / "run"
    run.mkdir()
    computes = [[0.030, 0.040], [0.010, 0.020], [0.002, 0.003], [0.002, 0.001],
                [0.004, 0.002], [0.001, 0.003]]
    barriers = [0.005, 0.004, 0.003, 0.006, 0.008, 0.007]
    (run / "events.jsonl").write_text("".join(
        json.dumps({"t": i + 1, "time_s": 0.01 * (i + 1), "barrier_s": b,
                    "workers": {"points": [10, 10], "reason": ["pass", "pass"],
                                "compute_s": c}}) + "\n"
        for i, (c, b) in enumerate(zip(computes, barriers))))
    (run / "summary.json").write_text(json.dumps({"objective_trace": [[0.06, 1.0]]}))
    out = timeline.to_target(run, 1.0)
    assert out["warm_ms"] == pytest.approx(3.0)  # max of [2, 1], [4, 2], [1, 3]: 2, 4, 3
    assert out["bar_ms"] == pytest.approx(7.0)


def test_no_warm_pass_within_three_barriers(timeline, tmp_path):
    """A run of three barriers has no iteration after the first three: no ``warm`` nor
    ``bar``, not the calibration's cold pass read as a warm one."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text("".join(
        json.dumps({"t": i + 1, "time_s": 0.01 * (i + 1), "barrier_s": 0.005,
                    "workers": {"points": [10, 10], "reason": ["pass", "pass"],
                                "compute_s": [0.030, 0.040]}}) + "\n"
        for i in range(3)))
    (run / "summary.json").write_text(json.dumps({"objective_trace": [[0.03, 1.0]]}))
    out = timeline.to_target(run, 1.0)
    assert out["its"] == 3
    assert out["warm_ms"] is None and out["bar_ms"] is None


def test_main_reads_each_rows_pair(timeline: ModuleType, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """fsp_claims.py's --json names each row's pair: with pair 1 failed, the first
    horizon's rows are pairs 2 and 3, read from their own runs (not the 1st and 2nd)."""
    for k in (2, 3):
        for sync in ("bspv", "fspv-off"):
            write_run(tmp_path / "horizons" / "runs" / f"kmeans-strided-trace-{sync}-{k}-abc",
                      [(0.010 * k, [100, 100], ["pass", "pass"])], [(0.010 * k - 1e-4, 1.0)])
    rows = [{"horizon_s": 0.2, "pairs": [
        {"pair": k - 1, "target": 2.0, "ratio": 1.0, "order": "bspv-fspv"} for k in (2, 3)]}]
    figures = tmp_path / "f.json"
    figures.write_text(json.dumps({"horizons": {"kmeans": {"rows": rows}}}))
    monkeypatch.setattr(sys, "argv", ["fsp_timeline.py", str(tmp_path), str(figures)])
    timeline.main()
    out = capsys.readouterr().out
    assert "kmeans #2" in out and "kmeans #3" in out and "kmeans #1" not in out


def test_steps_up_to_the_target(timeline: ModuleType, tmp_path: Path) -> None:
    """``--steps``: each θ update up to the target, split into the slowest worker's time, the
    reports' spread and the master's part (issue 19, Fig. 8)."""
    run = tmp_path / "run"
    run.mkdir()
    barriers = [(0.010, [0.004, 0.006], 0.003, 0.002), (0.022, [0.002, 0.009], 0.005, 0.001),
                (0.030, [0.002, 0.002], 0.001, 0.0005), (0.041, [0.003, 0.002], 0.002, 0.001)]
    (run / "events.jsonl").write_text("".join(
        json.dumps({"t": i + 1, "time_s": t, "barrier_s": bar, "spread_s": spread,
                    "workers": {"compute_s": comp}}) + "\n"
        for i, (t, comp, bar, spread) in enumerate(barriers)))
    (run / "summary.json").write_text(json.dumps(
        {"objective_trace": [[0.0099, 9.0], [0.0219, 5.0], [0.0299, 2.0], [0.0409, 1.0]]}))
    st = timeline.steps(run, 2.0)
    # Up to the barrier whose snapshot reached 2.0 (the third), no further.
    assert [round(x["at"], 3) for x in st] == [10.0, 22.0, 30.0]
    assert [round(x["comp"], 3) for x in st] == [6.0, 9.0, 2.0]
    assert [round(x["spread"], 3) for x in st] == [2.0, 1.0, 0.5]
    assert [round(x["master"], 3) for x in st] == [1.0, 4.0, 0.5]
    # Never reached: every update of the run.
    assert len(timeline.steps(run, 0.5)) == 4


def test_steps_reads_older_runs_and_finds_the_barrier_as_to_target(
        timeline: ModuleType, tmp_path: Path) -> None:
    """Events without ``compute_s`` (an older run) give NaN, not a KeyError; the snapshot's
    barrier is the nearest event, by the rule ``to_target`` counts iterations with."""
    run = write_run(tmp_path / "run", [(0.010, [100], ["pass"]), (0.020, [100], ["pass"]),
                                       (0.030, [100], ["pass"])],
                    [(0.0098, 3.0), (0.0201, 2.0), (0.0299, 1.0)])
    st = timeline.steps(run, 2.0)
    assert [round(x["at"], 3) for x in st] == [10.0, 20.0]
    assert all(x["comp"] != x["comp"] for x in st)  # NaN
    assert len(st) == timeline.to_target(run, 2.0)["its"] == 2
