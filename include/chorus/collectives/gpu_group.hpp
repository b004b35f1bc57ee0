#pragma once
//! \file collectives/gpu_group.hpp
//! Group launch on the GPU backend (docs/gpu.md, "Group launch"): the
//! collectives one rank issues on one stream inside a group are queued and
//! launched when the group ends, consecutive calls of the same element type
//! and operator as one kernel (up to detail::group_kernel_calls<T, Op> of
//! them, 16 for the built-in types), the rest in order on their own. CUDA
//! code: <chorus/gpu.hpp> includes it.
//!
//!   {
//!       chorus::gpu::group g(comm, stream);
//!       for (auto& t : small_tensors) chorus::all_reduce(comm, t, chorus::sum{}, stream);
//!   } // one launch (per 16 calls) instead of one per call
//!
//! Or with free functions, e.g. one thread driving every rank:
//!   for (r...) chorus::gpu::group_start(comms[r], streams[r]);
//!   for (r...) for (t...) chorus::all_reduce(comms[r], t[r], chorus::sum{}, streams[r]);
//!   for (r...) chorus::gpu::group_end(comms[r]);

#if !defined(__CUDACC__)
#  error "chorus/collectives/gpu_group.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <exception>
#include <string>

#include "../backend/gpu.hpp"
#include "../comm/communicator.hpp"

namespace chorus::gpu {

//! Opens a group on `comm` and `stream` (null: the rank's own stream):
//! until the matching group_end, this rank's collectives on `stream` are
//! queued, not launched. Groups nest (on the same stream; an inner
//! group_end launches nothing). Throws errc::invalid_argument when a group
//! is open on another stream.
inline void group_start(communicator& comm, cudaStream_t stream) { comm.transport().group_start(stream); }

//! Closes the group opened last by group_start on `comm`; the outermost
//! launches every queued call, in issue order. Throws
//! errc::invalid_argument without an open group, a chorus::error when a
//! launch fails (the calls not launched yet are dropped).
inline void group_end(communicator& comm) { comm.transport().group_end(); }

//! A group as a scope: group_start at construction, group_end at the end
//! of the scope (or at end()). When the scope is left by an exception,
//! nothing is launched: the queued calls are dropped and, if there were
//! any, the communicator is aborted (the other ranks' matching calls fail
//! at once instead of at their timeout). A launch that fails in the
//! destructor aborts the communicator with its reason (later calls and
//! comm.synchronize() throw it); call end() to get it as an exception.
class group {
public:
    group(communicator& comm, cudaStream_t stream) : comm_(&comm), uncaught_(std::uncaught_exceptions()) {
        group_start(comm, stream);
    }
    group(const group&) = delete;
    group& operator=(const group&) = delete;

    //! Ends the group now (group_end): throws what it throws; the
    //! destructor then does nothing.
    void end() {
        if (comm_ == nullptr) return;
        communicator* c = comm_;
        comm_ = nullptr;
        group_end(*c);
    }

    ~group() {
        if (comm_ == nullptr) return;
        communicator& c = *comm_;
        comm_ = nullptr;
        if (std::uncaught_exceptions() > uncaught_) {
            if (const std::size_t n = c.transport().group_drop(); n != 0)
                c.abort("a chorus::gpu::group was left by an exception with " + std::to_string(n) +
                        " call(s) queued; they were not launched");
            return;
        }
        try {
            group_end(c);
        } catch (const std::exception& e) {
            c.abort(std::string("chorus::gpu::group: launching the group failed: ") + e.what());
        } catch (...) {
            c.abort("chorus::gpu::group: launching the group failed");
        }
    }

private:
    communicator* comm_;
    int uncaught_;
};

} // namespace chorus::gpu
