"""The fixed cost of every run, two checkouts interleaved (issue 19: ``flegel paper --quick``'s
~170 short jobs each pay it before any training).

Runs one short job (default: ``flegel paper --quick``'s K-means, its job as the page writes
it, BSPB, no stragglers) with two Pythons -- ``--a`` (default: ``python`` on the path, the
main checkout's flegel on this machine) and ``--b`` (default: this one, the checkout that
holds this script) -- alternately, ``--runs`` rounds after one warm-up each (numba's cache
and the page cache warm), the order flipped every round (a b, b a, ...) so a drift in the
machine's load falls on both.  Prints each run, then per side the median of

* ``wall``: the whole ``flegel run`` (launcher, ``mpiexec``, the ranks, their exit);
* ``cpu``: the CPU seconds of every process of it (the launcher, ``mpiexec``, its proxy and
  the ranks: ``RUSAGE_CHILDREN``): on 2 shared cores this, not one rank's wall time, is what
  a short job's start takes from the others;
* ``ranks``: the CPU seconds of all ranks up to their ``ready`` mark, summed (``summary.json``'s
  ``startup``, :class:`flegel.runtime.timings.RankClock`);
* each phase of ``summary.json``'s ``timings`` (:mod:`flegel.runtime.timings`), and
  ``exit``: the wall time they do not cover (the last lines, ``MPI_Finalize``, the exit);

and the paired differences b - a (median over rounds).  ``--job FILE`` times another job (it
runs from the job's folder).  ``--kernels N`` times instead, N rounds, what a worker's
``kernels_ahead`` step does, in a fresh process of each side (the job read, the algorithm
made, numba started and its compiled kernels loaded: ``bench/startup.py``'s ``--kernels``),
in CPU seconds.  For the per-rank steps of one checkout, its imports and a
profile, see ``bench/startup.py``.

    python bench/fixed_cost.py                       # main (python) vs this checkout, 5 rounds
    python bench/fixed_cost.py --runs 9 --algorithm nmf
    python bench/fixed_cost.py --a /work/main/.venv/bin/python --b .venv/bin/python
    python bench/fixed_cost.py --kernels 8              # a worker's kernel loading alone

Timings on a shared machine are noisy: compare the sides of one invocation, and say the load
(printed at the start and the end).  Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from startup import PHASES, TRAINING_STEPS, _child_cpu, _jobs, _med, run
from startup_bench import _children_cpu


def one(python: str, job: Path, out: Path, max_time: float) -> dict[str, float]:
    """One ``flegel run`` of ``job`` by ``python``: its figures (module docstring)."""
    c0 = _children_cpu()
    r = run(python, job, out, max_time)
    cpu = _children_cpu() - c0
    t = r["timings"]
    fig = {"wall": r["wall"], "cpu": cpu}
    fig.update({p[:-2]: t[p] for p in PHASES if t.get(p) is not None})
    fig["exit"] = r["wall"] - sum(t.get(p) or 0.0 for p in PHASES)
    if "startup" in r:
        fig["ranks"] = sum(c for clock in r["startup"].values()
                           for name, _, c in clock["steps"] if name not in TRAINING_STEPS)
    return fig


def _load() -> str:
    """The load averages (1/5/15 min), for the printed figures."""
    return " / ".join(f"{v:.1f}" for v in os.getloadavg())


def _line(fig: dict[str, float], keys: list[str]) -> str:
    return " ".join(f"{k} {fig[k]:5.2f}" for k in keys if k in fig)


def kernels(sides: dict[str, str], job: Path, rounds: int) -> None:
    """``--kernels``: a worker's kernel loading in a fresh process of each side, alternated
    (after one warm-up each); each side's CPU seconds, medians and the paired difference."""
    cpu: dict[str, list[float]] = {"a": [], "b": []}
    for i in range(rounds + 1):
        for side in ("ab" if i % 2 == 0 else "ba"):
            seconds = _child_cpu(sides[side], job)[0]
            if i:  # the first round warms numba's cache and the page cache
                cpu[side].append(seconds)
    for side in ("a", "b"):
        print(f"  {side}: a worker's kernels_ahead, CPU s: median {_med(cpu[side]):.3f} (runs: "
              f"{', '.join(f'{c:.2f}' for c in cpu[side])})")
    print(f"  b - a, paired: median {_med([b - a for a, b in zip(cpu['a'], cpu['b'])]):+.3f}")
    print(f"load average {_load()} at the end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", default=None,
                    help="side a's Python (default: python on the path)")
    ap.add_argument("--b", default=sys.executable, help="side b's Python (default: this one)")
    ap.add_argument("--runs", type=int, default=5, help="rounds (each: one run per side)")
    ap.add_argument("--algorithm", default="kmeans",
                    help="the page's --quick workload to run (kmeans, gmm, fcm, logreg, nmf, "
                    "cnn)")
    ap.add_argument("--job", type=Path, default=None, help="run this job file instead")
    ap.add_argument("--max-time", type=float, default=0.5, help="training seconds per run")
    ap.add_argument("--kernels", type=int, default=0, metavar="N",
                    help="N rounds of a worker's kernel loading alone instead (CPU seconds)")
    args = ap.parse_args()
    # The interpreter itself, not a version manager's shim on the path (pyenv's runs a shell
    # and pyenv before Python: CPU and wall time that side b would not pay).
    args.a = args.a or subprocess.run(["python", "-c", "import sys; print(sys.executable)"],
                                      capture_output=True, text=True, check=True,
                                      cwd=tempfile.gettempdir()).stdout.strip()
    sides = {"a": args.a, "b": args.b}
    print(f"fixed_cost: {os.cpu_count()} cores, load average "
          f"{_load()} at the start; a = {args.a}, "
          f"b = {args.b}")
    figs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory(prefix="fixed-cost-") as tmp:
        job = args.job.resolve() if args.job else _jobs(Path(tmp), [args.algorithm])[
            args.algorithm]
        if args.kernels:
            kernels(sides, job, args.kernels)
            return
        for side, python in sides.items():  # warm numba's cache and the page cache
            one(python, job, Path(tmp) / f"warm-{side}", args.max_time)
        for i in range(args.runs):
            for side in ("ab" if i % 2 == 0 else "ba"):
                fig = one(sides[side], job, Path(tmp) / f"{side}-{i}", args.max_time)
                figs[side].append(fig)
                print(f"  round {i + 1} {side}: " + _line(fig, list(fig)), flush=True)
    keys = list(dict.fromkeys(k for side in figs.values() for f in side for k in f))
    print(f"medians over {args.runs} rounds (seconds):")
    for side in ("a", "b"):
        med = {k: _med([f[k] for f in figs[side] if k in f]) for k in keys}
        print(f"  {side}: " + _line(med, keys))
    diffs = {k: _med([fb[k] - fa[k] for fa, fb in zip(figs["a"], figs["b"])
                      if k in fa and k in fb]) for k in keys}
    print("  b - a, paired: " + " ".join(f"{k} {v:+.2f}" for k, v in diffs.items()))
    print(f"load average {_load()} at the end")


if __name__ == "__main__":
    main()
