"""Tests for flegel.sync.zipline: ElasticBSP's barrier-placement solver (ZipLine, ML 2021)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flegel.sync.zipline import (
    EXACT_METHODS,
    METHODS,
    ZipLineResult,
    expected_wait,
    predict,
    solve,
)
from tests.zipline_workloads import generate, load_authors_data

#: The ZipLine authors' vectors, copied from ../shared/testdata (see its README there).
DATA_DIR = Path(__file__).resolve().parent / "data" / "zipline"
AUTHORS_FILE = DATA_DIR / "data_gen_matrix_w1000_R20.txt"
HEURISTICS = tuple(m for m in METHODS if m not in EXACT_METHODS)


def brute_force(times: np.ndarray) -> tuple[float, float]:
    """Exhaustive search over all R^n sets: (d*, earliest optimal barrier)."""
    n, r = times.shape
    rows = np.arange(n)
    best = (np.inf, np.inf)
    for idx in itertools.product(range(r), repeat=n):
        z = times[rows, idx]
        best = min(best, (z.max() - z.min(), z.max()))
    return float(best[0]), float(best[1])


def random_instance(rng: np.random.Generator) -> np.ndarray:
    n, r = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    if rng.random() < 0.5:
        # small integer range: many ties within and across rows
        vals = rng.integers(0, int(rng.integers(1, 9)), size=(n, r)).astype(np.float64)
    else:
        vals = rng.random((n, r)) * 10.0
    return np.sort(vals, axis=1)


def check_consistent(times: np.ndarray, res: ZipLineResult) -> None:
    """The reported index must realise the reported d and t_sync."""
    n, r = times.shape
    assert res.index.shape == (n,) and res.index.dtype == np.int64
    assert ((res.index >= 0) & (res.index < r)).all()
    z = times[np.arange(n), res.index]
    assert z.max() == res.t_sync
    assert z.max() - z.min() == res.d


def test_exact_methods_match_brute_force() -> None:
    rng = np.random.default_rng(20211019)
    for _ in range(400):
        times = random_instance(rng)
        d_star, t_star = brute_force(times)
        for method in EXACT_METHODS:
            res = solve(times, method)
            assert (res.d, res.t_sync) == (d_star, t_star), (method, times.tolist())
            check_consistent(times, res)
        # exact methods agree on the (canonical) index too
        ref = solve(times, "fast").index
        for method in EXACT_METHODS:
            np.testing.assert_array_equal(solve(times, method).index, ref)
        for method in HEURISTICS:
            res = solve(times, method)
            assert res.d >= d_star
            check_consistent(times, res)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.integers(1, 5).flatmap(
            lambda r: st.lists(
                st.lists(st.integers(0, 6), min_size=r, max_size=r), min_size=n, max_size=n
            )
        )
    )
)
def test_fast_matches_brute_force_hypothesis(rows: list[list[int]]) -> None:
    times = np.sort(np.asarray(rows, dtype=np.float64), axis=1)
    res = solve(times)
    assert (res.d, res.t_sync) == brute_force(times)
    check_consistent(times, res)


def test_full_gridscan_is_not_exhaustive() -> None:
    # Smallest counterexample found: the paper (Table 3) treats FullGridScan as exhaustive.
    times = np.array([[4, 9], [2, 8], [8, 9], [3, 3]], dtype=np.float64)
    assert brute_force(times) == (5.0, 8.0)
    assert solve(times).d == 5.0
    assert solve(times, "full_gridscan").d == 6.0


def test_earliest_barrier_on_ties() -> None:
    # Two optimal sets with d = 1: {2, 3} and {7, 8}. Corollary 1 wants the earlier barrier.
    times = np.array([[2.0, 7.0], [3.0, 8.0]])
    for method in METHODS:
        res = solve(times, method)
        assert (res.d, res.t_sync) == (1.0, 3.0), method
        np.testing.assert_array_equal(res.index, [0, 0])


@pytest.mark.parametrize("method", METHODS)
def test_edge_shapes(method: str) -> None:
    one_worker = solve(np.array([[3.0, 4.0, 7.0]]), method)
    assert (one_worker.d, one_worker.t_sync) == (0.0, 3.0)
    one_column = solve(np.array([[3.0], [1.0], [2.0]]), method)
    assert (one_column.d, one_column.t_sync) == (2.0, 3.0)
    np.testing.assert_array_equal(one_column.index, [0, 0, 0])
    flat = solve(np.zeros((3, 4)), method)  # zero predicted interval: all points equal
    assert (flat.d, flat.t_sync) == (0.0, 0.0)


def test_result_is_frozen_and_typed() -> None:
    res = solve([[1, 2], [2, 3]])
    assert isinstance(res, ZipLineResult)
    assert isinstance(res.d, float) and isinstance(res.t_sync, float)
    assert res.method == "fast" and res.evaluated >= 1
    with pytest.raises(AttributeError):
        res.d = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError):
        res.index[0] = 1


@pytest.mark.parametrize(
    ("times", "match"),
    [
        ([1.0, 2.0], "2-D"),
        (np.zeros((2, 2, 2)), "2-D"),
        (np.zeros((0, 3)), "n >= 1"),
        (np.zeros((3, 0)), "R >= 1"),
        ([[1.0, np.nan]], "finite"),
        ([[1.0, np.inf]], "finite"),
        ([[1.0, 2.0], [3.0, 2.0]], "row 1"),
        ([[1.0, 2.0], [3.0]], "numeric"),
        ([["a", "b"]], "numeric"),
    ],
)
def test_solve_validation(times: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        solve(times)  # type: ignore[arg-type]


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        solve([[1.0]], method="nope")


def test_zipline_evaluation_counts() -> None:
    # Fig. 6: one candidate per element of Omega once Z first holds all n workers.
    data = generate(10, 15, seed=3)
    assert solve(data.times, "zipline").evaluated == 10 * 15 - 10 + 1
    n_r = data.times.size
    assert solve(data.times, "full_gridscan").evaluated == n_r
    assert solve(data.times, "gridscan").evaluated == 15


# ---- predictor -------------------------------------------------------------------------------


def test_predict_authors_convention() -> None:
    pushes = [np.array([0.0, 100.0, 250.0]), np.array([10, 20, 30])]
    out = predict(pushes, 4)
    assert out.shape == (2, 4) and out.dtype == np.float64
    # index 0 is the last observed push; step is the last interval
    np.testing.assert_array_equal(out[0], [250.0, 400.0, 550.0, 700.0])
    np.testing.assert_array_equal(out[1], [30.0, 40.0, 50.0, 60.0])


def test_predict_smoothing() -> None:
    pushes = [np.array([0.0, 100.0, 300.0, 400.0])]  # intervals 100, 200, 100
    np.testing.assert_array_equal(predict(pushes, 3, smoothing=1.0), predict(pushes, 3))
    # s = 100 -> 0.5*200 + 0.5*100 = 150 -> 0.5*100 + 0.5*150 = 125
    np.testing.assert_allclose(predict(pushes, 3, smoothing=0.5)[0], [400.0, 525.0, 650.0])


@pytest.mark.parametrize(
    ("pushes", "kwargs", "match"),
    [
        ([], {}, "at least one worker"),
        ([[1.0]], {}, "at least 2"),
        ([[1.0, 2.0], [[1.0, 2.0]]], {}, "1-D"),
        ([[2.0, 1.0]], {}, "non-decreasing"),
        ([[1.0, np.nan]], {}, "finite"),
        ([[1.0, 2.0]], {"smoothing": 0.0}, "smoothing"),
        ([[1.0, 2.0]], {"smoothing": 1.5}, "smoothing"),
    ],
)
def test_predict_validation(pushes: list, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        predict(pushes, 3, **kwargs)


@pytest.mark.parametrize("r", [0, -1, 2.5, True])
def test_predict_rejects_bad_r(r: object) -> None:
    with pytest.raises(ValueError, match="R must be"):
        predict([[1.0, 2.0]], r)  # type: ignore[arg-type]


def test_expected_wait() -> None:
    # No uncertain end: the expected wait is d_Z itself.
    assert expected_wait([3.0, 5.0, 4.0], [[], [], []]) == 2.0
    # One worker ends 1 early or 1 late, the other exactly on time: every draw waits 1.
    assert expected_wait([10.0, 10.0], [[], [-1.0, 1.0]]) == 1.0
    # Here the errors widen the range on average; the draws are seeded.
    noise = [[-2.0, 0.5, 1.5], [0.0, 3.0], []]
    e = expected_wait([0.0, 1.0, 2.0], noise, seed=3)
    assert e >= 2.0 and e == expected_wait([0.0, 1.0, 2.0], noise, seed=3)
    with pytest.raises(ValueError, match="one noise sample per worker"):
        expected_wait([1.0, 2.0], [[]])


# ---- generator -------------------------------------------------------------------------------


def test_generate_matches_section_6_1() -> None:
    data = generate(50, 15, seed=7)
    assert data.times.shape == (50, 15)
    assert ((data.intervals >= 1000) & (data.intervals <= 1500)).all()
    assert ((data.offsets >= 10) & (data.offsets <= 50)).all()
    # generator.cc's catch-up phase: all histories end within one interval of each other
    lasts = np.array([p[-1] for p in data.pushes])
    assert (lasts - lasts.min() < data.intervals).all()
    for p, hist in enumerate(data.pushes):
        assert len(hist) >= 20
        np.testing.assert_array_equal(np.diff(hist), data.intervals[p])
    np.testing.assert_array_equal(data.times, predict(data.pushes, 15))
    again = generate(50, 15, seed=7)
    np.testing.assert_array_equal(again.times, data.times)
    # every exact method agrees on generated data
    results = {m: solve(data.times, m) for m in EXACT_METHODS}
    assert len({(r.d, r.t_sync) for r in results.values()}) == 1


def test_generate_validation() -> None:
    with pytest.raises(ValueError):
        generate(0, 15)
    with pytest.raises(ValueError):
        generate(5, 15, low=1500, high=1000)
    with pytest.raises(ValueError):
        generate(5, 15, n_pushes=1)


# ---- the authors' data (github.com/xingzhaoo/ElasticBSP) ---------------------------------------


def test_load_authors_data_format(tmp_path: Path) -> None:
    f = tmp_path / "m.txt"
    f.write_text("1:5,7,9,\n0:1,2,\n\n")
    rows = load_authors_data(f)
    assert [r.tolist() for r in rows] == [[1, 2], [5, 7, 9]]
    f.write_text("0:1,2,\nbad line\n")
    with pytest.raises(ValueError, match=":2: malformed"):
        load_authors_data(f)
    f.write_text("0:1,2,\n0:3,4,\n")
    with pytest.raises(ValueError, match="duplicate"):
        load_authors_data(f)


@pytest.fixture(scope="module")
def authors_times() -> np.ndarray:
    pushes = load_authors_data(AUTHORS_FILE)
    assert len(pushes) == 1000
    return predict(pushes, 15)


# full_gridscan takes 1-4 s here (marked slow); the others well under 0.1 s.
@pytest.mark.parametrize(
    "method", [*EXACT_METHODS, pytest.param("full_gridscan", marks=pytest.mark.slow)]
)
def test_authors_data_d_star(authors_times: np.ndarray, method: str) -> None:
    res = solve(authors_times, method)
    assert res.d == 1403.0  # Table 3, n = 1000, R = 15
    assert res.t_sync == solve(authors_times).t_sync
    check_consistent(authors_times, res)


def test_authors_data_counts(authors_times: np.ndarray) -> None:
    # Fig. 7 / testdata README: "their scan evaluated 13,795 candidate sets at R = 15".
    assert solve(authors_times, "zipline").evaluated == 13_795
    # Algorithm 2's pseudo-code and the pruned variants evaluate only the sets Theorem 3
    # cannot rule out; FullGridScan evaluates n * R sets and GridScan R (Fig. 7).
    assert solve(authors_times, "zipline_alg2").evaluated == 654
    assert solve(authors_times, "zipline_opt").evaluated == 654
    assert solve(authors_times, "zipline_opt_bs").evaluated == 654
    gs = solve(authors_times, "gridscan")
    assert gs.evaluated == 15
    assert gs.d == 1405.0  # GridScan's entry in Table 3 (n = 1000, R = 15)


def test_authors_data_dist_list(authors_times: np.ndarray) -> None:
    # The authors' output: min_d, then d_Z of every candidate set their scan evaluated.
    dist_file = DATA_DIR / "dist_list_w1000_R20.txt"
    lines = dist_file.read_text().split()
    assert lines[:3] == ["min_d", "=", "1403"]
    theirs = np.array(lines[3:], dtype=np.float64)
    ours = solve(authors_times, "zipline")
    assert theirs.size == ours.evaluated
    assert theirs.min() == ours.d


def test_solve_robust_without_noise_is_solve() -> None:
    from flegel.sync.zipline import solve_robust

    rng = np.random.default_rng(3)
    m = np.sort(rng.uniform(0, 10, (4, 12)), axis=1)
    plain = solve(m)
    for noise in ([np.empty(0)] * 4, [np.zeros(5)] * 4):
        res = solve_robust(m, noise, seed=1)
        assert res.d == plain.d and list(res.index) == list(plain.index)


def test_solve_robust_lowers_the_expected_wait() -> None:
    """Over random forecasts (4 workers, 10 ends each, worker 0's ends known, the others'
    off by up to ±25 % of an interval) the robust choice waits less on average than ZipLine's
    point-forecast choice, judged on draws other than those it chose with, and its point
    forecast's ``d`` is never below ``d*``."""
    from flegel.sync.zipline import expected_wait, solve_robust

    rng = np.random.default_rng(0)
    plain_w, robust_w, changed = [], [], 0
    cols = np.arange(4)
    for k in range(60):
        steps = rng.uniform(1, 3, 4)
        m = np.cumsum(np.tile(steps[:, None], (1, 10)), axis=1) + rng.uniform(0, 1, (4, 1))
        noise = [np.empty(0)] + [rng.uniform(-0.5, 0.5, 8) * s for s in steps[1:]]
        plain, robust = solve(m), solve_robust(m, noise, seed=k)
        assert robust.d >= plain.d - 1e-12
        assert robust.t_sync == pytest.approx(m[cols, robust.index].max())
        changed += list(plain.index) != list(robust.index)
        plain_w.append(expected_wait(m[cols, plain.index], noise, 2000, seed=k + 100))
        robust_w.append(expected_wait(m[cols, robust.index], noise, 2000, seed=k + 100))
    assert changed >= 10  # the choice does differ, often
    assert np.mean(robust_w) < 0.99 * np.mean(plain_w)


def test_solve_robust_never_moves_a_known_end() -> None:
    from flegel.sync.zipline import solve_robust

    m = np.array([[1.0, 2.0, 3.0], [1.5, 2.5, 3.5]])
    res = solve_robust(m, [np.empty(0), np.array([-1.0, 1.0])], known=[0, 1], seed=2)
    assert res.d == pytest.approx(m[[0, 1], res.index].max() - m[[0, 1], res.index].min())
