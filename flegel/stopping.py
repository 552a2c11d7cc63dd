"""Built-in convergence criteria (FSP paper Section 5.3)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StopCriteria:
    """When training ends: iteration limit, target objective, relative change, time limit.

    The relative-change check is decoupled from iterations (Section 5.3): it compares the
    online objective between *checks*, and a check happens only once every worker has completed
    one more full traversal pass since the previous one -- the time of a full pass on the
    slowest worker.  A short flexible-barrier interval therefore cannot stop training early.

    Parameters
    ----------
    max_iterations : int or None
        Stop after this many global iterations (barriers, or pushes per worker for
        asynchronous models).
    target_objective : float or None
        Stop once the online objective is at or below this value.
    tolerance : float or None
        Stop when ``|f_prev - f| <= tolerance * |f_prev|`` between two checks.
    max_time_s : float or None
        Stop after this much training time.
    """

    max_iterations: int | None = 100
    target_objective: float | None = None
    tolerance: float | None = 1e-4
    max_time_s: float | None = None
    _last_check_passes: float = field(default=0.0, repr=False)
    _last_check_objective: float | None = field(default=None, repr=False)
    checks: int = field(default=0, repr=False)

    def reached_target(self, objective: float, min_passes: float) -> bool:
        """True once the online objective is at the target.

        Only after every worker has visited all its points once: before that, the online
        objective (the sum of each point's last loss) misses the points not yet visited.
        """
        return (self.target_objective is not None and min_passes >= 1.0 - 1e-9
                and objective <= self.target_objective)

    def check(self, iteration: int, objective: float, min_passes: float,
              elapsed_s: float) -> str | None:
        """Return why training should stop now (``"converged"``, ``"target"``,
        ``"max_iterations"``, ``"max_time"``) or None to go on."""
        if self.reached_target(objective, min_passes):
            return "target"
        if self.tolerance is not None and min_passes >= self._last_check_passes + 1.0 - 1e-9:
            prev = self._last_check_objective
            self._last_check_passes = float(min_passes)
            self._last_check_objective = objective
            self.checks += 1
            if prev is not None and abs(prev - objective) <= self.tolerance * abs(prev):
                return "converged"
        if self.max_iterations is not None and iteration >= self.max_iterations:
            return "max_iterations"
        if self.max_time_s is not None and elapsed_s >= self.max_time_s:
            return "max_time"
        return None
