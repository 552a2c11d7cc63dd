"""FSP data migration in one process (FSP paper Section 4.3, issue 11): the real server, FSP
master policy, balancer, worker policies, migrators and shard stores on the simulated clock
of tests/fakes.py, deterministically.

Every worker holds different data (K-means clusters sorted and split contiguously), four
workers, worker 4 a straggler.  Windows of 64 points cross links of a few MB/s, so they are
in flight across blocks and barriers.
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.job.errors import JobError
from flegel.job.validate import validate
from flegel.runtime.store import ID_SHIFT
from tests.fakes import Simulation, kmeans_theta0, slow_then_fast

N = 4000
WORKERS = 4
STRAGGLER = 4
WINDOW = 64
BANDWIDTH = 5e6           # bytes/s of each worker's link: a window takes ~0.7 ms to leave
ETA_MS = 2.0              # fixed η
SLOW = {STRAGGLER: 4.0}   # the straggler's CPU is 4x slower
#: A transient straggler's slowdown: a straggler to the balancer (PEER_SPEED, 4x the median
#: worker's seconds per point, measured with its injected delays and barriers' overheads).
TRANSIENT = 8.0


@lru_cache(maxsize=1)
def sorted_blobs() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """4 well-separated clusters, rows sorted by cluster: each worker's contiguous shard is
    mostly one cluster (so a straggler's data really lag behind under FSP)."""
    rng = np.random.default_rng(0)
    centers = rng.uniform(-10.0, 10.0, size=(4, 3))
    labels = np.sort(rng.integers(0, 4, size=N))
    x = centers[labels] + rng.normal(0.0, 1.0, size=(N, 3))
    return x, kmeans_theta0(centers + rng.normal(0.0, 1.5, size=(4, 3)))


class Checks:
    """Invariants checked at every barrier (every worker committed and waits)."""

    def __init__(self) -> None:
        self.barriers = 0
        self.in_flight_at_barriers = 0   # barriers with a window locked or travelling
        self.max_over_passes = -np.inf   # max over points of visits - (holder's cycles + 1)

    def __call__(self, sim: Simulation, event: dict[str, Any]) -> None:
        self.barriers += 1
        active, moving = sim.census()
        # Every point is active on exactly one worker, or travels in exactly one message.
        assert np.array_equal(active + moving, np.ones(N, dtype=np.int64)), event["t"]
        held = sum(w.store.n_held for w in sim.workers.values())
        travelling = int(moving.sum())
        assert held + travelling == N
        flying = sum(w.policy.in_flight for w in sim.workers.values())
        if flying or travelling:
            self.in_flight_at_barriers += 1
        for w in sim.workers.values():
            st = w.store
            trained = ~(st.inactive | st.queued)
            # A native or settled point was trained at most once per pass of its holder.
            over = st.visits[trained] - (st.cycles + 1)
            if len(over):
                self.max_over_passes = max(self.max_over_passes, int(over.max()))


@cache
def run(mode: str, interval: str = "fixed", iterations: int = 40, virtual: bool = True,
        transient_until: float | None = None, bandwidth: float = BANDWIDTH,
        target: float | None = None) -> tuple[Simulation, Checks]:
    """FSP (fixed η or multistage) with ``migration.mode`` = ``mode``; cached, as several
    tests read the same run."""
    x, theta0 = sorted_blobs()
    options: dict[str, Any] = {"interval": interval,
                               "migration": {"mode": mode, "window": WINDOW,
                                             "virtual": virtual}}
    if interval == "fixed":
        options["eta_ms"] = ETA_MS
    slow = SLOW if transient_until is None else {
        STRAGGLER: slow_then_fast(TRANSIENT, transient_until)}
    stop: dict[str, Any] = {"max_iterations": iterations}
    if target is not None:
        stop = {"max_iterations": 400, "target_objective": target}
    checks = Checks()
    sim = Simulation("fsp", options, workers=WORKERS, data=x, theta0=theta0, slowdown=slow,
                     bandwidth_Bps=bandwidth, on_barrier=checks, stop=stop).run()
    return sim, checks


def passes(sim: Simulation) -> np.ndarray:
    return np.array([sim.workers[r].store.passes for r in sim.ranks])


def imbalance(p: np.ndarray) -> float:
    """The largest deviation from the mean passes, relative to the issue's target: ε = 1, or
    10% of the mean once it is over 10 (≤ 1: balanced)."""
    mean = float(p.mean())
    return float(np.abs(p - mean).max()) / (0.1 * mean if mean > 10 else 1.0)


def check_end(sim: Simulation) -> None:
    """After the drain: every point on exactly one worker, nothing in flight."""
    assert sim.server.done and all(w.finished for w in sim.workers.values())
    active, moving = sim.census()
    assert np.array_equal(active, np.ones(N, dtype=np.int64)) and not moving.any()
    assert sum(w.store.n_held for w in sim.workers.values()) == N
    assert not sim.network.untaken()
    for w in sim.workers.values():
        assert w.sends_pending() == 0 and w.policy.in_flight == 0
    # Ids as in the real run: rank << ID_SHIFT | row, and every one of them is somewhere.
    ids = np.concatenate([w.store.ids for w in sim.workers.values()])
    assert set(np.unique(ids >> ID_SHIFT)) == set(sim.ranks)


# ============================================================================ async
@pytest.mark.parametrize("interval, iterations", [("fixed", 40), ("multistage", 80)])
def test_async_migration_conserves_points_and_balances_passes(interval, iterations):
    sim, checks = run("async", interval, iterations)
    off, _ = run("off", interval, iterations)
    assert checks.barriers == iterations
    mig = sim.policy.summary()["migration"]
    assert mig["mode"] == "async" and mig["rounds"] >= 1 and mig["points_ordered"] > 0
    # Windows were really in flight at some barriers (the invariants held there too).
    assert checks.in_flight_at_barriers > 0
    assert any(any(e["workers"]["in_flight"]) for e in sim.barrier_events())
    check_end(sim)
    # The straggler gave data away; its passes caught up (the target) ...
    held = {r: sim.workers[r].store.n_held for r in sim.ranks}
    assert held[STRAGGLER] < N / WORKERS / 2
    p, p_off = passes(sim), passes(off)
    assert imbalance(p) <= 1.0, p
    # ... much closer than without migration, where it is far behind.
    assert imbalance(p_off) > 3.0 and imbalance(p_off) > 4 * imbalance(p), (p, p_off)


@pytest.mark.parametrize("interval, iterations", [("fixed", 40), ("multistage", 80)])
def test_no_point_is_skipped_or_trained_twice_within_a_pass(interval, iterations):
    sim, checks = run("async", interval, iterations)
    off, _ = run("off", interval, iterations)
    # At every barrier a trained point had at most its holder's passes + 1 traversals.
    assert checks.max_over_passes <= 0
    visits, visits_off = sim.point_visits(), off.point_visits()
    assert visits.min() >= 1
    trained = sum(w.points for w in sim.workers.values())
    if interval == "fixed":
        # Every point processed is one traversal of one point, wherever it went.
        assert visits.sum() == trained
    else:
        # FSPV's probes roll back (the work counted, the traversals undone).
        assert visits.sum() <= trained
    # Per-point traversals stay together with migration; without, the straggler's points
    # lag many passes behind the others'.  (FSP traverses each shard in a shuffled order,
    # issue 19: the multistage run ends 3 traversals apart, against 8 without migration --
    # 9 before the calibration became a whole pass, which the straggler's points share.)
    spread, spread_off = np.ptp(visits), np.ptp(visits_off)
    assert spread <= 3 and spread_off > 2 * spread, (spread, spread_off)


def test_migrator_counts_what_it_sent():
    sim, _ = run("async", "fixed", 40)
    for r, w in sim.workers.items():
        report = w.side["migration"]
        windows = [p for d in w.peers for p in sim.network.sent(r, d, "window")]
        assert report["points_moved"] == sum(len(p.ids) for p in windows)
        # bytes_moved: features and labels only (3 float64 features per point here).
        assert report["bytes_moved"] == sum(p.data_bytes for p in windows)
        assert report["bytes_moved"] == 3 * 8 * report["points_moved"]


# ============================================================================ sync
def test_sync_migration_moves_only_at_barriers_and_is_slower_than_async():
    sim, checks = run("sync", "fixed", 40)
    check_end(sim)
    assert sim.policy.summary()["migration"]["points_ordered"] > 0
    assert checks.in_flight_at_barriers == 0
    assert all(not any(e["workers"]["in_flight"]) for e in sim.barrier_events())
    # Every window left at the moment its sender received θ (it moves all before training).
    windows = [p for p in sim.network.posts if p.kind == "window"]
    assert windows
    arrivals = {r: {round(p.time + sim.latency_s, 12) for p in sim.transport.params_to(r)}
                for r in sim.ranks}
    assert all(round(p.time - sim.server.start, 12) in
               {round(a - sim.server.start, 12) for a in arrivals[p.src]} for p in windows)
    # The same target objective is reached later: workers wait for the points to arrive.
    ref = run("off", "fixed", 40)[0].objective()
    target = ref * 1.001
    fast, _ = run("async", "fixed", bandwidth=2e6, target=target)
    slow, _ = run("sync", "fixed", bandwidth=2e6, target=target)
    assert fast.server.reason.value == slow.server.reason.value == "target"
    # Timed from the end of the calibration, a whole pass that waits for the 4x slower
    # worker in both runs (issue 19), before which nothing moves.
    calibrated = [s.barrier_events()[0]["time_s"] for s in (fast, slow)]
    assert calibrated[0] == calibrated[1]
    assert (slow.server.time_to_target - calibrated[1]
            > 1.05 * (fast.server.time_to_target - calibrated[0]))


# ============================================================================ virtual
def test_virtual_migration_returns_points_without_their_data():
    # A straggler until 40 ms, then as fast as the others: the points it gave away come
    # back.  (4x slower for 40 ms made no straggler: its points moved as a peer's once, on a
    # speed history shorter than SPEED_WINDOW_S, which the balancer no longer does.)
    sim, _ = run("async", "fixed", 30, virtual=True, transient_until=0.04)
    novirt, _ = run("async", "fixed", 30, virtual=False, transient_until=0.04)
    for s in (sim, novirt):
        check_end(s)
    others = [r for r in sim.ranks if r != STRAGGLER]

    def back(s: Simulation, kind: str) -> tuple[int, int]:
        """(data bytes, points) of ``kind`` messages that came back to the straggler."""
        posts = [p for r in others for p in s.network.sent(r, STRAGGLER, kind)]
        return sum(p.data_bytes for p in posts), sum(len(p.ids) for p in posts)

    data, points = back(sim, "reactivate")
    # Its own points came back as reactivations: ids, state and visits, never features.
    assert points > 0 and data == 0
    assert sim.workers[STRAGGLER].side["migration"]["reactivated"] == points
    assert sim.policy.summary()["migration"]["points_returned"] >= points
    # (Once recovered it may be given more than it gave away: those travel as windows.)
    windows_bytes, windows_points = back(sim, "window")
    assert windows_bytes == 3 * 8 * windows_points
    # Without virtual migration the same returns send the features back.
    data_nv, points_nv = back(novirt, "window")
    assert back(novirt, "reactivate") == (0, 0)
    assert points_nv > 0 and data_nv == 3 * 8 * points_nv
    assert novirt.workers[STRAGGLER].side["migration"]["reactivated"] == 0
    assert data + windows_bytes < data_nv


# ============================================================================ FSPV vs BSPV
def test_fspv_with_migration_converges_no_later_than_bspv():
    x, theta0 = sorted_blobs()
    # τ = 64 ms per 1,000 points: 7x slower, a straggler to the balancer (PEER_SPEED).  At
    # the default 32 ms it is 2.3x slower in passes, and the run converges in 0.1 s, before
    # a peer's speed is measured over SPEED_WINDOW_S: nothing moves (FSPV is still sooner).
    common: dict[str, Any] = dict(workers=WORKERS, data=x, theta0=theta0,
                                  bandwidth_Bps=BANDWIDTH,
                                  stragglers=[{"pattern": "injected", "workers": [STRAGGLER],
                                               "tau_ms": 64}],
                                  stop={"max_iterations": 400, "tolerance": 1e-4})
    fspv = Simulation("fsp", {"interval": "multistage",
                              "migration": {"mode": "async", "window": WINDOW}},
                      **common).run()
    bspv = Simulation("bsp", {"batch": "auto"}, **common).run()
    assert fspv.server.reason.value == bspv.server.reason.value == "converged"
    assert fspv.policy.summary()["migration"]["points_ordered"] > 0
    check_end(fspv)
    assert fspv.server.train_s <= bspv.server.train_s
    assert fspv.objective() == pytest.approx(bspv.objective(), rel=1e-3)


# ============================================================================ config
def _job(tmp_path: Path, sync: dict[str, Any], algorithm: str = "kmeans") -> dict[str, Any]:
    return {"algorithm": algorithm, "params": {"n_clusters": 3} if algorithm == "kmeans"
            else {},
            "data": {"source": "synthetic", "kind": "blobs", "n_points": 200,
                     "n_features": 4, "centers": 3, "seed": 0},
            "workers": 2, "sync": sync}


def test_migration_outside_fsp_is_a_validation_error(tmp_path):
    with pytest.raises(JobError) as err:
        validate(_job(tmp_path, {"model": "bsp", "migration": {"mode": "async"}}),
                 tmp_path / "job.yaml")
    assert "sync.migration" in str(err.value)
    # Under FSP the same section is valid.
    job = validate(_job(tmp_path, {"model": "fsp", "migration": {"mode": "async"}}),
                   tmp_path / "job.yaml")
    assert job.sync.options["migration"]["mode"] == "async"


def test_unmovable_per_point_state_is_named(tmp_path):
    (tmp_path / "tablealgo.py").write_text(
        "import numpy as np\n"
        "from flegel.algorithms.kmeans import KMeans\n\n\n"
        "class Tabled(KMeans):\n"
        "    def init_state(self, n, n_features):\n"
        "        return {'label': np.zeros(n), 'table': {}}\n")
    doc = _job(tmp_path, {"model": "fsp", "migration": {"mode": "async"}},
               algorithm="tablealgo:Tabled")
    doc["params"] = {"n_clusters": 3}
    with pytest.raises(JobError) as err:
        validate(doc, tmp_path / "job.yaml")
    text = str(err.value)
    assert "tablealgo:Tabled" in text and "table" in text and "sync.migration.mode" in text
    # With migration off the same algorithm is fine.
    doc["sync"] = {"model": "fsp", "migration": {"mode": "off"}}
    assert validate(doc, tmp_path / "job.yaml").algorithm == "tablealgo:Tabled"
