#!/usr/bin/env bash
# What a user pays to compile chorus: wall time of single translation units,
# each compiled from a clean object directory, best of $RUNS (default 3):
#   host, include only    a .cpp that includes <chorus/chorus.hpp> and nothing else
#   host, default policy  one chorus::all_reduce(comm, span<float>, sum{}) (automatic)
#   host, ring<>          the same call with chorus::ring<> named
#   host, MPI reference   a .cpp including <mpi.h> that calls MPI_Allreduce
#   cuda, default policy  a .cu with one stream-ordered all_reduce<float, sum> (nvcc, one architecture)
#   cuda, ring<>          the same with chorus::ring<> named
#   cuda, three policies  ring<>, direct<> and tree<> in one file (a policy
#                         that names its algorithm shares the kernel of its
#                         (type, operator))
# Host: $CXX (default g++) -std=c++20 -O2; CUDA: nvcc -std=c++20 -O3
# --expt-relaxed-constexpr -arch=sm_$ARCH (default 90). Rows whose compiler
# (mpicxx, nvcc) is missing are skipped. libcu++ is used on the host when
# the CUDA toolkit has it, as in the build tree.
#
#   scripts/compile_cost.sh [--include DIR] [--runs N] [--arch NN]
# --include compiles against another checkout's include/ (to compare with
# an earlier commit, e.g. a git worktree of it).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
include=$PWD/include
runs=${RUNS:-3}
arch=${ARCH:-90}
while (($#)); do
  case $1 in
    --include) include=$(cd "$2" && pwd); shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -d /usr/local/cuda/bin ]]; then PATH="/usr/local/cuda/bin:$PATH"; fi
cxx=${CXX:-g++}
cccl=()
for d in /usr/local/cuda/include/cccl /usr/local/cuda/include; do
  if [[ -f $d/cuda/atomic ]]; then
    cccl=(-isystem "$d" -DCHORUS_HAS_LIBCUDACXX=1)
    break
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/chorus-compile-cost.XXXXXX")
trap 'rm -rf "$work"' EXIT

cat >"$work/include_only.cpp" <<'EOF'
#include <chorus/chorus.hpp>
int main() { return 0; }
EOF
cat >"$work/default_policy.cpp" <<'EOF'
#include <chorus/chorus.hpp>
void reduce_grads(chorus::communicator<chorus::threads>& comm, std::span<float> grads) {
    chorus::all_reduce(comm, grads, chorus::sum{});
}
EOF
sed 's/chorus::all_reduce(/chorus::all_reduce<chorus::ring<>>(/' "$work/default_policy.cpp" >"$work/ring_policy.cpp"
cat >"$work/mpi_reference.cpp" <<'EOF'
#include <mpi.h>
void reduce_grads(MPI_Comm comm, float* grads, int n) {
    MPI_Allreduce(MPI_IN_PLACE, grads, n, MPI_FLOAT, MPI_SUM, comm);
}
EOF
cat >"$work/default_policy.cu" <<'EOF'
#include <chorus/gpu.hpp>
void reduce_grads(chorus::gpu::communicator& comm, float* grads, std::size_t n, cudaStream_t stream) {
    chorus::all_reduce(comm, std::span<float>(grads, n), chorus::sum{}, stream);
}
EOF
sed 's/chorus::all_reduce(/chorus::all_reduce<chorus::ring<>>(/' "$work/default_policy.cu" >"$work/ring_policy.cu"
cat >"$work/three_policies.cu" <<'EOF'
#include <chorus/gpu.hpp>
void reduce_grads(chorus::gpu::communicator& comm, float* grads, std::size_t n, cudaStream_t stream) {
    chorus::all_reduce<chorus::ring<>>(comm, std::span<float>(grads, n), chorus::sum{}, stream);
    chorus::all_reduce<chorus::direct<>>(comm, std::span<float>(grads, n), chorus::sum{}, stream);
    chorus::all_reduce<chorus::tree<>>(comm, std::span<float>(grads, n), chorus::sum{}, stream);
}
EOF

# best_of LABEL COMMAND...: the fastest of $runs compilations, each into a fresh object directory.
best_of() {
  local label=$1 best="" i t0 t1 ms
  shift
  for ((i = 0; i < runs; ++i)); do
    rm -rf "$work/obj" && mkdir "$work/obj"
    t0=$(date +%s%N)
    if ! "$@" >"$work/log" 2>&1; then
      echo "error: $label failed to compile:" >&2
      cat "$work/log" >&2
      exit 1
    fi
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    if [[ -z $best ]] || ((ms < best)); then best=$ms; fi
  done
  printf '| %-22s | %8.2f |\n' "$label" "$(echo "scale=2; $best / 1000" | bc)"
}

echo "chorus compile cost: include $include, best of $runs, $(date -u +%Y-%m-%d)"
echo "host: $($cxx --version | head -n 1), -std=c++20 -O2${cccl:+ (libcu++ on)}"
command -v nvcc >/dev/null 2>&1 && echo "cuda: $(nvcc --version | tail -n 1), -O3 -arch=sm_$arch"
echo
echo "| translation unit       | wall (s) |"
echo "|------------------------|---------:|"
host=("$cxx" -std=c++20 -O2 -I"$include" "${cccl[@]}" -c)
best_of "host, include only" "${host[@]}" "$work/include_only.cpp" -o "$work/obj/a.o"
best_of "host, default policy" "${host[@]}" "$work/default_policy.cpp" -o "$work/obj/a.o"
best_of "host, ring<>" "${host[@]}" "$work/ring_policy.cpp" -o "$work/obj/a.o"
if command -v mpicxx >/dev/null 2>&1; then
  best_of "host, MPI reference" mpicxx -std=c++20 -O2 -c "$work/mpi_reference.cpp" -o "$work/obj/a.o"
fi
if command -v nvcc >/dev/null 2>&1; then
  cuda=(nvcc -std=c++20 -O3 --expt-relaxed-constexpr -arch=sm_"$arch" -I"$include" -c)
  best_of "cuda, default policy" "${cuda[@]}" "$work/default_policy.cu" -o "$work/obj/a.o"
  best_of "cuda, ring<>" "${cuda[@]}" "$work/ring_policy.cu" -o "$work/obj/a.o"
  best_of "cuda, three policies" "${cuda[@]}" "$work/three_policies.cu" -o "$work/obj/a.o"
fi
