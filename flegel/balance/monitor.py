"""Balance monitor: super workers and Eq. 8's trigger (FSP paper §4.2).

At every barrier the FSP master knows, for each worker ``i``, three statistics (§4.2):

``n``
    the points it currently holds *and trains* (active points; with virtual migration,
    §4.3, points marked inactive do not count), in points;
``v``
    its training speed, in **seconds per point** (wall time to process one point once;
    the reciprocal of a throughput).  This is the unit that makes the paper's
    ``T / (d·V·N)`` a number of passes, so Eq. 9 is used as printed;
``p``
    the traversal passes it has completed over its data (fractional: 2.5 means two full
    passes and half of the third).

Workers with the same statistics are grouped into one *super worker* 𝕎ᵢ ("we real-timely
group homogeneous workers {W_i1, …, W_ik, …} with the same statistics into a super worker
𝕎ᵢ", §4.2), which has the same statistics Nᵢ, Vᵢ, Pᵢ.  Measured speeds are never exactly
equal, so "the same" is read with a :class:`Tolerance`.

Eq. 8 (the balancing goal, checked at every barrier, with K super workers)::

    | Pᵢ* − (Σ_{j=1..K} Pⱼ*) / K |  ≤  ϵ,      0 ≤ ϵ ≤ 1                     (8)

Migration starts "once the threshold is exceeded": :func:`imbalanced` is true when some
``|Pᵢ − mean P| > ϵ`` (strictly; a deviation of exactly ϵ is balanced).  As printed, the
mean is over the K *super workers* (unweighted by their sizes |𝕎ᵢ|);
:func:`needs_migration` follows that, :func:`imbalanced` takes whatever passes it is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Eq. 8's threshold ϵ by default: the paper's upper bound, one traversal pass.
DEFAULT_EPSILON = 1.0


@dataclass(frozen=True)
class WorkerStat:
    """One worker's statistics at a barrier (FSP paper §4.2).

    Parameters
    ----------
    rank : int
        The worker's rank.
    n : int
        Active points it holds (points), ``n ≥ 0``.
    v : float
        Seconds per point (time to process one point once), finite and ``> 0``.
    p : float
        Traversal passes completed, finite and ``≥ 0``.
    a : float, optional
        Seconds a pass costs besides its points, finite and ``≥ 0`` (default 0: the paper's
        model, a pass of N points takes V·N).  Under FSP a full pass ends a worker's
        iteration, so each pass costs at least the wait for the next θ, however few points
        it holds (:meth:`flegel.balance.migration.Balancer.stats` measures it); a pass then
        takes ``a + V·N``.
    """

    rank: int
    n: int
    v: float
    p: float
    a: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and self.a >= 0):
            raise ValueError(f"worker {self.rank}: a (s/pass) must be finite and >= 0, "
                             f"got {self.a}")
        if self.n < 0:
            raise ValueError(f"worker {self.rank}: n must be >= 0, got {self.n}")
        if not (math.isfinite(self.v) and self.v > 0):
            raise ValueError(f"worker {self.rank}: v (s/point) must be finite and > 0, "
                             f"got {self.v}")
        if not (math.isfinite(self.p) and self.p >= 0):
            raise ValueError(f"worker {self.rank}: p must be finite and >= 0, got {self.p}")


@dataclass(frozen=True)
class SuperWorker:
    """A group 𝕎ᵢ of homogeneous workers with common statistics Nᵢ, Vᵢ, Pᵢ (FSP paper §4.2).

    Parameters
    ----------
    ranks : tuple of int
        The member workers, ascending; ``|𝕎ᵢ| = len(ranks) ≥ 1``.
    n : float
        Nᵢ, points held per member (the members' mean when grouped within a tolerance).
    v : float
        Vᵢ, seconds per point per member (mean), ``> 0``.
    p : float
        Pᵢ, passes completed (mean).
    sizes : tuple of int, optional
        Each member's own point count, in the order of ``ranks``; empty means every member
        holds ``floor(n)``.  The planner uses it so that no member is asked to send points
        it does not have.
    a : float, optional
        Aᵢ, seconds a pass costs besides its points (mean; :class:`WorkerStat`), ``≥ 0``.
    speeds : tuple of float, optional
        Each member's own V, in the order of ``ranks``, for a group whose members' speeds
        differ by more than timing noise (``Balancer.supers`` beside a straggler); the
        planner then splits the points it receives so that the members' counts come out
        proportional to their speeds (equal predicted passes) instead of evenly.  Empty:
        the members count as equally fast (§4.2's "same statistics").
    """

    ranks: tuple[int, ...]
    n: float
    v: float
    p: float
    sizes: tuple[int, ...] = ()
    a: float = 0.0
    speeds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.ranks:
            raise ValueError("a super worker needs at least one member")
        if self.sizes and len(self.sizes) != len(self.ranks):
            raise ValueError("sizes must list one point count per rank")
        if self.speeds and (len(self.speeds) != len(self.ranks)
                            or not all(math.isfinite(v) and v > 0 for v in self.speeds)):
            raise ValueError("speeds must list one finite V > 0 per rank")
        if not (math.isfinite(self.n) and self.n >= 0):
            raise ValueError(f"super worker {self.ranks}: n must be finite and >= 0")
        if not (math.isfinite(self.v) and self.v > 0):
            raise ValueError(f"super worker {self.ranks}: v must be finite and > 0")
        if not (math.isfinite(self.p) and self.p >= 0):
            raise ValueError(f"super worker {self.ranks}: p must be finite and >= 0")
        if not (math.isfinite(self.a) and self.a >= 0):
            raise ValueError(f"super worker {self.ranks}: a must be finite and >= 0")

    @property
    def size(self) -> int:
        """|𝕎ᵢ|, the number of member workers."""
        return len(self.ranks)

    def member_sizes(self) -> tuple[int, ...]:
        """Each member's point count (``sizes``, or ``floor(n)`` for every member)."""
        return self.sizes if self.sizes else (math.floor(self.n),) * len(self.ranks)


@dataclass(frozen=True)
class Tolerance:
    """When two workers count as having "the same statistics" (FSP paper §4.2).

    Two workers a, b are homogeneous when all three hold (boundaries inclusive):

    * speeds:  ``max(v_a, v_b) ≤ (1 + v_rel) · min(v_a, v_b)``;
    * points:  ``|n_a − n_b| ≤ n_rel · max(n_a, n_b)``;
    * passes:  ``|p_a − p_b| ≤ p_abs``.

    Parameters
    ----------
    v_rel : float
        Relative speed tolerance; default 0.10 (speeds within 10%: timing noise between
        identical machines is of a few percent, a straggler is slower by far more).
    n_rel : float
        Relative point-count tolerance; default 0.01, which keeps workers that differ only
        by the ±1 point of an even partition together (for any n ≥ 100) while a migrated
        worker, whose count moved by a real amount, leaves its group.
    p_abs : float
        Absolute passes tolerance; default 0.1 pass, a tenth of Eq. 8's default ϵ = 1,
        so grouping never hides an imbalance Eq. 8 would see.
    """

    v_rel: float = 0.10
    n_rel: float = 0.01
    p_abs: float = 0.1

    def __post_init__(self) -> None:
        for name in ("v_rel", "n_rel", "p_abs"):
            value = getattr(self, name)
            if not value >= 0:  # inf allowed: that statistic is not compared
                raise ValueError(f"Tolerance.{name} must be >= 0, got {value}")

    def same(self, a: WorkerStat, b: WorkerStat) -> bool:
        """Whether ``a`` and ``b`` have the same statistics within this tolerance."""
        lo, hi = min(a.v, b.v), max(a.v, b.v)
        return (hi <= (1.0 + self.v_rel) * lo
                and abs(a.n - b.n) <= self.n_rel * max(a.n, b.n)
                and abs(a.p - b.p) <= self.p_abs)


EXACT = Tolerance(0.0, 0.0, 0.0)


def group(stats: Sequence[WorkerStat], tol: Tolerance | None = None) -> list[SuperWorker]:
    """Group homogeneous workers into super workers (FSP paper §4.2).

    Greedy complete linkage: workers are visited in order of ``(v, n, p, rank)`` and each
    joins the first group *all* of whose members it matches under ``tol`` (so any two
    workers of a group are within the tolerance of each other, not just of a seed), or
    opens a new group.  A super worker's N, V, P (and the fixed cost per pass A, not
    compared) are its members' means; ``sizes`` keeps each member's own count.
    Deterministic for a given input.

    Parameters
    ----------
    stats : sequence of WorkerStat
        One entry per worker, ranks distinct.
    tol : Tolerance, optional
        Default ``Tolerance()`` (10% speed, 1% points, 0.1 pass).

    Returns
    -------
    list of SuperWorker
        Ordered by smallest member rank; members ascending by rank.
    """
    tol = Tolerance() if tol is None else tol
    if len({s.rank for s in stats}) != len(stats):
        raise ValueError("ranks must be distinct")
    groups: list[list[WorkerStat]] = []
    for s in sorted(stats, key=lambda s: (s.v, s.n, s.p, s.rank)):
        for g in groups:
            if all(tol.same(s, m) for m in g):
                g.append(s)
                break
        else:
            groups.append([s])
    out = []
    for g in groups:
        g.sort(key=lambda s: s.rank)
        k = len(g)
        out.append(SuperWorker(
            ranks=tuple(s.rank for s in g),
            n=math.fsum(s.n for s in g) / k,
            v=math.fsum(s.v for s in g) / k,
            p=math.fsum(s.p for s in g) / k,
            sizes=tuple(s.n for s in g),
            a=math.fsum(s.a for s in g) / k,
        ))
    out.sort(key=lambda w: w.ranks[0])
    return out


def imbalanced(passes: Sequence[float], epsilon: float = DEFAULT_EPSILON) -> bool:
    """Eq. 8 violated: some ``|Pᵢ − mean(P)| > ϵ`` (FSP paper §4.2, Eq. 8).

    Parameters
    ----------
    passes : sequence of float
        Pᵢ for each of the K (super) workers.
    epsilon : float
        ϵ ∈ [0, 1], default 1 pass.  A deviation of exactly ϵ is balanced.

    Returns
    -------
    bool
        True when migration should start; False for fewer than two entries.
    """
    if not (0.0 <= epsilon <= 1.0):
        raise ValueError(f"Eq. 8 requires 0 <= epsilon <= 1, got {epsilon}")
    if len(passes) < 2:
        return False
    mean = math.fsum(passes) / len(passes)
    return any(abs(p - mean) > epsilon for p in passes)


def needs_migration(stats: Sequence[WorkerStat] | Sequence[SuperWorker],
                    epsilon: float = DEFAULT_EPSILON, tol: Tolerance | None = None) -> bool:
    """The monitor's decision at a barrier: does Eq. 8 call for migration? (FSP paper §4.2)

    Parameters
    ----------
    stats : sequence of WorkerStat or of SuperWorker
        Per-worker statistics (grouped first with ``tol``) or super workers already grouped.
    epsilon : float
        Eq. 8's ϵ ∈ [0, 1], default 1.
    tol : Tolerance, optional
        Grouping tolerance for per-worker input; default ``Tolerance()``.

    Returns
    -------
    bool
        ``imbalanced([P of each super worker], epsilon)``: the mean is over the K super
        workers, as Eq. 8 is printed.
    """
    supers = [s for s in stats if isinstance(s, SuperWorker)]
    workers = [s for s in stats if isinstance(s, WorkerStat)]
    if supers and workers:
        raise TypeError("pass either WorkerStat or SuperWorker entries, not both")
    if workers:
        supers = group(workers, tol)
    return imbalanced([s.p for s in supers], epsilon)
