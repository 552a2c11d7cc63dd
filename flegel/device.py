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

The block that switches pays numba's start-up inside it (about 0.7 s; seconds on a cold
cache, when every worker compiles): under FSP the barrier that block is answering waits for
it, once per run.  Set ``kernel: compiled`` to pay it before training starts instead (the
worker warm-up), as before.
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


def compiles_at_start(algorithm: object) -> bool:
    """Whether ``algorithm``'s first kernel call may start numba: true for an algorithm
    without the ``kernel`` parameter (its kernels are its own business), else as its
    :meth:`DeviceKernels.compiles_at_start` says."""
    if isinstance(algorithm, DeviceKernels):
        return algorithm.compiles_at_start()
    return True


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

    def compiled(self, units: float) -> bool:
        """Whether the compiled kernel should run a call of ``units`` work units.

        Under ``"auto"`` the array kernel runs until :attr:`switch_units` have been metered;
        the call that crosses the threshold still runs on the array kernel, so the switch
        point depends only on the sequence of calls.
        """
        if self.kernel != "auto":
            return self.kernel == "compiled"
        if self.units >= self.switch_units:
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

    def compiles_at_start(self) -> bool:
        """Whether the first kernel call runs the compiled kernel (so numba starts then):
        ``kernel: compiled`` on the CPU."""
        return self.kernel == "compiled" and self.xp is np

    def use_compiled(self, units: float) -> bool:
        """Whether the next kernel call, of ``units`` work units, runs the compiled kernel:
        never on a GPU, else as :class:`KernelChoice` decides."""
        return self.xp is np and self._choice.compiled(units)
