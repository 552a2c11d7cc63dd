"""The page of ``flegel paper``: each figure's claim, the paper's number beside flegel's, and a
verdict.

Verdicts (:func:`verdict`), where the paper gives a number: **beaten** when flegel's is better
by more than 25 %, **met** when it is within 5 % of the paper's or better by up to 25 %,
**missed** when it is worse by more than 5 %.  A bound that does not decide (a lower bound
below the paper's number, say) is **missed** with the bound shown.  Where the paper states a
claim without a number (Fig. 9a: "FSPB and FSPV scale well"), the figure's own test of the
claim decides met or missed.  Figures that could not run say **not run** and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Verdict words.
BEATEN, MET, MISSED, NOT_RUN = "beaten", "met", "missed", "not run"


@dataclass
class Figure:
    """One figure's outcome.

    Attributes
    ----------
    key : str
        ``"7"``, ``"9a"``, ``"elastic"``, ...
    title : str
        What it measures.
    paper : str
        The paper's claim in words, with its number.
    paper_value : float or None
        The number the verdict compares with (None: a claim without one).
    ours : str
        flegel's number as shown (with its unit and bound).
    ours_value : float or None
        flegel's number (None: not measured).
    higher_better : bool
        Which way is better.
    qualifier : str
        ``""``, ``">"``, ``"<"`` or ``"?"`` (:class:`~flegel.cli.paper.runner.Ratio`).
    holds : bool or None
        For a claim without a number: whether it held.
    verdict : str
        Set by :func:`verdict` (or ``not run``).
    setting : str
        Algorithms, data, partition, stragglers.
    table : list of str
        Markdown lines with the figure's detail.
    pictures : list of str
        The PNGs' file names in the run folder.
    note : str
        What to know (choices, why not run).
    """

    key: str
    title: str
    paper: str
    paper_value: float | None = None
    ours: str = "-"
    ours_value: float | None = None
    higher_better: bool = True
    qualifier: str = ""
    holds: bool | None = None
    verdict: str = NOT_RUN
    setting: str = ""
    table: list[str] = field(default_factory=list)
    pictures: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0


def verdict(fig: Figure) -> str:
    """The verdict of ``fig`` (module notes); also stored in ``fig.verdict``."""
    if fig.verdict == NOT_RUN and fig.ours_value is None and fig.holds is None:
        return NOT_RUN
    if fig.paper_value is None or fig.ours_value is None:
        fig.verdict = MET if fig.holds else MISSED
        return fig.verdict
    p, o = fig.paper_value, fig.ours_value
    gain = (o / p if fig.higher_better else p / o) if p > 0 and o > 0 else 0.0
    worse_bound = (fig.qualifier == "<" if fig.higher_better else fig.qualifier == ">")
    if fig.qualifier == "?" or (worse_bound and gain > 0.95):
        fig.verdict = MISSED  # a bound on the wrong side says nothing
    elif gain > 1.25:
        fig.verdict = BEATEN
    elif gain >= 0.95:
        fig.verdict = MET
    else:
        fig.verdict = MISSED
    return fig.verdict


def summary_table(figs: list[Figure]) -> list[str]:
    """The page's overview: one row per figure."""
    lines = ["| figure | what | the paper | flegel | verdict |", "|---|---|---|---|---|"]
    for f in figs:
        lines.append(f"| [{_name(f)}](#{_anchor(f)}) | {f.title} | {f.paper} | {f.ours} | "
                     f"**{f.verdict}** |")
    return lines


def _name(f: Figure) -> str:
    return f"Fig. {f.key}" if f.key[0].isdigit() else ("Table 2" if f.key == "table2"
                                                       else f.key)


def _anchor(f: Figure) -> str:
    return "fig-" + f.key.lower()


def render(figs: list[Figure], machine: str, command: str, wall_s: float,
           pictures: str | None = None) -> str:
    """The markdown page.

    Parameters
    ----------
    figs : list of Figure
        In page order, verdicts set.
    machine : str
        Cores, load, Python and MPI, in words.
    command : str
        The command that made the page.
    wall_s : float
        Its wall time.
    pictures : str, optional
        Where the PNGs are, relative to the page (None: no picture links).
    """
    counts = {v: sum(f.verdict == v for f in figs) for v in (BEATEN, MET, MISSED, NOT_RUN)}
    out = ["# The FSP paper's figures, side by side", "",
           "Scaled-down analogues of the evaluation of the FSP paper (Wang et al., *Flegel*, "
           "IEEE TPDS 2022, Section 6) and the headline comparisons of the ElasticBSP, DSSP "
           "and SpecSync papers, made by one command:", "", f"    {command}", "",
           f"- machine: {machine}",
           f"- wall time: {wall_s / 60:.1f} min",
           "- verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()),
           "- verdict rule: **beaten** = better than the paper's number by more than 25 %, "
           "**met** = within 5 % of it or better by up to 25 %, **missed** = worse by more "
           "than 5 % (a bound on the wrong side of it too); a claim without a number: "
           "whether it held.  `>x` / `<x`: a bound (a run did not reach the target in its "
           "time); `x†`: neither side reached it, the times are to the better objective "
           "either reached by the shorter run's end, plus the workload's slack "
           "(`flegel/cli/paper/horizons.py`); a claim over two rows (Figs. 9a, 9b) holds "
           "where their ratios differ by more than 5 %, and where their bounds leave it "
           "open is decided at a common target every run of the figure reached.  A row "
           "whose straggler was barely slowed is shown, not judged (Figs. 10, 11, "
           "migration: `flegel/cli/paper/straggled.py`).",
           "- times are to a target objective: the reference run's (BSPB, no stragglers, "
           "the same shards) best exact objective (its final, unless it rose at its end) plus a "
           "small slack, as the paper's Section 6.1 pre-sets one.  2 cores shared by every "
           "rank (and by other work): "
           "absolute times are noisy, ratios from one run.", "",
           *summary_table(figs), ""]
    for f in figs:
        out += [f'<a id="{_anchor(f)}"></a>', f"## {_name(f)}: {f.title}", "",
                f"- the paper: {f.paper}", f"- flegel: {f.ours} -- **{f.verdict}**"]
        if f.setting:
            out.append(f"- setting: {f.setting}")
        if f.seconds:
            out.append(f"- time spent: {f.seconds:.0f} s")
        if f.note:
            out += ["", f.note]
        if f.table:
            out += ["", *f.table]
        if pictures is not None:
            out += [x for p in f.pictures for x in ("", f"![{_name(f)}]({pictures}/{p})")]
        out.append("")
    return "\n".join(out)
