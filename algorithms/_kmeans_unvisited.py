"""K-means' stand-in for the points no worker has visited yet (issue 19; FSP paper Sections
2.2, 3.2 and 4.1; the choice and its measurements are in :mod:`algorithms.kmeans`' notes).

Incremental EM's statistics s = Σᵢ sᵢ need every point's Qᵢ; a point no worker has visited
has none, and by default (``unvisited: leave-out``) the M-step leaves it out.  With
``unvisited: stand-in`` the master stands in for those points
with the data sample it drew θ⁽⁰⁾ from (``DataInfo.sample``: a seeded uniform sample of every
shard, in rank order), assigned at the current θ at every M-step:

* the sample is cut into one part per shard (:func:`shard_samples`); θ carries each part's
  mean (``shard_means``), so a worker can tell which part is its own (the nearest mean to
  that of the points it visited: on shards that look alike any part will do);
* θ⁽⁰⁾ counts every shard's points unvisited (``pool_unvisited``: the equal split of the
  points, as the partitions deal them); in iteration 1 every worker counts its first visits
  off its part's slot (``pool_report``, :func:`record`), so a worker whose iteration 1
  was a whole pass leaves 0 there;
* every first visit, wherever migration took the point, counts down θ's ``unvisited``;
* the M-step (:func:`pool`) adds, per part with unvisited points uᵢ, that part's statistics
  at the current θ scaled to ``uᵢ · min(1, U / Σ u)`` points (U: θ's ``unvisited``), and
  adds nothing once U or Σ u is 0.
"""

from __future__ import annotations

import numpy as np

#: Rows of each shard's part of the sample used at most (a few milliseconds of the master's
#: M-step on the 28-feature, K = 16 workloads while any point is unvisited, nothing after).
PART_ROWS = 2500


def shard_samples(sample: np.ndarray, n_workers: int) -> list[np.ndarray]:
    """The data sample in one part per shard (equal parts: each worker sends the same number
    of rows unless its shard is smaller, when the parts are off by at most a few rows)."""
    parts = np.array_split(np.asarray(sample, dtype=np.float64), max(n_workers, 1))
    return [p[:PART_ROWS] for p in parts]


def theta_keys(parts: list[np.ndarray], n_points: int, d: int) -> dict[str, np.ndarray]:
    """θ's keys of the stand-in at θ⁽⁰⁾: every point unvisited, nothing reported."""
    means = np.array([p.mean(axis=0) if len(p) else np.zeros(d) for p in parts])
    w = len(parts)  # every shard's points unvisited: the partition's equal split
    sizes = np.array([len(r) for r in np.array_split(np.empty(n_points, bool), w)], float)
    return {"shard_means": means.reshape(w, d), "pool_unvisited": sizes,
            "unvisited": np.full(1, float(n_points))}


def agg_keys(theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The aggregator's keys: first visits and the iteration-1 reports."""
    return {"first_visits": np.zeros(1), "pool_report": np.zeros_like(theta["pool_unvisited"])}


def record(x: np.ndarray, first: np.ndarray, theta: dict[str, np.ndarray], t: int,
           agg: dict) -> None:
    """Count a block's first visits (``first``: which of its rows) into ``agg``; in iteration 1
    also off the slot of the sample part whose mean is nearest to theirs (module notes).

    Each block on its own, with nothing kept between calls: a worker's algorithm may be
    copied, warmed up on a few rows or shared (the simulated-clock tests), and a block of one
    shard's rows is nearest to that shard's part unless the shards look alike, when any part
    will do."""
    m = int(np.count_nonzero(first))
    agg["first_visits"][0] = float(m)
    if t != 1 or not m:
        return
    rows = x if m == len(x) else x[first]
    mean = rows.mean(axis=0, dtype=np.float64)
    slot = int(np.argmin(((theta["shard_means"] - mean) ** 2).sum(axis=1)))
    agg["pool_report"][slot] -= m


def pool(centers: np.ndarray, parts: list[np.ndarray], reported: np.ndarray,
         unvisited: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The unvisited points' statistics (sums K × d, counts K) at ``centers``, or None when
    none is left or none was reported (module notes)."""
    total = float(reported.sum())
    if unvisited < 0.5 or total < 0.5 or len(parts) != len(reported):
        return None
    k = len(centers)
    share = min(1.0, unvisited / total)
    csq = np.einsum("ij,ij->i", centers, centers)
    sums = np.zeros_like(centers, dtype=np.float64)
    counts = np.zeros(k)
    for part, u in zip(parts, reported):
        if u < 0.5 or not len(part):
            continue
        labels = (csq[None, :] - 2.0 * part @ centers.T).argmin(axis=1)
        weight = u * share / len(part)
        counts += np.bincount(labels, minlength=k) * weight
        sums += ((labels[None, :] == np.arange(k)[:, None]).astype(np.float64) @ part) * weight
    return sums, counts
