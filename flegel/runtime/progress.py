"""One-line progress display on rank 0 (plain lines when stdout is not a terminal).

Before training, rank 0 (and before it, ``flegel run``) says which phase the job is in --
launching, importing, loading shards, compiling kernels, training, final evaluation,
writing -- with the seconds since ``flegel run`` started, so a long start or end is never
silent (issue 14); :mod:`flegel.runtime.timings` records the same phases in ``summary.json``.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """Show iteration, objective and time.

    Parameters
    ----------
    mode : {"auto", "plain", "none"}
        ``auto`` redraws one line on a terminal and prints plain lines otherwise.
    objective_name : str
    """

    def __init__(self, mode: str, objective_name: str = "objective") -> None:
        self.tty = mode == "auto" and sys.stdout.isatty()
        self.enabled = mode != "none"
        self.every = 0.25 if self.tty else 2.0
        self.name = objective_name
        self._last = 0.0

    def phase(self, what: str, elapsed: float) -> None:
        """Say that phase ``what`` begins, ``elapsed`` seconds after the job's start: one
        line in plain mode, the redrawn line on a terminal."""
        if self.enabled:
            self._write(phase_line(what, elapsed))

    def _write(self, line: str) -> None:
        # On a terminal, "\x1b[K" clears what a longer previous line left to the right.
        sys.stdout.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
        sys.stdout.flush()

    def _line(self, t: int, objective: float, elapsed: float, exact: bool | None) -> str:
        # Say which objective: f(θ) evaluated on the data, an estimate of it, or the online
        # sum of per-point losses as last seen (no θ's objective under FSP and async).
        kind = {True: "", False: " (estimate)", None: " (online)"}[exact]
        return f"iter {t:6d}  {self.name}{kind} {objective:.6g}  {elapsed:8.2f} s"

    def __call__(self, t: int, objective: float, elapsed: float,
                 exact: bool | None = None) -> None:
        if not self.enabled or t == 0:
            return
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        self._write(self._line(t, objective, elapsed, exact))

    def close(self, t: int, objective: float, elapsed: float) -> None:
        """The final line: ``objective`` is the final θ's exact objective."""
        if not self.enabled:
            return
        self._write(self._line(t, objective, elapsed, True) + "  done")
        if self.tty:
            sys.stdout.write("\n")
            sys.stdout.flush()


def phase_line(what: str, elapsed: float) -> str:
    """``"loading shards              1.02 s"``: a phase and the seconds since the start, in
    the columns of the iteration lines."""
    return f"{what:<34}{elapsed:8.2f} s"
