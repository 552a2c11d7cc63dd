"""A ``bench/`` script imported as a module, for the tests that call its functions (bench/
is a folder of scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as the module ``bench_<name>``, registered in ``sys.modules``
    (dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
