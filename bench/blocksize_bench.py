"""Block sizing benchmark (issues 14 and 23): the share of training an algorithm that sleeps
5 ms per block call spends in that fixed cost, with the old sizer (time = b·n, 1 ms blocks)
and the new one (time = a + b·n, a kept to 15% of a block), and under BSPB with fixed blocks
of 16,384 points against ``sync.block: auto`` (the size from the per-call cost measured at
warm-up, a power of two).

Three measures, all on the real clock:

* **loop**: the sizer alone drives blocks of a kernel that sleeps ``5 ms + 1 µs`` per point
  for ``--seconds``; share = calls x 5 ms / time in the kernel.  The old sizer is read from
  git (``--old-ref``, the commit before the new one).
* **mpirun**: a 2-worker ASP job of the same sleeping algorithm (one push per pass over
  60,000 points each, ``--seconds`` of training) on this checkout; the calls are counted in
  θ and saved in ``model.npz``; share = calls x 5 ms / the workers' compute time.  (On the
  old sizer one pass is 60,000 calls, five minutes: the loop measure shows why.)

Usage: ``python bench/blocksize_bench.py [--seconds 3] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from flegel.runtime.blocksize import BlockSizer

ROOT = Path(__file__).resolve().parents[1]
A_S, B_S = 5e-3, 1e-6  # the sleeping kernel: 5 ms per call, 1 µs per point

SLEEPER = '''
"""Sleeps 5 ms per block call and POINT_S per point; counts its calls in θ."""
import time

import numpy as np

from flegel import Algorithm


class Sleeper(Algorithm):
    def init_parameter(self, info):
        return {"mean": np.zeros(info.n_features), "calls": np.zeros(1)}

    def update_block(self, block, theta, t):
        time.sleep(0.005 + POINT_S * len(block))
        return {"sum": block.x.sum(0), "calls": np.ones(1), "objective": 0.0}

    def update_parameter(self, agg, theta):
        return {"mean": theta["mean"], "calls": theta["calls"] + agg["calls"]}

    def evaluate(self, theta, block):
        return 0.0
'''


def old_sizer_class(ref: str) -> Any:
    """``BlockSizer`` as of commit ``ref`` (read with ``git show``)."""
    for path in ("flegel/runtime/blocksize.py", "flegel/blocksize.py"):  # it moved (issue 10)
        proc = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            module = types.ModuleType("old_blocksize")
            exec(compile(proc.stdout, f"{ref}:{path}", "exec"), module.__dict__)
            return module.BlockSizer
    raise SystemExit(f"no block sizer at commit {ref}: {proc.stderr.strip()}")


def loop(sizer: Any, seconds: float) -> tuple[float, int, float]:
    """Drive the sleeping kernel with ``sizer`` for ``seconds``: (share, calls, mean block s)."""
    calls, busy = 0, 0.0
    while busy < seconds:
        n = sizer.size
        t0 = time.perf_counter()
        time.sleep(A_S + B_S * n)
        dt = time.perf_counter() - t0
        sizer.observe(n, dt)
        calls += 1
        busy += dt
    return calls * A_S / busy, calls, busy / calls


def sleeper(point_s: float) -> str:
    """The sleeping algorithm's module, at ``point_s`` seconds a point."""
    return SLEEPER.replace("POINT_S", repr(point_s))


def mpirun_share(code: Path, seconds: float, tmp: Path, *sets: str,
                 job: str = "job.yaml") -> tuple[float, float, float, dict[str, Any]]:
    """The sleeping job on ``code``'s flegel: (share, calls, mean block s, summary)."""
    out = tmp / f"out-{time.monotonic_ns()}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(tmp)]),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "flegel", "run", str(tmp / job), "--out", str(out),
           "--set", f"stop.max_time_s={seconds}"]
    for assignment in sets:
        cmd += ["--set", assignment]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=seconds * 10 + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"the run on {code} failed:\n{proc.stderr[-3000:]}")
    s = json.loads((out / "summary.json").read_text())
    calls = float(np.load(out / "model.npz")["calls"][0])
    compute = sum(w["compute_s"] for w in s["per_worker"])
    return calls * A_S / compute, calls, compute / max(calls, 1), s


#: The BSPB measure's kernels: seconds a point beside the 5 ms a call.
BSPB_POINT_S = (1e-6, 2.5e-7)


def bspb(tmp: Path, seconds: float) -> dict[str, Any]:
    """The BSPB measure: each kernel of :data:`BSPB_POINT_S`, fixed 16,384-point blocks and
    ``block: auto``, one run each; the shares and the chosen blocks."""
    np.save(tmp / "x600k.npy", np.ones((600_000, 2)))
    out: dict[str, Any] = {}
    for point_s in BSPB_POINT_S:
        module = f"sleeper_{round(point_s * 1e9)}ns"
        (tmp / f"{module}.py").write_text(sleeper(point_s))
        job = f"bspb_{module}.yaml"
        (tmp / job).write_text(yaml.safe_dump({
            "algorithm": f"{module}:Sleeper", "data": {"path": "x600k.npy"}, "workers": 2,
            "sync": {"model": "bsp", "batch": "full"},
            "stop": {"max_iterations": None, "tolerance": None},
            "output": {"progress": "none", "trace_points": 0}}))
        row: dict[str, Any] = {}
        for block in ("16384", "auto"):
            share, calls, block_s, s = mpirun_share(ROOT, seconds, tmp, f"sync.block={block}",
                                                    job=job)
            row[block] = {"share": share, "calls": calls, "block_s": block_s,
                          "block": s.get("block"), "call_cost": s.get("call_cost"),
                          "compile_s": (s.get("timings") or {}).get("compile_s")}
            label = f"BSPB {point_s * 1e6:g} µs/pt, block {block}"
            chosen = f" -> {s.get('block')}" if block == "auto" else ""
            print(f"  {'bspb':<8} {label + chosen:<36} {share:>7.1%} {calls:>7.0f} "
                  f"{block_s * 1e3:>9.2f}")
        out[f"{point_s:g}"] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--old-ref", default="ed63cf5",
                    help="git commit whose flegel/runtime/blocksize.py is the old sizer")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write the headline figures to OUT (for bench/suite.py)")
    args = ap.parse_args()
    figures: dict[str, Any] = {"seconds": args.seconds, "old_ref": args.old_ref,
                               "target_share": 0.30, "loop": {}}
    print(f"A kernel that sleeps {A_S * 1e3:g} ms per call + {B_S * 1e6:g} µs per point; "
          f"share = calls x {A_S * 1e3:g} ms / time in the kernel (target <= 30%)")
    print(f"  {'measure':<8} {'sizer':<36} {'share':>7} {'calls':>7} {'block ms':>9}")
    for name, sizer in ((f"old ({args.old_ref})", old_sizer_class(args.old_ref)()),
                        ("new (a + b·n)", BlockSizer())):
        share, calls, block = loop(sizer, args.seconds)
        figures["loop"]["old" if name.startswith("old") else "new"] = {
            "share": share, "calls": calls, "block_s": block}
        print(f"  {'loop':<8} {name:<36} {share:>7.1%} {calls:>7} {block * 1e3:>9.2f}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "sleeper.py").write_text(sleeper(B_S))
        np.save(tmp / "x.npy", np.ones((120_000, 2)))
        (tmp / "job.yaml").write_text(yaml.safe_dump({
            "algorithm": "sleeper:Sleeper", "data": {"path": "x.npy"}, "workers": 2,
            "sync": {"model": "asp", "batch": "full"},
            "stop": {"max_iterations": None, "tolerance": None},
            "output": {"progress": "none", "trace_points": 0}}))
        share, calls, block, _ = mpirun_share(ROOT, args.seconds, tmp)
        figures["mpirun"] = {"share": share, "calls": calls, "block_s": block}
        print(f"  {'mpirun':<8} {'new (2 workers, ASP)':<36} {share:>7.1%} {calls:>7.0f} "
              f"{block * 1e3:>9.2f}")
        figures["bspb"] = bspb(tmp, args.seconds)
    print(f"  reproduce: python bench/blocksize_bench.py --seconds {args.seconds:g}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
