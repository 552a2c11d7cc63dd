"""Built-in algorithms install as ``flegel.algorithms``; ``import algorithms`` is the user's.

A job's folder is appended to ``sys.path`` (last), so a user's ``algorithms/`` package beside
the job resolves on every rank, and a ``numpy.py`` beside a job shadows nothing.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flegel.cli.launch import find_mpiexec
from flegel.job.algorithms import BUILTIN_ALGORITHMS, resolve_algorithm
from flegel.job.validate import load_job
from tests.conftest import ROOT, summary, write_job

MINE = '''
import os
from pathlib import Path

from flegel.algorithms.kmeans import KMeans

MARKS = Path(__file__).resolve().parents[1] / "marks"
MARKS.mkdir(exist_ok=True)
(MARKS / str(os.getpid())).touch()  # one mark per process that imported this module


class Mine(KMeans):
    """The user's own K-means."""
'''

JOB = {"algorithm": "algorithms.mine:Mine", "params": {"n_clusters": 3},
       "data": {"source": "synthetic", "kind": "blobs", "n_points": 3000, "n_features": 4,
                "centers": 3, "seed": 0},
       "workers": 2, "sync": {"model": "bsp", "batch": "full"},
       "stop": {"max_iterations": 5}, "output": {"progress": "none"}}


def _user_folder(tmp_path: Path) -> Path:
    """A job folder holding the user's own ``algorithms`` package and a job using it."""
    folder = tmp_path / "project"
    (folder / "algorithms").mkdir(parents=True)
    (folder / "algorithms" / "__init__.py").write_text("")
    (folder / "algorithms" / "mine.py").write_text(MINE)
    write_job(folder / "job.yaml", **JOB)
    return folder


@pytest.fixture
def clean_imports(monkeypatch):
    """sys.path without the repository (where the built-in algorithms/ folder would be
    found as ``algorithms``), and ``algorithms``, ``colorsys`` not imported yet."""
    root = str(ROOT)
    kept = [p for p in sys.path if p not in ("", ".", root) and Path(p or ".") != ROOT]
    monkeypatch.setattr(sys, "path", kept)
    saved = {m: sys.modules.pop(m) for m in list(sys.modules)
             if m == "algorithms" or m.startswith("algorithms.") or m in ("colorsys", "mine")}
    yield
    for m in list(sys.modules):
        if m == "algorithms" or m.startswith("algorithms.") or m in ("colorsys", "mine"):
            del sys.modules[m]
    sys.modules.update(saved)


def test_packages_listed_in_pyproject_are_the_ones_on_disk():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert conf["package-dir"] == {"flegel.algorithms": "algorithms"}
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "flegel").rglob("__init__.py") if "__pycache__" not in p.parts}
    assert set(conf["packages"]) == on_disk | {"flegel.algorithms"}


def test_builtins_are_flegel_algorithms():
    for name, target in BUILTIN_ALGORITHMS.items():
        assert target.startswith("flegel.algorithms.")
        cls = resolve_algorithm(name)
        assert cls.__module__ == target.partition(":")[0]
        assert cls.name == name  # the name a saved model is matched on (rundir/model.py)


def test_one_registry_of_builtin_algorithms():
    """The estimators' map is read from the estimators' ``ALGORITHM``, each a registered
    built-in, and every built-in has its estimator: the names are declared once."""
    from flegel.estimators.functional import BUILTIN, ESTIMATORS

    assert len(BUILTIN) == len(ESTIMATORS)  # no two estimators of one algorithm
    assert list(BUILTIN) == list(BUILTIN_ALGORITHMS)
    for name, est in BUILTIN.items():
        assert est.ALGORITHM == name
        assert type(est()._algorithm()) is resolve_algorithm(name)


def test_import_algorithms_is_free_outside_the_repository(tmp_path):
    code = ("import importlib.util, flegel.algorithms.kmeans; "
            "print(importlib.util.find_spec('algorithms'))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=60, check=True).stdout
    assert out.strip() == "None"


def test_user_algorithms_package_beside_the_job(tmp_path, clean_imports):
    folder = _user_folder(tmp_path)
    job = load_job(folder / "job.yaml")
    assert job.algorithm_cls.__name__ == "Mine"
    assert Path(sys.modules["algorithms.mine"].__file__).parent == folder / "algorithms"
    assert sys.path[-1] == str(folder)  # appended: last on sys.path


def test_files_beside_the_job_shadow_no_real_module(tmp_path, clean_imports):
    folder = tmp_path / "project"
    folder.mkdir()
    for shadow in ("numpy", "yaml", "colorsys"):
        (folder / f"{shadow}.py").write_text("raise ImportError('the shadow was imported')\n")
    (folder / "mine.py").write_text(
        "import colorsys\n\nfrom flegel.algorithms.kmeans import KMeans\n\n\n"
        "class Mine(KMeans):\n    hsv = colorsys.rgb_to_hsv\n")
    cls = resolve_algorithm("mine:Mine", folder)
    assert cls.hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)  # the standard library's colorsys
    for real in ("numpy", "yaml", "colorsys"):
        spec = importlib.machinery.PathFinder.find_spec(real, sys.path)
        assert spec is not None and not str(spec.origin).startswith(str(folder)), real


@pytest.mark.mpi
def test_workers_resolve_the_users_algorithms_package(tmp_path):
    """Under mpirun, with neither the job's folder nor the repository on PYTHONPATH and the
    run started from another folder, every rank imports ``algorithms.mine`` beside the job."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no MPI launcher installed")
    folder = _user_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    out = tmp_path / "out"
    proc = subprocess.run([mpiexec, "-n", "3", sys.executable, "-m", "flegel", "run",
                           str(folder / "job.yaml"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=elsewhere)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((folder / "marks").iterdir())) >= 3  # the master and both workers
    assert summary(out)["iterations"] >= 1
