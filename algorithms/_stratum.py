"""A worker's shard as one stratum of the data: the stratified estimate of its statistics that
FSP's M-step uses without data migration (issue 19, Figs. 7, 9a, 9b, 15).

Under incremental EM (FSP paper Section 2.2, Eq. 3) the master's sufficient statistics are
exact sums over every point's LAST state.  With one straggler on a contiguous shard of sorted
data, its points keep the state of a θ many versions old for a whole slow pass while the fast
workers pass their shards 20-30 times: incremental EM with one block frozen, which settles the
fast workers' conditional optimum (K-means: +5.9 % above BSPB's converged objective on
``flegel paper``'s workload, ``python bench/basin_sim.py``).  A stratified sample fixes it:
the points a worker trained at the current θ are a uniform sample of its shard (shards are
traversed in a shuffled order, ``ShardStore.shuffle``), so their fresh statistics F, scaled by
n / m (Horvitz-Thompson for a stratum sampled at rate m / n), estimate the whole shard's at
the current θ.  The M-step on that estimate is close to Lloyd's (EM's) full step at every
barrier -- BSPV's path, many times more often.

The estimate travels as a *correction* ``n/m · F − E`` (E: the shard's exact sums, the sum of
every delta the worker sent) that the M-step adds to the exact sums; θ keeps the exact sums and,
apart, the sum of every worker's current correction.  A worker sends the changes of its
correction, one piece per block, as it sends the changes of its sums (Eq. 3): the pieces add up
to its current correction whatever its commits carry -- a commit of no points (a straggler
paused before its first block, ``flegel paper``'s K-means: 1 barrier in 3) leaves its last
estimate in θ, and a kept barrier's carried aggregate adds up like any other.  A window too
small to stand for the shard (:data:`MIN_POINTS`) pools the latest earlier windows' samples
against the current E (:data:`POOL`).

**The master's sample** (the estimate shipped where the master holds it).  n/m · F stands
for the shard at the θ version of the worker's LAST window, and an injected straggler sleeps
τ every 1,000 points: at τ = 128 ms under FSPV (intervals of ~6 ms) or τ = 32 ms under FSPB
(~3 ms) it commits no point for 10-40 barriers at a time, the first right after the
calibration's 2,000-3,000 points at θ⁰, so its estimate froze at an old θ while the fast
workers passed their shards 10-40 times around it -- the frozen block again, one window
later: ``python bench/basin_runs.py --tau 128 --seconds 4`` ended +8.1 / +0.57 / +8.2 / +0.48
/ −2.1 % (1 of 5 within the target; +0.48 / +0.57 % its windows' noise) and ``--sync
fspb-off`` 3 of 5 (+7.6 %), and ``bench/basin_sim.py --replay`` of one such run's schedule
reproduces it offline (+7.5 % FSPB, the ``stratum`` row).  So where ``flegel.run`` gave the
master each worker's share of the initialization sample (``DataInfo.sample_sizes``; 2,500
rows of a 27,500-point shard in ``flegel paper``'s K-means) and FSP names the worker's index
(``stratify``'s ``shard``), the worker's correction is −E (:attr:`Stratum.resampled`) and its
weight n goes to θ's ``stratum_shards``: at every M-step the master labels that shard's sample
at the current θ and adds n / rows times its sums (``KMeans._resampled``) -- Lloyd's step
with the shard stood for by a uniform sample that is never stale, asleep or not.  The same
rules say when it is on (below); the worker's window needs its class counts only (the skew
test, :data:`MIN_POINTS`), no sums, and the skew test's reference is θ's exact counts (with
every stratum on sending −E, counts plus corrections sum to nothing).  A fixed sample's own
error stays until the first pass ends: +0.036-0.038 % above the converged objective on
``flegel paper``'s K-means (target +0.1 %), then exact sums.  Without the samples (a θ made
elsewhere) the n/m · F estimate above is taken; so for a shard whose sample holds fewer than
:data:`MIN_POINTS` rows (θ's ``stratum_rows``: per shard, the others keep theirs), and for
FSPV's sampled first pass after its calibration (:attr:`Stratum.fresh_share`: every worker
commits its share at every barrier there, so the fresh shares are mini-batch K-means' step
and no shard pays the master's re-labelling; docs/sync/fsp.md, "After review (kfa)").

**The skew test at θ⁰** (issue 19, Fig. 8).  θ⁰ has no counts, so a worker's skew test
cannot decide on a window at θ⁰ (FSPV's sampled calibration), and every stratum stayed on
there: with the master's samples every shard, shuffled ones too, was stood for by the master's
sample, whose re-labelling (4 x 2,500 rows) cost the master 3-27 ms of FSPV's first update on
``flegel paper``'s K-means without stragglers (loads 4-11), and the step on those samples
took FSPV one M-step more to Fig. 8's target (docs/sync/fsp.md, "K-means at Fig. 8's
horizons").  The master decides that test itself before
training: ``KMeans.init_parameter`` labels each shard's sample at θ⁰ and, where every one's
class shares are within :data:`BALANCED` of all the samples' (shuffled shards) and at least
two classes are in use (θ⁰ from a raw seeding, ``sampled_first_step``: not a file, whose
duplicate centres could label everything one class), sets θ's ``stratum_balanced``; the
sampled calibration's window at θ⁰ then keeps exact sums (:attr:`Stratum.calibrated_exact`;
no other window at θ⁰: FSPB's, a whole pass's, keep their estimate)
-- Lloyd's step on the calibration's equal shares, no master's re-labelling, and a straggler
asleep after it leaves only its few trained points at θ⁰ in θ (exact incremental EM on shuffled
shards).  All or none: exact sums weigh a shard by its trained points, the master's sample by
its n.  The stratum stays on: the sampled first pass's windows take their estimate as before,
and later windows' skew test reads θ's counts.

Exact sums (a correction of 0) where they are already right (choices, written here):

* once the shard's first pass is done (every point trained once: the stale labels are at most
  a pass old, not θ⁰'s) -- the sample's noise kept the objective at +0.08-0.30 % above the
  converged one (``bench/basin_sim.py``'s ``stratified``), around the paper's +0.1 % target,
  where exact sums converge to the fixed point;
* the iteration trained at least half of the shard (:data:`COVERED`): the stale remainder is
  small and one θ version old, while the sample would add its noise;
* no window yet of :data:`MIN_POINTS` fresh points: none stands for the shard;
* a shard whose first block held trained points: E, the sum of the deltas this process
  sent, would not be the shard's sums; the stratum stays off (exact incremental EM).  A
  resumed job restores the stratum from the checkpoint (FSP's worker policy holds it as a
  nested state, :meth:`Stratum.checkpoint_state`), so its E and correction go on.

Each piece also says whether the worker's correction turned into an estimate (+1) or back into
zeros (−1); θ sums them (K-means' ``stratum_active``) and, where no stratum is on, resets its
corrections to exact zeros: taken back piece by piece they sum to 0 only up to rounding
(~2e-12), and exact incremental EM's θ is then restored bit for bit.  A stratum records
nothing until armed (:meth:`Stratum.arm`, as the worker's first iteration begins): the blocks a
worker runs before -- ``flegel.run``'s warm-up, after a resume too -- are never sent.

Generic over the statistics (a dict of sums, whatever keys the algorithm sends); K-means
declares it (``KMeans.stratify``) and logistic regression its gradient variant
(:class:`GradientStratum`, ``LogisticRegression.stratify``); FSP's worker policy calls the hook
when it runs without migration.  Not under migration: points move between shards, so E and n are
not one stratum's, and coverage (FSP's notes) settles the first steps there.

F is taken on at most :data:`SAMPLE_CAP` points an iteration (the first blocks of it, a
uniform sample of the shuffled shard): a fast worker's whole pass needs no estimate, and
summing F over it would cost another pass over its rows.  A sampled block's class counts come
first (:meth:`Stratum.screen`): the skew test reads nothing else, so a shuffled shard -- Fig. 8's
workers, none of them slow, which reach K-means' target within a pass or two, exactly while
the stratum samples -- is found on its first window of :data:`MIN_POINTS` points and its
stratum switches off for good, without a sum taken; a sorted shard's sums are a scatter-add
(:func:`class_sums`).  Measured in docs/sync/fsp.md ("FSP without migration: the stratified
M-step").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import numpy as np

from flegel.jit import njit
from flegel.state import AttributeState

#: An iteration that trained at least this share of its shard uses exact sums (module notes).
COVERED = 0.5
#: Fewest fresh points that stand for a shard.  FSPV's sampled calibration pauses an injected
#: straggler (τ = 32 ms per 1,000 points) after 1 % of its 27,500-point shard, ~275 points,
#: and the first M-step must already see its clusters (``bench/basin_sim.py --slow0 0.01``).
MIN_POINTS = 100
#: Stratified only where the sample's class shares differ from all the data's (θ's counts) by
#: more than this total variation: a shard of sorted data (``flegel paper``'s contiguous
#: K-means shard holds 4-5 of 16 clusters, about 0.7) and not a shuffled one, where the
#: sample's noise (about 0.5 · Σ √(p/m): 0.06 at m = 1,000, 16 even clusters, 0.2 at 100)
#: only delays convergence (module notes).
SKEW = 0.35
#: The master's skew test at θ⁰ (``KMeans``' ``stratum_balanced``, :attr:`Stratum.balanced`):
#: every shard's sample within this total variation of all the samples' pooled (the shard's
#: own included).  Stricter than :data:`SKEW`, erring towards the master's sample (the
#: behaviour without the test): a seeding may not tell sorted shards apart (a random one drawn
#: from one of two sorted shards put each 0.183 from the pool, a test), while a shuffled
#: shard's 2,500-row sample of 16 even clusters is ~0.03 from it (0.5 · √(2(k−1)/(πm)), the
#: sampling noise), and ``flegel paper``'s contiguous shards ~0.7.  The noise grows with k
#: and falls with the rows: 0.155 at k = 16 and 100 rows, and the largest of 4 shards' 0.185
#: at k = 128 and 500 rows (simulated, 200 draws) -- over BALANCED, so the test switches
#: itself off for many clusters on small samples: the master's sample, the safe side.
BALANCED = 0.1
#: A window under MIN_POINTS pools the latest earlier windows, newest first, until MIN_POINTS,
#: from at most this many windows (θ versions).  No more: pools of 4,096 and 1,000 points
#: (which kept the calibration's 3,438 points labelled at θ⁰ for several barriers) put
#: ``flegel paper``'s K-means back in a +7.4 % basin in 2 of 4 and 1 of 5 runs, against 0 of
#: 5 pooling to MIN_POINTS (docs/sync/fsp.md, last section).
POOL = 8
#: Most fresh points summed per iteration (module notes).
SAMPLE_CAP = 4096


def skew(counts: np.ndarray, reference: np.ndarray) -> float:
    """The total variation between the class shares of ``counts`` and of ``reference`` (both
    per-class counts, ``reference`` not all zeros): the skew test's measure (:data:`SKEW`),
    on a worker's window against θ's counts (:meth:`Stratum.skewed`) and on the master's
    sample of a shard against all the shards' samples at θ⁰ (:attr:`Stratum.balanced`)."""
    counts, reference = np.asarray(counts, np.float64), np.asarray(reference, np.float64)
    q = counts / max(float(counts.sum()), 1.0)
    return 0.5 * float(np.abs(q - reference / reference.sum()).sum())


@njit(cache=True, nogil=True)
def _scatter_add(x: np.ndarray, labels: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    for i in range(x.shape[0]):
        c = labels[i]
        for j in range(x.shape[1]):
            out[c, j] += x[i, j]


#: The data dtypes whose :func:`_scatter_add` is loaded (:func:`load_class_sums`).
_LOADED: set[np.dtype] = set()


def load_class_sums(n_features: int, dtype: np.dtype) -> None:
    """Load (or compile) :func:`class_sums`' numba kernel for ``dtype`` data, with the
    algorithm's other kernels (``KMeans.load_compiled``): :func:`class_sums` runs it for that
    dtype only from then on, so a block never compiles it (a worker refused its compile,
    :func:`flegel.jit.without_compiling`, sums in NumPy until it loads)."""
    _scatter_add(np.zeros((1, n_features), dtype), np.zeros(1, np.int64), np.zeros((1, n_features)))
    _LOADED.add(np.dtype(dtype))


def class_sums(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per-class sums of the rows of ``x`` (m x d) by ``labels`` (m, in 0..k-1): the (k x d)
    float64 ``onehot @ x``, without the one-hot product (as many flops as the block's
    distance GEMM) nor a float64 copy of the block.

    A scatter-add, O(m·d): numba's once :func:`load_class_sums` loaded it (about 6x faster
    than the one-hot product at ``flegel paper``'s 1,000 x 28 blocks), else one weighted
    ``np.bincount`` per column where that is faster than the product (few columns) and the
    product where it is not (a process that never loaded numba keeps from importing it)."""
    x = np.asarray(x)
    if x.dtype in _LOADED:
        out = np.zeros((k, x.shape[1]))
        _scatter_add(np.ascontiguousarray(x), labels.astype(np.int64, copy=False), out)
        return out
    if x.shape[1] <= 8:
        out = np.empty((k, x.shape[1]))
        for j in range(x.shape[1]):
            out[:, j] = np.bincount(labels, weights=x[:, j], minlength=k)
        return out
    onehot = (labels[None, :] == np.arange(k)[:, None]).astype(np.float64)
    return onehot @ np.asarray(x, dtype=np.float64)


S = TypeVar("S", bound="Stratum")


class OneStratumPerWorker:
    """What an algorithm's ``stratify`` shares (K-means, GMM, logistic regression): one
    stratum per worker.  An instance that several workers share in one process (an
    in-process simulation) cannot tell their blocks apart, so the second call switches the
    estimate off for all of them (None).  The algorithm sets ``_stratum = None`` and
    ``_shared = False`` in its ``__init__``."""

    _stratum: Any
    _shared: bool

    def _claim_stratum(self, make: Callable[[], S]) -> S | None:
        """``make()``'s stratum, held as this worker's; None from the second call on."""
        if self._stratum is not None or self._shared:
            self._stratum, self._shared = None, True
            return None
        stratum = make()
        self._stratum = stratum
        return stratum


class Stratum(AttributeState):
    """A worker's correction and the pieces to emit per block (module notes).

    Parameters
    ----------
    n_points : int
        The shard's points (no migration: it does not change).
    shares : str or None
        The key of the statistics that holds per-class counts, for the skew test
        (:meth:`screen`, :data:`SKEW`); None: no skew test (every skewed-or-not shard is
        stratified while the other rules allow).
    shard : int or None
        The worker's index (rank - 1): where the master holds a sample of this shard
        (:attr:`resampled`), the index of that sample.

    Notes
    -----
    A stratum records nothing until :meth:`arm` (:attr:`armed`): the worker's warm-up and
    its block-cost measurement run blocks through the algorithm before its first iteration
    (``flegel.run``), and those blocks are never sent, so they must not reach E nor
    :attr:`emitted`.  FSP's worker policy arms it as its first iteration begins
    (``FSPWorker.begin``); :meth:`restore` leaves it disarmed again (armed is no state).
    """

    #: Not checkpointed: a resumed worker arms it at its first iteration (class notes).
    NOT_STATE: ClassVar[tuple[str, ...]] = ("armed", "uniform", "fresh_share", "balanced",
                                             "calibrating")

    def __init__(self, n_points: int, shares: str | None = None,
                 shard: int | None = None) -> None:
        self.n = n_points
        self.shares = shares  # the key of per-class counts (the skew test), or None
        self.shard = shard  # the worker's index: the master's sample of this shard
        #: The master re-estimates this shard from its sample at every M-step: the
        #: correction takes the exact sums out (−E) instead of adding n/m · F − E (module
        #: notes, "The master's sample"); set by the algorithm from θ's layout, where the
        #: master holds a sample of this shard of at least MIN_POINTS rows.  Not while
        #: :attr:`fresh_share`: a sampled first pass's window is fresh at every barrier.
        self.resampled = False
        #: The master's θ⁰ test found every shard's sample within :data:`BALANCED` of all the
        #: shards' samples (shuffled shards): a window at θ⁰ keeps exact sums
        #: (:attr:`calibrated_exact`).  Set by the algorithm from θ at every block, as
        #: :attr:`resampled` (not checkpointed: θ says it again).
        self.balanced = False
        #: Whether the correction sent so far is −E with the master's sample standing for the
        #: shard (its weight n in θ's ``stratum_shards``), not n/m · F − E nor zeros.
        self.shipped = False
        self.reference: np.ndarray | None = None  # θ's estimate of those counts, all data
        self.exact: dict[str, np.ndarray] = {}  # E: the sum of every delta sent
        self.emitted: dict[str, np.ndarray] = {}  # the correction sent so far (all pieces)
        self.valid: bool | None = None  # E is the shard's sums (decided at the first block)
        self.t = -1  # the iteration (θ version + 1) of the window
        self.points = 0  # points trained in the window
        self.total = 0  # points trained in all (at n: the first pass is done)
        self.sampled = 0  # of them, summed into fresh
        self.moved = 0  # of the sampled, those whose state changed
        self.fresh: dict[str, np.ndarray] = {}
        #: The latest windows' samples, newest last: (fresh, sampled, moved) each.
        self.windows: list[tuple[dict[str, np.ndarray], int, int]] = []
        #: The skew test found the shard shuffled: exact sums for good (:meth:`screen`).
        self.off = False
        #: Whether the correction sent so far is an estimate (not zeros): θ counts the
        #: strata on, and takes exact zeros where none is (``KMeans.update_parameter``).
        self.on = False
        #: Blocks count from the worker's first iteration on (class notes); not checkpointed.
        self.armed = False
        #: This iteration is one of FSPV's sampled first pass (:meth:`arm`); not checkpointed.
        self.uniform = False
        #: ... and not its first (the sampled calibration): :meth:`arm`; not checkpointed.
        self.fresh_share = False
        #: This iteration is FSPV's sampled calibration (:meth:`arm`); not checkpointed.
        self.calibrating = False

    def arm(self, sampled: bool = False, calibration: bool = False) -> None:
        """Record blocks from now on: an iteration of the worker begins.  ``sampled``: it
        trains the same share of every shard, as the master scheduled (FSPV's sampled
        calibration and first pass, ``flegel.sync.fsp.SAMPLED_FIRST_PASS``) -- a uniform
        sample of a shuffled shard, whose estimate is mini-batch K-means' step: taken
        whatever the sample's class shares (no skew test, :meth:`screen`), as it is where a
        shard's first pass runs as such steps.

        A sampled iteration after the stratum's first window (FSPV's sampled first pass, which
        runs only where no worker was paused or predicted a straggler,
        ``flegel.sync.fsp``) is a :attr:`fresh_share`: every worker commits its share at every
        barrier, so its n/m · F stands for the shard at the current θ and the master's sample
        (:attr:`resampled`) is not taken -- the workers' fresh shares are mini-batch K-means'
        step, and no shard pays the master's re-labelling.  The first window (the sampled
        calibration) is not: an injected straggler sleeps right after it, tens of barriers
        (module notes, "The master's sample"), and n/m · F at θ⁰ would freeze there.

        ``calibration``: the iteration is FSPV's sampled calibration (the master's share of
        every shuffled shard, ``Instructions.batch`` without ``sampled``), the one window at
        θ⁰ that :attr:`calibrated_exact` may take exact sums in."""
        self.fresh_share = sampled and self.t >= 0  # t: the last window's, -1 before any
        self.armed = True
        self.uniform = sampled
        self.calibrating = calibration and not sampled

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state` (every attribute but :attr:`armed`), in
        place (the algorithm holds this object), disarmed until the resumed worker's first
        iteration begins (class notes)."""
        super().restore(state)
        self.armed = self.uniform = self.fresh_share = self.calibrating = False

    @property
    def ships(self) -> bool:
        """Whether the master's sample stands for this shard (:attr:`resampled`), not the
        worker's window: not in a sampled first pass's window (:attr:`fresh_share`) nor in a
        :attr:`calibrated_exact` one."""
        return self.resampled and not self.fresh_share and not self.calibrated_exact

    @property
    def calibrated_exact(self) -> bool:
        """A window at θ⁰ (no θ counts yet: the skew test cannot decide, :meth:`skewed`) of a
        :attr:`balanced` shard: exact sums, no estimate, the stratum left on for later
        windows (module notes, "The skew test at θ⁰").  Its points are a uniform sample of a
        shuffled shard labelled at θ⁰ -- FSPV's sampled calibration trains the same share of
        every shard --, so exact sums are Lloyd's step on them, as n/m · F would be; a
        straggler asleep after it leaves only its few trained points at θ⁰ in θ, where n/m ·
        F would freeze its whole shard there; and no shard costs the master's re-labelling
        (the master's sample, which sorted shards still take).

        Only in FSPV's sampled calibration (:attr:`calibrating`): any other window at θ⁰
        (FSPB's, a whole pass's) is not an equal share of every shard, and a straggler asleep
        in it would leave its few points at θ⁰ to stand for its shard, so it keeps its
        estimate.  The shards are shuffled wherever a stratum exists (``FSPWorker.attach``
        makes one only with ``shuffle``)."""
        ref = self.reference
        return self.balanced and self.calibrating and (ref is None or ref.sum() <= 0)

    @property
    def wants_sums(self) -> bool:
        """Whether a sampled block's fresh sums can be used: not where the master's sample
        stands for the shard (:attr:`ships`) nor in a :attr:`calibrated_exact` window; those
        windows need their class counts only (the skew test, :data:`MIN_POINTS`)."""
        return not (self.ships or self.calibrated_exact)

    @property
    def done(self) -> bool:
        """Exact sums for good and no correction left in θ: a block has nothing to sample
        and no piece to send (``KMeans.update_block`` skips the stratum then)."""
        return (self.off or self.valid is False or self.total >= self.n) and not self.on

    def wants_sample(self, t: int) -> bool:
        """Whether the next block of iteration ``t`` should be summed into the sample: not
        once the shard's first pass is done or the stratum is off (exact sums from then on,
        so a fast worker pays for the sample during its first pass only)."""
        if self.valid is False or self.off or self.total >= self.n:
            return False
        return t != self.t or self.sampled < SAMPLE_CAP

    def screen(self, t: int, counts: np.ndarray, points: int,
               reference: np.ndarray | None = None) -> bool:
        """Whether a sampled block's fresh sums are needed, judged on its fresh class counts
        before any sum is taken (the skew test reads class shares only).

        A window of at least :data:`MIN_POINTS` fresh points at θ version ``t - 1`` (this
        block's counts with the window's so far) whose class shares are within :data:`SKEW`
        of θ's is a shuffled shard's: the estimate would never be used there, so the
        stratum switches off for good (:attr:`off`, exact sums; the next :meth:`observe`
        takes back any correction sent) and no later block pays for a sample.  Anything
        else -- a skewed window, too few points, no θ counts yet to compare with -- needs
        the sums (the estimate may be used now, or the window pooled later).

        Parameters
        ----------
        t : int
            The iteration the block was trained at.
        counts : ndarray
            The block's points per class at their new state (the ``shares`` key).
        points : int
            The block's points.
        reference : ndarray or None
            θ's estimate of the per-class counts of all the data.
        """
        if reference is not None:
            self.reference = np.asarray(reference, dtype=np.float64)
        if self.shares is None or self.uniform:
            return True
        window = counts
        if t == self.t and self.shares in self.fresh:
            window = self.fresh[self.shares] + counts
            points += self.sampled
        if points < MIN_POINTS or self.skewed({self.shares: window}, points):
            return True
        self.off = True
        return False

    def observe(self, t: int, points: int, delta: dict[str, np.ndarray],
                fresh: dict[str, np.ndarray] | None = None, moved: int = 0,
                first_visits: int = 0, reference: np.ndarray | None = None
                ) -> dict[str, np.ndarray]:
        """Record one block of iteration ``t`` and return the correction's piece to emit.

        Parameters
        ----------
        t : int
            The iteration (θ version + 1) the block was trained at.
        points : int
            The block's points.
        delta : dict
            The block's exact changes of the statistics (the keys the correction has).
        fresh : dict or None
            The block's points' statistics at their new state, or None when the block was
            not sampled (:meth:`wants_sample`).
        moved : int
            Of the sampled points, those whose state changed (a first visit counts), kept
            with the sample as a record.  No rule reads it: the sample is taken during the
            first pass only, where every point is a first visit and moves, so a "labels
            stopped moving" rule (``bench/basin_sim.py``'s hybrid, which samples every pass)
            could never end the correction here -- the first pass's end does (module notes).
        first_visits : int
            Of the sampled points, those never trained before (the first block decides
            whether E can be the shard's sums: all of them must be).
        reference : ndarray or None
            θ's estimate of the per-class counts of all the data (the ``shares`` key), for
            the skew test.

        Returns
        -------
        dict
            The correction's piece to send with the block: one array per key of ``delta``
            (the pieces sent add up to the current correction), and ``"active"``, a
            1-element array: +1 where the correction turned into an estimate with this block,
            -1 where it turned back into zeros, else 0 (θ counts the strata on); and
            ``"shipped"``, likewise for :attr:`shipped` (the master's sample stands for the
            shard: K-means adds or takes back its weight n in θ's ``stratum_shards``).  All
            zeros while not :attr:`armed` (nothing recorded).
        """
        if not self.armed:
            piece = {k: np.zeros_like(np.asarray(v, dtype=np.float64)) for k, v in delta.items()}
            piece["active"], piece["shipped"] = np.zeros(1), np.zeros(1)
            return piece
        if self.valid is None:
            self.valid = fresh is not None and first_visits == points
        self._record(t, points, fresh, moved, reference)
        for k, v in delta.items():
            self.exact[k] = self.exact[k] + v if k in self.exact else np.array(v, copy=True)
            if k not in self.emitted:
                self.emitted[k] = np.zeros_like(self.exact[k])
        target, on = self._target()
        shipped = on and self.ships  # as _target chose
        piece = {k: target[k] - self.emitted[k] for k in delta}
        piece["active"] = np.array([float(on) - float(self.on)])
        piece["shipped"] = np.array([float(shipped) - float(self.shipped)])
        self.emitted, self.on, self.shipped = target, on, shipped
        return piece

    def _record(self, t: int, points: int, fresh: dict[str, np.ndarray] | None, moved: int,
                reference: np.ndarray | None) -> None:
        """The block in iteration ``t``'s window: its points, and where it was sampled its
        fresh statistics (the window the estimate is taken on; a new iteration pools the
        last window, :data:`POOL`); θ's class counts for the skew test.  What every
        stratum's :meth:`observe` records, whatever its pieces."""
        if reference is not None:
            self.reference = np.asarray(reference, dtype=np.float64)
        if t != self.t:
            if self.sampled:
                self.windows = [*self.windows, (self.fresh, self.sampled, self.moved)][-POOL:]
            self.t, self.points, self.sampled, self.moved = t, 0, 0, 0
            self.fresh = {}
        self.points += points
        self.total += points
        if fresh is not None:
            self.sampled += points
            self.moved += moved
            for k, v in fresh.items():
                self.fresh[k] = self.fresh[k] + v if k in self.fresh else np.array(v, copy=True)

    def sample(self) -> tuple[dict[str, np.ndarray], int, int]:
        """The sample: this window's fresh points and, while under :data:`MIN_POINTS`, the
        latest earlier windows', newest first (fresh sums, points, moved)."""
        fresh = dict(self.fresh)
        sampled, moved = self.sampled, self.moved
        keys = set(fresh) if sampled else None
        for f, m, mv in reversed(self.windows):
            # not across windows that summed other statistics (K-means: counts only while
            # the master's sample stood for the shard, sums too in a sampled first pass)
            if sampled >= MIN_POINTS or (keys is not None and set(f) != keys):
                break
            keys = set(f)
            for k, v in f.items():
                fresh[k] = fresh[k] + v if k in fresh else v
            sampled, moved = sampled + m, moved + mv
        return fresh, sampled, moved

    def skewed(self, fresh: dict[str, np.ndarray], sampled: int) -> bool:
        """Whether the sample's class shares differ from all the data's by more than
        :data:`SKEW` (total variation): True where nothing tells (no ``shares`` key, no θ
        counts yet)."""
        ref = self.reference
        if self.shares is None or ref is None or ref.sum() <= 0 or self.shares not in fresh:
            return True
        return skew(fresh[self.shares], ref) > SKEW

    def stratified(self, sampled: int) -> bool:
        """Whether a pooled sample of ``sampled`` points replaces the exact sums (module
        notes): the first pass's end, not settled labels, ends the correction (``moved``
        in :meth:`observe`)."""
        return (bool(self.valid) and sampled >= MIN_POINTS and self.points < COVERED * self.n
                and self.total < self.n)

    def correction(self) -> dict[str, np.ndarray]:
        """``n / m · F − E`` while :meth:`stratified`, else zeros."""
        return self._target()[0]

    def _target(self) -> tuple[dict[str, np.ndarray], bool]:
        """The correction and whether it is an estimate (not zeros)."""
        zeros = {k: np.zeros_like(v) for k, v in self.exact.items()}
        if self.off or self.calibrated_exact:
            return zeros, False
        fresh, sampled, _ = self.sample()
        if not self.stratified(sampled) or not (self.uniform or self.skewed(fresh, sampled)):
            return zeros, False
        if self.ships:  # the master's sample at θ stands for it
            return {k: -self.exact[k] for k in self.exact}, True
        scale = self.n / sampled
        return {k: scale * fresh[k] - self.exact[k] for k in self.exact}, True


class GradientStratum(Stratum):
    """A stratum whose estimate stands for the shard at *every* θ: a worker's shard gradient
    (logistic regression, ``LogisticRegression.stratify``; issue 19, Fig. 7), not sums over
    the points' latest states.

    A mini-batch gradient step on the points of an FSP iteration weighs each shard by the
    points it trained: with one straggler on a contiguous shard of sorted data its shard (one
    class) counts ~1/170 of a fast one, and the steps settle the optimum of a reweighted
    objective (docs/sync/fsp.md, "Logistic regression on sorted shards: the stratified
    gradient").  Here the sample is the block's own gradient sums (no extra pass:
    :meth:`wants_sample` always), and its estimate ``n / m · F`` of the shard's sums at the
    current θ is sent as the change of the worker's estimate, so the master's θ holds the sum
    of every worker's latest estimate: a worker that trained nothing since keeps its last one
    there, a shard never drops out.

    The estimate is the whole piece (no exact sums E here).  It stays on past the first
    pass and on a covered window (a fast worker's whole shard: n / m = 1, the exact sums at
    θ); only a window under :data:`MIN_POINTS` pools the latest earlier ones (:data:`POOL`), as a
    stratum's does.  The skew test is K-means' (``shares``: the key of the sample's class
    counts, :meth:`Stratum.screen`): on a shuffled shard the batch mean is unbiased and
    ``n / m`` would only scale a straggler's few points' noise up -- measured, FSPV's interval
    fit then chose 34 ms intervals against 8 ms and ran 215 barriers in 4 s against 357 --,
    so such a shard's estimate switches off for good (zeros), and so does one without a
    reference to test against (θ without ``class_shares``, or all zeros: :meth:`screen`).
    The master then stands the batch mean of the blocks of the workers without an estimate
    for their shards' points, beside the others' estimates (``LogisticRegression``'s
    ``unstrat_*`` keys): one balanced shard among sorted ones leaves theirs on.

    Where a straggler's pool falls under :data:`MIN_POINTS` once it had an estimate, the last
    estimate stays (:meth:`_target`): zeros would put its shard back to the batch's weight for
    that update.  Exact sums are none here, so :meth:`observe` sums no E (each block's work a
    few small additions: ``bench/logreg_stratum_cost.py``).

    No sampled first pass: the skew test runs whatever :meth:`arm`'s ``sampled`` says
    (logistic regression declares no ``Algorithm.sampled_first_pass``), so an algorithm
    that wants both must first decide what a shuffled shard's sampled window sends.
    """

    def __init__(self, n_points: int, shares: str | None = None) -> None:
        super().__init__(n_points, shares=shares)
        #: The skew test found the shard sorted (a window of MIN_POINTS against θ's shares):
        #: its classes do not change without migration, so no block tests (or counts) again
        #: -- the per-block test cost a sorted shard's pass of 1,000-point blocks +0.9x
        #: (2.87 ms against 1.53 without a stratum, docs/sync/fsp.md).
        self.sorted = False
        #: The estimate last sent (:meth:`observe`) is the current window's alone: at least
        #: MIN_POINTS of its points, nothing pooled from an older window (an older θ's), so
        #: every point of it is at the block's θ (``LogisticRegression._fresh_piece``).
        self.fresh_estimate = False

    def skewed(self, fresh: dict[str, np.ndarray], sampled: int) -> bool:
        """:meth:`Stratum.skewed`, remembered once a window of :data:`MIN_POINTS` against
        θ's shares found the shard sorted (:attr:`sorted`)."""
        if self.sorted:
            return True
        ref = self.reference
        told = (self.shares is not None and self.shares in fresh and sampled >= MIN_POINTS
                and ref is not None and ref.sum() > 0)
        out = super().skewed(fresh, sampled)
        self.sorted = bool(told and out)
        return out

    @property
    def done(self) -> bool:
        """Off for good (the skew test) and no estimate left in θ: nothing to send.  Never
        otherwise: the gradient moves with θ, every block's estimate is sent."""
        return self.off and not self.on

    def wants_sample(self, t: int) -> bool:
        """Always: the sample is the block's gradient sums, computed anyway."""
        return True

    def stratified(self, sampled: int) -> bool:
        """Whether the (pooled) sample stands for the shard: :data:`MIN_POINTS` points."""
        return sampled >= MIN_POINTS

    def screen(self, t: int, counts: np.ndarray | None, points: int,
               reference: np.ndarray | None = None) -> bool:
        """:meth:`Stratum.screen`, or True without a look once the shard was found sorted
        (``counts`` may then be None).  With a ``shares`` key but no reference to test
        against -- θ without ``class_shares``, or all zeros (no sample labels) -- the
        stratum switches off for good: the skew test could never decide, and every shard,
        shuffled ones too, would be estimated (n / m scaling a straggler's noise up)."""
        if self.sorted:
            return True
        assert counts is not None
        if reference is not None:
            self.reference = np.asarray(reference, dtype=np.float64)
        if self.shares is not None and (self.reference is None or self.reference.sum() <= 0):
            self.off = True
            return False
        return super().screen(t, counts, points)

    def observe(self, t: int, points: int, delta: dict[str, np.ndarray],
                fresh: dict[str, np.ndarray] | None = None, moved: int = 0,
                first_visits: int = 0, reference: np.ndarray | None = None
                ) -> dict[str, np.ndarray]:
        """:meth:`Stratum.observe` without E (the deltas are zeros here, class notes): the
        window's sample and the pieces only.  With E summed (zeros) and zeros dicts made per
        block, a sorted shard's pass of 1,000-point blocks took 1.44-1.46x a plain pass's;
        1.18-1.29x without (``bench/logreg_stratum_cost.py``)."""
        if not self.armed:  # nothing recorded (class notes of Stratum)
            piece = {k: np.zeros_like(v, dtype=np.float64) for k, v in delta.items()}
            piece["active"] = np.zeros(1)
            return piece
        self._record(t, points, fresh, moved, reference)
        target, on = self._target(delta)
        piece = {k: target[k] - self.emitted[k] if k in self.emitted else target[k]
                 for k in delta}
        piece["active"] = np.array([float(on) - float(self.on)])
        self.emitted, self.on = target, on
        return piece

    def _target(self, delta: dict[str, np.ndarray] | None = None
                ) -> tuple[dict[str, np.ndarray], bool]:
        """The estimate ``n / m · F`` of the pooled sample and True; where the pool falls
        under :data:`MIN_POINTS` (a straggler's few points an iteration, :data:`POOL`
        windows) the last estimate sent, kept -- not zeros, which would put the shard's
        gradient back to the batch's weight for that update (a flicker) --; zeros (False)
        before any estimate or once the skew test found the shard shuffled."""
        keys = delta if delta is not None else self.emitted
        self.fresh_estimate = False
        if not self.off:
            fresh, sampled, _ = self.sample()
            if self.stratified(sampled) and self.skewed(fresh, sampled):
                self.fresh_estimate = sampled == self.sampled  # sample() pooled nothing
                scale = self.n / sampled
                return {k: scale * fresh[k] for k in keys}, True
            if self.on:
                return self.emitted, True
        return {k: np.zeros_like(v) for k, v in keys.items()}, False


class PassStratum(Stratum):
    """A stratum whose estimate is the shard's first pass so far: the sums of the ``m`` points
    trained once, scaled by ``n / m`` (Horvitz-Thompson: a shuffled shard's first ``m``
    points are a uniform sample of it), sent as the correction ``(n/m − 1) · E`` while the
    first pass runs (GMM, ``GaussianMixture.stratify``; issue 19, Fig. 7).

    Exact incremental EM weighs each shard by the points it trained: with one straggler on a
    contiguous shard of sorted data, its components hold the weight of the points it has
    trained, not of its shard, and θ reaches the converged objective only as its first pass
    ends.  GMM's M-step is homogeneous of degree 0 in the statistics (weights ``nk / Σ nk``,
    means ``sx / nk``, variances from ``sxx / nk``), so shards covered alike are left as
    they are (every shard at the same share: FSPV's sampled calibration, shuffled shards)
    and only a shard behind is weighed up to its size.  Measured (``flegel paper --quick``'s
    GMM on contiguous shards, the straggler 300-1,000 points a barrier, the fast workers a
    pass; offline, the algorithm's own kernels): the exact objective reached Fig. 7's target
    (converged + 1e-5) at 95-100 % of the straggler's first pass with exact sums, at 67-71 %
    with this estimate (docs/sync/fsp.md, "GMM on sorted shards: the first pass weighed up").

    No fresh sums (:meth:`wants_sample` never): ``E``, the sum of the deltas sent, is the
    visited points' sums, each at the θ it was last trained at, as exact incremental EM's;
    so no skew test either (no class counts to test; a shard covered like the others is not
    changed).  The correction ends (zeros, taken back) with the first pass, as
    :meth:`Stratum.stratified`'s; a shard whose first block held trained points keeps exact
    sums (E would not be the shard's, :attr:`Stratum.valid`); below :data:`MIN_POINTS`
    trained points none stands for the shard.
    """

    def wants_sample(self, t: int) -> bool:
        """Never: the estimate is the exact sums E scaled (class notes)."""
        return False

    def observe(self, t: int, points: int, delta: dict[str, np.ndarray],
                fresh: dict[str, np.ndarray] | None = None, moved: int = 0,
                first_visits: int = 0, reference: np.ndarray | None = None
                ) -> dict[str, np.ndarray]:
        """:meth:`Stratum.observe` without fresh sums: the first block decides whether E
        is the shard's sums on ``first_visits`` alone (every point of it untrained)."""
        return super().observe(t, points, delta, {} if fresh is None else fresh, moved,
                               first_visits, reference)

    def _target(self) -> tuple[dict[str, np.ndarray], bool]:
        """``(n/m − 1) · E`` while the first pass runs on at least :data:`MIN_POINTS`
        points of a valid stratum, else zeros."""
        m = self.total
        if not self.valid or m < MIN_POINTS or m >= self.n:
            return {k: np.zeros_like(v) for k, v in self.exact.items()}, False
        scale = self.n / m - 1.0
        return {k: scale * v for k, v in self.exact.items()}, True
