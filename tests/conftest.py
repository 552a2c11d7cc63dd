"""Shared fixtures: writing job files and running flegel under a real mpirun; the GPU
checks' cache and the CuPy stand-in (tests/fakes.py); which tests run one at a time when
the suite runs in several processes (pytest-xdist)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flegel.cli.launch import find_mpiexec

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------- the suite in processes
#: The xdist group of the tests that start processes of their own (mpirun jobs, flegel's
#: launcher, a local cluster): ``--dist loadgroup`` (``addopts`` in pyproject.toml) runs the
#: whole group on one worker, one test at a time, as the suite ran before, while the
#: in-process tests run beside it on the other worker.  Two jobs side by side would halve
#: each one's cores and double the load their timeouts were sized for.
SERIAL_GROUP = "serial"

#: Markers that put a test in :data:`SERIAL_GROUP`: ``mpi`` (launches mpirun), ``cluster``
#: and ``faults``.  A new test that starts a job carries one of them.
SERIAL_MARKERS = ("mpi", "cluster", "faults")

#: Tests, by node id prefix, that start a flegel rank or launcher without one of those
#: markers.  Found by recording every process the suite starts, per test.
SERIAL_TESTS: tuple[str, ...] = (
    # an MPI singleton (``from mpi4py import MPI`` in a one-rank world)
    "tests/test_startup.py::test_a_lone_rank_says_so_before_it_touches_the_run_directory",
)

#: At most this many workers: one for the serial group, one for the rest.  The in-process
#: tests take about as long as the serial group, so a third worker could not shorten the
#: run, only take cores from the jobs' ranks.
MAX_WORKERS = 2


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Iterator[int]:
    """``-n auto``: a worker a core (xdist's count), at most :data:`MAX_WORKERS`, and none
    (the plain in-process run) on one core, where a worker would only add its start-up.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the count as given."""
    n = yield
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return n
    return min(n, MAX_WORKERS) if n > 1 else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test that starts processes in :data:`SERIAL_GROUP` (see there)."""
    serial = pytest.mark.xdist_group(SERIAL_GROUP)
    for item in items:
        if (any(item.get_closest_marker(m) for m in SERIAL_MARKERS)
                or item.nodeid.startswith(SERIAL_TESTS)):
            item.add_marker(serial)


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
