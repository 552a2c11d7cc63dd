"""flegel: distributed iterative machine learning that stays fast when some workers are slow.

The estimators (``KMeans``, ``GaussianMixture``, ``FuzzyCMeans``, ``LogisticRegression``,
``NMF``, ``CNN``), :func:`fit` and :func:`load` are imported on first use, so ``import flegel``
stays light: it loads neither scikit-learn nor MPI.  (They live one layer up,
docs/architecture.md: ``flegel.estimators`` imports ``flegel.job``, which imports this
package, so they are looked up by name here, not imported.)
"""

from __future__ import annotations

import importlib
from typing import Any

from flegel.api import Aggregator, Algorithm, DataInfo, Params
from flegel.block import Block, PointState

__version__ = "0.1.0"

#: Lazily imported names -> their module.
_LAZY = {
    "KMeans": "flegel.estimators", "GaussianMixture": "flegel.estimators",
    "FuzzyCMeans": "flegel.estimators", "LogisticRegression": "flegel.estimators",
    "NMF": "flegel.estimators", "CNN": "flegel.estimators", "fit": "flegel.estimators",
    "load": "flegel.estimators",
}

__all__ = ["CNN", "NMF", "Aggregator", "Algorithm", "Block", "DataInfo", "FuzzyCMeans",
           "GaussianMixture", "KMeans", "LogisticRegression", "Params", "PointState",
           "__version__", "fit", "load"]


def __getattr__(name: str) -> Any:
    """Import the estimators, ``fit`` and ``load`` on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flegel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
