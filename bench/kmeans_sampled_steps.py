"""FSPV's sampled first pass on ``flegel paper``'s K-means (strided shards, no stragglers),
offline: the exact objective after each M-step and the M-steps to the +0.1 % target, per
shuffle, for where the first step's statistics come from (issue 19, Fig. 8; docs/sync/fsp.md,
"K-means at Fig. 8's horizons: the skew test at θ⁰").

Schedules (every worker the same share of its shuffled shard; the steps after the
calibration's are mini-batch steps on the latest share, n/m · F, as the stratum takes them):

* ``sample``: θ¹ from the master's samples of the shards (2,500 rows each, labelled at θ⁰,
  scaled to the shard: the calibration's step while every stratum shipped), then 1/8, 1/4,
  a whole pass (Lloyd's step) and Lloyd steps;
* ``eighths``: θ¹ from the calibration's eighths (exact sums: the skew test at θ⁰ found the
  shards balanced), then the same;
* ``rest``: ``eighths`` with one more sampled step on every shard's untrained half before
  the whole passes (a lead, not FSP's schedule).

Usage::

    python bench/kmeans_sampled_steps.py [--schedules sample,eighths,rest] [--seeds 8]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from basin_sim import (  # bench/ is on sys.path when run as a script
    SAMPLE,
    WORKERS,
    assign,
    m_step,
    objective,
    paper_workload,
    stats,
)

from flegel.data.sources import sample_shard


def _step(rows: list[np.ndarray], c: np.ndarray, scales: list[float]) -> np.ndarray:
    """Lloyd's step from ``c`` on each shard's ``rows`` labelled at ``c``, scaled."""
    k = len(c)
    s_tot, n_tot = np.zeros_like(c), np.zeros(k)
    for x, scale in zip(rows, scales):
        lab = assign(x, np.einsum("ij,ij->i", x, x), c)[0]
        s, n = stats(x, lab, k)
        s_tot += scale * s
        n_tot += scale * n
    return m_step(c, s_tot, n_tot)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", default="sample,eighths,rest")
    ap.add_argument("--seeds", type=int, default=8, help="shuffles 1..N")
    ap.add_argument("--lloyd", type=int, default=4, help="whole passes after the shares")
    args = ap.parse_args()
    w = paper_workload(Path(tempfile.mkdtemp()), "strided")
    sq = np.einsum("ij,ij->i", w.x, w.x)
    target = w.converged * (1 + w.slack)
    samples = [sample_shard(s, None, SAMPLE // WORKERS, r)[0][:2_500]
               for r, s in enumerate(w.shards)]
    sizes = [len(s) for s in w.shards]
    for schedule in args.schedules.split(","):
        steps = []
        for seed in range(1, args.seeds + 1):
            rng = np.random.default_rng(seed)
            orders = [rng.permutation(n) for n in sizes]
            c, objs, pos = w.theta0.copy(), [], [n // 8 for n in sizes]
            if schedule == "sample":
                c = _step(samples, c, [n / len(s) for n, s in zip(sizes, samples)])
            else:
                c = _step([x[o[:p]] for x, o, p in zip(w.shards, orders, pos)], c,
                          [1.0] * WORKERS)
            objs.append(objective(w, c, sq))
            shares = [1 / 8, 1 / 4] + ([0.5] if schedule == "rest" else [])
            for share in shares:
                m = [round(share * n) for n in sizes]
                rows = [x[o[p:p + mi]] for x, o, p, mi in zip(w.shards, orders, pos, m)]
                pos = [p + mi for p, mi in zip(pos, m)]
                c = _step(rows, c, [n / mi for n, mi in zip(sizes, m)])
                objs.append(objective(w, c, sq))
            for _ in range(args.lloyd):
                c = _step([w.x], c, [1.0])
                objs.append(objective(w, c, sq))
            hit = next((j + 1 for j, f in enumerate(objs) if f <= target), None)
            steps.append(hit)
            print(f"{schedule:8s} shuffle {seed}: target after {hit} M-steps;",
                  " ".join(f"{100 * (f / w.converged - 1):+.2f}" for f in objs), "%")
        reached = [s for s in steps if s is not None]
        print(f"{schedule:8s} M-steps to the target {steps}, mean "
              f"{np.mean(reached) if reached else float('nan'):.2f}")


if __name__ == "__main__":
    main()
