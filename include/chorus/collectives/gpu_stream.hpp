#pragma once
//! \file collectives/gpu_stream.hpp
//! The stream-ordered forms of every collective on the GPU backend: the
//! calls of collectives/*.hpp with a trailing cudaStream_t. CUDA code:
//! <chorus/gpu.hpp> includes it.

#if !defined(__CUDACC__)
#  error "chorus/collectives/gpu_stream.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <type_traits>

#include "../algo/automatic.hpp"
#include "../algo/ring.hpp"
#include "../async/future.hpp"
#include "../backend/gpu.hpp"
#include "../comm/communicator.hpp"
#include "../ops/operators.hpp"
#include "all_gather.hpp"
#include "all_gatherv.hpp"
#include "all_reduce.hpp"
#include "all_to_all.hpp"
#include "all_to_allv.hpp"
#include "broadcast.hpp"
#include "checks.hpp"
#include "reduce.hpp"
#include "reduce_scatter.hpp"
#include "reduce_scatterv.hpp"

namespace chorus {

// Stream-ordered forms: the same collectives with a trailing cudaStream_t.
// They enqueue on `stream` and return at once; errors surface in
// comm.synchronize()/comm.check() (after the stream finished) or, for the
// _async forms, in the future (backed by a CUDA event on `stream`).

namespace detail {
//! The stream argument of a stream-ordered call (core/communicator.hpp).
inline stream_arg on_stream(cudaStream_t stream) { return {static_cast<void*>(stream), true}; }
} // namespace detail

template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void all_reduce(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out, Op op,
                cudaStream_t stream) {
    detail::all_reduce_impl<Algo>(comm, in, std::span<T>(out), op, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void all_reduce(gpu::communicator& comm, std::span<T, E> inout, Op op, cudaStream_t stream) {
    detail::all_reduce_impl<Algo>(comm, std::span<const T>(inout), std::span<T>(inout), op,
                                  false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future all_reduce_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                      std::span<T, E> out, Op op, cudaStream_t stream) {
    return detail::all_reduce_impl<Algo>(comm, in, std::span<T>(out), op, true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future all_reduce_async(gpu::communicator& comm, std::span<T, E> inout, Op op, cudaStream_t stream) {
    return detail::all_reduce_impl<Algo>(comm, std::span<const T>(inout), std::span<T>(inout), op, true,
                                         detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
void all_gather(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                cudaStream_t stream) {
    detail::all_gather_impl<Algo>(comm, in, std::span<T>(out), false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_gather_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                      std::span<T, E> out, cudaStream_t stream) {
    return detail::all_gather_impl<Algo>(comm, in, std::span<T>(out), true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void reduce_scatter(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out, Op op,
                    cudaStream_t stream) {
    detail::reduce_scatter_impl<Algo>(comm, in, std::span<T>(out), op, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future reduce_scatter_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                          std::span<T, E> out, Op op, cudaStream_t stream) {
    return detail::reduce_scatter_impl<Algo>(comm, in, std::span<T>(out), op, true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
void broadcast(gpu::communicator& comm, std::span<T, E> buf, int root, cudaStream_t stream) {
    detail::broadcast_impl<Algo>(comm, std::span<T>(buf), root, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future broadcast_async(gpu::communicator& comm, std::span<T, E> buf, int root, cudaStream_t stream) {
    return detail::broadcast_impl<Algo>(comm, std::span<T>(buf), root, true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void reduce(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out, Op op, int root,
            cudaStream_t stream) {
    detail::reduce_impl<Algo>(comm, in, std::span<T>(out), op, root, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future reduce_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                  std::span<T, E> out, Op op, int root, cudaStream_t stream) {
    return detail::reduce_impl<Algo>(comm, in, std::span<T>(out), op, root, true, detail::on_stream(stream));
}
// The exchange collectives (the exchange schedule, whatever Algo; its
// params tune channels and chunks). The "v" forms' counts are copied into
// the rank's device counts area on `stream` by a small kernel launched just
// before the collective's (kernel parameters: graph capture works, and
// `counts` may be freed as soon as the call returns).
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
void all_to_all(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                cudaStream_t stream) {
    detail::all_to_all_impl<Algo>(comm, in, std::span<T>(out), false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_to_all_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                      std::span<T, E> out, cudaStream_t stream) {
    return detail::all_to_all_impl<Algo>(comm, in, std::span<T>(out), true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
void all_to_allv(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                 std::span<const std::size_t> counts, cudaStream_t stream) {
    detail::all_to_allv_impl<Algo>(comm, in, std::span<T>(out), counts, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_to_allv_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                       std::span<T, E> out, std::span<const std::size_t> counts,
                                       cudaStream_t stream) {
    return detail::all_to_allv_impl<Algo>(comm, in, std::span<T>(out), counts, true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
void all_gatherv(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                 std::span<const std::size_t> counts, cudaStream_t stream) {
    detail::all_gatherv_impl<Algo>(comm, in, std::span<T>(out), counts, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_gatherv_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                       std::span<T, E> out, std::span<const std::size_t> counts,
                                       cudaStream_t stream) {
    return detail::all_gatherv_impl<Algo>(comm, in, std::span<T>(out), counts, true, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void reduce_scatterv(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                     std::span<const std::size_t> counts, Op op, cudaStream_t stream) {
    detail::reduce_scatterv_impl<Algo>(comm, in, std::span<T>(out), counts, op, false, detail::on_stream(stream));
}
template <class Algo = automatic, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future reduce_scatterv_async(gpu::communicator& comm, std::span<const std::type_identity_t<T>> in,
                                           std::span<T, E> out, std::span<const std::size_t> counts, Op op,
                                           cudaStream_t stream) {
    return detail::reduce_scatterv_impl<Algo>(comm, in, std::span<T>(out), counts, op, true,
                                              detail::on_stream(stream));
}

//! (A template, so that a translation unit that does not call it does not
//! compile its kernel.)
template <int = 0>
void barrier(gpu::communicator& comm, cudaStream_t stream) {
    comm.template launch<unsigned char, detail::copy_only>(policy_of<ring<>>, collective::barrier, nullptr, nullptr, 0,
                                                           detail::copy_only{}, 0, false, detail::on_stream(stream));
}

} // namespace chorus
