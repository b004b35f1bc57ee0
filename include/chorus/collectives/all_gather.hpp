#pragma once
//! \file collectives/all_gather.hpp
//! AllGather: block r of every rank's `out` is rank r's `in`.
//! out.size() == size() * in.size(); in-place when in.data() == out.data() + rank() * in.size().

#include <cstddef>
#include <span>
#include <type_traits>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "checks.hpp"

namespace chorus {

namespace detail {
//! all_gather with a policy value (what all_gather<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T>
future all_gather_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out, bool async,
                      stream_arg stream = {}) {
    constexpr collective c = collective::all_gather;
    check_policy(c, pol, true);
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    const std::size_t need = checked_mul(c, "size() * in.size()", std::size_t(comm.size()), in.size());
    if (out.size() != need)
        throw_arg(c, "`out` has " + std::to_string(out.size()) + " elements but needs size() * in.size() = " +
                         std::to_string(comm.size()) + " * " + std::to_string(in.size()) + " = " +
                         std::to_string(need));
    const bool in_place = in.data() == out.data() + std::size_t(comm.rank()) * in.size();
    if (!in_place && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`in` overlaps `out` but is not block rank() of it (for in-place, pass "
                     "in = out.subspan(rank() * n, n))");
    return comm.template launch<T, copy_only>(pol, c, in.data(), out.data(), in.size(), copy_only{}, 0, async,
                                              stream);
}

template <class Algo, class B, class T>
future all_gather_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out, bool async,
                       stream_arg stream = {}) {
    if constexpr (!check_element<Algo, T>()) {
        return future();
    } else {
        return all_gather_run(comm, policy_of<Algo>, in, out, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
void all_gather(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out) {
    detail::all_gather_impl<Algo>(comm, in, std::span<T>(out), false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_gather_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                      std::span<T, E> out) {
    return detail::all_gather_impl<Algo>(comm, in, std::span<T>(out), true);
}

} // namespace chorus
