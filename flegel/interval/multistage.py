"""FSPV: multi-stage self-corrected linear fitting of the interval (FSP paper §3.3, Eq. 7).

Within a stage the training progress per unit of valid time is linear in η,
``g(η) = a·η + b``.  Two probes fit it: from the same start location X_j (workers mark their
data, the master keeps θ), run two iterations with η_p, measure ``g(η_p) = Δf / Δt`` with
``Δt`` the valid time; roll back to X_j and θ, run two iterations with 2η_p for the second
point.  The stage then runs with

    η* = argmax_η gain(η) = (T − φ·T/(η + φ)) · g(η)        (Eq. 7)

where φ is the measured barrier cost (T, the stage length, only scales the gain).  The
master keeps monitoring: when the progress rate falls behind the stage's prediction
``g(η*)·η*/(η* + φ)`` by more than ``stage_tolerance``, a new stage starts and probes again
from where training is (self-correction of the fitting error).

Choices where the paper is vague, all documented here:

* probes last 200 ms (the paper's default η_i, footnote 1), shortened to an eighth of the
  fastest worker's full pass when that is shorter: the linear fit is local, so the probes
  must sit where the optimum can be (on data whose passes take tens of milliseconds, probes
  at half a pass fitted a line that extrapolated to 4x too long an η);
* η* is found on a log-spaced grid of 256 intervals between ``eta_min_s`` and the fastest
  worker's full-pass time (robust whatever the signs of a and b; the analytic maximizer for
  a < 0 is ``−φ + sqrt(φ² − bφ/a)``); if the fit predicts no progress anywhere, η_p is kept;
* a stage is judged after at least ``min_stage_iterations`` iterations and after it has run
  ``stage_factor`` times as long as its probes took (so re-probing, which throws one probe's
  work away, costs at most about 1/``stage_factor`` of the run); it is "behind" when its
  measured rate is below (1 − ``stage_tolerance``) times the predicted one.
"""

from __future__ import annotations

import numpy as np

from flegel.interval import IntervalAdjustor, Observation, Plan


def eq7_gain(eta: np.ndarray, a: float, b: float, phi: float) -> np.ndarray:
    """Eq. 7 per unit of stage time: ``(1 − φ/(η + φ)) · (aη + b)``."""
    return (1.0 - phi / (eta + phi)) * (a * eta + b)


def best_interval(a: float, b: float, phi: float, eta_min: float, eta_max: float,
                  points: int = 256) -> float | None:
    """The η in [eta_min, eta_max] maximizing Eq. 7, or None if no η makes progress."""
    eta_max = max(eta_max, eta_min)
    grid = np.geomspace(eta_min, eta_max, points) if eta_max > eta_min else np.array([eta_min])
    gain = eq7_gain(grid, a, b, phi)
    if a < 0 and b > 0:
        # Add the analytic stationary point so the answer is exact, not grid-limited.
        root = -phi + np.sqrt(phi * phi - b * phi / a)
        if eta_min <= root <= eta_max:
            grid = np.append(grid, root)
            gain = np.append(gain, eq7_gain(np.array([root]), a, b, phi))
    i = int(np.argmax(gain))
    return float(grid[i]) if gain[i] > 0 else None


class MultiStage(IntervalAdjustor):
    """FSPV's adjustor.

    Parameters
    ----------
    probe_s : float
        η_p of the first probe (paper default 200 ms).
    stage_tolerance : float
        Relative shortfall against the prediction that opens a new stage.
    min_stage_iterations : int
        Iterations a stage runs before it can be judged.
    stage_factor : float
        A stage runs at least this many times as long as its probes before it is judged.
    eta_min_s : float
        Smallest interval considered.
    """

    name = "multistage"

    def __init__(self, probe_s: float = 0.2, stage_tolerance: float = 0.5,
                 min_stage_iterations: int = 5, stage_factor: float = 5.0,
                 eta_min_s: float = 1e-3) -> None:
        super().__init__(eta_min_s)
        self.probe_s = probe_s
        self.stage_tolerance = stage_tolerance
        self.min_stage_iterations = min_stage_iterations
        self.stage_factor = stage_factor
        self._probe_wall = 0.0
        self.phase = "probe1"
        self.step = 0
        self.eta_p = probe_s
        self._progress = self._valid = 0.0
        self.g: list[float] = []
        self.phis: list[float] = []
        self.stages: list[dict] = []
        self.predicted_rate = 0.0
        self._stage_progress = self._stage_wall = 0.0
        self._stage_iters = 0

    # ------------------------------------------------------------------ probes
    def _probe_eta(self, eta_max: float) -> float:
        return self.clamp(min(self.probe_s, eta_max / 8.0), eta_max)

    def start(self, eta0_s: float, eta_max_s: float) -> Plan:
        return self._new_stage(eta_max_s)

    def _new_stage(self, eta_max: float) -> Plan:
        self.eta_p = self._probe_eta(eta_max)
        self.phase, self.step, self.g = "probe1", 0, []
        self._progress = self._valid = self._probe_wall = 0.0
        self.eta_s = self.eta_p
        return Plan(self.eta_p, mark=True, phase="probe1")

    def observe(self, obs: Observation) -> Plan:
        self.phis.append(obs.barrier_s)
        if self.phase in ("probe1", "probe2"):
            self._progress += obs.progress
            self._valid += obs.valid_s
            self._probe_wall += obs.wall_s
            self.step += 1
            if self.step < 2:
                return Plan(self.eta_s, phase=self.phase)
            self.g.append(self._progress / max(self._valid, 1e-12))
            self._progress = self._valid = 0.0
            self.step = 0
            if self.phase == "probe1":
                # Roll back to X_j and θ, then probe 2η_p over the same data.
                self.phase = "probe2"
                self.eta_s = self.clamp(2 * self.eta_p, max(obs.eta_max_s, 2 * self.eta_p))
                return Plan(self.eta_s, rollback=True, drop_mark=True, phase="probe2")
            return self._fit(obs)
        # running a stage: monitor progress against the prediction
        self._stage_progress += obs.progress
        self._stage_wall += obs.wall_s
        self._stage_iters += 1
        long_enough = (self._stage_iters >= self.min_stage_iterations
                       and self._stage_wall >= self.stage_factor * self._probe_wall)
        if long_enough:
            rate = self._stage_progress / max(self._stage_wall, 1e-12)
            if rate < (1.0 - self.stage_tolerance) * self.predicted_rate:
                self.stages[-1]["measured_rate"] = rate
                return self._new_stage(obs.eta_max_s)
        return Plan(self.eta_s)

    @property
    def phi(self) -> float:
        """The barrier cost: median of the last few barriers."""
        recent = self.phis[-5:]
        return float(np.median(recent)) if recent else 0.0

    def _fit(self, obs: Observation) -> Plan:
        eta1, eta2 = self.eta_p, 2 * self.eta_p
        g1, g2 = self.g
        a = (g2 - g1) / (eta2 - eta1)
        b = g1 - a * eta1
        phi = self.phi
        best = best_interval(a, b, phi, self.eta_min_s, max(obs.eta_max_s, self.eta_min_s))
        self.eta_s = self.eta_p if best is None else best
        self.predicted_rate = max(a * self.eta_s + b, 0.0) * self.eta_s / (self.eta_s + phi)
        self.stages.append({"eta_p_s": eta1, "g": [g1, g2], "a": a, "b": b, "phi_s": phi,
                            "eta_s": self.eta_s, "predicted_rate": self.predicted_rate})
        self.history.append(self.eta_s)
        self.phase = "run"
        self._stage_progress = self._stage_wall = 0.0
        self._stage_iters = 0
        return Plan(self.eta_s)
