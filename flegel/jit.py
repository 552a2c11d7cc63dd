"""numba kernels compiled on first call, so importing a module that has some does not import
numba (the built-in algorithms; :mod:`flegel.data`'s parsers may do the same).

``import numba`` costs 0.3-1 s of CPU per process (LLVM bindings, numba's type system and,
at the first kernel call, ``scipy.linalg`` for numba's BLAS).  Only the ranks that run a
kernel need it: the workers.  The master (θ⁽⁰⁾, aggregation, the θ update) and ``flegel
run``'s launcher (it validates the job, which imports the algorithm's module) never call a
kernel, and with five ranks on two cores their imports are paid in the workers' wall time
too (issue 14).

The compiled kernel is an ordinary ``numba.njit(cache=True)`` dispatcher built from the same
function, so numba's on-disk cache (keyed by the function's file, line and source stamp)
works as before: a kernel compiled once is loaded by every later process.  Where numba puts
that cache: beside the source in ``__pycache__`` when that folder is writable (an editable
install, a virtual environment), else in the user's cache folder (``~/.cache/numba``), or in
``NUMBA_CACHE_DIR`` when it is set (a cluster whose home is not shared: point it at a shared
folder so every node loads what one compiled).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class LazyKernel:
    """A function that becomes a numba dispatcher the first time it is called.

    Parameters
    ----------
    fn : callable
        The kernel's Python source (numba-compilable).
    options : dict
        ``numba.njit`` options (``cache=True`` and the like).

    Notes
    -----
    One Python call more per kernel call (about 0.1 µs); kernels run once per block of about
    a millisecond, so it does not show.
    """

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.py_func = fn
        self.options = options
        self._compiled: Callable[..., Any] | None = None
        functools.update_wrapper(self, fn)

    def dispatcher(self) -> Callable[..., Any]:
        """The numba dispatcher (``numba`` is imported here, the first time)."""
        if self._compiled is None:
            import numba

            self._compiled = numba.njit(**self.options)(self.py_func)
        return self._compiled

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self.dispatcher()
        return compiled(*args)


def njit(**options: Any) -> Callable[[Callable[..., Any]], LazyKernel]:
    """``numba.njit(**options)``, compiled (or loaded from numba's cache) on first call.

    Parameters
    ----------
    **options
        Passed to ``numba.njit``.

    Returns
    -------
    callable
        A decorator turning a function into a :class:`LazyKernel`.
    """

    def decorate(fn: Callable[..., Any]) -> LazyKernel:
        return LazyKernel(fn, options)

    return decorate


def cache_is_cold(module: str) -> bool:
    """Whether a cached numba kernel of ``module`` has nothing compiled in numba's cache yet.

    The kernels are the module's :class:`LazyKernel` objects and numba dispatchers made with
    ``cache=True``.  False when the module has none (nothing to compile) or every one has a
    compiled version on disk for its current source; True when any has none, or when the
    cache cannot be read (numba's cache index is internal to numba: the answer errs on the
    side of compiling once first).  Imports numba only when the module has lazy kernels.

    Parameters
    ----------
    module : str
        A module already imported (an algorithm's).
    """
    import sys

    found: list[Any] = []
    for value in vars(sys.modules[module]).values():
        if isinstance(value, LazyKernel) and value.options.get("cache"):
            found.append(value.dispatcher())
        elif "numba" in sys.modules and hasattr(value, "enable_caching"):
            found.append(value)
    for dispatcher in found:
        cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
        if cache_file is None:  # not cached: every rank compiles its own anyway
            continue
        try:
            index = cache_file._load_index()
        except Exception:  # noqa: BLE001 - another numba's layout: compile once first
            return True
        if not index:
            return True
    return False
