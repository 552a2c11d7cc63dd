"""One stop delivered twice is one stop (issue 20; flegel.runtime.lifetime.SAME_STOP_S).

A plain ``scancel`` sends SIGTERM to every process of the job and hydra's ``mpiexec`` passes
it on again: a rank must take the copy for the same stop, not for an impatient second one
that ends it at once (θ was lost so in 3 of 4 runs).  A second signal after the window still
ends the rank at once.  The rule is tested here in one process on a simulated clock, then
with real signals in a child Python; under a real Slurm in tests/test_slurm.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from flegel.cli import launch
from flegel.protocol import ExitCode
from flegel.runtime import lifetime
from flegel.runtime.faults import Interrupted
from tests.conftest import child_env


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def rank(monkeypatch: pytest.MonkeyPatch) -> tuple[_Clock, list[int]]:
    """A fresh rank state on a simulated clock; its exits recorded, its grace timer inert."""
    clock, exits = _Clock(), []
    monkeypatch.setattr(lifetime, "_state", lifetime._State())
    monkeypatch.setattr(lifetime, "time", clock)
    monkeypatch.setattr(lifetime, "_exit_now", exits.append)
    monkeypatch.setattr(lifetime, "threading", SimpleNamespace(
        Timer=lambda *a, **k: SimpleNamespace(daemon=True, start=lambda: None)))
    return clock, exits


def test_a_repeat_within_the_window_is_the_same_stop(rank: tuple[_Clock, list[int]]) -> None:
    clock, exits = rank
    lifetime._state.master = True
    with lifetime.deferred():
        lifetime._on_signal(signal.SIGTERM, None)
        clock.now += lifetime.SAME_STOP_S * 0.9  # mpiexec's copy, and srun's
        lifetime._on_signal(signal.SIGTERM, None)
        lifetime._on_signal(signal.SIGINT, None)
    assert exits == [] and lifetime.pending() == signal.SIGTERM


def test_a_second_signal_after_the_window_ends_the_rank_at_once(
        rank: tuple[_Clock, list[int]]) -> None:
    clock, exits = rank
    lifetime._on_signal(signal.SIGINT, None)  # a worker: recorded
    clock.now += lifetime.SAME_STOP_S
    lifetime._on_signal(signal.SIGINT, None)  # the user's second Ctrl-C
    assert exits == [ExitCode.for_signal(signal.SIGINT)]


def test_the_master_outside_training_raises_once(rank: tuple[_Clock, list[int]]) -> None:
    clock, exits = rank
    lifetime._state.master = True
    with pytest.raises(Interrupted):
        lifetime._on_signal(signal.SIGTERM, None)
    clock.now += 0.01
    lifetime._on_signal(signal.SIGTERM, None)  # no second Interrupted while it saves θ
    assert exits == []


def test_the_launcher_forwards_one_stop_and_kills_on_a_later_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(launch, "time", clock)
    sent: list[int] = []
    job = launch._Job(SimpleNamespace(send_signal=sent.append, pid=-1))  # type: ignore[arg-type]
    killed: list[bool] = []
    monkeypatch.setattr(job, "kill", lambda: killed.append(True))
    job.on_signal(signal.SIGTERM, None)
    clock.now += 0.5
    job.on_signal(signal.SIGTERM, None)  # Slurm signalled the launcher and its parent shell
    assert sent == [signal.SIGTERM] and killed == []
    clock.now += lifetime.SAME_STOP_S
    job.on_signal(signal.SIGTERM, None)
    assert killed == [True]


#: A worker rank's handlers under real signals: two SIGTERMs at once, then one 1.1 s later.
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from flegel.runtime import lifetime
    lifetime.install(master=False)
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    print("alive", lifetime.pending(), flush=True)
    time.sleep(lifetime.SAME_STOP_S + 0.1)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)
    print("not ended", flush=True)
""")


def test_real_signals_follow_the_rule() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=child_env(), timeout=30)
    assert proc.stdout == f"alive {int(signal.SIGTERM)}\n", proc.stderr
    assert proc.returncode == ExitCode.TERMINATED, proc.stderr
