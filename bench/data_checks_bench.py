"""What the data content checks cost (issue 13, item 5): prints figures, asserts nothing.

1. :func:`flegel.data.checks.first_bad` on a clean shard (the common case: one vectorized
   pass per check), against a plain copy of the same array for scale.
2. ``flegel validate`` against ``flegel validate --data`` on a CSV file: plain validation
   stays cheap (no values parsed); ``--data`` loads every shard, as the workers will.

Usage: ``python bench/data_checks_bench.py [--rows N] [--features D]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from flegel.data.checks import Takes, first_bad


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (seconds)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=28)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(args.rows, args.features)))
    y = rng.integers(0, 2, size=args.rows)
    mb = X.nbytes / 2**20
    copy_s = _best(lambda: X.copy())
    finite_s = _best(lambda: first_bad(X, None, Takes()))
    all_s = _best(lambda: first_bad(X, y, Takes("classes", True, "algorithm 'x'")))
    print(f"shard {args.rows:,} x {args.features} float64 ({mb:.0f} MiB), best of 5:")
    print(f"  copy of the array          {copy_s * 1e3:8.1f} ms")
    print(f"  finite check               {finite_s * 1e3:8.1f} ms  ({mb / finite_s:,.0f} MiB/s)")
    print(f"  finite + >= 0 + classes    {all_s * 1e3:8.1f} ms  ({mb / all_s:,.0f} MiB/s)")

    with tempfile.TemporaryDirectory() as tmp:
        n = min(args.rows, 200_000)
        path = Path(tmp) / "x.csv"
        np.savetxt(path, X[:n], delimiter=",", fmt="%.6f")
        job = Path(tmp) / "job.yaml"
        job.write_text(yaml.safe_dump({
            "algorithm": "kmeans", "params": {"n_clusters": 4}, "data": {"path": "x.csv"},
            "workers": 4, "stop": {"max_iterations": 5}}))
        for extra in ([], ["--data"]):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "flegel", "validate", str(job), *extra],
                           check=True, capture_output=True)
            dt = time.perf_counter() - t
            print(f"flegel validate {' '.join(extra) or '      '} on a {n:,} x {args.features} "
                  f"CSV ({path.stat().st_size / 2**20:.0f} MiB), 4 workers: {dt:6.2f} s")


if __name__ == "__main__":
    main()
