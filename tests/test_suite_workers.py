"""The suite in two processes (tests/conftest.py): every test that starts processes of its
own runs on one xdist worker, one at a time, while the others run beside them.

A real pytest with two xdist workers on a folder of small tests: the marked ones record
which worker ran them.  pytest 9.2 silently dropped xdist's own way of passing a group
(pytest-xdist issue 1386); this catches the next such break.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SERIAL_MARKERS, SERIAL_TESTS, child_env

pytest.importorskip("xdist")

TESTS = '''
import json, os, time
from pathlib import Path
import pytest

def _record(name):
    time.sleep(0.05)
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # None: not in an xdist worker
    Path(os.environ["RECORD"], name).write_text(json.dumps(worker))
'''


def _env(record: Path) -> dict[str, str]:
    """The child pytest's environment: none of xdist's variables of the worker running this
    test (``PYTEST_XDIST_WORKER`` would read as the child's own)."""
    env = {k: v for k, v in child_env().items() if not k.startswith("PYTEST_XDIST_")}
    return {**env, "RECORD": str(record)}


def test_marked_tests_share_one_worker_and_the_rest_run_beside_them(tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    body = [TESTS]
    serial = []
    for i in range(12):  # marked and plain tests interleaved, each marker in turn
        marker = SERIAL_MARKERS[i % len(SERIAL_MARKERS)]
        body.append(f"@pytest.mark.{marker}\ndef test_serial_{i}():\n"
                    f"    _record('serial_{i}')\n")
        body.append(f"def test_free_{i}():\n    _record('free_{i}')\n")
        serial.append(f"serial_{i}")
    (tmp_path / "test_sample.py").write_text("\n\n".join(body))
    env = _env(record)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest",
                           "-p", "no:cacheprovider", "-o", "addopts=", "-n", "2",
                           "--dist", "loadgroup", "-W", "ignore::pytest.PytestUnknownMarkWarning",
                           str(tmp_path / "test_sample.py")],
                          capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = {p.name: json.loads(p.read_text()) for p in record.iterdir()}
    assert len(ran) == 24, ran
    workers = {ran[name] for name in serial}
    assert len(workers) == 1, {name: ran[name] for name in serial}
    assert any(w not in workers for name, w in ran.items() if name.startswith("free")), ran


def test_one_core_runs_the_suite_in_this_process(tmp_path: Path) -> None:
    """``-n auto`` on one core: no worker at all (xdist would start one)."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs os.sched_setaffinity")
    (tmp_path / "record").mkdir()
    (tmp_path / "test_one.py").write_text(
        TESTS + "\n\ndef test_one():\n    _record('one')\n")
    code = ("import os, sys\n"
            "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "import pytest\n"
            "sys.exit(pytest.main(sys.argv[1:]))\n")
    env = _env(tmp_path / "record")
    proc = subprocess.run([sys.executable, "-c", code, "-q", "-p", "tests.conftest", "-p",
                           "no:cacheprovider", "-o", "addopts=", "-n", "auto", "test_one.py"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "record" / "one").read_text()) is None


def test_every_listed_serial_test_exists() -> None:
    """A renamed test would silently leave :data:`SERIAL_TESTS` and run beside a job."""
    for entry in SERIAL_TESTS:
        file, name = entry.split("::")
        assert f"\ndef {name.split('[')[0]}(" in (ROOT / file).read_text(), entry
