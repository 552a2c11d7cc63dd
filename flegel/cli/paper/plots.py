"""Pictures of ``flegel paper``: bars and lines of its own, and the run pictures of
:mod:`flegel.cli.report` (objective against time, timelines, passes, Σ Δf) for the figures
the paper draws the same way.  matplotlib on the Agg backend, as ``flegel report``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flegel.cli.paper.runner import RunResult
from flegel.cli.report import _png, _pyplot
from flegel.cli.report_page import Picture
from flegel.rundir.reader import Run


def bars(path: Path, title: str, groups: list[str], series: dict[str, list[float | None]],
         ylabel: str, log: bool = False) -> str:
    """Grouped bars: one group per ``groups`` entry, one bar per series; None is left out.

    Returns
    -------
    str
        The file name written.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(len(series), 1) / 2), 3.8))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar([x for x, v in zip(xs, values) if v is not None],
               [v for v in values if v is not None], width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    path.write_bytes(_png(fig))
    return path.name


def lines(path: Path, title: str, xs: list[float], series: dict[str, list[float | None]],
          xlabel: str, ylabel: str, logx: bool = False) -> str:
    """One line per series against ``xs``; None points are left out."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, values in series.items():
        pts = [(x, v) for x, v in zip(xs, values) if v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    path.write_bytes(_png(fig))
    return path.name


def run_picture(path: Path, runs: list[tuple[str, RunResult]],
                draw: Callable[[list[Run]], Picture]) -> str | None:
    """One of :mod:`flegel.cli.report`'s pictures (``draw``) of the labelled runs that
    finished, written to ``path``; None when none finished or the picture cannot be drawn."""
    read = [Run.read(r.folder, label) for label, r in runs if r.ok]
    if not read:
        return None
    try:
        pic = draw(read)
    except ValueError:  # e.g. no per-worker figures to draw
        return None
    path.write_bytes(pic.png)
    return path.name
