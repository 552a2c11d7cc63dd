"""An estimator's ``fit`` without MPI, for the checks of its API that fit many times.

:func:`run_job_in_process` stands in for :func:`flegel.estimators.running.run_job` (patch
``flegel.estimators.base.run_job``): the job is written and validated as ``run_job`` does
(:func:`flegel.job.validate.load_job`), its data loaded by the job (``Job.load_shard``: the
``.npy`` files and their content checks), and θ trained by :func:`flegel.local.fit_local`, which
is a one-worker full-batch BSP job minus the messaging (the same store, block loop and stop
criteria).  The run directory holds what the estimator reads back (``job.yaml``, ``model.npz``,
``model.json``, ``summary.json``), through :func:`flegel.rundir.model.read_model`.

A failing fit raises the algorithm's own exception here, where under MPI the launcher turns
it into a built-in type or a ``RuntimeError`` (no check's status differs: all 55 of the CNN's
read the same both ways, issue 19's review).

Only for scikit-learn's estimator checks (parameters, clone, pickle, dtypes, shapes, errors):
each real fit is an MPI job of 1-3 s, ~50 of them in ``check_estimator``.  Every estimator
keeps its real ``mpirun`` fits in tests/test_estimators.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from flegel.job.validate import load_job
from flegel.local import fit_local
from flegel.rundir import files
from flegel.rundir.model import SavedModel, read_model
from flegel.rundir.writer import write_json_atomic, write_model


def _refuse_what_fit_local_does_not_compute(job: Any, n_points: int) -> None:
    """Raise where the job asks for what :func:`flegel.local.fit_local` would not compute as
    a one-worker full-batch BSP run does: the fit would then not be the same fit."""
    refused = {
        "workers != 1": job.workers != 1,
        "sync other than full-batch bsp": not (job.sync.model == "bsp"
                                               and job.sync.options.get("batch") == "full"),
        "stop.target_objective": job.stop.target_objective is not None,
        "stop.max_time_s": job.stop.max_time_s is not None,
        "stragglers": bool(job.stragglers),
        "output.checkpoint": job.output.checkpoint is not None,
        # the master's data sample (e.g. an "auto" input scale) differs beyond it
        "more points than runtime.sample_size": n_points > job.runtime.sample_size,
    }
    asked = [k for k, v in refused.items() if v]
    if asked:
        raise ValueError(f"run_job_in_process: not a fit fit_local computes ({', '.join(asked)})")


def run_job_in_process(doc: dict[str, Any], X: np.ndarray, y: np.ndarray | None = None,
                       out: Any = None, import_root: Any = None, job_dir: Any = None,
                       verbose: int = 0) -> SavedModel:
    """:func:`flegel.estimators.running.run_job` for a one-worker full-batch BSP job, in
    this process (see the module's docstring)."""
    run_dir = Path(tempfile.mkdtemp(prefix="inprocess-", dir=out))
    inputs = run_dir / files.FIT_INPUTS
    inputs.mkdir()
    np.save(inputs / files.FIT_X, np.ascontiguousarray(X))
    data: dict[str, Any] = {"path": str(inputs / files.FIT_X)}
    if y is not None:
        np.save(inputs / files.FIT_Y, np.ascontiguousarray(y))
        data["label_path"] = str(inputs / files.FIT_Y)
    job_file = inputs / files.JOB
    job_file.write_text(yaml.safe_dump({**doc, "data": data}, sort_keys=False))
    job = load_job(job_file)
    x, labels = job.load_shard(0, 1)
    _refuse_what_fit_local_does_not_compute(job, len(x))
    algorithm = job.make_algorithm()
    result = fit_local(algorithm, x, labels, seed=job.seed,
                       max_iterations=job.stop.max_iterations or 10**9,
                       tolerance=job.stop.tolerance)
    # As the run writer saves it: the finalized θ, so the fitted estimator is an MPI fit's.
    write_model(run_dir, job, algorithm, result.theta_, result.n_iter_,
                final_objective=result.objective_)
    write_json_atomic(run_dir / files.SUMMARY, {
        "algorithm": job.algorithm, "workers": 1, "n_points": len(x), "n_features": x.shape[1],
        "iterations": result.n_iter_, "final_objective": result.objective_,
        "converged": result.converged_,
        "stop_reason": "converged" if result.converged_ else "max_iterations"})
    (run_dir / files.JOB).write_text(yaml.safe_dump(job.doc, sort_keys=False))
    for f in inputs.iterdir():
        f.unlink()
    inputs.rmdir()
    return read_model(run_dir)
