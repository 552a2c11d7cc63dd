"""NumPy files: ``.npy`` arrays and ``.npz`` archives.

X is the array (``.npy``) or the archive member ``npz_key`` (``.npz``), flattened to
``(rows, features)``; labels come from a column (``label_column``), a second ``.npy``
(``label_path``) or the member ``npz_label_key``.  A ``.npy`` file and an ``np.savez``
member are memory mapped; an ``np.savez_compressed`` member is decompressed as a stream (see
:mod:`flegel.data.formats.arrays`).
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flegel.data.files import FileSpec, reading
from flegel.data.formats.arrays import (
    ArrayReader,
    ArraySource,
    StoredArray,
    check_numeric,
    read_npy_header,
)
from flegel.data.formats.base import label_column_index

__all__ = ["NpyReader", "NpzReader", "npy_array", "npz_keys", "npz_member"]

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def npy_array(fs: FileSpec, path: Path, key: str = "path") -> StoredArray:
    """Header of a ``.npy`` file via ``np.load(mmap_mode='r')`` (reads no data).

    Parameters
    ----------
    fs : FileSpec
        The spec (for messages).
    path : Path
        The ``.npy`` file.
    key : str, optional
        The spec key naming it.

    Returns
    -------
    StoredArray
        A memory-mappable array.
    """
    with reading(fs, path, key):
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic[:4] == _ZIP_MAGIC:
            raise fs.error(
                "is an .npz archive, expected a .npy file (set format: npz)", field=key, path=path
            )
        if magic != _NPY_MAGIC:
            hint = (
                " (gzipped .npy files are not supported: decompress it)"
                if (magic[:2] == b"\x1f\x8b")
                else ""
            )
            raise fs.error(
                f"starts with {magic!r}, expected the .npy magic b'\\x93NUMPY'{hint}",
                field=key,
                path=path,
            )
        try:
            m = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            raise fs.error(
                f"cannot be mapped as an array ({exc}), expected a numeric .npy array",
                field=key,
                path=path,
            ) from exc
        shape, dtype, offset = tuple(m.shape), m.dtype, int(m.offset)
        fortran = bool(m.flags.f_contiguous and not m.flags.c_contiguous)
        del m
    arr = StoredArray(path, shape, dtype, offset, None, fortran, "array")
    check_numeric(fs, arr, key)
    return arr


def _member_header(
    fs: FileSpec, f: BinaryIO, member: str
) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        return read_npy_header(f)
    except ValueError as exc:
        raise fs.error(f"member {member!r} is not a .npy array ({exc})") from exc


def _open_member(path: Path, member: str) -> BinaryIO:
    """A compressed member's stream, positioned after its ``.npy`` header."""
    # The member stream keeps the archive's file open after the ZipFile is closed (zipfile
    # reference-counts it), so only the stream is returned.
    with zipfile.ZipFile(path) as z:
        stream = z.open(member)
    read_npy_header(stream)  # type: ignore[arg-type]
    return stream  # type: ignore[return-value]


def npz_member(fs: FileSpec, name: str, key: str) -> StoredArray | None:
    """Locate array ``name`` in an ``.npz`` archive; None if the archive has no such array.

    A member stored without compression (``np.savez``) is a plain ``.npy`` image at a known
    offset of the archive, so it is memory-mapped like a ``.npy`` file.  A compressed member
    (``np.savez_compressed``) is decompressed as a stream.

    Parameters
    ----------
    fs : FileSpec
        The spec (``fs.path`` is the archive).
    name : str
        The array name (the member is ``<name>.npy``).
    key : str
        The spec key that gave the name, for messages.

    Returns
    -------
    StoredArray or None
    """
    path = fs.path
    with reading(fs):
        try:
            zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise fs.error(f"is not an .npz (zip) archive ({exc})") from exc
        with zf:
            member = f"{name}.npy"
            if member not in zf.namelist():
                return None
            info = zf.getinfo(member)
            offset: int | None = None
            opener: Callable[[], BinaryIO] | None = None
            if info.compress_type == zipfile.ZIP_STORED:
                with open(path, "rb") as f:
                    f.seek(info.header_offset)
                    local = f.read(30)
                    if len(local) != 30 or local[:4] != _ZIP_MAGIC:
                        raise fs.error(f"member {member!r} has a bad zip header")
                    name_len, extra_len = struct.unpack("<2H", local[26:30])
                    f.seek(info.header_offset + 30 + name_len + extra_len)
                    shape, fortran, dtype = _member_header(fs, f, member)
                    offset = f.tell()
            else:
                with zf.open(member) as g:
                    shape, fortran, dtype = _member_header(fs, g, member)  # type: ignore[arg-type]
                opener = partial(_open_member, path, member)
    arr = StoredArray(
        path, tuple(shape), np.dtype(dtype), offset, opener, bool(fortran), f"array {name!r}"
    )
    check_numeric(fs, arr, key)
    return arr


def npz_keys(fs: FileSpec) -> list[str]:
    """Names of the arrays in an ``.npz`` archive."""
    with reading(fs), zipfile.ZipFile(fs.path) as zf:
        return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]


def _checked(fs: FileSpec, src: ArraySource) -> ArraySource:
    """Shape checks shared by npy and npz: rows, 2-D, one label per row, the label column."""
    X, y = src.X, src.y
    if X.n == 0:
        raise fs.error(f"{X.name} has shape {X.shape}, expected at least one row", field=src.x_key)
    if len(X.shape) < 2:
        raise fs.error(
            f"{X.name} has shape {X.shape}, expected 2 dimensions (rows x features)",
            field=src.x_key,
        )
    if y is not None and (y.width != 1 or y.n != X.n):
        raise fs.error(
            f"{y.name} has shape {y.shape}, expected ({X.n},): one label per row of {X.name}",
            field=src.y_key,
            path=y.path,
        )
    if fs.label_column is not None:
        if len(X.shape) != 2:
            raise fs.error(
                f"{X.name} has shape {X.shape}, expected 2 dimensions to take a label column from",
                field="label_column",
            )
        src.label_col = label_column_index(fs, X.width)
    return src


class NpyReader(ArrayReader):
    """``.npy``: a memory-mapped array; labels from a column or a second ``.npy``."""

    name = "npy"
    label_columns = True
    label_files = True

    def arrays(self, fs: FileSpec) -> ArraySource:
        """The array and the ``label_path`` array (headers only)."""
        X = npy_array(fs, fs.path)
        y = npy_array(fs, fs.label_path, "label_path") if fs.label_path else None
        return _checked(fs, ArraySource(X, y, None, "path", "label_path"))

    def claims_name(self, name: str) -> bool:
        """``*.npy``."""
        return name.endswith(".npy")

    def claims_magic(self, magic: bytes) -> bool:
        """The ``.npy`` magic."""
        return magic == _NPY_MAGIC


class NpzReader(ArrayReader):
    """``.npz``: X and labels are members of the archive (``npz_key``, ``npz_label_key``)."""

    name = "npz"
    label_columns = True

    def arrays(self, fs: FileSpec) -> ArraySource:
        """The members ``npz_key`` and ``npz_label_key`` (headers only)."""
        X = npz_member(fs, fs.npz_key, "npz_key")
        if X is None:
            raise fs.error(
                f"has no array {fs.npz_key!r} (arrays: {', '.join(npz_keys(fs)) or 'none'}), "
                "expected the features under npz_key",
                field="npz_key",
            )
        y = None
        if fs.label_column is None and fs.npz_label_key is not None:
            y = npz_member(fs, fs.npz_label_key, "npz_label_key")
            if y is None and fs.npz_label_required:
                raise fs.error(
                    f"has no array {fs.npz_label_key!r} (arrays: {', '.join(npz_keys(fs))}), "
                    "expected the labels under npz_label_key",
                    field="npz_label_key",
                )
        return _checked(fs, ArraySource(X, y, None, "npz_key", "npz_label_key"))

    def claims_name(self, name: str) -> bool:
        """``*.npz``."""
        return name.endswith(".npz")

    def claims_magic(self, magic: bytes) -> bool:
        """The zip magic."""
        return magic[:4] == _ZIP_MAGIC
