#pragma once
//! \file backend/mpi_gpu_nodes.hpp
//! The node split of an MPI communicator for GPU ranks across nodes
//! (<chorus/gpu_mpi.hpp>): hosts from MPI_Comm_split_type(SHARED), cut
//! into emulated nodes by core/node_layout.hpp. Host code over <mpi.h>
//! (no CUDA), so it runs on the CPU under mpiexec
//! (tests/mpi/gpu_node_layout.cpp).

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/node_layout.hpp"

namespace chorus::detail {

inline void gpu_mpi_check(int rc, const std::string& fn, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw error(errc::internal, fn + ": " + what + " failed: " + std::string(text, std::size_t(len)));
}

//! The node split of `comm` (collective): hosts from MPI_Comm_split_type
//! (MPI_COMM_TYPE_SHARED), emulated nodes of `ranks_per_node` ranks
//! (0: none). Every rank must pass the same ranks_per_node (else
//! errc::mismatch on every rank).
inline node_layout mpi_node_layout(MPI_Comm comm, int ranks_per_node, const std::string& fn) {
    int rank = 0, n = 0;
    gpu_mpi_check(MPI_Comm_rank(comm, &rank), fn, "MPI_Comm_rank");
    gpu_mpi_check(MPI_Comm_size(comm, &n), fn, "MPI_Comm_size");
    int lo_hi[2] = {ranks_per_node, -ranks_per_node};
    gpu_mpi_check(MPI_Allreduce(MPI_IN_PLACE, lo_hi, 2, MPI_INT, MPI_MIN, comm), fn, "MPI_Allreduce");
    if (lo_hi[0] != -lo_hi[1])
        throw error(errc::mismatch, fn + ": the ranks of `comm` ask for different `ranks_per_node` (" +
                                        std::to_string(lo_hi[0]) + " to " + std::to_string(-lo_hi[1]) +
                                        ", from gpu::options::ranks_per_node or CHORUS_RANKS_PER_NODE)");
    MPI_Comm shm = MPI_COMM_NULL;
    gpu_mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm), fn,
                  "MPI_Comm_split_type");
    int host = rank;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &host, 1, MPI_INT, MPI_MIN, shm);
    MPI_Comm_free(&shm);
    gpu_mpi_check(rc, fn, "MPI_Allreduce");
    std::vector<int> host_of(std::size_t(n), 0);
    gpu_mpi_check(MPI_Allgather(&host, 1, MPI_INT, host_of.data(), 1, MPI_INT, comm), fn, "MPI_Allgather");
    return plan_node_layout(host_of, ranks_per_node, fn);
}

} // namespace chorus::detail
