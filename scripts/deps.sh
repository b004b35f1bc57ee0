# Sourced by scripts/test and scripts/run-main (not run on its own).
# Installs the build dependencies on Debian/Ubuntu when they are missing,
# idempotently, and puts the CUDA toolkit on PATH when it is installed.
# chorus_clangxx prints the Clang C++ compiler to use (clang++, else clang++-14).

chorus_phase() {
  printf '\n==== %s ====\n' "$*"
}

chorus_install_deps() {
  # clang + libclang-rt-14-dev: the libFuzzer phase of scripts/test (Debian 12's
  # clang is clang 14; libclang_rt.fuzzer*.a ship in libclang-rt-14-dev, only
  # a Recommends of clang-14, so it is named here).
  # openmpi-bin + libopenmpi-dev: the MPI backend's tests and benchmark;
  # python3-sklearn: the 8x8 digits the training example learns from, read
  # with zlib (zlib1g-dev). ninja-build: scripts/test's builds (it keeps
  # both cores busy to the end, where make -j2 idles between targets).
  local pkgs=(cmake g++ ninja-build doctest-dev clang libclang-rt-14-dev openmpi-bin libopenmpi-dev python3-sklearn
    zlib1g-dev)
  local missing=()
  local p
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    echo "dependencies present: ${pkgs[*]}"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: missing ${missing[*]} and no apt-get to install them" >&2
    return 1
  fi
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || { echo "error: need root or sudo to install ${missing[*]}" >&2; return 1; }
    sudo=(sudo)
  fi
  echo "installing: ${missing[*]}"
  # apt-get fails at once when another apt holds the lock: retry.
  local i
  for i in 1 2 3 4 5; do
    "${sudo[@]}" apt-get update && break
    if ((i == 5)); then echo "error: apt-get update failed 5 times" >&2; return 1; fi
    echo "apt-get update failed (try $i/5); retrying in $((i * 5)) s" >&2
    sleep $((i * 5))
  done
  for i in 1 2 3 4 5; do
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" && return 0
    if ((i == 5)); then echo "error: apt-get install failed 5 times" >&2; return 1; fi
    echo "apt-get install failed (try $i/5); retrying in $((i * 5)) s" >&2
    sleep $((i * 5))
  done
}

chorus_cuda_path() {
  if [[ -d /usr/local/cuda/bin ]]; then
    case ":$PATH:" in
      *:/usr/local/cuda/bin:*) ;;
      *) export PATH="/usr/local/cuda/bin:$PATH" ;;
    esac
  fi
}

chorus_clangxx() {
  local c
  for c in clang++ clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  echo "error: no clang++ (apt-get install clang libclang-rt-14-dev)" >&2
  return 1
}
