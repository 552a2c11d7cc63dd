"""ASP, SSP, DSSP, SpecSync and ElasticBSP: the push models under real mpirun, their
controllers in-process, and their option checks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from flegel.cli import main
from flegel.sync.dssp import synchronization_controller
from flegel.sync.specsync import tune
from tests.conftest import events, mpirun, summary, write_job

STRAGGLER = [{"pattern": "injected", "tau_ms": 5, "every": 1000, "workers": [1]}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Well-separated blobs and centres near the true ones: every model finds one optimum."""
    root = tmp_path_factory.mktemp("async")
    x, y = make_blobs(20_000, n_features=4, centers=4, cluster_std=1.5, random_state=5)
    np.save(root / "x.npy", x)
    np.save(root / "c0.npy", np.array([x[y == k][0] for k in range(4)]) + 0.5)
    return root


def _job(root, name: str, sync: dict, workers: int = 4, stragglers=STRAGGLER):
    return write_job(root / f"{name}.yaml", algorithm="kmeans",
                     params={"n_clusters": 4, "init": "c0.npy"}, data={"path": "x.npy"},
                     workers=workers, sync=sync,
                     stop={"max_iterations": 3000, "tolerance": 1e-6, "max_time_s": 30},
                     output={"progress": "none"}, stragglers=stragglers)


def _run(root, name: str, sync: dict, workers: int = 4) -> tuple[dict, list[dict]]:
    out = root / f"run-{name}"
    mpirun(_job(root, name, sync, workers), workers, out, timeout=90)
    return summary(out), events(out)


@pytest.fixture(scope="module")
def reference(data) -> float:
    """BSP full batch on the same job: the objective every model must reach."""
    s, _ = _run(data, "bsp", {"model": "bsp", "batch": "full"})
    assert s["converged"]
    return s["final_objective"]


# ------------------------------------------------------------------ model-specific checks
def _pushes(ev):
    return [e for e in ev if "rank" in e]


def check_asp(s, ev, sync):
    pushes = _pushes(ev)
    assert s["pushes"] == len(pushes) == s["theta_versions"]
    assert s["iterations"] == s["pushes"] // 4  # n pushes = one iteration
    assert [e["t"] for e in pushes] == list(range(1, len(pushes) + 1))
    assert all(e["points"] <= sync["batch"] for e in pushes)
    # Without a bound the straggler falls behind: its updates are stale.
    assert s["staleness"]["max"] > 0 and s["clock_gap"]["max"] > 3


def check_ssp(s, ev, sync):
    assert s["clock_gap"]["max"] <= sync["s"]
    assert max(e["gap"] for e in _pushes(ev)) <= sync["s"]
    held = {w["rank"]: w["held_s"] for w in s["push_stats"]}
    assert max(held[r] for r in (2, 3, 4)) > held[1]  # fast workers wait for the straggler


def check_dssp(s, ev, sync):
    assert max(e["gap"] for e in _pushes(ev)) <= sync["s_upper"]
    assert s["clock_gap"]["max"] <= sync["s_upper"]
    assert s["r_star"]["decisions"] > 0
    assert all(0 <= r <= sync["s_upper"] - sync["s_lower"] for r in map(int, s["r_star"]["counts"]))


def check_elastic(s, ev, sync):
    barriers = [e for e in ev if "barrier" in e]
    assert len(barriers) == s["barriers"] >= 2
    for i, e in enumerate(ev):
        if "barrier" not in e:
            continue
        assert len(e["iterations"]) == 4 and min(e["iterations"]) >= 2  # monitoring phase
        assert e["wait_s"] >= 0 and e["predicted_wait_s"] >= 0
        # Every worker's next work starts from the θ of the barrier.
        first: dict[int, int] = {}
        for f in ev[i + 1:]:
            if "rank" in f:
                first.setdefault(f["rank"], f["version"])
        assert all(v == e["version"] for v in first.values()), (e, first)
        assert len(first) == 4 or e is barriers[-1]


def check_specsync(s, ev, sync):
    assert s["base"] == "asp" and s["adaptive"] and s["tunings"] > 0


MODELS = {
    "asp": ({"model": "asp", "batch": 500}, check_asp),
    "ssp": ({"model": "ssp", "batch": 500, "s": 2}, check_ssp),
    "dssp": ({"model": "dssp", "batch": 500, "s_lower": 1, "s_upper": 6}, check_dssp),
    "specsync": ({"model": "specsync", "batch": 500}, check_specsync),
    "elastic": ({"model": "elastic", "batch": 500, "r": 15}, check_elastic),
}


@pytest.mark.mpi
@pytest.mark.parametrize("model", list(MODELS))
def test_model_reaches_bsp_objective(data, reference, model):
    sync, check = MODELS[model]
    s, ev = _run(data, model, sync)
    assert s["final_objective"] == pytest.approx(reference, rel=0.01)
    assert s["converged"], s["stop_reason"]
    assert s["stragglers"][0]["rank"] == 1
    check(s, ev, sync)


@pytest.mark.mpi
def test_ssp_two_workers_bound(data, reference):
    s, ev = _run(data, "ssp2", {"model": "ssp", "batch": 1000, "s": 0}, workers=2)
    # s = 0: no worker ever starts an iteration ahead of the other.
    assert s["clock_gap"]["max"] == 0
    assert abs(s["push_stats"][0]["pushes"] - s["push_stats"][1]["pushes"]) <= 1
    assert s["final_objective"] == pytest.approx(reference, rel=0.01)


@pytest.mark.mpi
def test_specsync_aborts_straggler_work(data, reference):
    # Aggressive: any push by another worker within 1 s of the start aborts the iteration.
    s, _ = _run(data, "specsync-aggressive", {"model": "specsync", "batch": 500,
                                             "adaptive": False, "abort_time_ms": 1000,
                                             "abort_rate": 0})
    assert s["aborts"] > 0 and s["aborted_points"] > 0 and s["aborted_s"] > 0
    by_rank = {w["rank"]: w for w in s["aborted_per_worker"]}
    assert by_rank[1]["points"] > 0  # the straggler's slow work is thrown away
    # The workers' own count of discarded points agrees with the master's.
    assert sum(w["aborted_points"] for w in s["per_worker"]) == s["aborted_points"]
    assert s["final_objective"] == pytest.approx(reference, rel=0.01)


@pytest.mark.mpi
def test_stalled_worker_is_named(data):
    # Worker 2 is preempted for 1 s; under SSP worker 1 soon waits for it.
    job = write_job(data / "stall.yaml", algorithm="kmeans",
                    params={"n_clusters": 4, "init": "c0.npy"}, data={"path": "x.npy"},
                    workers=2, sync={"model": "ssp", "batch": 500, "s": 1},
                    stop={"max_iterations": 100_000, "tolerance": None, "max_time_s": 1.5},
                    output={"progress": "none"}, runtime={"stall_warning_s": 0.3},
                    stragglers=[{"pattern": "pause", "at_s": 0.2, "seconds": 1.0,
                                 "workers": [2]}])
    proc = mpirun(job, 2, data / "run-stall", timeout=60)
    assert "worker 2 has not pushed for" in proc.stderr
    assert "worker(s) [1] wait" in proc.stderr


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
    delta, rates, f = tune(pushes, starts, spans, m=4)
    assert delta == pytest.approx(0.012) and f > 0
    # Γ_i = Δ*(m − 1)/(T_i m): the straggler (long span) aborts most readily.
    assert rates[1] == pytest.approx(0.012 * 3 / 4)
    assert rates[2] == pytest.approx(0.012 * 3 / (0.5 * 4))
    assert rates[2] > rates[1]
    # Nobody else pushes soon after a start: no Δ gains freshness, no speculation.
    assert tune([(0.9, 2), (1.0, 1)], {1: 0.0, 2: 0.0}, {1: 1.0, 2: 1.0}, m=2)[0] == 0.0


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
