"""Nothing hangs, nothing is orphaned, nothing is lost (issue 13), under a real MPI launch.

Each test starts a real job (``flegel run`` launching mpiexec itself, or ``mpirun``), hurts
it, and asserts that it ends within a bound, with the documented exit code
(docs/exit-codes.md), one line saying what happened, the last θ saved, and no process left:
``pgrep -f`` on the test's own temporary path, which every process of the job carries on its
command line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from flegel.protocol import ExitCode
from tests.conftest import ROOT, child_env, mpirun, write_job

pytestmark = pytest.mark.mpi

#: A K-means that sleeps inside one block on one rank: a stalled or very slow worker.
SLEEPY = textwrap.dedent('''
    import os
    import time

    from flegel.algorithms.kmeans import KMeans


    class SleepyMeans(KMeans):
        def __init__(self, n_clusters=4, rank=2, at=3, sleep_s=1000.0):
            super().__init__(n_clusters=n_clusters)
            self.rank, self.at, self.sleep_s = rank, at, sleep_s

        def update_block(self, block, theta, t):
            if t == self.at and os.environ.get("PMI_RANK") == str(self.rank):
                time.sleep(self.sleep_s)
                self.at = -1  # once
            return super().update_block(block, theta, t)


    class FailingEvaluation(KMeans):
        """Trains well; its final evaluation on the held-out data fails."""

        def test_metrics(self, theta, block):
            raise RuntimeError("deliberate failure in test_metrics")
''')


def _job(tmp_path: Path, **extra) -> Path:
    doc = {"algorithm": "kmeans", "params": {"n_clusters": 4},
           "data": {"source": "synthetic", "kind": "blobs", "n_points": 8000, "n_features": 4,
                    "centers": 4, "seed": 2},
           "workers": 2, "sync": {"model": "bsp", "batch": "full"},
           "stop": {"max_iterations": None, "tolerance": None, "max_time_s": 120},
           "output": {"progress": "none", "dir": str(tmp_path / "runs")}}
    doc.update(extra)
    return write_job(tmp_path / "job.yaml", **doc)


def _left(tmp_path: Path) -> list[str]:
    """Processes whose command line names this test's temporary path (ours are the job's)."""
    found = subprocess.run(["pgrep", "-af", str(tmp_path)], capture_output=True, text=True)
    return [ln for ln in found.stdout.splitlines() if "pgrep" not in ln]


def _gone_within(tmp_path: Path, seconds: float) -> float:
    """Seconds until no process of the job is left (fails past ``seconds``)."""
    t0 = time.monotonic()
    while _left(tmp_path):
        if time.monotonic() - t0 > seconds:
            pytest.fail(f"processes left after {seconds} s: {_left(tmp_path)}")
        time.sleep(0.1)
    return time.monotonic() - t0


def _launch(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """``flegel run JOB --out OUT`` (it starts mpiexec itself); return once training runs."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "flegel", "run", str(_job(tmp_path)),
                             "--out", str(out), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    t0 = time.monotonic()
    # RunWriter creates events.jsonl once θ⁰ exists; a moment later the clock runs.
    while not (out / "events.jsonl").exists():
        if proc.poll() is not None or time.monotonic() - t0 > 60:
            proc.kill()
            pytest.fail(f"the job did not start: {proc.communicate()}")
        time.sleep(0.1)
    time.sleep(0.5)
    return proc, out


def _messages(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("flegel:")]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, ExitCode.INTERRUPTED),
                                      (signal.SIGTERM, ExitCode.TERMINATED)])
def test_signal_to_the_launcher_saves_theta_and_ends_every_rank(tmp_path, sig, code):
    proc, out = _launch(tmp_path)
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=15)
    took = time.monotonic() - t0
    assert proc.returncode == code == 128 + sig
    assert took < 10
    _gone_within(tmp_path, 10 - took)
    # One line, naming the signal and where θ went; no traceback, no MPI chatter.
    assert _messages(err) == [f"flegel: interrupted by {sig.name}; last θ (iteration "
                              f"{json.loads((out / 'model.json').read_text())['theta_version']}"
                              f") saved in {out}/model.npz"], err
    assert "Traceback" not in err and "Ctrl-C" not in err and "MPI_Abort" not in err
    model = np.load(out / "model.npz")
    assert np.isfinite(model["centers"]).all() and model["centers"].shape == (4, 4)
    assert json.loads((out / "model.json").read_text())["stop_reason"] == "interrupted"


def test_sigkill_to_the_launcher_ends_every_rank(tmp_path):
    proc, _ = _launch(tmp_path)
    assert len(_left(tmp_path)) >= 4  # launcher, mpiexec, three ranks
    proc.kill()
    proc.communicate(timeout=10)
    # SIGKILL cannot be caught: mpiexec learns of it from the kernel (PR_SET_PDEATHSIG).
    assert _gone_within(tmp_path, 10) < 10


def _rank_pid(tmp_path: Path, rank: int) -> int:
    """The PID of MPI rank ``rank`` of the job (hydra sets PMI_RANK in each rank)."""
    for line in _left(tmp_path):
        pid = int(line.split()[0])
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PMI_RANK={rank}".encode() in env:
            return pid
    pytest.fail(f"no rank {rank} among {_left(tmp_path)}")


def test_a_killed_worker_is_named_with_its_real_pid(tmp_path):
    proc, out = _launch(tmp_path)
    pid = _rank_pid(tmp_path, 2)
    t0 = time.monotonic()
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    stdout, err = proc.communicate(timeout=15)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == ExitCode.WORKER_DIED, err
    _gone_within(tmp_path, 10)
    # One line with the rank and its real PID (hydra's banner names another process).  On a
    # loaded machine the launcher's watch may wake only after MPICH also ended the ranks that
    # touched the dead one, and the master had no time to speak: it then names every rank it
    # found dead, by its real PID (docs/exit-codes.md, code 5; seen at load 17, as in the
    # fault matrix's "killed worker" row).
    lines = _messages(err)
    assert len(lines) == 1, err
    assert (lines[0].startswith(f"flegel: worker 2 (pid {pid}) died")
            or re.fullmatch(rf"flegel: ranks (\d \(pid \d+\), )+2 \(pid {pid}\) died at once; "
                            r"the job ended before the master could save θ", lines[0])), err
    assert "BAD TERMINATION" not in stdout + err and "EXIT STRING" not in stdout + err
    # The master saves θ when MPICH lets it live long enough (it ends a rank that touches a
    # dead peer); the line says which happened.
    if lines[0].endswith(f"saved in {out}/model.npz"):
        assert json.loads((out / "model.json").read_text())["stop_reason"] == "failed"


def test_a_stalled_worker_ends_the_job_after_its_warnings(tmp_path):
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    job = _job(tmp_path, algorithm="sleepy:SleepyMeans", params={"rank": 2, "at": 3},
               runtime={"stall_warning_s": 1.0, "stall_timeout_s": 2.5})
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = mpirun(job, 2, out, timeout=60, check=False)
    took = time.monotonic() - t0
    assert proc.returncode == ExitCode.STALLED, proc.stderr
    assert took < 30
    _gone_within(tmp_path, 10)
    lines = _messages(proc.stderr)
    # Warnings first (worker 1 waits at the barrier), then the one line that ends the job.
    # The worker is named by rank, host and PID (issue 21).
    # Each says how long the worker has been silent, as the master measured it when it
    # looked: at least the bound, and later by as long as the master was kept from running
    # (it looks every millisecond; a master kept from running 50 ms then prints 2.6).  Up to 2 s
    # later is allowed for the end (a loaded machine); the warning must come before the end's
    # bound.
    warned = re.match(r"flegel: warning: worker 2 \(host \S+, pid \d+\) has not reported for "
                      r"(\d+\.\d) s", lines[0])
    assert warned and 1.0 <= float(warned[1]) < 2.5, lines
    ended = re.match(r"flegel: worker 2 \(host \S+, pid \d+\) has not reported for (\d+\.\d) s",
                     lines[-1])
    assert ended and 2.5 <= float(ended[1]) < 4.5, lines
    assert "(runtime.stall_timeout_s: 2.5); it was computing its iteration 3" in lines[-1]
    assert lines[-1].endswith(f"last θ (iteration 2) saved in {out}/model.npz")
    meta = json.loads((out / "model.json").read_text())
    assert meta["theta_version"] == 2 and meta["stop_reason"] == "stalled"
    assert not (out / "summary.json").exists()


def test_max_time_is_kept_by_the_master_clock(tmp_path):
    # Worker 2 sleeps 3 s inside a block of iteration 2; the master stops training at 1 s by
    # its own clock instead of at the next barrier.
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    job = _job(tmp_path, algorithm="sleepy:SleepyMeans",
               params={"rank": 2, "at": 2, "sleep_s": 3.0},
               stop={"max_iterations": None, "tolerance": None, "max_time_s": 1.0})
    out = tmp_path / "run"
    proc = mpirun(job, 2, out, timeout=60)
    s = json.loads((out / "summary.json").read_text())
    assert s["stop_reason"] == "max_time"
    assert 1.0 <= s["wall_time_s"] < 2.0  # not the 3 s the slow worker took
    assert s["iterations"] <= 1
    assert proc.returncode == 0


def test_compare_timeout_stops_its_run_cleanly(tmp_path):
    job = _job(tmp_path)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "flegel", "compare", str(job), "--sync", "bsp",
                           "--stragglers", "none", "--target", "0", "--timeout", "5",
                           "--out", str(tmp_path / "cmp")], capture_output=True, text=True,
                          timeout=60, env=child_env(), cwd=ROOT)
    took = time.monotonic() - t0
    assert proc.returncode == 1
    assert "TimeoutExpired" not in proc.stderr and "Traceback" not in proc.stderr
    lines = _messages(proc.stderr)
    # One line; it quotes the run's own line when the run had got as far as training.
    assert len(lines) == 1 and "did not finish within --timeout 5 s and was stopped" \
        in lines[0], proc.stderr
    # --timeout 5, then at most KILL_AFTER_S + 3 = 10 s for the run to stop (compare's own
    # bound), and compare's start-up before its clock runs: 15 s allows for a loaded machine
    # (21.2 s in all against a former 20 at load 20-25).  The job would train for 120 s.
    assert took < 5 + 10 + 15
    _gone_within(tmp_path, 10)
    if "last θ" in lines[0]:  # training had started: its last θ was saved
        assert (tmp_path / "cmp" / "0-bsp" / "model.npz").exists()


def test_a_failure_in_the_final_evaluation_keeps_the_model(tmp_path):
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    data = {"source": "synthetic", "kind": "blobs", "n_points": 8000, "n_features": 4,
            "centers": 4, "seed": 2}
    job = _job(tmp_path, algorithm="sleepy:FailingEvaluation", test_data={**data, "seed": 3},
               stop={"max_iterations": 5, "tolerance": None})
    out = tmp_path / "run"
    proc = mpirun(job, 2, out, timeout=60, check=False)
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    _gone_within(tmp_path, 10)
    assert "deliberate failure in test_metrics" in proc.stderr and "Traceback" in proc.stderr
    assert _messages(proc.stderr)[-1] == (
        "flegel: rank 0 (master) failed: RuntimeError: deliberate failure in test_metrics; the "
        f"trained model (iteration 5) was saved before, in {out}/model.npz")
    meta = json.loads((out / "model.json").read_text())
    assert meta["theta_version"] == 5 and meta["stop_reason"] == "max_iterations"
    assert np.load(out / "model.npz")["centers"].shape == (4, 4)
    assert not (out / "summary.json").exists()


def test_sigint_takes_a_checkpoint_when_the_job_has_them(tmp_path):
    # No periodic checkpoint comes in this run: the one found was taken for the signal.
    proc, out = _launch(tmp_path, "--set", "output.checkpoint={every_s: 100000}")
    t0 = time.monotonic()
    while len((out / "events.jsonl").read_text().splitlines()) < 3:  # training runs
        assert time.monotonic() - t0 < 60 and proc.poll() is None
        time.sleep(0.1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    took = time.monotonic() - t0
    assert proc.returncode == ExitCode.INTERRUPTED
    assert took < 10
    _gone_within(tmp_path, 10 - took)
    assert (out / "checkpoint" / "manifest.json").exists(), (err, sorted(os.listdir(out)))
    manifest = json.loads((out / "checkpoint" / "manifest.json").read_text())
    assert manifest["sequence"] == 1 and manifest["iteration"] >= 1
    assert len(_messages(err)) == 1 and "Traceback" not in err, err


#: A ``sitecustomize`` that makes one rank's Python exit before flegel (or MPI) starts.
EXITS_AT_START = textwrap.dedent('''
    import os
    if os.environ.get("PMI_RANK") == os.environ.get("FLEGEL_TEST_DIES"):
        os.write(2, b"this rank exits at start-up\\n")
        os._exit(3)
''')


@pytest.mark.parametrize("rank,code", [(2, ExitCode.WORKER_DIED), (0, ExitCode.FAILED)])
def test_a_rank_that_exits_at_start_up_ends_the_job(tmp_path, rank, code):
    """MPICH leaves the other ranks in MPI_Init for ever (spinning a core each) when one
    rank's Python exits before it starts MPI: the launcher's watch ends the job."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(EXITS_AT_START)
    env = {**child_env(site), "FLEGEL_TEST_DIES": str(rank)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(_job(tmp_path)),
                           "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == code, proc.stderr
    assert _messages(proc.stderr) == [
        f"flegel: rank {rank} did not start (its Python exited before flegel ran: see the "
        "lines above); the job was ended"], proc.stderr
    assert "this rank exits at start-up" in proc.stderr
    assert took < 30, took  # not a hang: the start-up bound is 5 s after the first rank
    _gone_within(tmp_path, 5)


#: Two ranks end as ``flegel run``'s ranks do (``_end_rank``), rank 1 having never received
#: a message rank 0 sent it: an FSP pause signal that crossed the stop.
UNRECEIVED = textwrap.dedent('''
    import numpy as np
    from mpi4py import MPI

    from flegel.cli.commands import _end_rank
    from flegel.protocol import Tag

    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        comm.Isend(np.zeros(3), dest=1, tag=Tag.SIGNAL).Wait()  # small: done once sent
    comm.Barrier()
    _end_rank(MPI)
''')


def test_a_message_never_received_does_not_hang_the_end(tmp_path):
    """MPICH's MPI_Finalize failed on the rank holding a message nobody received, and the
    other rank then waited in its own for ever: ``flegel run`` hung after writing
    summary.json (5 of 32 FSPV runs at load 22-27, on an earlier main; a late pause
    signal).  Both ranks now end, with exit status 0."""
    from flegel.cli.launch import find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no MPI launcher installed")
    script = tmp_path / "unreceived.py"
    script.write_text(UNRECEIVED)
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script)],
                          capture_output=True, text=True, env=child_env(), cwd=ROOT,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "unmatched" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    _gone_within(tmp_path, 5)


#: A K-means whose rank 2 never ends: an exit handler that sleeps, after its work is done.
STUCK_AT_EXIT = textwrap.dedent('''
    import atexit
    import os
    import time

    from flegel.algorithms.kmeans import KMeans


    class StuckAtExit(KMeans):
        def __init__(self, n_clusters=4):
            super().__init__(n_clusters=n_clusters)
            if os.environ.get("PMI_RANK") == "2":
                atexit.register(time.sleep, 1000)
''')


def test_a_rank_stuck_at_its_exit_does_not_keep_flegel_run_waiting(tmp_path):
    """The run finished (summary.json written) but rank 2 never reaches MPI_Finalize, whose
    barrier holds the others in theirs: ``flegel run`` waited for ever.  It now kills the
    job ``runtime.finish_timeout_s`` after the master finished, names rank 2 in one line,
    and exits 3: rank 2's exit handler was cut off, so the job is no success."""
    finish_s = 2
    (tmp_path / "stuck.py").write_text(STUCK_AT_EXIT)
    job = _job(tmp_path, algorithm="stuck:StuckAtExit",
               stop={"max_iterations": 5, "tolerance": None})
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(job), "--out", str(out),
                           "--set", f"runtime.finish_timeout_s={finish_s}"],
                          capture_output=True, text=True, env=child_env(), cwd=ROOT,
                          timeout=finish_s + 90)
    took = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    assert json.loads((out / "summary.json").read_text())["iterations"] == 5
    lines = _messages(proc.stderr)
    assert len(lines) == 1 and re.fullmatch(
        rf"flegel: warning: rank 2 \(pid \d+\) had not reached MPI_Finalize {finish_s:g} s "
        r"after the run finished \(a thread or an exit handler that does not end\? "
        r"runtime.finish_timeout_s\); killed: the run directory is complete", lines[0]), \
        proc.stderr
    assert took < finish_s + 60, took
    _gone_within(tmp_path, 5)


#: A K-means whose master hangs in ``update_parameter`` after ``at`` updates, having begun
#: to write θ in place: in a Python sleep loop (the GIL free) or in a regular expression
#: that backtracks for minutes (the GIL held).  Each completed update's centres are saved
#: in ``record``, to check the saved model against.
HUNG_MASTER = textwrap.dedent('''
    import os
    import re
    import time

    import numpy as np

    from flegel.algorithms.kmeans import KMeans


    class HungMaster(KMeans):
        def __init__(self, n_clusters=4, at=3, mode="sleep", record=""):
            super().__init__(n_clusters=n_clusters)
            self.at, self.mode, self.record, self.n = at, mode, record, 0

        def update_parameter(self, agg, theta):
            self.n += 1
            if self.n > self.at:
                theta["centers"][0] = np.nan  # half an update, in place
                while True:
                    if self.mode == "regex":
                        re.match(r"(a+)+$", "a" * 40 + "b")
                    else:
                        time.sleep(1)
            new = super().update_parameter(agg, theta)
            np.save(os.path.join(self.record, f"theta{self.n}.npy"), new["centers"])
            return new
''')


def _stuck_master(tmp_path: Path, mode: str, max_time_s: float) -> Path:
    (tmp_path / "hung.py").write_text(HUNG_MASTER)
    (tmp_path / "thetas").mkdir()
    return _job(tmp_path, algorithm="hung:HungMaster",
                params={"at": 3, "mode": mode, "record": str(tmp_path / "thetas")},
                stop={"max_iterations": None, "tolerance": None, "max_time_s": max_time_s})


def _check_stuck_master(tmp_path: Path, out: Path, lines: list[str], max_time_s: float) -> None:
    """One line naming rank 0 (host, pid), the user's function and the stack file; the
    stack names it too; model.npz is the θ of the last completed update, finite."""
    ended = re.fullmatch(
        r"flegel: rank 0 \(master, host \S+, pid \d+\) was stuck: silent for [\d.]+ s while "
        rf"training \(stop.max_time_s: {max_time_s:g} and 6 s of grace; runtime.stall_timeout_s:"
        rf" auto 60 s\); it was in update_parameter \({tmp_path}/hung.py:\d+\); its stack is "
        rf"in {out}/master-stack.txt; last θ \(iteration (\d+)\) saved in {out}/model.npz",
        lines[-1])
    assert ended, lines
    assert "line" in (out / "master-stack.txt").read_text()
    assert f'File "{tmp_path}/hung.py"' in (out / "master-stack.txt").read_text()
    assert "in update_parameter" in (out / "master-stack.txt").read_text()
    meta = json.loads((out / "model.json").read_text())
    assert meta["theta_version"] == int(ended[1]) == 3 and meta["stop_reason"] == "stalled"
    centers = np.load(out / "model.npz")["centers"]
    assert np.isfinite(centers).all()
    np.testing.assert_array_equal(centers, np.load(tmp_path / "thetas" / "theta3.npy"))
    assert not (out / "summary.json").exists()


def test_a_master_stuck_in_its_own_code_ends_the_job_after_max_time(tmp_path):
    """The master sleeps for ever in ``update_parameter`` (the GIL free), under a plain
    mpirun: its watchdog ends the job ``max_time_s`` + 6 s after training began (main
    waited for ever)."""
    # Three BSP updates (milliseconds each) complete before T, even on a loaded machine.
    max_time_s = 3.0  # three BSP updates take ms; 3 s leaves a loaded host's scheduling room
    job = _stuck_master(tmp_path, "sleep", max_time_s)
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = mpirun(job, 2, out, timeout=90, check=False)
    took = time.monotonic() - t0
    assert proc.returncode == ExitCode.STALLED, proc.stderr
    # max_time_s + 6 s after training began; start-up takes 2-3 s, up to 20 s at load 9.
    assert took < max_time_s + 6 + 30, took
    _gone_within(tmp_path, 10)
    _check_stuck_master(tmp_path, out, _messages(proc.stderr), max_time_s)


def test_a_master_holding_the_gil_is_ended_by_flegel_run(tmp_path):
    """The master backtracks in a regular expression (the GIL held: its watchdog thread
    cannot run): ``flegel run`` finds its deadline passed, has it write its stack from C and
    end the job from its signal handler (Python runs it between two backtracking steps)."""
    # Three BSP updates (milliseconds each) complete before T, even on a loaded machine.
    max_time_s = 3.0  # three BSP updates take ms; 3 s leaves a loaded host's scheduling room
    job = _stuck_master(tmp_path, "regex", max_time_s)
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(job), "--out", str(out)],
                          capture_output=True, text=True, env=child_env(tmp_path), cwd=ROOT,
                          timeout=90)
    took = time.monotonic() - t0
    assert proc.returncode == ExitCode.STALLED, proc.stderr
    # + LAUNCH_SLACK_S (2 s) past the master's deadline, and the launcher's look (1 s).
    assert took < max_time_s + 6 + 3 + 30, took
    _gone_within(tmp_path, 10)
    _check_stuck_master(tmp_path, out, _messages(proc.stderr), max_time_s)


def test_without_max_time_the_stall_timeout_bounds_the_master_too(tmp_path):
    """No ``stop.max_time_s``: the master silent in training for ``runtime.stall_timeout_s``
    is stuck, as a worker would be."""
    (tmp_path / "hung.py").write_text(HUNG_MASTER)
    (tmp_path / "thetas").mkdir()
    job = _job(tmp_path, algorithm="hung:HungMaster",
               params={"at": 3, "mode": "sleep", "record": str(tmp_path / "thetas")},
               stop={"max_iterations": 100000, "tolerance": None, "max_time_s": None},
               runtime={"stall_timeout_s": 2.5})
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = mpirun(job, 2, out, timeout=90, check=False)
    assert proc.returncode == ExitCode.STALLED, proc.stderr
    assert time.monotonic() - t0 < 2.5 + 30, proc.stderr
    _gone_within(tmp_path, 10)
    line = _messages(proc.stderr)[-1]
    ended = re.fullmatch(
        r"flegel: rank 0 \(master, host \S+, pid \d+\) was stuck: silent for ([\d.]+) s "
        r"while training \(runtime.stall_timeout_s: 2.5 s\); it was in update_parameter "
        rf"\({tmp_path}/hung.py:\d+\); its stack is in {out}/master-stack.txt; last θ "
        rf"\(iteration 3\) saved in {out}/model.npz", line)
    assert ended and float(ended[1]) >= 2.5, line  # the thread looks every 0.5 s: any later
    np.testing.assert_array_equal(np.load(out / "model.npz")["centers"],
                                  np.load(tmp_path / "thetas" / "theta3.npy"))


#: Training is healthy; writing the model takes longer than ``max_time_s`` + the grace (a
#: big θ on a slow disk): the reviewer's reproduction, rc 3 before the fix.
SLOW_FINALIZE = textwrap.dedent('''
    import time

    from flegel.algorithms.kmeans import KMeans


    class SlowFinalize(KMeans):
        def finalize(self, theta):
            time.sleep(8.5)
            return super().finalize(theta)
''')


def test_a_healthy_job_writing_its_model_slowly_is_not_cut(tmp_path):
    """After training the master is "saving the model", bounded as outside training (at
    least 60 s), not by ``max_time_s`` + 6 s: the job ends well, with one model."""
    (tmp_path / "slowfin.py").write_text(SLOW_FINALIZE)
    job = _job(tmp_path, algorithm="slowfin:SlowFinalize",
               stop={"max_iterations": None, "tolerance": None, "max_time_s": 1})
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "flegel", "run", str(job), "--out", str(out)],
                          capture_output=True, text=True, env=child_env(tmp_path), cwd=ROOT,
                          timeout=120)
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert not (out / "master-stack.txt").exists()
    meta = json.loads((out / "model.json").read_text())
    assert "complete" not in meta and (out / "summary.json").exists()  # finished
    _gone_within(tmp_path, 10)
