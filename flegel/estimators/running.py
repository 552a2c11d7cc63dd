"""Launching a job on in-memory data: the path ``flegel run`` takes, from Python.

:func:`run_job` writes ``X`` (and ``y``) as ``.npy`` files with a job file into a new run
directory, validates the job (:func:`flegel.job.validate.load_job`), launches ``workers + 1`` MPI
ranks with the bundled launcher (:func:`flegel.cli.launch.launch`, as ``flegel run`` does without
mpirun) and reads the model back (:func:`flegel.rundir.model.read_model`).

The ranks' output comes back through pipes into :class:`Captured` streams, never through this
process's file descriptors, so a fit works wherever ``sys.stdout`` is not a terminal
(``contextlib.redirect_stdout``, pytest's capture, a notebook).  ``verbose`` chooses what is
shown (scikit-learn's meaning): 0 nothing, 1 the progress lines, 2 everything the run prints.
A failed run raises the error the failing rank raised (:func:`child_error`).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import yaml

from flegel.api import Algorithm
from flegel.rundir.files import FIT_INPUTS, FIT_X, FIT_Y
from flegel.rundir.files import JOB as JOB_FILE
from flegel.rundir.model import SavedModel, read_model

__all__ = ["Captured", "algorithm_name", "child_error", "run_job", "set_path"]


class Captured(io.RawIOBase):
    """A byte sink for one of the ranks' streams: keeps everything, and echoes the lines
    ``show`` accepts to ``sys.stdout`` (as text, so any stream works)."""

    def __init__(self, show: Any = None) -> None:
        super().__init__()
        self._chunks: list[bytes] = []
        self._partial = b""
        self._show = show
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, chunk: Any) -> int:
        data = bytes(chunk)
        with self._lock:
            self._chunks.append(data)
            if self._show is not None:
                lines = (self._partial + data).split(b"\n")
                self._partial = lines.pop()
                for line in lines:
                    text = line.decode(errors="replace").rstrip("\r")
                    if self._show(text):
                        sys.stdout.write(text + "\n")
        return len(data)

    def text(self) -> str:
        """Everything received, decoded."""
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace")


def _progress_line(line: str) -> bool:
    """A line of ``verbose=1``: the run's progress, not its closing summary."""
    return bool(line.strip()) and not line.startswith(("run directory:", "{"))


#: The launcher's closing line of a failed run: who failed, the error type, its message, and
#: what was saved (flegel.run.run_master).
_FAILED = re.compile(r"^flegel: (?:rank \d+ \([^)]*\)|worker \d+[^:]*?) failed: "
                     r"([A-Za-z_][\w.]*): (.*)$", re.M)
_SAVED = re.compile(r"; (?:no model saved|model not saved|saving the model failed|last θ "
                    r"\(iteration|the trained model \(iteration).*$")


def child_error(text: str) -> BaseException:
    """The exception a failed run's output names: the failing rank's own type (a built-in
    exception, e.g. ``ValueError``) and message, else a ``RuntimeError`` with the run's last
    ``flegel:`` line.  The run's whole error output is attached as a note."""
    found = list(_FAILED.finditer(text))
    exc: BaseException
    if found:
        name, message = found[-1].group(1), _SAVED.sub("", found[-1].group(2))
        cls = getattr(builtins, name.rsplit(".", 1)[-1], None)
        if isinstance(cls, type) and issubclass(cls, Exception) \
                and not issubclass(cls, Warning):
            exc = cls(message)
        else:
            exc = RuntimeError(f"{name}: {message}")
    else:
        lines = [ln for ln in text.splitlines() if ln.startswith("flegel:")]
        exc = RuntimeError(lines[-1][len("flegel: "):] if lines else "flegel run failed")
    if text.strip():
        _note(exc, "the run's error output:\n" + text.rstrip())
    return exc


def _note(exc: BaseException, text: str) -> None:
    """Attach ``text`` to ``exc`` as a note (Python >= 3.11; before, it goes to stderr)."""
    add = getattr(exc, "add_note", None)
    if callable(add):
        add(text)
    else:  # pragma: no cover - Python 3.10
        sys.stderr.write(text + "\n")


@contextlib.contextmanager
def _importable(path: Path | None) -> Iterator[None]:
    """Put ``path`` on the launched ranks' ``PYTHONPATH`` (a user's algorithm module)."""
    if path is None:
        yield
        return
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(path)] + ([old] if old else []))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def algorithm_name(algorithm: Any) -> tuple[str, Path | None]:
    """The job's ``algorithm`` string for a name or an Algorithm subclass, and the folder to
    put on ``PYTHONPATH`` so the ranks can import it."""
    if isinstance(algorithm, str):
        return algorithm, None
    if isinstance(algorithm, type) and issubclass(algorithm, Algorithm):
        module = algorithm.__module__
        if module == "__main__" or "<locals>" in algorithm.__qualname__:
            raise ValueError(
                f"algorithm {algorithm.__qualname__} is defined in {module!r} or inside a "
                "function: the MPI ranks cannot import it; move it into a module (a .py file)")
        file = getattr(sys.modules[module], "__file__", None)
        root = None
        if file is not None:
            root = Path(file).resolve().parent
            for _ in range(module.count(".")):
                root = root.parent
        return f"{module}:{algorithm.__qualname__}", root
    raise TypeError(f"algorithm must be a name ('kmeans', 'package.module:Class') or a "
                    f"flegel.Algorithm subclass, got {algorithm!r}")


def _new_run_dir(out: str | os.PathLike[str] | None, name: str, sync: str) -> Path:
    """A fresh ``<out>/<name>-<sync>-<time>`` directory."""
    base = Path(out).expanduser() if out is not None else \
        Path(tempfile.gettempdir()) / "flegel-runs"
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1, 1000):
        path = base / (f"{name}-{sync}-{stamp}" + (f"-{i}" if i > 1 else ""))
        try:
            path.mkdir()
            return path.resolve()
        except FileExistsError:
            continue
    return Path(tempfile.mkdtemp(prefix=f"{name}-{sync}-", dir=base)).resolve()


def run_job(doc: dict[str, Any], X: np.ndarray, y: np.ndarray | None = None,
            out: str | os.PathLike[str] | None = None,
            import_root: Path | None = None, job_dir: Path | None = None,
            verbose: int = 0) -> SavedModel:
    """Train the job ``doc`` on ``X`` (and labels ``y``) under MPI; return the saved model.

    The path of ``flegel run``: ``X`` and ``y`` are written as ``.npy`` files into a new run
    directory with the job (``data`` replaced by them), the job is validated
    (:func:`flegel.job.validate.load_job`), ``workers + 1`` ranks are launched
    (:func:`flegel.cli.launch.launch`), and the model is read back.  The data files are removed
    afterwards (the job file too when the run succeeded).

    Parameters
    ----------
    doc : dict
        The job (its ``data`` is replaced).
    X, y : ndarray
        The data and, for supervised algorithms, the labels.
    out : path, optional
        Folder under which the run directory is made (default: the temporary folder's
        ``flegel-runs``).
    import_root : Path, optional
        Folder put on the ranks' ``PYTHONPATH`` (the package root of a user's algorithm).
    job_dir : Path, optional
        Folder to write the job file into (a hidden ``.flegel-fit-*.yaml``): the folder of
        the user's job file, so its relative paths keep their meaning.  Default: the run
        directory's ``input`` folder.
    verbose : int, default=0
        What reaches ``sys.stdout``: 0 nothing, 1 the run's progress lines, 2 all the run
        prints (its error output included).  Output is captured through pipes either way.

    Raises
    ------
    flegel.job.errors.JobError
        A bad job (a ``ValueError`` naming the key).
    Exception
        The MPI run failed: the failing rank's own error type and message when it is a
        built-in exception (:func:`child_error`), else ``RuntimeError``.
    """
    from flegel.cli.launch import launch, under_mpi
    from flegel.job.sections import DEFAULT_SYNC_MODEL
    from flegel.job.validate import load_job

    if under_mpi():
        raise RuntimeError("flegel: fit launches its own MPI job and cannot run inside one "
                           "(this process was started by mpirun); call it from a plain Python")
    started = time.time()  # the run's launch_s counts from here (flegel.runtime.timings)
    doc = dict(doc)
    sync = doc.get("sync") or {}
    name = str(doc.get("name") or str(doc["algorithm"]).split(":")[-1].split(".")[-1].lower())
    run_dir = _new_run_dir(out, name, str(sync.get("model", DEFAULT_SYNC_MODEL)))
    # The inputs go to a folder of their own: the run directory must hold no run files
    # before the run (flegel.rundir.writer.claim_run_dir), and they are removed after it.
    inputs = run_dir / FIT_INPUTS
    inputs.mkdir()
    x_file = inputs / FIT_X
    np.save(x_file, np.ascontiguousarray(X))
    data: dict[str, Any] = {"path": str(x_file)}
    files = [x_file]
    if y is not None:
        y_file = inputs / FIT_Y
        np.save(y_file, np.ascontiguousarray(y))
        data["label_path"] = str(y_file)
        files.append(y_file)
    doc["data"] = data
    doc.setdefault("output", {})
    doc["output"] = {"progress": "plain" if verbose >= 1 else "none",
                     **(doc["output"] or {})}
    # Beside the user's job file when there is one, so its relative paths (params.init,
    # test_data, a module beside it) mean what they meant there.
    job_file = inputs / JOB_FILE if job_dir is None else \
        Path(job_dir) / f".flegel-fit-{run_dir.name}.yaml"
    job_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    code = -1
    show_out = None if verbose <= 0 else (_progress_line if verbose == 1 else bool)
    out_sink, err_sink = Captured(show_out), Captured(bool if verbose >= 2 else None)
    said = io.StringIO()  # the launcher's own lines (it writes them to sys.stderr)
    try:
        job = load_job(job_file)
        with _importable(import_root), contextlib.redirect_stderr(said):
            code = launch(job.workers + 1, ["run", str(job_file), "--out", str(run_dir)],
                          job.output.progress if verbose >= 1 else "none",
                          stdout=cast(IO[bytes], out_sink), stderr=cast(IO[bytes], err_sink),
                          origin=started, finish_s=job.runtime.finish_timeout_s)
    finally:
        for f in files:
            f.unlink(missing_ok=True)
        if code == 0:  # else the job file stays, to be read beside the messages
            job_file.unlink(missing_ok=True)
            if not any(inputs.iterdir()):
                inputs.rmdir()
    if verbose >= 2 and said.getvalue():
        sys.stdout.write(said.getvalue())
    if code != 0:
        exc = child_error(err_sink.text() + said.getvalue())
        _note(exc, f"flegel run failed (exit code {code}); job file: {job_file}")
        raise exc
    return read_model(run_dir)


def set_path(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set ``doc[a][b] = value`` for ``key = "a.b"`` (mappings merged, not replaced)."""
    parts = key.split(".")
    node = doc
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        elif not isinstance(nxt, dict):
            raise ValueError(f"override {key!r}: {p!r} is {nxt!r}, not a mapping")
        node = nxt
    last = parts[-1]
    if isinstance(value, Mapping) and isinstance(node.get(last), dict):
        node[last] = {**node[last], **value}
    else:
        node[last] = value
