"""Straggler patterns: their arithmetic in-process, and their effect under real mpirun."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.stragglers import Stragglers, parse_workers
from tests.conftest import mpirun, summary, write_job


def test_parse_workers():
    assert parse_workers("1-4") == [1, 2, 3, 4]
    assert parse_workers("1,3,5-6") == [1, 3, 5, 6]
    assert parse_workers([2, "4-5"]) == [2, 4, 5]
    with pytest.raises(ValueError):
        parse_workers("a-b")


def test_injected_counts_points_cumulatively():
    s = Stragglers.for_rank([{"pattern": "injected", "tau_ms": 10, "every": 1000,
                              "workers": [1]}], rank=1, seed=0)
    # 600 + 600 points cross one boundary; 900 more cross a second.
    assert s.after_block(600, 0.001) == (0.0, 0.0)
    assert s.after_block(600, 0.001) == (pytest.approx(0.01), 0.0)
    assert s.after_block(900, 0.001) == (pytest.approx(0.01), 0.0)
    assert s.after_block(5000, 0.001) == (pytest.approx(0.05), 0.0)


def test_persistent_and_unnamed_ranks():
    spec = [{"pattern": "persistent", "factor": 3, "workers": [2]}]
    assert Stragglers.for_rank(spec, rank=2, seed=0).after_block(100, 0.01) == (
        0.0, pytest.approx(0.02))
    assert Stragglers.for_rank(spec, rank=1, seed=0).after_block(100, 0.01) == (0.0, 0.0)


def test_pause_once_and_transient_is_seeded():
    p = Stragglers.for_rank([{"pattern": "pause", "at_s": 0.0, "seconds": 2,
                              "workers": [1]}], rank=1, seed=0)
    assert p.after_block(10, 0.001)[1] == 2.0 and p.after_block(10, 0.001)[1] == 0.0
    spec = [{"pattern": "transient", "factor": 5, "on_s": 0.01, "off_s": 0.01,
             "workers": [1]}]
    a, b = (Stragglers.for_rank(spec, rank=1, seed=3) for _ in range(2))
    assert [p._next_switch for p in a.patterns] == [p._next_switch for p in b.patterns]


@pytest.mark.mpi
def test_each_pattern_slows_exactly_its_ranks(tmp_path):
    n = 40_000
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 4},
                    data={"source": "synthetic", "kind": "blobs", "n_points": n,
                          "n_features": 4, "centers": 4, "seed": 1},
                    workers=4, sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": 3, "tolerance": None},
                    output={"progress": "none"},
                    stragglers=[
                        {"pattern": "injected", "tau_ms": 2, "every": 1000, "workers": [1]},
                        {"pattern": "persistent", "factor": 3, "workers": [2]},
                        {"pattern": "pause", "at_s": 0.0, "seconds": 0.5, "workers": [3]},
                    ])
    out = tmp_path / "run"
    mpirun(job, 4, out)
    s = summary(out)
    w = {r["rank"]: r for r in s["per_worker"]}
    lost = {x["rank"]: x for x in s["stragglers"]}
    assert set(lost) == {1, 2, 3}
    # injected: 2 ms per 1,000 points processed, counted over the whole run
    assert lost[1]["lost_s"] == pytest.approx(w[1]["points"] // 1000 * 0.002, rel=1e-6)
    # persistent: after each block of compute t, (factor - 1) t more
    assert w[2]["slowed_s"] == pytest.approx(2 * w[2]["compute_s"], rel=1e-6)
    # pause: exactly once, for its seconds
    assert lost[3]["lost_s"] == pytest.approx(0.5)
    assert w[4]["slowed_s"] == 0.0
    for r in (1, 2, 3):
        assert w[r]["slowed_s"] == pytest.approx(lost[r]["lost_s"], rel=1e-6, abs=1e-6)
    # Everyone else waited for them at the barriers.
    assert w[4]["wait_s"] >= 0.45
    assert np.isfinite(s["final_objective"])
