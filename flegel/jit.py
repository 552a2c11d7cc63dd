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

A job's first compile is worker 1's alone: workers 2..n load their kernels with compiling
refused (:func:`without_compiling`, at numba's own cache miss for the call's exact argument
types) and, refused, load them once worker 1 has compiled them.
"""

from __future__ import annotations

import copy
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

#: The Cython module whose ``__pyx_capi__`` table numba's compiled code takes its BLAS
#: functions from (``np.dot`` inside a kernel: numba's ``_helperlib.c``,
#: ``import_cython_function``).
BLAS_MODULE = "scipy.linalg.cython_blas"

T = TypeVar("T")


class NotCompiledError(Exception):
    """Inside :func:`without_compiling`, a numba kernel call would have compiled."""


class _Refusal:
    """One :func:`without_compiling` block: its thread, and what it refused (if any)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.refused: str | None = None


#: The open :func:`without_compiling` blocks (the innermost last).
_REFUSING: list[_Refusal] = []
#: Whether :func:`_listen` has registered the listener of numba's compile event.
_LISTENING = False
#: Held while :func:`_listen` checks and registers (two threads' first blocks at once).
_LISTEN_LOCK = threading.Lock()


def _on_compile(data: dict[str, Any]) -> None:
    """numba's ``numba:compile`` start event (``data``: the dispatcher and the argument
    types): in a :func:`without_compiling` block of this thread, refuse it -- unless the
    dispatcher keeps no on-disk cache (no ``cache=True``): waiting for worker 1 would not
    spare its compile."""
    from numba.core.caching import NullCache

    me = threading.get_ident()
    dispatcher = data.get("dispatcher")
    if isinstance(getattr(dispatcher, "_cache", None), NullCache):
        return
    for refusal in reversed(_REFUSING):
        if refusal.thread == me:
            fn = getattr(dispatcher, "py_func", None)
            refusal.refused = (f"{getattr(fn, '__qualname__', fn)}"
                               f"({', '.join(map(str, data.get('args', ())))})")
            raise NotCompiledError(f"{refusal.refused} is not in numba's cache")


def _listen() -> None:
    """Register :func:`_on_compile` for numba's compile event, once per process (numba is
    imported by then: the caller checked).

    A refusal raises in the listener's ``on_start``, which ends numba's broadcast of that
    START event: a listener registered after flegel's (a user's own, numba's profilers) may
    then get the compile's END without its START.
    """
    global _LISTENING
    with _LISTEN_LOCK:
        if _LISTENING:
            return
        from numba.core import event

        class Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                _on_compile(ev.data or {})

            def on_end(self, ev: Any) -> None:
                pass

        event.register("numba:compile", Listener())
        _LISTENING = True


def _from_refusal(err: BaseException) -> bool:
    """Whether ``err`` is a :class:`NotCompiledError` or was raised from or while handling
    one (its ``__cause__`` / ``__context__`` chain, ``raise ... from None`` included)."""
    todo: list[BaseException | None] = [err]
    seen: set[int] = set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, NotCompiledError):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return False


def without_compiling(call: Callable[[], object]) -> bool:
    """Run ``call()`` with numba's compiling refused; whether it ran with nothing to compile.

    A worker other than the first runs its kernels' first calls (``flegel/run.py``'s
    warm-up; ahead of θ⁽⁰⁾, :func:`flegel.device.load_ahead`) through this: when one of them
    is not in numba's cache, worker 1 compiles it and the others wait for it and then load it
    from the cache (n workers compiling the same kernel at once cost n times the CPU; issues
    14 and 19).

    The test is numba's own: its ``numba:compile`` event, which a dispatcher broadcasts after
    its in-memory overloads and its on-disk cache have missed for the exact argument types of
    the call (dtype, contiguity, which kernel: K-means' parallel kernel with
    ``runtime.threads: 2`` as well as its serial one) and before it compiles.  A listener of
    that event raises :class:`NotCompiledError`, which ends ``call`` there; the call is to be
    made again once the kernel is in the cache.  Any numba dispatcher with ``cache=True``
    counts: flegel's :class:`LazyKernel` objects and a user's plain ``numba.njit`` kernels
    alike (one without a cache compiles in every process whatever it waits for).
    Where ``call`` catches that error itself (or raises another from it, or while handling
    it), the refusal is still recorded and ``False`` returned; any other error ``call``
    raises propagates, refusal or not.

    Why not wait inside the event: the dispatcher has read its cache already when the event
    is broadcast, so it would compile after the wait all the same.  The outermost cached
    kernel's compile is refused first (a kernel's callees compile inside its own compile).
    An outer kernel without ``cache=True`` is not refused and compiles: a cached kernel it
    calls that the cache lacks is then refused inside the outer kernel's typing, and the
    error passes through numba's typing to ``call`` (numba 0.68 lets an error not its own
    through unchanged; one wrapping it would still count: its ``__cause__``).  numba not yet
    imported when the block starts (a module importing it inside ``call``): not watched, as
    before issue 19.

    Parameters
    ----------
    call : callable
        Called once, without arguments (its result is dropped).

    Returns
    -------
    bool
        True when ``call`` returned with nothing refused (a kernel without ``cache=True``,
        or another thread, may have compiled); False when a compile was refused.
    """
    refusal = _Refusal()
    _REFUSING.append(refusal)
    try:
        if "numba" in sys.modules:
            _listen()
        call()
    except Exception as err:
        if refusal.refused is None or not _from_refusal(err):
            raise
    finally:
        _REFUSING.remove(refusal)
    return refusal.refused is None


def after_first(obj: T, call: Callable[[T], object], wait: Callable[[], object]) -> bool:
    """Workers 2..n's warm-up (``flegel/run.py``): ``call`` a deep copy of ``obj`` with
    compiling refused (:func:`without_compiling`), ``wait()`` for worker 1 to have compiled,
    then ``call(obj)`` once; whether the first call had nothing to compile.

    A refusal stops ``call`` partway.  Were it made on ``obj`` itself, an algorithm that
    changes its own state in ``update_block`` before a kernel call (a counter, a random
    draw) would have done so twice on a cold cache and once on a warm one, unlike worker 1
    (which calls it once): BSP's runs would not be the same bit for bit
    (``docs/determinism.md``).  ``obj`` that cannot be deep-copied: the first call is made
    on ``obj`` and, refused, made again (the same once the cache is warm).

    Parameters
    ----------
    obj : object
        What ``call`` runs on (the worker's algorithm).
    call : callable
        ``call(obj)``: the warm-up.
    wait : callable
        Returns once worker 1 has compiled (its "compiled" message).

    Returns
    -------
    bool
        True when the refusable call compiled nothing.
    """
    try:
        probe: T | None = copy.deepcopy(obj)
    except Exception:  # noqa: BLE001 - cannot be copied: the warm-up runs on obj (twice)
        probe = None
    loaded = without_compiling(lambda: call(obj if probe is None else probe))
    wait()
    if probe is not None or not loaded:
        call(obj)
    return loaded


def make_dispatcher(fn: Callable[..., Any], options: dict[str, Any]) -> Callable[..., Any]:
    """``numba.njit(**options)(fn)``, with what flegel adds to every kernel it makes: SciPy's
    BLAS preloaded (:func:`preload_blas`), the refusal of :func:`without_compiling` listening,
    and cache hits loaded without the full refresh of numba's target context
    (:func:`load_cached_lightly`).  Imports numba.

    Parameters
    ----------
    fn : callable
        The kernel's Python source (numba-compilable).
    options : dict
        ``numba.njit`` options.

    Returns
    -------
    callable
        The numba dispatcher.
    """
    import numba

    preload_blas()
    if _REFUSING:  # numba imported just now, inside a without_compiling block
        _listen()
    compiled = numba.njit(**options)(fn)
    load_cached_lightly(compiled)
    return compiled


def load_cached_lightly(compiled: Any) -> bool:
    """Load ``compiled``'s (a numba dispatcher's) machine code from numba's on-disk cache
    without first refreshing numba's whole target context; whether the light path is set.

    numba's ``Cache.load_overload`` calls ``target_context.refresh()`` before each load
    (numba 0.68, ``numba/core/caching.py``): it imports and installs every typing and lowering
    registry numba has (``numba.np.*``, typed containers, jitclass, random, polynomials,
    third-party extensions through their entry points) -- what compiling needs, not loading:
    a cached kernel is object code, linked against numba's runtime (NRT) and helper library,
    and whatever Python objects its environment pickled import their own modules.  The light
    path does what loading needs of the refresh, ``rtsys.initialize`` (NRT: the kernels
    allocate arrays), then numba's own load.  A miss still compiles through numba's compiler,
    which refreshes the context itself.  It saves every worker 0.2-0.25 CPU-s of its start
    (issue 19; ``python bench/fixed_cost.py --kernels 8``), with five ranks on two cores.

    The object code and its linking are numba's, so a loaded kernel computes bit for bit what
    the refreshed load gave.  Should the light load raise (a numba whose cached code needs a
    registry after all), numba's own load runs instead -- for errors Python sees only: a
    symbol that some numba module registers with the linker only when imported would link
    silently and fail at the call.  The one such module the refresh imports that loading
    may need is ``numba.cpython.hashing`` (``_numba_hashsecret_*``: kernels that hash), so
    the light path imports it (~19 ms); the parallel runtime is started by numba's own
    reload step, which the light path keeps.  A numba whose ``Cache`` overrides
    ``load_overload`` or lacks these internals, or a dispatcher without an on-disk cache
    (``cache=False``), is left as it is (``pyproject.toml`` allows numba >= 0.58; this was
    read on 0.68).

    Parameters
    ----------
    compiled : numba dispatcher
        Made by ``numba.njit``; its cache's ``load_overload`` is replaced in place.

    Returns
    -------
    bool
        Whether the light path was set.
    """
    cache = getattr(compiled, "_cache", None)
    full = getattr(cache, "load_overload", None)
    load = getattr(cache, "_load_overload", None)
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    if full is None or load is None or guard is None:
        return False  # a NullCache (no cache=True), or another numba's internals
    try:
        import numba.cpython.hashing  # noqa: F401 - registers the hash secret's symbols
        from numba.core.caching import Cache
        from numba.core.runtime import rtsys
    except ImportError:
        return False
    if getattr(type(cache), "load_overload", None) is not Cache.load_overload:
        return False  # a cache class of its own: its load is not "refresh, then load"

    def load_overload(sig: Any, target_context: Any) -> Any:
        # A failure after a partial load repeats numba's reload steps in its own load:
        # idempotent on 0.68 (the parallel runtime's launch is guarded).
        try:
            rtsys.initialize(target_context)
            with guard():
                return load(sig, target_context)
        except Exception:  # noqa: BLE001 - anything the light path lacked: numba's own load
            return full(sig, target_context)

    cache.load_overload = load_overload  # type: ignore[union-attr]
    return True


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
            self._compiled = make_dispatcher(self.py_func, self.options)
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
