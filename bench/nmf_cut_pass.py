"""What a cut pass is worth to NMF without stragglers (issue 19, Fig. 8): the exact objective of
θ₀, θ₁, ... when every update of H aggregates a share of each worker's shard (FSPV's passes cut
by its timer) against whole passes (BSPV's, and FSPV's when nothing cuts them).

``NMF`` driven through its hooks in one process on ``flegel paper``'s NMF workload (8,000 x 400,
rank 10, 4 shards of the sorted rows, each traversed in a shuffled order): update t runs, on
every worker, ``update_block`` on the next ``share`` of its shard from where its cursor stopped
(the runtime's round-robin cursor, ``flegel.runtime.store``: a cut pass goes on at the next
update), every row's w_i kept as per-point state, and the master's ``update_parameter`` on the
sum.  θ's ``wtw`` / ``wtx`` hold every row's latest contribution (FSP paper Section 2.2,
Eq. 3), so an update after a partial pass is HALS's H step on all the rows, the unvisited ones
one update stale: block coordinate descent on the exact objective, each step a descent.

No clock, no MPI: the θ sequences are the algorithm's, whatever the machine's load.  Prints,
per target -- the whole-pass path's θ at the page's 0.2, 0.5 and 1 s horizons (``--horizons``)
and the reference objective plus the page's slack (1 %; the reference: whole passes after
``--reference`` updates) -- the update and the passes at which each share reaches it, and a
modelled time, ``updates · φ + passes · pass`` (``--overhead-ms``, ``--pass-ms``: defaults
from a BSPV run of the page's NMF at load 8-14, 213 barriers in 4 s, compute share 0.32);
then the exact objective pass by pass.  Usage::Usage::

    python bench/nmf_cut_pass.py [--passes 40] [--shares 1,0.5,0.25] [--partition strided]
        [--overhead-ms 12.8] [--pass-ms 6.0]

Measured: ``algorithms/nmf.py`` (``NMF``, "Cut passes") and docs/benchmarks.md ("NMF's cut
passes").
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from flegel.algorithms.nmf import NMF
from flegel.api import DataInfo
from flegel.block import Block
from flegel.cli.paper.workloads import QUICK, workloads, write_data
from flegel.data import sample_shard
from flegel.data.partition import partition_rows

WORKERS = 4


@dataclass
class SharePath:
    """One share's run: per update, the passes done so far (mean over the workers) and the
    exact objective of θ after it (index 0: θ₀)."""

    share: float
    passes: list[float] = field(default_factory=list)
    objective: list[float] = field(default_factory=list)
    thetas: list[dict[str, np.ndarray]] = field(default_factory=list)

    def reached(self, target: float) -> int | None:
        """The first update whose θ is at or below ``target``."""
        return next((t for t, f in enumerate(self.objective) if f <= target), None)


class Problem:
    """The page's NMF data on 4 shards in a shuffled order, the job's parameters."""

    def __init__(self, partition: str = "strided", x: np.ndarray | None = None,
                 params: dict | None = None, seed: int = 0) -> None:
        if x is None:
            w = workloads(QUICK)["nmf"]
            with tempfile.TemporaryDirectory() as tmp:
                x = np.load(write_data(w, Path(tmp)))
            params = w.params
        self.x = np.asarray(x, dtype=np.float64)
        self.params = dict(params or {})
        n = len(self.x)
        shards = [np.asarray(partition_rows(n, k, WORKERS, partition)) for k in range(WORKERS)]
        rng = np.random.default_rng(seed)
        self.orders = [rng.permutation(s) for s in shards]
        parts = [sample_shard(self.x[s], None, 10_000 // WORKERS, k)
                 for k, s in enumerate(shards)]
        #: Every row's w_i (rows of :attr:`x`) after the last :meth:`run`.
        self.last_w = np.zeros((0, 0))
        self.info = DataInfo(n_features=self.x.shape[1], n_points=n, n_workers=WORKERS,
                             sample=np.concatenate([p[0] for p in parts]), seed=seed)

    def make(self) -> NMF:
        return NMF(kernel="array", **self.params)

    def run(self, share: float, updates: int, keep_theta: bool = False) -> SharePath:
        """θ₀ .. θ_updates, each update on the next ``share`` of every worker's shard."""
        alg, *workers = (self.make() for _ in range(WORKERS + 1))
        theta = alg.init_parameter(self.info)
        d = self.x.shape[1]
        states = [worker.init_state(len(order), d) for worker, order in zip(workers, self.orders)]
        cursors = [0] * WORKERS
        done = 0
        out = SharePath(share)

        def record() -> None:
            w = np.empty((len(self.x), alg.n_components))
            for order, state in zip(self.orders, states):
                w[order] = state["w"]
            self.last_w = w
            out.objective.append(alg.evaluate(theta, Block.from_arrays(self.x, None, {"w": w})))
            out.passes.append(done / len(self.x))
            if keep_theta:
                out.thetas.append({k: v.copy() for k, v in theta.items()})

        record()
        for t in range(1, updates + 1):
            agg = alg.zero_aggregator(theta)
            for k, (worker, order, state) in enumerate(zip(workers, self.orders, states)):
                m = max(1, round(share * len(order)))
                pos = (cursors[k] + np.arange(m)) % len(order)
                cursors[k] = int((cursors[k] + m) % len(order))
                rows = {key: v[pos] for key, v in state.items()}
                block = Block.from_arrays(self.x[order[pos]], None, rows)
                agg = alg.aggregate(agg, worker.update_block(block, theta, t))
                for key, v in rows.items():
                    state[key][pos] = v
                done += m
            theta = alg.update_parameter(agg, theta)
            record()
        return out

    def pass_seconds(self, repeat: int = 20) -> float:
        """CPU seconds of one worker's whole pass (``update_block`` on its shard), the
        median of ``repeat`` after a warm-up pass."""
        alg = self.make()
        theta = alg.init_parameter(self.info)
        order = self.orders[0]
        state = alg.init_state(len(order), self.x.shape[1])
        block = Block.from_arrays(np.ascontiguousarray(self.x[order]), None, state)
        times = []
        for t in range(repeat + 1):
            c = time.process_time()
            alg.update_block(block, theta, t + 1)
            times.append(time.process_time() - c)
        return float(np.median(times[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=float, default=40.0, help="passes each share runs")
    ap.add_argument("--reference", type=int, default=200,
                    help="whole-pass updates whose objective is the reference")
    ap.add_argument("--shares", default="1,0.5,0.25")
    ap.add_argument("--partition", default="strided", help="strided or contiguous")
    ap.add_argument("--slack", type=float, default=1e-2)
    ap.add_argument("--horizons", default="11,27,53",
                    help="whole-pass θs whose objectives are targets too (BSPV's θ at the "
                         "page's 0.2, 0.5 and 1 s horizons)")
    ap.add_argument("--overhead-ms", type=float, default=12.8,
                    help="an iteration's wall time beyond its compute (φ)")
    ap.add_argument("--pass-ms", type=float, default=6.0,
                    help="the wall time of every worker's whole pass, run together")
    args = ap.parse_args()
    threadpool_limits(1)  # a rank's BLAS, as flegel.run sets it
    problem = Problem(args.partition)
    ref = problem.run(1.0, args.reference).objective[-1]
    paths = {share: problem.run(share, int(np.ceil(args.passes / share)))
             for share in (float(s) for s in args.shares.split(","))}
    whole = paths.get(1.0) or problem.run(1.0, int(args.passes))
    targets = {f"θ{k} of whole passes": whole.objective[int(k)]
               for k in args.horizons.split(",") if int(k) < len(whole.objective)}
    targets[f"reference + {args.slack:g}"] = ref * (1 + args.slack)
    print(f"reference (whole passes, θ{args.reference}): {ref:,.1f}; a worker's pass "
          f"{1e3 * problem.pass_seconds():.2f} ms CPU (one thread); model: an iteration of "
          f"share s takes {args.overhead_ms} ms + s x {args.pass_ms} ms")
    for name, target in targets.items():
        print(f"target {name}: {target:,.1f}")
        for share, p in paths.items():
            hit = p.reached(target)
            if hit is None:
                print(f"  share {share:.2f}: not reached in {p.passes[-1]:.1f} passes")
                continue
            model = hit * args.overhead_ms + p.passes[hit] * args.pass_ms
            print(f"  share {share:.2f}: θ{hit}, {p.passes[hit]:.2f} passes, modelled "
                  f"{model:.0f} ms")
    for share, p in paths.items():
        step = max(1, round(1 / share))
        print(f"share {share:.2f} by pass: " + " ".join(
            f"{p.objective[i]:,.0f}" for i in range(0, min(len(p.objective), 12 * step), step)))


if __name__ == "__main__":
    main()
