"""numba kernels compiled on first call, so importing a module that has some does not import
numba (the built-in algorithms; :mod:`flegel.data`'s parsers may do the same).

``import numba`` costs 0.3-1 s of CPU per process (LLVM bindings, numba's type system and,
at the first kernel call, SciPy's BLAS: :func:`preload_blas`).  Only the ranks that run a
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

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: The Cython module whose ``__pyx_capi__`` table numba's compiled code takes its BLAS
#: functions from (``np.dot`` inside a kernel: numba's ``_helperlib.c``,
#: ``import_cython_function``).
BLAS_MODULE = "scipy.linalg.cython_blas"

#: What a first call of a cached kernel that numba's cache does not hold yet does before it
#: compiles (:func:`before_compiling`; the innermost last).
_BEFORE_COMPILING: list[Callable[[], None]] = []


class NotCompiledError(Exception):
    """A kernel's first call refused to compile (:func:`refuse_compiling`)."""


def refuse_compiling() -> None:
    """A :func:`before_compiling` hook: raise :class:`NotCompiledError` instead of compiling."""
    raise NotCompiledError


@contextlib.contextmanager
def before_compiling(hook: Callable[[], None]) -> Iterator[None]:
    """Inside, the first call (in this process) of each cached :class:`LazyKernel` whose
    compiled version numba's cache does not hold yet calls ``hook`` before compiling it.

    A worker other than the first waits there for worker 1, which compiles it, and then loads
    it from the cache (``flegel/run.py``'s warm-up: n workers compiling the same kernel at
    once cost n times the CPU, issue 14); ahead of θ⁽⁰⁾ it refuses instead
    (:func:`refuse_compiling`, :func:`flegel.device.load_ahead`).  Asked per kernel as the
    job calls it (issue 19): a kernel the job never calls -- FCM's general ``m`` beside its
    ``m = 2`` kernel, logistic regression's multinomial kernel beside its binary one -- is
    not asked about, and one it calls but that was never compiled (binary logistic
    regression run before, multinomial now) is.  The hook may be called more than once (one
    call per such kernel).
    """
    _BEFORE_COMPILING.append(hook)
    try:
        yield
    finally:
        _BEFORE_COMPILING.pop()


def is_compiled(dispatcher: Any) -> bool:
    """Whether numba's on-disk cache holds a compiled version of ``dispatcher`` for its
    current source (any argument types; a dispatcher without ``cache=True``: True, it has
    nothing to wait for).  False when the cache cannot be read (numba's cache index is
    internal to numba: the answer errs on the side of compiling once first)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is None:
        return True
    try:
        return bool(cache_file._load_index())
    except Exception:  # noqa: BLE001 - another numba's layout: compile once first
        return False


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
        self._called = False  # called in this process (past :func:`before_compiling`)
        functools.update_wrapper(self, fn)

    def dispatcher(self) -> Callable[..., Any]:
        """The numba dispatcher (``numba`` is imported here, the first time)."""
        if self._compiled is None:
            import numba

            preload_blas()
            self._compiled = numba.njit(**self.options)(self.py_func)
        return self._compiled

    def first_call(self) -> Callable[..., Any]:
        """The dispatcher, at this kernel's first call in this process: first the
        :func:`before_compiling` hook when its compiled version is not in numba's cache."""
        compiled = self.dispatcher()
        if _BEFORE_COMPILING and self.options.get("cache") and not is_compiled(compiled):
            _BEFORE_COMPILING[-1]()
        self._called = True
        return compiled

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None or not self._called:
            compiled = self.first_call()
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
    """Whether some plain numba dispatcher of ``module`` made with ``cache=True`` (a user's
    algorithm's ``numba.njit``, not a :class:`LazyKernel`) has no compiled version in numba's
    cache yet; False when the module has none or numba is not imported (it has none then).

    Every one, not any: which of them a job calls is not known, and a job calling one never
    compiled would have every worker compile it at once.  The :class:`LazyKernel` objects are
    not counted here: they are asked one by one as the job first calls them
    (:func:`before_compiling`).

    Parameters
    ----------
    module : str
        A module already imported (an algorithm's).
    """
    if "numba" not in sys.modules:
        return False
    return not all(is_compiled(value) for value in vars(sys.modules[module]).values()
                   if not isinstance(value, LazyKernel) and hasattr(value, "enable_caching"))


class _BindBlas(importlib.abc.MetaPathFinder):
    """Binds the preloaded BLAS module as ``scipy.linalg.cython_blas`` when ``scipy.linalg``
    itself is imported later (an import statement finds it in ``sys.modules``; the attribute
    of the package is what the import machinery would have set), then steps aside.

    It steps aside when the package's module runs, not when its spec is found: a
    ``find_spec("scipy.linalg")`` alone (``importlib.util.find_spec``, a tool asking what is
    installed) imports nothing, and the import after it must still bind the attribute.
    """

    def __init__(self) -> None:
        self._finding = False  # our own find_spec below goes through sys.meta_path again

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "scipy.linalg" or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            module.cython_blas = sys.modules[BLAS_MODULE]  # type: ignore[attr-defined]
            run(module)

        loader.exec_module = exec_module
        return spec


def preload_blas() -> bool:
    """Load SciPy's ``cython_blas`` extension alone, without the ``scipy.linalg`` package,
    for numba's BLAS calls; returns whether it did.

    numba imports :data:`BLAS_MODULE` to fetch ``dgemm`` and the like from it, and does so
    for any kernel, not only one that calls ``np.dot``: ``numba.np.arraymath``, which its
    context loads at the first compile or cache load of any kernel, checks for BLAS when
    imported (``_check_blas``).  So it is not gated on the kernels that call BLAS: every
    kernel would pay the import.  The import runs ``scipy/linalg/__init__.py`` first, which
    imports the whole of ``scipy.linalg`` (and ``scipy._lib``'s array-API layer), where the
    extension alone loads in about 20 ms (issue 19, "the first second counts"; the saving:
    ``python bench/startup.py --kernels 6 --ab-preload``).
    The module loaded here is the very file the package import would load, so numba calls
    the same BLAS and every result is bit for bit the same.  Nothing is done when
    ``scipy.linalg`` is imported already or SciPy's layout is not the expected one (one
    ``cython_blas`` extension file in ``scipy/linalg``): numba then imports it as before.
    """
    if "scipy.linalg" in sys.modules or BLAS_MODULE in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec("scipy")
        if spec is None or spec.origin is None:
            return False
        folder = Path(spec.origin).parent / "linalg"
        suffixes = importlib.machinery.EXTENSION_SUFFIXES
        files = [f for f in folder.glob("cython_blas*")
                 if any(f.name == "cython_blas" + s for s in suffixes)]
        if len(files) != 1:
            return False
        import scipy  # noqa: F401 - the parent package (light), as the import system would

        loader = importlib.machinery.ExtensionFileLoader(BLAS_MODULE, str(files[0]))
        blas_spec = importlib.util.spec_from_file_location(BLAS_MODULE, files[0],
                                                           loader=loader)
        assert blas_spec is not None
        module = importlib.util.module_from_spec(blas_spec)
        sys.modules[BLAS_MODULE] = module
        try:
            loader.exec_module(module)
        except BaseException:
            del sys.modules[BLAS_MODULE]
            raise
    except Exception:  # noqa: BLE001 - any surprise: numba imports it the usual way
        return False
    sys.meta_path.insert(0, _BindBlas())
    return True
