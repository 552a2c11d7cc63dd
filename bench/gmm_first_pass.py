"""How much of a straggler's first pass GMM needs to reach Fig. 7's target (issue 19): the
exact objective of θ after each barrier of an FSPV-like schedule on ``flegel paper
--quick``'s GMM workload (contiguous shards of sorted data, 4 workers), with exact
incremental-EM sums and with each shard weighed up to its size while its first pass runs
(``GaussianMixture.stratify``, ``algorithms._stratum.PassStratum``).

No runtime, no clock: every worker's share of each interval is trained in one process with
the algorithm's own kernels, one GMM instance per worker (as the worker processes hold), and
each θ is evaluated exactly on all the data.  The schedule is FSPV's without migration: the
sampled calibration (an eighth of every shuffled shard), then per barrier a whole pass of
each fast worker and ``--points`` of worker 1's (the straggler: τ = 32 ms per 1,000 points
gave it ~1,000 points every two barriers in ``flegel paper``'s runs).  The target is the
workload's: batch EM's converged objective plus its slack (1e-5 relative).

Printed per straggler pace and sums: the barrier and the share of the straggler's first pass
at which θ first reached the target, and the gap above the converged objective at a few
shares.  Usage::

    python bench/gmm_first_pass.py [--points 300,500,1000] [--seed 1[,2]]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from flegel.algorithms.gmm import GaussianMixture
from flegel.block import Block
from flegel.cli.paper.workloads import QUICK, workloads, write_data
from flegel.data.sources import sample_shard
from flegel.local import make_info

WORKERS = 4
#: Rows sampled for θ⁰ (``runtime.sample_size``'s default), split as ``flegel.run`` does.
SAMPLE = 10_000
#: The sampled calibration's share of every shard (flegel.sync.fsp.sample_share here).
CALIBRATION = 1 / 8


def run(w_params: dict, shards: list[np.ndarray], theta0: dict, everything: Block,
        points: int, estimate: bool, seed: int) -> list[tuple[float, float]]:
    """(share of the straggler's first pass, exact objective) after each barrier, up to the
    end of that pass."""
    rng = np.random.default_rng(seed)
    mixed = [s[rng.permutation(len(s))] for s in shards]  # ShardStore.shuffle
    algs = [GaussianMixture(**w_params, kernel="array") for _ in mixed]
    if estimate:
        for alg, s in zip(algs, mixed):
            stratum = alg.stratify(len(s))
            assert stratum is not None
            stratum.arm()
    states = [a.init_state(len(s), s.shape[1]) for a, s in zip(algs, mixed)]
    theta = {k: np.array(v, copy=True) for k, v in theta0.items()}
    pos = [0] * len(mixed)
    out: list[tuple[float, float]] = []
    t = 0
    while pos[0] < len(mixed[0]):
        t += 1
        agg = algs[0].zero_aggregator(theta)
        for r, (alg, s, st) in enumerate(zip(algs, mixed, states)):
            n = len(s)
            take = (round(CALIBRATION * n) if t == 1 else
                    min(points, n - pos[0]) if r == 0 else n)
            idx = np.arange(pos[r], pos[r] + take) % n
            blk = Block.from_arrays(s[idx], None, {k: v[idx] for k, v in st.items()})
            agg = alg.aggregate(agg, alg.update_block(blk, theta, t))
            for k, v in st.items():
                v[idx] = blk.state[k]
            pos[r] += take
        theta = algs[0].update_parameter(agg, theta)
        out.append((pos[0] / len(mixed[0]), algs[0].evaluate(theta, everything)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="300,500,1000",
                    help="the straggler's points per barrier (comma-separated)")
    ap.add_argument("--seed", default="1", help="the shards' shuffles (comma-separated)")
    args = ap.parse_args()
    w = workloads(QUICK)["gmm"]
    with tempfile.TemporaryDirectory() as tmp:
        x = np.load(write_data(w, Path(tmp))).astype(np.float64)
    n = len(x) // WORKERS
    shards = [x[r * n:(r + 1) * n] for r in range(WORKERS)]  # contiguous
    sample = np.concatenate([sample_shard(s, None, SAMPLE // WORKERS, r)[0]
                             for r, s in enumerate(shards)])
    info = make_info(x, None, seed=0, n_workers=WORKERS)
    info = type(info)(**{**info.__dict__, "sample": sample})
    alg = GaussianMixture(**w.params, kernel="array")
    theta0 = alg.init_parameter(info)
    everything = Block.from_arrays(x)
    theta, state = dict(theta0), alg.init_state(len(x), x.shape[1])
    for t in range(1, 301):  # batch EM to its fixed point (the reference's BSPB)
        blk = Block.from_arrays(x, None, state)
        theta = alg.update_parameter(alg.update_block(blk, theta, t), theta)
        state = blk.state
    converged = alg.evaluate(theta, everything)
    target = converged + w.slack * abs(converged)
    print(f"gmm, contiguous: target = converged {converged:.8g} + {w.slack:g} relative")
    print(f"  {'points':>6s} {'seed':>4s} {'sums':10s} {'barrier':>7s} {'share':>6s}   "
          "gap above the converged objective at 1/4, 1/2, 3/4 of the straggler's pass")
    for seed in (int(v) for v in args.seed.split(",")):
        for points in (int(v) for v in args.points.split(",")):
            for estimate in (False, True):
                r = run(w.params, shards, theta0, everything, points, estimate, seed)
                hit = next(((i + 1, p) for i, (p, f) in enumerate(r) if f <= target), None)
                gaps = " ".join(
                    f"{(next(f for p, f in r if p >= q) - converged) / abs(converged):.1e}"
                    for q in (0.25, 0.5, 0.75))
                reach = f"{hit[0]:7d} {hit[1]:6.2f}" if hit else f"{'-':>7s} {'-':>6s}"
                print(f"  {points:6d} {seed:4d} {'weighed up' if estimate else 'exact':10s} "
                      f"{reach}   {gaps}")


if __name__ == "__main__":
    main()
