"""FSPV's gauge (flegel/interval/gauge.py): the exact objective of θ on a fixed stratified
subset of the master's sample, the progress FSPV's interval adjustor judges (FSP paper §3.3),
in-process on the simulated cluster (tests/fakes.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from fakes import Simulation, blobs

from flegel.algorithms.kmeans import KMeans
from flegel.block import Block
from flegel.interval.gauge import CHUNK, DEAR, SHARE, TRIAL, Gauge, chunk_order


class _Rows:
    """A server port reduced to what the gauge reads: a loss per sample row, a clock that
    advances ``cost_s`` per row evaluated."""

    def __init__(self, losses: np.ndarray, cost_s: float = 0.0) -> None:
        self.losses = losses
        self.cost_s = cost_s
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def evaluate_sample(self, rows: np.ndarray) -> float | None:
        self.t += self.cost_s * len(rows)
        return float(self.losses[rows].sum())


def test_chunks_interleave_the_strata_in_proportion_to_their_shards() -> None:
    order = chunk_order([640, 640], [1000, 3000], seed=0)
    # Every row of the sample once, each chunk within its stratum's run of rows.
    rows = np.concatenate([r for _, r in order])
    assert sorted(rows.tolist()) == list(range(1280))
    assert all((r < 640).all() if w == 0 else (r >= 640).all() for w, r in order)
    # Any prefix holds the second shard's chunks about three times as often as the first's.
    strata = [w for w, _ in order[:8]]
    assert strata.count(1) == 6 and strata.count(0) == 2


def test_estimate_is_n_over_m_times_the_exact_objective_of_its_points_in_one_call() -> None:
    rng = np.random.default_rng(1)
    losses = rng.random(1280)
    sizes, shards = [640, 640], [1000, 3000]
    g = Gauge(sizes, shards, floor=4 * CHUNK, clock=lambda: 0.0)
    calls: list[int] = []
    port = _Rows(losses)

    def counted(rows: np.ndarray) -> float | None:
        calls.append(len(rows))
        return port.evaluate_sample(rows)

    assert g.evaluate(counted, wall_s=0.1)
    # The first evaluation: one row to warm the kernel's first call, a few timed, the rest.
    assert calls == [1, TRIAL, TRIAL, 4 * CHUNK - 1 - 2 * TRIAL]
    rows = np.concatenate([r for _, r in g.chunks[:4]])
    assert g.estimate() == pytest.approx(4000 / len(rows) * losses[rows].sum())
    # The prefix holds the shards' rows in proportion to their points (1 : 3).
    assert [w for w, _ in g.chunks[:4]].count(1) == 3
    # Later evaluations of the same subset: one call each.
    assert g.evaluate(counted, wall_s=0.1) and calls[4:] == [4 * CHUNK]


def test_progress_is_the_paired_difference_on_the_common_chunks_and_rolls_back() -> None:
    rng = np.random.default_rng(2)
    before, after = rng.random(640), rng.random(640)
    g = Gauge([640], [6400], floor=2 * CHUNK)
    port = _Rows(before)
    g.prime(port, needed=True, wall_s=0.1)  # G(θ_t) on 2 chunks
    port.losses = after
    # No wall time measured but no cost either: the next subset may double (GROWTH).
    progress = g.progress(port, 0.1, timed=True, online=123.0)
    rows = np.concatenate([r for _, r in g.chunks[:2]])
    assert progress == pytest.approx(6400 / len(rows) * (before[rows].sum() - after[rows].sum()))
    assert g.n == 4
    # The subset grew: the next difference is taken on the 2 chunks both evaluations share.
    port.losses = before
    progress = g.progress(port, 0.1, timed=True, online=123.0)
    assert progress == pytest.approx(6400 / len(rows) * (after[rows].sum() - before[rows].sum()))
    assert g.valued == 4
    # A rolled-back probe returns G with θ: the next progress is taken from the mark.
    g.follow(mark=True, rollback=False)
    port.losses = after
    g.progress(port, 0.1, timed=True, online=0.0)
    g.follow(mark=False, rollback=True)
    port.losses = before
    assert g.progress(port, 0.1, timed=True, online=1.0) == pytest.approx(0.0, abs=1e-9)
    # An iteration the adjustor does not judge reads the online estimate, evaluating nothing.
    evaluations = g.evaluations
    assert g.progress(port, 0.1, timed=False, online=7.0) == 7.0
    assert g.evaluations == evaluations


def test_budget_bounds_the_subset_and_the_floor_gives_up_when_too_dear() -> None:
    losses = np.ones(10_000)
    port = _Rows(losses, cost_s=1e-6)  # 1 µs per point
    g = Gauge([10_000], [100_000], floor=256, clock=port.now)
    g.prime(port, needed=True, wall_s=0.1)
    for _ in range(12):
        g.progress(port, 0.1, timed=True, online=0.0)
    # SHARE of a 100 ms iteration at 1 µs per point: 5,000 points (whole chunks).
    points = sum(len(r) for _, r in g.chunks[:g.n])
    assert SHARE * 0.1 / 1e-6 <= points < SHARE * 0.1 / 1e-6 + CHUNK
    assert g.active and g.summary()["progress_measure"] == "gauge"
    # Iterations grown short: the subset shrinks to the floor, never below, never off (one
    # measure of progress for the run).
    for _ in range(12):
        g.progress(port, 1e-3, timed=True, online=0.0)
    assert g.n == 256 // CHUNK and g.active
    # A floor dearer than DEAR of the first iteration: the online estimate, from the start,
    # after 1 + 2 x TRIAL rows evaluated (one warming the kernel, two timed).
    port = _Rows(losses, cost_s=2 * DEAR * 1e-3 / 256)  # twice DEAR of a 1 ms iteration
    g = Gauge([10_000], [100_000], floor=256, clock=port.now)
    g.prime(port, needed=True, wall_s=1e-3)
    assert not g.active and g.value is None
    assert g.progress(port, 1e-3, timed=True, online=5.0) == 5.0
    assert g.summary()["progress_measure"] == "online"
    assert g.seconds == pytest.approx((1 + 2 * TRIAL) * port.cost_s)
    # So dear that one timed call alone costs more than DEAR of the iteration (NMF's 50
    # HALS sweeps a row): given up after it, 1 + TRIAL rows evaluated.
    port = _Rows(losses, cost_s=2 * DEAR * 1e-3 / TRIAL)
    g = Gauge([10_000], [100_000], floor=256, clock=port.now)
    g.prime(port, needed=True, wall_s=1e-3)
    assert not g.active and g.summary()["progress_measure"] == "online"
    assert g.seconds == pytest.approx((1 + TRIAL) * port.cost_s)


def test_the_first_call_s_one_off_cost_does_not_decide() -> None:
    # The kernel's first call on the master (compile, cache, imports) costs 50 ms once; its
    # chunks then 64 µs: the gauge measures.
    port = _Rows(np.ones(1280), cost_s=1e-6)
    evaluate = port.evaluate_sample
    calls = []

    def first_dear(rows: np.ndarray) -> float | None:
        if not calls:
            port.t += 0.05
        calls.append(len(rows))
        return evaluate(rows)

    port.evaluate_sample = first_dear  # type: ignore[method-assign]
    g = Gauge([1280], [12_800], clock=port.now)
    g.prime(port, needed=True, wall_s=0.01)
    assert g.active and g.value is not None


def test_no_evaluate_falls_back_to_the_online_estimate() -> None:
    class _None(_Rows):
        def evaluate_sample(self, rows: np.ndarray) -> float | None:
            return None

    g = Gauge([640], [6400])
    port = _None(np.zeros(640))
    g.prime(port, needed=True, wall_s=0.1)
    assert g.progress(port, 0.1, timed=True, online=3.0) == 3.0
    assert g.summary()["gauge_gave_up"] == "no evaluate"

    # An evaluate that fails on the sample's rows (a user's, needing per-point state) at the
    # first evaluation: the online estimate; one that fails later is the algorithm's fault.
    class _Fails(_Rows):
        fail = True

        def evaluate_sample(self, rows: np.ndarray) -> float | None:
            if self.fail:
                raise KeyError("w")
            return super().evaluate_sample(rows)

    g = Gauge([640], [6400])
    port = _Fails(np.zeros(640))
    assert g.progress(port, 0.1, timed=True, online=3.0) == 3.0
    assert g.gave_up == "evaluate failed: KeyError('w')"
    g = Gauge([640], [6400])
    port.fail = False
    g.prime(port, needed=True, wall_s=0.1)
    port.fail = True
    with pytest.raises(KeyError):
        g.progress(port, 0.1, timed=True, online=3.0)


def _fspv(n_clusters: int, sample_rows: int, iterations: int):
    """FSPV on blobs with the master's sample; every observation with θ at its start and
    end."""
    x, _ = blobs(n=6000, seed=1)
    sim = Simulation("fsp", {"interval": "multistage"}, workers=3, data=x,
                     algorithm=KMeans(n_clusters=n_clusters), sample_rows=sample_rows,
                     stop={"max_iterations": iterations})
    pol, srv = sim.policy, sim.server
    seen: list[tuple[str, object, dict, dict, float]] = []
    start: dict[str, dict] = {}
    broadcast, observe = pol.broadcast, pol.adjustor.observe

    def on_broadcast() -> None:
        broadcast()
        start["theta"] = copy.deepcopy(srv.theta)

    def on_observe(obs):
        online = pol._start_estimate - srv.estimated_objective()
        seen.append((pol.plan.phase, obs, start["theta"], copy.deepcopy(srv.theta), online))
        return observe(obs)

    pol.broadcast, pol.adjustor.observe = on_broadcast, on_observe
    sim.run()
    return sim, x, seen


def test_fspv_observes_the_gauge_difference_of_theta_before_and_after() -> None:
    sim, _, seen = _fspv(n_clusters=12, sample_rows=500, iterations=16)
    g = sim.policy.gauge
    assert g.active and len(seen) >= 10
    xs = sim.server.sample[0]
    rows = np.concatenate([r for _, r in g.chunks])  # the simulated clock: no cost, all rows
    assert g.n == len(g.chunks)
    alg = sim.algorithm
    # Past the first barriers, where the subset still grows (a prefix of it is paired).
    for _, obs, before, after, _ in seen[4:]:
        f = [alg.evaluate(th, Block.from_arrays(xs[rows])) for th in (before, after)]
        assert obs.progress == pytest.approx((f[0] - f[1]) * 6000 / len(rows), rel=1e-9)
    assert sim.policy.summary()["progress_measure"] == "gauge"


def test_gauge_sees_no_progress_where_the_online_sum_credits_the_last_pass() -> None:
    # 4 clusters on 4 blobs: the calibration's step already converges θ.  The probes that
    # follow, shorter than a pass, revisit points last seen at θ⁰: the online objective
    # credits them with θ⁰ → θ¹'s gains, the gauge (and f) with nothing.
    sim, x, seen = _fspv(n_clusters=4, sample_rows=500, iterations=10)
    alg = sim.algorithm
    probes = [s for s in seen if s[0] == "probe"]
    assert probes
    true = [alg.evaluate(b, Block.from_arrays(x)) - alg.evaluate(a, Block.from_arrays(x))
            for _, _, b, a, _ in probes]
    assert max(abs(t) for t in true) < 1e-6
    assert all(abs(obs.progress) < 1e-6 for _, obs, _, _, _ in probes)
    assert max(online for *_, online in probes) > 1.0


def test_shard_sizes_unknown_weigh_the_strata_by_their_sample_rows() -> None:
    class _Server:
        ranks = [1, 2]
        sample_sizes = (192, 64)
        shard_sizes = {1: 3000}  # rank 2's not known

        def now(self) -> float:
            return 0.0

    g = Gauge.of(_Server())  # type: ignore[arg-type]
    assert g.total == 256.0
    # Any prefix holds the strata as the sample does (3 : 1).
    assert [w for w, _ in g.chunks] == [0, 0, 1, 0]
    losses = np.arange(256.0)
    assert g.evaluate(_Rows(losses).evaluate_sample, wall_s=1.0)
    g.n = len(g.chunks)
    assert g.evaluate(_Rows(losses).evaluate_sample, wall_s=1.0)
    assert g.estimate() == pytest.approx(losses.sum())


def test_the_points_counted_are_the_rows_evaluated() -> None:
    """A θ forgotten (an iteration not judged) with a larger subset held before: the next
    evaluation takes the current subset only, and its cost per point is counted on it."""
    port = _Rows(np.ones(1280), cost_s=1e-6)
    g = Gauge([1280], [12_800], floor=2 * CHUNK, clock=port.now)
    g.prime(port, needed=True, wall_s=1.0)
    g.n = 8
    g.progress(port, 1.0, timed=True, online=0.0)  # grows: the shared 2 chunks and 6 more
    assert g.valued == 8 and g.points == 2 * CHUNK + 8 * CHUNK
    g.prime(port, needed=False, wall_s=1.0)  # θ moves on unmeasured
    g.n = 2
    g.prime(port, needed=True, wall_s=1.0)
    assert g.points == 2 * CHUNK + 8 * CHUNK + 2 * CHUNK
    assert g.per_point[-1] == pytest.approx(1e-6)


def test_fspb_reads_the_online_objective_and_says_why() -> None:
    x, _ = blobs(n=3000, seed=1)
    sim = Simulation("fsp", {"interval": "binary"}, workers=3, data=x,
                     algorithm=KMeans(n_clusters=4), sample_rows=300,
                     stop={"max_iterations": 4})
    sim.run()
    summary = sim.policy.summary()
    assert summary["progress_measure"] == "online"
    assert summary["gauge_gave_up"] == "the binary adjustor" and summary["gauge_evaluations"] == 0


def test_the_fidelity_bench_prints_each_observation_and_the_call_cost(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``bench/gauge_fidelity.py --rows --cost``, the command behind the figures of the
    gauge against the online objective, on a slice of the quick K-means data."""
    from tests.bench_scripts import load_bench

    bench = load_bench("gauge_fidelity")
    bench.main(["--algorithms", "kmeans", "--points", "4000", "--iterations", "6",
                "--sample", "300", "--rows", "--cost"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if " exact " in line and " gauge " in line]
    assert len(rows) >= 3 and all(" online " in r for r in rows)
    assert "one evaluate call: 16 rows" in out and "2048 rows" in out
    assert out.count("median |error|/|exact|") >= 2
