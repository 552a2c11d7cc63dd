"""``flegel report`` and ``flegel compare``'s table, in process, on synthetic run folders.

Each test writes a small ``events.jsonl`` and ``summary.json`` like a run's (FSP barrier
events with per-worker ``passes``, ``delta_f`` and, with migration, ``held``/``in_flight``)
and checks the figures the report computes and the PNGs it writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flegel import report
from flegel.cli import main as cli_main
from flegel.compare import model_sets, row_figures, table
from flegel.config import load_job
from flegel.sync import PRESETS

#: pytest's fixture of captured output.
Capsys = pytest.CaptureFixture[str]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(path: Path, *, migration: bool, slowed: int | None = 1,
             barriers: bool = True) -> Path:
    """A run folder: 3 workers, 5 barriers, worker ``slowed`` behind; with ``migration``
    worker 1 sends 30 points to worker 3 over the barriers."""
    path.mkdir(parents=True)
    ranks = [1, 2, 3]
    lines = []
    for t in range(1, 6):
        ev: dict[str, Any] = {"t": t, "time_s": 0.1 * t, "objective": 100.0 / t,
                              "barrier_s": 0.001, "spread_s": 0.0005}
        if barriers:
            workers: dict[str, Any] = {
                "rank": ranks, "points": [10, 40, 40],
                "compute_s": [0.05, 0.05, 0.05], "wait_s": [0.0, 0.0, 0.0],
                "passes": [0.1 * t, 0.4 * t, 0.5 * t],
                "delta_f": [-1.0 * t, -2.0, 0.5],
                "reason": ["timer"] * 3}
            if migration:
                workers["held"] = [100 - 6 * t, 100, 100 + 6 * t]
                workers["in_flight"] = [6 if t < 5 else 0, 0, 0]
            ev["workers"] = workers
        lines.append(json.dumps(ev))
    # A non-barrier event in between (push models log such records): ignored.
    lines.insert(2, json.dumps({"t": 0, "time_s": 0.25, "objective": 40.0}))
    (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    summary: dict[str, Any] = {
        "per_worker": [{"rank": r, "n_points": 100, "passes": p}
                       for r, p in zip(ranks, [0.5, 2.0, 2.5])],
        "stragglers": [] if slowed is None else [{"rank": slowed, "pattern": "injected"}],
        "point_passes": {"min": 0, "mean": 1.7, "max": 3},
    }
    if migration:
        summary["per_worker"][0]["n_points"] = 70
        summary["per_worker"][2]["n_points"] = 130
        summary["migration"] = {"mode": "async", "rounds": 2, "points_moved": 30,
                                "bytes_moved": 720, "bytes_fraction": 0.1,
                                "state_bytes": 240, "reactivated": 0, "round_log": []}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def _is_png(path: Path) -> bool:
    return path.exists() and path.read_bytes()[:8] == PNG_MAGIC


# ------------------------------------------------------------------ the figures

def test_worker_series_reads_every_barrier_per_rank(tmp_path: Path) -> None:
    ev = report._events(make_run(tmp_path / "r", migration=True))
    passes = report.worker_series(ev, "passes")
    assert sorted(passes) == [1, 2, 3]
    times, values = passes[1]
    assert times == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])  # the non-barrier event skipped
    assert values == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert passes[3][1][-1] == pytest.approx(2.5)
    held = report.worker_series(ev, "held")
    assert held[1][1] == [94, 88, 82, 76, 70] and held[3][1][-1] == 130
    # Held points are conserved at every barrier in this synthetic run.
    assert all(sum(held[r][1][i] for r in held) == 300 for i in range(5))
    # A column that no barrier has gives nothing.
    assert report.worker_series(ev, "no_such_column") == {}


def test_delta_f_per_worker_sums_each_workers_changes(tmp_path: Path) -> None:
    ev = report._events(make_run(tmp_path / "r", migration=False))
    sums = report.delta_f_per_worker(ev)
    assert sums == pytest.approx({1: -(1 + 2 + 3 + 4 + 5), 2: -10.0, 3: 2.5})
    assert list(sums) == [1, 2, 3]
    # Without migration the events carry no held column.
    assert report.worker_series(ev, "held") == {}


def test_runs_without_barrier_events_have_no_worker_figures(tmp_path: Path) -> None:
    ev = report._events(make_run(tmp_path / "r", migration=False, barriers=False))
    assert report.barrier_events(ev) == []
    assert report.worker_series(ev, "passes") == {}
    assert report.delta_f_per_worker(ev) == {}
    assert report.describe(tmp_path / "r") == ""


def test_describe_prints_passes_delta_f_held_and_migration(tmp_path: Path) -> None:
    text = report.describe(make_run(tmp_path / "r", migration=True))
    lines = text.splitlines()
    row1 = next(ln for ln in lines if ln.split()[:1] == ["1"])
    assert row1.split()[:3] == ["1", "0.50", "-15"]
    assert "94 -> 70" in row1 and "(slowed)" in row1
    row3 = next(ln for ln in lines if ln.split()[:1] == ["3"])
    assert "106 -> 130" in row3 and "(slowed)" not in row3
    assert "migration async: 30 points moved in 2 rounds, 10.0% of the data's bytes" in text
    assert "passes per point: min 0, mean 1.70, max 3" in text


def test_run_labels_tell_runs_of_the_same_name_apart(tmp_path: Path) -> None:
    runs = [tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "c"]
    assert report.run_labels(runs) == ["a/run", "b/run", "c"]
    assert report.run_labels(runs[1:]) == ["run", "c"]


# ------------------------------------------------------------------ the pictures

def test_report_with_and_without_migration_writes_every_png(tmp_path: Path, capsys: Capsys) -> None:
    pytest.importorskip("matplotlib")
    off = make_run(tmp_path / "off", migration=False)
    on = make_run(tmp_path / "on", migration=True)
    out = tmp_path / "pics"
    assert cli_main(["report", str(off), str(on), "--out", str(out)]) == 0
    for name in ("objective", "timeline", "passes", "passes_time", "delta_f", "held"):
        assert _is_png(out / f"{name}.png"), name
    printed = capsys.readouterr().out
    assert str(out / "passes_time.png") in printed
    assert "migration async: 30 points moved" in printed


def test_report_without_migration_skips_points_held(tmp_path: Path, capsys: Capsys) -> None:
    pytest.importorskip("matplotlib")
    run = make_run(tmp_path / "run", migration=False, slowed=None)
    assert cli_main(["report", str(run)]) == 0  # PNGs go to the run folder itself
    for name in ("objective", "timeline", "passes", "passes_time", "delta_f"):
        assert _is_png(run / f"{name}.png"), name
    assert not (run / "held.png").exists()
    assert "no points held over time" in capsys.readouterr().out


def test_report_of_a_push_run_draws_the_objective_only(tmp_path: Path, capsys: Capsys) -> None:
    pytest.importorskip("matplotlib")
    run = make_run(tmp_path / "run", migration=False, barriers=False)
    assert cli_main(["report", str(run)]) == 0
    assert _is_png(run / "objective.png")
    assert not (run / "timeline.png").exists() and not (run / "delta_f.png").exists()
    out = capsys.readouterr().out
    assert "no timeline" in out and "no passes over time" in out


def test_report_rejects_a_folder_that_is_not_a_run(tmp_path: Path, capsys: Capsys) -> None:
    assert cli_main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_report_without_matplotlib_says_so_in_one_line(tmp_path: Path, capsys: Capsys,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    run = make_run(tmp_path / "run", migration=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    assert cli_main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err == f"flegel: error: {report.PLOT_HINT}\n"
    assert not (run / "objective.png").exists()


# ------------------------------------------------------------------ compare

def test_migration_presets_select_fsp_with_each_mode(tmp_path: Path) -> None:
    assert PRESETS["fspv-async"]["migration"] == {"mode": "async"}
    assert PRESETS["fspv-sync"]["migration"] == {"mode": "sync"}
    job = tmp_path / "job.yaml"
    job.write_text("algorithm: kmeans\nparams: {n_clusters: 3}\n"
                   "data: {source: synthetic, kind: blobs, n_points: 1000, n_features: 2}\n"
                   "workers: 2\nsync: {model: bsp, batch: auto}\n")
    assert model_sets("fspv") == ["sync.model=fspv"]
    assert model_sets("fspv-async") == ["sync.model=fspv-async", 'sync.migration.mode="async"']
    for preset, mode in (("fspv", "off"), ("fspv-async", "async"), ("fspv-sync", "sync"),
                         ("fspb-async", "async")):
        # The user's own migration keys add to the preset's instead of replacing them.
        sync = load_job(job, ["sync.migration.window=256"] + model_sets(preset))["sync"]
        assert sync["model"] == "fsp"
        assert sync["interval"] == ("binary" if preset.startswith("fspb") else "multistage")
        assert sync["migration"]["mode"] == mode
        assert sync["migration"]["window"] == 256
    bsp = load_job(job, model_sets("bspb"))["sync"]
    assert (bsp["model"], bsp["batch"]) == ("bsp", "full")


def _summary_of(run: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((run / "summary.json").read_text())
    return out


def test_compare_table_shows_migration_and_pass_spread(tmp_path: Path) -> None:
    off = row_figures(_summary_of(make_run(tmp_path / "off", migration=False)))
    on = row_figures(_summary_of(make_run(tmp_path / "on", migration=True)))
    assert off["migration"] is None
    assert on["migration"] == {"mode": "async", "rounds": 2, "points_moved": 30,
                               "bytes_fraction": 0.1}
    assert off["pass_spread"] == pytest.approx(2.0)  # 2.5 - 0.5
    assert off["point_passes"] == [0, 3]
    rows = [{"sync": name, "stragglers": "injected(workers=[1])", "time_to_target_s": t,
             "final_objective": 1.5, "iterations": 12, "barrier_ms": 0.5, **fig}
            for name, t, fig in (("fspv", 2.0, off), ("fspv-async", 1.0, on))]
    text = table(rows, ["fspv", "fspv-async"])
    head = next(ln for ln in text.splitlines() if "sync" in ln and "moved" in ln)
    assert "bytes %" in head and "spread" in head and "pt passes" in head
    line_off = next(ln for ln in text.splitlines() if ln.strip().startswith("fspv "))
    line_on = next(ln for ln in text.splitlines() if ln.strip().startswith("fspv-async "))
    assert line_on.split()[5:11] == ["2.00x", "1.00x", "30", "10.0", "2.0", "0-3"]
    assert line_off.split()[5:11] == ["1.00x", "0.50x", "-", "-", "2.0", "0-3"]
    assert line_on.endswith("0.5 2.0 2.5")
