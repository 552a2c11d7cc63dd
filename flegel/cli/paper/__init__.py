"""``flegel paper``: the FSP paper's figures side by side with flegel's (see
:mod:`flegel.cli.paper.command`).

It lives inside :mod:`flegel.cli` because it drives ``flegel run`` through
:mod:`flegel.cli.compare` and draws with :mod:`flegel.cli.report`: a package beside ``cli``
would make the two import each other (tests/test_architecture.py).

Modules: :mod:`~flegel.cli.paper.workloads` (data and jobs), :mod:`~flegel.cli.paper.runner`
(runs, targets, times), :mod:`~flegel.cli.paper.common` (what figures share),
:mod:`~flegel.cli.paper.fsp_figures` (Figs. 7-10, 14, 15), :mod:`~flegel.cli.paper.opt_figures`
(Figs. 11-13, the six algorithms under migration), :mod:`~flegel.cli.paper.other_figures`
(ElasticBSP, DSSP, SpecSync; Table 2), :mod:`~flegel.cli.paper.scaling` (Fig. 16),
:mod:`~flegel.cli.paper.network` (Table 2 on the local cluster), :mod:`~flegel.cli.paper.plots`,
:mod:`~flegel.cli.paper.page` (the markdown page and the verdicts),
:mod:`~flegel.cli.paper.command` (the command).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, name: str) -> None:
    from flegel.cli.paper.command import add_parser as add

    add(sub, name)


def main(args: argparse.Namespace) -> int:
    from flegel.cli.paper.command import main as run

    return run(args)
