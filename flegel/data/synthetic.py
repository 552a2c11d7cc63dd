"""Deterministic synthetic data sets, generated a shard at a time.

A synthetic source is cut into chunks of :data:`CHUNK_ROWS` rows; chunk ``c`` is drawn from
the seed sequence of ``np.random.default_rng([seed, c])`` and the model shared by all rows
(blob centers, the separating hyperplane, the low-rank basis, the digit templates) from
``default_rng(seed)``.  The whole data set is therefore one fixed array whatever the number of
shards, and a shard generates only the chunks its rows fall in.  Chunks are i.i.d., so
synthetic sources always use the contiguous partition (a strided one would make every shard
generate every chunk).

Inside a chunk rows are drawn in sub-batches of a fixed size that depends only on the number
of features (:func:`_sub_rows`); sub-batch ``b`` uses the chunk generator's ``b``-th spawned
child (``default_rng([seed, c]).spawn(...)[b]``).  Memory stays bounded for wide data
(784-pixel images, 10,681-item rating rows) and a shard draws only the sub-batches its rows
fall in, never a whole chunk to throw most of it away.

Kinds
-----
``blobs``
    Gaussian blobs: ``centers`` centers uniform in [-10, 10]^d, ``cluster_std`` spread;
    y = blob id (int64).  For K-means, fuzzy C-means and GMM.
``classification``
    Two classes: x ~ N(0, I), y = 1[x . w + noise * e > 0] for a seeded unit vector w
    (int64 0/1).  HIGGS-like by default (28 features).  For logistic regression.
``regression``
    x ~ N(0, I), y = x . w + noise * e with w ~ N(0, I) (float64).
``nonnegative``
    Non-negative rank-``rank`` matrix plus noise, clipped at 0: rows H B + noise * E with
    H, B uniform in [0, 1).  No labels.  For NMF.
``images``
    28 x 28 digit-like images (784 features in [0, 1]) of 10 classes: each class a seeded
    template of three blurred strokes, each image its class template shifted by up to two
    pixels, scaled in brightness and with Gaussian pixel noise; y = class (int64).  For the
    CNN.

:data:`TABLE1` names the data sets of the FSP paper's Table 1 by their shapes, so that
``{"source": "synthetic", "like": "higgs", "scale": 0.01}`` is a 110,000 x 28 HIGGS stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CHUNK_ROWS", "KINDS", "TABLE1", "SyntheticSpec", "generate_rows", "synthetic_shape"]

#: Rows per independently seeded chunk.
CHUNK_ROWS = 65_536

#: The generator kinds.
KINDS = ("blobs", "classification", "regression", "nonnegative", "images")

#: Shapes of the FSP paper's Table 1 (P points x D dimensions) and the kind that stands in for
#: each data set.  Sizes are the paper's: MASS (HEPMASS) is its 7,000,000 x 27 training set and
#: ML25M its 162,540 x 5,000 matrix.  The kind follows the algorithm the paper ran on it
#: (GMM/K-means/FCM: blobs; LR: classification; NMF: nonnegative; CNN: images); HIGGS is
#: used for both K-means and LR, override with ``"kind": "blobs"`` for clustering.
TABLE1: dict[str, dict[str, Any]] = {
    "puf": {"kind": "blobs", "n_points": 6_000_000, "n_features": 128},
    "susy": {"kind": "blobs", "n_points": 5_000_000, "n_features": 18},
    "mass": {"kind": "blobs", "n_points": 7_000_000, "n_features": 27},
    "hepmass": {"kind": "blobs", "n_points": 7_000_000, "n_features": 27},
    "higgs": {"kind": "classification", "n_points": 11_000_000, "n_features": 28},
    "det": {"kind": "classification", "n_points": 6_739_534, "n_features": 116},
    "ml10m": {"kind": "nonnegative", "n_points": 69_877, "n_features": 10_681},
    "ml25m": {"kind": "nonnegative", "n_points": 162_540, "n_features": 5_000},
    "mnist": {"kind": "images", "n_points": 60_000, "n_features": 784},
    "syn": {"kind": "images", "n_points": 120_000, "n_features": 784},
}

#: Default number of features per kind when the spec gives none.
DEFAULT_FEATURES = {
    "blobs": 28,
    "classification": 28,
    "regression": 28,
    "nonnegative": 500,
    "images": 784,
}

_SIDE = 28  # image side in pixels
_N_DIGITS = 10
_MAX_SHIFT = 2


@dataclass(frozen=True)
class SyntheticSpec:
    """A validated synthetic source (built by :mod:`flegel.data.sources`).

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    n_points, n_features : int
        Shape of the whole data set.
    seed : int
        Seed of the model and (with the chunk id) of every chunk.
    dtype : numpy.dtype
        float64 or float32 (values are drawn in float64 and rounded, so both dtypes hold the
        same data).
    centers : int
        Blobs only: number of blobs.
    cluster_std : float
        Blobs only: standard deviation around each center.
    rank : int
        Nonnegative only: rank of the noise-free matrix.
    noise : float
        Classification: std of the margin noise; regression: std of the target noise;
        nonnegative: std of the additive noise; images: std of the pixel noise.
    model_seed : int or None
        Seed of the shared model only (default: ``seed``); see :attr:`problem_seed`.
    """

    kind: str
    n_points: int
    n_features: int
    seed: int = 0
    dtype: np.dtype = np.dtype(np.float64)
    centers: int = 8
    cluster_std: float = 1.0
    rank: int = 10
    noise: float = 0.1
    model_seed: int | None = None

    @property
    def problem_seed(self) -> int:
        """Seed of the shared model (centers, hyperplane, templates, basis): ``model_seed``,
        or ``seed``.  A held-out split keeps ``model_seed`` and changes ``seed``, so it draws
        new rows of the same problem."""
        return self.seed if self.model_seed is None else self.model_seed


def synthetic_shape(s: SyntheticSpec) -> tuple[int, int, bool, int | None]:
    """``(n_rows, n_features, has_labels, n_classes)`` of a synthetic source."""
    n_classes = {"blobs": s.centers, "classification": 2, "images": _N_DIGITS}.get(s.kind)
    has_labels = s.kind != "nonnegative"
    return s.n_points, s.n_features, has_labels, n_classes


def _sub_rows(d: int) -> int:
    """Rows per sub-batch inside a chunk: a power of two dividing CHUNK_ROWS, ~16 MiB max."""
    rows = max(1, min(4096, (1 << 21) // max(d, 1)))
    return 1 << (rows.bit_length() - 1)


# --------------------------------------------------------------------------------------------
# Per-kind models: shared parameters from default_rng(seed), rows from a chunk's generator
# --------------------------------------------------------------------------------------------


class _Model:
    """Draws ``m`` rows from a chunk generator; the shared parameters are built once."""

    label_dtype: type = np.int64

    def __init__(self, s: SyntheticSpec) -> None:
        self.s = s

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError


class _Blobs(_Model):
    def __init__(self, s: SyntheticSpec) -> None:
        super().__init__(s)
        rng = np.random.default_rng(s.problem_seed)
        self.centers = rng.uniform(-10.0, 10.0, (s.centers, s.n_features))

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        y = rng.integers(0, self.s.centers, m)
        X = self.centers[y] + self.s.cluster_std * rng.standard_normal((m, self.s.n_features))
        return X, y.astype(np.int64)


class _Classification(_Model):
    def __init__(self, s: SyntheticSpec) -> None:
        super().__init__(s)
        w = np.random.default_rng(s.problem_seed).standard_normal(s.n_features)
        self.w = w / np.linalg.norm(w)

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        X = rng.standard_normal((m, self.s.n_features))
        margin = X @ self.w + self.s.noise * rng.standard_normal(m)
        return X, (margin > 0).astype(np.int64)


class _Regression(_Model):
    label_dtype = np.float64

    def __init__(self, s: SyntheticSpec) -> None:
        super().__init__(s)
        self.w = np.random.default_rng(s.problem_seed).standard_normal(s.n_features)

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        X = rng.standard_normal((m, self.s.n_features))
        return X, X @ self.w + self.s.noise * rng.standard_normal(m)


class _Nonnegative(_Model):
    def __init__(self, s: SyntheticSpec) -> None:
        super().__init__(s)
        self.basis = np.random.default_rng(s.problem_seed).random((s.rank, s.n_features))

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        H = rng.random((m, self.s.rank))
        X = H @ self.basis + self.s.noise * rng.standard_normal((m, self.s.n_features))
        np.maximum(X, 0.0, out=X)
        return X, None


def _blur_matrix(side: int, sigma: float) -> np.ndarray:
    """Gaussian blur as a matrix: ``G @ img @ G.T`` blurs rows and columns (no SciPy)."""
    i = np.arange(side)
    G = np.exp(-0.5 * ((i[:, None] - i[None, :]) / sigma) ** 2)
    return G / G.sum(axis=1, keepdims=True)


def digit_templates(seed: int) -> np.ndarray:
    """Ten 28 x 28 class templates in [0, 1]: three blurred quadratic strokes each."""
    rng = np.random.default_rng(seed)
    G = _blur_matrix(_SIDE, 1.0)
    t = np.linspace(0.0, 1.0, 80)[:, None]
    out = np.zeros((_N_DIGITS, _SIDE, _SIDE))
    for k in range(_N_DIGITS):
        canvas = np.zeros((_SIDE, _SIDE))
        for _ in range(3):
            p0, p1, p2 = rng.uniform(6.0, 21.0, (3, 2))
            pts = (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2  # Bezier curve
            r, c = np.rint(pts).astype(int).T
            np.add.at(canvas, (r, c), 1.0)
        img = G @ np.minimum(canvas, 1.0) @ G.T
        out[k] = img / img.max()
    return out


class _Images(_Model):
    def __init__(self, s: SyntheticSpec) -> None:
        super().__init__(s)
        base = digit_templates(s.problem_seed)
        # Every template under every shift of up to _MAX_SHIFT pixels, precomputed so that a
        # batch of images is one fancy-indexing gather (no per-image Python).
        shifts = range(-_MAX_SHIFT, _MAX_SHIFT + 1)
        pad = np.pad(base, ((0, 0), (_MAX_SHIFT, _MAX_SHIFT), (_MAX_SHIFT, _MAX_SHIFT)))
        views = [
            pad[
                :,
                _MAX_SHIFT + dr : _MAX_SHIFT + dr + _SIDE,
                _MAX_SHIFT + dc : _MAX_SHIFT + dc + _SIDE,
            ]
            for dr in shifts
            for dc in shifts
        ]
        self.shifted = np.stack(views, axis=1).reshape(_N_DIGITS, len(views), _SIDE * _SIDE)

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray | None]:
        y = rng.integers(0, _N_DIGITS, m)
        shift = rng.integers(0, self.shifted.shape[1], m)
        bright = rng.uniform(0.6, 1.0, m)
        X = self.shifted[y, shift] * bright[:, None]
        X += self.s.noise * rng.standard_normal((m, _SIDE * _SIDE))
        np.clip(X, 0.0, 1.0, out=X)
        return X, y.astype(np.int64)


_MODELS: dict[str, type[_Model]] = {
    "blobs": _Blobs,
    "classification": _Classification,
    "regression": _Regression,
    "nonnegative": _Nonnegative,
    "images": _Images,
}


def generate_rows(s: SyntheticSpec, rows: range) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows ``rows`` (consecutive, step 1) of a synthetic data set.

    Parameters
    ----------
    s : SyntheticSpec
        The source.
    rows : range
        Consecutive row ids within ``0 .. s.n_points``.

    Returns
    -------
    X : numpy.ndarray
        ``(len(rows), n_features)``, C-contiguous, ``s.dtype``.
    y : numpy.ndarray or None
        int64 labels (blobs, classification, images), float64 targets (regression), or None
        (nonnegative).
    """
    if rows.step != 1:
        raise ValueError("synthetic sources are generated in consecutive ranges (step 1)")
    start, stop = max(rows.start, 0), min(rows.stop, s.n_points)
    model = _MODELS[s.kind](s)
    n_out = max(stop - start, 0)
    X = np.empty((n_out, s.n_features), dtype=s.dtype)
    y: np.ndarray | None = None
    if s.kind != "nonnegative":
        y = np.empty(n_out, dtype=model.label_dtype)
    if n_out == 0:
        return X, y
    sub = _sub_rows(s.n_features)
    for c in range(start // CHUNK_ROWS, (stop - 1) // CHUNK_ROWS + 1):
        c0 = c * CHUNK_ROWS
        m_chunk = min(CHUNK_ROWS, s.n_points - c0)
        # Only the sub-batches that overlap [start, stop): each has its own generator.
        first = max(start - c0, 0) // sub
        last = (min(stop - c0, m_chunk) - 1) // sub
        for b in range(first, last + 1):
            g0 = c0 + b * sub
            m = min(sub, m_chunk - b * sub)
            Xb, yb = model.draw(_batch_rng(s.seed, c, b), m)
            lo, hi = max(g0, start), min(g0 + m, stop)
            X[lo - start : hi - start] = Xb[lo - g0 : hi - g0]
            if y is not None and yb is not None:
                y[lo - start : hi - start] = yb[lo - g0 : hi - g0]
    return X, y


def _batch_rng(seed: int, chunk: int, batch: int) -> np.random.Generator:
    """Generator of sub-batch ``batch`` of chunk ``chunk``.

    It is child ``batch`` of the chunk's seed sequence -- exactly what
    ``np.random.default_rng([seed, chunk]).spawn(batch + 1)[batch]`` returns -- built directly so
    that a shard starting in the middle of a chunk draws nothing it then throws away (a
    65,536-row chunk of 10,681-item rows is 700 M values).
    """
    return np.random.default_rng(np.random.SeedSequence([seed, chunk], spawn_key=(batch,)))
