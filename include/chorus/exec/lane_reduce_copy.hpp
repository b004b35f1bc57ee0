#pragma once
//! \file exec/lane_reduce_copy.hpp
//! The lane-parallel reduce-copy: dst[i] (and every further destination)
//! = finish(src[0][i] op src[1][i] op ... op src[nsrc-1][i]), sources
//! combined in order, in the operator's accumulator type (float for
//! __half and __nv_bfloat16). Written once for both executors: `Lanes`
//! says which lane of how many is running (a CUDA thread of a block, or a
//! CPU thread in the lane test), so the same loops run on a GPU and on a
//! CPU.
//!
//! Alignment-aware: when every pointer has the same offset modulo 16 the
//! work splits into a scalar head (up to the first 16-byte boundary), an
//! interior of whole 16-byte vectors (one vector load per source, one
//! store per destination) and a scalar tail; otherwise everything is
//! scalar. Lanes take vectors (and head/tail elements) round-robin, so
//! neighbouring lanes touch neighbouring 16-byte words (coalesced on a
//! GPU). Element i of the destinations is written only after every source
//! of element i was read, by the same lane: a destination may also be a
//! source.
//!
//! Lanes interface: int id() const; int count() const.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../core/config.hpp"
#include "../ops/traits.hpp"

#if defined(__CUDACC__)
#  include <cub/thread/thread_load.cuh>
#  include <cub/thread/thread_store.cuh>
#endif

namespace chorus::detail {

//! Most destinations a reduce-copy writes (the step's dst and dst2).
inline constexpr int max_reduce_dsts = 2;

struct alignas(16) vec16 {
    std::uint64_t lo, hi;
};

//! One 16-byte load. On a GPU it bypasses L1 (ld.global.cg): the data was
//! written by another block or device and published with a flag.
CHORUS_HD inline vec16 load16(const void* p) {
#if defined(__CUDA_ARCH__)
    const uint4 v = cub::ThreadLoad<cub::LOAD_CG>(reinterpret_cast<uint4*>(const_cast<void*>(p)));
    vec16 r;
    r.lo = (std::uint64_t(v.y) << 32) | v.x;
    r.hi = (std::uint64_t(v.w) << 32) | v.z;
    return r;
#else
    vec16 r;
    std::memcpy(&r, p, 16);
    return r;
#endif
}

//! One 16-byte store (st.global.cg on a GPU: the reader is another block).
CHORUS_HD inline void store16(void* p, const vec16& v) {
#if defined(__CUDA_ARCH__)
    uint4 u;
    u.x = static_cast<unsigned>(v.lo);
    u.y = static_cast<unsigned>(v.lo >> 32);
    u.z = static_cast<unsigned>(v.hi);
    u.w = static_cast<unsigned>(v.hi >> 32);
    cub::ThreadStore<cub::STORE_CG>(reinterpret_cast<uint4*>(p), u);
#else
    std::memcpy(p, &v, 16);
#endif
}

//! Elements per 16-byte vector, or 1 when T does not tile 16 bytes.
template <class T>
inline constexpr int vector_width = (sizeof(T) <= 8 && 16 % sizeof(T) == 0) ? int(16 / sizeof(T)) : 1;

//! The arguments of one reduce-copy. Pointers are to T; nsrc >= 1.
template <class T>
struct reduce_copy_args {
    const T* const* src = nullptr;
    int nsrc = 0;
    T* dst[max_reduce_dsts]{};
    int ndst = 0;
    std::uint64_t count = 0;
    int finish_n = 0; //!< > 0: apply the operator's epilogue for this many ranks
};

//! Element i, reduced over every source.
CHORUS_HD_TEMPLATE
template <class T, class Op>
CHORUS_HD T reduce_element(const reduce_copy_args<T>& a, std::uint64_t i, const Op& op) {
    using A = accum_t<T>;
    A acc = static_cast<A>(a.src[0][i]);
    for (int q = 1; q < a.nsrc; ++q) acc = static_cast<A>(op(acc, static_cast<A>(a.src[q][i])));
    if (a.finish_n > 0) acc = finish(op, acc, a.finish_n);
    return static_cast<T>(acc);
}

CHORUS_HD_TEMPLATE
template <class T, class Op, class Lanes>
CHORUS_HD void lane_reduce_scalar(const Lanes& lanes, const reduce_copy_args<T>& a, std::uint64_t begin,
                                  std::uint64_t end, const Op& op) {
    for (std::uint64_t i = begin + std::uint64_t(lanes.id()); i < end; i += std::uint64_t(lanes.count())) {
        const T v = reduce_element(a, i, op);
        for (int d = 0; d < a.ndst; ++d) a.dst[d][i] = v;
    }
}

//! Runs the reduce-copy `a` on every lane of `lanes` (each lane calls it).
CHORUS_HD_TEMPLATE
template <class T, class Op, class Lanes>
CHORUS_HD void lane_reduce_copy(const Lanes& lanes, const reduce_copy_args<T>& a, const Op& op) {
    const std::uint64_t n = a.count;
    if (n == 0) return;
    constexpr int W = vector_width<T>;
    using A = accum_t<T>;
    if constexpr (W > 1 && std::is_default_constructible_v<T> && std::is_default_constructible_v<A>) {
        const auto phase = reinterpret_cast<std::uintptr_t>(a.dst[0]) % 16;
        bool same = phase % sizeof(T) == 0;
        for (int d = 1; d < a.ndst; ++d) same = same && reinterpret_cast<std::uintptr_t>(a.dst[d]) % 16 == phase;
        for (int q = 0; q < a.nsrc; ++q) same = same && reinterpret_cast<std::uintptr_t>(a.src[q]) % 16 == phase;
        if (same) {
            std::uint64_t head = ((16 - phase) % 16) / sizeof(T);
            if (head > n) head = n;
            const std::uint64_t nvec = (n - head) / std::uint64_t(W);
            const std::uint64_t tail = head + nvec * std::uint64_t(W);
            lane_reduce_scalar(lanes, a, 0, head, op);
            for (std::uint64_t v = std::uint64_t(lanes.id()); v < nvec; v += std::uint64_t(lanes.count())) {
                const std::uint64_t i = head + v * std::uint64_t(W);
                T x[W];
                A acc[W];
                vec16 raw = load16(a.src[0] + i);
                std::memcpy(static_cast<void*>(x), &raw, 16);
                for (int j = 0; j < W; ++j) acc[j] = static_cast<A>(x[j]);
                for (int q = 1; q < a.nsrc; ++q) {
                    raw = load16(a.src[q] + i);
                    std::memcpy(static_cast<void*>(x), &raw, 16);
                    for (int j = 0; j < W; ++j) acc[j] = static_cast<A>(op(acc[j], static_cast<A>(x[j])));
                }
                for (int j = 0; j < W; ++j) {
                    if (a.finish_n > 0) acc[j] = finish(op, acc[j], a.finish_n);
                    x[j] = static_cast<T>(acc[j]);
                }
                std::memcpy(&raw, static_cast<const void*>(x), 16);
                for (int d = 0; d < a.ndst; ++d) store16(a.dst[d] + i, raw);
            }
            lane_reduce_scalar(lanes, a, tail, n, op);
            return;
        }
    }
    lane_reduce_scalar(lanes, a, 0, n, op);
}

} // namespace chorus::detail
