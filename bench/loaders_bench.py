"""Loader benchmark (issue 14, item 6): flegel's text loads against scikit-learn and NumPy.

Writes, into a temporary folder (or ``--dir``):

* ``dense.svm``: ``--rows`` x 28 standard normals as LIBSVM, 1-based, written by scikit-learn's
  ``dump_svmlight_file`` (``%.16g``: about 1 number in 20 needs the slow, exact converter);
* ``sparse.svm``: ``--rows / 2`` x 1000, 30 nonzeros per row, the same writer;
* ``dense.csv``: ``--rows`` x 28 plus a label column, ``%.9g`` (float32 precision, like HIGGS);
* ``long.csv``: the same with ``np.savetxt``'s default ``%.18e`` (19 digits: every number takes
  the slow converter -- the fast path's worst case).

For each file it times, alternating the loaders in every round so that load on the (shared)
machine hits them alike:

* the reference: ``sklearn.datasets.load_svmlight_file`` for LIBSVM (CSR result), and for CSV
  ``np.loadtxt(delimiter=",", dtype=float64)`` (NumPy's fastest text path: its C reader with a
  fixed dtype; pandas is not a dependency);
* flegel's ``load_shard`` of the whole file (1 shard), and of shard 0 of 4, strided and
  contiguous -- what one worker of four loads.  LIBSVM specs carry ``n_features`` and
  ``zero_based``, as a job's workers get them from the master's inspection
  (``SourceInfo.resolved``); the inspection pass is timed on its own line.

It prints min and median seconds, and the ratio flegel / reference of the medians (and of the
mins): below 1.0 flegel is faster.  With ``--memory`` it also loads a strided shard of 1 and of
4 of ``dense.csv`` in a fresh interpreter each and prints the resident-set growth as a multiple
of the shard's bytes (1.0: the shard held once).

With ``--json OUT`` it also writes every ratio to OUT; ``worst_ratio`` is the largest
median ratio of a whole-file (1 shard) load over the four files, the issue's figure.

Usage: ``python bench/loaders_bench.py [--rows 200000] [--rounds 5] [--memory] [--dir D]
[--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_svmlight_file

from flegel.data import inspect_source, load_shard

MiB = 1 << 20


def write_files(base: Path, rows: int) -> dict[str, Path]:
    """The four benchmark files (see the module docstring)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, 28))
    y = rng.integers(0, 2, rows)
    out = {name: base / name for name in ("dense.svm", "sparse.svm", "dense.csv", "long.csv")}
    dump_svmlight_file(X, y, str(out["dense.svm"]), zero_based=False)
    n, d, k = rows // 2, 1000, 30
    cols = np.sort(np.argsort(rng.random((n, d)), axis=1)[:, :k], axis=1)
    S = sp.csr_matrix((rng.standard_normal(n * k), cols.ravel(), np.arange(0, n * k + 1, k)),
                      shape=(n, d))
    dump_svmlight_file(S, rng.integers(0, 2, n), str(out["sparse.svm"]), zero_based=False)
    table = np.column_stack([y, X])
    np.savetxt(out["dense.csv"], table, delimiter=",", fmt="%.9g")
    np.savetxt(out["long.csv"], table, delimiter=",")
    return out


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_file(path: Path, rounds: int) -> dict[str, Any]:
    """Time the reference and flegel's loads of one file, alternating, and print the ratios.

    Returns
    -------
    dict
        The reference's name and median seconds, and per case (``1 shard``, ...) the ratio
        flegel / reference of the medians and of the mins.
    """
    base = path.parent
    if path.suffix == ".svm":
        ref_name = "sklearn load_svmlight_file"

        def ref() -> Any:
            return load_svmlight_file(str(path))

        info = inspect_source({"path": path.name}, base)
        spec: dict[str, Any] = {"path": path.name, **info.resolved}
        inspect_t = [timed(lambda: inspect_source({"path": path.name}, base))
                     for _ in range(max(1, rounds // 2))]
    else:
        ref_name = "np.loadtxt(dtype=float64)"

        def ref() -> Any:
            return np.loadtxt(path, delimiter=",", dtype=np.float64)

        spec = {"path": path.name, "label_column": 0}
        inspect_t = []
    cases = {
        "1 shard": (spec, 1),
        "shard 0 of 4, strided": ({**spec, "partition": "strided"}, 4),
        "shard 0 of 4, contiguous": ({**spec, "partition": "contiguous"}, 4),
    }
    load_shard({**spec, "limit": 10}, 0, 1, base)  # numba's compile or cache load, not timed
    times: dict[str, list[float]] = {ref_name: [], **{c: [] for c in cases}}
    for _ in range(rounds):
        times[ref_name].append(timed(ref))
        for case, (s, n) in cases.items():
            times[case].append(timed(lambda s=s, n=n: load_shard(s, 0, n, base)))
    r = times[ref_name]
    print(f"\n{path.name} ({path.stat().st_size / MiB:.0f} MiB), {rounds} rounds")
    print(f"  {ref_name:34s} min {min(r):7.3f} s  median {statistics.median(r):7.3f} s")
    for case in cases:
        t = times[case]
        print(f"  flegel {case:27s} min {min(t):7.3f} s  median {statistics.median(t):7.3f} s"
              f"  ratio {statistics.median(t) / statistics.median(r):5.2f}"
              f" (mins {min(t) / min(r):5.2f})")
    if inspect_t:
        print(f"  flegel inspection pass (once per job) min {min(inspect_t):7.3f} s"
              f"  ratio {min(inspect_t) / min(r):5.2f}")
    return {"reference": ref_name, "reference_median_s": statistics.median(r),
            "ratios": {case: statistics.median(times[case]) / statistics.median(r)
                       for case in cases},
            "ratios_of_mins": {case: min(times[case]) / min(r) for case in cases},
            "inspection_ratio": min(inspect_t) / min(r) if inspect_t else None}


_MEMORY_PROBE = """
import sys
from pathlib import Path
from flegel.data import load_shard
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
path, n = Path(sys.argv[1]), int(sys.argv[2])
load_shard({"path": path.name, "label_column": 0, "limit": 10}, 0, 1, path.parent)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to now: imports and compiling are not the load's
before = status("VmRSS")
X, y = load_shard({"path": path.name, "label_column": 0}, 0, n, path.parent)
print(status("VmHWM") - before, X.nbytes + y.nbytes)
"""


def bench_memory(path: Path) -> None:
    """Peak RSS growth of a strided CSV shard load, in a fresh interpreter, per shard byte."""
    print(f"\nmemory: strided loads of {path.name}, fresh interpreter each")
    for n in (1, 4):
        # cwd: ``-c`` puts the working directory first on sys.path, which must not pick a
        # different flegel (a checkout) than the one this script imported.
        out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, str(path), str(n)],
                             capture_output=True, text=True, check=True,
                             cwd=path.parent).stdout.split()
        grow, shard = int(out[0]), int(out[1])
        print(f"  shard 0 of {n}: peak RSS +{grow / MiB:6.1f} MiB for a {shard / MiB:6.1f} MiB "
              f"shard ({grow / shard:4.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--memory", action="store_true", help="also measure peak RSS per shard")
    ap.add_argument("--only", default="", help="comma-separated file names to time")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the files")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write every ratio to OUT (for bench/suite.py)")
    args = ap.parse_args()
    files: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        paths = write_files(Path(tmp), args.rows)
        print(f"python {sys.version.split()[0]}, numpy {np.__version__}; "
              f"command: python bench/loaders_bench.py --rows {args.rows} "
              f"--rounds {args.rounds}" + (" --memory" if args.memory else ""))
        for name, path in paths.items():
            if not args.only or name in args.only.split(","):
                files[name] = bench_file(path, args.rounds)
        if args.memory:
            bench_memory(paths["dense.csv"])
    # The headline: the slowest whole-file load relative to its reference (every file must
    # meet the target, so the worst one is the figure).
    worst = max(files, key=lambda f: files[f]["ratios"]["1 shard"]) if files else None
    worst_ratio = files[worst]["ratios"]["1 shard"] if worst else None
    if worst:
        print(f"\nworst whole-file ratio flegel / reference (medians): {worst_ratio:.2f} "
              f"({worst}; target <= 1.0)")
    if args.json:
        args.json.write_text(json.dumps({
            "rows": args.rows, "rounds": args.rounds, "target_ratio": 1.0, "files": files,
            "worst_file": worst, "worst_ratio": worst_ratio}, indent=2))


if __name__ == "__main__":
    main()
