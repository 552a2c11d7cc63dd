"""Block sizing benchmark (issue 14): the share of training an algorithm that sleeps 5 ms per
block call spends in that fixed cost, with the old sizer (time = b·n, 1 ms blocks) and the
new one (time = a + b·n, a kept to 15% of a block).

Two measures, both on the real clock:

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
"""Sleeps 5 ms per block call and 1 µs per point; counts its calls in θ."""
import time

import numpy as np

from flegel import Algorithm


class Sleeper(Algorithm):
    def init_parameter(self, info):
        return {"mean": np.zeros(info.n_features), "calls": np.zeros(1)}

    def update_block(self, block, theta, t):
        time.sleep(0.005 + 1e-6 * len(block))
        return {"sum": block.x.sum(0), "calls": np.ones(1), "objective": 0.0}

    def update_parameter(self, agg, theta):
        return {"mean": theta["mean"], "calls": theta["calls"] + agg["calls"]}

    def evaluate(self, theta, block):
        return 0.0
'''


def old_sizer_class(ref: str) -> Any:
    """``BlockSizer`` as of commit ``ref`` (read with ``git show``)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:flegel/runtime/blocksize.py"],
                         capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("old_blocksize")
    exec(compile(src, f"{ref}:flegel/runtime/blocksize.py", "exec"), module.__dict__)
    return module.BlockSizer


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


def mpirun_share(code: Path, seconds: float, tmp: Path) -> tuple[float, float, float]:
    """The sleeping job on ``code``'s flegel: (share, calls, mean block s)."""
    out = tmp / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(tmp)]),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "flegel", "run", str(tmp / "job.yaml"), "--out", str(out),
           "--set", f"stop.max_time_s={seconds}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=seconds * 10 + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"the run on {code} failed:\n{proc.stderr[-3000:]}")
    s = json.loads((out / "summary.json").read_text())
    calls = float(np.load(out / "model.npz")["calls"][0])
    compute = sum(w["compute_s"] for w in s["per_worker"])
    return calls * A_S / compute, calls, compute / max(calls, 1)


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
    print(f"  {'measure':<8} {'sizer':<28} {'share':>7} {'calls':>7} {'block ms':>9}")
    for name, sizer in ((f"old ({args.old_ref})", old_sizer_class(args.old_ref)()),
                        ("new (a + b·n)", BlockSizer())):
        share, calls, block = loop(sizer, args.seconds)
        figures["loop"]["old" if name.startswith("old") else "new"] = {
            "share": share, "calls": calls, "block_s": block}
        print(f"  {'loop':<8} {name:<28} {share:>7.1%} {calls:>7} {block * 1e3:>9.2f}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "sleeper.py").write_text(SLEEPER)
        np.save(tmp / "x.npy", np.ones((120_000, 2)))
        (tmp / "job.yaml").write_text(yaml.safe_dump({
            "algorithm": "sleeper:Sleeper", "data": {"path": "x.npy"}, "workers": 2,
            "sync": {"model": "asp", "batch": "full"},
            "stop": {"max_iterations": None, "tolerance": None},
            "output": {"progress": "none", "trace_points": 0}}))
        share, calls, block = mpirun_share(ROOT, args.seconds, tmp)
        figures["mpirun"] = {"share": share, "calls": calls, "block_s": block}
        print(f"  {'mpirun':<8} {'new (2 workers, ASP)':<28} {share:>7.1%} {calls:>7.0f} "
              f"{block * 1e3:>9.2f}")
    print(f"  reproduce: python bench/blocksize_bench.py --seconds {args.seconds:g}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
