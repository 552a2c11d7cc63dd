"""``flegel paper``: the FSP paper's figures, side by side with flegel's, in one command.

Runs scaled-down analogues of the FSP paper's Figs. 7-16 and Table 2 (Section 6) and the
headline comparisons of the ElasticBSP, DSSP and SpecSync papers (:data:`FIGURES`), each as
real MPI jobs (:mod:`flegel.cli.paper.runner`), and writes one run folder::

    OUT/paper.md        the page: per figure the paper's number, flegel's, the verdict
    OUT/paper.json      the same, as data
    OUT/pictures/*.png  one or more pictures per figure
    OUT/runs/...        every run's folder (summary.json, events.jsonl)

``--quick`` (a 2-core laptop, well under 15 minutes) also rewrites ``docs/paper.md`` of the
source tree it runs from, with the pictures beside it in ``docs/paper/`` -- only when it
runs every figure (without ``--only``), so a partial run never replaces the whole page.
``--full`` is the paper's scale (16 workers, four slow, 20x the data; a cluster).
``--only FIG`` (repeatable) runs some figures only: ``7``, ``8``, ``9a``, ``9b``, ``10``,
``11``, ``12``, ``13``, ``14``, ``15``, ``16a``, ``16b`` (``16``: both), ``table2``,
``migration``, ``elastic``, ``dssp``, ``specsync``.  ``--max-time S`` trains every run for at
most ``S`` seconds instead of the mode's ``max_time_s`` (4 s in ``--quick``): only the runs that
do not reach their target take longer, and they are the ones a longer horizon measures further
(issue 19: the contiguous-straggler rows; ``docs/benchmarks.md`` has what 8 s costs and reads).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flegel.cli.paper import fsp_figures, opt_figures, other_figures, scaling
from flegel.cli.paper.common import Ctx
from flegel.cli.paper.page import NOT_RUN, Figure, render, verdict
from flegel.cli.paper.runner import Runner
from flegel.cli.paper.workloads import MODES

#: Every figure, in page order: key -> the function that makes it.
FIGURES: dict[str, Callable[[Ctx], Figure]] = {
    "7": fsp_figures.fig7, "8": fsp_figures.fig8, "9a": fsp_figures.fig9a,
    "9b": fsp_figures.fig9b, "10": fsp_figures.fig10, "11": opt_figures.fig11,
    "migration": opt_figures.migration, "12": opt_figures.fig12, "13": opt_figures.fig13,
    "14": fsp_figures.fig14, "15": fsp_figures.fig15, "16a": scaling.fig16a,
    "16b": scaling.fig16b,
    "table2": other_figures.table2, "elastic": other_figures.elastic,
    "dssp": other_figures.dssp, "specsync": other_figures.specsync,
}

#: ``--only`` names that stand for several figures.
GROUPS: dict[str, tuple[str, ...]] = {"16": ("16a", "16b")}

#: docs/paper.md of the source tree this module belongs to.
DOCS = Path(__file__).resolve().parents[3] / "docs"


def expand(only: list[str] | None) -> list[str]:
    """The figure keys ``--only`` names, a group (:data:`GROUPS`) standing for its figures;
    every figure where ``only`` is None or empty.  Unknown names are kept, for the error."""
    return [k for f in only or list(FIGURES) for k in GROUPS.get(f, (f,))]


def machine() -> str:
    """Cores, load, Python and platform, in words (for the page)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"{os.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / "
            f"{load[2]:.2f} (1/5/15 min, at the end), {platform.system()} "
            f"{platform.machine()}, Python {platform.python_version()}")


def add_parser(sub: Any, name: str) -> None:
    p = sub.add_parser(name, help="reproduce the FSP paper's figures side by side "
                                  "(docs/paper.md)", description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="laptop scale: 4 workers, one slow, small data (the default)")
    size.add_argument("--full", action="store_true",
                      help="the paper's scale: 16 workers, four slow, 20x the data")
    p.add_argument("--only", action="append", default=None, metavar="FIG",
                   help=f"run only this figure (repeatable): {', '.join(FIGURES)} "
                        "(16: 16a and 16b)")
    p.add_argument("--max-time", type=float, default=None, metavar="S",
                   help="train each run for at most S seconds (default: the mode's, 4 s in "
                        "--quick; runs that reach their target stop sooner)")
    p.add_argument("--out", default=None,
                   help="run folder (default: runs/paper-<mode>-<time>); its finished runs are "
                        "re-read, not run again")


def main(args: argparse.Namespace) -> int:
    mode = MODES["full" if args.full else "quick"]
    if args.max_time is not None:
        if not args.max_time > 0:
            sys.stderr.write("flegel: error: --max-time must be positive\n")
            return 2
        mode = dataclasses.replace(mode, max_time_s=args.max_time)
    only = expand(args.only)
    unknown = [f for f in only if f not in FIGURES]
    if unknown:
        sys.stderr.write(f"flegel: error: unknown figure(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(FIGURES)}\n")
        return 2
    out = Path(args.out or f"runs/paper-{mode.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    (out / "pictures").mkdir(parents=True, exist_ok=True)
    command = "flegel paper " + " ".join(
        [f"--{mode.name}"] + [f"--only {shlex.quote(f)}" for f in args.only or []]
        + ([f"--max-time {args.max_time:g}"] if args.max_time is not None else []))
    t0 = time.perf_counter()
    ctx = Ctx(Runner(mode, out), out / "pictures")
    figs = []
    for key in [k for k in FIGURES if k in only]:
        print(f"Fig. {key}:" if key[0].isdigit() else f"{key}:", flush=True)
        t = time.perf_counter()
        try:
            fig = FIGURES[key](ctx)
        except Exception as exc:  # one figure's failure must not lose the others
            fig = Figure(key, "failed", "-", verdict=NOT_RUN,
                         note=f"the figure failed: {type(exc).__name__}: {exc}")
        fig.seconds = time.perf_counter() - t
        verdict(fig)
        print(f"  -> {fig.ours} [{fig.verdict}]", flush=True)
        figs.append(fig)
    wall = time.perf_counter() - t0
    docs = DOCS if mode.name == "quick" and not args.only else None
    write(figs, out, machine(), command, wall, docs=docs)
    print(f"page: {out / 'paper.md'} ({wall / 60:.1f} min)")
    return 0


def write(figs: list[Figure], out: Path, machine_text: str, command: str, wall_s: float,
          docs: Path | None = None) -> list[Path]:
    """Write ``paper.md`` and ``paper.json`` into ``out``; with ``docs``, also
    ``docs/paper.md`` and its pictures in ``docs/paper/`` (replaced).

    Returns
    -------
    list of Path
        The pages written.
    """
    made = [out / "paper.md", out / "paper.json"]
    made[0].write_text(render(figs, machine_text, command, wall_s, pictures="pictures"))
    made[1].write_text(json.dumps({"command": command, "machine": machine_text,
                                   "wall_s": wall_s, "figures": [asdict(f) for f in figs]},
                                  indent=2))
    if docs is not None and docs.is_dir():
        pics = docs / "paper"
        if pics.exists():
            shutil.rmtree(pics)
        pics.mkdir()
        for f in figs:
            for p in f.pictures:
                shutil.copy(out / "pictures" / p, pics / p)
        (docs / "paper.md").write_text(render(figs, machine_text, command, wall_s,
                                              pictures="paper"))
        made.append(docs / "paper.md")
    return made
