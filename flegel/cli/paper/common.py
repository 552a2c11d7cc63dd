"""What every figure of ``flegel paper`` shares: the context (runner, mode, picture folder)
and the arithmetic of ratios that may be bounds."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flegel.cli.paper.runner import Ratio, Runner, RunResult
from flegel.cli.paper.workloads import ALGORITHMS, Mode

#: How the paper's frameworks are named on the page, and the sync preset each runs: FSPB and
#: FSPV of Section 6.2 are without data migration (Section 6.3's *asyn* is added on top).
NAMES = {"bspb": "BSPB", "bspv": "BSPV", "fspb-off": "FSPB", "fspv-off": "FSPV",
         "fspv-async": "FSPV+asyn", "fspv-sync": "FSPV+sync"}

#: The four frameworks of Figs. 7 and 8.
FOUR = ("bspb", "bspv", "fspb-off", "fspv-off")


@dataclass
class Ctx:
    """A figure's view of the session."""

    runner: Runner
    pictures: Path
    say: Callable[[str], None] = print

    @property
    def mode(self) -> Mode:
        return self.runner.mode

    def injected(self, tau: float = 32.0, workers: str | None = None) -> str:
        """The paper's *Injected* pattern: τ ms per 1,000 points on a quarter of the workers."""
        return f"injected:tau={tau:g},workers={workers or self.mode.slow}"

    def run(self, algorithm: str, partition: str, sync: str, stragglers: str = "none",
            sets: tuple[str, ...] = ()) -> RunResult:
        return self.runner.run(algorithm, partition, sync, stragglers, sets)

    def algorithms(self) -> tuple[str, ...]:
        return ALGORITHMS

    def data(self, algorithm: str) -> str:
        return self.runner.work[algorithm].describe()


def combine(qualifiers: list[str]) -> str:
    """The qualifier of a mean of ratios with these qualifiers."""
    q = set(qualifiers) - {""}
    if "?" in q or q == {">", "<"}:
        return "?"
    return q.pop() if q else ""


def geo_mean(ratios: list[Ratio]) -> Ratio:
    """Geometric mean of ratios (with the combined qualifier)."""
    if not ratios:
        return Ratio(float("nan"), "?")
    v = math.exp(sum(math.log(max(r.value, 1e-12)) for r in ratios) / len(ratios))
    return Ratio(v, combine([r.qualifier for r in ratios]))


def time_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def failures(runs: list[RunResult]) -> list[str]:
    """Markdown lines naming the runs that failed, with their error."""
    return [f"- FAILED: `{r.folder.name}`: {r.error}" for r in runs if not r.ok]
