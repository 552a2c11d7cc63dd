"""Straggler patterns injected into workers (FSP paper Section 6.1; README, Stragglers).

Each pattern slows a list of worker ranks (1..n) after a block, by sleeping (which never burns
a core); see :meth:`Stragglers.after_block` for which patterns a barrier signal interrupts.

* ``injected``: suspend ``tau_ms`` every ``every`` points processed, counted cumulatively
  over the whole run (not per iteration), as in Section 6.1.
* ``persistent``: a slowdown factor: after a block that took t, wait (factor − 1)·t.
* ``transient``: random on/off periods (exponential durations, seeded per rank); during an
  "on" period the worker is slowed by ``factor``.
* ``pause``: the worker stops for ``seconds`` at ``at_s`` seconds into training (preemption).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flegel.validation import Described, Key, choice, defaults, integer, number

PATTERNS = ("injected", "persistent", "transient", "pause")


def parse_workers(value: Any) -> list[int]:
    """Parse ``[1, 2]``, ``3``, ``"1-4"`` or ``"1,3,5-6"`` into a sorted list of ranks."""
    if isinstance(value, bool):
        raise ValueError(f"expected worker ranks, found {value!r}")
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        out: set[int] = set()
        for v in value:
            out.update(parse_workers(v))
        return sorted(out)
    if isinstance(value, str):
        out = set()
        for part in value.replace(" ", "").split(","):
            if not part:
                continue
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"expected ranks like '1-4' or '1,3', found {value!r}")
            out.update(range(int(lo), int(hi or lo) + 1))
        return sorted(out)
    raise ValueError(f"expected worker ranks, found {value!r}")


@dataclass
class Pattern:
    """One straggler pattern acting on one worker."""

    kind: str
    options: dict[str, Any]
    rng: np.random.Generator
    lost_s: float = 0.0
    _count: int = 0
    _done: int = 0
    _next_switch: float | None = None
    _on: bool = False
    _paused: bool = False

    def delay(self, points: int, compute_s: float, elapsed_s: float) -> float:
        """Seconds to sleep after a block of ``points`` that took ``compute_s``."""
        o = self.options
        if self.kind == "injected":
            self._count += points
            due = self._count // o["every"] - self._done
            self._done += due
            return due * o["tau_ms"] / 1000.0
        if self.kind == "persistent":
            return (o["factor"] - 1.0) * compute_s
        if self.kind == "transient":
            if self._next_switch is None:
                self._next_switch = elapsed_s + self.rng.exponential(o["off_s"])
            while elapsed_s >= self._next_switch:
                self._on = not self._on
                mean = o["on_s"] if self._on else o["off_s"]
                self._next_switch += self.rng.exponential(mean)
            return (o["factor"] - 1.0) * compute_s if self._on else 0.0
        if self.kind == "pause":
            if not self._paused and elapsed_s >= o["at_s"]:
                self._paused = True
                return float(o["seconds"])
            return 0.0
        raise ValueError(f"unknown straggler pattern {self.kind!r}")


def _ranks_given(value: Any) -> bool:
    try:
        return bool(parse_workers(value))
    except ValueError:
        return False


#: Keys every straggler entry has (the range check against the job's workers is in config).
COMMON_KEYS: dict[str, Key] = {
    "pattern": choice("which pattern slows the workers", PATTERNS,
                      expected="one of " + ", ".join(PATTERNS)),
    "workers": Key(Described(_ranks_given, "worker ranks such as [1, 2] or '1-4'"),
                   doc="the worker ranks (1..workers) it slows: a rank, a list or '1-4,6'"),
}

#: Options of each pattern, declared once: validation, defaults and the job reference.
PATTERN_KEYS: dict[str, dict[str, Key]] = {
    "injected": {
        "tau_ms": number("suspension per `every` points", 32.0, lo=0, unit="milliseconds"),
        "every": integer("points processed between suspensions, counted over the whole run",
                         1000, lo=1),
    },
    "persistent": {
        "factor": number("slowdown: a block that took t is followed by (factor - 1)·t of sleep",
                         2.0, lo=1),
    },
    "transient": {
        "factor": number("slowdown during an 'on' period", 4.0, lo=1),
        "on_s": number("mean length of an 'on' (slow) period, exponentially distributed",
                       1.0, lo=0, lo_open=True, unit="seconds"),
        "off_s": number("mean length of an 'off' (normal) period, exponentially distributed",
                        2.0, lo=0, lo_open=True, unit="seconds"),
    },
    "pause": {
        "at_s": number("when the worker stops, in seconds after training starts", 1.0, lo=0,
                       unit="seconds"),
        "seconds": number("how long it stops", 1.0, lo=0, unit="seconds"),
    },
}

#: Pattern -> option -> default, derived from :data:`PATTERN_KEYS`.
DEFAULTS: dict[str, dict[str, Any]] = {p: defaults(keys) for p, keys in PATTERN_KEYS.items()}


@dataclass
class Stragglers:
    """The patterns acting on this worker; :meth:`after_block` sleeps as they say."""

    rank: int
    patterns: list[Pattern] = field(default_factory=list)
    #: Monotonic seconds the patterns' time runs on (a simulated clock in tests).
    clock: Callable[[], float] = time.perf_counter
    start: float = 0.0
    resumed_s: float = 0.0  # pattern time already run before a resume

    def __post_init__(self) -> None:
        self.start = self.clock()

    @classmethod
    def for_rank(cls, specs: list[dict[str, Any]], rank: int, seed: int) -> Stragglers:
        """Build the patterns of ``specs`` (validated job entries) that name ``rank``."""
        pats = []
        for i, spec in enumerate(specs):
            if rank in parse_workers(spec["workers"]):
                opts = {**DEFAULTS[spec["pattern"]],
                        **{k: v for k, v in spec.items() if k not in ("pattern", "workers")}}
                rng = np.random.default_rng([seed, rank, i])
                pats.append(Pattern(spec["pattern"], opts, rng))
        return cls(rank, pats)

    def reset_clock(self) -> None:
        """Start the pattern clock (``pause.at_s``, transient periods) when training starts
        (a resumed worker's clock goes on from its checkpoint)."""
        self.start = self.clock() - self.resumed_s

    def checkpoint_state(self) -> dict[str, Any]:
        """The patterns (random generators, counters, time lost) and the pattern clock
        (:class:`flegel.state.Stateful`)."""
        import copy

        return {"patterns": copy.deepcopy(self.patterns),
                "elapsed_s": self.clock() - self.start}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state`."""
        self.patterns = state["patterns"]
        self.resumed_s = state["elapsed_s"]
        self.start = self.clock() - self.resumed_s

    def after_block(self, points: int, compute_s: float) -> tuple[float, float]:
        """Return the seconds this worker is slowed after a block: ``(suspended, blocked)``.

        ``injected`` *suspends* the training thread (Section 6.1): the worker sleeps it in
        slices and answers a barrier signal at once with the work done so far (a suspended
        thread holds no half-processed point), serving the rest before it computes again, so
        it loses exactly the time the pattern says.  ``persistent`` and ``transient`` model a
        slower CPU and ``pause`` a stopped process: the worker cannot answer during those,
        so it sleeps them in one piece (*blocked*).
        """
        if not self.patterns:
            return 0.0, 0.0
        elapsed = self.clock() - self.start
        suspended = blocked = 0.0
        for p in self.patterns:
            d = p.delay(points, compute_s, elapsed)
            p.lost_s += d
            if p.kind == "injected":
                suspended += d
            else:
                blocked += d
        return suspended, blocked

    def forgive(self, seconds: float) -> None:
        """Take back ``seconds`` of suspension charged by :meth:`after_block` that will not
        be served (SpecSync's abort drops the suspension its iteration still owes:
        :func:`flegel.runtime.loop.iterate`), so each pattern's ``lost_s`` stays the time it
        did cost.  Only ``injected`` patterns suspend; the seconds come off them in order,
        none below zero."""
        for p in self.patterns:
            if seconds <= 0:
                break
            if p.kind == "injected":
                take = min(p.lost_s, seconds)
                p.lost_s -= take
                seconds -= take

    def record(self) -> list[dict[str, Any]]:
        """What slowed this worker and how much time each pattern imposed (``lost_s``), for
        the run's summary."""
        return [{"rank": self.rank, "pattern": p.kind, **p.options, "lost_s": round(p.lost_s, 6)}
                for p in self.patterns]
