#pragma once
//! \file backend/gpu_nodes.hpp
//! GPU ranks across nodes (one process per GPU, several nodes): the
//! inter-node interface a transport holds (gpu_inter_nodes, the element
//! types and operators it reduces, its bounded waits). What a collective of
//! such a communicator runs, below, is comm/gpu_nodes.hpp's
//! enqueue_across_nodes (it plans node-local schedules: the comm layer). The communicator's gpu_world is
//! the process world of this rank's node (CUDA IPC inside the node, the
//! usual kernels); gpu_world::nodes holds the inter-node half, an
//! gpu_inter_nodes (backend/gpu_nodes_mpi.hpp implements it over MPI: the
//! ranks with this rank's local index on every node). A collective is
//! orchestrated by the host, stream-ordered where it can be:
//!
//!   AllReduce (hierarchical<Intra, Inter>, or automatic, which takes it):
//!     1. ReduceScatter of the first L*m elements inside the node (the
//!        kernel of Intra on the node world, L ranks, m = count / L), this
//!        rank's shard landing at out + local*m; the count % L remaining
//!        elements: an AllReduce inside the node;
//!     2. the host waits for that work (bounded: the call's timeout, the
//!        abort word), the inter-node group agrees that every member got
//!        there intact, then AllReduces the shard (and the remainder)
//!        across nodes (gpu_inter_nodes::all_reduce: MPI on device memory
//!        when MPI is CUDA-aware, else pinned host staging in chunks);
//!     3. AllGather of the shards inside the node, on the call's stream.
//!   Broadcast: the root's local index across nodes (MPI), then inside
//!     every node from that local index.
//!   AllGather (nodes of consecutive ranks): inside the node into the
//!     node's part of `out`, across nodes by local rank 0 (MPI), then a
//!     broadcast of the whole `out` inside the node from local rank 0.
//!   Barrier: the inter-node group meets (MPI), then a barrier inside the node.
//!
//! So a call is host-blocking across nodes (step 2), and the _async forms
//! run steps 1-2 before they return (their future is step 3's event).
//! Anything else across nodes (flat policies, deterministic<>, the other
//! collectives, send/recv, element types and operators MPI does not
//! reduce) throws chorus::error naming what is not available.
//!
//! Status: compiled (nvcc, CUDA 13), never run on a GPU; never run with
//! real NVLink or a real network.

#if !defined(__CUDACC__)
#  error "chorus/backend/gpu_nodes.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../ops/operators.hpp"
#include "gpu.hpp"

namespace chorus::detail {

//! The element types and operators the inter-node step reduces (what MPI
//! reduces natively).
enum class inter_elem : std::uint8_t { none, i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 };
enum class inter_op : std::uint8_t { none, sum, prod, min, max };

template <class T>
constexpr inter_elem inter_elem_of() {
    if constexpr (std::is_same_v<T, float>) return inter_elem::f32;
    else if constexpr (std::is_same_v<T, double>) return inter_elem::f64;
    else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        constexpr bool s = std::is_signed_v<T>;
        if constexpr (sizeof(T) == 1) return s ? inter_elem::i8 : inter_elem::u8;
        else if constexpr (sizeof(T) == 2) return s ? inter_elem::i16 : inter_elem::u16;
        else if constexpr (sizeof(T) == 4) return s ? inter_elem::i32 : inter_elem::u32;
        else if constexpr (sizeof(T) == 8) return s ? inter_elem::i64 : inter_elem::u64;
        else return inter_elem::none;
    } else return inter_elem::none;
}
template <class Op>
constexpr inter_op inter_op_of() {
    if constexpr (std::is_same_v<Op, sum>) return inter_op::sum;
    else if constexpr (std::is_same_v<Op, prod>) return inter_op::prod;
    else if constexpr (std::is_same_v<Op, min>) return inter_op::min;
    else if constexpr (std::is_same_v<Op, max>) return inter_op::max;
    else return inter_op::none;
}

//! How a host wait of the inter-node step is bounded.
struct inter_wait {
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout{0};
    std::function<bool()> aborted; //!< true once the node world's abort word is set
    std::string fn;                //!< the call, for errors
};

//! Waits until `ev` has completed on the device, at most until w.deadline
//! and while the abort word is clear; throws errc::timeout / errc::aborted
//! naming `what`, or CUDA's error.
inline void inter_wait_event(cudaEvent_t ev, const inter_wait& w, const char* what) {
    for (unsigned polls = 0;; ++polls) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) throw_cuda(e, std::string("waiting for ") + what);
        (void)cudaGetLastError();
        if (w.aborted && w.aborted())
            throw error(errc::aborted, w.fn + ": the communicator was aborted while this rank waited for " + what);
        if (std::chrono::steady_clock::now() >= w.deadline)
            throw error(errc::timeout, w.fn + ": timed out after " + std::to_string(w.timeout.count()) +
                                           " ms waiting for " + what);
        if (polls < 64) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

//! The inter-node half of a GPU communicator across nodes (one per
//! process). Every call is collective over this rank's inter-node group
//! (the ranks with its local index on every node), host-blocking, and
//! cannot be interrupted once inside MPI.
class gpu_inter_nodes {
public:
    virtual ~gpu_inter_nodes() = default;

    int rank = 0, size = 1;                 //!< in the whole communicator
    int nodes = 1, node = 0;                //!< node count, this rank's node
    int local = 0, local_size = 1;          //!< this rank's index inside its node, ranks per node
    std::vector<int> node_of, local_of;     //!< per rank of the whole communicator
    //! Node k holds ranks k*local_size .. k*local_size + local_size - 1
    //! (all_gather needs it: a node's blocks are then contiguous).
    bool consecutive = false;

    //! True when the inter-node step hands device pointers to MPI.
    virtual bool cuda_aware() const noexcept = 0;
    //! Every member passes its `ok`; true when all were true.
    virtual bool agree(bool ok, const inter_wait& w) = 0;
    //! In place on `count` elements of device memory at `buf` (its
    //! producer has completed): op over the group. Results are in `buf`
    //! for work issued on `st` afterwards.
    virtual void all_reduce(void* buf, std::uint64_t count, inter_elem t, inter_op op, cudaStream_t st,
                            const inter_wait& w) = 0;
    //! `bytes` of device memory at `buf` from the member on node `root_node`.
    virtual void broadcast(void* buf, std::uint64_t bytes, int root_node, cudaStream_t st, const inter_wait& w) = 0;
    //! `buf` holds one block of `block_bytes` per node, in node order;
    //! this member's node's block is filled: every member ends with all.
    virtual void all_gather(void* buf, std::uint64_t block_bytes, cudaStream_t st, const inter_wait& w) = 0;
};

} // namespace chorus::detail
