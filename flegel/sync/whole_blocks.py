"""Blocks of a whole pass: when an FSP worker without a timer takes its pass in larger blocks
(issue 19, Fig. 8; :class:`flegel.sync.fsp.FSPWorker`, "Blocks on course").

An algorithm that declares ``full_batch_update`` (logistic regression's L-BFGS) runs FSP's
calibration (as every algorithm does, below) and, while no worker straggles, every
iteration as a *whole pass*: no timer,
every worker trains its whole shard at θ, and only the master's bound
(``FSP._whole_bound``, :data:`~flegel.sync.fsp.WHOLE_PASS_WAIT` times a typical pass) pauses
a worker before its pass ends.  The block sizer sizes blocks to ``runtime.block_ms`` of
*wall* time, so where ranks share cores a whole pass ran in several blocks, and the
calibration in the sizer's ramp from 64 points (8 to 67 blocks, against BSPV's two of
16,384 points: BSPV's block is fixed, :mod:`flegel.sync.bsp`); each block pays the loop's
and the kernel's fixed work and the worker's turn for a core again.  Measured (``flegel
paper``'s logistic regression, 4 workers on 2 shared cores at a load of 8-9, ten runs each
interleaved, 0.15 s): FSPV's first θ 23.3 ms and the target 118.8 ms after the start
(medians), against BSPV's 16.7 and 90.1 ms; with these blocks 21.4 and 107.2 ms.

**Any algorithm's calibration** (issue 19, Fig. 8, NMF).  The calibration is a whole pass
without a timer for every algorithm (:class:`flegel.sync.fsp.FSP`, Notes), not only for a
full-batch one, and so is a sampled calibration of half a shard or more
(:func:`flegel.interval.multistage.sample_fraction`).  ``flegel paper``'s NMF (shards of
2,000 x 400, seeded sizer) took it in 4 blocks ([191, 411, 997, 401] points) against
BSPV's one of 2,000; each block costs the kernel's fixed work (a pass in one block 1.69 ms,
in two 1.75 ms, fastest of 200 in-process) and 0.1-0.3 ms of the worker loop where ranks
share cores (medians per iteration, 4 workers on 2 cores at a load of 10-16).  So the rule
is the iteration's, not the algorithm's: no timer, no batch, no coverage, no migration.
With it NMF's calibration took 2-5 blocks (median 3; 8 workers' in two runs at a load of
11-15: [301, 1699], [301, 1552, 147]; 5 where the first block lost its core, so the sizer,
which changes at most 4x a block, shrank and grew back).

Such a worker therefore takes blocks of ``BLOCK_GROWTH`` times the sizer's, as a worker on
course for its timer does -- unless its blocks carry straggler delays (a suspension or a
blocking delay after each block, the sizer's ``slowed_point_s`` over ``per_point_s``,
known from its first block on), or it has straggler patterns at all (``straggling``: the
sizer's delay per point is a run-long mean, so a pattern that starts late or comes and goes --
``persistent`` after some clean points, ``transient`` -- would read "not slowed" long after
its blocks carry delays, which are blocking sleeps the master's bound cannot cut short): a
slowed worker keeps the sizer's blocks, so the master's bound pauses it as promptly as before
(FSPWorker's notes: a worker 20x slower, with 4x blocks, answered that pause 4 times later).
The larger blocks are not held to the sizer's ``max_block_s`` (as those of a worker on course
for its timer): a pause of a worker that is not slowed comes after at most ``BLOCK_GROWTH``
blocks of the sizer's time, 0.2 s on the CPU profile at worst.  Semi-centralized coordination
only: centralized, the master sends no timer at all, so an η iteration it ends by its own
signal would look like a whole pass (FSPWorker._on_course).  A worker slow on its kernel
alone has blocks of the sizer's *time* anyway, 4x of which is a few ms.  Not for coverage (θ
kept: a worker trains only its untrained points), a sampled calibration (a batch, no pass),
nor with data migration (its windows move between blocks).

**Steady workers: BSPV's block at least** (issue 19, Fig. 8, NMF).  A worker on course for
its timer (``FSPWorker._on_course``: the rest of its pass fits ``COURSE_MARGIN`` times before
it) took blocks of ``BLOCK_GROWTH`` times the sizer's, and the sizer aims at
``runtime.block_ms`` (1 ms) of *wall* time: ``flegel paper``'s NMF pass (2,000 x 400, 4.8 ms
of kernel on a quiet core) is more than four such blocks, and where ranks share cores the
sizer's blocks shrink further.  So FSPV took its whole passes in two blocks or more where
BSPV takes one (BSP's fixed block, :data:`flegel.sync.bsp.BLOCK`: 16,384 points at least),
and NMF's kernel has a large per-call cost (its HALS set-up: 0.09-0.25 ms measured at
warm-up).  Measured (``bench/fsp_claims.py``'s NMF job, 200 iterations each, every one a
whole pass, 4 workers on 2 shared cores at a load of 3.6, cProfile on CPU time): FSPV's
workers made 307 and 371 kernel calls against BSPV's 200, and their iterations cost 5.8-6.5
ms of CPU against 5.6-5.7 ms (docs/benchmarks.md, "FSPV's whole passes on NMF").

A block is how promptly a worker answers the master's pause, and the master pauses a worker
at the first pass of an iteration only when its predicted pass is beyond ``PASS_GRACE`` times
the fastest worker's (``FSP._on_pass``).  So the master tells each worker whether it plans
no such pause -- its predicted pass is within that grace of the fastest, and no data
migration is configured (an asynchronous migrator moves its windows between blocks, and a
catch-up is paused at its own bound): ``Instructions.steady`` -- and a steady worker on
course for its timer, with no straggler patterns, takes blocks of at least BSP's block
(:func:`course_block`), as BSPV, which answers nothing within an iteration at all; a
``max_time`` stop or an exact evaluation waits for a block at most as long as BSPV's do.
Not in the calibration (nothing is predicted yet), nor for a worker predicted slow
(``tests/test_policy_fsp.py``: a worker 4x slower than the first, under a fixed η of 100
s, is paused when the first pass arrives, as before), nor for a worker whose patterns may
slow it later (``straggling``, as above), nor in a whole pass without a timer: there only
the master's bound ends a pass held up by a worker slowed since it was predicted -- a
straggler nobody predicted (``tests/test_fsp_whole_pass.py``, a worker slowed 20x in the
middle of logistic regression's whole passes).
"""

from __future__ import annotations

from flegel.ports import WorkerPort
from flegel.protocol import Instructions
from flegel.sync.bsp import BLOCK as BSP_BLOCK

#: A worker whose per-point cost with straggler delays is at most this many times its
#: kernel's is not slowed: its delays are at most its compute (:func:`whole_on_course`).
SLOWED_FACTOR = 2.0


def whole_on_course(port: WorkerPort, instructions: Instructions, migrator: object) -> bool:
    """Whether a worker's iteration without a timer is a whole pass that only the master's
    bound can cut (any whole pass without a timer: the calibration, K-means' pass closing
    the sampled first pass, a full-batch algorithm's whole passes), by a worker not slowed:
    it takes blocks of ``BLOCK_GROWTH`` times the sizer's (module notes).

    Parameters
    ----------
    port : WorkerPort
        The worker: its block sizer's per-point costs and whether straggler patterns slow it.
    instructions : Instructions
        The iteration's (no timer is the caller's test): no batch, no coverage.
    migrator : object or None
        The worker's data migration (None: not configured).
    """
    if instructions.batch > 0 or instructions.cover or migrator is not None:
        return False
    # a pattern's delays may start late or come and go (module notes); a port of the
    # protocol before `straggling` (a user's own) counts as not straggling
    if getattr(port, "straggling", False):
        return False
    per, slowed = port.per_point_s, port.slowed_point_s
    return (per is not None and slowed is not None and per > 0
            and slowed <= SLOWED_FACTOR * per)


def course_block(grown: int, instructions: Instructions, port: WorkerPort,
                 deadline: float | None) -> int:
    """The block of a worker on course (``FSPWorker._on_course``): ``grown``, the sizer's
    block times ``BLOCK_GROWTH``; for a steady worker (``instructions.steady``: the master
    plans no pause for it) on course for its timer (``deadline``) and without straggler
    patterns, at least BSP's block (module notes, "Steady workers")."""
    steady = (instructions.steady and deadline is not None
              and not getattr(port, "straggling", False))
    return max(grown, BSP_BLOCK) if steady else grown
