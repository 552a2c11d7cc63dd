"""The ZipLine paper's workloads, for the solver's tests and ``bench/zipline_bench.py``.

Zhao, Papagelis, An, Chen, Liu & Hu, *ZipLine: an optimized algorithm for the elastic bulk
synchronous parallel model*, Machine Learning 110 (2021):

:func:`generate`
    The synthetic workload generator of Section 6.1 (Table 2; the authors' ``generator.cc``).
:func:`load_authors_data`
    Parser for the authors' ``data_gen_matrix_*.txt`` push histories (``tests/data/zipline``).

Not part of flegel: the runtime predicts from the pushes it sees
(:mod:`flegel.sync.elastic`) and solves with :func:`flegel.sync.zipline.solve`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from flegel.sync.zipline import predict

__all__ = ["SyntheticData", "generate", "load_authors_data"]


@dataclass(frozen=True, eq=False)
class SyntheticData:
    """Output of :func:`generate`.

    Attributes
    ----------
    pushes : list of numpy.ndarray
        Simulated push-timestamp history of every worker (ms, float64 holding integers).
    times : numpy.ndarray
        ``predict(pushes, R)``: the ``(n, R)`` matrix the paper's algorithms search.
    intervals : numpy.ndarray
        Iteration interval ``i_p`` of every worker (ms).
    offsets : numpy.ndarray
        Start-up latency of every worker (ms), added to ``base``.
    """

    pushes: list[np.ndarray]
    times: np.ndarray
    intervals: np.ndarray
    offsets: np.ndarray


def generate(
    n: int,
    R: int,
    low: int = 1000,
    high: int = 1500,
    n_pushes: int = 20,
    seed: int | np.random.Generator | None = None,
    offset_low: int = 10,
    offset_high: int = 50,
    base: float = 0.0,
) -> SyntheticData:
    """Synthetic workload of Section 6.1 / Table 2 (the authors' ``generator.cc``).

    Worker ``p`` gets an iteration interval ``i_p ~ U{low..high}`` ms and a start time
    ``s_p = base + U{offset_low..offset_high}`` ms (simulated start-up latency); its pushes are
    ``s_p + j * i_p`` for ``j = 0 .. n_pushes-1``. As in ``generator.cc``, every worker then
    keeps pushing until its last push reaches the latest push of all workers, so the histories
    end close to the same time window (they have different lengths). The ``R`` future end
    times are predicted from the last two pushes (:func:`predict`).

    Integers are drawn inclusively, like C++'s ``uniform_int_distribution``. The paper's
    offsets are 10-50 ms (the published n = 1000 file used ``rand % n`` instead).

    Parameters
    ----------
    n, R : int
        Number of workers and of predicted iterations (Table 2: n in 10..1000, R in {15, 150}).
    low, high : int
        Inclusive range of iteration intervals, ms.
    n_pushes : int
        Pushes simulated per worker before the catch-up phase (the authors used 20).
    seed : int, numpy.random.Generator or None
        Randomness source (``numpy.random.default_rng(seed)``).
    offset_low, offset_high : int
        Inclusive range of start offsets, ms.
    base : float
        Common start time, ms.

    Returns
    -------
    SyntheticData
    """
    if n < 1 or R < 1:
        raise ValueError(f"n and R must be >= 1, got n={n}, R={R}")
    if not 0 < low <= high:
        raise ValueError(f"need 0 < low <= high, got low={low}, high={high}")
    if n_pushes < 2:
        raise ValueError(f"n_pushes must be >= 2 to predict an interval, got {n_pushes}")
    if not 0 <= offset_low <= offset_high:
        raise ValueError(f"need 0 <= offset_low <= offset_high, got {offset_low}, {offset_high}")
    rng = np.random.default_rng(seed)
    intervals = rng.integers(low, high, size=n, endpoint=True).astype(np.float64)
    offsets = rng.integers(offset_low, offset_high, size=n, endpoint=True).astype(np.float64)
    starts = base + offsets
    last = starts + intervals * (n_pushes - 1)
    # Catch-up phase: extend each worker until its last push is >= the latest push overall.
    extra = np.ceil((last.max() - last) / intervals).astype(np.int64)
    pushes = [
        starts[p] + intervals[p] * np.arange(n_pushes + extra[p], dtype=np.float64)
        for p in range(n)
    ]
    return SyntheticData(pushes, predict(pushes, R), intervals, offsets)


def load_authors_data(path: str | os.PathLike[str]) -> list[np.ndarray]:
    """Parse the authors' push-history file (e.g. ``data_gen_matrix_w1000_R20.txt``).

    Each non-empty line is ``worker_id:t1,t2,...,`` (trailing comma optional). Returns one
    ``int64`` array per worker, ordered by worker id (so ``result[p]`` is worker ``p`` when ids
    are ``0 .. n-1``; the file itself lists workers in arbitrary order).

    Raises
    ------
    ValueError
        On a malformed line or a duplicated worker id.
    """
    rows: dict[int, np.ndarray] = {}
    with open(path, encoding="ascii") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            head, sep, body = line.partition(":")
            try:
                if not sep:
                    raise ValueError("missing ':'")
                worker = int(head)
                values = [int(x) for x in body.split(",") if x.strip()]
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: malformed line ({exc})") from None
            if worker in rows:
                raise ValueError(f"{path}:{lineno}: duplicate worker id {worker}")
            rows[worker] = np.asarray(values, dtype=np.int64)
    return [rows[w] for w in sorted(rows)]
