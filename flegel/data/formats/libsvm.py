"""LIBSVM / SVMlight text (optionally gzipped): ``label index:value index:value ...`` lines.

Rows become dense X rows of ``n_features`` columns (absent features are 0); the label is the
first token (returned as written, e.g. -1/+1).  ``#`` starts a comment; SVMrank ``qid:``
tokens are skipped.  Without ``n_features`` and ``zero_based`` in the spec a load first makes
the inspection pass (:meth:`LibsvmReader.inspect`) to find them; ``SourceInfo.resolved``
carries them so that every rank can skip it.

A block of lines is tokenized by a compiled kernel (:func:`flegel.data.fastparse.libsvm_kernel`,
exact, and faster than scikit-learn's ``load_svmlight_file``); when it gives up, the careful
tokenizer (a Python split per line, NumPy's parser for the pairs) takes the block and words
any error.  Both hand the same labels, per-line counts and pairs to one checker
(:func:`place`), which writes the rows straight into the shard's X
(:class:`~flegel.data.formats.base.RowSink`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from flegel.data.checks import Bad
from flegel.data.errors import DataError
from flegel.data.files import FileSpec, reading, show
from flegel.data.formats.base import FileReader, RowSink, TableShape, to_labels
from flegel.data.partition import Shard
from flegel.data.text import first_non_number, iter_blocks, row_error, row_errors, shard_lines

__all__ = ["LibsvmReader", "Tokens", "parse_block", "place", "tokenize", "tokenize_fast"]

# A feature index: the digits before ':' at the start of a token ("qid:3" does not match).
_SVM_INDEX = re.compile(rb"(?:^|[ \t])(\d+):")

#: How many distinct label values an inspection pass tracks before giving up on n_classes.
_MAX_TRACKED_CLASSES = 1000

_COMMENT = b"#"


def _index_range(lines: list[bytes]) -> tuple[int, int] | None:
    """Smallest and largest feature index of a block of LIBSVM lines, or None if none.

    LIBSVM requires ascending indices within a line (scikit-learn enforces it too and so do
    the loads here), so only each line's first and last feature token need parsing: one split
    per line instead of a regex match per feature, ~30x less work on dense data like HIGGS.
    """
    ends = [ln.split(None, 2)[1:2] + ln.rsplit(None, 1)[-1:] for ln in lines]
    found = _SVM_INDEX.findall(b" ".join(b" ".join(e) for e in ends))
    if not found:
        return None
    idx = np.array(found).astype(np.int64)
    return int(idx.min()), int(idx.max())


#: A block's ``(labels, counts, indices, values)``: float64 labels as written, int64 feature
#: counts per line, and the pairs of all lines in order (indices as float64, as parsed).
Tokens = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def tokenize_fast(lines: list[bytes]) -> Tokens | None:
    """The block's tokens by the compiled kernel, or None when it gives up.

    Parameters
    ----------
    lines : list of bytes
        Data lines (none blank or comment-only).

    Returns
    -------
    Tokens or None
        Exactly what :func:`tokenize` returns; None for a block the careful tokenizer must
        handle (``qid:``, a malformed token, tabs...).
    """
    # Imported here: numba's import is only paid by a process that parses (not the master).
    from flegel.data.fastparse import OK, libsvm_kernel, parse_slow, slow_slots

    text = b"\n".join(lines)
    k = len(lines)
    n_pairs = text.count(b":")  # every pair has one; a block with other colons bails
    labels = np.empty(k, dtype=np.float64)
    counts = np.empty(k, dtype=np.int64)
    idx = np.empty(n_pairs, dtype=np.int64)
    vals = np.empty(n_pairs, dtype=np.float64)
    slow = slow_slots(n_pairs + k)
    buf = np.frombuffer(text, dtype=np.uint8)
    status, t, n_slow = libsvm_kernel(buf, labels, counts, idx, vals, slow)
    if status != OK:
        return None
    if n_slow:
        got = parse_slow(buf, slow[:n_slow])
        if got is None:
            return None
        target = slow[:n_slow, 2]
        pair = target >= 0
        vals[target[pair]] = got[pair]
        labels[-1 - target[~pair]] = got[~pair]
    return labels, counts, idx[:t].astype(np.float64), vals[:t]


def tokenize(fs: FileSpec, lines: list[bytes], ids: range) -> Tokens:
    """The block's tokens, the careful way: a split per line, NumPy's parser for the pairs.

    Parameters
    ----------
    fs : FileSpec
        The spec (messages).
    lines : list of bytes
        The lines to parse.
    ids : range
        Their row ids.

    Returns
    -------
    Tokens

    Raises
    ------
    DataError
        A label that is not a number, a feature that is not ``index:value``.
    """
    k = len(lines)
    labels = np.empty(k, dtype=np.float64)
    counts = np.empty(k, dtype=np.int64)
    toks: list[bytes] = []
    for j, line in enumerate(lines):
        if _COMMENT in line:
            line = line.split(_COMMENT, 1)[0]
        parts = line.split()
        try:
            labels[j] = float(parts[0])
        except ValueError:
            problem = f"has label {show(parts[0])}, expected a number ('label index:value ...')"
            raise row_error(fs, ids[j], 0, problem, _COMMENT) from None
        feats = parts[1:]
        if feats and feats[0].startswith(b"qid:"):
            feats = feats[1:]  # SVMrank query ids are not features
        counts[j] = len(feats)
        toks.extend(feats)
    if not toks:
        empty = np.empty(0, dtype=np.float64)
        return labels, counts, empty, empty
    joined = b" ".join(toks)
    pairs = None
    if joined.count(b":") == len(toks):
        try:
            pairs = np.loadtxt([joined.replace(b":", b" ")], dtype=np.float64, ndmin=1)
        except ValueError:
            pairs = None
    if pairs is None or pairs.size != 2 * len(toks):
        ends = np.cumsum(counts)
        for t, tok in enumerate(toks):
            i, sep, v = tok.partition(b":")
            if not sep or first_non_number([i, v]) is not None or b":" in v:
                j = int(np.searchsorted(ends, t, side="right"))
                raise row_error(
                    fs, ids[j], 0, f"has feature {show(tok)}, expected 'index:value'", _COMMENT
                )
        raise fs.error(f"rows {ids[0] + 1} .. {ids[-1] + 1} cannot be parsed")
    pairs = pairs.reshape(-1, 2)
    return labels, counts, pairs[:, 0], pairs[:, 1]


def place(
    fs: FileSpec, ids: range, d: int, zero_based: bool, tokens: Tokens, X: np.ndarray
) -> None:
    """Check a block's feature indices and write its values into ``X`` (zeros, ``(k, d)``).

    Parameters
    ----------
    fs : FileSpec
        The spec (messages).
    ids : range
        The block's row ids.
    d : int
        Columns of X.
    zero_based : bool
        Whether feature indices start at 0.
    tokens : Tokens
        From :func:`tokenize_fast` or :func:`tokenize`.
    X : numpy.ndarray
        The block's rows of the shard's X, all zero.

    Raises
    ------
    DataError
        An index that is not an integer, out of range, or not ascending within its line.
    """
    _, counts, idx, vals = tokens
    if idx.size == 0:
        return
    ends = np.cumsum(counts)
    cols = idx.astype(np.int64) - (0 if zero_based else 1)
    bad = (idx != np.rint(idx)) | (cols < 0) | (cols >= d)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        j = int(np.searchsorted(ends, t, side="right"))
        base = "0" if zero_based else "1"
        hint = " (set zero_based: true)" if idx[t] == 0 and not zero_based else ""
        problem = (
            f"has feature index {idx[t]:g}, expected {base} .. {d - 1 + (not zero_based)} "
            f"for n_features {d} ({base}-based){hint}"
        )
        raise row_error(fs, ids[j], 0, problem, _COMMENT)
    # Indices must ascend within a line (the LIBSVM format; inspection relies on it).
    steps = np.diff(cols)
    breaks = ends[:-1][(ends[:-1] > 0) & (ends[:-1] < len(cols))]
    steps[breaks - 1] = 1  # pairs across a line break don't count
    if (steps <= 0).any():
        t = int(np.flatnonzero(steps <= 0)[0]) + 1
        j = int(np.searchsorted(ends, t, side="right"))
        problem = (
            f"has feature index {idx[t]:g} after {idx[t - 1]:g}, expected indices in "
            "ascending order (LIBSVM format)"
        )
        raise row_error(fs, ids[j], 0, problem, _COMMENT)
    # Row-major flat positions: one scatter, no (k, d) temporary.
    rows = np.repeat(np.arange(len(counts), dtype=np.int64) * d, counts)
    X.reshape(-1)[rows + cols] = vals


def parse_block(
    fs: FileSpec, lines: list[bytes], ids: range, d: int, zero_based: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Parse picked LIBSVM lines into a dense block and float labels.

    Parameters
    ----------
    fs : FileSpec
        The spec (dtype, messages).
    lines : list of bytes
        The lines to parse.
    ids : range
        Their row ids.
    d : int
        Columns of X.
    zero_based : bool
        Whether feature indices start at 0.

    Returns
    -------
    X : numpy.ndarray
        ``(len(lines), d)`` in the spec's dtype.
    labels : numpy.ndarray
        ``(len(lines),)`` float64, as written.
    """
    tokens = tokenize_fast(lines)
    if tokens is None:
        tokens = tokenize(fs, lines, ids)
    X = np.zeros((len(lines), d), dtype=fs.dtype)
    place(fs, ids, d, zero_based, tokens, X)
    return X, tokens[0]


class LibsvmReader(FileReader):
    """Sparse ``label index:value`` lines as dense rows; labels int64 (or float64)."""

    name = "libsvm"

    def check(self, fs: FileSpec, spec: Mapping[str, Any]) -> FileSpec:
        """``label_column`` may only be null or 0 (the label is the first token), then dropped."""
        if fs.label_column not in (None, 0):
            raise fs.spec_error(
                "expected null or 0 for format 'libsvm' (the label is the first token), "
                f"found {spec.get('label_column')!r}",
                "label_column",
            )
        return super().check(replace(fs, label_column=None), spec)

    def inspect(self, fs: FileSpec) -> TableShape:
        """One streaming pass: rows, smallest/largest feature index and the label values.

        The index range decides ``zero_based`` (``"auto"``: zero-based iff index 0 occurs, as
        in scikit-learn) and ``n_features`` (largest index, unless the spec gives it); both go
        into ``TableShape.resolved`` so that loads need no pass of their own.
        """
        n = 0
        lo_idx: int | None = None
        hi_idx: int | None = None
        labels: set[bytes] | None = set()
        with reading(fs):
            for body, lines in iter_blocks(fs.path, 0, _COMMENT):
                n += len(lines)
                if _COMMENT in body:
                    lines = [ln.split(_COMMENT, 1)[0] for ln in lines]
                if b"qid:" in body:
                    lines = [
                        b" ".join(t for t in ln.split() if not t.startswith(b"qid:"))
                        for ln in lines
                    ]
                span = _index_range(lines)
                if span is not None:
                    lo_idx = span[0] if lo_idx is None else min(lo_idx, span[0])
                    hi_idx = span[1] if hi_idx is None else max(hi_idx, span[1])
                if labels is not None:
                    labels.update(ln.split(None, 1)[0] for ln in lines)
                    if len(labels) > _MAX_TRACKED_CLASSES:
                        labels = None  # regression targets: n_classes is not meaningful
        if n == 0:
            raise fs.error("file is empty, expected lines 'label index:value ...'")
        zero_based = fs.zero_based if fs.zero_based is not None else lo_idx == 0
        if fs.zero_based is False and lo_idx == 0:
            raise fs.error(
                "has feature index 0, expected 1-based indices (zero_based is false)",
                field="zero_based",
            )
        if fs.n_features is not None:
            d = fs.n_features
            if hi_idx is not None and hi_idx + zero_based > d:
                raise fs.error(
                    f"has feature index {hi_idx}, expected at most {d - zero_based} "
                    f"for n_features {d} ({'0' if zero_based else '1'}-based)",
                    field="n_features",
                )
        elif hi_idx is None:
            raise fs.error(
                "has no 'index:value' features, expected at least one (or set n_features)"
            )
        else:
            d = hi_idx + 1 if zero_based else hi_idx
        n_classes = None
        if labels is not None:
            try:
                values = {float(t) for t in labels}
            except ValueError:
                values = set()
            if values and all(v.is_integer() for v in values):
                n_classes = len(values)
        return TableShape(n, d, True, n_classes, {"n_features": d, "zero_based": bool(zero_based)})

    def content_error(
        self, spec: FileSpec, row: int, bad: Bad, n_features: int, key: str
    ) -> DataError:
        """``row R (line L) feature I ...``, ``I`` the index as written in the file."""
        what = ""
        if bad.column is not None:
            zero_based = spec.zero_based
            if zero_based is None:
                with reading(spec):
                    zero_based = self.inspect(spec).resolved["zero_based"]
            what = f"feature {bad.column + (0 if zero_based else 1)} "
        with reading(spec):
            return row_error(spec, row, 0, what + bad.problem, _COMMENT)

    def read(self, fs: FileSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
        """Dense X of the shard's lines and their labels (see :meth:`Reader.read`).

        Without ``n_features`` *and* ``zero_based`` in the spec every rank first makes the
        inspection pass (pass ``SourceInfo.resolved`` to skip it).
        """
        d, zero_based = fs.n_features, fs.zero_based
        rows = shard.open_rows()
        n_known = None  # a strided shard's size is only known at the end of the file
        if d is None or zero_based is None or rows is None:
            shape = self.inspect(fs)
            d, zero_based = shape.resolved["n_features"], shape.resolved["zero_based"]
            rows = shard.rows(shape.n_rows)
            n_known = len(rows)
        assert d is not None and zero_based is not None
        sink = RowSink(d, fs.dtype, fs.label_dtype, n_known)
        with reading(fs):
            for lines, ids in shard_lines(fs.path, rows, 0, _COMMENT):
                tokens = tokenize_fast(lines)
                if tokens is None:
                    tokens = tokenize(fs, lines, ids)
                X, y = sink.take(len(lines))
                place(fs, ids, d, zero_based, tokens, X)
                assert y is not None  # LIBSVM lines always have labels
                y[...] = to_labels(fs, tokens[0], row_errors(fs, ids, 0, _COMMENT))
        return sink.finish()

    def claims_name(self, name: str) -> bool:
        """``*.libsvm``, ``*.svm``, ``*.svmlight``."""
        return name.endswith((".libsvm", ".svm", ".svmlight"))

    def claims_line(self, line: bytes) -> bool:
        """A label then ``index:value`` tokens, no commas (``::`` would be MovieLens)."""
        toks = line.split(b"#", 1)[0].split()
        return (
            len(toks) >= 2
            and all(b":" in t for t in toks[1:])
            and b"," not in line
            and b"::" not in line
        )
