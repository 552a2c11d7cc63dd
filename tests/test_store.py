"""A worker's shard: round-robin traversal, halting, mark and roll-back."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.block import Block
from flegel.local import fit_local
from flegel.runtime.blocksize import BlockSizer
from flegel.runtime.store import ShardStore


def _store(n=10):
    x = np.arange(n * 2, dtype=float).reshape(n, 2)
    return ShardStore(x, None, {"v": np.zeros(n)})


def test_round_robin_blocks_wrap_and_count_passes():
    s = _store(10)
    seen = []
    for _ in range(5):
        block, sel = s.next_block(4)
        seen.extend(block.x[:, 0] // 2)
        s.commit_block(block, sel)
    # 4 + 4 + 2 (end of shard, no wrap inside a block) + 4 + 4
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7]
    assert s.passes == 1.8 and s.visited == 18


def test_halted_points_are_skipped_and_state_written_back():
    s = _store(6)
    block, sel = s.next_block(6)
    block.halt[[1, 4]] = True
    s.commit_block(block, sel)
    assert s.n_active == 4
    block, sel = s.next_block(6)
    assert list(block.x[:, 0] // 2) == [0, 2, 3, 5]
    block.state["v"][:] = 7.0
    s.commit_block(block, sel)
    assert list(s.state["v"]) == [7, 0, 7, 7, 0, 7]


def test_mark_and_rollback_restore_state_and_position():
    s = _store(10)
    b, sel = s.next_block(3)
    s.commit_block(b, sel)
    s.mark()
    for _ in range(3):
        b, sel = s.next_block(3)
        b.state["v"][:] += 1
        b.halt[0] = True
        s.commit_block(b, sel)
    assert s.state["v"].sum() > 0 and s.n_halted == 3
    s.rollback()
    assert s.cursor == 3 and s.visited == 3 and s.n_halted == 0
    assert not s.state["v"].any()
    s.unmark()
    b, sel = s.next_block(3)
    b.state["v"][:] = 5
    s.commit_block(b, sel)
    assert list(s.state["v"][3:6]) == [5, 5, 5]


def test_block_sizer_targets_a_millisecond():
    z = BlockSizer(target_s=1e-3, initial=64)
    for _ in range(20):
        z.observe(z.size, z.size * 1e-7)  # 0.1 µs per point
    assert z.nominal == 10_000  # blocks alternate around it (flegel.runtime.blocksize)
    z.observe(z.size, z.size * 1e-7, delay_s=z.size * 9e-7)  # a straggler, 10x slower
    assert z.nominal < 10_000


def test_default_update_block_equals_vectorized_kernel():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3))
    algo = KMeans(n_clusters=3)
    theta = {"centers": x[:3].copy(), "sums": np.zeros((3, 3)), "counts": np.zeros(3)}
    fast = algo.update_block(Block.from_arrays(x, None, algo.init_state(50, 3)), theta, 1)
    from flegel.api import Algorithm

    slow = Algorithm.update_block(algo, Block.from_arrays(x, None, algo.init_state(50, 3)),
                                  theta, 1)
    for k in ("sums", "counts"):
        np.testing.assert_allclose(fast[k], slow[k], atol=1e-9)
    assert fast["objective"] == pytest.approx(slow["objective"], rel=1e-9)


def test_camelcase_subclass_works():
    from flegel import Algorithm

    class Ported(Algorithm):
        def initParameter(self, info):  # noqa: N802
            return {"m": np.zeros(info.n_features), "n": np.zeros(1)}

        def updateDataPoint(self, point, state, theta, t):  # noqa: N802
            return {"s": point.copy(), "c": np.ones(1), "objective": 0.0}

        def updateParameter(self, agg, theta):  # noqa: N802
            return {"m": agg["s"] / agg["c"], "n": agg["c"]}

        def evaluate(self, theta, block):
            return float(((block.x - theta["m"]) ** 2).sum())

    x = np.random.default_rng(1).normal(size=(100, 2))
    r = fit_local(Ported(), x, max_iterations=1)
    np.testing.assert_allclose(r.theta_["m"], x.mean(0))
