"""Asynchronous Parallel (ASP): every push is applied at once and the worker goes on at once.

No worker ever waits for another, so there is no waiting time, but a slow worker computes
from an old θ and its updates are stale (SpecSync paper Section II-C; ElasticBSP paper
Section 2).  The baseline of the SSP family: see :mod:`flegel.sync.asynchronous` for what is
recorded.
"""

from __future__ import annotations

from flegel.sync.asynchronous import PushPolicy


class ASP(PushPolicy):
    """Master policy of ASP: :class:`~flegel.sync.asynchronous.PushPolicy` that never holds.

    Options
    -------
    batch, overhead
        See :class:`~flegel.sync.asynchronous.PushPolicy`.
    """
