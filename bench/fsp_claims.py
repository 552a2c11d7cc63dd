"""The FSP paper's promise, issue 19 items 2-4, measured in one run.

1. **FSPV against BSPV** (FSP paper Figs. 7-8): time to a target objective, K-means
   (K = 16) on 4 workers, without stragglers and with worker 1 slowed (injected, τ = 32 ms
   per 1,000 points).  Two workloads: the issue's 400k × 28 blobs (target 1.002 × BSPB's
   converged objective: a one-pass problem) and the overlapping workload below (target
   1.002 × BSPB's: many passes).  Ratio = BSPV's time / FSPV's (> 1: FSPV faster).
2. **A result that does not depend on which worker is slow**: the overlapping workload --
   16 clusters with centres ~ N(0, I₂₈) and unit noise, sorted by cluster and split into
   contiguous ranges, one random initial θ shared by every run -- with worker 1, then worker
   3, slowed; FSPV with asynchronous migration runs ``--seconds``; the gap is its final exact
   objective over BSPB's converged one, minus 1.
3. **Migration without churn**: of those runs, the bytes moved over the data's bytes, the
   max/min passes over every point, and the moves of points that had moved before
   (``summary.json``'s ``migration.points_moved_more_than_once``).

4. **FSPV against BSPV at every horizon** (issue 19, Fig. 8 without stragglers):
   ``flegel paper``'s six workloads on shuffled shards; per algorithm the time to the
   objective BSPV reached after 0.2 s, 0.5 s, 1 s, 2 s and 4 s (no target below BSPB's
   converged objective plus the workload's slack), BSPV / FSPV, and where each run's time
   went (barriers, mean barrier cost, mean η or batch, workers' compute share); three pairs
   per algorithm (``--repeat``), each horizon the median of the pairs, each run as long as
   its rows need (``--length`` fixes it).  The same measurement as ``flegel paper``'s Fig. 8
   (:mod:`flegel.cli.paper.horizons`, :func:`~flegel.cli.paper.horizons.measure`).

5. **What decides the basin** (``--only basin``): exact Lloyd steps on the overlapping
   workload that miss most of the first shard, then steps on all rows (:func:`skewed_basin`):
   how many passes over the others' data, with how much of the straggler's, FSP can afford
   before the straggler's points must be in θ.

Usage::

    python bench/fsp_claims.py [--quick] [--points 400000] [--seconds 30] [--keep DIR]
        [--json OUT] [--only ratio,gap,horizons,basin] [--algorithms kmeans,...]
        [--partition strided] [--repeat N] [--length S] [--workloads blobs,overlap]

``--quick``: 100,000 points, 10 s runs (about 3 minutes on 2 cores).  The measuring
functions -- :func:`overlap_data`, :func:`reference`, :func:`time_to_target_ratio`,
:func:`slow_worker_gap` -- are importable (no side effects at import), for ``flegel paper``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from flegel.cli.compare import run_one
from flegel.cli.paper import horizons as hz
from flegel.cli.paper.common import geo_mean, lowest
from flegel.cli.paper.runner import Ratio, Runner
from flegel.cli.paper.workloads import ALGORITHMS, QUICK

#: The workloads of ``--only ratio`` (module notes): the issue's blobs and the overlapping one.
WORKLOADS = ("blobs", "overlap")

#: One injected straggler, the paper's τ = 32 ms per 1,000 points (Section 6.1).
STRAGGLER = {"pattern": "injected", "tau_ms": 32, "every": 1000}
#: Target of the time-to-target comparisons: BSPB's converged objective times this.
TARGET_FACTOR = 1.002


def overlap_data(folder: Path, n: int = 400_000, seed: int = 0, k: int = 16,
                 d: int = 28) -> dict[str, Any]:
    """Write the overlapping workload: ``data.npy`` (k clusters, centres ~ N(0, I), unit
    noise, rows sorted by cluster) and ``init.npy`` (k random rows: the one initial θ every
    run shares).  Returns the job (a dict) that trains K-means on it, 4 workers, contiguous
    shards."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d))
    sizes = rng.multinomial(n, np.full(k, 1.0 / k))
    x = np.concatenate([c + rng.standard_normal((m, d)) for c, m in zip(centres, sizes)])
    np.save(folder / "data.npy", x)
    np.save(folder / "init.npy", x[rng.choice(n, k, replace=False)])
    return {"algorithm": "kmeans",
            "params": {"n_clusters": k, "init": str(folder / "init.npy")},
            "data": {"path": str(folder / "data.npy"), "partition": "contiguous"},
            "workers": 4, "sync": {"model": "bsp"}, "seed": 0,
            "stop": {"max_iterations": 1_000_000, "tolerance": 1e-7, "max_time_s": 60},
            "output": {"progress": "none", "trace_points": 200}}


def blobs_job(n: int = 400_000) -> dict[str, Any]:
    """The issue's first workload: jobs/kmeans.yaml's blobs at ``n`` points."""
    return {"algorithm": "kmeans", "params": {"n_clusters": 16, "init": "kmeans++"},
            "data": {"source": "synthetic", "kind": "blobs", "n_points": n,
                     "n_features": 28, "centers": 16, "seed": 1},
            "workers": 4, "sync": {"model": "bsp"}, "seed": 0,
            "stop": {"max_iterations": 1_000_000, "tolerance": 1e-7, "max_time_s": 20},
            "output": {"progress": "none", "trace_points": 200}}


def _job_file(folder: Path, job: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def reference(folder: Path, job: dict[str, Any]) -> float:
    """BSPB without stragglers run to convergence: its final exact objective."""
    s = run_one(_job_file(folder, job), folder / "bspb", ["sync.model=bspb"], None)
    return float(s["final_objective"])


def time_to_target_ratio(folder: Path, job: dict[str, Any], target: float,
                         straggler: int | None, max_time_s: float) -> dict[str, Any]:
    """BSPV's and FSPV's (no migration) times to ``target`` and their ratio BSPV / FSPV;
    with a straggler also FSPV with async migration's (``fspv_async_s``, ``ratio_async``).

    ``straggler``: the worker slowed by :data:`STRAGGLER`, or None.  A run that misses the
    target counts as ``max_time_s`` (the ratio is then a bound, ``bound`` says which way).
    """
    job_file = _job_file(folder, job)
    slow = [] if straggler is None else [{**STRAGGLER, "workers": [straggler]}]
    out: dict[str, Any] = {}
    runs = [("bspv", "sync.model=bspv"), ("fspv", "sync.model=fspv-off")]
    if straggler is not None:
        runs.append(("fspv_async", "sync.model=fspv-async"))
    for name, sync in runs:
        s = run_one(job_file, folder / f"{name}-{straggler}",
                    [sync, f"stragglers={json.dumps(slow)}",
                     f"stop.target_objective={target!r}", f"stop.max_time_s={max_time_s}",
                     # The target or the time ends a run: a convergence test stopped FSPV
                     # with async migration at +6.5% while the straggler's points were still
                     # being migrated (issue 19), which measured the stopping rule.
                     "stop.tolerance=null"],
                    None)
        out[f"{name}_s"] = s.get("time_to_target_s")
        out[f"{name}_summary"] = {k: s.get(k) for k in ("mean_eta_ms", "batch", "iterations",
                                                        "final_objective")}
        rounds = s.get("migration", {}).get("round_log") or []
        # When the first round was planned and how many points it moved: the straggler's
        # points are in no θ before they leave it (issue 19: the basin is decided then).
        out[f"{name}_first_round"] = (rounds[0]["time_s"], sum(m[2] for m in rounds[0]["moves"])
                                      ) if rounds else None
    b, f = out["bspv_s"], out["fspv_s"]
    out["ratio"] = (b or max_time_s) / (f or max_time_s)
    out["bound"] = "" if (b and f) else (">" if f else ("<" if b else "?"))
    if straggler is not None:
        a = out["fspv_async_s"]
        out["ratio_async"] = (b or max_time_s) / (a or max_time_s)
    return out


def slow_worker_gap(folder: Path, job: dict[str, Any], ref_objective: float, slow: int,
                    seconds: float) -> dict[str, Any]:
    """FSPV with async migration, worker ``slow`` slowed, for ``seconds``: the gap to BSPB's
    converged objective and the migration figures (bytes moved / data bytes, max/min point
    passes, moves of points that had moved before)."""
    s = run_one(_job_file(folder, job), folder / f"fspv-async-slow{slow}",
                ["sync.model=fspv-async",
                 f"stragglers={json.dumps([{**STRAGGLER, 'workers': [slow]}])}",
                 f"stop.max_time_s={seconds}", "stop.tolerance=null"], None)
    mig = s.get("migration", {})
    pp = s["point_passes"]
    return {"slow": slow, "gap": s["final_objective"] / ref_objective - 1.0,
            "bytes_fraction": mig.get("bytes_fraction", 0.0),
            "points_moved": mig.get("points_moved", 0),
            "moved_more_than_once": mig.get("points_moved_more_than_once"),
            "reactivated": mig.get("reactivated", 0), "rounds": mig.get("rounds", 0),
            "passes_min": pp["min"], "passes_max": pp["max"],
            "passes_ratio": pp["max"] / max(pp["min"], 1e-12),
            "mean_eta_ms": s.get("mean_eta_ms")}


def ratio_rows(folder: Path, label: str, job: dict[str, Any], ref: float,
               repeat: int = 1) -> dict[str, Any]:
    """:func:`time_to_target_ratio` without a straggler, then ``repeat`` times with worker 1
    slowed; prints one line per run and the best ratio a straggler row can reach,
    ``floor`` = BSPV's time with the straggler / FSPV's without (issue 19: FSPV with async
    migration cannot beat FSPV on the same data without a straggler)."""
    out: dict[str, Any] = {}
    rows = [(None, 0)] + [(1, i) for i in range(repeat)]
    for straggler, i in rows:
        r = time_to_target_ratio(folder / f"run{i}" if i else folder, job,
                                 ref * TARGET_FACTOR, straggler, max_time_s=20.0)
        out[f"{straggler or 'none'}" + (f"_{i}" if i else "")] = r
        line = (f"  {label:8s} straggler {str(straggler or '-'):4s} BSPV {_s(r['bspv_s'])}"
                f"  FSPV {_s(r['fspv_s'])}  ratio {r['bound']}{r['ratio']:.2f}"
                f"  (FSPV mean η {r['fspv_summary']['mean_eta_ms']} ms)")
        if straggler:
            a = r["fspv_async_summary"]["final_objective"]
            first = r["fspv_async_first_round"]
            line += (f"; FSPV+async {_s(r['fspv_async_s'])}  ratio {r['ratio_async']:.2f}"
                     f"  (final {100 * (a / ref - 1):+.3f}% of BSPB"
                     + (f", first round at {first[0]:.3f} s moved {first[1]}" if first
                        else "") + ")")
            free = out["none"]["fspv_s"]
            if r["bspv_s"] and free:
                line += f"  [floor BSPV/FSPV-without-straggler {r['bspv_s'] / free:.1f}]"
        print(line, flush=True)
    return out


def _s(t: float | None) -> str:
    return "-" if t is None else f"{t:.3f}s"


def skewed_basin(folder: Path, ref: float, workers: int = 4, finish: int = 40,
                 cases: tuple[tuple[float, int], ...] = ((0.0, 1), (0.0, 2), (0.02, 3),
                                                         (0.02, 5), (0.25, 5))
                 ) -> list[dict[str, Any]]:
    """Which basin Lloyd's K-means ends in when its first steps miss most of one shard
    (issue 19): the overlapping workload from its shared initial θ, ``k`` exact Lloyd steps
    on every row but a sample of ``fraction`` of the first contiguous shard (the straggler's:
    what FSP has trained of it before its points migrate), then ``finish`` steps on all rows.
    Returns, per case, the final objective over BSPB's minus 1.  Plain NumPy, no MPI."""
    x = np.load(folder / "data.npy")
    c0 = np.load(folder / "init.npy")
    n = len(x)
    sq = np.einsum("ij,ij->i", x, x)

    def step(c: np.ndarray, rows: np.ndarray | slice) -> np.ndarray:
        a = (sq[rows, None] - 2 * x[rows] @ c.T + np.einsum("ij,ij->i", c, c)).argmin(1)
        count = np.bincount(a, minlength=len(c))
        total = np.zeros_like(c)
        np.add.at(total, a, x[rows])
        return np.where(count[:, None] > 0, total / np.maximum(count, 1)[:, None], c)

    rng = np.random.default_rng(0)
    shard = n // workers
    out = []
    for fraction, k in cases:
        rows = np.concatenate([rng.choice(shard, int(fraction * shard), replace=False),
                               np.arange(shard, n)])
        c = c0.copy()
        for _ in range(k):
            c = step(c, rows)
        for _ in range(finish):
            c = step(c, slice(None))
        f = float((sq[:, None] - 2 * x @ c.T + np.einsum("ij,ij->i", c, c)).min(1).sum())
        out.append({"fraction": fraction, "steps": k, "gap": f / ref - 1.0})
        print(f"  {k} Lloyd steps with {100 * fraction:g}% of shard 1, then {finish} on all:"
              f" {100 * (f / ref - 1):+.3f}% of BSPB", flush=True)
    return out


def horizon_table(root: Path, algorithms: list[str], partition: str,
                  stragglers: str = "none", repeat: int = QUICK.pairs,
                  scale: float = 1.0, length_s: float | None = None,
                  most: int | None = QUICK.pairs_most, budget_s: float = QUICK.pairs_budget_s
                  ) -> dict[str, Any]:
    """FSPV / BSPV at every horizon (:mod:`flegel.cli.paper.horizons`) on ``flegel paper``'s
    workloads: prints one line per pair and per algorithm the median of the pairs at each
    horizon (BSPV / FSPV, > 1: FSPV faster) and where each run's time went.

    ``repeat`` pairs (back to back, BSPV first, then FSPV first, alternating; one data set
    and one reference) each as long as :func:`flegel.cli.paper.horizons.run_length` says
    (``length_s``: a fixed length instead) -- the measurement of ``flegel paper``'s Fig. 8,
    which takes the medians: at the 0.2-0.5 s horizons one pair's ratio moves by 2-3x from
    pair to pair on a shared 2-core machine (issue 19).  ``most`` (``--most``): a row whose
    runs last :data:`flegel.cli.paper.horizons.SHORT_S` or less takes two more pairs at a
    time, up to ``most``, until its median's side of 1 is decided or the algorithms' extra
    pairs would take more than ``budget_s`` in all (one budget over all of them, as
    ``flegel paper``'s Fig. 8, :func:`flegel.cli.paper.horizons.measure`); an undecided row
    says so.  The defaults are ``flegel paper --quick``'s (:data:`~flegel.cli.paper.workloads.
    QUICK`).

    ``scale`` multiplies the quick workloads' rows (``--scale``): at 1 a warm pass of GMM or
    FCM costs a few ms of CPU, less than a barrier on 2 shared cores, so what FSPV saves in
    passes (the sampled calibration, :func:`flegel.interval.multistage.sample_fraction`) is hidden
    by the barriers; larger data make a pass cost what it does on the paper's cluster.
    """
    mode = dataclasses.replace(QUICK, scale=scale)
    runner = Runner(mode, root, say=lambda _: None)
    out: dict[str, Any] = {}
    print(f"time to BSPV's objective at each horizon, BSPV / FSPV (>1: FSPV faster), "
          f"{partition} shards, stragglers: {stragglers}"
          + (f", rows x {scale:g}" if scale != 1 else "") + f", {repeat} pairs each"
          + (f", up to {most} where short and undecided ({budget_s:g} s for those over all "
             "the algorithms)" if most and most > repeat else ""))
    budget = hz.PairBudget(budget_s)
    print(f"  {'algorithm':9s} " + " ".join(f"{h:>7g}s" for h in hz.HORIZONS) + "   mean")

    def line(label: str, rows: list[Any], mean: Any) -> str:
        cells = {r.horizon_s: r.ratio.text() for r in rows}
        return (f"  {label:9s} " + " ".join(f"{cells.get(h, '-'):>8s}" for h in hz.HORIZONS)
                + f"  {mean.text():>6s}")

    for a in algorithms:
        m = hz.measure(runner, a, partition, stragglers, repeat=repeat, length_s=length_s,
                       most=most, budget=budget)
        for pair in m.pairs:
            label = f"{a} #{pair.index + 1}"
            if pair.rows is None:
                print(f"  {label:9s} failed ({pair.order}): "
                      + "; ".join(f"{s} {r.error or 'ok'}" for s, r in pair.runs.items()),
                      flush=True)
                continue
            print(line(label, pair.rows, hz.geo_mean_ratio(pair.rows)) + f"   {pair.order}",
                  flush=True)
            for s, r in pair.runs.items():
                f = hz.run_figures(r.summary or {})
                print(f"      {s:9s} barriers {f['barriers']}, barrier "
                      f"{f['mean_barrier_ms']:.2f} ms, η "
                      f"{f['mean_eta_ms'] and round(f['mean_eta_ms'], 2)} ms, batch "
                      f"{f['batch']}, compute share {f['compute_share']:.2f}, final "
                      f"{f['final_objective']:.7g}")
        print(line(f"{a} med", m.rows, m.mean)
              + f"   (runs of {m.length_s:g} s"
              + (", truncated" if m.truncated else "")
              + f"; {len(m.pairs)} pairs" + ("; undecided" if m.undecided else "")
              + (", budget spent" if m.budget_stopped else "")
              + "; pairs' means "
              + ", ".join(hz.geo_mean_ratio(p.rows).text() if p.rows is not None else "failed"
                          for p in m.pairs) + ")",
              flush=True)
        out[a] = {"rows": [r.as_dict() for r in m.rows], "mean": m.mean.value,
                  "bound": m.mean.qualifier, "length_s": m.length_s,
                  "truncated": m.truncated, "failed": m.failed, "figures": m.figures,
                  "pairs": len(m.pairs), "undecided": m.undecided,
                  "budget_stopped": m.budget_stopped,
                  "seconds": sum(r.seconds for r in m.runs)}
    means = [Ratio(v["mean"], v["bound"]) for v in out.values() if v["rows"] or v["failed"]]
    if means:
        g = geo_mean(means)
        worst = lowest([Ratio(r["ratio"], r["bound"]) for v in out.values()
                        for r in v["rows"]])[1]
        print(f"  geometric mean over algorithms {g.text()}; lowest at any horizon "
              f"{worst.text()} (medians of the pairs)")
        out["_mean"], out["_lowest"] = g.value, worst.value
        out["_mean_bound"], out["_lowest_bound"] = g.qualifier, worst.qualifier
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 points, 10 s runs")
    ap.add_argument("--points", type=int, default=400_000)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the gap runs")
    ap.add_argument("--only", default="ratio,gap,horizons",
                    help="ratio, gap, horizons, basin (comma-separated)")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS),
                    help="horizons: which of flegel paper's algorithms")
    ap.add_argument("--partition", default="strided", help="horizons: strided or contiguous")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="horizons: multiply the quick workloads' rows")
    ap.add_argument("--repeat", type=int, default=None,
                    help=f"horizons: pairs of runs per algorithm, medians printed (default "
                         f"{QUICK.pairs}, as flegel paper --quick); ratio: runs of each "
                         "straggler row (default 1)")
    ap.add_argument("--most", type=int, default=QUICK.pairs_most,
                    help="horizons: the most pairs of a short row, two more at a time until "
                         "the median's side of 1 is decided (default "
                         f"{QUICK.pairs_most}, as flegel paper --quick; --most 0: --repeat, "
                         "no more)")
    ap.add_argument("--budget", type=float, default=QUICK.pairs_budget_s,
                    help="horizons: seconds the extra pairs of all the algorithms may take "
                         f"together (default {QUICK.pairs_budget_s:g}, as flegel paper --quick)")
    ap.add_argument("--length", type=float, default=None,
                    help="horizons: seconds per run (default: as long as the rows need, "
                         "flegel.cli.paper.horizons.run_length)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"ratio: {', '.join(WORKLOADS)} (comma-separated)")
    ap.add_argument("--slow", type=lambda v: [int(w) for w in v.split(",")], default=[1, 3],
                    help="gap: the workers slowed, one run each (default 1,3)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this folder")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    unknown = [w for w in args.workloads.split(",") if w not in WORKLOADS]
    if unknown:
        # Before any run: an unknown label used to run the overlapping workload under its
        # name.
        ap.error(f"--workloads: expected labels among {', '.join(WORKLOADS)}, found "
                 f"{', '.join(map(repr, unknown))}")
    n, seconds = (100_000, 10.0) if args.quick else (args.points, args.seconds)
    only = set(args.only.split(","))
    root = args.keep or Path(tempfile.mkdtemp(prefix="fsp_claims_"))
    figures: dict[str, Any] = {"points": n, "seconds": seconds}
    if "horizons" in only:
        figures["horizons"] = horizon_table(root / "horizons", args.algorithms.split(","),
                                            args.partition,
                                            repeat=(QUICK.pairs if args.repeat is None
                                                    else args.repeat),
                                            scale=args.scale, length_s=args.length,
                                            most=args.most, budget_s=args.budget)
    if not only & {"ratio", "gap", "basin"}:
        print(f"runs in {root}")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str))
        return
    overlap = overlap_data(root / "overlap-data", n)
    ref_overlap = reference(root / "overlap-ref", overlap)
    figures["bspb_overlap"] = ref_overlap
    if "ratio" in only:
        print(f"time to target {TARGET_FACTOR}x BSPB, BSPV / FSPV (>1: FSPV faster):")
        for label in args.workloads.split(","):
            if label == "blobs":
                job = blobs_job(n)
                ref = reference(root / "blobs-ref", job)
            else:
                job, ref = overlap, ref_overlap
            figures[f"ratio_{label}"] = ratio_rows(root / f"ratio-{label}", label, job, ref,
                                                   args.repeat or 1)
    if "basin" in only:
        print("the basin when the first steps miss the straggler's shard (Lloyd, NumPy):")
        figures["basin"] = skewed_basin(root / "overlap-data", ref_overlap)
    if "gap" in only:
        print(f"FSPV + async migration after {seconds:g} s, overlapping workload "
              f"(BSPB converged: {ref_overlap:.6g}):")
        for slow in args.slow:
            g = slow_worker_gap(root / "gap", overlap, ref_overlap, slow, seconds)
            figures[f"gap_slow{slow}"] = g
            print(f"  worker {slow} slow: gap {100 * g['gap']:+.3f}%  bytes moved "
                  f"{g['bytes_fraction']:.2f}x data  passes max/min {g['passes_ratio']:.2f}"
                  f" ({g['passes_min']}..{g['passes_max']})  moved more than once "
                  f"{g['moved_more_than_once']} of {g['points_moved']} moved, "
                  f"{g['rounds']} rounds")
    print(f"runs in {root}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
