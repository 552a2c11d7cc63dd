"""How soon a job whose master is stuck in its own code ends, and what its workers burn
meanwhile (issue 19: the master's own bound, docs/exit-codes.md).

Runs ``flegel run`` on tests/test_lifetime_mpi.py's ``HungMaster`` (a K-means whose
``update_parameter`` hangs after 3 updates: ``sleep``, the GIL free, or ``regex``, the GIL
held) with ``stop.max_time_s`` T, and prints per mode: the exit code, the seconds from the
run directory's first file (``events.jsonl``, written before the workers compile: training
begins up to a second later) to the job's end against the bound
(T + 6 s; + 2 s of the launcher's slack and its 1 s look when the GIL is held), each
worker's CPU share while it waited on the hung master (``/proc/PID/stat``, over
``--sample`` seconds), and the job's line.  ``python bench/stuck_master.py --modes
sleep,regex --max-time 2``; pass ``--flegel`` to time another checkout's ``flegel``
(main's waits for ever: the bench then stops it after ``--timeout`` seconds).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flegel.cli.rankwatch import _ranks_with, _stat  # noqa: E402
from tests.conftest import write_job  # noqa: E402
from tests.test_lifetime_mpi import HUNG_MASTER  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    utime, stime = _stat(pid, 14), _stat(pid, 15)
    return None if utime is None or stime is None else utime + stime


def run(mode: str, max_time_s: float, sample_s: float, timeout_s: float, flegel: str) -> None:
    with tempfile.TemporaryDirectory(prefix="stuck-master-") as tmp:
        folder = Path(tmp)
        (folder / "hung.py").write_text(HUNG_MASTER)
        (folder / "thetas").mkdir()
        job = write_job(folder / "job.yaml", algorithm="hung:HungMaster",
                        params={"at": 3, "mode": mode, "record": str(folder / "thetas")},
                        data={"source": "synthetic", "kind": "blobs", "n_points": 8000,
                              "n_features": 4, "centers": 4, "seed": 2},
                        workers=2, sync={"model": "bsp", "batch": "full"},
                        stop={"max_iterations": None, "tolerance": None,
                              "max_time_s": max_time_s},
                        output={"progress": "none"})
        out = folder / "run"
        path = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
        env = dict(os.environ, PYTHONPATH=path)
        t0 = time.monotonic()
        proc = subprocess.Popen([flegel, "run", str(job), "--out", str(out)], env=env, cwd=folder,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while not (out / "events.jsonl").exists() and proc.poll() is None:
            time.sleep(0.02)
        began = time.monotonic()
        time.sleep(min(1.0, max_time_s / 2))  # the master hangs within its first updates
        ranks = _ranks_with(f"PYTHONPATH={path}".encode())  # the job's, by their environment
        workers = {r: p for r, p in ranks.items() if r != 0}
        before = {r: _cpu_ticks(p) for r, p in workers.items()}
        time.sleep(sample_s)
        after = {r: _cpu_ticks(p) for r, p in workers.items()}
        try:
            _, err = proc.communicate(timeout=max(timeout_s - (time.monotonic() - t0), 1))
            ended = time.monotonic()
            code: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            proc.terminate()  # the launcher forwards it and kills the job 7 s later
            _, err = proc.communicate()
            ended, code = time.monotonic(), f"none within {timeout_s:g} s (stopped)"
        shares = ", ".join(
            f"worker {r} {100 * (after[r] - before[r]) / TICKS / sample_s:.1f} %"
            for r in sorted(workers) if before[r] is not None and after[r] is not None)
        bound = max_time_s + 6 + (3 if mode == "regex" else 0)
        lines = [ln for ln in err.splitlines() if ln.startswith("flegel:")]
        print(f"{mode}: exit {code}; ended {ended - began:.1f} s after the run directory appeared "
              f"(bound {bound:g} s: max_time_s {max_time_s:g} + 6"
              f"{' + 3 launcher' if mode == 'regex' else ''}); workers' CPU while waiting: "
              f"{shares or 'not found'}")
        print(f"  {lines[-1] if lines else '(no line)'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="sleep,regex")
    parser.add_argument("--max-time", type=float, default=2.0)
    parser.add_argument("--sample", type=float, default=3.0, help="seconds of CPU sampling")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--flegel", default=str(Path(sys.executable).parent / "flegel"))
    args = parser.parse_args()
    for mode in args.modes.split(","):
        run(mode, args.max_time, args.sample, args.timeout, args.flegel)


if __name__ == "__main__":
    main()
