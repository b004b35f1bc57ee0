#pragma once
//! \file kernels/collective.cuh
//! The collective kernel: block c runs channel c of one rank's schedule
//! (exec/lane_env.hpp's run_lane_channel, the code the CPU lane test runs),
//! its threads sharing every step's reduce-copy. One launch per rank per
//! collective, on that rank's stream and device.

#include "../algo/any_schedule.hpp"
#include "../exec/lane_env.hpp"
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

} // namespace chorus::detail
