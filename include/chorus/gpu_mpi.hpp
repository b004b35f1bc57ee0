#pragma once
//! \file gpu_mpi.hpp
//! <chorus/gpu.hpp> plus chorus::gpu::make_communicator(MPI_Comm, device):
//! one process per GPU, the processes of an MPI communicator meeting over
//! MPI (MPI_Allgather on a duplicate of it) instead of a unique_id. CUDA
//! code that needs <mpi.h> and MPI linked (CMake: MPI::MPI_CXX); the host
//! headers never include it.

#include <mpi.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "gpu.hpp"
#include "backend/gpu_process.hpp"
#include "backend/mpi_bootstrap.hpp"

namespace chorus::gpu {

//! One process per GPU over the processes of `comm` (every one on one
//! node): this process is rank MPI_Comm_rank(comm) of MPI_Comm_size(comm)
//! and runs on CUDA device `device`. Collective over `comm` (MPI must be
//! initialised; `comm` may be freed afterwards). Errors as
//! make_communicator(id, rank, nranks, device, opt); ranks of `comm` that
//! run on different hosts: errc::unavailable.
inline communicator make_communicator(MPI_Comm comm, int device, const options& opt = {}) {
    const std::string fn = "chorus::gpu::make_communicator";
    // Every rank checks its device before anyone meets the others, and
    // the ranks agree on the outcome: one bad rank fails them all at once
    // (no one waits in an exchange the bad rank never joins).
    int ok = 1;
    std::string why;
    errc code = errc::invalid_argument;
    try {
        detail::check_process_device(device, fn);
    } catch (const error& e) {
        ok = 0;
        why = e.what();
        code = e.code();
    }
    detail::mpi_lane_bootstrap boot(comm, "chorus::gpu::make_communicator");
    const std::vector<std::byte> oks = boot.all_gather(&ok, sizeof ok);
    if (!ok) throw error(code, why);
    for (int r = 0; r < boot.size(); ++r) {
        int o = 0;
        std::memcpy(&o, oks.data() + sizeof o * std::size_t(r), sizeof o);
        if (!o)
            throw error(errc::peer_failed, fn + ": rank " + std::to_string(r) +
                                               " of `comm` could not use its `device` (see its error)");
    }
    return communicator(detail::make_gpu_process_world(boot, device, opt, fn), boot.rank());
}

} // namespace chorus::gpu
