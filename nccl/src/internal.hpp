#pragma once
//! \file nccl/src/internal.hpp
//! What the translation units of libchorus_nccl share: the NCCL header
//! (declarations exported, everything else hidden), the communicator
//! object behind ncclComm_t, one queued operation, and the dispatch from
//! NCCL's run-time data type and operator to chorus's templates.

// The CUDA headers nccl.h includes come first, with this library's default
// (hidden) visibility; then nccl.h itself with default visibility, so the
// nccl* functions defined here are exported and nothing else is. The
// declarations are the toolkit's own: a signature that differs from
// NCCL's is a compile error, not an ABI surprise.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#pragma GCC visibility push(default)
#include <nccl.h>
#pragma GCC visibility pop

#include <chorus/chorus.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

namespace chorus_nccl {

//! A rendezvous of ncclCommInitRank callers that share a unique id
//! (defined in api.cpp).
struct rendezvous;

//! What an operation is, as the NCCL call named it.
enum class op_kind { all_reduce, all_gather, reduce_scatter, broadcast, reduce, send, recv };

} // namespace chorus_nccl

//! The object behind ncclComm_t: one rank of a chorus threads world.
struct ncclComm {
    static constexpr std::uint64_t live_magic = 0x63686f7275736e63ull; // "chorusnc"
    std::uint64_t magic = live_magic;
    std::shared_ptr<chorus::detail::threads_world> world;
    std::unique_ptr<chorus::communicator<chorus::threads>> comm;
    int rank = 0;
    int nranks = 0;
    int device = 0; //!< what ncclCommCuDevice reports
    //! A grouped ncclCommInitRank whose rendezvous ncclGroupEnd completes.
    std::shared_ptr<chorus_nccl::rendezvous> pending;
    //! The first failure of an operation that ran after its call returned
    //! (a grouped one), or of the communicator's initialisation.
    std::atomic<int> async_error{ncclSuccess};
    std::mutex m;
    std::string last_error; //!< the text of async_error
};

namespace chorus_nccl {

//! One operation as an NCCL call described it (validated).
struct op_desc {
    op_kind kind = op_kind::all_reduce;
    const void* send = nullptr; //!< sendbuff; recvbuff for ncclRecv
    void* recv = nullptr;
    std::size_t count = 0; //!< NCCL's count argument (per rank for AllGather and ReduceScatter)
    // NCCL's enums as their raw values (raw()): a C caller may pass any int,
    // and an out-of-range value must be rejected, not loaded as the enum.
    int type = ncclFloat;
    int red = ncclSum;
    int root = 0; //!< root, or the peer of a send/recv
    ncclComm* comm = nullptr;
};

//! The value of an NCCL enum argument as the caller passed it (its bytes
//! copied, never loaded as the enum: a C caller may pass a value outside
//! the enum's range). By reference: passing `e` by value would itself load
//! it as the enum (clang's -fsanitize=enum stops there).
template <class E>
int raw(const E& e) noexcept {
    static_assert(sizeof(E) == sizeof(int));
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

//! Runs `d` on its communicator: synchronously (returns an empty future),
//! or queued on the communicator's host stream (`async`). Throws
//! chorus::error; the caller maps it to an ncclResult_t.
chorus::future issue(const op_desc& d, bool async);

//! issue() for element type T (`reductions`: T also has arithmetic and
//! the reducing collectives may run on it; otherwise it only moves bytes).
template <class T, bool reductions>
chorus::future issue_typed(const op_desc& d, bool async);

} // namespace chorus_nccl
