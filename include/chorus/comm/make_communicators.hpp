#pragma once
//! \file comm/make_communicators.hpp
//! The GPU backend's entry points (CUDA code): gpu::make_communicators
//! (every rank a device of this process) and gpu::make_communicator (one
//! process per GPU, meeting at a unique_id; <chorus/gpu_mpi.hpp> adds the
//! MPI_Comm form).

#include <memory>
#include <string>
#include <vector>

#include "../backend/bootstrap.hpp"
#include "../backend/gpu.hpp"
#include "../backend/gpu_process.hpp"
#include "../ops/operators.hpp"
#include "communicator.hpp"
#include "gpu_nodes.hpp" // what a collective across nodes runs (gpu_transport::enqueue declares it)

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

//! One process per GPU, as ncclCommInitRank: rank `rank` of `nranks`
//! processes of one node, which meet at `id` (one process makes it with
//! chorus::make_unique_id and hands it to the others), running on CUDA
//! device `device` of this process. Collective: every rank calls it with
//! the same `nranks`, scratch_bytes and registered_bytes. Errors:
//! errc::invalid_argument naming `rank`, `nranks` or `device`;
//! errc::unavailable without a CUDA device, or for processes on different
//! hosts; errc::mismatch when ranks pass different sizes; errc::timeout or
//! errc::peer_failed when a rank does not come (opt.setup_timeout).
inline communicator make_communicator(const unique_id& id, int rank, int nranks, int device,
                                      const options& opt = {}) {
    const std::string fn = "chorus::gpu::make_communicator";
    detail::check_process_args(rank, nranks, device, fn);
    std::unique_ptr<detail::file_lane_bootstrap> boot;
    try {
        boot = std::make_unique<detail::file_lane_bootstrap>(id, rank, nranks, opt.setup_timeout);
    } catch (const error& e) {
        throw error(e.code(), fn + ": " + e.what());
    }
    return communicator(detail::make_gpu_process_world(*boot, device, opt, fn), rank);
}

} // namespace gpu

// The contract of core/communicator.hpp, for one element type and operator.
static_assert(detail::collective_backend<gpu::communicator, float, sum>);

} // namespace chorus
