"""The names of the files and folders flegel writes, in one place.

A run directory (``flegel run --out``, or ``output.dir/<name>-<sync>-<time>``) holds::

    job.yaml        the resolved job (JOB)
    events.jsonl    one record per barrier or push (EVENTS)
    model.npz       the final θ's arrays, no pickle (MODEL)
    model.json      the algorithm, its parameters, the arrays' shapes (MODEL_META)
    summary.json    written last, when the run ends (SUMMARY)
    master-stack.txt  every thread's stack of a master that was stuck (MASTER_STACK)
    estimator.json  what an estimator's ``fit`` keeps that the job cannot (ESTIMATOR)
    checkpoint/     the last checkpoint (CHECKPOINT_DIR):
        manifest.json           which folder is the checkpoint, and each file's SHA-256
        000042/master.pkl       the master's state
        000042/worker-<r>.pkl   worker r's state
    input/          what an estimator's ``fit`` hands the run (FIT_INPUTS): X.npy and y.npy,
                    removed after the run, and job.yaml, removed after a run that succeeded

``flegel report`` writes REPORT (one page, or an overview with a page per run from
:func:`run_report`) and its PNGs (OBJECTIVE_PNG, ...) into its ``--out`` folder;
``flegel compare`` writes COMPARE and a run directory per model (the first, REFERENCE, finds
the target objective).

Every module that writes or reads these names takes them from here; tests spell them out,
since they check what a user sees.
"""

from __future__ import annotations

__all__ = [
    "CHECKPOINT_DIR", "CHECKPOINT_MANIFEST", "CHECKPOINT_MASTER", "COMPARE", "DELTA_F_PNG",
    "ESTIMATOR", "EVENTS", "FIT_INPUTS", "FIT_X", "FIT_Y", "HELD_PNG", "JOB", "MASTER_STACK",
    "MODEL", "MODEL_META", "OBJECTIVE_PNG", "PASSES_PNG", "PASSES_TIME_PNG", "REFERENCE", "REPORT",
    "RUN_FILES", "SUMMARY", "TIMELINE_PNG", "checkpoint_worker", "checkpoint_worker_rank",
    "run_report",
]

JOB = "job.yaml"
EVENTS = "events.jsonl"
MODEL = "model.npz"
MODEL_META = "model.json"
SUMMARY = "summary.json"
#: Every thread's Python stack, written when the master was stuck in its own code
#: (flegel.runtime.watchdog).
MASTER_STACK = "master-stack.txt"
#: Written beside the model by an estimator's fit: what the job file cannot hold
#: (the original class labels).
ESTIMATOR = "estimator.json"

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_MANIFEST = "manifest.json"
CHECKPOINT_MASTER = "master.pkl"
_WORKER_PREFIX, _WORKER_SUFFIX = "worker-", ".pkl"

FIT_INPUTS = "input"
FIT_X = "X.npy"
FIT_Y = "y.npy"

#: The files a run writes into its directory; a directory holding any of them is a run
#: (:func:`flegel.rundir.writer.claim_run_dir`).
RUN_FILES = (JOB, EVENTS, MODEL, MODEL_META, SUMMARY, CHECKPOINT_DIR)

REPORT = "report.html"
OBJECTIVE_PNG = "objective.png"
TIMELINE_PNG = "timeline.png"
PASSES_PNG = "passes.png"
DELTA_F_PNG = "delta_f.png"
PASSES_TIME_PNG = "passes_time.png"
HELD_PNG = "held.png"
COMPARE = "compare.json"
REFERENCE = "reference"


def checkpoint_worker(rank: int) -> str:
    """The checkpoint file of worker ``rank``."""
    return f"{_WORKER_PREFIX}{rank}{_WORKER_SUFFIX}"


def checkpoint_worker_rank(name: str) -> int | None:
    """The rank whose checkpoint file ``name`` is (:func:`checkpoint_worker`); None for
    another file."""
    if not (name.startswith(_WORKER_PREFIX) and name.endswith(_WORKER_SUFFIX)):
        return None
    return int(name[len(_WORKER_PREFIX):-len(_WORKER_SUFFIX)])


def run_report(slug: str) -> str:
    """The page of one run in a report of several (``slug``: the run's label, made safe)."""
    return f"report-{slug}.html"
