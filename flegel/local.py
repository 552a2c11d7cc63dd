"""Run an algorithm in-process under full- or mini-batch BSP, without MPI.

For unit tests of algorithms, notebooks and debugging: the same store, block loop and stop
criteria as a one-worker MPI job, minus the messaging.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flegel.api import Algorithm, DataInfo, Params, zero_aggregator
from flegel.block import Block
from flegel.runtime.layout import Layout
from flegel.runtime.stopping import StopCriteria
from flegel.runtime.store import ShardStore


@dataclass
class LocalResult:
    """What :func:`fit_local` returns (fitted attributes end in ``_``)."""

    theta_: Params
    objective_: float
    n_iter_: int
    converged_: bool
    history_: list[float] = field(default_factory=list)


def make_info(x: np.ndarray, y: np.ndarray | None, *, seed: int = 0, n_workers: int = 1,
              sample_size: int = 10_000, base_dir: Path | None = None) -> DataInfo:
    """Build the :class:`DataInfo` of an in-memory data set (seeded sample)."""
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(x), min(sample_size, len(x)), replace=False))
    n_classes = None if y is None else int(np.max(y)) + 1
    return DataInfo(n_features=x.shape[1], n_points=len(x), n_workers=n_workers,
                    sample=x[idx], sample_y=None if y is None else y[idx],
                    n_classes=n_classes, seed=seed, dtype=x.dtype,
                    base_dir=base_dir or Path.cwd())


def full_pass(algorithm: Algorithm, x: np.ndarray, y: np.ndarray | None, theta: Params,
              state: dict[str, np.ndarray], block_size: int = 8192, t: int = 1) -> dict:
    """One full-batch iteration of ``algorithm`` over ``x`` in fixed blocks, without a store:
    the summed aggregator (``state`` is updated in place).

    For comparing kernels and timing them (tests, ``bench/gpu_bench.py``): every point once,
    in order, with no halting or migration; :func:`fit_local` is the whole training loop.
    """
    total = algorithm.zero_aggregator(theta)
    for s in range(0, len(x), block_size):
        rows = slice(s, s + block_size)
        part = Block(x[rows], None if y is None else y[rows],
                     {k: v[rows] for k, v in state.items()},
                     np.zeros(len(x[rows]), dtype=bool))
        total = algorithm.aggregate(total, algorithm.update_block(part, theta, t))
    return total


def fit_local(algorithm: Algorithm, x: np.ndarray, y: np.ndarray | None = None, *,
              batch: int | None = None, block_size: int = 8192,
              max_iterations: int = 100, tolerance: float | None = 1e-4,
              seed: int = 0, theta: Params | None = None) -> LocalResult:
    """Train ``algorithm`` on ``x`` (and ``y``) in this process.

    Parameters
    ----------
    batch : int or None
        Points per iteration; None is full batch (Lloyd-style EM, full-batch GD).
    block_size : int
        Points per call of ``update_block``.
    theta : dict or None
        Start from this θ instead of ``init_parameter``.

    Returns
    -------
    LocalResult
        ``objective_`` is the exact objective (``evaluate``) of the final θ.
    """
    x = np.ascontiguousarray(x)
    info = make_info(x, y, seed=seed)
    theta = algorithm.init_parameter(info) if theta is None else theta
    layout = Layout.of(zero_aggregator(algorithm, theta, x[0], None if y is None else y[0]))
    store = ShardStore(x, y, algorithm.init_state(len(x), x.shape[1]))
    store.place(algorithm, "fit_local")  # on a GPU: the shard on the device, copied once
    stop = StopCriteria(max_iterations=max_iterations, tolerance=tolerance)
    history: list[float] = []
    online = 0.0
    t = 0
    reason = None
    start = time.perf_counter()
    while reason is None:
        t += 1
        todo = store.n_active if batch is None else min(batch, store.n_active)
        agg = layout.zeros()
        while todo > 0:
            block, sel = store.next_block(min(block_size, todo))
            if len(block) == 0:
                continue
            agg = algorithm.aggregate(agg, algorithm.update_block(block, theta, t))
            store.commit_block(block, sel)
            todo -= len(block)
        theta = algorithm.update_parameter(agg, theta)
        online += float(agg["objective"])
        history.append(online)
        if algorithm.termination_check(agg, t):
            reason = "algorithm"
            break
        if store.n_active == 0:
            reason = "halted"
            break
        reason = stop.check(t, online, store.passes, time.perf_counter() - start)
    final = algorithm.evaluate(theta, store.full_block())
    return LocalResult(theta_=theta, objective_=final, n_iter_=t,
                       converged_=reason in ("converged", "algorithm", "halted", "target"),
                       history_=history)
