"""The wiring: one validated job on an MPI communicator -> server, policies and runtime.

This module sits above the runtime and the sync models (``docs/architecture.md``): it is the
one place that picks the job's sync model and hands its master policy to the server and its
worker policy to the worker loop.

Start-up: each worker loads only its own shard and sends the master its size and a seeded
sample; the master builds :class:`~flegel.api.DataInfo`, computes θ⁽⁰⁾ and the buffer layouts,
announces the layouts and sends θ⁽⁰⁾ once, as a buffer.  Workers compile their kernels on it
(JIT warm-up) and report ready; then the training clock starts.  Training: the master serves
the master policy while workers run the generic loop with the worker policy.  End: workers
evaluate the final θ on their shards; the master writes the run directory.  An exception on
any rank aborts the whole job with that rank's traceback.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from flegel.api import Algorithm, DataInfo, zero_aggregator
from flegel.block import Block
from flegel.config import Job
from flegel.peak_memory import peak_rss_mib
from flegel.runtime import comm as msg
from flegel.runtime.layout import Layout
from flegel.runtime.server import Server
from flegel.runtime.transport import MpiTransport
from flegel.runtime.worker import Worker
from flegel.stopping import StopCriteria
from flegel.store import ID_SHIFT, ShardStore
from flegel.stragglers import Stragglers
from flegel.sync import policy_class


def abort_on_error(comm: MPI.Comm, fn: Any, *args: Any) -> Any:
    """Run ``fn``; on any exception print the rank and traceback, then abort every rank.

    ``MPI_Abort`` ends all processes of the job at once, so a failing rank can never leave
    the others waiting for it (DESIGN §7).
    """
    try:
        return fn(*args)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the job
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        role = "master" if comm.rank == 0 else "worker"
        sys.stderr.write(f"\nflegel: rank {comm.rank} ({role}) failed:\n"
                         + "".join(traceback.format_exception(exc)))
        sys.stderr.flush()
        # Give the launcher a moment to forward the traceback before every rank is killed.
        time.sleep(0.5)
        comm.Abort(1)


def _limit_threads(n: int) -> None:
    """One BLAS/numba thread per rank by default: two per rank on shared cores made a GMM
    pass 11x slower (DESIGN §4)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)
    try:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - numba threading layer may be unavailable
        pass


# ------------------------------------------------------------------------------- worker side
def _warm_up(algorithm: Algorithm, x: np.ndarray, y: np.ndarray | None, theta: dict[str, Any],
             zero: dict[str, Any]) -> None:
    """Run the kernel once on a copy of a few points, so JIT compilation (numba) happens
    before the training clock starts, not inside the first iteration."""
    n = min(len(x), 8)
    block = Block.from_arrays(x[:n].copy(), None if y is None else y[:n].copy(),
                              algorithm.init_state(n, x.shape[1]))
    algorithm.aggregate(zero, algorithm.update_block(block, theta, 1))


def run_worker(comm: MPI.Comm, job: Job) -> None:
    from flegel.data import load_shard, sample_shard

    _limit_threads(job["runtime"]["threads"])
    n_workers = comm.size - 1
    shard = comm.rank - 1
    t0 = time.perf_counter()
    x, y = load_shard(job["data"], shard, n_workers, job.base_dir)
    algorithm = job.make_algorithm()
    k = max(1, job["runtime"]["sample_size"] // n_workers)
    sx, sy = sample_shard(x, y, k, job["seed"] + shard)
    msg.send_object(comm, {"n": len(x), "d": x.shape[1], "dtype": x.dtype.str,
                           "sample": sx, "sample_y": sy,
                           "n_classes": None if y is None else int(np.max(y)) + 1,
                           "load_s": time.perf_counter() - t0}, dest=0)
    layouts = msg.recv_object(comm, source=0)[0]
    ids = (np.int64(comm.rank) << ID_SHIFT) | np.arange(len(x), dtype=np.int64)
    store = ShardStore(x, y, algorithm.init_state(len(x), x.shape[1]), ids=ids)
    stragglers = Stragglers.for_rank(job["stragglers"], comm.rank, job["seed"])
    policy = policy_class(job["sync"]["model"]).WORKER(job["sync"])
    worker = Worker(comm, algorithm, store, layouts["theta"], layouts["agg"], policy,
                    stragglers, block_ms=job["runtime"]["block_ms"])
    worker.receive_params()  # θ⁽⁰⁾, sent once
    _warm_up(algorithm, x, y, worker.theta, layouts["agg"].zeros())
    msg.send_object(comm, "ready", dest=0)
    report = worker.run()
    # The exact objective of the final θ and of every θ snapshot of the run, on this shard
    # (see flegel.runtime.server.Trace).
    thetas = msg.recv_object(comm, source=0)[0]
    full = store.full_block()
    report["objective"] = float(algorithm.evaluate(worker.theta, full))
    report["trace"] = [float(algorithm.evaluate(th, full)) for th in thetas]
    report["load_s"] = time.perf_counter() - t0 - report["compute_s"] - report["wait_s"]
    report["peak_rss_mib"] = peak_rss_mib()  # after the final evaluation: the whole run's peak
    msg.send_object(comm, report, dest=0)


# ------------------------------------------------------------------------------- master side
def run_master(comm: MPI.Comm, job: Job, out_dir: Path) -> dict[str, Any]:
    from flegel.output import RunWriter
    from flegel.progress import Progress

    _limit_threads(job["runtime"]["threads"])
    n_workers = comm.size - 1
    infos = {}
    for _ in range(n_workers):
        info, src = msg.recv_object(comm)
        infos[src] = info
    ranks = sorted(infos)
    sample = np.concatenate([infos[r]["sample"] for r in ranks])
    labelled = infos[ranks[0]]["sample_y"] is not None
    sample_y = np.concatenate([infos[r]["sample_y"] for r in ranks]) if labelled else None
    # The source may know the classes of the whole data set; shards only see their own labels.
    n_classes = job.data_info.n_classes or (
        max(infos[r]["n_classes"] for r in ranks) if labelled else None)
    info = DataInfo(n_features=infos[ranks[0]]["d"], n_points=sum(i["n"] for i in infos.values()),
                    n_workers=n_workers, sample=sample, sample_y=sample_y, n_classes=n_classes,
                    seed=job["seed"], dtype=np.dtype(infos[ranks[0]]["dtype"]),
                    base_dir=job.base_dir)
    algorithm = job.make_algorithm()
    theta = algorithm.init_parameter(info)
    agg_layout = Layout.of(zero_aggregator(algorithm, theta, sample[0],
                                           None if sample_y is None else sample_y[0]))
    theta_layout = Layout.of(theta)
    msg.bcast_object(comm, {"theta": theta_layout, "agg": agg_layout})

    writer = RunWriter(out_dir, job)
    progress = Progress(job["output"]["progress"], algorithm.objective_name)
    server = Server(MpiTransport(comm, theta_layout, agg_layout), ranks, algorithm, theta,
                    agg_layout.zeros, StopCriteria(**job["stop"]), events=writer.event,
                    progress=progress, trace_points=job["output"]["trace_points"],
                    stall_warning_s=job["runtime"]["stall_warning_s"])
    server.shard_sizes = {r: infos[r]["n"] for r in ranks}
    server.preload()
    for _ in range(n_workers):
        msg.recv_object(comm)  # every worker is loaded and warmed up: the clock may start
    policy = policy_class(job["sync"]["model"])(server, job["sync"])
    server.serve(policy)
    msg.bcast_object(comm, server.trace.thetas)
    # Every worker's end-of-run report (evaluated objective, totals), in rank order.
    results = [msg.recv_object(comm, source=r)[0] for r in ranks]
    progress.close(server.version, server.objective, server.train_s)
    summary = writer.finish(server, policy, algorithm, info, results, infos)
    return summary


def run(comm: MPI.Comm, job: Job, out_dir: Path) -> dict[str, Any] | None:
    """Run ``job`` on ``comm`` (rank 0 master, others workers); the master returns the
    summary."""
    if comm.size < 2:
        raise SystemExit("flegel: needs at least 2 MPI ranks (a master and a worker); "
                         "run 'flegel run JOB.yaml' without mpirun to start them itself")
    if comm.rank == 0:
        return abort_on_error(comm, run_master, comm, job, out_dir)
    abort_on_error(comm, run_worker, comm, job)
    return None
