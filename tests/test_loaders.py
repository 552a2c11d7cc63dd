"""The fast text loaders (issue 14, item 6): same arrays as the careful parsers, same messages.

The compiled kernels (:mod:`flegel.data.fastparse`) must never change a result: every test
here compares a load or a block with the fast path against the same with the fast path
switched off (``parse_fast`` / ``tokenize_fast`` patched to give up), bit for bit, and checks
that the fast path really ran, so that a kernel that always gave up would fail too.  The
shard's arrays are written in place (:class:`flegel.data.formats.base.RowSink`): a strided
load must not hold its shard twice.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flegel.data import DataError, files, load_shard
from flegel.data.fastparse import OK, csv_kernel, slow_slots
from flegel.data.formats import csv as csv_format
from flegel.data.formats import libsvm as libsvm_format
from flegel.data.sources import file_spec

SHARDINGS = [(n, p) for n in (1, 3, 4) for p in ("strided", "contiguous")]

#: Number shapes a text file may hold: fast-path ones and every kind of slow one.
NUMBERS = [
    "0", "-0", "+0", "0.0", "-0.0", "1", "+1", "-1", "1.", ".5", "-.5", "007", "100",
    "1e5", "1E-5", "2.5e+3", "1e22", "1e23", "1e-22", "1e-23", "8.692932128906250000e-01",
    "0.1", "0.30000000000000004", "9007199254740993", "9007199254740992", "123456789012345678",
    "1.7976931348623157e308", "4.9e-324", "1e400", "nan", "-inf", "inf", "NaN",
    "0.000000000000000000000000001", "1000000000000000000000000", "3.14159265358979323846",
]


def _bits(a: np.ndarray) -> np.ndarray:
    """Bit patterns, so that -0.0 and 0.0 (and NaN payloads) must match too."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def _careful(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_format, "parse_fast", lambda lines, dia: None)
    monkeypatch.setattr(libsvm_format, "tokenize_fast", lambda lines: None)


def _load_all(spec: dict[str, Any], base: Path) -> list[tuple[np.ndarray, np.ndarray | None]]:
    return [load_shard({**spec, "partition": p}, s, n, base) for n, p in SHARDINGS
            for s in range(n)]


def _same_loads(spec: dict[str, Any], base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _load_all(spec, base)
    with monkeypatch.context() as m:
        _careful(m)
        slow = _load_all(spec, base)
    for (X, y), (Xc, yc) in zip(fast, slow, strict=True):
        assert X.dtype == Xc.dtype and X.shape == Xc.shape and X.flags.c_contiguous
        np.testing.assert_array_equal(_bits(X), _bits(Xc))
        assert (y is None) == (yc is None)
        if y is not None and yc is not None:
            assert y.dtype == yc.dtype
            np.testing.assert_array_equal(y, yc)


def _ran_fast(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[bool]:
    """Record whether each call of the fast function succeeded."""
    real = getattr(module, name)
    calls: list[bool] = []

    def spy(*args: Any) -> Any:
        got = real(*args)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(module, name, spy)
    return calls


def _dense_rows(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * 10.0 ** rng.integers(-6, 6, (n, d))


def _fmt(v: float, j: int) -> str:
    """Mixed formats in one file: short, 16 and 17 digits, exponents."""
    return (f"{v:.6g}", f"{v:.16g}", repr(float(v)), f"{v:.9e}")[j % 4]


# ----------------------------------------------------------------------------------- CSV
@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("label_column", [None, 0, -1, 2])
@pytest.mark.parametrize("sep", [",", ";", "\t", "  "])
def test_csv_fast_equals_careful(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 header: bool, label_column: int | None, sep: str) -> None:
    monkeypatch.setattr(files, "BLOCK_BYTES", 2048)  # many blocks, lines cut across them
    X = _dense_rows(101, 5, seed=3)
    X[:, 2] = np.random.default_rng(4).integers(0, 3, 101)  # a column fit to be class labels
    lines = [sep.join(_fmt(v, i + j) for j, v in enumerate(row)) for i, row in enumerate(X)]
    lines[7] = " " + lines[7] + " "  # blanks around a line
    head = sep.join(f"c{j}" for j in range(5)) + "\n" if header else ""
    (tmp_path / "d.csv").write_text(head + "\n".join(lines) + "\n\n")
    spec: dict[str, Any] = {"path": "d.csv", "label_column": label_column}
    if label_column not in (None, 2):
        spec["label_dtype"] = "float64"  # only column 2 holds classes
    if sep == "  ":
        spec["delimiter"] = None
    calls = _ran_fast(monkeypatch, csv_format, "parse_fast")
    _same_loads(spec, tmp_path, monkeypatch)
    assert calls and all(calls)
    _same_loads({**spec, "dtype": "float32", "label_dtype": "float64"}, tmp_path, monkeypatch)


def test_csv_fast_reads_every_number_shape_exactly(tmp_path: Path) -> None:
    """Block level (a load would refuse the non-finite values): bit for bit NumPy's doubles."""
    rows = [NUMBERS[i:i + 4] for i in range(0, len(NUMBERS) - 3)]
    (tmp_path / "n.csv").write_text("".join(",".join(r) + "\n" for r in rows))
    fs = file_spec({"path": "n.csv"}, tmp_path)
    dia = csv_format.dialect(fs)
    lines = [",".join(r).encode() for r in rows]
    fast = csv_format.parse_fast(lines, dia)
    assert fast is not None
    want = np.loadtxt(lines, delimiter=",", dtype=np.float64, ndmin=2, comments=None)
    np.testing.assert_array_equal(_bits(fast), _bits(want))
    np.testing.assert_array_equal(fast, [[float(v) for v in r] for r in rows])


def _kernel(toks: list[str]) -> tuple[np.ndarray, int]:
    """The CSV kernel's doubles for one token per line (slow ones by Python's float)."""
    text = "\n".join(toks).encode()
    out = np.empty((len(toks), 1))
    slow = slow_slots(len(toks) * 4)
    status, n_slow = csv_kernel(np.frombuffer(text, dtype=np.uint8), 44, out, slow)
    assert status == OK
    flat = out.reshape(-1)
    flat[slow[:n_slow, 2]] = [float(text[s:e]) for s, e, _ in slow[:n_slow]]
    return flat, n_slow


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**19), st.integers(0, 20), st.integers(-40, 40),
                          st.booleans(), st.sampled_from(["", "e", "E"])),
                min_size=1, max_size=40))
def test_kernel_numbers_match_numpy(parts: list[tuple[int, int, int, bool, str]]) -> None:
    """Digits, decimal point and exponent in every combination: the kernel's doubles are
    NumPy's (the careful parser's), bit for bit."""
    toks = []
    for digits, point, exp, neg, e in parts:
        s = str(digits)
        p = min(point, len(s))
        s = s[: len(s) - p] + "." + s[len(s) - p:] if p else s
        toks.append(("-" if neg else "") + s + (f"{e}{exp}" if e else ""))
    flat, _ = _kernel(toks)
    want = np.loadtxt(toks, dtype=np.float64, ndmin=1)
    np.testing.assert_array_equal(_bits(flat), _bits(want))


def test_kernel_long_mantissas_are_exact() -> None:
    """17 to 19 significant digits (repr, ``%.17g``, ``np.savetxt``'s ``%.18e``) take the
    guess-and-check path: no slow token, and NumPy's doubles bit for bit, ties included.
    (Its reach: a decimal exponent of -27 .. 22 once the digits are an integer, so values
    from about 1e-8 up at ``%.18e``.)"""
    rng = np.random.default_rng(12)
    v = rng.standard_normal(3000) * 10.0 ** rng.integers(-7, 4, 3000)
    # Half-way between two doubles (ulp 2, then 4), away from a power of two.
    ties = [str(3 * 2**52 + k) for k in (1, 3, 5, 7)] + [str(3 * 2**53 + k) for k in (2, 6)]
    for toks in ([f"{x:.18e}" for x in v], [f"{x:.17g}" for x in v],
                 [repr(float(x)) for x in v],
                 ties, [f"{x:.18e}" for x in np.nextafter(v, np.inf)]):
        got, n_slow = _kernel(toks)
        assert n_slow == 0
        want = np.loadtxt(toks, dtype=np.float64, ndmin=1)
        np.testing.assert_array_equal(_bits(got), _bits(want))


# -------------------------------------------------------------------------------- LIBSVM
def _libsvm_lines(X: np.ndarray, y: np.ndarray, base: int,
                  fmt: Any = lambda v, i: repr(float(v))) -> list[str]:
    out = []
    for i, (row, label) in enumerate(zip(X, y, strict=True)):
        pairs = " ".join(f"{j + base}:{fmt(v, i + j)}" for j, v in enumerate(row) if v != 0)
        out.append(f"{label} {pairs}".rstrip())
    return out


@pytest.mark.parametrize("base", [0, 1])
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_libsvm_fast_equals_careful(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    base: int, kind: str) -> None:
    monkeypatch.setattr(files, "BLOCK_BYTES", 4096)
    rng = np.random.default_rng(5)
    if kind == "dense":
        X = _dense_rows(90, 7, seed=6)
    else:
        X = _dense_rows(90, 200, seed=6) * (rng.random((90, 200)) < 0.05)
        X[3] = 0.0  # a label-only line
    X[0, 0] = X[1, -1] = 1.0  # the smallest and largest index occur
    y = rng.choice([-1, 1], 90)
    lines = _libsvm_lines(X, y, base, _fmt)
    lines[5] += "  # a trailing comment"
    lines[9] = "  " + lines[9]
    (tmp_path / "d.libsvm").write_text("# head\n" + "\n".join(lines) + "\n")
    calls = _ran_fast(monkeypatch, libsvm_format, "tokenize_fast")
    for spec in ({"path": "d.libsvm"},
                 {"path": "d.libsvm", "n_features": X.shape[1] + 3, "zero_based": base == 0},
                 {"path": "d.libsvm", "dtype": "float32", "label_dtype": "float64"}):
        _same_loads(spec, tmp_path, monkeypatch)
    assert calls and all(calls)
    got, labels = load_shard({"path": "d.libsvm"}, 0, 1, tmp_path)
    np.testing.assert_array_equal(got != 0, X != 0)  # every pair where it belongs
    np.testing.assert_allclose(got, X, rtol=1e-5)  # 6 digits the shortest format written
    np.testing.assert_array_equal(labels, y)


def test_libsvm_tokens_fast_equal_careful(tmp_path: Path) -> None:
    """Block level: labels, counts, indices and values of every number shape, bit for bit."""
    lines = [f"{lab} " + " ".join(f"{j + 1}:{v}" for j, v in enumerate(NUMBERS[i:i + 5]))
             for i, lab in enumerate(["1", "-1", "+1", "0", "2.0", "1e0", "3", "nan"])]
    (tmp_path / "t.libsvm").write_text("\n".join(lines) + "\n")
    fs = file_spec({"path": "t.libsvm"}, tmp_path)
    raw = [ln.encode() for ln in lines]
    fast = libsvm_format.tokenize_fast(raw)
    assert fast is not None
    careful = libsvm_format.tokenize(fs, raw, range(len(raw)))
    for a, b in zip(fast, careful, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_libsvm_unusual_blocks_fall_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """qid tokens, tabs, signed or fractional indices: the careful tokenizer reads them."""
    text = "1 qid:3 1:0.5 3:2\n0\t2:1.5\n2 +3:1 04:2.0\n1 2.0:7\n"
    (tmp_path / "q.libsvm").write_text(text)
    calls = _ran_fast(monkeypatch, libsvm_format, "tokenize_fast")
    X, y = load_shard({"path": "q.libsvm", "n_features": 4, "zero_based": False}, 0, 1,
                      tmp_path)
    assert calls == [False]
    np.testing.assert_array_equal(X, [[0.5, 0, 2, 0], [0, 1.5, 0, 0], [0, 0, 1, 2],
                                      [0, 7, 0, 0]])
    np.testing.assert_array_equal(y, [1, 0, 2, 1])


# ----------------------------------------------------------------------- malformed inputs
CSV_BAD = {
    "ragged.csv": ("1,2,3\n4,5\n6,7,8\n", "row 2 (line 2) has 2 columns, expected 3"),
    "long.csv": ("1,2\n3,4\n5,6,7\n", "row 3 (line 3) has 3 columns, expected 2"),
    "text.csv": ("a,b\n1,2\n3,x\n", "row 2 (line 3) column 2 is 'x', expected a number"),
    "empty.csv": ("1,2\n3,\n", "row 2 (line 2) column 2 is '', expected a number"),
    "blank.txt": ("1 2\n3 4 5\n", "row 2 (line 2) has 3 columns, expected 2"),
    "inner.csv": ("1,2\n3,4 5\n", "row 2 (line 2) column 2 is '4 5', expected a number"),
    "label.csv": ("1,2\n2,1.5\n", "row 2 (line 2) has label 1.5, expected an integer"),
}
LIBSVM_BAD = {
    "label.svm": ("1 1:2\nx 1:3\n", "row 2 (line 2) has label 'x', expected a number"),
    "pair.svm": ("1 1:2\n1 1:2 3\n", "row 2 (line 2) has feature '3', expected 'index:value'"),
    "colons.svm": ("1 1:2:3\n", "row 1 (line 1) has feature '1:2:3', expected 'index:value'"),
    "value.svm": ("1 1:2\n1 2:abc\n", "row 2 (line 2) has feature '2:abc', expected"),
    "zero.svm": ("1 1:2\n1 0:1\n", "has feature index 0, expected 1 .. "),
    "order.svm": ("1 2:2 1:3\n", "row 1 (line 1) has feature index 1 after 2, expected indices"),
    "twice.svm": ("1 1:2 1:3\n", "has feature index 1 after 1"),
    "range.svm": ("1 1:2\n# c\n1 9:1\n", "row 2 (line 3) has feature index 9, expected 1 .. 5"),
    "frac.svm": ("1 1.5:2\n", "has feature index 1.5, expected"),
    "class.svm": ("1 1:2\n0.5 1:2\n", "row 2 (line 2) has label 0.5, expected an integer"),
}


@pytest.mark.parametrize("name", sorted(CSV_BAD) + sorted(LIBSVM_BAD))
def test_malformed_lines_keep_their_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             name: str) -> None:
    text, message = {**CSV_BAD, **LIBSVM_BAD}[name]
    fmt = "libsvm" if name.endswith(".svm") else "csv"
    (tmp_path / name).write_text(text)
    spec: dict[str, Any] = {"path": name, "format": fmt}
    if fmt == "libsvm":
        spec.update(n_features=5, zero_based=False)
    elif name == "label.csv":
        spec["label_column"] = -1
    elif name.endswith(".txt"):
        spec["delimiter"] = None
    messages = []
    for careful in (False, True):
        with monkeypatch.context() as m:
            if careful:
                _careful(m)
            with pytest.raises(DataError) as err:
                for n, p in SHARDINGS[:2]:
                    for s in range(n):
                        load_shard({**spec, "partition": p}, s, n, tmp_path)
            messages.append(str(err.value))
    assert message in messages[0], messages[0]
    assert name in messages[0]
    assert messages[0] == messages[1]


# -------------------------------------------------------------------------------- memory
@pytest.mark.parametrize("fmt", ["csv", "libsvm"])
def test_strided_shard_is_held_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    fmt: str) -> None:
    """Peak traced memory of a strided load: the shard plus about a block, not twice the shard.

    Joining per-block parts at the end peaked at two shards (this test then failed); 1.25
    shards plus a few blocks' worth of parsing temporaries leaves room for the latter only.
    """
    monkeypatch.setattr(files, "BLOCK_BYTES", 1 << 16)
    X = np.round(_dense_rows(100_000, 8, seed=9), 3)
    if fmt == "csv":
        text = "\n".join(",".join(repr(float(v)) for v in row) for row in X)
    else:
        text = "\n".join(_libsvm_lines(X, np.ones(len(X), dtype=int), 1))
    (tmp_path / "m.txt").write_text(text + "\n")
    spec = {"path": "m.txt", "format": fmt}
    if fmt == "libsvm":
        spec.update(n_features=8, zero_based=False)
    load_shard({**spec, "limit": 10}, 0, 1, tmp_path)  # compile the kernels outside the trace
    tracemalloc.start()
    try:
        got, _ = load_shard(spec, 1, 2, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, X[1::2])
    # A block of text is a few times BLOCK_BYTES as a list of lines: 16 blocks is generous,
    # and still far below the second copy of the shard (3.2 MB) that joining parts held.
    assert peak < 1.25 * got.nbytes + 16 * files.BLOCK_BYTES, (peak, got.nbytes)
