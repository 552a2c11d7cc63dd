"""SpecSync's abort rule on the simulated clock (tests/fakes.py): the paper's CHECKRESYNC
(Zhang et al., ICDCS 2018, Algorithm 2 and Section V-B), rebuilt from the messages alone.

A worker's iteration begun after one of its pushes opens a window of ABORT_TIME; when the
window closes, the worker is told to abort if more than ``m · ABORT_RATE`` pushes by others
were applied while it was open and it is still computing.  The oracle below replays the
master's arrivals and θ sends and checks every abort signal against that rule both ways:
none that the paper would not send (an iteration that ended before its timer fired, a
restart, the first iteration, too few pushes), and one for every window that the paper would
abort (the decision comes at the first master event after the window closes: at most one
tick, ``poll_s``, late).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from flegel.protocol import Reason, Signal
from flegel.sync.specsync import tune
from tests.fakes import Simulation

LAT = 50e-6
POLL = 1e-4


@dataclass
class Window:
    rank: int
    opened: float
    closes: float
    pushes: int          # pushes by others applied while it was open
    ended: float         # when the worker's next commit (push or abort) arrived
    signalled: bool = False


def _run(delta_ms: float, rate: float, slowdown: dict[int, float], iterations: int = 40,
         **kw) -> Simulation:
    return Simulation("specsync", {"adaptive": False, "abort_time_ms": delta_ms,
                                   "abort_rate": rate, "batch": 50},
                      slowdown=slowdown, latency_s=LAT, poll_s=POLL, jitter=0.3,
                      stop={"max_iterations": iterations}, **kw).run()


def windows(sim: Simulation, delta: float) -> list[Window]:
    """Every speculation window of the run as the paper defines it, with what happened in it
    (from the transport's records, not from the policy)."""
    arrivals = [a for a in sim.arrivals if not a.late]
    params = sim.transport.params
    end = arrivals[-1].time  # training stopped at this push
    out: list[Window] = []
    for i, a in enumerate(arrivals):
        if int(a.header["reason"]) == Reason.ABORT:
            continue  # the restart that follows is not speculated on
        answer = [p for p in params[a.sent_from:] if p.rank == a.rank]
        if not answer or answer[0].stop:
            continue
        opened = answer[0].time
        closes = opened + delta
        # Pushes dispatched after this one (so after the answer, or with it held: SSP) and
        # before the window closed.
        later = arrivals[i + 1:]
        pushes = sum(1 for b in later if b.rank != a.rank and b.time <= closes
                     and int(b.header["reason"]) != Reason.ABORT and b.time >= opened)
        nxt = next((b.time for b in later if b.rank == a.rank), float("inf"))
        if nxt == float("inf") and closes + POLL >= end:
            continue  # still open when training stopped
        out.append(Window(a.rank, opened, closes, pushes, nxt))
    return out


def match_signals(sim: Simulation, wins: list[Window]) -> list[tuple[float, int]]:
    """Mark each window that got an abort signal; return the signals that match none."""
    stray = []
    for s in sim.transport.signals_of(Signal.ABORT):
        w = next((w for w in wins if w.rank == s.rank and w.opened <= s.time < w.ended), None)
        if w is None:
            stray.append((s.time, s.rank))
        else:
            w.signalled = True
            # Sent when the window closed, at the first master event from then on.
            assert w.closes - 1e-12 <= s.time <= w.closes + POLL + 1e-9, (s, w)
    return stray


@pytest.mark.parametrize("rate", [0.0, 0.67, 1.0])
def test_aborts_exactly_when_the_paper_says(rate):
    delta = 1.0e-3
    sim = _run(delta * 1e3, rate, {3: 4.0})
    wins = windows(sim, delta)
    assert not match_signals(sim, wins)  # no signal outside a window
    m = len(sim.ranks)
    for w in wins:
        over = w.pushes > m * rate
        if w.signalled:
            # Never more often: enough pushes, and the iteration outlived its window.
            assert over and w.ended >= w.closes, w
        elif over and w.ended > w.closes + POLL + 1e-9:
            pytest.fail(f"window {w} should have been aborted")
    signalled = [w for w in wins if w.signalled]
    assert signalled, "the straggler's windows (2 ms iterations, 1 ms window) abort"
    # The rule is exercised beyond the signalled windows: ones with enough pushes whose
    # iteration ended in time (the timer), or ones that outlived it with too few (Γ).
    assert any((w.pushes > m * rate) == (w.ended < w.closes) for w in wins)


def test_an_iteration_that_ends_before_its_window_closes_is_never_aborted():
    # 5 ms windows, any push aborts: every iteration (0.5 ms fast, 2 ms slow) ends first.
    # (The rule before issue 19 aborted at the first push by another: dozens of aborts.)
    sim = _run(5.0, 0.0, {3: 4.0})
    assert sim.transport.signals_of(Signal.ABORT) == []
    assert sim.policy.summary()["aborts"] == 0


def test_only_iterations_begun_after_a_push_are_speculated_on():
    sim = _run(1.0, 0.0, {3: 4.0})
    for r in sim.ranks:
        its = sim.iterations(r)
        # The first iteration (θ⁰, no notify yet) is not aborted ...
        assert its[0].reason != Reason.ABORT
        # ... nor the restart after an abort (no abort storms).
        for prev, it in zip(its, its[1:]):
            if prev.reason == Reason.ABORT:
                assert it.reason != Reason.ABORT


def test_aborted_work_is_dropped_and_accounted():
    sim = _run(1.0, 0.0, {3: 4.0})
    s = sim.policy.summary()
    arrivals = [a for a in sim.arrivals if not a.late]
    aborted = [a for a in arrivals if int(a.header["reason"]) == Reason.ABORT]
    assert s["aborts"] == len(aborted) > 0
    # Every signal either aborted an iteration or reached a worker that had pushed (stale).
    assert s["abort_signals"] == len(sim.transport.signals_of(Signal.ABORT)) >= s["aborts"]
    assert s["aborted_points"] == sum(int(a.header["aborted"]) for a in aborted) > 0
    assert s["aborted_s"] == pytest.approx(sum(a.header["compute_s"] for a in aborted))
    for w in s["aborted_per_worker"]:
        mine = [a for a in aborted if a.rank == w["rank"]]
        assert w["aborts"] == len(mine)
        assert w["points"] == sum(int(a.header["aborted"]) for a in mine)
    for r, worker in sim.workers.items():
        # Nothing of an aborted iteration is applied: the points the server counts are the
        # pushed ones, and the worker's own tally of thrown-away points is the master's.
        pushed = [a for a in sim.arrivals if a.rank == r  # late ones counted too
                  and int(a.header["reason"]) != Reason.ABORT]
        assert sim.server.workers[r].points == sum(int(a.header["points"]) for a in pushed)
        late = sum(int(a.header["aborted"]) for a in sim.arrivals if a.late and a.rank == r)
        assert worker.aborted_points == s["aborted_per_worker"][r - 1]["points"] + late
    for a in aborted:
        assert a.version_after == a.version_before and a.header["points"] == 0


def test_tuning_keeps_abort_time_within_half_an_iteration():
    # The straggler (span 40 ms) sees the fast workers push every ms after its start; the
    # fast workers (span 1 ms) see a push 0.3 ms after theirs.  Unbounded, Eq. 7 would pick
    # Δ near the straggler's whole span (its gain grows by one a ms, its loss by 3/40); its
    # own half span would allow 20 ms, half the workers' mean span 5.4 ms, half the mean of
    # the epoch's 40 iterations (1 of 40 ms, 39 of 1 ms) 0.99 ms.
    pushes = sorted([(0.001 * k, 2 + k % 3) for k in range(1, 40)] + [(0.040, 1)])
    starts = {1: 0.0, 2: 0.0007, 3: 0.0017, 4: 0.0027}
    spans = {1: 0.040, 2: 0.001, 3: 0.001, 4: 0.001}
    mean = (0.040 + 39 * 0.001) / 40  # Algorithm 1's T: over iterations, not workers
    delta, rates, f = tune(pushes, starts, spans, m=4, mean_span=mean)
    assert 0 < delta <= mean / 2 and f > 0
    assert delta == pytest.approx(0.0003)  # the fast workers' push, within T / 2
    assert rates[1] == pytest.approx(delta * 3 / (0.040 * 4))
    # The fast workers' half span (0.5 ms) is over Δ*: they are speculated on too.
    assert all(rates[r] == pytest.approx(delta * 3 / (0.001 * 4)) for r in (2, 3, 4))
    # With the workers' mean (10.75 ms), the bound would let Δ* reach 5 ms.
    delta, rates, f = tune(pushes, starts, spans, m=4, mean_span=sum(spans.values()) / 4)
    assert delta == pytest.approx(0.005)  # the last push within half that mean
    assert rates[1] == pytest.approx(delta * 3 / (0.040 * 4))
    # A worker whose half span is under Δ* is not speculated on: its iteration would end
    # (or all but end) before the timer fired.
    assert all(rates[r] == math.inf for r in (2, 3, 4))


def test_adaptive_abort_time_stays_within_half_an_iteration():
    # Adaptive, one worker 4x slower: every ABORT_TIME the tuning picks is within half the
    # mean iteration span, and a worker shown without a rate (None) is never aborted.
    sim = Simulation("specsync", {"adaptive": True, "batch": 50}, slowdown={3: 4.0},
                     latency_s=LAT, poll_s=POLL, jitter=0.3,
                     stop={"max_iterations": 60}).run()
    s = sim.policy.summary()
    spans = {r: [it.ended - it.began for it in sim.iterations(r)
                 if it.reason is not None and it.reason != Reason.ABORT] for r in sim.ranks}
    # Algorithm 1's T: the mean over iterations (the fast workers' many weigh more than
    # the straggler's few; the workers' mean would allow about 1.5x as long a window).
    every = [x for v in spans.values() for x in v]
    mean = sum(every) / len(every)
    picked = [t["abort_time_ms"] / 1e3 for t in s["tuning_log"] if t["abort_time_ms"] > 0]
    assert len(picked) > 3 and s["aborts"] > 0
    # (each epoch's own spans vary around the run's: 25 % slack)
    # (the master times a span from sending θ to applying the push: 2 latencies more)
    assert max(picked) <= 1.25 * (mean + 2 * LAT) / 2
    never = {r for r in sim.ranks if all(t["abort_rate"].get(r) is None
                                         for t in s["tuning_log"] if t["abort_time_ms"] > 0)}
    assert all(w["aborts"] == 0 for w in s["aborted_per_worker"] if w["rank"] in never)


def test_an_aborted_iteration_does_not_leave_its_suspension_to_the_restart():
    # Worker 3 is suspended 20 ms per 50-point iteration (the Injected pattern); windows of
    # 5 ms abort it mid-suspension.  The restart recomputes the points and is suspended
    # for them again: one span (~20.5 ms), not the 15 ms the dropped work still owed first.
    tau = 0.020
    slow = {"pattern": "injected", "tau_ms": tau * 1e3, "every": 50, "workers": [3]}
    sim = _run(5.0, 0.0, {}, iterations=200, stragglers=[slow])  # seeded: 6 restarts
    its = sim.iterations(3)
    restarts = [b for a, b in zip(its, its[1:]) if a.reason == Reason.ABORT
                and b.reason is not None]
    assert len(restarts) >= 3
    for it in restarts:
        assert it.ended - it.began < 1.2 * tau, it
    # An aborted commit paces no points (FSP's coverage cap reads incurred_s per point):
    assert all(it.header["incurred_s"] == 0.0 for it in its if it.reason == Reason.ABORT)
    # What the straggler served is its committed iterations' τ and the aborted ones' part.
    served = sum(it.header["slowed_s"] for it in its if it.reason is not None)
    pushes = sum(it.reason != Reason.ABORT for it in its if it.reason is not None)
    assert served < (pushes + 1) * tau + sum(5e-3 + POLL + 2 * LAT for it in its
                                             if it.reason == Reason.ABORT)
    # The straggler record adds up: the time its pattern says it lost is the time served
    # (the dropped suspensions forgiven), plus what it still owed when training stopped.
    worker = sim.workers[3]
    lost = sum(p["lost_s"] for p in worker.stragglers.record())
    assert lost == pytest.approx(served + worker.debt_s, abs=1e-5)


class _Server:
    """The few parts of a server the speculation windows touch, on a hand-set clock."""

    ranks = [1, 2, 3]
    version = 0

    def __init__(self) -> None:
        self.t = 0.0
        self.signals: list[list[int]] = []

    def now(self) -> float:
        return self.t

    def send(self, rank, instructions) -> None:
        pass

    def signal(self, ranks, kind, version=None) -> None:
        self.signals.append(list(ranks))


@pytest.mark.parametrize(("at", "counted"), [(0.75, True), (0.75 - 1e-9, True),
                                             (0.75 + 1e-9, False)])
def test_a_push_at_the_window_end_counts(at, counted):
    # Worker 1's window opens at 0.5 s for 250 ms (both exact in binary); one push by
    # worker 2 at ``at`` and Γ = 0: abort iff it is counted.  The window is closed on both
    # ends, as tune counts the push Δ after a start.
    from flegel.sync.specsync import SpecSync

    srv = _Server()
    policy = SpecSync(srv, {**{k: v.default for k, v in SpecSync.OPTIONS.items()},
                            "adaptive": False, "abort_time_ms": 250.0, "batch": 50})
    policy.clock[1] = 1  # it has pushed: its next iteration is speculated on
    srv.t = 0.5
    policy.answer(1)
    srv.t = at
    policy.after_push(2, {}, at)
    policy.on_tick(0.75 + 1e-3)
    assert srv.signals == ([[1]] if counted else [])


def test_tune_counts_a_push_at_exactly_start_plus_delta():
    # One push by worker 2 at 0.3 + 0.1: Δ = 0.1 gains it (loss 0.1 per the 1 s span), so
    # Δ* = 0.1; were the push at Δ left out, no Δ would gain anything.
    delta, rates, f = tune([(0.3 + 0.1, 2)], {1: 0.3}, {1: 1.0}, m=2, mean_span=1.0)
    assert delta == pytest.approx(0.1) and f == pytest.approx(0.9)
    # Just after the start and just before Δ: the same push, a step up at its own time.
    delta, _, _ = tune([(0.3 + 0.1 - 1e-6, 2)], {1: 0.3}, {1: 1.0}, m=2, mean_span=1.0)
    assert delta == pytest.approx(0.1 - 1e-6)
