"""Checks of aggregators and θ against their layouts: no NaN, no silent broadcasting.

A NaN in one worker's aggregator spreads to θ at the next update and from there to every
point; a wrong shape, e.g. ``(1, d)`` where θ holds ``(d,)``, is silently broadcast by NumPy
into a θ of another shape.  The runtime checks each aggregator once, where it crosses from a
worker to the master, and θ once after each update, so a fault stops the job at the
iteration it appears in (issue 13).  Each check is one vectorized pass per entry, small
beside the kernel that produced the entry.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from flegel.protocol import ExitCode, StopReason
from flegel.runtime.faults import JobFault
from flegel.runtime.layout import Layout

#: A layout's key set and its (key, shape, dtype) entries.
_Spec = tuple[frozenset[str], tuple[tuple[str, tuple[int, ...], np.dtype], ...]]


@functools.cache
def _spec(layout: Layout) -> _Spec:
    """The layout's key set and (key, shape, dtype) triples, built once per layout."""
    return frozenset(layout.keys), tuple(
        (k, shape, np.dtype(dt)) for k, shape, dt in zip(layout.keys, layout.shapes,
                                                         layout.dtypes))


def layout_problem(arrays: Mapping[str, Any], layout: Layout) -> str | None:
    """Say how ``arrays`` departs from ``layout``, or return None when it fits.

    Keys must be exactly the layout's, every entry must have the layout's shape (no
    broadcasting), and its dtype must convert to the layout's within its kind (a float
    where an integer is expected would be truncated on the wire).

    Parameters
    ----------
    arrays : mapping of str to array-like
        An aggregator or θ.
    layout : Layout
        What it must look like (fixed before training).

    Returns
    -------
    str or None
        ``"entry 'g' has shape (1, 3), expected (3,)"`` and the like.
    """
    keys, entries = _spec(layout)
    if arrays.keys() != keys:
        expected = list(layout.keys)
        missing = [k for k in expected if k not in arrays]
        if missing:
            return f"entry {missing[0]!r} is missing (expected the entries {expected})"
        extra = sorted(k for k in arrays if k not in keys)
        return f"entry {extra[0]!r} is not in the layout (expected the entries {expected})"
    for key, shape, dtype in entries:
        value = arrays[key]
        found = np.shape(value)
        if found != shape:
            return f"entry {key!r} has shape {found}, expected {shape}"
        kind = value.dtype if isinstance(value, np.ndarray) else np.asarray(value).dtype
        if kind != dtype and not np.can_cast(kind, dtype, "same_kind"):
            return f"entry {key!r} has dtype {kind}, expected {dtype}"
    return None


def nonfinite_key(arrays: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` whose entry in ``arrays`` holds NaN or ±inf, or None.

    One reduction per entry: a sum is finite when every term is (the exact element test
    runs only to confirm a non-finite sum, which overflow alone can also give).
    """
    for key in keys:
        value = arrays[key]
        if isinstance(value, float):
            if not math.isfinite(value):
                return key
            continue
        a = value if isinstance(value, np.ndarray) else np.asarray(value)
        if a.dtype.kind not in "fc":
            continue
        with np.errstate(all="ignore"):  # inf - inf in the sum is what we look for
            total = a.sum()
        if not np.isfinite(total) and not np.isfinite(a).all():
            return key
    return None


def describe_nonfinite(value: Any) -> str:
    """``"NaN"``, ``"inf"`` or ``"3 NaN and 1 inf values"``: what a bad entry holds."""
    a = np.asarray(value, dtype=np.complex128 if np.iscomplexobj(value) else np.float64)
    n_nan = int(np.isnan(a).sum())
    n_inf = int(np.isinf(a).sum())
    if a.size == 1:
        return "NaN" if n_nan else "inf"
    parts = [f"{n} {name}" for n, name in ((n_nan, "NaN"), (n_inf, "inf")) if n]
    return " and ".join(parts) + f" of {a.size} values"


def check_aggregator(agg: Mapping[str, Any], layout: Layout, rank: int, version: float,
                     clock: float) -> None:
    """Raise :class:`JobFault` (exit code ``NUMERIC``) unless ``agg`` has ``layout`` and only
    finite values.  The worker checks the layout before packing (a packed buffer can no
    longer show a wrong shape); the master checks both as a commit arrives.

    Parameters
    ----------
    agg : mapping
        The aggregator ``rank`` computed from θ version ``version`` in its commit ``clock``.
    layout : Layout
        The aggregator layout fixed before training.
    """
    where = (f"worker {rank}'s aggregator for iteration {int(version) + 1} (its commit "
             f"{int(clock)})")
    problem = layout_problem(agg, layout)
    if problem is not None:
        raise JobFault(f"{where}: {problem}; update_block must always return the layout of "
                       "its first aggregator", ExitCode.NUMERIC, StopReason.NUMERIC)
    key = nonfinite_key(agg, layout.keys)
    if key is not None:
        raise JobFault(f"{where}: entry {key!r} holds {describe_nonfinite(agg[key])}",
                       ExitCode.NUMERIC, StopReason.NUMERIC)


def check_theta(theta: Mapping[str, Any], layout: Layout, iteration: int) -> None:
    """Raise :class:`JobFault` (exit code ``NUMERIC``) unless the θ that
    ``update_parameter`` returned at ``iteration`` keeps θ's layout and is finite."""
    problem = layout_problem(theta, layout)
    if problem is None:
        key = nonfinite_key(theta, layout.keys)
        if key is None:
            return
        problem = f"entry {key!r} holds {describe_nonfinite(theta[key])}"
    raise JobFault(f"θ after the update of iteration {iteration}: {problem}",
                   ExitCode.NUMERIC, StopReason.NUMERIC)
