"""``--set key.path=value``: overriding a job's keys from the command line.

Values are read as YAML (numbers, lists, mappings), except where the key's declaration
(:func:`key_at`) wants the text as written (``--set name=2024``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flegel import sync as sync_models
from flegel.job.errors import JobError
from flegel.job.sections import (
    DEFAULT_SYNC_MODEL,
    SECTIONS,
    STRAGGLER_COMMON,
    STRAGGLER_KEYS,
    TOP,
    expand_preset,
    straggler_keys,
    sync_keys,
)
from flegel.job.yaml_file import parse_yaml
from flegel.rundir import checkpoint
from flegel.validation import Key


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
    if len(parts) in (2, 3) and head == "sync":
        sync = doc.get("sync")
        model = expand_preset(dict(sync) if isinstance(sync, dict) else {}).get(
            "model", DEFAULT_SYNC_MODEL)
        if not isinstance(model, str) or model not in sync_models.available():
            return None
        cls = sync_models.policy_class(model)
        if len(parts) == 2:
            return sync_keys(cls).get(parts[1])
        return getattr(cls, "SUBSECTIONS", {}).get(parts[1], {}).get(parts[2])
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
