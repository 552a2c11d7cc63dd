"""GPU paths benchmark (issue 14, item 4; issue 23, item 5): per-pass time of each kernel on a
GPU against one CPU core, the bytes copied to the device per pass, and the CNN job's time to
target on the GPU against the CPU.

Without CuPy or a CUDA device it prints one line, ``gpu_bench: skipped: no GPU: <why>``
(:func:`flegel.device.gpu_unavailable`), and exits 0 (``--cpu-rows`` runs the CPU columns
anyway).  On a GPU it prints, measured in one run on the same data:

* per algorithm (K-means, diagonal GMM, FCM, binary logistic regression, K = 16, on a
  synthetic ``--points`` x 28 float64 data set, 1,000,000 by default, 200,000 with
  ``--quick``; the CNN of ``jobs/cnn.yaml`` on its 12,000 synthetic 28 x 28 images): the time
  of one pass through the runtime's own store and block loop (``ShardStore.next_block``,
  ``update_block`` in blocks of ``--block`` points, θ updated between passes as under BSP
  full batch; the median of ``--passes`` passes after a warm-up pass) of

  - ``1 core``: the best CPU kernel on one thread (numba's compiled kernel; the CNN's NumPy
    kernel, it has no other), and ``array``, the NumPy array kernel;
  - ``GPU``: the CuPy kernel with the shard resident on the device (copied once before the
    passes, as a worker does after loading: :class:`flegel.device.DeviceRows`);
  - ``GPU copy``: the CuPy kernel with the shard in host memory, every block copied to the
    device (the runtime before issue 23; what a shard too big for the device still does);

  the speed-up ``1 core / GPU`` (issue 23's target: >= 30x for K-means and the CNN), and the
  host-to-device megabytes per pass of both GPU columns, counted at ``cupy.asarray`` and
  ``cupy.array`` (the calls flegel's code copies with): θ, the blocks' per-point state and,
  in ``GPU copy``, the features;
* the CNN job (``jobs/cnn.yaml``) run by ``flegel run`` with ``params.device=gpu`` and with
  ``params.device=cpu`` (4 workers, one thread each): ``time_to_target_s`` and
  ``wall_time_s`` from each ``summary.json`` and the ratio GPU / CPU (``--no-cnn`` skips it).

The last line is the headline ratio: K-means' GPU pass / its one-core pass (target <= 1/30),
else the CNN's; ``--json PATH`` writes every figure.

Usage: ``python bench/gpu_bench.py [--quick] [--points N] [--no-cnn] [--stand-in] [--json PATH]``
(``--stand-in``: without a GPU, count the copies through ``tests/fakes.py``'s CuPy stand-in).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from flegel import Algorithm
from flegel.algorithms.cnn import CNN
from flegel.algorithms.fcm import FuzzyCMeans
from flegel.algorithms.gmm import GaussianMixture
from flegel.algorithms.kmeans import KMeans
from flegel.algorithms.logreg import LogisticRegression
from flegel.data import load_shard
from flegel.device import gpu_unavailable
from flegel.local import make_info
from flegel.runtime.store import ShardStore

ROOT = Path(__file__).resolve().parents[1]
#: name -> (data kind, constructor taking device/kernel keywords, has a compiled kernel)
ALGORITHMS: dict[str, tuple[str, Callable[..., Algorithm], bool]] = {
    "kmeans": ("blobs", lambda **kw: KMeans(n_clusters=16, n_init=1, **kw), True),
    "gmm": ("blobs", lambda **kw: GaussianMixture(n_components=16, **kw), True),
    "fcm": ("blobs", lambda **kw: FuzzyCMeans(n_clusters=16, **kw), True),
    "logreg": ("classification", lambda **kw: LogisticRegression(learning_rate=0.5, **kw),
               True),
    # jobs/cnn.yaml's network and data
    "cnn": ("mnist", lambda **kw: CNN(n_filters=(6, 12), kernel_size=5, pool_size=2,
                                      learning_rate=0.1, momentum=0.0, **kw), False),
}
#: column -> (constructor keywords; with a compiled kernel, without), the shard resident
COLUMNS: dict[str, tuple[dict[str, str], dict[str, str] | None, bool]] = {
    "1 core": ({"kernel": "compiled"}, {"device": "cpu"}, False),
    "array": ({"kernel": "array"}, None, False),
    "GPU": ({"device": "gpu"}, {"device": "gpu"}, True),
    "GPU copy": ({"device": "gpu"}, {"device": "gpu"}, False),
}
GPU_COLUMNS = ("GPU", "GPU copy")
#: Issue 23's speed-up target: K-means and the CNN on a GPU against one CPU core.
TARGET_SPEEDUP = 30.0
CNN_JOB = ROOT / "jobs" / "cnn.yaml"


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing to wait for without CuPy)."""
    if gpu_unavailable() is None:
        import cupy

        cupy.cuda.Device().synchronize()


class CopyMeter:
    """Host-to-device bytes, counted at ``cupy.asarray`` and ``cupy.array`` while
    :meth:`counting` (the NumPy arrays handed to them: the calls flegel's kernels and
    :class:`flegel.device.DeviceRows` copy with)."""

    def __init__(self) -> None:
        self.bytes = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        import cupy

        saved = cupy.asarray, cupy.array

        def meter(fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(a: Any, *args: Any, **kw: Any) -> Any:
                if isinstance(a, np.ndarray) and type(a).__module__ == "numpy":
                    self.bytes += int(a.nbytes)
                return fn(a, *args, **kw)
            return call

        cupy.asarray, cupy.array = meter(saved[0]), meter(saved[1])
        try:
            yield
        finally:
            cupy.asarray, cupy.array = saved


def pass_times(algo: Algorithm, x: np.ndarray, y: np.ndarray | None, passes: int,
               block: int, resident: bool, meter: CopyMeter | None
               ) -> tuple[list[float], float | None]:
    """Seconds of ``passes`` training passes of ``algo`` over ``x`` through the runtime's
    store (after one warm-up pass, not timed: numba's compile, CuPy's kernels, cuBLAS's
    handle), θ updated after each pass; and the host-to-device bytes of a timed pass."""
    theta = algo.init_parameter(make_info(x, y, seed=1))
    store = ShardStore(x, y, algo.init_state(len(x), x.shape[1]))
    if resident and not store.place(algo, "gpu_bench"):
        raise RuntimeError("the shard did not fit on the GPU (see the line above)")
    times: list[float] = []
    copied = 0
    for n in range(passes + 1):
        before = meter.bytes if meter is not None else 0
        t0 = time.perf_counter()
        total = algo.zero_aggregator(theta)
        todo = store.n_active
        while todo > 0:
            part, sel = store.next_block(min(block, todo))
            total = algo.aggregate(total, algo.update_block(part, theta, n + 1))
            store.commit_block(part, sel)
            todo -= len(part)
        synchronize()
        if n:
            times.append(time.perf_counter() - t0)
            copied += (meter.bytes if meter is not None else 0) - before
        theta = algo.update_parameter(total, theta)
    return times, (copied / passes if meter is not None else None)


def load_data(kind: str, args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray | None]:
    if kind == "mnist":  # jobs/cnn.yaml's data
        spec: dict[str, Any] = {"source": "synthetic", "like": "mnist", "scale": 0.2, "seed": 1}
    else:
        spec = {"source": "synthetic", "kind": kind, "n_points": args.points,
                "n_features": args.features, "seed": 7}
        if kind == "blobs":
            spec["centers"] = 16
    return load_shard(spec, 0, 1, ROOT)


def kernel_rows(args: argparse.Namespace, no_gpu: str | None) -> dict[str, dict[str, Any]]:
    """Per algorithm: the median pass of each column (seconds, or why it did not run), the
    host-to-device MB per pass of the GPU columns, and the speed-up 1 core / GPU."""
    data: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    rows: dict[str, dict[str, Any]] = {}
    meter = CopyMeter()
    for name in args.algorithms:
        kind, make, compiled = ALGORITHMS[name]
        if kind not in data:
            data[kind] = load_data(kind, args)
        x, y = data[kind]
        row: dict[str, Any] = {"points": len(x), "features": x.shape[1]}
        for column, (with_compiled, without, resident) in COLUMNS.items():
            kw = with_compiled if compiled else without
            if kw is None:
                row[column] = "-"
                continue
            if column in GPU_COLUMNS and no_gpu is not None:
                row[column] = f"skipped: {no_gpu}"
                continue
            gpu = column in GPU_COLUMNS
            try:
                if gpu:
                    with meter.counting():
                        times, copied = pass_times(make(**kw), x, y, args.passes, args.block,
                                                   resident, meter)
                    row[f"{column} MB/pass"] = (copied or 0.0) / 1e6
                else:
                    times, _ = pass_times(make(**kw), x, y, args.passes, args.block, False,
                                          None)
                row[column] = statistics.median(times)
            except Exception as err:  # noqa: BLE001 - one failed column is a row, not the end
                if not gpu:
                    raise
                first = (str(err).splitlines() or [""])[0]
                row[column] = f"failed: {type(err).__name__}: {first}"
        if isinstance(row["1 core"], float) and isinstance(row["GPU"], float) and row["GPU"]:
            row["speedup"] = row["1 core"] / row["GPU"]
        rows[name] = row
        print_row(name, row)
    return rows


def print_header(args: argparse.Namespace) -> None:
    print(f"Per-pass time through the runtime's store: {args.points:,} x {args.features} "
          f"float64, K = 16 (logreg: binary; cnn: jobs/cnn.yaml's 12,000 images), blocks of "
          f"{args.block:,} points, CPU columns on 1 thread, median of {args.passes} passes "
          "after a warm-up pass; MB: host-to-device per pass")
    print(f"  {'algorithm':<9} {'1 core':>10} {'array':>10} {'GPU':>10} {'GPU copy':>10} "
          f"{'1 core/GPU':>10} {'MB GPU':>9} {'MB copy':>9}")


def print_row(name: str, row: dict[str, Any]) -> None:
    def ms(v: Any) -> str:
        return f"{v * 1e3:8.1f}ms" if isinstance(v, float) else f"{'-':>10}"

    def mb(v: Any) -> str:
        return f"{v:9.2f}" if isinstance(v, float) else f"{'-':>9}"

    speed = row.get("speedup")
    line = (f"  {name:<9} {ms(row['1 core'])} {ms(row['array'])} {ms(row['GPU'])} "
            f"{ms(row['GPU copy'])} {f'{speed:9.1f}x' if speed else f'{chr(45):>10}'} "
            f"{mb(row.get('GPU MB/pass'))} {mb(row.get('GPU copy MB/pass'))}")
    notes = [f"{c}: {row[c]}" for c in GPU_COLUMNS if isinstance(row[c], str) and row[c] != "-"]
    if notes:
        line += "  " + "; ".join(dict.fromkeys(notes))
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


def install_stand_in() -> None:
    """``--stand-in``: tests/fakes.py's CuPy stand-in (separate "device" memory, NumPy
    underneath) imported as ``cupy``, with the CUDA calls this script makes."""
    import types

    sys.path.insert(0, str(ROOT))
    from tests.fakes import cupy_stand_in

    fake = cupy_stand_in(1)
    fake.cuda.Device = lambda *a: types.SimpleNamespace(synchronize=lambda: None)
    fake.cuda.runtime.getDeviceProperties = (
        lambda i: {"name": b"stand-in (NumPy; times mean nothing)"})
    sys.modules["cupy"] = fake
    gpu_unavailable.cache_clear()


def headline(kernels: dict[str, dict[str, Any]], cnn: dict[str, Any]) -> tuple[str, Any]:
    """The one figure: K-means' GPU pass / its one-core pass (issue 23: <= 1/30), else the
    CNN's, else the CNN job's time to target GPU / CPU."""
    for name in ("kmeans", "cnn"):
        speed = kernels.get(name, {}).get("speedup")
        if isinstance(speed, float):
            return f"{name} per pass GPU (resident shard) / one CPU core", 1.0 / speed
    if isinstance(cnn.get("gpu/cpu time_to_target_s"), float):
        return "CNN time to target GPU / CPU", cnn["gpu/cpu time_to_target_s"]
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
    ap.add_argument("--cpu-rows", action="store_true",
                    help="without a GPU, run the CPU columns instead of skipping")
    ap.add_argument("--stand-in", action="store_true",
                    help="without a GPU: tests/fakes.py's NumPy-backed CuPy stand-in as cupy "
                         "(the copies are counted on the real code path; the times are "
                         "NumPy's and mean nothing; no CNN job)")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    args = ap.parse_args()
    if args.stand_in:
        install_stand_in()
        args.no_cnn = True
    if args.quick:
        args.points, args.passes = 200_000, 3
    args.algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = sorted(set(args.algorithms) - set(ALGORITHMS))
    if unknown:
        ap.error(f"unknown algorithms {unknown}; choose from {sorted(ALGORITHMS)}")
    no_gpu = gpu_unavailable()
    if no_gpu is not None and not args.cpu_rows:
        print(f"gpu_bench: skipped: no GPU: {no_gpu}")
        if args.json:
            args.json.write_text(json.dumps({"ratio": None, "target": None,
                                             "headline": "skipped", "gpu_skipped": no_gpu})
                                 + "\n")
        return
    device = "none"
    if no_gpu is None:
        import cupy

        try:
            device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception as err:  # noqa: BLE001 - a name is only a label
            device = f"(name unknown: {type(err).__name__})"
    print(f"GPU: {device}")
    print_header(args)
    with threadpool_limits(1):
        kernels = kernel_rows(args, no_gpu)
    cnn = cnn_rows(args)
    what, ratio = headline(kernels, cnn)
    target = 1.0 / TARGET_SPEEDUP if what.endswith("one CPU core") else None
    if args.stand_in:  # NumPy's times, not a GPU's: no target to hold them against
        what, target = what + " [--stand-in: the times are NumPy's]", None
    print(f"headline: {what}: ratio {'-' if ratio is None else f'{ratio:.4f}'}"
          + (f" (target <= {target:.4f}: {TARGET_SPEEDUP:g}x)" if target else ""))
    if args.json:
        doc = {"ratio": ratio, "target": target, "headline": what, "gpu": device,
               "gpu_skipped": no_gpu, "points": args.points,
               "features": args.features, "block": args.block, "passes": args.passes,
               "kernels": kernels, "cnn": cnn}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
