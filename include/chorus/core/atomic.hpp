#pragma once
//! \file core/atomic.hpp
//! One name for an atomic view of plain memory, usable from host and device
//! code: `cuda::atomic_ref` (system scope) in CUDA translation units (nvcc,
//! with libcu++), `std::atomic_ref` in host-compiled ones, which so never
//! parse libcu++'s headers (a few seconds per translation unit). Flags
//! shared between ranks are plain `std::uint64_t` words viewed through it,
//! so the same words can live in host memory, pinned memory or device
//! memory. The two variants live in different inline namespaces: a program
//! that links CUDA and host translation units has no two definitions of
//! one function.

#include <cstdint>

#include "config.hpp"

#if CHORUS_HAS_LIBCUDACXX && defined(__CUDACC__)
#  define CHORUS_CUDA_ATOMICS 1
#  include <cuda/atomic>
#else
#  define CHORUS_CUDA_ATOMICS 0
#  include <atomic>
#endif

namespace chorus::detail {

#if CHORUS_CUDA_ATOMICS
inline namespace cuda_atomics {
template <class T>
using atomic_ref = ::cuda::atomic_ref<T, ::cuda::thread_scope_system>;
namespace mo = ::cuda::std;
#else
inline namespace host_atomics {
template <class T>
using atomic_ref = std::atomic_ref<T>;
namespace mo = ::std;
#endif

//! Release-store of a flag word (publishes every write sequenced before it).
CHORUS_HD inline void flag_store_release(std::uint64_t* word, std::uint64_t v) {
    atomic_ref<std::uint64_t>(*word).store(v, mo::memory_order_release);
}
//! Acquire-load of a flag word (makes the poster's earlier writes visible).
CHORUS_HD inline std::uint64_t flag_load_acquire(std::uint64_t* word) {
    return atomic_ref<std::uint64_t>(*word).load(mo::memory_order_acquire);
}

} // namespace cuda_atomics / host_atomics

} // namespace chorus::detail
