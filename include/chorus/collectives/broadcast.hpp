#pragma once
//! \file collectives/broadcast.hpp
//! Broadcast: every rank's `buf` becomes the root's `buf`.

#include <cstddef>
#include <span>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "checks.hpp"

namespace chorus {

template <class Backend>
class communicator;

namespace detail {
template <class Algo, class B, class T>
future broadcast_impl(communicator<B>& comm, std::span<T> buf, int root, bool async) {
    if constexpr (!check_element<Algo, T>()) {
        return future();
    } else {
        constexpr collective c = collective::broadcast;
        check_data(c, "buf", buf.data(), buf.size());
        check_root(c, root, comm.size());
        return comm.template launch<T, copy_only, Algo>(c, buf.data(), buf.data(), buf.size(), copy_only{}, root,
                                                        async);
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
