"""The job reference, ``docs/job-reference.md``, generated from the declarations.

Every table is read from where its keys are declared (:mod:`flegel.job.sections`, each sync
model's ``OPTIONS``, :mod:`flegel.runtime.stragglers`, :mod:`flegel.data.keys`,
:mod:`flegel.rundir.checkpoint` and the built-in algorithms' docstrings), so the reference
cannot drift from the code.  Regenerate it with::

    python -m flegel.job.reference > docs/job-reference.md

``tests/test_schema.py`` fails when the file is stale.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flegel import sync as sync_models
from flegel import validation
from flegel.job.algorithms import BUILTIN_ALGORITHMS, resolve_algorithm
from flegel.job.sections import (
    OUTPUT,
    RUNTIME,
    STOP,
    STRAGGLER_COMMON,
    STRAGGLER_KEYS,
    TOP,
    model_key,
    sync_keys,
)
from flegel.rundir import checkpoint
from flegel.validation import Key, describe_default


@dataclass(frozen=True)
class Section:
    """One table of the job reference.

    Attributes
    ----------
    title : str
        Heading (Markdown inline code allowed).
    prefix : str
        Written before every key name in the table (``"stop."``, ``"stragglers[]."``).
    keys : mapping of str to Key
        The keys, in the order shown.
    intro : str
        A paragraph under the heading.
    level : int
        Heading level (2 for ``##``).
    notes : tuple of str
        Paragraphs under the table.
    """

    title: str
    prefix: str
    keys: Mapping[str, Key]
    intro: str = ""
    level: int = 2
    notes: tuple[str, ...] = field(default_factory=tuple)


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ").strip()


def render_section(section: Section) -> str:
    """Render one :class:`Section` as a Markdown heading, paragraph and table.

    Parameters
    ----------
    section : Section
        The section.

    Returns
    -------
    str
        Markdown ending with a blank line.
    """
    lines = ["#" * section.level + " " + section.title, ""]
    if section.intro:
        lines += [section.intro, ""]
    if section.keys:
        lines += ["| key | expected | default | description |", "|---|---|---|---|"]
    for name, key in section.keys.items():
        default = describe_default(key.default)
        shown = default if key.required else f"`{default}`"
        lines.append(f"| `{section.prefix}{name}` | {_cell(key.expected)} | {_cell(shown)} "
                     f"| {_cell(key.doc) or '(undocumented)'} |")
    if section.keys:
        lines.append("")
    for note in section.notes:
        lines += [note, ""]
    return "\n".join(lines)


def render_reference(sections: Sequence[Section], title: str, intro: str = "") -> str:
    """Render the whole job reference.

    Parameters
    ----------
    sections : sequence of Section
        The tables, in order.
    title : str
        The document's ``#`` heading.
    intro : str
        Paragraphs under the title.

    Returns
    -------
    str
        Markdown text ending with one newline.
    """
    parts = [f"# {title}", ""]
    if intro:
        parts += [intro.strip(), ""]
    out = "\n".join(parts) + "\n" + "\n".join(render_section(s) for s in sections)
    return out.rstrip("\n") + "\n"


# --------------------------------------------------------------------------- the tables
REFERENCE_PATH = "docs/job-reference.md"

_REFERENCE_INTRO = """\
Every key a job file accepts, generated from the declarations in the code (`flegel/job/sections.py`,
`flegel/runtime/stragglers.py`, each sync model's `OPTIONS`, the data specs in `flegel/data` and the
built-in algorithms' docstrings).  Do not edit by hand: regenerate with

```bash
python -m flegel.job.reference > docs/job-reference.md
```

(`tests/test_schema.py` fails when this file is stale).  Any key can be overridden on the
command line with `--set key.path=value` (values are read as YAML); `flegel validate job.yaml`
checks a job without running it."""


def _data_sections() -> list[Section]:
    from flegel.data.keys import FILE_SPEC, SYNTHETIC_SPEC

    intro_file = ("A file (`path:` given): `.npy`, `.npz`, CSV or CSV.gz, LIBSVM, MovieLens "
                  "ratings, MNIST idx.  Relative paths are relative to the job file's folder.")
    intro_syn = ("Deterministic synthetic data (`source: synthetic`), identical whatever the "
                 "number of workers.")
    return [Section("`data`: a file", "data.", FILE_SPEC, intro_file, level=3),
            Section("`data`: synthetic", "data.", SYNTHETIC_SPEC, intro_syn, level=3)]


def _param_keys(cls: type) -> dict[str, Key]:
    """Keys of an algorithm's ``params`` from its ``__init__`` and its numpydoc docstring."""
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
        rule = validation.Described(validation.anything, kind or "see the algorithm")
        keys[p.name] = Key(rule, default, first)
    return keys


def reference_sections() -> list[Section]:
    """Every table of the job reference, read from the declarations.

    Returns
    -------
    list of Section
        Top level, ``stop``, ``output``, ``runtime``, ``sync`` (each model), ``stragglers``
        (each pattern), ``data`` (file and synthetic) and ``params`` (each built-in
        algorithm).
    """
    S = Section
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
    presets = ", ".join(f"`{name}` = `{describe_default(v)}`"
                        for name, v in sync_models.PRESETS.items())
    out.append(S("`sync`", "sync.", {"model": model_key()},
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
    return render_reference(reference_sections(), "Job file reference",
                                   _REFERENCE_INTRO)


if __name__ == "__main__":
    sys.stdout.write(job_reference())
