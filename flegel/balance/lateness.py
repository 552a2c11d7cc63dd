"""A straggler's lateness: the barrier time its kept points cost everyone (issue 19).

Eq. 8 (FSP paper §4.2) balances *passes*.  Under FSP a pass ends a worker's iteration, so
once a straggler holds few enough points to pass at every barrier, its passes equal the
others' -- one a barrier each -- and Eq. 8 reads the workers balanced whatever the barrier
waits for.  But the barrier waits for the last commit: where the straggler's pass takes
longer than the others', every iteration takes its pass.  An injected straggler (τ = 32 ms
of suspension per 1,000 points) makes this worse than its mean speed says: its delays come
as whole suspensions, so a pass of n points is either a fraction of a millisecond or 32 ms
longer, and the barrier waits for the suspension in about n / 1,000 of its iterations --
a suspension does not overlap the others' pass as a smooth slowdown would.  Measured
(``flegel paper --quick --only migration``'s NMF, 4 workers on 2 shared cores): the
straggler kept 182-200 points after the first round, passed at every barrier, and its
commit came after every other worker's by 3.1 ms on average (38 % of the barriers late),
against the others' 7.1 ms of compute per iteration; FSPV with async migration reached the
target 0.94-1.05x as fast as FSPV without migration, which took 85 iterations to its 46.

So the balancer measures it.  At every barrier, a straggler's *lateness* is how much longer
its commit's compute took than the longest of the others' (0 if not), and the *typical*
iteration is the others' (lower) median compute.  Over the barriers at its current point
count (at least :data:`LATE_BARRIERS`), where the mean lateness exceeds Eq. 8's relative
threshold (:data:`~flegel.balance.migration.RELATIVE_EPSILON`) of the typical iteration, the
straggler keeps ``n · threshold / lateness`` points (lateness is about proportional to the
points: suspensions come per point trained, and a smooth slowdown's excess grows with them
too) and the rest go to its peers (:meth:`Balancer.shed_late
<flegel.balance.migration.Balancer.shed_late>`).  It is then never given more than that
count back while it stays a straggler (:meth:`Lateness.room`): the points it would be given
are the ones that made it late, and the pass-time rule that gives them (``Balancer.fits``)
reads pass times off the wall clock, where the straggler's lateness inflates every
worker's pass alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Barriers at a straggler's current point count before its lateness is judged: an injected
#: straggler holding 200 points is late at every fifth barrier or so, and one suspension in
#: fewer barriers overstates it (the rule only sheds, so an overstatement costs a straggler
#: points it could have trained, not a barrier).
LATE_BARRIERS = 8
#: Barriers of lateness kept per straggler (bounds the memory and the cost per barrier).
LATE_HISTORY = 512


@dataclass
class Lateness:
    """Per straggler, its lateness at its current point count, and the count it was cut to.

    Attributes
    ----------
    log : dict
        Rank -> (the point count the log is for, [(lateness s, typical s), ...]).
    cap : dict
        Rank -> the most points it may be given back while it stays a straggler.
    """

    log: dict[int, tuple[int, list[tuple[float, float]]]] = field(default_factory=dict)
    cap: dict[int, int] = field(default_factory=dict)

    def note(self, commits: dict[int, dict[str, float]], stragglers: Iterable[int],
             counts: dict[int, int], tolerance: float) -> None:
        """Record one barrier's lateness of each straggler.

        Parameters
        ----------
        commits : dict
            The barrier's commit headers by rank (``compute_s``).
        stragglers : iterable of int
            The ranks that are stragglers now; any other rank's log and cap are dropped
            (a recovered straggler may be given work back by the ordinary rules).
        counts : dict
            Each rank's active point count now.
        tolerance : float
            A change of the count by more than this fraction starts a new log.
        """
        slow = set(stragglers)
        for r in [r for r in self.log if r not in slow]:
            del self.log[r]
        for r in [r for r in self.cap if r not in slow]:
            del self.cap[r]
        for r in slow:
            others = sorted(h["compute_s"] for q, h in commits.items() if q != r)
            if r not in commits or not others:
                continue
            late = max(0.0, commits[r]["compute_s"] - others[-1])
            typical = others[(len(others) - 1) // 2]
            n = counts[r]
            at, log = self.log.get(r, (n, []))
            if abs(n - at) > tolerance * max(at, 1):
                at, log = n, []
            log.append((late, typical))
            del log[:-LATE_HISTORY]
            self.log[r] = (at, log)

    def keep(self, rank: int, n: int, threshold: float) -> int | None:
        """The points ``rank`` should keep, or None where its lateness is within
        ``threshold`` of the typical iteration (or not yet measured over
        :data:`LATE_BARRIERS` barriers at its count).

        Parameters
        ----------
        rank : int
            A straggler.
        n : int
            Its active points now.
        threshold : float
            The lateness allowed, as a fraction of the typical iteration.
        """
        at, log = self.log.get(rank, (n, []))
        if len(log) < LATE_BARRIERS:
            return None
        late = math.fsum(x for x, _ in log) / len(log)
        typical = math.fsum(t for _, t in log) / len(log)
        if late <= threshold * typical:
            return None
        return math.floor(n * threshold * typical / late)

    def cut(self, rank: int, kept: int) -> None:
        """Note that ``rank`` was cut to ``kept`` points: its log starts again at the new
        count, and it is given no more than ``kept`` back while it stays a straggler."""
        self.cap[rank] = min(kept, self.cap.get(rank, kept))
        self.log.pop(rank, None)

    def room(self, rank: int) -> int:
        """The most points ``rank`` may hold after being given some (2**62: no cap, as
        ``Balancer.fits`` says where nothing bounds it)."""
        return self.cap.get(rank, 2**62)
