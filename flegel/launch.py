"""Start the MPI job ourselves when ``flegel run`` is not under mpirun (DESIGN §4).

One command then works on a fresh machine: the bundled MPI (the ``mpich`` wheel of the
``mpi`` extra) launches ``workers + 1`` ranks of ``python -m flegel``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Environment variables set by MPI launchers (hydra, PMIx, Open MPI, Slurm's PMI).
_MPI_ENV = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
            "FLEGEL_UNDER_MPI")


def under_mpi() -> bool:
    """True when this process was started by an MPI launcher."""
    return any(v in os.environ for v in _MPI_ENV)


def find_mpiexec() -> str | None:
    """The launcher beside this Python (the mpich wheel puts it there), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def launch(n_ranks: int, args: list[str]) -> int:
    """Run ``python -m flegel ARGS`` on ``n_ranks`` MPI ranks; return the exit code."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        sys.stderr.write("flegel: no MPI launcher found; install one with "
                         "pip install 'flegel[mpi]' (the mpich wheel) or run under mpirun\n")
        return 2
    env = dict(os.environ, FLEGEL_UNDER_MPI="1")
    # One BLAS/OpenMP thread per rank unless the user said otherwise (DESIGN §4).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    cmd = [mpiexec, "-n", str(n_ranks), sys.executable, "-m", "flegel", *args]
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
