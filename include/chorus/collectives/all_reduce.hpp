#pragma once
//! \file collectives/all_reduce.hpp
//! AllReduce: every rank ends with op over all ranks' inputs, element-wise.
//! in.size() == out.size(); in-place when in.data() == out.data().

#include <cstddef>
#include <span>
#include <type_traits>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "../ops/operators.hpp"
#include "checks.hpp"

namespace chorus {

namespace detail {
//! all_reduce with a policy value (what all_reduce<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T, class Op>
future all_reduce_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out,
                      const Op& op, bool async, stream_arg stream = {}) {
    constexpr collective c = collective::all_reduce;
    check_policy(c, pol, op_traits<Op>::commutative);
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    if (in.size() != out.size())
        throw_arg(c, "`out` has " + std::to_string(out.size()) + " elements but `in` has " +
                         std::to_string(in.size()) + "; they must be equal");
    if (in.data() != out.data() && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`in` and `out` overlap without being the same buffer (for in-place, pass the same span)");
    return comm.template launch<T, Op>(pol, c, in.data(), out.data(), out.size(), op, 0, async, stream);
}

template <class Algo, class B, class T, class Op>
future all_reduce_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out, const Op& op, bool async,
                       stream_arg stream = {}) {
    if constexpr (!check_reduction<Algo, T, Op>()) {
        return future();
    } else {
        return all_reduce_run(comm, policy_of<Algo>, in, out, op, async, stream);
    }
}
} // namespace detail

//! Out-of-place AllReduce (sync). T is deduced from `out`.
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void all_reduce(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out, Op op = {}) {
    detail::all_reduce_impl<Algo>(comm, in, std::span<T>(out), op, false);
}
//! In-place AllReduce (sync).
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void all_reduce(communicator<B>& comm, std::span<T, E> inout, Op op = {}) {
    detail::all_reduce_impl<Algo>(comm, std::span<const T>(inout), std::span<T>(inout), op, false);
}
//! Out-of-place AllReduce, queued; the buffers must outlive the future.
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future all_reduce_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                      std::span<T, E> out, Op op = {}) {
    return detail::all_reduce_impl<Algo>(comm, in, std::span<T>(out), op, true);
}
//! In-place AllReduce, queued.
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future all_reduce_async(communicator<B>& comm, std::span<T, E> inout, Op op = {}) {
    return detail::all_reduce_impl<Algo>(comm, std::span<const T>(inout), std::span<T>(inout), op, true);
}

} // namespace chorus
