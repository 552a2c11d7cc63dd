"""Synthetic sources behind the reader interface (the generator is :mod:`flegel.data.synthetic`).

Chunks of a synthetic data set are i.i.d., so a contiguous shard generates only its own
chunks: synthetic sources always use the contiguous partition, whatever the spec says.
"""

from __future__ import annotations

import numpy as np

from flegel.data.checks import Bad
from flegel.data.errors import DataError
from flegel.data.formats.base import Reader, TableShape
from flegel.data.partition import Shard
from flegel.data.synthetic import SyntheticSpec, generate_rows, synthetic_shape

__all__ = ["SyntheticReader"]


class SyntheticReader(Reader[SyntheticSpec]):
    """Deterministic generated data, identical whatever the number of shards."""

    name = "synthetic"
    partition = "contiguous"

    def inspect(self, spec: SyntheticSpec) -> TableShape:
        """The shape the spec asks for (nothing is generated)."""
        n, d, has_labels, n_classes = synthetic_shape(spec)
        return TableShape(n, d, has_labels, n_classes)

    def read(self, spec: SyntheticSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray | None]:
        """Generate the shard's rows only (see :func:`flegel.data.synthetic.generate_rows`)."""
        return generate_rows(spec, shard.rows(spec.n_points))

    def content_error(
        self, spec: SyntheticSpec, row: int, bad: Bad, n_features: int, key: str
    ) -> DataError:
        """``synthetic kind K: row R column C ...`` (1-based): the data are generated."""
        where = f"row {row + 1}" + ("" if bad.column is None else f" column {bad.column + 1}")
        return DataError(f"synthetic kind {spec.kind!r}: {where} {bad.problem}", key=f"{key}.kind")
