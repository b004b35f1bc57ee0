#pragma once
//! \file kernels/collective.cuh
//! The collective kernel: block c runs channel c of one rank's schedule
//! (exec/lane_env.hpp's run_lane_channel, the code the CPU lane test runs),
//! its threads sharing every step's reduce-copy. One launch per rank per
//! collective, on that rank's stream and device; or, for a group
//! (collectives/gpu_group.hpp), one launch of the same kernel per rank for
//! several calls.

#include <cstdint>

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

//! The parameter of the collective kernel: one call's launch descriptor
//! and, for a group launch (collectives/gpu_group.hpp), where the further
//! calls' descriptors are. A single call: more_count 0, blocks its
//! channels.
template <class T, class Op>
struct collective_params {
    lane_launch<T, Op, any_schedule> first{};
    //! Device memory: the descriptors of calls 1 .. more_count, written on
    //! the launch's stream before it (backend/gpu.hpp, gpu_group_call).
    const lane_launch<T, Op, any_schedule>* more = nullptr;
    int more_count = 0;
    int blocks = 0; //!< the grid: the most channels of any of its calls
};

//! Calls of one group launch of (T, Op): up to this many share a kernel.
template <class T, class Op>
inline constexpr int group_kernel_calls = max_group_calls;

//! The kernel's fetch (exec/lane_group.hpp, run_lane_calls): call 0 from
//! the parameter; call k > 0 copied from device memory into shared memory
//! by the block's threads (a reference into global memory would make every
//! field access a global load).
template <class L>
struct kernel_call_fetch {
    const L* first;
    const L* more;
    unsigned long long* slot;
    __device__ const L& operator()(const block_lanes& lanes, int k) const {
        static_assert(sizeof(L) % 8 == 0 && alignof(L) <= 16, "chorus: a launch descriptor is copied in 8-byte words");
        if (k == 0) return *first;
        __syncthreads(); // every thread is done with the previous call's copy
        const auto* src = reinterpret_cast<const unsigned long long*>(more + (k - 1));
        for (int i = lanes.id(); i < int(sizeof(L) / 8); i += lanes.count()) slot[i] = src[i];
        __syncthreads();
        return *reinterpret_cast<const L*>(slot);
    }
};

//! One kernel per (element type, operator): the schedule is data
//! (any_schedule), so every algorithm runs in it, and so does a group of
//! calls (run_lane_calls: block c runs channel c of each call in turn, a
//! barrier of the rank's blocks between calls; one call alone runs as
//! run_lane_channel, no barrier).
template <class T, class Op>
__global__ void __launch_bounds__(collective_block_threads, collective_min_blocks_per_sm)
    collective_kernel(const __grid_constant__ collective_params<T, Op> params) {
    using L = lane_launch<T, Op, any_schedule>;
    __shared__ lane_shared<T> sh;
    __shared__ alignas(16) unsigned long long slot[sizeof(L) / 8];
    const block_lanes lanes{};
    (void)run_lane_calls<T, Op, any_schedule>(lanes, params.more_count + 1, params.blocks,
                                              static_cast<int>(blockIdx.x), sh,
                                              kernel_call_fetch<L>{&params.first, params.more, slot});
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
