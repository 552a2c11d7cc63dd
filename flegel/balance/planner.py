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

A fixed cost per pass
---------------------
The paper's pass of N points takes V·N.  Under FSP a full pass also ends the worker's
iteration (Section 3.3): it then waits for the next θ, so a pass costs at least one
iteration however few points it holds.  A straggler given all but a few points is then not
as fast in passes as V·N says: an injected straggler (τ = 32 ms per 1,000 points) left with
~70 points computes a pass in 2.2 ms, but sleeps its 32 ms through whole iterations
every 14 passes and passes at most once an iteration otherwise.  Measured (issue 19,
overlapping workload, 30 s): its points were trained 2,896 times against 4,356 for the
others (1.50x), while Eq. 9 on V·N saw it balanced: its V·N was the others' compute per
pass, not their pass.  Each super worker therefore carries a fixed cost per pass A
(:attr:`~flegel.balance.monitor.SuperWorker.a`, 0 by default: the paper's model) and a
pass takes ``A + V·N``: P̃ = P + t/(A + V·N), and in Eq. 9 ``(Nᵢ − Δ)Vᵢ`` becomes
``Aᵢ + (Nᵢ − Δ)Vᵢ`` and ``(Nⱼ + βΔ)Vⱼ`` becomes ``Aⱼ + (Nⱼ + βΔ)Vⱼ``.  Both sides stay
monotone in Δ (the left rises, the right falls: :func:`eq9_delta`), so the root is found by
bisection; with ``Aᵢ > 0`` the left side is bounded by ``Pᵢ + t/Aᵢ`` and may stay below the
right side for every Δ < Nᵢ: then no share of its points lets the source keep pace, and
Δ = Nᵢ (it keeps only what :func:`plan_round`'s callers leave it).  The fallback becomes
``Aᵢ + (Nᵢ − Δ)Vᵢ = βΔVⱼ``.  With every A = 0 all of this is the paper's Eq. 9, solved in
closed form as above.  That the fallback still moves no more than Eq. 9 (Δ ≤ x*) is shown
above for A = 0 only; with fixed costs it is checked, not proved, by a property test on
random pairs (``tests/test_balance_planner.py``).

At most one pass a barrier
--------------------------
Measured (issue 19, Fig. 12's K-means over 4 s, ``python bench/fig12_passes.py``): a worker
passes *at most once a barrier*, since a pass ends its iteration; the fast workers, whose
pass costs ~1 ms under Hamerly bounds, pass at every barrier whatever their points, and their
measured A makes ``A + V·N`` the barrier period B.  A straggler holding n points passes at
every barrier except while its injected suspensions run, about ``n·V/B`` barriers per pass;
A + V·N predicts that too.  What it cannot say is that a straggler already passing every
barrier gains nothing from more points while behind in passes so far: they would only slow
its catching up (Eq. 9's lost-passes term, P_j − P_i, assumes the target is ahead).
So (Eq. 8-9 as used by :class:`~flegel.balance.migration.Balancer`): the straggler keeps
only the points that fit Eq. 8's threshold on top of B (``Balancer.floor``; a floor kept
to show a recovery applies only where it can show one), and a straggler behind its source
in passes receives nothing, whatever Eq. 9's P̃ says (``Balancer.keep_some``).  The passes
lost before it got there stay lost; what the rules bound is the rate at which more are
lost.

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


def pass_time(w: SuperWorker | WorkerStat, n: float | None = None) -> float:
    """Seconds a pass takes, ``A + V·N`` (module docstring, "A fixed cost per pass").

    Parameters
    ----------
    w : SuperWorker or WorkerStat
        Its A (fixed seconds per pass), V (s/point) and N (points).
    n : float, optional
        Points to take the pass over (default: its own N).

    Returns
    -------
    float
        Seconds.
    """
    return w.a + w.v * (w.n if n is None else n)


def predicted_passes(w: SuperWorker, T: float, d: int = DEFAULT_ROUNDS) -> float:
    """P̃ = P + T/(d·(A + V·N)): passes after one split with no migration (FSP paper §4.2;
    A, the fixed cost per pass, is 0 in the paper's model).

    Parameters
    ----------
    w : SuperWorker
        Its P (passes), V (s/point), N (points), A (s/pass).
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
    return math.inf if w.n == 0 else w.p + t / pass_time(w)


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

    With a fixed cost per pass (``Aᵢ`` or ``Aⱼ`` > 0) the root is found by bisection
    (module docstring, "A fixed cost per pass"), and it is Nᵢ when even sending every point
    leaves the source behind.

    Returns
    -------
    float
        The real solution clamped to [0, Nᵢ): 0 when 𝕎ᵢ is not behind 𝕎ⱼ (P̃ᵢ ≥ P̃ⱼ); Nᵢ
        when no share keeps the source's pace (only with ``Aᵢ > 0``).
    """
    t = _split(T, d)
    if i.n == 0:
        return 0.0
    if i.a > 0 or j.a > 0:
        return _eq9_bisect(i, j, t)
    beta = i.size / j.size
    c = i.v * ((j.p - i.p) * j.n + t / j.v)
    den = t * beta + c
    if den <= 0:  # only when P̃ᵢ > P̃ⱼ: nothing to send
        return 0.0
    x = (c * i.n - t * j.n) / den
    return min(max(x, 0.0), i.n)


def _eq9_bisect(i: SuperWorker, j: SuperWorker, t: float) -> float:
    """Eq. 9 with fixed costs per pass, ``t = T/d``: the Δ in [0, Nᵢ] where the source's
    passes ``Pᵢ + t/(Aᵢ + (Nᵢ − Δ)Vᵢ)`` meet the target's
    ``Pⱼ + (t − (Pⱼ − Pᵢ)βΔVⱼ)/(Aⱼ + (Nⱼ + βΔ)Vⱼ)``.

    For a pair the planner makes (P̃ᵢ ≤ P̃ⱼ) the left side rises with Δ and the right side
    falls (its slope has the sign of ``−((Pⱼ − Pᵢ)(Aⱼ + NⱼVⱼ) + t)``, negative unless 𝕎ⱼ is
    behind 𝕎ᵢ by more than it passes in t, i.e. P̃ⱼ < Pᵢ ≤ P̃ᵢ), so bisection finds the
    single crossing; 60 halvings bring the interval under a millionth of a point for any
    shard that fits in memory.
    """
    beta = i.size / j.size
    gap = j.p - i.p

    def behind(x: float) -> float:
        """Source's passes minus target's after moving x (< 0: still behind)."""
        rest, grown = pass_time(i, i.n - x), pass_time(j, j.n + beta * x)
        left = math.inf if rest <= 0 else i.p + t / rest
        # A target holding nothing (and no fixed cost) passes without end.
        right = math.inf if grown <= 0 else j.p + (t - gap * beta * x * j.v) / grown
        return left - right

    if behind(0.0) >= 0:
        return 0.0
    if behind(float(i.n)) <= 0:
        return float(i.n)  # even with no points left it stays behind: every point goes
    lo, hi = 0.0, float(i.n)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if behind(mid) < 0 else (lo, mid)
    return lo


def fallback_delta(i: SuperWorker, j: SuperWorker) -> float:
    """Δ from the fallback ``(Nᵢ − Δ)Vᵢ = βΔVⱼ`` (FSP paper §4.2, after Eq. 9).

    Used when T/d cannot cover the compensation: both the source's remaining data and
    the migrated data then take the same time per pass, ``Δ = NᵢVᵢ/(Vᵢ + βVⱼ)``; with a
    fixed cost per pass, ``Aᵢ + (Nᵢ − Δ)Vᵢ = βΔVⱼ``, ``Δ = (Aᵢ + NᵢVᵢ)/(Vᵢ + βVⱼ)``, at most
    Nᵢ.

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
    return min(pass_time(i) / (i.v + beta * j.v), float(i.n))


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


def _by_speed(total: int, j: SuperWorker) -> list[int]:
    """``total`` received points split over ``j``'s members so that their counts come out
    proportional to their speeds 1/V (water filling: a member already holding more than its
    share gets none), so that their predicted passes are equal and no member receives
    points it would pass on at the next plan at unchanged speeds (issue 19, churn).  The
    largest remainders take the points left by rounding down."""
    have = j.member_sizes()
    rate = [1.0 / v for v in j.speeds]
    # The level L (points per unit of speed) at which sum(max(0, L·rate − have)) = total.
    order = sorted(range(j.size), key=lambda m: have[m] / rate[m])
    level, pool, rates = 0.0, float(total), 0.0
    for k, m in enumerate(order):
        rates += rate[m]
        pool += have[m]
        level = pool / rates
        if k + 1 == len(order) or level <= have[order[k + 1]] / rate[order[k + 1]]:
            break
    want = [max(0.0, level * rate[m] - have[m]) for m in range(j.size)]
    out = [math.floor(w) for w in want]
    for m in sorted(range(j.size), key=lambda m: out[m] - want[m])[:total - sum(out)]:
        out[m] += 1
    return out


def _pair_moves(i: SuperWorker, j: SuperWorker, delta: float) -> list[Move]:
    per_source = min(math.floor(delta), max(math.ceil(i.n) - 1, 0))
    per_target = math.floor(i.size * delta / j.size)
    total = min(i.size * per_source, j.size * per_target)
    if total <= 0:
        return []
    sends = [min(share, max(have - 1, 0))
             for share, have in zip(_even(total, i.size), i.member_sizes())]
    receives = _by_speed(sum(sends), j) if j.speeds else _even(sum(sends), j.size)
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
    quantity both sides of Eq. 9 stand for), at unchanged speed; with a fixed cost per pass
    a, ``(T/d)/v`` becomes ``n'·(T/d)/(a + v·n')``, the point-passes of T/d.  Moves are assumed done
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
            out.append(WorkerStat(s.rank, 0, s.v, s.p, s.a))
            continue
        trained = t / s.v if s.a == 0 else n_new * t / pass_time(s, n_new)
        work = math.fsum([s.p * kept, *(q * p for q, p in got[s.rank]), trained])
        out.append(WorkerStat(s.rank, n_new, s.v, work / n_new, s.a))
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
