"""Where a run's wall time goes before, around and after training (issue 14, fixed costs).

``summary.json`` carries ``timings``, the phases of the run on rank 0's clock, in order and
without gaps, so that they add up to the run's wall time less its exit (seconds):

``launch_s``
    From the start of ``flegel run`` (the launcher process, as the operating system recorded
    its start: it includes the interpreter's own start) to the start of rank 0's process:
    the launcher's imports, validating the job, ``mpiexec`` starting the ranks.  The
    launcher passes its start time to the ranks in ``FLEGEL_LAUNCH_T``
    (:data:`LAUNCH_ENV`); under a user's own ``mpirun`` there is none and ``launch_s`` is
    null.
``import_s``
    From the start of rank 0's process to every rank having imported flegel, mpi4py and the
    algorithm's module and agreed on the validated job (a collective step: it ends when the
    last rank gets there).
``load_s``
    To every worker having loaded its shard and sent its sample to the master.
``compile_s``
    To every worker being ready to train: the master computes θ⁽⁰⁾ and sends it, each
    worker runs its kernels once on a few points (numba compiles them, or loads them from
    its cache).
``train_s``
    From every worker ready to the end of training: the training clock (``wall_time_s``)
    and the master's setting up of the sync model around it.
``final_eval_s``
    To every worker's end-of-run report: the final θ and the θ snapshots of the objective
    trace not evaluated during training (within ``output.trace_budget``) evaluated on every
    shard, in one pass (:class:`flegel.runtime.exact.FinalEvaluation`).
``write_s``
    To ``summary.json`` being written: the held-out ``test_data`` metrics (evaluated on the
    master, when the job has test data), ``model.json`` and the summary itself.

What comes after (printing the last lines, ``MPI_Finalize``, the processes' exit) is not in
the summary; ``bench/startup_bench.py`` measures it as the wall time less these phases.

``summary.json``'s ``startup`` says what each rank did in those phases (issue 19, "the first
second counts"): :class:`RankClock`'s marks, each rank on its own clock -- the wall and CPU
seconds from the previous mark, so waiting for another rank (wall without CPU) shows apart
from work.  ``bench/startup.py`` prints them per rank, with medians over runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

#: The environment variable in which ``flegel run`` passes its start time (``time.time()``
#: seconds) to the ranks.
LAUNCH_ENV = "FLEGEL_LAUNCH_T"

#: The environment variable in which ``flegel run`` passes the job's ``output.progress`` to
#: the ranks, so rank 0 can say it is importing before it has read the job.
PROGRESS_ENV = "FLEGEL_PROGRESS"

#: The phases, in order: the name in ``timings`` and what the progress line says.
PHASES = (("launch_s", "launching"), ("import_s", "importing"), ("load_s", "loading shards"),
          ("compile_s", "compiling kernels"), ("train_s", "training"),
          ("final_eval_s", "final evaluation"), ("write_s", "writing"))


def process_start() -> float:
    """When this process started, in ``time.time()`` seconds.

    The kernel's record of the start (``/proc/self/stat``, 10 ms ticks) on Linux, so the
    interpreter's own start-up counts; elsewhere the first call of this function (it is
    called early: when :mod:`flegel.runtime.timings` is imported).
    """
    return _START


def _process_start() -> float:
    try:
        with open("/proc/self/stat") as f:
            # Field 22, after the command name (which may hold spaces, in parentheses): clock
            # ticks from boot to the start, on the clock CLOCK_BOOTTIME reads.
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


_START = _process_start()


def launch_time() -> float | None:
    """The launcher's start time it passed in :data:`LAUNCH_ENV`, or None."""
    try:
        return float(os.environ[LAUNCH_ENV])
    except (KeyError, ValueError):
        return None


def say_importing(rank: str | None) -> None:
    """Rank 0 (``rank``, from the MPI launcher's environment) says it is importing, when
    ``flegel run`` launched it with progress on (:data:`PROGRESS_ENV`)."""
    mode = os.environ.get(PROGRESS_ENV, "none")
    if rank == "0" and mode != "none":
        from flegel.runtime.progress import Progress

        origin = launch_time()
        Progress(mode).phase("importing", time.time() - (origin or _START))


class RankClock:
    """One rank's marks through its start-up and end (module docstring): each mark, its
    time on ``time.perf_counter``'s clock and this process's CPU time when it was made.

    The first mark, ``start``, is the process's start (:func:`process_start`; CPU 0): a
    rank runs one job, so its first step covers the interpreter's start and the imports.
    Step lengths are on ``perf_counter`` (monotonic): ``time.time()`` may be stepped back
    (NTP) between two marks, which would give a step a negative length.  Only the first
    step's beginning, the process start, comes from ``time.time()`` (the kernel's record is
    all there is), read once here, and a negative first step is taken as 0.
    """

    def __init__(self) -> None:
        now, wall = time.perf_counter(), time.time()
        #: This process's start on the perf_counter clock.
        origin = now - max(0.0, wall - _START)
        self.marks: list[tuple[str, float, float]] = [("start", origin, 0.0)]

    def mark(self, name: str) -> None:
        """What ended now is ``name`` (e.g. ``"loaded"``: the shard is loaded)."""
        self.marks.append((name, time.perf_counter(), time.process_time()))

    def spans(self) -> dict[str, object]:
        """For ``summary.json``: ``start`` (this process's start, ``time.time()`` seconds)
        and ``steps``, ``[name, wall_s, cpu_s]`` per mark after the first, each from the
        mark before it."""
        steps = [[name, round(t - t0, 4), round(c - c0, 4)]
                 for (_, t0, c0), (name, t, c) in zip(self.marks, self.marks[1:])]
        return {"start": _START, "steps": steps}


class Timings:
    """Rank 0's clock through the phases of a run (the module docstring defines them).

    Parameters
    ----------
    on_phase : callable, optional
        Called with (what, seconds since the launcher started, or since rank 0 started when
        there is no launcher) as each phase from loading on begins: the progress line.
    """

    def __init__(self, on_phase: Callable[[str, float], None] | None = None) -> None:
        self.launched = launch_time()
        self.started = process_start()
        self.on_phase = on_phase
        # The start of every phase from import_s on, in time.time() seconds.
        self.marks: dict[str, float] = {"import_s": self.started}
        #: Each rank's :meth:`RankClock.spans`, by rank (a string, as in JSON): the
        #: summary's ``startup``.
        self.ranks: dict[str, dict[str, object]] = {}

    @property
    def origin(self) -> float:
        """The time progress lines count from: the launcher's start, else rank 0's."""
        return self.started if self.launched is None else self.launched

    def begin(self, phase: str) -> None:
        """Phase ``phase`` (a key of :data:`PHASES`) begins now: the previous one ends."""
        now = time.time()
        self.marks[phase] = now
        if self.on_phase is not None:
            self.on_phase(dict(PHASES)[phase], now - self.origin)

    def summary(self) -> dict[str, float | None]:
        """The ``timings`` of ``summary.json``; the last phase begun ends now."""
        ends = dict(self.marks, end=time.time())
        names = [p for p, _ in PHASES if p in self.marks] + ["end"]
        out: dict[str, float | None] = {
            "launch_s": None if self.launched is None else round(self.started - self.launched,
                                                                 4)}
        for phase, after in zip(names, names[1:]):
            out[phase] = round(ends[after] - ends[phase], 4)
        return out
