#pragma once
//! \file collectives/reduce_scatter.hpp
//! ReduceScatter: rank r's `out` is op over all ranks' block r of `in`.
//! in.size() == size() * out.size(); in-place when out.data() == in.data() + rank() * out.size().

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
//! reduce_scatter with a policy value (what reduce_scatter<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T, class Op>
future reduce_scatter_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out,
                          const Op& op, bool async, stream_arg stream = {}) {
    constexpr collective c = collective::reduce_scatter;
    check_policy(c, pol, op_traits<Op>::commutative);
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    const std::size_t need = checked_mul(c, "size() * out.size()", std::size_t(comm.size()), out.size());
    if (in.size() != need)
        throw_arg(c, "`in` has " + std::to_string(in.size()) + " elements but needs size() * out.size() = " +
                         std::to_string(comm.size()) + " * " + std::to_string(out.size()) + " = " +
                         std::to_string(need));
    const bool in_place = out.data() == in.data() + std::size_t(comm.rank()) * out.size();
    if (!in_place && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`out` overlaps `in` but is not block rank() of it (for in-place, pass "
                     "out = in.subspan(rank() * n, n))");
    return comm.template launch<T, Op>(pol, c, in.data(), out.data(), out.size(), op, 0, async, stream);
}

template <class Algo, class B, class T, class Op>
future reduce_scatter_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out, const Op& op, bool async,
                           stream_arg stream = {}) {
    if constexpr (!check_reduction<Algo, T, Op>()) {
        return future();
    } else {
        return reduce_scatter_run(comm, policy_of<Algo>, in, out, op, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void reduce_scatter(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out, Op op = {}) {
    detail::reduce_scatter_impl<Algo>(comm, in, std::span<T>(out), op, false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future reduce_scatter_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                          std::span<T, E> out, Op op = {}) {
    return detail::reduce_scatter_impl<Algo>(comm, in, std::span<T>(out), op, true);
}

} // namespace chorus
