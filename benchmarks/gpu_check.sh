#!/usr/bin/env bash
# gpu_check.sh: the one script to run on a machine with an NVIDIA GPU.
#
#   benchmarks/gpu_check.sh [-B BUILD_DIR] [-o RESULTS_DIR] [--prebuilt DIR]
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
#    chorus_gpu_process under mpiexec with PROCESS_RANKS (default 4)
#    processes on device 0 (one process per GPU: gpu::make_communicator,
#    CUDA IPC; at most PROCESS_TIMEOUT, default 120 s); without mpiexec it
#    says so and skips it;
# 4. runs chorus_bench_gpu: (a) AllReduce float, 8 virtual ranks, ring, 16
#    and 32 channels, 1 MiB..256 MiB; (b) AllReduce float, 8 virtual ranks,
#    direct, 8 B..64 KiB; (c) AllGather and ReduceScatter, 8 ranks, ring,
#    1 MiB..256 MiB; (d) bfloat16 AllReduce, 8 ranks; (e) with more than one
#    GPU, one rank per device; (f) Broadcast, Reduce and hierarchical<>
#    AllReduce, 8 ranks, a coarse sweep; (g) AllReduce float, 8 virtual
#    ranks, 8 B..64 MiB: automatic (the default policy; its table names
#    the algorithm it chose per size) against ring<> and direct<> with
#    their default tunings (the ones automatic runs), to see whether its
#    picks are right on this machine (about 30 s);
# 5. prints, last, a short summary table with the two targets
#    (AllReduce 8 x 256 MiB moved/copy >= 0.70; AllReduce 8 ranks direct,
#    worst time over 8 B..64 KiB <= 15 us), and for (g) automatic's picks
#    and how far its time is from the faster of ring<> and direct<>.
#
# Everything it prints is also saved under the results directory (default
# <repo>/build-gpu-check-results/<UTC time>; every /build* path is ignored
# by git). Environment overrides: BUILD_DIR, RESULTS_DIR, CUDA_ARCH,
# SUITE_TIMEOUT (seconds, default 300), BENCH_TIMEOUT (per benchmark run,
# default 180), PROCESS_RANKS (default 4), PROCESS_TIMEOUT (default 120).
# Exit status: 0 when the build, the suite and every benchmark run
# succeeded (all results correct), whether or not the targets are met;
# 1 otherwise. Meant to finish in under 5 minutes on one H200, plus the
# one-process-per-GPU run (at most PROCESS_TIMEOUT): within 10 minutes.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build-gpu-check}
RESULTS_DIR=${RESULTS_DIR:-$SRC_DIR/build-gpu-check-results/$(date -u +%Y%m%dT%H%M%SZ)}
PREBUILT=
SUITE_TIMEOUT=${SUITE_TIMEOUT:-300}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-180}
PROCESS_RANKS=${PROCESS_RANKS:-4}
PROCESS_TIMEOUT=${PROCESS_TIMEOUT:-120}
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
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
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
fi
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
    if loads "$PREBUILT/tests/gpu/chorus_gpu_suite" && loads "$PREBUILT/benchmarks/chorus_bench_gpu" &&
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
    ((SUITE_BUILT)) || TARGETS=(chorus_bench_gpu)
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
if ((SUITE_BUILT)); then
    echo "+ CUDA_DEVICE_MAX_CONNECTIONS=32 $SUITE"
    set +e
    # 300 s by default: the suite also runs the newer policies (tree<>, ..., automatic, deterministic<>).
    timeout -k 10 "$SUITE_TIMEOUT" "$SUITE" 2>&1 | tee "$RESULTS_DIR/suite.log"
    SUITE_RC=${PIPESTATUS[0]}
    set -e
    SUITE_LINE=$(grep -E '^(PASSED|FAILED): [0-9]+ case' "$RESULTS_DIR/suite.log" | tail -n 1 || true)
    case $SUITE_RC in
    0) SUITE_STATUS="PASSED (${SUITE_LINE#*: })" ;;
    77) SUITE_STATUS="SKIPPED (no CUDA device)" ;;
    124 | 137) SUITE_STATUS="FAILED (timed out after $SUITE_TIMEOUT s)" ;;
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

# One process per GPU (gpu::make_communicator): PROCESS_RANKS processes on
# device 0 under mpiexec, CUDA IPC between them, a killed process at the end.
PROCESS_STATUS="NOT BUILT"
PROCESS=$BUILD_DIR/tests/gpu/chorus_gpu_process
if ((!HAVE_MPIEXEC)); then
    PROCESS_STATUS="SKIPPED (mpiexec not found)"
    echo "gpu_check: mpiexec not found: the one-process-per-GPU test (chorus_gpu_process) is skipped"
elif [[ -x $PROCESS ]]; then
    echo "+ mpiexec -n $PROCESS_RANKS $PROCESS"
    set +e
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        CHORUS_TIMEOUT_MS=60000 timeout -k 10 "$PROCESS_TIMEOUT" \
        mpiexec -n "$PROCESS_RANKS" "$PROCESS" 2>&1 | tee "$RESULTS_DIR/gpu_process.log"
    case ${PIPESTATUS[0]} in
    0) PROCESS_STATUS="PASSED ($PROCESS_RANKS processes)" ;;
    77) PROCESS_STATUS="SKIPPED (no CUDA device)" ;;
    124 | 137) PROCESS_STATUS="FAILED (timed out after $PROCESS_TIMEOUT s)" ;;
    *) PROCESS_STATUS="FAILED (see gpu_process.log)" ;;
    esac
    set -e
fi

# --- the benchmark -------------------------------------------------------------------
declare -A RUN_RC=()
RUN_ORDER=()
# run_bench NAME ARGS...: one chorus_bench_gpu invocation, logged to NAME.log
# and NAME.csv; its exit status goes to RUN_RC[NAME].
run_bench() {
    local name=$1
    shift
    RUN_ORDER+=("$name")
    echo "+ chorus_bench_gpu $* --csv $RESULTS_DIR/$name.csv"
    set +e
    timeout -k 10 "$BENCH_TIMEOUT" "$BENCH" "$@" --csv "$RESULTS_DIR/$name.csv" 2>&1 | tee "$RESULTS_DIR/$name.log"
    RUN_RC[$name]=${PIPESTATUS[0]}
    set -e
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
# 22 chosen (the algorithm that ran: automatic's pick, else the algo itself)
S256=268435456

COPY_GBPS=$(csv a_allreduce_ring | awk -F, 'NR == 1 { printf "%.1f", $19 }')
# Best moved/copy at 256 MiB over the ring tunings, and which.
AR_RATIO=$(csv a_allreduce_ring | awk -F, -v s=$S256 '$1 == "all_reduce" && $12 == s && $20 > best {
    best = $20; how = sprintf("%.3f (busbw %.1f GB/s, ring channels=%s chunk=%dK)", $20, $16, $4, $5 / 1024) }
    END { if (how != "") print how }')
AR_RATIO_NUM=${AR_RATIO%% *}
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
target() { # target VALUE OP LIMIT
    [[ -z $1 ]] && {
        echo "n/a"
        return
    }
    awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN { ok = op == ">=" ? v >= l : v <= l; print ok ? "MET" : "NOT MET" }'
}

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
    printf '%-44s %s\n' "results" "$RESULTS_DIR"
    printf '%-44s %s\n' "GPUs / CMAKE_CUDA_ARCHITECTURES" "$NGPU / $CUDA_ARCH"
    if ((USE_PREBUILT)); then
        printf '%-44s %s\n' "build" "prebuilt ($BUILD_DIR)"
    else
        printf '%-44s %s\n' "build (${TARGETS[*]})" "${BUILD_SECS} s"
    fi
    printf '%-44s %s\n' "GPU suite" "$SUITE_STATUS"
    printf '%-44s %s\n' "device pointers refused (host compiler)" "$POINTER_STATUS"
    printf '%-44s %s\n' "one process per GPU (mpiexec, device 0)" "$PROCESS_STATUS"
    if ((${#BENCH_FAILED[@]})); then
        printf '%-44s %s\n' "benchmark runs" "FAILED: ${BENCH_FAILED[*]}"
    else
        printf '%-44s %s\n' "benchmark runs" "${#RUN_ORDER[@]} ok"
    fi
    printf '%-44s %s\n' "benchmark #wrong (all runs)" "$WRONG"
    printf '%-44s %s\n' "copy bandwidth (D2D 256 MiB, read+write)" "${COPY_GBPS:-n/a} GB/s"
    printf '%-44s %-52s target >= 0.70: %s\n' "AllReduce 8x256 MiB moved/copy" "${AR_RATIO:-n/a}" \
        "$(target "$AR_RATIO_NUM" '>=' 0.70)"
    printf '%-44s %-52s target <= 15 us: %s\n' "AllReduce 8 ranks direct, worst 8 B..64 KiB" "${DIRECT_WORST:-n/a}" \
        "$(target "$DIRECT_WORST_NUM" '<=' 15)"
    printf '%-44s %s\n' "AllGather 8x256 MiB (ring)" "$(at256 c_allgather_reducescatter_ring all_gather)"
    printf '%-44s %s\n' "ReduceScatter 8x256 MiB (ring)" "$(at256 c_allgather_reducescatter_ring reduce_scatter)"
    printf '%-44s %s\n' "AllReduce bf16 8x256 MiB (ring)" "$(at256 d_allreduce_bf16_ring all_reduce)"
    printf '%-44s %s\n' "AllReduce bf16 8 ranks direct, worst small" "$(small_worst d_allreduce_bf16_direct_small)"
    if ((NGPU > 1)); then
        printf '%-44s %s\n' "AllReduce 1 rank/device x256 MiB (ring)" "$(at256 e_devices_ring all_reduce)"
        printf '%-44s %s\n' "AllReduce 1 rank/device direct, worst small" "$(small_worst e_devices_direct_small)"
    fi
    printf '%-44s %s\n' "AllReduce 8 ranks automatic: its picks" "${AUTO_PICKS:-n/a}"
    printf '%-44s %s\n' "automatic vs faster of ring<>/direct<>" "${AUTO_VS:-n/a}"
    printf '%-44s %s\n' "wall time" "$(($(date +%s) - START)) s"
} | tee "$RESULTS_DIR/summary.txt"

[[ $SUITE_STATUS == PASSED* && $POINTER_STATUS != FAILED* && $PROCESS_STATUS != FAILED* && ${#BENCH_FAILED[@]} -eq 0 && $WRONG -eq 0 ]]
