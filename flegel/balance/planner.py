r"""Fine-grained balance planner: remaining time, pairing and Eq. 9 (FSP paper §3.3, §4.2).

Units (as in :mod:`flegel.balance.monitor`): N in points, V in **seconds per point**,
P in passes, T in seconds.  Then ``t / (V·N)`` is the passes a worker adds in ``t``
seconds over its N points.

The round
---------
"It evenly splits T into d parts and within each one, a peer-to-peer migration policy is
used to balance passes of paired super workers" (§4.2).  With ``t = T/d``, before round k:

1. predict, assuming no migration (§4.2)::

       P̃ᵢᵏ = Pᵢᵏ⁻¹ + T / (d · Vᵢᵏ⁻¹ · Nᵢᵏ⁻¹)

2. sort the K super workers ascending by P̃ and pair the minimum with the maximum, the
   second minimum with the second maximum, and so on inwards; with K odd the median stays
   unpaired (:func:`pair`);
3. in a pair ⟨𝕎ᵢ, 𝕎ⱼ⟩, 𝕎ᵢ is the one *behind* (smaller P̃: slow and/or with too much data)
   and is the **source**; 𝕎ⱼ, *ahead*, is the **target**.  Every worker of 𝕎ᵢ sends Δᵢⱼᵏ
   points and every worker of 𝕎ⱼ receives βΔᵢⱼᵏ, ``β = |𝕎ᵢ| / |𝕎ⱼ|`` (so that
   ``|𝕎ᵢ|·Δ = |𝕎ⱼ|·βΔ``: points are conserved);
4. Δᵢⱼᵏ comes from Eq. 9 as printed in the paper (superscripts k−1 on P, N, V)::

         Pᵢᵏ⁻¹ + (T/d) / ((Nᵢᵏ⁻¹ − Δᵢⱼᵏ) Vᵢᵏ⁻¹)
       = Pⱼᵏ⁻¹ + (T/d − (Pⱼᵏ⁻¹ − Pᵢᵏ⁻¹) β Δᵢⱼᵏ Vⱼᵏ⁻¹) / ((Nⱼᵏ⁻¹ + β Δᵢⱼᵏ) Vⱼᵏ⁻¹)     (9)

   Left: the source's passes after the round, its remaining ``Nᵢ − Δ`` points trained for
   T/d.  Right: the target's, after first spending ``(Pⱼ − Pᵢ)·βΔ·Vⱼ`` seconds bringing the
   βΔ migrated points (which arrive with Pᵢ passes) up to Pⱼ (the "compensation", §4.3's
   priority queue), then training all ``Nⱼ + βΔ`` points for what is left of T/d;
5. "a time split might even not be enough for compensation, i.e.
   ``T/d − (Pⱼᵏ⁻¹ − Pᵢᵏ⁻¹)βΔᵢⱼᵏVⱼᵏ⁻¹`` [is negative]. Then the two paired super workers should
   work together for compensation … the goal of migration is to equalize the compensation
   time respectively for remaining data and migrated data" (§4.2)::

       (Nᵢᵏ⁻¹ − Δᵢⱼᵏ) Vᵢᵏ⁻¹ = β Δᵢⱼᵏ Vⱼᵏ⁻¹                           (fallback)

   The test is made with Δ the solution of Eq. 9.

Solving Eq. 9
-------------
Write ``t = T/d``, ``D = Pⱼ − Pᵢ``, ``x = Δ``.  The right side simplifies to the
point-weighted mean passes of the target's data after the round::

    Pⱼ + (t − D·βx·Vⱼ)/((Nⱼ + βx)Vⱼ) = (Pⱼ·Nⱼ + Pᵢ·βx + t/Vⱼ) / (Nⱼ + βx)

(so it holds whatever the sign of D: if the migrated points are ahead, the target trains
its native points first, and the accounting is the same).  Subtracting Pᵢ from both sides
leaves ``t/((Nᵢ − x)Vᵢ) = (D·Nⱼ + t/Vⱼ)/(Nⱼ + βx)``, linear in x::

    C = Vᵢ (D·Nⱼ + t/Vⱼ),       x* = (C·Nᵢ − t·Nⱼ) / (t·β + C)

For t > 0 and P̃ᵢ ≤ P̃ⱼ this has ``C > 0`` and ``0 ≤ x* < Nᵢ``; the left side grows from
P̃ᵢ and the right side falls from P̃ⱼ as x grows, so both sides meet between P̃ᵢ and P̃ⱼ.
The fallback gives ``x_f = Nᵢ·Vᵢ / (Vᵢ + β·Vⱼ)``.  Substituting Eq. 9 shows the fallback
condition ``t < D·β·x*·Vⱼ`` is *equivalent* to ``x_f < x*``: the fallback moves fewer
points than Eq. 9, exactly when T/d cannot cover the compensation.  Hence Δ ≤ x* always,
and a round never pushes a pair past each other.

Integers and super workers
--------------------------
The pair moves S points in all, ``S = min(|𝕎ᵢ|·⌊Δ⌋, |𝕎ⱼ|·⌊βΔ⌋)``; S is split as evenly as
possible among the sources (the first ``S mod |𝕎ᵢ|`` members in rank order send one more),
each source capped at its own count minus one (a source keeps at least one point:
Δ ∈ [0, Nᵢ)), then the points actually sent are split evenly among the targets the same way,
and sources are matched to targets in rank order (north-west corner rule, at most
``|𝕎ᵢ| + |𝕎ⱼ| − 1`` moves).  Rounding *down* keeps every member's share within Δ (sources)
and βΔ (targets), so with exact super-worker statistics the predicted passes of every
worker stay within [P̃ᵢ, P̃ⱼ] (:func:`advance` computes them; the tests check it).

Remaining time (§3.3)
---------------------
"Given the current objective value f_cur and the target f_tar, it is
(|f_cur − f_tar|) / g(η)", g being the training progress per unit time of the current
linear-fitting stage.  :func:`progress_rate` fits g as the least-squares slope of f against
elapsed time over the samples of the current stage (the caller passes them: the stage
boundaries are the interval adjustor's, :mod:`flegel.interval.multistage`), and
:func:`remaining_time` divides.  Progress away from the target, or none, gives T = ∞: the
planner then has nothing to plan (it needs a finite T > 0).  For an iteration-count
criterion the caller may pass any other T (e.g. iterations left × mean iteration time).

Defaults
--------
d = :data:`DEFAULT_ROUNDS` = 4.  The paper gives no value.  Larger d re-pairs more often
(better tolerance to an inaccurate T and to slow asynchronous transfers, the reasons the
paper gives for rounds) but each split T/d is shorter, so more pairs fall back and each
round starts new transfers; 4 rounds keeps a round long enough (a quarter of the predicted
remaining time) for a window-by-window transfer (§4.3, Table 2: ~55-100 MB/s) to finish
inside it, while allowing three corrections per cycle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flegel.balance.monitor import DEFAULT_EPSILON, SuperWorker, WorkerStat, imbalanced

#: d, the rounds T is split into (paper gives none; see the module docstring).
DEFAULT_ROUNDS = 4


@dataclass(frozen=True)
class Move:
    """Move ``points`` active points from worker ``source`` to worker ``target``.

    Parameters
    ----------
    source : int
        Sending rank (a member of the pair's behind super worker 𝕎ᵢ).
    target : int
        Receiving rank (a member of the ahead super worker 𝕎ⱼ).
    points : int
        How many points, ``> 0``.
    """

    source: int
    target: int
    points: int

    def __post_init__(self) -> None:
        if self.points <= 0:
            raise ValueError(f"a move carries > 0 points, got {self.points}")
        if self.source == self.target:
            raise ValueError(f"a move needs two workers, got {self.source} twice")


# -- remaining time (§3.3) ---------------------------------------------------------------


def progress_rate(times: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope df/dt of the objective over the current stage (FSP paper §3.3).

    Parameters
    ----------
    times : sequence of float
        Elapsed seconds at each sample (at least two distinct).
    values : sequence of float
        f(θ) at each sample.

    Returns
    -------
    float
        The signed slope, in objective units per second (negative while minimizing).
    """
    t = np.asarray(times, dtype=float)
    f = np.asarray(values, dtype=float)
    if t.shape != f.shape or t.ndim != 1:
        raise ValueError("times and values must be 1-D and of the same length")
    if t.size < 2 or np.ptp(t) == 0:
        raise ValueError("a rate needs at least two samples at distinct times")
    tc = t - t.mean()
    return float(np.dot(tc, f - f.mean()) / np.dot(tc, tc))


def remaining_time(f_cur: float, f_tar: float, rate: float) -> float:
    """Estimated seconds until convergence, ``|f_cur − f_tar| / g`` (FSP paper §3.3).

    Parameters
    ----------
    f_cur : float
        Current objective value.
    f_tar : float
        Target objective value (the convergence criterion's).
    rate : float
        Signed df/dt (e.g. from :func:`progress_rate`); ``g = |rate|`` counts only when
        f moves toward ``f_tar``.

    Returns
    -------
    float
        T in seconds: 0 when already at the target, ``inf`` when f does not move toward it.
    """
    gap = f_tar - f_cur
    if gap == 0:
        return 0.0
    if rate == 0 or (gap > 0) != (rate > 0):
        return math.inf
    return gap / rate


# -- one round (§4.2) -------------------------------------------------------------------


def _split(T: float, d: int) -> float:
    if not (math.isfinite(T) and T > 0):
        raise ValueError(f"the remaining time T must be finite and > 0, got {T}")
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return T / d


def predicted_passes(w: SuperWorker, T: float, d: int = DEFAULT_ROUNDS) -> float:
    """P̃ = P + T/(d·V·N): passes after one split with no migration (FSP paper §4.2).

    Parameters
    ----------
    w : SuperWorker
        Its P (passes), V (s/point), N (points).
    T : float
        Remaining time (s), finite and > 0.
    d : int
        Rounds per cycle.

    Returns
    -------
    float
        Passes; ``inf`` for N = 0.
    """
    t = _split(T, d)
    return math.inf if w.n == 0 else w.p + t / (w.v * w.n)


def pair(supers: Sequence[SuperWorker], T: float,
         d: int = DEFAULT_ROUNDS) -> list[tuple[SuperWorker, SuperWorker]]:
    """Pair super workers: min P̃ with max P̃, then inwards (FSP paper §4.2).

    Super workers holding fewer than one point per member are left out (their passes are
    undefined).  Ties in P̃ are broken by smallest rank.  With an odd count the median
    super worker is unpaired.

    Parameters
    ----------
    supers : sequence of SuperWorker
        The K super workers.
    T : float
        Remaining time (s).
    d : int
        Rounds per cycle.

    Returns
    -------
    list of (SuperWorker, SuperWorker)
        ``(behind, ahead)`` pairs: ``behind`` (smaller P̃) is the source, ``ahead`` the
        target; the outermost pair first.
    """
    live = [w for w in supers if w.n >= 1]
    order = sorted(live, key=lambda w: (predicted_passes(w, T, d), w.ranks[0]))
    k = len(order)
    return [(order[m], order[k - 1 - m]) for m in range(k // 2)]


def eq9_delta(i: SuperWorker, j: SuperWorker, T: float, d: int = DEFAULT_ROUNDS) -> float:
    """Δᵢⱼᵏ solving Eq. 9 (FSP paper §4.2), points sent by *each* worker of 𝕎ᵢ.

    ``x* = (C·Nᵢ − t·Nⱼ)/(t·β + C)`` with ``t = T/d``, ``β = |𝕎ᵢ|/|𝕎ⱼ|``,
    ``C = Vᵢ((Pⱼ − Pᵢ)Nⱼ + t/Vⱼ)``; see the module docstring for the derivation.

    Parameters
    ----------
    i : SuperWorker
        The source (behind).
    j : SuperWorker
        The target (ahead).
    T : float
        Remaining time (s), finite and > 0.
    d : int
        Rounds per cycle.

    Returns
    -------
    float
        The real solution clamped to [0, Nᵢ): 0 when 𝕎ᵢ is not behind 𝕎ⱼ (P̃ᵢ ≥ P̃ⱼ).
    """
    t = _split(T, d)
    if i.n == 0:
        return 0.0
    beta = i.size / j.size
    c = i.v * ((j.p - i.p) * j.n + t / j.v)
    den = t * beta + c
    if den <= 0:  # only when P̃ᵢ > P̃ⱼ: nothing to send
        return 0.0
    x = (c * i.n - t * j.n) / den
    return min(max(x, 0.0), i.n)


def fallback_delta(i: SuperWorker, j: SuperWorker) -> float:
    """Δ from the fallback ``(Nᵢ − Δ)Vᵢ = βΔVⱼ`` (FSP paper §4.2, after Eq. 9).

    Used when T/d cannot cover the compensation: both the source's remaining data and
    the migrated data then take the same time per pass, ``Δ = NᵢVᵢ/(Vᵢ + βVⱼ)``.

    Parameters
    ----------
    i : SuperWorker
        The source (behind).
    j : SuperWorker
        The target (ahead).

    Returns
    -------
    float
        Points per source worker, in [0, Nᵢ).
    """
    beta = i.size / j.size
    return i.n * i.v / (i.v + beta * j.v)


def pair_delta(i: SuperWorker, j: SuperWorker, T: float,
               d: int = DEFAULT_ROUNDS) -> tuple[float, bool]:
    """Δᵢⱼᵏ for one pair: Eq. 9, or the fallback when T/d cannot cover compensation.

    Parameters
    ----------
    i : SuperWorker
        The source (behind).
    j : SuperWorker
        The target (ahead).
    T : float
        Remaining time (s).
    d : int
        Rounds per cycle.

    Returns
    -------
    (float, bool)
        Points per source worker (real, not yet rounded), and whether the fallback was
        used, i.e. ``T/d − (Pⱼ − Pᵢ)·β·Δ*·Vⱼ < 0`` for Eq. 9's Δ*.
    """
    t = _split(T, d)
    x = eq9_delta(i, j, T, d)
    if x <= 0:
        return 0.0, False
    beta = i.size / j.size
    if t - (j.p - i.p) * beta * x * j.v < 0:
        return fallback_delta(i, j), True
    return x, False


def _even(total: int, k: int) -> list[int]:
    base, extra = divmod(total, k)
    return [base + (1 if m < extra else 0) for m in range(k)]


def _pair_moves(i: SuperWorker, j: SuperWorker, delta: float) -> list[Move]:
    per_source = min(math.floor(delta), max(math.ceil(i.n) - 1, 0))
    per_target = math.floor(i.size * delta / j.size)
    total = min(i.size * per_source, j.size * per_target)
    if total <= 0:
        return []
    sends = [min(share, max(have - 1, 0))
             for share, have in zip(_even(total, i.size), i.member_sizes())]
    receives = _even(sum(sends), j.size)
    moves: list[Move] = []
    a = b = 0
    left_a = sends[0]
    left_b = receives[0]
    while a < len(sends) and b < len(receives):
        if left_a == 0:
            a += 1
            left_a = sends[a] if a < len(sends) else 0
            continue
        if left_b == 0:
            b += 1
            left_b = receives[b] if b < len(receives) else 0
            continue
        q = min(left_a, left_b)
        moves.append(Move(i.ranks[a], j.ranks[b], q))
        left_a -= q
        left_b -= q
    return moves


def plan_round(supers: Sequence[SuperWorker], T: float, d: int = DEFAULT_ROUNDS) -> list[Move]:
    """The moves of one balancing round (FSP paper §4.2, Eq. 9).  Pure.

    Pairs the super workers (:func:`pair`), computes each pair's Δ (:func:`pair_delta`),
    rounds it down and splits it among member workers (module docstring, "Integers and
    super workers").

    Parameters
    ----------
    supers : sequence of SuperWorker
        The K super workers at the start of the round (statistics Pᵏ⁻¹, Vᵏ⁻¹, Nᵏ⁻¹).
    T : float
        Remaining time in seconds (:func:`remaining_time`), finite and > 0.
    d : int
        Rounds per cycle; each round plans for T/d seconds.

    Returns
    -------
    list of Move
        Worker-to-worker moves, outermost pair first; empty when nothing needs moving.
    """
    ranks = [r for w in supers for r in w.ranks]
    if len(set(ranks)) != len(ranks):
        raise ValueError("a rank belongs to two super workers")
    moves: list[Move] = []
    for i, j in pair(supers, T, d):
        delta, _ = pair_delta(i, j, T, d)
        moves.extend(_pair_moves(i, j, delta))
    return moves


def advance(stats: Sequence[WorkerStat], moves: Sequence[Move], T: float,
            d: int = DEFAULT_ROUNDS) -> list[WorkerStat]:
    """Predicted statistics after a round's moves and T/d seconds of training.

    Each worker ends with ``n' = n − sent + received`` points and the point-weighted mean
    passes of its data, ``p' = (p·(n − sent) + Σ received·p_source + (T/d)/v) / n'`` (the
    quantity both sides of Eq. 9 stand for), at unchanged speed.  Moves are assumed done
    at the start of the round: the paper's model, not a promise about §4.3's transfers.

    Parameters
    ----------
    stats : sequence of WorkerStat
        Every worker at the start of the round.
    moves : sequence of Move
        The round's plan (:func:`plan_round`).
    T : float
        Remaining time (s).
    d : int
        Rounds per cycle.

    Returns
    -------
    list of WorkerStat
        Same order as ``stats``.
    """
    t = _split(T, d)
    by_rank = {s.rank: s for s in stats}
    sent = dict.fromkeys(by_rank, 0)
    got: dict[int, list[tuple[int, float]]] = {r: [] for r in by_rank}
    for m in moves:
        if m.source not in by_rank or m.target not in by_rank:
            raise ValueError(f"{m} names an unknown rank")
        sent[m.source] += m.points
        got[m.target].append((m.points, by_rank[m.source].p))
    out = []
    for s in stats:
        kept = s.n - sent[s.rank]
        if kept < 0:
            raise ValueError(f"worker {s.rank} sends {sent[s.rank]} of its {s.n} points")
        n_new = kept + sum(q for q, _ in got[s.rank])
        if n_new == 0:
            out.append(WorkerStat(s.rank, 0, s.v, s.p))
            continue
        work = math.fsum([s.p * kept, *(q * p for q, p in got[s.rank]), t / s.v])
        out.append(WorkerStat(s.rank, n_new, s.v, work / n_new))
    return out


def cycle_finished(k: int, d: int, supers: Sequence[SuperWorker],
                   epsilon: float = DEFAULT_EPSILON) -> bool:
    """Whether a balancing cycle ends after round k: ``k ≥ d`` or Eq. 8 met (FSP paper §4.2).

    Parameters
    ----------
    k : int
        Rounds done in this cycle.
    d : int
        Rounds per cycle.
    supers : sequence of SuperWorker
        Current super workers.
    epsilon : float
        Eq. 8's ϵ.

    Returns
    -------
    bool
        True when the cycle is over (another one starts if training has not converged
        and Eq. 8 is still violated).
    """
    return k >= d or not imbalanced([w.p for w in supers], epsilon)
