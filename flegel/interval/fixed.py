"""A fixed flexible-barrier interval η (the sweep baseline of FSP paper Fig. 15)."""

from __future__ import annotations

from flegel.interval import IntervalAdjustor


class FixedInterval(IntervalAdjustor):
    """Hold η for the whole run.  A worker that completes a full pass still triggers an early
    barrier (Section 3.3), so η longer than a pass behaves as full batch."""

    name = "fixed"
