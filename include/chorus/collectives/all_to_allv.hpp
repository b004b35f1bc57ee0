#pragma once
//! \file collectives/all_to_allv.hpp
//! AllToAllV: counts is the size() x size() matrix, counts[q * size() + r]
//! = how many elements rank q sends rank r (the same on every rank, zeros
//! allowed). Rank r's `in` holds what it sends, packed in destination order
//! (in.size() == sum_j counts[r * size() + j]); its `out` receives, packed in
//! source order (out.size() == sum_q counts[q * size() + r]). In place when
//! in.data() == out.data() (then in.size() must equal out.size(); staged
//! through scratch). Planned with the exchange schedule by every policy.

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
//! all_to_allv with a policy value (what all_to_allv<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T>
future all_to_allv_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out,
                        std::span<const std::size_t> counts, bool async, stream_arg stream = {}) {
    constexpr collective c = collective::all_to_allv;
    check_policy(c, pol, true);
    const std::size_t n = std::size_t(comm.size()), r = std::size_t(comm.rank());
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    check_counts_size(c, counts, checked_mul(c, "size() * size()", n, n), "size() * size()");
    const std::vector<std::uint64_t> k = exchange_counts(c, counts, sizeof(T));
    const std::size_t sends = checked_sum(c, "the sum of `counts`", counts, r * n, n, 1);
    if (in.size() != sends)
        throw_arg(c, "`in` has " + std::to_string(in.size()) + " elements but rank " + std::to_string(r) +
                         " sends counts[rank() * size() + j] summed over j = " + std::to_string(sends));
    const std::size_t receives = checked_sum(c, "the sum of `counts`", counts, r, n, n);
    if (out.size() != receives)
        throw_arg(c, "`out` has " + std::to_string(out.size()) + " elements but rank " + std::to_string(r) +
                         " receives counts[q * size() + rank()] summed over q = " + std::to_string(receives));
    const bool in_place = in.data() == out.data() && !in.empty() && !out.empty();
    if (in_place && in.size() != out.size())
        throw_arg(c, "in place (`in` and `out` start at the same element) needs in.size() == out.size(), but "
                     "`in` has " + std::to_string(in.size()) + " elements and `out` " +
                         std::to_string(out.size()));
    if (!in_place && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`in` overlaps `out` (for in-place, pass the same span as `in` and `out`)");
    return comm.template launch<T, copy_only>(pol, c, in.data(), out.data(), in.size(), copy_only{}, 0, async,
                                                    stream, std::span<const std::uint64_t>(k));
}

template <class Algo, class B, class T>
future all_to_allv_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out,
                        std::span<const std::size_t> counts, bool async, stream_arg stream = {}) {
    if constexpr (!check_element<Algo, T>() || !check_exchange_backend<B, T, copy_only>()) {
        return future();
    } else {
        return all_to_allv_run(comm, policy_of<Algo>, in, out, counts, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
void all_to_allv(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                 std::span<const std::size_t> counts) {
    detail::all_to_allv_impl<Algo>(comm, in, std::span<T>(out), counts, false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_to_allv_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                       std::span<T, E> out, std::span<const std::size_t> counts) {
    return detail::all_to_allv_impl<Algo>(comm, in, std::span<T>(out), counts, true);
}

} // namespace chorus
