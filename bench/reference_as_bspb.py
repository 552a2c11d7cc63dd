"""Is BSPB without stragglers the reference run?  ``flegel paper`` reads the one from the
other (:meth:`flegel.cli.paper.runner.Runner.run`, :func:`~flegel.cli.paper.runner.to_target`;
``docs/benchmarks.md``, "Where the quick page's time goes").

Each round runs, back to back, ``flegel paper --quick``'s reference of one workload (BSPB
without stragglers until it converges, its whole trace evaluated) and a separate BSPB run
to the target it sets -- the run the page made before -- alternating which goes first (in
odd rounds the separate run goes first, to round 0's target).  Per round it prints BSPB's
time to target both ways (where the reference does not stand for BSPB -- its trace thinned
before where a run to the target stops -- ``Runner.run`` runs BSPB, and says so), and how
many of the reference's exact objectives recur in the separate run's trace (full-batch BSP
from one start takes the same steps in every run: all of them should, where the two runs
reach those steps).

Usage::

    python bench/reference_as_bspb.py [--algorithm nmf] [--partition strided] [--repeat 2]
        [--keep DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from flegel.cli.paper.runner import Runner, RunResult
from flegel.cli.paper.workloads import QUICK


def recurring(ref: RunResult, run: RunResult) -> str:
    """``"k of n"``: how many of the reference's trace values are in ``run``'s trace (to a
    relative 1e-12)."""
    mine = [float(f) for _, f in (ref.summary or {}).get("objective_trace", [])]
    theirs = [float(f) for _, f in (run.summary or {}).get("objective_trace", [])]
    hit = sum(any(abs(a - b) <= 1e-12 * abs(a) for b in theirs) for a in mine)
    return f"{hit} of {len(mine)}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithm", default="nmf")
    ap.add_argument("--partition", default="strided")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this folder")
    args = ap.parse_args(argv)
    a, p = args.algorithm, args.partition
    with tempfile.TemporaryDirectory(prefix="reference-bspb-") as tmp:
        out = args.keep or Path(tmp)
        first_target: float | None = None
        print(f"{a}/{p}: BSPB's time to target, the reference read to it / a run to it")
        for k in range(args.repeat):
            runner = Runner(QUICK, out / f"round{k}", say=lambda _: None)
            separate = None
            if k % 2 and first_target is not None:
                separate = runner._run(a, p, "bspb", "none", [], first_target, "bspb-run")
            target = runner.target(a, p)
            read = runner.run(a, p, "bspb")
            if separate is None:
                separate = runner._run(a, p, "bspb", "none", [], target, "bspb-run")
            first_target = first_target if first_target is not None else target
            ref = runner.reference(a, p)
            assert ref is not None
            order = "run first" if k % 2 else "reference first"
            how = "" if read.folder == ref.folder else (
                " (the reference does not stand for BSPB: Runner.run ran BSPB)")
            print(f"  round {k} ({order}): {read.time.text()} / {separate.time.text()} s"
                  f"{how}; "
                  f"target {target!r}; the reference's objectives in the run's trace: "
                  f"{recurring(ref, separate)}", flush=True)


if __name__ == "__main__":
    main()
