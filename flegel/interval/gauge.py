"""FSPV's gauge: the exact objective of θ on a fixed sample, the progress the interval adjustor
judges (FSP paper §3.3: g(η) = Δf/Δt, Eq. 7).

The adjustor fits g(η) on the training progress of each iteration and judges its stages on
it.  The online objective (``ServerPort.estimated_objective``: each point's last-seen loss,
scaled up to the points not visited yet) is the objective of no θ: a point's loss changes
in it when the point is visited again, a pass after its last visit, so an iteration shorter
than a pass is credited with the steps of the previous pass (:mod:`flegel.interval.multistage`,
the per-update notes).  The gauge measures what iteration t did on the exact objective
instead: at its barrier θ_{t+1} is applied, and

    progress_t = G(θ_t) − G(θ_{t+1}),    G(θ) = (N / m) Σ_{i ∈ S} f_i(θ)

with ``S`` a fixed subset of m rows of the master's seeded sample (``DataInfo.sample``,
``sample_sizes``): a prefix of one fixed order of chunks of :data:`CHUNK` rows, interleaved
across the shards so that any prefix holds each shard's rows in proportion to its points
(within a chunk; :func:`chunk_order`) -- a stratified sample with proportional allocation,
so one sum weighted N / m stands for f(θ), and the same points for every θ, so the
difference is paired (the points' own spread of losses cancels).  One ``evaluate`` call
over the prefix (a call per chunk cost 3-6 of them at 64 rows: 27 µs a call for K-means
against 59 µs for 370 rows in one, ``python bench/gauge_fidelity.py --cost``), two where the
subset's size changed since the θ held, and the difference is taken on the points both
share.

**Its cost.**  The evaluation runs on the master between the update and the next broadcast,
while every worker waits.  The gauge times itself (seconds per point evaluated) and sizes
its subset so that an evaluation costs :data:`SHARE` of the median wall time of the recent
iterations, at least :data:`FLOOR` points (below that the estimate's noise, not the
iteration, decides) and at most the sample; the subset grows at most :data:`GROWTH` times
per barrier.  Where the floor alone would cost more than :data:`DEAR` of the first iteration
it measures (timed on :data:`TRIAL` rows after a one-row call that warms the kernel's first
call on the master, before any observation read it: one measure for the whole run), or the master
holds no sample, or the algorithm has no ``evaluate`` (a user's algorithm), the gauge gives
up and the adjustor reads the online estimate, as before (``progress_measure`` in
``summary.json`` says which).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from flegel.ports import ServerPort
from flegel.state import AttributeState

#: The gauge's evaluation takes at most this share of the median iteration's wall time
#: (issue 19: at 5 % FSPV's Fig. 8 pairs read 1.26-1.31x against main's 1.37-1.38x, about
#: the gauge's own cost, with a call per chunk).
SHARE = 0.02
#: ... but at least this many points of the sample (fewer where the sample is smaller).
FLOOR = 256
#: Rows per chunk: one ``evaluate`` call, the unit the subset grows by.
CHUNK = 64
#: The subset grows at most this many times per barrier (the common prefix, on which the
#: difference is taken, keeps at least 1/GROWTH of the new subset).
GROWTH = 2.0
#: The gauge gives up (online estimate) where its floor costs more than this share of the
#: first iteration it measures.
DEAR = 0.25
#: Iterations whose wall time sizes the subset (their median).
RECENT = 9
#: Rows of each of the first evaluation's two timed calls, which decide whether the gauge
#: measures (:meth:`Gauge._first`; a one-row call warms the kernel before them): few, so
#: that an algorithm whose evaluation is too dear (NMF's 50 HALS sweeps a row, the CNN's
#: forward pass) pays little to find out -- two chunks of 64 rows cost NMF 5.4-7.8 ms and
#: the CNN 14.5-18.1 ms once a run, on the master's critical path, at a load of 3-4.
TRIAL = 16

#: ``evaluate(rows)``: the exact objective of the current θ on rows of the master's sample,
#: as a sum (None: the algorithm has no ``evaluate``; ``ServerPort.evaluate_sample``).
Evaluate = Callable[[np.ndarray], "float | None"]


def chunk_order(sample_sizes: Sequence[int], shard_sizes: Sequence[int], seed: int,
                chunk: int = CHUNK) -> list[tuple[int, np.ndarray]]:
    """The gauge's chunks, in the order its subset takes them: ``(stratum, rows)``.

    The sample's rows of stratum w (worker w's shard: the w-th run of ``sample_sizes``) are
    shuffled (seeded) and cut into chunks; the chunks of all strata are interleaved so that
    any prefix holds each stratum in proportion to its shard's points (``shard_sizes``; the
    sample's own sizes where not known): chunk c of stratum w comes at (c + ½)/share_w.
    """
    rng = np.random.default_rng(seed)
    total = float(sum(shard_sizes)) or float(sum(sample_sizes))
    keyed: list[tuple[float, int, np.ndarray]] = []
    start = 0
    for w, size in enumerate(sample_sizes):
        rows = start + rng.permutation(size)
        start += size
        share = (shard_sizes[w] if shard_sizes else size) / max(total, 1.0)
        for c in range(0, size, chunk):
            keyed.append(((c / chunk + 0.5) / max(share, 1e-12), w, rows[c:c + chunk]))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [(w, rows) for _, w, rows in keyed]


class Gauge(AttributeState):
    """The exact objective of θ on a fixed subset of the master's sample (module docstring),
    and the paired progress of an iteration from it.

    Parameters
    ----------
    sample_sizes : sequence of int
        Rows of the master's sample from each worker's shard, in rank order (one stratum of
        all its rows where not known: pass ``[rows]``).
    shard_sizes : sequence of int
        Points of each worker's shard, in the same order (empty: unknown).
    seed : int
        Seeds the order of the sample's rows.
    share, floor : float, int
        The budget (:data:`SHARE`, :data:`FLOOR`).
    off : str or None
        Why the gauge does not measure at all (None: it does).
    clock : callable
        Seconds, for the gauge's own cost on the master's critical path (:meth:`of`: the
        server's clock, on which the iterations' wall times are taken).

    Attributes
    ----------
    n : int
        Chunks of :func:`chunk_order` in the subset the next evaluation takes.
    value : float or None
        The sum of the losses of the θ in force over the first ``valued`` chunks (None: no
        θ held, the next progress reads the online estimate).
    seconds : float
        Seconds spent evaluating, in all.
    evaluations, points : int
        Evaluations made, and points evaluated in all.
    gave_up : str or None
        Why the gauge stopped (the adjustor then reads the online estimate).
    """

    #: Rebuilt from the job (the sample and the seed) on a resume.
    NOT_STATE: ClassVar[tuple[str, ...]] = ("chunks", "clock", "_prefix", "_cuts")

    def __init__(self, sample_sizes: Sequence[int], shard_sizes: Sequence[int] = (),
                 seed: int = 0, share: float = SHARE, floor: int = FLOOR,
                 off: str | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.chunks = chunk_order(sample_sizes, shard_sizes, seed)
        self.total = float(sum(shard_sizes)) or float(sum(sample_sizes))  # N
        self._cuts = np.cumsum([0] + [len(r) for _, r in self.chunks])
        self._prefix: dict[tuple[int, int], np.ndarray] = {}
        self.share = share
        self.floor = floor
        self.n = self._chunks_for(floor)
        self.value: float | None = None
        self.valued = 0
        self.marked: tuple[float | None, int] | None = None
        self.diff: float | None = None
        self.walls: list[float] = []
        self.per_point: list[float] = []
        self.seconds = 0.0
        self.evaluations = 0
        self.points = 0
        self.gave_up: str | None = off or (None if self.chunks else "no sample")

    @classmethod
    def of(cls, server: ServerPort, off: str | None = None) -> Gauge:
        """The gauge of ``server``'s sample and shards (``off``: why it does not measure)."""
        shards = [server.shard_sizes.get(r, 0) for r in server.ranks]
        return cls(server.sample_sizes, shards if all(shards) else (), off=off,
                   clock=server.now)

    def _chunks_for(self, points: float) -> int:
        """Chunks of the order that hold at least ``points`` rows (all, if fewer)."""
        held = 0
        for i, (_, rows) in enumerate(self.chunks):
            held += len(rows)
            if held >= points:
                return i + 1
        return len(self.chunks)

    def rows(self, a: int, b: int) -> np.ndarray:
        """The sample's rows of chunks ``a`` to ``b`` (kept: one gather per subset size)."""
        if (a, b) not in self._prefix:
            self._prefix[a, b] = np.concatenate([r for _, r in self.chunks[a:b]])
        return self._prefix[a, b]

    def scale(self, chunks: int) -> float:
        """N / m for the first ``chunks`` chunks: their sum of losses times this is G."""
        return self.total / max(int(self._cuts[chunks]), 1)

    @property
    def active(self) -> bool:
        """Whether the gauge measures (else the online estimate stands)."""
        return self.gave_up is None

    def evaluate(self, evaluate: Evaluate, wall_s: float) -> bool:
        """Evaluate θ in force on the subset; False where the gauge does not measure.

        One ``evaluate`` call on the subset's rows, or two where its size changed since the
        θ held: the part both share and the rest, so that :attr:`diff` (G of the θ held
        minus G of this one) is taken on the same points.

        The first evaluation decides whether it measures at all: an ``evaluate`` that fails
        on the sample's rows (a user's algorithm may need per-point state) gives it up; a
        one-row call warms the kernel's first call on the master, two of :data:`TRIAL` rows
        are timed, and where the floor would cost more than :data:`DEAR` of ``wall_s`` (the
        coming iteration's wall time, as far as it is known) at that pace, the gauge gives up
        before any observation read it (:meth:`_first`) -- one measure of progress for the
        whole run (a stage's windows compared against a rate taken on the other measure left
        their line: NMF, 1-3 re-fits in each of two runs where the gauge gave up after three
        barriers).
        """
        if not self.active:
            return False
        first = self.evaluations == 0
        n, held, old = self.n, self.value, self.valued
        t0 = self.clock()
        try:
            if first:
                total = common = self._first(evaluate, wall_s)
                if total is None:
                    self.seconds += self.clock() - t0
                    return False
            elif held is None or old == n:
                total = common = evaluate(self.rows(0, n))
            elif old < n:
                common = evaluate(self.rows(0, old))
                rest = evaluate(self.rows(old, n))
                total = None if common is None or rest is None else common + rest
            else:
                total = evaluate(self.rows(0, n))
                rest = evaluate(self.rows(n, old))
                common = None if total is None or rest is None else total + rest
        except Exception as exc:  # noqa: BLE001 -- a user's evaluate on rows without state
            if not first:
                raise  # it worked before: a fault of the algorithm, not the gauge's
            self.gave_up = f"evaluate failed: {exc!r}"
            return False
        if total is None or common is None:
            self.gave_up = self.gave_up or "no evaluate"
            return False
        spent = self.clock() - t0
        # The rows evaluated: the subset's, and where its size changed the held θ's too.
        points = int(self._cuts[n if held is None or old == n else max(n, old)])
        self.seconds += spent
        self.evaluations += 1
        self.points += points
        self.per_point = (self.per_point + [spent / max(points, 1)])[-RECENT:]
        self.diff = (None if held is None
                     else self.scale(max(old, 1)) * (held - float(common)))
        self.value, self.valued = float(total), n
        return True

    def _first(self, evaluate: Evaluate, wall_s: float) -> float | None:
        """The first evaluation, in calls that add up to the subset's sum: its first row
        (the kernel's first call on the master: compilation, caches), the next two runs of
        :data:`TRIAL` rows, each timed -- where the floor would cost more than :data:`DEAR`
        of ``wall_s`` at the faster one's pace (one call descheduled on a loaded host does
        not decide; a call's own cost on so few rows counts against the gauge) it gives up
        here, and after the first of them already where that call alone cost more (the
        floor's rows cost no less) -- and the rest.  None: given up.

        One row warms as well as :data:`TRIAL` and costs NMF a sixteenth: its trial (16
        rows warm, two timed calls of 16) was 7.7 ms on the master's critical path before
        the first θ, and FSPV's first θ came 9 ms after BSPV's in ``flegel paper``'s Fig. 8
        pairs (26-28 ms against 17-19 ms, the same θ sequence after it)."""
        rows = self.rows(0, self.n)
        total, fastest = 0.0, float("inf")
        cuts = [0, 1, 1 + TRIAL, 1 + 2 * TRIAL]
        for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
            part = rows[a:b]
            if not len(part):
                break
            t = self.clock()
            value = evaluate(part)
            took = self.clock() - t
            if value is None:
                self.gave_up = "no evaluate"
                return None
            total += value
            if k:
                fastest = min(fastest, took / len(part))
                if took > DEAR * wall_s and self._dear(fastest, wall_s):
                    return None
        if fastest < float("inf") and self._dear(fastest, wall_s):
            return None
        rest = evaluate(rows[cuts[-1]:]) if len(rows) > cuts[-1] else 0.0
        return None if rest is None else total + rest

    def estimate(self) -> float | None:
        """G of the θ held: N / m times its losses' sum on the subset (None: none held)."""
        return None if self.value is None else self.scale(self.valued) * self.value

    def progress(self, server: ServerPort, wall_s: float, timed: bool,
                 online: float) -> float:
        """Iteration t's progress G(θ_t) − G(θ_{t+1}), θ_{t+1} being in force (its barrier),
        on the points both evaluations share.

        ``online`` (the online estimate's change) where the gauge does not measure, held no
        G(θ_t), or the iteration was not ``timed`` (an iteration the adjustor does not
        judge: nothing evaluated).  ``wall_s``, the iteration's wall time, sizes the next
        subset."""
        if not (timed and self.active):
            return online
        if not self.evaluate(server.evaluate_sample, wall_s):
            return online
        self._resize(wall_s)
        return online if self.diff is None else self.diff

    def prime(self, server: ServerPort, needed: bool, wall_s: float) -> None:
        """Hold G of the θ in force where the next iteration is ``needed`` (its progress is
        read; ``wall_s``: its expected wall time) and none is held; otherwise forget G (θ
        moves on unmeasured)."""
        if not needed:
            self.value = None
        elif self.value is None:
            self.evaluate(server.evaluate_sample, wall_s)

    def follow(self, mark: bool, rollback: bool) -> None:
        """θ marked, or rolled back to the mark (FSPV's rolled-back probes): G with it."""
        if mark:
            self.marked = (self.value, self.valued)
        if rollback and self.marked is not None:
            self.value, self.valued = self.marked

    def _dear(self, per_point: float, wall_s: float) -> bool:
        """Give up where the floor, at ``per_point`` seconds a point, costs more than
        :data:`DEAR` of ``wall_s`` (the first evaluation: :meth:`_first`)."""
        floor_points = int(self._cuts[self._chunks_for(self.floor)])
        cost = per_point * floor_points
        if cost <= DEAR * wall_s:
            return False
        self.gave_up = (f"too dear: {cost * 1e3:.2f} ms for {floor_points} points, "
                        f"iterations of {wall_s * 1e3:.2f} ms")
        return True

    def _resize(self, wall_s: float) -> None:
        """Size the next subset to :data:`SHARE` of the median recent iteration, never below
        the floor (module docstring)."""
        self.walls = (self.walls + [wall_s])[-RECENT:]
        wall = sorted(self.walls)[len(self.walls) // 2]
        per_point = sorted(self.per_point)[len(self.per_point) // 2]
        want = self._chunks_for(self.share * wall / max(per_point, 1e-12))
        self.n = max(self._chunks_for(self.floor), min(want, max(int(GROWTH * self.n), 1)))

    def summary(self) -> dict[str, object]:
        """What the gauge adds to ``summary.json``."""
        per = self.seconds / max(self.evaluations, 1)
        return {"progress_measure": "gauge" if self.active else "online",
                "gauge_gave_up": self.gave_up, "gauge_s": self.seconds,
                "gauge_evaluations": self.evaluations,
                "gauge_points": self.points / max(self.evaluations, 1),
                "gauge_ms_per_evaluation": per * 1e3}
