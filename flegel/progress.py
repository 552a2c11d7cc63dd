"""One-line progress display on rank 0 (plain lines when stdout is not a terminal)."""

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
        if self.tty:
            sys.stdout.write("\r" + self._line(t, objective, elapsed, exact))
        else:
            sys.stdout.write(self._line(t, objective, elapsed, exact) + "\n")
        sys.stdout.flush()

    def close(self, t: int, objective: float, elapsed: float) -> None:
        """The final line: ``objective`` is the final θ's exact objective."""
        if not self.enabled:
            return
        sys.stdout.write(("\r" if self.tty else "") + self._line(t, objective, elapsed, True)
                         + "  done\n")
        sys.stdout.flush()
