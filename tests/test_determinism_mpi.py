"""Determinism under real mpirun: the same job and seed give the same model, bit for bit.

BSP sums the workers' aggregators in rank order and cuts iterations into fixed blocks
(flegel/sync/bsp.py), so nothing in a run depends on timing.  The job is a GMM on four
workers: every point contributes to every statistic in every iteration, so a different
summation order (arrival order at the master, or timed block sizes on a worker) would show
in the last bits of the model.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import mpirun, summary, write_job

pytestmark = pytest.mark.mpi


def _train(tmp_path, name: str, sync: dict) -> tuple[dict[str, np.ndarray], dict]:
    job = write_job(
        tmp_path / f"{name}.yaml", algorithm="gmm",
        params={"n_components": 3, "covariance_type": "diag"},
        data={"source": "synthetic", "kind": "blobs", "n_points": 6000, "n_features": 4,
              "centers": 3, "seed": 3},
        workers=4, seed=7, sync=sync,
        stop={"max_iterations": 8, "tolerance": None},
        output={"progress": "none"})
    out = tmp_path / name
    mpirun(job, 4, out, timeout=180)
    with np.load(out / "model.npz") as archive:
        model = {k: archive[k] for k in archive.files}
    return model, summary(out)


@pytest.mark.parametrize("sync", [
    {"model": "bsp", "batch": "full"},
    {"model": "bsp", "batch": "auto"},
    {"model": "bsp", "batch": 500},
], ids=["full", "auto", "fixed"])
def test_same_job_and_seed_give_the_same_model(tmp_path, sync):
    a, sa = _train(tmp_path, "a", sync)
    b, sb = _train(tmp_path, "b", sync)
    assert sa["iterations"] == sb["iterations"] == 8
    assert sa["batch"] == sb["batch"]
    assert set(a) == set(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert sa["final_objective"] == sb["final_objective"]
    assert sa["online_objective"] == sb["online_objective"]
