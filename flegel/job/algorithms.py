"""The built-in algorithms, listed once, and the loader of a job's ``algorithm``.

:data:`BUILTIN_ALGORITHMS` is the one registry of the built-in algorithms: the job schema
(``algorithm``'s message), :func:`resolve_algorithm`, the job reference and the estimators
(:data:`flegel.estimators.functional.BUILTIN`, each estimator naming its algorithm in
``ALGORITHM``) all read it.  A new built-in algorithm is a module in ``algorithms/``
(installed as ``flegel.algorithms``) and one line here.

The registry is text (``"module:Class"``): reading it imports nothing, so ``import flegel``
and validating a job stay light until an algorithm is resolved.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

#: Built-in algorithm name -> ``"module:Class"`` of its :class:`flegel.Algorithm` subclass.
#: Each class's ``name`` attribute is its key here (tests/test_namespaces.py checks).
BUILTIN_ALGORITHMS: dict[str, str] = {
    "kmeans": "flegel.algorithms.kmeans:KMeans",
    "gmm": "flegel.algorithms.gmm:GaussianMixture",
    "fcm": "flegel.algorithms.fcm:FuzzyCMeans",
    "logreg": "flegel.algorithms.logreg:LogisticRegression",
    "nmf": "flegel.algorithms.nmf:NMF",
    "cnn": "flegel.algorithms.cnn:CNN",
}


def _beside_job(top: str, base_dir: Path) -> bool:
    """Whether ``base_dir`` holds a module or package named ``top``."""
    return (base_dir / f"{top}.py").is_file() or (base_dir / top).is_dir()


#: The hooks an algorithm must override (any one name of each group; camelCase names count,
#: see :class:`flegel.Algorithm`).
REQUIRED_HOOKS = (("init_parameter",), ("update_data_point", "update_block"),
                  ("update_parameter",), ("evaluate",))


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
