"""bench/suite.py: its list names real scripts with commands, and its table and JSON say what
each figure is.  No benchmark runs here and nothing is timed (benchmarks are not tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import load_bench
from tests.conftest import ROOT

SUITE = ROOT / "bench" / "suite.py"

#: The figures of issue 14 (and the FSP / migration ones) the suite must cover.
ISSUE_14 = {"startup", "startup-higgs", "memory", "blocksize", "gpu", "kmeans", "loaders",
            "elastic-waits", "elastic-sim", "migration-sim", "fsp-speedup"}


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    """bench/suite.py as a module (bench/ is a folder of scripts, not a package)."""
    return load_bench("suite")


def test_the_list_names_scripts_that_exist_with_their_commands() -> None:
    out = subprocess.run([sys.executable, str(SUITE), "--list"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, check=True).stdout
    entries: dict[str, dict[str, str]] = {}
    name = ""
    for line in out.splitlines():
        head = re.match(r"^(\S+)  \[(default|full|opt-in)\](.*)$", line)
        if head:
            name = head.group(1)
            entries[name] = {"optional": str("only if present" in head.group(3))}
            continue
        cmd = re.match(r"^  (quick|full):\s+(python (bench/\S+\.py).*)$", line)
        assert cmd and name, f"unexpected line in --list: {line!r}"
        entries[name][cmd.group(1)] = cmd.group(2)
        entries[name]["script"] = cmd.group(3)
    assert ISSUE_14 <= set(entries), ISSUE_14 - set(entries)
    for name, e in entries.items():
        assert e.get("quick") and e.get("full"), f"{name} has no command"
        # gpu_bench.py is written by someone else; the suite skips it while it is missing.
        if e["optional"] != "True":
            assert (ROOT / e["script"]).is_file(), f"{name}: {e['script']} does not exist"


def test_a_result_is_judged_against_its_target(suite: ModuleType) -> None:
    assert suite.judge(0.7, 0.8, "<=") == "met"
    assert suite.judge(0.9, 0.8, "<=") == "missed"
    assert suite.judge(1.2, 1.3, ">=") == "missed"
    assert suite.judge(5.3, 1.3, ">=") == "met"
    assert suite.judge(3.0, None, ">=") == "reported"
    assert suite.judge(None, 1.0, "<=") == "failed"


def test_the_table_and_the_json_of_fake_results(suite: ModuleType) -> None:
    figures = [
        suite.Figure("memory", 1.234, 1.5, "<=", "met", "python bench/memory_bench.py",
                     "peak RSS / data bytes", 42.4, 3.1),
        suite.Figure("migration-sim speedup", 0.9, 1.3, ">=", "missed",
                     "python bench/migration_sim.py", "", 6.0, 3.0),
        suite.Figure("loaders", None, None, "<=", "failed",
                     "python bench/loaders_bench.py --rows 50000",
                     "exit 1: ValueError: bad file", 2.0, 3.0),
        suite.Figure("gpu", None, None, "<=", "skipped", "python bench/gpu_bench.py",
                     "skipped: no GPU: CuPy is not installed"),
    ]
    table = suite.format_table(figures).splitlines()
    assert table[0].split() == ["figure", "measured", "target", "result", "wall", "s",
                                "command"]
    rows = {line.split()[0]: line for line in table[2:6]}
    assert rows["memory"].split() == ["memory", "1.23", "<=", "1.5", "met", "42", "python",
                                      "bench/memory_bench.py"]
    assert rows["migration-sim"].split()[2:6] == ["0.9", ">=", "1.3", "missed"]
    assert rows["loaders"].split()[1:5] == ["failed", "-", "failed", "2"]
    assert rows["loaders"].endswith("python bench/loaders_bench.py --rows 50000")
    assert rows["gpu"].split()[1:4] == ["skipped", "-", "skipped"]
    notes = "\n".join(table[6:])
    assert "loaders: exit 1: ValueError: bad file" in notes
    assert "gpu: skipped: no GPU: CuPy is not installed" in notes
    machine = {"nproc": 2, "load_average": [3.0, 2.0, 1.0]}
    doc = json.loads(json.dumps(suite.to_json(machine, figures, "quick", [4.0, 3.0, 2.0])))
    assert doc["mode"] == "quick" and doc["machine"]["nproc"] == 2
    assert [f["status"] for f in doc["figures"]] == ["met", "missed", "failed", "skipped"]
    assert doc["figures"][0] == {"name": "memory", "value": 1.234, "target": 1.5, "op": "<=",
                                 "status": "met", "command": "python bench/memory_bench.py",
                                 "note": "peak RSS / data bytes", "wall_s": 42.4,
                                 "load_start": 3.1}


def test_the_machine_description_names_what_the_docs_need(suite: ModuleType) -> None:
    text = suite.format_machine(suite.machine())
    for word in ("cores", "GiB memory", "Python", "NumPy", "numba", "mpi4py", "load average"):
        assert word in text


def test_kmeans_bench_text_is_parsed(suite: ModuleType) -> None:
    out = ("K-means per pass: 1,000,000 x 28 float64, K = 16, 1 thread\n"
           "  ratio flegel / scikit-learn  :     0.753   (target <= 1.0)\n")
    (r,) = suite._kmeans(None, out)
    assert (r.value, r.target, r.op) == (0.753, 0.8, "<=")
    assert "1,000,000 x 28" in r.note
    (missing,) = suite._kmeans(None, "something else\n")
    assert missing.value is None


def test_a_failing_script_is_failed_with_its_last_stderr_line(suite: ModuleType,
                                                              tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import sys\nprint('some output')\n"
                      "sys.stderr.write('warming up\\nRuntimeError: the run failed\\n\\n')\n"
                      "sys.exit(3)\n")
    bench = suite.Bench("bad", str(script), (), (), suite._generic, 60, 60, json=False)
    (f,) = suite.run_bench(bench, full=False)
    assert f.status == "failed" and f.value is None
    assert f.note == "exit 3: RuntimeError: the run failed"
    assert f.command == f"python {script}"


def test_a_script_past_its_timeout_is_failed(suite: ModuleType, tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import sys, time\nprint('started', file=sys.stderr, flush=True)\n"
                      "time.sleep(60)\n")
    bench = suite.Bench("slow", str(script), (), (), suite._generic, 1.0, 1.0, json=False)
    (f,) = suite.run_bench(bench, full=False)
    assert f.status == "failed"
    assert f.note.startswith("timed out after 1 s") and f.note.endswith("started")


def test_a_json_script_is_read_from_its_json(suite: ModuleType, tmp_path: Path) -> None:
    script = tmp_path / "ok.py"
    script.write_text("import json, sys\n"
                      "path = sys.argv[sys.argv.index('--json') + 1]\n"
                      "open(path, 'w').write(json.dumps({'ratio': 0.5, 'target': 1.0}))\n")
    bench = suite.Bench("ok", str(script), ("--quick",), (), suite._generic, 60, 60)
    (f,) = suite.run_bench(bench, full=False)
    assert (f.name, f.value, f.target, f.status) == ("ok", 0.5, 1.0, "met")
    assert f.command == f"python {script} --quick"  # --json is the suite's, not the reader's


def test_a_script_the_suite_does_not_own_is_read_from_ratio_and_headline(
        suite: ModuleType) -> None:
    doc = {"ratio": 0.25, "target": None, "headline": "CNN time to target GPU / CPU"}
    (r,) = suite._generic(doc, "")
    assert (r.value, r.target, r.note) == (0.25, None, "CNN time to target GPU / CPU")
    assert suite.judge(r.value, r.target, r.op) == "reported"
    (none,) = suite._generic({"ratio": None, "headline": "K-means CuPy / compiled"}, "")
    assert none.value is None
    (text,) = suite._generic(None, "x\n  ratio gpu / cpu : 0.40 (target <= 0.5)\n")
    assert (text.value, text.target) == (0.40, 0.5)


def test_issue_23_iterations_against_scikit_learn_are_read(suite: ModuleType) -> None:
    """kmeans_bench.py --short and algorithms_bench.py --vs-sklearn --json (issue 23)."""
    short, job, kernel = suite._kmeans_short({"ratio": 0.71, "iterations": 12,
                                              "points": 1_000_000}, "")
    assert (short.value, short.target, short.op) == (0.71, 1.0, "<=")
    assert "12-iteration job" in short.note and "1,000,000 x 28" in short.note
    assert job.value is None and kernel.value is None  # no array run, no bare kernels
    _, job, kernel = suite._kmeans_short({"ratio": 0.71, "ratio_array": 1.7, "kernels": {
        "numba_steady": 0.04, "array_steady": 0.06}}, "")
    assert (job.value, job.target) == (1.7, None)
    assert (kernel.label, kernel.value, kernel.target) == ("array-vs-numba", 1.5, 1.5)
    doc = {"rows": [{"key": "gmm", "ratio": 0.5, "algorithm": "GMM diag K=8",
                     "data": "300000x20", "reference": "sklearn GaussianMixture EM"},
                    {"key": "nmf", "ratio": 1.3, "algorithm": "NMF r=10 hals",
                     "data": "20000x200", "reference": "sklearn NMF mu iteration"}]}
    got = {r.label: r for r in suite._vs_sklearn(doc, "")}
    assert {"kmeans-steady", "gmm", "nmf", "nmf-mu", "nmf-vs-cd", "logreg",
            "logreg-multinomial", "fcm"} <= set(got)
    assert (got["gmm"].value, got["gmm"].target) == (0.5, 1.0)
    assert suite.judge(got["nmf"].value, got["nmf"].target, got["nmf"].op) == "missed"
    assert got["kmeans-steady"].value is None and "missing" in got["kmeans-steady"].note
    assert got["logreg"].target is None
    names = {b.name: b for b in suite.BENCHES}
    assert names["kmeans-short"].json and names["vs-sklearn"].json
