"""Content checks of a loaded shard: every value finite, labels and features the algorithm takes.

Parsing already refuses what is not a number (a text cell, a malformed LIBSVM token); what
parses but cannot be trained on is caught here, once per shard, right after the load and
before any work (issue 13, item 5):

* a NaN or an infinity in X (``nan``, ``inf`` parse as floats in every text format, and binary
  arrays may hold them);
* labels outside what the algorithm takes (:attr:`flegel.Algorithm.label_kind`): class
  labels must be integers ``0 .. C-1``, real targets finite;
* a negative feature value for an algorithm declaring
  :attr:`flegel.Algorithm.nonnegative_features` (NMF).

The checks are vectorized over blocks of rows (one ``np.isfinite`` / ``min`` per block of a
few MiB, so the temporary masks stay small); only a block that fails is searched for its first
bad value, and the reader words where it is (:meth:`flegel.data.formats.base.Reader.
content_error`: row, line, column as the user finds them in the file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LABEL_KINDS", "Bad", "Takes", "first_bad"]

#: What an algorithm may declare it takes as labels: what a message expects of one label, and
#: what it says the algorithm takes.
LABEL_KINDS = {
    "any": ("any label", "any labels"),
    "classes": ("an integer class label >= 0", "classes 0 .. C-1"),
    "real": ("a finite number", "real-valued targets"),
}

#: Elements per block of a vectorized check: the boolean temporaries stay at ~4 MiB.
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Takes:
    """What an algorithm takes: the data requirements it declares as class attributes.

    Attributes
    ----------
    label_kind : {"any", "classes", "real"}
        See :attr:`flegel.Algorithm.label_kind`.
    nonnegative : bool
        Every feature value must be >= 0.
    who : str
        Who requires it, for messages (``"algorithm 'nmf'"``); empty for no algorithm.
    """

    label_kind: str = "any"
    nonnegative: bool = False
    who: str = ""

    @classmethod
    def of(cls, algorithm_cls: type, name: str) -> Takes:
        """The requirements an algorithm class declares.

        Parameters
        ----------
        algorithm_cls : type
            A :class:`flegel.Algorithm` subclass.
        name : str
            The algorithm as the job names it (for messages).

        Returns
        -------
        Takes

        Raises
        ------
        ValueError
            The class declares a ``label_kind`` that is not one of :data:`LABEL_KINDS`.
        """
        kind = getattr(algorithm_cls, "label_kind", "any")
        if kind not in LABEL_KINDS:
            raise ValueError(f"{algorithm_cls.__name__}.label_kind must be one of "
                             f"{', '.join(map(repr, LABEL_KINDS))}, found {kind!r}")
        return cls(kind, bool(getattr(algorithm_cls, "nonnegative_features", False)),
                   f"algorithm {name!r}")


@dataclass(frozen=True)
class Bad:
    """The first value of a shard that cannot be trained on.

    Attributes
    ----------
    row : int
        Position of the row in the shard (0-based; the reader maps it to the file).
    column : int or None
        Column of X (0-based), or None when the label is bad.
    problem : str
        What was found and what was expected (``"is nan, expected a finite number"``).
    """

    row: int
    column: int | None
    problem: str


def _show(value: Any) -> str:
    """A value as a user would write it (``nan``, ``-inf``, ``-0.5``, ``3``)."""
    v = float(value)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"


def _first_in_blocks(a: np.ndarray, bad_mask: Any) -> tuple[int, int] | None:
    """``(row, column)`` of the first element where ``bad_mask(block)`` is True, or None.

    ``a`` is 2-D; it is scanned a block of rows at a time, and only a block with a bad element
    is searched element by element (with ``argmax`` on its mask, still vectorized).
    """
    n, d = a.shape
    step = max(1, _BLOCK_ELEMENTS // max(d, 1))
    for lo in range(0, n, step):
        mask = bad_mask(a[lo:lo + step])
        if mask.any():
            flat = int(np.argmax(mask))
            return lo + flat // d, flat % d
    return None


def first_bad(X: np.ndarray, y: np.ndarray | None, takes: Takes) -> Bad | None:
    """The first value of a shard that ``takes`` rejects, or None when all are fine.

    Parameters
    ----------
    X : numpy.ndarray
        ``(n, d)`` features of the shard.
    y : numpy.ndarray or None
        ``(n,)`` labels, or None.
    takes : Takes
        What the algorithm takes.

    Returns
    -------
    Bad or None
        Features are checked before labels, row by row within each.
    """
    if X.dtype.kind == "f" and X.size:
        # Finite first: a NaN would also hide from the "< 0" test below.
        hit = _first_in_blocks(X, lambda b: ~np.isfinite(b))
        if hit is not None:
            return Bad(hit[0], hit[1], f"is {_show(X[hit])}, expected a finite number")
    if takes.nonnegative and X.size:
        hit = _first_in_blocks(X, lambda b: b < 0)
        if hit is not None:
            who = f" ({takes.who} takes non-negative features)" if takes.who else ""
            return Bad(hit[0], hit[1], f"is {_show(X[hit])}, expected a value >= 0{who}")
    if y is None or takes.label_kind == "any" or not len(y):
        return None
    y = np.asarray(y)
    if y.dtype.kind in "biu":
        bad = y < 0 if takes.label_kind == "classes" else np.zeros(len(y), dtype=bool)
    else:
        bad = ~np.isfinite(y)
        if takes.label_kind == "classes":
            bad |= (y < 0) | (y != np.rint(np.where(bad, 0, y)))
    if not bad.any():
        return None
    j = int(np.argmax(bad))
    expected, what = LABEL_KINDS[takes.label_kind]
    if takes.label_kind == "classes" and float(y[j]) == -1:
        what += "; map -1/+1 labels to 0/1"
    who = f" ({takes.who} takes {what})" if takes.who else ""
    return Bad(j, None, f"has label {_show(y[j])}, expected {expected}{who}")
