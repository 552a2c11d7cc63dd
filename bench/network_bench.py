"""The FSP paper's Table 2 on the local cluster (issue 20): migration over a limited link.

At each link rate (default 200 and 100 Mbit/s, the paper's "non-limited" and "limited"
halves) it prints the link's throughput (one 32 MB MPI message between two hosts, the
paper's *iPerf*), the throughput of a job that *Only* sends the bytes migration moved
between the same hosts, and migration's throughput in the *Normal* FSPV job (async
migration, an injected straggler), all measured on the links' byte counters, with FSPV's
time to target.  How each is measured: :mod:`flegel.cli.paper.network`.

Usage (as root, from the checkout)::

    python bench/network_bench.py [--rates 200mbit,100mbit] [--points 200000]
        [--workers 4] [--slack 0.0] [--repeat 3] [--quick] [--json OUT]

It brings up a cluster of its own (``FLEGEL_CLUSTER=netbench``, workers + 1 hosts, one rank
each) and takes it down at the end.  ``--quick``: 100,000 points, one run per rate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from flegel.cli.paper import network

NAME = "netbench"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="200mbit,100mbit")
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--slack", type=float, default=0.0,
                    help="target = the inertia of the blobs' own centers x (1 + slack)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per rate (medians shown)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("network_bench: needs root (the local cluster's network namespaces)")
        return 2
    points = 100_000 if args.quick else args.points
    if args.quick:
        args.repeat = 1
    env = dict(os.environ, FLEGEL_CLUSTER=NAME, FLEGEL_CLUSTER_SUBNET="10.254.0")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    script = str(network.cluster_script())
    subprocess.run([script, "down"], env=env, check=True, capture_output=True,
                   timeout=120)
    subprocess.run([script, "up", str(args.workers + 1)], env=env, check=True,
                   capture_output=True, timeout=120)
    try:
        cluster = network.find(NAME)
        assert cluster is not None
        print(f"load: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores; "
              f"{points} points x 28 features, {args.workers} workers on "
              f"{args.workers + 1} hosts")
        print("\n".join(network.table([])))
        with tempfile.TemporaryDirectory(prefix="netbench-") as tmp:
            rows = network.run_table2(cluster, Path(tmp), tuple(args.rates.split(",")),
                                      points, args.slack, args.repeat)
        print(f"medians of {args.repeat}:")
        print("\n".join(network.table(rows)))
        if len(rows) >= 2 and all(r.time_to_target_s for r in rows[:2]):
            a, b = rows[0].time_to_target_s or 0, rows[1].time_to_target_s or 0
            print(f"FSPV time to target at {rows[1].rate} / at {rows[0].rate}: {b / a:.3f} "
                  "(the paper: speedup loses < 2 % at half the bandwidth)")
        print(f"load after: {os.getloadavg()[0]:.1f}")
        if args.json:
            args.json.write_text(json.dumps([{k: v for k, v in asdict(r).items()
                                              if k != "summary"} for r in rows], indent=1))
    finally:
        subprocess.run([script, "down"], env=env, capture_output=True, timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
