"""``flegel report`` and ``flegel compare``'s table.

Most tests write a small ``events.jsonl`` and ``summary.json`` like a run's (FSP barrier
events with per-worker ``passes``, ``delta_f`` and, with migration, ``held``/``in_flight``)
and check the figures the report computes and the PNGs it writes.  The tests marked ``mpi``
report on real runs: one FSPV run with an exact trace and one ASP run (push events), each
made once under ``mpirun`` for the whole module.
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from flegel.cli import report
from flegel.cli.commands import main as cli_main
from flegel.cli.compare import model_sets, row_figures, table
from flegel.job.validate import load_job
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


def _embedded_pngs(page: str) -> list[bytes]:
    """The PNGs embedded in an HTML page; fails if the page refers to any file beside it."""
    sources = re.findall(r'src="([^"]*)"', page) + re.findall(r'href="([^"#]*\.(?:png|css|js))"',
                                                              page)
    assert all(s.startswith("data:image/png;base64,") for s in sources), sources
    pngs = [base64.b64decode(s.split(",", 1)[1]) for s in sources]
    assert all(p[:8] == PNG_MAGIC for p in pngs)
    return pngs


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
    assert report.worker_intervals(ev) == {}


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
    # An overview page, and each run's own page, both self-contained.
    for page in ("report.html", "report-off.html", "report-on.html"):
        assert _embedded_pngs((out / page).read_text()), page
    assert 'href="report-on.html"' in (out / "report.html").read_text()
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
    for preset, mode in (("fspv", "async"), ("fspv-off", "off"), ("fspv-async", "async"),
                         ("fspv-sync", "sync"), ("fspb-async", "async"), ("fspb-off", "off")):
        # The user's own migration keys add to the preset's instead of replacing them.
        sync = load_job(job, ["sync.migration.window=256"] + model_sets(preset)).sync.options
        assert sync["model"] == "fsp"
        assert sync["interval"] == ("binary" if preset.startswith("fspb") else "multistage")
        assert sync["migration"]["mode"] == mode
        assert sync["migration"]["window"] == 256
    bsp = load_job(job, model_sets("bspb")).sync.options
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


# ------------------------------------------------------------------ the exact trace

def test_exact_trace_reads_the_summary_and_falls_back_to_the_final_objective() -> None:
    trace = {"objective_trace": [[0.1, 9.0], [0.2, 7.0], [0.3, 6.5]], "final_objective": 6.5,
             "wall_time_s": 0.3}
    assert report.exact_trace(trace) == ([0.1, 0.2, 0.3], [9.0, 7.0, 6.5])
    assert report.exact_trace({"final_objective": 4.0, "wall_time_s": 2.0}) == ([2.0], [4.0])
    assert report.exact_trace({}) == ([], [])


def test_exact_during_run_splits_evaluations_from_estimates() -> None:
    summary = {"exact_objective": {"evaluations": 3, "trace": [
        {"time_s": 0.1, "objective": 9.0, "exact": True},
        {"time_s": 0.2, "objective": 8.5, "exact": False},
        {"time_s": 0.3, "objective": 7.0, "exact": True}]}}
    exact, estimate = report.exact_during_run(summary)
    assert exact == ([0.1, 0.3], [9.0, 7.0]) and estimate == ([0.2], [8.5])
    assert report.exact_during_run({}) == (([], []), ([], []))


def test_binned_shares_spread_each_stretch_over_its_bins() -> None:
    # One stretch of 0..4 s with 2 s of compute, over 4 bins of 1 s: half of each bin.
    bins = report.binned_shares([(0.0, 4.0, 2.0)], 4, 4.0)
    assert [b[0] for b in bins] == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert [b[1] for b in bins] == pytest.approx([0.5] * 4)
    assert [b[2] for b in bins] == pytest.approx([0.5] * 4)
    # A worker with nothing in a bin leaves it empty (no compute, no wait).
    bins = report.binned_shares([(2.0, 3.0, 1.0)], 4, 4.0)
    # Flat floats: pytest 9 refuses approx on nested sequences (a list of tuples).
    assert [v for _, c, w in bins for v in (c, w)] == pytest.approx([0, 0, 0, 0, 1, 0, 0, 0])


# ------------------------------------------------------------------ real runs under mpirun

@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An FSPV run (exact trace, one slowed worker, more iterations than the timeline draws
    one by one) and an ASP run (push events), each made once under mpirun."""
    from tests.conftest import mpirun, write_job

    base = tmp_path_factory.mktemp("report-runs")
    job = write_job(
        base / "job.yaml", algorithm="kmeans", params={"n_clusters": 4},
        data={"source": "synthetic", "kind": "blobs", "n_points": 4000, "n_features": 4,
              "centers": 4, "seed": 1},
        workers=2, sync={"model": "fspv"},
        stop={"max_iterations": report.TIMELINE_MAX_INTERVALS + 60, "tolerance": None},
        stragglers=[{"pattern": "injected", "tau_ms": 1, "every": 2000, "workers": [1]}],
        output={"trace_points": 12, "progress": "none"})
    runs = {"fspv": base / "fspv", "asp": base / "asp"}
    mpirun(job, 2, runs["fspv"])
    mpirun(job, 2, runs["asp"], "sync.model=asp", "stop.max_iterations=120",
           "stragglers=[]")
    return runs


@pytest.mark.mpi
def test_real_run_page_is_self_contained_with_the_exact_objective(real_runs: dict[str, Path],
                                                                  capsys: Capsys) -> None:
    pytest.importorskip("matplotlib")
    run = real_runs["fspv"]
    assert cli_main(["report", str(run)]) == 0
    s = _summary_of(run)
    page = (run / "report.html").read_text()
    pngs = _embedded_pngs(page)
    names = ("objective", "timeline", "passes", "passes_time", "delta_f")
    if (run / "held.png").exists():  # FSP migrates by default: points held over time
        names += ("held",)
    assert len(pngs) == len(names)
    for name in names:
        assert (run / f"{name}.png").read_bytes() in pngs, name
    # The page leads with the exact final objective, and labels the online one as such.
    assert f"{s['final_objective']:.6g}" in page
    assert "online objective (per-point losses as last seen)" in page
    assert "slowed (injected)" in page
    assert "job.yaml" in page and "n_clusters: 4" in page
    # The objective evaluated during the run (what the progress line showed) is on the page.
    (times, values), _ = report.exact_during_run(s)
    assert times and values[-1] == pytest.approx(s["final_objective"], rel=1e-6)
    assert "exact evaluations during the run" in page
    assert str(run / "report.html") in capsys.readouterr().out


@pytest.mark.mpi
def test_real_exact_trace_ends_on_the_final_objective(real_runs: dict[str, Path]) -> None:
    s = _summary_of(real_runs["fspv"])
    times, values = report.exact_trace(s)
    assert len(times) > 2
    assert times == sorted(times)
    assert times[-1] == pytest.approx(s["wall_time_s"], abs=1e-5)
    assert values[-1] == pytest.approx(s["final_objective"])


@pytest.mark.mpi
def test_real_timeline_covers_the_whole_run_binned(real_runs: dict[str, Path]) -> None:
    ev = report._events(real_runs["fspv"])
    barriers = report.barrier_events(ev)
    assert len(barriers) > report.TIMELINE_MAX_INTERVALS  # the old timeline stopped here
    intervals = report.worker_intervals(ev)
    assert sorted(intervals) == [1, 2]
    end = barriers[-1]["time_s"]
    for iv in intervals.values():
        assert len(iv) == len(barriers) and iv[-1][1] == end
        bins = report.binned_shares(iv, report.TIMELINE_BINS, end)
        width = end / report.TIMELINE_BINS
        # Binning keeps every second of compute, and no bin holds more than its width.
        assert sum(c for _, c, _ in bins) == pytest.approx(sum(c for *_, c in iv))
        assert all(c + w <= width * (1 + 1e-9) for _, c, w in bins)


@pytest.mark.mpi
def test_real_passes_over_time_for_barrier_and_push_models(real_runs: dict[str, Path],
                                                           capsys: Capsys) -> None:
    pytest.importorskip("matplotlib")
    for name, slack in (("fspv", 1e-9), ("asp", 1.0)):
        run = real_runs[name]
        series = report.worker_series(report._events(run), "passes")
        final = {w["rank"]: w["passes"] for w in _summary_of(run)["per_worker"]}
        assert sorted(series) == sorted(final)
        for rank, (_, values) in series.items():
            # The last event a worker logged is at most the pass it finished after it.
            # (Events round passes to 4 decimals, either way: ±5e-5.)
            assert final[rank] - slack - 5e-5 <= values[-1] <= final[rank] + 5e-5
    out = real_runs["asp"].parent / "asp-report"
    assert cli_main(["report", str(real_runs["asp"]), "--out", str(out)]) == 0
    for png in ("objective", "timeline", "passes", "passes_time"):
        assert _is_png(out / f"{png}.png"), png
    assert not (out / "delta_f.png").exists()  # push models report no Δf per barrier
    assert "no sum of delta_f per worker" in capsys.readouterr().out


@pytest.mark.mpi
def test_report_of_a_compare_folder_overlays_its_runs(real_runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    folder = tmp_path / "compare"
    folder.mkdir()
    rows = [{"sync": name, "stragglers": "none", "dir": str(path)}
            for name, path in real_runs.items()]
    (folder / "compare.json").write_text(json.dumps({"target": 1.0, "runs": rows}))
    assert cli_main(["report", str(folder)]) == 0  # the pictures go to the compare folder
    overview = (folder / "report.html").read_text()
    assert "fspv / none" in overview and "asp / none" in overview
    for page in ("report-fspv_none.html", "report-asp_none.html"):
        assert len(_embedded_pngs((folder / page).read_text())) >= 4
    # A compare.json naming a run that is nowhere is refused by name.
    (folder / "compare.json").write_text(json.dumps({"runs": [
        {"sync": "bsp", "stragglers": "none", "dir": str(tmp_path / "gone")}]}))
    assert cli_main(["report", str(folder)]) == 2


# ------------------------------------------------------------ plots at a glance (issue 22)
def test_objective_frame_fits_the_exact_values_and_clips_the_online_curve():
    pytest.importorskip("matplotlib")
    from flegel.cli.report import _clip_online, _objective_limits, _pyplot

    lo, hi = _objective_limits([100.0, 90.0, 80.0, float("nan")])
    assert lo == pytest.approx(78.8) and hi == pytest.approx(101.2)  # 6 % of the range
    fig, ax = _pyplot().subplots()
    # the online sum starts at 0 (below) and overshoots once (above): both on the edges
    assert _clip_online(ax, [0, 1, 2, 3], [0.0, 95.0, 150.0, 85.0], (lo, hi), "C0")
    line, *marks = ax.lines
    assert min(line.get_ydata()) == lo and max(line.get_ydata()) == hi
    assert sorted(m.get_marker() for m in marks) == ["^", "v"]
    assert not _clip_online(ax, [0, 1], [85.0, 84.0], (lo, hi), "C1")
    _pyplot().close(fig)


def test_eight_runs_get_eight_looks():
    from flegel.cli.report import _run_style

    looks = [_run_style(i, 8) for i in range(8)]
    assert len({c for c, _ in looks}) == 8 and len({m for _, m in looks}) == 8
    assert len({(str(c), m) for c, m in (_run_style(i, 20) for i in range(20))}) == 20
