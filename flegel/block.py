"""Blocks of points: the unit of work the runtime schedules (README, Writing an algorithm)."""

from __future__ import annotations

from collections.abc import KeysView
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Block:
    """A block of consecutive points of a worker's shard, with their state.

    Attributes
    ----------
    x : ndarray of shape (b, d)
        The points' features (a view of the shard where possible).
    y : ndarray of shape (b,) or None
        Labels, for labelled data.
    state : dict of str to ndarray
        Per-point state arrays of length b; writes are kept (views, or written back by the
        runtime when the block had to be gathered).
    halt : ndarray of bool, shape (b,)
        Set ``halt[i] = True`` to vote point i to halt (exclude it from later iterations).
    """

    x: np.ndarray
    y: np.ndarray | None
    state: dict[str, np.ndarray]
    halt: np.ndarray

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def point(self, i: int) -> Any:
        """Return point i as features, or ``(features, label)`` for labelled data."""
        return self.x[i] if self.y is None else (self.x[i], self.y[i])

    @classmethod
    def from_arrays(
        cls, x: np.ndarray, y: np.ndarray | None = None,
        state: dict[str, np.ndarray] | None = None,
    ) -> Block:
        """Build a block over whole arrays (evaluation, tests, the serial runner)."""
        return cls(x, y, dict(state or {}), np.zeros(x.shape[0], dtype=bool))


class PointState:
    """One point's view of the per-point state arrays: ``state["label"] = 3`` writes back."""

    __slots__ = ("_arrays", "_i")

    def __init__(self, arrays: dict[str, np.ndarray], i: int) -> None:
        self._arrays = arrays
        self._i = i

    def __getitem__(self, key: str) -> Any:
        return self._arrays[key][self._i]

    def __setitem__(self, key: str, value: Any) -> None:
        self._arrays[key][self._i] = value

    def __contains__(self, key: str) -> bool:
        return key in self._arrays

    def keys(self) -> KeysView[str]:
        return self._arrays.keys()
