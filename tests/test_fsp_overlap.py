"""FSP's overlap (issue 19; ``sync.overlap``, the worker loop's "Overlap"): a straggler's
suspension runs on while it waits for θ, so a barrier storm no longer throttles it, and
nothing committed changes.  One process: the real loop (:mod:`flegel.runtime.loop`), master
and worker policies on the simulated clock (tests/fakes.py), and the loop's wait alone on a
stub host."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest

from flegel.ports import WorkerPolicy
from flegel.runtime.loop import Poll, Totals, await_params, serve
from tests.fakes import Simulation

#: A barrier storm: η of 2 ms, a 1 ms one-way latency (every wait for θ is >= 2 ms), the
#: fast workers at 1 µs a point, worker 1 suspended 32 ms every 1,000 points (32 µs a point).
STORM: dict[str, Any] = dict(points=4000, cost_s=1e-6, block_ms=0.2, latency_s=1e-3,
                             stragglers=[{"pattern": "injected", "tau_ms": 32, "workers": [1]}],
                             stop={"max_iterations": None, "tolerance": None,
                                   "max_time_s": 0.5})


def storm(overlap: bool | None, **options: Any) -> Simulation:
    given = {"interval": "fixed", "eta_ms": 2.0, **options}
    if overlap is not None:
        given["overlap"] = overlap
    return Simulation("fsp", given, **STORM).run()


def served(sim: Simulation, rank: int) -> float:
    """The suspension the worker's pattern imposed that it has served (what it still owes
    left out)."""
    w = sim.workers[rank]
    return sum(p.lost_s for p in w.stragglers.patterns) - w.debt_s


def test_the_straggler_keeps_its_pace_under_a_barrier_storm():
    """Paused at every barrier (one every few ms), the straggler used to lose each wait for
    θ on top of its suspension: here 5,004 points in 0.5 s.  With the suspension running on
    while it waits it loses only what its pattern says: within 10 % of 0.5 s / 32 µs a
    point, and nearly 3x the points without overlap (the default is on)."""
    on, off = storm(None), storm(False)
    pts_on, pts_off = on.workers[1].points, off.workers[1].points
    bound = on.now / (32e-6 + 1e-6)
    assert pts_on >= 0.9 * bound, (pts_on, bound)
    # Never more than the pattern allows: 1,000 points per 32 ms served, one burst ahead.
    assert pts_on <= (on.now / 0.032 + 1) * 1000, (pts_on, on.now)
    assert pts_on >= 2.5 * pts_off, (pts_on, pts_off)
    # Both runs had the storm: many barriers, the straggler paused in most of them.
    assert len(on.barrier_events()) > 100 and len(off.barrier_events()) > 100


@pytest.mark.parametrize("overlap", [True, False])
def test_the_suspension_is_lost_once_and_accounted_as_slowed(overlap: bool):
    """Every second the pattern imposed and the worker served is counted once, as slowed
    time (``slowed_s``), whether served within an iteration or during a wait for θ; the
    wait (``wait_s``, the COMMIT header's) stays the elapsed wait, the paper's
    synchronization cost (Fig. 10), so with overlap the two share the suspension served
    while waiting -- most of the straggler's waits."""
    sim = storm(overlap)
    w = sim.workers[1]
    assert w.slowed_s == pytest.approx(served(sim, 1), abs=1e-9)
    iterations = [it.header for it in sim.iterations(1) if it.header is not None]
    in_iterations = sum(h["slowed_s"] for h in iterations)
    in_waits = w.slowed_s - in_iterations
    if overlap:
        assert in_waits > 0.5 * w.wait_s, (in_waits, w.wait_s)
    else:
        assert in_waits == pytest.approx(0.0, abs=1e-9)
    assert sum(h["wait_s"] for h in iterations) <= w.wait_s + 1e-9


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("migration", ["off", "async", "sync"])
def test_what_is_committed_is_every_visit_exactly_once(overlap: bool, migration: str):
    """θ's cluster counts equal the labels every worker's shard holds: each trained point's
    statistics reached the master once, none lost and none twice, with or without overlap,
    with points migrating away from the straggler meanwhile (its suspension served during
    the windows' waits too) and through coverage's hold (K-means covers before its first
    update).  Run to ``stop.max_time_s``: every commit applied, every point held once."""
    sim = storm(overlap, migration={"mode": migration})
    held = sum(int(sim.workers[r].store.n_held) for r in sim.ranks)
    assert held == sim.n_points
    labels = np.concatenate([sim.workers[r].store.state["label"][~sim.workers[r].store.inactive]
                             for r in sim.ranks])
    counts = np.bincount(labels[labels >= 0], minlength=len(sim.server.theta["counts"]))
    assert np.array_equal(np.asarray(sim.server.theta["counts"]), counts)


def test_other_models_do_not_overlap():
    """The wait stays the model's under every other policy (the base default), and FSP's
    overlap is the key's (``sync.overlap: false`` turns it off)."""
    assert WorkerPolicy().overlaps(None) is False  # type: ignore[arg-type]
    assert storm(False).workers[1].policy.overlaps(None) is False  # type: ignore[arg-type]
    assert storm(None).workers[1].policy.overlaps(None) is True  # type: ignore[arg-type]


class _Host:
    """Just what :func:`await_params` touches: a clock, the debt, instructions arriving at
    ``arrive_at``, the policy."""

    def __init__(self, overlap: bool, debt_s: float, arrive_at: float) -> None:
        self.t = 0.0
        self.debt_s = debt_s
        self.arrive_at = arrive_at
        self.slowed_s = 0.0
        self.debt_at_take: list[float] = []
        self.slowed_at_take: list[float] = []

        class Policy(WorkerPolicy):
            def overlaps(self, port: Any) -> bool:
                return overlap

        self.policy = Policy()

    def now(self) -> float:
        return self.t

    def take_params(self) -> dict[str, float] | None:
        self.debt_at_take.append(self.debt_s)
        self.slowed_at_take.append(self.slowed_s)
        return {"version": 1.0} if self.t >= self.arrive_at else None

    def side_work(self) -> None:
        pass

    def add(self, totals: Totals) -> None:
        self.slowed_s += totals.slowed_s


def drive_sim(gen: Generator[Any, Any, Any], host: _Host) -> Any:
    try:
        while True:
            cmd = next(gen)
            assert isinstance(cmd, Poll)
            host.t += cmd.seconds
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize("overlap", [True, False])
def test_the_wait_serves_the_debt_before_instructions_are_taken(overlap: bool):
    """Instructions that ask for a checkpoint are taken in (and the state sent) with the
    suspension served so far already off the debt *and in the totals* (slowed time, added
    by the loop's :func:`serve` as it serves): a resumed worker owes what the uninterrupted
    one would and has lost none of what it served.  Not past zero, and not at all without
    overlap."""
    host = _Host(overlap, debt_s=0.004, arrive_at=0.003)
    drive_sim(await_params(host), host)  # type: ignore[arg-type]
    waited = host.t
    assert waited >= 0.003
    if overlap:
        assert host.debt_at_take[-1] == pytest.approx(max(0.004 - waited, 0.0))
        assert host.slowed_at_take[-1] == pytest.approx(min(waited, 0.004))
    else:
        assert host.debt_at_take[-1] == 0.004
        assert host.slowed_at_take[-1] == 0.0
    long = _Host(overlap, debt_s=0.001, arrive_at=0.01)
    drive_sim(await_params(long), long)  # type: ignore[arg-type]
    assert long.debt_s == (0.0 if overlap else 0.001)
    # Served once, never past what was owed.
    assert long.slowed_s == pytest.approx(0.001 if overlap else 0.0)


def test_serve_lowers_the_debt_and_counts_it_once():
    """The one place a suspension is served (:func:`serve`): the debt drops by what was
    served, never below zero, and exactly that goes into the totals."""
    host = _Host(True, debt_s=0.005, arrive_at=0.0)
    assert serve(host, 0.002) == pytest.approx(0.002)  # type: ignore[arg-type]
    assert (host.debt_s, host.slowed_s) == pytest.approx((0.003, 0.002))
    assert serve(host, 0.01) == pytest.approx(0.003)  # type: ignore[arg-type]
    assert (host.debt_s, host.slowed_s) == (0.0, pytest.approx(0.005))
    assert serve(host, 0.01) == 0.0  # type: ignore[arg-type]
    assert host.slowed_s == pytest.approx(0.005)
