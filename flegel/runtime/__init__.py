"""The MPI master/worker runtime: rank 0 is the master (coordinator and parameter server),
ranks 1..n are workers holding data shards (DESIGN §4)."""

import time

#: Shortest and longest sleep between polls while waiting.  A wait starts polling every
#: 0.1 ms (a reply right after a commit is seen at once) and backs off to 1 ms (a long wait at a
#: straggler's barrier costs ~2% of a core instead of the full core a blocking MPICH call burns).
POLL_S = 1e-4
POLL_MAX_S = 1e-3


class Backoff:
    """Sleep between polls, growing from :data:`POLL_S` to :data:`POLL_MAX_S`."""

    __slots__ = ("delay",)

    def __init__(self) -> None:
        self.delay = POLL_S

    def sleep(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 1.5, POLL_MAX_S)

    def reset(self) -> None:
        self.delay = POLL_S


#: Kinds of control signals the master sends to a computing worker.
SIGNAL_PAUSE = 1.0  # commit now (flexible barrier, centralized coordination)
SIGNAL_ABORT = 2.0  # drop the current work and restart from a fresher θ (SpecSync)
