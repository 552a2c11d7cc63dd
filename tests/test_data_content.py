"""Bad data content fails at load with the file, row, column, what was expected and found.

In-process: the checks of :mod:`flegel.data.checks` through :func:`flegel.data.load_shard`
(what every worker runs on its shard) and ``flegel validate --data`` (the same checks without
training).  Under a real launch, a bad shard on one worker ends the job with exit 2 and one
message, printed once, by rank 0: the "bad data" row of tests/test_fault_matrix.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flegel.cli.commands import main
from flegel.data import DataError, load_shard
from flegel.data.checks import Takes, first_bad
from tests.conftest import write_job

TAKES_NMF = Takes(nonnegative=True, who="algorithm 'nmf'")
TAKES_CLASSES = Takes(label_kind="classes", who="algorithm 'logreg'")


def _csv(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return path


def _grid(n: int = 12, d: int = 3) -> list[list[str]]:
    return [[f"{0.5 + i + j / 10:.2f}" for j in range(d)] for i in range(n)]


def _load_all(spec: dict, base: Path, n_shards: int, takes: Takes | None = None) -> None:
    for s in range(n_shards):
        load_shard(spec, s, n_shards, base, takes=takes)


# ------------------------------------------------------------------- the vectorized checks
def test_first_bad_finds_the_first_nonfinite_value_row_major() -> None:
    X = np.ones((5000, 7))
    X[4000, 1] = np.inf
    X[3000, 6] = np.nan
    bad = first_bad(X, None, Takes())
    assert bad is not None and (bad.row, bad.column) == (3000, 6)
    assert bad.problem == "is nan, expected a finite number"
    assert first_bad(np.ones((3, 2)), np.array([0, 1, 2]), TAKES_CLASSES) is None


def test_first_bad_labels_and_signs() -> None:
    X = np.ones((4, 2))
    bad = first_bad(X, np.array([0, 1, -1, 1]), TAKES_CLASSES)
    assert bad is not None and (bad.row, bad.column) == (2, None)
    assert "label -1" in bad.problem and "map -1/+1 labels to 0/1" in bad.problem
    bad = first_bad(X, np.array([0.0, 1.5, 1.0, 0.0]), TAKES_CLASSES)
    assert bad is not None and bad.row == 1 and "an integer class label" in bad.problem
    bad = first_bad(X, np.array([0.0, 1.5, np.nan, 0.0]), Takes(label_kind="real"))
    assert bad is not None and bad.row == 2 and "expected a finite number" in bad.problem
    assert first_bad(X, np.array([-7, 3, 9, 0]), Takes()) is None  # "any": labels unused
    X[3, 1] = -0.25
    bad = first_bad(X, None, TAKES_NMF)
    assert bad is not None and (bad.row, bad.column) == (3, 1)
    assert bad.problem == ("is -0.25, expected a value >= 0 (algorithm 'nmf' takes "
                           "non-negative features)")


def test_takes_reads_the_algorithm_declarations() -> None:
    from flegel.algorithms.cnn import CNN
    from flegel.algorithms.kmeans import KMeans
    from flegel.algorithms.logreg import LogisticRegression
    from flegel.algorithms.nmf import NMF

    assert Takes.of(KMeans, "kmeans") == Takes("any", False, "algorithm 'kmeans'")
    assert Takes.of(LogisticRegression, "logreg").label_kind == "classes"
    assert Takes.of(CNN, "cnn").label_kind == "classes"
    assert Takes.of(NMF, "nmf").nonnegative

    class Odd:
        label_kind = "ordinal"

    with pytest.raises(ValueError, match="label_kind must be one of"):
        Takes.of(Odd, "odd")


# ------------------------------------------------------------------- each format says where
@pytest.mark.parametrize("cell, words", [("nan", "is nan"), ("inf", "is inf"),
                                         ("-inf", "is -inf")])
def test_csv_nonfinite_cell_names_row_line_and_column(tmp_path: Path, cell: str,
                                                      words: str) -> None:
    rows = [["a", "b", "c"], *_grid()]
    rows[9][2] = cell  # data row 9, line 10 (after the header)
    path = _csv(tmp_path / "x.csv", rows)
    with pytest.raises(DataError) as exc:
        _load_all({"path": str(path)}, tmp_path, 3)
    assert str(exc.value) == (f"data.path: {path}: row 9 (line 10) column 3 {words}, "
                              "expected a finite number")


def test_csv_text_cell_and_label_column(tmp_path: Path) -> None:
    rows = _grid()
    rows[7][0] = "abc"
    path = _csv(tmp_path / "t.csv", rows)
    with pytest.raises(DataError, match=r"row 8 \(line 8\) column 1 is 'abc', expected a number"):
        _load_all({"path": str(path)}, tmp_path, 2)
    # With a label column first, X's column 0 is the file's column 2.
    rows = [[str(i % 2), *r] for i, r in enumerate(_grid())]
    rows[4][2] = "nan"
    path = _csv(tmp_path / "l.csv", rows)
    with pytest.raises(DataError, match=r"row 5 \(line 5\) column 3 is nan"):
        _load_all({"path": str(path), "label_column": 0}, tmp_path, 2)


def test_csv_labels_the_algorithm_does_not_take(tmp_path: Path) -> None:
    rows = [[str(-1 if i == 6 else i % 2), *r] for i, r in enumerate(_grid())]
    path = _csv(tmp_path / "pm.csv", rows)
    spec = {"path": str(path), "label_column": 0}
    _load_all(spec, tmp_path, 2)  # no algorithm: labels are not checked
    with pytest.raises(DataError) as exc:
        _load_all(spec, tmp_path, 2, TAKES_CLASSES)
    msg = str(exc.value)
    assert msg.startswith(f"data.label_column: {path}: row 7 (line 7) column 1 has label -1")
    assert "expected an integer class label >= 0 (algorithm 'logreg' takes classes" in msg


def test_negative_values_for_nmf(tmp_path: Path) -> None:
    rows = _grid()
    rows[10][1] = "-0.5"
    path = _csv(tmp_path / "neg.csv", rows)
    _load_all({"path": str(path)}, tmp_path, 2)  # fine for an algorithm that takes any sign
    with pytest.raises(DataError, match=r"row 11 \(line 11\) column 2 is -0.5, expected a "
                                        r"value >= 0 \(algorithm 'nmf'"):
        _load_all({"path": str(path), "partition": "contiguous"}, tmp_path, 3, TAKES_NMF)
    spec = {"source": "synthetic", "kind": "blobs", "n_points": 50, "n_features": 2}
    with pytest.raises(DataError, match=r"data.kind: synthetic kind 'blobs': row \d+ column "
                                        r"\d is -[\d.]+, expected a value >= 0"):
        _load_all(spec, tmp_path, 2, TAKES_NMF)


def test_libsvm_nonfinite_and_malformed_lines(tmp_path: Path) -> None:
    lines = [f"{i % 2} 1:{i}.5 3:0.25" for i in range(10)]
    lines[5] = "1 1:0.5 3:nan"
    path = tmp_path / "x.svm"
    path.write_text("# a comment\n" + "\n".join(lines) + "\n")
    with pytest.raises(DataError) as exc:
        _load_all({"path": str(path)}, tmp_path, 2)
    assert str(exc.value) == (f"data.path: {path}: row 6 (line 7) feature 3 is nan, "
                              "expected a finite number")
    lines[5] = "1 1:0.5 3 4:1"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"row 6 \(line 6\) has feature '3', expected "
                                        r"'index:value'"):
        _load_all({"path": str(path)}, tmp_path, 2)


def test_libsvm_minus_one_labels_for_a_classifier(tmp_path: Path) -> None:
    path = tmp_path / "pm.svm"
    path.write_text("".join(f"{1 if i % 2 else -1} 1:{i}.0\n" for i in range(8)))
    with pytest.raises(DataError, match=r"row 1 \(line 1\) has label -1, expected an "
                                        r"integer class label >= 0 .*map -1/\+1 labels to 0/1"):
        _load_all({"path": str(path)}, tmp_path, 2, TAKES_CLASSES)


def test_npy_element_and_label_file(tmp_path: Path) -> None:
    X = np.ones((20, 4))
    X[13, 2] = np.nan
    np.save(tmp_path / "x.npy", X)
    with pytest.raises(DataError) as exc:
        _load_all({"path": "x.npy"}, tmp_path, 3)
    assert str(exc.value) == (f"data.path: {tmp_path / 'x.npy'}: element [13, 2] (0-based) "
                              "is nan, expected a finite number")
    np.save(tmp_path / "x.npy", np.ones((20, 4)))
    np.save(tmp_path / "y.npy", np.r_[np.zeros(19), -2.0].astype(np.int64))
    with pytest.raises(DataError, match=r"data.label_path: .*y.npy: row 19 \(0-based\) has "
                                        r"label -2"):
        _load_all({"path": "x.npy", "label_path": "y.npy"}, tmp_path, 2, TAKES_CLASSES)


def test_ratings_name_the_user_and_item_ids(tmp_path: Path) -> None:
    path = tmp_path / "ratings.dat"
    path.write_text("1::10::5::0\n1::20::3::0\n7::10::nan::0\n9::30::4::0\n")
    with pytest.raises(DataError) as exc:
        _load_all({"path": str(path)}, tmp_path, 2)
    assert str(exc.value) == (f"data.path: {path}: user 7, item 10 rating is nan, "
                              "expected a finite number")


# ------------------------------------------------------------------- validate --data
def _job(tmp_path: Path, data: dict, **extra: object) -> Path:
    doc = {"algorithm": "kmeans", "params": {"n_clusters": 2}, "data": data, "workers": 2,
           "stop": {"max_iterations": 3}, "output": {"progress": "none"}, **extra}
    return write_job(tmp_path / "job.yaml", **doc)


def test_validate_data_runs_the_load_checks(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rows = _grid()
    rows[5][1] = "inf"
    _csv(tmp_path / "x.csv", rows)
    job = _job(tmp_path, {"path": "x.csv"})
    assert main(["validate", str(job)]) == 0  # plain validate stays cheap: no values read
    assert main(["validate", str(job), "--data"]) == 2
    err = capsys.readouterr().err
    assert err.count("flegel: error:") == 1 and "Traceback" not in err
    assert f"{job}: data.path: {tmp_path / 'x.csv'}: row 6 (line 6) column 2 is inf" in err


def test_validate_data_checks_test_data_and_counts_rows(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    _csv(tmp_path / "x.csv", _grid())
    rows = _grid(5)
    rows[2][0] = "nan"
    _csv(tmp_path / "t.csv", rows)
    job = _job(tmp_path, {"path": "x.csv"})
    assert main(["validate", str(job), "--data"]) == 0
    assert "12 rows of values checked" in capsys.readouterr().out
    job = _job(tmp_path, {"path": "x.csv"}, test_data={"path": "t.csv"})
    assert main(["validate", str(job), "--data"]) == 2
    assert "test_data.path" in capsys.readouterr().err


def test_validate_data_uses_the_algorithm_declarations(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    rows = _grid()
    rows[3][2] = "-1"
    _csv(tmp_path / "x.csv", rows)
    job = _job(tmp_path, {"path": "x.csv"}, algorithm="nmf", params={"n_components": 2})
    assert main(["validate", str(job), "--data"]) == 2
    assert "algorithm 'nmf' takes non-negative features" in capsys.readouterr().err
