"""Where an algorithm's kernels run, and which of its kernels runs there (issue 14, items 1
and 4).

Two choices, both algorithm parameters in scikit-learn's manner:

``device`` : {"cpu", "gpu", "auto"}
    The array module the kernels use: NumPy, or CuPy on the current CUDA device.  ``"gpu"``
    without CuPy or without a visible device is an error raised before any work (from the
    algorithm's ``validate``), naming the reason; ``"auto"`` falls back to the CPU and says
    so in one line on standard error, once per job.
``kernel`` : {"auto", "compiled", "array"}
    On the CPU, an algorithm may have two kernels for one piece of math: a *compiled* one
    (numba; fastest per point, but the first call in a process pays numba's start-up: about
    0.7 CPU-seconds to import numba and load a cached kernel, seconds more to compile it on
    a cold cache) and an *array* one written against the array API (``xp``: NumPy here,
    CuPy on a GPU; no start-up cost, about half the compiled kernel's speed on K-means).
    ``"auto"`` starts on the array kernel and switches to the compiled one once the extra
    time the array kernel has cost would have paid numba's start-up (:class:`KernelChoice`,
    the ski-rental rule: never more than twice the cost of the better choice made with
    hindsight).  So a short job never pays numba's start-up and a long one pays it once,
    early.  On a GPU the array kernel always runs.

The meter counts *work units* (an algorithm's estimate of its multiply-adds, e.g. n·d·K for
a K-means block), not seconds: a switch at a fixed amount of work happens at the same block
in every run, so bit-for-bit determinism under BSP (docs/determinism.md) holds.  The units
were calibrated on K-means; for an algorithm whose two kernels are closer in speed (logistic
regression) the switch comes earlier than its own break-even, which costs at most numba's
start-up once.

A job whose length is known (``stop.max_iterations``) is planned instead (issue 23): once a
worker has loaded its shard it compares the whole job's work (``max_iterations`` passes over
the shard) with :data:`PLAN_UNITS` (:meth:`KernelChoice.plan`) -- the offline choice the
ski-rental rule approximates.  A job planned onto the compiled kernel runs it from its first
block, and numba is started (its kernels loaded from numba's cache) while the master computes
θ⁽⁰⁾ (:func:`load_ahead`), so neither the training clock nor a barrier pays for it.  A job
without a known length (``max_iterations: null``, a time limit) keeps the ski-rental rule.
Both choices depend only on the job and the shard's size: the same blocks run the same
kernel in every run (bit-for-bit determinism under BSP).

Under the ski-rental rule the block that switches pays numba's start-up inside it (about
0.7 s; seconds on a cold cache, when every worker compiles): under FSP the barrier that block
is answering waits for it, once per run.  Set ``kernel: compiled`` to pay it before training
starts instead (the worker warm-up), as before.

On a GPU the shard is *resident* (issue 23): a worker copies its shard's features to the
device once, after loading it (:class:`DeviceRows`, made by :func:`resident_rows` for the
store, :meth:`flegel.runtime.store.ShardStore.place`), and each block's ``x`` is then a slice
of that device array (a device-side gather where the block skips rows), not a host-to-device
copy of the block.  Points that arrive by data migration are copied to the device once, when
they arrive (:meth:`DeviceRows.append`).  The device copy keeps one row per host row, as the
host copy does: a point sent away keeps its row on both (the traversal skips it; under
virtual migration it comes back to that row, with no copy), so a row index means the same
point on both sides.  Labels and per-point state stay in host memory (they are small: K-means
keeps 16 bytes a point against 224 of features at 28 float64 columns; the kernels copy a
block's state in and out, :func:`algorithms._common.on_device`).

A shard that does not fit is not an error: when its features need more than
:data:`RESIDENT_SHARE` of the device's free memory (the kernels need the rest for their
temporaries), or the copy fails for want of memory, the worker says so in one line on
standard error, naming both sizes, and copies each block to the device as before (slower,
the same results).  Points migrated in that no longer fit end the residency the same way.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import numpy as np

from flegel.validation import Constraint, Options, ParameterError, check_params

#: Accepted values of an algorithm's ``device`` parameter.
DEVICES = ("cpu", "gpu", "auto")
#: Accepted values of an algorithm's ``kernel`` parameter.
KERNELS = ("auto", "compiled", "array")
#: The two parameters, declared (an algorithm's ``PARAMS`` includes them).
DEVICE_PARAMS: dict[str, Constraint] = {"device": Options(DEVICES), "kernel": Options(KERNELS)}
#: What to install for the GPU path.
GPU_HINT = "install the GPU extra, e.g. pip install 'flegel[gpu]' (CuPy for CUDA 12)"

#: Work units after which ``kernel: auto`` switches to the compiled kernel.  Measured on the
#: development machine (docs/benchmarks.md): starting numba and loading a cached kernel costs
#: about 0.7 CPU-s; on K-means (1M x 28, K = 16: 4.5e8 units a pass) the NumPy kernel takes
#: about 87 ms a pass and numba about 45 ms, 0.1 ns a unit more.  0.7 s / 0.1 ns = 7e9 units
#: (about 15 such passes) is where renting the slower kernel has cost the price of buying
#: the faster one.
SWITCH_UNITS = 7.0e9

#: Planned work units from which ``kernel: auto`` runs the compiled kernel from the first block
#: of a job of known length (:meth:`KernelChoice.plan`).  Half of :data:`SWITCH_UNITS`: the
#: plan starts numba before training, while the master computes θ⁽⁰⁾ (:func:`load_ahead`),
#: which hides part of its start-up (all of it behind a k-means++ seeding with restarts) and
#: keeps it off the training clock; the ski-rental rule pays it in a block.  The 12-iteration
#: 1M x 28, K = 16 K-means job (5.4e9 units) is planned onto numba (docs/benchmarks.md).
PLAN_UNITS = SWITCH_UNITS / 2

#: Share of the device's free memory a resident shard may take (module docstring): the
#: kernels' temporaries need the rest (K-means' distance tiles, the CNN's im2col columns).
RESIDENT_SHARE = 0.5

#: Set once the ``device: auto`` fallback has been reported, so the ranks a launcher starts
#: (they inherit its environment) do not repeat the line.
_NOTED_ENV = "FLEGEL_DEVICE_NOTED"


@functools.cache
def gpu_unavailable() -> str | None:
    """Why there is no usable GPU here (CuPy missing or no visible CUDA device), or None.

    Cached: the answer does not change within a process, and asking CUDA costs a few ms.
    """
    try:
        import cupy
    except Exception as err:  # ImportError, or a broken CUDA installation
        return f"CuPy could not be imported ({err})"
    try:
        n_devices = int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # cupy.cuda.runtime.CUDARuntimeError: no driver / no device
        n_devices = 0
    if n_devices < 1:
        return ("CuPy is installed but no CUDA device is visible (check the driver, "
                "nvidia-smi and CUDA_VISIBLE_DEVICES)")
    return None


def array_module(device: str, owner: str = "algorithm") -> Any:
    """The array module (``xp``) of ``device``: NumPy for "cpu", CuPy for "gpu", and for
    "auto" CuPy when a GPU is usable, else NumPy.

    Parameters
    ----------
    device : {"cpu", "gpu", "auto"}
        The ``device`` parameter.
    owner : str
        How messages name the algorithm, e.g. ``"KMeans"``.

    Raises
    ------
    RuntimeError
        ``device="gpu"`` where :func:`gpu_unavailable` gives a reason; the message is one
        line and says what to do.
    """
    if device == "cpu":
        return np
    reason = gpu_unavailable()
    if reason is None:
        import cupy

        return cupy
    if device == "gpu":
        raise RuntimeError(f"{owner}(device='gpu'): {reason}; {GPU_HINT}, or use "
                           "device='cpu'")
    _note_fallback(owner, reason)
    return np


def _note_fallback(owner: str, reason: str) -> None:
    """Say once per job, on standard error, that ``device: auto`` runs on the CPU."""
    if os.environ.get(_NOTED_ENV):
        return
    os.environ[_NOTED_ENV] = "1"
    print(f"flegel: {owner}(device='auto') runs on the CPU: {reason}", file=sys.stderr,
          flush=True)


def load_ahead(algorithm: object, n_points: int, n_features: int, dtype: np.dtype,
               passes: int | None, first: bool = True) -> bool:
    """Plan ``algorithm``'s kernel for ``passes`` passes over its ``n_points`` points
    (:meth:`DeviceKernels.plan_kernels`) and, when the compiled kernel runs from the first
    call, load it now (:meth:`DeviceKernels.load_compiled`).  Returns whether it loaded.

    A worker calls this between sending its sample and receiving θ⁽⁰⁾: numba starts while
    the master computes θ⁽⁰⁾, not on the training clock.  (A thread loading it while the
    shard loads was measured and dropped: both hold the GIL most of the time, and the 1M x 28
    synthetic shard then loaded in 3.8-4.8 s where loading and numba one after the other took
    2.6-3.3 s.)  Under BSP full batch an iteration is one pass per worker (elsewhere about
    one or less: the plan then errs towards numba, which costs at most its start-up).

    ``first``: this is the first worker.  On a cold numba cache only the first compiles (n
    workers compiling the same kernels at once cost n times the CPU); the others load from
    the cache after it has (``flegel/run.py``'s warm-up).
    """
    if not isinstance(algorithm, DeviceKernels):
        return False
    if not algorithm.plan_kernels(n_points, n_features, passes):
        return False
    if first:
        algorithm.load_compiled(n_features, dtype)
        return True
    from flegel.jit import without_compiling

    # a kernel not in numba's cache yet is left to worker 1 (flegel.jit.without_compiling)
    return without_compiling(lambda: algorithm.load_compiled(n_features, dtype))


def to_host(a: Any) -> np.ndarray:
    """A NumPy array of a NumPy or CuPy array (a device-to-host copy for CuPy)."""
    if not isinstance(a, np.ndarray) and hasattr(a, "get"):
        return np.asarray(a.get())
    return np.asarray(a)


class KernelChoice:
    """Which kernel runs next on the CPU: the ``kernel`` parameter's rule (module docstring).

    Parameters
    ----------
    kernel : {"auto", "compiled", "array"}
        The ``kernel`` parameter.
    switch_units : float
        Work units after which ``"auto"`` switches to the compiled kernel.

    Notes
    -----
    One per algorithm instance, so per process: every worker meters its own work.  Picklable
    (the estimators pickle their algorithm).
    """

    def __init__(self, kernel: str, switch_units: float = SWITCH_UNITS) -> None:
        self.kernel = kernel
        self.switch_units = switch_units
        #: Work done on the array kernel so far (``"auto"``).
        self.units = 0.0
        #: ``"auto"`` planned onto the compiled kernel from the start (:meth:`plan`).
        self.planned = False

    def plan(self, units: float | None, plan_units: float = PLAN_UNITS) -> bool:
        """Plan ``"auto"`` for a job of ``units`` work units in all (None: unknown length).

        A job of at least ``plan_units`` runs the compiled kernel from its first call; a
        shorter one starts on the array kernel and keeps the ski-rental meter (a job may do
        more work than planned: an FSP iteration can be more than one pass).  Returns whether
        the compiled kernel runs from the first call (``"compiled"``, or ``"auto"`` planned
        onto it).
        """
        if self.kernel == "auto" and units is not None and units >= plan_units:
            self.planned = True
        return self.kernel == "compiled" or self.planned

    def compiled(self, units: float) -> bool:
        """Whether the compiled kernel should run a call of ``units`` work units.

        Under ``"auto"`` the array kernel runs until :attr:`switch_units` have been metered;
        the call that crosses the threshold still runs on the array kernel, so the switch
        point depends only on the sequence of calls.
        """
        if self.kernel != "auto":
            return self.kernel == "compiled"
        if self.planned or self.units >= self.switch_units:
            return True
        self.units += units
        return False


class DeviceKernels:
    """Mixin of an algorithm with ``device`` and ``kernel`` parameters (module docstring).

    Call :meth:`_set_device` from ``__init__``, :meth:`check_device` from ``validate`` (so a
    missing GPU fails before any work), and in ``update_block`` run the compiled kernel when
    :meth:`use_compiled` says so, else the array kernel on :attr:`xp`.
    """

    device: str
    kernel: str

    def _set_device(self, device: str = "cpu", kernel: str = "auto") -> None:
        """Validate and store the two parameters (a ``ParameterError`` naming the bad one)."""
        check_params(DEVICE_PARAMS, {"device": device, "kernel": kernel})
        self.device = device
        self.kernel = kernel
        self._choice = KernelChoice(kernel)

    @property
    def xp(self) -> Any:
        """The array module the kernels use (resolved on first use, where the data are)."""
        return array_module(self.device, type(self).__name__)

    def check_device(self) -> None:
        """Raise a ``ParameterError`` (a ``ValueError``) naming ``device`` before any work
        when ``device: gpu`` cannot run here."""
        try:
            array_module(self.device, type(self).__name__)
        except RuntimeError as err:
            raise ParameterError("device", "", detail=str(err)) from None

    def pass_units(self, n: int, d: int) -> float:
        """Work units (module docstring) of a pass over ``n`` points of ``d`` features, as
        :meth:`plan_kernels` counts them: n·d unless the algorithm says better (K-means:
        n·d·K; an underestimate only plans the compiled kernel for fewer jobs)."""
        return float(n * d)

    def plan_kernels(self, n_points: int, n_features: int, passes: int | None) -> bool:
        """Plan ``kernel: auto`` for ``passes`` passes over ``n_points`` points (None: a job
        of unknown length), :meth:`KernelChoice.plan`; return whether the compiled kernel
        runs from the first call (then :func:`load_ahead` loads it before training)."""
        if self.xp is not np:
            return False
        units = None if passes is None else passes * self.pass_units(n_points, n_features)
        return self._choice.plan(units)

    def load_compiled(self, n_features: int, dtype: np.dtype) -> None:
        """Start numba and load this algorithm's compiled kernels for data of ``n_features``
        columns of ``dtype`` (:func:`load_ahead`).

        The default makes the numba dispatchers of the algorithm's module (imports numba);
        an algorithm that can call its kernels on a few dummy points does so, which loads
        their machine code from numba's cache (or compiles it) too.
        """
        from flegel.jit import LazyKernel

        for value in vars(sys.modules[type(self).__module__]).values():
            if isinstance(value, LazyKernel):
                value.dispatcher()

    def use_compiled(self, units: float) -> bool:
        """Whether the next kernel call, of ``units`` work units, runs the compiled kernel:
        never on a GPU, else as :class:`KernelChoice` decides."""
        return self.xp is np and self._choice.compiled(units)


# ------------------------------------------------------------------ the resident shard
def resident_module(algorithm: object) -> Any | None:
    """The array module whose device ``algorithm``'s training blocks should live on: CuPy for
    an algorithm with the ``device`` parameter (:class:`DeviceKernels`) whose kernels run on
    a GPU, else None (the blocks stay host arrays: NumPy kernels, a user's algorithm)."""
    if not isinstance(algorithm, DeviceKernels):
        return None
    xp = algorithm.xp
    return None if xp is np else xp


def _free_bytes(xp: Any) -> int | None:
    """Device memory this process can still take: CUDA's free memory plus what CuPy's pool
    holds unused; None where the module cannot say."""
    try:
        free = int(xp.cuda.runtime.memGetInfo()[0])
    except Exception:  # noqa: BLE001 - a module without the call (a stand-in): unknown
        return None
    try:
        free += int(xp.get_default_memory_pool().free_bytes())
    except Exception:  # noqa: BLE001 - no pool: CUDA's figure alone
        pass
    return free


def _out_of_memory(err: BaseException) -> bool:
    """CuPy's ``OutOfMemoryError`` (a ``MemoryError``), told by name too: its class lives in
    ``cupy.cuda.memory``, which a stand-in may lack."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def _say(line: str) -> None:
    print(f"flegel: {line}", file=sys.stderr, flush=True)


class DeviceRows:
    """A shard's features on the device, row for row with the host copy (module docstring).

    Parameters
    ----------
    xp : module
        The array module of the device (CuPy).
    host : ndarray of shape (n, d)
        The shard's features, C-contiguous; copied to the device once, here.

    Attributes
    ----------
    bytes_in : int
        Feature bytes copied host-to-device so far (the shard, then migrated points).
    index_bytes : int
        Bytes of row indices copied host-to-device for blocks that skip rows (8 a point).
    """

    def __init__(self, xp: Any, host: np.ndarray) -> None:
        self.xp = xp
        self._buf = xp.asarray(host)
        self.n = int(host.shape[0])
        self.bytes_in = int(host.nbytes)
        self.index_bytes = 0

    @property
    def rows(self) -> Any:
        """Every row held, as one device array."""
        return self._buf[:self.n]

    @property
    def nbytes(self) -> int:
        """Device memory held (the buffer, room for migrated points included)."""
        return int(self._buf.nbytes)

    def take(self, sel: slice | np.ndarray) -> Any:
        """The rows ``sel`` (a slice: a view, no copy; an index array: a device-side gather
        after copying the indices, not the features)."""
        if isinstance(sel, slice):
            return self.rows[sel]
        idx = np.asarray(sel, dtype=np.int64)
        self.index_bytes += int(idx.nbytes)
        return self.rows[self.xp.asarray(idx)]

    def append(self, host_rows: np.ndarray) -> None:
        """Add rows (points migrated in): one host-to-device copy of them, into a buffer that
        doubles when full, so admitting a window costs the window, not the shard."""
        k = int(host_rows.shape[0])
        if self.n + k > self._buf.shape[0]:
            grown = self.xp.empty((max(2 * self.n, self.n + k), *self._buf.shape[1:]),
                                  dtype=self._buf.dtype)
            grown[:self.n] = self.rows
            self._buf = grown
        self._buf[self.n:self.n + k] = self.xp.asarray(
            np.ascontiguousarray(host_rows, dtype=self._buf.dtype))
        self.n += k
        self.bytes_in += int(host_rows.nbytes)

    def permute(self, perm: np.ndarray) -> None:
        """Reorder the rows as the host copy was (``x[perm]``), on the device."""
        self._buf = self.rows[self.xp.asarray(np.asarray(perm, dtype=np.int64))]


def resident_rows(xp: Any, host: np.ndarray, owner: str) -> DeviceRows | None:
    """The shard ``host`` copied to ``xp``'s device, or None when it does not fit there
    (:data:`RESIDENT_SHARE` of the free memory, or the copy ran out of memory), said in one
    line on standard error naming ``owner`` and the sizes; the blocks are then copied one by
    one (module docstring)."""
    need = int(host.nbytes)
    free = _free_bytes(xp)
    if free is not None and need > RESIDENT_SHARE * free:
        _say(f"{owner}: the shard ({_gib(need)}) does not fit in {RESIDENT_SHARE:.0%} of the "
             f"GPU's free memory ({_gib(free)} free); each block is copied to the GPU "
             "instead (slower)")
        return None
    try:
        return DeviceRows(xp, host)
    except Exception as err:
        if not _out_of_memory(err):
            raise
        _say(f"{owner}: the shard ({_gib(need)}) ran the GPU out of memory "
             f"({'unknown' if free is None else _gib(free)} free); each block is copied to "
             "the GPU instead (slower)")
        return None


def appended(rows: DeviceRows, host_rows: np.ndarray, owner: str) -> DeviceRows | None:
    """``rows`` with ``host_rows`` (points migrated in) appended; None when they do not fit
    on the device, said in one line naming ``owner`` and the sizes (the blocks are then
    copied one by one, from the host copy, which holds every row)."""
    try:
        rows.append(host_rows)
    except Exception as err:
        if not _out_of_memory(err):
            raise
        _say(f"{owner}: {len(host_rows)} migrated points ({_gib(host_rows.nbytes)}) do not "
             f"fit beside the shard on the GPU ({_gib(rows.nbytes)} held); each block is "
             "copied to the GPU from now on (slower)")
        return None
    return rows
