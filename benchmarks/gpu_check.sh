#!/usr/bin/env bash
# gpu_check.sh: the one script to run on a machine with an NVIDIA GPU.
#
#   benchmarks/gpu_check.sh [-B BUILD_DIR] [-o RESULTS_DIR] [--prebuilt DIR]
#   benchmarks/gpu_check.sh --summarize RESULTS_DIR   (summary and JSON of CSVs already there)
#
# 1. configures a fresh build tree (default <repo>/build-gpu-check) with
#    -DCHORUS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=<compute capability from
#    nvidia-smi, fallback 90> -DCMAKE_BUILD_TYPE=Release, and
#    -DCHORUS_MPI=AUTO when mpiexec is on PATH (else OFF);
# 2. builds only chorus_gpu_suite, chorus_gpu_host_device_pointer,
#    chorus_bench_gpu and, when MPI was found, chorus_gpu_process
#    (-j$(nproc));
#    with --prebuilt DIR, steps 1-2 are skipped when DIR holds both
#    programs already built (e.g. on a machine without a GPU, with
#    -DCMAKE_CUDA_ARCHITECTURES=90, and carried over) and both start;
#    otherwise it builds as above;
# 3. with CUDA_DEVICE_MAX_CONNECTIONS=32, runs the GPU suite (virtual ranks
#    2/4/8 on device 0, and one rank per device when there are several),
#    then chorus_gpu_host_device_pointer (device memory refused by a threads
#    communicator from host-compiler code, managed memory reduced), then
#    the digits example on 4 virtual ranks (data_parallel_training_gpu:
#    chorus::train on gpu::communicator; sync, hybrid, async, 3 epochs
#    each; python3-sklearn's digits.csv.gz or CHORUS_DIGITS, else skipped),
#    then chorus_gpu_process under mpiexec with 2, 4 and 8 processes
#    (PROCESS_RANKS, default "2 4 8") on device 0 (one process per GPU:
#    gpu::make_communicator, CUDA IPC, a killed process; at most
#    PROCESS_TIMEOUT, default 120 s, each); without mpiexec it says so and
#    skips it;
# 4. runs chorus_bench_gpu --processes under mpiexec -n 8 (one rank per
#    process, all on device 0; skipped without mpiexec or an MPI build):
#    (p) AllReduce float, ring, 32 and 16 channels x 1 MiB and 256 KiB
#    chunks, 1 MiB..256 MiB (x4), buffers from comm.alloc (zero-copy);
#    (q) the same with plain cudaMalloc buffers (staged), 32 ch / 1 MiB,
#    1, 16, 256 MiB; (r) AllGather and ReduceScatter, 32 ch / 1 MiB, 1, 16,
#    256 MiB. Eager launches (-G 0); the time is the slowest process's.
#    Processes sharing one GPU are time-sliced unless an MPS daemon serves
#    them: with PROCESS_MPS=1 the script starts one of its own (private
#    pipe directory under /tmp, nvidia-cuda-mps-control -d) for the
#    process runs of steps 3-4 and stops it afterwards;
# 5. runs chorus_bench_gpu: (a) AllReduce float, 8 virtual ranks, ring, 16
#    and 32 channels, 1 MiB..256 MiB; (b) AllReduce float, 8 virtual ranks,
#    direct, 8 B..64 KiB; (c) AllGather and ReduceScatter, 8 ranks, ring,
#    1 MiB..256 MiB; (d) bfloat16 AllReduce, 8 ranks; (e) with more than one
#    GPU, one rank per device, with NCCL's time per row beside chorus's
#    (the nccl column); (f) Broadcast, Reduce and hierarchical<>
#    AllReduce, 8 ranks, a coarse sweep; (g) AllReduce float, 8 virtual
#    ranks, 8 B..64 MiB: automatic (the default policy; its table names
#    the algorithm it chose per size) against ring<> and direct<> with
#    their default tunings (the ones automatic runs), to see whether its
#    picks are right on this machine (about 30 s); (h) group launch: 8
#    AllReduces per rank of each size, 8 virtual ranks, automatic, 8 B..64
#    KiB, eager (-G 0), timed one by one (8 launches per rank) and in a
#    chorus::gpu::group (one launch per rank), both checked (--group 8;
#    a few seconds; its table is in h_allreduce_group.log, no CSV rows);
#    (i) calibration and defaults (a step of its own, docs/gpu.md
#    "Calibrating automatic"): chorus_calibrate_gpu on 8 virtual ranks
#    (--seconds 20, at most CALIBRATE_TIMEOUT, default 40 s) writes
#    RESULTS_DIR/model-calibrated.txt; then, with CHORUS_MODEL naming it,
#    AllReduce float, 8 virtual ranks, 8 B..256 MiB (x4): automatic (no
#    parameters anywhere: channels and chunks chosen per call) against
#    hand-tuned ring<>, direct<> and two_shot<> at 1 and 32 channels x
#    1 MiB chunks and their per-call defaults (--channels 0 --chunk 0);
#    skipped, and said, when chorus_calibrate_gpu was not built;
# 6. writes RESULTS_DIR/gpu-<YYYY-MM-DD>.json (gpu_results_json.sh: one
#    row per CSV row of every run: collective, algo, processes, ranks,
#    size_bytes, time_us, moved_over_copy, nccl_time_us = null, ...; card
#    from nvidia-smi) and prints where; copy it to
#    benchmarks/results/gpu-<date>.json with the docs (docs/gpu.md);
# 7. prints, last, a short summary table with the targets (AllReduce 8
#    virtual ranks x 256 MiB moved/copy >= 0.70; AllReduce 8 processes x
#    256 MiB moved/copy >= 0.70; AllReduce 8 ranks direct, worst time over
#    8 B..64 KiB <= 15 us), the process test per process count, and for (g)
#    automatic's picks and how far its time is from the faster of ring<>
#    and direct<>, (h)'s grouped/separate speedup;
#    for (i) the calibration, how far calibrated automatic is
#    from the best hand-tuned row per size (target: within 10 % at every
#    size) and its moved/copy at 256 MiB (target >= 0.80).
#
# moved/copy: the bytes every rank's schedule reads and writes per call
# over the time, divided by the D2D copy bandwidth (read + write) measured
# in the same run on each device used, summed over the devices. With 8
# virtual ranks or 8 processes on one GPU: all 8 ranks' bytes over that
# one device's copy bandwidth.
#
# Everything it prints is also saved under the results directory (default
# <repo>/build-gpu-check-results/<UTC time>; every /build* path is ignored
# by git). Environment overrides: BUILD_DIR, RESULTS_DIR, CUDA_ARCH,
# SUITE_TIMEOUT (seconds, default 300), BENCH_TIMEOUT (per benchmark run,
# default 180), PROCESS_RANKS (default "2 4 8"), PROCESS_TIMEOUT (default
# 120, per process count), PROCESS_BENCH_TIMEOUT (default 150, the (p)
# run; (q) and (r) at most 60 each), PROCESS_MPS (default 0),
# GPU_CHECK_BUDGET (default 570: seconds from the start after which no run
# starts; every run's timeout is cut to what is left, less 20 s for the
# summary, so the script ends within about GPU_CHECK_BUDGET seconds).
# Exit status: 0 when the build, the suite and every benchmark run
# succeeded (all results correct), whether or not the targets are met;
# 1 otherwise. Expected on one H200: build 2-3 min, suite and virtual-rank
# runs about 50 s, process tests and runs about 1-4 min (slower when the
# processes are time-sliced): within 10 minutes, which GPU_CHECK_BUDGET
# enforces.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build-gpu-check}
RESULTS_DIR=${RESULTS_DIR:-$SRC_DIR/build-gpu-check-results/$(date -u +%Y%m%dT%H%M%SZ)}
PREBUILT=
SUITE_TIMEOUT=${SUITE_TIMEOUT:-300}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-180}
PROCESS_RANKS=${PROCESS_RANKS:-2 4 8}
PROCESS_TIMEOUT=${PROCESS_TIMEOUT:-120}
PROCESS_BENCH_TIMEOUT=${PROCESS_BENCH_TIMEOUT:-150}
PROCESS_MPS=${PROCESS_MPS:-0}
GPU_CHECK_BUDGET=${GPU_CHECK_BUDGET:-570}
SUMMARIZE=0
HAVE_MPIEXEC=0
command -v mpiexec >/dev/null 2>&1 && HAVE_MPIEXEC=1

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

while (($#)); do
    case "$1" in
    -B | --build-dir)
        BUILD_DIR=$2
        shift 2
        ;;
    -o | --results)
        RESULTS_DIR=$2
        shift 2
        ;;
    --prebuilt)
        PREBUILT=$2
        shift 2
        ;;
    --summarize)
        RESULTS_DIR=$2
        SUMMARIZE=1
        shift 2
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
done

START=$(date +%s)
if ((SUMMARIZE)) && [[ ! -d $RESULTS_DIR ]]; then
    echo "gpu_check.sh: --summarize $RESULTS_DIR: no such directory" >&2
    exit 2
fi
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)

# left_s: seconds left before GPU_CHECK_BUDGET, less 20 s for the summary.
left_s() { echo $((GPU_CHECK_BUDGET - ($(date +%s) - START) - 20)); }
# cap_s WANT: WANT, cut to what the budget leaves (0: too little to start a run).
cap_s() {
    local left
    left=$(left_s)
    if ((left < 15)); then
        echo 0
    elif ((left < $1)); then
        echo "$left"
    else
        echo "$1"
    fi
}
BUDGET_SKIPPED=()

# What the summary reads; the steps below set them.
NGPU=0
CUDA_ARCH=${CUDA_ARCH:-}
USE_PREBUILT=0
TARGETS=()
BUILD_SECS=0
SUITE_STATUS="not run"
POINTER_STATUS="not run"
TRAIN_STATUS="not run"
declare -A PROCESS_STATUS=()
PROCESS_NPS=()
MPS_STATE="off (processes sharing a GPU are time-sliced)"
declare -A RUN_RC=()
RUN_ORDER=()
CARD=unknown

if ((SUMMARIZE)); then
    echo "gpu_check: --summarize: the summary and JSON of the CSVs in $RESULTS_DIR (nothing is built or run)"
    [[ -f $RESULTS_DIR/card.txt ]] && CARD=$(head -n 1 "$RESULTS_DIR/card.txt")
    SUITE_STATUS="not run (--summarize)"
    POINTER_STATUS="not run (--summarize)"
    TRAIN_STATUS="not run (--summarize)"
    for f in "$RESULTS_DIR"/*.csv; do
        [[ -f $f ]] || continue
        name=$(basename "$f" .csv)
        RUN_ORDER+=("$name")
        RUN_RC[$name]=0
    done
else
echo "gpu_check: source $SRC_DIR, build $BUILD_DIR, results $RESULTS_DIR"

# --- the machine -------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
if ! command -v nvcc >/dev/null 2>&1; then
    echo "gpu_check: nvcc not found (put the CUDA toolkit's bin/ on PATH)" >&2
    exit 1
fi
NVCC=$(command -v nvcc)

NGPU=0
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi >"$RESULTS_DIR/nvidia-smi.txt" 2>&1 || true
    nvidia-smi topo -m >>"$RESULTS_DIR/nvidia-smi.txt" 2>&1 || true
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | sed 's/^ *//; s/ *$//' || true)
    [[ -n $CARD ]] || CARD=unknown
fi
echo "$CARD" >"$RESULTS_DIR/card.txt"
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -r -a _visible <<<"$CUDA_VISIBLE_DEVICES"
    NGPU=${#_visible[@]}
fi

if [[ -z ${CUDA_ARCH:-} ]]; then
    CUDA_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
        tr -d ' .' | grep -E '^[0-9]+$' | sort -u | paste -sd';' - || true)
    CUDA_ARCH=${CUDA_ARCH:-90}
fi
{
    echo "date: $(date -u)"
    echo "host: $(hostname)"
    echo "nvcc: $NVCC"
    "$NVCC" --version | tail -n 2
    echo "GPUs: $NGPU, CMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH"
    echo "git: $(git -C "$SRC_DIR" rev-parse --short HEAD 2>/dev/null || echo '?')" \
        "($(git -C "$SRC_DIR" status --porcelain 2>/dev/null | wc -l) changed files)"
} | tee "$RESULTS_DIR/machine.txt"

# --- configure (fresh) and build ------------------------------------------------
SUITE_BUILT=1
TARGETS=(chorus_gpu_suite chorus_bench_gpu)
BUILD_SECS=0
USE_PREBUILT=0
if [[ -n $PREBUILT ]]; then
    # Both programs must exist and find their libraries here (a binary built
    # elsewhere may lack one); the benchmark's --help must run.
    loads() { [[ -x $1 ]] && ldd "$1" >/dev/null 2>&1 && ! ldd "$1" | grep -q 'not found'; }
    # A tree built to be checked only (CHORUS_CUDA_UNOPTIMIZED, scripts/test
    # on a machine without a GPU; CHORUS_PROGRAMS_UNOPTIMIZED, scripts/test
    # anywhere) would time unoptimized code: rebuilt.
    unoptimized=$(grep -oE '^CHORUS_(CUDA|PROGRAMS)_UNOPTIMIZED:BOOL=ON' "$PREBUILT/CMakeCache.txt" 2>/dev/null |
        head -n 1 | cut -d: -f1 || true)
    if [[ -n $unoptimized ]]; then
        echo "gpu_check: --prebuilt $PREBUILT was built with $unoptimized=ON; building here" |
            tee "$RESULTS_DIR/build.log"
    elif loads "$PREBUILT/tests/gpu/chorus_gpu_suite" && loads "$PREBUILT/benchmarks/chorus_bench_gpu" &&
        "$PREBUILT/benchmarks/chorus_bench_gpu" --help >/dev/null 2>&1; then
        USE_PREBUILT=1
        BUILD_DIR=$(cd "$PREBUILT" && pwd)
        echo "gpu_check: using the programs prebuilt in $BUILD_DIR" | tee "$RESULTS_DIR/build.log"
    else
        echo "gpu_check: --prebuilt $PREBUILT: programs missing or do not start; building here" |
            tee "$RESULTS_DIR/build.log"
        ldd "$PREBUILT/tests/gpu/chorus_gpu_suite" "$PREBUILT/benchmarks/chorus_bench_gpu" 2>&1 |
            grep -E 'not found|:$' >>"$RESULTS_DIR/build.log" || true
    fi
fi
if ((!USE_PREBUILT)); then
    if [[ -e $BUILD_DIR ]]; then
        if [[ -f $BUILD_DIR/CMakeCache.txt ]]; then
            rm -rf "$BUILD_DIR"
        elif [[ -n $(ls -A "$BUILD_DIR") ]]; then
            echo "gpu_check: $BUILD_DIR exists and is not a build tree; refusing to delete it" >&2
            exit 1
        fi
    fi

    CONFIG=(-S "$SRC_DIR" -B "$BUILD_DIR"
        -DCHORUS_CUDA=ON
        "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH"
        -DCMAKE_BUILD_TYPE=Release
        -DCHORUS_CUDA_UNOPTIMIZED=OFF
        -DCHORUS_PROGRAMS_UNOPTIMIZED=OFF
        "-DCHORUS_MPI=$( ((HAVE_MPIEXEC)) && echo AUTO || echo OFF)"
        "-DCMAKE_CUDA_COMPILER=$NVCC")
    echo "+ cmake ${CONFIG[*]}"
    if ! cmake "${CONFIG[@]}" 2>&1 | tee "$RESULTS_DIR/configure.log"; then
        if grep -qi doctest "$RESULTS_DIR/configure.log"; then
            # The test tree needs doctest for its CPU tests; without it, build the
            # benchmark alone (install doctest, e.g. apt-get install doctest-dev,
            # to get the suite).
            echo "gpu_check: doctest is missing: configuring without tests; the GPU suite is NOT built" |
                tee -a "$RESULTS_DIR/configure.log"
            SUITE_BUILT=0
            rm -rf "$BUILD_DIR"
            cmake "${CONFIG[@]}" -DCHORUS_BUILD_TESTS=OFF 2>&1 | tee -a "$RESULTS_DIR/configure.log"
        else
            echo "gpu_check: configure failed (see $RESULTS_DIR/configure.log)" >&2
            exit 1
        fi
    fi

    ((SUITE_BUILT)) && TARGETS+=(chorus_gpu_host_device_pointer)
    # One process per GPU: only where CMake found MPI (the target exists).
    if ((SUITE_BUILT && HAVE_MPIEXEC)) &&
        cmake --build "$BUILD_DIR" --target help 2>/dev/null | grep -q chorus_gpu_process; then
        TARGETS+=(chorus_gpu_process)
    fi
    # Training on GPUs: the digits example (where examples are configured).
    if ((SUITE_BUILT)) && cmake --build "$BUILD_DIR" --target help 2>/dev/null | grep -q data_parallel_training_gpu; then
        TARGETS+=(data_parallel_training_gpu)
    fi
    ((SUITE_BUILT)) || TARGETS=(chorus_bench_gpu)
    # (i): the GPU calibration tool (tools/, built with the benchmarks where CUDA is on).
    if cmake --build "$BUILD_DIR" --target help 2>/dev/null | grep -q chorus_calibrate_gpu; then
        TARGETS+=(chorus_calibrate_gpu)
    fi
    echo "+ cmake --build $BUILD_DIR -j$(nproc) --target ${TARGETS[*]}"
    BUILD_START=$(date +%s)
    cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" 2>&1 | tee -a "$RESULTS_DIR/build.log"
    BUILD_SECS=$(($(date +%s) - BUILD_START))
fi

BENCH=$BUILD_DIR/benchmarks/chorus_bench_gpu
SUITE=$BUILD_DIR/tests/gpu/chorus_gpu_suite
export CUDA_DEVICE_MAX_CONNECTIONS=32

# --- the suite ---------------------------------------------------------------------
SUITE_STATUS="NOT BUILT (doctest missing)"
SUITE_RC=-
SUITE_LIMIT=$(cap_s "$SUITE_TIMEOUT")
if ((SUITE_BUILT && SUITE_LIMIT == 0)); then
    SUITE_STATUS="SKIPPED (time budget spent)"
    BUDGET_SKIPPED+=("chorus_gpu_suite")
elif ((SUITE_BUILT)); then
    echo "+ CUDA_DEVICE_MAX_CONNECTIONS=32 $SUITE   (timeout $SUITE_LIMIT s)"
    set +e
    # 300 s by default: the suite also runs the newer policies (tree<>, ..., automatic, deterministic<>).
    timeout -k 10 "$SUITE_LIMIT" "$SUITE" 2>&1 | tee "$RESULTS_DIR/suite.log"
    SUITE_RC=${PIPESTATUS[0]}
    set -e
    SUITE_LINE=$(grep -E '^(PASSED|FAILED): [0-9]+ case' "$RESULTS_DIR/suite.log" | tail -n 1 || true)
    case $SUITE_RC in
    0) SUITE_STATUS="PASSED (${SUITE_LINE#*: })" ;;
    77) SUITE_STATUS="SKIPPED (no CUDA device)" ;;
    124 | 137) SUITE_STATUS="FAILED (timed out after $SUITE_LIMIT s)" ;;
    *) SUITE_STATUS="FAILED (exit $SUITE_RC${SUITE_LINE:+; ${SUITE_LINE#*: }})" ;;
    esac
fi

# A device pointer handed to a threads communicator from host-compiler code
# is refused (the CUDA driver is asked), managed memory is reduced.
POINTER_STATUS="NOT BUILT"
POINTER=$BUILD_DIR/tests/gpu/chorus_gpu_host_device_pointer
if [[ -x $POINTER ]]; then
    set +e
    timeout -k 10 60 "$POINTER" 2>&1 | tee "$RESULTS_DIR/host_device_pointer.log"
    case ${PIPESTATUS[0]} in
    0) POINTER_STATUS="PASSED" ;;
    77) POINTER_STATUS="SKIPPED (no CUDA device)" ;;
    *) POINTER_STATUS="FAILED (see host_device_pointer.log)" ;;
    esac
    set -e
fi

# Training on GPUs: the digits example, 4 virtual ranks, sync, hybrid and
# async (each about 10 s), with chorus::train on gpu::communicator. The data
# is python3-sklearn's digits.csv.gz (CHORUS_DIGITS names another copy;
# without one the run is skipped, and said).
TRAIN=$BUILD_DIR/examples/data_parallel_training_gpu
DIGITS=${CHORUS_DIGITS:-/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz}
if ((!SUMMARIZE)); then
    TRAIN_STATUS="NOT BUILT"
    if [[ -x $TRAIN && ! -f $DIGITS ]]; then
        TRAIN_STATUS="SKIPPED (no $DIGITS: install python3-sklearn or set CHORUS_DIGITS)"
    elif [[ -x $TRAIN ]]; then
        TRAIN_STATUS="PASSED (sync, hybrid, async; 4 virtual ranks)"
        for mode in sync hybrid async; do
            limit=$(cap_s 60)
            if ((limit == 0)); then
                TRAIN_STATUS="NOT RUN from $mode on (GPU_CHECK_BUDGET spent)"
                break
            fi
            echo "+ data_parallel_training_gpu --mode $mode   (timeout $limit s)"
            set +e
            CHORUS_DIGITS=$DIGITS timeout -k 10 "$limit" "$TRAIN" --ranks 4 --epochs 3 --hidden 256 --batch 16 \
                --mode "$mode" --min-accuracy 0.6 2>&1 | tee "$RESULTS_DIR/train_$mode.log"
            rc=${PIPESTATUS[0]}
            set -e
            case $rc in
            0) ;;
            77)
                TRAIN_STATUS="SKIPPED (no CUDA device)"
                break
                ;;
            *)
                TRAIN_STATUS="FAILED ($mode: exit $rc, see train_$mode.log)"
                break
                ;;
            esac
        done
    fi
fi

# --- one process per GPU ------------------------------------------------------------
# The environment of every mpiexec below (Open MPI as root, more processes
# than cores), plus the MPS daemon's pipe directory with PROCESS_MPS=1.
MPI_ENV=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
MPS_DIR=
stop_mps() {
    if [[ -n $MPS_DIR ]]; then
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log \
            timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1 || true
        cp -r "$MPS_DIR/log" "$RESULTS_DIR/mps-log" 2>/dev/null || true
        rm -rf "$MPS_DIR"
        MPS_DIR=
    fi
}
if [[ $PROCESS_MPS == 1 ]] && ((HAVE_MPIEXEC)); then
    if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        MPS_DIR=$(mktemp -d /tmp/chorus-mps.XXXXXX)
        mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
        trap stop_mps EXIT
        if CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log \
            timeout 20 nvidia-cuda-mps-control -d; then
            MPI_ENV+=("CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe" "CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log")
            MPS_STATE="on (an MPS daemon of this script: $MPS_DIR)"
        else
            MPS_STATE="off: nvidia-cuda-mps-control -d failed (time-sliced)"
            rm -rf "$MPS_DIR"
            MPS_DIR=
        fi
    else
        MPS_STATE="off: PROCESS_MPS=1 but nvidia-cuda-mps-control is not on PATH (time-sliced)"
    fi
    echo "gpu_check: MPS $MPS_STATE"
fi

# The suite's test (gpu::make_communicator): 2, 4 and 8 processes on device
# 0 under mpiexec, CUDA IPC between them, a killed process at the end.
PROCESS=$BUILD_DIR/tests/gpu/chorus_gpu_process
read -r -a PROCESS_NPS <<<"$PROCESS_RANKS"
for np in "${PROCESS_NPS[@]}"; do
    if ((!HAVE_MPIEXEC)); then
        PROCESS_STATUS[$np]="SKIPPED (mpiexec not found)"
        continue
    elif [[ ! -x $PROCESS ]]; then
        PROCESS_STATUS[$np]="NOT BUILT (no MPI found by CMake, or no doctest)"
        continue
    fi
    limit=$(cap_s "$PROCESS_TIMEOUT")
    if ((limit == 0)); then
        PROCESS_STATUS[$np]="SKIPPED (time budget spent)"
        BUDGET_SKIPPED+=("chorus_gpu_process -n $np")
        continue
    fi
    echo "+ mpiexec -n $np $PROCESS   (timeout $limit s)"
    set +e
    env "${MPI_ENV[@]}" CHORUS_TIMEOUT_MS=60000 timeout -k 10 "$limit" \
        mpiexec -n "$np" "$PROCESS" 2>&1 | tee "$RESULTS_DIR/gpu_process_$np.log"
    case ${PIPESTATUS[0]} in
    0) PROCESS_STATUS[$np]="PASSED" ;;
    77) PROCESS_STATUS[$np]="SKIPPED (no CUDA device)" ;;
    124 | 137) PROCESS_STATUS[$np]="FAILED (timed out after $limit s)" ;;
    *) PROCESS_STATUS[$np]="FAILED (see gpu_process_$np.log)" ;;
    esac
    set -e
done
if ((!HAVE_MPIEXEC)); then
    echo "gpu_check: mpiexec not found: the one-process-per-GPU test (chorus_gpu_process) and benchmark are skipped"
fi

# run_logged NAME WANT COMMAND...: one benchmark run, at most WANT seconds
# (cut to the budget; not started, and listed, when it is spent), its output
# in NAME.log, its exit status in RUN_RC[NAME]; the command writes NAME.csv.
# Rows are written as they are measured: a run stopped by its timeout keeps them.
run_logged() {
    local name=$1 want=$2 limit
    shift 2
    limit=$(cap_s "$want")
    if ((limit == 0)); then
        BUDGET_SKIPPED+=("$name")
        return 0
    fi
    RUN_ORDER+=("$name")
    echo "+ $*   (timeout $limit s)"
    set +e
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$RESULTS_DIR/$name.log"
    RUN_RC[$name]=${PIPESTATUS[0]}
    set -e
}
# run_bench_mpi NP WANT NAME ARGS...: chorus_bench_gpu --processes ARGS under mpiexec -n NP.
# Skipped (said) without mpiexec or when the benchmark was built without MPI.
PBENCH_STATE="not run"
run_bench_mpi() {
    local np=$1 want=$2 name=$3
    shift 3
    run_logged "$name" "$want" env "${MPI_ENV[@]}" mpiexec -n "$np" "$BENCH" --processes "$@" \
        --csv "$RESULTS_DIR/$name.csv"
}
if ((!HAVE_MPIEXEC)); then
    PBENCH_STATE="SKIPPED (mpiexec not found)"
elif ! "$BENCH" --help 2>/dev/null | grep -q -- '--processes'; then
    PBENCH_STATE="SKIPPED (chorus_bench_gpu has no --processes)"
elif "$BENCH" --processes --ranks 2 2>&1 | grep -q 'built without MPI'; then # a usage error either way: runs nothing
    PBENCH_STATE="SKIPPED (chorus_bench_gpu was built without MPI)"
else
    PBENCH_STATE="ran"
    PLARGE=(--collectives all_reduce -d float --algo ring --timeout-ms 30000)
    # (p) AllReduce, 8 processes, ring, the virtual-rank run's best tuning (32 ch, 1 MiB) first.
    run_bench_mpi 8 "$PROCESS_BENCH_TIMEOUT" p_allreduce_ring "${PLARGE[@]}" --channels 32,16 --chunk 1M,256K \
        -b 1M -e 256M -f 4 -n 10 -w 2
    # (q) the same, plain cudaMalloc buffers: staged through the scratch.
    run_bench_mpi 8 60 q_allreduce_ring_staged "${PLARGE[@]}" --buffers staged --channels 32 --chunk 1M \
        -b 1M -e 256M -f 16 -n 5 -w 1
    # (r) AllGather and ReduceScatter, 8 processes, ring.
    run_bench_mpi 8 60 r_allgather_reducescatter_ring --collectives all_gather,reduce_scatter -d float --algo ring \
        --timeout-ms 30000 --channels 32 --chunk 1M -b 1M -e 256M -f 16 -n 5 -w 1
fi
stop_mps

# --- the benchmark: virtual ranks (and one rank per device) -------------------------
# run_bench NAME ARGS...: one chorus_bench_gpu invocation (run_logged, at most BENCH_TIMEOUT).
run_bench() {
    local name=$1
    shift
    run_logged "$name" "$BENCH_TIMEOUT" "$BENCH" "$@" --csv "$RESULTS_DIR/$name.csv"
}

LARGE=(-b 1M -e 256M -f 2)
SMALL=(-b 8 -e 64K -f 2)
# (a) AllReduce float, 8 virtual ranks, ring, 16 and 32 channels
run_bench a_allreduce_ring --ranks 8 --collectives all_reduce -d float --algo ring \
    --channels 16,32 --chunk 256K,1M "${LARGE[@]}" -n 40 -w 5
# (b) AllReduce float, 8 virtual ranks, direct, small messages
run_bench b_allreduce_direct_small --ranks 8 --collectives all_reduce -d float --algo direct \
    --channels 1,2,4 --chunk 64K "${SMALL[@]}" -n 500 -w 50
# (c) AllGather and ReduceScatter, 8 ranks, ring
run_bench c_allgather_reducescatter_ring --ranks 8 --collectives all_gather,reduce_scatter -d float \
    --algo ring --channels 16,32 --chunk 256K "${LARGE[@]}" -n 20 -w 3
# (d) bfloat16 AllReduce, 8 ranks: ring on large, direct on small messages
run_bench d_allreduce_bf16_ring --ranks 8 --collectives all_reduce -d bfloat16 --algo ring \
    --channels 16,32 --chunk 256K "${LARGE[@]}" -n 20 -w 3
run_bench d_allreduce_bf16_direct_small --ranks 8 --collectives all_reduce -d bfloat16 --algo direct \
    --channels 1,4 --chunk 64K "${SMALL[@]}" -n 500 -w 50
# (e) one rank per device
if ((NGPU > 1)); then
    run_bench e_devices_ring --devices --collectives all_reduce,all_gather,reduce_scatter -d float \
        --algo ring --channels 16,32 --chunk 256K -b 1M -e 256M -f 4 -n 20 -w 3
    run_bench e_devices_direct_small --devices --collectives all_reduce -d float --algo direct \
        --channels 1,4 --chunk 64K "${SMALL[@]}" -n 500 -w 50
fi
# (f) the rest, coarse: Broadcast and Reduce (ring), AllReduce hierarchical<> (2 emulated nodes of 4)
run_bench f_broadcast_reduce_ring --ranks 8 --collectives broadcast,reduce -d float --algo ring \
    --channels 16 --chunk 256K -b 1M -e 256M -f 16 -n 10 -w 2
run_bench f_allreduce_hierarchical --ranks 8 --ranks-per-node 4 --collectives all_reduce -d float \
    --algo hierarchical --channels 16 --chunk 256K -b 1M -e 256M -f 16 -n 10 -w 2
# (g) AllReduce float, 8 virtual ranks, 8 B..64 MiB: automatic against ring<> and direct<> with their
# default tunings (ring<>: 1 channel, 256 KiB; direct<>: 1 channel, 1 MiB), which are what automatic runs.
# automatic ignores --channels/--chunk; its CSV column 22 (chosen) is its pick per size.
G_SIZES=(-b 8 -e 64M -f 2 -n 30 -w 3)
run_bench g_allreduce_automatic_ring --ranks 8 --collectives all_reduce -d float --algo automatic,ring \
    --channels 1 --chunk 256K "${G_SIZES[@]}"
run_bench g_allreduce_direct_default --ranks 8 --collectives all_reduce -d float --algo direct \
    --channels 1 --chunk 1M "${G_SIZES[@]}"
# (h) group launch: 8 AllReduces per rank, one by one vs in a chorus::gpu::group (--group 8), eager.
run_bench h_allreduce_group --ranks 8 -d float --algo automatic --group 8 "${SMALL[@]}" -G 0 -n 50 -w 5

# --- (i) calibration and defaults (docs/gpu.md "Calibrating automatic") -----------------
# chorus_calibrate_gpu measures this device and writes the model file automatic loads; the
# comparison then runs automatic with it (CHORUS_MODEL) against hand-tuned rows.
CALIBRATE=$BUILD_DIR/tools/chorus_calibrate_gpu
CALIBRATED_MODEL=$RESULTS_DIR/model-calibrated.txt
if [[ ! -x $CALIBRATE ]]; then
    CALIBRATE_STATE="NOT RUN (chorus_calibrate_gpu not built in $BUILD_DIR)"
else
    run_logged i_calibrate "${CALIBRATE_TIMEOUT:-40}" "$CALIBRATE" -t 8 --seconds 20 -o "$CALIBRATED_MODEL"
    if [[ -z ${RUN_RC[i_calibrate]:-} ]]; then
        CALIBRATE_STATE="NOT RUN (time budget spent)"
    elif [[ ${RUN_RC[i_calibrate]} == 0 && -s $CALIBRATED_MODEL ]]; then
        CALIBRATE_STATE="ok: $CALIBRATED_MODEL"
        run_logged i_allreduce_defaults_calibrated "$BENCH_TIMEOUT" env CHORUS_MODEL="$CALIBRATED_MODEL" "$BENCH" \
            --ranks 8 --collectives all_reduce -d float --algo automatic,ring,direct,two_shot \
            --channels 0,1,32 --chunk 0,1M -b 8 -e 256M -f 4 -n 10 -w 2 \
            --csv "$RESULTS_DIR/i_allreduce_defaults_calibrated.csv"
    else
        CALIBRATE_STATE="FAILED (exit ${RUN_RC[i_calibrate]}; see $RESULTS_DIR/i_calibrate.log)"
    fi
fi
fi # (not --summarize)

# --- summary -----------------------------------------------------------------------------
csv() { # csv NAME: the rows of NAME.csv without the header (nothing if absent)
    if [[ -f $RESULTS_DIR/$1.csv ]]; then
        tail -n +2 "$RESULTS_DIR/$1.csv"
    fi
}
# CSV columns: 1 collective, 2 type, 3 algo, 4 channels, 5 chunk_bytes, 6 ranks, 7 devices,
# 8 node_size, 9 graph (-G: timed graph launches, 0 eager), 10 iters, 11 warmup, 12 size_bytes
# (nccl-tests' size: AllGather/ReduceScatter the whole buffer), 13 count, 14 time_us, 15 algbw,
# 16 busbw, 17 moved_bytes, 18 moved_gbps, 19 copy_gbps, 20 copy_ratio, 21 wrong,
# 22 chosen (the algorithm that ran: automatic's pick, else the algo itself), 23 processes (MPI
# processes, one rank each with --processes; 1 for virtual ranks), 24 buffers (device: cudaMalloc
# read by peers directly; registered: comm.alloc, zero-copy; staged: cudaMalloc, staged),
# 25 nccl_time_us (NCCL's time for the row, where NCCL runs: one rank per device, several devices;
# empty elsewhere), 26 limit_us (one device: least bytes moved / copy bandwidth; empty elsewhere).
# ranks (6) = every rank of the collective (with --processes, the processes); devices (7) = distinct
# CUDA devices among them; copy_gbps (19) = the D2D copy bandwidth (read + write) measured in the
# same run, summed over those devices; copy_ratio (20) = moved_gbps / copy_gbps.
S256=268435456

copy_of() { # copy_of NAME: the run's copy bandwidth, GB/s
    csv "$1" | awk -F, 'NR == 1 { printf "%.1f", $19 }'
}
COPY_GBPS=$(copy_of a_allreduce_ring)
best_ratio() { # best_ratio NAME: the best AllReduce moved/copy at 256 MiB over the run's tunings, and which
    csv "$1" | awk -F, -v s=$S256 '$1 == "all_reduce" && $12 == s && $20 + 0 > best + 0 {
        best = $20; how = sprintf("%.3f (busbw %.1f GB/s, %.2f ms, ring channels=%s chunk=%dK)", $20, $16, $14 / 1000, $4, $5 / 1024) }
        END { if (how != "") print how }'
}
# Best moved/copy at 256 MiB over the ring tunings, and which: 8 virtual ranks (a), 8 processes (p, q).
AR_RATIO=$(best_ratio a_allreduce_ring)
AR_RATIO_NUM=${AR_RATIO%% *}
PAR_RATIO=$(best_ratio p_allreduce_ring)
PAR_RATIO_NUM=${PAR_RATIO%% *}
PAR_STAGED=$(best_ratio q_allreduce_ring_staged)
PCOPY_GBPS=$(copy_of p_allreduce_ring)
# Direct: per tuning the worst time over the sweep; then the best tuning.
small_worst() {
    csv "$1" | awk -F, '{ key = $4 "," $5; if (!(key in worst) || $14 > worst[key]) worst[key] = $14 }
        END { for (k in worst) if (best == "" || worst[k] < best) { best = worst[k]; bk = k }
              if (best != "") { split(bk, p, ","); printf "%.2f us (direct channels=%s chunk=%dK)", best, p[1], p[2] / 1024 } }'
}
DIRECT_WORST=$(small_worst b_allreduce_direct_small)
DIRECT_WORST_NUM=${DIRECT_WORST%% *}
at256() { # at256 NAME COLLECTIVE: best busbw and /copy at 256 MiB
    csv "$1" | awk -F, -v s=$S256 -v c="$2" '$1 == c && $12 == s && $16 > bw { bw = $16; r = $20 }
        END { if (bw != "") printf "busbw %.1f GB/s, /copy %.3f", bw, r }'
}
vs_nccl() { # vs_nccl NAME COLLECTIVE: per size the best chorus time over NCCL's (column 25), the worst size
    csv "$1" | awk -F, -v c="$2" '$1 == c && $25 != "" && $25 > 0 {
            if (!($12 in t) || $14 < t[$12]) t[$12] = $14
            nc[$12] = $25 }
        END { for (s in t) { r = t[s] / nc[s]; n++; if (r <= 1.0) ok++; if (r > worst) { worst = r; ws = s } }
              if (n) printf "chorus <= NCCL at %d of %d sizes; worst chorus/NCCL time %.2fx at %d B", ok, n, worst, ws }'
}
AWK_HB='function hb(b) { b += 0; return b >= 1048576 ? sprintf("%gM", b / 1048576) : b >= 1024 ? sprintf("%gK", b / 1024) : b "B" }'
# (g): automatic's picks as size ranges, in size order ("direct 8B-32K, two_shot 64K-64M").
AUTO_PICKS=$(csv g_allreduce_automatic_ring | awk -F, "$AWK_HB"'
    $1 == "all_reduce" && $3 == "automatic" {
        if ($22 != cur) {
            if (cur != "") { out = out sep cur " " hb(lo) "-" hb(hi); sep = ", " }
            cur = $22; lo = $12
        }
        hi = $12 }
    END { if (cur != "") print out sep cur " " hb(lo) "-" hb(hi) }')
# (g): automatic's time over the faster of ring<> and direct<> per size.
AUTO_VS=$({
    csv g_allreduce_automatic_ring
    csv g_allreduce_direct_default
} | awk -F, "$AWK_HB"'
    $1 != "all_reduce" { next }
    $3 == "automatic" { a[$12] = $14; next }
    !($12 in b) || $14 < b[$12] { b[$12] = $14; bn[$12] = $3 }
    END { for (s in a) if (s in b && b[s] > 0) { n++; r = a[s] / b[s]; if (r <= 1.10) ok++
              if (r > worst) { worst = r; ws = s; wn = bn[s] } }
          if (n) printf "within 10%% at %d of %d sizes; worst %.2fx at %s (%s)", ok, n, worst, hb(ws), wn }')
# (i): calibrated automatic over the best hand-tuned row (explicit channels, CSV column 4 > 0) per
# size, and its moved/copy (column 20) at 256 MiB.
CALIBRATE_STATE=${CALIBRATE_STATE:-not run}
[[ $CALIBRATE_STATE == "not run" && -f $RESULTS_DIR/model-calibrated.txt ]] && CALIBRATE_STATE="ok (earlier run)"
CAL_VS=$(csv i_allreduce_defaults_calibrated | awk -F, "$AWK_HB"'
    $1 != "all_reduce" { next }
    $3 == "automatic" { a[$12] = $14; next }
    $4 > 0 && (!($12 in b) || $14 < b[$12]) { b[$12] = $14; bn[$12] = $3 "<" $4 "ch," hb($5) ">" }
    END { for (s in a) if (s in b && b[s] > 0) { n++; r = a[s] / b[s]; if (r <= 1.10) ok++
              if (r > worst) { worst = r; ws = s; wn = bn[s] } }
          if (n) printf "within 10%% at %d of %d sizes; worst %.2fx at %s (%s)", ok, n, worst, hb(ws), wn }')
CAL_ALL=$(csv i_allreduce_defaults_calibrated | awk -F, '
    $1 != "all_reduce" { next }
    $3 == "automatic" { a[$12] = $14; next }
    $4 > 0 && (!($12 in b) || $14 < b[$12]) { b[$12] = $14 }
    END { for (s in a) if (s in b && b[s] > 0) { n++; if (a[s] / b[s] <= 1.10) ok++ }
          if (n) print (ok == n ? 1 : 0) }')
CAL_RATIO=$(csv i_allreduce_defaults_calibrated | awk -F, '$1 == "all_reduce" && $3 == "automatic" && $12 == 268435456 { print $20 }' | tail -n 1)
target() { # target VALUE OP LIMIT
    [[ -z $1 ]] && {
        echo "n/a"
        return
    }
    awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN { ok = op == ">=" ? v >= l : v <= l; print ok ? "MET" : "NOT MET" }'
}

# (h): the grouped/separate line of its summary.
GROUP_SPEEDUP=
if [[ -f $RESULTS_DIR/h_allreduce_group.log ]]; then
    GROUP_SPEEDUP=$(grep -m1 '^# summary AllReduce x' "$RESULTS_DIR/h_allreduce_group.log" | sed 's/^# summary [^:]*: //' || true)
fi

# The results file: every CSV of this run, one JSON row per CSV row.
RESULTS_JSON=$RESULTS_DIR/gpu-$(date -u +%F).json
JSON_CSVS=()
for name in "${RUN_ORDER[@]}"; do
    [[ -f $RESULTS_DIR/$name.csv ]] && JSON_CSVS+=("$RESULTS_DIR/$name.csv")
done
if bash "$SCRIPT_DIR/gpu_results_json.sh" --date "$(date -u +%F)" --card "$CARD" "${JSON_CSVS[@]}" >"$RESULTS_JSON"; then
    JSON_STATUS="$RESULTS_JSON ($(grep -c '"collective"' "$RESULTS_JSON" || true) rows; copy it to benchmarks/results/)"
else
    JSON_STATUS="FAILED to write $RESULTS_JSON"
fi
echo "gpu_check: results JSON: $JSON_STATUS"

PROCESS_FAILED=0
for np in "${PROCESS_NPS[@]}"; do
    [[ ${PROCESS_STATUS[$np]} == FAILED* ]] && PROCESS_FAILED=1
done

BENCH_FAILED=()
for name in "${RUN_ORDER[@]}"; do
    [[ ${RUN_RC[$name]} == 0 ]] || BENCH_FAILED+=("$name (exit ${RUN_RC[$name]})")
done
WRONG=0
for name in "${RUN_ORDER[@]}"; do
    w=$(csv "$name" | awk -F, '{ s += $21 } END { print s + 0 }')
    WRONG=$((WRONG + w))
done

{
    echo
    echo "================ gpu_check summary ================"
    printf '%-48s %s\n' "results" "$RESULTS_DIR"
    printf '%-48s %s\n' "GPUs / CMAKE_CUDA_ARCHITECTURES" "$NGPU / $CUDA_ARCH"
    if ((SUMMARIZE)); then
        printf '%-48s %s\n' "build" "not run (--summarize)"
    elif ((USE_PREBUILT)); then
        printf '%-48s %s\n' "build" "prebuilt ($BUILD_DIR)"
    else
        printf '%-48s %s\n' "build (${TARGETS[*]})" "${BUILD_SECS} s"
    fi
    printf '%-48s %s\n' "GPU suite" "$SUITE_STATUS"
    printf '%-48s %s\n' "device pointers refused (host compiler)" "$POINTER_STATUS"
    printf '%-48s %s\n' "training on GPUs (digits example)" "$TRAIN_STATUS"
    if ((${#PROCESS_NPS[@]} == 0)); then
        printf '%-48s %s\n' "one process per GPU test (chorus_gpu_process)" "not run"
    fi
    for np in "${PROCESS_NPS[@]}"; do
        printf '%-48s %s\n' "one process per GPU test, $np processes" "${PROCESS_STATUS[$np]}"
    done
    printf '%-48s %s\n' "processes sharing the GPU: MPS" "$MPS_STATE"
    if ((${#BENCH_FAILED[@]})); then
        printf '%-48s %s\n' "benchmark runs" "FAILED: ${BENCH_FAILED[*]}"
    else
        printf '%-48s %s\n' "benchmark runs" "${#RUN_ORDER[@]} ok"
    fi
    printf '%-48s %s\n' "benchmark #wrong (all runs)" "$WRONG"
    printf '%-48s %s\n' "copy bandwidth (D2D 256 MiB, read+write)" "${COPY_GBPS:-n/a} GB/s"
    printf '%-48s %-52s target >= 0.70: %s\n' "AllReduce 8 virtual ranks x 256 MiB moved/copy" "${AR_RATIO:-n/a}" \
        "$(target "$AR_RATIO_NUM" '>=' 0.70)"
    if ((!SUMMARIZE)); then
        printf '%-48s %s\n' "benchmark --processes (8 processes)" "$PBENCH_STATE"
    fi
    printf '%-48s %s\n' "copy bandwidth, processes run (device 0)" "${PCOPY_GBPS:-n/a} GB/s"
    printf '%-48s %-52s target >= 0.70: %s\n' "AllReduce 8 processes x 256 MiB moved/copy" "${PAR_RATIO:-n/a}" \
        "$(target "$PAR_RATIO_NUM" '>=' 0.70)"
    printf '%-48s %s\n' "AllReduce 8 processes x 256 MiB, staged" "${PAR_STAGED:-n/a}"
    printf '%-48s %s\n' "AllGather 8 processes x 256 MiB (ring)" "$(at256 r_allgather_reducescatter_ring all_gather)"
    printf '%-48s %s\n' "ReduceScatter 8 processes x 256 MiB (ring)" \
        "$(at256 r_allgather_reducescatter_ring reduce_scatter)"
    printf '%-48s %-52s target <= 15 us: %s\n' "AllReduce 8 ranks direct, worst 8 B..64 KiB" "${DIRECT_WORST:-n/a}" \
        "$(target "$DIRECT_WORST_NUM" '<=' 15)"
    printf '%-48s %s\n' "AllGather 8x256 MiB (ring)" "$(at256 c_allgather_reducescatter_ring all_gather)"
    printf '%-48s %s\n' "ReduceScatter 8x256 MiB (ring)" "$(at256 c_allgather_reducescatter_ring reduce_scatter)"
    printf '%-48s %s\n' "AllReduce bf16 8x256 MiB (ring)" "$(at256 d_allreduce_bf16_ring all_reduce)"
    printf '%-48s %s\n' "AllReduce bf16 8 ranks direct, worst small" "$(small_worst d_allreduce_bf16_direct_small)"
    if ((NGPU > 1)); then
        printf '%-48s %s\n' "AllReduce 1 rank/device x256 MiB (ring)" "$(at256 e_devices_ring all_reduce)"
        printf '%-48s %s\n' "AllReduce 1 rank/device direct, worst small" "$(small_worst e_devices_direct_small)"
        printf '%-48s %s\n' "AllReduce 1 rank/device ring vs NCCL" "$(vs_nccl e_devices_ring all_reduce)"
        printf '%-48s %s\n' "AllReduce 1 rank/device direct vs NCCL" "$(vs_nccl e_devices_direct_small all_reduce)"
    fi
    printf '%-48s %s\n' "AllReduce 8 ranks automatic: its picks" "${AUTO_PICKS:-n/a}"
    printf '%-48s %s\n' "automatic vs faster of ring<>/direct<>" "${AUTO_VS:-n/a}"
    printf '%-48s %s\n' "8 AllReduces grouped vs one by one (8 ranks)" "${GROUP_SPEEDUP:-n/a}"
    printf '%-48s %s\n' "(i) calibration (chorus_calibrate_gpu, 8 ranks)" "$CALIBRATE_STATE"
    printf '%-48s %-52s target all: %s\n' "(i) calibrated automatic vs best hand-tuned" "${CAL_VS:-n/a}" \
        "$(target "$CAL_ALL" '>=' 1)"
    printf '%-48s %-52s target >= 0.80: %s\n' "(i) automatic 8 ranks x 256 MiB moved/copy" "${CAL_RATIO:-n/a}" \
        "$(target "$CAL_RATIO" '>=' 0.80)"
    if ((${#BUDGET_SKIPPED[@]})); then
        printf '%-48s %s\n' "NOT RUN (GPU_CHECK_BUDGET=$GPU_CHECK_BUDGET s spent)" "${BUDGET_SKIPPED[*]}"
    fi
    printf '%-48s %s\n' "results JSON" "$JSON_STATUS"
    printf '%-48s %s\n' "wall time" "$(($(date +%s) - START)) s"
} | tee "$RESULTS_DIR/summary.txt"

if ((SUMMARIZE)); then
    [[ ${#BENCH_FAILED[@]} -eq 0 && $WRONG -eq 0 ]]
else
    [[ $SUITE_STATUS == PASSED* && $POINTER_STATUS != FAILED* && $TRAIN_STATUS != FAILED* && $PROCESS_FAILED -eq 0 && ${#BENCH_FAILED[@]} -eq 0 &&
        $WRONG -eq 0 ]]
fi
