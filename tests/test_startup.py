"""Fixed costs (issue 14, item 1): the phases in summary.json and on rank 0's progress lines,
imports only where needed, numba's cache shared across runs and ranks.

The times themselves are benchmark figures (``bench/startup_bench.py``); these tests check
what the phases are, not how long they take.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flegel.cli.launch import find_mpiexec
from flegel.runtime.progress import Progress, phase_line
from flegel.runtime.timings import PHASES, Timings, process_start
from tests.conftest import child_env, mpirun, summary, write_job

JOB = {"algorithm": "kmeans", "params": {"n_clusters": 3},
       "data": {"source": "synthetic", "kind": "blobs", "n_points": 3000, "n_features": 4,
                "centers": 3, "seed": 0},
       "workers": 2, "sync": {"model": "bsp", "batch": "full"},
       "stop": {"max_iterations": 5}, "output": {"progress": "plain"}}

#: Records, at exit, the modules each process imported (the launcher's and every rank's).
SITECUSTOMIZE = '''
import atexit, os, sys

def _record():
    rank = os.environ.get("PMI_RANK", "launcher")
    with open(os.path.join({folder!r}, rank), "w") as f:
        f.write("\\n".join(sorted(sys.modules)))

atexit.register(_record)
'''

#: scipy's heavy subpackages; ``import numba`` imports the top-level ``scipy`` package only
#: to check its version, and numba's first kernel call imports ``scipy.linalg`` for BLAS.
SCIPY_HEAVY = ("scipy.linalg", "scipy.sparse", "scipy.special", "scipy.stats",
               "scipy.optimize", "scipy.spatial")


def _launched(tmp_path: Path, *sets: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess:
    """``python -m flegel run JOB`` without mpirun: flegel's own launcher starts the ranks."""
    if find_mpiexec() is None:
        pytest.skip("no MPI launcher installed")
    job = write_job(tmp_path / "job.yaml", **JOB)
    cmd = [sys.executable, "-m", "flegel", "run", str(job), "--out", str(tmp_path / "out")]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                          env=env or child_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# ------------------------------------------------------------------------------ in-process
def test_phases_follow_one_another_without_gaps(monkeypatch):
    monkeypatch.setenv("FLEGEL_LAUNCH_T", repr(process_start() - 2.0))
    seen: list[tuple[str, float]] = []
    t = Timings(on_phase=lambda what, at: seen.append((what, at)))
    for phase, _ in PHASES[2:]:
        t.begin(phase)
    out = t.summary()
    assert list(out) == [p for p, _ in PHASES]
    assert out["launch_s"] == pytest.approx(2.0)
    assert all(v is not None and v >= 0 for v in out.values())
    # The phases cover rank 0's time from its start to now, one after another.
    total = sum(v for k, v in out.items() if k != "launch_s" and v is not None)
    assert total == pytest.approx(time.time() - process_start(), abs=0.05)
    assert [w for w, _ in seen] == [w for _, w in PHASES[2:]]
    assert all(at >= 2.0 for _, at in seen)  # counted from the launcher's start


def test_without_launcher_launch_s_is_null(monkeypatch):
    monkeypatch.delenv("FLEGEL_LAUNCH_T", raising=False)
    t = Timings()
    t.begin("load_s")
    out = t.summary()
    assert out["launch_s"] is None and out["import_s"] is not None and out["load_s"] >= 0


def test_process_start_is_this_process_start():
    # The kernel's record, not the time flegel.runtime.timings was imported: pytest ran before.
    assert process_start() <= time.time()
    child = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3); "
                            "from flegel.runtime.timings import process_start as p; "
                            "print(time.time() - p())"], capture_output=True, text=True,
                           check=True, timeout=60)
    assert float(child.stdout) >= 0.3


def test_phase_lines_plain_and_none(capsys):
    Progress("plain").phase("loading shards", 1.5)
    Progress("none").phase("loading shards", 1.5)
    assert capsys.readouterr().out == phase_line("loading shards", 1.5) + "\n"
    assert phase_line("loading shards", 1.5).endswith("    1.50 s")


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (it must exit 0)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=child_env())
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_importing_an_algorithm_does_not_import_numba():
    """Only a kernel's first call imports numba (flegel/jit.py): the master and the
    launcher import the algorithm's module but never call a kernel."""
    code = ("import sys, numpy as np; import flegel.algorithms.kmeans as k; "
            "assert 'numba' not in sys.modules; "
            "x = np.zeros((4, 2)); ct = np.ones((2, 3)); "
            "k._assign_accumulate(x, ct, (ct ** 2).sum(0), np.zeros(4, np.int64), "
            "np.zeros(4), np.zeros((3, 2)), np.zeros(3), 2048); "
            "assert 'numba' in sys.modules; "
            "print(type(k._assign_accumulate.dispatcher()).__module__)")
    assert _python(code).startswith("numba")


def test_gmm_imports_scipy_only_for_full_covariances():
    """scipy.linalg costs a rank ~0.3 CPU-s: a diagonal GMM (the default) never needs it."""
    code = ("import sys, numpy as np; import flegel.algorithms.gmm as g; "
            "assert 'scipy.linalg' not in sys.modules; "
            "g._precisions_cholesky_full(np.eye(2)[None].copy()); "
            "print('scipy.linalg' in sys.modules)")
    assert _python(code).strip() == "True"


def test_the_launcher_beside_the_interpreter_comes_before_path(tmp_path, monkeypatch):
    """A venv with system site packages uses the base install's mpi4py and its mpiexec,
    not PATH's (pyenv's shim there costs 0.1-0.3 s a launch); with its own mpi4py, PATH's."""
    from flegel.cli import launch

    venv, base, elsewhere = tmp_path / "venv", tmp_path / "base", tmp_path / "path"
    for folder in (venv / "bin", base / "bin", elsewhere):
        folder.mkdir(parents=True)
    for folder in (base / "bin", elsewhere):
        (folder / "mpiexec").write_text("")
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sys, "base_prefix", str(base))
    monkeypatch.setattr(launch.shutil, "which", lambda name: str(elsewhere / name))
    monkeypatch.setattr(launch, "_mpi4py_in", lambda prefix: prefix == base)
    assert launch.find_mpiexec() == str(base / "bin" / "mpiexec")
    monkeypatch.setattr(launch, "_mpi4py_in", lambda prefix: False)
    assert launch.find_mpiexec() == str(elsewhere / "mpiexec")
    (venv / "bin" / "mpiexec").write_text("")  # the venv's own comes first
    assert launch.find_mpiexec() == str(venv / "bin" / "mpiexec")


def test_mpi4py_is_found_where_it_is_installed():
    import importlib.util

    from flegel.cli.launch import _mpi4py_in

    spec = importlib.util.find_spec("mpi4py")
    assert spec is not None and spec.origin is not None
    assert _mpi4py_in(Path(spec.origin).parents[1])
    assert not _mpi4py_in(Path(__file__).parent)


# Which kernels workers 2..n leave to worker 1: tests/test_jit_signatures.py.


def test_numba_blas_without_scipy_linalg():
    """A kernel's np.dot takes SciPy's BLAS from cython_blas alone (flegel.jit.preload_blas):
    scipy.linalg's package is not imported, the product is NumPy's to the last bit, and a
    later import of scipy.linalg finds the same module as its attribute."""
    code = ("import sys, numpy as np; import flegel.algorithms.kmeans as k; "
            "rng = np.random.default_rng(0); x = rng.random((50, 7)); ct = rng.random((7, 4)); "
            "labels = np.full(50, -1, np.int64); scores = np.zeros(50); "
            "k._assign_accumulate(x, ct, (ct ** 2).sum(0), labels, scores, np.zeros((4, 7)), "
            "np.zeros(4), 2048); "
            "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg imported'; "
            "g = (ct ** 2).sum(0) + x @ (-2.0 * ct); "
            "assert (labels == g.argmin(1)).all() and np.array_equal(scores, g.min(1)); "
            "import scipy.linalg; "
            "assert scipy.linalg.cython_blas is sys.modules['scipy.linalg.cython_blas']; "
            "from scipy.linalg import solve_triangular; print(solve_triangular(np.eye(2), "
            "np.ones(2)).sum())")
    assert _python(code).strip() == "2.0"


#: A K-means kernel call in a fresh process with one numba thread (the serial kernel, as in a
#: rank), counting the refreshes of numba's target context: prints the call's cache hits and
#: misses, the refreshes by then, a digest of its results, then (argv[1] == "float32") the
#: refreshes after a call whose float32 kernel the cache lacks, compiled in the same process.
LIGHT_LOAD = """
import hashlib, sys
import numpy as np
from numba.core.base import BaseContext
refreshes = []
full = BaseContext.refresh
BaseContext.refresh = lambda self: (refreshes.append(1), full(self))[1]
import flegel.algorithms.kmeans as k

def call(dtype):
    rng = np.random.default_rng(0)
    x, ct = rng.random((50, 7)).astype(dtype), rng.random((7, 4)).astype(dtype)
    labels, scores = np.full(50, -1, np.int64), np.zeros(50)
    k._assign_accumulate(x, ct, (ct ** 2).sum(0), labels, scores, np.zeros((4, 7)),
                         np.zeros(4), 2048)
    g = (ct ** 2).sum(0) + x @ (-2.0 * ct)
    assert (labels == g.argmin(1)).all()
    return hashlib.sha256(labels.tobytes() + scores.tobytes()).hexdigest()

digest = call(np.float64)
stats = k._assign_accumulate.dispatcher().stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()), len(refreshes), digest)
if sys.argv[1:] == ["float32"]:
    call(np.float32)
    print(len(refreshes) > 0)
"""


def test_a_cached_kernel_loads_without_refreshing_numba(tmp_path):
    """A kernel in numba's cache is loaded without the refresh of numba's target context
    (flegel.jit.load_cached_lightly: 0.2 CPU-s a worker): the same results to the last bit
    as the process that compiled it, and a kernel the cache lacks still compiles after it."""
    env = {**child_env(), "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_NUM_THREADS": "1"}

    def python(*args: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", LIGHT_LOAD, *args], capture_output=True,
                             text=True, timeout=300, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    compiled = python()
    assert compiled[:2] == ["0", "1"] and int(compiled[2]) > 0  # compiling refreshes
    loaded = python("float32")
    assert loaded[:3] == ["1", "0", "0"], loaded  # a hit, and no refresh
    assert loaded[3] == compiled[3]
    assert loaded[4] == "True"  # the float32 kernel compiled, refreshing as numba does


def test_a_light_load_that_raises_falls_back_to_numbas_own_load(tmp_path, monkeypatch):
    """flegel.jit.load_cached_lightly: where the light load raises, numba's own load runs
    and still finds the cached kernel (the same result); a dispatcher without an on-disk
    cache is left as it is."""
    import importlib.util

    import numba

    from flegel.jit import load_cached_lightly

    (tmp_path / "lightmod.py").write_text("def f(x):\n    return 2.0 * x + 1.0\n")
    spec = importlib.util.spec_from_file_location("lightmod", tmp_path / "lightmod.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not load_cached_lightly(numba.njit(cache=False)(mod.f))
    first = numba.njit(cache=True)(mod.f)
    assert first(3.0) == 7.0  # compiled, and saved beside lightmod.py

    again = numba.njit(cache=True)(mod.f)
    real, calls = again._cache._load_overload, []

    def once(sig, ctx):
        calls.append(sig)
        if len(calls) == 1:
            raise RuntimeError("a registry the light path lacked")
        return real(sig, ctx)

    monkeypatch.setattr(again._cache, "_load_overload", once, raising=False)
    assert load_cached_lightly(again)
    assert again(3.0) == 7.0
    assert len(calls) == 2  # the light load raised, numba's own load ran
    assert sum(again.stats.cache_hits.values()) == 1 and not again.stats.cache_misses


def test_rank_clock_steps_do_not_follow_a_wall_clock_stepped_back(monkeypatch):
    """A step's length is on the monotonic clock: time.time() stepped back an hour between
    two marks (NTP) leaves the step's length what it was, not negative."""
    from flegel.runtime import timings

    clock = timings.RankClock()
    clock.mark("imported")
    real = time.time
    monkeypatch.setattr(timings.time, "time", lambda: real() - 3600.0)
    time.sleep(0.01)
    clock.mark("loaded")
    steps = clock.spans()["steps"]
    assert [n for n, _, _ in steps] == ["imported", "loaded"]
    assert steps[1][1] >= 0.01 and all(w >= 0 for _, w, _ in steps), steps


def test_blas_binding_survives_a_find_spec_before_the_import():
    """Asking whether scipy.linalg is installed (find_spec) imports nothing: the import after
    it must still bind the preloaded cython_blas as the package's attribute."""
    code = ("import importlib.util, sys; from flegel.jit import preload_blas; "
            "assert preload_blas(); "
            "assert importlib.util.find_spec('scipy.linalg') is not None; "
            "assert 'scipy.linalg' not in sys.modules; "
            "import scipy.linalg; "
            "print(scipy.linalg.cython_blas is sys.modules['scipy.linalg.cython_blas'], "
            "any(type(f).__name__ == '_BindBlas' for f in sys.meta_path))")
    assert _python(code).split() == ["True", "False"]


# ------------------------------------------------------------------------------ under MPI
@pytest.mark.mpi
def test_launched_run_reports_every_phase(tmp_path):
    t0 = time.time()
    proc = _launched(tmp_path)
    wall = time.time() - t0
    timings = summary(tmp_path / "out")["timings"]
    assert list(timings) == [p for p, _ in PHASES]
    assert all(isinstance(v, float) and v >= 0 for v in timings.values()), timings
    # Contiguous phases of one run: together they fit in its wall time (the launcher's
    # start is the kernel's record, 10 ms ticks).
    assert sum(timings.values()) <= wall + 0.05
    assert timings["train_s"] >= summary(tmp_path / "out")["wall_time_s"]
    # Each rank's own steps (RankClock): wall and CPU seconds, the master's and each
    # worker's, from its process start to its final evaluation.
    startup = summary(tmp_path / "out")["startup"]
    assert sorted(startup) == ["0", "1", "2"]
    for rank, clock in startup.items():
        names = [n for n, _, _ in clock["steps"]]
        assert names[0] == "imported" and names[-1] == "final_eval", (rank, names)
        assert ("theta0" in names) == (rank == "0") and ("warm_up" in names) == (rank != "0")
        assert all(w >= 0 and c >= 0 for _, w, c in clock["steps"]), clock
    # Rank 0 (the launcher first) says each phase as it begins, in order, then training's
    # lines, then the final line.
    said = [ln.rsplit("  ", 1)[0].strip() for ln in proc.stdout.splitlines()
            if re.search(r"\d s$", ln) and not ln.startswith("iter")]
    assert said == ["launching 3 ranks"] + [w for _, w in PHASES[1:]], proc.stdout
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("iter")][-1].endswith("done")


@pytest.fixture(scope="module")
def quiet_launch(tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[subprocess.CompletedProcess, dict[str, set[str]]]:
    """One run through the launcher with ``output.progress=none``: its output, and each
    process's imported modules by who it was (the tests below read this one run)."""
    tmp_path = tmp_path_factory.mktemp("quiet")
    folder = tmp_path / "modules"
    folder.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(folder=str(folder)))
    proc = _launched(tmp_path, "output.progress=none", env=child_env(site))
    return proc, {p.name: set(p.read_text().split()) for p in folder.iterdir()}


@pytest.mark.mpi
def test_progress_none_says_nothing(quiet_launch):
    proc, _ = quiet_launch
    assert not any(w in proc.stdout for _, w in PHASES), proc.stdout


@pytest.mark.mpi
def test_under_plain_mpirun_launch_s_is_null(plain_run):
    timings = summary(plain_run / "out")["timings"]
    assert timings["launch_s"] is None
    assert all(v >= 0 for k, v in timings.items() if k != "launch_s")


@pytest.mark.mpi
def test_run_path_imports_only_what_it_needs(quiet_launch):
    _, mods = quiet_launch
    assert set(mods) == {"launcher", "0", "1", "2"}
    for who, names in mods.items():
        heavy = sorted(m for m in names if m.split(".")[0] in ("sklearn", "matplotlib"))
        assert not heavy, (who, heavy)
    # The launcher and the master call no kernel; the workers run K-means' NumPy kernel on
    # a job this short (kernel: auto, flegel.device): nobody starts numba or scipy.linalg.
    for who in ("launcher", "0", "1", "2"):
        heavy = sorted(m for m in mods[who] if m.startswith(SCIPY_HEAVY))
        assert not heavy, (who, heavy)
        assert "numba" not in mods[who], who
    # Validating the job initializes no MPI in the launcher (issue 23: an estimator's fit
    # validates in the user's process the same way); a rank parses only `run`'s arguments.
    assert "mpi4py.MPI" not in mods["launcher"]
    assert "flegel.runtime.server" not in mods["launcher"]
    for who in ("0", "1", "2"):
        other = sorted(m for m in mods[who]
                       if m.startswith(("flegel.cli.compare", "flegel.cli.report",
                                        "flegel.cli.paper")))
        assert not other, (who, other)


@pytest.mark.mpi
def test_master_and_launcher_do_not_import_numba(quiet_launch):
    """numba costs every process that imports it 0.3-1 s: the built-in kernels
    (flegel/jit.py) and the data parsers import it where a kernel first runs."""
    _, mods = quiet_launch
    assert "numba" not in mods["launcher"] and "numba" not in mods["0"]


#: Records, at exit, what numba's cache did for K-means' kernel in each rank (the dispatcher's
#: own counts: a hit loaded it from the cache, a miss went on to compile or was refused).
CACHE_STATS = '''
import atexit, json, os, sys

def _record():
    kmeans = sys.modules.get("flegel.algorithms.kmeans")
    kernel = getattr(getattr(kmeans, "_assign_accumulate", None), "_compiled", None)
    if kernel is not None:
        with open(os.path.join({folder!r}, os.environ["PMI_RANK"]), "w") as f:
            json.dump([sum(kernel.stats.cache_hits.values()),
                       sum(kernel.stats.cache_misses.values())], f)

atexit.register(_record)
'''


@pytest.mark.mpi
def test_numba_cache_compiled_once_then_loaded(tmp_path, monkeypatch):
    """A cold cache: worker 1 compiles and saves the kernel, the other workers load it (a
    try before it is saved is refused); a second run loads it everywhere and saves nothing.
    Counted per rank and in the cache folder, not in the ranks' shared output (one rank's
    line can split another's)."""
    job = write_job(tmp_path / "job.yaml", **{**JOB, "workers": 3,
                                               "params": {"n_clusters": 3,
                                                          "kernel": "compiled"},
                                               "output": {"progress": "none"}})
    cache = tmp_path / "numba-cache"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))  # the ranks' environment
    (tmp_path / "sitecustomize.py").write_text(CACHE_STATS.format(folder=str(tmp_path)))

    def run(out: str) -> tuple[dict[str, list[int]], dict[Path, tuple[int, int]]]:
        """Each rank's [cache hits, misses] of the kernel, and the cache's files (inode and
        mtime: numba saves to a new file that replaces the old)."""
        mpirun(job, 3, tmp_path / out)
        ranks = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("[0-9]")}
        for p in tmp_path.glob("[0-9]"):
            p.unlink()
        files = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.rglob("*")
                 if p.is_file()}
        return ranks, files

    first, saved = run("out1")
    # worker 1 missed and compiled; workers 2 and 3 loaded it (a hit: a rank that compiled
    # has none), after a refused miss at each try that came before worker 1 had saved it
    # (ahead of θ⁽⁰⁾, then the warm-up: how many is timing)
    assert first["1"] == [0, 1] and set(first) == {"1", "2", "3"}
    assert all(first[r][0] == 1 and first[r][1] <= 2 for r in ("2", "3")), first
    kernel = sorted(p.name.split(".")[-1] for p in saved if "_assign_accumulate" in p.name)
    assert kernel == ["nbc", "nbi"]  # one signature: its index and its code
    second, kept = run("out2")
    assert second == {"1": [1, 0], "2": [1, 0], "3": [1, 0]}
    assert kept == saved  # nothing saved: no file added or replaced


THREADED = '''
import os
import threading
import time
from pathlib import Path

from flegel.algorithms.kmeans import KMeans

MARKS = Path(__file__).resolve().parent / "marks"
MARKS.mkdir(exist_ok=True)
_started = []


def _late_mark():
    time.sleep(1.0)
    (MARKS / str(os.getpid())).touch()


def _start_once():
    if not _started:  # not a daemon: Python's exit waits for it
        _started.append(threading.Thread(target=_late_mark))
        _started[0].start()


class Threaded(KMeans):
    """K-means that leaves a thread running at the end of the run, on every rank."""

    def evaluate(self, theta, block):  # the workers' final evaluation
        _start_once()
        return super().evaluate(theta, block)

    def finalize(self, theta):  # the master's saving of the model
        _start_once()
        return super().finalize(theta)
'''


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run under a plain mpirun (no launcher) of a K-means that leaves a thread running
    at its end on every rank; its folder (the run in ``out``).  Two tests read it."""
    tmp_path = tmp_path_factory.mktemp("plain")
    (tmp_path / "threaded.py").write_text(THREADED)
    job = write_job(tmp_path / "job.yaml", **{**JOB, "algorithm": "threaded:Threaded",
                                               "output": {"progress": "none"}})
    mpirun(job, 2, tmp_path / "out")
    return tmp_path


@pytest.mark.mpi
def test_ranks_end_after_their_threads(plain_run):
    """A rank ends without Python's module teardown, but as Python's exit would: after
    its non-daemon threads."""
    assert len(list((plain_run / "marks").iterdir())) >= 3  # the master and both workers


@pytest.mark.mpi
def test_a_fit_counts_its_phases_from_its_own_start(tmp_path):
    """An estimator's fit runs in a process that may be hours old: its run's launch_s counts
    from the fit, so the phases fit in the fit's wall time (issue 23: they counted from the
    process's start)."""
    if find_mpiexec() is None:
        pytest.skip("no MPI launcher installed")
    # The process is older than the fit by its imports and 0.5 s: ten times the tolerance.
    code = ("import json, sys, time; import numpy as np, flegel; time.sleep(0.5); "
            f"est = flegel.KMeans(n_clusters=2, workers=2, out={str(tmp_path)!r}); "
            "t0 = time.time(); est.fit(np.random.default_rng(0).random((30, 3))); "
            "wall = time.time() - t0; "
            "t = json.load(open(est.run_dir_ / 'summary.json'))['timings']; "
            "print(json.dumps({'wall': wall, 'timings': t}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env=child_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    timings = out["timings"]
    assert list(timings) == [p for p, _ in PHASES]
    assert all(isinstance(v, float) and v >= 0 for v in timings.values()), timings
    assert sum(timings.values()) <= out["wall"] + 0.05, out


def test_a_lone_rank_says_so_before_it_touches_the_run_directory(tmp_path):
    """A world of one rank (a bare rank, srun without PMI): one line, and an existing run
    given with --force is left as it was (the check used to come after claiming it)."""
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 2},
                    data={"source": "synthetic", "kind": "blobs", "n_points": 200,
                          "n_features": 2, "centers": 2, "seed": 0},
                    workers=1, stop={"max_iterations": 2}, output={"progress": "none"})
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(job), "--out", str(old),
                           "--force"], capture_output=True, text=True, timeout=60,
                          env={**child_env(), "FLEGEL_UNDER_MPI": "1"})
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("flegel: needs at least 2 MPI ranks"), proc.stderr
    assert (old / "summary.json").read_text() == "{}"
