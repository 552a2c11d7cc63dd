"""The wiring: one validated job on an MPI communicator -> server, policies and runtime.

This module sits above the runtime and the sync models (``docs/architecture.md``): it is the
one place that picks the job's sync model and hands its master policy to the server and its
worker policy to the worker loop.

Start-up: each worker loads only its own shard and sends the master its size and a seeded
sample; the master builds :class:`~flegel.api.DataInfo`, computes θ⁽⁰⁾ and the buffer layouts,
announces the layouts and sends θ⁽⁰⁾ once, as a buffer.  Workers compile their kernels on it
(JIT warm-up) and report ready; then the training clock starts.  Training: the master serves
the master policy while workers run the generic loop with the worker policy.  End: workers
evaluate the final θ on their shards; the master writes the run directory.

Ending early (issue 13, ``docs/exit-codes.md``): the model is saved before the final
evaluation, so a failure there leaves it.  Anything that ends the job early reaches the
master as a :class:`~flegel.runtime.faults.JobFault` -- a signal, a stalled worker, NaN, a
worker's exception (the worker prints its traceback and reports a FAULT message) -- and the
master saves the last good θ, prints one line naming the rank and what happened, and ends
every rank with the fault's exit code.  An exception on the master prints its traceback, then
the same line.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from flegel.api import Algorithm, DataInfo, zero_aggregator
from flegel.block import Block
from flegel.device import load_ahead
from flegel.jit import after_first
from flegel.job.errors import JobError
from flegel.job.job import Job
from flegel.protocol import ExitCode, StopReason, Tag
from flegel.rundir import files
from flegel.rundir.checkpoint import Checkpoint, Checkpointer
from flegel.runtime import comm as msg
from flegel.runtime import lifetime, peers, watchdog
from flegel.runtime.agreement import Rejected, agreed
from flegel.runtime.blocksize import device_of, fixed_block, measure_call_cost
from flegel.runtime.cut import CUT, consistent_cut
from flegel.runtime.exact import Evaluator, ExactObjective, evaluate_snapshots, id_checksum
from flegel.runtime.faults import JobFault
from flegel.runtime.layout import Layout
from flegel.runtime.limits import PHASE_MIN_S
from flegel.runtime.peak_memory import peak_rss_mib
from flegel.runtime.server import Server
from flegel.runtime.stopping import StopCriteria
from flegel.runtime.store import ShardStore, global_ids
from flegel.runtime.stragglers import Stragglers
from flegel.runtime.timings import RankClock
from flegel.runtime.transport import MpiTransport
from flegel.runtime.worker import Worker, seed_sizer
from flegel.sync import policy_class
from flegel.sync.bsp import BLOCK, BlockChoice, choose_block, measures_block
from flegel.sync.seeded import seeds_sizer

if TYPE_CHECKING:  # the writer is imported when the master needs it (start-up cost)
    from flegel.rundir.writer import RunWriter


def abort_on_error(comm: MPI.Comm, fn: Any, *args: Any) -> Any:
    """Run ``fn``; on any exception end the whole job, so that no rank is left waiting.

    A worker prints its traceback (none for a :class:`JobFault`, whose message says it all)
    and reports the failure to the master, which saves θ and ends the job; if the master
    cannot within :data:`~flegel.runtime.lifetime.GRACE_S`, the worker ends it.  The master
    handles its own failures in :func:`run_master`; what escapes it ends the job here.
    """
    try:
        return fn(*args)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the job
        if isinstance(exc, Rejected) or (isinstance(exc, SystemExit) and not exc.code):
            raise  # Rejected: every rank agreed to stop before any work; rank 0 said why
        code = exc.code if isinstance(exc, JobFault) else ExitCode.FAILED
        if comm.rank == 0:
            if not lifetime.decide(code):  # a cause came first: this is a consequence
                lifetime.await_end(comm, code)
            if not isinstance(exc, JobFault):
                _print_traceback(comm, exc)
            else:
                sys.stderr.write(f"flegel: {exc}\n")
            lifetime.end_job(comm, code)
        if lifetime.pending() is not None or lifetime.decided() is not None:
            # The job is ending (a signal, the master gone): this failure is a consequence.
            lifetime.await_end(comm, code)
        if not isinstance(exc, JobFault):
            _print_traceback(comm, exc)
        msg.send_fault(comm, code, _one_line(exc), lifetime.GRACE_S)
        # The master did not end the job: this worker does, and says why.
        lifetime.decide(code, f"worker {comm.rank} (pid {os.getpid()}) failed: "
                              f"{_one_line(exc)}; the master did not end the job within "
                              f"{lifetime.GRACE_S:g} s: no θ saved")
        lifetime.end_job(comm, code)


def _one_line(exc: BaseException) -> str:
    """``"RuntimeError: what went wrong"`` (first line of the message)."""
    if isinstance(exc, JobFault):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _print_traceback(comm: MPI.Comm, exc: BaseException) -> None:
    role = "master" if comm.rank == 0 else "worker"
    sys.stderr.write(f"\nflegel: rank {comm.rank} ({role}) failed:\n"
                     + "".join(traceback.format_exception(exc)))
    sys.stderr.flush()


def _limit_threads(n: int) -> None:
    """One BLAS/numba thread per rank by default: two per rank on shared cores made a GMM
    pass 11x slower (README, How the runtime works)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)
    numba = sys.modules.get("numba")
    if numba is None:
        # Not imported (it costs every rank 0.3-1 s): the first kernel call imports it
        # (flegel/jit.py) and sizes numba's thread pool from the environment.
        os.environ["NUMBA_NUM_THREADS"] = str(n)
        return
    try:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except Exception:  # noqa: BLE001 - numba threading layer may be unavailable
        pass


# ------------------------------------------------------------------------------- worker side
def _first_points_call(algorithm: Algorithm, x: np.ndarray, y: np.ndarray | None,
                       theta: dict[str, Any], zero: dict[str, Any], n: int) -> float:
    """One ``update_block`` call (``t = 1``, its delta aggregated into ``zero``) on a copy of
    the shard's first ``n`` points with fresh per-point state; its seconds, the block's making
    not counted.  The call before training of both the warm-up and the block-cost measure."""
    block = Block.from_arrays(x[:n].copy(), None if y is None else y[:n].copy(),
                              algorithm.init_state(n, x.shape[1]))
    t0 = time.perf_counter()
    algorithm.aggregate(zero, algorithm.update_block(block, theta, 1))
    return time.perf_counter() - t0


def _warm_up(algorithm: Algorithm, x: np.ndarray, y: np.ndarray | None, theta: dict[str, Any],
             zero: dict[str, Any]) -> None:
    """Run the kernel once on a copy of a few points, so JIT compilation (numba) happens
    before the training clock starts, not inside the first iteration."""
    _first_points_call(algorithm, x, y, theta, zero, min(len(x), 8))


def _call_cost(algorithm: Algorithm, x: np.ndarray, y: np.ndarray | None,
               theta: dict[str, Any], zero: dict[str, Any], least: int = BLOCK
               ) -> tuple[float, float, float] | None:
    """The kernel's per-call and per-point cost and the seconds it took to measure them,
    timed on a copy of the algorithm (its own state, such as the work metered for
    ``kernel: auto``, stays as in any run) on the shard's first points
    (:func:`flegel.runtime.blocksize.measure_call_cost`); None when the shard is at most
    ``least`` points (BSP's least block: one block whatever the cost)."""
    if len(x) <= least:
        return None
    try:
        probe = copy.deepcopy(algorithm)
    except Exception:  # noqa: BLE001 - an algorithm that cannot be copied keeps BLOCK
        return None
    t0 = time.perf_counter()
    cost = measure_call_cost(lambda n: _first_points_call(probe, x, y, theta, zero, n), len(x))
    return None if cost is None else (*cost, time.perf_counter() - t0)


def run_worker(comm: MPI.Comm, job: Job) -> None:
    from flegel.data import sample_shard

    clock = RankClock()  # this rank's steps (summary.json's startup)
    clock.mark("imported")
    _limit_threads(job.runtime.threads)
    n_workers = comm.size - 1
    shard = comm.rank - 1
    t0 = time.perf_counter()
    # Bad data content ends every rank with one message and exit 2, before any work.
    x, y = agreed(comm, (JobError,), job.load_shard, shard, n_workers)
    algorithm = job.make_algorithm()
    k = max(1, job.runtime.sample_size // n_workers)
    sx, sy = sample_shard(x, y, k, job.seed + shard)
    msg.send_object(comm, {"n": len(x), "d": x.shape[1], "dtype": x.dtype.str,
                           "sample": sx, "sample_y": sy,
                           "n_classes": None if y is None else int(np.max(y)) + 1,
                           "load_s": time.perf_counter() - t0}, dest=0)
    clock.mark("loaded")
    # kernel: auto planned from the job's length; numba starts while the master computes θ⁽⁰⁾
    load_ahead(algorithm, len(x), x.shape[1], x.dtype, job.stop.max_iterations,
               first=comm.rank == 1)
    clock.mark("kernels_ahead")
    layouts = msg.recv_object(comm, source=0)[0]
    clock.mark("layouts")  # waited for the master's θ⁽⁰⁾
    # A resumed job: this worker's part of the checkpoint (flegel/rundir/checkpoint.py).
    resumed = msg.recv_object(comm, source=0)[0] if layouts.get("resume") else None
    store = ShardStore(x, y, algorithm.init_state(len(x), x.shape[1]),
                       ids=global_ids(comm.rank, len(x)))
    stragglers = Stragglers.for_rank(job.stragglers, comm.rank, job.seed)
    policy = policy_class(job.sync.model).WORKER(job.sync.options)
    evaluator = Evaluator(algorithm) if job.runtime.exact_budget > 0 else None
    worker = Worker(comm, algorithm, store, layouts["theta"], layouts["agg"], policy,
                    stragglers, block_ms=job.runtime.block_ms, evaluator=evaluator)
    policy.attach(worker)  # the policy's extension point (FSP: data migration)
    if resumed is not None:
        worker.restore(resumed)
    # On a GPU the shard goes to the device once, here, in its training order (flegel.device)
    store.place(algorithm, f"worker {comm.rank}")
    worker.receive_params()  # θ⁽⁰⁾, sent once
    clock.mark("theta")
    # A kernel the warm-up calls that numba's cache does not hold for its argument types:
    # worker 1 compiles it first and the others wait and load it from the cache (n workers
    # compiling the same kernel at once cost n times the CPU).  Workers 2..n run the warm-up
    # with compiling refused (flegel.jit.without_compiling: numba's own cache miss, for any
    # kernel) on a copy of the algorithm and, once worker 1 is done, on the algorithm itself
    # (flegel.jit.after_first).  Kernels in the cache: all load at once.  Worker 1 always
    # says when it is done; every other worker hears it once.
    def warm_up(on: Algorithm) -> None:
        _warm_up(on, store.kernel_x, store.y, worker.theta, layouts["agg"].zeros())

    if comm.rank == 1:
        warm_up(algorithm)
        for r in range(2, comm.size):
            msg.send_object(comm, "compiled", dest=r)
    else:  # the refused try on a copy of the algorithm, then its own warm-up, as worker 1's
        after_first(algorithm, warm_up, lambda: msg.recv_object(comm, source=1))
    clock.mark("warm_up")
    # BSP's block from the kernel's per-call cost (flegel/sync/bsp.py), unless resumed: the
    # checkpoint kept the block the run began with.  Worker 1 alone measures: the workers
    # run the same kernel, and four measuring at once on shared cores cost the compile phase
    # 0.4 s at a load of 12 (issue 23), one a few ms on a quiet machine.
    # FSP's block sizer starts from the same measurement (flegel/sync/seeded.py), on any
    # shard: its first block is the size it aims at, not 64 points (BlockSizer.seed).
    sizing = measures_block(job.sync.model, job.sync.options) and resumed is None
    seeding = seeds_sizer(job.sync.model) and resumed is None
    cost = (_call_cost(algorithm, store.kernel_x, store.y, worker.theta, layouts["agg"].zeros(),
                       least=0 if seeding else BLOCK)
            if (sizing or seeding) and comm.rank == 1 else None)
    clock.mark("block_cost")
    msg.send_object(comm, ("ready", cost), dest=0)
    seeded = None  # summary.json's seeded_sizer: the cost this worker's sizer started from
    if sizing or seeding:
        choice = msg.recv_object(comm, source=0)[0]
        if sizing:
            policy.block = choice.block  # type: ignore[attr-defined]
        if (seeding and choice.fixed_s is not None and choice.point_s is not None
                and seed_sizer(worker.sizer, stragglers, choice.fixed_s, choice.point_s)):
            seeded = {"fixed_s": choice.fixed_s, "point_s": choice.point_s,
                      "measure_s": choice.measure_s, "first_block": worker.sizer.size}
    clock.mark("ready")
    report = worker.run()
    report["seeded"] = seeded
    clock.mark("trained")
    # The exact objective, on this shard, of the θs the master still lacks: the final θ (the
    # model it saves) and θ snapshots of the trace (flegel.runtime.exact.FinalEvaluation).
    thetas = msg.recv_object(comm, source=0)[0]
    report["snapshots"] = evaluate_snapshots(algorithm, store, thetas)
    report["load_s"] = time.perf_counter() - t0 - report["compute_s"] - report["wait_s"]
    report["peak_rss_mib"] = peak_rss_mib()  # after the final evaluation: the whole run's peak
    clock.mark("final_eval")
    report["startup"] = clock.spans()
    lifetime.mark_done(comm.rank)
    msg.send_object(comm, report, dest=0)
    # Exit only once the master has every report and stopped watching the workers: a worker
    # that left at once was seen dying by the master's watch before it could disarm (the
    # job then ended as a worker's death, or hung with the master in MPI_Finalize).
    msg.recv_object(comm, source=0)
    peers.disarm()  # the master may exit now


# ------------------------------------------------------------------------------- master side
class _Saver:
    """What the master needs to save the last good θ when the job ends early."""

    def __init__(self) -> None:
        self.writer: RunWriter | None = None
        self.algorithm: Algorithm | None = None
        self.server: Server | None = None
        self.saved = False  # the final θ is on disk already
        # One writer of the model at a time: the main thread's final save, the watchdog's
        # or a dead worker's thread's save of the last good θ.
        self._writing = threading.Lock()
        self._writer: int | None = None  # the thread holding _writing (its ident)
        self.phase = "loading their shards"  # what the workers are doing, for messages

    def doing(self, rank: int) -> str:
        """What worker ``rank`` was doing, for a message about it."""
        if self.phase == "training" and self.server is not None:
            return self.server.doing(rank)
        return f"the workers were {self.phase}"

    def save(self, reason: StopReason | None = None) -> str:
        """Save the server's θ (the last good one); say where, for the message.  ``reason``:
        the run's ``stop_reason`` unless training had ended for one."""
        if reason is not None and self.server is not None and self.server.reason is None:
            self.server.reason = reason
        srv, writer = self.server, self.writer
        if srv is None or writer is None or self.algorithm is None:
            return "no model saved: training had not started"
        # The main thread waits its turn (another thread saving is ending the job); a
        # thread does not wait on a main thread stuck writing the model, nor does the main
        # thread on itself (the dump signal's handler run inside its own save_trained).
        stuck_writing = "model not saved: rank 0 was writing it when it got stuck"
        if self._writer == threading.get_ident():
            return stuck_writing
        if not self._writing.acquire(blocking=threading.current_thread()
                                     is threading.main_thread()):
            return stuck_writing
        try:
            return self._save(srv, writer, self.algorithm)
        finally:
            self._writing.release()

    def save_trained(self, server: Server) -> None:
        """Write the trained model (the main thread, training over)."""
        assert self.writer is not None and self.algorithm is not None
        with self._writing:
            self._writer = threading.get_ident()
            try:
                self.saved = self.writer.save_model(self.algorithm, server.theta,
                                                    server.version, complete=False,
                                                    stop_reason=str(server.reason))
            finally:
                self._writer = None

    def _save(self, srv: Server, writer: RunWriter, algorithm: Algorithm) -> str:
        if not self.saved:
            try:
                theta, version = srv.good()  # one pair: an update may be completing
                if not writer.save_model(algorithm, theta, version,
                                         complete=False, stop_reason=str(srv.reason)):
                    return "model not saved (output.save_model: false)"
            except Exception as exc:  # noqa: BLE001 - the message must still come out
                return f"saving the model failed too ({_one_line(exc)})"
            return f"last θ (iteration {version}) saved in {writer.dir / files.MODEL}"
        return (f"the trained model (iteration {srv.version}) was saved before, in "
                f"{writer.dir / files.MODEL}")


def run_master(comm: MPI.Comm, job: Job, out_dir: Path,
               resume: Checkpoint | None = None) -> dict[str, Any]:
    """The master's whole run (from ``resume``, a checkpoint, when given); a fault or an
    exception saves θ and ends the job."""
    saver = _Saver()
    peers.on_death(lambda rank, pid: _worker_died(comm, saver, rank, pid))
    watchdog.start_master(comm, functools.partial(saver.save, StopReason.STALLED),
                          job.runtime.stall_timeout_s)
    try:
        return _run_master(comm, job, out_dir, saver, resume)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the job
        if isinstance(exc, Rejected) or (isinstance(exc, SystemExit) and not exc.code):
            watchdog.finished()  # no work to bound: the ranks end as agreed
            raise  # Rejected: every rank agreed to stop before any work; rank 0 said why
        code = exc.code if isinstance(exc, JobFault) else ExitCode.FAILED
        if not lifetime.decide(code):
            # A cause was decided first (a worker died: its thread ends the job); this
            # exception is its consequence, not to be reported.
            lifetime.await_end(comm, code)
        if isinstance(exc, JobFault):
            what = str(exc)
            if saver.server is not None and saver.server.reason is None:
                saver.server.reason = exc.reason
        else:
            _print_traceback(comm, exc)
            what = f"rank 0 (master) failed: {_one_line(exc)}"
        # Saving is bounded as outside training, not by what was left of max_time_s.
        watchdog.enter_phase(SAVING, job.runtime.stall_timeout_s)
        sys.stderr.write(f"flegel: {what}; {saver.save()}\n")
        lifetime.end_job(comm, code)
        raise  # not reached: end_job never returns


def _worker_died(comm: MPI.Comm, saver: _Saver, rank: int, pid: int) -> None:
    """A worker process died (:mod:`flegel.runtime.peers`, in its watching thread): name
    it, save the last θ and end the job at once, before the main loop touches MPI again
    (MPICH would end this process there without a word)."""
    lifetime.end_with(comm, ExitCode.WORKER_DIED,
                      f"worker {rank} (pid {pid}) died while {saver.doing(rank)}",
                      functools.partial(saver.save, StopReason.FAILED))



#: Seconds the master may go on after SIGINT/SIGTERM to complete a checkpoint (when the job
#: has ``output.checkpoint``): workers end by themselves 5 s after the signal
#: (:data:`flegel.runtime.lifetime.GRACE_S`), and the launcher kills the job at 7 s.
FINAL_CHECKPOINT_S = 2.5


def final_checkpoint(server: Server) -> Callable[[], None]:
    """The serve loop's watch: end training on a signal (:func:`lifetime.check_pending`),
    first taking a checkpoint when the job has them (issue 13: "SIGINT ... saves the last θ
    and a checkpoint if configured").

    The checkpoint is forced at the next quiescent point (a barrier under BSP and FSP); if
    none comes within :data:`FINAL_CHECKPOINT_S` (a full-batch iteration may be longer),
    the job ends with the last periodic checkpoint, and θ is saved as always.
    """
    asked: dict[str, float] = {}

    def watch() -> None:
        watchdog.beat()  # a turn of the serve loop completed
        cp = server.checkpoint
        if lifetime.pending() is not None and cp is not None:
            if not asked:
                asked["t0"], asked["sequence"] = time.monotonic(), cp.sequence
                cp.force()
            done = cp.sequence > asked["sequence"]
            if not done and time.monotonic() - asked["t0"] < FINAL_CHECKPOINT_S:
                return  # train on until the snapshot is taken
            with watchdog.own_io():
                cp.wait()  # its files are on disk before the job ends
        lifetime.check_pending()

    return watch


def _watch(comm: MPI.Comm, timeout_s: float | str | None, what: str) -> Any:
    """A watch for the master's waits on workers outside training: a worker's FAULT ends
    it, and so does silence past ``timeout_s`` (``runtime.stall_timeout_s``, at least
    :data:`PHASE_MIN_S`; ``auto``: :data:`~flegel.runtime.server.STALL_UNMEASURED_S`, as
    loading, compiling and evaluating scale with the shard, not with an iteration), naming
    who and what."""
    limit = watchdog.phase_bound(timeout_s)  # the master's own bound outside training too
    deadline = None if limit is None else time.monotonic() + limit

    def watch(missing: list[int] | None = None) -> None:
        watchdog.beat()
        msg.check_faults(comm)
        if deadline is not None and time.monotonic() >= deadline:
            who = "worker(s) " + ", ".join(map(str, missing)) if missing else "a worker"
            raise JobFault(f"{who} did not answer within {limit:g} s "
                           f"(runtime.stall_timeout_s, at least {PHASE_MIN_S:g} s outside "
                           f"training) while {what}", ExitCode.STALLED, StopReason.STALLED)

    return watch


def _run_master(comm: MPI.Comm, job: Job, out_dir: Path, saver: _Saver,
                resume: Checkpoint | None = None) -> dict[str, Any]:
    from flegel.rundir.writer import RunWriter
    from flegel.runtime.progress import Progress
    from flegel.runtime.timings import Timings

    clock = RankClock()  # this rank's steps (summary.json's startup)
    clock.mark("imported")
    progress = Progress(job.output.progress)
    timings = Timings(on_phase=progress.phase)
    timings.begin("load_s")
    _limit_threads(job.runtime.threads)
    n_workers = comm.size - 1
    timeout = job.runtime.stall_timeout_s
    ranks = list(range(1, comm.size))
    loading = _watch(comm, timeout, "loading their shards")
    # The ranks agree that every shard (and test_data, checked here meanwhile) is good data.
    agreed(comm, (JobError,), job.check_test_data, watch=loading)
    infos = msg.gather_objects(comm, ranks, loading)
    clock.mark("loaded")  # the workers' shards
    timings.begin("compile_s")
    sample = np.concatenate([infos[r]["sample"] for r in ranks])
    labelled = infos[ranks[0]]["sample_y"] is not None
    sample_y = np.concatenate([infos[r]["sample_y"] for r in ranks]) if labelled else None
    # The source may know the classes of the whole data set; shards only see their own labels.
    n_classes = job.data_info.n_classes or (
        max(infos[r]["n_classes"] for r in ranks) if labelled else None)
    info = DataInfo(n_features=infos[ranks[0]]["d"], n_points=sum(i["n"] for i in infos.values()),
                    n_workers=n_workers, sample=sample, sample_y=sample_y, n_classes=n_classes,
                    sample_sizes=tuple(len(infos[r]["sample"]) for r in ranks),
                    seed=job.seed, dtype=np.dtype(infos[ranks[0]]["dtype"]),
                    base_dir=job.base_dir)
    algorithm = job.make_algorithm()
    watchdog.own_code(type(algorithm))  # the code a stuck master's line names
    theta = algorithm.init_parameter(info)
    if resume is not None:
        theta = resume.master["server"]["theta"]
    clock.mark("theta0")
    agg_layout = Layout.of(zero_aggregator(algorithm, theta, sample[0],
                                           None if sample_y is None else sample_y[0]))
    theta_layout = Layout.of(theta)
    msg.bcast_object(comm, {"theta": theta_layout, "agg": agg_layout,
                            "resume": resume is not None})
    if resume is not None:
        # Points a window carried when the checkpoint was taken: trained once again
        cuts = consistent_cut(resume.workers)
        for r in ranks:
            msg.send_object(comm, {**resume.workers[r], CUT: cuts.get(r)}, dest=r)

    writer = RunWriter(out_dir, job,
                       events_from=None if resume is None else resume.master["events_bytes"])
    saver.writer, saver.algorithm = writer, algorithm
    watchdog.current().stack_to = writer.dir / files.MASTER_STACK  # type: ignore[union-attr]
    progress.name = algorithm.objective_name
    server = Server(MpiTransport(comm, theta_layout, agg_layout), ranks, algorithm, theta,
                    agg_layout.zeros, StopCriteria(**asdict(job.stop)), events=writer.event,
                    progress=progress, trace_points=job.output.trace_points,
                    stall_warning_s=job.runtime.stall_warning_s,
                    stall_timeout_s=timeout)
    server.shard_sizes = {r: infos[r]["n"] for r in ranks}
    server.sample, server.sample_sizes = (sample, sample_y), info.sample_sizes  # FSPV's gauge
    server.where = peers.where()  # host and pid of each worker, for the messages
    budget = job.runtime.exact_budget
    if budget > 0:
        ids = sum(id_checksum(global_ids(r, infos[r]["n"])) for r in ranks) % (1 << 64)
        server.exact = ExactObjective(ranks, info.n_points, ids, budget)
    if job.output.checkpoint is not None:
        server.checkpoint = Checkpointer(
            out_dir, job.output.checkpoint, ranks,
            receive=lambda: msg.received(comm, Tag.CHECKPOINT),
            meta={"job_file": str(job.file)}, events_bytes=writer.events_bytes)
    server.preload()
    saver.server = server
    saver.phase = "compiling their kernels"
    clock.mark("server")
    # Every worker is loaded and warmed up: the clock may start.
    ready = msg.gather_objects(comm, ranks, _watch(comm, timeout, "compiling their kernels"))
    clock.mark("ready")
    choice: BlockChoice | None = None
    seeding = seeds_sizer(job.sync.model) and resume is None
    if (measures_block(job.sync.model, job.sync.options) or seeding) and resume is None:
        size = functools.partial(fixed_block, device=device_of(algorithm))
        choice = choose_block([ready[r][1] for r in ranks], size)
        msg.bcast_object(comm, choice)
        if seeding:
            choice = None  # the workers' sizers took it; FSP has no fixed block
    timings.begin("train_s")
    policy = policy_class(job.sync.model)(server, job.sync.options)
    if choice is not None:
        policy.chose_block(choice)  # type: ignore[attr-defined]
    saver.phase = "training"
    snapshot = None
    if resume is not None:
        snapshot = resume.master
        if server.checkpoint is not None:
            server.checkpoint.resumed(resume.manifest["sequence"], snapshot["elapsed_s"],
                                      snapshot["iteration"])
    # The master's own silence is bounded as a worker's (flegel.runtime.watchdog).
    watchdog.enter("training", server.stall_limit, watchdog.training_keys(timeout),
                   _time_left(job.stop.max_time_s, snapshot))
    with lifetime.deferred():  # a signal stops the loop at a poll, with θ consistent
        # Draining checkpoints and writing the model (the user's finalize) are bounded
        # outside training, from the loop's end: not by max_time_s.
        server.serve(policy, watch=final_checkpoint(server), resume=snapshot,
                     ended=functools.partial(watchdog.enter_phase, SAVING, timeout))
    clock.mark("trained")
    # The trained model first: a failure in the final evaluation must not lose it.
    saver.save_trained(server)
    timings.begin("final_eval_s")
    saver.phase = "evaluating the final θ"
    watchdog.enter_phase(saver.phase, timeout)
    watch = _watch(comm, timeout, saver.phase)
    evaluation = server.final_evaluation(job.output.trace_budget)
    msg.bcast_object(comm, evaluation.thetas, watch=watch)
    # Every worker's end-of-run report (evaluated objectives, totals), in rank order.
    reports = msg.gather_objects(comm, ranks, watch)
    peers.disarm()  # the workers are done: they may exit before the master
    for rank in ranks:
        msg.send_object(comm, "leave", dest=rank)
    results = [reports[r] for r in ranks]
    clock.mark("final_eval")
    timings.ranks = {"0": clock.spans(), **{str(r): reports[r]["startup"] for r in ranks}}
    evaluation.complete([r["snapshots"] for r in results])
    timings.begin("write_s")
    summary = writer.finish(server, policy, algorithm, info, results, infos, evaluation,
                            timings)
    progress.close(server.version, summary["final_objective"], server.train_s)
    # The run directory is written: the master's exit is no death either (without this,
    # ``flegel run`` took it for one and killed the job 7 s later if a worker was still
    # finalizing: rc 9 under load).
    watchdog.finished()
    lifetime.mark_done(comm.rank)
    return summary


#: The master's phase from the end of training's loop until the model is written.
SAVING = "saving the model"


def _time_left(max_time_s: float | None, snapshot: dict[str, Any] | None) -> float | None:
    """``stop.max_time_s`` left to train (a resumed job trained for part of it)."""
    if max_time_s is None or snapshot is None:
        return max_time_s
    return max(max_time_s - float(snapshot["elapsed_s"]), 0.0)


def require_ranks(comm: MPI.Comm) -> None:
    """End this process with one line if its world has no worker: before anything else
    (``flegel run`` calls it before loading the job, as a lone rank would claim, and with
    ``--force`` empty, the run directory of another run)."""
    if comm.size < 2:
        # A task of a several-task srun step alone in its world: srun has no PMI plugin
        # (seen under a real Slurm with --mpi=none), and starting ranks itself is wrong there.
        tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1") or 1)
        raise SystemExit("flegel: needs at least 2 MPI ranks (a master and a worker); " + (
            f"srun started {tasks} tasks but MPI did not join them: start them with "
            "'srun --mpi=pmi2' (see 'srun --mpi=list')" if tasks > 1 else
            "run 'flegel run JOB.yaml' without mpirun to start them itself"))


def run(comm: MPI.Comm, job: Job, out_dir: Path,
        resume: Checkpoint | None = None) -> dict[str, Any] | None:
    """Run ``job`` on ``comm`` (rank 0 master, others workers); the master returns the
    summary.  ``resume`` (the master's): continue from this checkpoint of ``out_dir``."""
    require_ranks(comm)
    lifetime.install(master=comm.rank == 0)
    peers.watch(comm)
    if comm.rank == 0:
        return abort_on_error(comm, run_master, comm, job, out_dir, resume)
    watchdog.install_dump(None, None)  # kill -USR2 PID: the worker's stack on stderr
    abort_on_error(comm, run_worker, comm, job)
    return None
