#!/usr/bin/env bash
# Runs examples/data_parallel_training over the training modes (sync,
# hybrid, async with the fixed and the eager policy) x ranks {1, 2, 4} x
# straggler off / on (the last rank slowed 2x), each configuration --reps
# times, writes one CSV per run, then draws the plots with
# scripts/plot_training.py (Debian's /usr/bin/python3 with python3-matplotlib).
#
#   scripts/training_sweep.sh [--bin PATH] [--out DIR] [--img DIR] [--reps N] [--epochs E] [--device-us U]
#
# Defaults: --bin build/examples/data_parallel_training, --out out/training
# (out/training-device with --device-us), --img docs/img, --reps 3, --epochs 60.
# --device-us U passes --device-us U to every run (each step padded to U
# microseconds per sample, as if each rank had a device of its own); the plots
# are then named training_*_device.png. Build the example first:
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target data_parallel_training
# Every other setting is the example's default (see its --help), so a row of
# the CSVs can be reproduced with the command the script prints for it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=build/examples/data_parallel_training
out=
img=docs/img
device_us=0
reps=3
epochs=60
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --img) img=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --device-us) device_us=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "training_sweep.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [[ ! -x $bin ]]; then
  echo "training_sweep.sh: $bin not found; build it first:" >&2
  echo "  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target data_parallel_training" >&2
  exit 2
fi
if ! [[ $reps =~ ^[1-9][0-9]*$ && $epochs =~ ^[1-9][0-9]*$ ]]; then
  echo "training_sweep.sh: --reps and --epochs must be positive integers" >&2
  exit 2
fi

suffix=
device=()
if [[ $device_us != 0 ]]; then
  suffix=_device
  device=(--device-us "$device_us")
fi
[[ -n $out ]] || out=out/training${suffix/_/-}

mkdir -p "$out"
rm -f "$out"/*.csv "$out"/*.log

# name|arguments
modes=(
  "sync|--mode sync"
  "hybrid|--mode hybrid"
  "async-fixed|--mode async --policy fixed"
  "async-eager|--mode async --policy eager"
)

for rep in $(seq 1 "$reps"); do
  for ranks in 1 2 4; do
    for m in "${modes[@]}"; do
      name=${m%%|*}
      args=${m#*|}
      for slow in off on; do
        straggler=()
        [[ $slow == on ]] && straggler=(--straggler-rank $((ranks - 1)) --slowdown 2)
        csv="$out/${name}_r${ranks}_slow-${slow}_rep${rep}.csv"
        # shellcheck disable=SC2086
        cmd=("$bin" --ranks "$ranks" --epochs "$epochs" $args "${straggler[@]}" "${device[@]}" --min-accuracy 0 --csv "$csv")
        log=${csv%.csv}.log
        echo "+ ${cmd[*]}"
        status=0
        "${cmd[@]}" > "$log" 2>&1 || status=$?
        grep -E "^epoch +$epochs |: OK" "$log" || true
        if [[ $status -ne 0 || ! -s $csv ]]; then
          cat "$log" >&2
          echo "training_sweep.sh: the run above failed (exit $status)" >&2
          exit 1
        fi
      done
    done
  done
done

/usr/bin/python3 scripts/plot_training.py "$out" --img "$img" --suffix "$suffix"
