"""The server's time limits that the job's keys refer to (``stop.max_time_s``,
``runtime.stall_timeout_s``): apart from :mod:`flegel.runtime.server`, so that validating a
job (:mod:`flegel.job.sections`) imports neither MPI nor the server -- the launcher of
``flegel run`` and an estimator's ``fit`` validate before any rank starts, and importing
``mpi4py.MPI`` there initializes MPI in that process (issue 23: small fits).
"""

from __future__ import annotations

#: Seconds a worker may take to answer after ``stop.max_time_s``, on top of one of its blocks
#: (the ``block_s`` of its last commit): a live worker commits after the block it is on when
#: told to PAUSE (every model), so only a stalled one is still silent then (issue 21).
MAX_TIME_GRACE_S = 5.0
#: ... and it is named in a warning once it is this late (a worker that answers after one
#: block is never named).
MAX_TIME_WARN_S = 1.0
#: The automatic stall timeout (``runtime.stall_timeout_s: auto``): this many times the
#: slowest iteration seen so far, ...
STALL_FACTOR = 10.0
#: ... and never less than this many seconds ...
STALL_FLOOR_S = 60.0
#: ... and this many until an iteration was measured (the first may be a long full pass),
#: the bound of the waits outside training too (loading, compiling, the final evaluation).
STALL_UNMEASURED_S = 300.0
#: The least time the workers get to load, compile (JIT) and evaluate, whatever
#: ``runtime.stall_timeout_s`` says: those scale with the shard, not with an iteration, and a
#: cold numba cache alone takes seconds.  The master's own silence there has the same bound
#: (:mod:`flegel.runtime.watchdog`).
PHASE_MIN_S = 60.0
#: The value of ``runtime.stall_timeout_s`` that asks for :func:`auto_stall_timeout`.
AUTO = "auto"
