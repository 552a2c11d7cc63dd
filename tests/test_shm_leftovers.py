"""MPICH's shared-memory files: ``flegel run`` removes those its own job left, never one in
use (issue 20; flegel.runtime.shm_leftovers).

The rules on real files in a temporary folder, held open or mapped by this process or by
another; then real jobs ended without MPI_Finalize (where MPICH leaves its file): all
killed by SIGKILL, killed in MPI_Init, ended by MPI_Abort under a plain mpiexec.  The
segment the job's rank 0 mapped is gone once the job is.
"""

from __future__ import annotations

import contextlib
import mmap
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flegel.cli.launch import find_mpiexec
from flegel.protocol import ExitCode
from flegel.runtime import shm_leftovers
from tests.conftest import ROOT, child_env
from tests.test_lifetime_mpi import _gone_within, _job, _launch, _rank_pid

#: A ``sitecustomize`` that makes rank 2 exit before flegel (or MPI) starts, after a while:
#: ranks 0 and 1 sit in MPI_Init meanwhile, even on a loaded machine.
EXITS_LATE_AT_START = textwrap.dedent("""
    import os
    import time
    if os.environ.get("PMI_RANK") == "2":
        time.sleep(2.0)
        os._exit(3)
""")


def _segment(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    return path


def test_only_new_files_that_no_process_uses_are_removed(tmp_path: Path) -> None:
    old = _segment(tmp_path, "mpich_shm_old_0")  # there before the launch: not ours
    before = shm_leftovers.present(tmp_path)
    assert before == {old.name}
    left = _segment(tmp_path, "mpich_shm_left_0")
    vci = _segment(tmp_path, "mpich_vci_left_0")
    other = _segment(tmp_path, "other_file")  # not MPICH's
    held = _segment(tmp_path, "mpich_shm_held_0")
    mapped = _segment(tmp_path, "mpich_shm_mapped_0")
    by_child = _segment(tmp_path, "mpich_shm_child_0")
    with open(held, "rb"), open(mapped, "r+b") as f, open(by_child, "rb") as stdin:
        view = mmap.mmap(f.fileno(), 0)  # mapped; its descriptor closed next
        f.close()
        child = subprocess.Popen(["sleep", "30"], stdin=stdin)  # another job's live rank
        try:
            stdin.close()
            removed = shm_leftovers.remove_new(before, tmp_path)
        finally:
            child.kill()
            child.wait()
            view.close()
    assert sorted(removed) == sorted([left, vci])
    assert not left.exists() and not vci.exists()
    assert all(p.exists() for p in (old, other, held, mapped, by_child))
    # Once nothing uses them, they are leftovers too.
    assert sorted(shm_leftovers.remove_new(before, tmp_path)) == sorted([held, mapped, by_child])


def test_a_rank_ending_the_job_removes_the_names_it_maps(tmp_path: Path) -> None:
    mine = _segment(tmp_path, "mpich_shm_mine_0")
    other = _segment(tmp_path, "mpich_shm_other_0")  # another job's: not mapped here
    with open(mine, "r+b") as f, mmap.mmap(f.fileno(), 0) as view:
        assert shm_leftovers.unlink_mapped(tmp_path) == [mine]
        assert not mine.exists() and other.exists()
        view[:4] = b"live"  # the memory stays the ranks' until they exit
        assert view[:4] == b"live"
        assert shm_leftovers.unlink_mapped(tmp_path) == []  # "(deleted)": nothing to do


def test_no_folder_means_nothing_to_do(tmp_path: Path) -> None:
    assert shm_leftovers.present(tmp_path / "absent") == set()
    assert shm_leftovers.remove_new(set(), tmp_path / "absent") == []


def _mapped_segments(pid: int) -> dict[Path, bool]:
    """MPICH's files in /dev/shm that process ``pid`` maps: whether each name is removed."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    paths = [f[5] for f in (ln.split(maxsplit=5) for ln in lines)
             if len(f) == 6 and f[5].startswith(f"{shm_leftovers.SHM_DIR}/mpich_")]
    return {Path(p.removesuffix(" (deleted)")): p.endswith(" (deleted)") for p in paths}


def _segments(pid: int, timeout: float = 10) -> dict[Path, bool]:
    """As :func:`_mapped_segments`, once ``pid`` maps one (MPI_Init maps it)."""
    if not shm_leftovers.SHM_DIR.is_dir():
        pytest.skip("no /dev/shm here")
    t0 = time.monotonic()
    while not (segments := _mapped_segments(pid)):
        assert time.monotonic() - t0 < timeout, f"process {pid} maps no MPICH segment"
        time.sleep(0.05)
    return segments


@pytest.mark.mpi
def test_a_running_job_keeps_no_segment_name_even_when_all_is_killed(tmp_path: Path) -> None:
    """Every rank removed the name once the node's ranks had attached: SIGKILL to the
    launcher (mpiexec, its daemons and every rank then die) leaves nothing."""
    proc, _ = _launch(tmp_path)
    segments = _segments(_rank_pid(tmp_path, 0))
    assert all(segments.values()), segments  # mapped, and already without a name
    proc.kill()
    proc.communicate(timeout=10)
    _gone_within(tmp_path, 10)
    assert not [s for s in segments if s.exists()]


def _mapped_by_rank0(tmp_path: Path) -> dict[Path, bool]:
    """:func:`_mapped_segments` of the job's rank 0 (its command line names ``tmp_path``),
    found fast by reading /proc directly; empty while there is none."""
    mark, rank0 = str(tmp_path).encode(), b"PMI_RANK=0"
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (entry.name.isdigit() and mark in (entry / "cmdline").read_bytes()
                    and rank0 in (entry / "environ").read_bytes().split(b"\0")):
                return _mapped_segments(int(entry.name))
    return {}


@pytest.mark.mpi
def test_ranks_killed_in_mpi_init_leave_no_segment(tmp_path: Path) -> None:
    """Rank 2 exits before MPI starts: ranks 0 and 1 wait in MPI_Init, rank 0 holding the
    node's file by name, until the launcher kills them; the launcher then removes it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(EXITS_LATE_AT_START)
    proc = subprocess.Popen([sys.executable, "-m", "flegel", "run", str(_job(tmp_path)),
                             "--out", str(tmp_path / "run")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=child_env(site))
    try:
        t0 = time.monotonic()
        while not (segments := _mapped_by_rank0(tmp_path)):  # rank 0 lives a second or so
            assert proc.poll() is None and time.monotonic() - t0 < 30, proc.communicate()
            time.sleep(0.01)
        assert not any(segments.values()), segments  # still named: MPI_Init never ended
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.WORKER_DIED, err
    _gone_within(tmp_path, 5)
    assert not [s for s in segments if s.exists()], err


@pytest.mark.mpi
def test_a_job_ended_by_mpi_abort_under_plain_mpiexec_leaves_no_segment(tmp_path: Path) -> None:
    """Not started by ``flegel run``: nothing of the job's is left after SIGTERM (the master
    saves θ and ends the job with MPI_Abort, which skips MPI_Finalize)."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no MPI launcher installed")
    job = _job(tmp_path)
    out = tmp_path / "run"
    proc = subprocess.Popen([mpiexec, "-n", "3", sys.executable, "-m", "flegel", "run", str(job),
                             "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    try:
        t0 = time.monotonic()
        while not (out / "events.jsonl").exists():
            assert proc.poll() is None and time.monotonic() - t0 < 60, proc.communicate()
            time.sleep(0.1)
        segments = _segments(_rank_pid(tmp_path, 0))
        proc.send_signal(signal.SIGTERM)  # hydra passes it to every rank
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted by SIGTERM; last θ" in err, err
    _gone_within(tmp_path, 10)
    assert not [s for s in segments if s.exists()], err
