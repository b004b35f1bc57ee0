#pragma once
//! \file comm/make_communicators.hpp
//! gpu::make_communicators: the GPU backend's entry point (CUDA code).

#include <vector>

#include "../backend/gpu.hpp"
#include "../ops/operators.hpp"
#include "communicator.hpp"

namespace chorus {
namespace gpu {

//! Makes one communicator per entry of `devices` (a device id may repeat:
//! several ranks on one GPU). Rank r runs on devices[r].
inline std::vector<communicator> make_communicators(const std::vector<int>& devices, const options& opt = {}) {
    auto w = detail::make_gpu_world(devices, opt);
    std::vector<communicator> comms;
    comms.reserve(devices.size());
    for (int r = 0; r < int(devices.size()); ++r) comms.emplace_back(w, r);
    return comms;
}

} // namespace gpu

// The contract of core/communicator.hpp, for one element type and operator.
static_assert(detail::collective_backend<gpu::communicator, float, sum>);

} // namespace chorus
