"""FSPV's gauge: the exact objective of θ on a fixed sample, the progress the interval adjustor
judges (FSP paper §3.3: g(η) = Δf/Δt, Eq. 7).

The adjustor fits g(η) on the training progress of each iteration and judges its stages on
it.  The online objective (``ServerPort.estimated_objective``: each point's last-seen loss,
scaled up to the points not visited yet) is the objective of no θ: a point's loss changes
in it when the point is visited again, a pass after its last visit, so an iteration shorter
than a pass is credited with the steps of the previous pass (:mod:`flegel.interval.multistage`,
the per-update notes).  The gauge measures what iteration t did on the exact objective
instead: at its barrier θ_{t+1} is applied, and

    progress_t = G(θ_t) − G(θ_{t+1}),    G(θ) = Σ_w (n_w / m_w) Σ_{i ∈ S_w} f_i(θ)

with ``S_w`` a fixed subset of the master's seeded sample of worker w's shard
(``DataInfo.sample``, ``sample_sizes``), ``m_w = |S_w|`` in proportion to the shard's
``n_w`` points: an unbiased, stratified estimate of f(θ) -- and the same points for every θ,
so the difference is paired (the points' own spread of losses cancels).

**Its cost.**  The evaluation runs on the master between the update and the next broadcast,
while every worker waits.  The gauge times itself (seconds per point evaluated) and sizes
its subset so that an evaluation costs :data:`SHARE` of the median wall time of the recent
iterations, at least :data:`FLOOR` points (below that the estimate's noise, not the
iteration, decides) and at most the sample; the subset grows at most :data:`GROWTH` times
per barrier, and a difference is taken on the points both evaluations share (a prefix of
one fixed order of chunks, interleaved across the shards in proportion to their sizes).
Where the floor alone would cost more than :data:`DEAR` of the first iteration it measures
(timed on its second chunk, before any observation read it: one measure for the whole run),
or the master holds no sample, or the algorithm has no ``evaluate`` (a user's algorithm), the
gauge gives up and the adjustor reads the online estimate, as before (``progress_measure``
in ``summary.json`` says which).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from flegel.ports import ServerPort
from flegel.state import AttributeState

#: The gauge's evaluation takes at most this share of the median iteration's wall time.
SHARE = 0.05
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
    """The exact objective of θ on a fixed stratified subset of the master's sample (module
    docstring), and the paired progress of an iteration from it.

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
    seconds : float
        Seconds spent evaluating, in all.
    evaluations, points : int
        Evaluations made, and points evaluated in all.
    gave_up : str or None
        Why the gauge stopped (the adjustor then reads the online estimate).
    """

    #: Rebuilt from the job (the sample and the seed) on a resume.
    NOT_STATE: ClassVar[tuple[str, ...]] = ("chunks", "weights", "clock")

    def __init__(self, sample_sizes: Sequence[int], shard_sizes: Sequence[int] = (),
                 seed: int = 0, share: float = SHARE, floor: int = FLOOR,
                 off: str | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.chunks = chunk_order(sample_sizes, shard_sizes, seed)
        total = float(sum(shard_sizes)) or float(sum(sample_sizes))
        self.weights = [total * ((shard_sizes[w] if shard_sizes else s) / max(total, 1.0))
                        for w, s in enumerate(sample_sizes)]  # n_w per stratum
        self.share = share
        self.floor = floor
        self.n = self._chunks_for(floor)
        self.values: list[float] | None = None  # per chunk, of the θ in force
        self.marked: list[float] | None = None
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

    @property
    def active(self) -> bool:
        """Whether the gauge measures (else the online estimate stands)."""
        return self.gave_up is None

    def evaluate(self, evaluate: Evaluate, wall_s: float) -> bool:
        """Evaluate θ in force on the subset; False where the gauge does not measure.

        The first evaluation decides whether it measures at all: an ``evaluate`` that fails
        on the sample's rows (a user's algorithm may need per-point state) gives it up; its
        second chunk is timed
        (the first may carry the kernel's first call on the master), and where the floor
        would cost more than :data:`DEAR` of ``wall_s`` (the coming iteration's wall time,
        as far as it is known) at that pace, the gauge gives up before any observation read
        it -- one measure of progress for the whole run (a stage's windows compared against
        a rate taken on the other measure left their line: NMF, 1-3 re-fits in each of two
        runs where the gauge gave up after three barriers).
        """
        if not self.active:
            return False
        chunks = self.chunks[:self.n]
        decide = min(2, len(chunks)) if self.evaluations == 0 else 0
        t0 = self.clock()
        values: list[float] = []
        for _, rows in chunks:
            t = self.clock()
            try:
                v = evaluate(rows)
            except Exception as exc:  # noqa: BLE001 -- a user's evaluate on rows without state
                if not decide:
                    raise  # it worked before: a fault of the algorithm, not the gauge's
                v, self.gave_up = None, f"evaluate failed: {exc!r}"
            if v is None:
                self.gave_up = self.gave_up or "no evaluate"
                return False
            values.append(float(v))
            if len(values) == decide and self._dear(self.clock() - t, len(rows), wall_s):
                self.seconds += self.clock() - t0
                return False
        spent = self.clock() - t0
        points = sum(len(rows) for _, rows in self.chunks[:self.n])
        self.seconds += spent
        self.evaluations += 1
        self.points += points
        self.per_point = (self.per_point + [spent / max(points, 1)])[-RECENT:]
        self.values = values
        return True

    def estimate(self, values: Sequence[float]) -> float:
        """G on the first ``len(values)`` chunks: Σ_w n_w · (mean loss of stratum w's rows)."""
        sums = [0.0] * len(self.weights)
        rows = [0] * len(self.weights)
        for (w, r), v in zip(self.chunks, values):
            sums[w] += v
            rows[w] += len(r)
        return sum(self.weights[w] * sums[w] / rows[w] for w in range(len(sums)) if rows[w])

    def progress(self, server: ServerPort, wall_s: float, timed: bool,
                 online: float) -> float:
        """Iteration t's progress G(θ_t) − G(θ_{t+1}), θ_{t+1} being in force (its barrier),
        on the chunks both evaluations share.

        ``online`` (the online estimate's change) where the gauge does not measure, held no
        G(θ_t), or the iteration was not ``timed`` (an iteration the adjustor does not
        judge: nothing evaluated).  ``wall_s``, the iteration's wall time, sizes the next
        subset."""
        if not (timed and self.active):
            return online
        before = self.values
        if not self.evaluate(server.evaluate_sample, wall_s):
            return online
        self._resize(wall_s)
        if before is None or self.values is None:
            return online
        k = min(len(before), len(self.values))
        return self.estimate(before[:k]) - self.estimate(self.values[:k])

    def prime(self, server: ServerPort, needed: bool, wall_s: float) -> None:
        """Hold G of the θ in force where the next iteration is ``needed`` (its progress is
        read; ``wall_s``: its expected wall time) and none is held; otherwise forget G (θ
        moves on unmeasured)."""
        if not needed:
            self.values = None
        elif self.values is None:
            self.evaluate(server.evaluate_sample, wall_s)

    def follow(self, mark: bool, rollback: bool) -> None:
        """θ marked, or rolled back to the mark (FSPV's rolled-back probes): G with it."""
        if mark:
            self.marked = self.values
        if rollback and self.marked is not None:
            self.values = self.marked

    def _dear(self, spent: float, points: int, wall_s: float) -> bool:
        """Give up where the floor, at ``spent`` seconds for ``points``, costs more than
        :data:`DEAR` of ``wall_s`` (the first evaluation's second chunk: :meth:`evaluate`)."""
        floor_points = sum(len(r) for _, r in self.chunks[:self._chunks_for(self.floor)])
        cost = spent / max(points, 1) * floor_points
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
