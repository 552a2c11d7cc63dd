"""Benchmark every flegel.sync.zipline method against the ZipLine paper's Table 4.

Usage::

    python bench/zipline_bench.py [--quick] [--repeats N] [--budget SECONDS] [--json OUT]

Datasets follow Section 6.1 / Table 2 (``tests/zipline_workloads.py``: intervals uniform in
1000-1500 ms) for n = 10, 100, 1000 workers and R = 15, 150 predicted iterations. Each cell
reports the median wall time of one ``solve(times, method)`` call (input validation, sorting
/ merging and the scan included) next to the paper's Table 4 value (C++11 on a Xeon E5-2620 v3;
averages of 10 runs). A method whose single run is predicted to exceed the time budget of a
cell (extrapolated with its complexity from the previous cell) is reported as "skipped".
``--json OUT`` also writes "fast"'s time per cell and the target's ratio to OUT.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

from flegel.sync.zipline import EXACT_METHODS, METHODS, solve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.zipline_workloads import generate  # noqa: E402 - the paper's workloads, shared

CELLS: list[tuple[int, int]] = [(10, 15), (10, 150), (100, 15), (100, 150), (1000, 15), (1000, 150)]

# Table 4 of the paper, microseconds, in CELLS order.
PAPER_US: dict[str, tuple[float, ...]] = {
    "zipline": (1.49e2, 1.32e3, 6.37e3, 4.99e4, 2.53e5, 2.38e6),
    "zipline_opt": (0.90e2, 8.08e2, 2.46e3, 1.93e4, 9.39e4, 7.78e5),
    "zipline_opt_bs": (1.24e2, 1.15e3, 2.65e3, 2.30e4, 7.68e4, 5.66e5),
    "full_gridscan": (1.54e3, 4.67e4, 8.13e4, 2.15e6, 4.04e6, 2.07e8),
    "gridscan": (1.68e2, 5.50e3, 1.11e3, 4.38e4, 7.45e3, 2.57e5),
}
PAPER_NAME = {
    "fast": "-",
    "zipline": "ZipLine",
    "zipline_alg2": "(Alg. 2 text)",
    "zipline_opt": "ZipLineOpt",
    "zipline_opt_bs": "ZipLineOptBS",
    "full_gridscan": "FullGridScan",
    "gridscan": "GridScan",
}


def work_units(method: str, n: int, r: int) -> float:
    """Worst-case operation count (Table 1) used to extrapolate run times between cells."""
    log_n = math.log2(n + 1)
    return {
        "fast": r * n * log_n,
        "zipline": r * n * n,
        "zipline_alg2": r * n * n,
        "zipline_opt": r * n * n,
        "zipline_opt_bs": r * n * log_n,
        "full_gridscan": r * r * n * n,
        "gridscan": r * r * n,
    }[method]


def time_method(times: np.ndarray, method: str, est_s: float, repeats: int, budget: float):
    """Median seconds per call; several calls per sample when one call is very short."""
    number = max(1, int(2e-3 / max(est_s, 1e-7)))  # aim at >= ~2 ms per sample
    repeats = max(1, min(repeats, int(budget / max(est_s * number, 1e-9))))
    samples = []
    res = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            res = solve(times, method)
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples), res, repeats


def fmt_us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 repeats, 5 s budget per cell")
    ap.add_argument("--repeats", type=int, default=None, help="timed samples per cell (7)")
    ap.add_argument("--budget", type=float, default=None, help="seconds per method/cell (20)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write fast's time per cell and the target's ratio to OUT")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    budget = args.budget or (5.0 if args.quick else 20.0)

    print(
        f"flegel.sync.zipline benchmark  python {platform.python_version()}  numpy {np.__version__}"
        f"  numba {numba.__version__}  cpus {os.cpu_count()}  {platform.processor() or ''}"
    )
    print(f"median of up to {repeats} samples, budget {budget:g} s per method and cell")
    print("paper: Table 4 (C++11, Xeon E5-2620 v3, mean of 10 runs); times in microseconds;")
    print("speedup = paper / ours (different language and hardware: indicative only)\n")

    solve(np.zeros((2, 2)), "fast")  # compile (or load) the numba kernel outside the timing
    last: dict[str, tuple[float, float]] = {}  # method -> (work units, seconds) last measured
    fast_us: dict[tuple[int, int], float] = {}
    header = (
        f"{'n':>5} {'R':>4}  {'method':<15} {'paper name':<13} {'ours (us)':>10}"
        f" {'paper (us)':>10} {'speedup':>10} {'d':>8} {'evaluated':>9}"
    )
    print(header)
    print("-" * len(header))
    for c, (n, r) in enumerate(CELLS):
        times = generate(n, r, seed=1000 * n + r).times
        d_star = None
        for method in METHODS:
            units = work_units(method, n, r)
            if method in last:
                prev_units, prev_s = last[method]
                est = prev_s * units / prev_units
            else:
                est = 1e-3
            paper = PAPER_US[method][c] if method in PAPER_US else None
            cell = f"{n:>5} {r:>4}" if method == METHODS[0] else " " * 10
            if est > budget:
                print(
                    f"{cell}  {method:<15} {PAPER_NAME[method]:<13} {'skipped':>10}"
                    f" {fmt_us(paper):>10}   (estimated {est:.0f} s > {budget:g} s budget)"
                )
                continue
            sec, res, _ = time_method(times, method, est, repeats, budget)
            last[method] = (units, sec)
            us = sec * 1e6
            if method == "fast":
                fast_us[(n, r)] = us
                d_star = res.d
            flag = ""
            if method in EXACT_METHODS and res.d != d_star:
                flag = "  MISMATCH"
            elif res.d != d_star:
                flag = "  (not optimal)"
            ratio = f"{paper / us:.1f}x" if paper else "-"
            print(
                f"{cell}  {method:<15} {PAPER_NAME[method]:<13} {fmt_us(us):>10}"
                f" {fmt_us(paper):>10} {ratio:>10} {res.d:>8g} {res.evaluated:>9}{flag}"
            )
        print()

    print('Speedup of "fast" over the paper\'s ZipLineOptBS (Table 4):')
    print(f"{'n':>5} {'R':>4} {'fast (us)':>10} {'ZipLineOptBS paper (us)':>24} {'speedup':>9}")
    for c, (n, r) in enumerate(CELLS):
        paper = PAPER_US["zipline_opt_bs"][c]
        us = fast_us[(n, r)]
        print(f"{n:>5} {r:>4} {fmt_us(us):>10} {fmt_us(paper):>24} {paper / us:>8.0f}x")
    target = fast_us[(1000, 150)]
    verdict = "OK" if target <= 11_000 else "MISSED"
    print(f"\ntarget: fast <= 11 ms at n=1000, R=150 -> {target / 1e3:.2f} ms ({verdict})")
    if args.json:
        args.json.write_text(json.dumps({
            "repeats": repeats, "budget_s": budget, "target_us": 11_000,
            "fast_us": {f"n={n} R={r}": us for (n, r), us in fast_us.items()},
            "n1000_r150_us": target, "ratio": target / 11_000}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
