"""The first seconds of ``flegel paper``'s short jobs, phase by phase and rank by rank (issue 19).

Runs ``flegel run`` on the page's own workloads (:mod:`flegel.cli.paper.workloads`, ``--quick``
scale: K-means, GMM, FCM, logreg, NMF, CNN; their job as the page writes it, BSPB, no
stragglers) ``--runs`` times each, training ``--max-time`` seconds, and prints

* per run, the wall time of the whole ``flegel run`` and ``summary.json``'s ``timings``
  (rank 0's phases: launch, import, load, compile, train, final_eval, write;
  :mod:`flegel.runtime.timings`), then each phase's median per algorithm;
* per rank, the median wall and CPU seconds of each step of ``summary.json``'s ``startup``
  (:class:`flegel.runtime.timings.RankClock`: ``imported`` -- the interpreter, the imports,
  MPI's start and the job agreed; ``loaded``; on a worker ``kernels_ahead`` -- numba and the
  compiled kernels loaded while the master computes θ⁽⁰⁾; ``warm_up``; ``block_cost``; on the
  master ``theta0`` ...), and the CPU seconds of all ranks' start-up (to ``ready``) summed:
  on 2 cores that sum, not one rank's wall time, is what a short job's start costs.

``--profile RANK`` runs one K-means job (or ``--algorithms``' first) under ``mpiexec`` with
that rank under cProfile and prints its 25 most expensive functions (cumulative) up to
training; ``--importtime`` prints the 20 slowest imports of a worker's imports, then of
``scipy.linalg`` (what numba imports without the BLAS preload; ``python -X importtime``);
``--kernels N`` times, N times in fresh processes, what a worker's ``kernels_ahead`` step
does -- the job read, the algorithm made, numba started and its compiled kernels loaded
(:meth:`flegel.device.DeviceKernels.load_compiled`) -- in CPU seconds (less noisy than wall
time on a shared machine); with ``--ab-preload``, alternately with and without
:func:`flegel.jit.preload_blas` in the same checkout (:func:`ab_preload`).

``--switch dtype`` (or ``threads``) runs, ``--runs`` times, a pair of jobs in a fresh numba
cache (``NUMBA_CACHE_DIR``): the job as the page writes it (float64, one thread), then the
same job with ``data.dtype=float32`` (or ``runtime.threads=2``), whose kernels that cache does
not hold (:func:`switch`).  It prints, for that second run, how many kernels were compiled and
saved (numba's ``NUMBA_DEBUG_CACHE`` lines: one per compile), each worker's CPU seconds of its
kernel steps (``kernels_ahead`` + ``warm_up``: numba's start and loading or compiling its
kernels, or waiting for worker 1) and the wall seconds from ``flegel run``'s start to the
master's first θ update (the phases up to training, then the first snapshot of
``objective_trace``).  Compare checkouts with ``--python``.

    python bench/startup.py                                   # 6 algorithms x 3 runs
    python bench/startup.py --algorithms kmeans,nmf --runs 5
    python bench/startup.py --profile 1 --algorithms nmf
    python bench/startup.py --kernels 8 --algorithms kmeans,nmf
    python bench/startup.py --kernels 6 --ab-preload --algorithms kmeans,nmf
    python bench/startup.py --python /usr/bin/python3          # another checkout's flegel
    python bench/startup.py --switch dtype --algorithms kmeans --runs 3

Phases from a checkout without ``startup`` in its summary (before issue 19) print the
phases only.  Timings on a shared machine are noisy: compare medians of runs made back to
back, and say the load (printed at the start and the end).  Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from startup_bench import _env  # the same environment as the start-up bench's runs

from flegel.runtime.timings import PHASES as _NAMED

PHASES = tuple(key for key, _ in _NAMED)
#: The steps counted as start-up in the CPU sum: every step up to a rank's ``ready``.
TRAINING_STEPS = ("trained", "final_eval")


def _jobs(folder: Path, names: list[str]) -> dict[str, Path]:
    """The page's ``--quick`` jobs of ``names`` (contiguous shards), written under ``folder``
    (its data reused when there)."""
    from flegel.cli.paper.workloads import QUICK, workloads, write_data, write_job

    loads = workloads(QUICK)
    return {n: write_job(loads[n], QUICK, write_data(loads[n], folder / "data"),
                         "contiguous", folder / "jobs") for n in names}


def run(python: str, job: Path, out: Path, max_time: float, *sets: str,
        env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``flegel run`` of ``job`` (``sets``: more ``--set`` values): its wall time and
    summary, and its standard output (``stdout``)."""
    t0 = time.perf_counter()
    # Run from the job's folder: ``python -m`` puts the working directory first on the path,
    # and from a checkout's root another Python would import that checkout's flegel.
    cmd = [python, "-m", "flegel", "run", str(job), "--out", str(out), "--force",
           "--set", f"stop.max_time_s={max_time}"]
    for value in sets:
        cmd += ["--set", value]
    proc = subprocess.run(cmd, cwd=job.parent, env=env or _env(), capture_output=True,
                          text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"flegel run {job} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"wall": wall, "stdout": proc.stdout,
            **json.loads((out / "summary.json").read_text())}


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _per_rank(runs: list[dict[str, Any]]) -> None:
    """Median wall / CPU of each step of each rank's ``startup``, and the summed CPU."""
    if not all("startup" in r for r in runs):
        print("    (no per-rank startup in summary.json: a checkout before issue 19)")
        return
    steps: dict[str, list[str]] = {}
    cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
    cpu_sums: list[float] = []
    for r in runs:
        total = 0.0
        for rank, clock in r["startup"].items():
            names = steps.setdefault(rank, [])
            for name, wall, cpu in clock["steps"]:
                if name not in names:
                    names.append(name)
                cells.setdefault((rank, name), []).append((wall, cpu))
                if name not in TRAINING_STEPS:
                    total += cpu
        cpu_sums.append(total)
    for rank, names in steps.items():
        role = "master" if rank == "0" else f"worker {rank}"
        print(f"    {role:<9} " + "  ".join(
            f"{n} {_med([w for w, _ in cells[rank, n]]):.2f}"
            f"/{_med([c for _, c in cells[rank, n]]):.2f}" for n in names))
    print(f"    start-up CPU of all ranks (to ready), summed: median {_med(cpu_sums):.2f} s "
          f"(runs: {', '.join(f'{c:.2f}' for c in cpu_sums)})")


def report(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Print ``name``'s runs and medians; return the medians."""
    for i, r in enumerate(runs):
        t = r.get("timings") or {}
        print(f"  {name} run {i + 1}: wall {r['wall']:5.2f} s | " + " ".join(
            f"{p[:-2]} {t[p]:.2f}" for p in PHASES if t.get(p) is not None))
    med = {p: _med([r["timings"][p] for r in runs if r["timings"].get(p) is not None])
           for p in PHASES}
    med["wall"] = _med([r["wall"] for r in runs])
    med["outside_train"] = _med([r["wall"] - r["timings"]["train_s"] for r in runs])
    print(f"  {name} medians: wall {med['wall']:.2f} s, outside training "
          f"{med['outside_train']:.2f} s | "
          + " ".join(f"{p[:-2]} {med[p]:.2f}" for p in PHASES))
    print("    per rank, median wall/CPU seconds of each step (summary.json's startup):")
    _per_rank(runs)
    return med


def profile(python: str, job: Path, out: Path, rank: int, max_time: float) -> None:
    """One run of ``job`` under ``mpiexec`` with ``rank`` under cProfile (:func:`_shim`)."""
    from flegel.cli.launch import find_mpiexec
    from flegel.job.validate import load_job

    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("no MPI launcher found")
    # The profile stops at RankClock's "ready" mark (_shim): a checkout before issue 19 has
    # no RankClock, and its rank would run unprofiled to the end.
    probe = subprocess.run([python, "-c", "from flegel.runtime.timings import RankClock"],
                           cwd=job.parent, env=_env(), capture_output=True, text=True,
                           timeout=120)
    if probe.returncode != 0:
        raise SystemExit(f"--profile needs flegel.runtime.timings.RankClock (issue 19), which "
                         f"{python}'s flegel lacks: profile this checkout's Python instead")
    n = load_job(str(job)).workers + 1
    stats = out / f"rank{rank}.prof"
    cmd = [mpiexec, "-n", str(n), python, __file__, "--shim", str(rank), str(stats), "--",
           "run", str(job), "--out", str(out / "run"), "--force",
           "--set", f"stop.max_time_s={max_time}", "--set", "output.progress=none"]
    proc = subprocess.run(cmd, cwd=job.parent, env=_env(), capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0 or not stats.exists():
        raise SystemExit(f"profiled run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    print(f"  rank {rank} of {job.stem}, cProfile to its first training step "
          f"(cumulative seconds, 25 highest):")
    pstats.Stats(str(stats)).sort_stats("cumulative").print_stats(25)


def _shim(rank: str, stats: str, argv: list[str]) -> None:
    """A rank of :func:`profile`: ``flegel`` itself, under cProfile on ``rank``; the profile
    is saved when training starts (the master's ``ready``; a worker's first block)."""
    if os.environ.get("PMI_RANK") == rank:
        prof = cProfile.Profile()
        import flegel.runtime.timings as timings

        mark = timings.RankClock.mark

        def marked(self: Any, name: str) -> None:
            mark(self, name)
            if name == "ready":
                prof.disable()
                prof.dump_stats(stats)

        timings.RankClock.mark = marked  # type: ignore[method-assign]
        prof.enable()
    from flegel.cli.commands import main as flegel_main

    raise SystemExit(flegel_main(argv))


def importtime(python: str, algorithm: str) -> None:
    """A worker's imports (the CLI, MPI, the run, the algorithm, numba), slowest first, and
    last ``scipy.linalg``: what numba imports for its BLAS at a kernel's first ``np.dot``
    without :func:`flegel.jit.preload_blas` (before issue 19; GMM with full covariances)."""
    code = ("import flegel.cli.commands; from mpi4py import MPI; import flegel.run; "
            f"import flegel.algorithms.{algorithm}; import numba; import scipy.linalg")
    with tempfile.TemporaryDirectory() as elsewhere:  # not a checkout's root (see run)
        proc = subprocess.run([python, "-X", "importtime", "-c", code], cwd=elsewhere,
                              env=_env(), capture_output=True, text=True, timeout=300)
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print(f"  a worker's imports, then scipy.linalg (python -X importtime; cumulative ms, "
          f"20 highest, {algorithm}):")
    for us, name in sorted(rows, reverse=True)[:20]:
        print(f"    {us / 1000:8.1f}  {name}")


#: A worker's ``kernels_ahead`` in a fresh process (:func:`kernels`).  With ``off`` as its
#: second argument, :func:`flegel.jit.preload_blas` is stubbed out first (``--ab-preload``):
#: numba then imports ``scipy.linalg`` for its BLAS, as before issue 19.  It prints whether
#: ``scipy.linalg`` got imported, so the A/B shows which path each side took.
KERNELS_CHILD = """
import sys
import numpy as np
if sys.argv[2:] == ["off"]:
    import flegel.jit
    if not hasattr(flegel.jit, "preload_blas"):
        raise SystemExit(f"--ab-preload: {flegel.jit.__file__} has no preload_blas")
    flegel.jit.preload_blas = lambda: False
from flegel.job.validate import load_job
job = load_job(sys.argv[1])
job.make_algorithm().load_compiled(job.data_info.n_features, np.dtype(np.float64))
print("scipy.linalg" in sys.modules)
"""


def _child_cpu(python: str, job: Path, *extra: str) -> tuple[float, str]:
    """CPU seconds (user + system) of one fresh :data:`KERNELS_CHILD`, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([python, "-c", KERNELS_CHILD, str(job), *extra], cwd=job.parent,
                          env=_env(), check=True, timeout=300, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            proc.stdout.strip())


def kernels(python: str, jobs: dict[str, Path], runs: int) -> None:
    """``--kernels``: CPU seconds of :data:`KERNELS_CHILD` per job, ``runs`` times (after
    one warm-up), each in a fresh ``python``; prints each run and the median."""
    for name, job in jobs.items():
        cpu = [_child_cpu(python, job)[0] for _ in range(runs + 1)][1:]  # 1st warms caches
        print(f"  {name}: a worker's kernels_ahead in a fresh process (imports, numba, "
              f"kernels), CPU s: median {_med(cpu):.3f} (runs: "
              f"{', '.join(f'{c:.2f}' for c in cpu)})")


def ab_preload(python: str, jobs: dict[str, Path], runs: int) -> None:
    """``--kernels N --ab-preload``: :data:`KERNELS_CHILD` of one checkout with
    :func:`flegel.jit.preload_blas` (``on``) and with it stubbed out (``off``), alternating
    on, off ``runs`` times (after one warm-up pair), each in a fresh ``python``: the
    preload's saving alone, same code and same numba cache on both sides.  Prints each
    side's CPU seconds, their medians, and the paired differences (off - on)."""
    for name, job in jobs.items():
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        linalg: dict[str, set[str]] = {"on": set(), "off": set()}
        for i in range(runs + 1):
            for side in ("on", "off"):
                seconds, printed = _child_cpu(python, job, side)
                linalg[side].add(printed)
                if i:  # the first pair warms numba's cache and the page cache
                    cpu[side].append(seconds)
        diffs = [off - on for on, off in zip(cpu["on"], cpu["off"])]
        for side in ("on", "off"):
            print(f"  {name} preload {side:<3}: kernels_ahead CPU s median {_med(cpu[side]):.3f}"
                  f" (runs: {', '.join(f'{c:.2f}' for c in cpu[side])}; scipy.linalg "
                  f"imported: {'/'.join(sorted(linalg[side]))})")
        print(f"  {name} saving (off - on, paired): median {_med(diffs):.3f} CPU-s, "
              f"min {min(diffs):.3f}, max {max(diffs):.3f}")


#: ``--switch``: the second job of a pair, whose kernels the first left out of numba's cache.
SWITCHES = {"dtype": "data.dtype=float32", "threads": "runtime.threads=2"}
#: A worker's steps that start numba and load (or compile, or wait for) its kernels.
KERNEL_STEPS = ("kernels_ahead", "warm_up")


def switch(python: str, jobs: dict[str, Path], runs: int, what: str, max_time: float,
           folder: Path) -> dict[str, dict[str, float]]:
    """``--switch``: per job, ``runs`` pairs in a fresh numba cache each -- the job, then
    the job with :data:`SWITCHES` [``what``] -- and the second run's compiles, each worker's
    CPU seconds of :data:`KERNEL_STEPS`, and its wall seconds to the first θ update (a run
    that ended before its first trace point has none: left out of the median).  Returns
    the medians per job (``--json``)."""
    medians = {}
    for name, job in jobs.items():
        saved, first, cpus = [], [], []
        for i in range(runs):
            env = {**_env(), "NUMBA_CACHE_DIR": str(folder / f"{name}-cache-{i}"),
                   "NUMBA_DEBUG_CACHE": "1"}
            run(python, job, folder / "before", max_time, env=env)
            r = run(python, job, folder / "after", max_time, SWITCHES[what], env=env)
            # numba prints one "data saved to ...nbc" per kernel it compiled and saved
            saved.append(sum(1 for ln in r["stdout"].splitlines()
                             if ln.startswith("[cache] data saved") and ".nbc" in ln))
            t = r["timings"]
            to_train = sum(t[p] or 0.0 for p in ("launch_s", "import_s", "load_s",
                                                 "compile_s"))
            trace = r["objective_trace"]
            if trace:
                first.append(to_train + trace[0][0])
            cpu = {rank: sum(c for step, _, c in clock["steps"] if step in KERNEL_STEPS)
                   for rank, clock in r["startup"].items() if rank != "0"}
            cpus.append(cpu)
            print(f"  {name} pair {i + 1} ({SWITCHES[what]} after the job): kernels compiled "
                  f"{saved[-1]}; kernel steps CPU s per worker "
                  + ", ".join(f"w{k} {v:.2f}" for k, v in cpu.items())
                  + f" (sum {sum(cpu.values()):.2f}); to first update "
                  + (f"{to_train + trace[0][0]:.2f} s" if trace else "none (no trace point)")
                  + f" (training from {to_train:.2f} s; flegel run wall {r['wall']:.2f} s)")
        sums = [sum(c.values()) for c in cpus]
        per_worker = [v for c in cpus for v in c.values()]
        medians[name] = {"kernels_compiled": _med(saved),
                         "kernel_cpu_s_per_worker": _med(per_worker),
                         "kernel_cpu_s_max": max(per_worker, default=float("nan")),
                         "kernel_cpu_s_summed": _med(sums), "to_first_update_s": _med(first),
                         "runs_with_an_update": len(first), "pairs": runs}
        m = medians[name]
        print(f"  {name} medians: kernels compiled {m['kernels_compiled']}, kernel steps CPU s"
              f" per worker {m['kernel_cpu_s_per_worker']:.2f} (max "
              f"{m['kernel_cpu_s_max']:.2f}), summed over the workers "
              f"{m['kernel_cpu_s_summed']:.2f}, to first update {m['to_first_update_s']:.2f} s"
              f" ({len(first)} of {runs} runs had one)")
    return medians


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--shim":
        _shim(sys.argv[2], sys.argv[3], sys.argv[5:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithms", default="kmeans,gmm,fcm,logreg,nmf,cnn")
    ap.add_argument("--runs", type=int, default=3, help="runs of each job (after one warm-up)")
    ap.add_argument("--max-time", type=float, default=0.5, help="training seconds per run")
    ap.add_argument("--python", default=sys.executable,
                    help="the Python whose flegel runs (default: this one; its flegel is "
                    "the one it imports outside this checkout)")
    ap.add_argument("--data", type=Path, default=None, help="folder for the data and jobs "
                    "(kept; default: a temporary one)")
    ap.add_argument("--profile", type=int, default=None, metavar="RANK",
                    help="profile RANK of one run instead")
    ap.add_argument("--importtime", action="store_true", help="a worker's imports instead")
    ap.add_argument("--kernels", type=int, default=0, metavar="N",
                    help="time a worker's kernel loading N times instead")
    ap.add_argument("--ab-preload", action="store_true", help="with --kernels: alternate "
                    "with and without flegel.jit.preload_blas (same checkout)")
    ap.add_argument("--switch", choices=sorted(SWITCHES), default=None,
                    help="pairs in a fresh numba cache: the job, then it with float32 data "
                    "(dtype) or two threads (threads); the second run's compiles and costs")
    ap.add_argument("--json", type=Path, default=None, help="also write the medians here")
    args = ap.parse_args()
    names = args.algorithms.split(",")
    print(f"startup: {os.cpu_count()} cores, load average "
          f"{' / '.join(f'{v:.1f}' for v in os.getloadavg())} at the start; python "
          f"{args.python}")
    if args.importtime:
        importtime(args.python, names[0])
        return
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        folder = args.data or Path(tmp)
        jobs = _jobs(folder, names)
        if args.switch:
            medians = switch(args.python, jobs, args.runs, args.switch, args.max_time,
                             Path(tmp))
            if args.json:
                args.json.write_text(json.dumps(medians, indent=2))
            return
        if args.kernels:
            (ab_preload if args.ab_preload else kernels)(args.python, jobs, args.kernels)
            return
        if args.profile is not None:
            profile(args.python, jobs[names[0]], Path(tmp), args.profile, args.max_time)
            return
        medians = {}
        for name, job in jobs.items():
            run(args.python, job, Path(tmp) / "warm", args.max_time)  # caches warm
            runs = [run(args.python, job, Path(tmp) / f"{name}-{i}", args.max_time)
                    for i in range(args.runs)]
            medians[name] = report(name, runs)
    walls = [m["wall"] for m in medians.values()]
    print(f"total of the medians' wall times: {sum(walls):.2f} s over {len(walls)} jobs; "
          f"load average {' / '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")
    if args.json:
        args.json.write_text(json.dumps(medians, indent=2))


if __name__ == "__main__":
    main()
