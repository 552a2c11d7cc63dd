"""What logistic regression's stratified gradient (issue 19; ``GradientStratum``,
``LogisticRegression.stratify``) costs a worker per pass, in one process: a 27,500 x 28 shard
(``flegel paper``'s quick shard size) passed whole by ``LogisticRegression.update_block`` at
one θ version per pass (Fig. 8 without stragglers: whole passes, L-BFGS, the estimate never
read) -- without a stratum (BSP, ASP, FSP with migration: θ still carries the shard keys),
with it on a shuffled shard (its skew test switches it off on the first window) and on a
sorted one (one class: the estimate stays on); the minimum of ``--repeat`` passes each, and
the extra over a pass with no shard keys in θ (before the stratified gradient).

The code timed is the ``flegel`` that ``python`` imports, so the same command compares two
checkouts.  Usage::

    python bench/logreg_stratum_cost.py [--repeat 60] [--block 1000] [--kernel array]

Measured (``--repeat 300``, alternately with the code before (lgfix's first commit's parent)
three times each, 12:27 UTC, load 4.8-4.9): the sorted shard's pass 1.44x / 1.44x / 1.46x
of a pass without shard keys before, 1.18x / 1.29x / 1.23x now (2.48 / 2.35 / 2.40 ms against
1.97 / 2.11 / 2.02 ms); without a stratum 1.03-1.09x before, 0.97-1.06x now (noise).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from flegel.algorithms.logreg import LogisticRegression
from flegel.api import DataInfo
from flegel.block import Block

N, D = 27_500, 28


def passes(x: np.ndarray, y: np.ndarray, stratified: bool | None, block: int, kernel: str,
           repeat: int) -> float:
    """The fastest of ``repeat`` passes (seconds) of ``update_block`` over ``x``, after one
    warm pass; θ version up every pass.  ``stratified`` None: θ without the shard keys (the
    logistic regression before the stratified gradient)."""
    alg = LogisticRegression(kernel=kernel)
    rng = np.random.default_rng(1)
    theta = alg.init_parameter(DataInfo(n_features=D, n_points=N, n_workers=4,
                                        sample=x[rng.permutation(N)[:1000]],
                                        sample_y=rng.integers(0, 2, 1000), n_classes=2))
    theta["coef"] = 0.01 * rng.normal(size=D)
    if stratified is None:
        theta = {k: v for k, v in theta.items() if not k.startswith("shard_")}
    if stratified:
        stratum = alg.stratify(N)
        assert stratum is not None
        stratum.arm()
    blocks = [Block.from_arrays(x[a:a + block], y[a:a + block],
                                alg.init_state(len(x[a:a + block]), D))
              for a in range(0, N, block)]
    best = float("inf")
    for t in range(repeat + 1):
        start = time.perf_counter()
        for b in blocks:
            alg.update_block(b, theta, 1 + t)
        if t:
            best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--block", type=int, default=1_000)
    ap.add_argument("--kernel", default="array")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D))
    rows = {"no shard keys in θ": (rng.integers(0, 2, N), None),
            "plain (no stratum)": (rng.integers(0, 2, N), False),
            "shuffled shard": (rng.integers(0, 2, N), True),
            "sorted shard": (np.ones(N, dtype=np.int64), True)}
    times = {name: passes(x, y, on, args.block, args.kernel, args.repeat)
             for name, (y, on) in rows.items()}
    base = times["no shard keys in θ"]
    print(f"a pass of {N:,} x {D} in blocks of {args.block:,}, kernel {args.kernel}, "
          f"min of {args.repeat}")
    for name, t in times.items():
        print(f"  {name:20s} {t * 1e3:8.2f} ms   {t / base:5.2f}x no keys")


if __name__ == "__main__":
    main()
