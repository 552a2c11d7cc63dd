"""Memory benchmark (issue 14): what the data costs the workers, for both partitions.

Writes an ``.npy`` file of ``--rows`` x ``--cols`` float64 and a 1,000-row file of the same
width, runs the same K-means job (``--workers`` workers, two iterations) on each, and prints
the workers' summed peak RSS (``summary.json``: ``per_worker[].peak_rss_mib``) on the big
file beyond the tiny one, as a multiple of the big file's bytes.  The tiny run measures the
fixed part (interpreter, numpy, numba, MPI), so the ratio is what holding the data costs:
1.0 is each shard held once; the issue's target is at most 1.5.  The master's peak is printed
too: it holds no data, so it should not grow with the file.

Usage: ``python bench/memory_bench.py [--rows 2000000] [--cols 28] [--workers 4] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import yaml

from flegel.cli.compare import run_one

MiB = 1 << 20


def write_rows(path: Path, rows: int, cols: int) -> int:
    """Write ``rows`` x ``cols`` standard normal float64 a slab at a time; return the bytes."""
    rng = np.random.default_rng(0)
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(rows, cols))
    step = max(1, (16 * MiB) // (8 * cols))
    for i in range(0, rows, step):
        x[i:i + step] = rng.standard_normal((min(step, rows - i), cols))
    x.flush()
    del x
    return rows * cols * 8


def peaks(job: Path, out: Path, data: str, partition: str) -> tuple[list[float], float]:
    """Workers' and master's peak RSS (MiB) of one run."""
    s = run_one(job, out, [f"data.path={data}", f"data.partition={partition}"], 600)
    return [w["peak_rss_mib"] for w in s["per_worker"]], s["master_peak_rss_mib"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--cols", type=int, default=28)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=None,
                    help="where to write the data files (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write the headline figures to OUT (for bench/suite.py)")
    args = ap.parse_args()
    figures: dict[str, object] = {"rows": args.rows, "cols": args.cols,
                                  "workers": args.workers, "target_ratio": 1.5}
    partitions: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp)
        nbytes = write_rows(base / "big.npy", args.rows, args.cols)
        write_rows(base / "tiny.npy", 1000, args.cols)
        job = base / "job.yaml"
        job.write_text(yaml.safe_dump({
            "algorithm": "kmeans", "params": {"n_clusters": 16}, "data": {"path": "big.npy"},
            "workers": args.workers, "sync": {"model": "bsp"}, "seed": 0,
            "stop": {"max_iterations": 2}, "output": {"trace_points": 0}}))
        print(f"K-means, {args.rows:,} x {args.cols} float64 ({nbytes / MiB:.0f} MiB), "
              f"{args.workers} workers, 2 iterations")
        print(f"  {'partition':<11} {'workers MiB':>11} {'tiny MiB':>9} {'beyond':>8} "
              f"{'x data':>7} {'per worker':>22} {'master MiB':>15}")
        for partition in ("strided", "contiguous"):
            big, master_big = peaks(job, base / f"out-{partition}", "big.npy", partition)
            tiny, master_tiny = peaks(job, base / f"tiny-{partition}", "tiny.npy", partition)
            beyond = sum(big) - sum(tiny)
            each = "/".join(f"{b:.0f}" for b in big)
            partitions[partition] = {"ratio": beyond * MiB / nbytes, "workers_mib": sum(big),
                                     "tiny_mib": sum(tiny), "master_mib": master_big,
                                     "master_tiny_mib": master_tiny}
            print(f"  {partition:<11} {sum(big):>11.0f} {sum(tiny):>9.0f} {beyond:>8.0f} "
                  f"{beyond * MiB / nbytes:>7.2f} {each:>22} "
                  f"{master_big:>6.0f} (tiny {master_tiny:.0f})")
        print("  x data: summed worker peak RSS beyond the tiny-file run / the file's bytes "
              "(target <= 1.5)")
        print(f"  reproduce: python bench/memory_bench.py --rows {args.rows} "
              f"--cols {args.cols} --workers {args.workers}")
        figures.update(data_bytes=nbytes, partitions=partitions,
                       ratio_max=max(p["ratio"] for p in partitions.values()))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
