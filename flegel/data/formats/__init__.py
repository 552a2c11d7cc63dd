"""The data formats, one module each, all behind one reader interface.

* ``npy``: ``.npy`` arrays (memory mapped) -- :mod:`flegel.data.formats.npy`
* ``npz``: ``.npz`` archives, stored or compressed -- :mod:`flegel.data.formats.npy`
* ``csv``: CSV and other delimited text -- :mod:`flegel.data.formats.csv`
* ``libsvm``: LIBSVM / SVMlight text -- :mod:`flegel.data.formats.libsvm`
* ``movielens``: MovieLens ratings, or their folder -- :mod:`flegel.data.formats.ratings`
* ``mnist``: MNIST idx files -- :mod:`flegel.data.formats.mnist`

Text formats and idx files may be gzipped.  Readers share the fixed-record array mechanism
(:mod:`flegel.data.formats.arrays`), the text plumbing (:mod:`flegel.data.text`) and the
partitioning rule (:mod:`flegel.data.partition`).

Every format is a :class:`~flegel.data.formats.base.FileReader` in :data:`READERS`; synthetic
sources are read by :data:`SYNTHETIC`, the same interface over a generator.  Adding a format
is one module with one reader class, and one line here.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from flegel.data.files import FileSpec
from flegel.data.formats.base import FileReader, Reader, TableShape
from flegel.data.formats.csv import CsvReader
from flegel.data.formats.libsvm import LibsvmReader
from flegel.data.formats.mnist import MnistReader
from flegel.data.formats.npy import NpyReader, NpzReader
from flegel.data.formats.ratings import RatingsReader
from flegel.data.formats.synthetic import SyntheticReader
from flegel.data.synthetic import SyntheticSpec
from flegel.data.text import first_lines

__all__ = [
    "ALIASES",
    "FORMATS",
    "READERS",
    "SYNTHETIC",
    "FileReader",
    "Reader",
    "TableShape",
    "detect_format",
    "find_in_folder",
    "reader_for",
]

#: Format name -> its reader, in the order messages list them.
READERS: dict[str, FileReader] = {
    r.name: r
    for r in (NpyReader(), NpzReader(), CsvReader(), LibsvmReader(), RatingsReader(), MnistReader())
}

#: The file formats a spec may name (besides ``"auto"``).
FORMATS = tuple(READERS)

#: Other names a spec may use for a format.
ALIASES = {"svmlight": "libsvm", "idx": "mnist"}

#: The reader of synthetic sources.
SYNTHETIC = SyntheticReader()

#: What text is read as when no format claims it by name, magic or first line.
_TEXT_FALLBACK = "csv"


def reader_for(spec: FileSpec | SyntheticSpec) -> Reader[FileSpec] | Reader[SyntheticSpec]:
    """The reader of a validated spec.

    Parameters
    ----------
    spec : FileSpec or SyntheticSpec

    Returns
    -------
    Reader
    """
    if isinstance(spec, SyntheticSpec):
        return SYNTHETIC
    return READERS[spec.fmt]


def find_in_folder(folder: Path, fmt: str) -> tuple[Path, str] | None:
    """The data file inside a data set's folder (MovieLens), with its format; None if none.

    Parameters
    ----------
    folder : Path
        The folder the spec's path names.
    fmt : str
        The spec's format: ``"auto"`` looks for every format.

    Returns
    -------
    (Path, str) or None
    """
    for name, reader in READERS.items():
        if fmt in ("auto", name):
            found = reader.find_in(folder)
            if found is not None:
                return found, name
    return None


def detect_format(path: Path) -> str | None:
    """Guess a file's format from its name, then from its first bytes; None if unknown.

    Each reader is asked in turn whether the name claims it (``.npy``, ``.npz``,
    ``*idx?-ubyte``, ``.libsvm/.svm/.svmlight``, ``ratings.dat``), then whether the first
    bytes do (the npy / zip / IDX magics), then whether the first data line does (``::`` or a
    ``userId,movieId`` header: MovieLens; ``label index:value`` tokens: LIBSVM).  Other text
    is CSV.

    Parameters
    ----------
    path : Path
        An existing file.

    Returns
    -------
    str or None
        A name in :data:`FORMATS`, or None when the file cannot be read.
    """
    name = path.name.lower()
    base = name[:-3] if name.endswith(".gz") else name
    for fmt, reader in READERS.items():
        if reader.claims_name(base):
            return fmt
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        for fmt, reader in READERS.items():
            if reader.claims_magic(magic):
                return fmt
        head = [ln for _, ln in first_lines(path, 0, 8) if not ln.lstrip().startswith(b"#")]
    except (OSError, EOFError, zlib.error):
        return None
    if head:
        for fmt, reader in READERS.items():
            if reader.claims_line(head[0]):
                return fmt
    return _TEXT_FALLBACK  # an empty text file too: the CSV reader gives the clearest message
