#pragma once
//! \file core/config.hpp
//! Annotation macros and the libcu++ switch. Every `CHORUS_` macro lives here.

#include <cstdint>

#if defined(__CUDACC__)
#  define CHORUS_HD __host__ __device__
#  define CHORUS_DEVICE __device__
// Before a __host__ __device__ template that host code instantiates with
// host-only arguments (the rank program with the host executor's Env):
// nvcc must not check the callees' execution space for those.
#  define CHORUS_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#  define CHORUS_HD
#  define CHORUS_DEVICE
#  define CHORUS_HD_TEMPLATE
#endif

// A function compiled once per translation unit instead of inlined into each
// caller (the schedules' dispatch: see algo/any_schedule.hpp).
#if defined(__CUDACC__)
#  define CHORUS_NOINLINE __noinline__
#elif defined(__GNUC__) || defined(__clang__)
#  define CHORUS_NOINLINE __attribute__((noinline))
#else
#  define CHORUS_NOINLINE
#endif

// CHORUS_HAS_LIBCUDACXX: 1 when libcu++ (<cuda/atomic>, <cuda/std/span>) is
// usable. Auto-detected from the include path unless the build sets it (the
// CMake option CHORUS_LIBCUDACXX=OFF defines it to 0).
#if !defined(CHORUS_HAS_LIBCUDACXX)
#  if defined(__has_include)
#    if __has_include(<cuda/atomic>) && __has_include(<cuda/std/span>)
#      define CHORUS_HAS_LIBCUDACXX 1
#    else
#      define CHORUS_HAS_LIBCUDACXX 0
#    endif
#  else
#    define CHORUS_HAS_LIBCUDACXX 0
#  endif
#endif

// CHORUS_NVTX: 1 when NVTX3 ranges around collectives are compiled in
// (core/nvtx.hpp): <nvtx3/nvToolsExt.h>, from the CUDA toolkit's include
// directory, is on the include path. A build defines CHORUS_NVTX=0 to
// leave them out.
#if !defined(CHORUS_NVTX)
#  if defined(__has_include)
#    if __has_include(<nvtx3/nvToolsExt.h>)
#      define CHORUS_NVTX 1
#    else
#      define CHORUS_NVTX 0
#    endif
#  else
#    define CHORUS_NVTX 0
#  endif
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

namespace chorus {
//! Largest channel count an algorithm policy may ask for.
inline constexpr int max_channels = 32;
//! Interior alignment the planner aims for (one 16-byte vector).
inline constexpr std::uint64_t vector_bytes = 16;
} // namespace chorus
