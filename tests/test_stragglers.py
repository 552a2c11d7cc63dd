"""Straggler patterns: their arithmetic in-process.  Their effect on a run (each pattern
slows exactly its ranks, by exactly its amount) is in
tests/test_models_inprocess.py::test_each_pattern_slows_exactly_its_ranks; under real mpirun
the injected, persistent and pause patterns run in tests/test_fsp_mpi.py,
tests/test_runtime_mpi.py and tests/test_sync_async.py."""

from __future__ import annotations

import pytest

from flegel.runtime.stragglers import Stragglers, parse_workers


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
