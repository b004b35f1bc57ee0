#pragma once
//! \file gpu_mpi.hpp
//! <chorus/gpu.hpp> plus chorus::gpu::make_communicator(MPI_Comm, device):
//! one process per GPU, the processes of an MPI communicator meeting over
//! MPI (MPI_Allgather on a duplicate of it) instead of a unique_id, on one
//! node or across nodes (backend/gpu_nodes.hpp: CUDA IPC inside a node,
//! MPI between nodes). CUDA code that needs <mpi.h> and MPI linked (CMake:
//! MPI::MPI_CXX); the host headers never include it.

#include <mpi.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "gpu.hpp"
#include "backend/gpu_nodes.hpp"
#include "backend/gpu_nodes_mpi.hpp"
#include "backend/gpu_process.hpp"
#include "backend/mpi_bootstrap.hpp"
#include "backend/mpi_gpu_nodes.hpp"
#include "core/env.hpp"
#include "core/node_layout.hpp"

namespace chorus {
namespace detail {

//! Several nodes: this node's process world plus the inter-node group.
inline gpu::communicator make_gpu_nodes_communicator(MPI_Comm comm, const node_layout& lay, int device,
                                                     const gpu::options& opt, const std::string& fn) {
    int rank = 0;
    gpu_mpi_check(MPI_Comm_rank(comm, &rank), fn, "MPI_Comm_rank");
    const int node = lay.node_of[std::size_t(rank)], local = lay.local_of[std::size_t(rank)];
    MPI_Comm node_comm = MPI_COMM_NULL, inter = MPI_COMM_NULL;
    gpu_mpi_check(MPI_Comm_split(comm, node, local, &node_comm), fn, "MPI_Comm_split (the node)");
    const int rc = MPI_Comm_split(comm, local, node, &inter);
    if (rc != MPI_SUCCESS) MPI_Comm_free(&node_comm);
    gpu_mpi_check(rc, fn, "MPI_Comm_split (across nodes)");
    std::shared_ptr<gpu_world> w;
    int local_rank = 0;
    {
        struct free_comm {
            MPI_Comm& c;
            ~free_comm() {
                if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
            }
        } on_exit{node_comm};
        mpi_lane_bootstrap nboot(node_comm, "chorus::gpu::make_communicator");
        local_rank = nboot.rank();
        gpu::options nopt = opt;
        nopt.ranks_per_node = lay.local_size; // one node inside the node world
        w = make_gpu_process_world(nboot, device, nopt, fn);
    }
    // The inter-node half; every rank learns whether every rank has one
    // (a rank that fails here fails them all, none waits in a collective).
    int ok = 1;
    std::string why;
    errc code = errc::internal;
    try {
        device_guard g(device);
        w->nodes = std::make_shared<mpi_inter_nodes>(inter, lay, rank, device, opt.inter_staging_bytes);
        inter = MPI_COMM_NULL; // owned by w->nodes now
        w->nodes_rank = rank;
        w->nodes_size = lay.size();
    } catch (const error& e) {
        ok = 0;
        why = e.what();
        code = e.code();
    }
    if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
    gpu_mpi_check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm), fn, "MPI_Allreduce");
    if (!why.empty()) throw error(code, why);
    if (!ok) throw error(errc::peer_failed, fn + ": another rank of `comm` could not set up its inter-node step");
    return gpu::communicator(std::move(w), local_rank);
}

} // namespace detail

namespace gpu {

//! One process per GPU over the processes of `comm`: this process is rank
//! MPI_Comm_rank(comm) of MPI_Comm_size(comm) and runs on CUDA device
//! `device`. Collective over `comm` (MPI must be initialised; `comm` may
//! be freed afterwards). Errors as make_communicator(id, rank, nranks,
//! device, opt).
//!
//! Nodes: the ranks sharing memory (MPI_Comm_split_type SHARED), split
//! further into emulated nodes of `opt.ranks_per_node` consecutive ranks
//! (0: CHORUS_RANKS_PER_NODE, unset: whole hosts). One node: every rank
//! in one process world (CUDA IPC), as always. Several nodes (equal sizes,
//! else errc::invalid_argument naming ranks_per_node): each node's ranks
//! form a process world, and the ranks with the same index inside their
//! node form an inter-node MPI communicator (backend/gpu_nodes.hpp says
//! what runs across nodes).
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
    const int k = opt.ranks_per_node;
    if (k < 0) throw error(errc::invalid_argument, fn + ": `opt.ranks_per_node` must be >= 0");
    const detail::node_layout lay = detail::mpi_node_layout(comm, k != 0 ? k : detail::env_ranks_per_node(), fn);
    if (lay.nodes == 1) return communicator(detail::make_gpu_process_world(boot, device, opt, fn), boot.rank());
    return detail::make_gpu_nodes_communicator(comm, lay, device, opt, fn);
}

} // namespace gpu

} // namespace chorus
