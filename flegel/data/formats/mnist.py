"""MNIST idx files: ``*-images-idx3-ubyte`` with ``*-labels-idx1-ubyte`` (optionally gzipped).

An idx file is a magic ``00 00 <type> <ndim>``, ``ndim`` big-endian 32-bit dimensions, then
the records: raw files are memory mapped, gzipped ones streamed (see
:mod:`flegel.data.formats.arrays`).  The label file is found next to the images when the spec
has no ``label_path``; ubyte pixels are scaled to [0, 1] unless ``normalize`` is false.
"""

from __future__ import annotations

import gzip
import struct
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flegel.data.files import FileSpec, is_gzip, open_stream, read_exact, reading
from flegel.data.formats.arrays import ArrayReader, ArraySource, StoredArray

__all__ = ["MnistReader", "idx_array"]

#: idx type byte -> stored dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

#: Label files up to this many labels are read by an inspection to count the classes.
_MAX_COUNTED_LABELS = 10_000_000


def _open_gzip_at(path: Path, offset: int) -> BinaryIO:
    stream = gzip.open(path, "rb")
    stream.read(offset)
    return stream  # type: ignore[return-value]


def idx_array(fs: FileSpec, path: Path, key: str, labels: bool) -> StoredArray:
    """Header of an IDX file (MNIST): magic ``00 00 <type> <ndim>`` then big-endian dims.

    Parameters
    ----------
    fs : FileSpec
        The spec (for messages).
    path : Path
        The idx file, raw or gzipped.
    key : str
        The spec key naming it (``"path"`` or ``"label_path"``).
    labels : bool
        Whether it must be a label file (idx1) rather than images (idx3).

    Returns
    -------
    StoredArray
    """
    what = "labels" if labels else "images"
    expect = "0x00000801 (labels, idx1)" if labels else "0x00000803 (images, idx3)"
    with reading(fs, path, key):
        gz = is_gzip(path)
        with open_stream(path) as f:
            head = read_exact(f, 4)
            if len(head) < 4:
                raise fs.error(
                    f"has {len(head)} bytes, expected an IDX header of magic {expect}",
                    field=key,
                    path=path,
                )
            dtype = IDX_DTYPES.get(head[2])
            ndim = head[3]
            if head[:2] != b"\0\0" or dtype is None or ndim == 0:
                raise fs.error(
                    f"has magic 0x{int.from_bytes(head, 'big'):08x}, expected the IDX magic "
                    f"{expect}",
                    field=key,
                    path=path,
                )
            raw = read_exact(f, 4 * ndim)
            if len(raw) != 4 * ndim:
                raise fs.error("IDX header is truncated", field=key, path=path)
            dims = struct.unpack(f">{ndim}I", raw)
        if labels and ndim != 1:
            raise fs.error(
                f"has {ndim} dimensions, expected 1 (a label file, magic {expect})",
                field=key,
                path=path,
            )
        if not labels and ndim < 2:
            raise fs.error(
                f"has {ndim} dimension, expected 3 (images, magic {expect})", field=key, path=path
            )
        offset = 4 + 4 * ndim
        shape = tuple(dims) if ndim > 1 else (dims[0], 1)
        if gz:
            return StoredArray(path, shape, dtype, None, partial(_open_gzip_at, path, offset),
                               False, what)
        arr = StoredArray(path, shape, dtype, offset, None, False, what)
        size = path.stat().st_size
        want = offset + arr.n * arr.width * dtype.itemsize
        if size < want:
            raise fs.error(
                f"has {size} bytes, expected {want} for {arr.n} {what} of "
                f"{arr.width * dtype.itemsize} bytes (truncated?)",
                field=key,
                path=path,
            )
    return arr


class MnistReader(ArrayReader):
    """MNIST idx images (rows: images, columns: pixels) and their idx label file."""

    name = "mnist"
    label_files = True
    label_column_hint = " (labels come from label_path)"

    def arrays(self, fs: FileSpec) -> ArraySource:
        """The images and the label file (headers only), checked to match."""
        X = idx_array(fs, fs.path, "path", labels=False)
        y = idx_array(fs, fs.label_path, "label_path", labels=True) if fs.label_path else None
        if y is not None and y.n != X.n:
            raise fs.error(
                f"has {y.n} labels, expected {X.n} (one per image in {fs.path})",
                field="label_path",
                path=fs.label_path,
            )
        return ArraySource(X, y, None, "path", "label_path")

    def n_classes(self, fs: FileSpec, src: ArraySource) -> int | None:
        """An idx label file is one byte per image: reading it is cheap and gives n_classes."""
        if src.y is None or src.y.n > _MAX_COUNTED_LABELS:
            return None
        labels = src.y.read_rows(fs, range(src.y.n), "label_path")
        return int(len(np.unique(labels)))

    def divisor(self, fs: FileSpec, src: ArraySource) -> float | None:
        """255 for ubyte pixels (to [0, 1]) unless ``normalize`` is false."""
        return 255.0 if fs.normalize and src.X.dtype == np.uint8 else None

    def label_file_next_to(self, path: Path) -> Path | None:
        """``train-labels-idx1-ubyte`` next to ``train-images-idx3-ubyte`` (MNIST's names)."""
        for images, labels in (("images-idx3", "labels-idx1"), ("images.idx3", "labels.idx1")):
            guess = path.with_name(path.name.replace(images, labels))
            if guess != path and guess.is_file():
                return guess
        return None

    def claims_name(self, name: str) -> bool:
        """``*ubyte*``, ``*.idx1``, ``*.idx3``."""
        return "ubyte" in name or name.endswith((".idx1", ".idx3"))

    def claims_magic(self, magic: bytes) -> bool:
        """The idx magic ``00 00 <known type>``."""
        return magic[:2] == b"\0\0" and len(magic) >= 4 and magic[2] in IDX_DTYPES
