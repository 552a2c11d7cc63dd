"""The run directory (:mod:`flegel.rundir.files`): resolved job, event log, model, summary.

Nothing is written outside it: the default directory is a child of ``output.dir`` (the job's
``name`` may not contain a path separator or ``..``), and an existing run directory is only
written into with ``--force`` (:func:`claim_run_dir`).  The model and the summary are written
atomically (:func:`atomic_path`): a reader, or a run killed while writing, sees the old file
or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import yaml

from flegel.rundir import files
from flegel.rundir.files import RUN_FILES
from flegel.runtime.peak_memory import peak_rss_mib

if TYPE_CHECKING:
    from flegel.api import Algorithm, DataInfo
    from flegel.runtime.exact import FinalEvaluation
    from flegel.runtime.server import Server
    from flegel.runtime.timings import Timings


class SummarizingPolicy(Protocol):
    """What the run directory needs of a sync model's master policy: the figures it adds
    to ``summary.json`` (:meth:`flegel.sync.base.MasterPolicy.summary`)."""

    def summary(self) -> dict[str, Any]: ...

CONVERGED = ("converged", "target", "algorithm", "halted")


class RunDirError(ValueError):
    """A run directory that may not be written (``--out`` onto a run, without ``--force``)."""


def default_run_dir(job: Any) -> Path:
    """``output.dir/<name or algorithm>-<sync>-<timestamp>``, a new directory.

    Raises
    ------
    RunDirError
        The path would leave ``output.dir`` (the job validation refuses such names first).
    """
    name = job.name or job.algorithm.split(":")[-1].split(".")[-1].lower()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(job.output.dir).expanduser()
    if not base.is_absolute():
        base = Path.cwd() / base
    path = base / f"{name}-{job.sync.model}-{stamp}"
    i = 1
    while path.exists():
        i += 1
        path = base / f"{name}-{job.sync.model}-{stamp}-{i}"
    if path.resolve().parent != base.resolve():
        raise RunDirError(f"run directory {path}: expected a directory inside output.dir "
                          f"{base}")
    return path


def claim_run_dir(path: Path, force: bool) -> None:
    """Check that a run may write into ``path`` (``--out``); with ``force`` clear its run files.

    Parameters
    ----------
    path : Path
        The run directory asked for.
    force : bool
        ``--force``: overwrite a run already there (its :data:`RUN_FILES` are removed first,
        so no file of the old run is mistaken for the new one's).

    Raises
    ------
    RunDirError
        ``path`` is a file, or holds a run and ``force`` is False; the message names it and
        says what was found.
    """
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path}: expected a directory for the run, found a file")
    found = [f for f in RUN_FILES if (path / f).exists()]
    if not found:
        return
    if not force:
        raise RunDirError(f"--out {path}: expected a new run directory, found an existing run "
                         f"({', '.join(found)}); pass --force to overwrite it")
    for f in found:
        if (path / f).is_dir():  # checkpoint/ (flegel/rundir/checkpoint.py)
            shutil.rmtree(path / f)
        else:
            (path / f).unlink()


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` on success.

    The temporary file is in the same directory (a rename within one file system is atomic)
    and flushed to disk before the rename, so after a crash ``path`` holds the old content or
    the new, never a part; on an exception it is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : Path
        The file to (re)write.

    Yields
    ------
    Path
        Where to write the new content.
    """
    # A unique hidden name (not mkstemp: its 0600 mode would outlive the rename, where the
    # file should get the user's usual permissions).
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON atomically (:func:`atomic_path`), so readers never see half a file."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write arrays as an ``.npz`` archive atomically (:func:`atomic_path`), without pickle."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        # A file object: np.savez would append ".npz" to a name that lacks it.
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub: **kwds vs allow_pickle


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, Path):
        return str(v)
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


def write_model(run_dir: Path, job: Any, algorithm: Any, theta: dict, version: int, *,
                arrays: bool = True, **meta: Any) -> None:
    """Write ``model.npz`` (the finalized θ, where ``arrays``) and ``model.json`` (the job's
    algorithm and parameters, the arrays' shapes and dtypes, ``version`` and ``meta``) into
    ``run_dir``: what :func:`flegel.rundir.model.read_model` reads back."""
    finalized: dict[str, np.ndarray] = {
        k: np.asarray(v) for k, v in algorithm.finalize(theta).items()}
    if arrays:
        save_npz_atomic(run_dir / files.MODEL, finalized)
    write_json_atomic(run_dir / files.MODEL_META, {
        "algorithm": job.algorithm, "params": job.params,
        "arrays": {k: {"shape": list(a.shape), "dtype": a.dtype.str}
                   for k, a in finalized.items()},
        "theta_version": version, **meta})


class RunWriter:
    """Writes one run's directory from the master.

    Files: ``job.yaml`` (the resolved job), ``events.jsonl`` (one JSON object per barrier or
    push), ``model.npz`` + ``model.json`` (arrays and metadata, no pickle), ``summary.json``.
    """

    def __init__(self, out_dir: Path, job: Any, events_from: int | None = None) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job = job
        doc = dict(job.doc)
        with atomic_path(self.dir / files.JOB) as tmp:
            tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        events = self.dir / files.EVENTS
        if events_from is not None and events.exists():
            # A resumed run: the events up to its checkpoint stay, later ones are replayed.
            with open(events, "r+b") as f:
                f.truncate(events_from)
            self._events = open(events, "a", buffering=1 << 16)  # noqa: SIM115
        else:
            self._events = open(events, "w", buffering=1 << 16)  # noqa: SIM115
        self._flushed = time.monotonic()

    def events_bytes(self) -> int:
        """Bytes of ``events.jsonl`` written so far (flushed): where a checkpoint is."""
        self._events.flush()
        return int(self._events.tell())

    def event(self, record: dict[str, Any]) -> None:
        """Append one event; flushed about once a second so a crash loses little."""
        self._events.write(json.dumps(record, default=_jsonable) + "\n")
        now = time.monotonic()
        if now - self._flushed > 1.0:
            self._events.flush()
            self._flushed = now

    def _test_metrics(self, algorithm: Any, theta: dict) -> dict[str, float]:
        """Evaluate the final θ on the held-out ``test_data`` (loaded whole, on the master)."""
        from flegel.block import Block

        x, y = self.job.load_test_data()
        block = Block.from_arrays(x, y, algorithm.init_state(len(x), x.shape[1]))
        return {"n_points": len(x), **algorithm.test_metrics(theta, block)}

    def save_model(self, algorithm: Any, theta: dict, version: int,
                   **meta: Any) -> bool:
        """Write ``model.npz`` and ``model.json`` for θ ``version`` (``meta`` goes into the
        JSON); the arrays are written once per version.  False when ``output.save_model``
        is off.  The master saves the model before the final evaluation and whenever a job
        ends early, so a failure there leaves the last good θ (issue 13)."""
        if not self.job.output.save_model:
            return False
        arrays_too = getattr(self, "_saved_version", None) != version
        write_model(self.dir, self.job, algorithm, theta, version, arrays=arrays_too, **meta)
        self._saved_version = version
        return True

    def finish(self, server: Server, policy: SummarizingPolicy, algorithm: Algorithm,
               info: DataInfo, results: list[dict], infos: dict[int, dict],
               evaluation: FinalEvaluation, timings: Timings | None = None) -> dict[str, Any]:
        """Write model and summary; return the summary.  ``evaluation`` (completed) gives
        the final objective and the exact objective trace; ``timings``
        (:class:`flegel.runtime.timings.Timings`) gives the summary's ``timings``, ending now."""
        self._events.close()
        job = self.job
        assert evaluation.final_objective is not None, "the final evaluation is complete"
        final = evaluation.final_objective
        summary: dict[str, Any] = {
            "algorithm": job.algorithm,
            "objective_name": algorithm.objective_name,
            "sync": job.sync.options,
            "workers": len(results),
            "n_points": info.n_points,
            "n_features": info.n_features,
            "iterations": server.version,
            "final_objective": final,
            "online_objective": server.objective,
            "wall_time_s": server.train_s,
            "converged": server.reason in CONVERGED,
            "stop_reason": server.reason,
            "load_s": max(i["load_s"] for i in infos.values()),
            "master_cpu_fraction": server.cpu_fraction,
            "master_idle_fraction": server.idle_fraction,
            "master_idle_cpu_fraction": server.idle_cpu_fraction,
            "master_peak_rss_mib": peak_rss_mib(),
        }
        # The exact objective of θ snapshots: evaluated during training or after it, within
        # output.trace_budget (flegel/runtime/exact.py); the final θ last.
        trace = evaluation.trace()
        summary["objective_trace"] = [[round(t, 6), f] for t, f in trace]
        summary["final_evaluation"] = evaluation.summary()
        target = job.stop.target_objective
        if target is not None:
            summary["target_objective"] = target
            # Time to target on the exact objective of the θ snapshots (comparable across
            # sync models); the online objective's time is kept beside it.
            summary["time_to_target_s"] = next((t for t, f in trace if f <= target), None)
            summary["time_to_target_online_s"] = server.time_to_target
        exact = getattr(server, "exact", None)
        if exact is not None:
            # f(θ) evaluated during the run (flegel/runtime/exact.py): what the progress
            # line showed and the target stop used; "exact": false marks estimates.
            summary["exact_objective"] = {**exact.summary(server.train_s),
                                          "trace": exact.trace()}
        keys = ("rank", "n_points", "points", "passes", "compute_s", "wait_s",
                "wait_cpu_fraction", "slowed_s", "commits", "aborted_points", "peak_rss_mib")
        # "host": the worker's host name as it reported it (several hosts: deploy/README.md).
        summary["per_worker"] = [{**{k: r[k] for k in keys}, "host": r.get("host"),
                                  "point_passes": {"min": r["visits"]["min"],
                                                   "max": r["visits"]["max"]},
                                  # on a GPU: the shard on the device (flegel/device.py)
                                  **({"device_shard": r["device_shard"]}
                                     if r.get("device_shard") else {})}
                                 for r in results]
        summary["stragglers"] = [s for r in results for s in r["stragglers"]]
        # Traversals of every point over the run, wherever it was trained (Section 4).
        visits = [r["visits"] for r in results]
        count = sum(v["count"] for v in visits)
        summary["point_passes"] = {"min": min(v["min"] for v in visits),
                                   "mean": sum(v["sum"] for v in visits) / max(count, 1),
                                   "max": max(v["max"] for v in visits)}
        summary.update(policy.summary())
        seeds = [r.get("seeded") for r in results]
        if any(seeds):
            # FSP's block sizers started from worker 1's cost at warm-up (flegel/sync/seeded.py):
            # the cost, and each worker's first block (None: a worker straggler patterns slow).
            cost = next(s for s in seeds if s)
            summary["seeded_sizer"] = {"fixed_s": cost["fixed_s"], "point_s": cost["point_s"],
                                       "measure_s": cost["measure_s"],
                                       "first_blocks": [s and s["first_block"] for s in seeds]}
        if any("migration" in r for r in results):
            moved = summary.setdefault("migration", {})
            for key in ("points_moved", "bytes_moved", "state_bytes", "reactivated"):
                moved[key] = sum(r["migration"][key] for r in results if "migration" in r)
            # Moves of points that had moved before (sent on, or taken back by virtual
            # migration): migration's churn (issue 19).
            moved["points_moved_more_than_once"] = sum(
                r["migration"].get("moved_again", 0) for r in results if "migration" in r)
            data_bytes = sum(r["data_bytes"] for r in results)
            moved["bytes_fraction"] = moved["bytes_moved"] / max(data_bytes, 1)
        if job.test_data is not None:
            summary["test"] = self._test_metrics(algorithm, server.theta)
        self.save_model(algorithm, server.theta, server.version, final_objective=final)
        if timings is not None:
            summary["timings"] = timings.summary()
            if timings.ranks:  # what each rank did in those phases (flegel.runtime.timings)
                summary["startup"] = timings.ranks
        write_json_atomic(self.dir / files.SUMMARY, summary)
        return summary
