#pragma once
//! \file collectives/gpu_p2p.hpp
//! Stream-ordered point-to-point on the GPU backend: send/recv of
//! collectives/p2p.hpp with a trailing cudaStream_t. CUDA code:
//! <chorus/gpu.hpp> includes it.
//!
//! Each call enqueues one kernel of one block on `stream` (it must belong
//! to the rank's device) and returns at once; no host thread waits for the
//! peer. The semantics are the host backends' (collectives/p2p.hpp):
//! messages of an ordered pair match in issue order, independently of the
//! collectives and of other pairs; count, element size and type must match,
//! else both calls fail with errc::mismatch naming both counts; a send
//! completes (its kernel ends) once the receiver copied the data, so two
//! ranks that send to each other first on one stream each wait until the
//! deadline: order them (even ranks send first) or put sends and receives
//! on different streams. The pair's message numbers live in device memory
//! (the rank areas), so a send or receive captured in a CUDA graph is the
//! pair's next message on every replay. Sends from a rank to one peer must
//! be ordered among themselves (one stream, or streams joined by events),
//! and so must its receives from one peer; sends and receives of other
//! pairs, and collectives, may run beside them on other streams (one
//! process per GPU: not a staged send, which uses the scratch).
//!
//! Errors found when issuing (null data with a nonzero count, `peer` out
//! of range or this rank, `buf` host memory or memory of another device,
//! one process per GPU: a staged send larger than the scratch) throw at
//! once, naming the argument. Errors found by the kernel (timeout, abort,
//! mismatch) surface in check(), synchronize() or the future, and break the
//! communicator as a failed collective does.

#if !defined(__CUDACC__)
#  error "chorus/collectives/gpu_p2p.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <type_traits>

#include "../async/future.hpp"
#include "../backend/gpu.hpp"
#include "../comm/communicator.hpp"
#include "../core/communicator.hpp"
#include "p2p.hpp"

namespace chorus {

//! Sends buf to rank `peer`, ordered on `stream`: the kernel ends once
//! `peer` has received the data (buf may be reused after that, in stream order).
template <class T, std::size_t E = std::dynamic_extent>
void send(gpu::communicator& comm, std::span<T, E> buf, int peer, cudaStream_t stream) {
    using U = std::remove_const_t<T>;
    detail::p2p_impl<gpu::device, U>(comm, true, const_cast<U*>(buf.data()), buf.size(), peer, false,
                                     detail::stream_arg{static_cast<void*>(stream), true});
}
template <class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future send_async(gpu::communicator& comm, std::span<T, E> buf, int peer, cudaStream_t stream) {
    using U = std::remove_const_t<T>;
    return detail::p2p_impl<gpu::device, U>(comm, true, const_cast<U*>(buf.data()), buf.size(), peer, true,
                                            detail::stream_arg{static_cast<void*>(stream), true});
}

//! Receives into buf from rank `peer`, ordered on `stream` (buf.size()
//! and the element type must equal the send's).
template <class T, std::size_t E = std::dynamic_extent>
void recv(gpu::communicator& comm, std::span<T, E> buf, int peer, cudaStream_t stream) {
    static_assert(!std::is_const_v<T>, "chorus::recv: `buf` must be writable (a span of non-const elements)");
    detail::p2p_impl<gpu::device, T>(comm, false, buf.data(), buf.size(), peer, false,
                                     detail::stream_arg{static_cast<void*>(stream), true});
}
template <class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future recv_async(gpu::communicator& comm, std::span<T, E> buf, int peer, cudaStream_t stream) {
    static_assert(!std::is_const_v<T>, "chorus::recv_async: `buf` must be writable (a span of non-const elements)");
    return detail::p2p_impl<gpu::device, T>(comm, false, buf.data(), buf.size(), peer, true,
                                            detail::stream_arg{static_cast<void*>(stream), true});
}

} // namespace chorus
