"""Bad job files fail before any work with one clear message and exit code 2."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from flegel.cli.commands import main
from flegel.job.errors import JobError
from flegel.job.overrides import apply_overrides
from flegel.job.sections import DEFAULT_SYNC_MODEL, OUTPUT, RUNTIME, STOP
from flegel.job.validate import load_job
from tests.conftest import ROOT, child_env, write_job

GOOD = {"algorithm": "kmeans", "params": {"n_clusters": 3},
        "data": {"source": "synthetic", "kind": "blobs", "n_points": 1000, "n_features": 4,
                 "centers": 3, "seed": 0},
        "workers": 2, "sync": {"model": "bsp", "batch": "full"}}


def _bad(tmp_path, capsys, doc=None, text=None, sets=()):
    path = tmp_path / "job.yaml"
    if text is not None:
        path.write_text(text)
    else:
        write_job(path, **doc)
    code = main(["validate", str(path), *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 2
    assert str(path) in err or "job.yaml" in err
    assert "Traceback" not in err
    return err


def test_good_job_validates(tmp_path, capsys):
    path = write_job(tmp_path / "job.yaml", **GOOD)
    assert main(["validate", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("change, key, words", [
    ({"algorithm": "kmeens"}, "algorithm", "unknown algorithm"),
    ({"algorithm": "nosuchmodule:Thing"}, "algorithm", "cannot import"),
    ({"workers": 0}, "workers", "positive integer"),
    ({"workers": "four"}, "workers", "'four'"),
    ({"sync": {"model": "bspp"}}, "sync.model", "one of"),
    ({"sync": {"model": "bsp", "batchsize": 10}}, "sync.batchsize", "did you mean 'batch'"),
    ({"stop": {"max_iterations": -3}}, "stop.max_iterations", "positive integer"),
    ({"stop": {"tolerance": "small"}}, "stop.tolerance", "non-negative number"),
    ({"colour": "red"}, "colour", "unknown key"),
    ({"data": {"path": "missing.npy"}}, "data", "missing.npy"),
    ({"params": {"n_clusters": 0}}, "params", "n_clusters"),
    ({"params": {"n_clustrs": 3}}, "params", "n_clustrs"),
    ({"params": {"n_clusters": 3, "init": "nofile.npy"}}, "params", "nofile.npy"),
    ({"stragglers": [{"pattern": "injected", "workers": [7]}]}, "stragglers[0].workers",
     "between 1 and 2"),
    ({"stragglers": [{"pattern": "sleepy", "workers": [1]}]}, "stragglers[0].pattern",
     "one of"),
    ({"output": {"progress": "loud"}}, "output.progress", "'auto', 'plain' or 'none'"),
])
def test_bad_values(tmp_path, capsys, change, key, words):
    err = _bad(tmp_path, capsys, {**GOOD, **change})
    assert key in err and words in err


def test_missing_required_key(tmp_path, capsys):
    doc = dict(GOOD)
    del doc["data"]
    err = _bad(tmp_path, capsys, doc)
    assert "data" in err and "missing" in err


def test_bad_yaml_syntax(tmp_path, capsys):
    err = _bad(tmp_path, capsys, text="algorithm: kmeans\nparams: {n_clusters: 3\n")
    assert "invalid YAML" in err and "line" in err


def test_top_level_not_mapping(tmp_path, capsys):
    err = _bad(tmp_path, capsys, text="- just\n- a list\n")
    assert "mapping" in err


def test_missing_job_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_wrong_data_shape(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros(10))
    err = _bad(tmp_path, capsys, {**GOOD, "data": {"path": "x.npy"}})
    assert "x.npy" in err


def test_ragged_csv(tmp_path, capsys):
    (tmp_path / "x.csv").write_text("1,2,3\n4,5,6\n7,8\n")
    err = _bad(tmp_path, capsys, {**GOOD, "data": {"path": "x.csv"}})
    assert "x.csv" in err


def test_labels_required(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((10, 3)))
    err = _bad(tmp_path, capsys, {**GOOD, "algorithm": "logreg", "params": {},
                                   "data": {"path": "x.npy"}})
    assert "labelled" in err


def test_init_file_wrong_shape(tmp_path, capsys):
    np.save(tmp_path / "c.npy", np.zeros((5, 4)))
    err = _bad(tmp_path, capsys, {**GOOD, "params": {"n_clusters": 3, "init": "c.npy"}})
    assert "(5, 4)" in err


def test_bad_override(tmp_path, capsys):
    err = _bad(tmp_path, capsys, GOOD, sets=["sync.batch=-5"])
    assert "sync.batch" in err


def test_overrides_parse_yaml_values(tmp_path):
    doc = apply_overrides({"sync": {"model": "bsp"}, "stragglers": [{"tau_ms": 1}]},
                          ["sync.batch=500", "stop.tolerance=1e-3", "stragglers.0.tau_ms=32",
                           "params.init=random"], tmp_path / "j.yaml")
    assert doc["sync"]["batch"] == 500 and doc["stop"]["tolerance"] == 1e-3
    assert doc["stragglers"][0]["tau_ms"] == 32 and doc["params"]["init"] == "random"


def test_overrides_reach_the_job(tmp_path):
    path = write_job(tmp_path / "job.yaml", **GOOD)
    job = load_job(path, ["workers=3", "sync.batch=auto", "stop.max_iterations=7"])
    assert job.workers == 3 and job.sync.options["batch"] == "auto"
    assert job.stop.max_iterations == 7


def test_the_job_is_typed_once_from_its_declarations(tmp_path):
    """Each typed section has the declared keys, in order, with the values job.yaml holds."""
    doc = {k: v for k, v in GOOD.items() if k != "sync"}
    job = load_job(write_job(tmp_path / "job.yaml", **doc, stop={"max_time_s": 2.5}))
    for record, keys in ((job.stop, STOP), (job.output, OUTPUT), (job.runtime, RUNTIME)):
        assert [f.name for f in dataclasses.fields(record)] == list(keys)
    assert dataclasses.asdict(job.stop) == job.doc["stop"]
    assert job.stop.max_time_s == 2.5 and job.runtime.stall_timeout_s == "auto"
    assert job.output.dir == str(tmp_path / "runs")  # relative to the job file's folder
    assert job.sync.model == DEFAULT_SYNC_MODEL == job.doc["sync"]["model"]
    assert job.sync.options is job.doc["sync"]
    assert (job.workers, job.seed, job.params) == (2, 0, {"n_clusters": 3})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.workers = 3  # type: ignore[misc]


def test_run_cli_bad_job_exits_2_without_traceback(tmp_path):
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "workers": -1})
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(path)],
                          capture_output=True, text=True, timeout=60, env=child_env(),
                          cwd=ROOT)
    assert proc.returncode == 2
    assert "workers" in proc.stderr and "Traceback" not in proc.stderr


def test_job_error_message_format(tmp_path):
    err = JobError(tmp_path / "j.yaml", "sync.batch", "a positive integer", -1)
    assert str(err).endswith("sync.batch: expected a positive integer, found -1")


def test_switching_sync_model_drops_the_old_options(tmp_path):
    path = write_job(tmp_path / "job.yaml", **{**GOOD, "sync": {"model": "bsp", "batch": 50}})
    job = load_job(path, ["sync.eta_ms=5", "sync.model=fsp", "sync.interval=fixed"])
    assert job.sync.model == "fsp" and job.sync.options["eta_ms"] == 5
    assert "batch" not in job.sync.options
    job = load_job(path, ["sync.model=bsp"])  # same model: its options stay
    assert job.sync.options["batch"] == 50


# ----------------------------------------------------------------- YAML 1.1 words (issue 22)
_JOB_HEAD = """algorithm: kmeans
params: {n_clusters: 3}
data: {source: synthetic, kind: blobs, n_points: 500, n_features: 2, centers: 3, seed: 0}
workers: 2
"""


def _job_text(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(_JOB_HEAD + text)
    return path


def test_unquoted_off_validates_as_people_write_it(tmp_path, capsys):
    """The issue's two lines, unquoted: YAML 1.1 reads off as false, the loader keeps it."""
    path = _job_text(tmp_path, "sync: {model: fsp, migration: {mode: off}}\n"
                               "output: {progress: off}\n")
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    job = load_job(path)
    assert job.sync.options["migration"]["mode"] == "off"
    assert job.output.progress == "none"  # progress's own word for off


@pytest.mark.parametrize("word, save", [("no", False), ("off", False), ("yes", True),
                                        ("On", True), ("false", False), ("TRUE", True)])
def test_boolean_keys_keep_yaml_1_1_booleans(tmp_path, word, save):
    job = load_job(_job_text(tmp_path, f"output: {{save_model: {word}}}\n"))
    assert job.output.save_model is save


@pytest.mark.parametrize("word", ["no", "NO", "Off"])
def test_off_words_mean_off_for_migration(tmp_path, word):
    job = load_job(_job_text(tmp_path, f"sync: {{model: fsp, migration: {{mode: {word}}}}}\n"))
    assert job.sync.options["migration"]["mode"] == "off"


def test_a_word_no_key_takes_is_refused_as_written(tmp_path, capsys):
    err = _bad(tmp_path, capsys, text=_JOB_HEAD + "sync: {model: fsp, migration: {mode: on}}\n")
    assert "sync.migration.mode" in err and "'on'" in err


def test_set_override_takes_off_unquoted(tmp_path):
    path = _job_text(tmp_path, "sync: {model: fsp}\n")
    job = load_job(path, ["sync.migration.mode=off", "output.progress=off"])
    assert job.sync.options["migration"]["mode"] == "off"
    assert job.output.progress == "none"


def test_a_dumped_job_reads_back_the_same(tmp_path):
    """A job this loader read, written back with yaml.safe_dump (as fit and the run
    directory do), keeps the word unquoted and reads back the same."""
    import yaml

    from flegel.job.yaml_file import parse_yaml

    doc = parse_yaml("sync: {model: fsp, migration: {mode: off}}\noutput: {save_model: no}\n")
    text = yaml.safe_dump(doc)
    assert "mode: off" in text and "save_model: no" in text
    again = parse_yaml(text)
    assert again == doc and again["sync"]["migration"]["mode"] == "off"


def _inline_sync_snippets(page, needle):
    """Every inline-code ``{...}`` mapping on ``page`` that contains ``needle``, as printed."""
    import re

    text = (ROOT / page).read_text()
    return sorted({m for m in re.findall(r"`(\{[^`]*\})`", text) if needle in m})


@pytest.mark.parametrize("snippet", _inline_sync_snippets("docs/job-reference.md", "mode: off"))
def test_job_reference_presets_with_mode_off_validate_as_printed(tmp_path, snippet):
    job = load_job(_job_text(tmp_path, f"sync: {snippet}\n"))
    assert job.sync.options["migration"]["mode"] == "off"


def test_readme_mode_off_validates_as_printed(tmp_path):
    """The README says "Set `mode: off`" under migration: that line, in the sync section."""
    assert "Set `mode: off`" in (ROOT / "README.md").read_text()
    job = load_job(_job_text(tmp_path, "sync:\n  model: fsp\n  migration:\n    mode: off\n"))
    assert job.sync.options["migration"]["mode"] == "off"
