"""GMM's M-step on a shard weighed up to its size while its first pass runs
(``GaussianMixture.stratify``, ``algorithms._stratum.PassStratum``; issue 19, Fig. 7)."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms._stratum import MIN_POINTS, PassStratum
from flegel.algorithms.gmm import GaussianMixture
from flegel.block import Block
from flegel.local import make_info
from tests.fakes import Simulation, overlapping

K, D = 3, 2
PARAMS = ("weights", "means", "precisions_cholesky")


def _delta(rng: np.random.Generator, points: int) -> dict[str, np.ndarray]:
    r = rng.dirichlet(np.ones(K), size=points)
    x = rng.normal(size=(points, D))
    return {"nk": r.sum(0), "sx": r.T @ x, "sxx": r.T @ (x * x)}


def test_the_correction_is_the_first_pass_so_far_weighed_up():
    """While the first pass runs the pieces add up to ``(n/m − 1) · E`` (E: the deltas sent,
    m: the points trained); below MIN_POINTS and from the pass's end on, to zeros, and the
    strata-on count goes +1 then −1."""
    rng = np.random.default_rng(0)
    n = 1_000
    s = PassStratum(n)
    s.arm()
    sent: dict[str, np.ndarray] = {}
    exact: dict[str, np.ndarray] = {}
    active = []
    for t, points in enumerate([MIN_POINTS // 2, 150, 250, 400, 200], start=1):
        delta = _delta(rng, points)
        piece = s.observe(t, points, delta, first_visits=points)
        active.append(float(piece.pop("active")[0]))
        piece.pop("shipped")
        for k in delta:
            exact[k] = exact.get(k, 0.0) + delta[k]
            sent[k] = sent.get(k, 0.0) + piece[k]
        m = s.total
        for k in delta:
            want = (n / m - 1.0) * exact[k] if MIN_POINTS <= m < n else 0.0 * exact[k]
            np.testing.assert_allclose(sent[k], want, atol=1e-9)
    assert active == [0.0, 1.0, 0.0, 0.0, -1.0]
    assert s.done and not s.wants_sample(6)


def test_a_first_block_of_trained_points_keeps_exact_sums():
    """A shard whose first block held trained points (E would not be its sums: a resumed
    or warmed-up state) sends no correction, for good."""
    rng = np.random.default_rng(1)
    s = PassStratum(1_000)
    s.arm()
    piece = s.observe(1, 200, _delta(rng, 200), first_visits=150)
    assert all(not np.any(v) for v in piece.values())
    assert s.valid is False and s.done


def _theta0(x: np.ndarray) -> dict[str, np.ndarray]:
    return GaussianMixture(n_components=K, kernel="array").init_parameter(make_info(x, None))


def _pass(alg: GaussianMixture, x: np.ndarray, theta: dict[str, np.ndarray]) -> dict:
    return alg.update_block(Block.from_arrays(x, None, alg.init_state(len(x), D)), theta, 1)


def test_update_parameter_weighs_a_shard_behind_up_to_its_size():
    """One shard trained whole, the other's first 100 of 1,000 points: the M-step equals
    EM's on the exact sums with the second shard's scaled by 10 (its stratum's
    Horvitz-Thompson estimate); θ keeps the exact sums and, apart, the correction."""
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.0, 1.0, size=(600, D)), rng.normal(4.0, 1.0, size=(1_000, D))
    theta0 = _theta0(np.concatenate([a, b]))
    plain = GaussianMixture(n_components=K, kernel="array")
    behind = GaussianMixture(n_components=K, kernel="array")
    stratum = behind.stratify(len(b))
    assert stratum is not None
    stratum.arm()
    da, db = _pass(plain, a, theta0), _pass(behind, b[:100], theta0)
    theta1 = plain.update_parameter(plain.aggregate(da, db), theta0)
    by_hand = {k: da[k] + 10.0 * db[k] for k in ("nk", "sx", "sxx")}
    bare = {k: theta0[k] for k in (*PARAMS, "nk", "sx", "sxx")}  # θ without stratum keys
    want = plain.update_parameter({**by_hand, "objective": 0.0}, bare)
    for k in PARAMS:
        np.testing.assert_allclose(theta1[k], want[k], rtol=1e-12, err_msg=k)
    for k in ("nk", "sx", "sxx"):
        np.testing.assert_allclose(theta1[k], da[k] + db[k], rtol=1e-12)
        np.testing.assert_allclose(theta1[f"stratum_{k}"], 9.0 * db[k], rtol=1e-12)
    assert theta1["stratum_active"][0] == 1.0


@pytest.mark.parametrize("share", [0.125, 0.5])
def test_shards_covered_alike_are_left_as_they_are(share):
    """Every shard at the same share of its first pass (FSPV's sampled calibration): the
    estimate scales every statistic alike, and GMM's M-step, homogeneous of degree 0 in
    them, is exact incremental EM's."""
    rng = np.random.default_rng(3)
    shards = [rng.normal(c, 1.0, size=(800, D)) for c in (0.0, 3.0, 6.0)]
    theta0 = _theta0(np.concatenate(shards))
    plain = GaussianMixture(n_components=K, kernel="array")
    agg_exact, agg_strat = plain.zero_aggregator(theta0), plain.zero_aggregator(theta0)
    for x in shards:
        alg = GaussianMixture(n_components=K, kernel="array")
        stratum = alg.stratify(len(x))
        assert stratum is not None
        stratum.arm()
        m = int(share * len(x))
        agg_exact = plain.aggregate(agg_exact, _pass(plain, x[:m], theta0))
        agg_strat = plain.aggregate(agg_strat, _pass(alg, x[:m], theta0))
    exact = plain.update_parameter(agg_exact, theta0)
    strat = plain.update_parameter(agg_strat, theta0)
    assert strat["stratum_active"][0] == len(shards)
    for k in PARAMS:
        np.testing.assert_allclose(strat[k], exact[k], rtol=1e-9, err_msg=k)


def test_theta_s_corrections_return_to_exactly_zero():
    """Once every stratum took its correction back (the first pass over), θ's corrections
    are exact zeros and its M-step is exact incremental EM's, bit for bit (the pieces sum
    to zero only up to rounding)."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(400, D))
    theta = _theta0(x)
    alg = GaussianMixture(n_components=K, kernel="array")
    stratum = alg.stratify(len(x))
    assert stratum is not None
    stratum.arm()
    state = alg.init_state(len(x), D)
    for t, (lo, hi) in enumerate([(0, 150), (150, 400)], start=1):
        sl = slice(lo, hi)
        blk = Block.from_arrays(x[sl], None, {k: v[sl] for k, v in state.items()})
        agg = alg.update_block(blk, theta, t)
        for k, v in blk.state.items():
            state[k][sl] = v
        before, theta = theta, alg.update_parameter(agg, theta)
        assert theta["stratum_active"][0] == (1.0 if t == 1 else 0.0)
    assert any(np.any(before[k]) for k in ("stratum_nk", "stratum_sx", "stratum_sxx"))
    for k in ("stratum_nk", "stratum_sx", "stratum_sxx"):
        assert not np.any(theta[k]), k
    bare = {k: before[k] for k in (*PARAMS, "nk", "sx", "sxx")}
    exact = alg.update_parameter({k: agg[k] for k in ("nk", "sx", "sxx", "objective")}, bare)
    for k in (*PARAMS, "nk", "sx", "sxx"):
        np.testing.assert_array_equal(theta[k], exact[k], err_msg=k)


def test_a_shared_instance_switches_the_estimate_off():
    """Several simulated workers in one process share one instance: no estimate."""
    alg = GaussianMixture(n_components=K)
    assert alg.stratify(100) is not None
    assert alg.stratify(100) is None
    assert alg.stratify(100) is None


def _fspv_off_gap(own: bool, barriers: int) -> tuple[float, float]:
    """FSPV without migration on 4 contiguous shards of sorted, overlapping clusters, worker
    1 thirty times slower (the simulated clock): the exact objective after ``barriers``
    barriers over batch EM's converged one from the same θ⁰, minus 1, and the straggler's
    passes.  ``own``: every worker its own GMM instance (the estimate on, as in a real
    run); else one shared instance (no estimate: exact incremental EM)."""
    x, _ = overlapping(n=8_000, k=4, d=4)
    alg = GaussianMixture(n_components=4, kernel="array")
    theta0 = alg.init_parameter(make_info(x, None))
    theta, state = dict(theta0), alg.init_state(len(x), 4)
    for t in range(1, 201):  # batch EM to its fixed point (BSPB's)
        blk = Block.from_arrays(x, None, state)
        theta = alg.update_parameter(alg.update_block(blk, theta, t), theta)
        state = blk.state
    converged = alg.evaluate(theta, Block.from_arrays(x))
    sim = Simulation("fsp", {"interval": "multistage", "migration": {"mode": "off"}},
                     workers=4, data=x, theta0=theta0,
                     algorithm=GaussianMixture(n_components=4, kernel="array"), cost_s=1e-6,
                     slowdown={1: 30.0}, stop={"max_iterations": barriers},
                     own_algorithms=own, max_sim_s=100).run()
    return sim.objective() / converged - 1.0, sim.iterations(1)[-1].header["passes"]


def test_fspv_without_migration_weighs_the_straggler_s_shard_up():
    """Midway through the straggler's first pass (the same barriers, the same passes: the
    estimate changes θ, not the schedule) θ is 2.5x nearer batch EM's converged objective
    with the estimate than with exact sums (1.7e-3 against 4.2e-3 above it): the
    straggler's components weigh what its shard does, not what it has trained."""
    exact, passes = _fspv_off_gap(False, 10)
    weighed, passes_too = _fspv_off_gap(True, 10)
    assert passes == pytest.approx(passes_too) and 0.3 < passes < 0.8
    assert weighed < 0.5 * exact
