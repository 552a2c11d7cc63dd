"""FSP under real mpirun (FSP paper Sections 3, 5.2, 5.3): prompt flexible barriers with a
suspended straggler, over the real transport and its pause signals.

FSP's variants reaching BSP's objective, Theorem 2 (EM never worsens f(θ) under FSP), the
early barrier on a full pass and the semi-centralized straggler run in-process in
tests/test_models_inprocess.py and tests/test_policy_fsp.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def blob_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsp")
    x, _ = make_blobs(200_000, n_features=6, centers=5, cluster_std=1.0, random_state=4)
    np.save(tmp / "x.npy", x)
    np.save(tmp / "c0.npy", x[np.random.default_rng(1).choice(len(x), 5, replace=False)])
    return write_job(tmp / "job.yaml", algorithm="kmeans",
                     params={"n_clusters": 5, "init": "c0.npy"}, data={"path": "x.npy"},
                     workers=3, sync={"model": "bsp", "batch": "full"},
                     stop={"max_iterations": 3000, "tolerance": 1e-6, "max_time_s": 30},
                     output={"progress": "none"})


def test_flexible_barrier_is_prompt_with_a_straggler(blob_job, tmp_path):
    """One worker suspended 150 ms per 1,000 points (it sleeps ~150 ms after each ~1 ms
    block): barriers after the calibration still complete within a block time plus
    messaging, because the suspended worker answers the master's pause signal with what it
    has.  The calibration is a whole pass (issue 19): the straggler is paused once it ran
    WHOLE_PASS_WAIT times as long as the first pass took.

    A straggler that finished its suspension before answering holds the barrier for its
    sleep: about one barrier in eight then spreads over 75 ms (10 and 11 of 80 in two runs
    with the suspension made uninterruptible, at load 11).  Answering promptly, none did
    (0 of 80 in three runs at load 11; medians 12-22 ms at load 11-17).  So the test counts
    the barriers over 75 ms rather than bounding the largest spread or the median: a rank
    descheduled for half a second on a loaded machine spreads one barrier whatever the
    runtime does, and messaging alone took the median past 10 ms at load 15-17 (the
    median does not tell the two apart: 14-22 ms either way).

    Only the barriers at the interval η are counted: FSP's migration is on by default, so
    the calibration is followed by coverage iterations (θ kept until every point was
    trained) and whole passes, which have no timer by design (``UNTIMED_PHASES``; their
    spread is the straggler's block and sleep, 80-240 ms).  How many there are depends on
    where the calibration paused the straggler: 6 to 16 of 80 in four runs at load 8-10,
    where counting them failed the test 2 times in 4."""
    from flegel.sync.fsp import UNTIMED_PHASES, WHOLE_PASS_WAIT

    out = tmp_path / "run"
    mpirun(blob_job, 3, out, "sync={model: fsp, interval: fixed, eta_ms: 20, "
                             "coordination: centralized}",
           "stragglers=[{pattern: injected, tau_ms: 150, every: 1000, workers: [2]}]",
           "stop.max_iterations=80", "stop.tolerance=null")
    ev = events(out)
    calibration = ev[0]
    assert calibration["workers"]["reason"][1] == "signal"
    first = calibration["time_s"] - calibration["barrier_s"]  # the first report's arrival
    assert calibration["spread_s"] < (WHOLE_PASS_WAIT - 1) * first + 0.05
    assert len(ev) == 80
    spreads = np.array([e["spread_s"] for e in ev[1:] if e["phase"] not in UNTIMED_PHASES])
    assert len(spreads) >= 40, [e["phase"] for e in ev]
    # At most 5%: room for descheduled ranks, half what a late straggler causes.
    assert (spreads > 0.075).sum() <= 0.05 * len(spreads), sorted(spreads)[-10:]
    s = summary(out)
    assert s["stragglers"][0]["rank"] == 2
    # The straggler was suspended for longer than it computed (by its 150 ms per 1,000
    # points, nominally hundreds of times longer): it would have held every barrier it
    # reached mid-sleep.  Measured against its own compute time, not the run's wall time,
    # which messaging and start-up lengthen on a loaded machine.
    straggler = s["per_worker"][1]
    assert straggler["slowed_s"] > straggler["compute_s"], straggler
    assert s["per_worker"][0]["slowed_s"] == 0 and s["per_worker"][2]["slowed_s"] == 0
    # Every second of suspension served is counted once (the loop's serve, in iterations
    # and, FSP overlapping, in waits for θ): no more than the pattern imposed, and short of
    # it by at most what was still owed at the stop (a few τ).
    lost = s["stragglers"][0]["lost_s"]
    assert lost - 3 * 0.150 <= straggler["slowed_s"] <= lost + 1e-6, (lost, straggler)
    # The straggler still contributes: its points reach the barriers.
    assert sum(e["workers"]["points"][1] for e in ev) > 0
