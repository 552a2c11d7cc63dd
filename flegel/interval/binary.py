"""FSPB: recursive binary search of the interval (FSP paper Section 3.3, Fig. 2a).

Compare the objective change per unit time under the current η (one iteration) with that
under η/λ accumulated over the λ strictly subsequent iterations.  If the finer interval wins
(quality beats quantity), adopt it and recurse; once it does not, hold η for the rest of the
run ("we also fix η unless the environment changes").  The paper starts from the full-batch
runtime η⁰; so do we (the calibration iteration).

Choices where the paper is vague: "per unit time" is per wall time including the barrier,
since the trade-off being searched is exactly fresher θ against more barriers; the recursion
stops at ``eta_min_s``.
"""

from __future__ import annotations

from flegel.interval import IntervalAdjustor, Observation, Plan


class BinarySearch(IntervalAdjustor):
    """FSPB's adjustor.

    Parameters
    ----------
    factor : float
        λ, the adjusting factor (paper: typically 2).
    eta_min_s : float
        Smallest interval tried.
    """

    name = "binary"

    def __init__(self, factor: float = 2.0, eta_min_s: float = 1e-3) -> None:
        super().__init__(eta_min_s)
        if factor <= 1:
            raise ValueError(f"factor must be > 1, got {factor}")
        self.factor = factor
        self.state = "base"       # base: measuring η; trial: measuring η/λ; hold: done
        self.base_rate = 0.0
        self._trial_progress = 0.0
        self._trial_wall = 0.0
        self._trial_left = 0
        self._coarser = 0.0

    def _trial_iterations(self) -> int:
        return max(int(round(self.factor)), 1)

    def observe(self, obs: Observation) -> Plan:
        if self.state == "hold":
            return Plan(self.eta_s)
        rate = obs.progress / max(obs.wall_s, 1e-12)
        if self.state == "base":
            self.base_rate = rate
            return self._begin_trial(obs)
        # trial: accumulate λ iterations of η/λ
        self._trial_progress += obs.progress
        self._trial_wall += obs.wall_s
        self._trial_left -= 1
        if self._trial_left > 0:
            return Plan(self.eta_s, phase="trial")
        trial_rate = self._trial_progress / max(self._trial_wall, 1e-12)
        if trial_rate > self.base_rate:
            # The finer interval wins: adopt it and compare it with the next finer one.
            self.base_rate = trial_rate
            return self._begin_trial(obs)
        # Reversed: go back to the coarser interval and hold it.
        self.eta_s = self._coarser
        self.state = "hold"
        self.history.append(self.eta_s)
        return Plan(self.eta_s)

    def _begin_trial(self, obs: Observation) -> Plan:
        finer = self.clamp(self.eta_s / self.factor, obs.eta_max_s)
        if finer >= self.eta_s:  # cannot go finer
            self.state = "hold"
            return Plan(self.eta_s)
        self._coarser = self.eta_s
        self.eta_s = finer
        self.history.append(finer)
        self.state = "trial"
        self._trial_progress = self._trial_wall = 0.0
        self._trial_left = self._trial_iterations()
        return Plan(self.eta_s, phase="trial")
