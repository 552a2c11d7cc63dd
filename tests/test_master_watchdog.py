"""The master's own bound (flegel.runtime.watchdog): the deadline arithmetic on a fake clock,
the frame it names, and the launcher's layer on stand-in processes (no MPI).

The MPI runs of a master stuck in its own code are in tests/test_lifetime_mpi.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from flegel.cli import launch
from flegel.protocol import ExitCode
from flegel.runtime import watchdog
from flegel.runtime.limits import MAX_TIME_GRACE_S, PHASE_MIN_S, STALL_UNMEASURED_S
from flegel.runtime.watchdog import (
    MASTER_GRACE_S,
    SILENT_MIN_S,
    Watchdog,
    main_frames_in_dump,
    master_deadline,
    phase_bound,
    top_frame,
)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_deadline_is_max_time_plus_the_workers_grace_or_the_silence_bound() -> None:
    # With max_time_s the master gets the workers' grace and a second after T...
    assert MASTER_GRACE_S == MAX_TIME_GRACE_S + 1.0
    assert master_deadline(1.0, 60.0, train_start=0.0, max_time_s=3.0) == 3.0 + MASTER_GRACE_S
    # ... unless it answered a moment ago (it is deciding the job's end itself) ...
    assert master_deadline(9.5, 60.0, 0.0, 3.0) == 9.5 + SILENT_MIN_S
    # ... and the stall bound on its silence comes first when shorter.
    assert master_deadline(1.0, 2.5, 0.0, 30.0) == 3.5
    # Without max_time_s, the silence bound alone; none at all: no deadline.
    assert master_deadline(7.0, 60.0) == 67.0
    assert master_deadline(7.0, None) is None
    assert master_deadline(7.0, None, 0.0, 3.0) == 3.0 + MASTER_GRACE_S
    # Past the grace, a master in a turn as long as its longest so far is not stuck: the
    # server waits a worker's last block past the grace, then updates θ (a 1.5 s M-step).
    assert master_deadline(20.0, None, 0.0, 3.0, longest_turn_s=1.5) == 20.0 + 15.0


def test_the_longest_turn_in_training_sets_the_silence_past_the_grace() -> None:
    clock = Clock()
    dog = Watchdog(lambda stuck, frame: None, clock=clock)
    dog.beat()
    clock.t = 5.0
    dog.beat()  # 5 s before training: not a training turn
    dog.enter("training", lambda: None, "", max_time_s=3.0)
    clock.t = 6.5
    dog.beat()  # a 1.5 s turn
    assert dog.longest_turn_s == 1.5
    clock.t = 6.5 + 3.0 + MASTER_GRACE_S
    assert dog.look() is None  # silent 9 s < 10 x 1.5 s
    clock.t = 6.5 + 15.0
    assert dog.look() is not None


def test_outside_training_the_phase_bound_is_the_workers() -> None:
    assert phase_bound("auto") == STALL_UNMEASURED_S
    assert phase_bound(2.5) == 60.0 and phase_bound(120.0) == 120.0
    assert phase_bound(None) is None


def test_a_beating_master_is_never_stuck_and_a_silent_one_is_at_its_deadline() -> None:
    clock = Clock()
    fired: list[watchdog.Stuck] = []
    dog = Watchdog(lambda stuck, frame: fired.append(stuck), clock=clock)
    slowest = [60.0]
    dog.enter("training", lambda: slowest[0], "runtime.stall_timeout_s: auto", max_time_s=3.0)
    for _ in range(100):  # a master polling every 0.1 s past max_time_s is not stuck
        clock.t += 0.1
        dog.beat()
        assert dog.look() is None
    clock.t += SILENT_MIN_S - 0.01
    assert dog.look() is None
    clock.t += 0.02
    stuck = dog.look()
    assert stuck is not None and stuck.phase == "training"
    assert stuck.bound == ("stop.max_time_s: 3 and 6 s of grace; "
                           "runtime.stall_timeout_s: auto 60 s")
    # Without max_time_s the silence bound is read at every look (auto grows with iterations).
    dog.enter("training", lambda: slowest[0], "runtime.stall_timeout_s: auto")
    clock.t += 59.0
    assert dog.look() is None
    slowest[0] = 50.0
    assert dog.look() is not None
    # The thread and the dump signal's handler race: only one ends the job.
    assert dog.fire(stuck) and not dog.fire(stuck)
    assert fired == [stuck]


def test_flegels_own_io_is_bounded_as_outside_training() -> None:
    """A small stall timeout (5 s) bounds the user's code in a turn, not flegel's own I/O
    (a checkpoint's writer): that is bounded by the floor outside training, and ends with
    a beat."""
    clock = Clock()
    dog = Watchdog(lambda stuck, frame: None, clock=clock)
    dog.enter("training", lambda: 5.0, "runtime.stall_timeout_s:")
    with dog.own_io():
        clock.t += 30
        assert dog.look() is None
        clock.t += PHASE_MIN_S
        assert dog.look() is not None  # its own floor still holds
    assert dog.look() is None  # the I/O ended: a beat
    clock.t += 5
    assert dog.look() is not None


def test_the_state_file_tells_the_launcher_the_wall_clock_deadline(tmp_path: Path) -> None:
    clock = Clock()
    state = tmp_path / "status.master"
    dog = Watchdog(lambda stuck, frame: None, clock=clock, state=str(state))
    before = time.time()
    dog.enter("training", lambda: 60.0, "runtime.stall_timeout_s:", max_time_s=3.0)
    doc = json.loads(state.read_text())  # written at once: a master may hang before a look
    assert doc["pid"] == os.getpid() and doc["phase"] == "training"
    assert before + 3.0 + MASTER_GRACE_S - 1 < doc["deadline"] < time.time() + 9.0 + 1
    assert watchdog.read_state(str(tmp_path / "status")) == doc
    dog.stop()
    assert json.loads(state.read_text())["deadline"] is None


def test_the_named_frame_is_the_users_innermost() -> None:
    frames = [("/usr/lib/python3.11/re/__init__.py", 166, "match"),
              ("/home/me/algo.py", 16, "update_parameter"),
              (os.path.join(watchdog._FLEGEL_DIR, "runtime", "server.py"), 266, "apply")]
    frames[0] = (os.path.join(watchdog._LIBRARY_DIRS[0], "re", "__init__.py"), 166, "match")
    assert top_frame(frames) == ("/home/me/algo.py", 16, "update_parameter")
    assert top_frame(frames[2:]) == frames[2]  # none of the user's: the innermost
    assert top_frame([]) is None
    assert watchdog.describe(frames[1]) == "update_parameter (/home/me/algo.py:16)"


def test_a_library_frame_is_not_named_but_the_jobs_algorithm_is_even_when_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy (site-packages or a system's dist-packages) is nobody's own code; the job's
    algorithm is, even when pip installed it among the packages."""
    numpy_frame = ("/usr/lib/python3/dist-packages/numpy/linalg/linalg.py", 400, "solve")
    venv_numpy = ("/home/me/.venv/lib/python3.11/site-packages/numpy/core/fromnumeric.py",
                  86, "sum")
    mine = ("/home/me/.venv/lib/python3.11/site-packages/mypkg/algo.py", 16, "update_parameter")
    server = (os.path.join(watchdog._FLEGEL_DIR, "runtime", "server.py"), 266, "apply")
    frames = [numpy_frame, venv_numpy, mine, server]
    assert top_frame(frames) == numpy_frame  # none of the job's: the innermost
    monkeypatch.setattr(watchdog, "_OWN_FILES", set())
    fake = type(sys)("mypkg.algo")
    fake.__file__ = mine[0]
    monkeypatch.setitem(sys.modules, "mypkg.algo", fake)
    watchdog.own_code(type("Algo", (), {"__module__": "mypkg.algo"}))
    assert top_frame(frames) == mine


def test_the_main_thread_is_found_in_a_faulthandler_dump(tmp_path: Path) -> None:
    script = textwrap.dedent('''
        import faulthandler, sys, threading, time
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        def user_function():
            faulthandler.dump_traceback(sys.stdout, all_threads=True)
        user_function()
    ''')
    (tmp_path / "dumping.py").write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path / "dumping.py")], capture_output=True,
                         text=True, timeout=30).stdout
    frames = main_frames_in_dump(out)
    assert frames[0][2] == "user_function" and frames[0][0].endswith("dumping.py")


#: A stand-in master: writes the watchdog's state file with a deadline already past, then
#: holds still, ignoring the dump signal's Python side as a master holding the GIL does
#: (faulthandler's C handler still writes its stack).
STUCK_MASTER = textwrap.dedent('''
    import faulthandler, json, os, signal, socket, sys, time
    status = sys.argv[1]
    out = open(status + ".stack0", "w")
    faulthandler.register(signal.SIGUSR2, file=out, all_threads=True)
    def stuck_in_c():
        json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                   "deadline": time.time() - 10, "monotonic": time.monotonic() - 10,
                   "phase": "training", "bound": "stop.max_time_s: 1 and 6 s of grace",
                   "stack": sys.argv[2] + "/master-stack.txt"}, open(status + ".master", "w"))
        while True:
            time.sleep(1)
    stuck_in_c()
''')


def test_the_launcher_ends_a_master_that_cannot_end_its_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the deadline the master wrote, the launcher has it dump its stack; a master
    whose Python does not answer is named by the launcher (rank 0, host, pid, where it was,
    the stack moved into the run directory, θ not saved) and the job killed: code 3."""
    monkeypatch.setattr(launch, "FINISH_LOOK_S", 0.1)
    monkeypatch.setattr(watchdog, "ANSWER_S", 1.0)
    status = tmp_path / "status"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "master.py").write_text(STUCK_MASTER)
    # The stand-in master is mpiexec too: the launcher kills its process group.
    master = subprocess.Popen([sys.executable, str(tmp_path / "master.py"), str(status),
                               str(run_dir)], start_new_session=True)
    try:
        t0 = time.monotonic()
        while not (tmp_path / "status.master").exists():
            assert time.monotonic() - t0 < 30
            time.sleep(0.05)
        code = launch._Job(master, status).wait()
        assert code == ExitCode.STALLED
        assert master.poll() is not None  # killed
    finally:
        master.kill()
        master.wait()
    told, line = launch._read_status(status)
    assert told == ExitCode.STALLED and line is not None
    assert line.startswith(f"rank 0 (master, host {socket.gethostname()}, pid {master.pid}) "
                           "was stuck while "
                           "training (stop.max_time_s: 1 and 6 s of grace) and could not end "
                           "the job: its Python did not run")
    assert f"it was in stuck_in_c ({tmp_path / 'master.py'}:" in line
    assert line.endswith(f"its stack is in {run_dir / 'master-stack.txt'}; killed: θ not "
                         "saved (the last checkpoint is kept)")
    assert "stuck_in_c" in (run_dir / "master-stack.txt").read_text()


def test_a_deadline_not_yet_past_leaves_the_job_alone(tmp_path: Path) -> None:
    status = tmp_path / "status"
    Path(watchdog.state_path(str(status))).write_text(json.dumps(
        {"pid": 1, "deadline": time.time() + 60, "phase": "training", "bound": ""}))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            start_new_session=True)
    try:
        job = launch._Job(proc, status)
        job._master_bound(status, None)
        assert job.stuck_at is None and not status.exists() and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def _sleeper(seconds: float = 30) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"],
                            start_new_session=True)


def _state(status: Path, pid: int, past_s: float, host: str | None = None,
           wall_past_s: float | None = None) -> None:
    """A master's state file, its deadline ``past_s`` ago (negative: ahead)."""
    wall_past_s = past_s if wall_past_s is None else wall_past_s
    Path(watchdog.state_path(str(status))).write_text(json.dumps(
        {"pid": pid, "host": host or socket.gethostname(), "deadline": time.time() - wall_past_s,
         "monotonic": time.monotonic() - past_s, "phase": "saving the model", "bound": ""}))


def test_a_claimed_end_does_not_lift_the_bound(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A cause was claimed (code 3) but the master's save hangs: far enough past its
    deadline, the launcher kills the job, keeping the claimed code."""
    monkeypatch.setattr(launch, "FINISH_LOOK_S", 0.1)
    status = tmp_path / "status"
    proc = _sleeper()
    try:
        _state(status, proc.pid, watchdog.LAUNCH_SLACK_S + watchdog.ANSWER_S
               + launch.KILL_AFTER_S + 1)
        assert launch.claim(str(status), ExitCode.STALLED, "rank 0 ... was stuck")
        t0 = time.monotonic()
        code = launch._Job(proc, status).wait()
        assert code == ExitCode.STALLED and time.monotonic() - t0 < 10
        assert proc.poll() == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


#: A stand-in master that answers the dump signal: its handler beats (a new deadline).
ANSWERING_MASTER = textwrap.dedent('''
    import json, os, signal, socket, sys, time
    state = sys.argv[1] + ".master"
    def write(past):
        json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                   "deadline": time.time() - past, "monotonic": time.monotonic() - past,
                   "phase": "training", "bound": ""}, open(state + ".tmp", "w"))
        os.replace(state + ".tmp", state)
    signal.signal(signal.SIGUSR2, lambda *_: write(-60))
    write(10)
    print("ready", flush=True)
    time.sleep(30)
''')


def test_a_master_that_answers_the_signal_is_not_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher reads the state file again after the signal: a master whose deadline
    moved was not stuck; the launcher stands down."""
    monkeypatch.setattr(watchdog, "ANSWER_S", 0.3)
    status = tmp_path / "status"
    proc = subprocess.Popen([sys.executable, "-c", ANSWERING_MASTER, str(status)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        job = launch._Job(proc, status)
        job._master_bound(status, None)
        assert job.stuck_at is not None  # signalled
        signalled = time.monotonic()
        # The child answers when it gets a core: wait for its moved deadline, not a time.
        end = signalled + 30.0
        while time.monotonic() < end:
            state = watchdog.read_state(str(status))
            late = watchdog.past_deadline(state)
            if state is not None and (late is None or late < 0):
                break
            time.sleep(0.02)
        time.sleep(max(0.0, signalled + watchdog.ANSWER_S + 0.05 - time.monotonic()))
        job._master_bound(status, None)
        assert job.stuck_at is None and not status.exists() and proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()


def test_a_wall_clock_step_is_harmless_on_the_masters_host(tmp_path: Path) -> None:
    """The wall-clock deadline looks long past (the clock stepped), the monotonic one is
    ahead: on the master's host the launcher goes by the monotonic one."""
    status = tmp_path / "status"
    proc = _sleeper()
    try:
        _state(status, proc.pid, past_s=-60, wall_past_s=3600)
        job = launch._Job(proc, status)
        job._master_bound(status, None)
        assert job.stuck_at is None and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_remote_masters_pid_is_never_signalled_here(tmp_path: Path) -> None:
    """Rank 0 on another host: its PID here is some other process, never signalled
    (SIGUSR2 would end this one)."""
    status = tmp_path / "status"
    innocent = _sleeper()
    try:
        _state(status, innocent.pid, past_s=60, host="another-host")
        job = launch._Job(innocent, status)
        job._master_bound(status, None)
        assert job.stuck_at is not None
        time.sleep(0.3)
        assert innocent.poll() is None
    finally:
        innocent.kill()
        innocent.wait()


def test_update_parameter_gets_a_copy_so_theta_stays_the_last_good_one() -> None:
    """An algorithm that writes θ in place and then fails (or hangs) leaves the server's θ
    as the last completed update left it."""
    from flegel.runtime.server import Server
    from flegel.runtime.stopping import StopCriteria

    class InPlace:
        def update_parameter(self, agg: dict, theta: dict) -> dict:
            theta["w"] += 1.0  # in place
            if agg["objective"] < 0:
                theta["w"][0] = np.nan
                raise RuntimeError("stuck here")
            return theta

        def aggregate(self, a: dict, b: dict) -> dict:
            return a

        def termination_check(self, agg: dict, t: int) -> bool:
            return False

    theta = {"w": np.zeros(3)}
    server = Server(None, [1], InPlace(), theta,  # type: ignore[arg-type]
                    lambda: {"objective": np.zeros(())}, StopCriteria(), events=lambda e: None)
    server.apply({"objective": np.ones(())})
    assert server.version == 1 and (server.theta["w"] == 1.0).all()
    with pytest.raises(RuntimeError):
        server.apply({"objective": -np.ones(())})
    assert server.version == 1 and (server.theta["w"] == 1.0).all()


def _signalled(script: str) -> tuple[subprocess.Popen[str], str, str]:
    """Run ``script`` until it prints ``ready`` (from inside the function its stack must
    show), send it the dump signal, let it end."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    # "ready" comes from inside the function the stack must name: no sleep to guess.
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(watchdog.DUMP_SIGNAL)
    out, err = proc.communicate(timeout=30)
    return proc, out, err


def test_workers_get_a_stack_dump_on_the_signal(tmp_path: Path) -> None:
    """Every rank writes its stack on :data:`~flegel.runtime.watchdog.DUMP_SIGNAL` (a worker
    to stderr) and goes on."""
    script = textwrap.dedent('''
        import sys, time
        from flegel.runtime import watchdog
        watchdog.install_dump(None, None)
        def worker_waits():
            print("ready", flush=True)
            time.sleep(2)
        worker_waits()
    ''')
    proc, out, err = _signalled(script)
    assert proc.returncode == 0 and "in worker_waits" in err


def test_a_master_not_stuck_shows_its_stack_on_the_signal_and_goes_on(tmp_path: Path) -> None:
    """``kill -USR2`` on a master that is not stuck: its stack (written by the C handler
    into the launcher's folder) comes out on stderr, and it runs on."""
    script = textwrap.dedent(f'''
        import sys, time
        from flegel.runtime import watchdog
        dog = watchdog.Watchdog(lambda stuck, frame: sys.exit("ended"))
        dog.enter("training", lambda: 60.0, "runtime.stall_timeout_s:")
        dog.stack_file = watchdog.install_dump(dog, {str(tmp_path / "status")!r})
        def master_serves():
            print("ready", flush=True)
            for _ in range(20):
                time.sleep(0.1)
                dog.beat()
        master_serves()
        print("done", flush=True)
    ''')
    proc, out, err = _signalled(script)
    assert proc.returncode == 0 and out == "done\n"
    assert "in master_serves" in err
    assert (tmp_path / "status.stack0").read_text() == ""


def test_an_algorithm_that_never_writes_theta_in_place_gets_it_without_a_copy() -> None:
    """``updates_theta_in_place = False``: no copy (θ's memory is not doubled)."""
    from flegel.api import Algorithm
    from flegel.runtime.server import Server
    from flegel.runtime.stopping import StopCriteria

    seen: list[dict] = []

    class Fresh(Algorithm):
        updates_theta_in_place = False

        def update_parameter(self, agg: dict, theta: dict) -> dict:
            seen.append(theta)
            return {"w": theta["w"] + 1.0}

    assert Algorithm.updates_theta_in_place  # a user's subclass: copied by default
    theta = {"w": np.zeros(3)}
    server = Server(None, [1], Fresh(), theta,  # type: ignore[arg-type]
                    lambda: {"objective": np.zeros(())}, StopCriteria(), events=lambda e: None)
    server.apply({"objective": np.ones(())})
    assert seen[0]["w"] is theta["w"] and (server.theta["w"] == 1.0).all()


def test_the_copy_flag_belongs_to_the_update_parameter_it_describes() -> None:
    """A subclass of a built-in that overrides ``update_parameter`` is copied unless it
    declares the flag itself; one that keeps the built-in's method keeps its ``False``."""
    from flegel.algorithms.kmeans import KMeans
    from flegel.runtime.server import copies_theta

    class InPlace(KMeans):
        def update_parameter(self, agg: dict, theta: dict) -> dict:
            theta["centers"] *= 1.0
            return theta

    class Declared(InPlace):
        updates_theta_in_place = False

    class Tuned(KMeans):
        pass

    assert not copies_theta(KMeans())
    assert copies_theta(InPlace())
    assert not copies_theta(Declared())  # its own declaration, for the method it inherits
    assert not copies_theta(Tuned())


@pytest.mark.parametrize("name,y", [("kmeans", None), ("gmm", None), ("fcm", None),
                                    ("nmf", None), ("logreg", "classes")])
def test_built_ins_that_skip_the_copy_never_write_theta_in_place(name: str, y: str | None) -> None:
    """Each built-in declaring ``updates_theta_in_place = False`` updates a read-only θ."""
    from flegel.job.algorithms import resolve_algorithm
    from flegel.local import full_pass, make_info

    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(size=(600, 8)))
    labels = (x[:, 0] > x[:, 1]).astype(np.int64) if y else None
    algorithm = resolve_algorithm(name)(**({"n_components": 3} if name == "nmf" else {}))
    assert not algorithm.updates_theta_in_place
    theta = algorithm.init_parameter(make_info(x, labels))
    for _ in range(3):
        agg = full_pass(algorithm, x, labels, theta, algorithm.init_state(len(x), 8))
        for v in theta.values():
            if isinstance(v, np.ndarray):
                v.setflags(write=False)
        theta = algorithm.update_parameter(agg, theta)


def test_another_thread_reads_theta_and_its_version_as_one_pair() -> None:
    """The watchdog's thread saves θ while an update may be completing: ``good()`` never
    pairs a θ with the version of another (model.json's theta_version)."""
    import threading

    from flegel.api import Algorithm
    from flegel.runtime.server import Server
    from flegel.runtime.stopping import StopCriteria

    class Count(Algorithm):
        updates_theta_in_place = False

        def update_parameter(self, agg: dict, theta: dict) -> dict:
            return {"w": theta["w"] + 1.0}

    server = Server(None, [1], Count(), {"w": np.zeros(1)},  # type: ignore[arg-type]
                    lambda: {"objective": np.zeros(())}, StopCriteria(), events=lambda e: None)
    done = threading.Event()
    pairs: list[tuple[float, int]] = []

    def read() -> None:
        while not done.is_set():
            theta, version = server.good()
            pairs.append((float(theta["w"][0]), version))

    # Deterministic part: good() takes the lock an update holds while it swaps θ and its
    # version (CPython seldom switches threads between the two, so the loop below alone
    # passes without the lock too).
    with server._theta_lock:
        blocked = threading.Thread(target=server.good)
        blocked.start()
        blocked.join(0.2)
        assert blocked.is_alive()  # waiting for the lock, not reading a half-made pair
    blocked.join(5.0)
    assert not blocked.is_alive()

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(3000):
        server.apply({"objective": np.zeros(())})
    done.set()
    reader.join()
    assert pairs and all(w == v for w, v in pairs)
