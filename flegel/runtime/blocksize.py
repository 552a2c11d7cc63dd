"""Run-time block sizing from a fitted cost model: time = a + b·n (issue 14; README).

A block of ``n`` points costs a fixed ``a`` per kernel call (Python and dispatch overhead:
tens of µs on the CPU; a kernel launch and transfers on a GPU: about 6 ms) plus ``b`` per
point.  :class:`BlockSizer` fits both terms to the blocks it has timed (:class:`CostModel`)
and sizes the next block so that

* a block takes at least ``target_s`` (``runtime.block_ms``),
* the fixed cost is at most ``fixed_share`` (15% by default) of a block's time, which takes
  blocks of ``a / fixed_share`` seconds when ``a`` is large,
* and a block takes at most ``max_block_s``.

The trade: a worker answers the master's signals (a flexible barrier, a stop) between blocks,
so one block's time is how late it may answer.  Bounding the fixed cost's share makes blocks
longer when calls are expensive; the cap keeps barriers prompt and wins over the share, except
that a block always does at least as much work as its fixed cost (share <= 50%), however
expensive the calls.  Defaults per device (:data:`DEVICES`): on the CPU, a 5 ms per-call cost
gives 33 ms blocks (cap 50 ms); on a GPU the cap is 250 ms.

To tell ``a`` from ``b`` the sizer needs blocks of different sizes: it alternates the size it
asks for between 2/3 and 4/3 of the nominal one while the fixed cost sets the block time
(0.9 and 1.1 while ``target_s`` does; the mean is the nominal size), so the fit never
degenerates once sizes have settled.

A sizer may start from a cost measured before training instead of ``initial``
(:meth:`BlockSizer.seed`: FSP, :mod:`flegel.sync.seeded`): its first block is then the size
it aims at, and it adapts from that block's timing on as above.

Fixed blocks from the same model (BSP)
--------------------------------------
BSP cuts an iteration into blocks of one fixed size, so that a worker sums its points in the
same order in every run (bit-for-bit determinism, :mod:`flegel.sync.bsp`); a timed choice
after every block would break that.  Fixed costs per call still matter there (issue 23,
item 3: a GPU launch of ~5 ms): with 16,384-point blocks an algorithm of 5 ms a call and
0.25 µs a point spends 40-55% of its time in calls.  So the size is chosen once,
before training, from the same ``a + b·n`` model: :func:`measure_call_cost` times the kernel
on a few sizes at warm-up (the fastest of three calls each: preemption only adds time), and
:func:`fixed_block` turns ``a`` and ``b`` into the block that keeps ``a`` to
``fixed_share`` of a block (the cap on a block's time as above), *rounded to a power of two*
(the nearest, in log scale) and never below a floor (BSP's 16,384).  The coarse grid makes
the choice the same in every run unless a measurement falls on the other side of a boundary
(a factor of √2 away from the ideal size); the chosen size is recorded in ``summary.json``,
and setting it (``sync.block``) replays a run bit for bit.  Most algorithms' per-call cost
is tens of µs, far below the floor's share: for them the block is the floor, whatever the
measurement says.

Choices: measured, not declared -- an algorithm's per-call cost depends on the device, the
data's width and the kernel it runs, which the algorithm cannot know when it is written; the
device's defaults enter through the cap (:data:`DEVICES`: 250 ms blocks on a GPU).  Never
below the floor -- blocks smaller than 16,384 points would only serve promptness (BSP answers
no signal within an iteration) and would change every existing BSP run's bits.  The warm-up
costs a 5 ms-per-call kernel ~0.1-0.3 s once (:data:`BUDGET_S`), a K-means kernel about a
millisecond, and a shard of at most 16,384 points nothing (it is one block anyway).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DEVICES", "BlockSizer", "CostModel", "DeviceProfile", "device_of", "fixed_block",
           "measure_call_cost"]


@dataclass(frozen=True)
class DeviceProfile:
    """A device's defaults for the block sizer.

    Attributes
    ----------
    initial : int
        Points in the first block, before anything is measured (unless the sizer is
        seeded from a warm-up measurement, :meth:`BlockSizer.seed`).
    fixed_s : float
        Guess of the per-call cost ``a`` until blocks of two sizes have been timed.
    max_block_s : float
        Cap on a block's time: how late a worker may answer a signal.
    """

    initial: int
    fixed_s: float
    max_block_s: float


#: Defaults per device: on the CPU a block takes at most 50 ms (unless one call alone takes
#: over 25 ms); a GPU call costs milliseconds, so its blocks may run to 250 ms.
DEVICES: dict[str, DeviceProfile] = {
    "cpu": DeviceProfile(initial=64, fixed_s=0.0, max_block_s=0.05),
    "gpu": DeviceProfile(initial=256, fixed_s=5e-3, max_block_s=0.25),
}


def device_of(algorithm: Any) -> str:
    """Where an algorithm's kernels run: ``"gpu"`` or ``"cpu"``.

    Read from its ``device`` parameter; ``"auto"`` asks the algorithm's array module
    (``xp``: CuPy means the GPU).  Algorithms without one run on the CPU.
    """
    device = getattr(algorithm, "device", "cpu")
    if device == "auto":
        xp = getattr(algorithm, "xp", None)
        return "gpu" if getattr(xp, "__name__", "") == "cupy" else "cpu"
    return "gpu" if device == "gpu" else "cpu"


def _median(values: np.ndarray) -> float:
    """``np.median``'s value, without its first call importing ``numpy.ma`` (13 ms of CPU,
    50 ms at a load of 12: timed inside a worker's first block, it inflated BSPV's
    calibration of the per-point cost 30-fold on a small job; issue 23)."""
    v = np.sort(values, axis=None)
    mid = len(v) // 2
    return float(v[mid]) if len(v) % 2 else float((v[mid - 1] + v[mid]) / 2)


class CostModel:
    """Robust fit of a block's time, ``t = a + b·n`` with ``a >= 0``, over recent blocks.

    The Theil–Sen estimator: ``b`` is the median of the slopes between pairs of timed blocks
    whose sizes differ by at least 10%, ``a`` the median of ``t - b·n``.  Medians, not least
    squares: on shared cores a block is now and then preempted and takes several times its
    cost, and one such block of the largest size would tilt a least-squares line (it has
    the most leverage) for as long as it stays in the window; the medians withstand up to
    ~29% of such blocks (the estimator's breakdown point).  A negative intercept is noise
    around a small ``a``: then ``a = 0`` and ``b`` is the median cost per point.  While the
    sizes do not vary enough to separate the terms, ``a`` keeps its last value (or the
    prior) and ``b`` alone is fitted.

    Parameters
    ----------
    fixed_s : float
        Prior for ``a``, used until blocks of two sizes have been timed.
    window : int
        Blocks the fit uses (the most recent).
    """

    def __init__(self, fixed_s: float = 0.0, window: int = 48) -> None:
        self.fixed_s = fixed_s
        self.point_s: float | None = None
        self._n: deque[float] = deque(maxlen=window)
        self._t: deque[float] = deque(maxlen=window)

    def __len__(self) -> int:
        return len(self._n)

    def add(self, n: float, t: float) -> None:
        """Record one timed block: ``n`` points took ``t`` seconds (fitted by :meth:`fit`)."""
        self._n.append(float(n))
        self._t.append(float(t))

    def predict(self, n: float) -> float:
        """Predicted seconds of a block of ``n`` points (0 before any fit)."""
        return 0.0 if self.point_s is None else self.fixed_s + self.point_s * n

    def fit(self) -> tuple[float, float]:
        """Fit ``a`` and ``b`` (kept in :attr:`fixed_s`, :attr:`point_s`) to the window.

        Returns
        -------
        a, b : float
            Fixed cost per call and cost per point, seconds.
        """
        if not self._n:
            raise ValueError("CostModel.fit needs at least one timed block")
        n, t = np.array(self._n), np.array(self._t)
        # Pairs (i, j) with n_i larger than n_j by at least 10% of n_i.
        dn = n[:, None] - n[None, :]
        pairs = dn >= 0.1 * n[:, None]
        a = self.fixed_s
        if pairs.any():
            dt = t[:, None] - t[None, :]
            b = _median(dt[pairs] / dn[pairs])
            a = _median(t - b * n)
            if a < 0 or b <= 0:  # noise around a small a: all of it is per point
                a, b = 0.0, _median(t / n)
        else:  # one size: a keeps its last value (at most the fastest block)
            a = min(a, float(t.min()))
            b = _median((t - a) / n)
            if b <= 0:
                a, b = 0.0, _median(t / n)
        self.fixed_s, self.point_s = a, b
        return a, b


class BlockSizer:
    """Choose the number of points per block from the fitted cost ``a + b·n``.

    Parameters
    ----------
    target_s : float
        Least compute time of one block (``runtime.block_ms``).
    initial : int, optional
        Size of the first block (default: the device's).
    fixed_share : float
        Most of a block's time the per-call cost ``a`` may take (when the cap allows).
    max_block_s : float, optional
        Cap on a block's time (default: the device's); never below ``target_s``.
    device : {"cpu", "gpu"}
        Whose defaults (:data:`DEVICES`) to use.
    window : int
        Timed blocks the fit uses (the most recent).
    min_size, max_size : int
        Bounds on the block size.
    """

    #: The size asked for alternates between (1 - d) and (1 + d) times the nominal one, so
    #: blocks of two sizes separate a from b: d = DITHER while the fixed cost sets the block
    #: time (a must be known well), QUIET_DITHER while ``target_s`` does (a only has to be
    #: watched, and blocks of even length keep the points per barrier interval even).
    DITHER = 1.0 / 3.0
    QUIET_DITHER = 0.1
    #: Blocks fitted after every block at the start (the size grows 4x per fit) ...
    EAGER_FITS = 8
    #: ... and then after this much compute: a fit costs tens of µs, a few percent of a 1 ms
    #: block if done after each.
    REFIT_S = 0.02

    def __init__(self, target_s: float = 1e-3, initial: int | None = None,
                 fixed_share: float = 0.15, max_block_s: float | None = None,
                 device: str = "cpu", window: int = 48,
                 min_size: int = 1, max_size: int = 1 << 20) -> None:
        if not 0 < fixed_share < 1:
            raise ValueError(f"fixed_share must be in (0, 1), found {fixed_share}")
        if device not in DEVICES:
            raise ValueError(f"device must be one of {sorted(DEVICES)}, found {device!r}")
        profile = DEVICES[device]
        self.target_s = target_s
        self.fixed_share = fixed_share
        self.max_block_s = max(target_s, profile.max_block_s if max_block_s is None
                               else max_block_s)
        self.min_size = min_size
        self.max_size = max_size
        self.model = CostModel(profile.fixed_s, window)
        self.nominal = max(min_size, min(max_size, profile.initial if initial is None
                                         else initial))
        self.size = self.nominal
        self._flip = False
        self._delay_s = 0.0
        self._points = 0
        self._fits = 0
        self._since_fit_s = 0.0

    def observe(self, points: int, seconds: float, delay_s: float = 0.0) -> None:
        """Record that ``points`` took ``seconds`` of compute and caused ``delay_s`` of
        straggler suspension; update :attr:`size`.

        A slowed worker's blocks shrink with its long-run suspension per point, so its
        blocks too take about the block time in all and it answers barriers as promptly.
        """
        if points <= 0 or seconds <= 0:
            return
        self.model.add(points, seconds)
        self._delay_s += delay_s
        self._points += points
        self._since_fit_s += seconds
        if self._fits < self.EAGER_FITS or self._since_fit_s >= self.REFIT_S:
            self.model.fit()
            self._fits += 1
            self._since_fit_s = 0.0
        self._resize()

    def seed(self, fixed_s: float, point_s: float) -> bool:
        """Start from a cost measured before training (issue 19; :func:`measure_call_cost`
        at warm-up, as BSP's block): the first block is the size the sizer aims at for
        ``a = fixed_s`` and ``b = point_s`` instead of the device's ``initial`` (64 points on
        the CPU, then at most 4x a block: FSP's calibration pass took 8-67 blocks against
        BSP's two).

        Only the size and the prior for ``a`` change.  The fit still starts from the blocks
        this worker times (a measurement on worker 1, on a quiet core, is no fit of this
        worker's wall time), and :attr:`point_s`, :attr:`per_point_s` and
        :attr:`slowed_point_s` stay None until its first block, so whatever a policy decides
        on them -- a straggler's delays, known from its first block on -- waits for that
        block as before.  The first block is not dithered; the blocks after it are.  (A
        worker that straggler patterns slow is not seeded:
        :func:`flegel.runtime.worker.seed_sizer`.)  Every worker takes worker 1's cost: a
        worker k times slower on its own (another device, a busier host, denser rows) takes
        its first block in k times ``runtime.block_ms``, and shrinks from its second.  A
        resumed run is not seeded (the sizer is not in the checkpoint): it ramps from
        ``initial`` as before.  Returns whether it seeded (not for a cost that is negative,
        zero per point or NaN).
        """
        if not (fixed_s >= 0 and point_s > 0):  # NaN too: a failed measurement
            return False
        self.model.fixed_s = fixed_s
        self.nominal = self.size = int(max(self.min_size, min(self.max_size,
                                                               self._aim(fixed_s, point_s))))
        return True

    def _aim(self, a: float, b: float) -> float:
        """The nominal size for a per-call cost ``a`` and a per-point cost ``b`` (delays
        included), before the limit on its change per block."""
        # Block time: long enough for the share, capped for promptness; the larger of the
        # two dithered blocks keeps to the cap.  But never less work than the fixed cost
        # (b·n >= a), whatever the cap: the share stays at most 50%.
        goal = max(self.target_s, min(a / self.fixed_share, self.max_block_s))
        want = min((goal - a) / b, (self.max_block_s - a) / (b * (1 + self._dither(a))))
        return max(want, a / b)

    def _dither(self, a: float) -> float:
        """The dither for a per-call cost ``a`` (:attr:`DITHER`)."""
        return self.DITHER if a / self.fixed_share > self.target_s else self.QUIET_DITHER

    def _resize(self) -> None:
        """The nominal size from the model, then the size of the next block (dithered)."""
        a, b = self.fixed_s, self.model.point_s or 0.0
        b += self._delay_s / self._points
        dither = self._dither(a)
        # Change at most 4x per block: one badly timed block (preempted, or early, when the
        # model rests on two or three blocks) can neither blow the size up nor collapse it
        # to sizes too alike to correct the model.
        want = min(max(self._aim(a, b), self.nominal / 4), 4 * self.nominal)
        self.nominal = int(max(self.min_size, min(self.max_size, want)))
        self._flip = not self._flip
        scale = 1 + dither if self._flip else 1 - dither
        self.size = int(max(self.min_size, min(self.max_size, round(self.nominal * scale))))

    @property
    def fixed_s(self) -> float:
        """The fitted per-call cost ``a``, seconds."""
        return self.model.fixed_s

    @property
    def point_s(self) -> float | None:
        """The fitted per-point cost ``b``, seconds (None before any block)."""
        return self.model.point_s

    @property
    def per_point_s(self) -> float | None:
        """Mean compute time per point of a block of the nominal size, ``(a + b·n) / n``
        (None before any block): what a policy divides a time budget by to get points."""
        if self.point_s is None:
            return None
        return self.fixed_s / self.nominal + self.point_s

    @property
    def slowed_point_s(self) -> float | None:
        """:attr:`per_point_s` plus the long-run straggler suspension per point, as
        :meth:`_resize` counts it (None before any block): what a point costs a slowed worker
        in wall time, by which FSP judges whether its pass is short (``FSPWorker``)."""
        per_point = self.per_point_s
        if per_point is None:
            return None
        return per_point + (self._delay_s / self._points if self._points else 0.0)

    @property
    def block_s(self) -> float:
        """Estimated compute time of a block of the nominal size."""
        if self.point_s is None:
            return 0.0
        return self.fixed_s + self.point_s * self.nominal

    @property
    def fixed_fraction(self) -> float:
        """The fixed cost's estimated share of a block of the nominal size."""
        block = self.block_s
        return self.fixed_s / block if block > 0 else 0.0


#: :func:`measure_call_cost`'s schedule: sizes from ``FIRST`` points, ``GROWTH`` times apart,
#: ``REPEATS`` calls each, until a call takes ``SPREAD`` times the smallest one (the
#: per-point cost is then well apart from the fixed one) or ``BUDGET_S`` of calls have been
#: spent.  A 5 ms-per-call kernel at 0.25 µs a point stops at 32,768 points, after ~90 ms.
FIRST, GROWTH, SPREAD, BUDGET_S, REPEATS = 64, 8, 2.0, 0.15, 3


def measure_call_cost(timed: Callable[[int], float], n_max: int,
                      budget_s: float = BUDGET_S) -> tuple[float, float] | None:
    """Fit ``a + b·n`` to kernel calls timed at warm-up.

    Parameters
    ----------
    timed : callable
        ``timed(n)`` runs the kernel once on ``n`` points and returns its seconds.
    n_max : int
        The most points a call may take (the shard's size).
    budget_s : float
        Seconds of calls after which no larger size is tried.

    Returns
    -------
    (a, b) or None
        Fixed cost per call and cost per point, seconds (:class:`CostModel`'s robust fit);
        None when the shard is too small to time two sizes.
    """
    n = min(FIRST, n_max)
    if n_max < 2 * n:
        return None
    model = CostModel(window=64)
    spent, smallest = 0.0, math.inf
    while True:
        times = [timed(n) for _ in range(REPEATS)]
        t = min(times)  # the fastest: the others were disturbed
        spent += sum(times)  # the budget counts every call, disturbed ones too
        model.add(n, t)
        smallest = min(smallest, t)
        # Two sizes at least, whatever the budget: one cannot tell a from b.
        if n >= n_max or t >= SPREAD * smallest or (spent >= budget_s and len(model) > 1):
            break
        n = min(GROWTH * n, n_max)
    return model.fit()


def fixed_block(fixed_s: float, point_s: float, least: int, device: str = "cpu",
                fixed_share: float = 0.15, most: int = 1 << 24) -> int:
    """The fixed block size for a per-call cost ``fixed_s`` and per-point cost ``point_s``.

    The size :class:`BlockSizer` aims at (``fixed_s`` at most ``fixed_share`` of a block,
    a block at most the device's ``max_block_s`` unless a call alone is longer, never less
    work than the fixed cost), rounded to the nearest power of two in log scale and kept in
    ``[least, most]``: ``least`` when the fixed cost is small, as for most algorithms.
    """
    if point_s <= 0:
        return most if fixed_s > 0 else least
    cap_s = DEVICES[device].max_block_s
    goal_s = min(fixed_s / fixed_share, cap_s)
    n = max((goal_s - fixed_s) / point_s, fixed_s / point_s, 1.0)
    size = 2 ** round(math.log2(n))
    return int(min(max(size, least), most))
