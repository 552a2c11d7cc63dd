"""FSPB: recursive binary search of the interval (FSP paper Section 3.3, Fig. 2a).

Compare the objective change per unit time under the current η (one iteration) with that
under η/λ accumulated over the λ strictly subsequent iterations.  While the finer interval
wins (quality beats quantity), adopt it and compare it with the next finer one, η/λ²; once
it does not, go back to the last winner and hold it for the rest of the run ("we also fix η
unless the environment changes").  The paper starts from the full-batch runtime η⁰; so do we
(the calibration iteration).

The paper names the flaw of this comparison itself: Δf and Δf' come from different phases of
training, and the rate of progress degrades as training proceeds, so the later measurement
(the finer trial) looks worse than it is and the search stops early -- in practice after the
first halving.  We therefore *bracket* each trial: one iteration of η before it and one after
it, and compare the trial with the rate of η interpolated to the trial's midpoint in time
(log-linearly when both rates are positive, which is exact for exponentially decaying
progress; linearly otherwise).  A round is ``base`` (η), ``trial`` (λ iterations of η/λ),
``base`` (η) again; a winning trial starts the next round at η/λ.  This costs one extra
iteration of η per round, and there are log_λ(η⁰/η*) + 1 rounds.

Choices where the paper is vague: "per unit time" is per wall time including the barrier,
since the trade-off being searched is exactly fresher θ against more barriers; the recursion
stops at ``eta_min_s``; the comparison is strict (a tie holds η).
"""

from __future__ import annotations

import math

from flegel.interval.base import IntervalAdjustor, Observation, Plan


def _rate_at(t: float, t1: float, r1: float, t2: float, r2: float) -> float:
    """The rate at time ``t`` between ``(t1, r1)`` and ``(t2, r2)``: log-linear when both
    are positive (exponential decay is then exact), linear otherwise."""
    if t2 <= t1:
        return 0.5 * (r1 + r2)
    w = (t - t1) / (t2 - t1)
    if r1 > 0 and r2 > 0:
        return math.exp((1 - w) * math.log(r1) + w * math.log(r2))
    return (1 - w) * r1 + w * r2


class BinarySearch(IntervalAdjustor):
    """FSPB's adjustor (Section 3.3), with each trial bracketed by two measurements of η.

    Parameters
    ----------
    factor : float
        λ, the adjusting factor (paper: typically 2).  A trial runs ``round(λ)`` iterations.
    eta_min_s : float
        Smallest interval tried.

    Attributes
    ----------
    state : {"base1", "trial", "base2", "hold"}
        What the next observation measures.
    rounds : list of dict
        One per finished comparison: ``eta_s``, ``trial_eta_s``, the rates and the verdict.
    """

    name = "binary"

    def __init__(self, factor: float = 2.0, eta_min_s: float = 1e-3) -> None:
        super().__init__(eta_min_s)
        if factor <= 1:
            raise ValueError(f"factor must be > 1, got {factor}")
        self.factor = factor
        self.state = "base1"
        self.rounds: list[dict[str, object]] = []
        self._t = 0.0             # wall time observed so far (the adjustor's own clock)
        self._coarse = 0.0        # η of the current round
        self._fine = 0.0          # η/λ of its trial
        self._base: list[tuple[float, float]] = []   # (midpoint, rate) of the base iterations
        self._trial_progress = self._trial_wall = 0.0
        self._trial_t0 = 0.0
        self._trial_left = 0

    def _trial_iterations(self) -> int:
        return max(int(round(self.factor)), 1)

    def start(self, eta0_s: float, eta_max_s: float) -> Plan:
        plan = super().start(eta0_s, eta_max_s)
        self._coarse = self.eta_s
        self.state = "base1"
        return Plan(plan.eta_s, phase="base")

    def observe(self, obs: Observation) -> Plan:
        t0, self._t = self._t, self._t + obs.wall_s
        if self.state == "hold":
            return Plan(self.eta_s)
        rate = obs.progress / max(obs.wall_s, 1e-12)
        if self.state == "base1":
            self._base = [(t0 + 0.5 * obs.wall_s, rate)]
            return self._begin_trial(obs)
        if self.state == "trial":
            self._trial_progress += obs.progress
            self._trial_wall += obs.wall_s
            self._trial_left -= 1
            if self._trial_left > 0:
                return Plan(self.eta_s, phase="trial")
            # The bracket's second half: η again, right after the trial.
            self.state = "base2"
            self.eta_s = self._coarse
            return Plan(self.eta_s, phase="base")
        # base2: decide
        self._base.append((t0 + 0.5 * obs.wall_s, rate))
        (t1, r1), (t2, r2) = self._base
        mid = self._trial_t0 + 0.5 * self._trial_wall
        reference = _rate_at(mid, t1, r1, t2, r2)
        trial_rate = self._trial_progress / max(self._trial_wall, 1e-12)
        wins = trial_rate > reference
        self.rounds.append({"eta_s": self._coarse, "trial_eta_s": self._fine,
                            "base_rates": [r1, r2], "reference_rate": reference,
                            "trial_rate": trial_rate, "finer_wins": wins})
        if wins:
            # Quality beats quantity: adopt η/λ and compare it with the next finer one.
            self._coarse = self.eta_s = self._fine
            self.state = "base1"
            return Plan(self.eta_s, phase="base")
        # Reversed: hold the coarser interval.
        self.state = "hold"
        self.eta_s = self._coarse
        self.history.append(self.eta_s)
        return Plan(self.eta_s)

    def _begin_trial(self, obs: Observation) -> Plan:
        finer = self.clamp(self._coarse / self.factor, obs.eta_max_s)
        if finer >= self._coarse:  # cannot go finer
            self.state = "hold"
            self.eta_s = self._coarse
            return Plan(self.eta_s)
        self._fine = self.eta_s = finer
        self.history.append(finer)
        self.state = "trial"
        self._trial_progress = self._trial_wall = 0.0
        self._trial_t0 = self._t
        self._trial_left = self._trial_iterations()
        return Plan(self.eta_s, phase="trial")

    def summary(self) -> dict[str, object]:
        """``search_rounds``: the comparisons made (each: η, η/λ, rates, verdict)."""
        return {"search_rounds": self.rounds}
