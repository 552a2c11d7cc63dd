"""Where incremental EM can beat batch EM without stragglers (issue 19, Fig. 8): the exact
objective of each θ against passes and M-steps, for schedules of partial passes, on
``flegel paper``'s K-means, GMM and FCM (quick scale, 4 shuffled strided shards).

No runtime, no clock: every worker's share of each interval is trained in one process with
the algorithm's own kernels (``update_block``, ``update_parameter``) and each θ is evaluated
exactly on all the data, so a schedule's figures are the algorithm's, not the machine's.  A
schedule is a list of interval lengths in passes; each worker trains that share of its shard
in its shuffled order, wrapping around as FSP's passes do (a pass counts from the last
barrier), then one M-step:

* ``batch``: whole passes (BSPV and BSPB here: BSPV's batch is the whole shard);
* ``first q``: a first M-step after a share q of every shard, then whole passes (FSPV's
  sampled calibration, :func:`flegel.interval.multistage.sample_fraction`, is q = 1/8);
* ``all 1/m``: every interval 1/m of a pass (incremental EM at a finer barrier).

Printed per schedule: the M-steps (barriers) and passes to the paper's target (the converged
objective plus the workload's slack) and the objective's gap above the converged one after
the first intervals.  Time is then passes x (a pass) + M-steps x (a barrier): a schedule pays
where it saves more passes than its extra barriers cost.  Usage::

    python bench/em_schedules.py [--algorithms gmm,fcm,kmeans,nmf] [--seed 1[,2,...]]
        [--intervals 14] [--set n_clusters=64 --set init=kmeans++ ...]

``--seed`` takes several shuffles (comma-separated): K-means' step count to the target moves
by one either way with the shuffle and the share (issue 19, i20k), so one seed says little.
``--intervals``: whole passes after the first share (NMF's target needs more than 14).
``--set KEY=VALUE`` (repeatable, values read as YAML) overrides the workload's algorithm
parameters, e.g. K-means' default start (``--set init=kmeans++ --set n_init=10``) or a large
K (``--set n_clusters=256``).  The ``fspv`` row is the share FSPV would take on these shards
(:func:`flegel.sync.fsp.sample_share`, with the algorithm's ``sample_min_points``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from flegel.api import Algorithm
from flegel.block import Block
from flegel.cli.paper.workloads import QUICK, workloads, write_data
from flegel.data.sources import sample_shard
from flegel.job.algorithms import resolve_algorithm
from flegel.local import make_info
from flegel.sync.fsp import sample_share

WORKERS = 4
#: Rows sampled for the initial θ (``runtime.sample_size``'s default), split over the workers
#: as ``flegel.run`` does, so θ⁰ is the real run's.
SAMPLE = 10_000


def make(name: str, params: dict) -> Algorithm:
    """The built-in algorithm ``name`` with the workload's ``params``."""
    alg: Algorithm = resolve_algorithm(name)(**params)
    return alg


def run(alg: Algorithm, shards: Sequence[np.ndarray], theta0: dict, schedule: Sequence[float],
        everything: Block) -> list[tuple[float, float]]:
    """(passes so far, exact objective) after each M-step of ``schedule``."""
    theta = {k: np.array(v, copy=True) for k, v in theta0.items()}
    states = [alg.init_state(len(s), s.shape[1]) for s in shards]
    pos, out = 0.0, []
    for it, q in enumerate(schedule):
        agg = alg.zero_aggregator(theta)
        for s, state in zip(shards, states):
            n = len(s)
            idx = np.arange(round(n * pos), round(n * (pos + q))) % n
            block = Block.from_arrays(s[idx], None, {k: v[idx] for k, v in state.items()})
            agg = alg.aggregate(agg, alg.update_block(block, theta, it + 1))
            for k, v in state.items():
                v[idx] = block.state[k]
        pos += q
        theta = alg.update_parameter(agg, theta)
        out.append((pos, alg.evaluate(theta, everything)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default="gmm,fcm,kmeans,nmf")
    ap.add_argument("--seed", default="1",
                    help="the shards' shuffled order (comma-separated: one table each)")
    ap.add_argument("--intervals", type=int, default=14,
                    help="whole passes (batch) per schedule")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override an algorithm parameter (YAML value; repeatable)")
    args = ap.parse_args()
    overrides = {k: yaml.safe_load(v) for k, _, v in (a.partition("=") for a in args.set)}
    loads = workloads(QUICK)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.algorithms.split(","):
            w = loads[name]
            x = np.load(write_data(w, Path(tmp))).astype(np.float64)
            alg = make(name, {**w.params, **overrides})
            shards = [x[r::WORKERS] for r in range(WORKERS)]  # strided
            sample = np.concatenate([sample_shard(s, None, SAMPLE // WORKERS, r)[0]
                                     for r, s in enumerate(shards)])
            info = make_info(x, None, seed=0, n_workers=WORKERS)
            info = type(info)(**{**info.__dict__, "sample": sample})
            theta0 = alg.init_parameter(info)
            everything = Block.from_arrays(x)
            # Whole passes sum the same statistics in any order: one converged reference
            # per algorithm, not per shuffle.
            converged = run(alg, shards, theta0, [1.0] * max(60, 4 * args.intervals),
                            everything)[-1][1]
            share = sample_share([len(s) for s in shards],
                                 int(getattr(alg, "sample_min_points", 0)))
            for seed in (int(v) for v in args.seed.split(",")):
                rng = np.random.default_rng(seed)
                mixed = [s[rng.permutation(len(s))] for s in shards]
                table(name, alg, mixed, theta0, everything, w.slack, seed, args.intervals,
                      converged, share)


def table(name: str, alg: Algorithm, shards: Sequence[np.ndarray], theta0: dict,
          everything: Block, slack: float, seed: int, n: int, converged: float,
          share: float) -> None:
    """Print one table: each schedule's M-steps and passes to the target, and its gaps."""
    target = converged + slack * abs(converged)
    print(f"{name} (shuffle seed {seed}): target = converged {converged:.7g} + {slack:g} "
          "relative")
    print(f"  {'schedule':14s} {'M-steps':>7s} {'passes':>7s}   gap above the "
          "converged objective after each interval (relative)")
    schedules = {"batch": [1.0] * n}
    for q in (1 / 2, 1 / 4, 1 / 8, 1 / 16):
        schedules[f"first 1/{round(1 / q)}"] = [q] + [1.0] * (n - 1)
    if share < 1.0:
        schedules[f"fspv {share:.3g}"] = [share] + [1.0] * (n - 1)
    for m in (2, 4):
        schedules[f"all 1/{m}"] = [1.0 / m] * n * m
    for label, sched in schedules.items():
        r = run(alg, shards, theta0, sched, everything)
        hit = next(((i + 1, p) for i, (p, f) in enumerate(r) if f <= target), None)
        steps, passes = (f"{hit[0]:7d}", f"{hit[1]:7.3f}") if hit else ("-", "-")
        gaps = " ".join(f"{(f - converged) / abs(converged):.0e}" for _, f in r[:8])
        print(f"  {label:14s} {steps:>7s} {passes:>7s}   {gaps}")


if __name__ == "__main__":
    main()
