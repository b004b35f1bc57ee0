#pragma once
//! \file collectives/all_gatherv.hpp
//! AllGatherV: every rank's `out` is the concatenation, in rank order, of
//! every rank's `in`; rank q contributes counts[q] elements (counts has
//! size() entries, the same on every rank, zeros allowed).
//! in.size() == counts[rank()], out.size() == sum of counts; in place when
//! in.data() == out.data() + counts[0] + ... + counts[rank() - 1] (in is
//! block rank() of out). Planned with the exchange schedule by every policy.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "all_to_all.hpp"
#include "checks.hpp"

namespace chorus {

namespace detail {
//! all_gatherv with a policy value (what all_gatherv<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T>
future all_gatherv_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out,
                        std::span<const std::size_t> counts, bool async, stream_arg stream = {}) {
    constexpr collective c = collective::all_gatherv;
    check_policy(c, pol, true);
    const std::size_t n = std::size_t(comm.size()), r = std::size_t(comm.rank());
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    check_counts_size(c, counts, n, "size()");
    const std::vector<std::uint64_t> k = exchange_counts(c, counts, sizeof(T));
    if (in.size() != counts[r])
        throw_arg(c, "`in` has " + std::to_string(in.size()) + " elements but counts[rank()] = counts[" +
                         std::to_string(r) + "] = " + std::to_string(counts[r]));
    const std::size_t total = checked_sum(c, "the sum of `counts`", counts, 0, n, 1);
    if (out.size() != total)
        throw_arg(c, "`out` has " + std::to_string(out.size()) + " elements but needs the sum of `counts` = " +
                         std::to_string(total));
    const std::size_t displ = checked_sum(c, "the sum of `counts`", counts, 0, r, 1);
    const bool in_place = in.data() == out.data() + displ;
    if (!in_place && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`in` overlaps `out` but is not block rank() of it (for in-place, pass "
                     "in = out.subspan(counts[0] + ... + counts[rank() - 1], counts[rank()]))");
    return comm.template launch<T, copy_only>(pol, c, in.data(), out.data(), in.size(), copy_only{}, 0, async,
                                                    stream, std::span<const std::uint64_t>(k));
}

template <class Algo, class B, class T>
future all_gatherv_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out,
                        std::span<const std::size_t> counts, bool async, stream_arg stream = {}) {
    if constexpr (!check_element<Algo, T>() || !check_exchange_backend<B, T, copy_only>()) {
        return future();
    } else {
        return all_gatherv_run(comm, policy_of<Algo>, in, out, counts, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
void all_gatherv(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                 std::span<const std::size_t> counts) {
    detail::all_gatherv_impl<Algo>(comm, in, std::span<T>(out), counts, false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_gatherv_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                       std::span<T, E> out, std::span<const std::size_t> counts) {
    return detail::all_gatherv_impl<Algo>(comm, in, std::span<T>(out), counts, true);
}

} // namespace chorus
