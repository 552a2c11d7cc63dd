"""Speculative Synchronization (SpecSync paper: Zhang et al., ICDCS 2018, Sections IV-V).

Workers run ASP (or SSP) pushes.  After a worker starts an iteration, the master -- in the role
of the paper's centralized scheduler (Section V-A) -- counts the pushes other workers make
within ABORT_TIME of that start; if they are more than ``m · ABORT_RATE`` (m workers), θ has
changed enough that the iteration is worth restarting: the worker aborts it, rolls its shard
back, and starts over from the fresher θ (Section IV-A, Algorithm 2).

Implementation:

* Every θ is sent with ``mark = 1``, so the worker journals its per-point state and can roll
  back (:meth:`flegel.runtime.store.ShardStore.mark`); the abort is ``Signal.ABORT`` for the θ
  version the worker computes from.
* The decision is the paper's (Algorithm 2, CHECKRESYNC; Section V-B): when a worker is sent
  θ after a push, a *window* of ABORT_TIME opens; pushes by others while it is open are
  counted; when it closes -- at the first master event at or after ``start + ABORT_TIME``: a
  push, or a tick of the master loop when nothing arrived (at most ``POLL_MAX_S`` late) --
  the worker is told to abort if the count exceeds ``m · ABORT_RATE`` and it is still
  computing that iteration. The window is closed on both ends, ``[start, start +
  ABORT_TIME]``: a push applied at exactly its end is counted before it decides, as
  :func:`tune` counts the push Δ after a start in ``ũ_i(Δ)``. An iteration that ends (its
  push) before its window closes is never aborted: its timer is reset by its own notify, as
  the paper's scheduler resets the sender's counter and timer. Issue 19 found the earlier
  rule -- abort at the push that makes the count exceed the threshold -- aborting such
  iterations too (it is not "the same decision, earlier": the iteration may end before the
  timer would have fired), and restarting before the window's later pushes could be
  uncovered.
* The window opens when θ is sent, as the paper's timer starts at the notify that answers
  the push.  Under ``base: asp`` that is at the push; under ``base: ssp`` a worker held by
  the staleness bound is sent θ -- and its window opens -- only when it is released, so the
  pushes it waited through are not counted (its iteration starts from them).
* A window keeps the ABORT_TIME and threshold in force when it opened (the paper's timer is
  set then); a retuning applies to windows opened after it.
* As in Algorithm 2, only an iteration started after a push is speculated on; the first
  iteration (no notify yet) and a restart are not (no abort storms).
* Aborted work is dropped (the worker's ``finish`` returns False: nothing is applied) and
  accounted: ``aborts``, ``aborted_points`` and ``aborted_s`` (the iteration's time, the
  straggler's injected delay included) per worker; ``abort_signals`` counts the signals
  sent (a signal that reaches a worker after it pushed is dropped as stale).
* ``adaptive: true`` retunes ABORT_TIME and ABORT_RATE at the start of every epoch (an epoch
  ends when every worker has pushed once more, Section II-B) with Algorithm 1 on the pushes of
  the epoch just ended: the freshness gain ``ũ_i(Δ)`` is the number of pushes by others within
  Δ after the start of one of worker i's iterations of that epoch (Eq. 5).  The paper takes
  its last one; we take its first one begun in the epoch, since the pushes after a fast
  worker's last iteration are mostly still to come when the epoch ends (its gain would read
  as 0).  The loss is ``(m − 1)·Δ / T_i`` (Eq. 6) with ``T_i`` its mean iteration span
  there; Δ* maximizes Eq. 7 over the candidates where the gain steps up (a push right-aligned
  with an iteration start).
  ABORT_RATE is set per worker, Γ_i = l̃_i(Δ*)/m = Δ*(m − 1)/(T_i m), as Section IV-B derives
  it "to ensure that re-execution always makes a positive contribution"; Algorithm 1's line 8
  writes it with the mean span T, which makes a fast worker (small T_i) abort for gains
  smaller than its loss while a straggler hardly ever does.  When no Δ gains more than it
  loses, Δ* = 0: no speculation in that epoch.  Candidates stop at half the mean span T
  of the epoch's iterations -- flegel's choice: Algorithm 1 sets no bound; T / 2 is borrowed
  from the paper's grid search (SpecSync-Cherrypick searched ABORT_TIME up to "half of the
  batch time", Section VI-E) --, and a worker whose half span is under Δ* is not speculated
  on (Γ_i = ∞; :func:`tune`, Notes).
  Unbounded, with one Injected straggler Eq. 7 picked Δ* near the straggler's whole span
  (its gain, the fast workers' pushes, grows by dozens; its loss by m − 1 at most), and
  every straggler iteration was aborted when nearly done (issue 19); bounded by its own
  half span only, each abort still threw away half of it (the straggler made 0.45-0.51
  passes a second against ASP's 0.76-0.80).  A worker without a push in the epoch keeps
  its rate.  Until the first epoch ends, the configured ``abort_time_ms`` / ``abort_rate``
  are used (none: no speculation).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, ClassVar

import numpy as np

from flegel.ports import ServerPort, WorkerPolicy, WorkerPort
from flegel.protocol import Instructions, Reason, Signal
from flegel.sync.ssp import SSP
from flegel.validation import Key, boolean, choice, number

#: Pushes kept for the adaptive tuning (a longer epoch is tuned on its latest pushes).
HISTORY = 4096


def tune(pushes: list[tuple[float, int]], starts: dict[int, float], spans: dict[int, float],
         m: int, mean_span: float) -> tuple[float, dict[int, float], float]:
    """Algorithm 1 (Adaptive Tuning): ABORT_TIME Δ* and ABORT_RATE from a push history.

    Parameters
    ----------
    pushes : list of (time, rank)
        Pushes from the earliest of ``starts`` until now.
    starts : dict
        rank -> start time of the iteration of that epoch whose deferral is evaluated (the
        module docstring says which); ranks without one are left out.
    spans : dict
        rank -> its mean iteration span ``T_i`` in that epoch (seconds, > 0).
    m : int
        Number of workers.
    mean_span : float
        Algorithm 1's ``T``: the mean span of every iteration of that epoch (seconds, > 0),
        so each worker weighs by its share of the iterations (a straggler with one
        iteration among dozens weighs one, not ``1/m`` of the mean).

    Returns
    -------
    (abort_time_s, abort_rates, F)
        Δ* (0.0 when no Δ improves freshness), Γ_i = Δ*(m − 1)/(T_i m) per rank of ``starts``
        (``math.inf``, never abort, for a worker whose half span is under Δ*), and the
        estimate F(Δ*) of Eq. 7.

    Notes
    -----
    Δ is at most half the mean span T (Algorithm 1's "averaged iteration span"), flegel's
    choice: Algorithm 1 searches Δ unbounded; the bound is borrowed from the paper's grid
    search, SpecSync-Cherrypick, which tried ABORT_TIME up to "half of the batch time"
    (Section VI-E), not from the adaptive algorithm.  And a worker
    takes part only where Δ ≤ T_i / 2: Eq. 6's Δ / T_i is a probability, which only holds
    for Δ below the span.  Beyond it the timer fires when the iteration is
    mostly done (or over), the abort throws most of it away, and the re-execution -- as long
    again -- misses about as many later pushes as the wait uncovered.
    """
    if not starts:
        return 0.0, {}, 0.0
    times = np.array([p[0] for p in pushes], dtype=np.float64)
    ranks = np.array([p[1] for p in pushes])
    others = {i: np.sort(times[ranks != i]) for i in starts}
    # Candidates: Δ where some ũ_i steps up (a push right-aligned with an iteration start),
    # within that worker's half span and half the mean span (Notes).
    deltas = np.unique(np.concatenate(
        [d[d <= spans[i] / 2] for i, s in starts.items() for d in [others[i] - s]] + [[]]))
    deltas = deltas[(deltas > 0) & (deltas <= mean_span / 2)]
    if deltas.size == 0:
        return 0.0, {i: 0.0 for i in starts}, 0.0
    f = np.zeros(deltas.size)
    for i, s in starts.items():
        o = others[i]
        # + 1 ns: s + (t - s) may round just below t, and the push at t must count.
        gain = np.searchsorted(o, s + deltas + 1e-9, "right") - np.searchsorted(o, s, "right")
        f += np.where(deltas <= spans[i] / 2, gain - (m - 1) / spans[i] * deltas, 0.0)
    k = int(np.argmax(f))  # the smallest Δ on ties
    best, best_f = (float(deltas[k]), float(f[k])) if f[k] > 0 else (0.0, 0.0)
    return best, {i: best * (m - 1) / (spans[i] * m) if best <= spans[i] / 2 else math.inf
                  for i in starts}, best_f


def _shown(rate: float) -> float | None:
    """Γ_i as summary.json shows it: None for a worker that is not speculated on (JSON has
    no infinity)."""
    return round(rate, 6) if math.isfinite(rate) else None


class SpecSyncWorker(WorkerPolicy):
    """The worker side of SpecSync: on an abort signal, throw the iteration's work away and
    roll the shard back to where it began (every θ comes with ``mark = 1``), so the restart
    from the fresher θ redoes the same points (Section IV-A, Algorithm 2)."""

    def on_signal(self, port: WorkerPort, kind: Signal) -> Reason | None:
        return Reason.ABORT if kind == Signal.ABORT else super().on_signal(port, kind)

    def finish(self, port: WorkerPort, reason: Reason) -> bool:
        if reason == Reason.ABORT:
            port.rollback()
            return False
        return True


class SpecSync(SSP):
    """Master policy of SpecSync on ASP (``base: asp``) or SSP (``base: ssp`` with ``s``).

    Options
    -------
    base : {"asp", "ssp"}
        The model SpecSync runs on (Section IV-A, "Benefits" 2).
    s : int
        SSP's staleness threshold (``base: ssp`` only).
    adaptive : bool
        Retune ABORT_TIME and ABORT_RATE every epoch (Algorithm 1).
    abort_time_ms : float or None
        ABORT_TIME; with ``adaptive`` its value until the first retuning.
    abort_rate : float
        ABORT_RATE Γ: abort when more than Γ·m others pushed within ABORT_TIME.
    batch, overhead
        See :class:`~flegel.sync.asynchronous.PushPolicy`.
    """

    OPTIONS: ClassVar[dict[str, Key]] = {
        **SSP.OPTIONS,
        "base": choice("the model SpecSync runs on (s applies to ssp only)", ("asp", "ssp"),
                       "asp"),
        "adaptive": boolean("retune ABORT_TIME and ABORT_RATE every epoch (Algorithm 1)",
                            True),
        "abort_time_ms": number("ABORT_TIME; with adaptive, its value until the first "
                                "retuning (required when adaptive is false)", None, lo=0,
                                lo_open=True, null=True, unit="milliseconds"),
        "abort_rate": number("ABORT_RATE Γ: abort when more than Γ·m others pushed within "
                             "ABORT_TIME", 0.0, lo=0),
    }

    @staticmethod
    def check_options(options: dict[str, Any]) -> tuple[str, str] | None:
        """Cross-key rule: ``(key, expected)`` when it is broken, else None."""
        if options["abort_time_ms"] is None and not options["adaptive"]:
            return "abort_time_ms", "a positive number of milliseconds (adaptive: false needs it)"
        return None

    WORKER = SpecSyncWorker

    def __init__(self, server: ServerPort, options: dict[str, Any]) -> None:
        super().__init__(server, options)
        self.base = options["base"]
        self.adaptive = bool(options["adaptive"])
        t_ms = options["abort_time_ms"]
        self.abort_time = 0.0 if t_ms is None else t_ms / 1e3
        ranks = server.ranks
        self.abort_rate = {r: float(options["abort_rate"]) for r in ranks}
        #: Open speculation windows: rank -> (closes at, abort when more pushes than this).
        self.window: dict[int, tuple[float, float]] = {}
        self.seen = {r: 0 for r in ranks}             # pushes by others in its window so far
        self._restart = {r: False for r in ranks}
        self.abort_signals = {r: 0 for r in ranks}
        self.aborts = {r: 0 for r in ranks}
        self.aborted_points = {r: 0 for r in ranks}
        self.aborted_s = {r: 0.0 for r in ranks}
        # Adaptive tuning: (time, rank, start of that iteration) of recent pushes, and epochs.
        self.log: deque[tuple[float, int, float]] = deque(maxlen=HISTORY)
        self.epoch = 0
        self.epoch_start = 0.0
        self.tunings: list[dict[str, Any]] = []

    def hold(self, rank: int) -> bool:
        return self.base == "ssp" and super().hold(rank)

    def instructions(self, rank: int) -> Instructions:
        # Journal every iteration, so an abort can roll back.
        return Instructions(batch=super().instructions(rank).batch, mark=1)

    # ---------------------------------------------------------------- speculation
    def on_answer(self, rank: int, t: float) -> None:
        # Algorithm 2: speculation starts with an iteration begun after a push (the notify
        # starts the timer), not with the first iteration nor with a restart.
        self.seen[rank] = 0
        self.window.pop(rank, None)
        if (self.clock[rank] > 0 and not self._restart[rank] and self.abort_time > 0
                and math.isfinite(self.abort_rate[rank])):
            self.window[rank] = (t + self.abort_time, self.n * self.abort_rate[rank])
        self._restart[rank] = False

    def after_push(self, rank: int, header: dict[str, float], t: float) -> None:
        # Time of the update, not of the arrival: a push that arrived with others in one
        # poll but is applied after r was sent θ is one r's θ misses (Section III-A).
        t = self.now()
        self.log.append((t, rank, self.started[rank]))
        # Its iteration ended before its timer fired: nothing to abort (module notes).
        self.window.pop(rank, None)
        self._close(t, at=False)  # windows that closed before this push decide without it
        for r in self.window:
            if r != rank:
                self.seen[r] += 1
        self._close(t)  # a window closing at this push counts it, then decides
        if self.adaptive and min(self.clock.values()) > self.epoch:
            self._retune(t)

    def on_tick(self, now: float) -> None:
        self._close(now)

    def _close(self, now: float, at: bool = True) -> None:
        """CHECKRESYNC of every window that closed by ``now`` (``at``: one closing at ``now``
        too): abort its iteration if more than ``m · ABORT_RATE`` others pushed in it.

        A window is closed on both ends, ``[start, start + ABORT_TIME]``: a push at exactly
        ``start + ABORT_TIME`` counts, as in :func:`tune` (Eq. 5's ``ũ_i(Δ)`` counts the
        push Δ after the start: its candidates are such pushes)."""
        for r, (until, most) in list(self.window.items()):
            if now < until or (now == until and not at):
                continue
            del self.window[r]
            if self.seen[r] > most:
                self.abort_signals[r] += 1
                self.server.signal([r], Signal.ABORT, self.computing[r])

    def on_abort(self, rank: int, header: dict[str, float], t: float) -> None:
        self._restart[rank] = True
        self.aborts[rank] += 1
        self.aborted_points[rank] += int(header["aborted"])
        self.aborted_s[rank] += header["compute_s"]

    # ---------------------------------------------------------------- Algorithm 1
    def _retune(self, t: float) -> None:
        """A new epoch began: tune ABORT_TIME and ABORT_RATE on the epoch just ended."""
        start = self.epoch_start
        self.epoch = min(self.clock.values())
        self.epoch_start = t
        starts: dict[int, float] = {}
        spans: dict[int, list[float]] = {}
        for when, r, began in self.log:
            if when < start:
                continue
            spans.setdefault(r, []).append(when - began)
            if r not in starts or starts[r] < start <= began:
                starts[r] = began  # its first iteration begun in the epoch
        mean_spans = {r: max(float(np.mean(v)), 1e-9) for r, v in spans.items()}
        # Algorithm 1's T, "averaged iteration span" over the epoch's pushes (its l): the
        # mean of every iteration's span, not of the workers' means.
        every = max(float(np.mean([x for v in spans.values() for x in v])), 1e-9)
        since = min(starts.values(), default=start)
        pushes = [(when, r) for when, r, _ in self.log if when >= since]
        delta, rates, f = tune(pushes, starts, mean_spans, self.n, every)
        self.abort_time = delta
        self.abort_rate.update(rates)
        self.tunings.append({"epoch": self.epoch, "time_s": round(t, 6),
                             "abort_time_ms": round(delta * 1e3, 4), "F": round(f, 4),
                             "abort_rate": {r: _shown(g) for r, g in rates.items()}})

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.base == "asp":
            out.pop("s", None)
        ranks = self.server.ranks
        out.update(base=self.base, adaptive=self.adaptive,
                   abort_signals=sum(self.abort_signals.values()),
                   aborts=sum(self.aborts.values()),
                   aborted_points=sum(self.aborted_points.values()),
                   aborted_s=sum(self.aborted_s.values()),
                   aborted_per_worker=[{"rank": r, "aborts": self.aborts[r],
                                        "points": self.aborted_points[r],
                                        "seconds": self.aborted_s[r]} for r in ranks],
                   abort_time_ms=self.abort_time * 1e3,
                   abort_rate=[_shown(self.abort_rate[r]) for r in ranks],
                   tunings=len(self.tunings), tuning_log=self.tunings[-200:])
        return out
