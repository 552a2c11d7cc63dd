"""Reading a job file: YAML as users mean it, and no key given twice.

Three things plain ``yaml.safe_load`` gets wrong for a job file, all fixed here:

* YAML 1.1 reads ``1e-4`` as a string; users mean a number, as in YAML 1.2.
* YAML 1.1 reads ``on``, ``off``, ``yes`` and ``no`` (in any of their spellings ``off``,
  ``Off``, ``OFF``) as booleans, so ``sync: {migration: {mode: off}}`` and
  ``output: {progress: off}`` -- written unquoted, as people write them -- would arrive as
  ``False`` where the key means a word.  The loader reads these four words as
  :class:`~flegel.validation.YamlWord`: a string that remembers YAML 1.1's boolean, and the
  job's validation (:func:`flegel.validation.settle`) keeps the word where the key expects a
  word and the boolean where it expects ``true``/``false`` (``save_model: no`` still means
  false).  ``true`` and ``false`` stay booleans.  A word no key accepts is refused with the
  word in the message.  ``output.progress: off`` is accepted as ``none`` (the key's word for
  off), see :mod:`flegel.job.sections`.
* A mapping that gives the same key twice silently keeps the last value.

Any problem becomes a :class:`~flegel.job.errors.JobError` naming the line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from flegel.job.errors import JobError
from flegel.validation import YamlWord


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


def _boolean_word(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool | YamlWord:
    """``true``/``false`` as booleans; YAML 1.1's other boolean words as :class:`YamlWord`."""
    text = str(loader.construct_scalar(node))
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return YamlWord(text, text.lower() in ("yes", "on"))


_Loader.add_constructor("tag:yaml.org,2002:bool", _boolean_word)


def _represent_word(dumper: yaml.SafeDumper, word: YamlWord) -> yaml.ScalarNode:
    """A job written back (``yaml.safe_dump`` of a document this loader read) keeps the word
    as it was written, unquoted, so it reads back the same."""
    return dumper.represent_scalar("tag:yaml.org,2002:bool", str(word))


yaml.SafeDumper.add_representer(YamlWord, _represent_word)


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
