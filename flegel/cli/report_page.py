"""One self-contained HTML page of a run, or an overview of several (``flegel report``).

The page needs nothing beside it: pictures are embedded as base64 PNGs, the style is inline,
there is no script.  It shows what a user asks of a run first -- how it ended, its exact
final objective, how long it took -- then every worker, the pictures and the job itself.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flegel.rundir import files
from flegel.rundir.reader import Run


@dataclass(frozen=True)
class Picture:
    """One drawn figure: its file name, a caption for the page, and the PNG's bytes."""

    name: str
    caption: str
    png: bytes

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
figure { margin: 1.5em 0; } figcaption { font-size: 0.85em; color: #555; max-width: 900px; }
img { max-width: 100%; } pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; }
.slowed { color: #b00; }
"""


def _fmt(value: Any) -> str:
    """A summary value as a short string (floats to 6 significant digits)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return html.escape(", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()))
    return html.escape(str(value))


def _table(head: list[str] | None, rows: Iterable[list[str]], left: int = 1) -> str:
    """An HTML table (no header row for ``head=None``); the first ``left`` columns are
    left-aligned; cells already escaped."""
    def cells(tag: str, row: list[str]) -> str:
        return "".join(f"<{tag}{' class=l' if i < left else ''}>{c}</{tag}>"
                       for i, c in enumerate(row))
    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    top = "" if head is None else f"<tr>{cells('th', head)}</tr>"
    return f"<table>{top}{body}</table>"


#: The summary's figures shown first, with their names on the page.
_HEADLINE = [
    ("algorithm", "algorithm"), ("sync", "sync model"), ("workers", "workers"),
    ("n_points", "points"), ("n_features", "features"), ("iterations", "iterations"),
    ("stop_reason", "stopped on"), ("converged", "converged"),
    ("wall_time_s", "training time (s)"), ("final_objective", "final objective (exact)"),
    ("online_objective", "online objective (per-point losses as last seen)"),
    ("target_objective", "target"), ("time_to_target_s", "time to target, exact (s)"),
]


def _sync_name(summary: dict[str, Any]) -> str:
    sync = summary.get("sync")
    return str(sync.get("model", "?")) if isinstance(sync, dict) else str(sync or "?")


def _headline(run: Run) -> str:
    """The run's outcome: a two-column table of the summary's main figures."""
    s = run.summary
    if not s:
        return f"<p>No {files.SUMMARY}: the run did not finish (see {files.EVENTS}).</p>"
    rows = [[name, _fmt(_sync_name(s) if key == "sync" else s.get(key))]
            for key, name in _HEADLINE if key in s]
    during = s.get("exact_objective")
    if during:
        rows.append(["exact evaluations during the run",
                     f"{_fmt(during.get('evaluations'))} ({_fmt(during.get('inexact'))} "
                     f"estimates), {100 * float(during.get('cost_fraction') or 0):.1f}% of "
                     "training time"])
    return _table(None, rows)


def _workers(run: Run) -> str:
    """One row per worker: points held, passes, compute and wait, slowed."""
    per = run.summary.get("per_worker", [])
    if not per:
        return ""
    slowed = {int(x["rank"]): x for x in run.summary.get("stragglers", [])}
    rows = []
    for w in per:
        rank = int(w["rank"])
        mark = (f"<span class=slowed>slowed ({_fmt(slowed[rank].get('pattern'))})</span>"
                if rank in slowed else "")
        rows.append([str(rank), _fmt(w.get("host")), _fmt(w.get("n_points")), _fmt(w.get("passes")),
                     _fmt(w.get("compute_s")), _fmt(w.get("wait_s")),
                     _fmt(w.get("slowed_s")), mark])
    text = _table(["worker", "host", "points held", "passes", "compute (s)", "wait (s)",
                   "slowed (s)", ""], rows)
    mig = run.summary.get("migration")
    if mig:
        text += (f"<p>Migration ({_fmt(mig.get('mode'))}): {_fmt(mig.get('points_moved'))} "
                 f"points moved in {_fmt(mig.get('rounds'))} rounds, "
                 f"{100 * float(mig.get('bytes_fraction', 0.0)):.1f}% of the data's bytes.</p>")
    return text


def _job(run: Run) -> str:
    """The resolved job the run used, folded."""
    path = run.path / files.JOB
    if not path.exists():
        return ""
    return (f"<details><summary>{files.JOB}</summary><pre>{html.escape(path.read_text())}"
            "</pre></details>")


def _figures(pics: list[Picture]) -> str:
    return "".join(
        f'<figure><img alt="{html.escape(p.name)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.png).decode("ascii")}"><figcaption>{html.escape(p.caption)}'
        "</figcaption></figure>" for p in pics)


def _overview(runs: list[Run], links: dict[str, str]) -> str:
    """One row per run, linking to its own page."""
    rows = []
    for run in runs:
        s = run.summary
        name = f'<a href="{html.escape(links[run.label])}">{html.escape(run.label)}</a>'
        rows.append([name, _fmt(_sync_name(s)), _fmt(s.get("iterations")),
                     _fmt(s.get("stop_reason")), _fmt(s.get("wall_time_s")),
                     _fmt(s.get("final_objective")), _fmt(s.get("time_to_target_s"))])
    return _table(["run", "sync", "iterations", "stopped on", "training time (s)",
                   "final objective (exact)", "time to target (s)"], rows)


def page(runs: list[Run], pics: list[Picture], links: dict[str, str] | None = None) -> str:
    """The HTML page of one run, or with ``links`` the overview of several.

    Parameters
    ----------
    runs : list of Run
        One run (its page) or several (the overview).
    pics : list of Picture
        The pictures to embed, in order.
    links : dict of str to str, optional
        Each run's label -> the file name of its own page, for the overview.

    Returns
    -------
    str
        A complete HTML document with everything embedded.
    """
    if len(runs) == 1 and not links:
        run = runs[0]
        title = f"flegel run {run.label}"
        body = (f"<h1>{html.escape(title)}</h1><p>{html.escape(str(run.path))}</p>"
                + _headline(run) + "<h2>Workers</h2>" + _workers(run)
                + "<h2>Pictures</h2>" + _figures(pics) + _job(run))
    else:
        title = f"flegel: {len(runs)} runs"
        body = (f"<h1>{html.escape(title)}</h1>" + _overview(runs, links or {})
                + "<h2>Pictures</h2>" + _figures(pics))
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body>{body}</body></html>\n")
