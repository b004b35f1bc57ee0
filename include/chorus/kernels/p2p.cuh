#pragma once
//! \file kernels/p2p.cuh
//! The send/recv kernel: one block runs one send or receive of one rank
//! (exec/lane_p2p.hpp's run_lane_p2p, the code the CPU lane test runs),
//! its threads sharing the receiver's copy. One launch per call, on the
//! call's stream and the rank's device; one kernel for every element type
//! (the protocol moves bytes and compares element size and type id).

#include "../exec/lane_p2p.hpp"
#include "collective.cuh"
#include "lanes.cuh"

namespace chorus::detail {

//! (A template, so that a translation unit that sends nothing compiles no kernel.)
template <int = 0>
__global__ void __launch_bounds__(collective_block_threads, collective_min_blocks_per_sm)
    p2p_kernel(const __grid_constant__ lane_p2p_launch params) {
    const block_lanes lanes{};
    (void)run_lane_p2p(lanes, params);
}

} // namespace chorus::detail
