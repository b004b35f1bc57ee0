#pragma once
//! \file collectives/reduce_scatterv.hpp
//! ReduceScatterV: rank r's `out` is op over every rank's block r of `in`,
//! the blocks packed in rank order with rank q's block counts[q] elements
//! long (counts has size() entries, the same on every rank, zeros allowed).
//! in.size() == sum of counts, out.size() == counts[rank()]; in place when
//! out.data() == in.data() + counts[0] + ... + counts[rank() - 1] (out is
//! block rank() of in). Values are combined in rank order 0, 1, ..., n-1
//! whatever the policy (planned with the exchange schedule), then the
//! operator's epilogue (avg divides by size()).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "../ops/operators.hpp"
#include "all_to_all.hpp"
#include "checks.hpp"

namespace chorus {

namespace detail {
//! reduce_scatterv with a policy value (what reduce_scatterv<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T, class Op>
future reduce_scatterv_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out,
                            std::span<const std::size_t> counts, const Op& op, bool async,
                            stream_arg stream = {}) {
    constexpr collective c = collective::reduce_scatterv;
    check_policy(c, pol, op_traits<Op>::commutative);
    const std::size_t n = std::size_t(comm.size()), r = std::size_t(comm.rank());
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    check_counts_size(c, counts, n, "size()");
    const std::vector<std::uint64_t> k = exchange_counts(c, counts, sizeof(T));
    if (out.size() != counts[r])
        throw_arg(c, "`out` has " + std::to_string(out.size()) + " elements but counts[rank()] = counts[" +
                         std::to_string(r) + "] = " + std::to_string(counts[r]));
    const std::size_t total = checked_sum(c, "the sum of `counts`", counts, 0, n, 1);
    if (in.size() != total)
        throw_arg(c, "`in` has " + std::to_string(in.size()) + " elements but needs the sum of `counts` = " +
                         std::to_string(total));
    const std::size_t displ = checked_sum(c, "the sum of `counts`", counts, 0, r, 1);
    const bool in_place = out.data() == in.data() + displ;
    if (!in_place && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`out` overlaps `in` but is not block rank() of it (for in-place, pass "
                     "out = in.subspan(counts[0] + ... + counts[rank() - 1], counts[rank()]))");
    return comm.template launch<T, Op>(pol, c, in.data(), out.data(), in.size(), op, 0, async,
                                             stream, std::span<const std::uint64_t>(k));
}

template <class Algo, class B, class T, class Op>
future reduce_scatterv_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out,
                            std::span<const std::size_t> counts, const Op& op, bool async,
                            stream_arg stream = {}) {
    if constexpr (!check_reduction<Algo, T, Op>() || !check_exchange_backend<B, T, Op>()) {
        return future();
    } else {
        return reduce_scatterv_run(comm, policy_of<Algo>, in, out, counts, op, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
void reduce_scatterv(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                     std::span<const std::size_t> counts, Op op = {}) {
    detail::reduce_scatterv_impl<Algo>(comm, in, std::span<T>(out), counts, op, false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op = sum>
    requires detail::op_like<Op>
[[nodiscard]] future reduce_scatterv_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                           std::span<T, E> out, std::span<const std::size_t> counts, Op op = {}) {
    return detail::reduce_scatterv_impl<Algo>(comm, in, std::span<T>(out), counts, op, true);
}

} // namespace chorus
