"""Checkpoints of a running job and what ``flegel run --resume RUN_DIR`` reads back.

A checkpoint is everything a job needs to continue as if it had not stopped: θ and the
server's state (version, online objective, trace, the stop criteria's progress, training time
so far), the master policy's state (the interval adjustor's within it), and each worker's
state (per-point state and the store's bookkeeping -- cursor, cycles, visits, halted and held
rows, points migrated in -- its worker policy, straggler random generators and counters).
Each of these opts in through :class:`flegel.state.Stateful`; this module knows none of them.

When (``output.checkpoint``): every ``every_s`` seconds of training or every
``every_iterations`` θ versions.  Where: at a *quiescent point* of the master
(:meth:`flegel.runtime.server.Server.checkpoint_step`).  Once a checkpoint is due the master
holds back its replies (instructions and migration orders) until no worker is computing and
no point is in flight between workers; then every update it received is in θ, the state of
each waiting worker matches θ, and the master snapshots itself and the replies it held.
Under the barrier models (BSP, FSP, ElasticBSP) this is the barrier itself, at no cost; the
asynchronous models (ASP, SSP, DSSP, SpecSync) get one extra barrier per checkpoint.  Each
worker sends its own state with the first instructions after the snapshot, before it computes
anything (a worker blocked by a staleness bound sends it when it is released: its state has
not changed meanwhile).  A resumed job restores every part and sends the held replies, so it
continues exactly where the snapshot was taken: at most one checkpoint interval is lost, and
under BSP full batch the final model is the same, bit for bit, as without the interruption.
A migration window whose send had completed may still have been on its way (MPI completes a
small send once buffered): the resumed master settles such points so that each is trained by
one worker (:mod:`flegel.runtime.cut`).

Not captured: the exact-objective evaluations in progress (they start afresh after a
resume, with the budget counted from it) and the timing-based estimates (block sizes, the
round-trip estimates of the models, which are measured again).

On disk (``RUN_DIR/checkpoint/``): a folder per checkpoint with ``master.pkl`` and one
``worker-<rank>.pkl`` per worker (pickles: a checkpoint is read back only by the flegel that
wrote it, from the user's own run directory), and ``manifest.json``, rewritten atomically
last, naming the folder, the iteration, the worker count and each file's SHA-256.  The
previous folder is removed only after the new manifest is in place, so a job killed at any
moment leaves one complete checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flegel import validation
from flegel.rundir import files
from flegel.validation import Key

#: Keys of ``output.checkpoint``, declared once.
KEYS: dict[str, Key] = {
    "every_s": validation.number("write a checkpoint every this many seconds of training", None,
                             lo=0, lo_open=True, null=True, unit="seconds"),
    "every_iterations": validation.integer("write a checkpoint every this many iterations (θ "
                                       "versions)", None, lo=1, null=True),
}

#: Version of the on-disk layout; a manifest of another version is refused.
FORMAT = 1


class CheckpointError(ValueError):
    """A run directory that cannot be resumed; the message names the file, what was
    expected and what was found."""


def check_options(section: dict[str, Any]) -> tuple[str, str] | None:
    """Cross-key rule of ``output.checkpoint``: ``(key, expected)`` when broken, else None."""
    given = [k for k in KEYS if section.get(k) is not None]
    if len(given) != 1:
        return ("every_s", "exactly one of every_s and every_iterations (found "
                + (" and ".join(given) if given else "neither") + ")")
    return None


@dataclass
class Schedule:
    """When the next checkpoint is due (``output.checkpoint``)."""

    every_s: float | None = None
    every_iterations: int | None = None
    last_s: float = 0.0
    last_version: int = 0

    def due(self, now_s: float, version: int) -> bool:
        """True once ``every_s`` seconds passed since the last checkpoint (or the start), or
        when the next θ version completes ``every_iterations``: replies are held from then
        on, so that under a barrier model the barrier that makes that version is the
        snapshot, not the one after it."""
        if self.every_s is not None and now_s - self.last_s >= self.every_s:
            return True
        return (self.every_iterations is not None
                and version + 1 - self.last_version >= self.every_iterations)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _write_pickle(path: Path, obj: Any) -> str:
    """Pickle ``obj`` to ``path`` atomically; return the file's SHA-256."""
    from flegel.rundir.writer import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    return _sha256(path)


class Checkpointer:
    """The master's side: the schedule, the snapshot being completed, writing it.

    Parameters
    ----------
    run_dir : Path
        The run directory (checkpoints go to ``run_dir/checkpoint``).
    options : dict
        The validated ``output.checkpoint`` section.
    ranks : list of int
        The worker ranks; a checkpoint is complete with one state from each.
    receive : callable
        Returns the worker states that arrived since the last call, as ``(rank, state)``
        (over MPI: :data:`flegel.protocol.Tag.CHECKPOINT` messages).
    meta : dict
        Written into every manifest (the job file the run came from, ...).
    events_bytes : callable, optional
        Where the event log is at a snapshot: a resumed run truncates it there.
    """

    def __init__(self, run_dir: Path, options: dict[str, Any], ranks: list[int],
                 receive: Callable[[], list[tuple[int, Any]]],
                 meta: dict[str, Any] | None = None,
                 events_bytes: Callable[[], int] | None = None) -> None:
        self.dir = Path(run_dir) / files.CHECKPOINT_DIR
        self.events_bytes = events_bytes
        self.schedule = Schedule(options.get("every_s"), options.get("every_iterations"))
        self.ranks = list(ranks)
        self.receive = receive
        self.meta = dict(meta or {})
        self.sequence = 0
        self.written = 0
        self._writer: threading.Thread | None = None
        self._master: dict[str, Any] | None = None
        self._workers: dict[int, Any] = {}
        self._expected: set[int] = set()
        self._forced = False

    @property
    def pending(self) -> bool:
        """A snapshot is waiting for worker states."""
        return self._master is not None

    def due(self, now_s: float, version: int) -> bool:
        """Time to take a snapshot (the last one may still wait for worker states)."""
        return self._forced or self.schedule.due(now_s, version)

    def force(self) -> None:
        """Take a snapshot at the next quiescent point whatever the schedule (a signal
        asked the job to end: :func:`flegel.run.final_checkpoint`)."""
        self._forced = True

    def resumed(self, sequence: int, now_s: float, version: int) -> None:
        """Continue the schedule of a resumed job from its checkpoint."""
        self.sequence = sequence
        self.schedule.last_s, self.schedule.last_version = now_s, version

    def take(self, master: dict[str, Any], now_s: float, version: int,
             expect: list[int]) -> None:
        """Hold the master's snapshot until every rank in ``expect`` sent its state."""
        self._master = {**master, "iteration": version, "elapsed_s": now_s,
                        "events_bytes": None if self.events_bytes is None
                        else self.events_bytes()}
        self._workers = {}
        self._expected = set(expect)
        self._forced = False
        self.schedule.last_s, self.schedule.last_version = now_s, version

    def collect(self) -> None:
        """Take the worker states that arrived; write the checkpoint once complete."""
        for rank, state in self.receive():
            if self._master is not None and rank in self._expected:
                self._workers[rank] = state
        if self._master is not None and set(self._workers) >= self._expected:
            self._write()

    def drain(self, owed: set[int], pause: Callable[[], None]) -> None:
        """Receive the states still on their way from ``owed`` ranks (the job ends: their
        sends must complete), pausing between polls; write the checkpoint if complete."""
        while self._master is not None and not owed <= set(self._workers):
            for rank, state in self.receive():
                self._workers[rank] = state
            if not owed <= set(self._workers):
                pause()
        if self._master is not None and set(self._workers) >= self._expected:
            self._write()
        self._master = None
        self.wait()

    def wait(self) -> None:
        """Until the checkpoint being written is on disk."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    def _write(self) -> None:
        """Write the completed snapshot in a thread of its own: the files' fsyncs take
        ~0.1 s for a few MB, which would otherwise hold the master (and, under a barrier
        model, every worker).  One write at a time: the next waits for this one."""
        master, workers = self._master, self._workers
        assert master is not None
        self._master, self._workers = None, {}
        self.sequence += 1
        self.wait()
        self._writer = threading.Thread(target=self._write_files,
                                        args=(master, workers, self.sequence),
                                        name="flegel-checkpoint", daemon=True)
        self._writer.start()

    def _write_files(self, master: dict[str, Any], workers: dict[int, Any],
                     sequence: int) -> None:
        try:
            self._write_folder(master, workers, sequence)
        except Exception as exc:  # noqa: BLE001 - training goes on; the user is told
            sys.stderr.write(f"flegel: warning: checkpoint {sequence} not written in "
                             f"{self.dir}: {type(exc).__name__}: {exc}; the previous one "
                             "is kept\n")
            sys.stderr.flush()

    def _write_folder(self, master: dict[str, Any], workers: dict[int, Any],
                      sequence: int) -> None:
        name = f"{sequence:06d}"
        folder = self.dir / name
        folder.mkdir(parents=True, exist_ok=True)
        digests = {files.CHECKPOINT_MASTER: _write_pickle(folder / files.CHECKPOINT_MASTER,
                                                          master)}
        for rank in sorted(workers):
            worker = files.checkpoint_worker(rank)
            digests[worker] = _write_pickle(folder / worker, workers[rank])
        from flegel.rundir.writer import write_json_atomic

        write_json_atomic(self.dir / files.CHECKPOINT_MANIFEST, {
            "format": FORMAT, "sequence": sequence, "folder": name,
            "iteration": master["iteration"], "elapsed_s": master["elapsed_s"],
            "workers": len(self.ranks), "ranks": self.ranks, "files": digests,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **self.meta})
        # The new manifest is in place: older checkpoints can go.
        for old in self.dir.iterdir():
            if old.is_dir() and old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        self.written += 1


# --------------------------------------------------------------------------- reading back
@dataclass
class Checkpoint:
    """A checkpoint read back: the manifest, the master's state, each worker's state."""

    manifest: dict[str, Any]
    master: dict[str, Any]
    workers: dict[int, Any]


def read_manifest(run_dir: Path, n_workers: int | None = None) -> dict[str, Any]:
    """The manifest of ``run_dir``'s checkpoint, checked.

    Parameters
    ----------
    run_dir : Path
    n_workers : int, optional
        The workers of the resumed job: must be the checkpoint's.

    Raises
    ------
    CheckpointError
        No checkpoint, a corrupt manifest, or another worker count.
    """
    path = Path(run_dir) / files.CHECKPOINT_DIR / files.CHECKPOINT_MANIFEST
    if not path.is_file():
        raise CheckpointError(
            f"{path}: expected a checkpoint to resume from, found none (the job writes "
            "checkpoints with output.checkpoint: {every_s: S} or {every_iterations: N}, "
            "and the first one after that interval)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: expected a checkpoint manifest (JSON), found a "
                              f"corrupt file ({exc})") from None
    need = ("format", "folder", "iteration", "workers", "files", "sequence")
    missing = [k for k in need if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise CheckpointError(f"{path}: expected a checkpoint manifest with "
                              f"{', '.join(need)}, found none of {', '.join(missing)}")
    if manifest["format"] != FORMAT:
        raise CheckpointError(f"{path}: expected checkpoint format {FORMAT}, found "
                              f"{manifest['format']!r}")
    if n_workers is not None and manifest["workers"] != n_workers:
        raise CheckpointError(
            f"{path}: the checkpoint was written by {manifest['workers']} workers, the "
            f"resumed job has {n_workers}; resume with the same number of workers")
    return manifest


def load(run_dir: Path, n_workers: int | None = None) -> Checkpoint:
    """Read ``run_dir``'s checkpoint, every file checked against its SHA-256.

    Raises
    ------
    CheckpointError
        As :func:`read_manifest`, or a file missing or not matching the manifest.
    """
    manifest = read_manifest(run_dir, n_workers)
    folder = Path(run_dir) / files.CHECKPOINT_DIR / str(manifest["folder"])
    loaded: dict[str, Any] = {}
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"{path}: expected the checkpoint file the manifest names, "
                                  "found none")
        found = _sha256(path)
        if found != digest:
            raise CheckpointError(f"{path}: expected SHA-256 {digest[:12]}… (manifest), found "
                                  f"{found[:12]}…: the checkpoint is corrupt")
        with open(path, "rb") as f:
            loaded[name] = pickle.load(f)  # noqa: S301 - the user's own run directory
    workers = {rank: v for n, v in loaded.items()
               if (rank := files.checkpoint_worker_rank(n)) is not None}
    return Checkpoint(manifest, loaded[files.CHECKPOINT_MASTER], workers)
