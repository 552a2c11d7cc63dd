"""Hamerly's bound for K-means' compiled kernel, used per job only once the centres settle.

Hamerly (2010), "Making k-means even faster": a point keeps a lower bound ``l`` on its
distance to every centre but its own.  When the centres move by at most ``δ`` each, ``l − δ``
still bounds those distances, so a point whose exact distance to its own centre is below
``l − δ`` keeps its centre without the product with the other centres.  Here the moves are
θ's ``drift`` (the running sum of each M-step's largest centre move, set by
:meth:`algorithms.kmeans.KMeans.update_parameter`): a point stores ``l`` (``bound`` in its
state; negative: none) and the drift it was set at (``bound_drift``), and ``l − |drift −
bound_drift|`` bounds its distances under any θ of the same chain of M-steps, older ones
included (a point that migrates to a worker on an older θ, a stale θ under ASP/SSP).

Setting a bound costs a second-nearest minimum per point, which pays only while bounds hold:
on data where one centre keeps moving more than most points' margins, bounds mostly fail and
a pass with them is 1.06-1.54x one without.  So :class:`BoundSwitch` turns the setting on per
worker only after a trial pass's bounds held for most points in the next pass, and off again
(with a doubling wait before the next trial) when they stop holding.  Labels and centres are
those of the kernel without bounds whichever way it switches: a bound is used only with a
margin that covers the rounding of the product, and a point whose cluster changed without a
new bound loses its bound.
"""

from __future__ import annotations

import numpy as np

from flegel.jit import njit

#: A point's ``bound`` when it has none (bounds are distances ``≥ 0``; fastmath rules out inf).
NO_BOUND = -1.0


@njit(cache=True, nogil=True, fastmath=True)
def assign_bounded(x: np.ndarray, ct: np.ndarray, csq: np.ndarray, labels: np.ndarray,
                   scores: np.ndarray, bounds: np.ndarray, stamps: np.ndarray, sums: np.ndarray,
                   counts: np.ndarray, tile: int, drift: float, set_bounds: bool, tol: float,
                   stats: np.ndarray) -> float:  # pragma: no cover
    """:func:`algorithms.kmeans._assign_accumulate` with Hamerly's bound; same result.

    Per tile: each revisited point whose ``bounds − drift`` is positive gets its exact score to
    its own centre (2d flops, in float64); if the bound exceeds that distance by more than
    ``tol·(‖x‖² + max‖c‖²)`` (the rounding of the product's scores, in squared distance), it
    keeps its centre and its new score without the product.  The rest go through the steps of
    the kernel without bounds on a product over their rows only (the whole tile when most
    remain, as that kernel does), and with ``set_bounds`` each gets a new bound from its
    second-nearest score; without it, a point whose cluster changed loses its bound.
    ``stats`` accumulates the points checked and the points whose bound held.
    """
    n, d = x.shape
    k = ct.shape[1]
    tile = max(1, min(tile, n))
    ctm2 = np.empty_like(ct)
    for f in range(d):
        for j in range(k):
            ctm2[f, j] = -2.0 * ct[f, j]
    cmax = 0.0
    for j in range(k):
        cmax = max(cmax, np.float64(csq[j]))
    crow = np.empty((k, d))  # the centres by row, in float64: a point's own one is contiguous
    for j in range(k):
        for f in range(d):
            crow[j, f] = ct[f, j]
    g = np.empty((tile, k), dtype=x.dtype)
    xg = np.empty((tile, d), dtype=x.dtype)
    rows = np.empty(tile, dtype=np.int64)
    psum = np.empty((k, d))
    pcount = np.empty(k)
    total = 0.0
    checked = 0
    held = 0
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        m = stop - start
        dobj = 0.0
        nf = 0
        for r in range(m):
            i = start + r
            old = labels[i]
            b = bounds[i] - abs(drift - stamps[i])
            if old >= 0 and bounds[i] >= 0.0:  # a bound (outrun by the drift: failed)
                checked += 1
            if old >= 0 and b > 0.0:
                xsq = 0.0
                xc = 0.0
                for f in range(d):
                    xf = np.float64(x[i, f])
                    xsq += xf * xf
                    xc += xf * crow[old, f]
                sa = np.float64(csq[old]) - 2.0 * xc
                if b * b - (xsq + sa) > tol * (xsq + cmax):
                    held += 1
                    dobj += sa - scores[i]
                    scores[i] = sa
                    continue
            rows[nf] = r
            nf += 1
        if nf == 0:
            total += dobj
            continue
        whole = 2 * nf > m  # most rows remain: the product over the tile, as without bounds
        if whole:
            np.dot(x[start:stop], ctm2, g[:m])
        else:
            for q in range(nf):
                for f in range(d):
                    xg[q, f] = x[start + rows[q], f]
            np.dot(xg[:nf], ctm2, g[:nf])
        psum[:] = 0.0
        pcount[:] = 0.0
        for q in range(nf):
            r = rows[q]
            i = start + r
            gr = r if whole else q
            old = labels[i]
            full = True
            best = 0
            bestv = 0.0
            if old >= 0:
                bestv = np.float64(csq[old]) + np.float64(g[gr, old])
                at_most = 0
                for j in range(k):
                    at_most += np.float64(csq[j]) + np.float64(g[gr, j]) <= bestv
                if at_most <= 1:
                    best = old
                    full = False
            if full:
                bestv = 1e300
                best = 0
                for j in range(k):
                    v = np.float64(csq[j]) + np.float64(g[gr, j])
                    if v < bestv:
                        bestv = v
                        best = j
            xsq = -1.0
            if old < 0:
                xsq = 0.0
                for f in range(d):
                    xsq += x[i, f] * x[i, f]
                dobj += xsq + bestv
            else:
                dobj += bestv - scores[i]
            scores[i] = bestv
            if set_bounds:
                second = 1e300
                for j in range(k):  # branch-free, so that it vectorizes
                    v = np.float64(csq[j]) + np.float64(g[gr, j]) + (1e300 if j == best else 0.0)
                    second = min(second, v)
                if xsq < 0.0:
                    xsq = 0.0
                    for f in range(d):
                        xf = np.float64(x[i, f])
                        xsq += xf * xf
                bounds[i] = np.sqrt(max(xsq + second, 0.0)) if k > 1 else 1e300
                stamps[i] = drift
            elif old != best:
                bounds[i] = NO_BOUND
            if old != best:
                for f in range(d):
                    psum[best, f] += x[i, f]
                pcount[best] += 1.0
                if old >= 0:
                    for f in range(d):
                        psum[old, f] -= x[i, f]
                    pcount[old] -= 1.0
                labels[i] = best
        total += dobj
        for j in range(k):
            counts[j] += pcount[j]
            for f in range(d):
                sums[j, f] += psum[j, f]
    stats[0] += checked
    stats[1] += held
    return total


def bound_tolerance(dtype: np.dtype, n_features: int) -> float:
    """The margin of a held bound, relative to ``‖x‖² + max‖c‖²``: 16 (d + 4) machine epsilons
    of the product's type, several times the rounding of a d-term dot product and of the
    centres' cast to that type."""
    return 16.0 * (n_features + 4) * float(np.finfo(dtype).eps)


def centre_move(old: np.ndarray, new: np.ndarray) -> float:
    """The largest distance any centre moved in an M-step (what ``drift`` adds)."""
    return float(np.sqrt(((new - old) ** 2).sum(axis=1).max())) if len(old) else 0.0


class BoundSwitch:
    """When a worker's blocks use Hamerly bounds: per iteration ``t``, from the bounds' record.

    Off at first (the first visit and the first revisit move most points): blocks go to the
    kernel without bounds and lose any bound they had.  After ``wait`` iterations off, one
    *trial* iteration sets every bound; from the next one the bounds are checked.  While at
    least ``HOLD`` of the points checked kept their centre by their bound, bounds stay on;
    below it (checked per block once ``MIN_CHECKED`` points were, so a failing check stops
    within the iteration) they go off for twice as many iterations as the last time: a job
    whose centres keep moving pays one trial per doubling wait, about log2 of its iterations.
    Labels never depend on the switch, only time does, so a per-process rule is enough: no
    switch state is kept in θ or the point state.
    """

    #: The fraction of checked points whose bound must hold for bounds to stay on.
    HOLD = 0.5
    #: Points checked in an iteration before the fraction may turn bounds off.
    MIN_CHECKED = 50_000

    def __init__(self) -> None:
        self.t: int | None = None
        self.on = False
        self.wait = 2
        self.backoff = 2
        self.stats = np.zeros(2)  # points checked, bounds held: this iteration's

    def setting(self, t: int) -> bool:
        """Whether the next block of iteration ``t`` uses bounds."""
        if t != self.t:
            if self.t is not None:
                self._next()
            self.t = t
            self.stats[:] = 0.0
        elif self.on and self.stats[0] >= self.MIN_CHECKED:
            self._check()
        return self.on

    def _check(self) -> None:
        checked, held = self.stats
        if checked > 0 and held < self.HOLD * checked:
            self.on = False
            self.backoff *= 2
            self.wait = self.backoff

    def _next(self) -> None:
        if self.on:
            self._check()
        else:
            self.wait -= 1
            self.on = self.wait <= 0
