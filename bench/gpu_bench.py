"""GPU paths benchmark (issue 14, item 4): per-pass time of each kernel, and the CNN job's time
to target on the GPU against the CPU.

Prints, measured in one run on the same data with one CPU thread everywhere:

* per algorithm (K-means, diagonal GMM, FCM, binary logistic regression; K = 16) on a
  synthetic ``--points`` x 28 float64 data set (1,000,000 by default, 200,000 with
  ``--quick``): the time of one pass (``update_block`` over every point in blocks of
  ``--block`` points, θ updated between passes as in training; the median of ``--passes``
  passes after a warm-up pass that compiles) of the compiled numba kernel, of the NumPy array
  kernel and of the CuPy kernel (:mod:`flegel.device`), and the ratios array / compiled and
  CuPy / compiled.  The CuPy pass includes what the runtime pays: each block is copied to the
  device and its state and statistics back (the shard stays in host memory);
* the CNN job (``jobs/cnn.yaml``) run by ``flegel run`` with ``params.device=gpu`` and with
  ``params.device=cpu``: ``time_to_target_s`` and ``wall_time_s`` from each ``summary.json``
  and the ratio GPU / CPU.

Without CuPy or a CUDA device the GPU rows say ``skipped:`` and why
(:func:`flegel.device.gpu_unavailable`), and the CNN runs are skipped.  The last line is the
headline ratio (the CNN's time to target GPU / CPU when it ran, else K-means' per-pass
CuPy / compiled, else K-means' array / compiled); ``--json PATH`` writes every figure.

Usage: ``python bench/gpu_bench.py [--quick] [--points N] [--json PATH]``
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
from threadpoolctl import threadpool_limits

from flegel import Algorithm
from flegel.algorithms.fcm import FuzzyCMeans
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.kmeans import KMeans
from flegel.algorithms.logreg import LogisticRegression
from flegel.data import load_shard
from flegel.device import gpu_unavailable
from flegel.local import full_pass, make_info

ROOT = Path(__file__).resolve().parents[1]
#: name -> (data kind, constructor taking device/kernel keywords)
ALGORITHMS: dict[str, tuple[str, Callable[..., Algorithm]]] = {
    "kmeans": ("blobs", lambda **kw: KMeans(n_clusters=16, n_init=1, **kw)),
    "gmm": ("blobs", lambda **kw: GaussianMixture(n_components=16, **kw)),
    "fcm": ("blobs", lambda **kw: FuzzyCMeans(n_clusters=16, **kw)),
    "logreg": ("classification", lambda **kw: LogisticRegression(learning_rate=0.5, **kw)),
}
#: The variants of each kernel: label -> constructor keywords.
VARIANTS = {"compiled": {"kernel": "compiled"}, "array": {"kernel": "array"},
            "gpu": {"device": "gpu"}}
CNN_JOB = ROOT / "jobs" / "cnn.yaml"


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing to wait for without CuPy)."""
    if gpu_unavailable() is None:
        import cupy

        cupy.cuda.Device().synchronize()


def pass_times(algo: Algorithm, x: np.ndarray, y: np.ndarray | None, passes: int,
               block: int) -> list[float]:
    """Seconds of ``passes`` training passes of ``algo`` over ``x`` in blocks (after one
    warm-up pass, not timed): θ is updated after each pass, as under BSP full batch."""
    theta = algo.init_parameter(make_info(x, y, seed=1))
    state = algo.init_state(len(x), x.shape[1])
    times = []
    for n in range(passes + 1):
        t0 = time.perf_counter()
        total = full_pass(algo, x, y, theta, state, block)
        synchronize()
        if n:  # the first pass compiles (numba, CuPy's kernels, cuBLAS's handle)
            times.append(time.perf_counter() - t0)
        theta = algo.update_parameter(total, theta)
    return times


def kernel_rows(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per algorithm: the median pass of each variant (seconds, or the reason it was
    skipped) and the ratios to the compiled kernel."""
    no_gpu = gpu_unavailable()
    data: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    rows: dict[str, dict[str, Any]] = {}
    for name in args.algorithms:
        kind, make = ALGORITHMS[name]
        if kind not in data:
            spec = {"source": "synthetic", "kind": kind, "n_points": args.points,
                    "n_features": args.features, "seed": 7}
            if kind == "blobs":
                spec["centers"] = 16
            data[kind] = load_shard(spec, 0, 1, ROOT)
        x, y = data[kind]
        row: dict[str, Any] = {}
        for variant, kw in VARIANTS.items():
            if variant == "gpu" and no_gpu is not None:
                row[variant] = f"skipped: {no_gpu}"
                continue
            try:
                row[variant] = statistics.median(pass_times(make(**kw), x, y, args.passes,
                                                            args.block))
            except Exception as err:  # noqa: BLE001 - one failed variant is a row, not the end
                if variant != "gpu":
                    raise
                # the CuPy path is first run on a GPU machine here: report, go on
                first = (str(err).splitlines() or [""])[0]
                row[variant] = f"failed: {type(err).__name__}: {first}"
        for variant in ("array", "gpu"):
            if isinstance(row[variant], float):
                row[f"{variant}/compiled"] = row[variant] / row["compiled"]
        rows[name] = row
        print_row(name, row)
    return rows


def print_header(args: argparse.Namespace) -> None:
    print(f"Per-pass time: {args.points:,} x {args.features} float64, K = 16 (logreg: binary),"
          f" blocks of {args.block:,} points, 1 CPU thread, median of {args.passes} passes "
          "after a warm-up pass")
    print(f"  {'algorithm':<9} {'compiled':>10} {'array':>10} {'array/comp':>10} "
          f"{'CuPy':>10} {'CuPy/comp':>10}")


def print_row(name: str, row: dict[str, Any]) -> None:
    def ms(v: Any) -> str:
        return f"{v * 1e3:8.1f}ms" if isinstance(v, float) else f"{'-':>10}"

    def ratio(v: Any) -> str:
        return f"{v:10.3f}" if isinstance(v, float) else f"{'-':>10}"

    line = (f"  {name:<9} {ms(row['compiled'])} {ms(row['array'])} "
            f"{ratio(row.get('array/compiled'))} {ms(row['gpu'])} "
            f"{ratio(row.get('gpu/compiled'))}")
    if isinstance(row["gpu"], str):
        line += f"  CuPy {row['gpu']}"
    print(line, flush=True)


def run_cnn(device: str, out: Path, timeout: float) -> dict[str, Any]:
    """Run the CNN job on ``device``; its summary's time to target and wall time."""
    cmd = [sys.executable, "-m", "flegel", "run", str(CNN_JOB), "--set",
           f"params.device={device}", "--set", "output.progress=none", "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return {"failed": f"exit {proc.returncode}: {tail[0]}"}
    summary = json.loads((out / "summary.json").read_text())
    return {"time_to_target_s": summary.get("time_to_target_s"),
            "wall_time_s": summary["wall_time_s"],
            "final_objective": summary["final_objective"],
            "stop_reason": summary.get("stop_reason"),
            "command_s": time.perf_counter() - t0}


def cnn_rows(args: argparse.Namespace) -> dict[str, Any]:
    """The CNN job on the GPU and on the CPU (skipped without a GPU or with --no-cnn)."""
    rel = CNN_JOB.relative_to(ROOT)
    reason = "--no-cnn" if args.no_cnn else gpu_unavailable()
    if reason is not None:
        print(f"CNN time to target ({rel}): skipped: {reason}")
        return {"skipped": reason}
    print(f"CNN time to target ({rel}; flegel run --set params.device=gpu|cpu):")
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for device in ("gpu", "cpu"):
            r = run_cnn(device, Path(tmp) / device, args.cnn_timeout)
            result[device] = r
            if "failed" in r:
                print(f"  {device}: failed: {r['failed']}")
                continue
            ttt = r["time_to_target_s"]
            print(f"  {device}: time_to_target_s "
                  f"{'not met' if ttt is None else f'{ttt:.2f}'}, wall_time_s "
                  f"{r['wall_time_s']:.2f}, final objective {r['final_objective']:.4g} "
                  f"({r['stop_reason']})", flush=True)
    gpu, cpu = result.get("gpu", {}), result.get("cpu", {})
    for key in ("time_to_target_s", "wall_time_s"):
        if isinstance(gpu.get(key), float) and isinstance(cpu.get(key), float) and cpu[key]:
            result[f"gpu/cpu {key}"] = gpu[key] / cpu[key]
            print(f"  GPU / CPU {key}: {result[f'gpu/cpu {key}']:.3f}")
    return result


def headline(kernels: dict[str, dict[str, Any]], cnn: dict[str, Any]) -> tuple[str, Any]:
    """The one figure: the CNN's time to target GPU / CPU, else K-means' CuPy / compiled
    pass, else its array / compiled pass."""
    if isinstance(cnn.get("gpu/cpu time_to_target_s"), float):
        return "CNN time to target GPU / CPU", cnn["gpu/cpu time_to_target_s"]
    km = kernels.get("kmeans") or next(iter(kernels.values()), {})
    for key, text in (("gpu/compiled", "per pass CuPy / compiled (numba)"),
                      ("array/compiled", "per pass array (NumPy) / compiled (numba)")):
        if isinstance(km.get(key), float):
            name = "kmeans" if "kmeans" in kernels else next(iter(kernels))
            return f"{name} {text}", km[key]
    return "none", None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=28)
    ap.add_argument("--block", type=int, default=100_000, help="points per update_block call")
    ap.add_argument("--passes", type=int, default=5, help="timed passes per kernel")
    ap.add_argument("--quick", action="store_true", help="200,000 points, 3 passes")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS),
                    help="comma-separated subset of " + ", ".join(ALGORITHMS))
    ap.add_argument("--no-cnn", action="store_true", help="skip the CNN job")
    ap.add_argument("--cnn-timeout", type=float, default=300.0,
                    help="seconds each CNN run may take")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.points, args.passes = 200_000, 3
    args.algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = sorted(set(args.algorithms) - set(ALGORITHMS))
    if unknown:
        ap.error(f"unknown algorithms {unknown}; choose from {sorted(ALGORITHMS)}")
    device = "none"
    if gpu_unavailable() is None:
        import cupy

        device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"GPU: {device}")
    print_header(args)
    with threadpool_limits(1):
        kernels = kernel_rows(args)
    cnn = cnn_rows(args)
    what, ratio = headline(kernels, cnn)
    print(f"headline: {what}: ratio {'-' if ratio is None else f'{ratio:.3f}'}")
    if args.json:
        doc = {"ratio": ratio, "target": None, "headline": what, "gpu": device,
               "gpu_skipped": gpu_unavailable(), "points": args.points,
               "features": args.features, "block": args.block, "passes": args.passes,
               "kernels": kernels, "cnn": cnn}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
