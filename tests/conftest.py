"""Shared fixtures: writing job files and running flegel under a real mpirun; the GPU
checks' cache and the CuPy stand-in (tests/fakes.py)."""

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
