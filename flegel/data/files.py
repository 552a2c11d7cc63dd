"""What every file reader is handed, and how it opens files.

:class:`FileSpec` is a validated file spec (built by :mod:`flegel.data.sources` from the
``data:`` keys declared in :mod:`flegel.data.keys`); the helpers below open files (gzip
decided by content, not by name), read streams exactly, and turn I/O and decompression
failures into a :class:`~flegel.data.errors.DataError` that names the file and the key.
"""

from __future__ import annotations

import gzip
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flegel.data.errors import DataError

__all__ = [
    "BLOCK_BYTES",
    "FileSpec",
    "is_gzip",
    "open_stream",
    "read_exact",
    "reading",
    "show",
    "skip_bytes",
]

#: Bytes read per step from a text or compressed file.  Large enough that per-block Python
#: overhead is negligible, small enough that a block of lines is a few MiB of memory.  Readers
#: look it up at call time (``files.BLOCK_BYTES``), so tests can shrink it.
BLOCK_BYTES = 1 << 23


@dataclass(frozen=True)
class FileSpec:
    """A validated file data spec: the spec keys, resolved (see :data:`flegel.data.FILE_SPEC`).

    ``path`` and ``label_path`` are absolute, ``fmt`` is a registered format name (never
    ``"auto"``), ``dtype`` / ``label_dtype`` are NumPy dtypes, and ``"auto"`` values are None
    (``skip_header``, ``zero_based``).  ``label_column`` is still raw (may be negative)
    because the column count is only known once the file is opened.  ``key`` is the key path
    of the spec in the job (``"data"``) and prefixes every error message;
    ``npz_label_required`` says whether ``npz_label_key`` was given explicitly.
    """

    path: Path
    fmt: str
    key: str
    dtype: np.dtype
    label_column: int | None
    label_dtype: np.dtype
    delimiter: str | None
    skip_header: int | None
    npz_key: str
    npz_label_key: str | None
    npz_label_required: bool
    n_features: int | None
    zero_based: bool | None
    label_path: Path | None
    n_items: int | None
    normalize: bool

    def error(
        self, problem: str, *, field: str = "path", path: Path | str | None = None
    ) -> DataError:
        """A :class:`DataError` for key ``<key>.<field>`` naming ``path`` (default: the file).

        Parameters
        ----------
        problem : str
            What was found and what was expected.
        field : str, optional
            The spec key the problem belongs to.
        path : Path or str, optional
            The file named in the message (default: ``self.path``).

        Returns
        -------
        DataError
        """
        where = self.path if path is None else path
        return DataError(problem, key=f"{self.key}.{field}", path=where)

    def spec_error(self, problem: str, field: str) -> DataError:
        """A :class:`DataError` about the spec itself (no file in the message)."""
        return DataError(problem, key=f"{self.key}.{field}")


@contextmanager
def reading(fs: FileSpec, path: Path | None = None, key: str = "path") -> Iterator[None]:
    """Turn I/O and decompression failures inside the block into a :class:`DataError`.

    Parameters
    ----------
    fs : FileSpec
        The spec whose key path prefixes the message.
    path : Path, optional
        The file being read (default: ``fs.path``).
    key : str, optional
        The spec key naming that file.

    Yields
    ------
    None
    """
    try:
        yield
    except DataError:
        raise
    except FileNotFoundError as exc:
        raise fs.error("file not found, expected an existing file", field=key, path=path) from exc
    except IsADirectoryError as exc:
        raise fs.error("is a directory, expected a file", field=key, path=path) from exc
    except EOFError as exc:
        raise fs.error(
            f"compressed data ends early ({exc}), expected a complete file", field=key, path=path
        ) from exc
    except (OSError, zlib.error, zipfile.BadZipFile) as exc:
        raise fs.error(f"cannot be read ({exc})", field=key, path=path) from exc


def is_gzip(path: Path) -> bool:
    """Whether the file starts with the gzip magic (decided by content, not by name)."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_stream(path: Path) -> BinaryIO:
    """Open a file for binary reading, transparently decompressing gzip."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def read_exact(f: BinaryIO, n: int) -> bytes:
    """Read ``n`` bytes, or fewer only at the end of the stream (streams may return short)."""
    parts = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def skip_bytes(f: BinaryIO, n: int) -> int:
    """Advance a (possibly compressed) stream by ``n`` bytes; returns how many were skipped."""
    done = 0
    while done < n:
        chunk = f.read(min(BLOCK_BYTES, n - done))
        if not chunk:
            break
        done += len(chunk)
    return done


def show(raw: bytes | str, limit: int = 40) -> str:
    """A short printable form of a file fragment for messages."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)
