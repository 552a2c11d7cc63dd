"""The ``flegel`` command: run, validate (and compare, report when installed).

``flegel run JOB.yaml`` under ``mpirun -n N+1`` uses the world it is given; without mpirun it
validates the job, then starts ``workers + 1`` ranks itself with the bundled MPI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flegel.config import JobError, load_job
from flegel.launch import launch, under_mpi

EXIT_BAD_JOB = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flegel", description=(
        "Distributed iterative ML that stays fast when some workers are slow."))
    sub = p.add_subparsers(dest="command", required=True)

    def job_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("job", help="job YAML file")
        sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a job key (repeatable), e.g. --set sync.model=bsp")

    r = sub.add_parser("run", help="train a job")
    job_args(r)
    r.add_argument("--out", help="run directory (default: output.dir/<name>-<sync>-<time>)")
    v = sub.add_parser("validate", help="check a job file without running it")
    job_args(v)
    for name, module in _EXTRA_COMMANDS.items():
        try:
            mod = __import__(module, fromlist=["add_parser"])
        except ImportError:
            continue
        mod.add_parser(sub, name)
    return p


#: Further sub-commands, each a module with ``add_parser(sub, name)`` and ``main(args)``.
_EXTRA_COMMANDS = {"compare": "flegel.compare", "report": "flegel.report"}


def _error(exc: Exception) -> int:
    sys.stderr.write(f"flegel: error: {exc}\n")
    return EXIT_BAD_JOB


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        job = load_job(args.job, args.set)
    except JobError as exc:
        return _error(exc)
    info = job.data_info
    print(f"{job.file}: ok ({job['algorithm']}, sync {job['sync']['model']}, "
          f"{job['workers']} workers, data {info.n_rows} x {info.n_features})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from flegel.output import default_run_dir

    if not under_mpi():
        try:
            job = load_job(args.job, args.set)
        except JobError as exc:
            return _error(exc)
        out = Path(args.out) if args.out else default_run_dir(job)
        argv = ["run", str(job.file), "--out", str(out)]
        for s in args.set:
            argv += ["--set", s]
        return launch(job["workers"] + 1, argv)

    from mpi4py import MPI

    from flegel.run import run

    comm = MPI.COMM_WORLD
    error: JobError | None = None
    try:
        job = load_job(args.job, args.set, workers=max(comm.size - 1, 1))
    except JobError as exc:
        error = exc
    # Ranks may see different file systems on a cluster: agree before any work, so a rank
    # that cannot run stops everyone (a brief collective at start-up, before any waiting).
    failed = comm.allgather(error is not None)
    if any(failed):
        if comm.rank == failed.index(True):
            where = "" if comm.rank == 0 else f"(on rank {comm.rank}) "
            sys.stderr.write(f"flegel: error: {where}{error}\n")
        return EXIT_BAD_JOB
    if comm.rank == 0:
        out = Path(args.out) if args.out else default_run_dir(job)
        summary = run(comm, job, out)
        assert summary is not None  # the master returns the summary
        print(f"run directory: {out}")
        brief = {k: summary[k] for k in ("iterations", "final_objective", "wall_time_s",
                                         "converged", "stop_reason")}
        print(json.dumps(brief))
    else:
        run(comm, job, Path("."))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "validate":
        return cmd_validate(args)
    mod = __import__(_EXTRA_COMMANDS[args.command], fromlist=["main"])
    return int(mod.main(args) or 0)
