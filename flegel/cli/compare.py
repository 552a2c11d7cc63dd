"""``flegel compare``: one job under several sync models and straggler settings.

Runs the job once per (straggler setting, sync model), each as its own MPI job, and prints
a table of time to the target objective, speedups against each baseline, iterations, mean
barrier cost and per-worker traversal passes (FSP paper Figs. 7-9 and 14).  Results go to
``compare.json`` in the output folder, with an overlaid objective-vs-time plot when
matplotlib is installed.

For FSP runs with data migration (Section 4) the table also shows the points moved and the
fraction of the data's bytes they weigh; for every run it shows the spread of the workers'
traversal passes (max - min) and the range of passes per point.  The migration modes are
sync presets: ``fspv-off``, ``fspv-async``, ``fspv-sync`` (and ``fspb-…``), see
``flegel.sync.PRESETS``.
With matplotlib, ``passes_time.png``, ``delta_f.png`` and ``held.png`` of every run are drawn
beside ``objective.png`` (see :mod:`flegel.cli.report`).

Example::

    flegel compare jobs/kmeans.yaml --sync bspb,bspv,fspb,fspv \\
        --stragglers none --stragglers "injected:tau=32,workers=1"
    flegel compare jobs/kmeans.yaml --sync fspv-off,fspv-async,fspv-sync \\
        --stragglers "injected:tau=32,workers=1"
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from flegel.cli.launch import KILL_AFTER_S
from flegel.job.errors import JobError
from flegel.job.validate import load_job
from flegel.rundir import files
from flegel.sync import PRESETS

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


def model_sets(sync: str) -> list[str]:
    """The ``--set`` options that select the sync model or preset ``sync``.

    A preset's nested sections (``migration: {mode: async}``) are also given key by key, so
    that the user's own ``--set sync.migration.window=…`` adds to them instead of replacing
    the preset's whole section.

    Parameters
    ----------
    sync : str
        A sync model or a preset of :data:`flegel.sync.PRESETS`.

    Returns
    -------
    list of str
        ``key.path=value`` items, ``sync.model=…`` first.
    """
    out = [f"sync.model={sync}"]
    for section, value in PRESETS.get(sync, {}).items():
        if isinstance(value, dict):
            out += [f"sync.{section}.{k}={json.dumps(v)}" for k, v in value.items()]
    return out


def row_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's per-worker and migration figures for the table, from its ``summary.json``.

    Returns
    -------
    dict
        ``passes`` (per worker), ``pass_spread`` (max - min of them), ``point_passes``
        (min and max traversals of a point, when recorded) and ``migration`` (mode, rounds,
        points moved, bytes fraction; None when the run migrated nothing or had no
        migration).
    """
    passes = [float(w["passes"]) for w in summary.get("per_worker", [])]
    mig = summary.get("migration")
    pp = summary.get("point_passes")
    return {"passes": passes,
            "pass_spread": max(passes) - min(passes) if passes else 0.0,
            "point_passes": [pp["min"], pp["max"]] if pp else None,
            "migration": None if not mig else {
                "mode": mig.get("mode"), "rounds": mig.get("rounds", 0),
                "points_moved": int(mig.get("points_moved", 0)),
                "bytes_fraction": float(mig.get("bytes_fraction", 0.0))}}


class RunFailedError(RuntimeError):
    """One run of the comparison failed or ran past ``--timeout``."""


def run_one(job_file: Path, out: Path, sets: list[str], timeout: float | None) -> dict:
    """Run one setting through ``flegel run`` (it launches its own MPI job)."""
    cmd = [sys.executable, "-m", "flegel", "run", str(job_file), "--out", str(out),
           "--set", "output.progress=none"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # End it as a user's SIGTERM would: the run saves its last θ, every rank ends
        # (flegel.cli.launch); kill the launcher only if that takes too long.
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=KILL_AFTER_S + 3.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        said = [ln for ln in err.splitlines() if ln.startswith("flegel:")]
        raise RunFailedError(f"run {out} ({' '.join(sets)}) did not finish within "
                             f"--timeout {timeout:g} s and was stopped"
                             + (f": {said[-1].removeprefix('flegel: ')}" if said else "")) from None
    if proc.returncode != 0:
        raise RunFailedError(f"run {out} ({' '.join(sets)}) failed with exit code "
                             f"{proc.returncode}:\n{err[-3000:]}")
    summary = json.loads((out / files.SUMMARY).read_text())
    summary["_elapsed_s"] = time.perf_counter() - t0
    return summary


def table(rows: list[dict[str, Any]], baselines: list[str]) -> str:
    """The comparison table, one block per straggler setting.

    Columns: time to target, final exact objective, iterations, mean barrier cost, speedups
    against every baseline, points migrated and their share of the data's bytes, the spread
    of the workers' passes (max - min), the range of passes per point, passes per worker.
    """
    lines = []
    width = max([10] + [len(r["sync"]) for r in rows])
    for label in dict.fromkeys(r["stragglers"] for r in rows):
        group = [r for r in rows if r["stragglers"] == label]
        lines.append(f"\n{label}")
        head = (f"  {'sync':<{width}} {'to target s':>11} {'final obj':>12} {'iters':>6} "
                f"{'barrier ms':>10}  "
                + "  ".join(f"{'vs ' + b:>{max(9, len(b) + 3)}}" for b in baselines)
                + f"  {'moved':>8} {'bytes %':>7} {'spread':>6} {'pt passes':>9}"
                + "  passes per worker")
        lines.append(head)
        times = {r["sync"]: r["time_to_target_s"] for r in group}
        for r in group:
            t = r["time_to_target_s"]
            speed = []
            for b in baselines:
                tb = times.get(b)
                w = max(9, len(b) + 3)
                speed.append(f"{f'{tb / t:.2f}x' if t and tb else '-':>{w}}")
            passes = " ".join(f"{p:.1f}" for p in r["passes"])
            t_txt = f"{t:11.2f}" if t is not None else f"{'not reached':>11}"
            mig = r.get("migration")
            mig_txt = (f"{mig['points_moved']:8d} {100 * mig['bytes_fraction']:7.1f}" if mig
                       else f"{'-':>8} {'-':>7}")
            pp = r.get("point_passes")
            pp_txt = f"{pp[0]}-{pp[1]}" if pp else "-"
            lines.append(f"  {r['sync']:<{width}} {t_txt} {r['final_objective']:12.6g} "
                         f"{r['iterations']:6d} {r['barrier_ms']:10.2f}  "
                         + "  ".join(speed)
                         + f"  {mig_txt} {r.get('pass_spread', 0.0):6.1f} {pp_txt:>9}"
                         + f"  {passes}")
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
    p.add_argument("--out", default=None, help=f"folder for the runs and {files.COMPARE}")
    p.add_argument("--timeout", type=float, default=None, help="seconds per run")


def main(args: argparse.Namespace) -> int:
    try:
        return _compare(args)
    except RunFailedError as exc:
        sys.stderr.write(f"flegel: error: {exc}\n")
        return 1


def _compare(args: argparse.Namespace) -> int:
    try:
        job = load_job(args.job, args.set)
    except JobError as exc:
        sys.stderr.write(f"flegel: error: {exc}\n")
        return 2
    syncs = [s.strip() for s in args.sync.split(",") if s.strip()]
    try:
        settings = ([parse_stragglers(s) for s in args.stragglers] if args.stragglers
                    else [job.stragglers])
        for st in settings:  # validate every combination before running anything
            for sy in syncs:
                load_job(args.job, args.set + model_sets(sy) + [f"stragglers={json.dumps(st)}"])
    except (JobError, ValueError) as exc:
        sys.stderr.write(f"flegel: error: {exc}\n")
        return 2
    out = Path(args.out or Path(job.output.dir) / f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    target = job.stop.target_objective
    if args.target != "auto":
        target = float(args.target)
    if target is None:
        ref = run_one(job.file, out / files.REFERENCE,
                      args.set + model_sets(syncs[0]) + ["stragglers=[]"], args.timeout)
        f = ref["online_objective"]
        target = f + args.slack * abs(f)
        print(f"target objective: {target:.8g} (reference run {syncs[0]}, no stragglers, "
              f"+{args.slack:g})")
    rows = []
    for i, st in enumerate(settings):
        for sy in syncs:
            sets = args.set + model_sets(sy) + [f"stragglers={json.dumps(st)}",
                                                f"stop.target_objective={target!r}"]
            s = run_one(job.file, out / f"{i}-{sy}", sets, args.timeout)
            rows.append({"sync": sy, "stragglers": _label(st), "dir": str(out / f"{i}-{sy}"),
                         "time_to_target_s": s.get("time_to_target_s"),
                         "wall_time_s": s["wall_time_s"], "final_objective": s["final_objective"],
                         "iterations": s["iterations"],
                         "barrier_ms": 1e3 * s.get("mean_barrier_s", 0.0),
                         "spread_ms": 1e3 * s.get("mean_spread_s", 0.0),
                         **row_figures(s)})
            print(f"  done: {_label(st)} / {sy}: {rows[-1]['time_to_target_s']} s to target",
                  flush=True)
    text = table(rows, syncs)
    print(text)
    (out / files.COMPARE).write_text(json.dumps({"target": target, "runs": rows}, indent=2))
    try:
        from flegel.cli.report import draw

        for made in draw([Path(r["dir"]) for r in rows], out,
                         labels=[f"{r['sync']} / {r['stragglers']}" for r in rows]):
            print(f"plot: {made}")
    except ImportError as err:  # no matplotlib: the table and compare.json are enough
        print(f"no plot: {err}")
    print(f"results: {out / files.COMPARE}")
    return 0
