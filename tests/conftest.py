"""Shared fixtures: writing job files and running flegel under a real mpirun; the GPU
checks' cache and the CuPy stand-in (tests/fakes.py); which tests run one at a time when
the suite runs in several processes (pytest-xdist)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flegel.cli.launch import find_mpiexec

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------- the suite in processes
#: The tests that start processes of their own (mpirun jobs, flegel's launcher, a local
#: cluster) run on one worker, one at a time, as the whole suite ran before, while the
#: in-process tests run beside them on the other worker (``-n auto --dist loadgroup``,
#: ``addopts`` in pyproject.toml).  Two jobs side by side would halve each one's cores and
#: double the load their timeouts were sized for.
SERIAL_GROUP = "serial"

#: Markers that put a test in :data:`SERIAL_GROUP`: ``mpi`` (launches mpirun), ``cluster``
#: and ``faults``.  A new test that starts a job carries one of them.
SERIAL_MARKERS = ("mpi", "cluster", "faults")

#: Tests, by node id prefix, that start a flegel rank without one of those markers.  Found
#: by recording, per test, every process a whole run of the suite started.
SERIAL_TESTS: tuple[str, ...] = (
    # an MPI singleton (``from mpi4py import MPI`` in a one-rank world)
    "tests/test_startup.py::test_a_lone_rank_says_so_before_it_touches_the_run_directory",
)

#: At most this many workers: one for the serial group, one for the rest.  The serial group
#: alone takes as long as the whole run (524 s of its tests in a 544 s run on 2 cores, the
#: in-process tests 489 s beside them), so a third worker could not shorten the run, only
#: take cores from the jobs' ranks.
MAX_WORKERS = 2

#: ``workerinput`` key: the folder where each worker writes the node ids of its serial tests.
_SERIAL_DIR = "flegel_serial_dir"
_SERIAL_DIR_KEY = pytest.StashKey[Path]()


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Iterator[int]:
    """``-n auto``: a worker a core (xdist's count), at most :data:`MAX_WORKERS`, and none
    (the plain in-process run) on one core, where a worker would only add its start-up.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the count as given."""
    n = yield
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return n
    return min(n, MAX_WORKERS) if n > 1 else 0


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (older pytest: see below)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test that starts processes in :data:`SERIAL_GROUP`; in an xdist worker,
    also write their node ids where the controller's scheduler reads them."""
    serial = pytest.mark.xdist_group(SERIAL_GROUP)
    ids = []
    for item in items:
        if (any(item.get_closest_marker(m) for m in SERIAL_MARKERS)
                or item.nodeid.startswith(SERIAL_TESTS)):
            item.add_marker(serial)
            ids.append(item.nodeid)
    worker = getattr(config, "workerinput", None)
    if worker is not None and _SERIAL_DIR in worker:
        path = Path(worker[_SERIAL_DIR]) / f"{worker['workerid']}.json"
        path.write_text(json.dumps(ids))


# xdist's loadgroup passes a test's group to the controller as a suffix of its node id
# (``test_x@serial``), which pytest 9.2's structured node ids silently drop: every test is
# then scheduled on its own (pytest-xdist issue 1386, open in 3.8.0).  The workers write the
# serial tests' ids to a file instead, and the scheduler below groups them.
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller, per worker: the folder for its list of serial tests (one for all)."""
    config = node.config
    if _SERIAL_DIR_KEY not in config.stash:
        folder = tempfile.TemporaryDirectory(prefix="flegel-serial-")
        config.add_cleanup(folder.cleanup)
        config.stash[_SERIAL_DIR_KEY] = Path(folder.name)
    node.workerinput[_SERIAL_DIR] = str(config.stash[_SERIAL_DIR_KEY])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: xdist's scheduler, with :data:`SERIAL_GROUP` taken from the
    workers' lists (above) rather than from node id suffixes."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SerialGroupScheduling(LoadGroupScheduling):
        serial: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.serial is None:  # first call: every worker has collected by now
                folder = config.stash[_SERIAL_DIR_KEY]
                self.serial = {i for f in folder.glob("*.json")
                               for i in json.loads(f.read_text())}
            return SERIAL_GROUP if nodeid in self.serial else super()._split_scope(nodeid)

    return SerialGroupScheduling(config, log)


@pytest.fixture
def no_gpu_cache() -> Iterator[None]:
    """Forget what an earlier test learnt about CuPy (flegel.device caches it per process)."""
    from flegel.device import gpu_unavailable

    gpu_unavailable.cache_clear()
    yield
    gpu_unavailable.cache_clear()


@pytest.fixture
def stand_in(no_gpu_cache: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The CuPy stand-in of tests/fakes.py installed as ``cupy``, with one device."""
    from tests.fakes import cupy_stand_in

    fake = cupy_stand_in(1)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


def write_job(path: Path, **doc) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def child_env(extra_path: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


def mpirun(job: Path, n_workers: int, out: Path, *sets: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess:
    """Run ``mpirun -n N+1 python -m flegel run JOB`` as a subprocess with a timeout."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no MPI launcher installed")
    cmd = [mpiexec, "-n", str(n_workers + 1), sys.executable, "-m", "flegel", "run", str(job),
           "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=child_env(job.parent), cwd=job.parent)
    if check and proc.returncode != 0:
        raise AssertionError(f"flegel failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
