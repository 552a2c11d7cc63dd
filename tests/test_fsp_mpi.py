"""FSP under real mpirun (FSP paper Sections 3, 5.2, 5.3)."""

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
    job = write_job(tmp / "job.yaml", algorithm="kmeans",
                    params={"n_clusters": 5, "init": "c0.npy"}, data={"path": "x.npy"},
                    workers=3, sync={"model": "bsp", "batch": "full"},
                    stop={"max_iterations": 3000, "tolerance": 1e-6, "max_time_s": 30},
                    output={"progress": "none"})
    out = tmp / "bsp"
    mpirun(job, 3, out)
    return job, summary(out)["final_objective"]


@pytest.mark.parametrize("interval, eta", [("fixed", 5), ("binary", None),
                                           ("multistage", None)])
@pytest.mark.parametrize("coordination", ["centralized", "semi"])
def test_fsp_reaches_bsp_objective(blob_job, tmp_path, interval, eta, coordination):
    job, ref = blob_job
    out = tmp_path / "run"
    sets = [f"sync={{model: fsp, interval: {interval}, coordination: {coordination}, "
            f"probe_ms: 20}}"]
    if eta is not None:
        sets.append(f"sync.eta_ms={eta}")
    mpirun(job, 3, out, *sets)
    s = summary(out)
    assert s["final_objective"] == pytest.approx(ref, rel=5e-3)
    assert s["sync"]["interval"] == interval and s["coordination"] == coordination
    ev = events(out)
    assert all("eta_ms" in e for e in ev)
    if interval == "fixed":
        assert {e["eta_ms"] for e in ev[1:]} == {5.0}


def test_em_objective_never_increases_under_fsp(blob_job, tmp_path):
    """Theorem 2: with consistent θ at every barrier, EM never makes f(θ) worse."""
    job, _ = blob_job
    out = tmp_path / "run"
    mpirun(job, 3, out, "sync={model: fsp, interval: fixed, eta_ms: 2, coordination: semi}",
           "output.trace_points=100000", "stop.max_iterations=150", "stop.tolerance=null")
    trace = [f for _, f in summary(out)["objective_trace"]]
    assert len(trace) >= 100
    diffs = np.diff(trace)
    assert np.all(diffs <= 1e-9 * abs(trace[0])), diffs.max()


@pytest.mark.parametrize("coordination", ["centralized", "semi"])
def test_flexible_barrier_is_prompt_with_a_straggler(blob_job, tmp_path, coordination):
    """One worker suspended 50 ms per 1,000 points: every barrier still completes within a
    block time plus messaging (the suspended worker commits what it has)."""
    job, _ = blob_job
    out = tmp_path / "run"
    mpirun(job, 3, out, f"sync={{model: fsp, interval: fixed, eta_ms: 20, "
                        f"coordination: {coordination}}}",
           "stragglers=[{pattern: injected, tau_ms: 50, every: 1000, workers: [2]}]",
           "stop.max_iterations=40", "stop.tolerance=null")
    ev = events(out)
    spreads = [e["spread_s"] for e in ev]
    # One block is ~1 ms; allow generously for messaging on an oversubscribed 2-core machine
    # (4 ranks on 2 cores: a rank may wait a scheduler slice before it runs).
    assert max(spreads) < 0.05, spreads
    assert np.median(spreads) < 0.01, spreads
    s = summary(out)
    assert s["stragglers"][0]["rank"] == 2
    assert s["per_worker"][1]["slowed_s"] > 0.3 * s["wall_time_s"]
    assert s["per_worker"][0]["slowed_s"] == 0 and s["per_worker"][2]["slowed_s"] == 0
    # The straggler still contributes: its points reach the barriers.
    assert sum(e["workers"]["points"][1] for e in ev) > 0


def test_semi_centralized_narrows_spread(blob_job, tmp_path):
    job, _ = blob_job
    spread = {}
    for coordination in ("centralized", "semi"):
        out = tmp_path / coordination
        mpirun(job, 3, out, f"sync={{model: fsp, interval: fixed, eta_ms: 2, "
                            f"coordination: {coordination}}}",
               "stragglers=[{pattern: persistent, factor: 4, workers: [3]}]",
               "stop.max_iterations=60", "stop.tolerance=null", "runtime.block_ms=3")
        ev = events(out)[10:]
        spread[coordination] = float(np.median([e["spread_s"] for e in ev]))
        if coordination == "semi":
            offsets = np.array([e["offsets_ms"] for e in ev])
            assert offsets.min() >= 0 and offsets.max() <= 1.0  # δᵢ ≤ η/2
    # Semi-centralized reports arrive at least as close together (the benchmark measures how
    # much closer on a given machine; here we only guard against a regression).
    assert spread["semi"] <= 1.5 * spread["centralized"] + 2e-3, spread


def test_full_pass_triggers_early_barrier(blob_job, tmp_path):
    job, _ = blob_job
    out = tmp_path / "run"
    mpirun(job, 3, out, "sync={model: fsp, interval: fixed, eta_ms: 100000}",
           "stop.max_iterations=5", "stop.tolerance=null")
    ev = events(out)
    assert len(ev) == 5
    # With an endless η every iteration ends when a worker completes a pass.
    assert all("pass" in e["workers"]["reason"] for e in ev)
    assert max(e["time_s"] for e in ev) < 10
