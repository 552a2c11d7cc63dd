"""The validated job, typed, and the data it names.

:class:`Job` is built once, by :func:`flegel.job.validate.validate`, from the job file with
every default filled in; the run reads its typed sections (``job.stop.max_time_s``,
``job.output.dir``, ``job.sync.model``) and loads its data through it.  The resolved mapping
(:attr:`Job.doc`) is what a run directory's ``job.yaml`` holds and what ``--resume`` reads
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flegel.job.errors import JobError
from flegel.job.sections import Output, Runtime, Stop, Sync

if TYPE_CHECKING:
    from flegel.api import Algorithm
    from flegel.data import SourceInfo
    from flegel.data.checks import Takes


@dataclass(frozen=True)
class Job:
    """A validated job: every section completed with defaults.

    Attributes
    ----------
    file : Path
        The job file (relative paths in the job are relative to its folder).
    doc : dict
        The resolved job as a mapping: what ``job.yaml`` in the run directory holds.
    algorithm_cls : type
        The :class:`flegel.Algorithm` subclass of ``algorithm``.
    data_info : SourceInfo
        What the validation learned about ``data`` (rows, features, labels).
    name, algorithm, params, data, test_data, workers, seed, stragglers
        The top-level keys, resolved (``params`` a mapping, never null).
    sync, stop, output, runtime : Sync, Stop, Output, Runtime
        The sections, typed.
    """

    file: Path
    doc: dict[str, Any]
    algorithm_cls: type
    data_info: SourceInfo
    name: str | None
    algorithm: str
    params: dict[str, Any]
    data: dict[str, Any]
    test_data: dict[str, Any] | None
    workers: int
    seed: int
    sync: Sync
    stop: Stop
    output: Output
    runtime: Runtime
    stragglers: list[dict[str, Any]]

    @classmethod
    def of(cls, file: Path, doc: dict[str, Any], algorithm_cls: type,
           data_info: SourceInfo) -> Job:
        """The job of a resolved, validated mapping ``doc`` (its typed sections built here).

        Parameters
        ----------
        file : Path
            The job file.
        doc : dict
            The job with every key checked and every default filled in.
        algorithm_cls : type
            The resolved algorithm class.
        data_info : SourceInfo
            What the validation learned about ``data``.

        Returns
        -------
        Job
            The job; ``doc`` is kept as it is, for ``job.yaml``.
        """
        return cls(file=file, doc=doc, algorithm_cls=algorithm_cls, data_info=data_info,
                   name=doc["name"], algorithm=doc["algorithm"], params=doc["params"],
                   data=doc["data"], test_data=doc["test_data"], workers=doc["workers"],
                   seed=doc["seed"], sync=Sync(doc["sync"]["model"], doc["sync"]),
                   stop=Stop(**doc["stop"]), output=Output(**doc["output"]),
                   runtime=Runtime(**doc["runtime"]), stragglers=doc["stragglers"])

    @property
    def base_dir(self) -> Path:
        """The job file's folder, against which relative paths in the job are read."""
        return self.file.parent

    def make_algorithm(self) -> Algorithm:
        """A new instance of the job's algorithm with its ``params``."""
        algorithm: Algorithm = self.algorithm_cls(**self.params)
        return algorithm

    @property
    def takes(self) -> Takes:
        """What the job's algorithm takes as data (its class attributes)."""
        from flegel.data.checks import Takes

        return Takes.of(self.algorithm_cls, self.algorithm)

    def load_shard(self, shard: int, n_shards: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Load one worker's shard of ``data``, its content checked (issue 13, item 5).

        The keys the validation derived from the file (``SourceInfo.resolved``: LIBSVM
        ``n_features``, CSV ``skip_header``) are passed on, so the load does not derive them
        again.

        Parameters
        ----------
        shard, n_shards : int
            This shard's index and the number of shards (workers).

        Returns
        -------
        X, y : numpy.ndarray, numpy.ndarray or None
            As :func:`flegel.data.load_shard`.

        Raises
        ------
        JobError
            Bad data content: NaN or inf, a text cell, a malformed line, labels or negative
            values the algorithm does not take -- naming the file, row and column.
        """
        spec = {**self.data, **self.data_info.resolved}
        return self._load("data", spec, shard, n_shards)

    def load_test_data(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Load the whole of ``test_data``, its content checked like :meth:`load_shard`."""
        if self.test_data is None:
            raise JobError(self.file, "test_data", "", detail="the job has no test_data")
        return self._load("test_data", self.test_data, 0, 1)

    def _load(self, key: str, spec: dict[str, Any], shard: int, n_shards: int
              ) -> tuple[np.ndarray, np.ndarray | None]:
        from flegel.data import DataError, load_shard

        try:
            return load_shard(spec, shard, n_shards, self.base_dir, key=key, takes=self.takes)
        except DataError as exc:
            raise JobError(self.file, key, "", detail=str(exc)) from None

    def check_data(self) -> int:
        """Load and check every worker's shard, one at a time, and ``test_data``.

        What ``flegel validate --data`` does: the checks each worker makes at load, without
        training, in this process (its memory holds one shard at a time).

        Returns
        -------
        int
            The rows checked.

        Raises
        ------
        JobError
            The first problem found, as :meth:`load_shard` words it.
        """
        rows = sum(len(self.load_shard(w, self.workers)[0]) for w in range(self.workers))
        return rows + self.check_test_data()

    def check_test_data(self) -> int:
        """Load and check ``test_data`` (the master does, while the workers load theirs).

        Returns
        -------
        int
            Its rows; 0 without test data.
        """
        return 0 if self.test_data is None else len(self.load_test_data()[0])
