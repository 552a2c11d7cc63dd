"""Checking a whole job before any MPI work: :func:`validate` and :func:`load_job`.

Each section is checked against its declarations (:mod:`flegel.job.sections`), then what no
single key can say: that the job can stop, that the stragglers name existing workers, that
the algorithm takes its ``params`` and the data, that ``test_data`` has ``data``'s features.
The first problem found is raised as a :class:`~flegel.job.errors.JobError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flegel import sync as sync_models
from flegel.job.algorithms import resolve_algorithm
from flegel.job.errors import JobError, check_in
from flegel.job.job import Job
from flegel.job.overrides import apply_overrides
from flegel.job.sections import (
    DEFAULT_SYNC_MODEL,
    SECTIONS,
    STRAGGLER_COMMON,
    TOP,
    expand_preset,
    straggler_keys,
    sync_keys,
)
from flegel.job.yaml_file import load_yaml
from flegel.rundir import checkpoint
from flegel.runtime.stragglers import parse_workers
from flegel.validation import SchemaError

if TYPE_CHECKING:
    from flegel.data import SourceInfo


def validate(doc: dict[str, Any], file: Path, workers: int | None = None) -> Job:
    """Check a whole job; return it resolved, or raise :class:`JobError`.

    Parameters
    ----------
    doc : dict
        The job as loaded (and overridden).
    file : Path
        The job file: named in messages; relative paths are relative to its folder.
    workers : int or None
        Overrides the job's worker count (the world size under ``mpirun``).

    Returns
    -------
    Job
        The job with every default filled in, typed.
    """
    resolved = _resolve(doc, file, workers)
    name, params = resolved["algorithm"], resolved["params"]
    try:
        cls = resolve_algorithm(name, file.parent)
    except LookupError as exc:
        raise JobError(file, "algorithm", "", detail=str(exc)) from None
    try:
        algo = cls(**params)
        algo.validate(file.parent)
    except (TypeError, ValueError) as exc:
        raise JobError(file, _params_key(params, exc), "",
                       detail=f"{name}: {exc}") from None
    info = _validate_data(file, "data", resolved["data"], file.parent, resolved["workers"])
    if getattr(cls, "needs_labels", False) and not info.has_labels:
        raise JobError(file, "data", "", detail=(
            f"algorithm {name!r} needs labelled data, but the data have no labels "
            "(set data.label_column, or use a labelled synthetic kind)"))
    job = Job.of(file, resolved, cls, info)
    migration = job.sync.options.get("migration") or {}
    if migration.get("mode", "off") != "off":
        _check_movable_state(file, name, algo, info.n_features)
    if job.test_data is not None:
        test = _validate_data(file, "test_data", job.test_data, file.parent, 1)
        if test.n_features != info.n_features:
            raise JobError(file, "test_data", f"{info.n_features} features like data",
                           f"{test.n_features} features")
    return job


def _resolve(doc: dict[str, Any], file: Path, workers: int | None) -> dict[str, Any]:
    """Every key of ``doc`` checked against its declaration, defaults filled in (the
    mapping ``job.yaml`` holds); the algorithm and the data are checked by the caller."""
    out = check_in(file, "", doc, TOP)
    if workers is not None:
        out["workers"] = workers
    out["params"] = out["params"] or {}
    for section, keys in SECTIONS.items():
        out[section] = check_in(file, section, out[section], keys)
    output, stop = out["output"], out["stop"]
    if output["checkpoint"] is not None:
        ck = check_in(file, "output.checkpoint", output["checkpoint"], checkpoint.KEYS)
        problem = checkpoint.check_options(ck)
        if problem is not None:
            raise JobError(file, f"output.checkpoint.{problem[0]}", problem[1],
                           ck[problem[0]])
        output["checkpoint"] = ck
    # One rule for every path key: relative to the job file's folder, as data.path is.
    output["dir"] = str(file.parent / Path(output["dir"]).expanduser())
    _check_can_stop(file, stop)
    out["sync"] = _validate_sync(file, out["sync"])
    out["stragglers"] = _validate_stragglers(file, out["stragglers"], out["workers"])
    if output["trace_points"] is None:
        # The exact trace costs one evaluation pass per snapshot after training; it is what
        # time to target is measured on, so take it by default only when there is a target.
        output["trace_points"] = 50 if stop["target_objective"] is not None else 0
    if output["trace_budget"] is None and stop["target_objective"] is None:
        # Without a target the trace only draws: the share exact evaluations may take during
        # training, once more after it (issue 14).
        output["trace_budget"] = out["runtime"]["exact_budget"]
    return out


#: The stop keys that end every job that sets one (a target may never be reached).
ENDING_STOP_KEYS = ("max_iterations", "max_time_s", "tolerance")


def _check_can_stop(file: Path, stop: dict[str, Any]) -> None:
    """Refuse a job that may run forever: none of :data:`ENDING_STOP_KEYS` set."""
    if any(stop[k] is not None for k in ENDING_STOP_KEYS):
        return
    given = [f"{k}: {stop[k]!r}" for k in stop if stop[k] is not None]
    found = ("only " + ", ".join(given)) if given else "every stop key null"
    raise JobError(file, "stop", "", detail=(
        "expected at least one of " + ", ".join(f"stop.{k}" for k in ENDING_STOP_KEYS)
        + " (without one the job may never end; a target may never be reached), found "
        + found))


def _check_movable_state(file: Path, name: str, algo: Any, n_features: int) -> None:
    """Migration moves each point's state with it: the state must be arrays over points."""
    state = algo.init_state(2, n_features)
    bad = [k for k, v in (state.items() if isinstance(state, dict) else [("(state)", state)])
           if not (isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == 2)]
    if bad or not isinstance(state, dict):
        raise JobError(file, "sync.migration.mode", "", detail=(
            f"algorithm {name!r} keeps per-point state that cannot move with its points "
            f"({', '.join(map(str, bad))}: init_state(n, d) must return a dict of arrays "
            "whose first dimension is n); set sync.migration.mode: off"))


def load_job(path: str | Path, sets: list[str] | None = None,
             workers: int | None = None) -> Job:
    """Load, override and validate a job file."""
    file = Path(path).expanduser().resolve() if Path(path).exists() else Path(path)
    doc = load_yaml(file)
    doc = apply_overrides(doc, list(sets or []), file)
    return validate(doc, file, workers)


def _params_key(params: dict[str, Any], exc: Exception) -> str:
    """The job key an algorithm's error is about: ``params.<name>`` when the error carries
    the name of one of the job's parameters (a :class:`flegel.validation.ParameterError`,
    from the algorithm's declared ``PARAMS``), else ``params``."""
    key = exc.key if isinstance(exc, SchemaError) else None
    return f"params.{key}" if key in params else "params"


def _sync_class(file: Path, model: Any) -> type:
    if model not in sync_models.available():
        raise JobError(file, "sync.model", "one of " + ", ".join(
            sync_models.available() + list(sync_models.PRESETS)), model)
    return sync_models.policy_class(model)


def _validate_sync(file: Path, given: Any) -> dict[str, Any]:
    if given is not None and not isinstance(given, dict):
        raise JobError(file, "sync", "a mapping with 'model'", given)
    given = expand_preset({"model": DEFAULT_SYNC_MODEL} if given is None else dict(given))
    cls = _sync_class(file, given.get("model", DEFAULT_SYNC_MODEL))
    out = check_in(file, "sync", given, sync_keys(cls))
    # A model's nested sections (FSP's ``migration``) are declared as Keys of their own.
    for name, keys in getattr(cls, "SUBSECTIONS", {}).items():
        out[name] = check_in(file, f"sync.{name}", out[name], keys)
    check = getattr(cls, "check_options", None)
    if check is not None:
        problem = check(out)
        if problem is not None:
            key, expected = problem
            raise JobError(file, f"sync.{key}", expected, out.get(key))
    return out


def _validate_stragglers(file: Path, given: Any, workers: int) -> list[dict[str, Any]]:
    out = []
    for i, spec in enumerate(given or []):
        prefix = f"stragglers[{i}]"
        if not isinstance(spec, dict):
            raise JobError(file, prefix, "a mapping with 'pattern' and 'workers'", spec)
        pattern = spec.get("pattern")
        if not STRAGGLER_COMMON["pattern"].check(pattern):
            raise JobError(file, f"{prefix}.pattern", STRAGGLER_COMMON["pattern"].expected,
                           pattern)
        entry = check_in(file, prefix, spec, straggler_keys(str(pattern)))
        ranks = parse_workers(entry["workers"])
        if any(not 1 <= r <= workers for r in ranks):
            raise JobError(file, f"{prefix}.workers", f"worker ranks between 1 and {workers}",
                           entry["workers"])
        out.append(entry)
    return out


def _validate_data(file: Path, key: str, spec: dict[str, Any], base_dir: Path,
                   workers: int) -> SourceInfo:
    from flegel.data import DataError, inspect_source

    try:
        info = inspect_source(spec, base_dir, key=key)
    except DataError as exc:
        raise JobError(file, key, "", detail=str(exc)) from None
    if info.n_rows < workers:
        raise JobError(file, key, "", detail=(
            f"the data have {info.n_rows} rows, fewer than the {workers} workers"))
    return info
