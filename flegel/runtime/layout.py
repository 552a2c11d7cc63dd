"""Flat float64 buffers for dicts of arrays, so θ and aggregators travel as NumPy buffers
(upper-case mpi4py calls) instead of pickles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layout:
    """Where each entry of a dict of arrays sits in one flat float64 buffer."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    offsets: tuple[int, ...]
    size: int

    @classmethod
    def of(cls, arrays: dict) -> Layout:
        keys = tuple(sorted(arrays))
        shapes, dtypes, offsets = [], [], []
        pos = 0
        for k in keys:
            a = np.asarray(arrays[k])
            shapes.append(tuple(a.shape))
            dtypes.append(a.dtype.str if a.dtype.kind in "fiub" else "<f8")
            offsets.append(pos)
            pos += int(a.size)
        return cls(keys, tuple(shapes), tuple(dtypes), tuple(offsets), pos)

    def pack(self, arrays: dict, out: np.ndarray) -> np.ndarray:
        """Write ``arrays`` into ``out`` (a float64 buffer of at least ``size``)."""
        for k, shape, off in zip(self.keys, self.shapes, self.offsets):
            a = np.asarray(arrays[k])
            if a.shape != shape:
                raise ValueError(f"entry {k!r} has shape {a.shape}, expected {shape} "
                                 "(θ and aggregators must keep their layout)")
            out[off:off + a.size] = a.ravel()
        return out

    def unpack(self, buf: np.ndarray) -> dict:
        """Return copies of the entries held in ``buf`` (scalars come back as floats)."""
        out = {}
        for k, shape, dt, off in zip(self.keys, self.shapes, self.dtypes, self.offsets):
            n = int(np.prod(shape, dtype=np.int64))
            a = buf[off:off + n].reshape(shape).astype(dt)
            out[k] = float(a) if shape == () else a
        return out

    def zeros(self) -> dict:
        """A dict of zeros with this layout (an empty aggregator)."""
        return self.unpack(np.zeros(self.size))
