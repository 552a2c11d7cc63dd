#!/usr/bin/env bash
# The GPU checks of issue 23 (item 5) in one call of the device tool: the `gpu` tests and
# bench/gpu_bench.py (K-means and the CNN against one CPU core, host-to-device MB per pass,
# the shard resident on the device), in about 5 minutes (each step has its own time bound;
# the logs are written to $OUT as they go, so a run cut short still says how far it got).
#
# Here, on a machine without a GPU, once (the device machine reaches no registry):
#   bash bench/gpu_check.sh --prepare     # the mpich wheel into .whl/ (ignored by git), 13 MB
# Then, with the device tool (docs/benchmarks.md, "GPU"):
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=590)
# Logs and bench/gpu_bench.py's --json land in $OUT (the tool's folder that comes back).
#
# Steps, each bounded: what the machine has (GPU, Python, NumPy, CuPy); the wheels of .whl/
# into /tmp/site (mpich: mpiexec for the CNN job); CuPy if missing (cupy-cuda12x: the wheel in
# .whl/, else pip, which fails where nothing can be fetched: said in one line); flegel
# installed editable without dependencies (the image has them); `pytest -m gpu`; the bench
# (without the CNN job when MPI does not start, said in one line).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gpu_check}
MPICH_VERSION=5.0.2

if [ "${1:-}" = "--prepare" ]; then
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "mpich==$MPICH_VERSION" || exit 1
    ls -la .whl
    exit 0
fi

mkdir -p "$OUT"
say() { echo "gpu_check: $*"; }
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

say "machine"
nvidia-smi -L 2>&1 | head -4 || say "no nvidia-smi"
uptime
timeout 60 "$PY" -c "import sys, numpy; print('python', sys.version.split()[0], \
'numpy', numpy.__version__)"

if ls .whl/*.whl >/dev/null 2>&1; then
    say "installing $(ls .whl | tr '\n' ' ')into /tmp/site"
    timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site .whl/*.whl || say "installing .whl/ failed"
    # pip --target drops a wheel's data/lib (mpich's libmpi.so.12): unpack the data folders
    "$PY" - <<'UNPACK'
import glob, os, zipfile
for wheel in glob.glob(".whl/*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if (len(parts) > 3 and parts[0].endswith(".data") and parts[1] == "data"
                    and not info.is_dir()):
                dest = os.path.join("/tmp/site", *parts[2:])
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with z.open(info) as src, open(dest, "wb") as out:
                    out.write(src.read())
                os.chmod(dest, (info.external_attr >> 16) & 0o777 or 0o644)
UNPACK
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    export PATH=/tmp/site/bin:$PATH
    export LD_LIBRARY_PATH=/tmp/site/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

if command -v nvidia-smi >/dev/null && ! timeout 120 "$PY" -c "import cupy" 2>/dev/null; then
    say "CuPy missing: pip install cupy-cuda12x"
    timeout 180 "$PY" -m pip install -q cupy-cuda12x \
        || say "could not install cupy-cuda12x (no registry here? put its wheel in .whl/)"
fi
timeout 120 "$PY" -c "import cupy; print('cupy', cupy.__version__, 'devices', \
cupy.cuda.runtime.getDeviceCount())" 2>&1 | tail -1

say "installing flegel (editable, no dependencies)"
if ! timeout 180 "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . \
        >"$OUT/pip_flegel.log" 2>&1; then
    # (no setuptools/wheel to build with) flegel from the tree: flegel.algorithms is the
    # top-level algorithms/ folder (pyproject.toml's package-dir), linked in this copy
    say "pip could not install flegel ($(grep -m1 -i error "$OUT/pip_flegel.log")): PYTHONPATH"
    [ -e flegel/algorithms ] || ln -s ../algorithms flegel/algorithms
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
timeout 60 "$PY" -c "import flegel.algorithms.kmeans as k; print('flegel from', k.__file__)"

CNN=""
MPIEXEC=$(timeout 60 "$PY" -c "from flegel.cli.launch import find_mpiexec; \
print(find_mpiexec() or '')" 2>/dev/null)
if [ -z "$MPIEXEC" ]; then
    CNN="--no-cnn"
    say "no mpiexec (run --prepare here and carry .whl): the CNN job is skipped"
elif ! timeout 60 "$MPIEXEC" -n 2 "$PY" -c \
        "from mpi4py import MPI; assert MPI.COMM_WORLD.size == 2" >"$OUT/mpi_probe.log" 2>&1; then
    CNN="--no-cnn"
    say "MPI did not start ($MPIEXEC; $(tail -1 "$OUT/mpi_probe.log")): the CNN job is skipped"
else
    say "MPI starts: $MPIEXEC"
fi

say "pytest -m gpu ($(elapsed))"
set -o pipefail
timeout 200 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest_gpu.log" \
    | tail -30
say "pytest exit $? ($(elapsed))"

say "python bench/gpu_bench.py $CNN ($(elapsed))"
PYTHONUNBUFFERED=1 timeout 280 "$PY" bench/gpu_bench.py $CNN --cnn-timeout 100 \
    --json "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.log"
say "gpu_bench exit $? ($(elapsed))"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>&1 | tail -1
