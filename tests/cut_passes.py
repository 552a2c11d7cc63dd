"""FSPV's whole passes without stragglers, some cut short, replayed in one process: the
θ sequence of an algorithm whose aggregates are its workers' ``update_block`` pieces at θ,
each worker's stratum armed as FSP's worker policy arms it without migration
(``stratify``; issue 19, Fig. 8).  Shared by tests/test_logreg_stratum.py (synthetic data)
and bench/logreg_cut_pass.py (``flegel paper``'s LR workload).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flegel.api import Algorithm, DataInfo
from flegel.block import Block


def cut_path(make: Callable[[], Algorithm], info: DataInfo, x: np.ndarray, y: np.ndarray,
             orders: Sequence[np.ndarray], cuts: dict[int, list[float]], iterations: int
             ) -> list[float]:
    """Exact objectives of θ₀ .. θ_iterations.

    Parameters
    ----------
    make : callable
        A new instance of the algorithm: one for the master, one per worker (``orders``).
    info : DataInfo
        What ``init_parameter`` sees.
    x, y : ndarray
        The whole data; the objective is evaluated on it.
    orders : sequence of ndarray
        Each worker's rows, in the order it trains them.
    cuts : dict of int to list of float
        Update t (θ_{t-1} -> θ_t): each worker's share of its rows at θ_{t-1} (a whole pass
        where t is not named).
    iterations : int
        Updates to take.
    """
    alg, *workers = (make() for _ in range(len(orders) + 1))
    theta = alg.init_parameter(info)
    d = x.shape[1]
    for worker, order in zip(workers, orders):
        stratum = worker.stratify(len(order))  # type: ignore[attr-defined]
        assert stratum is not None
        stratum.arm()
    whole = Block.from_arrays(x, y, alg.init_state(len(x), d))
    out = [alg.evaluate(theta, whole)]
    for t in range(1, iterations + 1):
        agg = alg.zero_aggregator(theta)
        for worker, order, share in zip(workers, orders, cuts.get(t, [1.0] * len(orders))):
            rows = order[:round(share * len(order))]
            block = Block.from_arrays(x[rows], y[rows], worker.init_state(len(rows), d))
            agg = alg.aggregate(agg, worker.update_block(block, theta, t))
        theta = alg.update_parameter(agg, theta)
        out.append(alg.evaluate(theta, whole))
    return out
