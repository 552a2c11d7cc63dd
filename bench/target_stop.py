"""How soon does a run to a target objective stop once it reached it?  (``flegel paper``'s
target runs, :mod:`flegel.runtime.exact`, the target stop.)

A run with ``stop.target_objective`` stops on an exact evaluation during training at or below
the target; its time to target is measured afterwards on the θ trace.  The time between the
two -- the *overshoot*, ``wall_time_s - time_to_target_s`` -- is training nobody reads.

Per workload (``flegel paper --quick``'s: K-means, GMM, LR and the CNN on contiguous shards,
their targets from the page's reference runs, :class:`flegel.cli.paper.runner.Runner`) and
setting (BSPV and FSPV, with and without one straggler), each round runs the job once with
each interpreter given -- ``--main`` (e.g. a checkout of main's) and ``--branch`` (this one's
by default) -- alternating which goes first.  Per run it prints time to target, training time
(``wall_time_s``), the overshoot, the exact evaluations during training and their share of
the training time, and when the online objective reached the target; then per side the
totals, and the branch's time to target against main's (geometric mean of the per-setting
medians).

Usage::

    python bench/target_stop.py --main /path/to/main/python [--branch PYTHON] [--rounds 2]
        [--algorithms kmeans,cnn] [--syncs bspv,fspv] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from flegel.cli.compare import model_sets, parse_stragglers
from flegel.cli.paper.runner import Runner
from flegel.cli.paper.workloads import QUICK

STRAGGLERS = ("none", "injected:tau=32,workers=1")


def run(python: str, job: Path, out: Path, sets: list[str]) -> dict[str, Any]:
    """One ``flegel run`` with ``python``; its summary.json (``job``: an absolute path)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [python, "-m", "flegel", "run", str(job), "--out", str(out),
           "--set", "output.progress=none"]
    for s in sets:
        cmd += ["--set", s]
    # Not from this folder: ``python -m`` puts the working directory first on sys.path, and
    # main's interpreter would import this checkout's flegel.
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120,
                   cwd=out.parent)
    return json.loads((out / "summary.json").read_text())


def figures(s: dict[str, Any]) -> dict[str, Any]:
    """A run's time to target, training time, overshoot, evaluations during training, and
    when its online objective reached the target (``time_to_target_online_s``)."""
    ttt = s.get("time_to_target_s")
    wall = float(s["wall_time_s"])
    ex = s.get("exact_objective") or {}
    online = s.get("time_to_target_online_s")
    return {"ttt": None if ttt is None else float(ttt), "wall": wall,
            "online": None if online is None else float(online),
            "over": None if ttt is None else wall - float(ttt),
            "evals": int(ex.get("evaluations", 0)),
            "cost": float(ex.get("cost_fraction") or 0.0),
            "reason": s.get("stop_reason")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--main", required=True, help="main's python")
    ap.add_argument("--branch", default=sys.executable, help="the branch's python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--algorithms", default="kmeans,gmm,logreg,cnn")
    ap.add_argument("--syncs", default="bspv,fspv")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this folder")
    args = ap.parse_args(argv)
    sides = {"main": args.main, "branch": args.branch}
    stragglers = list(STRAGGLERS)
    with tempfile.TemporaryDirectory(prefix="target-stop-") as tmp:
        out = (args.keep or Path(tmp)).resolve()
        runner = Runner(QUICK, out, say=lambda _: None)
        # The references' targets, kept with --keep: a later call reuses them.
        saved = out / "targets.json"
        cached = json.loads(saved.read_text()) if saved.exists() else {}
        rows: list[dict[str, Any]] = []
        print(f"{'setting':<42} {'side':<6} {'ttt s':>6} {'wall s':>6} {'over s':>6} "
              f"{'evals':>5} {'cost':>5} {'online s':>8}")
        for alg in args.algorithms.split(","):
            target = cached.get(alg)
            if target is None:
                target = cached[alg] = runner.target(alg, "contiguous")
                (out / "targets.json").write_text(json.dumps(cached))
            if target is None:
                print(f"{alg}: the reference run failed")
                continue
            job = runner.job(alg, "contiguous")
            for sync in args.syncs.split(","):
                for strag in stragglers:
                    sets = (model_sets(sync)
                            + [f"stragglers={json.dumps(parse_stragglers(strag))}",
                               f"stop.target_objective={target!r}"])
                    name = f"{alg}/{sync}/{strag.split(':')[0]}"
                    for k in range(args.rounds):
                        order = ["main", "branch"] if k % 2 == 0 else ["branch", "main"]
                        for side in order:
                            folder = out / "runs" / f"{alg}-{sync}-{strag[:8]}-{k}-{side}"
                            try:
                                f = figures(run(sides[side], job, folder, sets))
                            except subprocess.SubprocessError as err:
                                print(f"{name:<42} {side:<6} FAILED: {err}")
                                continue
                            rows.append({"setting": name, "side": side, **f})
                            t = "-" if f["ttt"] is None else f"{f['ttt']:.2f}"
                            o = "-" if f["over"] is None else f"{f['over']:.2f}"
                            n = "-" if f["online"] is None else f"{f['online']:.2f}"
                            print(f"{name:<42} {side:<6} {t:>6} {f['wall']:6.2f} {o:>6} "
                                  f"{f['evals']:5d} {f['cost']:5.3f} {n:>8}", flush=True)
        summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> None:
    """Totals per side, and the branch's time to target against main's."""
    print()
    for side in ("main", "branch"):
        mine = [r for r in rows if r["side"] == side]
        reached = [r for r in mine if r["ttt"] is not None]
        print(f"{side:<6}: {len(mine)} runs, {len(reached)} reached; "
              f"sum wall {sum(r['wall'] for r in mine):.2f} s, "
              f"sum ttt {sum(r['ttt'] for r in reached):.2f} s, "
              f"sum overshoot {sum(r['over'] for r in reached):.2f} s")
    both = [r for r in rows if r["ttt"] is not None and r["online"] is not None]
    for alg in dict.fromkeys(r["setting"].split("/")[0] for r in rows):
        mine = [r for r in both if r["setting"].startswith(alg + "/")]
        later = [r["online"] - r["ttt"] for r in mine if r["online"] >= r["ttt"]]
        print(f"{alg}: the online objective reached the target after the exact one in "
              f"{len(later)} of {len(mine)} runs that reached both"
              + (f" ({min(later):.3f}-{max(later):.3f} s after)" if later else ""))
    ratios = []
    for name in dict.fromkeys(r["setting"] for r in rows):
        med = {}
        for side in ("main", "branch"):
            t = [r["ttt"] for r in rows if r["setting"] == name and r["side"] == side
                 and r["ttt"] is not None]
            if t:
                med[side] = statistics.median(t)
        if len(med) == 2 and med["main"] > 0:
            ratios.append(med["branch"] / med["main"])
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"time to target, branch / main (median per setting): geometric mean "
              f"{geo:.3f} over {len(ratios)} settings, min {min(ratios):.2f}, "
              f"max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
