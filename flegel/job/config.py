"""Job files: loading, ``--set`` overrides and validation before any MPI work (docs/exit-codes.md).

Every problem is reported as one :class:`JobError` naming the file, the key path, what was
expected and what was found; the CLI prints it and exits with code 2, without a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from flegel import sync as sync_models
from flegel import validation
from flegel.rundir import checkpoint
from flegel.runtime.stragglers import COMMON_KEYS as STRAGGLER_COMMON
from flegel.runtime.stragglers import PATTERN_KEYS as STRAGGLER_KEYS
from flegel.runtime.stragglers import parse_workers
from flegel.validation import Key, SchemaError

if TYPE_CHECKING:
    from flegel.api import Algorithm
    from flegel.data import SourceInfo
    from flegel.data.checks import Takes

BUILTIN_ALGORITHMS = {
    "kmeans": "flegel.algorithms.kmeans:KMeans",
    "gmm": "flegel.algorithms.gmm:GaussianMixture",
    "fcm": "flegel.algorithms.fcm:FuzzyCMeans",
    "logreg": "flegel.algorithms.logreg:LogisticRegression",
    "nmf": "flegel.algorithms.nmf:NMF",
    "cnn": "flegel.algorithms.cnn:CNN",
}

class JobError(ValueError):
    """A problem with a job file, reported before any work starts."""

    def __init__(self, file: str | Path, key: str, expected: str, found: Any = validation.MISSING,
                 detail: str | None = None) -> None:
        self.file, self.key = str(file), key
        super().__init__(f"{file}: {validation.describe(key, expected, found, detail)}")

    @classmethod
    def from_schema(cls, file: str | Path, exc: SchemaError) -> JobError:
        """The :class:`JobError` of a :class:`flegel.validation.SchemaError` in ``file``."""
        return cls(file, exc.key, exc.expected, exc.found, exc.detail)


# --------------------------------------------------------------------------- the schema
TOP: dict[str, Key] = {
    "name": Key("a name without '/', '\\' or '..' (it names the run's directory inside "
                "output.dir), or null", validation.optional(validation.is_plain_name), None,
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
    "stragglers": Key("a list of straggler patterns", validation.optional(validation.is_list), None,
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
    "max_time_s": validation.number("stop after this many seconds of training", None, lo=0,
                                lo_open=True, null=True),
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
    "stall_warning_s": validation.number("warn when no worker has reported for this long",
                                     10.0, lo=0, lo_open=True, unit="seconds"),
    "stall_timeout_s": validation.number(
        "end the job (exit code 3, last θ saved) when a worker has not reported for this "
        "long; it bounds one worker iteration (a full pass under BSP full batch), and "
        "loading, compiling and the final evaluation with at least 60 s; null: never", 300.0,
        lo=0, lo_open=True, null=True, unit="seconds"),
    "exact_budget": validation.number(
        "share of training time the workers may spend evaluating the exact objective of θ "
        "snapshots on all the data during the run (the progress line, the exact trace and "
        "the target stop use it); 0: never, and stop.target_objective is then met on the "
        "online objective", 0.05, lo=0, hi=0.5),
}

#: The sections checked by :func:`flegel.validation.check_section` directly.
SECTIONS: dict[str, dict[str, Key]] = {"stop": STOP, "output": OUTPUT, "runtime": RUNTIME}


def _model_key() -> Key:
    names = sync_models.available() + list(sync_models.PRESETS)
    return validation.choice("the synchronization model, or a preset standing for a model and "
                         "options", names, "bsp", expected="one of " + ", ".join(names))


def sync_keys(cls: type) -> dict[str, Key]:
    """The keys of a ``sync`` section for the policy class ``cls``.

    Parameters
    ----------
    cls : type
        A master policy class; its ``OPTIONS`` maps option names to :class:`Key`, or to
        ``(default, expected)`` pairs for models written before the schema (checked only by
        their ``check_options``).

    Returns
    -------
    dict of str to Key
        ``model`` followed by the model's options.
    """
    keys = {"model": _model_key()}
    options: dict[str, Any] = getattr(cls, "OPTIONS", {})
    for name, decl in options.items():
        if isinstance(decl, Key):
            keys[name] = decl
        else:
            default, expected = decl
            keys[name] = Key(expected, validation.anything, default, expected)
    return keys


def _check(file: Path, prefix: str, given: Any, keys: dict[str, Key]) -> dict[str, Any]:
    try:
        return validation.check_section(prefix, given, keys)
    except SchemaError as exc:
        raise JobError.from_schema(file, exc) from None


# --------------------------------------------------------------------------- loading
class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-4`` as a string; users mean a number, as in YAML 1.2."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                 |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                 |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                 |[-+]?\.(?:inf|Inf|INF)
                 |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


class DuplicateKeyError(yaml.YAMLError):
    """A mapping gives the same key twice (YAML loaders silently keep the last one).

    Parameters
    ----------
    key : str
        Key path of the duplicate (``"stop.max_iterations"``, ``"stragglers[0].every"``).
    first, again : int
        1-based line numbers of the two occurrences.
    """

    def __init__(self, key: str, first: int, again: int) -> None:
        self.key, self.first, self.again = key, first, again
        super().__init__(f"{key}: duplicate key, at line {first} and again at line {again}")


def _check_duplicates(node: yaml.Node, path: str = "", seen_nodes: set[int] | None = None
                      ) -> None:
    """Raise :class:`DuplicateKeyError` for the first key given twice in one mapping.

    Checked on the composed node tree, before construction: it still has every key and its
    line, where the constructed dict has already dropped the first value.
    """
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias to a node already checked
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            here = path
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                here = f"{path}.{key_node.value}" if path else str(key_node.value)
                line = key_node.start_mark.line + 1
                if key_node.value in lines:
                    raise DuplicateKeyError(here, lines[key_node.value], line)
                lines[key_node.value] = line
            _check_duplicates(value_node, here, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicates(item, f"{path}[{i}]", seen_nodes)


def parse_yaml(text: str) -> Any:
    """Parse YAML text with :class:`_Loader`, refusing duplicate keys.

    Raises
    ------
    yaml.YAMLError
        Invalid YAML; :class:`DuplicateKeyError` for a key given twice in one mapping.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicates(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a job file; a missing file or bad YAML becomes a :class:`JobError`."""
    if not path.is_file():
        raise JobError(path, "(file)", "", detail="job file not found")
    try:
        doc = parse_yaml(path.read_text())
    except DuplicateKeyError as exc:
        raise JobError(path, exc.key, "", detail=(
            f"duplicate key, given at line {exc.first} and again at line {exc.again} (expected "
            "each key once: YAML would silently keep only the last)")) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(parse)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise JobError(path, where, "", detail=f"invalid YAML: {problem}") from None
    if not isinstance(doc, dict):
        raise JobError(path, "(top level)", "a mapping of job keys", doc)
    return doc


def key_at(doc: dict[str, Any], parts: list[str]) -> Key | None:
    """The declared :class:`Key` at a ``--set`` key path of ``doc``, or None.

    Parameters
    ----------
    doc : dict
        The job as loaded (``sync.model`` and straggler patterns select their keys).
    parts : list of str
        The key path split on dots (``["sync", "eta_ms"]``, ``["stragglers", "0", "every"]``).

    Returns
    -------
    Key or None
        None for paths the schema leaves to others (``params``, ``data``) or does not know.
    """
    if len(parts) == 1:
        return TOP.get(parts[0])
    head = parts[0]
    if len(parts) == 2 and head in SECTIONS:
        return SECTIONS[head].get(parts[1])
    if parts[:2] == ["output", "checkpoint"] and len(parts) == 3:
        return checkpoint.KEYS.get(parts[2])
    if len(parts) == 2 and head == "sync":
        sync = doc.get("sync")
        model = _expand_preset(dict(sync) if isinstance(sync, dict) else {}).get("model", "bsp")
        if not isinstance(model, str) or model not in sync_models.available():
            return None
        return sync_keys(sync_models.policy_class(model)).get(parts[1])
    if len(parts) == 3 and head == "sync":
        sync = doc.get("sync")
        model = _expand_preset(dict(sync) if isinstance(sync, dict) else {}).get("model", "bsp")
        if not isinstance(model, str) or model not in sync_models.available():
            return None
        subs = getattr(sync_models.policy_class(model), "SUBSECTIONS", {})
        return subs.get(parts[1], {}).get(parts[2])
    if len(parts) == 3 and head == "stragglers" and parts[1].isdigit():
        entries = doc.get("stragglers")
        if not isinstance(entries, list) or int(parts[1]) >= len(entries):
            return None
        entry = entries[int(parts[1])]
        pattern = entry.get("pattern") if isinstance(entry, dict) else None
        if pattern not in STRAGGLER_KEYS:
            return STRAGGLER_COMMON.get(parts[2])
        return straggler_keys(pattern).get(parts[2])
    return None


def apply_overrides(doc: dict[str, Any], sets: list[str], file: Path) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values are parsed as YAML (numbers, lists...).

    ``sync.model=M`` naming another model than the job's replaces the whole ``sync`` section
    (the old model's options mean nothing to the new one); it is applied before the other
    overrides, so ``--set sync.model=fsp --set sync.eta_ms=5`` works in any order.
    """
    sets = sorted(sets, key=lambda item: not item.startswith("sync.model="))
    for item in sets:
        if item.startswith("sync.model="):
            model = parse_yaml(item.partition("=")[2])
            sync = doc.get("sync")
            if not isinstance(sync, dict) or sync.get("model") != model:
                doc["sync"] = {"model": model}
                continue
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise JobError(file, f"--set {item}", "key.path=value", item)
        try:
            value = parse_yaml(raw)
        except yaml.YAMLError:
            value = raw
        declared = key_at(doc, key.split("."))
        if declared is not None and not declared.check(value) and declared.check(raw):
            value = raw  # e.g. name=2024 or output.dir=1: the key wants the text as written
        node: Any = doc
        parts = key.split(".")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise JobError(file, f"--set {key}", f"an index below {len(node)}", part)
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    if not isinstance(node.get(part), (dict, list)):
                        node[part] = {}
                    node = node[part]
            else:
                raise JobError(file, f"--set {key}", "a path through mappings", node)
    return doc


# --------------------------------------------------------------------------- validation
def _beside_job(top: str, base_dir: Path) -> bool:
    """Whether ``base_dir`` holds a module or package named ``top``."""
    return (base_dir / f"{top}.py").is_file() or (base_dir / top).is_dir()


#: The hooks an algorithm must override (any one name of each group; camelCase names count,
#: see :class:`flegel.Algorithm`).
REQUIRED_HOOKS = (("init_parameter",), ("update_data_point", "update_block"),
                  ("update_parameter",), ("evaluate",))


def _params_key(params: dict[str, Any], exc: Exception) -> str:
    """The job key an algorithm's error is about: ``params.<name>`` when the error carries
    the name of one of the job's parameters (a :class:`flegel.validation.ParameterError`,
    from the algorithm's declared ``PARAMS``), else ``params``."""
    key = exc.key if isinstance(exc, SchemaError) else None
    return f"params.{key}" if key in params else "params"


def resolve_algorithm(name: str, base_dir: Path | None = None) -> type:
    """Return the Algorithm class of a built-in name or ``"package.module:Class"``.

    A user's module is looked up on ``sys.path``; the job's folder (``base_dir``) is appended
    to ``sys.path`` (last, so a ``numpy.py`` or ``yaml.py`` beside a job shadows nothing), so
    an algorithm can live next to its job, e.g. ``algorithms.mine:Mine`` for
    ``algorithms/mine.py`` beside the job file.

    Parameters
    ----------
    name : str
        A key of :data:`BUILTIN_ALGORITHMS` or ``"package.module:Class"``.
    base_dir : Path or None
        The job file's folder.

    Returns
    -------
    type
        The :class:`flegel.Algorithm` subclass.

    Raises
    ------
    LookupError
        When the name is neither, the module cannot be imported or holds no such class, or
        the class lacks a hook of :data:`REQUIRED_HOOKS`.

    Notes
    -----
    The module is imported, so its top-level code runs (here, in ``flegel validate`` and on
    every rank of a run): keep a script's work under ``if __name__ == "__main__":``.
    """
    from flegel.api import Algorithm

    target = BUILTIN_ALGORITHMS.get(name, name)
    module, colon, cls = target.partition(":")
    if not colon or not module or not cls:
        raise LookupError(f"unknown algorithm {name!r}: not a built-in "
                          f"({', '.join(BUILTIN_ALGORITHMS)}) nor 'package.module:Class'")
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.append(str(base_dir))
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        msg = f"cannot import module {module!r}: {exc}"
        top = module.split(".")[0]
        other = getattr(sys.modules.get(top), "__file__", None) or ""
        if base_dir is not None and _beside_job(top, base_dir) and other and \
                not Path(other).resolve().is_relative_to(base_dir.resolve()):
            msg += (f" (the {top!r} found first on sys.path is {other}, not the one beside "
                    "the job: rename your package)")
        raise LookupError(msg) from None
    found = getattr(mod, cls, None)
    if not (isinstance(found, type) and issubclass(found, Algorithm)):
        raise LookupError(f"module {module!r} has no flegel.Algorithm subclass {cls!r}")
    missing = [names[0] + "".join(f" (or {n})" for n in names[1:]) for names in REQUIRED_HOOKS
               if all(getattr(found, n) is getattr(Algorithm, n) for n in names)]
    if missing:
        raise LookupError(f"{target} does not implement {'; '.join(missing)}, expected every "
                          "hook a flegel.Algorithm must have (see flegel.api)")
    from flegel.data.checks import Takes

    try:
        Takes.of(found, name)  # the data declarations (label_kind) are part of the API
    except ValueError as exc:
        raise LookupError(f"{target}: {exc}") from None
    return found


def _sync_class(file: Path, model: Any) -> type:
    if model not in sync_models.available():
        raise JobError(file, "sync.model", "one of " + ", ".join(
            sync_models.available() + list(sync_models.PRESETS)), model)
    return sync_models.policy_class(model)


def _expand_preset(given: dict[str, Any]) -> dict[str, Any]:
    model = given.get("model", "bsp")
    if isinstance(model, str) and model in sync_models.PRESETS:
        out = dict(sync_models.PRESETS[model])
        for k, v in given.items():
            if k == "model":
                continue
            # Nested sections merge key by key: ``fspv-sync`` plus ``migration.window``
            # keeps the preset's mode.
            both = isinstance(v, dict) and isinstance(out.get(k), dict)
            out[k] = {**out[k], **v} if both else v
        return out
    return given


def _validate_sync(file: Path, given: Any) -> dict[str, Any]:
    if given is not None and not isinstance(given, dict):
        raise JobError(file, "sync", "a mapping with 'model'", given)
    given = _expand_preset({"model": "bsp"} if given is None else dict(given))
    cls = _sync_class(file, given.get("model", "bsp"))
    out = _check(file, "sync", given, sync_keys(cls))
    # A model's nested sections (FSP's ``migration``) are declared as Keys of their own.
    for name, keys in getattr(cls, "SUBSECTIONS", {}).items():
        out[name] = _check(file, f"sync.{name}", out[name], keys)
    check = getattr(cls, "check_options", None)
    if check is not None:
        problem = check(out)
        if problem is not None:
            key, expected = problem
            raise JobError(file, f"sync.{key}", expected, out.get(key))
    return out


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
        entry = _check(file, prefix, spec, straggler_keys(str(pattern)))
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


@dataclass
class Job:
    """A validated job: every section completed with defaults."""

    file: Path
    doc: dict[str, Any]
    algorithm_cls: type
    data_info: Any

    @property
    def base_dir(self) -> Path:
        return self.file.parent

    def __getitem__(self, key: str) -> Any:
        return self.doc[key]

    def make_algorithm(self) -> Algorithm:
        return self.algorithm_cls(**(self.doc["params"] or {}))

    @property
    def takes(self) -> Takes:
        """What the job's algorithm takes as data (its class attributes)."""
        from flegel.data.checks import Takes

        return Takes.of(self.algorithm_cls, self.doc["algorithm"])

    def load_shard(self, shard: int, n_shards: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Load one worker's shard of ``data``, its content checked (issue 13, item 5).

        The keys the validation derived from the file (``SourceInfo.resolved``: LIBSVM
        ``n_features``, CSV ``skip_header``) are passed on, so the load does not derive them
        again.

        Parameters
        ----------
        shard, n_shards : int
            This shard's index and the number of shards (workers).

        Returns
        -------
        X, y : numpy.ndarray, numpy.ndarray or None
            As :func:`flegel.data.load_shard`.

        Raises
        ------
        JobError
            Bad data content: NaN or inf, a text cell, a malformed line, labels or negative
            values the algorithm does not take -- naming the file, row and column.
        """
        spec = {**self.doc["data"], **self.data_info.resolved}
        return self._load("data", spec, shard, n_shards)

    def load_test_data(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Load the whole of ``test_data``, its content checked like :meth:`load_shard`."""
        return self._load("test_data", self.doc["test_data"], 0, 1)

    def _load(self, key: str, spec: dict[str, Any], shard: int, n_shards: int
              ) -> tuple[np.ndarray, np.ndarray | None]:
        from flegel.data import DataError, load_shard

        try:
            return load_shard(spec, shard, n_shards, self.base_dir, key=key, takes=self.takes)
        except DataError as exc:
            raise JobError(self.file, key, "", detail=str(exc)) from None

    def check_data(self) -> int:
        """Load and check every worker's shard, one at a time, and ``test_data``.

        What ``flegel validate --data`` does: the checks each worker makes at load, without
        training, in this process (its memory holds one shard at a time).

        Returns
        -------
        int
            The rows checked.

        Raises
        ------
        JobError
            The first problem found, as :meth:`load_shard` words it.
        """
        workers = self.doc["workers"]
        rows = sum(len(self.load_shard(w, workers)[0]) for w in range(workers))
        return rows + self.check_test_data()

    def check_test_data(self) -> int:
        """Load and check ``test_data`` (the master does, while the workers load theirs).

        Returns
        -------
        int
            Its rows; 0 without test data.
        """
        return 0 if self.doc["test_data"] is None else len(self.load_test_data()[0])


def validate(doc: dict[str, Any], file: Path, workers: int | None = None) -> Job:
    """Check a whole job; return it resolved, or raise :class:`JobError`.

    ``workers`` overrides the job's worker count (the world size under ``mpirun``).
    """
    job = _check(file, "", doc, TOP)
    if workers is not None:
        job["workers"] = workers
    job["params"] = job["params"] or {}
    for section, keys in SECTIONS.items():
        job[section] = _check(file, section, job[section], keys)
    if job["output"]["checkpoint"] is not None:
        ck = _check(file, "output.checkpoint", job["output"]["checkpoint"], checkpoint.KEYS)
        problem = checkpoint.check_options(ck)
        if problem is not None:
            raise JobError(file, f"output.checkpoint.{problem[0]}", problem[1],
                           ck[problem[0]])
        job["output"]["checkpoint"] = ck
    # One rule for every path key: relative to the job file's folder, as data.path is.
    job["output"]["dir"] = str(file.parent / Path(job["output"]["dir"]).expanduser())
    _check_can_stop(file, job["stop"])
    job["sync"] = _validate_sync(file, job["sync"])
    job["stragglers"] = _validate_stragglers(file, job["stragglers"], job["workers"])
    if job["output"]["trace_points"] is None:
        # The exact trace costs one evaluation pass per snapshot after training; it is what
        # time to target is measured on, so take it by default only when there is a target.
        job["output"]["trace_points"] = 50 if job["stop"]["target_objective"] is not None else 0
    if job["output"]["trace_budget"] is None and job["stop"]["target_objective"] is None:
        # Without a target the trace only draws: the share exact evaluations may take during
        # training, once more after it (issue 14).
        job["output"]["trace_budget"] = job["runtime"]["exact_budget"]
    try:
        cls = resolve_algorithm(job["algorithm"], file.parent)
    except LookupError as exc:
        raise JobError(file, "algorithm", "", detail=str(exc)) from None
    try:
        algo = cls(**job["params"])
        algo.validate(file.parent)
    except (TypeError, ValueError) as exc:
        raise JobError(file, _params_key(job["params"], exc), "",
                       detail=f"{job['algorithm']}: {exc}") from None
    info = _validate_data(file, "data", job["data"], file.parent, job["workers"])
    if getattr(cls, "needs_labels", False) and not info.has_labels:
        raise JobError(file, "data", "", detail=(
            f"algorithm {job['algorithm']!r} needs labelled data, but the data have no labels "
            "(set data.label_column, or use a labelled synthetic kind)"))
    migration = job["sync"].get("migration") or {}
    if migration.get("mode", "off") != "off":
        _check_movable_state(file, job["algorithm"], algo, info.n_features)
    if job["test_data"] is not None:
        test = _validate_data(file, "test_data", job["test_data"], file.parent, 1)
        if test.n_features != info.n_features:
            raise JobError(file, "test_data", f"{info.n_features} features like data",
                           f"{test.n_features} features")
    return Job(file=file, doc=job, algorithm_cls=cls, data_info=info)


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


# --------------------------------------------------------------------------- the reference
REFERENCE_PATH = "docs/job-reference.md"

_REFERENCE_INTRO = """\
Every key a job file accepts, generated from the declarations in the code (`flegel/job/config.py`,
`flegel/runtime/stragglers.py`, each sync model's `OPTIONS`, the data specs in `flegel/data` and the
built-in algorithms' docstrings).  Do not edit by hand: regenerate with

```bash
python -m flegel.job.config > docs/job-reference.md
```

(`tests/test_schema.py` fails when this file is stale).  Any key can be overridden on the
command line with `--set key.path=value` (values are read as YAML); `flegel validate job.yaml`
checks a job without running it."""


def _data_sections() -> list[validation.Section]:
    import flegel.data as data

    intro_file = ("A file (`path:` given): `.npy`, `.npz`, CSV or CSV.gz, LIBSVM, MovieLens "
                  "ratings, MNIST idx.  Relative paths are relative to the job file's folder.")
    intro_syn = ("Deterministic synthetic data (`source: synthetic`), identical whatever the "
                 "number of workers.")
    out = []
    for title, intro, spec_name, names_name in (
            ("`data`: a file", intro_file, "FILE_SPEC", "FILE_KEYS"),
            ("`data`: synthetic", intro_syn, "SYNTHETIC_SPEC", "SYNTHETIC_KEYS")):
        spec = getattr(data, spec_name, None)
        if spec is None:  # data keys not declared as Keys yet: list their names
            spec = {k: Key("see flegel.data", validation.anything, None)
                    for k in sorted(getattr(data, names_name))}
        out.append(validation.Section(title, "data.", spec, intro, level=3))
    return out


def _param_keys(cls: type) -> dict[str, Key]:
    """Keys of an algorithm's ``params`` from its ``__init__`` and its numpydoc docstring."""
    import inspect

    docs: dict[str, tuple[str, str]] = {}
    lines = (inspect.getdoc(cls) or "").splitlines()
    in_params, name = False, ""
    for i, line in enumerate(lines):
        if line.strip() == "Parameters" and i + 1 < len(lines) and set(lines[i + 1]) == {"-"}:
            in_params = True
            continue
        if not in_params or set(line) == {"-"}:
            continue
        if line and not line.startswith(" "):
            if i + 1 < len(lines) and set(lines[i + 1]) == {"-"}:
                break  # the next section
            name, _, kind = line.partition(" : ")
            docs[name.strip()] = (re.sub(r",?\s*default=.*$", "", kind).strip(), "")
        elif line.strip() and name in docs:
            kind, desc = docs[name]
            docs[name] = (kind, f"{desc} {line.strip()}".strip())
    keys = {}
    init: Callable[..., Any] = cls.__init__  # type: ignore[misc]
    for p in list(inspect.signature(init).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind, desc = docs.get(p.name, ("", ""))
        first = re.split(r"(?<=\.)\s+(?=[A-Z`])", desc, maxsplit=1)[0].rstrip(".")
        default = validation.REQUIRED if p.default is p.empty else p.default
        keys[p.name] = Key(kind or "see the algorithm", validation.anything, default, first)
    return keys


def reference_sections() -> list[validation.Section]:
    """Every table of the job reference, read from the declarations.

    Returns
    -------
    list of Section
        Top level, ``stop``, ``output``, ``runtime``, ``sync`` (each model), ``stragglers``
        (each pattern), ``data`` (file and synthetic) and ``params`` (each built-in
        algorithm).
    """
    S = validation.Section
    out = [
        S("Top level", "", TOP),
        S("`stop`", "stop.", STOP, "Training stops at the first of these that is met (FSP "
          "paper Section 5.3) or when the algorithm's `termination_check` says so."),
        S("`output`", "output.", OUTPUT),
        S("`output.checkpoint`", "output.checkpoint.", checkpoint.KEYS, "Exactly one of "
          "the two; see `flegel/rundir/checkpoint.py` for what a checkpoint holds and when it is "
          "taken.", level=3),
        S("`runtime`", "runtime.", RUNTIME),
    ]
    presets = ", ".join(f"`{name}` = `{validation.describe_default(v)}`"
                        for name, v in sync_models.PRESETS.items())
    out.append(S("`sync`", "sync.", {"model": _model_key()},
                 "The synchronization model; the other keys depend on it (tables below).  "
                 f"Presets: {presets}; keys given beside a preset override it."))
    for model in sync_models.MODELS:
        cls = sync_models.policy_class(model)
        keys = {k: v for k, v in sync_keys(cls).items() if k != "model"}
        module_doc = sys.modules[cls.__module__].__doc__ or cls.__doc__ or ""
        intro = " ".join(module_doc.strip().split("\n\n")[0].split())
        out.append(S(f"`sync` with `model: {model}`", "sync.", keys, intro, level=3))
        for name, sub in getattr(cls, "SUBSECTIONS", {}).items():
            out.append(S(f"`sync.{name}` (model `{model}`)", f"sync.{name}.", sub,
                         level=4))
    out.append(S("`stragglers`", "stragglers[].", STRAGGLER_COMMON,
                 "A list of entries; each slows the listed workers with one pattern (FSP "
                 "paper Section 6.1).  Every entry has these keys, and the options of its "
                 "pattern (tables below)."))
    for pattern, keys in STRAGGLER_KEYS.items():
        out.append(S(f"`stragglers` with `pattern: {pattern}`", "stragglers[].", keys,
                     level=3))
    data_intro = S("`data` and `test_data`", "data.", {}, "`data` is required; `test_data` "
                   "takes the same keys.  A spec is a file or a synthetic generator.")
    out.append(data_intro)
    out += _data_sections()
    out.append(S("`params`", "params.", {}, "Keyword arguments of the algorithm's "
                 "constructor; a built-in algorithm checks them itself.  Your own "
                 "algorithm's `__init__` defines its own."))
    for name in BUILTIN_ALGORITHMS:
        cls = resolve_algorithm(name)
        out.append(S(f"`params` with `algorithm: {name}`", "params.", _param_keys(cls),
                     f"`{BUILTIN_ALGORITHMS[name]}`", level=3))
    return out


def job_reference() -> str:
    """The job reference, ``docs/job-reference.md``, as Markdown text.

    Returns
    -------
    str
        The whole document.
    """
    return validation.render_reference(reference_sections(), "Job file reference",
                                   _REFERENCE_INTRO)


if __name__ == "__main__":
    sys.stdout.write(job_reference())
