"""ASP, SSP, DSSP, SpecSync and ElasticBSP: one push model under real mpirun, their
controllers in-process, and their option checks.  Each model's convergence and statistics
run in-process (tests/test_models_inprocess.py, tests/test_policy_push.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from flegel.cli.commands import main
from flegel.sync.dssp import synchronization_controller
from flegel.sync.specsync import tune
from tests.conftest import events, mpirun, summary, write_job


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Well-separated blobs and centres near the true ones: every model finds one optimum."""
    root = tmp_path_factory.mktemp("async")
    x, y = make_blobs(20_000, n_features=4, centers=4, cluster_std=1.5, random_state=5)
    np.save(root / "x.npy", x)
    np.save(root / "c0.npy", np.array([x[y == k][0] for k in range(4)]) + 0.5)
    return root


def _job(root, name: str, sync: dict, workers: int = 4):
    return write_job(root / f"{name}.yaml", algorithm="kmeans",
                     params={"n_clusters": 4, "init": "c0.npy"}, data={"path": "x.npy"},
                     workers=workers, sync=sync,
                     stop={"max_iterations": 3000, "tolerance": 1e-6, "max_time_s": 30},
                     output={"progress": "none"},
                     stragglers=[{"pattern": "injected", "tau_ms": 5, "every": 1000,
                                  "workers": [1]}])


def _pushes(ev):
    return [e for e in ev if "rank" in e]


@pytest.mark.mpi
def test_ssp_bound_and_stalled_worker_under_mpirun(data):
    """A push model over the real transport: worker 2 is preempted for 1 s; under SSP
    (s = 1) worker 1 soon waits for it.  The clock bound holds, the waiting is booked to
    the fast worker, the pause costs exactly its second, and the one stall-warning
    mechanism names the late worker and who waits for it.

    Each push model's convergence to BSP's objective, its statistics (staleness, clock
    gaps, r*, elastic barriers, SpecSync's aborts) and SSP's bound with 2 workers and s = 0
    run in-process in tests/test_models_inprocess.py and tests/test_policy_push.py."""
    job = write_job(data / "stall.yaml", algorithm="kmeans",
                    params={"n_clusters": 4, "init": "c0.npy"}, data={"path": "x.npy"},
                    workers=2, sync={"model": "ssp", "batch": 500, "s": 1},
                    stop={"max_iterations": 100_000, "tolerance": None, "max_time_s": 1.5},
                    output={"progress": "none"}, runtime={"stall_warning_s": 0.3},
                    stragglers=[{"pattern": "pause", "at_s": 0.2, "seconds": 1.0,
                                 "workers": [2]}])
    out = data / "run-stall"
    proc = mpirun(job, 2, out, timeout=60)
    assert re.search(r"worker 2 \(host \S+, pid \d+\) has not reported for", proc.stderr)
    assert "worker(s) [1] wait" in proc.stderr
    s, ev = summary(out), events(out)
    pushes = _pushes(ev)
    assert s["pushes"] == len(pushes) > 0
    assert s["clock_gap"]["max"] <= 1
    assert max(e["gap"] for e in pushes) <= 1
    held = {w["rank"]: w["held_s"] for w in s["push_stats"]}
    assert held[1] > held[2]  # the fast worker waits for the preempted one
    assert [x["rank"] for x in s["stragglers"]] == [2]
    assert s["stragglers"][0]["lost_s"] == pytest.approx(1.0)
    assert np.isfinite(s["final_objective"])


# ------------------------------------------------------------------ controllers, in-process
def test_dssp_controller_figure_2():
    # Fast worker: pushes every 1 s, latest at 10; slowest: every 3.5 s, latest at 9.
    # The slowest pushes next at 12.5, 16, ...; the fast one ends at 10, 11, 12, 13, ...
    # 12 and 13 are both 0.5 from 12.5: the earlier (r* = 2) wins.
    assert synchronization_controller(10.0, 1.0, 9.0, 3.5, r_max=4) == 2
    # An exact match further out (16 = 10 + 6) is chosen when allowed ...
    assert synchronization_controller(10.0, 1.0, 9.0, 3.5, r_max=8) == 6
    # ... and r_max = 0 means: wait now.
    assert synchronization_controller(10.0, 1.0, 9.0, 3.5, r_max=0) == 0


def test_specsync_tuning_speculates_for_the_straggler():
    # Worker 1 starts a long iteration at 0; the three others push right after it.
    pushes = [(0.01, 2), (0.011, 3), (0.012, 4), (0.5, 2), (0.5, 3), (0.5, 4), (1.0, 1)]
    starts = {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    spans = {1: 1.0, 2: 0.5, 3: 0.5, 4: 0.5}
    # T: the mean over the epoch's 7 iterations (the straggler's one, 6 of 0.5 s).
    delta, rates, f = tune(pushes, starts, spans, m=4, mean_span=(1.0 + 6 * 0.5) / 7)
    assert delta == pytest.approx(0.012) and f > 0
    # Γ_i = Δ*(m − 1)/(T_i m): the straggler (long span) aborts most readily.
    assert rates[1] == pytest.approx(0.012 * 3 / 4)
    assert rates[2] == pytest.approx(0.012 * 3 / (0.5 * 4))
    assert rates[2] > rates[1]
    # Nobody else pushes soon after a start: no Δ gains freshness, no speculation.
    assert tune([(0.9, 2), (1.0, 1)], {1: 0.0, 2: 0.0}, {1: 1.0, 2: 1.0}, m=2,
                mean_span=1.0)[0] == 0.0


# ------------------------------------------------------------------ option validation
@pytest.mark.parametrize("sync, key", [
    ({"model": "ssp", "s": -1}, "sync.s"),
    ({"model": "ssp", "s": 1.5}, "sync.s"),
    ({"model": "asp", "batch": 0}, "sync.batch"),
    ({"model": "asp", "overhead": 2}, "sync.overhead"),
    ({"model": "dssp", "s_lower": 5, "s_upper": 2}, "sync.s_upper"),
    ({"model": "dssp", "s_lower": -1}, "sync.s_lower"),
    ({"model": "elastic", "r": 0}, "sync.r"),
    ({"model": "elastic", "method": "magic"}, "sync.method"),
    ({"model": "specsync", "base": "bsp"}, "sync.base"),
    ({"model": "specsync", "adaptive": False}, "sync.abort_time_ms"),
    ({"model": "specsync", "abort_rate": -0.5}, "sync.abort_rate"),
    ({"model": "specsync", "abort_after": 3}, "sync.abort_after"),
])
def test_bad_sync_options(data, capsys, sync, key):
    assert main(["validate", str(_job(data, "bad", sync))]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err


@pytest.mark.parametrize("sync", [
    {"model": "asp"}, {"model": "ssp", "s": 0}, {"model": "dssp"},
    {"model": "specsync", "base": "ssp", "s": 2}, {"model": "elastic", "r": 60},
])
def test_good_sync_options(data, capsys, sync):
    assert main(["validate", str(_job(data, "good", sync))]) == 0
    assert "ok" in capsys.readouterr().out
