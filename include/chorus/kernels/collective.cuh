#pragma once
//! \file kernels/collective.cuh
//! The collective kernel: block c runs channel c of one rank's schedule
//! (exec/lane_env.hpp's run_lane_channel, the code the CPU lane test runs),
//! its threads sharing every step's reduce-copy. One launch per rank per
//! collective, on that rank's stream and device; or, for a group
//! (collectives/gpu_group.hpp), one launch per rank for several calls
//! (collective_group_kernel).

#include <cstdint>
#include <type_traits>

#include "../algo/any_schedule.hpp"
#include "../exec/lane_channel.hpp"
#include "../exec/lane_group.hpp"
#include "lanes.cuh"

namespace chorus::detail {

//! Threads per block of the collective kernel, and the blocks per SM it
//! is compiled to fit (at most 64 registers per thread): the blocks of all
//! ranks sharing a device must be resident together.
inline constexpr int collective_block_threads = 512;
inline constexpr int collective_min_blocks_per_sm = 2;

//! One kernel per (element type, operator): the schedule is data
//! (any_schedule), so every algorithm runs in it.
template <class T, class Op>
__global__ void __launch_bounds__(collective_block_threads, collective_min_blocks_per_sm)
    collective_kernel(const __grid_constant__ lane_launch<T, Op, any_schedule> params) {
    __shared__ lane_shared<T> sh;
    const block_lanes lanes{};
    (void)run_lane_channel(lanes, params, static_cast<int>(blockIdx.x), sh);
}

//! Group launch (exec/lane_group.hpp): the calls of (T, Op) one launch of
//! collective_group_kernel carries, and its parameters (over 4 KiB: a
//! __grid_constant__ parameter of up to 32764 bytes, CUDA 12.1+ on sm_70+).
template <class T, class Op>
inline constexpr int group_kernel_calls = lane_group_capacity<T, Op, any_schedule>();
template <class T, class Op>
using group_kernel_params = lane_group_launch<T, Op, any_schedule, group_kernel_calls<T, Op>>;

//! Several calls of one rank in one launch: block c runs channel c of each
//! call in turn, a barrier of the rank's blocks between calls
//! (run_lane_group). Grid: the most channels of any of its calls.
//! Call k's descriptor copied into shared memory by the block's threads.
struct group_call_in_shared {
    unsigned long long* slot;
    template <class G>
    __device__ const auto& operator()(const block_lanes& lanes, const G& g, int k) const {
        using L = std::remove_cvref_t<decltype(g.calls[0])>;
        static_assert(sizeof(L) % 8 == 0 && alignof(L) <= 16, "chorus: a launch descriptor is copied in 8-byte words");
        __syncthreads(); // every thread is done with the previous call's copy
        const auto* src = reinterpret_cast<const unsigned long long*>(&g.calls[k]);
        for (int i = lanes.id(); i < int(sizeof(L) / 8); i += lanes.count()) slot[i] = src[i];
        __syncthreads();
        return *reinterpret_cast<const L*>(slot);
    }
};

template <class T, class Op>
__global__ void __launch_bounds__(collective_block_threads, collective_min_blocks_per_sm)
    collective_group_kernel(const __grid_constant__ group_kernel_params<T, Op> params) {
    static_assert(sizeof(group_kernel_params<T, Op>) <= 32764, "chorus: group launch parameters over 32764 bytes");
    __shared__ lane_shared<T> sh;
    __shared__ alignas(16) unsigned long long slot[sizeof(lane_launch<T, Op, any_schedule>) / 8];
    const block_lanes lanes{};
    (void)run_lane_group(lanes, params, static_cast<int>(blockIdx.x), sh, group_call_in_shared{slot});
}

//! The "v" collectives' counts on their way to a rank's device counts
//! area (backend/gpu.hpp): up to counts_piece_max of them as a kernel
//! parameter (3856 bytes, under the classic 4 KiB parameter limit), so
//! that a CUDA graph captures the values and the host array may be freed
//! at once. One launch per piece, on the call's stream, before the
//! collective kernel.
inline constexpr std::uint32_t counts_piece_max = 480;
inline constexpr int counts_fill_threads = 128;
struct counts_piece {
    std::uint64_t* dst;
    std::uint32_t n;
    std::uint64_t v[counts_piece_max];
};
static_assert(sizeof(counts_piece) <= 4000, "chorus: counts_piece must stay under the 4 KiB kernel-parameter limit");

//! Writes one piece of counts (a template: compiled only where used).
template <int = 0>
__global__ void counts_fill_kernel(const counts_piece p) {
    for (std::uint32_t i = threadIdx.x; i < p.n; i += blockDim.x) p.dst[i] = p.v[i];
}

} // namespace chorus::detail
