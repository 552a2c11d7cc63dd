"""Run-time block sizing: a block should take about one millisecond (DESIGN §3).

That bounds how late a worker answers a flexible barrier (one block) while keeping the
per-block Python overhead (~tens of µs) a few percent of the work.
"""

from __future__ import annotations


class BlockSizer:
    """Choose the number of points per block from the measured cost per point.

    Parameters
    ----------
    target_s : float
        Desired compute time of one block.
    initial : int
        Size of the first block, before anything is measured.
    smoothing : float
        Weight of the newest measurement in the exponential moving average.
    """

    def __init__(self, target_s: float = 1e-3, initial: int = 64, smoothing: float = 0.3,
                 min_size: int = 1, max_size: int = 1 << 20) -> None:
        self.target_s = target_s
        self.size = initial
        self.smoothing = smoothing
        self.min_size = min_size
        self.max_size = max_size
        self.per_point_s: float | None = None
        self._delay_s = 0.0
        self._points = 0

    def observe(self, points: int, seconds: float, delay_s: float = 0.0) -> None:
        """Record that ``points`` took ``seconds`` of compute and caused ``delay_s`` of
        straggler suspension; update :attr:`size`.

        A slowed worker's blocks shrink with its long-run suspension per point, so its
        blocks too take about ``target_s`` in all and it answers barriers as promptly.
        """
        if points <= 0 or seconds <= 0:
            return
        cost = seconds / points
        a = self.smoothing
        prev = self.per_point_s
        self.per_point_s = cost if prev is None else (1 - a) * prev + a * cost
        self._delay_s += delay_s
        self._points += points
        per_point = self.per_point_s + self._delay_s / self._points
        # Grow at most 4x per block so one badly timed small block cannot jump to a huge size.
        want = self.target_s / per_point
        self.size = int(max(self.min_size, min(self.max_size, want, 4 * self.size)))

    @property
    def block_s(self) -> float:
        """Estimated compute time of one block."""
        return 0.0 if self.per_point_s is None else self.per_point_s * self.size
