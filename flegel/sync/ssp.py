"""Stale Synchronous Parallel (SSP) with a fixed staleness threshold s.

Workers push asynchronously, but a worker more than ``s`` pushes (clocks) ahead of the slowest
worker waits until the slowest catches up (Ho et al., NIPS 2013; as summarized in the DSSP
paper Section II and the SpecSync paper Section II-C).  Its θ then holds every update from
clocks up to its own minus ``s``, so the clock gap recorded when an iteration starts never
exceeds ``s``.  ``s = 0`` keeps all workers on the same clock (BSP's schedule with immediate
updates).
"""

from __future__ import annotations

from typing import Any, ClassVar

from flegel.ports import ServerPort
from flegel.sync.asynchronous import PushPolicy
from flegel.validation import Key, integer


class SSP(PushPolicy):
    """Master policy of SSP.

    Options
    -------
    s : int
        Staleness threshold: the largest clock gap to the slowest worker at which a worker may
        start an iteration (default 3).
    batch, overhead
        See :class:`~flegel.sync.asynchronous.PushPolicy`.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        **PushPolicy.OPTIONS,
        "s": integer("staleness threshold: largest clock gap to the slowest worker", 3, lo=0),
    }

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.s = int(options["s"])

    def hold(self, rank: int) -> bool:
        return self.gap(rank) > self.s

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "s": self.s}
