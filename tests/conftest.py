"""Shared fixtures: writing job files and running flegel under a real mpirun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flegel.cli.launch import find_mpiexec

ROOT = Path(__file__).resolve().parents[1]


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
