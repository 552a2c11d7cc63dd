"""What an interval adjustor sees and answers (:class:`Observation`, :class:`Plan`) and the
base adjustor, which holds the interval it was given (FSP paper §3.3)."""

from __future__ import annotations

from dataclasses import dataclass

from flegel.state import AttributeState


@dataclass(frozen=True)
class Observation:
    """What one iteration of a flexible barrier achieved.

    Attributes
    ----------
    eta_s : float
        The interval the iteration was run with.
    progress : float
        Decrease of the objective during the iteration (positive is progress): under FSPV
        the gauge's exact objective of θ before and after it on a fixed sample
        (:mod:`flegel.interval.gauge`), else -- FSPB, or where the gauge does not measure --
        the online objective's.
    valid_s : float
        Time workers computed: from the broadcast of θ to the first report.
    wall_s : float
        From this iteration's broadcast to the next one (barrier included).
    barrier_s : float
        The barrier cost φ: from the first report to the next broadcast.
    eta_max_s : float
        The longest useful interval: a full pass of the fastest worker.
    """

    eta_s: float
    progress: float
    valid_s: float
    wall_s: float
    barrier_s: float
    eta_max_s: float


@dataclass(frozen=True)
class Plan:
    """The next iteration: interval, and whether workers mark or roll back their data."""

    eta_s: float
    mark: bool = False
    rollback: bool = False
    drop_mark: bool = False
    phase: str = "run"


class IntervalAdjustor(AttributeState):
    """Base class: hold the interval given at start.

    An adjustor is checkpointed by its attributes (:class:`flegel.state.AttributeState`).

    Parameters
    ----------
    eta_min_s : float
        Smallest interval an adjustor may choose.

    Attributes
    ----------
    eta_s : float
        The current interval.
    history : list of float
        The intervals adopted or tried, in order.
    """

    name = "fixed"

    def __init__(self, eta_min_s: float = 1e-3) -> None:
        self.eta_min_s = eta_min_s
        self.eta_s = 0.0
        self.history: list[float] = []

    def clamp(self, eta: float, eta_max: float) -> float:
        """``eta`` within [``eta_min_s``, ``eta_max``]."""
        return float(min(max(eta, self.eta_min_s), max(eta_max, self.eta_min_s)))

    def start(self, eta0_s: float, eta_max_s: float) -> Plan:
        """The first plan after calibration; ``eta0_s`` is the initial interval."""
        self.eta_s = self.clamp(eta0_s, eta_max_s)
        self.history.append(self.eta_s)
        return Plan(self.eta_s)

    def observe(self, obs: Observation) -> Plan:
        """Take one iteration's outcome; return the next plan."""
        return Plan(self.eta_s)

    def summary(self) -> dict[str, object]:
        """What the adjustor adds to the run's ``summary.json`` (nothing by default)."""
        return {}
