#pragma once
//! \file collectives/p2p.hpp
//! Point-to-point: send(comm, buf, peer) delivers buf to the matching
//! recv(comm, buf, peer) on rank `peer`. Messages between an ordered pair
//! (src, dst) match in issue order, independently of the collectives and
//! of other pairs; no other rank takes part. The receive's size and
//! element type must equal the send's, else both calls fail with
//! errc::mismatch naming both counts. A send completes once the receiver
//! has copied the data (rendezvous), so two ranks that both send to each
//! other first wait until the deadline: order the calls (e.g. even ranks
//! send first). Async forms queue behind the rank's earlier calls like the
//! collectives. A deadline, an abort or a peer that returned fails the
//! call (errc::timeout / aborted / peer_failed) and breaks the
//! communicator, as a failed collective does.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "../core/error.hpp"

namespace chorus {

namespace detail {

template <class B, class T>
constexpr bool check_p2p() {
    static_assert(std::is_trivially_copyable_v<T>, "chorus: element type must be trivially copyable");
    constexpr bool ok = requires(communicator<B>& comm, T* p) {
        comm.template p2p<T>(true, p, std::uint64_t{}, 0, false);
    };
    static_assert(ok, "chorus: this backend does not run send/recv yet (communicator<threads>, communicator<mpi> and "
                      "communicator<gpu::device> do)");
    return ok && std::is_trivially_copyable_v<T>;
}

template <class B, class T>
future p2p_impl(communicator<B>& comm, bool is_send, T* buf, std::size_t count, int peer, bool async,
                stream_arg stream = {}) {
    if constexpr (!check_p2p<B, T>()) {
        return future();
    } else {
        const std::string head = is_send ? "chorus::send: " : "chorus::recv: ";
        if (buf == nullptr && count != 0)
            throw error(errc::invalid_argument, head + "`buf` has " + std::to_string(count) +
                                                    " elements but a null data pointer");
        if (peer < 0 || peer >= comm.size())
            throw error(errc::invalid_argument, head + "`peer` is " + std::to_string(peer) +
                                                    " but the communicator has ranks 0.." +
                                                    std::to_string(comm.size() - 1));
        if (peer == comm.rank())
            throw error(errc::invalid_argument, head + "`peer` is " + std::to_string(peer) +
                                                    ", this rank itself (a rank cannot " +
                                                    (is_send ? "send to" : "receive from") + " itself)");
        if constexpr (requires { comm.template p2p<T>(is_send, buf, std::uint64_t(count), peer, async, stream); }) {
            if (stream.given) return comm.template p2p<T>(is_send, buf, std::uint64_t(count), peer, async, stream);
        }
        return comm.template p2p<T>(is_send, buf, std::uint64_t(count), peer, async);
    }
}

} // namespace detail

//! Sends buf to rank `peer`; returns once `peer` received it.
template <class B, class T, std::size_t E = std::dynamic_extent>
void send(communicator<B>& comm, std::span<T, E> buf, int peer) {
    using U = std::remove_const_t<T>;
    detail::p2p_impl<B, U>(comm, true, const_cast<U*>(buf.data()), buf.size(), peer, false);
}
template <class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future send_async(communicator<B>& comm, std::span<T, E> buf, int peer) {
    using U = std::remove_const_t<T>;
    return detail::p2p_impl<B, U>(comm, true, const_cast<U*>(buf.data()), buf.size(), peer, true);
}

//! Receives into buf from rank `peer` (buf.size() must equal the send's).
template <class B, class T, std::size_t E = std::dynamic_extent>
void recv(communicator<B>& comm, std::span<T, E> buf, int peer) {
    static_assert(!std::is_const_v<T>, "chorus::recv: `buf` must be writable (a span of non-const elements)");
    detail::p2p_impl<B, T>(comm, false, buf.data(), buf.size(), peer, false);
}
template <class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future recv_async(communicator<B>& comm, std::span<T, E> buf, int peer) {
    static_assert(!std::is_const_v<T>, "chorus::recv_async: `buf` must be writable (a span of non-const elements)");
    return detail::p2p_impl<B, T>(comm, false, buf.data(), buf.size(), peer, true);
}

} // namespace chorus
