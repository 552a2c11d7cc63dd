"""A fixed flexible-barrier interval η (the sweep baseline of FSP paper Fig. 15)."""

from __future__ import annotations

from flegel.interval.base import IntervalAdjustor, Plan


class FixedInterval(IntervalAdjustor):
    """Hold η for the whole run.  A worker that completes a full pass still triggers an early
    barrier (Section 3.3), so η longer than a pass behaves as full batch."""

    name = "fixed"

    def start(self, eta0_s: float, eta_max_s: float) -> Plan:
        # The user's η as given: longer than a pass simply means full-batch iterations.
        self.eta_s = max(eta0_s, self.eta_min_s)
        self.history.append(self.eta_s)
        return Plan(self.eta_s)
