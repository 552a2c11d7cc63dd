"""Interval adjustors of FSP: how long a flexible-barrier iteration lasts (FSP paper §3.3).

An adjustor sees one :class:`Observation` per barrier and answers with the :class:`Plan` of the
next iteration.  ``fixed`` holds η, ``binary`` is FSPB's recursive binary search, ``multistage``
is FSPV's multi-stage self-corrected linear fit (Eq. 7).
"""

from __future__ import annotations

from typing import Any

from flegel.interval.base import IntervalAdjustor, Observation, Plan

__all__ = ["IntervalAdjustor", "Observation", "Plan", "make_adjustor"]


def make_adjustor(kind: str, **options: Any) -> IntervalAdjustor:
    """Build the adjustor named by the job's ``sync.interval``."""
    if kind == "fixed":
        from flegel.interval.fixed import FixedInterval

        return FixedInterval(**options)
    if kind == "binary":
        from flegel.interval.binary import BinarySearch

        return BinarySearch(**options)
    if kind == "multistage":
        from flegel.interval.multistage import MultiStage

        return MultiStage(**options)
    raise ValueError(f"unknown interval adjustor {kind!r}")
