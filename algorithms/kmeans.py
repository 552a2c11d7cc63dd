"""K-means as incremental EM (FSP paper Section 2.2), written only against flegel's public API.

Each point keeps its last cluster and its last score (squared distance minus ‖x‖²) as state.
A delta holds the signed changes of the per-cluster sums S and counts C caused by points that
moved (Eq. 3), so the master's statistics stay exact whatever points an iteration processed:
``S_j -= x, S_j' += x, C_j -= 1, C_j' += 1`` and the M-step sets ``μ_j = S_j / C_j``.  Under
full-batch BSP this is exactly Lloyd's algorithm.

Kernel: distances through one BLAS product per block, ``‖x‖² − 2x·c + ‖c‖²``, then one numba
pass that takes the argmin, the loss and accumulates the signed changes of only the points
whose cluster changed.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from flegel import Algorithm, Block, DataInfo, PointState

_INITS = ("kmeans++", "random")


#: Points per GEMM tile: the (tile x K) distance block stays in L1/L2 cache.
_TILE = 2048


@numba.njit(cache=True, nogil=True, fastmath=True)
def _assign_accumulate(x: np.ndarray, ct: np.ndarray, csq: np.ndarray, labels: np.ndarray,
                       scores: np.ndarray, sums: np.ndarray, counts: np.ndarray,
                       tile: int) -> float:  # pragma: no cover
    """Assign each point to its nearest centre and accumulate the moves; return the change
    of the summed loss.

    Per tile of ``tile`` points: one BLAS product ``g = x @ centers.T`` (the tile x K block
    stays in cache), then the argmin of ``‖c‖² − 2x·c`` fused with the accumulation.  Only
    points whose cluster changed touch ``sums``/``counts``, so late iterations cost little
    beyond the GEMM.  Running the tile loop inside numba avoids a Python-level BLAS call per
    tile.

    A point's loss is ‖x‖² + s with score s = min_j (‖c_j‖² − 2x·c_j).  ‖x‖² never changes,
    so the state keeps s and the loss change of a revisited point is the change of s; ‖x‖²
    is computed only on a point's first visit.
    """
    n, d = x.shape
    k = ct.shape[1]
    dobj = 0.0
    g = np.empty((min(tile, n), k), dtype=x.dtype)
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        gs = g[:stop - start]
        np.dot(x[start:stop], ct, gs)
        for r in range(stop - start):
            i = start + r
            bestv = np.inf
            best = 0
            for j in range(k):
                v = csq[j] - 2.0 * gs[r, j]
                if v < bestv:
                    bestv = v
                    best = j
            old = labels[i]
            if old < 0:
                xsq = 0.0
                for f in range(d):
                    xsq += x[i, f] * x[i, f]
                dobj += xsq + bestv
            else:
                dobj += bestv - scores[i]
            scores[i] = bestv
            if old != best:
                for f in range(d):
                    sums[best, f] += x[i, f]
                counts[best] += 1.0
                if old >= 0:
                    for f in range(d):
                        sums[old, f] -= x[i, f]
                    counts[old] -= 1.0
                labels[i] = best
    return dobj


class KMeans(Algorithm):
    """K-means clustering by incremental EM.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters K.
    init : {"kmeans++", "random"} or path, default="kmeans++"
        ``kmeans++`` on the seeded data sample, ``random`` picks K sample points, or the path
        of a ``.npy`` file of shape (K, d) holding the initial centroids (relative to the job
        file's folder).

    Notes
    -----
    The objective is the sum of squared distances to the nearest centroid, scikit-learn's
    ``inertia_``, so results compare directly.  A cluster that loses all its points keeps its
    last centroid.
    """

    name = "kmeans"
    objective_name = "inertia"

    def __init__(self, n_clusters: int = 8, init: str = "kmeans++") -> None:
        super().__init__()
        if not isinstance(n_clusters, int) or isinstance(n_clusters, bool) or n_clusters < 1:
            raise ValueError(f"n_clusters must be a positive integer, got {n_clusters!r}")
        if not isinstance(init, str):
            raise ValueError(f"init must be 'kmeans++', 'random' or a .npy path, got {init!r}")
        self.n_clusters = n_clusters
        self.init = init

    def _init_path(self, base_dir: Path) -> Path | None:
        if self.init in _INITS:
            return None
        return (base_dir / Path(self.init).expanduser()).resolve()

    def validate(self, base_dir: Path) -> None:
        path = self._init_path(base_dir)
        if path is None:
            return
        if path.suffix != ".npy":
            raise ValueError(
                f"init: expected 'kmeans++', 'random' or a .npy file, got {self.init!r}")
        if not path.is_file():
            raise ValueError(f"init: centroid file {path} does not exist")
        shape = np.load(path, mmap_mode="r").shape
        if len(shape) != 2 or shape[0] != self.n_clusters:
            raise ValueError(
                f"init: {path} holds an array of shape {shape}, expected ({self.n_clusters}, d)")

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        k, d = self.n_clusters, info.n_features
        path = self._init_path(info.base_dir)
        if path is not None:
            centers = np.load(path).astype(np.float64)
            if centers.shape != (k, d):
                raise ValueError(f"init: {path} has shape {centers.shape}, expected {(k, d)}")
        else:
            sample = np.asarray(info.sample, dtype=np.float64)
            if len(sample) < k:
                raise ValueError(f"n_clusters={k} exceeds the {len(sample)} points sampled")
            rng = np.random.default_rng(info.seed)
            if self.init == "random":
                centers = sample[rng.choice(len(sample), k, replace=False)].copy()
            else:
                from sklearn.cluster import kmeans_plusplus

                centers, _ = kmeans_plusplus(sample, k, random_state=info.seed)
        return {"centers": centers, "sums": np.zeros((k, d)), "counts": np.zeros(k)}

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        return {"label": np.full(n, -1, dtype=np.int64), "score": np.zeros(n)}

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        return {"sums": np.zeros_like(theta["sums"]), "counts": np.zeros_like(theta["counts"]),
                "objective": 0.0}

    def update_data_point(self, point: np.ndarray, state: PointState,
                          theta: dict[str, np.ndarray], t: int) -> dict:
        c = theta["centers"]
        dist = ((c - point) ** 2).sum(axis=1)
        best = int(np.argmin(dist))
        agg = self.zero_aggregator(theta)
        old = int(state["label"])
        if old != best:
            agg["sums"][best] += point
            agg["counts"][best] += 1
            if old >= 0:
                agg["sums"][old] -= point
                agg["counts"][old] -= 1
            state["label"] = best
        score = float(dist[best] - point @ point)
        agg["objective"] = float(dist[best]) if old < 0 else score - float(state["score"])
        state["score"] = score
        return agg

    def update_block(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        x = np.ascontiguousarray(block.x)
        ct = np.ascontiguousarray(theta["centers"].T, dtype=x.dtype)
        csq = np.einsum("ij,ij->j", ct, ct)
        agg = self.zero_aggregator(theta)
        agg["objective"] = float(_assign_accumulate(
            x, ct, csq, block.state["label"], block.state["score"], agg["sums"],
            agg["counts"], _TILE))
        return agg

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        sums = theta["sums"] + agg["sums"]
        counts = theta["counts"] + agg["counts"]
        centers = theta["centers"].copy()
        nonempty = counts > 0.5
        centers[nonempty] = sums[nonempty] / counts[nonempty, None]
        return {"centers": centers, "sums": sums, "counts": counts}

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        x = block.x
        ct = np.ascontiguousarray(theta["centers"].T, dtype=x.dtype)
        csq = np.einsum("ij,ij->j", ct, ct)
        total = 0.0
        for s in range(0, len(x), _TILE):  # tiles: the distance block stays in cache
            xs = x[s:s + _TILE]
            score = (csq[None, :] - 2.0 * (xs @ ct)).min(axis=1)
            total += float(np.maximum(np.einsum("ij,ij->i", xs, xs) + score, 0.0).sum())
        return total

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"centers": theta["centers"], "counts": theta["counts"]}
