"""Tests of the data layer: every format round-trips through every sharding, errors are clear."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.data import (
    FILE_KEYS,
    FILE_SPEC,
    SYNTHETIC_KEYS,
    SYNTHETIC_SPEC,
    TABLE1,
    DataError,
    SourceInfo,
    files,
    formats,
    inspect_source,
    load_shard,
    partition_rows,
    sample_shard,
)
from flegel.data import synthetic as syn
from flegel.data.formats import csv as csv_format
from flegel.data.formats.base import FileReader, Reader
from flegel.data.formats.npy import npz_member
from flegel.data.partition import take
from flegel.data.sources import file_spec
from flegel.validation import REQUIRED

SHARDINGS = [(n, p) for n in (1, 2, 3) for p in ("strided", "contiguous")]


def gather(
    spec: dict[str, Any], base: Path, n_shards: int, partition: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load every shard and put each row back at its row id (checks shard shapes on the way)."""
    spec = {**spec, "partition": partition}
    info = inspect_source(spec, base)
    X = np.full((info.n_rows, info.n_features), np.nan)
    y = np.full(info.n_rows, -999.0) if info.has_labels else None
    seen = np.zeros(info.n_rows, dtype=int)
    for s in range(n_shards):
        Xs, ys = load_shard(spec, s, n_shards, base)
        assert info.partition == ("contiguous" if spec.get("source") else partition)
        rows = np.array(partition_rows(info.n_rows, s, n_shards, info.partition), dtype=int)
        assert Xs.shape == (len(rows), info.n_features)
        assert Xs.flags.c_contiguous and Xs.dtype == info.dtype
        X[rows] = Xs
        seen[rows] += 1
        assert (ys is None) == (y is None)
        if y is not None:
            assert ys is not None and ys.shape == (len(rows),)
            y[rows] = ys
    assert np.all(seen == 1)
    return X, y


def gather_dtype(spec: dict[str, Any], base: Path, n_shards: int = 2) -> np.dtype | None:
    _, ys = load_shard(spec, 0, n_shards, base)
    return None if ys is None else ys.dtype


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    X = rng.standard_normal((23, 5))
    y = rng.integers(0, 3, 23)
    return X, y


# --------------------------------------------------------------------------------------------
# Partitioning and sampling
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", ["strided", "contiguous"])
def test_partition_covers_every_row_once(partition: str) -> None:
    for n in (0, 1, 2, 7, 10, 101):
        for n_shards in (1, 2, 3, 5, 8):
            parts = [list(partition_rows(n, s, n_shards, partition)) for s in range(n_shards)]
            assert sorted(r for p in parts for r in p) == list(range(n))
            sizes = [len(p) for p in parts]
            assert max(sizes) - min(sizes) <= 1
    assert list(partition_rows(10, 1, 3, "strided")) == [1, 4, 7]
    assert list(partition_rows(10, 0, 3, "contiguous")) == [0, 1, 2, 3]


def test_take_matches_naive_selection() -> None:
    for rows in (range(1, 50, 3), range(5, 17), range(0, 0), range(2, 10**9, 4)):
        for lo, hi in ((0, 10), (7, 30), (40, 60), (100, 101)):
            picked = list(range(lo, hi))[take(rows, lo, hi)]
            assert picked == [r for r in range(lo, hi) if r in rows]


def test_sample_shard_is_seeded_and_uniform(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    Xs, ys = sample_shard(X, y, 5, seed=3)
    Xs2, _ = sample_shard(X, y, 5, seed=3)
    assert Xs.shape == (5, 5) and ys is not None and ys.shape == (5,)
    np.testing.assert_array_equal(Xs, Xs2)
    rows = [int(np.flatnonzero((X == r).all(axis=1))[0]) for r in Xs]
    assert len(set(rows)) == 5 and rows == sorted(rows)
    np.testing.assert_array_equal(ys, y[rows])
    Xa, ya = sample_shard(X, None, 100, seed=[1, 2])
    assert Xa.shape == X.shape and ya is None
    assert sample_shard(X, y, 0, seed=0)[0].shape == (0, 5)


# --------------------------------------------------------------------------------------------
# .npy / .npz
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_shards,partition", SHARDINGS)
def test_npy_round_trip(tmp_path: Path, data: tuple, n_shards: int, partition: str) -> None:
    X, y = data
    np.save(tmp_path / "x.npy", X)
    got, labels = gather({"path": "x.npy"}, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, X)
    assert labels is None
    # The label in the last column of a float array; the other columns are X.
    np.save(tmp_path / "xy.npy", np.column_stack([X, y]))
    got, labels = gather({"path": "xy.npy", "label_column": "last"}, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, X)
    np.testing.assert_array_equal(labels, y)


def test_npy_variants(tmp_path: Path, data: tuple) -> None:
    X, y = data
    np.save(tmp_path / "f.npy", np.asfortranarray(X))
    np.testing.assert_array_equal(gather({"path": "f.npy"}, tmp_path, 2, "strided")[0], X)
    np.save(tmp_path / "x32.npy", X.astype(np.float32))
    X32, _ = load_shard({"path": "x32.npy", "dtype": "float32"}, 0, 1, tmp_path)
    assert X32.dtype == np.float32
    np.testing.assert_array_equal(X32, X.astype(np.float32))
    # Images stored as (n, 28, 28) are flattened, labels from a separate file.
    imgs = np.arange(4 * 3 * 2, dtype=np.uint8).reshape(4, 3, 2)
    np.save(tmp_path / "imgs.npy", imgs)
    np.save(tmp_path / "labels.npy", np.array([3, 1, 4, 1]))
    spec = {"path": "imgs.npy", "label_path": "labels.npy"}
    Xi, yi = gather(spec, tmp_path, 3, "strided")
    np.testing.assert_array_equal(Xi, imgs.reshape(4, 6))
    np.testing.assert_array_equal(yi, [3, 1, 4, 1])
    assert gather_dtype(spec, tmp_path) == np.int64
    # limit: only the first rows are used.
    spec = {"path": "f.npy", "limit": 10}
    assert inspect_source(spec, tmp_path).n_rows == 10
    np.testing.assert_array_equal(gather(spec, tmp_path, 3, "contiguous")[0], X[:10])


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("n_shards,partition", SHARDINGS)
def test_npz_round_trip(
    tmp_path: Path, data: tuple, compressed: bool, n_shards: int, partition: str
) -> None:
    X, y = data
    save = np.savez_compressed if compressed else np.savez
    save(tmp_path / "d.npz", X=X, y=y)
    got, labels = gather({"path": "d.npz"}, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, X)
    np.testing.assert_array_equal(labels, y)
    cube = np.asfortranarray(np.arange(23 * 6, dtype=np.int16).reshape(23, 2, 3))
    save(tmp_path / "f.npz", X=cube)
    got, _ = gather({"path": "f.npz"}, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, cube.reshape(23, 6))
    save(tmp_path / "e.npz", feats=np.asfortranarray(X.astype(np.float32)))
    spec = {"path": "e.npz", "npz_key": "feats", "dtype": "float32", "limit": 20}
    got, labels = gather(spec, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, X[:20].astype(np.float32))
    assert labels is None


def test_npz_stored_member_is_memory_mapped(tmp_path: Path, data: tuple) -> None:
    X, _ = data
    np.savez(tmp_path / "d.npz", X=X)
    fs = file_spec({"path": "d.npz"}, tmp_path)
    member = npz_member(fs, "X", "npz_key")
    assert member is not None and member.offset is not None
    np.savez_compressed(tmp_path / "c.npz", X=X)
    fs = file_spec({"path": "c.npz"}, tmp_path)
    member = npz_member(fs, "X", "npz_key")
    assert member is not None and member.offset is None


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


def write_text(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def csv_text(X: np.ndarray, y: np.ndarray | None = None, sep: str = ",") -> str:
    rows = X if y is None else np.column_stack([y, X])
    return "".join(sep.join(f"{v:.17g}" for v in r) + "\n" for r in rows)


@pytest.mark.parametrize("name", ["d.csv", "d.csv.gz"])
@pytest.mark.parametrize("n_shards,partition", SHARDINGS)
def test_csv_round_trip(
    tmp_path: Path, data: tuple, name: str, n_shards: int, partition: str
) -> None:
    X, y = data
    write_text(tmp_path / name, csv_text(X, y))  # UCI style: label first
    got, labels = gather({"path": name, "label_column": 0}, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, X)
    np.testing.assert_array_equal(labels, y)
    got, labels = gather({"path": name}, tmp_path, n_shards, partition)
    np.testing.assert_array_equal(got, np.column_stack([y, X]))
    assert labels is None


def test_csv_header_blank_lines_crlf_whitespace_limit(tmp_path: Path, data: tuple) -> None:
    X, y = data
    body = csv_text(X, y).splitlines()
    text = "label,a,b,c,d,e\r\n" + "\r\n".join(body[:5]) + "\r\n\r\n  \r\n" + "\r\n".join(body[5:])
    write_text(tmp_path / "h.csv", text)
    spec = {"path": "h.csv", "label_column": "first"}
    info = inspect_source(spec, tmp_path)
    assert (info.n_rows, info.n_features, info.has_labels) == (23, 5, True)
    assert info.resolved == {"skip_header": 1}
    for n_shards, partition in SHARDINGS:
        got, labels = gather(spec, tmp_path, n_shards, partition)
        np.testing.assert_array_equal(got, X)
        np.testing.assert_array_equal(labels, y)
    # Whitespace-separated, float32, label last, limit.
    write_text(tmp_path / "w.txt", csv_text(np.column_stack([X, y]), sep="   "))
    spec = {
        "path": "w.txt",
        "format": "csv",
        "delimiter": None,
        "label_column": -1,
        "dtype": "float32",
        "limit": 11,
    }
    got, labels = gather(spec, tmp_path, 3, "strided")
    np.testing.assert_array_equal(got, X[:11].astype(np.float32))
    np.testing.assert_array_equal(labels, y[:11])
    # Regression targets stay float.
    write_text(tmp_path / "r.csv", "0.5,1\n1.5,2\n")
    spec = {"path": "r.csv", "label_column": 0, "label_dtype": "float64"}
    _, yr = load_shard(spec, 0, 1, tmp_path)
    assert yr is not None and yr.dtype == np.float64
    np.testing.assert_array_equal(yr, [0.5, 1.5])


def test_csv_contiguous_shard_stops_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small blocks so the file spans many; shard 0 of 4 must not parse the rest.
    monkeypatch.setattr(files, "BLOCK_BYTES", 64)
    X = np.arange(400.0).reshape(100, 4)
    write_text(tmp_path / "big.csv", csv_text(X))
    parsed: list[int] = []
    real = csv_format.parse_block

    def spy(fs: Any, lines: list, ids: range, dialect: Any) -> np.ndarray:
        parsed.extend(ids)
        return real(fs, lines, ids, dialect)

    monkeypatch.setattr(csv_format, "parse_block", spy)
    X0, _ = load_shard({"path": "big.csv", "partition": "contiguous"}, 0, 4, tmp_path)
    np.testing.assert_array_equal(X0, X[:25])
    assert parsed == list(range(25))
    parsed.clear()
    X1, _ = load_shard({"path": "big.csv"}, 1, 4, tmp_path)
    np.testing.assert_array_equal(X1, X[1::4])
    assert parsed == list(range(1, 100, 4))


# --------------------------------------------------------------------------------------------
# LIBSVM
# --------------------------------------------------------------------------------------------


def libsvm_text(X: np.ndarray, y: np.ndarray, base: int) -> str:
    lines = []
    for row, label in zip(X, y, strict=True):
        feats = " ".join(f"{j + base}:{v:.17g}" for j, v in enumerate(row) if v != 0)
        lines.append(f"{label} {feats}".rstrip())
    return "\n".join(lines) + "\n"


@pytest.fixture
def sparse() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    X = rng.standard_normal((17, 6)) * (rng.random((17, 6)) < 0.5)
    X[0, 0] = 1.0  # index 0 (0-based) / 1 (1-based) occurs
    X[3, 5] = 2.0  # the largest index occurs
    X[4] = 0.0  # a row with a label only
    return X, rng.choice([-1, 1], 17)


@pytest.mark.parametrize("base", [1, 0])
@pytest.mark.parametrize("name", ["d.libsvm", "d.svm.gz"])
def test_libsvm_round_trip(tmp_path: Path, sparse: tuple, base: int, name: str) -> None:
    X, y = sparse
    write_text(tmp_path / name, libsvm_text(X, y, base))
    info = inspect_source({"path": name}, tmp_path)
    assert (info.n_rows, info.n_features, info.n_classes) == (17, 6, 2)
    assert info.resolved == {"n_features": 6, "zero_based": base == 0}
    for n_shards, partition in SHARDINGS:
        got, labels = gather({"path": name}, tmp_path, n_shards, partition)
        np.testing.assert_array_equal(got, X)
        np.testing.assert_array_equal(labels, y)
        resolved = {"path": name, **info.resolved}
        got, _ = gather(resolved, tmp_path, n_shards, partition)
        np.testing.assert_array_equal(got, X)
    assert gather_dtype({"path": name}, tmp_path) == np.int64


def test_libsvm_explicit_options_comments_qid(tmp_path: Path) -> None:
    text = "# a comment line\n1 qid:3 1:0.5 3:2 # trailing\n\n0 2:1.5\n"
    write_text(tmp_path / "c.txt", text)
    spec = {"path": "c.txt", "n_features": 5, "zero_based": False}
    info = inspect_source(spec, tmp_path)
    assert (info.n_rows, info.n_features) == (2, 5)
    X, y = load_shard(spec, 0, 1, tmp_path)
    np.testing.assert_array_equal(X, [[0.5, 0, 2, 0, 0], [0, 1.5, 0, 0, 0]])
    np.testing.assert_array_equal(y, [1, 0])
    X1, y1 = load_shard({**spec, "dtype": "float32"}, 1, 2, tmp_path)
    assert X1.dtype == np.float32 and y1.tolist() == [0]


# --------------------------------------------------------------------------------------------
# MovieLens
# --------------------------------------------------------------------------------------------

RATINGS = [
    (10, 5, 4.0),
    (3, 7, 3.5),
    (10, 7, 1.0),
    (42, 100, 5.0),
    (3, 5, 2.0),
    (7, 100, 0.5),
    (42, 5, 3.0),
]


def ratings_matrix() -> np.ndarray:
    users, items = [3, 7, 10, 42], [5, 7, 100]
    R = np.zeros((4, 3))
    for u, i, r in RATINGS:
        R[users.index(u), items.index(i)] = r
    return R


@pytest.mark.parametrize("style", ["dat", "csv", "csv.gz", "folder"])
def test_movielens_round_trip(tmp_path: Path, style: str) -> None:
    if style == "dat":
        text = "".join(f"{u}::{i}::{r:g}::97830{k}\n" for k, (u, i, r) in enumerate(RATINGS))
        path = write_text(tmp_path / "ratings.dat", text)
    else:
        text = "userId,movieId,rating,timestamp\n" + "".join(
            f"{u},{i},{r},1112486027\n" for u, i, r in RATINGS
        )
        sub = tmp_path / "ml"
        sub.mkdir()
        path = write_text(sub / ("ratings." + style.replace("folder", "csv")), text)
    spec = {"path": str(sub if style == "folder" else path)}
    info = inspect_source(spec, tmp_path)
    assert (info.n_rows, info.n_features, info.has_labels) == (4, 3, False)
    for n_shards, partition in SHARDINGS:
        got, labels = gather(spec, tmp_path, n_shards, partition)
        np.testing.assert_array_equal(got, ratings_matrix())
        assert labels is None


def test_movielens_n_items_keeps_most_rated(tmp_path: Path) -> None:
    text = "".join(f"{u}\t{i}\t{r:g}\t0\n" for u, i, r in RATINGS)  # u.data style
    write_text(tmp_path / "u.data", text)
    spec = {"path": "u.data", "format": "movielens", "n_items": 2, "limit": 3}
    info = inspect_source(spec, tmp_path)
    assert (info.n_rows, info.n_features) == (3, 2)
    got, _ = gather(spec, tmp_path, 2, "strided")
    # Item 5 is rated 3 times, 7 and 100 twice each: the tie goes to the smaller id, 7.
    np.testing.assert_array_equal(got, ratings_matrix()[:3, :2])


# --------------------------------------------------------------------------------------------
# MNIST idx
# --------------------------------------------------------------------------------------------


def write_idx(path: Path, arr: np.ndarray, magic: int | None = None) -> Path:
    head = struct.pack(">I", magic if magic is not None else 0x800 + arr.ndim)
    raw = head + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()
    if path.suffix == ".gz":
        raw = gzip.compress(raw)
    path.write_bytes(raw)
    return path


@pytest.fixture
def digits() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return rng.integers(0, 256, (13, 28, 28), dtype=np.uint8), rng.integers(0, 10, 13)


@pytest.mark.parametrize("gz", ["", ".gz"])
@pytest.mark.parametrize("n_shards,partition", SHARDINGS)
def test_mnist_round_trip(
    tmp_path: Path, digits: tuple, gz: str, n_shards: int, partition: str
) -> None:
    imgs, labels = digits
    write_idx(tmp_path / f"train-images-idx3-ubyte{gz}", imgs)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{gz}", labels)
    spec = {"path": f"train-images-idx3-ubyte{gz}"}  # labels found next to the images
    info = inspect_source(spec, tmp_path)
    assert (info.n_rows, info.n_features, info.has_labels) == (13, 784, True)
    assert info.n_classes == len(np.unique(labels))
    got, y = gather(spec, tmp_path, n_shards, partition)
    np.testing.assert_allclose(got, imgs.reshape(13, 784) / 255.0, rtol=1e-15)
    np.testing.assert_array_equal(y, labels)
    assert gather_dtype(spec, tmp_path) == np.int64
    raw, none = load_shard({**spec, "label_path": None, "normalize": False}, 0, 1, tmp_path)
    assert none is None
    np.testing.assert_array_equal(raw, imgs.reshape(13, 784))


# --------------------------------------------------------------------------------------------
# Synthetic
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "blobs", "n_points": 70_000, "n_features": 3, "centers": 4},  # crosses a chunk
        {"kind": "classification", "n_points": 500},
        {"kind": "regression", "n_points": 300, "n_features": 4},
        {"kind": "nonnegative", "n_points": 200, "n_features": 40, "rank": 3},
        {"kind": "images", "n_points": 150},
    ],
)
def test_synthetic_is_independent_of_sharding(tmp_path: Path, spec: dict) -> None:
    spec = {"source": "synthetic", "seed": 4, **spec}
    ref, ref_y = load_shard(spec, 0, 1, tmp_path)
    info = inspect_source(spec, tmp_path)
    assert ref.shape == (info.n_rows, info.n_features)
    for n_shards, partition in SHARDINGS[2:]:
        got, y = gather(spec, tmp_path, n_shards, partition)
        np.testing.assert_array_equal(got, ref)
        if ref_y is None:
            assert y is None
        else:
            np.testing.assert_array_equal(y, ref_y)
    other, _ = load_shard({**spec, "seed": 5}, 0, 1, tmp_path)
    assert not np.array_equal(other, ref)
    X32, _ = load_shard({**spec, "dtype": "float32"}, 0, 1, tmp_path)
    np.testing.assert_array_equal(X32, ref.astype(np.float32))
    head, _ = load_shard({**spec, "limit": 100}, 1, 2, tmp_path)
    np.testing.assert_array_equal(head, ref[50:100])


def test_synthetic_kinds_look_right(tmp_path: Path) -> None:
    X, y = load_shard({"source": "synthetic", "kind": "images", "n_points": 400}, 0, 1, tmp_path)
    assert X.shape == (400, 784) and X.min() >= 0 and X.max() <= 1
    assert y is not None and y.dtype == np.int64 and set(y) == set(range(10))
    # Images of a class look more like each other than like other classes.
    means = np.stack([X[y == k].mean(axis=0) for k in range(10)])
    own = [np.linalg.norm(X[y == k] - means[k], axis=1).mean() for k in range(10)]
    other = [np.linalg.norm(X[y == k] - means[(k + 1) % 10], axis=1).mean() for k in range(10)]
    assert np.all(np.array(own) < np.array(other))
    X, y = load_shard(
        {"source": "synthetic", "kind": "classification", "n_points": 2000, "noise": 0.0},
        0,
        1,
        tmp_path,
    )
    assert X.shape == (2000, 28) and set(y.tolist()) == {0, 1}
    w = np.linalg.lstsq(X, 2.0 * y - 1, rcond=None)[0]
    assert np.mean((X @ w > 0) == (y == 1)) > 0.9  # linearly separable-ish
    X, y = load_shard(
        {"source": "synthetic", "kind": "nonnegative", "n_points": 50}, 0, 1, tmp_path
    )
    assert y is None and X.min() >= 0 and X.shape == (50, 500)
    info = inspect_source(
        {"source": "synthetic", "kind": "blobs", "n_points": 9, "centers": 3}, tmp_path
    )
    assert (info.has_labels, info.n_classes) == (True, 3)


def test_synthetic_like_table1(tmp_path: Path) -> None:
    assert (TABLE1["higgs"]["n_points"], TABLE1["higgs"]["n_features"]) == (11_000_000, 28)
    assert (TABLE1["susy"]["n_points"], TABLE1["susy"]["n_features"]) == (5_000_000, 18)
    assert TABLE1["mnist"]["n_features"] == 784
    info = inspect_source({"source": "synthetic", "like": "higgs", "scale": 1e-4}, tmp_path)
    assert (info.n_rows, info.n_features, info.n_classes) == (1100, 28, 2)
    spec = {"source": "synthetic", "like": "HIGGS", "scale": 1e-4, "kind": "blobs"}
    assert inspect_source(spec, tmp_path).n_classes == 8
    X, _ = load_shard({"source": "synthetic", "like": "ml10m", "scale": 1e-4}, 0, 2, tmp_path)
    assert X.shape == (4, 10_681)
    assert syn._sub_rows(10_681) & (syn._sub_rows(10_681) - 1) == 0


# --------------------------------------------------------------------------------------------
# Paths, detection, inspection
# --------------------------------------------------------------------------------------------


def test_paths_resolve_against_base_dir_and_home(
    tmp_path: Path, data: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, _ = data
    (tmp_path / "sub").mkdir()
    np.save(tmp_path / "sub" / "x.npy", X)
    assert inspect_source({"path": "sub/x.npy"}, tmp_path).n_rows == 23
    monkeypatch.setenv("HOME", str(tmp_path))
    assert inspect_source({"path": "~/sub/x.npy"}, "/nonexistent").n_rows == 23


def test_auto_detection(tmp_path: Path, data: tuple, digits: tuple) -> None:
    X, y = data
    np.save(tmp_path / "a.npy", X)
    (tmp_path / "a.npy").rename(tmp_path / "noext")
    np.savez(tmp_path / "b.npz", X=X)
    write_text(tmp_path / "c.data", csv_text(X))
    write_text(tmp_path / "d.txt", "1 1:2 3:4\n0 2:1\n")
    write_text(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,2,3,4\n")
    write_idx(tmp_path / "blob.bin", digits[0])
    expected = {
        "noext": "npy",
        "b.npz": "npz",
        "c.data": "csv",
        "d.txt": "libsvm",
        "ratings.csv": "movielens",
        "blob.bin": "mnist",
    }
    for name, fmt in expected.items():
        assert formats.detect_format(tmp_path / name) == fmt, name
    info = inspect_source({"path": "d.txt"}, tmp_path)
    assert isinstance(info, SourceInfo) and (info.n_rows, info.n_features) == (2, 3)


def test_keys_are_declared_once(tmp_path: Path, data: tuple) -> None:
    assert FILE_KEYS == frozenset(FILE_SPEC) and SYNTHETIC_KEYS == frozenset(SYNTHETIC_SPEC)
    for table in (FILE_SPEC, SYNTHETIC_SPEC):
        for name, key in table.items():
            assert key.doc and "\n" not in key.doc and key.expected, name
            assert key.default is REQUIRED or key.check(key.default), (name, key.default)
    # The loaders use the declared defaults: the generator's parameters are the keys'.
    s = syn.SyntheticSpec("blobs", 1, 1)
    for name in ("seed", "centers", "cluster_std", "rank", "noise", "model_seed"):
        assert SYNTHETIC_SPEC[name].default == getattr(s, name), name
    np.savez(tmp_path / "d.npz", X=data[0])
    fs = file_spec({"path": "d.npz"}, tmp_path)
    for name in ("npz_key", "npz_label_key", "delimiter", "normalize", "n_features"):
        assert getattr(fs, name) == FILE_SPEC[name].default, name


def test_one_reader_interface() -> None:
    assert formats.FORMATS == ("npy", "npz", "csv", "libsvm", "movielens", "mnist")
    for name, reader in formats.READERS.items():
        assert isinstance(reader, FileReader) and reader.name == name
    assert isinstance(formats.SYNTHETIC, Reader) and formats.SYNTHETIC.partition == "contiguous"
    assert formats.ALIASES == {"svmlight": "libsvm", "idx": "mnist"}


# --------------------------------------------------------------------------------------------
# Errors: each names the file (or key) and says what was expected and found
# --------------------------------------------------------------------------------------------


def raises(spec: dict, base: Path, *fragments: str, load: bool = False) -> DataError:
    with pytest.raises(DataError) as info:
        if load:
            load_shard(spec, 0, 1, base)
        else:
            inspect_source(spec, base)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, (frag, msg)
    return info.value


def test_error_missing_file(tmp_path: Path) -> None:
    err = raises(
        {"path": "nope.csv"}, tmp_path, "data.path", str(tmp_path / "nope.csv"), "file not found"
    )
    assert err.path == str(tmp_path / "nope.csv")
    raises({"path": "x.npy", "label_path": "none.npy"}, tmp_path, "data.path")


def test_error_row_with_wrong_columns(tmp_path: Path) -> None:
    lines = ["1,2,3"] * 16 + ["1,2,3,4,5"] + ["1,2,3"] * 3
    write_text(tmp_path / "bad.csv", "a,b,c\n\n" + "\n".join(lines) + "\n")
    where = f"data.path: {tmp_path / 'bad.csv'}"
    with pytest.raises(DataError) as info:
        inspect_source({"path": "bad.csv"}, tmp_path)  # the inspection pass catches it too
    assert str(info.value) == f"{where}: row 17 (line 19) has 5 columns, expected 3"
    for n_shards in (1, 3):
        with pytest.raises(DataError) as info:
            for s in range(n_shards):
                load_shard({"path": "bad.csv"}, s, n_shards, tmp_path)
        msg = str(info.value)
        where = f"data.path: {tmp_path / 'bad.csv'}"
        assert msg == f"{where}: row 17 (line 19) has 5 columns, expected 3"
    write_text(tmp_path / "nan.csv", "1,2\n3,x\n")
    raises(
        {"path": "nan.csv"},
        tmp_path,
        "nan.csv",
        "row 2 (line 2) column 2 is 'x'",
        "expected a number",
        load=True,
    )


def test_error_label_column_out_of_range(tmp_path: Path) -> None:
    write_text(tmp_path / "d.csv", "1,2,3\n4,5,6\n")
    raises(
        {"path": "d.csv", "label_column": 3},
        tmp_path,
        "data.label_column",
        "d.csv",
        "label column 3 is out of range for 3 columns",
    )
    np.save(tmp_path / "d.npy", np.ones((3, 2)))
    raises({"path": "d.npy", "label_column": -3}, tmp_path, "d.npy", "out of range")


def test_error_empty_files(tmp_path: Path) -> None:
    for name in ("e.csv", "e.libsvm", "ratings.dat"):
        write_text(tmp_path / name, "")
        raises({"path": name}, tmp_path, name, "empty")
    write_text(tmp_path / "h.csv", "a,b,c\n")
    raises({"path": "h.csv"}, tmp_path, "h.csv", "only a header line", "expected at least one")


def test_error_unknown_format_and_keys(tmp_path: Path) -> None:
    write_text(tmp_path / "d.csv", "1,2\n")
    raises(
        {"path": "d.csv", "format": "parquet"},
        tmp_path,
        "data.format",
        "'parquet'",
        "expected one of",
    )
    raises(
        {"path": "d.csv", "delimeter": ";"},
        tmp_path,
        "data.delimeter",
        "unknown key",
        "did you mean 'delimiter'",
    )
    raises({"path": "d.csv", "dtype": "int8"}, tmp_path, "data.dtype", "'int8'", "float32")
    raises(
        {"path": "d.csv", "label_column": 0, "label_path": "d.csv"},
        tmp_path,
        "data.label_path",
        "not used by format 'csv'",
    )
    raises({"path": "d.csv", "partition": "random"}, tmp_path, "data.partition", "'random'")
    raises({"path": "d.csv", "limit": 0}, tmp_path, "data.limit", "positive integer")
    raises(
        {"source": "synthetic", "kind": "blobz", "n_points": 3}, tmp_path, "data.kind", "'blobz'"
    )
    raises({"source": "synthetic", "like": "imagenet"}, tmp_path, "data.like", "'higgs'")
    raises({"source": "synthetic", "kind": "blobs"}, tmp_path, "data.n_points", "missing")
    raises({}, tmp_path, "data.path", "missing")


def test_error_bad_idx_magic_and_sizes(tmp_path: Path, digits: tuple) -> None:
    imgs, labels = digits
    write_idx(tmp_path / "x-images-idx3-ubyte", imgs, magic=0x12345678)
    raises(
        {"path": "x-images-idx3-ubyte"},
        tmp_path,
        "x-images-idx3-ubyte",
        "magic 0x12345678",
        "expected the IDX magic 0x00000803",
    )
    write_idx(tmp_path / "t-images-idx3-ubyte", imgs)
    write_idx(tmp_path / "t-labels-idx1-ubyte", labels[:5])
    raises(
        {"path": "t-images-idx3-ubyte"}, tmp_path, "data.label_path", "has 5 labels", "expected 13"
    )
    raw = (tmp_path / "t-images-idx3-ubyte").read_bytes()
    (tmp_path / "cut-images-idx3-ubyte").write_bytes(raw[:-100])
    raises({"path": "cut-images-idx3-ubyte", "label_path": None}, tmp_path, "truncated")
    (tmp_path / "cut.gz").write_bytes(gzip.compress(raw[:-1000]))
    raises({"path": "cut.gz", "format": "mnist"}, tmp_path, "cut.gz", "truncated", load=True)


def test_error_npz_and_npy_contents(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", features=np.ones((3, 2)))
    raises({"path": "d.npz"}, tmp_path, "data.npz_key", "d.npz", "no array 'X'", "features")
    np.savez(tmp_path / "y.npz", X=np.ones((3, 2)), y=np.ones(4))
    raises(
        {"path": "y.npz"},
        tmp_path,
        "data.npz_label_key",
        "array 'y' has shape (4,)",
        "expected (3,)",
    )
    raises(
        {"path": "d.npz", "npz_key": "features", "npz_label_key": "labels"},
        tmp_path,
        "no array 'labels'",
    )
    write_text(tmp_path / "fake.npy", "hello")
    raises({"path": "fake.npy"}, tmp_path, "fake.npy", "expected the .npy magic")
    np.save(tmp_path / "v.npy", np.ones(5))
    raises({"path": "v.npy"}, tmp_path, "v.npy", "shape (5,)", "expected 2 dimensions")
    np.save(tmp_path / "s.npy", np.array([["a", "b"]]))
    raises({"path": "s.npy"}, tmp_path, "s.npy", "expected a numeric")


def test_error_labels_and_libsvm_indices(tmp_path: Path) -> None:
    write_text(tmp_path / "f.csv", "1,2\n0.5,3\n")
    raises(
        {"path": "f.csv", "label_column": 0},
        tmp_path,
        "data.label_column",
        "f.csv",
        "row 2 (line 2) has label 0.5",
        "label_dtype: float64",
        load=True,
    )
    write_text(tmp_path / "z.libsvm", "1 0:1.0 2:3\n")
    raises(
        {"path": "z.libsvm", "zero_based": False}, tmp_path, "data.zero_based", "feature index 0"
    )
    raises(
        {"path": "z.libsvm", "zero_based": False, "n_features": 3},
        tmp_path,
        "row 1 (line 1) has feature index 0",
        "set zero_based: true",
        load=True,
    )
    write_text(tmp_path / "t.libsvm", "1 1:1.0\n1 2-3\n")
    raises(
        {"path": "t.libsvm"},
        tmp_path,
        "row 2 (line 2) has feature '2-3'",
        "expected 'index:value'",
        load=True,
    )
    write_text(tmp_path / "u.libsvm", "0\n1 1:1 4:1\n1 2:1 3:2\n0 3:1 2:1\n")
    raises(
        {"path": "u.libsvm"},
        tmp_path,
        "row 4 (line 4) has feature index 2 after 3",
        "ascending",
        load=True,
    )
    write_text(tmp_path / "w.libsvm", "1 1:1.0 9:2\n")
    raises({"path": "w.libsvm", "n_features": 4}, tmp_path, "data.n_features", "feature index 9")
    write_text(tmp_path / "ratings.dat", "1::2::x::0\n")
    raises({"path": "ratings.dat"}, tmp_path, "ratings.dat", "expected", "user::item")


def test_error_directory_and_gzip_npy(tmp_path: Path, data: tuple) -> None:
    (tmp_path / "dir").mkdir()
    raises({"path": "dir"}, tmp_path, "data.path", "is a directory")
    X, _ = data
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "x.npy.gz").write_bytes(gzip.compress((tmp_path / "x.npy").read_bytes()))
    raises({"path": "x.npy.gz"}, tmp_path, "x.npy.gz", "gzipped .npy")


def test_shard_arguments_checked(tmp_path: Path) -> None:
    spec = {"source": "synthetic", "kind": "blobs", "n_points": 5}
    with pytest.raises(ValueError, match="shard"):
        load_shard(spec, 2, 2, tmp_path)
    with pytest.raises(ValueError, match="n_shards"):
        load_shard(spec, 0, 0, tmp_path)


def test_tiny_blocks_give_the_same_shards(
    tmp_path: Path, data: tuple, sparse: tuple, digits: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Block boundaries (in the middle of lines and records) must not change any shard."""
    X, y = data
    write_text(tmp_path / "d.csv.gz", "y,a,b,c,d,e\n" + csv_text(X, y))
    write_text(tmp_path / "s.libsvm", "# head\n" + libsvm_text(*sparse, base=1))
    write_text(tmp_path / "ratings.dat", "".join(f"{u}::{i}::{r}::0\n" for u, i, r in RATINGS))
    write_idx(tmp_path / "i-images-idx3-ubyte.gz", digits[0])
    write_idx(tmp_path / "i-labels-idx1-ubyte.gz", digits[1])
    np.savez_compressed(tmp_path / "c.npz", X=X, y=y)
    np.savez_compressed(tmp_path / "f.npz", X=np.asfortranarray(X))
    specs = [
        {"path": "d.csv.gz", "label_column": 0},
        {"path": "s.libsvm"},
        {"path": "ratings.dat"},
        {"path": "i-images-idx3-ubyte.gz"},
        {"path": "c.npz"},
        {"path": "f.npz"},
    ]
    want = [[gather(s, tmp_path, n, p) for n, p in SHARDINGS] for s in specs]
    monkeypatch.setattr(files, "BLOCK_BYTES", 7)
    for spec, expected in zip(specs, want, strict=True):
        for (n, p), (X_ref, y_ref) in zip(SHARDINGS, expected, strict=True):
            got, labels = gather(spec, tmp_path, n, p)
            np.testing.assert_array_equal(got, X_ref)
            np.testing.assert_array_equal(labels, y_ref)


def test_csv_delimiter_auto(tmp_path: Path) -> None:
    write_text(tmp_path / "semi.csv", "a;b\n1;2\n3;4\n")
    write_text(tmp_path / "tabs.tsv", "1\t2\n3\t4\n")
    write_text(tmp_path / "blank.txt", "1  2\n 3 4\n")
    for name in ("semi.csv", "tabs.tsv", "blank.txt"):
        X, _ = load_shard({"path": name}, 0, 1, tmp_path)
        np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    X, _ = load_shard({"path": "semi.csv", "delimiter": ";", "skip_header": 1}, 1, 2, tmp_path)
    np.testing.assert_array_equal(X, [[3, 4]])
