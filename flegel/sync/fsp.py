"""Flexible Synchronous Parallel (FSP paper, Sections 3 and 5.2).

No workload is pre-assigned.  The master ends an iteration after an interval η; every worker
commits right after the block it is on, whatever it processed, and all continue from the same
new θ (Section 3.1), so convergence is kept (Section 3.2).  A worker that completes a full pass
since the last barrier commits at once, and the master pauses the workers that could not
finish their own pass soon (Section 3.3; :meth:`FSP._on_pass`: the others finish theirs, which
on shared cores is what a worker that has not yet run needs).  Iteration 1 is a calibration
iteration without a timer, a whole pass as BSPV's is: it ends when every worker has finished
its pass, the workers still computing paused once it ran :data:`WHOLE_PASS_WAIT` times as
long as the first pass took to arrive (see :class:`FSP`, Notes).  It measures speeds and
gives FSPB its η⁰ (the first pass's time).  Under FSPV without data migration, an incremental
EM algorithm (``Algorithm.sampled_first_step``) ends it after a share of every worker's shard
instead (see :class:`FSP`, Notes: the sampled calibration).  An algorithm whose update is
stronger on a full batch at θ (``Algorithm.full_batch_update``: logistic regression's L-BFGS)
gets *whole passes* after it too while no worker straggles (see :class:`FSP`).  An algorithm
whose θ sums every point's contribution (``Algorithm.cover_before_update``: incremental EM's
statistics) gets no update of θ until every point has been trained once -- *coverage*: the
barriers go on, speeds are measured and migration plans its first round, θ is kept (see
:class:`FSP`, "Coverage").

Coordination (Section 5.2, Fig. 6):

* ``centralized``: two-phase -- the master broadcasts a pause signal after η, workers report,
  the master broadcasts θ and η.
* ``semi``: each worker times its own interval η − δᵢ, the paper's η ± δᵢ: δᵢ is signed.
  It is estimated from worker i's measured response delay eᵢ: how late, after its own timer,
  its report reaches the master (the block it finishes, a suspension it serves, messaging).
  Reports reach the master together when δᵢ − eᵢ is the same for every worker, so δᵢ
  follows eᵢ − mean(e) (smoothed, ``offsets.OFFSET_SMOOTHING``); the offsets are then centred
  so that their mean over the workers is 0 and bounded to ±:data:`OFFSET_BOUND` · η.  A
  worker whose reports arrive early (δᵢ < 0) thus computes longer than η, one whose reports
  arrive late (δᵢ > 0) shorter, and the workers' mean interval is η, the η the adjustor
  chose ("transfer extra wait to extra update").  The master, which sees every arrival,
  computes δᵢ and sends it with θ and η (a choice: the paper has each worker monitor
  itself; the estimate is the same and needs no extra messages).  Knowing its
  deadline ahead, a worker also shrinks its last block to end on it, and its timer starts at
  the master's send time when the clocks agree (see :class:`FSPWorker`).

Every barrier records η, its cost (first report to broadcast, Fig. 10), the spread between
the first and the last report, and each worker's offset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from flegel.api import Algorithm, Stratification, arm, stratify
from flegel.balance.migration import KEYS as MIGRATION_KEYS
from flegel.balance.migration import Balancer, MigrationOptions, Migrator
from flegel.balance.ports import MigratingShard, MigrationPort, OrderPort
from flegel.interval import Observation, Plan, make_adjustor
from flegel.interval.gauge import Gauge
from flegel.interval.multistage import (
    PASS_REACH,
    PROBE_MODES,
    PROBE_PHASES,
    STAGE_CONFIRM,
    STAGE_SIGNIFICANCE,
    STAGE_WINDOW,
    sample_batch,
    sample_fraction,
)
from flegel.ports import ServerPort, WorkerPolicy, WorkerPort
from flegel.protocol import POLL_MAX_S, Instructions, OrderKind, Reason, Signal
from flegel.sync.base import BarrierPolicy, round_trip_s
from flegel.sync.offsets import OFFSET_BOUND, learn_offsets
from flegel.sync.passes import PassPredictor
from flegel.sync.whole_blocks import course_block, whole_on_course
from flegel.validation import Key, boolean, choice, mapping, number

#: A timer anchored at the master's send time only when the measured lag is in [0, this):
#: a lag outside means the clocks of the two hosts disagree.
MAX_CLOCK_LAG_S = 0.05
#: Of the lag between the master's send and this worker's start, the timer credits at most
#: this much: what a poll for θ may take (two of the longest poll interval, POLL_MAX_S).  A
#: longer lag is a worker that had no core to run on (ranks sharing cores, a busy host); its
#: timer then runs from its start, so it still computes for its interval.  Measured (issue
#: 19, 4 workers and the master on 2 shared cores, logistic regression at η ≈ 2 ms): timers
#: anchored at the send time had expired on arrival, most commits carried 0 points, and the
#: workers computed 5% of the time.
MAX_LAG_CREDIT_S = 2 * POLL_MAX_S
#: After the first full pass of an iteration, ``t_p`` after its broadcast, a worker whose
#: own pass takes longer than ``PASS_GRACE · t_p`` (at most η) is paused at once; the others
#: finish theirs (:meth:`FSP._on_pass`).  Twice: a worker twice as slow as the fastest is
#: a straggler the others should not wait for (the paper's heterogeneous workers).
PASS_GRACE = 2.0
#: FSPV's first interval gives the barrier this share of the iteration: BSPV's ρ
#: (flegel.sync.bsp, ``overhead``), so FSPV starts from BSPV's choice.
FIRST_OVERHEAD = 0.1
#: The phase of an iteration that ends when every worker finished its pass at θ (an
#: algorithm with ``full_batch_update``; see :class:`FSP`, "Whole passes").
WHOLE_PHASE = "whole-pass"
#: Whole passes: a worker whose predicted pass is beyond this many times the typical
#: worker's is a straggler (the interval adjustor then runs FSP's ordinary iterations), and
#: workers still computing are paused once a whole pass has run this many times as long as
#: its first pass took to arrive (:meth:`FSP._whole_bound`): a straggler nobody predicted
#: cannot hold the barrier.
WHOLE_PASS_WAIT = 4.0
#: Commits a worker's predicted pass must rest on before it can be called a straggler (paused
#: at the first pass, :meth:`FSP._on_pass`; whole passes turned off, :meth:`FSP._balanced`).
PASS_EVIDENCE = 2
#: A worker on course to finish its pass before anything can cut it takes blocks of up to this
#: many times the block sizer's choice (:class:`FSPWorker`, "Blocks on course").  Four: at a
#: barrier per pass (η of PASS_REACH passes) a pass of up to 4 sizer blocks is one block.
BLOCK_GROWTH = 4
#: A timer does not cut a pass that takes at most this share of η at the block sizer's
#: per-point cost with straggler delays (:class:`FSPWorker`, "A late pass is finished").
#: PASS_GRACE / PASS_REACH: at a barrier per pass (η of PASS_REACH of the fastest worker's
#: passes) the pass of a worker up to PASS_GRACE times as slow as the fastest -- no straggler
#: by the master's own test (:meth:`FSP._on_pass`) -- is finished, with a margin of 2x over
#: a same-speed worker's, so noise and the sign of its offset δᵢ do not decide (at 1 /
#: PASS_REACH a same-speed worker sat on the boundary); a slower one's is cut.
LATE_PASS_SHARE = PASS_GRACE / PASS_REACH
#: ... on course with a timer: the rest of its pass fits this many times before the timer, at
#: the block sizer's per-point cost.  Twice: the pass may run twice as slow (a core shared
#: with one other rank) and still end before the timer with its larger blocks.
COURSE_MARGIN = 2.0
#: The phase of an iteration at a kept θ, while some point has never been trained (an
#: algorithm with ``cover_before_update``; see :class:`FSP`, "Coverage").
COVER_PHASE = "coverage"
#: The phase of FSPV's sampled first pass after the sampled calibration (an algorithm with
#: ``sampled_first_pass``; see :class:`FSP`, "The sampled first pass").
SAMPLED_PHASE = "sampled"
#: The phases without an interval η (the calibration's and the three above): no timer and no
#: pause signal at η ends them, under either coordination -- every worker finishes its pass
#: (or share; a straggler is paused at :meth:`FSP._whole_bound`).  ``flegel paper``'s Fig. 13
#: sums their barriers apart (:mod:`flegel.cli.paper.barriers`).
UNTIMED_PHASES = ("calibration", WHOLE_PHASE, COVER_PHASE, SAMPLED_PHASE)
#: The sampled first pass trains at most this share of every shard in sampled iterations,
#: the calibration's included (:class:`FSP`, "The sampled first pass"): the stratum takes
#: exact sums once an iteration trained half of its shard (``algorithms._stratum.COVERED``),
#: so a larger step would be incremental EM's, pulled back toward θ⁰, not mini-batch EM's.
SAMPLED_FIRST_PASS = 0.5
#: ... while no worker's pass, predicted from its latest share, is beyond this many times
#: the typical worker's (:meth:`FSP._whole_shares`).  Measured per point (the commits'
#: compute time, slowest over median): without stragglers 1.0-13.4 over the first four
#: iterations of 16 FSPV runs of Fig. 8's K-means at a load of 8-14 (two calibrations at
#: 13.4, PASS_GRACE's 2 was passed in 17 of 64), Fig. 7's straggler (τ = 32 ms per 1,000
#: points) 32 at its calibration.
SAMPLED_PASS_WAIT = 16.0
#: Coverage's first updates that are whole passes (every worker's pass at θ: Lloyd steps on
#: all the data), the first included (:class:`FSP`, "Coverage").  Five: exact Lloyd steps
#: from θ⁰ on the overlapping workload (``python bench/fsp_claims.py --only basin``) still
#: change basin with the fifth step on a biased sample (+6.5 %), and one exact step followed
#: by FSPV's partial ones ended +5.44 % above BSPB's basin in 2 of 2 runs of 10 s.  Only
#: after a coverage that kept θ (:meth:`FSP.keeps_theta`) for fewer than
#: :data:`FAST_MINORITY` of the workers (:meth:`FSP._straggler_hold`).
COVER_STEPS = 5
#: The share of the workers a coverage hold must have waited for before its whole passes
#: are dropped as a slow majority's beside a fast minority (Fig. 16b: 4 of 5), rather than
#: taken for stragglers (:meth:`FSP._straggler_hold`).
FAST_MINORITY = 0.75
#: Complete whole passes (no worker paused) whose durations, broadcast to the last arrival,
#: give the typical whole pass that bounds the next one (:meth:`FSP._whole_bound`).  Five:
#: their lower median ignores up to two disturbed passes and follows a change within three.
WHOLE_HISTORY = 5


class FSPWorker(WorkerPolicy):
    """The worker side of FSP: commit on the master's pause signal (centralized) or when
    its own timer η − δᵢ expires (semi-centralized, Section 5.2), and on a full pass.

    Semi-centralized timers start when the master sent θ, not when this worker noticed it
    (its poll may lag by up to a poll interval), so all workers time the same interval; only
    up to :data:`MAX_LAG_CREDIT_S` of lag is credited (a worker that waited longer for a core
    times its interval from its start), and a lag outside [0, :data:`MAX_CLOCK_LAG_S`) means
    the clocks disagree across hosts, and the local receipt time is used instead.  Knowing
    its deadline ahead, the worker shrinks its last block to end on it instead of overrunning
    it by up to a block.

    **A pass's last block is not cut** (issue 19; a choice where the paper, which counts in
    points, is silent): when its timer expires -- or would within the next block -- with at
    most one block of its pass left (the block sizer's next block, which counts a
    straggler's injected delays, so a slowed worker's blocks are small), the worker finishes
    the pass and commits it as a full pass.  The block is the runtime's unit of promptness:
    a worker answers a signal only between blocks, so one block past the deadline is
    lateness any barrier already allows, and the tail's points are trained at this θ rather
    than an iteration later.  Where ranks share cores this is the common case of a timer
    expiring mid-pass: a worker that waited for a core past its deadline wakes with a
    fraction of a block left.  Measured (issue 19, ``flegel paper``'s K-means, 4 workers and
    the master on 2 cores, FSPV at a barrier per pass): timers cut such workers at 76-79%
    of their 1.2 ms pass ([27500, 27500, 21841, 27500]); the barrier had waited for them
    anyway, and the objective lagged BSPV's by the pass's tail.  Signals are answered as
    before: the master pauses a worker because it must not be waited for.

    **A late pass is finished** (issue 19).  Nor does a timer cut a pass that takes at most
    :data:`LATE_PASS_SHARE` of η at the block sizer's per-point cost
    (decided at the iteration's first check, before any block, and kept until a hard cap
    an interval past the deadline, which cuts a worker slowed after the decision).  The
    per-point cost counts the straggler delays the sizer has seen (``slowed_point_s``), so a
    slowed worker is judged slow (on kernel time alone a worker 20x slower took its 30 ms
    pass at η = 8 ms, review of issue 19, on the simulated clock).  At a barrier per
    pass (η of :data:`~flegel.interval.multistage.PASS_REACH` passes) that is the pass of a
    worker up to :data:`PASS_GRACE` times as slow as the fastest (twice a same-speed
    worker's: noise and the sign of its offset do not decide), so only a straggler's pass is
    cut there, while probes' intervals under two passes cut as before.  Where ranks share
    cores a worker may get no core from its start until past its deadline; the timer then
    ended its iteration after its first block, a block limited to the time left: one point.
    (Judged on the whole pass, not on the rest of a pass begun: a worker cut mid-pass is the
    last block's case above, and a rest judged anew at every block changed the traversals of
    a straggler left with a few points by migration, ``tests/test_migration_inprocess.py``.)
    Measured (issue 19, ``python bench/fsp_claims.py --only horizons --algorithms
    nmf``, 4 workers on 2 cores at a load of 8-16) such commits -- [1, 54, 2000, 217], or
    [1, 2000, 1, 1] after 21 ms at η = 14.6 ms -- cut 16 passes before the 0.2 s target in
    6 of 9 pairs on main, and FSPV then took 2-4 iterations more than BSPV in 5 of the 6;
    the barrier had waited for those workers anyway, and finishing the pass costs it a
    pass of compute.

    **Blocks on course** (issue 19; the paper does not size blocks).  Each block costs the
    worker loop a fixed amount of work besides the kernel (polls, the policy's hooks, the
    store, the block sizer: tens of µs), and the block sizer sizes blocks to
    ``runtime.block_ms`` of *wall* time, which counts the time a worker waits for a core, so
    where ranks share cores its blocks shrink well below a millisecond of work.  BSPV takes
    a pass of ``flegel paper``'s NMF (2,000 x 400 a shard) in one block; FSPV, at a barrier
    per pass, took it in several, and its iterations were slower for it: measured (4
    workers on 2 cores at a load of 5-9, ``flegel run`` of that job with ``--set
    sync.model=fspv-off --set stop.max_iterations=400``, two runs each) 16.7 and 14.1 ms
    an iteration against 13.2 and 11.6 ms with ``--set runtime.block_ms=20``.  The block is
    FSP's unit of promptness, but only for a worker that something may stop before its
    pass: so a semi-centralized worker *on course* -- whose rest of the pass fits
    :data:`COURSE_MARGIN` times before its timer at the sizer's per-point cost with the
    straggler delays it has seen, so a slowed worker is never on course (a
    barrier per pass: η of several passes) -- takes blocks of :data:`BLOCK_GROWTH` times the
    sizer's.  A worker that may be cut keeps the sizer's blocks: during probes (η under a
    pass), a straggler (its pass does not fit), under centralized coordination (the master's
    signal ends the iteration), and without a timer (the calibration and whole passes, where
    the master's bound pauses a straggler nobody predicted: with larger blocks a worker 20x
    slower answered that pause 4 times later, on the simulated clock) -- except a whole pass
    (any algorithm's calibration, a full-batch algorithm's every one) by a worker whose blocks
    carry no straggler delays (:mod:`flegel.sync.whole_blocks`: such passes ran in 2 to 67
    blocks against BSPV's one or two).  A *steady* worker on course for its timer
    (``Instructions.steady``: the master plans no pause for it at the first pass,
    :meth:`FSP._steady`) takes blocks of at least BSP's block, so a pass of more than four
    sizer blocks (``flegel paper``'s NMF) is one block, as BSPV's (issue 19, nmfgap;
    :mod:`flegel.sync.whole_blocks`, "Steady workers").

    Data migration (Section 4.3) acts on the worker through its
    :class:`~flegel.balance.ports.MigrationPort`, which :meth:`attach` takes from it.
    """

    #: The worker and its shard (references) are no state of the policy.
    NOT_STATE: ClassVar[tuple[str, ...]] = ("options", "mesh", "shard")
    #: The algorithm's stratum (KMeans.stratify) restores itself in place.
    NESTED: ClassVar[tuple[str, ...]] = ("stratum",)

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self._deadline: float | None = None
        #: The worker's shard (its active points: how much of the pass is left), and the
        #: block sizer's latest choice: a pass's last block is not cut (class notes).
        self.shard: MigratingShard | None = None
        self._block = 0
        #: This iteration's η and interval η − δᵢ (0: no timer), and whether its pass is
        #: finished whatever the timer (a late pass is finished).
        self._eta = 0.0
        self._interval = 0.0
        self._late_pass = False
        #: ... until this time at most: the late pass's hard cap.
        self._late_cap = 0.0
        #: Points this iteration as of the last commit_reason (blocks on course).
        self._points = 0
        self.semi = self.options.get("coordination", "semi") == "semi"
        mig = MigrationOptions.of(self.options.get("migration"))
        self.migrator = Migrator(mig) if mig.mode != "off" else None
        self.sync_migration = mig.mode == "sync"
        self.mesh: MigrationPort | None = None
        #: The master keeps θ until every point was trained once (Instructions.cover).
        self._cover = 0
        #: The algorithm's stratified estimate of this shard, without migration (attach).
        self.stratum: Stratification | None = None

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self.migrator is not None:
            self.migrator.resumed()

    def attach(self, worker: WorkerPort) -> None:
        if isinstance(worker, MigrationPort):
            self.shard = worker.shard
        if self.options.get("shuffle", True) and isinstance(worker, MigrationPort):
            # Traverse the shard in a random order, seeded by the shard (its first global
            # id, rank << ID_SHIFT): see ShardStore.shuffle.
            ids = getattr(worker.shard, "ids", None)
            worker.shard.shuffle(int(ids[0]) if ids is not None and len(ids) else 0)
            if self.migrator is None:
                # Without migration an algorithm may take its M-step on a stratified estimate
                # of each shuffled shard (KMeans.stratify; LogisticRegression.stratify, its
                # gradient steps; algorithms/_stratum.py; issue 19).
                algorithm = getattr(worker, "algorithm", None)
                if isinstance(algorithm, Algorithm):
                    self.stratum = stratify(algorithm, worker.shard.n_active, worker.rank - 1)
        if self.migrator is None:
            return
        if not isinstance(worker, MigrationPort):
            raise TypeError(f"data migration needs a worker that implements MigrationPort, "
                            f"found {type(worker).__name__}")
        self.mesh = worker
        self.migrator.attached(worker)

    def _port(self) -> MigrationPort:
        if self.mesh is None:
            raise RuntimeError("data migration: the worker was not attached (attach())")
        return self.mesh

    @property
    def in_flight(self) -> int:
        return 0 if self.migrator is None else self.migrator.in_flight

    def between_blocks(self, port: WorkerPort) -> None:
        if self.migrator is not None and not self.sync_migration:
            self.migrator.step(self._port())

    def while_waiting(self, port: WorkerPort) -> None:
        if self.migrator is not None and self.sync_migration:
            # At the barrier: take what peers send now, so no sender waits on this worker.
            self.migrator.take_messages(self._port())
        else:
            self.between_blocks(port)

    def on_stop(self, port: WorkerPort) -> dict[str, Any]:
        if self.migrator is None:
            return {}
        return self.migrator.drain(self._port())

    def begin(self, port: WorkerPort, instructions: Instructions, sent_lag_s: float) -> None:
        super().begin(port, instructions, sent_lag_s)
        self._cover = instructions.cover
        if self.stratum is not None:  # blocks count from here, not the warm-up's (Stratum)
            # FSPV's sampled first pass: the master's sampled share of every shard (FSP,
            # Notes).  Not the sampled calibration (a share, batch > 0, not ``sampled``): its
            # skew test stays as it was, but for K-means' test at θ⁰ (Stratum.calibrated_exact).
            arm(self.stratum, instructions.sampled, instructions.calibration)
        if self.shard is not None:
            # Coverage: windows take the points never trained first (the master's notes).
            self.shard.unseen_first = self._cover > 0
        if self.migrator is not None and self.sync_migration:
            # Synchronous migration: the points move before the iteration starts.
            self.migrator.transfer_now(self._port(), instructions.orders)
        self._deadline = None
        self._points = 0
        self._interval = 0.0
        self._late_pass = False
        if instructions.eta_s > 0:
            now = port.now()
            lag = sent_lag_s if 0.0 <= sent_lag_s < MAX_CLOCK_LAG_S else 0.0
            interval = max(instructions.eta_s - instructions.offset_s, 0.0)
            self._interval = interval
            self._eta = instructions.eta_s
            # At most a poll's lag, and never more than half the interval: a worker computes
            # for at least half its interval once it runs.
            self._deadline = now - min(lag, MAX_LAG_CREDIT_S, interval / 2) + interval

    def deadline(self) -> float | None:
        return self._deadline

    def commit_reason(self, port: WorkerPort, points: int) -> Reason | None:
        self._points = points
        if self._cover and self.shard is not None:
            # Coverage (FSP's notes): done once nothing held is untrained -- unless points
            # are on their way here and none came yet (idle).
            done = self.shard.n_unseen == 0 and (points > 0 or self._cover < 2)
            return Reason.PASS if done else None
        if (batch := super().commit_reason(port, points)) is not None:
            return batch  # FSPV's sampled calibration (FSP, Notes)
        if (self._deadline is not None and port.now() >= self._deadline
                and not self._last_block(points) and not self._short_rest(port, points)):
            return Reason.TIMER
        return None

    def idle(self, port: WorkerPort, points: int) -> bool:
        """Coverage, with points on their way here and none trained yet: wait for them (the
        loop sleeps; the master's bound pauses the wait)."""
        return (self._cover >= 2 and points == 0 and self.shard is not None
                and self.shard.n_unseen == 0)

    def block_size(self, port: WorkerPort, sized: int) -> int:
        self._block = sized  # steady on course for a timer: BSPV's block at least
        if not self._on_course(port):
            return sized
        return course_block(BLOCK_GROWTH * sized, self.instructions, port, self._deadline)

    def _on_course(self, port: WorkerPort) -> bool:
        """Whether nothing but the master's pause of a straggler can end this iteration
        before the worker's pass (class notes, "Blocks on course"): semi-centralized, with a
        timer, and the rest of the pass fits :data:`COURSE_MARGIN` times before it at the
        sizer's per-point cost with straggler delays (``slowed_point_s``); semi-centralized
        without a timer, a whole pass (the calibration, say) by a worker not slowed
        (:func:`~flegel.sync.whole_blocks.whole_on_course`; centralized coordination never
        sends a timer, so there an η iteration the master ends looks like a whole pass)."""
        if self._deadline is None:  # no timer: a whole pass (flegel.sync.whole_blocks)
            return self.semi and whole_on_course(port, self.instructions, self.migrator)
        per_point = port.slowed_point_s
        if not self.semi or self.shard is None or per_point is None:
            return False
        rest = self.shard.n_active - self._points
        return per_point > 0 and port.now() + COURSE_MARGIN * rest * per_point <= self._deadline

    def block_limit(self, port: WorkerPort, points: int) -> int | None:
        if self.instructions.batch > 0:
            return super().block_limit(port, points)  # the sampled calibration: no timer
        per_point = port.per_point_s
        if (self._deadline is None or not per_point or self._last_block(points)
                or self._short_rest(port, points)):
            return None
        return max(1, int((self._deadline - port.now()) / per_point))

    def _short_rest(self, port: WorkerPort, points: int) -> bool:
        """Whether this iteration's pass is finished whatever the timer (class notes: a late
        pass is finished): decided when the worker first checks, before its first block --
        its whole pass takes at most :data:`LATE_PASS_SHARE` of η (not of its interval η − δᵢ,
        whose offset would decide for same-speed workers) at the sizer's
        per-point cost with straggler delays (``slowed_point_s``) -- and kept for the
        iteration, up to a hard cap an interval past its deadline."""
        if points == 0 and self.shard is not None and self._interval > 0:
            per_point = port.slowed_point_s
            rest = self.shard.n_active
            self._late_pass = (per_point is not None and per_point > 0
                               and 0 < rest * per_point <= LATE_PASS_SHARE * self._eta)
            # A hard cap: a worker that slows after the decision is cut an interval past its
            # deadline (or past the decision, for one that got no core until then).
            now = port.now()
            self._late_cap = max(now, self._deadline or now) + self._interval
        return self._late_pass and port.now() < self._late_cap

    def _last_block(self, points: int) -> bool:
        """Whether what is left of the pass, after ``points`` this iteration, fits in the
        block sizer's next block (class notes: a pass's last block is not cut)."""
        if self.shard is None or self._block <= 0:
            return False
        return 0 < self.shard.n_active - points <= self._block

    def overlaps(self, port: WorkerPort) -> bool:
        """``sync.overlap``: a straggler's suspension runs on while it waits for θ (the
        loop's "Overlap", :mod:`flegel.runtime.loop`).  FSP's pause and timers cut a
        suspended straggler short at every barrier; with the suspension frozen during its
        waits, it lost each wait on top of it (issue 19: 1.7 passes in 4 s against BSPV's
        4.2, its waits half the run; docs/sync/fsp.md, "Overlap").  Nothing committed
        changes, so coverage, whole passes and the calibration keep their exact steps."""
        return bool(self.options.get("overlap", True))


def sampled_calibration(options: dict[str, Any], server: ServerPort) -> bool:
    """Whether FSP's calibration is FSPV's sampled one (:class:`FSP`, Notes: the sampled
    calibration): the algorithm declares ``sampled_first_step`` (GMM, FCM, NMF; K-means
    from a raw seeding, ``n_init=1``),
    the interval is FSPV's (``multistage`` with ``interleaved`` probes and no ``eta_ms``),
    shards are traversed shuffled, and no data migration is configured.

    Not with migration (issue 19, a choice; before, the sample took precedence over coverage
    for GMM and FCM): migration is there for stragglers, and a straggler slower than the
    calibration's bound is paused before it has trained its share, so the sample is no
    longer stratified -- measured (``python bench/fsp_claims.py --only gap``: 400,000
    points, shards of 100,000, share 1/8 = 12,500 points; K-means with the sampled step,
    worker 1 slowed by τ = 32 ms per 1,000 points) the slow worker had trained 5,034 of its
    12,500-point share (5 % of its shard) when θ¹ was taken.  The bound is
    :data:`WHOLE_PASS_WAIT` (4) times the fastest worker's pass extrapolated from its share
    (:meth:`FSP._whole_bound`): 5,034 points at τ are about 160 ms, four fast passes of about
    40 ms (inferred, not logged), so the straggler trains what τ allows in four fast passes,
    whatever the share; on contiguous shards of sorted data θ¹ is
    then fitted mostly without its clusters, the basin problem coverage mends (class notes,
    "Coverage").  Coverage then applies instead, and without stragglers its calibration is
    BSPV's whole pass, so migration costs nothing against BSPV there either (against FSPV
    without migration it costs the sample's gain: ``bench/migration_sim.py``'s rows without
    a straggler, 70.3 against 57.0 ms simulated).  Taking the sample under migration and
    holding θ only where a share was cut was tried: +5.441 % in its first gap run
    (docs/sync/fsp.md, "The sampled first step on K-means and NMF")."""
    migration = MigrationOptions.of(options.get("migration"))
    return (options["interval"] == "multistage" and options["probes"] == "interleaved"
            and options["eta_ms"] is None and bool(options.get("shuffle", True))
            and migration.mode == "off"
            and server.sampled_first_step)


def sample_share(shard_points: Sequence[int], min_points: int = 0) -> float:
    """The share of every shard in FSPV's sampled calibration:
    :func:`~flegel.interval.multistage.sample_fraction`, raised further so that the smallest
    shard gives ``min_points`` (the algorithm's ``sample_min_points``: K-means' 50 points per
    cluster); 1.0, a whole pass, when that is half a shard or more.

    :data:`~flegel.interval.multistage.SAMPLE_MIN_POINTS` ignores the model's size: with K
    near the sample's size clusters sit on 0-2 points of it and θ¹'s centres are noise
    (issue 19, i20k review); one share for all shards keeps the sample stratified."""
    return sample_fraction(shard_points, min_points)


def _untrained(header: dict[str, Any]) -> bool:
    """Whether a worker's COMMIT header says it holds points of its own it never trained."""
    return header.get("n_held", 0.0) - header.get("seen", 0.0) > 0


class FSP(BarrierPolicy):
    """Master policy of FSP.

    Options
    -------
    interval : {"fixed", "binary", "multistage"}
        The interval adjustor (FSP, FSPB, FSPV).
    eta_ms : float or None
        Fixed η (``fixed``), or η⁰ for ``binary`` (default: the calibration iteration).
    coordination : {"semi", "centralized"}
    factor : float
        λ of the binary search (paper: 2).
    probe_ms : float
        η_p of the multi-stage probes (paper: 200 ms).
    stage_tolerance : float
        Relative shortfall of progress against the stage's own rate that opens a new FSPV
        stage (see :mod:`flegel.interval.multistage`).
    eta_min_ms : float
        Smallest interval an adjustor may choose.

    Notes
    -----
    **Whole passes** (issue 19; a choice where the paper is silent).  The paper runs one
    update rule under every model, and its LR takes gradient steps on any batch.  flegel's
    logistic regression takes an L-BFGS step when an aggregate is a full batch at the current
    θ and a gradient step otherwise (:mod:`flegel.algorithms.logreg`), so BSPV, whose
    calibration picks the whole shard as its batch, ran L-BFGS while FSPV, whose iterations
    end with the *fastest* worker's pass, took gradient steps: measured (``python
    bench/fsp_claims.py --only horizons --algorithms logreg``, 110,000 × 28, 4 workers on 2
    cores) only 24 of 365 FSPV aggregates were full batches, and FSPV reached BSPV's 0.2 s
    target 11x later (BSPV / FSPV 0.09x).  For an algorithm that declares
    ``full_batch_update``, FSP therefore ends an iteration when every worker has finished its
    pass at θ -- no timers, no pause at the first pass (:data:`WHOLE_PHASE`) -- and does not
    consult the interval adjustor while it does: Eq. 7's line g(η) = aη + b, fitted on
    probes, assumes progress grows smoothly with η, but here it jumps at the pass, from a
    gradient step to an L-BFGS step.  Kept in the loop, the interleaved probes mixed partial
    iterations into the run and, on the noisy pass times of shared cores, fitted an η below
    the pass in 2 of 3 runs (0.12x and 0.45x, against 1.09x when it landed on the pass).  The
    calibration iteration is a whole pass too, as BSPV's is: it is the first L-BFGS
    evaluation.  Stragglers keep FSP's point (Section 3): a worker whose predicted pass is
    beyond :data:`WHOLE_PASS_WAIT` times the typical worker's is a straggler
    (:meth:`_balanced`), and the adjustor then (re)starts and runs FSP's ordinary iterations;
    migration shortens the straggler's pass, and once no worker straggles whole passes
    resume.  A worker not done once a whole pass ran :data:`WHOLE_PASS_WAIT` times as long
    as its first pass took to arrive (or a typical pass, or the typical complete whole pass
    of the last :data:`WHOLE_HISTORY`, if longer) is paused (:meth:`_whole_bound`), so an
    unforeseen straggler holds no barrier for long.  This holds whatever ``interval`` says
    (a fixed η too): the pass, not η, ends a whole pass.

    **The calibration is a whole pass** (issue 19), as BSPV's calibration is a full pass,
    for every algorithm, not only for those with ``full_batch_update`` -- but under FSPV
    for one with ``sampled_first_step``: the sampled calibration, below.  Nothing is known
    of the workers' speeds then, so the pass rule (:meth:`_on_pass`) has no straggler to tell
    apart, and it paused every worker not done by :data:`PASS_GRACE` times the first pass.
    On shared cores that is a worker whose θ reached it late or that waited for a core, not
    a slow one: measured (``flegel paper``'s K-means, 4 workers and the master on 2 cores)
    the calibration cut one or two workers at 75% of their pass in 2 of 3 runs, so FSPV's
    first θ came from less data than BSPV's and, on a target four passes away, FSPV needed a
    fifth iteration.  A straggler is still paused once the calibration ran
    :data:`WHOLE_PASS_WAIT` times as long as its first pass took to arrive (an injected
    straggler of ``flegel paper`` takes 30x the others' pass).  FSPB's η⁰ is still the
    first pass's time.

    **The sampled calibration** (issue 19, Fig. 8; FSPV with interleaved probes, shuffled
    shards, an algorithm with ``sampled_first_step``).  The calibration then ends when every
    worker has trained the same share of its shard (an eighth, more if the smallest shard
    would give under 1,000 points, a whole pass from half a shard on:
    :func:`~flegel.interval.multistage.sample_fraction`; a
    batch, ``Reason.BATCH``), bounded as a whole pass is (:meth:`_whole_bound`, scaled to a
    pass): the first M-step is incremental EM's on a random sample stratified in proportion
    to the shards (Neal & Hinton), and the rest of the first
    pass runs at θ¹.  BSPV's calibration is batch EM's first step on a whole pass.  In the
    idealised schedule of ``python bench/em_schedules.py`` (passes and M-steps in order, no
    clock; ``flegel paper``'s GMM, exact objectives) the first M-step after an eighth reaches
    the target after 1.125 passes against batch EM's 2, with the same 2 M-steps; measured
    FSPV against BSPV (docs/benchmarks.md, medians of nine pairs) GMM 3.10x and FCM 2.20x
    with the rows x 10, within a pair's noise at the quick scale.  Speeds and the pass are
    measured on the sample as on any partial pass.  Not under FSPB, whose η⁰ is the
    calibration's pass.  Nor with data migration (:func:`sampled_calibration`): a
    straggler paused at the bound leaves the sample unstratified, and coverage (below)
    applies instead.  K-means (from a raw seeding: ``KMeans.sampled_first_step``; its share
    holds 50 points per cluster, :func:`sample_share`) and NMF declare it too (issue 19,
    i20k): their θ sums
    per-point statistics as incremental EM's does (K-means' cluster sums, NMF's ``WᵀW``
    and ``WᵀX``), so θ¹ is Lloyd's (HALS's) step on the sample at θ⁰; logistic regression
    does not -- its first full batch is L-BFGS's first evaluation, whose gradient pair the
    sample's gradient step would not replace (a choice; docs/sync/fsp.md, "The sampled first
    step on K-means and NMF").

    **The sampled first pass** (issue 19, Fig. 8; an algorithm that declares
    ``sampled_first_pass``: K-means, whose stratum takes the M-step on the latest share
    alone).  After the sampled calibration the first pass goes on in sampled iterations
    (:data:`SAMPLED_PHASE`), each as large as the share trained so far -- an eighth, an
    eighth, a quarter -- up to :data:`SAMPLED_FIRST_PASS` of every shard, then one whole
    pass (:data:`WHOLE_PHASE`: every worker's untrained rest and its sampled points again,
    a Lloyd step on all the data), then FSPV's iterations.  Each sampled step is mini-batch
    K-means' on a stratified sample: without stragglers ``flegel paper``'s K-means reached
    the target in 4 M-steps, as BSPV's Lloyd steps and FSPV's before, after 1.5 passes
    instead of 3.125 (docs/sync/fsp.md, "FSPV's sampled first pass on K-means").  Only
    where every worker trained its whole share and none took :data:`SAMPLED_PASS_WAIT`
    times the typical worker's time for it (:meth:`_whole_shares`, on each share's own
    commit): each step waits for every share, so a straggler paused at the calibration's
    bound or slow on its share (Fig. 7's τ = 32 ms) keeps FSPV's iterations from the
    calibration on, as before; a milder one is waited for.  A worker slowed later ends the
    pass at the step it slowed in (paused at the bound, or found on that step's commit):
    half of every shard or less is trained then, no whole pass follows, and the adjustor
    starts from that step's measurements as from the calibration's (a sampled step, like
    the calibration, is left out of ``eta_log``: it has no interval and is no pass).  A
    worker whose shard size the master does not know gets no batch -- a pass -- so the
    sampled pass ends there too.  The sampled steps' instructions say so
    (``Instructions.sampled``): a worker's stratum takes the estimate on them whatever the
    window's class shares (``Stratum.arm(sampled=True)``); not on the sampled
    calibration's, whose skew test is as it was before the sampled pass, whether the steps
    follow or a straggler refuses them.  (K-means from a raw seeding, the one algorithm
    with the sampled pass, has no θ counts at θ⁰: the master decides that test on its own
    samples of the shards, ``KMeans``' ``stratum_balanced``; shuffled shards keep exact
    sums in the sampled calibration -- ``Stratum.arm(calibration=True)``: a batch without
    ``sampled``; no other window at θ⁰ -- others its estimate.)

    **Coverage** (issue 19, item 3; a choice where the paper is silent).  Under incremental
    EM (Section 2.2, Eq. 3) a point adds its statistics to θ on its first visit (K-means'
    label is -1 before it), so an M-step taken while some points were never visited fits θ
    to the others alone.  On contiguous shards of sorted data that is a fit without the slow
    worker's clusters, and the run settles in another basin: the paper's pause of a
    straggler at the first pass (Section 3.3) and the calibration's bound did exactly that,
    and exact Lloyd steps from θ⁰ without the slow shard (``python bench/fsp_claims.py
    --only basin``) end +3.1 % or +6.5 % above BSPB's basin on the overlapping workload,
    +6.0 % on ``flegel paper``'s K-means after a single such step, while first steps on all
    the data reach it.  For an algorithm that declares ``cover_before_update`` the master
    therefore keeps θ (:meth:`keeps_theta`: no ``update_parameter``, θ's version unchanged;
    the aggregate is carried to the first update, :class:`~flegel.sync.base.BarrierPolicy`)
    while the workers' COMMIT headers say some point was never trained
    (:meth:`~flegel.ports.ServerPort.unseen`: points in flight between workers count).  The
    barriers still happen, so speeds are measured and data migration (Section 4) plans its
    first round at the calibration barrier, on one barrier of evidence (``whole_passes``:
    the calibration measured each worker over a pass or the pass's bound): the straggler's
    untrained points leave first (``ShardStore.unseen_first``) and the fast workers train
    them at θ⁰ first (Section 4.3's priority to points behind).  The iterations at a kept θ
    (:data:`COVER_PHASE`) have no timer: each worker trains only its untrained points and
    commits when none is left (``Instructions.cover``); a worker with none commits at once
    -- it does not recompute at an unchanged θ -- unless untrained points are on their way
    to it, which it waits for without computing (``WorkerPolicy.idle``: the loop sleeps).
    Every such iteration is bounded from its start by :meth:`_cover_bound` (the whole-pass
    bound), and the hold as a whole by :meth:`_hold_cap` (the straggler's pass of its
    shard as dealt at its pace over the hold, the suspension it still owed at the
    calibration's commit included -- BSPV's first iteration --, or the whole-pass bound if
    longer): past it θ is updated on the points trained so far (``coverage.hold_capped``
    and ``hold_cap_s`` in the summary), as coverage then buys nothing over BSPV.  While θ
    is kept windows carry untrained points only (``ShardStore.unseen_first``: a point in
    flight counts as untrained, so a trained one would hold θ for nothing);
    ``stop.max_time_s`` ends the run (applying what was carried).  So the first
    update is Lloyd's (or EM's, or the full-batch L-BFGS step) on all the data from θ⁰,
    whichever worker is slow, a few fast passes after the calibration, and so are the
    next :data:`COVER_STEPS` − 1 where θ was kept: whole passes (:data:`WHOLE_PHASE`),
    cheap as migration has left the straggler few points -- not where the hold waited for
    most workers (:meth:`_straggler_hold`: beside a fast minority each would be a slow
    worker's pass).  Measured (``python
    bench/fsp_claims.py --only gap --seconds 10``, worker 1 slow): one exact step followed
    by FSPV's partial steps ended +5.44 % above BSPB's basin in 1 of 2 paired runs (and 2
    of 2 before), 0 of 4 with the whole passes.  Not after a capped hold (the straggler
    still holds untrained points: each whole pass would wait for it up to its bound), nor
    where the calibration itself covered
    the data (every worker passed within its bound, θ never kept): whole passes would then
    wait for the slow worker at every barrier, each worker one pass, so migration saw no
    imbalance and planned no round (``tests/test_migration_inprocess.py``'s 4x straggler:
    no point ordered, passes 11.9 against 6.7).  Not for the CNN
    (``progress_per_update``), whose mini-batch steps are unbiased on any batch and would
    only be delayed.  Coverage and FSPV's sampled calibration (above) never meet: the
    sampled calibration is taken only without migration.

    *Only with data migration* (``migration.mode`` async or sync).  Without it the hold
    lasts the straggler's own first pass -- BSPV's first iteration -- and buys nothing: the
    straggler's points, trained once per its pass afterwards, keep stale statistics while
    the fast workers' iterations settle the basin anyway.  Measured (``flegel paper
    --quick --only 7``, K-means, one worker slowed by τ = 32 ms, 4 workers on 2 cores at a
    load of 9-12), FSPV without migration with the hold: contiguous shards ended at
    60.77e6 (+7.4 % over BSPB's converged objective; +6.0 % without the hold), shuffled
    ones reached the target in 2.92 s against 0.07 s without it.  With migration
    (``flegel paper --quick --only 11 --only migration``, docs/benchmarks.md, three
    sittings) the contiguous K-means rows (async, sync, async centralized) reached the
    target in 0.14-0.33 s (0.15-0.26 s in the final sitting; first update 0.06-0.13 s),
    where they never did in 4 s without coverage.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        "interval": choice("the interval adjustor: fixed η (FSP), binary search (FSPB) or "
                           "multi-stage probes (FSPV)", ("fixed", "binary", "multistage"),
                           "multistage"),
        "eta_ms": number("η for interval: fixed (required there), or η⁰ for binary (null: "
                         "the calibration iteration's)", None, lo=0, lo_open=True, null=True,
                         unit="milliseconds"),
        "coordination": choice("who times η: each worker itself, from when the master sent "
                               "θ (semi), or the master, which pauses everyone (centralized)",
                               ("semi", "centralized"), "semi"),
        "factor": number("λ of the binary search (FSPB; paper: 2)", 2.0, lo=1, lo_open=True),
        "probe_ms": number("η_p of FSPV's probes (paper: 200 ms; at most an eighth of the "
                           "fastest worker's full pass)", 200.0, lo=0, lo_open=True,
                           unit="milliseconds"),
        "probes": choice("how FSPV probes g(η): interleaved η/√2 and √2·η around the "
                         "interval in force, nothing thrown away (first centre: BSPV's "
                         "interval, a barrier a tenth of the iteration), or the paper's two "
                         "probes with a roll-back", PROBE_MODES, "interleaved"),
        "stage_tolerance": number("relative shortfall of FSPV's progress rate against the "
                                  "stage's own rate (its line f(t)) that opens a new stage "
                                  f"(judged on windows of {STAGE_WINDOW} iterations, beyond "
                                  f"{STAGE_SIGNIFICANCE:g} standard errors, {STAGE_CONFIRM} "
                                  "windows in a row)", 0.5, lo=0, hi=1, lo_open=True,
                                  hi_open=True),
        "eta_min_ms": number("smallest interval an adjustor may choose", 1.0, lo=0,
                             lo_open=True, unit="milliseconds"),
        "shuffle": boolean("each worker traverses its shard in a seeded random order, not "
                           "the stored one: on sorted data (contiguous ranges of a file "
                           "sorted by cluster or label) the stored order makes a slow "
                           "worker's first iterations cover one cluster, and θ is fitted "
                           "without the others", True),
        "migration": mapping("data migration between workers (keys in the table "
                             "`sync.migration` below)", None, null=True),
        "overlap": boolean("a straggler's suspension (the injected pattern: a suspended "
                           "training thread) runs on while it waits for θ after a barrier "
                           "cut it short, instead of resuming once θ came (false: the "
                           "wait adds to it)", True),
    }

    #: Nested sections of ``sync``, each declared as Keys of its own.
    SUBSECTIONS: ClassVar[dict[str, dict[str, Key]]] = {"migration": MIGRATION_KEYS}

    @staticmethod
    def check_options(o: dict[str, Any]) -> tuple[str, str] | None:
        """Cross-key rule: ``(key, expected)`` when it is broken, else None."""
        if o["interval"] == "fixed" and o["eta_ms"] is None:
            return "eta_ms", "a positive number of milliseconds (interval: fixed needs η)"
        return None

    WORKER = FSPWorker
    #: The interval adjustor is checkpointed through its own ``checkpoint_state()``.
    NESTED: ClassVar[tuple[str, ...]] = ("adjustor", "passes", "gauge")
    #: The server, under its migration port too, is no state of the policy.
    NOT_STATE: ClassVar[tuple[str, ...]] = ("server", "options", "order_port")

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        kind = options["interval"]
        extra: dict[str, Any] = {"eta_min_s": options["eta_min_ms"] / 1e3}
        if kind == "binary":
            extra["factor"] = options["factor"]
        elif kind == "multistage":
            extra.update(probe_s=options["probe_ms"] / 1e3, probes=options["probes"],
                         stage_tolerance=options["stage_tolerance"],
                         per_update=server.progress_per_update)
        self.adjustor = make_adjustor(kind, **extra)
        #: FSPV's progress on the exact objective of θ (flegel.interval.gauge), not FSPB's.
        self.gauge = Gauge.of(server, off=None if kind == "multistage" else f"the {kind} adjustor")
        self.semi = options["coordination"] == "semi"
        # no timer: a whole pass (a share, sampled) of every worker, a straggler paused at
        # _whole_bound
        self.plan = Plan(0.0, phase="calibration")
        #: FSPV's first M-step after a share of every shard (class notes: the sampled
        #: calibration).
        self.share = 1.0
        self.sampled = sampled_calibration(options, server)
        #: The sampled first pass (class notes): whether the algorithm allows it, and the
        #: share of every shard trained by the sampled iterations before the current one
        #: (the calibration's included): the next step's share.
        self.sampled_pass = self.sampled and bool(server.sampled_first_pass)
        self.trained = 0.0
        self.offsets = {r: 0.0 for r in server.ranks}
        self.signalled = False
        #: When the others are paused after a full pass (:meth:`_on_pass`), and who needs
        #: no pause then (paused at once, or the worker that made the pass).
        self.pause_at: float | None = None
        self.paused: set[int] = set()
        #: Each worker's predicted full pass (flegel.sync.passes): who is paused at the
        #: first pass, who straggles for whole passes, the typical pass.
        self.passes = PassPredictor()
        self.iter_start = 0.0
        self.eta_max_s = float("inf")
        self._mark_theta: object | None = None
        self.eta_log: list[float] = []
        self.plan_phase_done = "calibration"
        self._start_estimate = 0.0
        mig = MigrationOptions.of(options.get("migration"))
        self.balancer = Balancer(mig) if mig.mode != "off" else None
        self.order_port: OrderPort | None = None
        if self.balancer is not None:
            # The migration extension of the server it was made with (flegel.balance.ports).
            if not isinstance(server, OrderPort):
                raise TypeError(f"data migration needs a server that implements OrderPort, "
                                f"found {type(server).__name__}")
            self.order_port = server
        self._orders: dict[int, int] = {}
        #: Workers catching up on migrated points this iteration, and when each is paused
        #: (:meth:`_on_pass`: a catch-up holds no barrier).
        self._receivers: set[int] = set()
        self._catch_up_at: dict[int, float] = {}
        # Whole passes (_balanced): the algorithm's declaration, whether this iteration waits
        # for every pass, and how many did.
        self.full_batch = bool(server.full_batch_update)
        self.whole = False
        self.whole_iterations = 0
        #: Durations of the latest complete whole passes of this run of the whole-pass phase
        #: (broadcast to last arrival, no worker paused): :meth:`_whole_bound`.
        self.whole_log: list[float] = []
        # Coverage (class notes): whether θ still waits for a point never trained, the
        # barriers that kept it, when the first update came, the untrained points at the
        # latest barrier, the calibration's first pass and valid time, and the workers
        # that migration orders send points to while θ is kept.
        # Only with migration: without it the hold lasts a straggler's whole pass (notes);
        # with it there is no sampled calibration (sampled_calibration), so ``not
        # self.sampled`` cannot be false here -- kept as a guard should that rule change.
        self.cover = (bool(getattr(server, "cover_before_update", False))
                      and self.balancer is not None and not self.sampled)
        self.covered = not self.cover
        self.kept_barriers = 0
        self.covered_at_s: float | None = None
        self.unseen = 0
        self._first_pass_s = 0.0
        self._calibration_valid_s: float | None = None
        #: Target -> (its sources, points ordered to it, its n_held when first ordered).
        self._targets: dict[int, tuple[set[int], int, float]] = {}
        self._expecting: set[int] = set()
        #: When the hold began (the calibration's start), how long it may last
        #: (:meth:`_hold_cap`, set at the calibration barrier), and whether it was cut there.
        self._hold_start_s = 0.0
        self._hold_cap_s = float("inf")
        self.hold_capped = False
        #: Rank -> [points, kernel seconds, injected delay incurred, points dealt] over the
        #: hold's commits, the calibration's first: the pace the cap is taken at
        #: (:meth:`_dealt_pass`).
        self._hold_log: dict[int, list[float]] = {}
        #: Whole passes still to come after coverage (COVER_STEPS), those taken, and whether
        #: they were dropped for want of a straggler (:meth:`_straggler_hold`).
        self.cover_steps_left = 0
        self.cover_steps_taken = 0
        self.cover_steps_dropped = False
        #: The workers the calibration's bound paused with untrained points of their own
        #: shard: those a hold waits for (:meth:`_straggler_hold`).
        self.held_for: list[int] = []

    # ---------------------------------------------------------------- sending
    def instructions(self, rank: int) -> Instructions:
        eta = self.plan.eta_s
        mark = 1 if self.plan.mark else (-1 if self.plan.drop_mark else 0)
        bound = OFFSET_BOUND * eta  # η may have changed since the offsets were learnt
        offset = float(min(max(self.offsets[rank], -bound), bound))
        cover = 0
        if self.plan.phase == COVER_PHASE:
            cover = 2 if rank in self._expecting else 1
        batch = sample_batch(self.server.shard_sizes.get(rank, 0), self.share)
        return Instructions(batch=batch, cover=cover, sampled=self.plan.phase == SAMPLED_PHASE,
                            eta_s=eta if self.semi else 0.0, offset_s=offset if self.semi else 0.0,
                            mark=mark, rollback=self.plan.rollback,
                            orders=self._orders.get(rank, 0), steady=self._steady(rank))

    def _steady(self, rank: int) -> bool:
        """Whether no pause at the first pass is planned for ``rank`` (``Instructions.steady``:
        it may take BSPV's blocks, :mod:`flegel.sync.whole_blocks`): its predicted pass is
        within :data:`PASS_GRACE` times the fastest worker's (:meth:`_on_pass`'s grace is no
        shorter, but for an η under it, which a worker on course outlasts: its rest fits
        twice before its timer), and no data migration is configured (windows move between
        blocks)."""
        p = self.passes.pass_s.get(rank)
        return self.balancer is None and p is not None and p <= PASS_GRACE * self.passes.fastest()

    def broadcast(self) -> None:
        srv = self.server
        if self.plan.mark:
            self._mark_theta = srv.mark()
        if self.plan.rollback and self._mark_theta is not None:
            # FSPV's second probe restarts from the same θ as the first (Section 3.3).
            srv.rollback(self._mark_theta)
        self.gauge.follow(self.plan.mark, self.plan.rollback)  # G with θ
        self.signalled = False
        self.pause_at = None
        self.paused = set()
        self._catch_up_at = {}
        # The calibration is a whole pass (a share of it, sampled) for every algorithm
        # (class notes); later ones
        # only for a full-batch algorithm without stragglers (_balanced).
        self.whole = self.plan.phase in UNTIMED_PHASES
        # Iterations at a kept θ are counted apart (coverage.kept_barriers), not as whole
        # passes of the full-batch algorithm.
        self.whole_iterations += self.plan.phase in ("calibration", WHOLE_PHASE)
        # The sampled calibration's share of every shard (1.0: a whole pass); a step of the
        # sampled first pass trains as much again as was trained so far (class notes).
        sizes = self.server.shard_sizes
        self.share = (sample_share([sizes.get(r, 0) for r in srv.ranks], srv.sample_min_points)
                      if self.sampled and self.plan.phase == "calibration"
                      else self.trained if self.plan.phase == SAMPLED_PHASE else 1.0)
        self._start_estimate = srv.estimated_objective()
        covering = self.plan.phase == COVER_PHASE
        if covering:
            self._expecting = self._expected_targets()
        super().broadcast()
        self._orders = {}
        self.iter_start = srv.now()
        if covering:
            # Bounded from the start: a worker waiting for points sent its way commits
            # nothing until then (_cover_bound).
            # Nor past the hold's cap (keeps_theta).
            self.pause_at = self.iter_start + max(
                min(self._cover_bound(), self._hold_start_s + self._hold_cap_s - self.iter_start),
                0.0)

    def before_broadcast(self, commits: dict[int, dict[str, float]]) -> None:
        """Migration (Section 4): balance passes at barriers.  Not before a probe that marks
        or rolls back θ (rollback mode), whose roll-back must find the data where they were;
        before the other probes (:data:`~flegel.interval.multistage.PROBE_PHASES`) only a
        straggler's points move (``Balancer.while_probing``)."""
        # Who trains migrated points this iteration (:meth:`_catching_up`): the targets of
        # this barrier's orders (the windows arrive during the iteration) -- none before a
        # probe that marks or rolls back θ, which orders nothing (last barrier's receivers
        # paused in it would skew g(η)).
        self._receivers = set()
        if (self.balancer is None or self.order_port is None or self.plan.mark
                or self.plan.rollback):
            return
        srv = self.server
        # ``peers``: migration planned on the whole passes of a hold beside a fast minority
        # (Balancer.at_barrier), where the hold dropped coverage's whole passes
        # (_straggler_hold false, not capped), at the barrier after the one that ended it
        # (θ's second version: the first update came with the hold's end).  Not at the hold's
        # own barrier: its orders reach workers whose windows still take untrained points only
        # (ShardStore.unseen_first, cleared when their next iteration begins), which find none
        # and give the order up (a shortfall).  After a straggler's hold migration goes on as
        # before (its points left at the calibration barrier).
        orders = self.balancer.at_barrier(srv.now(), commits, srv.estimated_objective(),
                                          srv.target_objective, srv.time_left_s,
                                          probing=self.plan.phase in PROBE_PHASES,
                                          whole_passes=not self.covered,
                                          peers=self.cover_steps_dropped and srv.version == 2)
        for rank, messages in orders.items():
            for order in messages:
                self.order_port.order(rank, order)
                if order.kind != OrderKind.EXPECT:
                    continue
                self._receivers.add(rank)
                if not self.covered:
                    # Where untrained points go while θ is kept (coverage), from where, and
                    # how many: _expected_targets.
                    sources, points, base = self._targets.get(
                        rank, (set(), 0, srv.worker(rank).header.get("n_held", 0.0)))
                    self._targets[rank] = (sources | {order.peer}, points + order.points, base)
            self._orders[rank] = len(messages)

    # ---------------------------------------------------------------- receiving
    def on_commit(self, rank: int, header: dict[str, float], agg: dict[str, Any]) -> None:
        reason = int(header["reason"])
        # The sampled calibration's batch is its pass (class notes).
        done = reason == Reason.PASS or (reason == Reason.BATCH and self.whole)
        if done and not self.signalled:
            if self.pause_at is None and self.whole:
                # A whole pass: the others are paused only past its bound.
                self.pause_at = self.iter_start + self._whole_bound(
                    self.server.worker(rank).arrived_at,
                    self.share if reason == Reason.BATCH else 1.0)
            elif self.pause_at is None:
                self._on_pass(rank)  # a full pass ends the iteration (Section 3.3)
        super().on_commit(rank, header, agg)

    def _on_pass(self, rank: int) -> None:
        """The first full pass of an iteration, ``t_p`` after its broadcast: pause at once
        the workers that cannot finish their own pass within :data:`PASS_GRACE` · t_p (by
        their predicted pass, :class:`~flegel.sync.passes.PassPredictor`, resting on at least
        :data:`PASS_EVIDENCE` commits: stragglers), and let the others finish theirs.  Their
        own timers (η − δᵢ, semi-centralized) bound them; without timers (centralized
        coordination) the master pauses them at ``PASS_GRACE · t_p`` after the broadcast (at
        η, if sooner).

        The paper's barrier "at once" (Section 3.3) assumes every worker runs on a core of
        its own; where ranks share cores a worker of the same speed may not have run yet.
        Measured (issue 19, 4 workers and the master on 2 shared cores, ``flegel paper``'s
        K-means): a third of FSPV's iterations ended with commits like [0, 27500, 0, 0] --
        one pass of data for a whole barrier, and under FSP's incremental updates the
        other points' statistics stay as old as their last visit.  Pausing such a worker
        does not end the barrier sooner either: it commits when it next gets a core, with
        nothing; finishing its pass then costs it one pass.  A master-side pause at
        ``PASS_GRACE · t_p`` (an earlier version of this rule) still paused the workers
        whose θ arrived late, before they had run.

        One exception: a worker catching up on migrated points (:meth:`_catching_up`) is
        paused by the master at ``max(PASS_GRACE · t_p, PASS_GRACE · its own predicted
        pass)`` after the broadcast, when that comes before its timer: only the catch-up
        beyond its own pass is cut, which a timer does not cut (issue 19).
        """
        now = self.server.now()
        t_pass = max(now - self.iter_start, 0.0)
        # On the scale of the predictions too: under load every kernel time is inflated
        # alike, and a worker whose pass came in undisturbed (t_p at its kernel time) made
        # its peers' inflated predictions look like stragglers' (issue 19, FCM at a load of
        # 12: two of four workers paused at once with nothing done).
        grace = PASS_GRACE * max(t_pass, self.passes.fastest())
        eta = self.plan.eta_s
        if eta > 0:
            grace = min(grace, eta)
        # A straggler on evidence (PASS_EVIDENCE commits), as for whole passes: one kernel
        # time can be a preempted one (issue 19, at a load of 16-22: a worker whose kernel
        # was slowed in the calibration was paused at once in iteration 2, at 78% of a pass).
        late = [r for r in self.server.ranks if r not in self.pending and r != rank
                and self.passes.pass_s.get(r, 0.0) > grace
                and self.passes.evidence(r) >= PASS_EVIDENCE]
        if late:
            self.server.signal(late, Signal.PAUSE)
        self.paused.update(late)
        self.paused.add(rank)  # it committed: nothing to pause
        # Semi-centralized with η: each worker's timer ends its iteration.
        self.pause_at = math.inf if self.semi and eta > 0 else self.iter_start + grace
        # ... but not a catch-up beyond its own pass: a worker training migrated points is
        # paused at PASS_GRACE times its own predicted pass at its own point count, or at
        # the grace if later -- so a worker on a shared core that has not run yet is not
        # cut short of its own pass (the master-side pause above, removed).
        self._catch_up_at = {}
        for r in self._catching_up():
            at = self.iter_start + max(grace, PASS_GRACE * self.passes.pass_s.get(r, 0.0))
            if at < self.pause_at:
                self._catch_up_at[r] = at
        self.on_tick(now)

    def _catching_up(self) -> list[int]:
        """The workers still computing that train migrated points first (Section 4.3's
        priority queue): targets of this barrier's orders, and those whose last commit had
        points still behind in passes (``behind``, :attr:`ShardStore.n_behind`; not
        ``queued``, which counts points ahead in passes that only wait, and reactivated
        ones).

        Their pass is no pass of their own points: the queue's points are trained until
        their passes caught up, P_target − P_source visits each at the same θ, and the
        timer does not cut a pass judged short (:class:`FSPWorker`, "A late pass is
        finished") -- so the catch-up held the barrier for the interval and more while the
        others waited.  Measured (issue 19, ``python bench/paper_pairs.py --algorithm nmf
        --syncs fspv-off,fspv-async``, 4 workers on 2 cores at a load of 16): a target
        given 1,000 points 11 passes behind trained 14,000 points in one iteration of
        155 ms against 18-25 ms, 0.3-0.5 s of such iterations a run.  Paused at the grace
        (:data:`PASS_GRACE` times the first pass, or its own predicted pass if longer:
        :meth:`_on_pass`), it catches up over the next iterations,
        the queue first (Eq. 9 budgets the compensation over T/d, not one barrier).

        None in a probe that marks or rolls back θ: a pause there would skew g(η).

        Returns
        -------
        list of int
            The ranks still computing (:meth:`_running`) that are catching up.
        """
        if self.balancer is None or self.plan.mark or self.plan.rollback:
            return []
        return [r for r in self._running()
                if r in self._receivers or self.server.worker(r).header.get("behind", 0.0) > 0]

    def _running(self) -> list[int]:
        """The workers still computing: neither committed nor paused."""
        return [r for r in self.server.ranks if r not in self.pending and r not in self.paused]

    def on_tick(self, now: float) -> None:
        if self.signalled:
            return
        eta = self.plan.eta_s
        due = [r for r, at in self._catch_up_at.items() if now >= at]
        if due:
            for r in due:
                del self._catch_up_at[r]
            # Found catching up at the pass (_on_pass); its receivers are fixed for the
            # iteration and a header changes only with a commit: only "still running" is new.
            running = set(self._running())
            catching = [r for r in due if r in running]
            if catching:
                self.server.signal(catching, Signal.PAUSE)
                self.paused.update(catching)
        if self.pause_at is not None and now >= self.pause_at:
            self._pause_all()
        elif not self.semi and eta > 0 and now - self.iter_start >= eta:
            self._pause_all()

    def _pause_all(self) -> None:
        """Signal every worker still computing (not those paused or committed already)."""
        self.signalled = True
        self.server.signal(self._running(), Signal.PAUSE)

    def _balanced(self) -> bool:
        """Whether whole passes suit the next iteration (:data:`WHOLE_PHASE`): the algorithm
        declares ``full_batch_update`` and no worker is a straggler -- one whose predicted
        pass (:class:`~flegel.sync.passes.PassPredictor`, resting on at least
        :data:`PASS_EVIDENCE` commits) is beyond :data:`WHOLE_PASS_WAIT` times the typical
        worker's (the lower median: with half the workers slow, the fast half's).  Pass
        times, not speeds: a slowed worker left with few points by migration has a short
        pass, and holds no barrier back."""
        return self.full_batch and not self.passes.stragglers(WHOLE_PASS_WAIT, PASS_EVIDENCE)

    def _whole_bound(self, first_arrival: float, share: float = 1.0) -> float:
        """How long a whole pass may run, from its start, before the workers still
        computing are paused: :data:`WHOLE_PASS_WAIT` times the longest of the time its first
        pass took to arrive, the typical worker's predicted pass (a worker slower than that
        would be a straggler, :meth:`_balanced`) and the typical complete whole pass
        (:meth:`_typical_whole`).  The first arrival carries what the prediction does not --
        θ's way to the workers, their wait for a core (on 2 shared cores at a load of 12, a
        3 ms pass arrived 8-15 ms after the broadcast, and a bound of 4 pass times cut a third
        of the whole passes short) --, the typical pass what the first arrival may lack: a
        worker left with few points passes first.

        The complete whole passes carry the spread of the arrivals, which neither does: where
        ranks share cores one worker or another waits for a core in most iterations, and its
        pass arrives several first arrivals after the first.  Measured (issue 19, ``python
        bench/fsp_claims.py --only horizons --algorithms logreg``, 4 workers on 2 cores at a
        load of 1-7): a bound of 4 first arrivals paused workers mid-pass 1-6 times in the
        first 35 whole passes of each of three runs, and each such iteration took a gradient
        step instead of L-BFGS's -- about one iteration lost for the rest of a pass.
        A straggler is still paused: a whole pass it held up is no complete one, and until
        one completes the bound is as before (the calibration, where a straggler shows
        first).

        In the sampled calibration the first arrival covers ``share`` of a pass (the
        sample's), so it is scaled to a pass: a worker is paused no sooner than in a
        whole-pass calibration.  Unscaled (issue 19), a worker whose θ came late or that
        waited for a core was paused before its share, and θ¹ came from unequal shares --
        on sorted contiguous shards, from one blob less than the others
        (``tests/test_fsp_sampled.py``)."""
        return WHOLE_PASS_WAIT * max((first_arrival - self.iter_start) / share,
                                     self.passes.typical(), self._typical_whole())

    def _typical_whole(self) -> float:
        """The lower median duration of the latest :data:`WHOLE_HISTORY` complete whole
        passes (0 before any): a whole pass as long as most recent ones is no straggler's."""
        recent = sorted(self.whole_log)
        return recent[(len(recent) - 1) // 2] if recent else 0.0

    # ---------------------------------------------------------------- coverage
    def keeps_theta(self, commits: dict[int, dict[str, float]]) -> bool:
        """Coverage (class notes): keep θ while a point of the data set has never been
        trained, by the workers' COMMIT headers (:meth:`ServerPort.unseen`); once every
        point was, the carried aggregates are applied -- the first update -- and θ is never
        kept again."""
        if self.covered:
            return False
        if self.kept_barriers == 0:
            self._hold_start_s = self.iter_start  # the calibration's start
            # Who a hold would wait for: the workers the calibration's bound paused with
            # points of their own shard untrained (no point has moved yet).
            self.held_for = sorted(r for r, h in commits.items() if _untrained(h))
        for r, h in commits.items():
            log = self._hold_log.setdefault(r, [0.0, 0.0, 0.0, float(h["n_active"])])
            log[0] += h["points"]
            log[1] += h["points"] / h["rate"] if h["rate"] > 0 else 0.0
            log[2] += h["incurred_s"]
        if self.kept_barriers:
            # More of the straggler's pace (_dealt_pass); the cap is never shortened.
            self._hold_cap_s = max(self._hold_cap_s, self._dealt_pass())
        now = self.server.now()
        self.unseen = self.server.unseen()
        capped = now - self._hold_start_s >= self._hold_cap_s
        if self.unseen > 0 and not capped:
            self.kept_barriers += 1
            return True
        self.hold_capped = self.unseen > 0
        self.covered = True
        self.covered_at_s = self.server.now()
        self._targets = {}
        # Whole passes after coverage only where it kept θ (a worker could not pass in the
        # calibration's bound): migration has then left the straggler few points, and a
        # whole pass is cheap.  Covered at the calibration, every worker passed in its
        # bound; whole passes would wait for a slow one at each of them, with passes
        # equal by construction, so no migration round (tests/test_migration_*.py).  Nor
        # after a capped hold: the straggler still holds untrained points, and each whole
        # pass would wait for it up to the whole-pass bound.
        whole = bool(self.kept_barriers) and not self.hold_capped
        # ... and only where the hold waited for fewer than FAST_MINORITY of the workers
        # (_straggler_hold):
        # beside a fast minority every whole pass would be a slow worker's.
        self.cover_steps_dropped = whole and not self._straggler_hold()
        self.cover_steps_left = COVER_STEPS - 1 if whole and not self.cover_steps_dropped else 0
        return False

    def _straggler_hold(self) -> bool:
        """Whether coverage held θ for stragglers -- a minority of the workers -- rather than
        for a slow majority beside a fast minority: the workers the hold waited for
        (:attr:`held_for`: paused by the calibration's bound with points of their own shard
        untrained) are fewer than three quarters of them (:data:`FAST_MINORITY`).  Only
        then are coverage's whole passes taken (:data:`COVER_STEPS`): one straggler of two,
        three or four, two of four, as before.

        Decided once, at the barrier that ends coverage (:meth:`keeps_theta`), on the
        hold's own evidence, recorded at the calibration barrier before any point moved: who
        did not pass within the calibration's bound (:data:`WHOLE_PASS_WAIT` times the first
        arrival) is why θ was held, it is a count of workers and not a speed, and the first
        arrival itself always passed, so with two workers the hold waited for one at most
        and the whole passes are always taken.  Where it is false the barrier after the
        hold also plans a migration round on the hold's whole passes (``Balancer.at_barrier``'s
        ``peers``): the slow majority are the fast minority's peers, not stragglers, and
        their points would wait for 0.25 s of every worker's compute and FSPV's probes
        (docs/sync/fsp.md, fig16b).  Workers of ordinary speed that waited for
        a core past the bound seldom turn a case: beside one straggler of three it takes
        one more such worker for 3 of 3 held, of four two more (3 of 4), of eight five
        more; in Fig. 16b (four CPU workers 8x slower than the first arrival, twice the
        bound, 4 of 5 held) one CPU worker passing within the bound keeps the passes (3 of
        5: a cost in speed only).  Not "more than half": one straggler of three and one
        core-starved worker (2 of 3) would then drop them, on the plateau's own case
        (``tests/test_fsp_fast_worker.py``, "2-of-3").

        The whole passes were made for stragglers whose untrained points migration has
        moved away: the others are about as fast as one another, and a whole pass costs
        about one of FSPV's iterations (a straggler still holding points is paused at the
        whole pass's bound, :meth:`_whole_bound`).  Beside a fast minority each whole pass
        is a slow worker's pass and the fast workers wait through it as under BSP.
        Measured (issue 19, ``flegel paper --quick --only 16b`` on a 5-host local cluster at
        200 mbit, one worker 8x as fast as the other four; docs/benchmarks.md, "Fig. 16
        after coverage beside a fast worker"): with the 4 whole passes FSPV+opt reached
        the target in 3.86-3.97 s against FSPV's 1.85-1.91 s, without them in 2.17-2.42 s
        against 1.77-2.02 s.

        Not the balancer's straggler (``Balancer.stragglers_seen``, the previous rule):
        :data:`~flegel.balance.migration.PEER_SPEED` times the *median* worker's time per
        point recognises none where half the workers are slow, the median being a slow
        one's (one slow of two, two of four: ``tests/test_fsp_fast_worker.py``), and their
        contiguous shards then end on the +5.44 % plateau the whole passes prevent.  Nor a
        spread of predicted passes or speeds (docs/sync/fsp.md, "Tried and dropped"): each
        read 2.3-5.7x in some straggler's run on shared cores."""
        return len(self.held_for) < FAST_MINORITY * len(self.server.ranks)

    def _expected_targets(self) -> set[int]:
        """The workers told to wait for untrained points (``Instructions.cover`` 2), per
        target: those sent orders now, and those short of the points ordered to them (their
        ``n_held`` grew by less) while one of their sources still has a window in flight or
        untrained points held (only untrained points move during the hold,
        ``ShardStore.unseen_first``).  None under synchronous migration: the points land in
        ``begin``, before the iteration computes.  (Before the review every target of the
        hold's orders waited while any untrained point was anywhere off a shard.)"""
        if self.balancer is None or self.balancer.options.mode == "sync":
            return set()
        out = set()
        for target, (sources, points, base) in self._targets.items():
            if self._orders.get(target, 0) > 0:
                out.add(target)
                continue
            came = self.server.worker(target).header.get("n_held", 0.0) - base
            moving = any(h.get("in_flight", 0.0) > 0
                         or _untrained(h)
                         for h in (self.server.worker(r).header for r in sources))
            if came < points and moving:
                out.add(target)
        return out

    def _hold_cap(self) -> float:
        """How long the hold may last from the calibration's start: the longest pass of a
        shard as dealt (:meth:`_dealt_pass`: the straggler's own pass, suspensions
        included -- BSPV's first iteration) or the whole-pass bound (:meth:`_cover_bound`),
        whichever is longer.  By then BSPV would have updated θ on every point, so holding
        longer -- windows crawling on slow links -- buys nothing over BSPV's first step and
        only delays the first update (issue 19 review: on 20 kB/s links the hold lasted
        3.5 s against the straggler's 0.4 s pass).  Past the cap θ is updated on the points
        trained so far (``hold_capped``).  Set at the calibration barrier; at each kept
        barrier raised to what the hold's commits say since (:meth:`keeps_theta`)."""
        return max(self._dealt_pass(), self._cover_bound())

    def _dealt_pass(self) -> float:
        """The longest pass of a shard as dealt (``n_active`` at the calibration) at the pace
        its worker showed over the hold's commits so far: kernel time plus the injected
        delay its points incurred (the COMMIT header's ``incurred_s``: served at once or
        owed), per point trained.  0 before a worker trained a point.

        Not :class:`~flegel.sync.passes.PassPredictor`'s pass at the calibration barrier
        (the cap before), which counts the delays *served* in the commit (``slowed_s``): a
        straggler paused by the calibration's bound answers at once, and the suspension its
        last block charged is owed, served after the commit -- under FSP's overlap mostly
        in the waits for θ, which no commit reports (the worker loop's "Overlap").  Seen
        (issue 19, ``flegel paper --quick --only 11``, K-means +sync, load 11.8): 3,785
        points in 28.5 ms of kernel and next to no delay read as a 0.205 s pass against
        the injected 0.88 s (τ = 32 ms per 1,000 points), the hold was capped after one
        kept barrier with 23,715 points untrained and θ settled +6.0 % off BSPB's basin
        (``tests/test_fsp_coverage.py``, "owed suspension", on the simulated clock).  The
        calibration's elapsed time extrapolated misses the owed part just the same, and
        the kept barriers' ``slowed_s`` recover only what is served within an iteration
        (CHANGELOG).  The pace is the suspension the points cost whenever it is served.
        The injected pattern charges τ
        at each multiple of ``every`` points of the run, so the pace taken on fewer
        points falls short by up to one τ not yet due, times dealt / points (a straggler
        paused before its first ``every`` points reads as kernel time only): the raise at
        each kept barrier (:meth:`keeps_theta`) corrects it as the commits that reach the
        next multiple report it (``tests/test_fsp_coverage.py``, "suspension not yet
        due").  A one-off delay (the ``pause`` pattern) is spread over the points of its
        commit the same way, and so over the pass as dealt: an over-estimate (pausing a
        receiver 1 s raised the cap 0.42 -> 0.98 s), which costs a longer hold only where
        coverage cannot complete -- the cap ends a hold that still has points untrained.
        The mean kernel time, not the fastest (PassPredictor's, for judging speed): the
        cap is a time on the clock, as BSPV's first iteration is."""
        return max((dealt * (kernel + incurred) / points
                    for points, kernel, incurred, dealt in self._hold_log.values() if points > 0),
                   default=0.0)

    def _cover_bound(self) -> float:
        """How long an iteration at a kept θ may run before the workers still computing (or
        waiting for points) are paused: :data:`WHOLE_PASS_WAIT` times the longest of the
        calibration's first pass, the typical worker's predicted pass and the typical
        complete whole pass -- the whole-pass bound (:meth:`_whole_bound`), from the start:
        a worker waiting for points makes no first arrival."""
        return self._whole_bound(self.iter_start + self._first_pass_s)

    # ---------------------------------------------------------------- the barrier
    def after_barrier(self, commits: dict[int, dict[str, float]], agg: dict[str, Any]) -> None:
        srv = self.server
        now = srv.now()
        arrivals = {r: srv.worker(r).arrived_at for r in commits}
        first = min(arrivals.values())
        # The sampled calibration's eighth of a pass is no fastest worker's pass: one that
        # ran it alone on a core, before the others started, extrapolates to a pass several
        # times shorter than its later ones (issue 19: FCM at 350,000 rows, a 24 ms "pass"
        # against 90 ms), so the typical worker's stands for it until the next barrier.
        # (Only where a share was sampled: a declaring algorithm's calibration on shards of
        # at most SAMPLE_MIN_POINTS is a whole pass, whose fastest worker's pass is a pass.)
        # (share < 1 only in the sampled calibration and the sampled first pass's steps,
        # set at their broadcast: the same holds for each of those shares.)
        self._update_eta_max(commits, typical=self.share < 1.0)
        # A worker with nothing to train at a kept θ was not measured: it is not forgotten
        # (PassPredictor forgets a worker that committed nothing, paused before it ran).
        self.passes.observe({r: h for r, h in commits.items()
                             if h["points"] > 0 or self.plan.phase != COVER_PHASE})
        if self.semi and self.plan.eta_s > 0:
            # Signed δᵢ from each worker's response delay after its own timer (Section 5.2).
            self.offsets = learn_offsets(self.offsets, commits, arrivals, self.iter_start,
                                         self.plan.eta_s)
        # Progress on the gauge's exact objective of θ (FSPV); else on the estimated objective:
        # a first visit of a point adds its whole loss to the online objective, which is not a
        # step backwards (Server.estimated_objective).
        progress = self.gauge.progress(srv, now - self.iter_start,
                                       self.plan.phase not in UNTIMED_PHASES,
                                       self._start_estimate - srv.estimated_objective())
        obs = Observation(eta_s=self.plan.eta_s, progress=progress,
                          valid_s=first - self.iter_start, wall_s=now - self.iter_start,
                          barrier_s=now - first, eta_max_s=self.eta_max_s)
        if self.plan.phase == "calibration":
            # FSPB's η⁰ and the coverage bound, kept past the iterations at a kept θ.
            self._calibration_valid_s = obs.valid_s
            self._first_pass_s = first - self.iter_start
            if self.kept:
                self._hold_cap_s = self._hold_cap()
        # A whole pass has no interval: it ran to its last pass (the barrier's last report).
        # A sampled step is neither (no η, no pass): left out (mean_eta_ms, event's eta_ms).
        if self.plan.phase != SAMPLED_PHASE:
            self.eta_log.append(max(arrivals.values()) - self.iter_start if self.whole
                                else self.plan.eta_s)
        if self.plan.phase == WHOLE_PHASE and not self.signalled:
            # A complete whole pass (nobody paused): it bounds the next ones (_whole_bound).
            # Not the calibration, whose pass may include warm-up and a straggler's start.
            self.whole_log = (self.whole_log + [self.eta_log[-1]])[-WHOLE_HISTORY:]
        # The sampled first pass goes on where every worker trained its whole share (none
        # paused at the bound: no straggler) and the next share -- as much as trained so far,
        # this iteration's included -- keeps the total within SAMPLED_FIRST_PASS.
        shares = (self.sampled_pass and self.plan.phase in ("calibration", SAMPLED_PHASE)
                  and self._whole_shares(commits))
        if shares and 2.0 * (self.trained + self.share) <= SAMPLED_FIRST_PASS + 1e-9:
            # The sampled first pass (class notes): another share of every shard.
            self.trained += self.share
            self.plan = Plan(0.0, phase=SAMPLED_PHASE)
        elif self.plan.phase == SAMPLED_PHASE and shares:
            # ... and ends with a whole pass: every worker's untrained rest, and its sampled
            # points again, at θ (a Lloyd step on all the data), as the calibration's pass.
            self.plan = Plan(0.0, phase=WHOLE_PHASE)
        elif self.kept:
            # Coverage: θ was kept, the next iteration trains the points never trained.
            self.plan = Plan(0.0, phase=COVER_PHASE)
        elif self.cover_steps_left > 0:
            # Coverage's first updates are whole passes: Lloyd steps on all the data.
            self.cover_steps_left -= 1
            self.cover_steps_taken += 1
            self.plan = Plan(0.0, phase=WHOLE_PHASE)
        elif self._balanced():
            if self.plan.phase != WHOLE_PHASE:
                # A new run of whole passes: the last one's durations are stale (a straggler
                # turned them off since).
                self.whole_log = []
            # Whole passes (WHOLE_PHASE); a mark left by rolled-back probes is dropped.
            self.plan = Plan(0.0, drop_mark=self.plan.phase in ("probe1", "probe2"),
                             phase=WHOLE_PHASE)
        elif self.plan.phase in UNTIMED_PHASES:
            # The adjustor (re)starts from this iteration's measurements.
            eta0 = (self.options["eta_ms"] / 1e3 if self.options["eta_ms"] is not None
                    else self._first_interval(commits, obs))
            self.plan = self.adjustor.start(eta0, self.eta_max_s)
        else:
            self.plan = self.adjustor.observe(obs)
        # G(θ) for the next iteration, whose wall time is at least its η or a pass
        self.gauge.prime(srv, self.plan.phase not in UNTIMED_PHASES,
                         min(self.plan.eta_s, self.eta_max_s))

    def _whole_shares(self, commits: dict[int, dict[str, float]]) -> bool:
        """Whether every worker trained its whole sampled share this iteration (none paused
        at the bound) and none is predicted slow -- a pass beyond :data:`SAMPLED_PASS_WAIT`
        times the typical worker's, on this commit alone: each sampled step waits for every
        share, and Fig. 7's straggler (τ = 32 ms per 1,000 points) trained its share within
        the calibration's bound in 3 of 5 runs of ``python bench/basin_runs.py`` on a loaded
        host, where a sampled step then waited for its eighth again (about 110 ms).  A worker
        whose shard size the master does not know gets no batch (``sample_batch(0, share)``
        is 0: a whole pass, Reason.PASS): the sampled pass ends there, as for a straggler."""
        # This commit's compute time (injected delays included), not PassPredictor's pass:
        # its fastest recent kernel hid a worker slowed since the calibration for up to
        # PASS_HISTORY commits (30x from the second share: a sampled step waited 66 ms for
        # the straggler's quarter, tests/test_fsp_sampled_pass.py).
        per = sorted(h["n_active"] * h["compute_s"] / max(h["points"], 1) for h in commits.values())
        return (self.share < 1.0 and all(int(h["reason"]) == Reason.BATCH for h in commits.values())
                and per[-1] <= SAMPLED_PASS_WAIT * per[(len(per) - 1) // 2])

    def _first_interval(self, commits: dict[int, dict[str, float]], obs: Observation) -> float:
        """η⁰ after the calibration iteration.

        FSPB: the calibration's valid time (a full pass of the fastest worker, Section 3.3).
        FSPV with interleaved probes: BSPV's interval, whose barrier -- one round trip φ₀
        measured as BSPV measures it -- takes :data:`FIRST_OVERHEAD` of the iteration,
        ``η⁰ = φ₀ (1 − ρ)/ρ``: FSPV then starts where BSPV ends its own calibration, and
        probes from there (issue 19: the paper's probes made FSPV's start cost more than
        BSPV's).
        """
        if self.options["interval"] != "multistage" or self.options["probes"] != "interleaved":
            # The calibration's after iterations at a kept θ (coverage), whose passes are
            # of untrained points only; after the calibration or whole passes, their own.
            if self.plan.phase == COVER_PHASE and self._calibration_valid_s is not None:
                return self._calibration_valid_s
            return obs.valid_s
        latency = sorted(h["latency_s"] for h in commits.values())[len(commits) // 2]
        phi0 = round_trip_s(latency, self.apply_s)
        return phi0 * (1.0 - FIRST_OVERHEAD) / FIRST_OVERHEAD

    def _update_eta_max(self, commits: dict[int, dict[str, float]],
                        typical: bool = False) -> None:
        """The longest useful η: a full pass of the fastest worker (Section 3.3), in the
        wall time the worker took for its points (``compute_s`` less injected sleeps).

        Not in pure kernel time (``rate``): a pass also costs the blocks' polls, the
        runtime's per-block work and, where ranks share cores, the time the worker waits
        for one.  Measured (issue 19, 4 workers on 2 cores, ``flegel paper``'s logistic
        regression) a pass of 1.3 ms of kernel time took 3-5 ms, and capping η at the kernel
        time held FSPV's interval below the barrier's own cost (workers computed 8% of the
        time); an η past the pass costs nothing, as the pass itself calls the barrier.
        This is a time on the clock, for an interval; how fast each worker is -- who is a
        straggler -- is judged on kernel time and injected delays instead
        (:class:`~flegel.sync.passes.PassPredictor`), where a wait for a core is no slowness.
        """
        passes = [h["n_active"] * max(h["compute_s"] - h.get("slowed_s", 0.0), 0.0)
                  / h["points"] for h in commits.values()
                  if h["points"] > 0 and h["n_active"] > 0 and h["compute_s"] > 0]
        passes = sorted(p for p in passes if p > 0)
        if passes:
            # typical (after the sampled calibration, see after_barrier): the lower median,
            # PassPredictor.typical's rule -- with half the workers slow, the fast half's
            self.eta_max_s = float(passes[(len(passes) - 1) // 2] if typical else passes[0])

    def event(self, commits: dict[int, dict[str, float]], cost: float,
              spread: float) -> dict[str, Any]:
        ev = super().event(commits, cost, spread)
        ev["eta_ms"] = (round(self.eta_log[-1] * 1e3, 4)
                        if self.eta_log and self.plan_phase_done != SAMPLED_PHASE else None)
        ev["phase"] = self.plan_phase_done
        if self.cover and self.plan_phase_done in ("calibration", COVER_PHASE):
            # Coverage: the points never trained at this barrier, and whether θ was kept.
            ev["unseen"] = self.unseen
            ev["theta_kept"] = self.kept
        if self.semi:
            ev["offsets_ms"] = [round(self.offsets[r] * 1e3, 4) for r in sorted(commits)]
        if self.balancer is not None:
            ranks = sorted(commits)
            ev["workers"]["held"] = [int(commits[r]["n_held"]) for r in ranks]
            ev["workers"]["in_flight"] = [int(commits[r]["in_flight"]) for r in ranks]
        return ev

    def barrier(self) -> None:
        self.plan_phase_done = self.plan.phase
        super().barrier()

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        etas = np.asarray(self.eta_log[1:] or [0.0])
        out.update(interval=self.options["interval"], coordination=self.options["coordination"],
                   final_eta_ms=self.plan.eta_s * 1e3, mean_eta_ms=float(etas.mean() * 1e3),
                   eta_history_ms=[e * 1e3 for e in self.adjustor.history])
        if self.full_batch:
            out["whole_pass_iterations"] = self.whole_iterations
        if self.cover:
            out["coverage"] = {"kept_barriers": self.kept_barriers,
                               "first_update_s": self.covered_at_s,
                               "hold_capped": self.hold_capped,
                               "hold_cap_s": (self._hold_cap_s if self.kept_barriers
                                              else None),
                               "whole_passes": self.cover_steps_taken,
                               "whole_passes_dropped": self.cover_steps_dropped,
                               "held_for": self.held_for}
        out.update(self.adjustor.summary())  # FSPV: stages, stage_refits; FSPB: search_rounds
        out.update(self.gauge.summary())
        if self.balancer is not None:
            out["migration"] = {"mode": self.balancer.options.mode,
                                "virtual": self.balancer.options.virtual,
                                **self.balancer.summary()}
        return out
