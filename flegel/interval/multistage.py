"""FSPV: multi-stage self-corrected linear fitting of the interval (FSP paper §3.3, Eq. 7).

Within a stage the training progress per unit of valid time is linear in η,
``g(η) = a·η + b``.  Two probes fit it: from the same start location X_j (workers mark their
data, the master keeps θ), run two iterations with η_p, measure ``g(η_p) = Δf / Δt`` with
``Δt`` the valid time; roll back to X_j and θ, run two iterations with 2η_p for the second
point.  The stage then runs with

    η* = argmax_η gain(η) = (T − φ·T/(η + φ)) · g(η)        (Eq. 7)

where φ is the measured barrier cost (T, the stage length, only scales the gain).  The
master keeps monitoring the stage against its prediction, the progress per wall second
``g(η*)·η*/(η* + φ)``; when training falls behind it ("the algorithm does not converge as
predicted"), a new stage starts and probes again from where training is (self-correction of
the fitting error).

Probes: interleaved (default) or rolled back
--------------------------------------------
The paper's probes roll back: the first probe's two iterations are thrown away.  Measured
(issue 19, 400k x 28 blobs, 4 workers, no straggler): with them FSPV reached a 1.002x
target 1.5x later than BSPV, and the second probe's progress was measured against an online
objective that already held the first probe's gains, so g(2η_p) came out *negative* and Eq. 7
settled on η of 2-8 ms while an iteration's overhead φ was 4-6 ms (workers computed 15-22%
of the time).  ``probes="interleaved"`` (the default) therefore probes without a roll-back,
in the order η₁ η₂ η₂ η₁ (``PROBE_REPEAT`` iterations each): every iteration trains for
real, and the symmetric order cancels a linear drift of the rate over the probes (the skew
the roll-back guards against).  Its first centre is BSPV's own choice, the interval whose
barrier takes a tenth of the iteration, ``η₀ = 9·φ₀`` with φ₀ the calibration's round trip
(the master passes it to :meth:`MultiStage.start`), so FSPV starts where BSPV ends its
calibration, and each stage probes ``η/√2`` and ``√2·η`` around the interval in force (the
paper's ratio of 2 between the probes).  Its η* is kept within a factor
:data:`TRUST_FACTOR` of the probes (a line fitted on two points is not trusted far
outside them; the next stage probes around the new η) and at least φ: an interval shorter
than what an iteration costs beyond it spends more than half the time on barriers, which a
fit of two noisy points suggested often and measurements never supported.  Two more
choices (issue 19, measured with ``python bench/fsp_claims.py --only horizons``): the probes'
rates are compared at one time, with the decay of the rate over the probes fitted out
(:meth:`MultiStage._slot_rates`: right after the calibration pass progress decays much
faster than linearly, and the first run of η₁ read as η₁'s advantage), and an optimum at
the fastest worker's pass is an η of :data:`PASS_REACH` passes, so the pass calls each
barrier (an η set at the measured pass is raced by the timers, which on shared cores end
most workers' iterations with a fraction of a pass or nothing).
``probes="rollback"`` keeps the paper's scheme (the first centre is η_p, as below).

Choices where the paper is vague, all documented here:

* probes last 200 ms (the paper's default η_i, footnote 1), shortened to
  :data:`PROBE_PASS_FRACTION` (an eighth) of the fastest worker's full pass when that is
  shorter.  The paper wants η_i "usually very small" (the probes are partly redone after the
  roll-back) and the linear fit of g is local, so the probes η_p and 2η_p must sit where the
  optimum can be: on data whose passes take tens of milliseconds, probes at half a pass (and
  a full pass for the second) fitted a line that extrapolated to 4x too long an η;
* φ, the cost of a barrier in Eq. 7, is what an iteration costs beyond its interval, so
  that an iteration of η takes η + φ of wall time as Eq. 7 has it: ``wall_s − eta_s`` (at
  least the barrier itself, first report to next broadcast), the median of the last five
  iterations.  The barrier alone misses the messages' round trip and the last block's
  overrun, and an η* fitted on it can be shorter than the round trip (no work at all);
* η* is found on a log-spaced grid of 256 intervals between ``eta_min_s`` and the fastest
  worker's full-pass time (robust whatever the signs of a and b; the analytic maximizer for
  a < 0 is ``−φ + sqrt(φ² − bφ/a)``); if the fit predicts no progress anywhere, η_p is kept;
* **an algorithm that progresses per update** (``Algorithm.progress_per_update``: the CNN's
  mean-gradient step, FSP paper Eq. 1) makes about the same progress per iteration whatever
  the points in it, so g(η) = c/η and Eq. 7's gain c/(η + φ) is largest at the shortest
  interval allowed: the lower end of the trust region (η₁/:data:`TRUST_FACTOR`, at least φ),
  whatever the probes measured.  The probes cannot see it: the online objective credits a
  point's loss change since its last visit, a pass ago, so probes shorter than a pass
  measure the steps of the last pass, not the interval probed -- right after the
  calibration pass the middle probes (η₂) looked best every time.  Measured (issue 19,
  ``python bench/paper_pairs.py``, ``flegel paper``'s CNN on sorted shards, 2 shared cores)
  fixed intervals of 10, 20, 40 and 80 ms reached the target in 0.78, 1.01, 0.99 and 1.49 s
  (medians of 2), while the fitted η ranged over 15-301 ms from run to run (0.66-1.56 s).
  (The progress FSPV observes is now the gauge's, the exact objective of θ before and after
  the iteration on a fixed sample, :mod:`flegel.interval.gauge`, where it is cheap enough;
  the CNN's evaluation is not -- 256 points cost about an iteration -- so it reads the
  online objective still, and takes the shortest trusted interval as before);
* **when a new stage opens.**  Within a stage f falls linearly in t (the paper's premise);
  the stage's line is fitted on the stage itself: its rate (:attr:`MultiStage.stage_rate`)
  is the progress over wall time of its iterations so far.  (The probes' extrapolation
  ``g(η*)·η*/(η* + φ)`` is kept as ``predicted_rate`` but not judged against: fitted on two
  points of two iterations each, it carries the probes' noise, and with 30% noise per
  iteration a stationary rate fell "behind" it within 20 iterations in 2 of 5 seeds.)
  Per-iteration progress is noisy (block boundaries, the order of points, stragglers), so
  the stage is judged on windows of ``window`` iterations (default :data:`STAGE_WINDOW`),
  never on one iteration, and only once it has run at least ``stage_factor`` times as long
  as its probes took (so re-probing, which throws one probe's work away, costs at most about
  1/``stage_factor`` of the run).  A window is *behind* when its rate falls short of the
  stage's rate by more than ``stage_tolerance`` of it **and** by more than
  :data:`STAGE_SIGNIFICANCE` standard errors of the difference (estimated from the spread of
  the per-iteration rates, so noise large against the rate -- near convergence -- never opens
  a stage).  Windows on the line refine the stage's rate; :data:`STAGE_CONFIRM` consecutive
  windows behind open a new stage.  A stationary rate, even with per-iteration noise as large
  as the rate itself, thus does not open stages, while a real drop of the rate below
  ``1 − stage_tolerance`` of the stage's opens one within ``STAGE_CONFIRM + 1`` windows.
  Each re-fit is counted (:attr:`MultiStage.refits`, ``stage_refits`` in ``summary.json``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from flegel.interval.base import IntervalAdjustor, Observation, Plan

#: FSPV's probes η_p last at most this fraction of the fastest worker's full pass (and the
#: second probe, 2η_p, twice that): small probes, where the optimum can be (see above).
PROBE_PASS_FRACTION = 1.0 / 8.0
#: Iterations per window a stage is judged on.
STAGE_WINDOW = 8
#: A window is behind only if its shortfall exceeds this many standard errors of its rates.
STAGE_SIGNIFICANCE = 3.0
#: Consecutive windows behind the prediction that open a new stage.
STAGE_CONFIRM = 2
#: Interleaved probes: iterations per slot of the order η₁ η₂ η₂ η₁.
PROBE_REPEAT = 2
#: Interleaved probes: η* stays within this factor of the probed intervals (below η₁,
#: above η₂).
TRUST_FACTOR = 2.0
#: Interleaved probes: an η this many times the fastest worker's full pass stands for "a
#: barrier per pass" -- the pass itself calls the barrier (Section 3.3), whatever noise there
#: is in the measured pass time.  An η set *at* the measured pass was reached by the timers
#: as often as by the pass: measured (issue 19, logistic regression, 4 workers on 2 shared
#: cores) workers then committed after a fraction of a pass, most of them 0 points.  Four,
#: not two: under FSP's pass rule (:meth:`flegel.sync.fsp.FSP._on_pass`) the workers that are
#: not stragglers finish their pass under their own timers, and where ranks share cores a
#: worker waits for a core for several passes' time in the middle of its pass (issue 19,
#: K-means at a load of 8: passes of 1.3 ms took 3.6-5.5 ms of wall time).  A timer of two
#: passes then cut it short when it ran again, so its remaining points waited a whole
#: iteration, and the barrier was no sooner: it had waited for that worker anyway.
PASS_REACH = 4.0
#: FSPV's sampled calibration (:func:`sample_fraction`): the first M-step of an algorithm with
#: ``sampled_first_step`` is taken after this share of every worker's shard.
SAMPLE_SHARE = 1.0 / 8.0
#: ... but after at least this many points of the smallest shard (the same, larger share of
#: every shard; a whole pass if that is all of one).  A heuristic, not checked against the
#: algorithm: a sample of at least 1,000 points per shard leaves every component enough
#: points to fit -- a full covariance in d dimensions needs more than d; the bundled GMM of
#: ``flegel paper`` has 8 components in 27 dimensions, 216 points for one each.
SAMPLE_MIN_POINTS = 1000
#: ... and a sample of at least this share of the smallest shard is no sample: the calibration
#: is a whole pass (:func:`sample_fraction`, "Half a shard or more").
WHOLE_SAMPLE_SHARE = 0.5
#: The probe modes of :class:`MultiStage`.
PROBE_MODES = ("interleaved", "rollback")
#: The phases of :class:`MultiStage`'s plans that measure g(η) (Section 3.3): "probe" in
#: interleaved mode, "probe1" and "probe2" (rolled back to the same θ) in rollback mode.
PROBE_PHASES = frozenset({"probe", "probe1", "probe2"})


def sample_fraction(shard_points: Iterable[int], min_points: int = 0) -> float:
    """The share of every worker's shard in FSPV's sampled calibration: :data:`SAMPLE_SHARE`,
    raised so that the smallest shard gives :data:`SAMPLE_MIN_POINTS` (or ``min_points``, the
    algorithm's, if more: :func:`flegel.sync.fsp.sample_share`); 1.0 (a whole pass) when
    that is half a shard or more (:data:`WHOLE_SAMPLE_SHARE`), or a shard's size is unknown
    (0).

    One share for the job, not a minimum per worker: every worker contributes the same share
    of its shard in its shuffled order, so the sample is stratified over the shards in
    proportion to their sizes -- a random sample of the data.  (A minimum per worker gave
    shards of [2000, 11067, 11067, 11066] points shares of [1/2, 1/8, 1/8, 1/8]: the small
    shard's points counted four times as much in θ¹, issue 19.)

    For an incremental EM algorithm (``Algorithm.sampled_first_step``: per-point sufficient
    statistics, Neal & Hinton 1998, the FSP paper's Eq. 3) the first M-step after part of
    the first pass is the M-step of a random sample of the data at θ⁰.  Far from the optimum
    θ⁰'s error dwarfs the sample's, so θ¹ is nearly the full pass's, and the rest of the
    first pass -- with the sample revisited -- runs at θ¹ instead of θ⁰: one M-step of batch
    EM gained for an eighth of a pass.  An idealised schedule (``python
    bench/em_schedules.py``, every pass and M-step in order, no clock) on ``flegel paper``'s
    GMM (35,000 x 27, 8 components, exact objective of each θ): batch EM reaches the target
    (the converged objective + 1e-5) after 2 passes and 2 M-steps, a first M-step after 1/8
    of the pass then whole passes after 1.125 passes and the same 2 M-steps; FCM's 1e-3
    target after 9 passes against 8.125, 9 M-steps each.  Measured FSPV against BSPV runs:
    docs/benchmarks.md (issue 19, i19g).

    **Half a shard or more** (:data:`WHOLE_SAMPLE_SHARE`; issue 19, Fig. 8): where the
    floor raises the share to half the smallest shard or more, the calibration is a whole
    pass, as BSPV's.  Such a sample saves at most half a pass, once, and costs on every
    later pass: the store's blocks never wrap past a shard's end (they are views), so a pass
    begun at the sample's end runs in two pieces for the rest of the run, and θ¹ from half
    the data starts a trajectory of its own.  Measured on ``flegel paper``'s NMF (shards of
    2,000 x 400, share 1/2, 4 workers on 2 shared cores, load 12-16): FSPV's passes took
    two blocks ([1000, 1000]) against BSPV's one of 2,000, 0.43-0.84 ms of worker loop
    outside the kernel per iteration against 0.34-0.52 ms (medians of 4 workers, 0.5 s
    runs), the kernel 1.75 ms against 1.69 (fastest of 200, in-process); FSPV's θₖ lagged
    BSPV's θₖ by 0.0-0.3 iterations up to k = 15 -- one barrier more to the 0.2 s horizon's
    target in 4 of 4 pairs (5, 13, 13, 7 against 4, 12, 12, 6) -- and by 3.6-6.0 at k = 80
    (the 1 s horizon; ``python bench/fsp_claims.py --only horizons --algorithms nmf
    --repeat 4 --most 0 --keep DIR``, ``bench/fsp_timeline.py DIR OUT --steps``), while its
    first θ came sooner (26 against 49 ms, 16 against 23, 39 against 50; 38 against 27).
    With a whole pass FSPV's θ sequence is BSPV's (the same objectives, 2,207,330 →
    461,693 → 419,953 → ...) and its passes one block each, as BSPV's; then FSPV is level
    with BSPV at best, its time per iteration deciding.  End to end the ratio moved within
    its noise: 12 interleaved pairs a side (``--repeat 2 --most 0``, six sittings, load
    8-17, pairs from 0.32x to 2.0x), BSPV / FSPV geometric means 0.84x, 0.89x, 0.88x at the
    0.2, 0.5 and 1 s horizons against main's 0.89x, 0.86x, 0.87x.  The shares of an
    eighth (GMM's, FCM's, K-means' shards of the quick scale; NMF's at ``--scale 10``) keep
    their sample.
    """
    sizes = list(shard_points)
    smallest = min(sizes, default=0)
    floor = max(SAMPLE_MIN_POINTS, min_points)
    if smallest <= floor:
        return 1.0
    share = max(SAMPLE_SHARE, floor / smallest)
    return 1.0 if share >= WHOLE_SAMPLE_SHARE else share  # half a shard or more: a pass


def sample_batch(shard_points: int, fraction: float) -> int:
    """Points of a shard of ``shard_points`` in a sample of ``fraction`` of every shard
    (:func:`sample_fraction`); 0, a whole pass, for a fraction of 1."""
    return 0 if fraction >= 1.0 else math.ceil(fraction * shard_points)


def eq7_gain(eta: np.ndarray, a: float, b: float, phi: float) -> np.ndarray:
    """Eq. 7 per unit of stage time: ``(1 − φ/(η + φ)) · (aη + b)``."""
    return (1.0 - phi / (eta + phi)) * (a * eta + b)


def best_interval(a: float, b: float, phi: float, eta_min: float, eta_max: float,
                  points: int = 256) -> float | None:
    """The η in [eta_min, eta_max] maximizing Eq. 7, or None if no η makes progress."""
    eta_max = max(eta_max, eta_min)
    grid = np.geomspace(eta_min, eta_max, points) if eta_max > eta_min else np.array([eta_min])
    gain = eq7_gain(grid, a, b, phi)
    if a < 0 and b > 0:
        # Add the analytic stationary point so the answer is exact, not grid-limited.
        root = -phi + np.sqrt(phi * phi - b * phi / a)
        if eta_min <= root <= eta_max:
            grid = np.append(grid, root)
            gain = np.append(gain, eq7_gain(np.array([root]), a, b, phi))
    i = int(np.argmax(gain))
    return float(grid[i]) if gain[i] > 0 else None


class MultiStage(IntervalAdjustor):
    """FSPV's adjustor (Section 3.3, Eq. 7).

    Parameters
    ----------
    probe_s : float
        η_p of the first probe (paper default 200 ms), at most :data:`PROBE_PASS_FRACTION`
        of the fastest worker's full pass.
    stage_tolerance : float
        Relative shortfall of a window's progress rate against the stage's rate beyond
        which the window is behind (it also needs :data:`STAGE_SIGNIFICANCE`).
    window : int
        Iterations per window a stage is judged on.
    stage_factor : float
        A stage runs at least this many times as long as its probes before it is judged.
    eta_min_s : float
        Smallest interval considered.
    probes : {"interleaved", "rollback"}
        How g(η) is probed (module docstring): interleaved η₁ η₂ η₂ η₁ around the interval
        in force, nothing thrown away, or the paper's two probes with a roll-back.
    per_update : bool
        The algorithm progresses per update, not per point aggregated
        (``Algorithm.progress_per_update``: a mean-gradient step).  Eq. 7 then has
        g(η) = c/η, and its optimum is the shortest interval allowed (:meth:`_fit`).

    Attributes
    ----------
    stages : list of dict
        One per fitted stage: the probes, the fit (a, b, φ), η*, the probes' predicted rate,
        whether it was a re-fit, and, for a stage that was left, its measured rate and the
        rate of the window that left it behind.
    refits : int
        Stages opened because training fell behind the prediction (every stage but the
        first).
    """

    name = "multistage"

    def __init__(self, probe_s: float = 0.2, stage_tolerance: float = 0.5,
                 window: int = STAGE_WINDOW, stage_factor: float = 5.0,
                 eta_min_s: float = 1e-3, probes: str = "interleaved",
                 per_update: bool = False) -> None:
        super().__init__(eta_min_s)
        self.per_update = per_update
        if window < 2:
            raise ValueError(f"window must be at least 2 iterations, got {window}")
        if probes not in PROBE_MODES:
            raise ValueError(f"probes must be one of {PROBE_MODES}, got {probes!r}")
        self.probes = probes
        self._schedule: list[int] = []   # interleaved: slot (0: η₁, 1: η₂) per iteration
        # interleaved: (slot, progress, valid, time) per probe iteration (_slot_rates)
        self._probe_log: list[tuple[int, float, float, float]] = []
        self._etas = (0.0, 0.0)
        self.probe_s = probe_s
        self.stage_tolerance = stage_tolerance
        self.window = window
        self.stage_factor = stage_factor
        self._probe_wall = 0.0
        self.phase = "probe1"
        self.step = 0
        self.eta_p = probe_s
        self._progress = self._valid = 0.0
        self.g: list[float] = []
        self.phis: list[float] = []
        self.stages: list[dict[str, object]] = []
        self.refits = 0
        self.predicted_rate = 0.0
        self._stage_wall = 0.0
        self._win_progress: list[float] = []
        self._win_wall: list[float] = []
        self._base_progress = self._base_wall = 0.0
        self._base_rates: list[float] = []
        self._behind = 0

    # ------------------------------------------------------------------ probes
    def _probe_eta(self, eta_max: float) -> float:
        return self.clamp(min(self.probe_s, eta_max * PROBE_PASS_FRACTION), eta_max)

    def start(self, eta0_s: float, eta_max_s: float) -> Plan:
        if self.probes == "interleaved":
            self.eta_s = self.clamp(eta0_s, PASS_REACH * eta_max_s)
            if eta0_s >= eta_max_s:
                return self._pass_stage(eta_max_s)
        return self._new_stage(eta_max_s)

    def _pass_stage(self, eta_max: float) -> Plan:
        """The first stage when BSPV's interval is already a pass or more: a barrier per
        pass (:data:`PASS_REACH`), no probes.

        BSPV in the same place takes its whole shard as the batch; probes around a pass
        would measure whether stopping short of it pays, and below a pass an iteration's
        barrier takes more than BSPV's share ρ of it.  Measured (issue 19, ``flegel
        paper``'s K-means, FCM and NMF on 4 workers and 2 shared cores) the eight probe
        iterations took the first 0.05-0.15 s, at intervals where the workers' reports
        carried a fraction of a pass.  The stage is judged as any other: when training falls
        behind its line, a new stage probes around the interval in force.
        """
        self.eta_s = self.clamp(PASS_REACH * eta_max, PASS_REACH * eta_max)
        self.g = []
        self._probe_wall = 0.0
        self.predicted_rate = 0.0
        self.stages.append({"eta_p_s": None, "g": None, "a": None, "b": None, "phi_s": None,
                            "eta_s": self.eta_s, "predicted_rate": None, "refit": False,
                            "probed": False})
        self.history.append(self.eta_s)
        return self._run_stage()

    def _run_stage(self) -> Plan:
        """Run the stage fitted (or chosen) last: reset its line and windows."""
        self.phase = "run"
        self._stage_wall = 0.0
        self._win_progress, self._win_wall = [], []
        self._base_progress = self._base_wall = 0.0
        self._base_rates = []
        self._behind = 0
        return Plan(self.eta_s)

    def _new_stage(self, eta_max: float) -> Plan:
        if self.probes == "interleaved":
            return self._new_interleaved(eta_max)
        self.eta_p = self._probe_eta(eta_max)
        self.phase, self.step, self.g = "probe1", 0, []
        self._progress = self._valid = self._probe_wall = 0.0
        self.eta_s = self.eta_p
        return Plan(self.eta_p, mark=True, phase="probe1")

    def _new_interleaved(self, eta_max: float) -> Plan:
        """Probe ``η/√2`` and ``√2·η`` around the interval in force, in the order
        η₁ η₂ η₂ η₁ (:data:`PROBE_REPEAT` iterations each), training all the while."""
        reach = PASS_REACH * eta_max
        centre = self.clamp(self.eta_s or self.probe_s, reach)
        # At a pass-long centre the probes are a pass (called by the pass itself) and a
        # share of one: the fit then says whether stopping short of the pass pays.
        lo = self.clamp(min(centre, eta_max) / np.sqrt(2.0), eta_max)
        hi = self.clamp(centre * np.sqrt(2.0), reach)
        self._etas = (lo, hi)
        self.eta_p = lo
        k = PROBE_REPEAT
        self._schedule = [0] * k + [1] * (2 * k) + [0] * k
        self._probe_log = []
        self.phase, self.step, self.g = "probe", 0, []
        self._probe_wall = 0.0
        self.eta_s = self._etas[self._schedule[0]]
        return Plan(self.eta_s, phase="probe")

    def _observe_interleaved(self, obs: Observation) -> Plan:
        # (slot, progress, valid time, middle of the iteration in the probes' wall time)
        self._probe_log.append((self._schedule[self.step], obs.progress, obs.valid_s,
                                self._probe_wall + obs.wall_s / 2))
        self._probe_wall += obs.wall_s
        self.step += 1
        if self.step < len(self._schedule):
            self.eta_s = self._etas[self._schedule[self.step]]
            return Plan(self.eta_s, phase="probe")
        self.g = self._slot_rates()
        return self._fit(obs)

    def _slot_rates(self) -> list[float]:
        """g(η₁) and g(η₂) (progress per valid second) from the probes η₁ η₂ η₂ η₁, with
        the drift of the rate over the probes taken out.

        The symmetric order cancels a *linear* drift.  Progress decays faster than that
        where it matters most -- the first probes follow the calibration pass, whose points
        are revisited for the first time under a fitted θ -- and there the first run of η₁
        took most of the progress (issue 19: g(η₁) 20x g(η₂) on FCM and NMF, so the fit
        chose the shortest interval it was allowed and workers computed 12-29% of the
        time).  When every probe iteration made progress, the per-iteration rates are fitted
        as ``ln g = c_slot + λ·t`` (one decay λ shared by both intervals, least squares) and
        both g are read at the same time, the probes' middle: a rate decaying as e^(−t/τ) is
        compared at one time.  Otherwise (noise around zero, near convergence) each slot's
        iterations are pooled, as the paper's probes are.
        """
        log = self._probe_log
        slot = np.array([x[0] for x in log])
        progress = np.array([x[1] for x in log])
        valid = np.maximum(np.array([x[2] for x in log]), 1e-12)
        t = np.array([x[3] for x in log])
        pooled = [float(progress[slot == k].sum() / valid[slot == k].sum()) for k in (0, 1)]
        if np.any(progress <= 0) or np.ptp(t) <= 0:
            return pooled
        design = np.column_stack([slot == 0, slot == 1, t - t.mean()]).astype(float)
        coef, *_ = np.linalg.lstsq(design, np.log(progress / valid), rcond=None)
        return [float(np.exp(coef[0])), float(np.exp(coef[1]))]

    def observe(self, obs: Observation) -> Plan:
        # φ: what an iteration costs beyond its interval (Eq. 7's wall time per iteration is
        # η + φ): the barrier, and the messaging and overrun that the barrier alone misses.
        overhead = obs.wall_s - obs.eta_s if obs.eta_s > 0 else 0.0
        self.phis.append(max(obs.barrier_s, overhead))
        if self.phase == "probe":
            return self._observe_interleaved(obs)
        if self.phase in ("probe1", "probe2"):
            self._progress += obs.progress
            self._valid += obs.valid_s
            self._probe_wall += obs.wall_s
            self.step += 1
            if self.step < 2:
                return Plan(self.eta_s, phase=self.phase)
            self.g.append(self._progress / max(self._valid, 1e-12))
            self._progress = self._valid = 0.0
            self.step = 0
            if self.phase == "probe1":
                # Roll back to X_j and θ, then probe 2η_p over the same data.
                self.phase = "probe2"
                self.eta_s = self.clamp(2 * self.eta_p, max(obs.eta_max_s, 2 * self.eta_p))
                return Plan(self.eta_s, rollback=True, drop_mark=True, phase="probe2")
            return self._fit(obs)
        # Running a stage: judge it window by window against the prediction.
        self._stage_wall += obs.wall_s
        self._win_progress.append(obs.progress)
        self._win_wall.append(obs.wall_s)
        if len(self._win_progress) < self.window:
            return Plan(self.eta_s)
        progress, wall = np.asarray(self._win_progress), np.asarray(self._win_wall)
        self._win_progress, self._win_wall = [], []
        judged = (len(self._base_rates) > 0
                  and self._stage_wall >= self.stage_factor * self._probe_wall)
        behind, rate = self._window_behind(progress, wall) if judged else (False, 0.0)
        if not behind:
            # On the stage's line: the window refines the stage's rate (its fit of f on t).
            self._base_progress += float(progress.sum())
            self._base_wall += float(wall.sum())
            self._base_rates.extend((progress / np.maximum(wall, 1e-12)).tolist())
        if not judged:
            return Plan(self.eta_s)
        self._behind = self._behind + 1 if behind else 0
        if self._behind >= STAGE_CONFIRM:
            self.stages[-1].update(measured_rate=self.stage_rate, left_at_rate=rate)
            self.refits += 1
            return self._new_stage(obs.eta_max_s)
        return Plan(self.eta_s)

    @property
    def stage_rate(self) -> float:
        """The current stage's measured rate: progress over wall time of its windows that
        were on its line (the slope of the stage's linear fit of f on t)."""
        return self._base_progress / max(self._base_wall, 1e-12)

    def _window_behind(self, progress: np.ndarray, wall: np.ndarray) -> tuple[bool, float]:
        """Whether a completed window fell behind the stage's line, and the window's rate.

        Behind: its rate (progress over wall time) is short of :attr:`stage_rate` by more
        than ``stage_tolerance`` of it and by more than :data:`STAGE_SIGNIFICANCE` standard
        errors of the difference (from the spread of the per-iteration rates of both).
        """
        per_iter = progress / np.maximum(wall, 1e-12)
        rate = float(progress.sum() / max(float(wall.sum()), 1e-12))
        base = np.asarray(self._base_rates)
        var = float(per_iter.var(ddof=1)) / len(per_iter)
        if len(base) > 1:
            var += float(base.var(ddof=1)) / len(base)
        reference = self.stage_rate
        shortfall = reference - rate
        behind = (shortfall > self.stage_tolerance * abs(reference)
                  and shortfall > STAGE_SIGNIFICANCE * np.sqrt(var))
        return behind, rate

    @property
    def phi(self) -> float:
        """The barrier cost φ: median over the last few iterations of what each cost beyond
        its interval (``wall_s − eta_s``; at least the barrier itself, ``barrier_s``)."""
        recent = sorted(self.phis[-5:])
        if not recent:
            return 0.0
        # Not np.median: its first call imports numpy.ma, 27-43 ms of the master's time at
        # the end of the first probes (issue 19, measured at a load of 5-8), while every
        # worker waits for θ.
        mid = len(recent) // 2
        return recent[mid] if len(recent) % 2 else (recent[mid - 1] + recent[mid]) / 2

    def _fit(self, obs: Observation) -> Plan:
        eta_max = max(obs.eta_max_s, self.eta_min_s)
        if self.probes == "interleaved":
            # A probe past the pass ran for a pass (the pass called the barrier).
            eta1, eta2 = (min(e, eta_max) for e in self._etas)
        else:
            eta1, eta2 = self.eta_p, 2 * self.eta_p
        g1, g2 = self.g
        a = (g2 - g1) / (eta2 - eta1) if eta2 > eta1 else 0.0
        b = g1 - a * eta1
        phi = self.phi
        if self.probes == "interleaved":
            # Within a factor of the probes, and never below φ (module docstring).
            lo = self.clamp(max(eta1 / TRUST_FACTOR, phi), eta_max)
            hi = self.clamp(max(eta2 * TRUST_FACTOR, lo), eta_max)
            best = lo if self.per_update else best_interval(a, b, phi, lo, hi)
            # No progress predicted anywhere: keep the larger probe (fewer barriers).  An
            # optimum at the pass is a barrier per pass (PASS_REACH).
            best = self._etas[1] if best is None else best
            self.eta_s = PASS_REACH * eta_max if best >= eta_max * (1 - 1e-9) else best
        else:
            best = (self.clamp(max(phi, self.eta_min_s), eta_max) if self.per_update
                    else best_interval(a, b, phi, self.eta_min_s, eta_max))
            self.eta_s = self.eta_p if best is None else best
        self.predicted_rate = max(a * self.eta_s + b, 0.0) * self.eta_s / (self.eta_s + phi)
        self.stages.append({"eta_p_s": eta1, "g": [g1, g2], "a": a, "b": b, "phi_s": phi,
                            "eta_s": self.eta_s, "predicted_rate": self.predicted_rate,
                            "refit": bool(self.stages)})
        self.history.append(self.eta_s)
        return self._run_stage()

    def summary(self) -> dict[str, object]:
        """``stages`` (the fits) and ``stage_refits`` (stages opened by a shortfall)."""
        return {"stages": self.stages, "stage_refits": self.refits}
