"""What every sync model must do, in-process on the simulated clock (tests/fakes.py):
converge to BSP's optimum with θ consistent with the workers' per-point state, end on every
stop criterion with every worker told to stop, and name a silent worker."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.protocol import StopReason
from tests.fakes import Simulation, SimulationCapError

#: Every model and variant: (id, model, options).
CONFIGS = [
    ("bsp-full", "bsp", {"batch": "full"}),
    ("bsp-auto", "bsp", {"batch": "auto"}),
    ("fsp-fixed-centralized", "fsp", {"interval": "fixed", "eta_ms": 1,
                                      "coordination": "centralized"}),
    ("fsp-fixed-semi", "fsp", {"interval": "fixed", "eta_ms": 1, "coordination": "semi"}),
    ("fsp-binary-centralized", "fsp", {"interval": "binary", "coordination": "centralized",
                                       "eta_min_ms": 0.1}),
    ("fsp-binary-semi", "fsp", {"interval": "binary", "coordination": "semi",
                                "eta_min_ms": 0.1}),
    ("fsp-multistage-centralized", "fsp", {"interval": "multistage", "probe_ms": 0.3,
                                           "coordination": "centralized",
                                           "eta_min_ms": 0.1}),
    ("fsp-multistage-semi", "fsp", {"interval": "multistage", "probe_ms": 0.3,
                                    "coordination": "semi", "eta_min_ms": 0.1}),
    ("elastic", "elastic", {"batch": 50}),
    ("asp", "asp", {"batch": 50}),
    ("ssp", "ssp", {"s": 2, "batch": 50}),
    ("dssp", "dssp", {"s_lower": 1, "s_upper": 4, "batch": 50}),
    ("specsync", "specsync", {"adaptive": False, "abort_time_ms": 1.5, "abort_rate": 0.67,
                              "batch": 50}),
    ("specsync-adaptive", "specsync", {"batch": 50}),
]
IDS = [c[0] for c in CONFIGS]
PUSH = {"asp", "ssp", "dssp", "specsync", "elastic"}


def run(model: str, options: dict, **kw) -> Simulation:
    kw.setdefault("slowdown", {3: 3.0})
    kw.setdefault("jitter", 0.1)
    return Simulation(model, options, **kw).run()


@pytest.fixture(scope="module")
def reference() -> float:
    """BSP full batch run to convergence: the objective every model must reach."""
    sim = run("bsp", {"batch": "full"}, stop={"max_iterations": 200, "tolerance": 1e-9})
    assert sim.server.reason == StopReason.CONVERGED
    return sim.objective()


def assert_theta_matches_shards(sim: Simulation) -> None:
    """K-means θ holds, per cluster, the count and sum of the points whose state says they
    are in it: every worker's delta was applied exactly once (none lost, none twice, none
    of an aborted or rolled-back iteration).  Commits that arrived after the stop updated
    their shard but not θ, so they are added back."""
    theta = sim.server.theta
    counts = theta["counts"].copy()
    sums = theta["sums"].copy()
    for a in sim.arrivals:
        if a.late:
            counts += a.agg["counts"]
            sums += a.agg["sums"]
    k = len(counts)
    want_counts = np.zeros(k)
    want_sums = np.zeros_like(sums)
    for w in sim.workers.values():
        labels = w.store.state["label"]
        seen = labels >= 0
        want_counts += np.bincount(labels[seen], minlength=k)
        np.add.at(want_sums, labels[seen], w.store.x[seen])
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(sums, want_sums, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name, model, options", CONFIGS, ids=IDS)
def test_converges_to_bsp_objective(reference, name, model, options):
    sim = run(model, options, stop={"max_iterations": 40})
    assert sim.server.reason == StopReason.MAX_ITERATIONS
    assert sim.objective(sim.theta0) > 1.5 * reference  # a real distance to cover
    assert sim.objective() == pytest.approx(reference, rel=1e-6)
    assert_theta_matches_shards(sim)
    assert sum(sim.server.theta["counts"]) + sum(
        a.agg["counts"].sum() for a in sim.arrivals if a.late) == sum(map(len, sim.shards))


@pytest.mark.parametrize("name, model, options", CONFIGS, ids=IDS)
def test_max_iterations_stops_every_worker(name, model, options):
    sim = run(model, options, stop={"max_iterations": 12})
    srv = sim.server
    assert srv.reason == StopReason.MAX_ITERATIONS
    iterations = sim.policy.pushes // 3 if model in PUSH else srv.version
    assert iterations == 12
    for r in sim.ranks:
        sent = sim.transport.params_to(r)
        assert [p.stop for p in sent].count(True) == 1 and sent[-1].stop
        assert sim.workers[r].finished and srv.workers[r].stopped
        # The worker got the final θ: the one it ends with is the server's.
        final = sim.workers[r].theta
        for key, v in srv.theta.items():
            np.testing.assert_array_equal(final[key], v)
    assert sim.transport.closed and srv.done


def test_tolerance_stops_when_converged(reference):
    sim = run("fsp", {"interval": "fixed", "eta_ms": 1, "coordination": "semi"},
              stop={"max_iterations": 10_000, "tolerance": 1e-6})
    assert sim.server.reason == StopReason.CONVERGED
    assert sim.server.version < 10_000
    # Checks happen once every worker made one more full pass (Section 5.3).
    assert sim.stop_criteria.checks >= 2
    assert min(w.store.passes for w in sim.workers.values()) >= sim.stop_criteria.checks - 1
    assert sim.objective() == pytest.approx(reference, rel=1e-6)


def test_target_objective_stops_at_the_target(reference):
    target = 1.001 * reference
    sim = run("ssp", {"s": 2, "batch": 50}, stop={"max_iterations": 10_000,
                                                  "target_objective": target})
    srv = sim.server
    assert srv.reason == StopReason.TARGET
    assert srv.objective <= target and srv.time_to_target is not None
    assert srv.time_to_target == pytest.approx(srv.train_s)
    assert srv.min_passes() >= 1.0


def test_max_time_stops_on_the_simulated_clock():
    sim = run("bsp", {"batch": "full"}, stop={"max_iterations": 10_000, "max_time_s": 0.02})
    assert sim.server.reason == StopReason.MAX_TIME
    # Checked at each barrier: the run ends within one iteration (a slow pass, 6 ms) of it.
    assert 0.02 <= sim.server.train_s < 0.02 + 7e-3


def test_stall_warning_names_the_silent_worker(capsys):
    # The real server polls every 0.1 to 1 ms; tick every 1 ms here.
    sim = Simulation("bsp", {"batch": "full"}, silent=[3], stall_warning_s=1.0, poll_s=1e-3,
                     max_sim_s=4.5)
    sim.run(strict=False)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "warning" in ln]
    # Named at 1, 2, 3 and 4 s of silence, never the workers that wait for it.
    assert len(lines) == 4, err
    assert all("worker 3 has not reported" in ln and "[1, 2] wait" in ln for ln in lines)
    assert [float(ln.split("for ")[1].split(" s")[0]) for ln in lines] == pytest.approx(
        [1.0, 2.0, 3.0, 4.0])
    assert not sim.server.done and sim.server.version == 0


def test_a_hanging_policy_hits_the_cap_instead_of_hanging():
    sim = Simulation("bsp", {"batch": "full"}, silent=[2], max_sim_s=0.01)
    with pytest.raises(SimulationCapError, match="not done"):
        sim.run()


def test_simulation_is_deterministic():
    def trace(sim: Simulation) -> list:
        return [(p.time, p.rank, p.version) for p in sim.transport.params] + sim.events

    opts = {"interval": "multistage", "probe_ms": 0.3, "eta_min_ms": 0.1}
    a = run("fsp", opts, stop={"max_iterations": 15}, jitter=0.3)
    b = run("fsp", opts, stop={"max_iterations": 15}, jitter=0.3)
    assert trace(a) == trace(b)
    assert a.objective() == b.objective()


class _NoWallClock:
    """Stands in for the ``time`` module: any read of the wall clock fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"time.{name} read where only the injected clock may be")


@pytest.mark.parametrize("model, options", [("bsp", {"batch": "full"}),
                                            ("fsp", {"interval": "binary"}),
                                            ("ssp", {"s": 2, "batch": 50})])
def test_the_master_loop_and_the_worker_loop_read_only_the_injected_clock(monkeypatch, model,
                                                                          options):
    # The simulation drives the runtime's own loops (Server.poll_once, loop.work) on its
    # clock; a turn that read the wall clock would mix two time bases.
    import flegel.runtime.loop
    import flegel.runtime.server

    monkeypatch.setattr(flegel.runtime.server, "time", _NoWallClock())
    monkeypatch.setattr(flegel.runtime.loop, "time", _NoWallClock())
    sim = Simulation(model, options, stop={"max_iterations": 10}).run()
    assert sim.server.done and sim.server.version >= 10


def test_a_worker_told_to_stop_gets_no_signal():
    """A stopped worker has cancelled its signal receive; a signal sent to it would be left
    unreceived and fail its MPI_Finalize (the hang after summary.json)."""
    from flegel.protocol import Signal

    sim = run("fsp", {"interval": "fixed", "eta_ms": 5}, stop={"max_iterations": 4})
    srv = sim.server
    assert all(srv.workers[r].stopped for r in sim.ranks)
    sent = len(sim.transport.signals)
    srv.signal(sim.ranks, Signal.PAUSE)  # the closed fake transport raises on any send
    assert len(sim.transport.signals) == sent
