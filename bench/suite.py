"""Run every figure of issue 14 and print one table: the ratio, its target, met or missed.

Each benchmark script runs once, as a subprocess with a timeout; every figure it gives is a
ratio measured in that one run (never combined across runs).  The table ends the output:
figure, measured ratio, target, met / missed, the script's wall time and the exact command
that reproduces the figure.  A script that fails or runs past its timeout shows as
``failed`` with its last stderr line, and the suite goes on with the next one.  The machine
(cores, CPU model, memory, versions, load average at the start) is printed first: on a
shared machine the load says how far to trust the figures.

    python bench/suite.py                 # the quick variants (a few minutes)
    python bench/suite.py --full          # the issue's sizes (tens of minutes)
    python bench/suite.py --only memory,loaders --json suite.json
    python bench/suite.py --list          # names and commands, runs nothing

Benchmarks are not tests: nothing here asserts a time, and the exit status is 0 whether
targets are met or missed (1 only when a script failed).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Reading:
    """One figure as a benchmark's parser reads it from one run.

    ``label`` tells figures of the same run apart (empty for a run's only figure); ``op`` is
    how the value compares with ``target`` to meet it (``<=`` or ``>=``); ``target`` None
    means the figure is reported without a target; ``note`` says what was measured.
    """

    label: str
    value: float | None
    target: float | None
    op: str = "<="
    note: str = ""


#: A parser: the script's ``--json`` document (None for a script parsed from its text) and
#: its stdout -> its figures.
Parser = Callable[[dict[str, Any] | None, str], list[Reading]]


@dataclass(frozen=True)
class Bench:
    """One benchmark script, how the suite runs it, and how its figures are read.

    ``when``: ``default`` runs in every suite run, ``full`` only with ``--full`` (or when
    named by ``--only``), ``opt-in`` only when named by ``--only``.  ``json``: the script
    takes ``--json OUT`` and the parser reads that document; otherwise it reads stdout.
    ``optional``: the script may not exist yet (the suite skips it, saying why).
    ``skip_reason``: returns why the benchmark cannot run here (None: it can).
    """

    name: str
    script: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    parse: Parser
    timeout_s: float
    full_timeout_s: float
    when: str = "default"
    json: bool = True
    optional: bool = False
    skip_reason: Callable[[], str | None] | None = None

    def args(self, full: bool) -> tuple[str, ...]:
        """The script's arguments in quick or full mode."""
        return self.full if full else self.quick

    def command(self, full: bool) -> str:
        """The command a reader types to reproduce this benchmark's figures."""
        return " ".join(["python", self.script, *(shlex.quote(a) for a in self.args(full))])


@dataclass
class Figure:
    """One row of the table: a figure measured in one run, or why there is none."""

    name: str
    value: float | None
    target: float | None
    op: str
    status: str  # met, missed, reported, failed, skipped
    command: str
    note: str = ""
    wall_s: float | None = None
    load_start: float | None = None


# ----------------------------------------------------------------------------- parsers
def _startup(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    return [Reading("", doc.get("ratio_median"), 1.0, "<=",
                    f"(job wall - training - bare launch floor) / {doc['target_beyond_floor_s']}"
                    f" s, median of {doc['rounds']} alternated rounds")]


def _fits(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    """Issue 23, item 4: each estimator's small fit beyond the 3-rank floor, / 0.5 s."""
    assert doc is not None
    fits = doc["fits"]
    allowance = fits["target_beyond_floor_s"]
    return [Reading(name, r["beyond_median_s"] / allowance, 1.0, "<=",
                    f"{name}.fit on 30 x 3 (CNN 30 x 64): wall {r['wall_median_s']:.2f} s - "
                    f"floor of mpiexec -n 3 {r['floor_median_s']:.2f} s, / {allowance:g} s; "
                    f"median of {fits['rounds']} alternated rounds")
            for name, r in fits["estimators"].items()]


def _higgs(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    runs = doc["higgs"]
    r = runs[0] if runs else None
    return [Reading("", r["ratio"] if r else None, 1.0, "<=",
                    "kmeans_higgs wall / (load + train + 3 s)"
                    + (f": {r['wall_s']:.1f} s / {r['target_s']:.1f} s" if r else ""))]


def _memory(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    parts = doc["partitions"]
    each = ", ".join(f"{p} {v['ratio']:.2f}" for p, v in parts.items())
    return [Reading("", doc.get("ratio_max"), 1.5, "<=",
                    f"summed worker peak RSS beyond a 1,000-row run / data bytes "
                    f"({doc['rows']:,} x {doc['cols']}), worst partition of: {each}")]


def _blocksize(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    loop = doc["loop"]
    return [Reading("", doc["mpirun"]["share"], 0.30, "<=",
                    "share of the workers' compute in a 5 ms per-call fixed cost, 2-worker ASP "
                    f"job (loop alone: new sizer {loop['new']['share']:.2f}, old "
                    f"{loop['old']['share']:.2f})")] + _bspb(doc)


def _bspb(doc: dict[str, Any]) -> list[Reading]:
    """Issue 23, item 3: the share under BSPB with ``sync.block: auto``, per kernel."""
    readings = []
    for point_s, row in (doc.get("bspb") or {}).items():
        fixed, auto = row["16384"], row["auto"]
        readings.append(Reading(
            f"bspb {float(point_s) * 1e6:g} us/pt", auto["share"], 0.30, "<=",
            "share of the workers' compute in a 5 ms per-call fixed cost, 2-worker BSPB, "
            f"sync.block: auto (chose {auto['block']}; fixed 16,384-point blocks: "
            f"{fixed['share']:.2f})"))
    return readings


def _loaders(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    each = ", ".join(f"{f} {v['ratios']['1 shard']:.2f}" for f, v in doc["files"].items())
    return [Reading("", doc.get("worst_ratio"), 1.0, "<=",
                    f"flegel whole-file load / sklearn load_svmlight_file or np.loadtxt "
                    f"(medians), worst of: {each}")]


def _elastic_waits(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    med = doc["median_ratio"]
    n = len(doc["ratios"].get("predicted", []))
    final = med.get("final")
    tail = f"; / d of the plan that placed the barrier {final:.2f}" if final else ""
    return [Reading("/d*", med.get("predicted"), 2.0, "<=",
                    f"ElasticBSP measured wait / ZipLine's d* of the first plan, median of {n} "
                    f"MPI runs{tail}"),
            Reading("/expected", med.get("expected"), 2.0, "<=",
                    f"ElasticBSP measured wait / its expected wait, median of {n} MPI runs"),
            Reading("/placed d", final, 1.5, "<=",
                    "ElasticBSP measured wait / d of the (re-)plan that placed the barrier "
                    "(issue 19: 1.5x), "
                    f"median of {n} MPI runs"),
            Reading("/placed d*", med.get("final_star"), 1.5, "<=",
                    "ElasticBSP measured wait / ZipLine's d* of the plan that placed the "
                    f"barrier (issue 19, item 6), median of {n} MPI runs")]


def _elastic_sim(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    rolling = [r for r in doc["rows"] if r["plan"] == "rolling"]
    worst_d = max(rolling, key=lambda r: r["predicted_ratio"])
    worst_e = max(rolling, key=lambda r: r["expected_ratio"])
    # The worst noise level is the figure: the target holds only if it holds at every one.
    return [Reading("/d*", worst_d["predicted_ratio"], 2.0, "<=",
                    f"simulated clock, rolling plan, worst noise level ({worst_d['noise']}): "
                    "measured wait / d*"),
            Reading("/expected", worst_e["expected_ratio"], 2.0, "<=",
                    f"simulated clock, rolling plan, worst noise level ({worst_e['noise']}): "
                    "measured wait / expected wait")]


def _migration_sim(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    s = doc["settings"]
    readings = []
    if "injected" in s:
        readings.append(Reading("speedup", s["injected"]["async"]["speedup_vs_off"], 1.3, ">=",
                                "simulated clock: time to target without migration / with "
                                "async migration, one worker 60x slower"))
    if "noise" in s:
        readings.append(Reading("noise", s["noise"]["async"]["speedup_vs_off"], 1.0, ">=",
                                "simulated clock: time to target without migration / with "
                                "async migration, random speeds (no straggler: nothing to "
                                "gain, nothing to lose)"))
    # Balance is asked of migration where it acts (a straggler, equal speeds); where speeds
    # only fluctuate it moves nothing (issue 19) and the passes spread as without it.
    dev = max(((name, v["async"]["max_dev"]) for name, v in s.items() if name != "noise"),
              key=lambda p: p[1], default=None)
    if dev is not None:
        readings.append(Reading("max dev", dev[1], 0.10, "<=",
                                "simulated clock, async migration: largest |passes - mean| / "
                                f"mean at the end, worst setting but noise ({dev[0]})"))
    return readings


def _fsp_speedup(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    bound = " (a lower bound: BSPV missed the target)" if doc.get("lower_bound") else ""
    return [Reading("", doc.get("speedup"), None, ">=",
                    "time to target BSPV / FSPV, one injected straggler (32 ms per 1,000 "
                    f"points), K-means 200,000 x 28{bound}")]


def _migration(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    readings = []
    for algo, res in doc["algorithms"].items():
        rows = res["runs"].get("injected")
        if not rows:
            continue
        off, on = rows["fspv off"]["time_to_target_s"], rows["fspv async"]["time_to_target_s"]
        ratio = off / on if off and on else None
        readings.append(Reading(algo, ratio, 1.3, ">=",
                                f"MPI, {algo}: time to target FSPV without migration / with "
                                "async migration, injected straggler (None: a run missed the "
                                "target)"))
    return readings


def _zipline(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    assert doc is not None
    return [Reading("", doc["ratio"], 1.0, "<=",
                    f"ZipLine solve ('fast') at n=1000, R=150 / 11 ms "
                    f"({doc['n1000_r150_us'] / 1e3:.1f} ms)")]


#: ``ratio flegel / scikit-learn  :  0.753   (target <= 1.0)`` in kmeans_bench.py's output.
KMEANS_RATIO = re.compile(r"ratio flegel / scikit-learn\s*:\s*([0-9.]+)")


def _kmeans(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    m = KMEANS_RATIO.search(out)
    size = re.search(r"K-means per pass: ([0-9,]+ x \d+)", out)
    return [Reading("", float(m.group(1)) if m else None, 0.8, "<=",
                    "flegel K-means full pass (1 worker) / scikit-learn Lloyd iteration, "
                    f"{size.group(1) if size else '?'}, K=16, 1 thread (issue 14's target 0.8)")]


# Issue 23 (i23k): each algorithm's iteration against scikit-learn's ------------------------
def _kmeans_short(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    """``kmeans_bench.py --short``: the 12-iteration K-means job against scikit-learn."""
    assert doc is not None
    kernels = doc.get("kernels") or {}
    steady = (kernels["array_steady"] / kernels["numba_steady"]
              if kernels.get("numba_steady") and "array_steady" in kernels else None)
    return [Reading("", doc.get("ratio"), 1.0, "<=",
                    f"flegel K-means {doc.get('iterations')}-iteration job (training wall / "
                    f"iterations, kernel auto, warm install) / scikit-learn Lloyd iteration, "
                    f"{doc.get('points', 0):,} x 28, K=16, 1 thread, fastest of rounds"),
            Reading("array-job", doc.get("ratio_array"), None, "<=",
                    "the same job with kernel: array (NumPy throughout) / scikit-learn"),
            Reading("array-vs-numba", steady, 1.5, "<=",
                    "NumPy array kernel / numba kernel, one steady pass over all points, "
                    "both on one thread")]


#: ``algorithms_bench.py --vs-sklearn`` rows the suite shows: key -> (label, target); every
#: algorithm's iteration against scikit-learn's (or NumPy's, for FCM).
VS_SKLEARN = {"kmeans": ("kmeans-steady", 0.6), "gmm": ("gmm", 1.0), "nmf": ("nmf", 1.0),
              "nmf_array": ("nmf-array", None), "nmf_mu": ("nmf-mu", 1.0),
              "nmf_cd": ("nmf-vs-cd", None),
              "logreg": ("logreg", None), "logreg_multinomial": ("logreg-multinomial", None),
              "fcm": ("fcm", None)}


def _vs_sklearn(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    """``algorithms_bench.py --vs-sklearn``: a flegel full-batch iteration / scikit-learn's."""
    assert doc is not None
    rows = {r["key"]: r for r in doc.get("rows", [])}
    readings = []
    for key, (label, target) in VS_SKLEARN.items():
        r = rows.get(key)
        readings.append(Reading(label, None if r is None else r["ratio"], target, "<=",
                                "missing from the output" if r is None else
                                f"{r['algorithm']} {r['data']} / {r['reference']}, 1 thread"))
    return readings


def _generic(doc: dict[str, Any] | None, out: str) -> list[Reading]:
    """A script whose figures the suite does not define (``gpu_bench.py``, not the suite's):
    its ``--json`` document's ``ratio``, ``target`` and ``headline`` (what the ratio is),
    or without one its last ``ratio ... N`` line and ``target <= T`` on that line."""
    if doc is not None:
        value, target = doc.get("ratio"), doc.get("target")
        return [Reading("", float(value) if isinstance(value, (int, float)) else None,
                        float(target) if isinstance(target, (int, float)) else None, "<=",
                        str(doc.get("headline") or "the script's --json 'ratio'"))]
    lines = [ln for ln in out.splitlines() if re.search(r"ratio.*?\d", ln, re.I)]
    if not lines:
        return [Reading("", None, None, "<=", "no 'ratio' line in the output")]
    line = lines[-1]
    value = re.search(r"ratio[^0-9]*([0-9]+(?:\.[0-9]+)?)", line, re.I)
    target = re.search(r"target\s*<=\s*([0-9]+(?:\.[0-9]+)?)", line, re.I)
    return [Reading("", float(value.group(1)) if value else None,
                    float(target.group(1)) if target else None, "<=", line.strip())]


def _no_gpu() -> str | None:
    """Why the GPU benchmark cannot run here, or None when it can."""
    if not (ROOT / "bench" / "gpu_bench.py").exists():
        return "bench/gpu_bench.py does not exist"
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    # In a child: a broken CUDA install can hang or abort the importing process.
    probe = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return "probing the GPU with CuPy took over 60 s"
    if proc.returncode != 0 or not proc.stdout.strip().isdigit():
        return "CuPy finds no CUDA device: " + last_line(proc.stderr or proc.stdout)
    if int(proc.stdout) == 0:
        return "CuPy finds no CUDA device"
    return None


@functools.cache
def _help_mentions(script: str, option: str) -> bool:
    """Whether ``script --help`` lists ``option`` (for a script the suite does not own)."""
    try:
        proc = subprocess.run([sys.executable, script, "--help"], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return False
    return option in proc.stdout


#: Every benchmark, in the order the suite runs them.
BENCHES: list[Bench] = [
    Bench("startup", "bench/startup_bench.py", ("--rounds", "2"), ("--rounds", "3"),
          _startup, 300, 600),
    Bench("startup-higgs", "bench/startup_bench.py", ("--rounds", "0", "--higgs", "1"),
          ("--rounds", "0", "--higgs", "1"), _higgs, 600, 600, when="full"),
    Bench("startup-fits", "bench/startup_bench.py", ("--rounds", "0", "--fits", "2"),
          ("--rounds", "0", "--fits", "3"), _fits, 300, 600),
    Bench("memory", "bench/memory_bench.py", ("--rows", "500000"), ("--rows", "2000000"),
          _memory, 300, 900),
    Bench("blocksize", "bench/blocksize_bench.py", ("--seconds", "1"), ("--seconds", "3"),
          _blocksize, 180, 300),
    Bench("gpu", "bench/gpu_bench.py", (), (), _generic, 600, 600, json=False, optional=True,
          skip_reason=_no_gpu),
    Bench("kmeans", "bench/kmeans_bench.py", ("--quick",), (), _kmeans, 300, 900, json=False),
    Bench("loaders", "bench/loaders_bench.py", ("--rows", "50000", "--rounds", "3"),
          ("--rows", "200000", "--rounds", "5"), _loaders, 300, 900),
    Bench("elastic-waits", "bench/sync_bench.py",
          ("--waits", "--quick", "--repeats", "3", "--models", "elastic"),
          ("--waits", "--repeats", "3"), _elastic_waits, 300, 900),
    Bench("elastic-sim", "bench/sync_bench.py", ("--waits-sim", "--repeats", "1"),
          ("--waits-sim", "--repeats", "3"), _elastic_sim, 180, 600),
    Bench("migration-sim", "bench/migration_sim.py", (), (), _migration_sim, 180, 180),
    Bench("fsp-speedup", "bench/fsp_speedup.py", (), (), _fsp_speedup, 300, 300),
    Bench("zipline", "bench/zipline_bench.py", ("--quick",), (), _zipline, 600, 1800,
          when="full"),
    # issue 23 (i23k): iterations against scikit-learn
    Bench("kmeans-short", "bench/kmeans_bench.py", ("--short", "--quick", "--no-cold"),
          ("--short",), _kmeans_short, 600, 1200),
    Bench("vs-sklearn", "bench/algorithms_bench.py", ("--vs-sklearn", "--quick"),
          ("--vs-sklearn",), _vs_sklearn, 600, 1200),
    Bench("migration", "bench/migration_bench.py",
          ("--quick", "--algorithms", "kmeans", "--settings", "injected"),
          ("--algorithms", "kmeans,logreg", "--settings", "injected"), _migration, 1200,
          3600, when="opt-in"),
]


# ----------------------------------------------------------------------------- running
def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (what a failure is shown with), or ``""``."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def judge(value: float | None, target: float | None, op: str) -> str:
    """``met`` / ``missed`` against the target, ``reported`` without one, ``failed``
    without a value."""
    if value is None:
        return "failed"
    if target is None:
        return "reported"
    ok = value <= target if op == "<=" else value >= target
    return "met" if ok else "missed"


def _figure_name(bench: Bench, label: str) -> str:
    return f"{bench.name} {label}" if label else bench.name


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """End a timed-out script and everything it started (mpiexec and its ranks): they share
    the process group the script leads."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def resolved_args(bench: Bench, full: bool) -> list[str]:
    """The arguments the suite runs ``bench`` with (``--json`` aside): its own, plus
    ``--quick`` in quick mode for an optional script (not the suite's) that offers one."""
    args = list(bench.args(full))
    if bench.optional and not full and (ROOT / bench.script).exists() \
            and _help_mentions(bench.script, "--quick"):
        args.append("--quick")
    return args


def run_bench(bench: Bench, full: bool, timeout_scale: float = 1.0,
              logs: Path | None = None, verbose: bool = False) -> list[Figure]:
    """Run one benchmark script once and read its figures.

    Parameters
    ----------
    bench
        The benchmark.
    full
        The issue's sizes instead of the quick variant.
    timeout_scale
        Multiplies the benchmark's timeout (a loaded machine needs more).
    logs
        A folder to keep the script's stdout and stderr in (``NAME.out``, ``NAME.err``).
    verbose
        Print the script's stdout after it ends.

    Returns
    -------
    list of Figure
        Its figures; one ``failed`` row when it failed, timed out or printed no figure, one
        ``skipped`` row when it cannot run here.
    """
    args = resolved_args(bench, full)
    command = " ".join(["python", bench.script, *(shlex.quote(a) for a in args)])
    load = os.getloadavg()[0]

    def row(status: str, note: str, wall: float | None = None) -> list[Figure]:
        return [Figure(bench.name, None, None, "<=", status, command, note, wall, load)]

    if bench.skip_reason is not None:
        reason = bench.skip_reason()
        if reason:
            return row("skipped", ("skipped: no GPU: " if bench.name == "gpu" else "skipped: ")
                       + reason)
    if not (ROOT / bench.script).exists():
        return row("skipped" if bench.optional else "failed", f"{bench.script} does not exist")
    timeout = bench.timeout_s if not full else bench.full_timeout_s
    timeout *= timeout_scale
    uses_json = bench.json or (bench.optional and _help_mentions(bench.script, "--json"))
    with tempfile.TemporaryDirectory(prefix="flegel-suite-") as tmp:
        out_json = Path(tmp) / f"{bench.name}.json"
        if uses_json:
            args += ["--json", str(out_json)]
        t0 = time.perf_counter()
        # A session of its own: on a timeout the whole group (mpiexec, ranks) is ended.
        proc = subprocess.Popen([sys.executable, bench.script, *args], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            timed_out = True
        wall = time.perf_counter() - t0
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{bench.name}.out").write_text(stdout)
            (logs / f"{bench.name}.err").write_text(stderr)
        if verbose:
            print(stdout, end="" if stdout.endswith("\n") else "\n")
        if timed_out:
            return row("failed", f"timed out after {timeout:.0f} s; last line: "
                       f"{last_line(stderr) or last_line(stdout)}", wall)
        if proc.returncode != 0:
            return row("failed", f"exit {proc.returncode}: "
                       f"{last_line(stderr) or last_line(stdout)}", wall)
        doc = None
        if uses_json:
            if not out_json.exists():
                return row("failed", "the script wrote no --json file", wall)
            doc = json.loads(out_json.read_text())
    try:
        readings = bench.parse(doc, stdout)
    except (KeyError, TypeError, ValueError, IndexError, AssertionError) as exc:
        return row("failed", f"could not read its figures: {type(exc).__name__}: {exc}", wall)
    figures = []
    for r in readings:
        status = judge(r.value, r.target, r.op)
        note = r.note if r.value is not None else f"no figure in the output ({r.note})"
        figures.append(Figure(_figure_name(bench, r.label), r.value, r.target, r.op, status,
                              command, note, wall, load))
    return figures


# ----------------------------------------------------------------------------- machine
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, Any]:
    """What the figures were measured on: cores, CPU, memory, versions, load, checkout.

    Versions come from the installed packages' metadata, so nothing is imported (importing
    ``mpi4py.MPI`` would initialize MPI in the suite's own process).
    """
    cpu = re.search(r"^model name\s*:\s*(.+)$", _read("/proc/cpuinfo"), re.M)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.M)
    gpu = None
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True)
        gpu = proc.stdout.strip() or None
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True).stdout
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu": cpu.group(1).strip() if cpu else platform.processor() or "unknown",
        "memory_gib": round(int(mem.group(1)) / 2**20, 1) if mem else None,
        "gpu": gpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": _version("numpy"), "numba": _version("numba"), "mpi4py": _version("mpi4py"),
        "mpich": _version("mpich"), "scikit-learn": _version("scikit-learn"),
        "cupy": _version("cupy-cuda12x"),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "commit": git or None,
        "modified_tracked_files": len(dirty.splitlines()),
        "started_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def format_machine(m: dict[str, Any]) -> str:
    """The machine description, a few lines of text."""
    load = " ".join(f"{v:.2f}" for v in m["load_average"])
    lines = [
        f"machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gib']} GiB memory, "
        f"GPU: {m['gpu'] or 'none'}; {m['os']}",
        f"  Python {m['python']}, NumPy {m['numpy']}, numba {m['numba']}, mpi4py "
        f"{m['mpi4py']} (mpich {m['mpich']}), scikit-learn {m['scikit-learn']}, CuPy "
        f"{m['cupy']}",
        f"  load average {load} (1, 5, 15 min) at {m['started_utc']}; checkout {m['commit']}"
        + (f" with {m['modified_tracked_files']} modified tracked files"
           if m["modified_tracked_files"] else ""),
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- output
def _fmt_value(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def format_table(figures: Sequence[Figure]) -> str:
    """The table: figure, measured, target, result, wall seconds, command; then one note a
    figure saying what was measured (or why it failed or was skipped)."""
    head = ("figure", "measured", "target", "result", "wall s", "command")
    rows = [(f.name,
             _fmt_value(f.value) if f.status not in ("failed", "skipped") else f.status,
             f"{f.op} {f.target:g}" if f.target is not None else "-",
             f.status,
             f"{f.wall_s:.0f}" if f.wall_s is not None else "-",
             f.command) for f in figures]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]

    def line(r: Sequence[str]) -> str:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:-1], widths[1:])),
                 r[-1]]
        return "  ".join(cells)

    out = [line(head), line(["-" * w for w in widths] + ["-" * 7]), *map(line, rows)]
    out.append("")
    out += [f"  {f.name}: {f.note}" for f in figures if f.note]
    return "\n".join(out)


def to_json(m: dict[str, Any], figures: Sequence[Figure], mode: str,
            load_end: Sequence[float]) -> dict[str, Any]:
    """The suite's JSON document: mode, machine, load at the end, one object a figure."""
    return {"mode": mode, "machine": m, "load_average_end": [round(v, 2) for v in load_end],
            "figures": [asdict(f) for f in figures]}


def selected(only: str | None, full: bool) -> list[Bench]:
    """The benchmarks a run covers: named ones, or by mode (see :class:`Bench`)."""
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        known = {b.name for b in BENCHES}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(known))}")
        return [b for b in BENCHES if b.name in names]
    wanted = {"default", "full"} if full else {"default"}
    return [b for b in BENCHES if b.when in wanted]


def format_list() -> str:
    """``--list``: each benchmark's name, when it runs, quick and full commands."""
    out = []
    for b in BENCHES:
        extra = " (runs only if present, with CuPy and a GPU)" if b.optional else ""
        out.append(f"{b.name}  [{b.when}]{extra}")
        quick = " ".join(["python", b.script, *map(shlex.quote, resolved_args(b, False))])
        out.append(f"  quick: {quick}")
        out.append(f"  full:  {b.command(True)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="the issue's sizes, and the benchmarks marked [full]")
    ap.add_argument("--only", default=None, metavar="NAME,...",
                    help="run these benchmarks only (any of --list, [opt-in] ones too)")
    ap.add_argument("--list", action="store_true", help="print names and commands, run nothing")
    ap.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="also write the machine and the table as JSON to PATH")
    ap.add_argument("--logs", type=Path, default=None, metavar="DIR",
                    help="keep each script's stdout and stderr in DIR")
    ap.add_argument("--timeout-scale", type=float, default=1.0,
                    help="multiply every timeout (a loaded machine needs more)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each script's output")
    args = ap.parse_args(argv)
    if args.list:
        print(format_list())
        return 0
    benches = selected(args.only, args.full)
    mode = "full" if args.full else "quick"
    m = machine()
    print(f"flegel benchmark suite ({mode}): {len(benches)} benchmarks")
    print(format_machine(m), flush=True)
    figures: list[Figure] = []
    for i, b in enumerate(benches, 1):
        cmd = " ".join(["python", b.script, *map(shlex.quote, resolved_args(b, args.full))])
        print(f"[{i}/{len(benches)}] {b.name}: {cmd}", flush=True)
        got = run_bench(b, args.full, args.timeout_scale, args.logs, args.verbose)
        figures += got
        for f in got:
            said = {"failed": f"failed: {f.note}", "skipped": f.note}.get(
                f.status, f"{_fmt_value(f.value)} {f.status}")
            took = f" [{f.wall_s:.0f} s]" if f.wall_s is not None else ""
            print(f"    {f.name}: {said}{took}", flush=True)
    load_end = os.getloadavg()
    loads = [f.load_start for f in figures if f.load_start is not None]
    print(f"\nload average at the end {' '.join(f'{v:.2f}' for v in load_end)}; 1-minute load "
          f"at each script's start: median {statistics.median(loads):.1f}, max "
          f"{max(loads):.1f}" if loads else "")
    print()
    print(format_table(figures))
    if args.json:
        args.json.write_text(json.dumps(to_json(m, figures, mode, load_end), indent=2))
    return 1 if any(f.status == "failed" for f in figures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
