"""Compiled fast paths that turn blocks of CSV and LIBSVM text into numbers, exactly.

The careful parsers (:func:`flegel.data.formats.csv.parse_block`,
:func:`flegel.data.formats.libsvm.parse_block`) lean on :func:`numpy.loadtxt`, whose C parser
spends most of its time converting every field through Python's ``PyOS_string_to_double``.
The kernels here tokenize a whole block in one compiled loop and convert the common number
shapes themselves, and they give *exactly* the same doubles:

* A number whose significant digits fit in ``w <= 2**53`` and whose decimal exponent ``e``
  lies in ``-22 .. 22`` is ``w * 10**e`` (or ``w / 10**-e``) in one IEEE operation on two
  exactly representable doubles -- correctly rounded, like ``PyOS_string_to_double``
  (Clinger's fast path; the same one fast_float and CPython's dtoa take first).  Trailing
  zeros do not count as significant digits, so HIGGS-style ``8.692932128906250000e-01``
  takes it too.
* Any other token (17+ significant digits, ``nan``, ``inf``, junk) is *slow*: the kernel
  records where it is and :func:`parse_slow` converts all of a block's slow tokens with one
  :func:`numpy.loadtxt` call, the careful parser's own converter.
* Anything structurally unusual (a wrong field count, an empty field, control bytes, a
  LIBSVM index that is not plain digits, ``qid:``) makes the kernel give up on the block
  (status :data:`BAIL`) and the reader runs the careful parser, which either gives the same
  arrays or raises the message that names the row.  The fast path never words an error.

The kernels are compiled by numba on first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["BAIL", "OK", "TOO_SLOW", "csv_kernel", "libsvm_kernel", "parse_slow", "slow_slots"]

#: Kernel status: every token parsed (slow ones recorded).
OK = 0
#: Kernel status: the block is not plain enough; run the careful parser.
BAIL = 1
#: Kernel status: too many slow tokens (more than the slots, or most of the first ones); the
#: careful parser is as fast then.
TOO_SLOW = 2

_NL, _SP, _TAB, _HASH, _COLON = 10, 32, 9, 35, 58
_MAX_W = 1 << 53  # significant digits at most this are an exact double
_MAX_INDEX_DIGITS = 15  # LIBSVM indices longer than this go the careful way (float rounding)

# Exact doubles 10**0 .. 10**22 and integers 10**0 .. 10**15.
_P10F = np.array([10.0**k for k in range(23)], dtype=np.float64)
_P10I = np.array([10**k for k in range(16)], dtype=np.int64)


def slow_slots(n_tokens: int) -> np.ndarray:
    """Room for a block's slow tokens: ``(start, end, target)`` rows.

    A quarter of the tokens: data written with 16 digits (scikit-learn's ``%.16g``) has about
    a tenth slow; data whose every number is slow is no faster here than the careful way.
    """
    return np.empty((n_tokens // 4 + 64, 3), dtype=np.int64)


@njit(cache=True, nogil=True)
def _number(b: np.ndarray, i: int, end: int) -> tuple[bool, float]:  # pragma: no cover
    """``b[i:end]`` as a float if it takes the exact fast path, else ``(False, 0.0)``."""
    neg = False
    c = b[i]
    if c == 45:  # '-'
        neg = True
        i += 1
    elif c == 43:  # '+'
        i += 1
    w = 0
    zeros = 0  # zero digits after the last nonzero one, not yet folded into w
    exp10 = 0
    nd = 0
    big = False
    frac = False
    while i < end:
        c = b[i]
        if 48 <= c <= 57:
            d = c - 48
            nd += 1
            if frac:
                exp10 -= 1
            if d == 0:
                if w != 0:
                    zeros += 1
            elif w == 0:
                w = d
                zeros = 0
            elif zeros >= 15 or w > (_MAX_W - d) // _P10I[zeros + 1]:
                big = True  # more than 2**53: not exact (checked before it could overflow)
            else:
                w = w * _P10I[zeros + 1] + d
                zeros = 0
        elif c == 46 and not frac:  # '.'
            frac = True
        else:
            break
        i += 1
    if nd == 0 or big:
        return False, 0.0
    if i < end:
        if b[i] != 101 and b[i] != 69:  # 'e', 'E'
            return False, 0.0
        i += 1
        eneg = False
        if i < end and (b[i] == 45 or b[i] == 43):
            eneg = b[i] == 45
            i += 1
        ed = 0
        e = 0
        while i < end and 48 <= b[i] <= 57:
            if e < 10000:
                e = e * 10 + (b[i] - 48)
            ed += 1
            i += 1
        if ed == 0 or i < end:
            return False, 0.0
        exp10 += -e if eneg else e
    exp10 += zeros
    if w == 0:
        return True, -0.0 if neg else 0.0
    if exp10 < -22 or exp10 > 22:
        return False, 0.0
    v = float(w) * _P10F[exp10] if exp10 >= 0 else float(w) / _P10F[-exp10]
    return True, -v if neg else v


@njit(cache=True, nogil=True)
def _mostly_slow(n_slow: int, seen: int) -> bool:  # pragma: no cover
    """Whether so many of the first tokens were slow that the careful parser should take the
    whole block now (``np.savetxt``'s ``%.18e``), before the kernel has scanned much of it."""
    return n_slow >= 256 and 2 * n_slow > seen


@njit(cache=True, nogil=True)
def csv_kernel(
    b: np.ndarray, delim: int, out: np.ndarray, slow: np.ndarray
) -> tuple[int, int]:  # pragma: no cover
    """Parse lines of delimited numbers into ``out`` (``(rows, columns)`` float64).

    Parameters
    ----------
    b : numpy.ndarray
        uint8 text: the lines joined by ``\\n``, none blank, no ``\\r``.
    delim : int
        The delimiter byte, or -1 for runs of blanks (spaces and tabs).
    out : numpy.ndarray
        ``(rows, columns)`` float64; slow tokens' cells are left for :func:`parse_slow`.
    slow : numpy.ndarray
        From :func:`slow_slots`; filled with ``(start, end, flat index into out)``.

    Returns
    -------
    status, n_slow : int
        :data:`OK`, :data:`BAIL` or :data:`TOO_SLOW`; the slow tokens recorded.
    """
    n = b.shape[0]
    rows, cols = out.shape
    flat = out.reshape(-1)
    n_slow = 0
    i = 0
    for r in range(rows):
        col = 0
        while True:
            # One field: skip blanks, take the token, skip blanks, expect a delimiter or '\n'.
            while i < n and (b[i] == _SP or b[i] == _TAB) and b[i] != delim:
                i += 1
            s = i
            while i < n and b[i] != _NL and b[i] != delim and b[i] != _SP and b[i] != _TAB:
                if b[i] < 32:
                    return BAIL, n_slow
                i += 1
            e = i
            while i < n and (b[i] == _SP or b[i] == _TAB) and b[i] != delim:
                i += 1
            at_end = i >= n or b[i] == _NL
            if e == s:
                if delim < 0 and at_end and col == cols:
                    break  # blanks at the end of a blank-separated line
                return BAIL, n_slow  # an empty field
            if col >= cols:
                return BAIL, n_slow
            if delim >= 0 and not at_end and b[i] != delim:
                return BAIL, n_slow  # "1 2" inside a comma field
            ok, v = _number(b, s, e)
            if ok:
                flat[r * cols + col] = v
            else:
                if n_slow >= slow.shape[0] or _mostly_slow(n_slow, r * cols + col):
                    return TOO_SLOW, n_slow
                slow[n_slow, 0] = s
                slow[n_slow, 1] = e
                slow[n_slow, 2] = r * cols + col
                n_slow += 1
            col += 1
            if at_end:
                break
            if delim >= 0:
                i += 1  # past the delimiter
        if col != cols:
            return BAIL, n_slow
        if i < n:
            i += 1  # past '\n'
    if i < n:
        return BAIL, n_slow
    return OK, n_slow


@njit(cache=True, nogil=True)
def libsvm_kernel(
    b: np.ndarray,
    labels: np.ndarray,
    counts: np.ndarray,
    idx: np.ndarray,
    vals: np.ndarray,
    slow: np.ndarray,
) -> tuple[int, int, int]:  # pragma: no cover
    """Parse ``label index:value ...`` lines into labels, per-line counts and pairs.

    Parameters
    ----------
    b : numpy.ndarray
        uint8 text: the lines joined by ``\\n``, none blank or comment-only, no ``\\r``.
    labels, counts : numpy.ndarray
        ``(rows,)`` float64 and int64 outputs.
    idx, vals : numpy.ndarray
        int64 and float64 outputs with room for every ``:`` of the text.
    slow : numpy.ndarray
        From :func:`slow_slots`; ``(start, end, target)`` where target ``t >= 0`` is
        ``vals[t]`` and ``-1 - j`` is ``labels[j]``.

    Returns
    -------
    status, n_pairs, n_slow : int
    """
    n = b.shape[0]
    rows = labels.shape[0]
    n_slow = 0
    t = 0
    i = 0
    for r in range(rows):
        while i < n and (b[i] == _SP or b[i] == _TAB):
            i += 1
        s = i
        while i < n and b[i] != _NL and b[i] != _SP and b[i] != _TAB and b[i] != _HASH:
            if b[i] < 32 or b[i] == _COLON:
                return BAIL, t, n_slow
            i += 1
        if i == s:
            return BAIL, t, n_slow
        ok, v = _number(b, s, i)
        if ok:
            labels[r] = v
        else:
            if n_slow >= slow.shape[0] or _mostly_slow(n_slow, t + r):
                return TOO_SLOW, t, n_slow
            slow[n_slow, 0] = s
            slow[n_slow, 1] = i
            slow[n_slow, 2] = -1 - r
            n_slow += 1
        first = t
        while True:
            while i < n and (b[i] == _SP or b[i] == _TAB):
                i += 1
            if i >= n or b[i] == _NL or b[i] == _HASH:
                break
            # index: plain digits, then ':'
            k = 0
            j = 0
            while i < n and 48 <= b[i] <= 57:
                j = j * 10 + (b[i] - 48)
                k += 1
                i += 1
            if k == 0 or k > _MAX_INDEX_DIGITS or i >= n or b[i] != _COLON:
                return BAIL, t, n_slow  # qid:, a signed or fractional index, no ':'
            i += 1
            s = i
            while i < n and b[i] != _NL and b[i] != _SP and b[i] != _TAB and b[i] != _HASH:
                if b[i] < 32 or b[i] == _COLON:
                    return BAIL, t, n_slow
                i += 1
            if i == s or t >= idx.shape[0]:
                return BAIL, t, n_slow
            idx[t] = j
            ok, v = _number(b, s, i)
            if ok:
                vals[t] = v
            else:
                if n_slow >= slow.shape[0] or _mostly_slow(n_slow, t + r):
                    return TOO_SLOW, t, n_slow
                slow[n_slow, 0] = s
                slow[n_slow, 1] = i
                slow[n_slow, 2] = t
                n_slow += 1
            t += 1
        counts[r] = t - first
        if i < n and b[i] == _HASH:
            while i < n and b[i] != _NL:
                i += 1
        if i < n:
            i += 1  # past '\n'
    if i < n:
        return BAIL, t, n_slow
    return OK, t, n_slow


@njit(cache=True, nogil=True)
def _gather(b: np.ndarray, slow: np.ndarray) -> np.ndarray:  # pragma: no cover
    """The slow tokens copied out of ``b``, one per line (no Python object per token)."""
    size = 0
    for r in range(slow.shape[0]):
        size += slow[r, 1] - slow[r, 0] + 1
    out = np.empty(max(size - 1, 0), dtype=np.uint8)
    o = 0
    for r in range(slow.shape[0]):
        if r:
            out[o] = _NL
            o += 1
        for i in range(slow[r, 0], slow[r, 1]):
            out[o] = b[i]
            o += 1
    return out


def parse_slow(b: np.ndarray, slow: np.ndarray) -> np.ndarray | None:
    """The slow tokens' values, converted as the careful parser converts them, or None.

    Parameters
    ----------
    b : numpy.ndarray
        The uint8 block the kernel read.
    slow : numpy.ndarray
        The recorded ``(start, end, target)`` rows.

    Returns
    -------
    numpy.ndarray or None
        float64 values in ``slow``'s order; None if any token is not a number to
        :func:`numpy.loadtxt` (the careful parser then names it).
    """
    toks = _gather(b, slow).tobytes().split(b"\n")
    try:
        got = np.loadtxt(toks, dtype=np.float64, ndmin=2, comments=None, delimiter=",")
    except ValueError:
        return None
    if got.shape != (len(toks), 1):
        return None
    return got[:, 0]
