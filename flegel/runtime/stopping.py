"""Built-in convergence criteria (FSP paper Section 5.3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StopCriteria:
    """When training ends: iteration limit, target objective, relative change, time limit.

    The relative-change check is decoupled from iterations (Section 5.3: "the check interval
    is set to the runtime of performing a full pass computation over data on the slowest
    worker").  It compares the online objective between *checks*, and a check happens once
    the slowest worker has completed one more full pass over **the data it holds now** since
    the previous check.  Each worker's passes since the last check are counted as the points
    it processed since then over the points it holds now (``n_active``: held, not halted, not
    migrated away); the slowest worker is the one with the fewest such passes.  When data
    migration shrinks a straggler's shard, its passes, and so the checks, come faster; a
    worker that received data counts passes over its larger shard.

    The check stays honest: every worker has processed at least as many points as it holds
    since the previous check, so the online objective (the sum of each point's last loss)
    compared at the two checks is made of losses recomputed in between, and a short
    flexible-barrier interval cannot stop training early.  (Points of an FSPV probe that is
    rolled back count although their work was undone: at most two short probe iterations
    per stage.)

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

    Attributes
    ----------
    checks : int
        Relative-change checks made so far.
    """

    max_iterations: int | None = 100
    target_objective: float | None = None
    tolerance: float | None = 1e-4
    max_time_s: float | None = None
    _last_check_passes: float = field(default=0.0, repr=False)
    _last_check_points: dict[int, float] = field(default_factory=dict, repr=False)
    _last_check_objective: float | None = field(default=None, repr=False)
    checks: int = field(default=0, repr=False)

    def reached_target(self, objective: float, min_passes: float) -> bool:
        """True once the online objective is at the target.

        Only after every worker has visited all its points once: before that, the online
        objective (the sum of each point's last loss) misses the points not yet visited.
        """
        return (self.target_objective is not None and min_passes >= 1.0 - 1e-9
                and objective <= self.target_objective)

    def passes_since_check(self, work: Mapping[int, tuple[float, float]]) -> float:
        """Passes the slowest worker completed over the data it holds now since the last
        check (since the start before the first).

        Parameters
        ----------
        work : mapping of int to (float, float)
            Per worker: points processed so far (cumulative), points it holds now.  A worker
            that holds no point counts as done.
        """
        fewest = float("inf")
        for rank, (points, held) in work.items():
            if held <= 0:
                continue
            done = points - self._last_check_points.get(rank, 0.0)
            fewest = min(fewest, done / held)
        return fewest

    def check(self, iteration: int, objective: float, min_passes: float, elapsed_s: float,
              work: Mapping[int, tuple[float, float]] | None = None,
              use_target: bool = True, updated: bool = True) -> str | None:
        """Return why training should stop now (``"converged"``, ``"target"``,
        ``"max_iterations"``, ``"max_time"``) or None to go on.

        Parameters
        ----------
        iteration : int
        objective : float
            The online objective.
        min_passes : float
            The fewest traversal passes any worker completed (for the target check, and for
            the convergence check when ``work`` is not given).
        elapsed_s : float
        work : mapping of int to (float, float), optional
            Per worker: points processed so far, points it holds now.  Given, the convergence
            check fires once the slowest worker did one more pass over its current data
            (:meth:`passes_since_check`); without it (one process, one shard that does not
            change), once ``min_passes`` grew by one.
        use_target : bool
            False when the target is checked on the exact objective elsewhere
            (:mod:`flegel.runtime.exact`).
        updated : bool
            False when this barrier kept θ (FSP's coverage): the online objective then lacks
            the untrained points (0.0 before any), so it neither takes nor ends a
            convergence check -- a baseline taken there would say nothing of convergence.
        """
        if use_target and self.reached_target(objective, min_passes):
            return "target"
        if updated and self.tolerance is not None and self._check_due(min_passes, work):
            prev = self._last_check_objective
            self._last_check_passes = float(min_passes)
            if work is not None:
                self._last_check_points = {r: float(p) for r, (p, _) in work.items()}
            self._last_check_objective = objective
            self.checks += 1
            if prev is not None and abs(prev - objective) <= self.tolerance * abs(prev):
                return "converged"
        if self.max_iterations is not None and iteration >= self.max_iterations:
            return "max_iterations"
        if self.max_time_s is not None and elapsed_s >= self.max_time_s:
            return "max_time"
        return None

    def checkpoint_state(self) -> dict[str, Any]:
        """The progress the criteria track (:class:`flegel.state.Stateful`), not their
        limits: a resumed job may raise ``max_iterations`` or ``max_time_s``."""
        return {"last_check_passes": self._last_check_passes, "checks": self.checks,
                "last_check_points": dict(self._last_check_points),
                "last_check_objective": self._last_check_objective}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state`."""
        self._last_check_passes = state["last_check_passes"]
        self._last_check_points = dict(state["last_check_points"])
        self._last_check_objective = state["last_check_objective"]
        self.checks = state["checks"]

    def _check_due(self, min_passes: float,
                   work: Mapping[int, tuple[float, float]] | None) -> bool:
        if work is not None:
            return self.passes_since_check(work) >= 1.0 - 1e-9
        return min_passes >= self._last_check_passes + 1.0 - 1e-9
