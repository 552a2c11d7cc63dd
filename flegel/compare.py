"""``flegel compare``: one job under several sync models and straggler settings.

Runs the job once per (straggler setting, sync model), each as its own MPI job, and prints
a table of time to the target objective, speedups against each baseline, iterations, mean
barrier cost and per-worker traversal passes (FSP paper Figs. 7-9 and 14).  Results go to
``compare.json`` in the output folder, with an overlaid objective-vs-time plot when
matplotlib is installed.

Example::

    flegel compare jobs/kmeans.yaml --sync bspb,bspv,fspb,fspv \\
        --stragglers none --stragglers "injected:tau=32,workers=1"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from flegel.config import JobError, load_job

#: Short keys accepted on the command line for straggler options.
ALIASES = {"tau": "tau_ms", "at": "at_s", "on": "on_s", "off": "off_s"}


def parse_stragglers(text: str) -> list[dict[str, Any]]:
    """Parse ``"injected:tau=32,workers=1-4"`` (several patterns joined by ``+``; ``none``).

    A token without ``=`` continues the previous value, so ``workers=1,3`` works.
    """
    text = text.strip()
    if text in ("", "none"):
        return []
    out = []
    for part in text.split("+"):
        pattern, _, rest = part.partition(":")
        spec: dict[str, Any] = {"pattern": pattern.strip()}
        key = None
        for token in filter(None, (t.strip() for t in rest.split(","))):
            if "=" in token:
                key, _, value = token.partition("=")
                key = ALIASES.get(key.strip(), key.strip())
                spec[key] = yaml.safe_load(value)
            elif key is not None:
                spec[key] = f"{spec[key]},{token}"
            else:
                raise ValueError(f"cannot read straggler option {token!r} in {text!r}")
        out.append(spec)
    return out


def _label(stragglers: list[dict[str, Any]]) -> str:
    if not stragglers:
        return "no stragglers"
    return " + ".join(f"{s['pattern']}(" + ", ".join(f"{k}={v}" for k, v in s.items()
                                                     if k != "pattern") + ")"
                      for s in stragglers)


def run_one(job_file: Path, out: Path, sets: list[str], timeout: float | None) -> dict:
    """Run one setting through ``flegel run`` (it launches its own MPI job)."""
    cmd = [sys.executable, "-m", "flegel", "run", str(job_file), "--out", str(out),
           "--set", "output.progress=none"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed ({' '.join(sets)}):\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    summary["_elapsed_s"] = time.perf_counter() - t0
    return summary


def table(rows: list[dict[str, Any]], baselines: list[str]) -> str:
    """The comparison table, one block per straggler setting."""
    lines = []
    for label in dict.fromkeys(r["stragglers"] for r in rows):
        group = [r for r in rows if r["stragglers"] == label]
        lines.append(f"\n{label}")
        head = (f"  {'sync':<10} {'to target s':>11} {'final obj':>12} {'iters':>6} "
                f"{'barrier ms':>10}  " + "  ".join(f"{'vs ' + b:>9}" for b in baselines)
                + "  passes per worker")
        lines.append(head)
        times = {r["sync"]: r["time_to_target_s"] for r in group}
        for r in group:
            t = r["time_to_target_s"]
            speed = []
            for b in baselines:
                tb = times.get(b)
                speed.append(f"{tb / t:8.2f}x" if t and tb else f"{'-':>9}")
            passes = " ".join(f"{p:.1f}" for p in r["passes"])
            t_txt = f"{t:11.2f}" if t is not None else f"{'not reached':>11}"
            lines.append(f"  {r['sync']:<10} {t_txt} {r['final_objective']:12.6g} "
                         f"{r['iterations']:6d} {r['barrier_ms']:10.2f}  "
                         + "  ".join(speed) + f"  {passes}")
    return "\n".join(lines)


def add_parser(sub: Any, name: str) -> None:
    p = sub.add_parser(name, help="run a job under several sync models and straggler settings")
    p.add_argument("job", help="job YAML file")
    p.add_argument("--sync", default="bspb,bspv,fspb,fspv",
                   help="comma-separated sync models or presets (default: %(default)s)")
    p.add_argument("--stragglers", action="append", default=None, metavar="SPEC",
                   help="a straggler setting, e.g. 'injected:tau=32,workers=1' or 'none' "
                        "(repeatable; default: the job's own)")
    p.add_argument("--target", default="auto",
                   help="target objective, or 'auto': the first run's converged online "
                        "objective plus --slack (default: %(default)s)")
    p.add_argument("--slack", type=float, default=1e-3,
                   help="relative slack of the auto target (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--out", default=None, help="folder for the runs and compare.json")
    p.add_argument("--timeout", type=float, default=None, help="seconds per run")


def main(args: argparse.Namespace) -> int:
    try:
        job = load_job(args.job, args.set)
    except JobError as exc:
        sys.stderr.write(f"flegel: error: {exc}\n")
        return 2
    syncs = [s.strip() for s in args.sync.split(",") if s.strip()]
    try:
        settings = ([parse_stragglers(s) for s in args.stragglers] if args.stragglers
                    else [job["stragglers"]])
        for st in settings:  # validate every combination before running anything
            for sy in syncs:
                load_job(args.job, args.set + [f"sync.model={sy}",
                                               f"stragglers={json.dumps(st)}"])
    except (JobError, ValueError) as exc:
        sys.stderr.write(f"flegel: error: {exc}\n")
        return 2
    out = Path(args.out or Path(job["output"]["dir"]) / f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    target = job["stop"]["target_objective"]
    if args.target != "auto":
        target = float(args.target)
    if target is None:
        ref = run_one(job.file, out / "reference", args.set + [f"sync.model={syncs[0]}",
                                                               "stragglers=[]"], args.timeout)
        f = ref["online_objective"]
        target = f + args.slack * abs(f)
        print(f"target objective: {target:.8g} (reference run {syncs[0]}, no stragglers, "
              f"+{args.slack:g})")
    rows = []
    for i, st in enumerate(settings):
        for sy in syncs:
            sets = args.set + [f"sync.model={sy}", f"stragglers={json.dumps(st)}",
                               f"stop.target_objective={target!r}"]
            s = run_one(job.file, out / f"{i}-{sy}", sets, args.timeout)
            rows.append({"sync": sy, "stragglers": _label(st), "dir": str(out / f"{i}-{sy}"),
                         "time_to_target_s": s.get("time_to_target_s"),
                         "wall_time_s": s["wall_time_s"], "final_objective": s["final_objective"],
                         "iterations": s["iterations"],
                         "barrier_ms": 1e3 * s.get("mean_barrier_s", 0.0),
                         "spread_ms": 1e3 * s.get("mean_spread_s", 0.0),
                         "passes": [w["passes"] for w in s["per_worker"]]})
            print(f"  done: {_label(st)} / {sy}: {rows[-1]['time_to_target_s']} s to target",
                  flush=True)
    text = table(rows, syncs)
    print(text)
    (out / "compare.json").write_text(json.dumps({"target": target, "runs": rows}, indent=2))
    try:
        from flegel.report import plot_objectives

        plot_objectives([Path(r["dir"]) for r in rows], out / "objective.png",
                        labels=[f"{r['sync']} / {r['stragglers']}" for r in rows])
        print(f"plot: {out / 'objective.png'}")
    except ImportError:
        pass
    print(f"results: {out / 'compare.json'}")
    return 0
