"""The runs behind ``flegel paper``: one MPI job per setting, shared between figures.

Every run goes through :func:`flegel.cli.compare.run_one` (``flegel run`` as its own MPI job,
as ``flegel compare`` does) with the sync preset's keys from
:func:`flegel.cli.compare.model_sets` -- or, for a run across the local cluster's hosts, the
same keys, target and bookkeeping through another launcher
(:func:`flegel.cli.paper.network.paper_run`).  A setting -- algorithm, partition, sync
model, straggler pattern and extra ``--set`` keys -- runs once and is shared by every figure
that uses it (Fig. 10 reads Fig. 7's runs, Fig. 12 Fig. 11's, ...).

Targets (FSP paper Section 6.1, "pre-setting the target of objective"): per algorithm and
partition, a reference run -- BSPB without stragglers on the same shards, for ``ref_time_s``
-- and the target is its best exact objective (:func:`reference_objective`: its final one,
unless the run rose at its end) plus the workload's slack times its magnitude.  Per
partition, because the start depends on it (K-means' random centres are
drawn from the workers' samples): on contiguous shards BSPB may settle in another basin than
on shuffled ones, and a target from the other partition would measure the start, not the
synchronization (issue 19 compares FSPV with BSPB "from the same start").  A ``slack``
given to :meth:`Runner.run` sets another target on the same reference objective (Section
6.3's figures, ``Workload.passes_slack``): the run has a key and folder of its own, and a
slack equal to the workload's is the workload's run.  Every
other run stops at the target or after ``max_time_s``; its time to target is
``summary.json``'s ``time_to_target_s`` (exact objectives of θ snapshots).  A run that does not
reach the target within its time counts as *at least* its training time: ratios with it are
bounds (:class:`Time`).  Runs are shared across invocations too: ``flegel paper`` on a run
folder (``--out``) that holds a setting's finished run re-reads its ``summary.json``
(:func:`reread`; its folder's name carries the digest of the setting's key and of the code
that ran it, :func:`code_digest`) instead of running it again, so a figure rerun on its page's
folder measures the same runs -- and after a change of flegel's or the algorithms' code
launches them afresh, beside the old ones, rather than judge the new code on the old runs.

BSPB without stragglers on the same shards is the reference's setting (the same job, the
same start), so :meth:`Runner.run` reads it from the reference run instead of running it
again (:func:`to_target`; Fig. 8's BSPB column: 8 runs of 2-8 s on the quick page of
d1fa9c0) -- where the two measure alike (:func:`stands_for_run_to_target`).  Full-batch BSP
from one start takes the same steps in every run (the references' exact objectives recur,
to the last digit, in the traces of that page's BSPB runs of GMM, FCM, LR and K-means);
exact evaluations during training are requested on the same schedule with or without a
target until the online objective reaches it (``runtime.exact_budget``; from then on a run to
a target evaluates at once and more often, to stop soon: :mod:`flegel.runtime.exact`), so a
run to the target stops no later than the reference's first exact evaluation at or below it
would have stopped it; and the reference evaluates
every snapshot of its trace after training (:data:`REFERENCE_TRACE_BUDGET`), as a run to a
target does.  What differs is the trace's thinning (``flegel.runtime.server.Trace``): it
keeps every θ version until it holds twice ``output.trace_points``, then every other one,
so a reference that runs on far past the target thins the versions around it that a run
stopped there keeps: on NMF (395 iterations against about 50) the reference read 1.54 s and
1.14 s where a BSPB run to its target took 0.75 s and 0.89 s, and on K-means (86 against 5)
0.05 s against 0.03-0.04 s (``python bench/reference_as_bspb.py``).  So the reference keeps
more snapshots (:data:`REFERENCE_TRACE_FACTOR`) and stands for BSPB only where its trace
kept every version up to where a run to the target stops -- its first exact evaluation
during training at or below the target (:func:`stopping_evaluation`), later than the
trace's first reach -- and that run would have kept every one too; elsewhere BSPB runs as
any setting.  Only where the mode asks (``Mode.fine_references``: ``--quick``) does the
reference evaluate and keep that much; ``--full``'s long references thin their traces
anyway.  A failed reference fails BSPB without stragglers too (its times read ``?``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flegel.cli.compare import RunFailedError, model_sets, parse_stragglers, run_one
from flegel.cli.paper.workloads import Mode, Workload, workloads, write_data, write_job
from flegel.rundir.files import SUMMARY

#: How a run is launched (:func:`flegel.cli.compare.run_one`'s signature): job file, run
#: folder, ``--set`` keys, timeout in seconds -> its ``summary.json``; raises
#: :class:`~flegel.cli.compare.RunFailedError` (or OSError, ValueError) when it fails.
Launcher = Callable[[Path, Path, list[str], float], dict[str, Any]]

#: ``output.trace_budget`` of a reference run: every snapshot of its trace evaluated after
#: training (a share of the training time no evaluation reaches), as a run with a target
#: does by default -- so the reference's trace is a BSPB run's to the target (module notes).
REFERENCE_TRACE_BUDGET = 100.0
#: A reference run keeps this many times the workload's ``output.trace_points``: every
#: version of its first ``2 x 2 x trace_points`` is kept, where a run to the target keeps
#: every one of its first ``2 x trace_points`` (module notes).  On the quick page of d1fa9c0
#: the references ran 4-22 iterations (GMM, FCM, LR, the CNN), 86 (K-means on shuffled
#: shards) and 395 (NMF), so all but NMF's keep every version; evaluating them costs the
#: reference 0.05-0.8 s, the CNN's 17-18 snapshots about 2.3 s, where the BSPB run it stands
#: for cost 2.3-7.9 s.
REFERENCE_TRACE_FACTOR = 2
#: Snapshots this share past ``max_time_s`` still count as by it: a run stopped by
#: ``max_time_s`` takes its last snapshot (its final θ) a few ms after it
#: (:func:`to_target`; :mod:`flegel.cli.paper.horizons`, a horizon's length).
HORIZON_GRACE = 0.01


@dataclass(frozen=True)
class Time:
    """A time to target: ``s`` seconds, or (``reached`` false) more than ``s``."""

    s: float
    reached: bool

    @classmethod
    def first(cls, t: float | None, run_s: float) -> Time:
        """The time of a first reach ``t``, or, where the run never reached (None), more
        than its ``run_s``."""
        return cls(t, True) if t is not None else cls(run_s, False)

    def text(self) -> str:
        return f"{self.s:.2f}" if self.reached else f">{self.s:.1f}"


@dataclass(frozen=True)
class Ratio:
    """``a / b`` of two times, with what it is when one side did not reach the target:
    ``qualifier`` ``""`` exact, ``">"`` a lower bound, ``"<"`` an upper bound, ``"?"``
    unknown (neither reached it)."""

    value: float
    qualifier: str = ""

    @classmethod
    def of(cls, a: Time, b: Time) -> Ratio:
        v = a.s / max(b.s, 1e-9)
        if a.reached and b.reached:
            return cls(v)
        if b.reached:
            return cls(v, ">")  # a took longer than recorded: the ratio is at least v
        if a.reached:
            return cls(v, "<")
        return cls(v, "?")

    def text(self, unit: str = "x") -> str:
        return f"{self.qualifier}{self.value:.2f}{unit}"


def reference_objective(summary: dict[str, Any]) -> float:
    """The objective a reference run sets its target from: the lowest exact objective it
    reached -- its final one, unless it rose at its end.

    The paper pre-sets the target at the converged objective (Section 6.1); a run that
    rose at the end has converged to nothing, and its final value is not a target any run
    works towards.  The CNN's full-batch SGD (learning rate 0.1) on contiguous shards fell
    from 4,609 at θ⁽⁰⁾ to 2,506 at 4.46 s and rose to 5,120 in its last two iterations of
    the 5 s reference, on a page where 21 iterations fit (fewer fit on a busier machine):
    the target, 5,376, was above θ⁽⁰⁾'s objective, so every run "reached" it at its first
    snapshot (Fig. 7's CNN row read 0.20-0.26 s for every sync model).  Where the trace
    never rose its lowest value is the final one, as before.

    Parameters
    ----------
    summary : dict
        The reference's ``summary.json``: ``final_objective`` and the exact
        ``objective_trace``.

    Returns
    -------
    float
        The lowest finite exact objective of the trace and the final one.
    """
    values = [float(f) for _, f in summary.get("objective_trace") or []]
    return min([float(summary["final_objective"]), *(f for f in values if math.isfinite(f))])


def to_target(summary: dict[str, Any], target: float, max_time_s: float) -> dict[str, Any]:
    """``summary`` of a run without a target (a reference run) read as that of a run to
    ``target`` for ``max_time_s`` (module notes): its exact trace up to ``max_time_s`` (and
    :data:`HORIZON_GRACE` past it, where a run stopped by it takes its final θ), and
    ``time_to_target_s`` by the runtime's own rule -- the first snapshot at or below the
    target (``flegel/rundir/writer.py``), None where there is none by then.  Its training
    time is at most ``max_time_s``, and where the target is reached at most the first
    reach: about where a run to it stops (the first exact evaluation during training at or
    below it, at most a few versions later); the trace ends there too.  Where the trace is
    cut, ``final_objective`` is its last value kept (the one that met the target, where
    it was reached).  ``read_from_reference`` marks the summary as derived, not
    written by a run of its own.

    Parameters
    ----------
    summary : dict
        The run's ``summary.json``.
    target : float
        The target objective.
    max_time_s : float
        The training time of a run to the target (``Mode.max_time_s``).

    Returns
    -------
    dict
        A copy of ``summary`` with ``objective_trace``, ``wall_time_s``,
        ``target_objective``, ``time_to_target_s`` (and ``final_objective``) replaced, and
        ``read_from_reference`` true.
    """
    full = summary.get("objective_trace") or []
    horizon = max_time_s * (1 + HORIZON_GRACE)
    reach = next((t for t, f in full if float(t) <= horizon and f <= target), None)
    # A run to the target stops at the reach: nothing after it (a reference may rise later,
    # :func:`reference_objective`), and its final objective is the value that met it.
    end = horizon if reach is None else float(reach)
    trace = [[t, f] for t, f in full if float(t) <= end]
    wall = min(float(summary.get("wall_time_s", 0.0)), max_time_s)
    out = {**summary, "objective_trace": trace, "target_objective": target,
           "wall_time_s": wall if reach is None else min(wall, float(reach)),
           "time_to_target_s": reach, "read_from_reference": True}
    if trace and len(trace) < len(full):
        out["final_objective"] = trace[-1][1]
    return out


def stopping_evaluation(summary: dict[str, Any], target: float, max_time_s: float
                        ) -> dict[str, Any] | None:
    """The exact evaluation during training at which a run of ``summary``'s job to
    ``target`` stops (:mod:`flegel.runtime.exact`, the target stop): the first of the
    summary's ``exact_objective.trace`` that is exact, at or below ``target`` and taken by
    ``max_time_s``; None where there is none (the run lasts ``max_time_s``).  Exact
    evaluations are requested on the same schedule with or without a target until the
    online objective reaches it, and sooner after (module notes), so a reference's tells
    the latest a run to its target stops."""
    evaluations = (summary.get("exact_objective") or {}).get("trace") or []
    return next((e for e in evaluations
                 if e.get("exact") and e.get("objective") is not None
                 and float(e["objective"]) <= target
                 and float(e["time_s"]) <= max_time_s), None)


def stands_for_run_to_target(summary: dict[str, Any], target: float, max_time_s: float,
                             trace_points: int) -> bool:
    """Whether a run without a target (a reference) read to ``target``
    (:func:`to_target`) measures what a run of the same job to it would (module notes): its
    trace kept every θ version (none thinned, none dropped; a summary without
    ``final_evaluation`` says neither: no), and the versions a run to the target makes
    before it stops -- up to the first exact evaluation during training at or below the
    target (:func:`stopping_evaluation`), not the trace's first reach, which comes sooner
    (the evaluations are sparse: ``runtime.exact_budget``) -- or up to ``max_time_s``
    where there is none by then, are fewer than the ``2 x trace_points`` a run to the
    target keeps every one of: that run's trace is not thinned either, and keeps the first
    reach the reference's shows.

    Parameters
    ----------
    summary : dict
        The run's ``summary.json``.
    target : float
        The target objective.
    max_time_s : float
        The training time of a run to the target.
    trace_points : int
        ``output.trace_points`` of a run to the target (the workload's).
    """
    fe = summary.get("final_evaluation")
    if not fe or "iterations" not in summary:
        return False
    if int(fe.get("dropped", 0)) or int(fe.get("snapshots", 0)) < int(summary["iterations"]):
        return False
    times = [float(t) for t, _ in summary.get("objective_trace") or []]
    stop = stopping_evaluation(summary, target, max_time_s)
    # The versions before the stopping one (every version is in the trace, checked above).
    upto = (sum(t < float(stop["time_s"]) for t in times) if stop is not None
            else sum(t <= max_time_s for t in times))
    return upto < 2 * trace_points


#: Modules of ``flegel paper`` that only judge and draw finished runs: left out of
#: :func:`code_digest`, so a page's verdicts can change and be re-read on the same runs.
PAGE_ONLY = frozenset({"page.py", "plots.py", "common.py", "horizons.py", "straggled.py"})


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the code a run executes: every ``.py`` file of the installed ``flegel``
    and ``flegel.algorithms`` packages (path and bytes), but the page's judging modules
    (:data:`PAGE_ONLY`).  It goes into each run folder's name (:meth:`Runner._run`): a run
    folder re-read by :func:`reread` was made by the same code.  (The version string is no
    guide: it does not change between commits.)"""
    h = hashlib.sha1()
    # flegel.algorithms is installed from algorithms/ (pyproject's package-dir).
    for package in map(importlib.import_module, ("flegel", "flegel.algorithms")):
        root = Path(next(iter(package.__path__)))
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:2] == ("cli", "paper") and rel.name in PAGE_ONLY:
                continue
            h.update(f"{package.__name__}/{rel.as_posix()}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def reread(folder: Path, target: float | None) -> dict[str, Any] | None:
    """The summary of a finished run in ``folder`` to ``target`` (None: without one), where
    an earlier ``flegel paper`` on the same run folder made it (module notes): the folder's
    name carries the digest of the run's key (algorithm, partition, sync, stragglers,
    ``--set`` keys, name, slack) and of the code (:func:`code_digest`), and the target,
    which comes from the reference run, must be the same.  None where there is none (or
    its target differs: the run is launched, and ``flegel run`` refuses the existing folder
    -- a failed run, not a wrong one)."""
    path = folder / SUMMARY
    if not path.exists():
        return None
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary if summary.get("target_objective") == target else None


@dataclass
class RunResult:
    """One finished (or failed) run."""

    key: str
    folder: Path
    summary: dict[str, Any] | None
    error: str | None
    target: float | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.summary is not None

    @property
    def time(self) -> Time:
        """Time to target (:class:`Time`); a failed run counts as not reaching it."""
        s = self.summary or {}
        t = s.get("time_to_target_s")
        if t is not None:
            return Time(float(t), True)
        return Time(float(s.get("wall_time_s", 0.0)), False)


@dataclass
class Runner:
    """Runs settings once each, in ``out``; see the module notes.

    Parameters
    ----------
    mode : Mode
        Scale and times.
    out : Path
        The run folder (``data/``, ``jobs/``, ``runs/``).
    say : callable
        Progress lines.
    """

    mode: Mode
    out: Path
    say: Callable[[str], None] = print
    runs: dict[str, RunResult] = field(default_factory=dict)
    targets: dict[tuple[str, ...], float] = field(default_factory=dict)
    #: The reference run behind each target (its trace says how soon the target comes).
    references: dict[tuple[str, ...], RunResult] = field(default_factory=dict)
    #: The reference objective behind each target run here (a target of another slack is
    #: taken from it, :meth:`target`); none where ``targets`` was set by hand.
    objectives: dict[tuple[str, ...], float] = field(default_factory=dict)
    work: dict[str, Workload] = field(init=False)

    def __post_init__(self) -> None:
        self.work = workloads(self.mode)

    def job(self, algorithm: str, partition: str) -> Path:
        """The job file of ``algorithm`` on ``partition`` (data written on first use)."""
        w = self.work[algorithm]
        path = self.out / "jobs" / f"{algorithm}-{partition}.yaml"
        if not path.exists():
            data = write_data(w, self.out / "data")
            write_job(w, self.mode, data, partition, path.parent)
        return path

    def target(self, algorithm: str, partition: str, sets: tuple[str, ...] = (),
               slack: float | None = None) -> float | None:
        """The target objective of ``algorithm`` on ``partition`` (module notes); None if
        its reference failed.  ``sets``: further ``--set`` keys of the reference run (e.g. a
        warm start every run of a figure shares, :mod:`flegel.cli.paper.scaling`).
        ``slack``: another slack than the workload's, on the same reference objective
        (Section 6.3's figures, ``Workload.passes_slack``); a target set by hand in
        ``targets`` stands whatever the slack (there is no objective to take it from)."""
        key = self._ref_key(algorithm, partition, sets)
        if key not in self.targets:
            # Evaluated and kept to stand for BSPB (module notes) only where the mode reads
            # BSPB from it: at --full's scale it would evaluate every snapshot for nothing.
            points = REFERENCE_TRACE_FACTOR * self.work[algorithm].trace_points
            fine = ([f"output.trace_budget={REFERENCE_TRACE_BUDGET:g}",
                     f"output.trace_points={points}"] if self.mode.fine_references else [])
            ref = self._run(algorithm, partition, "bspb", "none",
                            [*fine, f"stop.max_time_s={self.mode.ref_time_s}",
                             "stop.tolerance=1e-7", *sets], target=None, name="reference")
            self.references[key] = ref
            if not ref.ok:
                return None
            assert ref.summary is not None
            f = reference_objective(ref.summary)
            self.objectives[key] = f
            self.targets[key] = f + self.work[algorithm].slack * abs(f)
        if slack is None or key not in self.objectives:
            return self.targets.get(key)
        return self.objectives[key] + slack * abs(self.objectives[key])

    def reference(self, algorithm: str, partition: str, sets: tuple[str, ...] = ()
                  ) -> RunResult | None:
        """The reference run behind :meth:`target`'s target (None: not run yet); its trace
        says how soon the target comes (:func:`flegel.cli.paper.horizons.run_length`)."""
        return self.references.get(self._ref_key(algorithm, partition, sets))

    @staticmethod
    def _ref_key(algorithm: str, partition: str, sets: tuple[str, ...]) -> tuple[str, ...]:
        return (algorithm, partition, *sets)

    def run(self, algorithm: str, partition: str, sync: str, stragglers: str = "none",
            sets: tuple[str, ...] = (), where: str = "", launch: Launcher | None = None,
            reference: tuple[str, ...] = (), slack: float | None = None) -> RunResult:
        """Run one setting to ``algorithm``'s target (once; later calls get the same result).

        Parameters
        ----------
        algorithm, partition : str
            The workload and how its sorted rows are split (:mod:`.workloads`).
        sync : str
            A sync model or preset (``bspv``, ``fspv-off``, ``elastic``, ...).
        stragglers : str
            A ``flegel compare --stragglers`` spec, e.g. ``"injected:tau=32,workers=1"``.
        sets : tuple of str
            Further ``--set`` keys.
        where : str
            Where ``launch`` runs it (``""``: here; e.g. ``"cluster"``): part of the run's
            key and folder name, so runs elsewhere are not shared with local ones.
        launch : callable
            Runs the job (:data:`Launcher`); by default ``flegel run`` here.  The reference
            run behind the target always runs here.
        reference : tuple of str
            Further ``--set`` keys of the reference run behind the target (:meth:`target`).
        slack : float, optional
            The target's slack where not the workload's (:meth:`target`): part of the run's
            key, so a run to another target is not shared with the workload's; the
            workload's own ``slack`` is its target, the run shared (no second run to it).

        Returns
        -------
        RunResult
            BSPB without stragglers, here, with the reference's keys: the reference run read
            to its target (:func:`to_target`, module notes), not a run of its own, where it
            measures alike (:func:`stands_for_run_to_target`) or failed; BSPB runs as any
            setting where it does not, or where the target was given without a reference
            run (``targets`` set by hand, as ``bench/paper_pairs.py`` does).
        """
        if slack == self.work[algorithm].slack:
            slack = None  # the workload's target: the run every other figure shares
        target = self.target(algorithm, partition, reference, slack)
        ref = self.reference(algorithm, partition, reference)
        key_extra = () if slack is None else (f"slack={slack!r}",)
        if (sync == "bspb" and stragglers == "none" and not where and launch is None
                and tuple(sets) == tuple(reference) and ref is not None
                and self.mode.fine_references
                and (ref.summary is None or target is None or stands_for_run_to_target(
                    ref.summary, target, self.mode.max_time_s,
                    self.work[algorithm].trace_points))):
            return self._as_run_to_target(algorithm, partition, tuple(reference), ref,
                                          target, key_extra)
        return self._run(algorithm, partition, sync, stragglers, list(sets), target,
                         name=None, where=where, launch=launch, key_extra=key_extra)

    def _as_run_to_target(self, algorithm: str, partition: str, sets: tuple[str, ...],
                          ref: RunResult, target: float | None,
                          key_extra: tuple[str, ...] = ()) -> RunResult:
        """The reference run ``ref`` behind :meth:`target`'s ``target`` (``sets``: its
        further keys; ``key_extra``: the target's slack where not the workload's, part of the
        key) as BSPB's run to that target without stragglers (:func:`to_target`); failed
        where the reference failed."""
        key = json.dumps([algorithm, partition, "bspb", "none", list(sets),
                          "reference-to-target", *key_extra])
        if key in self.runs:
            return self.runs[key]
        summary = (to_target(ref.summary, target, self.mode.max_time_s)
                   if ref.summary is not None and target is not None else None)
        res = RunResult(key, ref.folder, summary, None if summary else ref.error, target,
                        0.0)
        self.runs[key] = res
        self.say(" ".join([f"  {algorithm}/{partition}/bspb/none", *key_extra]) + ": "
                 + (f"{res.time.text()} s to target (the reference run)" if res.ok
                    else f"FAILED: {res.error}"))
        return res

    def trace_run(self, algorithm: str, partition: str, sync: str, stragglers: str,
                  sets: tuple[str, ...], tag: str = "") -> RunResult:
        """Run one setting without a target (``sets`` give its length and trace): for
        measurements on its ``objective_trace`` (:mod:`flegel.cli.paper.horizons`).
        ``tag`` tells repeats of one setting apart (each runs: a key of its own)."""
        return self._run(algorithm, partition, sync, stragglers, list(sets), target=None,
                         name=f"trace-{sync}{tag}")

    def _run(self, algorithm: str, partition: str, sync: str, stragglers: str,
             sets: list[str], target: float | None, name: str | None, where: str = "",
             launch: Launcher | None = None, key_extra: tuple[str, ...] = ()
             ) -> RunResult:
        """Run one setting once (``key_extra``: further words of its key, e.g. the target's
        slack, :meth:`run`; not ``--set`` keys)."""
        key = json.dumps([algorithm, partition, sync, stragglers, sets, name]
                         + ([where] if where else []) + list(key_extra))
        if key in self.runs:
            return self.runs[key]
        # The code's digest too: a folder made by other code is not re-read (reread).
        digest = hashlib.sha1((key + code_digest()).encode()).hexdigest()[:6]
        folder = self.out / "runs" / "-".join(
            [algorithm, partition, name or sync] + ([where] if where else []) + [digest])
        all_sets = (model_sets(sync)
                    + [f"stragglers={json.dumps(parse_stragglers(stragglers))}"] + sets)
        if target is not None:
            all_sets.append(f"stop.target_objective={target!r}")
        what = " ".join([f"{algorithm}/{partition}/{name or sync}/{stragglers}",
                         *(sets if name is None else []), *key_extra]) + (
                             f" ({where})" if where else "")
        done = reread(folder, target)
        if done is not None:
            self.runs[key] = RunResult(key, folder, done, None, target, 0.0)
            self.say(f"  {what}: re-read {folder.name}")
            return self.runs[key]
        t0 = time.perf_counter()
        summary, error = None, None
        try:
            # run_one looked up at the call, not bound at import: a test can record runs
            summary = (launch or run_one)(self.job(algorithm, partition), folder, all_sets,
                             3 * max(self.mode.ref_time_s, self.mode.max_time_s) + 60)
        except (RunFailedError, OSError, ValueError) as exc:
            error = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
        res = RunResult(key, folder, summary, error, target, time.perf_counter() - t0)
        self.runs[key] = res
        self.say(f"  {what}: " + (f"{res.time.text()} s to target" if res.ok and name is None
                                  else f"{name} done" if res.ok else f"FAILED: {error}"))
        return res
