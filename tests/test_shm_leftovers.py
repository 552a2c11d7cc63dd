"""MPICH's shared-memory files: ``flegel run`` removes those its own job left, never one in
use (issue 20; flegel.runtime.shm_leftovers).

The rule on real files in a temporary folder, held open or mapped by this process or by
another; then a real job whose worker is killed by SIGKILL (MPICH then leaves its file):
the segment its ranks mapped is gone once ``flegel run`` returns.
"""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flegel.cli.launch import find_mpiexec
from flegel.protocol import ExitCode
from flegel.runtime import shm_leftovers
from tests.conftest import ROOT, child_env
from tests.test_lifetime_mpi import _gone_within, _job, _launch, _rank_pid


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


def _mapped_segments(pid: int) -> set[Path]:
    """MPICH's files in /dev/shm that process ``pid`` maps."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {Path(ln.split(maxsplit=5)[5]) for ln in lines
            if len(ln.split(maxsplit=5)) == 6
            and ln.split(maxsplit=5)[5].startswith(f"{shm_leftovers.SHM_DIR}/mpich_")}


def _segments(tmp_path: Path) -> set[Path]:
    """The MPICH files rank 0 of the running job maps (MPI_Init has mapped them by now)."""
    if not shm_leftovers.SHM_DIR.is_dir():
        pytest.skip("no /dev/shm here")
    master = _rank_pid(tmp_path, 0)
    t0 = time.monotonic()
    while not (segments := _mapped_segments(master)):
        assert time.monotonic() - t0 < 10, "rank 0 maps no MPICH segment"
        time.sleep(0.1)
    assert all(s.exists() for s in segments)
    return segments


@pytest.mark.mpi
def test_a_job_whose_worker_is_killed_leaves_no_segment(tmp_path: Path) -> None:
    proc, _ = _launch(tmp_path)
    segments = _segments(tmp_path)
    os.kill(_rank_pid(tmp_path, 2), signal.SIGKILL)  # MPICH's finalize never runs
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == ExitCode.WORKER_DIED, err
    _gone_within(tmp_path, 10)
    assert not [s for s in segments if s.exists()], err


@pytest.mark.mpi
def test_a_job_ended_by_mpi_abort_under_plain_mpiexec_leaves_no_segment(tmp_path: Path) -> None:
    """Not started by ``flegel run``: the master, ending the job on SIGTERM with MPI_Abort,
    removes the name itself."""
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
        segments = _segments(tmp_path)
        proc.send_signal(signal.SIGTERM)  # hydra passes it to every rank
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted by SIGTERM; last θ" in err, err
    _gone_within(tmp_path, 10)
    assert not [s for s in segments if s.exists()], err
