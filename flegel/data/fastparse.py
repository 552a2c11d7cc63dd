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
* Up to 19 significant digits (repr's 17, ``np.savetxt``'s ``%.18e``) with ``e`` in
  ``-27 .. 22``: a guess from the same operations, checked against the two half-way points
  around it in exact 128-bit integer arithmetic and moved by an ulp until it is the correctly
  rounded double (ties to even) -- :func:`_exact_long`.
* Any other token (20+ significant digits, tiny exponents, ``nan``, ``inf``, junk) is *slow*:
  the kernel records where it is and :func:`parse_slow` converts all of a block's slow tokens
  with one :func:`numpy.loadtxt` call, the careful parser's own converter.
* Anything structurally unusual (a wrong field count, an empty field, control bytes, a
  LIBSVM index that is not plain digits, ``qid:``) makes the kernel give up on the block
  (status :data:`BAIL`) and the reader runs the careful parser, which either gives the same
  arrays or raises the message that names the row.  The fast path never words an error.

The kernels are compiled by numba on first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math

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

_MAX_SIG = 19  # significant digits kept in a uint64 (10**19 < 2**64); more: slow
_MIN_LONG_EXP = -27  # 5**27 < 2**63: the check of _exact_long stays within 128 bits

# Exact doubles 10**0 .. 10**22, integers 10**0 .. 10**19 and 5**0 .. 5**27.
_P10F = np.array([10.0**k for k in range(23)], dtype=np.float64)
_P10U = np.array([10**k for k in range(20)], dtype=np.uint64)
_P5U = np.array([5**k for k in range(28)], dtype=np.uint64)
_U0, _U1, _M32 = np.uint64(0), np.uint64(1), np.uint64(0xFFFFFFFF)
_U32, _U64 = np.uint64(32), np.uint64(64)
_W53 = np.uint64(_MAX_W)
_M52 = np.uint64(1 << 52)


def slow_slots(n_tokens: int) -> np.ndarray:
    """Room for a block's slow tokens: ``(start, end, target)`` rows.

    A quarter of the tokens: data written with 16 digits (scikit-learn's ``%.16g``) has about
    a tenth slow; data whose every number is slow is no faster here than the careful way.
    """
    return np.empty((n_tokens // 4 + 64, 3), dtype=np.int64)


@njit(cache=True, nogil=True)
def _mul(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover
    """The 128-bit product ``a * b`` as ``(high, low)`` 64-bit words."""
    a0, a1 = a & _M32, a >> _U32
    b0, b1 = b & _M32, b >> _U32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U32) + (p01 & _M32) + (p10 & _M32)
    return p11 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32), (p00 & _M32) | (mid << _U32)


@njit(cache=True, nogil=True)
def _shl(
    hi: np.uint64, lo: np.uint64, s: int
) -> tuple[bool, np.uint64, np.uint64]:  # pragma: no cover
    """``(hi, lo) << s`` for ``s >= 0``, and whether it still fits in 128 bits."""
    if s == 0:
        return True, hi, lo
    if s >= 128:
        return False, hi, lo
    if s >= 64:
        t = np.uint64(s - 64)
        if hi != _U0 or (t > _U0 and (lo >> (_U64 - t)) != _U0):
            return False, hi, lo
        return True, lo << t, _U0
    u = np.uint64(s)
    if (hi >> (_U64 - u)) != _U0:
        return False, hi, lo
    return True, (hi << u) | (lo >> (_U64 - u)), lo << u


@njit(cache=True, nogil=True)
def _vs_half(w: np.uint64, q: int, m2: np.uint64, k: int) -> int:  # pragma: no cover
    """Sign of ``w * 10**q - m2 * 2**(k - 1)``, in exact 128-bit integer arithmetic."""
    if q >= 0:
        ah, al = _mul(w, _P5U[q])
        bh, bl = _U0, m2
        s = k - 1 - q  # w 5^q 2^q vs m2 2^(k-1)  <=>  w 5^q vs m2 2^(k-1-q)
    else:
        ah, al = _U0, w
        bh, bl = _mul(m2, _P5U[-q])
        s = k - 1 - q  # w / (5^p 2^p) vs m2 2^(k-1)  <=>  w vs m2 5^p 2^(k-1+p)
    if s >= 0:
        ok, bh, bl = _shl(bh, bl, s)
        if not ok:
            return -1  # the half-way point is past 2**128 > w 10^q
    else:
        ok, ah, al = _shl(ah, al, -s)
        if not ok:
            return 1
    if ah != bh:
        return 1 if ah > bh else -1
    if al != bl:
        return 1 if al > bl else -1
    return 0


@njit(cache=True, nogil=True)
def _exact_long(w: np.uint64, q: int) -> tuple[bool, float]:  # pragma: no cover
    """``w * 10**q`` correctly rounded, for ``w`` of up to 19 digits, by guess and check.

    The guess (a few roundings away at most) is checked against the two half-way points
    around it, ``(2m +- 1) 2**(k-1)`` for the guess ``m 2**k``, exactly; it moves by an ulp
    until the value lies between them, ties going to the even ``m`` (IEEE rounding, as
    ``PyOS_string_to_double`` does).  A guess that is a power of two (whose lower neighbour is
    closer) gives up, as does a third miss.
    """
    if q >= 0:
        x = float(w) * _P10F[q]
    elif q >= -22:
        x = float(w) / _P10F[-q]
    else:
        x = float(w) / _P10F[22] / _P10F[-q - 22]
    for _ in range(3):
        f, e = math.frexp(x)
        m = np.uint64(f * 9007199254740992.0)  # f * 2**53: exact, m in [2**52, 2**53)
        k = e - 53
        if m == _M52:
            return False, 0.0
        above = _vs_half(w, q, m + m + _U1, k)
        below = _vs_half(w, q, m + m - _U1, k)
        if above < 0 and below > 0:
            return True, x
        if above == 0:
            return True, x if (m & _U1) == _U0 else np.nextafter(x, np.inf)
        if below == 0:
            return True, x if (m & _U1) == _U0 else np.nextafter(x, -np.inf)
        x = np.nextafter(x, np.inf) if above > 0 else np.nextafter(x, -np.inf)
    return False, 0.0


@njit(cache=True, nogil=True)
def _number(b: np.ndarray, i: int, end: int) -> tuple[bool, float]:  # pragma: no cover
    """``b[i:end]`` as a float if one of the exact paths takes it, else ``(False, 0.0)``."""
    neg = False
    c = b[i]
    if c == 45:  # '-'
        neg = True
        i += 1
    elif c == 43:  # '+'
        i += 1
    w = _U0
    sig = 0  # significant digits in w
    zeros = 0  # zero digits after the last nonzero one, not yet folded into w
    exp10 = 0
    nd = 0
    big = False
    frac = False
    while i < end:
        c = b[i]
        if 48 <= c <= 57:
            nd += 1
            if frac:
                exp10 -= 1
            if c == 48:
                if sig:
                    zeros += 1
            elif sig + zeros + 1 > _MAX_SIG:
                big = True  # more digits than a uint64 holds: not this path
            else:
                w = w * _P10U[zeros + 1] + np.uint64(c - 48)
                sig += zeros + 1
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
    if sig == 0:
        return True, -0.0 if neg else 0.0
    if w <= _W53 and -22 <= exp10 <= 22:
        # Clinger: both operands exact, one IEEE rounding.
        v = float(w) * _P10F[exp10] if exp10 >= 0 else float(w) / _P10F[-exp10]
        return True, -v if neg else v
    if exp10 < _MIN_LONG_EXP or exp10 > 22:
        return False, 0.0
    ok, v = _exact_long(w, exp10)
    return ok, -v if neg else v


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
