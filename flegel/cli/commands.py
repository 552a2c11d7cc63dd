"""The ``flegel`` command: run, validate (and compare, report, paper when installed).

``flegel run JOB.yaml`` under ``mpirun -n N+1`` uses the world it is given; without mpirun it
validates the job, then starts ``workers + 1`` ranks itself with the bundled MPI.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from flegel import __version__
from flegel.cli.launch import launch, under_mpi
from flegel.job.errors import JobError
from flegel.job.job import Job
from flegel.job.validate import load_job
from flegel.rundir import files
from flegel.runtime.lifetime import mark_started
from flegel.runtime.timings import say_importing

EXIT_BAD_JOB = 2


def _parser(extras: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flegel", description=(
        "Distributed iterative ML that stays fast when some workers are slow."))
    p.add_argument("--version", action="version", version=f"flegel {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def job_args(sp: argparse.ArgumentParser, optional: bool = False) -> None:
        sp.add_argument("job", help="job YAML file", nargs="?" if optional else None)
        sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a job key (repeatable), e.g. --set sync.model=bsp")

    r = sub.add_parser("run", help="train a job")
    job_args(r, optional=True)
    r.add_argument("--resume", metavar="RUN_DIR", help=(
        "continue the run in RUN_DIR from its checkpoint (output.checkpoint): the same job "
        f"(RUN_DIR/{files.JOB}), the same number of workers; --set may change stop.* keys"))
    r.add_argument("--out", help="run directory (default: output.dir/<name>-<sync>-<time>)")
    r.add_argument("--force", action="store_true",
                   help="let --out overwrite an existing run directory")
    v = sub.add_parser("validate", help=(
        "check a job file without running it: keys, the algorithm (its module is imported, "
        "so its top-level code runs) and the data's shape"), description=(
        "Check a job without running it.  The algorithm's module is imported (its top-level "
        "code runs, as it will on every rank) and the class is checked for the API; the data "
        "files' headers and shapes are read.  --data also loads every shard, as the workers "
        "will, and checks the values."))
    job_args(v)
    v.add_argument("--data", action="store_true", help=(
        "also load the data, one worker's shard at a time, and check every value: NaN or "
        "inf, non-numeric cells, malformed lines, labels or negative values the algorithm "
        "does not take"))
    for name, module in _EXTRA_COMMANDS.items() if extras else ():
        try:
            mod = __import__(module, fromlist=["add_parser"])
        except ImportError:
            continue
        mod.add_parser(sub, name)
    return p


#: Further sub-commands, each a module with ``add_parser(sub, name)`` and ``main(args)``.
_EXTRA_COMMANDS = {"compare": "flegel.cli.compare", "report": "flegel.cli.report",
                   "paper": "flegel.cli.paper"}


def _error(exc: Exception) -> int:
    sys.stderr.write(f"flegel: error: {exc}\n")
    return EXIT_BAD_JOB


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        job = load_job(args.job, args.set)
        checked = job.check_data() if args.data else None
    except JobError as exc:
        return _error(exc)
    info = job.data_info
    values = "" if checked is None else f", {checked} rows of values checked"
    print(f"{job.file}: ok ({job.algorithm}, sync {job.sync.model}, "
          f"{job.workers} workers, data {info.n_rows} x {info.n_features}{values})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from flegel.cli.resume import resumed_job
    from flegel.rundir import checkpoint
    from flegel.rundir.writer import RunDirError, claim_run_dir, default_run_dir

    if (args.job is None) == (args.resume is None):
        return _error(ValueError("run: expected a job file or --resume RUN_DIR (one of them)"))
    if args.resume is not None and (args.out or args.force):
        return _error(ValueError("run --resume: the run continues in RUN_DIR; --out and "
                                 "--force do not apply"))
    if not under_mpi() and args.resume is not None:
        try:
            job = resumed_job(Path(args.resume), args.set)
        except (JobError, checkpoint.CheckpointError) as exc:
            return _error(exc)
        argv = ["run", "--resume", str(Path(args.resume).resolve())]
        for s in args.set:
            argv += ["--set", s]
        return launch(job.workers + 1, argv, finish_s=job.runtime.finish_timeout_s)
    if not under_mpi():
        try:
            job = load_job(args.job, args.set)
            if args.out:
                claim_run_dir(Path(args.out), args.force)
            out = Path(args.out) if args.out else default_run_dir(job)
        except (JobError, RunDirError) as exc:
            return _error(exc)
        # --force: the directory was claimed here; the ranks must not refuse it again.
        argv = ["run", str(job.file), "--out", str(out), "--force"]
        for s in args.set:
            argv += ["--set", s]
        return launch(job.workers + 1, argv, job.output.progress,
                      finish_s=job.runtime.finish_timeout_s)

    # Rank 0 says what the next second or so goes to (flegel.runtime.timings).
    mark_started()  # flegel runs in this rank: its exit from now on is no failed start
    say_importing(os.environ.get("PMI_RANK"))
    from mpi4py import MPI

    from flegel.run import require_ranks, run
    from flegel.runtime.agreement import Rejected, agreed

    comm = MPI.COMM_WORLD
    require_ranks(comm)  # a lone rank must not claim (or, with --force, empty) --out
    resumed: list[checkpoint.Checkpoint] = []

    def prepare() -> Job:
        workers = max(comm.size - 1, 1)
        if args.resume is not None:
            # The checkpoint (every file checked) is the master's to send out.
            job = resumed_job(Path(args.resume), args.set, workers)
            if comm.rank == 0:
                resumed.append(checkpoint.load(Path(args.resume), workers))
            return job
        job = load_job(args.job, args.set, workers=workers)
        if comm.rank == 0 and args.out:
            claim_run_dir(Path(args.out), args.force)
        return job

    try:
        # Ranks may see different file systems on a cluster: agree before any work, so a
        # rank that cannot run stops everyone with one message.
        job = agreed(comm, (JobError, RunDirError, checkpoint.CheckpointError), prepare)
        if comm.rank != 0:
            run(comm, job, Path("."))
            _end_rank(MPI)
        if args.resume is not None:
            out = Path(args.resume)
        else:
            out = Path(args.out) if args.out else default_run_dir(job)
        summary = run(comm, job, out, resumed[0] if resumed else None)
    except Rejected:  # rank 0 has printed why (bad data found by a worker at load, ...)
        from flegel.runtime.lifetime import agreed_end

        agreed_end(comm.rank, EXIT_BAD_JOB)  # no rank's exit is then taken for a death
        # As a finished rank ends: its finalizing marker tells flegel run it is past its
        # exit handlers (runtime.finish_timeout_s runs from rank 0's done marker).
        _end_rank(MPI, EXIT_BAD_JOB)
    assert summary is not None  # the master returns the summary
    print(f"run directory: {out}")
    brief = {k: summary[k] for k in ("iterations", "final_objective", "wall_time_s",
                                     "converged", "stop_reason")}
    print(json.dumps(brief))
    if not summary["converged"] and summary["stop_reason"] in ("max_iterations", "max_time"):
        # Said as scikit-learn's ConvergenceWarning says it for an estimator (issue 22).
        tol = job.params.get("tol", job.stop.tolerance)
        if tol is not None or job.stop.target_objective is not None:
            limit = ("stop.max_iterations" if summary["stop_reason"] == "max_iterations"
                     else "stop.max_time_s")
            print(f"flegel: warning: the run ended at {limit} without meeting its tolerance "
                  "(not converged)", file=sys.stderr)
    _end_rank(MPI)
    return 0  # not reached


def _stop_flegel_threads(timeout: float = 0.5) -> None:
    """Stop and join (``timeout`` seconds in all) this rank's flegel daemon threads: the peer
    watch (:func:`flegel.runtime.peers.close`), the master's watchdog
    (:func:`flegel.runtime.watchdog.finished`) and any other named ``flegel-*``, and ignore
    the stack-dump signal: no Python thread may start or end beside ``MPI_Finalize`` and C's
    exit handlers, and no signal may walk their thread states there (a rank segfaulted in
    ``exit()``, 3 runs in 180: :func:`flegel.runtime.watchdog.uninstall_dump`)."""
    import time

    from flegel.runtime import peers, watchdog

    end = time.monotonic() + timeout
    watchdog.uninstall_dump()
    peers.close(timeout)
    watchdog.finished()
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and thread.name.startswith("flegel-"):
            thread.join(max(0.0, end - time.monotonic()))


def _end_rank(mpi: Any, code: int = 0) -> NoReturn:
    """End a rank whose work is done (everything written and closed) with exit status
    ``code`` (0; 2 for a job every rank refused before any work).

    Non-daemon threads are joined, the exit handlers run and MPI is finalized, then the
    process exits through C's ``exit`` (:func:`flegel.runtime.lifetime.c_exit`: MPICH's
    own exit handlers must run) without Python's teardown of its modules: with numba, LLVM and SciPy
    loaded that took 0.3-0.4 s of CPU per rank, 1-3 s of wall time with five ranks on two
    shared cores (issue 14).  Files an algorithm leaves open are not flushed: close them
    (flegel closes its own).
    """
    for thread in threading.enumerate():  # as Python's own exit does: threads end first
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    _stop_flegel_threads()
    from flegel.runtime.lifetime import c_exit, mark_finalizing, outlive_parent

    outlive_parent()
    # MPI_Finalize holds the GIL: a Python handler could not run there, and a rank stuck in
    # it would outlive its job.  The work is done, so a signal just ends the process.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # flegel run names a rank stuck before, in or after MPI_Finalize; one whose MPI is
    # finalized already is past it too.
    mark_finalizing()
    if not mpi.Is_finalized():
        from flegel.protocol import Tag
        from flegel.runtime.comm import drop_unreceived

        # A message never received (a pause signal crossing the stop) would fail this
        # rank's MPI_Finalize and leave the others waiting in theirs for ever.
        lost = [(src, tag) for src, tag in drop_unreceived(mpi.COMM_WORLD)
                if tag != Tag.SIGNAL]
        if lost:  # a signal crossing the stop is expected; anything else is worth a line
            print(f"flegel: warning: rank {mpi.COMM_WORLD.Get_rank()} dropped unreceived "
                  f"message(s) at its end (source, tag): {lost}", file=sys.stderr, flush=True)
        mpi.Finalize()
    c_exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `run` and `validate` need no other command's parser: every rank of a job parses its
    # arguments, and importing the other commands' modules costs each one (issue 23).
    core = bool(argv) and argv[0] in ("run", "validate")
    args = _parser(extras=not core).parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "validate":
        return cmd_validate(args)
    mod = __import__(_EXTRA_COMMANDS[args.command], fromlist=["main"])
    return int(mod.main(args) or 0)
