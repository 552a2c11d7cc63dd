"""Synchronization models under a straggler: K-means, 4 workers, time to a common target.

Runs one K-means job (synthetic blobs, 4 workers) under BSP (full batch and ``batch: auto``),
ASP, SSP, DSSP, ElasticBSP (R = 15 and 60) and SpecSync (adaptive, on ASP), without
stragglers (1,000,000 points) and with 1 of the 4 workers injected (τ = 32 ms per 1,000
points, FSP paper Section 6.1; 100,000 points, since the straggler is ~100x slower per
point), and prints per setting:

* time to the target: the first event whose online objective is at or below ``1.01 ×`` the
  final objective of BSP full batch without stragglers on the same data (the reference run),
  once every worker has completed a pass;
* the final objective (exact, evaluated on every shard), relative to the reference;
* wall time, iterations (barriers, or pushes / workers), mean / max staleness (θ versions
  missed by an update) and the largest clock gap to the slowest worker at the start of an
  iteration, plus each model's own figure: DSSP's mean r*, SpecSync's aborted work,
  ElasticBSP's barriers and their predicted (ZipLine's d*, expected) vs actual wait.

Each run stops at convergence (relative change ≤ 1e-5 per pass of the slowest worker) or at
the time limit.

``--waits`` runs the ElasticBSP wait comparison instead (ZipLine paper Section 6.2 compares
ElasticBSP with BSP and SSP; issue 14 item 7): the same K-means job on a heterogeneous
cluster (workers 2-4 slowed 1.5x, 2x and 3x by a persistent straggler that sleeps, so the
cores stay free), run for a fixed time (no convergence stop) under BSPV (``batch: auto``), SSP
(s = 3) and ElasticBSP (R = 15), ``--repeats`` times each, printing per run:

* the wait at one synchronization, measured by the master: for a BSP barrier and an
  ElasticBSP barrier, last arrival − first arrival of the pushes that meet there (the wait
  of the first worker to arrive, the paper's τ_wait, Section 3); for SSP, a held worker's
  time held (there is no barrier);
* ElasticBSP's predicted wait d* (ZipLine's point forecast when the superstep's plan was
  made), and the ratio actual / predicted (the target: at most 2);
* the share of the workers' time spent waiting for θ, as each worker measures it (commit
  sent to θ received: the push round trip is in it for every model);
* synchronizations and θ versions per second.

Usage: ``python bench/sync_bench.py [--quick] [--out DIR]`` or
``python bench/sync_bench.py --waits [--repeats N] [--max-time S] [--models elastic]``;
``--waits --barriers`` also prints every ElasticBSP barrier (:func:`barrier_table`);
``python bench/sync_bench.py --waits-sim [--repeats SEEDS]`` replays ElasticBSP on the
simulated clock (deterministic: with the paper's single plan per superstep and with the
rolling re-plan, under seeded iteration-time noise).  With ``--json OUT``, ``--waits`` and
``--waits-sim`` also write their ratios (measured / predicted wait) to OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

#: (label, sync section) of every configuration compared.
MODELS: list[tuple[str, dict[str, Any]]] = [
    ("bsp-full", {"model": "bsp", "batch": "full"}),
    ("bsp-auto", {"model": "bsp", "batch": "auto"}),
    ("asp", {"model": "asp"}),
    ("ssp s=3", {"model": "ssp", "s": 3}),
    ("dssp 3..15", {"model": "dssp", "s_lower": 3, "s_upper": 15}),
    ("elastic R=15", {"model": "elastic", "r": 15}),
    ("elastic R=60", {"model": "elastic", "r": 60}),
    ("specsync", {"model": "specsync", "adaptive": True}),
]

#: (label, stragglers, points, quick points).  The straggler serves 32 µs per point, ~100x a
#: K-means point here, so its setting uses less data to keep each run within ~5-25 s.
SETTINGS: list[tuple[str, list[dict[str, Any]], int, int]] = [
    ("no stragglers", [], 1_000_000, 200_000),
    ("1 of 4 injected (tau 32 ms / 1,000 points)",
     [{"pattern": "injected", "tau_ms": 32, "every": 1000, "workers": [1]}], 100_000, 40_000),
]


def job_doc(points: int, max_time_s: float) -> dict[str, Any]:
    """The K-means job every configuration runs (sync and stragglers added per run)."""
    return {"name": "sync-bench", "algorithm": "kmeans",
            "params": {"n_clusters": 16, "init": "kmeans++"},
            "data": {"source": "synthetic", "kind": "blobs", "n_points": points,
                     "n_features": 8, "centers": 16, "cluster_std": 5.0, "seed": 11},
            "workers": 4, "seed": 0,
            "stop": {"max_iterations": 100_000, "tolerance": 1e-5, "max_time_s": max_time_s},
            "output": {"progress": "none", "save_model": False}}


def run(doc: dict[str, Any], out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run one job through ``flegel run`` (it starts its own MPI job)."""
    # Absolute: the child runs in ``out`` (below), where a relative ``--out RUNS`` would
    # name RUNS/x/RUNS/x.
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "job.in.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    # cwd is the run's folder, not the checkout: ``python -m flegel`` then imports the flegel
    # installed for ``sys.executable`` (a paired run of another checkout's code with its
    # interpreter), not the one this script sits in.
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(path), "--out",
                           str(out / "run")], capture_output=True, text=True, env=env,
                          cwd=out, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{doc['sync']} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "run" / "summary.json").read_text())
    events = [json.loads(line)
              for line in (out / "run" / "events.jsonl").read_text().splitlines()]
    return summary, events


def time_to(events: list[dict[str, Any]], target: float, workers: int = 4) -> float | None:
    """Time of the first event whose online objective is at or below ``target``, once every
    worker has completed a pass (before, the online objective misses unvisited points)."""
    passes: dict[int, float] = {}
    for e in events:
        if "workers" in e:  # a barrier of BSP: every worker's passes
            passes = dict(zip(e["workers"]["rank"], e["workers"]["passes"]))
        elif "rank" in e:  # a push
            passes[e["rank"]] = e["passes"]
        if len(passes) == workers and min(passes.values()) >= 1 and e["objective"] <= target:
            return e["time_s"]
    return None


def extra(s: dict[str, Any]) -> str:
    """The model's own figure for the table."""
    model = s["sync"]["model"]
    if model == "bsp":
        return f"batch {s['batch']}"
    if model == "dssp":
        return f"r* mean {s['r_star']['mean']:.1f} ({s['r_star']['decisions']} decisions)"
    if model == "specsync":
        return (f"{s['aborts']} aborts, {s['aborted_points']:,} pts / "
                f"{s['aborted_s']:.2f} s thrown away")
    if model == "elastic":
        return (f"{s['barriers']} barriers, wait {1e3 * s['mean_predicted_wait_s']:.1f} d* / "
                f"{1e3 * s['mean_expected_wait_s']:.1f} expected / "
                f"{1e3 * s['mean_barrier_wait_s']:.1f} ms actual")
    return f"batch {s['batch']}"


def row(label: str, s: dict[str, Any], events: list[dict[str, Any]], target: float,
        reference: float) -> str:
    t = time_to(events, target)
    t_txt = f"{t:9.2f}" if t is not None else f"{'-':>9}"
    push = "staleness" in s
    stale = (f"{s['staleness']['mean']:5.1f} {s['staleness']['max']:4.0f} "
             f"{s['clock_gap']['max']:4.0f}") if push else f"{'-':>5} {'-':>4} {'-':>4}"
    return (f"  {label:<13} {t_txt} {s['final_objective'] / reference:9.4f} "
            f"{s['wall_time_s']:7.2f} {s['iterations']:6d} {stale}  {s['stop_reason']:<9} "
            f"{extra(s)}")


#: The wait comparison: (label, sync section).
WAIT_MODELS: list[tuple[str, dict[str, Any]]] = [
    ("bspv", {"model": "bsp", "batch": "auto"}),
    ("ssp s=3", {"model": "ssp", "s": 3}),
    ("elastic R=15", {"model": "elastic", "r": 15}),
]
#: A heterogeneous cluster: three of four workers slowed by sleeping after every block.
HETERO: list[dict[str, Any]] = [
    {"pattern": "persistent", "factor": f, "workers": [r]} for r, f in ((2, 1.5), (3, 2.0),
                                                                         (4, 3.0))]


def wait_figures(s: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, float]:
    """The wait figures of one run (see the module docstring), in seconds or per second."""
    wall = max(s["wall_time_s"], 1e-9)
    model = s["sync"]["model"]
    waited = busy = 0.0
    if model == "bsp":
        log = [e for e in events if "spread_s" in e]
        per_sync = [e["spread_s"] for e in log]
        for e in log[1:]:  # the first wait holds the start-up (θ⁰ received before training)
            waited += sum(e["workers"]["wait_s"])
            busy += sum(e["workers"]["wait_s"]) + sum(e["workers"]["compute_s"])
    else:
        seen: set[int] = set()
        for e in events:
            if "rank" in e:
                if e["rank"] in seen:
                    waited += e["wait_s"]
                    busy += e["wait_s"] + e["compute_s"]
                seen.add(e["rank"])
        if model == "elastic":
            log = [e for e in events if "barrier" in e]
            per_sync = [e["wait_s"] for e in log]
        else:  # SSP has no barrier: a worker's time held, per push
            log = []
            per_sync = [sum(w["held_s"] for w in s["push_stats"]) / max(s["pushes"], 1)]
    out = {"wait_ms": 1e3 * (statistics.fmean(per_sync) if per_sync else 0.0),
           "wait_share": waited / max(busy, 1e-9), "syncs_per_s": len(log) / wall,
           "versions_per_s": s.get("theta_versions", s["iterations"]) / wall}
    if model == "elastic" and per_sync:
        for key, name in (("predicted_wait_s", "predicted"), ("expected_wait_s", "expected"),
                          ("final_predicted_wait_s", "final"),
                          ("final_d_star_s", "final_star")):
            if key not in log[0]:
                continue  # a flegel from before the expected wait (a baseline checkout)
            pred = statistics.fmean(e[key] for e in log)
            out[f"{name}_ms"] = 1e3 * pred
            out[f"{name}_ratio"] = statistics.fmean(per_sync) / max(pred, 1e-12)
    return out


def barrier_table(events: list[dict[str, Any]]) -> dict[str, float]:
    """``--barriers``: print every ElasticBSP barrier of one run, the measured wait beside
    ``d`` of the plan that placed it (issue 19, item 6).

    Columns (ms): ``d* first`` ZipLine's d* of the superstep's first plan; ``d* last`` ZipLine's
    d* of the last plan, the one that placed the barrier (when the flegel run records it);
    ``d last`` the wait of the set that plan chose (its point forecast; > d* last when the
    robust choice gave up some of d* for a smaller expected wait); ``measured`` the last
    minus the first barrier push's arrival at the master (the paper's τ_wait, Section 3,
    without the release); ``/d last`` their ratio; ``late`` the last-arriving worker's
    arrival minus the time the last plan predicted for it, and ``by`` whether that worker
    made the last plan (its continuation predicted from its own push).

    Returns
    -------
    dict
        ``sum_ratio`` (Σ measured / Σ d last), ``median_ratio`` (of the per-barrier ratios)
        and ``barriers``.
    """
    log = [e for e in events if "barrier" in e]
    print(f"    {'barrier':>7} {'d* first':>8} {'d* last':>8} {'d last':>8} {'measured':>8} "
          f"{'/d last':>7} {'late':>7} {'by':>3} {'replans':>7}")
    ratios = []
    for b in log:
        d_last = b["final_predicted_wait_s"]
        star = b.get("final_d_star_s")
        err = b.get("final_end_error_s")
        late, by = "-", "-"
        if err is not None:
            last = b["last_rank"]  # ranks are 1..n, in the order of the error list
            late = f"{1e3 * err[last - 1]:7.2f}"
            by = "yes" if b["final_planned_by"] == last else "no"
        r = b["wait_s"] / max(d_last, 1e-12)
        ratios.append(r)
        print(f"    {b['barrier']:>7} {1e3 * b['predicted_wait_s']:8.2f} "
              f"{'-' if star is None else f'{1e3 * star:8.2f}':>8} {1e3 * d_last:8.2f} "
              f"{1e3 * b['wait_s']:8.2f} {r:7.2f} {late:>7} {by:>3} {b['replans']:>7}")
    waited = sum(b["wait_s"] for b in log)
    total = waited / max(sum(b["final_predicted_wait_s"] for b in log), 1e-12)
    med = statistics.median(ratios) if ratios else float("nan")
    star = ""
    if log and "final_d_star_s" in log[0]:
        star = (f"; Σ measured / Σ d* last = "
                f"{waited / max(sum(b['final_d_star_s'] for b in log), 1e-12):.2f}")
    print(f"    {len(log)} barriers: Σ measured / Σ d last = {total:.2f}{star}; median per "
          f"barrier {med:.2f}")
    return {"sum_ratio": total, "median_ratio": med, "barriers": len(log)}


def waits(repeats: int, max_time: float, points: int, root: Path,
          only: str | None = None, barriers: bool = False) -> dict[str, Any]:
    """The ElasticBSP wait comparison (``--waits``); ``only``: a comma-separated subset of
    the models (their labels' first words: bspv, ssp, elastic).

    Returns
    -------
    dict
        Per prediction (``predicted``: ZipLine's d* of the first plan, ``expected``, ``final``:
        d of the plan that placed the barrier), ElasticBSP's measured / predicted wait of
        every run and their median; and every run's figures.
    """
    runs: list[dict[str, Any]] = []
    models = [(label, sync) for label, sync in WAIT_MODELS
              if only is None or label.split()[0] in only.split(",")]
    doc = job_doc(points, max_time)
    doc["stop"] = {"max_iterations": 1_000_000, "tolerance": None, "max_time_s": max_time}
    print(f"ElasticBSP waits: K-means, {points:,} x 8 blobs, K = 16, 4 workers; workers 2-4 "
          f"slowed 1.5x, 2x, 3x (persistent, sleeping); {max_time:g} s of training per run, "
          f"{repeats} runs per model")
    print(f"  {'sync':<13} {'run':>3} {'wait/sync':>9} {'d*':>6} {'expected':>8} "
          f"{'/d*':>5} {'/exp':>5} {'wait share':>10} {'syncs/s':>8} {'versions/s':>10}")
    ratios: dict[str, list[float]] = {"predicted": [], "expected": [], "final": [],
                                      "final_star": []}
    for label, sync in models:
        for i in range(repeats):
            key = f"waits-{label}-{i}".replace(" ", "_").replace("=", "")
            s, events = run({**doc, "sync": sync, "stragglers": HETERO}, root / key)
            f = wait_figures(s, events)
            runs.append({"model": label, "run": i + 1, **f})
            cols = []
            for name in ("predicted", "expected", "final", "final_star"):
                ok = f"{name}_ms" in f
                cols.append(f"{f[f'{name}_ms']:.2f}" if ok else "-")
                if ok:
                    ratios[name].append(f[f"{name}_ratio"])
            rat = [f"{f[f'{n}_ratio']:.2f}" if f"{n}_ratio" in f else "-"
                   for n in ("predicted", "expected")]
            print(f"  {label:<13} {i + 1:>3} {f['wait_ms']:9.2f} {cols[0]:>6} {cols[1]:>8} "
                  f"{rat[0]:>5} {rat[1]:>5} {f['wait_share']:10.3f} {f['syncs_per_s']:8.1f} "
                  f"{f['versions_per_s']:10.1f}", flush=True)
            if barriers and sync["model"] == "elastic":
                runs[-1]["per_barrier"] = barrier_table(events)
    for name, label in (("predicted", "ZipLine's d* (first plan)"),
                        ("expected", "the expected wait (first plan)"),
                        ("final", "d of the plan that placed the barrier"),
                        ("final_star", "ZipLine's d* of the plan that placed the barrier")):
        r = ratios[name]
        if r:
            print(f"  ElasticBSP measured wait / {label}: {min(r):.2f} .. {max(r):.2f} "
                  f"(median {statistics.median(r):.2f}) over {len(r)} runs")
    print("  (waits in ms: wait/sync is a barrier's last minus first arrival for BSPV and "
          "ElasticBSP, time held per push for SSP)")
    return {"points": points, "max_time_s": max_time, "repeats": repeats, "target_ratio": 2.0,
            "runs": runs, "ratios": ratios,
            "median_ratio": {k: statistics.median(v) for k, v in ratios.items() if v}}


def waits_sim(seeds: int) -> dict[str, Any]:
    """``--waits-sim``: ElasticBSP's waits on the simulated clock (``tests/fakes.py``), with
    the rolling re-plan ("rolling") and with one plan per superstep ("single", the paper's
    schedule; same predictor), at several levels of seeded iteration-time noise: the
    deterministic counterpart of ``--waits`` (``tests/test_elastic_waits.py`` asserts it).

    Returns
    -------
    dict
        Every row of the table: plan, noise, barriers, the mean waits (s) and the ratios.
    """
    rows: list[dict[str, Any]] = []
    sys.path.insert(0, str(ROOT))
    from flegel.sync.elastic import ElasticBSP
    from tests.fakes import Simulation

    costs = [10e-6, 13e-6, 17e-6, 23e-6]
    print("ElasticBSP on the simulated clock (d last: d of the plan that placed the barrier): "
          "4 workers, 200-point pushes of 2.0, 2.6, 3.4 and "
          f"4.6 ms, 50 us latency, 200 iterations; means over {seeds} seeds; waits in ms")
    print(f"  {'plan':<8} {'noise':<22} {'barriers':>8} {'d*':>6} {'expected':>8} "
          f"{'measured':>8} {'/d*':>6} {'/exp':>6} {'d last':>6} {'/last':>6}")
    for replan in (False, True):
        for jitter, block in ((0.0, None), (0.3, None), (0.6, None), (0.3, 200), (0.6, 200)):
            log = []
            for seed in range(seeds):
                sim = Simulation("elastic", {"batch": 200, "r": 15, "replan": replan},
                                 workers=4, points=16_000, cost_s=costs, jitter=jitter,
                                 block_points=block, latency_s=50e-6, seed=seed,
                                 stop={"max_iterations": 200}, max_sim_s=600.0).run()
                assert isinstance(sim.policy, ElasticBSP)
                log += sim.policy.barriers
            w, d, e, last = (1e3 * statistics.fmean(b[k] for b in log)
                             for k in ("wait_s", "predicted_wait_s", "expected_wait_s",
                                       "final_predicted_wait_s"))
            noise = (f"+-{jitter:.0%} per " + ("iteration" if block else "block")
                     if jitter else "none")
            print(f"  {'rolling' if replan else 'single':<8} {noise:<22} {len(log):>8} "
                  f"{d:6.2f} {e:8.2f} {w:8.2f} {w / d:6.2f} {w / e:6.2f} {last:6.2f} "
                  f"{w / last:6.2f}", flush=True)
            rows.append({"plan": "rolling" if replan else "single", "noise": noise,
                         "barriers": len(log), "predicted_ms": d, "expected_ms": e,
                         "measured_ms": w, "predicted_ratio": w / d, "expected_ratio": w / e,
                         "final_ms": last, "final_ratio": w / last})
    return {"seeds": seeds, "target_ratio": 2.0, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="less data (200,000 / 40,000 points), 10 s limit per run")
    ap.add_argument("--max-time", type=float, default=None, help="seconds per run")
    ap.add_argument("--out", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--waits", action="store_true",
                    help="the ElasticBSP wait comparison (BSPV, SSP, ElasticBSP) instead")
    ap.add_argument("--repeats", type=int, default=3, help="runs per model for --waits")
    ap.add_argument("--waits-sim", action="store_true",
                    help="ElasticBSP's waits on the simulated clock instead (deterministic)")
    ap.add_argument("--barriers", action="store_true",
                    help="for --waits: print every ElasticBSP barrier (d of the plan that "
                         "placed it, measured wait, ratio)")
    ap.add_argument("--models", default=None,
                    help="for --waits: a subset, e.g. 'elastic' or 'bspv,ssp'")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="for --waits and --waits-sim: also write the ratios to OUT "
                         "(for bench/suite.py)")
    args = ap.parse_args()
    figures: dict[str, Any] | None = None
    if args.waits_sim:
        figures = waits_sim(args.repeats)
    elif args.waits:
        with tempfile.TemporaryDirectory() as tmp:
            figures = waits(args.repeats, args.max_time or (4.0 if args.quick else 8.0),
                            200_000 if args.quick else 1_000_000, args.out or Path(tmp),
                            args.models, args.barriers)
    if figures is not None:
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
        return
    max_time = args.max_time or (10.0 if args.quick else 25.0)
    head = (f"  {'sync':<13} {'to target':>9} {'final/ref':>9} {'wall s':>7} {'iters':>6} "
            f"{'stale':>5} {'max':>4} {'gap':>4}  {'stop':<9} model")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        for name, stragglers, full_points, quick_points in SETTINGS:
            points = quick_points if args.quick else full_points
            base = job_doc(points, max_time)
            tag = name.split(" (")[0].replace(" ", "_")
            ref_s, ref_ev = run({**base, "sync": MODELS[0][1], "stragglers": []},
                                root / f"reference-{tag}")
            reference = ref_s["final_objective"]
            target = 1.01 * reference
            print(f"\n{name}: K-means, {points:,} x 8 blobs (16 centres, std 5), K = 16, "
                  f"4 workers; target = 1.01 x BSP-full final objective = {target:.6g}")
            print(head)
            for label, sync in MODELS:
                if label == MODELS[0][0] and not stragglers:
                    s, events = ref_s, ref_ev  # the reference run is this row
                else:
                    key = f"{label}-{tag}".replace(" ", "_")
                    s, events = run({**base, "sync": sync, "stragglers": stragglers},
                                    root / key)
                print(row(label, s, events, target, reference), flush=True)


if __name__ == "__main__":
    main()
