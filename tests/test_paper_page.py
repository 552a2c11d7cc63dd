"""``flegel paper``'s page, verdicts, ratios and workloads (no MPI: the runs are in
tests/test_paper_mpi.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flegel.cli.paper.command import FIGURES, GROUPS, write
from flegel.cli.paper.common import combine, geo_mean
from flegel.cli.paper.page import BEATEN, MET, MISSED, NOT_RUN, Figure, render, verdict
from flegel.cli.paper.runner import Ratio, Time
from flegel.cli.paper.workloads import ALGORITHMS, QUICK, workloads, write_data, write_job
from flegel.job.validate import load_job


def fig(paper: float | None, ours: float | None, q: str = "", higher: bool = True,
        holds: bool | None = None) -> Figure:
    return Figure("7", "t", "p", paper_value=paper, ours_value=ours, qualifier=q,
                  higher_better=higher, holds=holds, ours=str(ours))


@pytest.mark.parametrize(("paper", "ours", "q", "higher", "want"), [
    (1.3, 2.0, "", True, BEATEN), (1.3, 1.3, "", True, MET), (1.3, 1.25, "", True, MET),
    (1.3, 1.2, "", True, MISSED), (1.3, 1.6, "", True, MET),
    (0.6, 0.3, "", False, BEATEN), (0.6, 0.7, "", False, MISSED),
    (1.3, 5.0, ">", True, BEATEN),   # a lower bound above the paper's number decides
    (1.3, 5.0, "<", True, MISSED),   # an upper bound above it does not
    (1.3, 1.0, "<", True, MISSED), (1.3, 2.0, "?", True, MISSED)])
def test_verdicts(paper: float, ours: float, q: str, higher: bool, want: str) -> None:
    f = fig(paper, ours, q, higher)
    assert verdict(f) == want == f.verdict


def test_claims_without_a_number_and_figures_not_run() -> None:
    assert verdict(fig(None, None, holds=True)) == MET
    assert verdict(fig(None, 2.0, holds=False)) == MISSED
    assert verdict(Figure("16", "t", "p", verdict=NOT_RUN, note="why")) == NOT_RUN


def test_ratios_and_their_bounds() -> None:
    assert Ratio.of(Time(4.0, True), Time(2.0, True)) == Ratio(2.0, "")
    assert Ratio.of(Time(4.0, False), Time(2.0, True)).qualifier == ">"
    assert Ratio.of(Time(4.0, True), Time(2.0, False)).qualifier == "<"
    assert Ratio.of(Time(4.0, False), Time(2.0, False)).text() == "?2.00x"
    assert combine(["", ">", ">"]) == ">" and combine([">", "<"]) == "?"
    g = geo_mean([Ratio(2.0), Ratio(8.0, ">")])
    assert g.value == pytest.approx(4.0) and g.qualifier == ">"


def test_page_has_every_figure_with_both_numbers(tmp_path: Path) -> None:
    figs = [Figure("7", "with stragglers", "FSPV 1.3-78x BSPV", paper_value=1.3,
                   ours=">4.20x", ours_value=4.2, qualifier=">", pictures=["fig7.png"]),
            Figure("16", "scalability", "nearly linear", verdict=NOT_RUN, note="needs hosts")]
    for f in figs:
        verdict(f)
    out = tmp_path / "run"
    (out / "pictures").mkdir(parents=True)
    (out / "pictures" / "fig7.png").write_bytes(b"png")
    docs = tmp_path / "docs"
    docs.mkdir()
    made = write(figs, out, "2 cores, load 1.0", "flegel paper --quick", 600.0, docs=docs)
    assert made == [out / "paper.md", out / "paper.json", docs / "paper.md"]
    page = (docs / "paper.md").read_text()
    assert "| [Fig. 7](#fig-7) | with stragglers | FSPV 1.3-78x BSPV | >4.20x | **beaten** |" \
        in page
    assert "**not run**" in page and "needs hosts" in page
    assert "![Fig. 7](paper/fig7.png)" in page and (docs / "paper" / "fig7.png").exists()
    assert "flegel paper --quick" in page and "2 cores, load 1.0" in page
    assert "10.0 min" in page
    assert "![Fig. 7](pictures/fig7.png)" in (out / "paper.md").read_text()
    doc = json.loads((out / "paper.json").read_text())
    assert [f["key"] for f in doc["figures"]] == ["7", "16"]


def test_render_counts_verdicts() -> None:
    figs = [fig(1.3, 2.0), fig(1.3, 1.0), fig(None, None, holds=True)]
    for f in figs:
        verdict(f)
    text = render(figs, "m", "c", 60.0)
    assert "1 beaten, 1 met, 1 missed, 0 not run" in text


def test_every_figure_of_the_issue_is_listed() -> None:
    assert set(FIGURES) >= {"7", "8", "9a", "9b", "10", "11", "12", "13", "14", "15", "16a",
                            "16b", "table2", "migration", "elastic", "dssp", "specsync"}
    assert GROUPS["16"] == ("16a", "16b")  # `--only 16` runs both


def test_workloads_are_sorted_so_contiguous_shards_differ(tmp_path: Path) -> None:
    small = {a: w for a, w in workloads(QUICK).items()}
    assert tuple(small) == ALGORITHMS
    w = small["logreg"]
    path = write_data(w, tmp_path)
    with np.load(path) as z:
        y = z["y"]
    assert np.all(np.diff(y) >= 0) and len(np.unique(y)) == 2  # sorted by class
    job = load_job(write_job(w, QUICK, path, "contiguous", tmp_path / "jobs"), [])
    assert job.workers == QUICK.workers and job.data_info.n_rows == w.n_points
    x = np.load(write_data(small["nmf"], tmp_path))
    assert np.all(np.diff(x.sum(axis=1)) >= 0)  # NMF's rows by their sum
def test_a_failed_run_reads_failed_not_nan():
    from flegel.cli.paper.opt_figures import _ms, _x

    assert (_ms(float("nan")), _x(float("nan"))) == ("failed", "failed")
    assert (_ms(2.345), _x(1.5)) == ("2.35", "1.50x")
