"""Which K-means basin FSPV without migration reaches on contiguous shards, by the master's
estimator of the slow shard's statistics (issue 19, Figs. 7, 9a, 9b, 15): exact schedules in
one process, no MPI, no clock.

The schedule is FSPV's with one injected straggler (worker 1, the first contiguous range of
sorted rows): a first M-step after a share ``--first`` of every fast shard and ``--slow0`` of
the slow one (the sampled calibration, which pauses the straggler at its bound), then at every
barrier each fast worker trains its whole shard at the current θ and the slow worker the next
``--slow`` of its shard (FSPV's interval: the fast workers pass once while the straggler trains
1/20-1/30 of its shard).  Every shard is traversed in a seeded shuffled order, as
``ShardStore.shuffle`` does.  The M-step sets μ_j = S_j / C_j from the master's per-cluster
sums S and counts C, estimated per worker i (n_i points, m_i of them trained since the last
barrier, at the current θ, with fresh sums F_i):

* ``exact``: incremental EM (Eq. 3), today's: every point's statistics at its LAST label,
  the straggler's untrained points at a θ many versions old;
* ``stratified``: ``n_i / m_i · F_i`` (Horvitz-Thompson for a stratum sampled at rate
  m_i / n_i: the fresh points stand for the whole shard);
* ``hybrid``: stratified while a worker's fresh points still change label (a share above
  ``--settle``), exact once they stop;
* ``stratum``: FSP's rules (:class:`flegel.algorithms._stratum.Stratum`, one per worker,
  blocks of 1,000 points): the stratified estimate pooled over the latest windows, only
  during a shard's first pass -- less the skew test (no ``shares``: every shard here is one
  of sorted data, where FSP's skew test keeps the estimate on anyway);
* ``sample``: the master's sample (FSP's estimate where ``flegel.run`` gave the master each
  worker's share of θ⁰'s sample): while a shard's first pass runs, its 2,500-row seeded sample
  labelled at the current θ, scaled by n_i / 2,500 (``KMeans._resampled``), exact sums after;
* ``bsp``: BSPV's path, every shard whole at every barrier (Lloyd's algorithm; the time of
  one of its steps is a slow pass, ``1 / --slow`` of FSPV's barriers).

``--partition strided --slow 1 --slow0 0.125 --first 0.125`` is FSPV's schedule without a
straggler on shuffled shards (Fig. 8: a sampled first step, then passes), ``--shares
0.125,0.125,0.25`` its sampled first pass (every worker trains those shares of its shard at
the first barriers, then passes; ``flegel.sync.fsp.SAMPLED_FIRST_PASS``), and ``bsp`` BSPV's.

Printed per workload and estimator: the exact objective's gap above BSPB's converged one
(Lloyd from θ⁰ run to a fixed point) after chosen barriers, and the barrier (and BSP-step
equivalent: barriers · ``--slow``) at which it first reaches the paper's target (the
workload's slack, 1e-3 for K-means).  Workloads: ``paper`` (``flegel paper``'s K-means at the
quick scale, θ⁰ as the real run's: ``init: random`` on the workers' seeded samples) and
``overlap`` (``bench/fsp_claims.py``'s overlapping workload, its shared random θ⁰).
``--replay RUN/events.jsonl`` takes a real run's schedule instead (each barrier's points per
worker, rank order: an injected straggler's sleeps commit no point for tens of barriers).
Usage::

    python bench/basin_sim.py [--workloads paper,overlap] [--slow 0.0333] [--slow0 0.01]
        [--first 0.125] [--barriers 200] [--seed 1[,2,...]] [--settle 0.001]
        [--partition contiguous|strided] [--shares 0.125,0.125,0.25]
        [--replay RUN/events.jsonl]
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flegel.cli.paper.workloads import QUICK, workloads, write_data
from flegel.data.partition import partition_rows
from flegel.data.sources import sample_shard
from flegel.local import make_info

WORKERS = 4
#: Rows sampled for θ⁰ (``runtime.sample_size``'s default), split over the workers as
#: ``flegel.run`` does.
SAMPLE = 10_000
ESTIMATORS = ("bsp", "exact", "stratified", "hybrid", "stratum", "sample")
#: Barriers after which the gap is printed.
SHOW = (1, 2, 5, 10, 20, 30, 60, 100, 150, 200, 250, 300)


@dataclass
class Workload:
    """Rows, contiguous shards, θ⁰, BSPB's converged objective and the target's slack."""

    name: str
    x: np.ndarray
    shards: list[np.ndarray]
    theta0: np.ndarray
    converged: float
    slack: float


def assign(x: np.ndarray, sq: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre of each row and its squared distance."""
    d = sq[:, None] - 2.0 * (x @ c.T) + np.einsum("ij,ij->i", c, c)[None, :]
    lab = d.argmin(axis=1)
    return lab, np.maximum(d[np.arange(len(x)), lab], 0.0)


def stats(x: np.ndarray, lab: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums and counts of rows ``x`` labelled ``lab`` (−1: none)."""
    onehot = (lab[None, :] == np.arange(k)[:, None]).astype(np.float64)  # −1 matches none
    return onehot @ x, onehot.sum(axis=1)


def m_step(c: np.ndarray, s: np.ndarray, n: np.ndarray) -> np.ndarray:
    """μ_j = S_j / C_j; an empty cluster keeps its centre (``KMeans.update_parameter``)."""
    out = c.copy()
    ok = n > 0.5
    out[ok] = s[ok] / n[ok, None]
    return out


def objective(w: Workload, c: np.ndarray, sq: np.ndarray) -> float:
    return float(assign(w.x, sq, c)[1].sum())


def lloyd(w_x: np.ndarray, c0: np.ndarray, steps: int = 300) -> tuple[np.ndarray, float]:
    """Batch Lloyd from ``c0`` to a fixed point (BSPB's converged objective)."""
    sq = np.einsum("ij,ij->i", w_x, w_x)
    c, k = c0.copy(), len(c0)
    prev = None
    for _ in range(steps):
        lab, d2 = assign(w_x, sq, c)
        if prev is not None and np.array_equal(lab, prev):
            break
        prev = lab
        c = m_step(c, *stats(w_x, lab, k))
    return c, float(assign(w_x, sq, c)[1].sum())


def paper_workload(folder: Path, partition: str = "contiguous") -> Workload:
    """``flegel paper``'s K-means (quick scale), its shards, the real run's θ⁰."""
    from flegel.job.algorithms import resolve_algorithm

    wl = workloads(QUICK)["kmeans"]
    x = np.load(write_data(wl, folder)).astype(np.float64)
    shards = [x[partition_rows(len(x), r, WORKERS, partition)] for r in range(WORKERS)]
    sample = np.concatenate([sample_shard(s, None, SAMPLE // WORKERS, r)[0]
                             for r, s in enumerate(shards)])  # job seed 0 + shard
    info = make_info(x, None, seed=0, n_workers=WORKERS)
    info = type(info)(**{**info.__dict__, "sample": sample})
    alg = resolve_algorithm("kmeans")(**wl.params)
    c0 = np.asarray(alg.init_parameter(info)["centers"], dtype=np.float64)
    return Workload("paper", x, shards, c0, lloyd(x, c0)[1], wl.slack)


def overlap_workload(folder: Path, n: int = 100_000, partition: str = "contiguous") -> Workload:
    """``bench/fsp_claims.py``'s overlapping workload (``--quick``'s 100,000 rows)."""
    from fsp_claims import overlap_data  # bench/ is on sys.path when run as a script

    overlap_data(folder, n)
    x = np.load(folder / "data.npy")
    c0 = np.load(folder / "init.npy")
    shards = [x[partition_rows(len(x), r, WORKERS, partition)] for r in range(WORKERS)]
    return Workload("overlap", x, shards, c0, lloyd(x, c0)[1], 1e-3)


def replayed(path: Path) -> list[list[int]]:
    """Each barrier's points per worker (rank order) from a run's ``events.jsonl``."""
    import json

    with open(path) as f:
        return [json.loads(line)["workers"]["points"] for line in f if line.strip()]


def simulate(w: Workload, estimator: str, slow: float, slow0: float, first: float,
             barriers: int, seed: int, settle: float,
             shares: tuple[float, ...] = (),
             schedule: list[list[int]] | None = None) -> list[float]:
    """The exact objective after each barrier of the schedule (module notes); ``shares``:
    every worker's share of its shard at the first barriers (the sampled first pass);
    ``schedule``: each barrier's points per worker instead (:func:`replayed`)."""
    k = len(w.theta0)
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(len(s)) for s in w.shards]
    sqs = [np.einsum("ij,ij->i", s, s) for s in w.shards]
    sq_all = np.einsum("ij,ij->i", w.x, w.x)
    labels = [np.full(len(s), -1) for s in w.shards]
    pos = [0] * WORKERS  # next position in each shard's shuffled order
    exact = [stats(s, lab, k) for s, lab in zip(w.shards, labels)]
    if estimator == "stratum":  # only here: bench/basin_runs.py imports this on main too
        from flegel.algorithms._stratum import Stratum

        strata = [Stratum(len(s)) for s in w.shards]
        for st in strata:
            st.arm()  # no warm-up here: every block counts (Stratum's notes)
    correction = [np.zeros_like(w.theta0), np.zeros(k)]  # θ's stratum_sums, stratum_counts
    seen = [0] * WORKERS  # points trained per shard (the first pass's end)
    samples = [sample_shard(s, None, SAMPLE // WORKERS, r)[0] for r, s in enumerate(w.shards)]
    c = w.theta0.copy()
    out = []
    for b in range(barriers):
        s_tot, n_tot = np.zeros_like(c), np.zeros(k)
        for i, (x, sq, order) in enumerate(zip(w.shards, sqs, orders)):
            n = len(x)
            if estimator == "bsp":
                share = 1.0
            elif schedule is not None:
                share = schedule[b][i] / n
            elif b < len(shares):
                share = shares[b]
            elif i == 0:
                share = slow0 if b == 0 else slow
            else:
                share = first if b == 0 else 1.0
            m = max(0 if schedule is not None and estimator != "bsp" else 1,
                    min(n, round(share * n)))
            seen[i] += m
            if estimator == "sample" and seen[i] < n:
                if m:
                    idx = order[np.arange(pos[i], pos[i] + m) % n]
                    pos[i] = (pos[i] + m) % n
                    new = assign(x[idx], sq[idx], c)[0]
                    ds, dn = stats(x[idx], new, k)
                    os_, on = stats(x[idx], labels[i][idx], k)
                    exact[i] = (exact[i][0] + ds - os_, exact[i][1] + dn - on)
                    labels[i][idx] = new
                xs = samples[i]
                lab = assign(xs, np.einsum("ij,ij->i", xs, xs), c)[0]
                fs, fc = stats(xs, lab, k)
                s_tot += fs * (n / len(xs))
                n_tot += fc * (n / len(xs))
                continue
            if m == 0:
                s_tot += exact[i][0]
                n_tot += exact[i][1]
                continue
            idx = order[np.arange(pos[i], pos[i] + m) % n]
            pos[i] = (pos[i] + m) % n
            new, _ = assign(x[idx], sq[idx], c)
            old = labels[i][idx]
            if estimator == "stratum":
                for a in range(0, m, 1000):  # the worker's blocks
                    rows, o, nw = x[idx[a:a + 1000]], old[a:a + 1000], new[a:a + 1000]
                    ds, dn = stats(rows, nw, k)
                    os_, on = stats(rows, o, k)
                    fresh = None
                    if strata[i].wants_sample(b + 1):
                        fs, fc = stats(rows, nw, k)
                        fresh = {"sums": fs, "counts": fc}
                    piece = strata[i].observe(b + 1, len(rows),
                                              {"sums": ds - os_, "counts": dn - on}, fresh,
                                              int(np.count_nonzero(o != nw)),
                                              int(np.count_nonzero(o < 0)))
                    correction[0] += piece["sums"]
                    correction[1] += piece["counts"]
            moved = float(np.mean(new != old))
            labels[i][idx] = new
            if m == n:
                exact[i] = stats(x[idx], new, k)
            else:  # incremental EM's sums (Eq. 3): the moved points' signed changes
                ds, dn = stats(x[idx], new, k)
                os_, on = stats(x[idx], old, k)
                exact[i] = (exact[i][0] + ds - os_, exact[i][1] + dn - on)
            fresh = stats(x[idx], new, k)
            use_fresh = estimator == "stratified" or (estimator == "hybrid"
                                                      and moved > settle)
            if estimator in ("bsp", "stratum") or not use_fresh or m == n:
                s_i, n_i = exact[i]
            else:
                s_i, n_i = fresh[0] * (n / m), fresh[1] * (n / m)
            s_tot += s_i
            n_tot += n_i
        if estimator == "stratum":
            s_tot, n_tot = s_tot + correction[0], n_tot + correction[1]
        c = m_step(c, s_tot, n_tot)
        out.append(objective(w, c, sq_all))
    return out


def report(w: Workload, args: argparse.Namespace) -> None:
    target = w.converged * (1 + w.slack)
    shows = [b for b in SHOW if b <= args.barriers]
    print(f"{w.name}: {len(w.x):,} x {w.x.shape[1]}, shards {[len(s) for s in w.shards]}; "
          f"BSPB converged {w.converged:.7g}, target +{w.slack:g}; straggler {args.slow:.4g}"
          f" of its shard a barrier ({args.slow0:g} at the first), fast first {args.first:g}")
    print(f"  {'estimator':10s} {'seed':>4s} " + " ".join(f"{b:>7d}" for b in shows)
          + "   target at barrier (BSP steps' time)")
    schedule = replayed(args.replay) if args.replay is not None else None
    if schedule is not None:
        args.barriers = min(args.barriers, len(schedule))
        shows = [b for b in SHOW if b < args.barriers] + [args.barriers]
    for est in args.estimators.split(","):
        for seed in (int(s) for s in args.seed.split(",")):
            f = simulate(w, est, args.slow, args.slow0, args.first, args.barriers, seed,
                         args.settle, tuple(float(s) for s in args.shares.split(",") if s),
                         schedule)
            gaps = " ".join(f"{100 * (f[b - 1] / w.converged - 1):+6.2f}%" for b in shows)
            hit = next((i + 1 for i, v in enumerate(f) if v <= target), None)
            when = ("never" if hit is None else
                    f"{hit} ({hit if est == 'bsp' else hit * args.slow:.2f})")
            print(f"  {est:10s} {seed:4d} {gaps}   {when}", flush=True)
            if est == "bsp":
                break  # the shuffle does not change whole passes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="paper,overlap")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS))
    ap.add_argument("--slow", type=float, default=1 / 30,
                    help="share of the slow shard trained per barrier")
    ap.add_argument("--slow0", type=float, default=0.01,
                    help="share of the slow shard at the first M-step")
    ap.add_argument("--first", type=float, default=0.125,
                    help="share of each fast shard at the first M-step (sampled calibration)")
    ap.add_argument("--barriers", type=int, default=200)
    ap.add_argument("--seed", default="1", help="shuffles (comma-separated)")
    ap.add_argument("--settle", type=float, default=1e-3,
                    help="hybrid: exact sums once at most this share of fresh labels moved")
    ap.add_argument("--partition", default="contiguous", help="contiguous or strided shards")
    ap.add_argument("--shares", default="",
                    help="every worker's share of its shard at the first barriers "
                         "(comma-separated; the sampled first pass)")
    ap.add_argument("--replay", type=Path, default=None,
                    help="a run's events.jsonl: its barriers' points per worker (rank order)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads.split(","):
            w = (paper_workload(Path(tmp), args.partition) if name == "paper"
                 else overlap_workload(Path(tmp) / "overlap", partition=args.partition))
            report(w, args)


if __name__ == "__main__":
    main()
