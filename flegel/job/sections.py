"""The job's sections: every key of a job file, declared once, and the typed records of the
sections a run reads.

The top level (:data:`TOP`), ``stop`` (:data:`STOP`), ``output`` (:data:`OUTPUT`) and
``runtime`` (:data:`RUNTIME`) are declared here; the keys of ``sync`` are each model's
``OPTIONS`` (:func:`sync_keys`), those of ``stragglers`` each pattern's
(:func:`straggler_keys`, from :mod:`flegel.runtime.stragglers`), those of
``output.checkpoint`` :data:`flegel.rundir.checkpoint.KEYS`, and those of ``data``
:mod:`flegel.data.keys`.  Validation, ``--set`` and the job reference all read these.

:class:`Stop`, :class:`Output`, :class:`Runtime` and :class:`Sync` are the sections once
validated, as the run reads them (``job.stop.max_time_s``); their fields are the declared
keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flegel import sync as sync_models
from flegel import validation
from flegel.job.algorithms import BUILTIN_ALGORITHMS
from flegel.runtime.limits import (
    AUTO,
    MAX_TIME_GRACE_S,
    STALL_FACTOR,
    STALL_FLOOR_S,
    STALL_UNMEASURED_S,
)
from flegel.runtime.stragglers import COMMON_KEYS as STRAGGLER_COMMON
from flegel.runtime.stragglers import PATTERN_KEYS as STRAGGLER_KEYS
from flegel.validation import Key

#: The synchronization model of a job that names none (and of an empty ``sync`` section).
DEFAULT_SYNC_MODEL = "bsp"

TOP: dict[str, Key] = {
    "name": Key(validation.Described(
        validation.optional(validation.is_plain_name),
        "a name without '/', '\\' or '..' (it names the run's directory inside output.dir), or "
        "null"), None,
                "a name for the run (shown in reports; defaults to the file name)"),
    "algorithm": validation.text(
        "a built-in algorithm or your own 'package.module:Class' (looked up on sys.path, then "
        "beside the job file; `flegel validate` imports the module, running its top-level "
        "code, and checks the class has the API)",
        expected="a built-in name (" + ", ".join(BUILTIN_ALGORITHMS)
        + ") or 'package.module:Class'"),
    "params": validation.mapping("keyword arguments of the algorithm's constructor (see below)",
                                 None, null=True, expected="a mapping of algorithm parameters"),
    "data": validation.mapping("the training data: a file or a synthetic generator (see below)",
                               expected="a mapping (source: synthetic, or path: FILE)"),
    "test_data": validation.mapping("held-out data with the keys of `data`, evaluated after "
                                    "training (same number of features)", None, null=True,
                                    expected="a mapping like data"),
    "workers": validation.integer("number of worker processes (MPI ranks 1..workers; rank 0 is "
                                  "the master); under mpirun, the world size minus one", 2, lo=1),
    "seed": validation.integer("seed of the algorithm's initialization and of straggler "
                               "randomness", 0),
    "sync": validation.mapping("the synchronization model and its options (see below)", None,
                               null=True, expected="a mapping with 'model'"),
    "stop": validation.mapping("when training stops (see below)", None, null=True),
    "output": validation.mapping("where results go and what is shown (see below)", None,
                                 null=True),
    "stragglers": Key(validation.Described(validation.optional(validation.is_list),
                                           "a list of straggler patterns"), None,
                      "patterns that slow some workers down (see below)"),
    "runtime": validation.mapping("runtime tuning (see below)", None, null=True),
}

STOP: dict[str, Key] = {
    "max_iterations": validation.integer("stop after this many iterations (barriers, or pushes "
                                         "per worker for asynchronous models)", 100, lo=1,
                                         null=True),
    "target_objective": validation.number("stop once the online objective is at or below this",
                                          None, null=True),
    "tolerance": validation.number("stop when the relative objective change between two checks "
                                   "(one more full pass by every worker) is below this", 1e-4,
                                   lo=0, null=True),
    "max_time_s": validation.number(
        "stop after this many seconds of training; it bounds the whole training: a worker "
        f"that has not answered {MAX_TIME_GRACE_S:g} s plus one of its blocks after it ends "
        "the job (exit code 3, last θ saved)", None, lo=0, lo_open=True, null=True),
}

OUTPUT: dict[str, Key] = {
    "dir": validation.text("folder under which each run gets its own directory (relative paths "
                           "are relative to the job file's folder)", "runs",
                           expected="a folder path"),
    "progress": validation.choice("progress display: a live line, plain log lines, or nothing",
                                  ("auto", "plain", "none"), "auto"),
    "save_model": validation.boolean("write model.npz and model.json", True),
    "trace_points": validation.integer(
        "θ snapshots kept for the exact objective trace and time to target; those not "
        "evaluated exactly during the run are evaluated after it, within "
        "output.trace_budget; null: 50 when a target objective is set, else 0", None, lo=0,
        null=True),
    "trace_budget": validation.number(
        "share of training time the trace's θ snapshots may cost to evaluate after training "
        "(estimated; an evenly spread subset is evaluated and the rest named in summary.json "
        "final_evaluation.dropped_s; the final θ is always evaluated); null: every snapshot "
        "when a target objective is set (time to target is measured on them), else "
        "runtime.exact_budget", None, lo=0, null=True),
    "checkpoint": validation.mapping("write checkpoints into the run directory, which `flegel run "
                                     "--resume RUN_DIR` continues from (keys in the table "
                                     "`output.checkpoint` below); null: none", None, null=True),
}

RUNTIME: dict[str, Key] = {
    "block_ms": validation.number("least duration of one block of points, between polls for "
                                  "the master's signals; longer (up to 50 ms on the CPU, 250 ms "
                                  "on a GPU) when a kernel call's fixed cost would take over 15% "
                                  "of it", 1.0, lo=0, lo_open=True, unit="milliseconds"),
    "threads": validation.integer("BLAS/numba threads per rank", 1, lo=1),
    "sample_size": validation.integer("rows sampled from the data for the algorithm's "
                                      "initialization (info.sample)", 10_000, lo=1),
    "stall_warning_s": validation.number(
        "warn when a worker has not reported for this long while others wait (or for over "
        "twice its last iteration), again at every multiple", 10.0, lo=0, lo_open=True,
        unit="seconds"),
    "stall_timeout_s": Key(
        validation.Described(
            validation.optional(validation.any_of(validation.is_num(lo=0, lo_open=True),
                                                  validation.one_of(AUTO))),
            f"a positive number of seconds, '{AUTO}' or null"), AUTO,
        "end the job (exit code 3, last θ saved) when a worker has not reported for this "
        "long; it bounds one worker iteration (a full pass under BSP full batch), and "
        "loading, compiling and the final evaluation with at least 60 s; "
        f"{AUTO}: {STALL_FACTOR:g} times the slowest iteration seen so far, at least "
        f"{STALL_FLOOR_S:g} s ({STALL_UNMEASURED_S:g} s before the first iteration and "
        "outside training); null: never"),
    "exact_budget": validation.number(
        "share of training time the workers may spend evaluating the exact objective of θ "
        "snapshots on all the data during the run (the progress line, the exact trace and "
        "the target stop use it); with stop.target_objective, once the online objective "
        "reached it, one evaluation at once and then up to the larger of this and 25% of the "
        "training time after that one (the run is about to end); "
        "0: never, and stop.target_objective is then met on the online objective", 0.05,
        lo=0, hi=0.5),
    "finish_timeout_s": validation.number(
        "seconds the job may run on once the master has written the run directory (flegel "
        "run launching MPI itself): exit handlers and non-daemon threads (a wandb flush, a "
        "model upload) must end within it; the ranks still running then are killed, and a "
        "rank killed before MPI_Finalize makes the exit code 3", 10.0, lo=0, lo_open=True,
        unit="seconds"),
}

#: The sections checked by :func:`flegel.validation.check_section` directly.
SECTIONS: dict[str, dict[str, Key]] = {"stop": STOP, "output": OUTPUT, "runtime": RUNTIME}


def model_key() -> Key:
    """The key ``sync.model``: an installed model or a preset (:data:`flegel.sync.PRESETS`)."""
    names = sync_models.available() + list(sync_models.PRESETS)
    return validation.choice("the synchronization model, or a preset standing for a model and "
                             "options", names, DEFAULT_SYNC_MODEL,
                             expected="one of " + ", ".join(names))


def sync_keys(cls: type) -> dict[str, Key]:
    """The keys of a ``sync`` section for the policy class ``cls``.

    Parameters
    ----------
    cls : type
        A master policy class; its ``OPTIONS`` maps option names to :class:`Key`.

    Returns
    -------
    dict of str to Key
        ``model`` followed by the model's options.
    """
    options: dict[str, Key] = getattr(cls, "OPTIONS", {})
    return {"model": model_key(), **options}


def expand_preset(given: dict[str, Any]) -> dict[str, Any]:
    """A ``sync`` section with its preset (``model: fspv``) replaced by what it stands for.

    Keys given beside a preset override the preset's; nested sections merge key by key
    (``fspv-sync`` plus ``migration.window`` keeps the preset's mode).  A section naming a
    model, not a preset, is returned as it is.
    """
    model = given.get("model", DEFAULT_SYNC_MODEL)
    if isinstance(model, str) and model in sync_models.PRESETS:
        out = dict(sync_models.PRESETS[model])
        for k, v in given.items():
            if k == "model":
                continue
            both = isinstance(v, dict) and isinstance(out.get(k), dict)
            out[k] = {**out[k], **v} if both else v
        return out
    return given


def straggler_keys(pattern: str) -> dict[str, Key]:
    """The keys of a ``stragglers`` entry of ``pattern``: the common keys, then its options.

    Parameters
    ----------
    pattern : str
        A key of :data:`flegel.runtime.stragglers.PATTERN_KEYS`.

    Returns
    -------
    dict of str to Key
        ``pattern``, ``workers`` and the pattern's options.
    """
    return {**STRAGGLER_COMMON, **STRAGGLER_KEYS[pattern]}


# --------------------------------------------------------------------------- typed sections
@dataclass(frozen=True)
class Stop:
    """``stop``, validated: when training stops (:data:`STOP`; FSP paper Section 5.3)."""

    max_iterations: int | None
    target_objective: float | None
    tolerance: float | None
    max_time_s: float | None


@dataclass(frozen=True)
class Output:
    """``output``, validated (:data:`OUTPUT`).

    ``dir`` is absolute (resolved against the job file's folder), ``trace_points`` is set
    and ``checkpoint`` holds the keys of :data:`flegel.rundir.checkpoint.KEYS`, or is None.
    """

    dir: str
    progress: str
    save_model: bool
    trace_points: int
    trace_budget: float | None
    checkpoint: dict[str, Any] | None


@dataclass(frozen=True)
class Runtime:
    """``runtime``, validated: runtime tuning (:data:`RUNTIME`)."""

    block_ms: float
    threads: int
    sample_size: int
    stall_warning_s: float
    stall_timeout_s: float | str | None
    exact_budget: float
    finish_timeout_s: float


@dataclass(frozen=True)
class Sync:
    """``sync``, validated: the model and its options.

    Attributes
    ----------
    model : str
        The model's name (a key of :data:`flegel.sync.MODELS`; a preset is expanded).
    options : dict
        The whole section, ``model`` and every option with its default, as the model's
        policies take it.
    """

    model: str
    options: dict[str, Any]
