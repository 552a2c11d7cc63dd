"""PeerWatch.close: the watching thread is woken and joined, its fds closed, and no
``on_death`` call comes after it (a rank closes it before MPI_Finalize and C's exit)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from flegel.runtime.peers import PeerWatch

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds")


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_close_joins_the_thread_and_closes_the_fds() -> None:
    proc = _sleeper()
    try:
        watch = PeerWatch({1: proc.pid})
        thread = watch._thread
        assert thread is not None and thread.is_alive()
        fds = [*watch._fds, watch._wake_r, watch._wake_w]
        assert all(_fd_open(fd) for fd in fds)
        assert watch.close(timeout=2.0)
        assert not thread.is_alive()
        assert not any(_fd_open(fd) for fd in fds)
        assert "flegel-peers" not in [t.name for t in threading.enumerate()]
        assert watch.close()  # twice is harmless
    finally:
        proc.kill()
        proc.wait()


def test_no_callback_after_close() -> None:
    calls: list[tuple[int, int]] = []
    proc = _sleeper()
    try:
        watch = PeerWatch({1: proc.pid}, on_death=lambda r, p: calls.append((r, p)))
        assert watch.close(timeout=2.0)
    finally:
        proc.kill()
        proc.wait()
    # close() said the thread ended: no thread of the watch is left to see the death
    assert not any(t.name == "flegel-peers" and t.is_alive() for t in threading.enumerate())
    assert calls == []
    assert watch.dead() == []
    assert watch._dead == []  # not even recorded (dead() hides deaths once disarmed)


def test_a_death_while_armed_is_still_reported() -> None:
    seen = threading.Event()
    calls: list[tuple[int, int]] = []

    def died(rank: int, pid: int) -> None:
        calls.append((rank, pid))
        seen.set()

    proc = _sleeper()
    watch = PeerWatch({3: proc.pid}, on_death=died)
    try:
        proc.kill()
        proc.wait()
        assert seen.wait(5.0)
        assert calls == [(3, proc.pid)]
        assert watch.dead() == [(3, proc.pid)]
    finally:
        assert watch.close(timeout=2.0)


def test_close_without_peers() -> None:
    watch = PeerWatch({})
    assert watch._thread is None
    r, w = watch._wake_r, watch._wake_w
    assert watch.close()
    assert not _fd_open(r) and not _fd_open(w)
