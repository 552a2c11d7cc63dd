"""Synchronization models, one module each, found by the job's ``sync.model``.

The registry maps a model name to ``"module:Class"`` so validation can read a model's options
without importing MPI, and adding a model touches no other model.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flegel.sync.base import MasterPolicy

#: model name -> "module:Class" of its master policy.
MODELS: dict[str, str] = {
    "bsp": "flegel.sync.bsp:BSP",
    "fsp": "flegel.sync.fsp:FSP",
    "asp": "flegel.sync.asp:ASP",
    "ssp": "flegel.sync.ssp:SSP",
    "dssp": "flegel.sync.dssp:DSSP",
    "specsync": "flegel.sync.specsync:SpecSync",
    "elastic": "flegel.sync.elastic:ElasticBSP",
}

#: Short names used by ``flegel compare``: name -> the ``sync`` section it stands for.
PRESETS: dict[str, dict[str, Any]] = {
    "bspb": {"model": "bsp", "batch": "full"},
    "bspv": {"model": "bsp", "batch": "auto"},
    "fspb": {"model": "fsp", "interval": "binary"},
    "fspv": {"model": "fsp", "interval": "multistage"},
    # FSP with data migration (Section 4.3): asynchronous windows (the default), or all at
    # the barrier; and without it, for comparison.
    "fspb-off": {"model": "fsp", "interval": "binary", "migration": {"mode": "off"}},
    "fspv-off": {"model": "fsp", "interval": "multistage", "migration": {"mode": "off"}},
    "fspb-async": {"model": "fsp", "interval": "binary", "migration": {"mode": "async"}},
    "fspb-sync": {"model": "fsp", "interval": "binary", "migration": {"mode": "sync"}},
    "fspv-async": {"model": "fsp", "interval": "multistage", "migration": {"mode": "async"}},
    "fspv-sync": {"model": "fsp", "interval": "multistage", "migration": {"mode": "sync"}},
}


def available() -> list[str]:
    """Names of the models whose module is installed."""
    return [m for m in MODELS if importlib.util.find_spec(MODELS[m].partition(":")[0])]


def policy_class(model: str) -> type[MasterPolicy]:
    """Import and return the master policy class of ``model`` (its ``WORKER`` attribute is the
    worker policy class)."""
    module, _, name = MODELS[model].partition(":")
    cls: type[MasterPolicy] = getattr(importlib.import_module(module), name)
    return cls


def register(model: str, target: str, presets: dict[str, dict[str, Any]] | None = None) -> None:
    """Add a model (``target`` is ``"module:Class"``), e.g. from a user's plugin."""
    MODELS[model] = target
    PRESETS.update(presets or {})
