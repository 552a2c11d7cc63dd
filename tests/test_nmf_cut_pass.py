"""NMF's H updates after cut passes (issue 19, Fig. 8; ``bench/nmf_cut_pass.py``).

θ's ``wtw`` / ``wtx`` keep every row's latest contribution (FSP paper Section 2.2, Eq. 3), so
an update after part of every shard is HALS's H step on all the rows, those not visited one
update stale: block coordinate descent on the exact objective.  Such an update gains about what
one after a whole pass does (``progress_per_update`` was measured and not declared:
docs/benchmarks.md, "NMF's cut passes").  In one process, through the algorithm's hooks.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.bench_scripts import load_bench

bench = load_bench("nmf_cut_pass")


def low_rank(n: int = 2000, d: int = 100, rank: int = 6, seed: int = 0) -> np.ndarray:
    """Non-negative rows of rank ``rank`` plus non-negative noise."""
    rng = np.random.default_rng(seed)
    return (np.abs(rng.standard_normal((n, rank))) @ np.abs(rng.standard_normal((rank, d)))
            + 0.3 * np.abs(rng.standard_normal((n, d))))


@pytest.fixture(scope="module")
def problem():
    return bench.Problem(x=low_rank(), params={"n_components": 6, "init": "random"})


def test_a_cut_pass_keeps_every_rows_latest_statistics(problem):
    """After updates on a third of every shard at a time (a cursor that wraps), θ's sums are
    WᵀW and WᵀX of every row's current w_i -- the rows not visited lately included."""
    path = problem.run(1 / 3, 7, keep_theta=True)
    theta = path.thetas[-1]
    w = problem.last_w
    assert np.allclose(theta["wtw"], w.T @ w, rtol=1e-9, atol=1e-9)
    assert np.allclose(theta["wtx"], w.T @ problem.x, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("share", [0.5, 0.25])
def test_every_update_after_a_cut_pass_is_a_descent(problem, share):
    """Block coordinate descent: the exact objective of θ never rises from one update to the
    next, whatever share of the shards each update saw."""
    f = np.array(problem.run(share, 16).objective)
    assert np.all(np.diff(f) <= 1e-9 * f[:-1])


def test_an_update_after_a_quarter_pass_gains_about_a_whole_passs(problem):
    """The whole-pass path's θ₄ and θ₈ are reached by updates after a quarter of every shard in
    at most twice the updates -- not four times, as a gain per point would need --, so in at
    most half the passes (on ``flegel paper``'s NMF 1.1-1.3x the
    updates, ``bench/nmf_cut_pass.py``)."""
    whole = problem.run(1.0, 8)
    quarter = problem.run(0.25, 16)
    for k in (4, 8):
        hit = quarter.reached(whole.objective[k])
        assert hit is not None and hit <= 2 * k, (k, hit)
        assert quarter.passes[hit] <= 0.5 * whole.passes[k]
