"""Fig. 12's passes over a horizon: K-means under async migration with one straggler (issue 19).

The job of ``flegel paper --quick --only 12`` (HIGGS-like blobs, 110,000 x 28, 16 clusters,
contiguous shards of data sorted by ``X.sum(axis=1)``, 4 workers; the files are written by
:mod:`flegel.cli.paper.workloads`), run by ``flegel run`` for ``--seconds`` with no target,
FSPV with ``migration: {mode: async}`` and ``injected:tau=32,workers=1``.  Prints each run's
per-worker passes, max/min (issue 19 asks <= 1.3), the bytes moved against the data's and the
migration rounds (time, points moved).

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

from flegel.cli.compare import model_sets, parse_stragglers, run_one  # noqa: E402
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
        s = run_one(job, folder, sets, 3 * args.seconds + 120)
        passes = [float(p["passes"]) for p in s.get("per_worker", [])]
        spread = max(passes) / max(min(passes), 1e-9)
        spreads.append(spread)
        mig = s.get("migration") or {}
        moved = mig.get("bytes_moved", 0)
        rl = mig.get("round_log") or []
        print(f"run {k}: passes {' '.join(f'{p:.0f}' for p in passes)}  max/min {spread:.2f}"
              f"  moved {moved / data_bytes:.2f}x data"
              f" ({mig.get('points_moved_more_than_once', 0)} points more than once)"
              f"  rounds {len(rl)}: "
              + ", ".join(f"{r['time_s']:.2f}s/{sum(m[2] for m in r['moves'])}" for r in rl))
    if len(spreads) > 1:
        print(f"max/min over {len(spreads)} runs: {min(spreads):.2f}-{max(spreads):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
