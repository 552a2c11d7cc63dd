"""MPICH's shared-memory files that a job ended by ``MPI_Abort`` or SIGKILL leaves (issue 20).

MPICH puts each node's intra-node channel in a file ``/dev/shm/mpich_shm_<hash>_<node>``
(and ``mpich_vci_...``) and removes it in ``MPI_Finalize``.  A job that ends otherwise --
``MPI_Abort`` (how flegel ends a failed or interrupted job, :func:`flegel.runtime.lifetime.
end_job`) or a rank killed by SIGKILL -- leaves it: 1,281 files, 3.7 GB of memory, piled up
on one machine in a day of tests, and under Slurm a stale file whose name a later job's ID
hashes to again hangs that job in ``MPI_Init``.  Three guards, each for what it can see:

* Each rank removes the names of the files it maps as soon as every rank of its node has
  attached them (:func:`unlink_mapped`, from :func:`flegel.runtime.lifetime.install`,
  after ``flegel run``'s first agreement, a collective).  Nobody opens them by name
  afterwards, and a removed name's memory stays mapped until its last user exits (MPICH's
  own removal in ``MPI_Finalize`` then finds nothing, silently): the job runs on, and
  however it ends, SIGKILL included, it leaves no file, whoever launched it.
* A rank that ends the job (:func:`~flegel.runtime.lifetime.end_job`) does the same, for a
  job that ends before that point.
* When ``flegel run`` starts the ranks itself it cleans up after its own job, which may
  have died before either (a rank that never started leaves the others in ``MPI_Init``):
  :func:`present` notes the files before the launch, and once every rank has ended
  :func:`remove_new` removes those that appeared meanwhile, belong to this user, and no
  live process maps or holds open (every ``/proc/PID/maps`` and ``/proc/PID/fd`` readable
  to us).  The choice, not a name computed from the job's ID: MPICH's hash of hydra's PMI
  job ID is an internal detail of each version, while "new since our launch and used by no
  process" holds for every version.  A file of another job is never removed while that job
  runs -- a live rank maps it (its creator from ``open`` to ``MPI_Finalize``; between
  ``open`` and ``mmap`` the descriptor is open) -- so all else it could remove is another
  job's leftover, which nothing can use either.

Only this host's ``/dev/shm`` is seen.  Where a job dies in ``MPI_Init`` and ``flegel
run`` did not start it (Slurm's ``srun`` or the batch script's ``mpiexec``, a hostfile's
other hosts), or another MPI program left its files, the cluster's epilog is the place to
remove ``/dev/shm/mpich_*`` of finished jobs (deploy/README.md, Slurm).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

#: Where MPICH (POSIX shared memory on Linux) keeps its files.
SHM_DIR = Path("/dev/shm")

#: The prefix of MPICH's files (``mpich_shm_*``, ``mpich_vci_*``).
PREFIX = "mpich_"


def present(folder: Path = SHM_DIR) -> set[str]:
    """Names of MPICH's files in ``folder`` now (empty when there is no such folder)."""
    try:
        return {entry.name for entry in os.scandir(folder) if entry.name.startswith(PREFIX)}
    except OSError:
        return set()


def _mapped(maps: str) -> set[str]:
    """The files named in a ``/proc/PID/maps`` (empty when it cannot be read)."""
    used: set[str] = set()
    with contextlib.suppress(OSError), open(maps, "rb") as f:  # gone, or not ours to read
        for line in f:
            # "start-end perms offset dev inode path" (a removed file: "path (deleted)")
            fields = line.split(maxsplit=5)
            if len(fields) == 6:
                used.add(fields[5].rstrip(b"\n").decode(errors="replace"))
    return used


def unlink_mapped(folder: Path = SHM_DIR, maps: str = "/proc/self/maps") -> list[Path]:
    """Remove the names of MPICH's files in ``folder`` that this process maps; return them.

    For a rank ending its job without ``MPI_Finalize``: the memory stays mapped for every
    rank until it exits, only the name goes (see the module's docstring).
    """
    prefix = f"{folder}/{PREFIX}"
    removed = []
    for name in sorted(_mapped(maps)):
        if name.startswith(prefix) and "/" not in name[len(prefix):]:
            with contextlib.suppress(OSError):  # another rank of the node removed it first
                os.unlink(name)
                removed.append(Path(name))
    return removed


def in_use(paths: Iterable[Path], proc: Path = Path("/proc")) -> set[Path]:
    """Those of ``paths`` that a live process maps (``/proc/PID/maps``) or holds open
    (``/proc/PID/fd``); processes whose entries we may not read are skipped (another user's:
    its files are not ours to remove either)."""
    wanted = {str(p) for p in paths}
    used: set[str] = set()
    if not wanted:
        return set()
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        used |= _mapped(os.path.join(entry.path, "maps"))
        with contextlib.suppress(OSError):
            fds = os.path.join(entry.path, "fd")
            for fd in os.listdir(fds):
                with contextlib.suppress(OSError):
                    used.add(os.readlink(os.path.join(fds, fd)))
    return {Path(p) for p in wanted & used}


def remove_new(before: set[str], folder: Path = SHM_DIR) -> list[Path]:
    """Remove MPICH's files in ``folder`` that are not in ``before`` (:func:`present`), are
    this user's, and that no live process uses (:func:`in_use`); return those removed.

    Call it once every rank of the job has ended.
    """
    uid = os.geteuid()
    new = []
    for name in sorted(present(folder) - before):
        path = folder / name
        with contextlib.suppress(OSError):
            if path.stat().st_uid == uid:
                new.append(path)
    used = in_use(new)
    removed = []
    for path in new:
        if path in used:
            continue
        try:
            path.unlink()
        except OSError:
            continue  # removed meanwhile
        removed.append(path)
    return removed
