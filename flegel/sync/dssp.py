"""Dynamic Stale Synchronous Parallel (DSSP paper: Zhao et al., ICDCS 2019, Section III).

SSP with a staleness threshold chosen at run time in ``[s_L, s_U]``.  The server applies every
push at once.  A worker at most ``s_L`` pushes ahead of the slowest goes on (Algorithm 1,
lines 7-9).  Beyond ``s_L``, the *fastest* worker asks the synchronization controller
(Algorithm 2) for ``r*`` extra iterations: it simulates the next pushes of that worker and of
the slowest one from their latest push intervals, and picks the iteration of the fast worker
that ends closest to a push of the slowest, so that its wait is shortest (Fig. 2).  The worker
then runs ``r*`` more iterations and waits for the slowest at the ``r*``-th (``r* = 0``: it
waits now).  Other workers beyond ``s_L`` wait (line 17).

Choices where the paper's pseudo-code is loose, so that the bound ``s_U`` of Theorem 2 holds:

* Algorithm 1 answers *OK* at the decision and then once per remaining ``r_p``, one iteration
  more than the ``r*`` of Fig. 2; we run exactly ``r*`` (the iteration started at the decision
  is the first).
* The controller is asked again when a worker that used up its extra iterations is still the
  fastest; ``r_max`` is then what is left below ``s_U`` (``s_U − gap + 1``) rather than
  ``s_U − s_L``, so the clock gap at the start of an iteration never exceeds ``s_U``.
* A held worker resumes as soon as its gap is back within its current threshold
  ``s_L + r*`` -- with ``r* = 0`` that is line 17 (back to ``s_L``), and otherwise it is the
  end of the wait Fig. 2 plans for (the slowest worker's next push).
* Iteration intervals exclude the time the server held a worker (Fig. 1: an interval is
  communication plus computation): a held worker's push-to-push time is the slowest worker's
  pace, not its own, and would make the controller grant nothing.  So ``I_p`` is the span of
  p's latest iteration (θ sent to push received), ``Sim_p[0]`` its push now, and the slowest
  worker's next push is simulated from the start of its current iteration plus its latest
  span (at least what its current iteration has lasted so far) -- without holds these are the
  paper's push timestamps.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from flegel.ports import ServerPort
from flegel.sync.asynchronous import PushPolicy
from flegel.validation import Key, integer


def synchronization_controller(latest_p: float, interval_p: float, latest_slow: float,
                               interval_slow: float, r_max: int) -> int:
    """Algorithm 2 of the DSSP paper: the number of extra iterations ``r*`` in ``[0, r_max]``.

    Parameters
    ----------
    latest_p, interval_p : float
        Worker p's latest push time ``A[p][0]`` and latest interval ``I_p``.
    latest_slow, interval_slow : float
        The same for the slowest worker (the policy passes the start of its current
        iteration, see the module docstring).
    r_max : int
        Largest number of extra iterations allowed.

    Returns
    -------
    int
        The ``r`` minimizing ``min_k |Sim_slowest[k] − Sim_p[r]|`` with
        ``Sim_p[i] = A[p][0] + i·I_p`` and ``Sim_slowest[k] = A[slowest][0] + (k + 1)·I_slowest``
        for ``i, k ∈ [0, r_max]`` (lines 6-8); the smallest such ``r`` on ties.
    """
    steps = np.arange(max(int(r_max), 0) + 1, dtype=np.float64)
    sim_p = latest_p + steps * interval_p
    sim_slow = latest_slow + (steps + 1.0) * interval_slow
    dist = np.abs(sim_slow[None, :] - sim_p[:, None]).min(axis=1)
    return int(np.argmin(dist))


class DSSP(PushPolicy):
    """Master policy of DSSP.

    Options
    -------
    s_lower, s_upper : int
        ``s_L`` and ``s_U`` (defaults 3 and 15).
    batch, overhead
        See :class:`~flegel.sync.asynchronous.PushPolicy`.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        **PushPolicy.OPTIONS,
        "s_lower": integer("s_L: the staleness threshold every worker may always reach", 3,
                           lo=0),
        "s_upper": integer("s_U: the largest threshold the controller may grant the fastest "
                           "worker (>= s_lower)", 15, lo=0),
    }

    @staticmethod
    def check_options(options: dict[str, Any]) -> tuple[str, str] | None:
        """Cross-key rule: ``(key, expected)`` when it is broken, else None."""
        if options["s_upper"] < options["s_lower"]:
            return "s_upper", f"an integer >= s_lower ({options['s_lower']})"
        return None

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.s_lower = int(options["s_lower"])
        self.s_upper = int(options["s_upper"])
        #: Threshold in force per worker: s_L, or s_L + r* while extra iterations are granted.
        self.bound = {r: self.s_lower for r in server.ranks}
        self.decisions: list[tuple[float, int, int, int]] = []  # (time, rank, gap, r*)

    def _span(self, rank: int, t: float) -> float:
        """Latest iteration span of ``rank``; for one still computing, at least its current
        iteration's duration so far."""
        span = self.span[rank]
        running = t - self.started[rank] if rank not in self.held else 0.0
        return running if span is None else max(span, running)

    def after_push(self, rank: int, header: dict[str, float], t: float) -> None:
        gap = self.gap(rank)
        if gap <= self.s_lower:
            self.bound[rank] = self.s_lower  # back within s_L: extra iterations end
            return
        if gap <= self.bound[rank]:
            return  # an extra iteration granted earlier (Algorithm 1, lines 3-5)
        if self.clock[rank] < max(self.clock.values()):
            return  # not the fastest: wait for the slowest (line 17)
        r_max = self.s_upper - gap + 1
        if r_max <= 0:
            self.bound[rank] = self.s_upper  # at s_U already: nothing to decide, it waits
            return
        slow = self.slowest()
        r = synchronization_controller(t, self._span(rank, t), self.started[slow],
                                       self._span(slow, t), r_max)
        self.bound[rank] = gap - 1 + r  # starts iterations at gaps gap .. gap + r - 1
        self.decisions.append((round(t, 6), rank, gap, r))

    def hold(self, rank: int) -> bool:
        return self.gap(rank) > self.bound[rank]

    def summary(self) -> dict[str, Any]:
        rs = [d[3] for d in self.decisions]
        counts = {int(k): int(v) for k, v in zip(*np.unique(rs, return_counts=True))}
        return {**super().summary(), "s_lower": self.s_lower, "s_upper": self.s_upper,
                "r_star": {"decisions": len(rs), "mean": float(np.mean(rs)) if rs else 0.0,
                           "max": max(rs, default=0), "counts": counts},
                "r_star_log": [list(d) for d in self.decisions[-1000:]]}
