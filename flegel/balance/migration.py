"""FSP data migration (FSP paper Section 4.3): the master's balancer and the worker's migrator.

Under FSP fast workers no longer wait, so a straggler's data lag behind in traversal passes
(Section 4.1).  Migration moves data from workers behind to workers ahead so that every
point is trained about as often.

Master side, :class:`Balancer` (called by the FSP master policy at every barrier):

* record every worker's points N, speed V (seconds per point, straggler delays included:
  they are what makes it slow), passes P and fixed cost per pass A (its pass time on the
  wall clock less V·N: under FSP a pass ends the iteration, and the wait for θ is paid
  however few points a worker holds; :meth:`Balancer.fixed_cost`)
  (:class:`~flegel.balance.monitor.WorkerStat`);
* when Eq. 8 fails (some |Pᵢ − mean P| > ε), start a balancing cycle of ``rounds`` = d
  rounds, each lasting T/d; before each round plan the moves with Eq. 9
  (:func:`~flegel.balance.planner.plan_round`) and send each source an order;
* the remaining time T (Section 3.3) is ``|f − f_target| / g`` when the job has a target
  objective, g being the slope of the estimated objective over the last barriers; without a
  target (the paper's case is a convergence test whose end is unknown) we take T = the
  training time so far (the run is assumed to last as long again), or the time left under
  ``stop.max_time_s`` when set (the run's end is then known: planning on the time so far
  made the first rounds, 0.1 s into a 10 s run, equalize passes within 25 ms, and a
  straggler gave away all but 344 of its 25,000 points, to be over-trained 1.8x for the
  rest of the run; issue 19).  A cycle ends after d rounds or once Eq. 8 holds.
* virtual migration (last paragraph of Section 4.3): when a move would send points from j to
  i while i still holds inactive copies of points it sent to j, j is told to *return* them:
  it deactivates its copies and sends i their ids, per-point state and visits -- never the
  features -- and i takes them up again.  ``bytes_moved`` counts only features and labels;
  the state sent back is counted apart (``state_bytes``).

The orders and the worker-to-worker messages are the typed records of
:mod:`flegel.protocol` (:class:`~flegel.protocol.MigrationOrder`, :class:`~flegel.protocol.Window`,
:class:`~flegel.protocol.Shortfall`, :class:`~flegel.protocol.Reactivate`,
:class:`~flegel.protocol.Fin`); each side reaches the runtime through the ports of
:mod:`flegel.balance.ports`.

Worker side, :class:`Migrator` (called by the FSP worker policy between blocks, while
waiting for θ, and at stop):

* ``async`` (the paper's): a source selects its points bottom-up just behind its traversal
  cursor (Fig. 3), one window of ``window`` points at a time; only the current window is
  locked out of local training; windows travel with their per-point state as nonblocking
  point-to-point messages, polled between blocks, never spun on.  The target admits each
  window into its priority queue (:meth:`flegel.runtime.store.ShardStore.admit`): migrated points
  are trained first until their passes caught up, then count as native.
* ``sync`` (the paper's comparison, Section 6 "up to 35.9% worse"): the orders come with the
  barrier's θ and both sides move all the points before the next iteration starts.
* At stop, every worker tells every other how many windows it sent; each drains what is
  still in flight, so every point ends on exactly one worker before the final evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from flegel import validation
from flegel.balance.monitor import (
    DEFAULT_EPSILON,
    SuperWorker,
    Tolerance,
    WorkerStat,
    group,
    imbalanced,
)
from flegel.balance.planner import DEFAULT_ROUNDS, Move, eq9_delta, pass_time, plan_round
from flegel.balance.ports import MigrationPort
from flegel.protocol import (
    Fin,
    MigrationOrder,
    OrderKind,
    Points,
    Reactivate,
    Shortfall,
    Window,
)

#: Migration modes of ``sync.migration.mode``.
MODES = ("off", "async", "sync")
#: Points per window by default: about 220 KiB of 28 float64 features, sent in well under a
#: millisecond on a local network, small enough that little is locked out of training.
DEFAULT_WINDOW = 1024

#: A move is sent in at most this many windows (:meth:`Migrator.window_size`): enough that
#: the target trains the first while the others travel.
WINDOWS_PER_MOVE = 4

#: The keys of ``sync.migration`` (FSP only), declared once.
KEYS: dict[str, validation.Key] = {
    "mode": validation.choice("data migration (FSP paper Section 4): off; async, windows sent "
                          "while training goes on (Section 4.3); sync, every point moved at "
                          "the barrier before the next iteration", MODES, "async"),
    "virtual": validation.boolean("the source keeps the points it sent, inactive, and takes "
                              "them up again when balance needs them back (no data sent "
                              "back)", True),
    "epsilon": validation.number("ε of Eq. 8: migrate when some worker's passes differ from "
                             "the mean by more than this", DEFAULT_EPSILON, lo=0, hi=1),
    "rounds": validation.integer("d: the remaining time T is split into d rounds, re-planned "
                             "before each (Section 4.2)", DEFAULT_ROUNDS, lo=1),
    "window": validation.integer("points per window of asynchronous migration at least "
                             "(only the windows being sent are locked out of training; a "
                             f"move goes in about {WINDOWS_PER_MOVE} windows, fewer points "
                             "each when few are left; one in flight per target)",
                             DEFAULT_WINDOW, lo=1),
}
#: Barriers of objective samples the progress slope g is fitted on.
SLOPE_SAMPLES = 8
#: Seconds of a worker's compute its speed V is measured over (the most recent barriers
#: that cover them, at least :data:`MIN_HISTORY`): a count of barriers would not do, as
#: FSPV's barriers may be 1 ms apart, with a fraction of it computed on shared cores.
SPEED_WINDOW_S = 0.25
#: At most this many barriers of speed history per worker (bounds the cost per barrier).
SPEED_BARRIERS = 512
#: Barriers of speed history before the first plan: one flexible-barrier iteration's speed is
#: noise (the calibration iteration even ends at the fastest worker's first pass).
MIN_HISTORY = 4
#: ... and seconds of compute that history must cover on every worker: FSPV's first
#: barriers come milliseconds apart, when a rank that started late (imports, kernel
#: compilation) looks like a straggler.  Measured: planning on them moved a fast worker's
#: whole shard away in the first round.
MIN_SPEED_S = 0.01
#: Points a source keeps whatever the orders: enough to measure its speed and to be given
#: work back when it recovers, few enough that a straggler 100x slower than the others still
#: ends a pass about as soon as they do (keeping a whole window, 1,024 points, left a
#: straggler 60x slower 6x behind in passes) -- unless even these keep its pass beyond
#: Eq. 8's relative threshold of the others' (:meth:`Balancer.floor`).
MIN_KEPT = 64
#: Points a source keeps in any case: a worker with none has no speed to measure and no
#: passes, is left out of the pairing (:func:`~flegel.balance.planner.pair`) and could never
#: be given work back.
LAST_KEPT = 1
#: Wall-clock seconds (server time) a worker's pass log must cover, besides more than
#: :data:`MIN_HISTORY` barriers, before its fixed cost per pass is measured
#: (:meth:`Balancer.clock_long`); the same 0.25 s as :data:`SPEED_WINDOW_S`, which counts
#: seconds of compute instead.
SETTLE_S = 0.25
#: Seconds of barriers (at most :data:`SPEED_BARRIERS`) a worker's pass time on the wall
#: clock is measured over, at its current point count (:meth:`Balancer.fixed_cost`): an
#: injected straggler's suspensions come in bursts (τ = 32 ms every 1,000 points, every
#: 15-80 passes of a straggler holding 12-65 points), and a window of several bursts reads
#: its pass time within a few percent.
PASS_WINDOW_S = 1.0
#: A move smaller than this fraction of the points its source or its target holds (the
#: smaller of the two) is dropped: it changes neither's pass time by much, and every move
#: costs a round of catching up.  Relative, so that a straggler holding a few points can
#: still be given a few back (an absolute floor of a quarter window left a straggler that
#: gave too much away 1.5x ahead in passes).
MIN_MOVE_FRACTION = 0.05
#: Once passes are many, Eq. 8's threshold grows to this fraction of the mean passes: the
#: timing noise of shared cores grows with the passes, and moving data to chase it costs more
#: than it gives (measured: without stragglers, a fixed ε = 1 moved 40% of the data for a run
#: 1.9x slower).  The issue's balance target reads the same way (ε, or 10% of the mean).
RELATIVE_EPSILON = 0.1
#: Hysteresis (issue 19): a worker that received points in a round may send only once it has
#: become this much slower (its seconds per point × (1 + this)) than when it received, and a
#: worker that sent may receive only once it has become this much faster.  Without it, the
#: fast workers of a shared 2-core machine, whose speeds wander by tens of percent, passed a
#: straggler's points on and back: 60% of the moves of a 10 s run (100k x 28, worker 1
#: slowed) were of points that had moved before, and the bytes moved reached 1.1-1.8x the
#: data in 30 s.
SPEED_CHANGE = 0.5
#: Plans a role holds: a worker given one in plan k keeps it in plan k + 1 (unless its
#: speed changed by :data:`SPEED_CHANGE`).  Plans, not rounds: a plan whose every move the
#: lock held back is no round, and a lock counted in rounds would then hold for ever.
LOCK_ROUNDS = 1
#: A source sends at most this share of its points per round, all its moves together, unless
#: it is a straggler (:meth:`Balancer.keep_some`): the speeds of the others wander on shared
#: cores, and Eq. 9 on a short split moved nearly all of a worker's points after a burst of
#: load (issue 19: 106,362 of 112,000 points at 20 s of a 30 s run, the worker then trained
#: its 5,569 points 920 times while the others trained theirs 140-412 times).  A straggler
#: (slower than that) may give away all it must.
PEER_SHARE = 0.25
#: A straggler is this many times slower than the median worker, at several barriers in a
#: row (:data:`STRAGGLER_BARRIERS`): an
#: injected straggler (τ = 32 ms per 1,000 points) is ~30x slower; under bursts of load from
#: other processes fast workers looked 2-4x slower than another and gave away 111,000-
#: 131,000 of their ~135,000 points in one round (issue 19, 400k points, load average 14-16).
PEER_SPEED = 4.0
#: ... at this many barriers in a row (:meth:`Balancer.straggler`): as many as the speed
#: history holds at least, so a burst of load must last as long as the smoothing window to
#: pass for a straggler.
STRAGGLER_BARRIERS = MIN_HISTORY
#: Speeds and point counts of one super worker's members are within this factor (1 + it) of
#: each other (:meth:`Balancer.supers`).
GROUP_SPREAD = 0.5
#: A peers' round right after a coverage hold (:meth:`Balancer.at_barrier`'s ``peers``) needs
#: the fast minority still ahead on the barrier it is planned at: the median worker's seconds
#: per point (``compute_s / points``, injected delays included) at least this many times the
#: fastest worker's (:func:`fast_minority_now`).  The hold's evidence is one calibration pass,
#: and on shared cores a worker that had a core to itself then passed 5x faster than the
#: others and was equal a barrier later: the round moved a quarter of three peers' points to
#: it, and the moves back waited 0.3 s for the ordinary gates (issue 19, fig16b's review).
#: Fig. 16b's GPU-like worker is 8x ahead throughout.
PEERS_LEAD = 2.0



def lower_median(values: Iterable[float]) -> float | None:
    """The lower median of ``values`` (None for none): of an even count the smaller middle
    value, a worker's own figure and never an average of two -- the balancer's typical
    worker."""
    v = sorted(values)
    return v[(len(v) - 1) // 2] if v else None


def fast_minority_now(commits: dict[int, dict[str, float]]) -> bool:
    """Whether this barrier's commits still show a fast minority (:data:`PEERS_LEAD`): the
    median worker's seconds per point, its lower median, at least ``PEERS_LEAD`` times the
    fastest's, over the workers that processed points."""
    per = [h["compute_s"] / h["points"] for h in commits.values() if h["points"] > 0]
    return len(per) >= 2 and (lower_median(per) or 0.0) >= PEERS_LEAD * min(per)

@dataclass
class MigrationOptions:
    """The validated ``sync.migration`` section (its defaults are :data:`KEYS`' only)."""

    mode: str
    virtual: bool
    epsilon: float
    rounds: int
    window: int

    @classmethod
    def of(cls, section: dict[str, Any] | None) -> MigrationOptions:
        """From the validated section (its defaults filled by :data:`KEYS`)."""
        return cls(**{**validation.defaults(KEYS), **(section or {})})


def payload_bytes(payload: Points) -> int:
    """Bytes of features and labels in a window (what migration costs the network)."""
    y = payload.get("y")
    return int(np.asarray(payload["x"]).nbytes + (0 if y is None else np.asarray(y).nbytes))


def state_bytes(payload: Points) -> int:
    """Bytes of per-point state, ids and visits travelling with points."""
    arrays = [payload["ids"], payload["visits"], *payload["state"].values()]
    return int(sum(np.asarray(a).nbytes for a in arrays))


# =============================================================================== master side
@dataclass
class Balancer:
    """The FSP master's side of migration: monitor at every barrier, plan rounds, send orders.

    Parameters
    ----------
    options : MigrationOptions
    """

    options: MigrationOptions
    round_end: float | None = None   # server time the current round ends (None: no cycle)
    round_k: int = 0
    rounds: int = 0                  # rounds planned over the run
    #: Plans made (rounds, and plans whose moves were all kept back): the hysteresis counts
    #: in these, so that a lock expires though the move it holds back leaves no round.
    plans: int = 0
    #: Server time before which no plan is tried again after a plan that moved nothing (as
    #: a round's ``round_end``), and the stragglers then: a straggler found since does not
    #: wait for it.  (Immutable default: see :attr:`stragglers_seen`.)
    quiet_until: float | None = None
    quiet_for: frozenset[int] = frozenset()
    ordered: int = 0                 # points ordered to move
    returned: int = 0                # points ordered back by virtual migration
    parked: dict[tuple[int, int], int] = field(default_factory=dict)  # (origin, holder)
    samples: list[tuple[float, float]] = field(default_factory=list)
    speed: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    #: Per rank, its last role in a planned move (+1 received, -1 sent), its speed V
    #: (s/point) then and the plan (:attr:`plans`): the hysteresis of :meth:`reversal`.
    roles: dict[int, tuple[int, float, int]] = field(default_factory=dict)
    held_back: int = 0               # moves dropped by the hysteresis
    #: Per rank, consecutive barriers at which it was PEER_SPEED x slower than the median
    #: worker (a straggler; see note_stragglers and keep_some).
    slow_streak: dict[int, int] = field(default_factory=dict)
    #: Ranks recognised as stragglers at some barrier (:meth:`peers_measured`: moves to or
    #: from them need no long speed history).  Immutable, so that a balancer checkpointed
    #: before it existed resumes with the class's empty default.
    stragglers_seen: frozenset[int] = frozenset()
    #: Per rank, the point count and the (server time, passes, points processed so far) of
    #: its barriers since the count last changed by more than :data:`MIN_MOVE_FRACTION`
    #: (:meth:`fixed_cost`).  None (immutable) for the same reason as
    #: :attr:`stragglers_seen`.
    pass_clock: dict[int, tuple[int, list[tuple[float, float, float]]]] | None = None
    #: Per rank, the fixed cost per pass last measured (s), kept while a new count is
    #: measured: the wait for θ does not change with the points (:meth:`fixed_cost`).
    fixed: dict[int, float] | None = None
    #: Barriers of evidence the latest plan asked for (:meth:`at_barrier`: 1 on whole
    #: passes).
    evidence: int = MIN_HISTORY
    #: Per rank, the point count its :attr:`fixed` was measured at (:meth:`clock_settled`).
    fixed_at: dict[int, int] | None = None
    #: Per rank, the seconds of its last commit besides its kernel and injected delays (the
    #: loop's overhead per iteration; :meth:`floor`).
    loop_s: dict[int, float] | None = None

    def stats(self, commits: dict[int, dict[str, float]],
              now: float | None = None) -> list[WorkerStat]:
        """Eq. 8's statistics from the commits of one barrier (at server time ``now``; None:
        no fixed cost per pass is measured).

        V is smoothed: seconds over points summed over the last barriers that cover
        :data:`SPEED_WINDOW_S` of compute, since one flexible-barrier iteration holds few
        blocks and its time is noisy.  A, the fixed cost per pass, is :meth:`fixed_cost`'s.
        """
        out = []
        for r, h in sorted(commits.items()):
            hist = self.speed.setdefault(r, [])
            hist.append((h["compute_s"], h["points"]))
            del hist[:-SPEED_BARRIERS]
            while len(hist) > MIN_HISTORY and sum(c for c, _ in hist[1:]) >= SPEED_WINDOW_S:
                del hist[0]
            seconds = sum(c for c, _ in hist)
            points = sum(p for _, p in hist)
            v = max(seconds, 1e-9) / max(points, 1.0)  # no points yet: as slow as it gets
            n, p = int(h["n_active"]), float(h["passes"])
            rate = h.get("rate", 0.0)
            if rate > 0:
                if self.loop_s is None:
                    self.loop_s = {}
                self.loop_s[r] = max(h["compute_s"] - h.get("slowed_s", 0.0)
                                     - h["points"] / rate, 0.0)
            moving = h.get("in_flight", 0) > 0 or h.get("queued", 0) > 0
            a = 0.0 if now is None else self.fixed_cost(r, now, n, p, v, h["points"], moving)
            out.append(WorkerStat(rank=r, n=n, v=v, p=p, a=a))
        return out

    def fixed_cost(self, rank: int, now: float, n: int, passes: float, v: float,
                   points: float = 0.0, moving: bool = False) -> float:
        """A, the seconds a pass of ``rank`` costs besides its points (FSP paper §4.2's pass
        time is V·N; see :mod:`flegel.balance.planner`, "A fixed cost per pass"): the wall
        clock it took to process N points, over the last :data:`PASS_WINDOW_S` of barriers
        at its current point count, minus V·N; 0 when that is negative.  ``points``: the
        points processed in this barrier's commit; ``moving``: the commit shows points in
        flight or queued (catching up).

        Under FSP a worker's full pass ends its iteration, and it waits for the next θ
        whatever its points: a worker holding few points passes at most once an iteration,
        and an injected straggler's suspension (τ = 32 ms every 1,000 points) takes whole
        iterations from it however few points it holds.  Its V·N, compute only, says
        neither.  Measured (issue 19, overlapping workload, 30 s): Eq. 9 on V·N left the
        straggler ~70 points, whose V·N equalled the others' compute per pass, and they were
        trained 2,896 times against 4,356 (the others' pass was their compute and a wait).

        The pass time is ``N · span / Σ points processed``, not ``span / passes gained``: a
        worker that received points trains them first and its cursor's passes stop meanwhile
        (:meth:`flegel.runtime.store.ShardStore.admit`), and counting that catching up as a
        fixed cost made a straggler that recovered look slow again (issue 19 review: its A
        read 10 ms over 3,481 points while catching up; ``tests/test_migration_fixed_cost.py``).
        For the same reason a barrier
        whose commit shows points in flight or queued restarts the measurement: the pass
        time is measured once the points settled.  A window in which the cursor did not
        move at all measures nothing (the last A holds).

        The wall clock is measured at one point count (a change beyond
        :data:`MIN_MOVE_FRACTION` starts a new measurement), over more than
        :data:`MIN_HISTORY` barriers and :data:`SETTLE_S` (:meth:`clock_settled`); until
        then the last A measured holds (0 at first: the paper's model).  The wait for θ is
        the iteration's, not the points', so it carries over to the new count.
        """
        if self.pass_clock is None:
            self.pass_clock = {}
        if self.fixed is None:
            self.fixed = {}
        if self.fixed_at is None:
            self.fixed_at = {}
        count, log = self.pass_clock.get(rank, (n, []))
        if (moving or abs(n - count) > MIN_MOVE_FRACTION * max(n, count)
                or (log and len(log[0]) < 3)):  # (time, passes) pairs: checkpointed before
            count, log = n, []
        log.append((now, passes, (log[-1][2] if log else 0.0) + points))
        del log[:-SPEED_BARRIERS]
        while len(log) > MIN_HISTORY and now - log[1][0] >= PASS_WINDOW_S:
            del log[0]
        self.pass_clock[rank] = (count, log)
        span, gained, done = now - log[0][0], passes - log[0][1], log[-1][2] - log[0][2]
        if self.clock_long(log) and gained > 0 and done > 0 and n > 0:
            self.fixed[rank] = max(n * span / done - v * n, 0.0)
            self.fixed_at[rank] = count
        return self.fixed.get(rank, 0.0)

    @staticmethod
    def clock_long(log: list[tuple[float, float, float]]) -> bool:
        """Whether a pass log (:attr:`pass_clock`) is long enough to measure a pass time on:
        more than :data:`MIN_HISTORY` barriers covering :data:`SETTLE_S` of wall clock."""
        return len(log) > MIN_HISTORY and log[-1][0] - log[0][0] >= SETTLE_S

    def clock_settled(self, rank: int) -> bool:
        """Whether ``rank``'s fixed cost per pass was measured at its current point count
        (:meth:`fixed_cost`).  A long log is not enough: a worker catching up on points it
        received does not advance its passes, measures nothing, and would keep the A of its
        old count (issue 19 review: a recovered straggler given 3,438 points kept the A of
        its 360, looked fast, and was given 4,140 more, sent away again 1.5 s later)."""
        count, _ = (self.pass_clock or {}).get(rank, (0, []))
        return (self.fixed_at or {}).get(rank) == count

    def clocks_settled(self, ranks: Iterable[int] | None = None) -> bool:
        """Whether the fixed costs per pass agree in age: none measured yet (every A is 0,
        the paper's model), or every worker's measured at its current point count.

        A worker whose count changed keeps the A of its old count until measured again, and
        one measured at another count set against the others' is what made points go back to
        a straggler on the simulated clock: left with 65 points, its A (still 0, never
        measured) made its pass look 3x shorter than the others' (their A, the wait for θ,
        measured), and a round gave it 90 points back, to be sent away again 0.4 s later.
        """
        return not self.fixed or all(self.clock_settled(r) for r in
                                     (self.speed if ranks is None else ranks))

    def remaining_time(self, now: float, objective: float, target: float | None,
                       time_left: float | None) -> float:
        """T of Section 3.3 (see the module docstring for the choice without a target)."""
        self.samples = (self.samples + [(now, objective)])[-SLOPE_SAMPLES:]
        t_rem = now
        if target is not None and len(self.samples) >= 2:
            ts, fs = np.array(self.samples).T
            slope = float(np.polyfit(ts - ts[0], fs, 1)[0]) if np.ptp(ts) > 0 else 0.0
            if slope < 0 and objective > target:
                # Never below the time trained so far: the objective falls fastest first,
                # so early slopes promise the target within milliseconds, and with a T that
                # short Eq. 9 (and its fallback) moves half of a worker's data to close a
                # gap of noise.  Measured: rounds planned on T of 4-15 ms moved whole
                # shards between workers of equal speed.
                t_rem = max((objective - target) / -slope, now)
        if time_left is not None:
            t_rem = min(t_rem, time_left) if target is not None else time_left
        return max(t_rem, 0.0)

    def at_barrier(self, now: float, commits: dict[int, dict[str, float]], objective: float,
                   target: float | None, time_left: float | None, probing: bool = False,
                   whole_passes: bool = False,
                   peers: bool = False) -> dict[int, list[MigrationOrder]]:
        """Plan at a barrier; return the orders for each rank (empty: nothing to do).

        ``probing``: the next iteration measures FSPV's g(η) (Section 3.3); only a
        straggler's points move then (:meth:`while_probing`).  ``whole_passes``: the speeds
        come from whole passes (FSP's calibration and coverage: each worker measured over
        its pass, or the straggler over the pass's bound), not from FSPV's first barriers
        milliseconds apart, so one barrier is evidence enough -- of speed history
        (:data:`MIN_HISTORY`, :data:`MIN_SPEED_S`) and of slowness (:meth:`straggler`) --
        and the points no worker has trained wait for this round (issue 19).

        ``peers``: the barrier that ends a coverage hold beside a fast minority (FSP's
        ``FSP._straggler_hold`` false: Fig. 16b's one fast worker of five): every worker's
        speed comes from a whole pass of its own shard (the calibration's and the hold's),
        so points may move between peers on this one barrier -- without
        :meth:`peers_measured`'s :data:`SPEED_WINDOW_S` of compute and though FSPV probes
        next -- and the round is not kept back by a quiet spell; where this barrier's
        commits still show the fast minority ahead (:func:`fast_minority_now`), else the
        ordinary gates apply.  Each source still sends at most :data:`PEER_SHARE` of its
        points.  Beside a fast minority the slow majority
        are no stragglers (the median worker is one of them), so their points otherwise
        waited for the fast worker's 0.25 s of compute and the probes' end: 1.1-1.8 s into
        Fig. 16b's runs, against a first update at 0.8-1.2 s (issue 19, fig16b).
        """
        peers = peers and fast_minority_now(commits)
        self.evidence = 1 if whole_passes or peers else MIN_HISTORY
        opts = self.options
        T = self.remaining_time(now, objective, target, time_left)
        stats = self.stats(commits, now)
        self.note_stragglers(stats)
        if probing and not peers and not any(self.straggler(s.rank) for s in stats):
            return {}
        if self.round_end is not None and now < self.round_end:
            return {}
        if (not peers and self.quiet_until is not None and now < self.quiet_until
                and {s.rank for s in stats if self.straggler(s.rank)} <= self.quiet_for):
            return {}
        if min(len(h) for h in self.speed.values()) < self.evidence:
            return {}
        if (not (whole_passes or peers)
                and min(sum(c for c, _ in h) for h in self.speed.values()) < MIN_SPEED_S):
            return {}
        if any(h["in_flight"] > 0 or h["queued"] > 0 for h in commits.values()):
            # The last round's points are still moving or catching up: a worker's passes
            # say little until they settle, and planning on them moves data back and forth.
            return {}
        if not self.clocks_settled(commits):
            return {}  # a pass time not yet measured at the worker's new point count
        if T <= 0 or not math.isfinite(T):
            return {}
        if not self.imbalanced_at_end(stats, T):
            self.round_end, self.round_k = None, 0  # balanced (Eq. 8): the cycle ends
            return {}
        if self.round_k >= opts.rounds:
            self.round_k = 0  # a new cycle
        paired = [s for s in stats if not self.idle(s, stats)]
        moves = self.keep_some(plan_round(self.supers(paired), T,
                                          opts.rounds), stats, T, peers=peers)
        if probing and not peers:
            moves = self.while_probing(moves)
        self.plans += 1
        # Re-plan after a split of the time so far when that is shorter than T's: a long T
        # keeps Eq. 9 from over-reacting to early pass gaps, and the early rounds still
        # come soon enough to spread a straggler's data and correct the first plans.
        wait_until = now + min(T, now) / opts.rounds
        if not moves:
            # No round: nothing counted or logged, and no round_end: a straggler found
            # meanwhile does not wait for it (peers do, as after a round).
            self.quiet_until = wait_until
            self.quiet_for = frozenset(s.rank for s in stats if self.straggler(s.rank))
            return {}
        speeds = {st.rank: st.v for st in stats}
        self.round_k += 1
        self.rounds += 1
        for m in moves:
            self.roles[m.source] = (-1, speeds[m.source], self.plans)
            self.roles[m.target] = (1, speeds[m.target], self.plans)
        self.round_end = wait_until
        orders = self.orders(moves)
        self.log.append({"time_s": round(now, 6), "round": self.rounds, "plan": self.plans,
                         "T_s": round(T, 6),
                         "moves": [[m.source, m.target, m.points] for m in moves],
                         "passes": [round(s.p, 4) for s in stats]})
        return orders

    def while_probing(self, moves: list[Move]) -> list[Move]:
        """The moves made while FSPV probes the interval: a straggler's only.

        FSPV fits Eq. 7's line g(η) on a few probe iterations (Section 3.3); points that
        move meanwhile change what each worker trains in them (windows locked out, migrated
        points trained first at their targets), and the fit reads that as a difference
        between the intervals.  Measured (``bench/migration_sim.py``, random speeds 1-2.5x):
        two rounds inside the probes cut g(η₁) from 15.7e6 to 10.8e6 and Eq. 7 chose a
        barrier per 4 passes (26.6 ms) instead of 1 ms, and async migration reached the
        target 0.64x as fast as no migration.  A straggler's points cannot wait (a
        straggler 60x slower holds a quarter of the data, trained at 1/60 of the speed), and
        then the probes measure training without it, as the run will be.
        """
        return [m for m in moves if self.straggler(m.source)]

    def note_stragglers(self, stats: list[WorkerStat]) -> None:
        """Count, per rank, the barriers in a row at which its speed V was
        :data:`PEER_SPEED` times slower than the median worker's (:attr:`slow_streak`).

        Counted at every barrier, not at every planned round: counting rounds left the
        straggler unrecognised at the first round, which then moved at most
        :data:`PEER_SHARE` of its points per move; the rest waited for a second round 0.8-1.2
        s later, trained by the straggler alone meanwhile (issue 19, overlapping workload).
        """
        # Not np.median: its first call imports numpy.ma (13-70 ms of the master's time at
        # the first round, every worker waiting for θ; issue 19).
        v = sorted(s.v for s in stats)
        if not v:
            return
        median = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
        self.slow_streak = {s.rank: (self.slow_streak.get(s.rank, 0) + 1
                                     if s.v >= PEER_SPEED * median else 0) for s in stats}
        now_slow = {r for r in self.slow_streak if self.straggler(r)}
        if not now_slow <= self.stragglers_seen:
            self.stragglers_seen = self.stragglers_seen | now_slow

    def straggler(self, rank: int) -> bool:
        """Whether ``rank`` is a straggler: :data:`PEER_SPEED` times slower than the median
        worker at the last :data:`STRAGGLER_BARRIERS` barriers (each speed itself smoothed
        over :data:`SPEED_WINDOW_S` of compute)."""
        return self.slow_streak.get(rank, 0) >= min(STRAGGLER_BARRIERS, self.evidence)

    def supers(self, stats: list[WorkerStat]) -> list[SuperWorker]:
        """Super workers (§4.2): workers with "the same statistics" read loosely, speeds
        and counts within :data:`GROUP_SPREAD`, passes within Eq. 8's threshold on the
        passes so far (ε, or :data:`RELATIVE_EPSILON` of their mean).

        :func:`group`'s default (speeds within 10%, counts within 1%, passes within 0.1)
        split the fast workers of a shared machine, whose speeds wander by tens of percent
        and whose passes differ by the ranks' start-up lag: they were paired with each
        other and passed points back and forth, and a straggler's points all went to one of
        them, to be passed on (issue 19: 60% of the moves of a 10 s run were of points that
        had moved before).  Grouped, a straggler's points are split among all of them at
        once, and none moves between them.  (Passes within 5 instead of Eq. 8's threshold
        -- the ranks' start-up lag -- made ``bench/migration_sim.py``'s noisy speeds end
        15-19% apart under sync migration instead of 6%.)

        Beside a straggler (:meth:`straggler`) the others are grouped by points and passes
        alone -- speeds within :data:`PEER_SPEED`, which no straggler is -- and each
        straggler stays a super worker of its own: the load of shared cores left the fast
        workers' speeds over :data:`GROUP_SPREAD` apart, Eq. 9 then paired the straggler with
        one of them, which took all its points, held 3,870 against 2,000, and set every
        iteration's length for 1.8 s (issue 19, ``flegel paper``'s NMF,
        ``tests/test_migration_churn.py``).

        Where this departs from §4.2: its super workers are workers with "the same
        statistics", among which Δ is split evenly.  These groups are looser -- beside a
        straggler, members up to :data:`PEER_SPEED` (4x) apart in speed, points within
        :data:`GROUP_SPREAD`, passes within ε -- so each member's own V goes with the group
        (``SuperWorker.speeds``) and what the group receives is split by speed
        (``planner._by_speed``: equal predicted passes), not evenly: split evenly, a 3.5x
        slower member took as many of a straggler's points as the fast ones and passed them
        on at the next plans at unchanged speeds.  The group's V in Eq. 9 stays the members'
        mean, as in :func:`group`.
        """
        mean_p = sum(s.p for s in stats) / max(len(stats), 1)
        p_abs = max(self.options.epsilon, RELATIVE_EPSILON * mean_p)
        tol = Tolerance(v_rel=GROUP_SPREAD, n_rel=GROUP_SPREAD, p_abs=p_abs)
        slow = [s for s in stats if self.straggler(s.rank)]
        if not slow:
            return group(stats, tol)
        # Beside a straggler, the others are grouped by points and passes alone: their
        # speeds differ by the load of the moment, not by what makes a straggler.
        # Their speeds still differ, by up to PEER_SPEED: each member's own V goes with the
        # group, and what it receives is split by speed (planner._by_speed), not evenly --
        # an even split gave a 3.5x slower peer as many points as the fast ones, and it
        # passed them on at the next plans at unchanged speeds (points moving twice).
        peers = Tolerance(v_rel=PEER_SPEED - 1.0, n_rel=GROUP_SPREAD, p_abs=p_abs)
        others = [s for s in stats if not self.straggler(s.rank)]
        v = self.peer_speeds(others)
        out = [replace(w, speeds=tuple(v[r] for r in w.ranks)) if w.size > 1 else w
               for w in group(others, peers)]
        out += group(slow, tol)
        return sorted(out, key=lambda w: w.ranks[0])

    def peer_speeds(self, peers: list[WorkerStat]) -> dict[int, float]:
        """Each peer's V for splitting what its super worker receives (``SuperWorker.speeds``,
        :meth:`supers`): a peer measured faster than the peers' (lower) median V counts as
        faster only in proportion to the evidence, the share of :data:`SPEED_WINDOW_S` its
        speed history's compute covers (all of it: its own V; none: the median's); a peer
        measured slower keeps its own V.

        A straggler's first round may come after one whole pass (``at_barrier``'s
        ``whole_passes``), and one pass of a few ms on shared cores measures which rank had
        a core, not its speed.  Measured (issue 19, ``flegel paper --quick --only
        migration``'s NMF, 4 workers on 2 shared cores): on the calibration pass's speeds
        the first round gave 1,307 of the straggler's 1,575 points to worker 4, 268 to
        worker 2 and none to worker 3, equally fast peers; worker 4 then held 3,254 points
        against 2,268 and 2,330, every later iteration waited for its pass, and no later
        round moved any of it (their passes were equal, one a barrier), so FSPV with async
        migration reached the target 0.80-0.94x as fast as FSPV without it.

        Asymmetric on purpose: a peer given too many points holds up every barrier after
        (its pass is the iteration's), and, as a receiver, may not pass them on without a
        speed change (:meth:`reversal`); a peer given too few passes sooner and waits a
        little.  A peer measured slower on one pass may be slow indeed (a 3.5x slower peer
        on the simulated clock, ``tests/test_migration_churn.py``: shrunk toward the mean,
        it received 411 of 1,957 points and sent 1,332 on in the four rounds after), so its
        own V stands.  The median, not the mean: the split fills every peer up to counts in
        proportion to its speed, so from equal shards a peer counted 30 % faster than the
        others receives nearly three times their share, and a mean pulled up by one
        slow-looking peer counted the others that much faster.
        """
        if not peers:
            return {}
        median = lower_median(s.v for s in peers) or 0.0
        out = {}
        for s in peers:
            seen = sum(c for c, _ in self.speed.get(s.rank, ()))
            w = min(1.0, seen / SPEED_WINDOW_S)
            out[s.rank] = max(s.v, w * s.v + (1.0 - w) * median)
        return out

    def predicted_end(self, stats: list[WorkerStat], T: float) -> tuple[dict[int, float],
                                                                        float]:
        """Each worker's passes predicted for the end of the remaining time T,
        ``Pᵢ + T/(Aᵢ + VᵢNᵢ)`` (the planner's prediction, §4.2, over the whole of T, with
        the fixed cost per pass of :meth:`fixed_cost`), and Eq. 8's threshold for them: ε,
        or :data:`RELATIVE_EPSILON` of their mean once that is larger."""
        pred = {s.rank: s.p + (T / pass_time(s) if s.n > 0 else 0.0) for s in stats}
        mean_p = sum(pred.values()) / len(pred)
        return pred, max(self.options.epsilon, RELATIVE_EPSILON * mean_p)

    def imbalanced_at_end(self, stats: list[WorkerStat], T: float) -> bool:
        """Eq. 8 on the passes predicted for the end of the remaining time T.

        The paper tests Eq. 8 on the passes so far.  We test it on the passes predicted for
        the end of T (:meth:`predicted_end`): a lag that the workers' speeds will close by
        themselves needs no data moved, and one that speeds will widen is caught before it
        shows.  Measured on the simulated clock: testing passes so far, gated by a ratio of
        pass times, left a straggler that had given most of its points away 25% behind, its
        pass time 1.48x the others' (under the gate), for good.
        """
        pred, threshold = self.predicted_end(stats, T)
        # Scale passes down instead of the threshold up, so Eq. 8 stays as printed.  Over
        # workers, not super workers: the balance a user sees (and the target) is
        # per worker, and the super workers' mean gives a lone straggler the weight of all
        # the others.
        scale = self.options.epsilon / threshold if threshold > 0 else 1.0
        return imbalanced([p * scale for p in pred.values()], self.options.epsilon)

    @property
    def kept(self) -> int:
        """Points a source keeps whatever the orders (:data:`MIN_KEPT`, or a window if
        smaller)."""
        return min(MIN_KEPT, self.options.window)

    def idle(self, worker: WorkerStat, stats: list[WorkerStat]) -> bool:
        """Whether ``worker`` is a straggler that can take no part in a round: at or under
        its :meth:`floor` (nothing to send) and behind the others' lower median in passes so
        far (nothing to receive, :meth:`keep_some`).  Such a straggler is left out of the
        pairing (§4.2's minimum with maximum): it is the minimum, so Eq. 9 paired it with
        the worker furthest ahead and :meth:`keep_some` then dropped the pair's moves, and
        that worker went unpaired however far the peers drifted apart.  Measured (issue 19,
        overlapping workload, worker 1 slow, a plan log): from 9 s to 28 s no round was
        planned while one peer, holding 118,502 points against 140,000, passed twice as
        often as the other two (988 passes at the end against 576-586: max/min 1.75).
        """
        if not self.straggler(worker.rank) or worker.n > self.floor(worker, stats):
            return False
        passes = self.typical(worker, stats, lambda s: s.p, holding=False)
        return passes is not None and worker.p < passes

    def floor(self, source: WorkerStat, stats: list[WorkerStat]) -> int:
        """Points ``source`` keeps whatever the orders: :attr:`kept`, or, for a straggler,
        fewer -- at least :data:`LAST_KEPT` -- where with those its pass (``A + V·kept``,
        :meth:`fixed_cost`) would still take longer than ``1 +`` :data:`RELATIVE_EPSILON`
        times the typical worker's (the lower median of the others'): keeping them cannot
        meet Eq. 8's threshold, so they go.

        An injected straggler (τ = 32 ms per 1,000 points, ~32 µs a point) keeping 64 points
        adds 2 ms to a pass that costs it an iteration anyway (A): at FSPV's iterations of
        4-7 ms, 30-50% more than the others' pass (issue 19's 1.50x).  At 10% of a 4 ms
        iteration it keeps 12.

        Only a straggler (:meth:`straggler`) keeps fewer: a peer slowed for a moment by a
        burst of load keeps :attr:`kept`, enough to be measured and given work back.

        Where the others' pass spans several barriers, a straggler keeps more than
        :attr:`kept`: its :meth:`level`, the points with which it keeps pace with them.
        Left with :attr:`kept`, it passed at every barrier and its points raced ahead of
        everyone else's, which Eq. 9 then could not undo: points given back to it arrived
        hundreds of passes behind, their catch-up at its speed (seconds) held every plan
        (issue 19, overlapping workload, worker 1 slow: its 64 points trained 800 times
        against the others' 479; max/min point passes 1.62 and 1.32 in two sittings of
        nine, ``python bench/fsp_claims.py --only gap --slow 1``).  Eq. 9 asks a straggler
        behind in passes for its points to catch up by the split's end; kept at its level
        it stops losing passes instead (the module's rule for a straggler: the passes lost
        stay lost, the rules bound the rate at which more are).
        """
        if not self.straggler(source.rank):
            return self.kept
        fit = self.fits(source, stats)
        if fit < self.kept:
            return max(LAST_KEPT, fit, self.overhead(source, stats))
        return max(self.kept, self.level(source, stats))

    def level(self, worker: WorkerStat, stats: list[WorkerStat]) -> int:
        """The fewest points with which ``worker`` keeps pace with the typical worker (the
        lower median of the others) within ``1 +`` :data:`RELATIVE_EPSILON`: with fewer it
        passes more often than Eq. 8's threshold allows and its points race ahead.

        Two readings of its pass at another count n', each wrong in one regime, and the
        fewer points of the two (so that a straggler is never held at a count where it
        lags):

        * its compute per pass ``V·n'`` (injected delays included) against the others'
          ``V·N``: under FSP every worker computes through the same barriers, so equal
          compute spans as many barriers.  It misses the barriers bursts of injected delay
          cost: holding 233 points worker 3 (slowed) passed 10-28 % slower than the others
          though its compute per pass was 60 % of theirs (A 13.8 ms against their 7.5), and
          on compute alone (334-401 points) it kept them all (max/min point passes 1.21).
        * its measured pass scaled with the points, ``(A + V·n)·n'/n``, against the
          others' ``A + V·N``: where passes span several barriers A, the waits at those
          barriers, grows with the points.  Taken as fixed it is wrong: holding 1,627 points
          the straggler's A read 37 ms (three barriers a pass) and ``A + V·n'`` gave 322
          points, with which its A read 16 ms (one barrier) and it passed at 1.7x the
          others' rate (509 passes at 20.9 s against 453-478).  Scaled, it misses the one
          barrier a pass costs however few its points, which the compute reading does not
          need: where the others pass about once a barrier their ``V·N`` is short and the
          level under :attr:`kept`, the floor as before.

        Plan logs of the overlapping workload (``python bench/fsp_claims.py --only gap``)."""
        typical = self.typical(worker, stats, pass_time)
        compute = self.typical(worker, stats, lambda s: s.v * s.n)
        own = pass_time(worker)
        if typical is None or compute is None or own <= 0 or worker.n <= 0 or worker.v <= 0:
            return 0
        scaled = typical * worker.n / own
        return math.ceil(min(scaled, compute / worker.v) / (1.0 + RELATIVE_EPSILON))

    @staticmethod
    def typical(worker: WorkerStat, stats: list[WorkerStat],
                of: Callable[[WorkerStat], float], holding: bool = True) -> float | None:
        """The typical worker's figure ``of``, beside ``worker``: the lower median over the
        others (:func:`lower_median`; ``holding``: those that hold points), None for none."""
        return lower_median(of(s) for s in stats
                            if s.rank != worker.rank and (s.n > 0 or not holding))

    def overhead(self, source: WorkerStat, stats: list[WorkerStat]) -> int:
        """Points over which ``source``'s loop overhead per iteration (:attr:`loop_s`) adds
        at most half of :data:`PEER_SPEED` − 1 times the typical worker's V (the lower median
        of the others') to its V: once it recovers, those points measure it under
        :data:`PEER_SPEED` times the typical V, no straggler, and it can be given work back.
        Left with 1 point, a recovered straggler's V was its overhead (tens of µs a commit
        against a µs a point) and it stayed a straggler, never given points back (issue 19
        review).

        Half the margin is what ``need`` asks; a recovery shows with the whole margin, once
        ``loop / n`` is under (:data:`PEER_SPEED` − 1) times the typical V.  So where ``need``
        is over :attr:`kept` but :attr:`kept` points still show a recovery (``need`` up to
        twice :attr:`kept`), the floor stays :attr:`kept`, as before the rule.  0 only where
        :attr:`kept` points cannot show a recovery at all: keeping them would not make it
        recognisable either, and would only cost Eq. 8 (FSP paper §4.2).  Known limit: such a
        straggler is never recognised as recovered, nor given work back.  Measured (issue
        19, Fig. 12's K-means, 4 s): the fast workers' V was ~20 ns a point (Hamerly bounds),
        the straggler's loop ~0.4 ms a commit, so recognising a recovery took ~12,000 points;
        the floor held it at 64, whose injected delays (32 µs a point) cost it one barrier in
        5-6 -- passes 1.2-1.5x apart, and no round planned after the first second."""
        v = self.typical(source, stats, lambda s: s.v)
        loop = (self.loop_s or {}).get(source.rank, 0.0)
        if v is None or loop <= 0:
            return 0
        need = math.ceil(loop / (0.5 * (PEER_SPEED - 1.0) * v))
        visible = loop / self.kept < (PEER_SPEED - 1.0) * v
        return min(self.kept, need) if visible else 0

    def fits(self, worker: WorkerStat, stats: list[WorkerStat]) -> int:
        """The most points ``worker`` can hold with its pass (``A + V·n``,
        :meth:`fixed_cost`) within ``1 +`` :data:`RELATIVE_EPSILON` times the typical
        worker's (the lower median of the others' passes); a large number when no other
        worker holds points."""
        typical = self.typical(worker, stats, pass_time)
        if typical is None:
            return 2**62
        room = (1.0 + RELATIVE_EPSILON) * typical - worker.a
        return min(math.floor(max(room, 0.0) / worker.v), 2**62)

    def keep_some(self, moves: list[Move], stats: list[WorkerStat], T: float,
                  peers: bool = False) -> list[Move]:
        """The moves worth making (``peers``: every speed measured on a whole pass,
        :meth:`at_barrier`).

        * Every source keeps at least :attr:`kept` points: Eq. 9 may hand nearly all of a
          straggler's points away, and a worker with none has no measurable speed and could
          never be given work back when it recovers (a transient straggler).  A straggler
          whose pass those points alone would keep beyond Eq. 8's threshold keeps fewer
          (:meth:`floor`).
        * A pair whose predicted passes at the end of T are within Eq. 8's threshold of each
          other moves nothing: Eq. 9 pairs every worker, and between workers of about equal
          speed it moved thousands of points back and forth each round to chase the timing
          noise of shared cores (measured: 8,000-17,000 points per round among the three
          fast workers of a 6 s run with one injected straggler).
        * A move between two workers neither of which is or was a straggler waits until every
          speed was measured over :data:`SPEED_WINDOW_S` (:meth:`peers_measured`).
        * A move under :data:`MIN_MOVE_FRACTION` of the smaller side is dropped.
        * A move that reverses a worker's last role without a change of its speed that
          justifies it is dropped (:meth:`reversal`).
        * A move between two workers neither of which is or was a straggler moves at most
          what Eq. 9 asks over the whole remaining time T, not over its split T/d
          (:meth:`over_the_run`): over a split the source is left passing faster than the
          target to close the gap in passes so far by the split's end, and the next plan,
          the gap closed, moves points back.  Measured (issue 19, overlapping workload,
          worker 3 slow, once the idle straggler no longer took the pairing,
          :meth:`idle`): peers sent 11,000-39,000 points to one worker and back again at
          each of six plans (142,000 points moved more than once, bytes 0.73x the data,
          max/min point passes 1.18).  Over T a peer's lag closes by the run's end, at a
          pace that leaves the pair's speeds within Eq. 8's threshold.
        * A straggler (:meth:`straggler`) receives at most what brings it to the points
          whose pass fits Eq. 8's threshold of the typical worker's (:meth:`fits`).  Left
          with its :meth:`floor`, it passes once an iteration while the others, holding its
          points, may not, and leads in passes until its next burst of injected delays;
          Eq. 9 pairs it with the worker furthest behind and balances that pair alone,
          burying the straggler in points many passes behind its own (issue 19,
          overlapping workload, worker 3 slow: 1,085 points at 7.1 s, 425 and 851 sent
          back at 8.9 and 11.2 s, the run ending at max/min passes 1.16).  And it receives
          nothing while its passes so far are behind its source's: a pass ends a worker's
          iteration under FSP (Section 3.3), so a straggler already passing every barrier
          gains nothing from more points while behind: they would only slow its catching up.
          Eq. 9's lost-passes term (P_j − P_i, the passes migrated points have to make up)
          assumes the target is ahead; behind, it turns negative, crediting the target time
          it does not have.  Its lead, not Eq. 9's
          P̃, is what calls for points back (issue 19, Fig. 12's K-means, 4 s: left with 1
          point at 38 passes against 40-47, it was given 94 points at 0.9 s, sent away again
          at 1.6 s).
        * A source sends at most :data:`PEER_SHARE` of its points in a round, all its moves
          together (a source paired with three targets sent 75%), split over its moves in
          proportion to what each asks -- the moves the rules above kept, not those they
          dropped (first come, one target took the whole share), unless
          it is a straggler
          (:meth:`straggler`: :data:`PEER_SPEED` times slower than the median worker at
          the last :data:`STRAGGLER_BARRIERS` barriers; a burst of load on a shared machine
          makes a fast worker look that slow for a moment, rarely for the whole smoothing
          window of its speed).
        """
        pred, threshold = self.predicted_end(stats, T)
        floors = {s.rank: self.floor(s, stats) for s in stats}
        room = {s.rank: self.fits(s, stats) - s.n for s in stats if self.straggler(s.rank)}
        left = {s.rank: s.n for s in stats}
        held = dict(left)
        speeds = {s.rank: s.v for s in stats}
        passes = {s.rank: s.p for s in stats}
        measured = peers or self.peers_measured()
        # The moves that pass the rules independent of the points left (the pair's
        # threshold, measured speeds, no reversal, no target behind its source), first: a
        # source's share is split over these only.
        kept = []
        for m in moves:
            if abs(pred[m.target] - pred[m.source]) <= threshold:
                continue
            if not (measured or {m.source, m.target} & self.stragglers_seen):
                continue
            if self.reversal(m, speeds):
                self.held_back += 1
                continue
            # Strict on fractional passes, on purpose: at one pass a barrier more points
            # only delay its next pass, however little it is behind; the pair test above
            # already applied Eq. 8's threshold (to the predicted passes).
            if m.target in room and passes[m.target] < passes[m.source]:
                continue  # behind: more points would only slow its catching up
            kept.append(m)
        # A source's share (PEER_SHARE) is split over its moves in proportion to what each
        # asks, not taken by the first: first come, a source paired with three targets sent
        # its whole share to one of them, which then held the others' pass back.
        asked: dict[int, int] = {}
        for m in kept:
            asked[m.source] = asked.get(m.source, 0) + m.points
        out = []
        after = dict(left)  # each worker's points after the moves kept so far
        by_rank = {s.rank: s for s in stats}
        for m in kept:
            points = min(m.points, left[m.source] - floors[m.source])
            if not self.straggler(m.source):  # the share of all its moves this round
                share = int(PEER_SHARE * held[m.source])
                points = min(points, share * m.points // max(asked[m.source], 1),
                             share - (held[m.source] - left[m.source]))
            if m.target in room:
                points = min(points, room[m.target])
            if not {m.source, m.target} & self.stragglers_seen:
                points = min(points, self.over_the_run(by_rank[m.source], after[m.source],
                                                       by_rank[m.target], after[m.target], T))
            smaller = min(held[m.source], held[m.target])
            if points >= max(1.0, MIN_MOVE_FRACTION * smaller):
                left[m.source] -= points
                after[m.source] -= points
                after[m.target] += points
                if m.target in room:
                    room[m.target] -= points
                out.append(Move(m.source, m.target, points))
        return out

    @staticmethod
    def over_the_run(source: WorkerStat, n_source: int, target: WorkerStat, n_target: int,
                     T: float) -> int:
        """Points Eq. 9 moves from ``source`` (holding ``n_source`` now) to ``target``
        (``n_target``) with one split, the whole remaining time T (:meth:`keep_some`: the cap
        on a move between peers)."""
        i = SuperWorker((source.rank,), n_source, source.v, source.p, a=source.a)
        j = SuperWorker((target.rank,), n_target, target.v, target.p, a=target.a)
        return math.floor(eq9_delta(i, j, T, 1)) if T > 0 else 0

    def peers_measured(self) -> bool:
        """Whether every worker's speed has been measured over a whole
        :data:`SPEED_WINDOW_S` of compute: only then may points move between two workers
        neither of which is a straggler (:meth:`keep_some`).

        Before that a speed is one burst.  Where speeds only fluctuate (ranks sharing
        cores; ``bench/migration_sim.py``'s noise, a random factor in [1, 2.5] redrawn every
        50 ms) the worker ahead in passes is the one that happened to be fast, and moving
        points to it pays only if it stays fast: over 8 draws of the noise
        (``python bench/migration_sim.py --draws 8``) async migration reached the target
        0.64-1.32x as fast as no migration, 0.94x on geometric mean (the points moved left
        shards unequal when the speeds changed, so the barriers waited for the worker left
        with the most, and caught-up points were trained again at the same θ); now 1.00x in
        each.  A history full at :data:`SPEED_BARRIERS` barriers counts as measured too:
        at short barriers it may hold under :data:`SPEED_WINDOW_S` of compute forever.  A
        straggler's points move at once (:meth:`straggler`), and so do moves to or from a
        worker that was one (:attr:`stragglers_seen`): a straggler that recovered holds too
        few points, whatever its speed history.
        """
        return bool(self.speed) and all(
            sum(c for c, _ in h) >= SPEED_WINDOW_S or len(h) >= SPEED_BARRIERS
            for h in self.speed.values())

    def reversal(self, move: Move, speeds: dict[int, float]) -> bool:
        """Whether ``move`` reverses a role without a speed change that justifies it.

        Hysteresis (issue 19): within :data:`LOCK_ROUNDS` rounds of the round that gave
        them a role, the source *received* points (it would pass points on, or send back
        what it was given) or the target *sent* points (points would come back), and
        neither worker's speed changed enough to justify it: the source did not become
        ``1 +`` :data:`SPEED_CHANGE` times slower than it was then, nor the target that much
        faster.  A worker whose speed changed that much -- a straggler that recovered, a
        fast worker that became one -- may change role at once; any other after
        :data:`LOCK_ROUNDS` rounds, when its passes (not its speed) may call for it: Eq. 9
        on a short T can give a straggler's data away beyond balance, and only a later
        round gives them back.
        """
        grow = 1.0 + SPEED_CHANGE
        locked = justified = False
        role, v, k = self.roles.get(move.source, (0, 0.0, 0))
        if role > 0 and self.plans - k < LOCK_ROUNDS:
            locked = True
            justified |= speeds[move.source] >= grow * v
        role, v, k = self.roles.get(move.target, (0, 0.0, 0))
        if role < 0 and self.plans - k < LOCK_ROUNDS:
            locked = True
            justified |= speeds[move.target] * grow <= v
        return locked and not justified

    def orders(self, moves: list[Move]) -> dict[int, list[MigrationOrder]]:
        """Orders for each rank: ``send`` to move points, ``return`` to give back points
        the target still holds copies of (virtual migration)."""
        out: dict[int, list[MigrationOrder]] = {}
        for m in moves:
            points = m.points
            if self.options.virtual:
                # Points the target sent to the source earlier are still parked at the
                # target: the source returns them, and no data travel.
                back = min(points, self.parked.get((m.target, m.source), 0))
                if back:
                    self.parked[(m.target, m.source)] -= back
                    self.returned += back
                    points -= back
                    out.setdefault(m.source, []).append(
                        MigrationOrder(OrderKind.RETURN, m.target, back, self.rounds))
                    # The origin expects them back: synchronous migration waits for every
                    # expected point before training (without this its reactivations sat in
                    # its queue, taken one per barrier, the points trained by no one).
                    out.setdefault(m.target, []).append(
                        MigrationOrder(OrderKind.EXPECT, m.source, back, self.rounds))
            if points:
                if self.options.virtual:
                    key = (m.source, m.target)
                    self.parked[key] = self.parked.get(key, 0) + points
                self.ordered += points
                out.setdefault(m.source, []).append(
                    MigrationOrder(OrderKind.SEND, m.target, points, self.rounds))
                out.setdefault(m.target, []).append(
                    MigrationOrder(OrderKind.EXPECT, m.source, points, self.rounds))
        return out

    def summary(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "points_ordered": self.ordered,
                "points_returned": self.returned, "moves_held_back": self.held_back,
                "round_log": self.log[-200:]}


# =============================================================================== worker side
class Migrator:
    """A worker's side of migration (see the module docstring).

    Parameters
    ----------
    options : MigrationOptions
    """

    def __init__(self, options: MigrationOptions) -> None:
        self.options = options
        self.quota: dict[int, int] = {}      # points still to send, per target
        self.ordered: dict[int, int] = {}    # points ordered this round, per target
        self.expected: dict[int, int] = {}   # points ordered to arrive, per source
        self.arrived: dict[int, int] = {}    # points that arrived, per source
        self.returns: dict[int, int] = {}    # points to return, per origin (virtual)
        #: (target, rows) of the windows in flight, oldest first: one per target at most
        #: (:meth:`step`).
        self.windows: list[tuple[int, np.ndarray]] = []
        self.sent: dict[int, int] = {}       # messages sent, per peer
        self.received: dict[int, int] = {}   # messages received, per peer
        self._fins: dict[int, int] = {}      # peer -> messages it says it sent (at stop)
        self.round = 0                       # the planning round of the orders in force
        self.points_moved = 0
        self.bytes_moved = 0
        self.state_bytes = 0
        self.reactivated = 0
        #: Ids of points this worker received or sent: a point sent from here that is in
        #: it moves again (churn, issue 19); a reactivated point moved back.
        self._moved_ids: set[int] = set()
        self.moved_again = 0

    @property
    def in_flight(self) -> int:
        return sum(len(rows) for _, rows in self.windows)

    def attached(self, port: MigrationPort) -> None:
        """Before training: room in the shard's buffers for the points this worker would
        receive if one of its peers gave it an even share of a shard like its own, the
        case of one straggler (:meth:`~flegel.runtime.store.ShardStore.reserve`)."""
        if port.peers:
            port.shard.reserve(-(-port.shard.n_active // len(port.peers)))

    def resumed(self) -> None:
        """Continue from a checkpoint with no message in flight: what was on its way when it
        was taken was settled on the points (:mod:`flegel.runtime.cut`), and no peer sends
        it again, so the message counts (and the points a synchronous target still awaited)
        start afresh on every worker.  Orders still to carry out stay.

        A migrator checkpointed by an earlier version lacks the attributes added since
        (``ordered``, ``windows``): they start as a new migrator's."""
        for key, value in vars(Migrator(self.options)).items():
            self.__dict__.setdefault(key, value)
        self.sent, self.received, self._fins = {}, {}, {}
        self.expected, self.arrived = {}, {}
        self.windows = []

    # ------------------------------------------------------------------ messages
    def take_orders(self, port: MigrationPort) -> int:
        """Book the orders that arrived; return how many.

        Each round's orders replace what is left of the previous round's: the planner saw
        the points still to send as the source's own, and re-planned them.
        """
        orders = port.orders()
        for order in orders:
            if order.round != self.round:
                self.round = order.round
                self.quota.clear()
                self.ordered.clear()
            if order.kind == OrderKind.SEND:
                self.ordered[order.peer] = self.ordered.get(order.peer, 0) + order.points
            book = {OrderKind.SEND: self.quota, OrderKind.EXPECT: self.expected,
                    OrderKind.RETURN: self.returns}[order.kind]
            book[order.peer] = book.get(order.peer, 0) + order.points
        return len(orders)

    def _post(self, port: MigrationPort, dest: int,
              message: Window | Shortfall | Reactivate) -> None:
        port.post(dest, message)
        self.sent[dest] = self.sent.get(dest, 0) + 1

    def take_messages(self, port: MigrationPort, limit: int | None = None) -> None:
        """Admit windows and reactivations that arrived (at most ``limit``: a step between
        blocks takes one, so a flood of windows cannot hold training up)."""
        shard = port.shard
        for src, message in port.receive(limit):
            if isinstance(message, Fin):
                self._fins[src] = message.sent
                continue
            self.received[src] = self.received.get(src, 0) + 1
            if isinstance(message, Window):
                shard.admit(message.points)
                self._moved_ids.update(np.asarray(message.points["ids"]).tolist())
                n = len(message.points["ids"])
                self.arrived[src] = self.arrived.get(src, 0) + n
            elif isinstance(message, Shortfall):
                self.arrived[src] = self.arrived.get(src, 0) + message.points
            else:
                rows = shard.reactivate(message.points)
                self.reactivated += len(rows)
                self.moved_again += len(rows)  # sent from here before: back again
                # Count what was ordered back, not what came: a holder may find fewer points
                # to retire, and a synchronous origin must not wait for them forever.
                self.arrived[src] = self.arrived.get(src, 0) + message.ordered

    # ------------------------------------------------------------------ async work
    def step(self, port: MigrationPort) -> None:
        """Nonblocking progress: orders, arrivals, the window in flight, the next window."""
        self.take_orders(port)
        shard = port.shard
        if shard.marked:
            # FSPV's probes roll θ and the shard back to the mark: a point whose state came
            # or went since would disagree with the θ it is rolled back to.  Everything
            # waits for the unmark (senders' requests just stay pending meanwhile).
            return
        self.take_messages(port, limit=1)
        for origin, count in list(self.returns.items()):
            taken = shard.retire(origin, count)
            del self.returns[origin]
            # Posted even when empty: the origin expects ``count`` points back (sync mode).
            self.state_bytes += state_bytes(taken)
            self._post(port, origin, Reactivate(taken, count))
        # Sent windows leave the list (their rows stay inactive here, kept for virtual
        # migration).  With one in flight per target, a target with no send pending has
        # taken its window, whatever the other targets did (they take windows at their own
        # pace); a pending reactivation to it only keeps its window listed a little longer.
        self.windows = [(t, rows) for t, rows in self.windows if port.sends_pending(t)]
        # One window in flight per target (§4.3 locks "only data in the current window"; a
        # window per pair of workers keeps that per pair).  One window per source in all
        # took a straggler's 100,000 points 0.5-1.2 s to leave, one target after the other,
        # each taking one window between its blocks, while the fast workers settled θ
        # without them (issue 19, overlapping workload: the run ended 3.9-6.6% above BSPB).
        while self._next_window(port):
            pass

    @staticmethod
    def window_points(window: int, ordered: int) -> int:
        """Points per window of a move of ``ordered`` points with windows of at least
        ``window``: ``window``, or the move split into :data:`WINDOWS_PER_MOVE` windows when
        that is more (§4.3); :meth:`window_size` and Table 2's *Only* job
        (:func:`flegel.cli.paper.network.only_windows`) share it."""
        return max(window, -(-ordered // WINDOWS_PER_MOVE))

    def window_size(self, target: int) -> int:
        """Points of the next window to ``target``: :meth:`window_points` of ``window`` and
        the round's order to it (§4.3).

        A window costs a wake-up of its source and of its target, whatever its size
        (measured at a load of 8-12 on 2 cores: 5-15 ms between windows for a window's
        0.3 ms of CPU), so the count of windows, not their points, bounds how soon a move
        is done; 1,024-point windows took a straggler's 100,000 points 0.5-1 s to leave.
        Larger windows lose no training: they are taken behind the traversal cursor
        (:meth:`~flegel.runtime.store.ShardStore.select_behind_cursor`), points the source
        trains again only after the rest of its shard, and they are sent away anyway.
        """
        return self.window_points(self.options.window, self.ordered.get(target, 0))

    def _next_window(self, port: MigrationPort, size: int | None = None) -> bool:
        """Post a window to a target with points still to send and no window in flight;
        return whether one was posted."""
        shard = port.shard
        busy = {t for t, _ in self.windows}
        for target, left in list(self.quota.items()):
            if target in busy:
                continue
            if left <= 0:
                del self.quota[target]
                continue
            # Keep a point here whatever the orders; the master's orders keep more
            # (Balancer.floor).
            room = shard.n_active - LAST_KEPT
            want = self.window_size(target) if size is None else size
            rows = shard.select_behind_cursor(min(want, left, room))
            if len(rows) == 0:
                # Nothing left to give: say so, or a synchronous target would wait forever
                # for the rest of what was ordered.
                del self.quota[target]
                self._post(port, target, Shortfall(left))
                return False
            shard.lock(rows)
            payload = shard.export(rows)
            ids = np.asarray(payload["ids"]).tolist()
            self.moved_again += sum(1 for i in ids if i in self._moved_ids)
            self._moved_ids.update(ids)
            self.quota[target] = left - len(rows)
            self.points_moved += len(rows)
            self.bytes_moved += payload_bytes(payload)
            self.state_bytes += state_bytes(payload)
            self._post(port, target, Window(payload))
            self.windows.append((target, rows))
            return True
        return False

    # ------------------------------------------------------------------ sync work
    def transfer_now(self, port: MigrationPort, orders: int) -> None:
        """Synchronous migration at the barrier: take the ``orders`` announced with θ, send
        every point at once, and wait until every expected point arrived and every send
        completed (no training meanwhile)."""
        got = 0
        while got < orders:
            got += self.take_orders(port)
            if got < orders:
                port.pause()
        self.step(port)
        while self.quota:
            self.windows = []  # every window leaves now: no bound on those in flight
            self._next_window(port, max(self.quota.values()))
        while (any(self.arrived.get(p, 0) < n for p, n in self.expected.items())
               or port.sends_pending()):
            self.take_messages(port)
            port.pause()
        self.windows = []

    # ------------------------------------------------------------------ the end
    def drain(self, port: MigrationPort) -> dict[str, Any]:
        """At stop: tell every peer what was sent to it, receive everything still in flight,
        wait for every send to complete.  Every point then sits on exactly one worker."""
        peers = port.peers
        for p in peers:
            port.post(p, Fin(self.sent.get(p, 0)))
        while True:
            self.take_messages(port)
            done = all(p in self._fins and self.received.get(p, 0) >= self._fins[p]
                       for p in peers)
            if done and port.sends_pending() == 0:
                break
            port.pause()
        self.windows = []  # every send completed: the last windows arrived too
        return {"migration": {"points_moved": self.points_moved,
                              "bytes_moved": self.bytes_moved,
                              "state_bytes": self.state_bytes,
                              "reactivated": self.reactivated,
                              "moved_again": self.moved_again}}
