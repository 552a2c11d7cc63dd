"""Job files: loading, ``--set`` overrides and validation before any MPI work (DESIGN §7).

Every problem is reported as one :class:`JobError` naming the file, the key path, what was
expected and what was found; the CLI prints it and exits with code 2, without a traceback.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flegel import sync as sync_models
from flegel.stragglers import DEFAULTS as STRAGGLER_DEFAULTS
from flegel.stragglers import parse_workers

BUILTIN_ALGORITHMS = {
    "kmeans": "algorithms.kmeans:KMeans",
    "gmm": "algorithms.gmm:GaussianMixture",
    "fcm": "algorithms.fcm:FuzzyCMeans",
    "logreg": "algorithms.logreg:LogisticRegression",
    "nmf": "algorithms.nmf:NMF",
    "cnn": "algorithms.cnn:CNN",
}

_REQUIRED = object()


class JobError(ValueError):
    """A problem with a job file, reported before any work starts."""

    def __init__(self, file: str | Path, key: str, expected: str, found: Any = _REQUIRED,
                 detail: str | None = None) -> None:
        self.file, self.key = str(file), key
        if detail is not None and detail.startswith(f"{key}"):
            msg = f"{file}: {detail}"  # the detail names the key path itself
        elif detail is not None:
            msg = f"{file}: {key}: {detail}"
        elif found is _REQUIRED:
            msg = f"{file}: {key}: expected {expected}, but the key is missing"
        else:
            msg = f"{file}: {key}: expected {expected}, found {found!r}"
        super().__init__(msg)


@dataclass(frozen=True)
class Key:
    """One key of a section: its check, its default and what it must be (for messages)."""

    expected: str
    check: Callable[[Any], bool]
    default: Any = _REQUIRED


def _int(lo: int | None = None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and (lo is None or v >= lo)


def _num(lo: float | None = None, strict: bool = False) -> Callable[[Any], bool]:
    def ok(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        return lo is None or (v > lo if strict else v >= lo)
    return ok


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _str(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


TOP = {
    "name": Key("a string", _opt(_str), None),
    "algorithm": Key("a built-in name (" + ", ".join(BUILTIN_ALGORITHMS)
                     + ") or 'package.module:Class'", _str),
    "params": Key("a mapping of algorithm parameters", _opt(_dict), None),
    "data": Key("a mapping (source: synthetic, or path: FILE)", _dict),
    "test_data": Key("a mapping like data, or null", _opt(_dict), None),
    "workers": Key("a positive integer", _int(1), 2),
    "seed": Key("an integer", _int(), 0),
    "sync": Key("a mapping with 'model'", _dict, None),
    "stop": Key("a mapping", _dict, None),
    "output": Key("a mapping", _dict, None),
    "stragglers": Key("a list of straggler patterns", lambda v: v is None or isinstance(v, list),
                      None),
    "runtime": Key("a mapping", _dict, None),
}

STOP = {
    "max_iterations": Key("a positive integer or null", _opt(_int(1)), 100),
    "target_objective": Key("a number or null", _opt(_num()), None),
    "tolerance": Key("a non-negative number or null", _opt(_num(0)), 1e-4),
    "max_time_s": Key("a positive number or null", _opt(_num(0, strict=True)), None),
}

OUTPUT = {
    "dir": Key("a folder path", _str, "runs"),
    "progress": Key("'auto', 'plain' or 'none'", lambda v: v in ("auto", "plain", "none"),
                    "auto"),
    "save_model": Key("true or false", lambda v: isinstance(v, bool), True),
    "trace_points": Key("a non-negative integer or null (θ snapshots evaluated exactly after "
                        "training; null: 50 when a target objective is set, else 0)",
                        _opt(_int(0)), None),
}

RUNTIME = {
    "block_ms": Key("a positive number of milliseconds", _num(0, strict=True), 1.0),
    "threads": Key("a positive integer (BLAS/numba threads per rank)", _int(1), 1),
    "sample_size": Key("a positive integer", _int(1), 10_000),
    "stall_warning_s": Key("a positive number of seconds", _num(0, strict=True), 10.0),
}

STRAGGLER_COMMON = {
    "pattern": Key("one of " + ", ".join(STRAGGLER_DEFAULTS), lambda v: v in STRAGGLER_DEFAULTS),
    "workers": Key("worker ranks such as [1, 2] or '1-4'", lambda v: v is not None),
}
STRAGGLER_KEYS = {
    "injected": {"tau_ms": Key("a non-negative number", _num(0)),
                 "every": Key("a positive integer", _int(1))},
    "persistent": {"factor": Key("a number >= 1", _num(1))},
    "transient": {"factor": Key("a number >= 1", _num(1)),
                  "on_s": Key("a positive number", _num(0, strict=True)),
                  "off_s": Key("a positive number", _num(0, strict=True))},
    "pause": {"at_s": Key("a non-negative number", _num(0)),
              "seconds": Key("a non-negative number", _num(0))},
}


def _section(file: Path, prefix: str, given: Any, schema: dict[str, Key]) -> dict[str, Any]:
    """Check ``given`` against ``schema``; return it completed with defaults."""
    given = {} if given is None else given
    if not isinstance(given, dict):
        raise JobError(file, prefix, "a mapping", given)
    for k in given:
        if k not in schema:
            close = difflib.get_close_matches(str(k), schema, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise JobError(file, f"{prefix}.{k}" if prefix else str(k), "", detail=(
                f"unknown key{hint}; expected one of: {', '.join(schema)}"))
    out = {}
    for k, key in schema.items():
        path = f"{prefix}.{k}" if prefix else k
        if k not in given:
            if key.default is _REQUIRED:
                raise JobError(file, path, key.expected)
            out[k] = key.default
            continue
        if not key.check(given[k]):
            raise JobError(file, path, key.expected, given[k])
        out[k] = given[k]
    return out


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


def parse_yaml(text: str):
    """Parse YAML text with :class:`_Loader`."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a job file; a missing file or bad YAML becomes a :class:`JobError`."""
    if not path.is_file():
        raise JobError(path, "(file)", "", detail="job file not found")
    try:
        doc = parse_yaml(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(parse)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise JobError(path, where, "", detail=f"invalid YAML: {problem}") from None
    if not isinstance(doc, dict):
        raise JobError(path, "(top level)", "a mapping of job keys", doc)
    return doc


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
def resolve_algorithm(name: str, base_dir: Path | None = None) -> type:
    """Return the Algorithm class of a built-in name or ``"package.module:Class"``.

    A user's module is looked up on ``sys.path`` and, failing that, beside the job file
    (``base_dir``), so an algorithm can live next to its job.
    """
    from flegel.api import Algorithm

    target = BUILTIN_ALGORITHMS.get(name, name)
    module, colon, cls = target.partition(":")
    if not colon:
        raise LookupError(f"unknown algorithm {name!r}: not a built-in "
                          f"({', '.join(BUILTIN_ALGORITHMS)}) nor 'package.module:Class'")
    if base_dir is not None and importlib.util.find_spec(module.split(".")[0]) is None:
        sys.path.insert(0, str(base_dir))
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise LookupError(f"cannot import module {module!r}: {exc}") from None
    found = getattr(mod, cls, None)
    if not (isinstance(found, type) and issubclass(found, Algorithm)):
        raise LookupError(f"module {module!r} has no flegel.Algorithm subclass {cls!r}")
    return found


def _validate_sync(file: Path, given: Any) -> dict[str, Any]:
    given = {"model": "bsp"} if given is None else dict(given)
    model = given.get("model", "bsp")
    if model in sync_models.PRESETS:
        given = {**sync_models.PRESETS[model], **{k: v for k, v in given.items() if k != "model"}}
        model = given["model"]
    if model not in sync_models.available():
        raise JobError(file, "sync.model", "one of " + ", ".join(
            sync_models.available() + list(sync_models.PRESETS)), model)
    cls = sync_models.policy_class(model)
    schema = {"model": Key("a sync model", _str)}
    for k, (default, expected) in cls.OPTIONS.items():
        schema[k] = Key(expected, lambda v: True, default)
    out = _section(file, "sync", given, schema)
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
        if pattern not in STRAGGLER_KEYS:
            raise JobError(file, f"{prefix}.pattern", "one of " + ", ".join(STRAGGLER_KEYS),
                           pattern)
        schema = dict(STRAGGLER_COMMON)
        for k, key in STRAGGLER_KEYS[pattern].items():
            schema[k] = Key(key.expected, key.check, STRAGGLER_DEFAULTS[pattern][k])
        entry = _section(file, prefix, spec, schema)
        try:
            ranks = parse_workers(entry["workers"])
        except ValueError as exc:
            raise JobError(file, f"{prefix}.workers", "", detail=str(exc)) from None
        bad = [r for r in ranks if not 1 <= r <= workers]
        if bad or not ranks:
            raise JobError(file, f"{prefix}.workers", f"worker ranks between 1 and {workers}",
                           entry["workers"])
        out.append(entry)
    return out


def _validate_data(file: Path, key: str, spec: dict[str, Any], base_dir: Path,
                   workers: int):
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

    def make_algorithm(self):
        return self.algorithm_cls(**(self.doc["params"] or {}))


def validate(doc: dict[str, Any], file: Path, workers: int | None = None) -> Job:
    """Check a whole job; return it resolved, or raise :class:`JobError`.

    ``workers`` overrides the job's worker count (the world size under ``mpirun``).
    """
    job = _section(file, "", doc, TOP)
    if workers is not None:
        job["workers"] = workers
    job["params"] = job["params"] or {}
    job["stop"] = _section(file, "stop", job["stop"], STOP)
    job["output"] = _section(file, "output", job["output"], OUTPUT)
    job["runtime"] = _section(file, "runtime", job["runtime"], RUNTIME)
    job["sync"] = _validate_sync(file, job["sync"])
    job["stragglers"] = _validate_stragglers(file, job["stragglers"], job["workers"])
    if job["output"]["trace_points"] is None:
        # The exact trace costs one evaluation pass per snapshot after training; it is what
        # time to target is measured on, so take it by default only when there is a target.
        job["output"]["trace_points"] = 50 if job["stop"]["target_objective"] is not None else 0
    try:
        cls = resolve_algorithm(job["algorithm"], file.parent)
    except LookupError as exc:
        raise JobError(file, "algorithm", "", detail=str(exc)) from None
    try:
        algo = cls(**job["params"])
        algo.validate(file.parent)
    except (TypeError, ValueError) as exc:
        raise JobError(file, "params", "", detail=f"{job['algorithm']}: {exc}") from None
    info = _validate_data(file, "data", job["data"], file.parent, job["workers"])
    if getattr(cls, "needs_labels", False) and not info.has_labels:
        raise JobError(file, "data", "", detail=(
            f"algorithm {job['algorithm']!r} needs labelled data, but the data have no labels "
            "(set data.label_column, or use a labelled synthetic kind)"))
    if job["test_data"] is not None:
        test = _validate_data(file, "test_data", job["test_data"], file.parent, 1)
        if test.n_features != info.n_features:
            raise JobError(file, "test_data", f"{info.n_features} features like data",
                           f"{test.n_features} features")
    return Job(file=file, doc=job, algorithm_cls=cls, data_info=info)


def load_job(path: str | Path, sets: list[str] | None = None,
             workers: int | None = None) -> Job:
    """Load, override and validate a job file."""
    file = Path(path).expanduser().resolve() if Path(path).exists() else Path(path)
    doc = load_yaml(file)
    doc = apply_overrides(doc, list(sets or []), file)
    return validate(doc, file, workers)
