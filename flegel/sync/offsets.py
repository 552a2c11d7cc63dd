"""Semi-centralized coordination's offsets δᵢ (FSP paper, Section 5.2): each worker's timer
runs η ± δᵢ so that the workers' reports reach the master together; the offsets are kept
centred (they sum to 0, so the mean interval stays η) and bounded.
"""

from __future__ import annotations

from collections.abc import Mapping

from flegel.protocol import Reason

#: Weight of the newest measurement when smoothing the semi-centralized offsets δᵢ.
OFFSET_SMOOTHING = 0.5
#: Bound on a semi-centralized offset, as a fraction of η: |δᵢ| ≤ OFFSET_BOUND · η, so each
#: worker's interval η − δᵢ lies in [0.75 η, 1.25 η].  The spread of intervals it allows
#: (η/2) is what one-sided offsets in [0, η/2] allowed; beyond it a wrong estimate (one
#: straggler's suspension) would hold the barrier back or waste most of an iteration.
OFFSET_BOUND = 0.25


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


def learn_offsets(offsets: dict[int, float], commits: Mapping[int, Mapping[str, float]],
                  arrivals: Mapping[int, float], start: float, eta: float) -> dict[int, float]:
    """Signed δᵢ from each worker's response delay after its own timer (Section 5.2).

    Worker i's delay is ``eᵢ = arrival − start − (η − δᵢ)``; among the workers that
    committed on their timer (``commits``: the barrier's COMMIT headers, by rank) δᵢ moves
    (by :data:`OFFSET_SMOOTHING`) towards ``eᵢ − mean(e)``, then all offsets are centred and
    bounded by :func:`center_offsets` (``OFFSET_BOUND · η``).  Fewer than two workers on
    their timer: the offsets as they were.  (Out of ``flegel.sync.fsp``'s master, issue 19.)
    """
    timed = sorted(r for r, h in commits.items() if int(h["reason"]) == Reason.TIMER)
    if len(timed) < 2:
        return offsets
    delay = {r: arrivals[r] - start - (eta - offsets[r]) for r in timed}
    mean = sum(delay.values()) / len(delay)  # plain floats, as center_offsets (its notes)
    a = OFFSET_SMOOTHING
    learnt = dict(offsets)
    for r, e in delay.items():
        learnt[r] = (1 - a) * offsets[r] + a * (e - mean)
    return center_offsets(learnt, OFFSET_BOUND * eta)
