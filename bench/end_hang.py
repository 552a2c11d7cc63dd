"""Runs that do not end: many short jobs at once on a loaded machine, and which of them are
still alive well after writing ``summary.json`` (the ranks then wait in ``MPI_Finalize``).

Starts ``--concurrent`` ``flegel run`` processes at a time, ``--rounds`` times, cycling over
the job files given, each with the ``--set`` keys given.  A run whose ``summary.json`` is
older than ``--after`` seconds while a process of it lives counts as hung: each of its
processes gets a ``py-spy dump --native`` (when py-spy is installed) into the log, and the
run is killed.  A run still alive ``--limit`` seconds after its start without a
``summary.json`` is killed and counts as failed.  Prints one line per round and the total::

    python bench/end_hang.py JOB.yaml [JOB.yaml ...] [--concurrent 4] [--rounds 8]
        [--after 30] [--limit 300] [--out DIR] [--set KEY=VALUE ...]

The runs use the ``flegel`` on ``PYTHONPATH`` (another tree's, to compare).  What found the
hang fixed by dropping unreceived messages before ``MPI_Finalize`` (issue 19's FSPV runs;
this script: 1 of 24 runs hung at bb0e3e7, load 3-12; a one-off loop before it, 5 of 32 at
load 22-27): ``flegel paper``'s GMM and NMF jobs
(``bench/fsp_claims.py --only horizons --algorithms gmm,nmf --keep DIR`` writes them under
``DIR/horizons/jobs``) with ``--set sync.model=fspv-off --set stragglers=[]
--set stop.max_time_s=4 --set stop.tolerance=null --set output.trace_points=300
--set output.trace_budget=100``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def processes_of(run: Path) -> list[str]:
    """``pid command`` of the live processes whose command line names ``run``."""
    found = subprocess.run(["pgrep", "-af", f"{run}( |$)"], capture_output=True, text=True)
    return [ln for ln in found.stdout.splitlines() if "pgrep" not in ln]


def dump(run: Path, log: list[str]) -> None:
    """Append each live process of ``run`` and its stacks to ``log``; then kill them."""
    spy = shutil.which("py-spy")
    for line in processes_of(run):
        pid = line.split()[0]
        log.append(f"  {line[:200]}")
        if spy:
            try:
                out = subprocess.run([spy, "dump", "--native", "--pid", pid],
                                     capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                log.append("  (py-spy dump took over 60 s)")
                continue
            log.append(out.stdout[-4000:] + out.stderr[-300:])
    for line in processes_of(run):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass


def one_round(jobs: list[Path], n: int, sets: list[str], out: Path, after: float,
              limit: float, log: list[str]) -> tuple[int, int]:
    """Run ``n`` jobs at once; return (hung, failed)."""
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for k in range(n):
        run = out / f"run{k}"
        cmd = [sys.executable, "-m", "flegel", "run", str(jobs[k % len(jobs)]), "--out",
               str(run), "--force", "--set", "output.progress=none"]
        for s in sets:
            cmd += ["--set", s]
        # stderr to a file: a pipe read only at the end could fill and stop the run
        with open(out / f"run{k}.stderr", "w") as err_file:
            procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file,
                                           start_new_session=True), run))
    started = time.monotonic()
    hung = failed = 0
    for proc, run in procs:
        summary = run / "summary.json"
        this_hung = False
        while proc.poll() is None:
            if not summary.exists() and time.monotonic() - started > limit:
                log.append(f"NO SUMMARY {run} after {limit:g} s: killed")
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if summary.exists() and time.time() - summary.stat().st_mtime > after:
                this_hung = True
                log.append(f"HUNG {run} (summary.json {after:g} s old), load {os.getloadavg()}")
                dump(run, log)
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.5)
        proc.wait()
        err = (run.parent / f"{run.name}.stderr").read_text(errors="replace")
        hung += this_hung
        if proc.returncode != 0 and not this_hung:
            failed += 1
            log.append(f"FAILED {run} (exit {proc.returncode}): {err[-500:]}")
    return hung, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobs", nargs="+", type=Path)
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--after", type=float, default=30.0,
                    help="seconds after summary.json that count as hung")
    ap.add_argument("--limit", type=float, default=300.0,
                    help="seconds a run may take to write summary.json before it is killed")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="end-hang-"))
    total_hung = total_failed = 0
    for r in range(args.rounds):
        log: list[str] = []
        hung, failed = one_round([j.resolve() for j in args.jobs], args.concurrent, args.set,
                                 base / f"round{r}", args.after, args.limit, log)
        total_hung, total_failed = total_hung + hung, total_failed + failed
        print(f"round {r}: {args.concurrent} runs, {hung} hung, {failed} failed, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        for line in log:
            print(line, flush=True)
    runs = args.rounds * args.concurrent
    print(f"{total_hung} of {runs} runs hung after summary.json, {total_failed} failed")
    if args.out is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
