"""The MPI master/worker runtime: rank 0 is the master (coordinator and parameter server),
ranks 1..n are workers holding data shards (FSP paper Section 5.1).

The runtime never imports a sync model: it serves whatever master policy and worker policy
the run wiring (:mod:`flegel.run`) hands it, through the ports of :mod:`flegel.ports`.
"""

import time

from flegel.protocol import POLL_MAX_S, POLL_S


class Backoff:
    """Sleep between polls, growing from :data:`~flegel.protocol.POLL_S` to
    :data:`~flegel.protocol.POLL_MAX_S`, so a waiting rank never spins a core."""

    __slots__ = ("delay",)

    def __init__(self) -> None:
        self.delay = POLL_S

    def sleep(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 1.5, POLL_MAX_S)

    def reset(self) -> None:
        self.delay = POLL_S
