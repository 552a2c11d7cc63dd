"""Validation completeness (issue 13, item 6) and atomic output files (item 7).

A job that can never stop, a duplicate YAML key, a ``name`` that would leave ``output.dir``,
``--out`` onto an existing run, and a user algorithm without the API are refused by
``flegel validate`` / ``flegel run`` with one message and exit code 2; model and summary files
are replaced atomically.  All in-process (no MPI).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.cli.commands import main
from flegel.job.validate import load_job
from flegel.rundir.writer import (
    RUN_FILES,
    RunDirError,
    atomic_path,
    claim_run_dir,
    default_run_dir,
    save_npz_atomic,
    write_json_atomic,
)
from tests.conftest import write_job

GOOD: dict[str, Any] = {
    "algorithm": "kmeans", "params": {"n_clusters": 2},
    "data": {"source": "synthetic", "kind": "blobs", "n_points": 200, "n_features": 2},
    "workers": 2, "output": {"progress": "none"}}


def _validate(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["validate", str(path), *args])
    captured = capsys.readouterr()
    return code, captured.err


def _refused(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, err = _validate(path, capsys, *args)
    assert code == 2, err
    assert err.count("flegel: error:") == 1 and "Traceback" not in err
    assert str(path) in err
    return err


# ------------------------------------------------------------------- a job that never stops
@pytest.mark.parametrize("stop, found", [
    ({"max_iterations": None, "tolerance": None}, "found every stop key null"),
    ({"max_iterations": None, "tolerance": None, "target_objective": 1.0},
     "found only target_objective: 1.0"),
])
def test_a_job_that_can_never_stop_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              stop: dict, found: str) -> None:
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "stop": stop})
    err = _refused(path, capsys)
    assert "stop: expected at least one of stop.max_iterations, stop.max_time_s, " \
           "stop.tolerance" in err
    assert err.rstrip().endswith(found)


@pytest.mark.parametrize("stop", [
    {"max_iterations": None, "tolerance": None, "max_time_s": 5},
    {"max_iterations": None, "tolerance": 1e-3, "target_objective": 1.0},
    {"max_iterations": 3, "tolerance": None},
])
def test_any_ending_stop_key_is_enough(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       stop: dict) -> None:
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "stop": stop})
    assert _validate(path, capsys)[0] == 0


def test_stop_keys_nulled_on_the_command_line_are_refused_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_job(tmp_path / "job.yaml", **GOOD)
    err = _refused(path, capsys, "--set", "stop.max_iterations=null",
                   "--set", "stop.tolerance=null")
    assert "every stop key null" in err


# ------------------------------------------------------------------- duplicate YAML keys
def test_duplicate_keys_name_the_key_and_both_lines(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("algorithm: kmeans\n"          # 1
                    "params: {n_clusters: 2}\n"    # 2
                    "data:\n"                      # 3
                    "  source: synthetic\n"        # 4
                    "  kind: blobs\n"              # 5
                    "  n_points: 100\n"            # 6
                    "stop:\n"                      # 7
                    "  max_iterations: 5\n"        # 8
                    "  tolerance: null\n"          # 9
                    "  max_iterations: 50\n")      # 10
    err = _refused(path, capsys)
    assert "stop.max_iterations: duplicate key, given at line 8 and again at line 10" in err


def test_duplicate_keys_inside_lists_and_at_the_top(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("algorithm: kmeans\nstragglers:\n  - pattern: injected\n    workers: [1]\n"
                    "    workers: [2]\nalgorithm: gmm\n")
    err = _refused(path, capsys)
    assert "stragglers[0].workers: duplicate key, given at line 4 and again at line 5" in err
    path.write_text("workers: 2\nalgorithm: kmeans\nworkers: 3\n")
    assert "workers: duplicate key, given at line 1 and again at line 3" in _refused(path, capsys)


def test_anchors_and_merge_keys_are_not_duplicates(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("algorithm: kmeans\nparams: {n_clusters: 2}\nworkers: 2\n"
                    "data: &d {source: synthetic, kind: blobs, n_points: 100}\n"
                    "test_data:\n  <<: *d\n  n_points: 50\n")
    assert _validate(path, capsys)[0] == 0


# ------------------------------------------------------------------- nothing outside output.dir
@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", "x..y", "back\\slash"])
def test_name_may_not_leave_the_output_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           name: str) -> None:
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "name": name})
    err = _refused(path, capsys)
    assert "name: expected a name without '/', '\\' or '..'" in err


def test_default_run_dir_is_a_new_child_of_output_dir(tmp_path: Path) -> None:
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "name": "trial.1",
                                                 "output": {"dir": str(tmp_path / "runs")}})
    job = load_job(path)
    out = default_run_dir(job)
    assert out.parent == tmp_path / "runs" and out.name.startswith("trial.1-bsp-")
    assert not out.exists()
    # The guard holds even for a name that bypassed validation.
    with pytest.raises(RunDirError, match="expected a directory inside output.dir"):
        default_run_dir(dataclasses.replace(job, name="../../escaped"))


# ------------------------------------------------------------------- --out and --force
def test_out_onto_an_existing_run_is_refused_without_force(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = write_job(tmp_path / "job.yaml", **GOOD)
    old = tmp_path / "run"
    old.mkdir()
    (old / "summary.json").write_text("{}")
    (old / "notes.txt").write_text("mine")
    code = main(["run", str(job), "--out", str(old)])  # refused before any MPI launch
    err = capsys.readouterr().err
    assert code == 2 and err.count("flegel: error:") == 1
    assert f"--out {old}: expected a new run directory, found an existing run " \
           "(summary.json); pass --force to overwrite it" in err
    assert (old / "summary.json").read_text() == "{}"


def test_claim_run_dir(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    claim_run_dir(fresh, force=False)  # a new directory: nothing to check
    fresh.mkdir()
    (fresh / "job.in.yaml").write_text("a job kept beside the runs")
    claim_run_dir(fresh, force=False)  # a folder without run files is not a run
    old = tmp_path / "old"
    old.mkdir()
    for f in RUN_FILES:
        (old / f).write_text("old")
    (old / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError):
        claim_run_dir(old, force=False)
    claim_run_dir(old, force=True)  # --force: the old run's files go, nothing else
    assert sorted(p.name for p in old.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="expected a directory for the run, found a file"):
        claim_run_dir(tmp_path / "file", force=True)


# ------------------------------------------------------------------- the user's algorithm
_HALF = """\
from flegel import Algorithm
from pathlib import Path

Path(__file__).with_name("imported.marker").write_text("top-level code ran")


class Half(Algorithm):
    def init_parameter(self, info):
        return {}

    def updateDataPoint(self, point, state, theta, t):
        return {"objective": 0.0}
"""


def test_user_algorithm_without_the_api_is_refused(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "half_algo.py").write_text(_HALF)
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "algorithm": "half_algo:Half",
                                                 "params": {}})
    err = _refused(path, capsys)
    # updateDataPoint (camelCase) counts for update_data_point; the other two are missing.
    assert "algorithm: half_algo:Half does not implement update_parameter; evaluate" in err
    # Documented: validate imports the module, so its top-level code runs.
    assert (tmp_path / "imported.marker").read_text() == "top-level code ran"


def test_user_algorithm_with_an_unknown_label_kind_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _HALF.replace("    def init_parameter", "    label_kind = 'ordinal'\n\n"
                         "    def update_parameter(self, agg, theta):\n        return theta\n\n"
                         "    def evaluate(self, theta, block):\n        return 0.0\n\n"
                         "    def init_parameter")
    (tmp_path / "odd_algo.py").write_text(code)
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "algorithm": "odd_algo:Half",
                                                 "params": {}})
    err = _refused(path, capsys)
    assert "algorithm: odd_algo:Half: Half.label_kind must be one of 'any', 'classes', " \
           "'real', found 'ordinal'" in err


def test_user_algorithm_not_a_subclass_or_missing(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plain_algo.py").write_text("class Plain:\n    pass\n")
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "algorithm": "plain_algo:Plain"})
    assert "has no flegel.Algorithm subclass 'Plain'" in _refused(path, capsys)
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "algorithm": "plain_algo:Nothing"})
    assert "has no flegel.Algorithm subclass 'Nothing'" in _refused(path, capsys)


# ------------------------------------------------------------------- atomic files
def test_atomic_path_replaces_or_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text('{"v": 2, "half')
        raise RuntimeError("killed while writing")
    assert json.loads(target.read_text()) == {"v": 1}
    write_json_atomic(target, {"v": np.int64(3)})
    assert json.loads(target.read_text()) == {"v": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temp left


def test_save_npz_atomic_keeps_the_name_and_the_old_model_on_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "model.npz"
    save_npz_atomic(target, {"centers": np.arange(6.0).reshape(3, 2)})
    with np.load(target) as z:
        assert z["centers"].shape == (3, 2)

    def broken(f: Any, **arrays: Any) -> None:
        f.write(b"PK\x03\x04 half an archive")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        save_npz_atomic(target, {"centers": np.zeros((3, 2))})
    monkeypatch.undo()
    with np.load(target) as z:
        assert np.array_equal(z["centers"], np.arange(6.0).reshape(3, 2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]
