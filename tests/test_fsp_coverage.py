"""FSP's coverage (issue 19, item 3; :class:`flegel.sync.fsp.FSP`, "Coverage"): for an
algorithm whose θ sums every point's contribution (``Algorithm.cover_before_update``:
K-means here) and with data migration, the master keeps θ until every point has been
trained once, so the first M-step is Lloyd's on all the data whichever worker is slow.
One process: the real server, policies, migration and K-means on the simulated clock
(tests/fakes.py), on contiguous shards of cluster-sorted data with the last worker 20x
slower (``sorted_blobs``: 4 clusters, rows sorted by cluster)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.sync.fsp import COVER_PHASE, COVER_STEPS, WHOLE_PASS_WAIT, WHOLE_PHASE
from tests.fakes import Simulation, lloyd_step
from tests.test_migration_inprocess import WORKERS, N, sorted_blobs
from tests.test_migration_inprocess import run as migration_run  # 4x straggler, fixed η

SLOW = {WORKERS: 20.0}
COST = 20e-6  # a fast worker's pass: 1,000 points, 20 ms (the straggler's: 400 ms)


class Watch:
    """At every barrier: θ's version, the points no worker has trained, θ's centres."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, str]] = []
        self.first_update: np.ndarray | None = None
        self.thetas: dict[int, np.ndarray] = {}

    def __call__(self, sim: Simulation, event: dict[str, Any]) -> None:
        version = sim.server.version
        self.rows.append((version, sim.server.unseen(), event["phase"]))
        if version == 1 and self.first_update is None:
            self.first_update = sim.server.theta["centers"].copy()
        self.thetas.setdefault(version, sim.server.theta["centers"].copy())


def _covered(rows: list[tuple[int, int, str]]) -> int:
    """The index of the barrier that completed the coverage (:class:`Watch`'s rows)."""
    return next(i for i, (_, unseen, _) in enumerate(rows) if unseen == 0)


def _run(migration: str | None, algorithm: KMeans | None = None,
         stop: dict[str, Any] | None = None, options: dict[str, Any] | None = None,
         workers: int = WORKERS, **kwargs: Any) -> tuple[Simulation, Watch]:
    x, theta0 = sorted_blobs()
    options = dict(options or {})
    if migration is not None:
        options["migration"] = {"mode": migration, "window": 64}
    watch = Watch()
    kwargs.setdefault("slowdown", SLOW)
    sim = Simulation("fsp", options, workers=workers, data=x, theta0=theta0,
                     algorithm=algorithm or KMeans(n_clusters=4), cost_s=COST,
                     on_barrier=watch, stop=stop or {"max_iterations": 12}, **kwargs).run()
    return sim, watch


@pytest.mark.parametrize("migration", ["async", "sync"])
def test_no_theta_update_while_a_point_is_unseen(migration):
    """θ keeps version 0 at every barrier after which some point was never trained; the
    barrier that completes the coverage applies the first update.  (Before: the calibration
    barrier updated θ with the straggler paused at a fifth of its shard.)"""
    sim, watch = _run(migration)
    assert watch.rows[0][1] > 0  # the straggler was paused in the calibration
    for version, unseen, _ in watch.rows:
        assert unseen == 0 or version == 0
    covered = _covered(watch.rows)
    assert watch.rows[covered][0] == 1
    assert all(phase == COVER_PHASE for _, _, phase in watch.rows[1:covered + 1])
    summary = sim.policy.summary()["coverage"]
    assert summary["kept_barriers"] == covered


@pytest.mark.parametrize("migration", ["async", "sync"])
def test_the_first_m_step_is_lloyds_on_all_the_data(migration):
    """With a slow contiguous shard the first M-step equals an exact Lloyd step from θ⁰ on
    every point (the basin BSPB's first step heads for).  (Before: the centres of the slow
    shard's cluster came from the fifth of it the straggler had trained.)"""
    sim, watch = _run(migration)
    x = np.concatenate(sim.shards)
    assert watch.first_update is not None
    np.testing.assert_allclose(watch.first_update, lloyd_step(x, sim.theta0["centers"]),
                               rtol=1e-9, atol=1e-9)


def test_the_first_cover_steps_updates_are_lloyd_steps():
    """After a coverage that kept θ, the first :data:`COVER_STEPS` updates are whole passes,
    each an exact Lloyd step from the last θ on all the data (issue 19: one exact step then
    FSPV's partial ones ended +5.44 % above BSPB's basin on the overlapping workload);
    then FSP's own iterations.  Without the rule the second update comes from an
    interval's partial passes and fails the comparison.  The hold waited for the straggler
    alone, so the whole passes are taken (its own pass is still 3.3x the others' at the
    first update: no measure of passes decides, ``FSP._straggler_hold``)."""
    sim, watch = _run("async")
    coverage = sim.policy.summary()["coverage"]
    assert coverage["held_for"] == [WORKERS]
    assert coverage["whole_passes"] == COVER_STEPS - 1 and not coverage["whole_passes_dropped"]
    covered = _covered(watch.rows)
    after = [phase for _, _, phase in watch.rows[covered + 1:]]
    assert after[:COVER_STEPS - 1] == [WHOLE_PHASE] * (COVER_STEPS - 1)
    assert after[COVER_STEPS - 1] != WHOLE_PHASE
    x = np.concatenate(sim.shards)
    for v in range(1, COVER_STEPS):
        np.testing.assert_allclose(watch.thetas[v + 1], lloyd_step(x, watch.thetas[v]),
                                   rtol=1e-9, atol=1e-9)


def test_no_whole_passes_after_a_calibration_that_covered():
    """Where the calibration trained every point (the straggler passed within its bound) θ
    was never kept and no whole pass follows: they would wait for the slow worker at every
    barrier, with passes equal by construction, so migration would plan no round (the
    first version of the rule: no point ordered in tests/test_migration_inprocess.py)."""
    sim, _ = migration_run("async")
    assert sim.policy.summary()["coverage"]["kept_barriers"] == 0
    assert sim.policy.whole_iterations == 1  # the calibration
    assert sim.policy.summary()["migration"]["points_ordered"] > 0


def test_the_hold_ends():
    """The first migration round is planned at the calibration barrier and moves the points
    no worker has trained to the fast workers, which train them first: coverage ends a fast
    pass after the calibration, not after the straggler's own pass (400 ms here); every
    iteration at a kept θ is bounded (WHOLE_PASS_WAIT times the first pass, plus messages)."""
    fast_pass = N / WORKERS * COST
    straggler_pass = fast_pass * SLOW[WORKERS]
    sim, _ = _run("async")
    bars = sim.barrier_events()
    calibration = bars[0]["time_s"]
    first = sim.policy.summary()["coverage"]["first_update_s"]
    assert calibration <= WHOLE_PASS_WAIT * fast_pass + 3e-3
    assert first <= calibration + fast_pass
    assert first < straggler_pass / 2
    rounds = sim.policy.summary()["migration"]["round_log"]
    assert rounds[0]["time_s"] == pytest.approx(calibration, abs=1e-3)


def test_a_slow_migration_keeps_theta_no_longer_than_each_bound():
    """Windows that crawl (1 kB/s links): θ is kept while the straggler's points travel, and
    every iteration at the kept θ ends within its bound -- fast workers waiting for points
    that do not come are paused -- so barriers keep coming; the hold as a whole ends at its
    cap (the straggler's predicted pass), with θ updated on the points trained so far."""
    fast_pass = N / WORKERS * COST
    straggler_pass = fast_pass * SLOW[WORKERS]
    sim, watch = _run("async", bandwidth_Bps=1e3, stop={"max_iterations": 12})
    bars = sim.barrier_events()
    kept = [e for e in bars if e.get("theta_kept")]
    assert kept and all(e["phase"] in ("calibration", COVER_PHASE) for e in kept)
    gaps = np.diff([e["time_s"] for e in kept])
    assert gaps.max() <= WHOLE_PASS_WAIT * fast_pass + 3e-3
    coverage = sim.policy.summary()["coverage"]
    assert coverage["hold_capped"]
    assert coverage["first_update_s"] <= straggler_pass * 1.05 + 3e-3
    assert max(version for version, _, _ in watch.rows) >= 2  # θ moves on after the cap
    # no COVER_STEPS whole passes after a capped hold: the straggler still holds untrained
    # points, and each would wait for it up to the whole-pass bound
    after = [e["phase"] for e in bars if not e.get("theta_kept")][1:]
    assert after and WHOLE_PHASE not in after


@pytest.mark.parametrize("bandwidth", [2e4, 5e4])
def test_the_hold_as_a_whole_is_bounded_on_slow_links(bandwidth):
    """20-50 kB/s links: windows carry untrained points only while θ is kept (a trained
    point in flight counts as unseen), and the hold ends at the latest about the
    straggler's own pass -- BSPV's first update.  (Before: on 20 kB/s, 40 kept barriers and
    the first update at 3.52 s, the straggler's pass being 0.4 s; 16 and 1.46 s on 50.)"""
    fast_pass = N / WORKERS * COST
    straggler_pass = fast_pass * SLOW[WORKERS]
    sim, _ = _run("async", bandwidth_Bps=bandwidth, stop={"max_iterations": 60})
    coverage = sim.policy.summary()["coverage"]
    assert coverage["first_update_s"] is not None
    assert coverage["first_update_s"] <= straggler_pass * 1.05 + 3e-3
    assert coverage["kept_barriers"] <= 8


def test_the_time_limit_ends_a_hold_and_keeps_its_work():
    """stop.max_time_s ends the run between barriers during the hold (windows crawling, the
    straggler 200x slower: its first block outlasts the limit), and what the kept barriers
    carried is applied, not lost."""
    sim, _ = _run("async", bandwidth_Bps=1e3, slowdown={WORKERS: 200.0},
                  stop={"max_iterations": 1000, "max_time_s": 0.3})
    assert sim.server.reason is not None and sim.server.reason.value == "max_time"
    assert sim.policy.summary()["coverage"]["first_update_s"] is None
    assert sim.server.version == 1 and sim.policy.carried is None
    last = sim.barrier_events()[-1]
    assert last["theta_kept"] and last["unseen"] > 0
    assert sim.server.theta["counts"].sum() == pytest.approx(N - last["unseen"])


class PartialKMeans(KMeans):
    """K-means without the declaration: its first update is taken as before."""

    cover_before_update = False


@pytest.mark.parametrize("algorithm, migration", [(PartialKMeans, "async"), (KMeans, None)])
def test_no_hold_without_the_declaration_or_without_migration(algorithm, migration):
    """``cover_before_update`` False (the CNN's mini-batch steps), or no data migration
    (the hold would last the straggler's own pass): the calibration barrier updates θ
    though the straggler left most of its shard untrained."""
    _, watch = _run(migration, algorithm=algorithm(n_clusters=4))
    assert watch.rows[0][0] == 1 and watch.rows[0][1] > 0
    assert all(phase != COVER_PHASE for _, _, phase in watch.rows)


def test_waiting_for_migrated_points_is_no_compute():
    """A fast worker told that untrained points are on their way waits for them without
    computing: its reported compute time covers the points it trained, not the wait."""
    sim, _ = _run("async")
    (cover,) = [e for e in sim.barrier_events() if e["phase"] == COVER_PHASE]
    for rank, points, compute in zip(cover["workers"]["rank"], cover["workers"]["points"],
                                     cover["workers"]["compute_s"]):
        if rank != WORKERS:
            assert points > 0
            assert compute <= points * COST * 1.01 + 1e-6


def _covers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(rank, Instructions.cover) of every instruction FSP sends while θ is kept."""
    from flegel.sync.fsp import FSP

    log: list[tuple[int, int]] = []
    original = FSP.instructions

    def instructions(self: FSP, rank: int) -> Any:
        out = original(self, rank)
        if out.cover:
            log.append((rank, out.cover))
        return out

    monkeypatch.setattr(FSP, "instructions", instructions)
    return log


def test_under_sync_migration_nobody_waits_for_points(monkeypatch):
    """Synchronous migration lands every point in ``begin``, before the iteration computes:
    no worker is told to wait for points (``cover`` 2), which would only idle it until the
    bound.  (Before: every target of the hold's orders was.)"""
    log = _covers(monkeypatch)
    _run("sync", slowdown={WORKERS: 200.0}, stop={"max_iterations": 6})
    assert log and all(cover == 1 for _, cover in log)


def test_only_targets_short_of_their_points_wait(monkeypatch):
    """Asynchronous migration: a target waits for untrained points only while it has fewer
    than were ordered to it and its source still sends; the source itself never waits."""
    log = _covers(monkeypatch)
    sim, _ = _run("async", slowdown={WORKERS: 200.0}, stop={"max_iterations": 6})
    assert all(cover == 1 for rank, cover in log if rank == WORKERS)
    assert any(cover == 2 for _, cover in log)
    assert sim.policy.summary()["coverage"]["first_update_s"] is not None


@pytest.mark.parametrize("phase", ["whole", COVER_PHASE])
def test_fspb_restarts_from_the_calibration_only_after_a_hold(phase):
    """FSPB's η⁰ when the adjustor (re)starts: after iterations at a kept θ (passes of
    untrained points only) the calibration's valid time; after whole passes, as before
    coverage, the latest iteration's.  (Before: the calibration's in both cases.)"""
    from flegel.interval import Observation, Plan
    from flegel.sync.fsp import WHOLE_PHASE

    sim, _ = _run("async", stop={"max_iterations": 3}, options={"interval": "binary"})
    policy = sim.policy
    calibration = policy._calibration_valid_s
    assert calibration is not None and calibration > 0
    policy.plan = Plan(0.0, phase=WHOLE_PHASE if phase == "whole" else COVER_PHASE)
    obs = Observation(eta_s=0.0, progress=1.0, valid_s=calibration / 3, wall_s=calibration,
                      barrier_s=0.0, eta_max_s=calibration)
    want = calibration / 3 if phase == "whole" else calibration
    assert policy._first_interval({}, obs) == pytest.approx(want)


def test_training_ended_by_the_server_during_a_hold_keeps_its_work():
    """Training ended by ``Server.finish`` at a kept barrier (as a signal, a fault or any
    stop outside the policy's own criteria does) applies what the kept barriers carried.
    (Before: only the time limit's tick and the barrier's own stop applied it.)"""
    from flegel.protocol import StopReason

    ended: list[int] = []

    def stop_at_first_kept(sim: Simulation, event: dict[str, Any]) -> None:
        if event.get("theta_kept") and not ended:
            ended.append(event["unseen"])
            sim.server.finish(StopReason.HALTED)

    x, theta0 = sorted_blobs()
    sim = Simulation("fsp", {"migration": {"mode": "async", "window": 64}}, workers=WORKERS,
                     data=x, theta0=theta0, algorithm=KMeans(n_clusters=4), cost_s=COST,
                     slowdown=SLOW, on_barrier=stop_at_first_kept,
                     stop={"max_iterations": 12}).run()
    assert ended and ended[0] > 0
    assert sim.server.version == 1 and sim.policy.carried is None
    assert sim.server.theta["counts"].sum() == pytest.approx(N - ended[0])


def test_whole_pass_iterations_do_not_count_the_hold():
    """An algorithm with ``full_batch_update`` and ``cover_before_update`` (logistic
    regression's case; K-means with the first declaration added here): the
    iterations at a kept θ are counted in ``coverage.kept_barriers``, not as whole passes.
    (Before: they were counted in ``whole_pass_iterations`` too.)"""
    from flegel.sync.fsp import WHOLE_PHASE
    from tests.test_fsp_whole_pass import FullBatchKMeans

    sim, _ = _run("async", algorithm=FullBatchKMeans(n_clusters=4))
    phases = [e["phase"] for e in sim.barrier_events()]
    summary = sim.policy.summary()
    assert summary["coverage"]["kept_barriers"] >= 1 and COVER_PHASE in phases
    assert summary["whole_pass_iterations"] == (phases.count("calibration")
                                                + phases.count(WHOLE_PHASE))


#: The owed-suspension case: the straggler's kernel is 5x the others' (100 µs a point) and
#: its pattern sleeps 32 ms every 100 points (320 µs a point): its pass as dealt is 0.42 s,
#: BSPV's first iteration.
OWED_KERNEL = 5 * COST
OWED_PASS = N / WORKERS * (OWED_KERNEL + 32e-3 / 100)


def _loaded_after(start_s: float, factor: float) -> Any:
    """A receiver's speed: ``factor`` times slower from ``start_s`` on (a loaded host)."""
    return lambda t: factor if t >= start_s else 1.0


def _held_by_a_straggler(x: np.ndarray, theta0: dict[str, np.ndarray], migration: str,
                         on_barrier: Any, *, kernel: float, load: float, tau_ms: float,
                         every: int, block: int) -> Simulation:
    """Run FSP with ``migration`` over 4 barriers: the last worker a straggler (``kernel``
    seconds a point, τ = ``tau_ms`` every ``every`` points, blocks of ``block``), the
    others -- the receivers -- loaded ``load`` times from 0.08 s (after the calibration)."""
    sim = Simulation("fsp", {"migration": {"mode": migration, "window": 64}}, workers=WORKERS,
                     data=x, theta0=theta0, algorithm=KMeans(n_clusters=4),
                     cost_s=[COST] * (WORKERS - 1) + [kernel],
                     slowdown={r: _loaded_after(0.08, load) for r in range(1, WORKERS)},
                     stragglers=[{"pattern": "injected", "workers": [WORKERS],
                                  "tau_ms": tau_ms, "every": every}],
                     on_barrier=on_barrier, stop={"max_iterations": 4})
    sim.workers[WORKERS].block_points = block
    sim.run()
    return sim


@pytest.mark.parametrize("migration", ["async", "sync"])
def test_an_owed_suspension_does_not_cut_the_hold_short(migration):
    """The hold's cap stands for the straggler's pass as dealt, suspensions included
    (``FSP._dealt_pass``).  Its first block is a burst of 500 points (a block on course):
    the pattern charges 160 ms of suspension after it, and the calibration's bound (80 ms)
    finds most of it owed -- served after the commit, out of its ``slowed_s`` --, and the
    receivers are loaded 25x from the calibration on (issue 19: load 12 on 2 cores).
    Before: the cap was the calibration's predicted pass, 0.162 s against 0.42 s; the hold
    was capped after one kept barrier with 40 (async) or 137 (sync) points untrained and θ
    was updated on the rest.  Now the cap is the straggler's pass from the calibration on,
    the hold covers the data and the first update is Lloyd's on all of it."""
    x, theta0 = sorted_blobs()
    watch = Watch()
    caps: list[float] = []
    predicted: list[float] = []
    headers: list[dict[str, float]] = []

    def on_barrier(sim: Simulation, event: dict[str, Any]) -> None:
        watch(sim, event)
        caps.append(sim.policy.summary()["coverage"]["hold_cap_s"] or float("inf"))
        predicted.append(sim.policy.passes.pass_s[WORKERS])
        headers.append(dict(sim.server.worker(WORKERS).header))

    sim = _held_by_a_straggler(x, theta0, migration, on_barrier, kernel=OWED_KERNEL,
                               load=25.0, tau_ms=32.0, every=100, block=500)
    calibration = sim.barrier_events()[0]
    straggler = calibration["workers"]["rank"].index(WORKERS)
    assert calibration["workers"]["points"][straggler] == 500  # paused after its burst
    # 5 suspensions charged, 30 ms of them served before the bound's signal: the rest owed
    assert headers[0]["incurred_s"] == pytest.approx(0.160)
    assert headers[0]["slowed_s"] < 0.05
    # Its calibration reads as a pass of under half its own -- on kernel time and delays
    # served (the cap before, PassPredictor's) as on elapsed time extrapolated -- and as
    # its own with the delay its points incurred (COMMIT's incurred_s):
    assert predicted[0] < OWED_PASS / 2
    assert N / WORKERS * calibration["workers"]["compute_s"][straggler] / 500 < OWED_PASS / 2
    assert caps[0] == pytest.approx(OWED_PASS, rel=0.05)
    coverage = sim.policy.summary()["coverage"]
    assert not coverage["hold_capped"]
    assert coverage["hold_cap_s"] == pytest.approx(OWED_PASS, rel=0.05)
    covered = _covered(watch.rows)
    assert watch.rows[covered][0] == 1 and coverage["first_update_s"] < OWED_PASS
    np.testing.assert_allclose(watch.first_update, lloyd_step(x, sim.theta0["centers"]),
                               rtol=1e-9, atol=1e-9)


def test_a_suspension_not_yet_due_raises_the_cap():
    """The cap is raised at each kept barrier to the pace the hold's commits show
    (``FSP.keeps_theta``).  The injected pattern charges τ at each multiple of ``every``
    points of the run: a straggler (200 µs a point, τ = 400 ms every 700 points, blocks of
    200) paused at 600 points by the calibration's bound reads as kernel time only, a
    0.2 s pass against its 0.6 s.  Its next commit crosses 700 points and reports the
    suspension: the cap is raised above the hold's length, which the receivers (loaded
    100x from the calibration on) stretch past 0.2 s.  Without the raise the hold was
    capped at its first kept barrier with 105 points untrained."""
    x, theta0 = sorted_blobs()
    watch = Watch()
    caps: list[float] = []

    def on_barrier(sim: Simulation, event: dict[str, Any]) -> None:
        watch(sim, event)
        caps.append(sim.policy.summary()["coverage"]["hold_cap_s"] or float("inf"))

    kernel = 10 * COST
    sim = _held_by_a_straggler(x, theta0, "async", on_barrier, kernel=kernel, load=100.0,
                               tau_ms=400.0, every=700, block=200)
    calibration = sim.barrier_events()[0]
    straggler = calibration["workers"]["rank"].index(WORKERS)
    assert calibration["workers"]["points"][straggler] < 700  # no suspension due yet
    assert caps[0] == pytest.approx(N / WORKERS * kernel)  # kernel time only
    # Untrained points at the first kept barrier, past the calibration's cap:
    assert watch.rows[1][1] > 0 and sim.barrier_events()[1]["time_s"] > caps[0]
    coverage = sim.policy.summary()["coverage"]
    assert not coverage["hold_capped"]
    covered = _covered(watch.rows)
    assert coverage["hold_cap_s"] > N / WORKERS * kernel + 0.4  # the suspension counted
    assert watch.rows[covered][0] == 1
    np.testing.assert_allclose(watch.first_update, lloyd_step(x, sim.theta0["centers"]),
                               rtol=1e-9, atol=1e-9)
