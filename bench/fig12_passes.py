"""Fig. 12's passes over a horizon: K-means under async migration with one straggler (issue 19).

The run :func:`flegel.cli.paper.opt_figures.over_horizon` makes for ``flegel paper --quick
--only 12`` (HIGGS-like blobs, 110,000 x 28, 16 clusters, contiguous shards of data sorted by
``X.sum(axis=1)``, 4 workers; the files are written by :mod:`flegel.cli.paper.workloads`),
without its trace sets: ``flegel run`` for ``--seconds`` with no target, FSPV with
``migration: {mode: async}`` and ``injected:tau=32,workers=1``.  Prints each run's
per-worker passes, max/min (issue 19 asks <= 1.3), the fewest and most traversals of any
point (``summary.json``'s ``point_passes``), the bytes moved against the data's and the
migration rounds (time, points moved).  A failed run is reported and the repeats go on.

Usage::

    python bench/fig12_passes.py [--seconds 4] [--repeats 1] [--sync fspv-async] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flegel.cli.compare import RunFailedError, model_sets, parse_stragglers, run_one  # noqa: E402
from flegel.cli.paper.opt_figures import max_min  # noqa: E402
from flegel.cli.paper.workloads import QUICK, workloads, write_data, write_job  # noqa: E402

STRAGGLER = "injected:tau=32,workers=1"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sync", default="fspv-async")
    ap.add_argument("--stragglers", default=STRAGGLER)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="fig12-"))
    w = workloads(QUICK)["kmeans"]
    data = write_data(w, out / "data")
    job = write_job(w, QUICK, data, "contiguous", out / "jobs")
    data_bytes = data.stat().st_size
    sets = (model_sets(args.sync)
            + [f"stragglers={json.dumps(parse_stragglers(args.stragglers))}",
               f"stop.max_time_s={args.seconds}"])
    print(f"{w.describe()}, {args.sync}, {args.stragglers}, {args.seconds:g} s; runs in {out}")
    spreads = []
    for k in range(args.repeats):
        folder = out / f"run{k}"
        try:
            s = run_one(job, folder, sets, 3 * args.seconds + 120)
        except RunFailedError as e:
            print(f"run {k}: FAILED ({e}); see {folder}")
            continue
        passes = [float(p["passes"]) for p in s.get("per_worker", [])]
        spread = max_min(passes)
        spreads.append(spread)
        mig = s.get("migration") or {}
        fraction = mig.get("bytes_fraction")
        if fraction is None:  # a summary from before bytes_fraction
            fraction = mig.get("bytes_moved", 0) / max(data_bytes, 1)
        pp = s.get("point_passes") or {}
        point = f"{float(pp['min']):g}..{float(pp['max']):g}" if pp else "-"
        rl = mig.get("round_log") or []
        print(f"run {k}: passes {' '.join(f'{p:.0f}' for p in passes)}  max/min {spread:.2f}"
              f"  point passes {point}  moved {fraction:.2f}x data"
              f" ({mig.get('points_moved_more_than_once', 0)} points more than once)"
              f"  rounds {len(rl)}: "
              + ", ".join(f"{r['time_s']:.2f}s/{sum(m[2] for m in r['moves'])}" for r in rl))
    if len(spreads) > 1:
        print(f"max/min over {len(spreads)} runs: {min(spreads):.2f}-{max(spreads):.2f}")
    failed = args.repeats - len(spreads)
    if failed:
        print(f"{failed} of {args.repeats} runs failed")
    return 1 if failed == args.repeats else 0


if __name__ == "__main__":
    raise SystemExit(main())
