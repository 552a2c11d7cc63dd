"""Semi-centralized coordination's offsets δᵢ (FSP paper, Section 5.2): each worker's timer
runs η ± δᵢ so that the workers' reports reach the master together; the offsets are kept
centred (they sum to 0, so the mean interval stays η) and bounded.
"""

from __future__ import annotations


def center_offsets(offsets: dict[int, float], bound: float) -> dict[int, float]:
    """Shift and clip semi-centralized offsets: ``δᵢ ← clip(δᵢ − c, −bound, bound)`` with the
    shift c chosen so that the clipped offsets sum to 0 (Section 5.2's η ± δᵢ).

    The clipped sum falls monotonically from ``+n·bound`` to ``−n·bound`` as c grows, so c
    exists; it is found by bisection.  Order is kept: the latest responder keeps the largest
    offset (the shortest interval).
    """
    if not offsets or bound <= 0:
        return {r: 0.0 for r in offsets}
    # Plain floats, not NumPy: a handful of workers, and the master runs this at every
    # barrier (issue 19: 0.74 ms a barrier with np.clip over 100 halvings, a share of
    # K-means' 9-13 ms iterations on shared cores).  60 halvings of the bracket reach its
    # width (a few bounds) times 1e-18.
    x = [float(v) for v in offsets.values()]

    def clip(v: float) -> float:
        return -bound if v < -bound else (bound if v > bound else v)

    def total(c: float) -> float:
        return sum(clip(v - c) for v in x)

    lo, hi = min(x) - bound, max(x) + bound
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if total(mid) > 0:
            lo = mid
        else:
            hi = mid
    c = 0.5 * (lo + hi)
    return {r: clip(float(v) - c) for r, v in offsets.items()}
