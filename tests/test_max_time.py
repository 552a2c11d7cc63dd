"""``stop.max_time_s`` bounds the whole run, stalls are warned about under every model, and
the automatic stall timeout follows what the job measured (issue 21), on the simulated clock.

The same paths under mpirun, as a user meets them: tests/test_fault_matrix.py ("stall past
max_time", "stalled worker").
"""

from __future__ import annotations

import pytest

from flegel.protocol import ExitCode, StopReason
from flegel.runtime.faults import JobFault
from flegel.runtime.server import (
    MAX_TIME_GRACE_S,
    STALL_FLOOR_S,
    STALL_UNMEASURED_S,
    auto_stall_timeout,
)
from tests.fakes import Simulation


def _fault(sim: Simulation) -> JobFault:
    with pytest.raises(JobFault) as caught:
        sim.run()
    return caught.value


def _warnings(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("flegel: warning:")]


@pytest.mark.parametrize("model,options", [("bsp", {"batch": "full"}), ("fsp", {}),
                                           ("asp", {}), ("ssp", {"s": 2})])
def test_a_worker_silent_past_max_time_ends_the_job_after_its_grace(model, options, capsys):
    # Worker 3 never answers; the others finish their iterations in milliseconds.  The
    # stall timeout (300 s) is far: max_time_s alone bounds the run.
    sim = Simulation(model, options, silent=[3], poll_s=1e-3, max_sim_s=30.0,
                     stop={"max_iterations": None, "tolerance": None, "max_time_s": 0.5})
    sim.server.stall_timeout_s = 300.0
    fault = _fault(sim)
    assert fault.code == ExitCode.STALLED
    assert sim.server.reason == StopReason.MAX_TIME
    assert str(fault).startswith(
        f"worker 3 did not answer within {MAX_TIME_GRACE_S:.1f} s after the training time "
        "ran out (stop.max_time_s: 0.5); it was computing its iteration 1")
    # 0.5 s of training, then one block (none measured: 0 s) and the grace.
    assert sim.now == pytest.approx(0.5 + MAX_TIME_GRACE_S, abs=5e-3)
    late = [w for w in _warnings(capsys.readouterr().err) if "training time ran out" in w]
    assert len(late) == 1 and "worker 3 has not answered 1.0 s after" in late[0]


def test_workers_that_answer_after_max_time_are_not_warned_about(capsys):
    sim = Simulation("bsp", {"batch": "full"}, poll_s=1e-3, cost_s=2e-5,
                     stop={"max_iterations": None, "tolerance": None, "max_time_s": 0.05})
    sim.run()
    assert sim.server.reason == StopReason.MAX_TIME and sim.server.done
    assert _warnings(capsys.readouterr().err) == []


@pytest.mark.parametrize("model,options", [("asp", {"batch": 20}),
                                           ("ssp", {"s": 1000, "batch": 20})])
def test_a_stall_is_warned_about_when_nobody_waits(model, options, capsys):
    # Under ASP (and SSP far from its bound) nobody waits for the silent worker; it is named
    # all the same once silent for stall_warning_s and over twice an iteration.
    # 0.2 s iterations (200 points at 1 ms) and a 10 ms tick: five iterations before the
    # first warning, a hundredth of the blocks and a tenth of the ticks of the defaults.
    # Blocks and pushes of 20 points (20 ms; ``batch: auto`` pushes every ~3 points here):
    # the same warnings, with a sixth of the pushes, each far under the 1 s warning.
    sim = Simulation(model, options, silent=[3], stall_warning_s=1.0, poll_s=1e-2,
                     cost_s=1e-3, block_points=20, max_sim_s=2.5,
                     stop={"max_iterations": None, "tolerance": None})
    sim.run(strict=False)
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 2, lines
    assert all(ln.startswith("flegel: warning: worker 3 has not reported for ") for ln in lines)


def test_the_automatic_stall_timeout_follows_the_slowest_iteration():
    assert auto_stall_timeout(None) == STALL_UNMEASURED_S
    assert auto_stall_timeout(0.01) == STALL_FLOOR_S
    assert auto_stall_timeout(30.0) == 300.0


def test_a_silent_worker_ends_the_job_at_the_automatic_timeout():
    # BSP: the others' first iterations take milliseconds, so the floor (60 s) applies.
    sim = Simulation("bsp", {"batch": "full"}, silent=[3], stall_warning_s=100.0, poll_s=0.01,
                     max_sim_s=100.0)
    sim.server.stall_timeout_s = "auto"
    fault = _fault(sim)
    assert fault.code == ExitCode.STALLED and fault.reason == StopReason.STALLED
    assert "(runtime.stall_timeout_s: auto 60)" in str(fault)
    assert sim.now == pytest.approx(STALL_FLOOR_S, abs=0.02)
