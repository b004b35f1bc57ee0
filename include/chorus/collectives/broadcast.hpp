#pragma once
//! \file collectives/broadcast.hpp
//! Broadcast: every rank's `buf` becomes the root's `buf`.

#include <cstddef>
#include <span>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "checks.hpp"

namespace chorus {

namespace detail {
//! broadcast with a policy value (what broadcast<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T>
future broadcast_run(communicator<B>& comm, const policy& pol, std::span<T> buf, int root, bool async,
                     stream_arg stream = {}) {
    constexpr collective c = collective::broadcast;
    check_policy(c, pol, true);
    check_data(c, "buf", buf.data(), buf.size());
    check_root(c, root, comm.size());
    return comm.template launch<T, copy_only>(pol, c, buf.data(), buf.data(), buf.size(), copy_only{}, root,
                                                    async, stream);
}

template <class Algo, class B, class T>
future broadcast_impl(communicator<B>& comm, std::span<T> buf, int root, bool async, stream_arg stream = {}) {
    if constexpr (!check_element<Algo, T>()) {
        return future();
    } else {
        return broadcast_run(comm, policy_of<Algo>, buf, root, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
void broadcast(communicator<B>& comm, std::span<T, E> buf, int root) {
    detail::broadcast_impl<Algo>(comm, std::span<T>(buf), root, false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future broadcast_async(communicator<B>& comm, std::span<T, E> buf, int root) {
    return detail::broadcast_impl<Algo>(comm, std::span<T>(buf), root, true);
}

} // namespace chorus
