"""Run one short job many times with ``flegel run`` and tally the exit codes: a rare crash at
a rank's exit (a SIGSEGV in C's exit handlers, exit code 11) shows only over many runs.

Usage::

    python bench/exit_stress.py JOB.yaml -n 40 [--flegel PATH] [--keep DIR]

``--flegel`` runs another checkout's console script (e.g. ``/work/main/.venv/bin/flegel``)
for a paired comparison.  The output of every run that exited non-zero is kept in
``--keep`` (``run-K.txt``); the tally line is the figure.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", help="the job's YAML file")
    parser.add_argument("-n", "--runs", type=int, default=40, help="how many runs (40)")
    mine = Path(sys.executable).parent / "flegel"
    parser.add_argument("--flegel", default=str(mine) if mine.exists() else "flegel",
                        help="the flegel console script to run (default: this Python's)")
    parser.add_argument("--keep", default=None,
                        help="folder for the output of non-zero runs (default: a new temp one)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one run may take before it counts as hung (120)")
    args = parser.parse_args(argv)
    keep = Path(args.keep or tempfile.mkdtemp(prefix="exit-stress-"))
    keep.mkdir(parents=True, exist_ok=True)
    tally: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    for k in range(args.runs):
        out = keep / f"out-{k}"
        try:
            proc = subprocess.run([args.flegel, "run", args.job, "--out", str(out)],
                                  capture_output=True, timeout=args.timeout)
            code = str(proc.returncode)
            text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = "timeout"
            text = (exc.stdout or b"") + (exc.stderr or b"")
        tally[code] += 1
        if code != "0":
            (keep / f"run-{k}.txt").write_bytes(text)
            print(f"run {k}: exit {code} (output in {keep / f'run-{k}.txt'})", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    wall = time.monotonic() - started
    codes = ", ".join(f"exit {c}: {n}" for c, n in sorted(tally.items()))
    print(f"{args.flegel}: {args.runs} runs in {wall:.0f} s; {codes}; kept in {keep}")
    return 0 if set(tally) == {"0"} else 1


if __name__ == "__main__":
    sys.exit(main())
