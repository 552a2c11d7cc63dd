"""What ``flegel run --resume RUN_DIR`` starts from: the run's own job, checked against its
checkpoint (:mod:`flegel.rundir.checkpoint`)."""

from __future__ import annotations

from pathlib import Path

from flegel.job.job import Job
from flegel.job.overrides import apply_overrides
from flegel.job.validate import validate
from flegel.job.yaml_file import load_yaml
from flegel.rundir import files
from flegel.rundir.checkpoint import CheckpointError, read_manifest

#: Keys a resumed job may change with ``--set``: when it stops and what it shows, never
#: what it computes.
RESUME_SETTABLE = ("stop.", "output.progress", "runtime.stall_warning_s",
                   "runtime.stall_timeout_s", "runtime.finish_timeout_s")


def resumed_job(run_dir: Path, sets: list[str], workers: int | None = None) -> Job:
    """The job of ``run_dir`` (its ``job.yaml``), resolved against the folder of the job
    file it came from (relative data paths), with ``sets`` applied.

    Raises
    ------
    CheckpointError
        Not a run directory, no usable checkpoint, or a ``--set`` that would change what the
        job computes.
    """
    run_dir = Path(run_dir)
    job_yaml = run_dir / files.JOB
    if not job_yaml.is_file():
        raise CheckpointError(f"--resume {run_dir}: expected a run directory with {files.JOB}, "
                              f"found {'no such directory' if not run_dir.is_dir() else 'none'}")
    manifest = read_manifest(run_dir)
    for s in sets:
        if not s.startswith(RESUME_SETTABLE):
            raise CheckpointError(f"--resume {run_dir}: --set {s}: expected a key under "
                                  f"{', '.join(RESUME_SETTABLE)} (a resumed job computes "
                                  "what it computed before)")
    origin = Path(manifest.get("job_file") or job_yaml)
    doc = apply_overrides(load_yaml(job_yaml), list(sets), job_yaml)
    job = validate(doc, origin, workers)
    read_manifest(run_dir, job.workers)
    return job
