#pragma once
//! \file kernels/reduce_copy.cuh
//! A stand-alone reduce-copy kernel over the whole grid: up to
//! max_reduce_copy_srcs sources, up to two destinations, any alignment,
//! any count (exec/lane_reduce_copy.hpp). Used by the GPU tests and the
//! benchmark; the collectives run the same loop inside collective_kernel.

#include "../exec/lane_reduce_copy.hpp"
#include "lanes.cuh"

namespace chorus::detail {

inline constexpr int max_reduce_copy_srcs = 8;

template <class T>
struct reduce_copy_params {
    const T* src[max_reduce_copy_srcs]{};
    int nsrc = 0;
    T* dst[max_reduce_dsts]{};
    int ndst = 0;
    std::uint64_t count = 0;
    int finish_n = 0;
};

template <class T, class Op>
__global__ void reduce_copy_kernel(const __grid_constant__ reduce_copy_params<T> p, Op op) {
    reduce_copy_args<T> a{};
    a.src = p.src;
    a.nsrc = p.nsrc;
    for (int d = 0; d < p.ndst; ++d) a.dst[d] = p.dst[d];
    a.ndst = p.ndst;
    a.count = p.count;
    a.finish_n = p.finish_n;
    lane_reduce_copy(grid_lanes{}, a, op);
}

} // namespace chorus::detail
