"""Small shared helpers of the built-in algorithms: parameter declarations, stable log-sum-exp and
softmax, k-means++ seeding on the data sample, initialization files, the per-point path, and
what the device paths share (:mod:`flegel.device`): the block's state on the kernel's device
(:func:`on_device`) and operands derived from θ kept there until θ changes
(:class:`ThetaCache`).

Everything here uses only flegel's public API, as a user-written algorithm would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from flegel import Algorithm, Block
from flegel.device import DEVICE_PARAMS, to_host
from flegel.validation import PathName, check_params

__all__ = [
    "DEVICE_PARAMS", "InitSpec", "chunks", "expect_shape", "set_params",
    "kmeans_plusplus_sample", "learning_rate_at", "load_init_arrays", "logsumexp_rows",
    "on_device", "point_via_block", "resolve_init_path", "softmax_rows", "squared_distances",
    "ThetaCache", "validate_init_file",
]

_T = TypeVar("_T")

#: ``log(2π)``, used by Gaussian log-densities.
LOG_2PI = float(np.log(2.0 * np.pi))


# ------------------------------------------------------------------ parameter declarations
class InitSpec(PathName):
    """``init``: one of ``keywords``, or a string or path naming a file or a run (checked
    when the job is validated, :func:`validate_init_file`).

    Parameters
    ----------
    keywords : sequence of str
        The initializations the algorithm computes itself.
    """

    def __init__(self, keywords: Sequence[str]) -> None:
        self.keywords = tuple(keywords)
        kws = ", ".join(repr(k) for k in self.keywords)
        super().__init__(f"one of {kws}, a run directory or the path of a .npy/.npz file")

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, Path) or (isinstance(value, str) and bool(value))

    def convert(self, value: Any) -> str:
        return str(value)


def set_params(algorithm: Algorithm, values: dict[str, Any]) -> None:
    """Check the constructor's arguments against the class's ``PARAMS`` and store each,
    converted, as the attribute of its name.

    Raises
    ------
    flegel.validation.ParameterError
        Naming the first argument its declaration refuses ("n_clusters must be an integer
        >= 1, got 0"); the job reports it as ``params.<name>``.
    """
    for name, value in check_params(type(algorithm).PARAMS, values).items():
        setattr(algorithm, name, value)


# ------------------------------------------------------------------ numerics
def logsumexp_rows(a: np.ndarray) -> np.ndarray:
    """Return ``log(sum(exp(a), axis=1))`` of a 2-D array, stably (rows of -inf give -inf)."""
    xp = _namespace(a)
    amax = a.max(axis=1, keepdims=True)
    amax = xp.where(xp.isfinite(amax), amax, 0.0)
    with np.errstate(divide="ignore", under="ignore"):
        out = xp.log(xp.exp(a - amax).sum(axis=1))
    return out + amax[:, 0]


def softmax_rows(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Return the row-wise softmax of a 2-D array (in ``out`` if given; may be ``a``)."""
    xp = _namespace(a)
    if out is None:
        out = a.copy()
    elif out is not a:
        out[...] = a
    out -= out.max(axis=1, keepdims=True)
    xp.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def squared_distances(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Return the (n, k) squared Euclidean distances through one GEMM, clipped at zero.

    ``‖x‖² − 2x·c + ‖c‖²``; NumPy or CuPy arrays (both on one device).
    """
    xp = _namespace(x)
    d2 = x @ centers.T
    d2 *= -2.0
    d2 += xp.einsum("ij,ij->i", x, x)[:, None]
    d2 += xp.einsum("ij,ij->i", centers, centers)[None, :]
    return xp.maximum(d2, 0.0, out=d2)


def chunks(n: int, size: int = 8192) -> Iterator[slice]:
    """Yield slices covering ``range(n)`` in pieces of at most ``size`` (bounded temporaries)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def learning_rate_at(rate: float, schedule: str, power_t: float, step: float) -> float:
    """Step size of update number ``step`` (1-based): ``rate`` or ``rate / step**power_t``."""
    if schedule == "invscaling":
        return rate / max(step, 1.0) ** power_t
    return rate


def _namespace(a: Any) -> Any:
    """NumPy, or CuPy for CuPy arrays (without importing CuPy otherwise)."""
    mod = type(a).__module__
    if mod.startswith("cupy"):
        import cupy

        return cupy
    return np


# ------------------------------------------------------------------ device paths
@contextmanager
def on_device(xp: Any, *host: np.ndarray) -> Iterator[tuple[Any, ...]]:
    """The arrays ``host`` (a block's per-point state) on ``xp``'s device for a kernel,
    written back into ``host`` when the ``with`` body ends without an error.

    With NumPy the arrays themselves (no copy).  With CuPy one host-to-device copy each on
    entry and one device-to-host copy each on exit -- the pattern of K-means' GPU branch
    (``algorithms/kmeans.py``): a block is a view into the worker's shard, which stays in
    host memory.  On an error the host arrays keep their old values.
    """
    if xp is np:
        yield host
        return
    dev = tuple(xp.asarray(h) for h in host)
    yield dev
    for h, d in zip(host, dev):
        h[...] = to_host(d)


class ThetaCache(Generic[_T]):
    """What a kernel derives from θ (device copies of its arrays, GEMM operands), made
    again only when θ changed since the last call.

    Parameters
    ----------
    slots : int, default=2
        θs remembered, most recent first.  Two: between blocks a worker's exact evaluator
        (:mod:`flegel.runtime.exact`) evaluates a θ snapshot a chunk at a time, so calls
        with the training θ and with the snapshot alternate; one slot would copy both on
        every call.

    Notes
    -----
    *When θ changed* is told by identity, not by content, so a hit costs a few pointer
    comparisons and no pass over θ (on a GPU no copy at all): an entry matches when the
    dict is the same object and so is every array in it.  That is safe because θ reaches
    ``update_block`` as a new dict of new arrays each time it changes and is never written
    in place between calls: θ changes only at a barrier (or a push), and the MPI worker then
    replaces its dict with the arrays :meth:`flegel.runtime.layout.Layout.unpack` copies out
    of the receive buffer (``Worker.receive_params``); the in-process loops
    (:func:`flegel.local.fit_local`, the tests' simulation) replace it with
    ``update_parameter``'s result, which the built-ins build from new arrays.  An entry
    holds strong references to the dict and its arrays, so no later θ can be allocated at a
    remembered address and be mistaken for it (a bare ``id()`` could).  A caller that
    writes θ's arrays in place between calls must pass a new dict (``dict(theta)``).
    Not pickled (an algorithm is pickled to start workers or for a checkpoint): a copy
    starts empty.
    """

    def __init__(self, slots: int = 2) -> None:
        self.slots = slots
        self._entries: list[tuple[dict, tuple[Any, ...], _T]] = []
        #: Calls that had to make the value (θ changed), for tests and benchmarks.
        self.misses = 0

    def get(self, theta: dict, make: Callable[[dict], _T]) -> _T:
        """The value ``make(theta)`` made for this θ, made now if θ is not remembered."""
        values = tuple(theta.values())
        for n, (held, arrays, value) in enumerate(self._entries):
            if held is theta and len(arrays) == len(values) and all(
                    a is b for a, b in zip(arrays, values)):
                if n:
                    self._entries.insert(0, self._entries.pop(n))
                return value
        self.misses += 1
        value = make(theta)
        self._entries.insert(0, (theta, values, value))
        del self._entries[self.slots:]
        return value

    def clear(self) -> None:
        """Forget every θ (e.g. after the device changed)."""
        self._entries.clear()

    def __getstate__(self) -> dict[str, Any]:
        return {"slots": self.slots, "_entries": [], "misses": 0}


# ------------------------------------------------------------------ initialization
def kmeans_plusplus_sample(sample: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Return k centres chosen by greedy k-means++ on the data sample (seeded, deterministic).

    The greedy variant scikit-learn uses (Arthur & Vassilvitskii 2007; scikit-learn's
    ``kmeans_plusplus``): the first centre is a uniform pick; each next one is the best, by
    the resulting potential (sum of squared distances to the nearest centre), of
    ``2 + int(log k)`` candidates drawn with probability proportional to the squared distance
    to the nearest centre so far.  Vectorized: one (trials × n) distance product per step.

    Raises
    ------
    ValueError
        If the sample has fewer than ``k`` points.
    """
    x = np.ascontiguousarray(sample, dtype=np.float64)
    n = len(x)
    if n < k:
        raise ValueError(f"{k} clusters/components requested but the data sample holds only "
                         f"{n} points")
    rng = np.random.default_rng(seed)
    trials = 2 + int(np.log(k))
    centers = np.empty((k, x.shape[1]))
    xsq = np.einsum("ij,ij->i", x, x)  # once: each step is then one small GEMM

    def dist2(rows: np.ndarray) -> np.ndarray:
        """Squared distances (len(rows), n) of the points ``x[rows]`` to every point."""
        d2 = x[rows] @ x.T
        d2 *= -2.0
        d2 += xsq[None, :]
        d2 += xsq[rows][:, None]
        return np.maximum(d2, 0.0, out=d2)

    first = rng.integers(n)
    centers[0] = x[first]
    closest = dist2(np.array([first]))[0]
    pot = float(closest.sum())
    for c in range(1, k):
        if pot <= 0.0:  # every point sits on a centre: any pick is as good
            centers[c] = x[rng.integers(n)]
            continue
        ids = np.searchsorted(np.cumsum(closest), rng.random(trials) * pot)
        np.minimum(ids, n - 1, out=ids)
        d2 = dist2(ids)
        np.minimum(closest, d2, out=d2)
        pots = d2.sum(axis=1)
        best = int(np.argmin(pots))
        centers[c] = x[ids[best]]
        closest, pot = d2[best], float(pots[best])
    return centers


def resolve_init_path(init: str, base_dir: Path, keywords: Sequence[str]) -> Path | None:
    """Return the file or run directory named by ``init`` resolved against ``base_dir``, or
    None for a keyword."""
    if init in keywords:
        return None
    return (Path(base_dir) / Path(init).expanduser()).resolve()


def load_init_arrays(path: Path, main_key: str,
                     algorithm: Algorithm | None = None) -> dict[str, np.ndarray]:
    """Load an initialization (a warm start): a ``.npy`` array (returned under ``main_key``),
    a ``.npz`` archive (all its arrays; a single unnamed array is taken as ``main_key``), or a
    run directory (its ``model.npz``).

    A saved model (a run directory, or a ``model.npz`` beside its ``model.json``) must come
    from ``algorithm``'s class (:func:`flegel.rundir.model.check_algorithm`).

    Raises
    ------
    ValueError
        If the file is missing, has another suffix, comes from another algorithm, or an
        ``.npz`` lacks ``main_key``.
    """
    from flegel.rundir.model import check_algorithm, read_model

    if path.suffix == ".npy":
        if not path.is_file():
            raise ValueError(f"init: file {path} does not exist")
        return {main_key: np.load(path, allow_pickle=False)}
    if not path.is_dir() and path.suffix != ".npz":
        raise ValueError(f"init: expected a run directory or a .npy/.npz file, got {path}")
    try:
        model = read_model(path)
    except FileNotFoundError as exc:
        raise ValueError(f"init: {exc}") from None
    if algorithm is not None:
        check_algorithm(model, algorithm)
    arrays = model.arrays
    if main_key not in arrays:
        if len(arrays) == 1:
            arrays = {main_key: next(iter(arrays.values()))}
        else:
            raise ValueError(f"init: {path} must hold an array named {main_key!r}, "
                             f"found {sorted(arrays)}")
    return arrays


def expect_shape(path: Path, key: str, array: np.ndarray, want: tuple[int, ...],
                 job: str) -> np.ndarray:
    """Return ``array`` as float64 if its shape is ``want``; else raise ``ValueError`` naming
    both shapes: the init's and what ``job`` (e.g. "kmeans with n_clusters=8 on 2 features")
    needs."""
    array = np.asarray(array, dtype=np.float64)
    if array.shape != tuple(want):
        raise ValueError(f"init: {key} in {path} has shape {array.shape}, but {job} needs "
                         f"{tuple(want)}")
    return array


def validate_init_file(init: str, base_dir: Path, keywords: Sequence[str], main_key: str,
                       n_rows: int | None, algorithm: Algorithm | None = None) -> None:
    """``validate`` helper: check that an init file or run exists, comes from ``algorithm``
    and holds an (n_rows, d) array ``main_key`` (any shape when ``n_rows`` is None)."""
    path = resolve_init_path(init, base_dir, keywords)
    if path is None:
        return
    if path.suffix not in (".npy", ".npz") and not path.is_dir():
        kws = ", ".join(repr(k) for k in keywords)
        raise ValueError(f"init: expected one of {kws}, a run directory or a .npy/.npz file, "
                         f"got {init!r}")
    if path.suffix == ".npy" and path.is_file():
        shape = np.load(path, mmap_mode="r").shape
    else:
        shape = load_init_arrays(path, main_key, algorithm)[main_key].shape
    if n_rows is not None and (len(shape) != 2 or shape[0] != n_rows):
        raise ValueError(f"init: {path} holds {main_key} of shape {shape}, but this job "
                         f"needs ({n_rows}, n_features)")


# ------------------------------------------------------------------ the per-point path
def point_via_block(algorithm: Algorithm, kernel: Callable[[Block, dict, int], dict],
                    point: Any, state: Any, theta: dict, t: int) -> dict:
    """Run a block kernel on a block of one point (the per-point hook).

    The built-ins implement :meth:`~flegel.Algorithm.update_data_point` through their
    vectorized kernel on a one-row block so that both hooks share one piece of math; the
    point's state is copied in and written back through ``state`` (a
    :class:`flegel.PointState`).  ``kernel`` must be the algorithm's own kernel, not
    ``update_block``, which a subclass may route back through ``update_data_point``.
    """
    if isinstance(point, tuple):
        x, y = point
        y = np.asarray([y])
    else:
        x, y = point, None
    rows = {k: np.array(state[k])[None, ...] for k in state.keys()}
    block = Block.from_arrays(np.asarray(x)[None, :], y, rows)
    agg = kernel(block, theta, t)
    for k, v in rows.items():
        state[k] = v[0]
    if block.halt[0]:
        algorithm.vote_to_halt()
    return agg


class RowKernel(Algorithm):
    """Base of algorithms whose two hooks run one vectorized kernel, ``_update_rows``.

    ``update_block`` calls it on the block; ``update_data_point`` calls it on a block of one
    point (:func:`point_via_block`), so both hooks share one piece of math.
    """

    def _update_rows(self, block: Block, theta: dict, t: int) -> dict:
        """The kernel: process ``block`` and return its aggregator delta."""
        raise NotImplementedError

    def update_data_point(self, point: Any, state: Any, theta: dict, t: int) -> dict:
        return point_via_block(self, self._update_rows, point, state, theta, t)

    def update_block(self, block: Block, theta: dict, t: int) -> dict:
        return self._update_rows(block, theta, t)
