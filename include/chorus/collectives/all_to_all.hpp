#pragma once
//! \file collectives/all_to_all.hpp
//! AllToAll: block q of rank r's `out` is block r of rank q's `in` (blocks
//! of in.size() / size() elements). in.size() == out.size(), a multiple of
//! size(); in place when in.data() == out.data() (then staged through
//! scratch). Every policy plans it with the exchange schedule
//! (algo/exchange.hpp); Algo's params.channels and params.chunk_bytes tune it.
//!
//! Also home of what the exchange collectives (all_to_all, all_gatherv,
//! reduce_scatterv, all_to_allv) share: counts conversion and checks, and
//! the test whether a backend runs them.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "checks.hpp"

namespace chorus {

namespace detail {

//! True when communicator<B> can run the exchange collectives (its launch
//! takes the counts).
template <class B, class T, class Op>
constexpr bool runs_exchange() {
    return requires(communicator<B>& comm, const policy& p, const T* in, T* out, const Op& op,
                    std::span<const std::uint64_t> k) {
        comm.template launch<T, Op>(p, collective::all_to_all, in, out, std::uint64_t{}, op, 0, false, stream_arg{}, k);
    };
}

template <class B, class T, class Op>
constexpr bool check_exchange_backend() {
    constexpr bool ok = runs_exchange<B, T, Op>();
    static_assert(ok, "chorus: this backend does not run all_to_all and the \"v\" collectives "
                      "(communicator<threads>, communicator<mpi> and gpu::communicator do)");
    return ok;
}

inline std::size_t checked_add(collective c, const char* what, std::size_t a, std::size_t b) {
    if (a > std::numeric_limits<std::size_t>::max() - b)
        throw_arg(c, std::string(what) + " overflows: " + std::to_string(a) + " + " + std::to_string(b));
    return a + b;
}

//! sum of counts[first + i * stride], i < len, checked for overflow.
inline std::size_t checked_sum(collective c, const char* what, std::span<const std::size_t> counts,
                               std::size_t first, std::size_t len, std::size_t stride) {
    std::size_t s = 0;
    for (std::size_t i = 0; i < len; ++i) s = checked_add(c, what, s, counts[first + i * stride]);
    return s;
}

//! The counts as the backend takes them. The whole array's sum must fit in
//! a size_t, as elements and as bytes of `elem_bytes`-byte elements: every
//! count, sum of counts and offset any rank computes (in elements or in
//! bytes, for its own buffers or a peer's) is at most that sum, so none of
//! them can wrap once this passed.
inline std::vector<std::uint64_t> exchange_counts(collective c, std::span<const std::size_t> counts,
                                                  std::size_t elem_bytes) {
    const std::size_t total = checked_sum(c, "the sum of `counts`", counts, 0, counts.size(), 1);
    (void)checked_mul(c, "the sum of `counts` in bytes", total, elem_bytes);
    return std::vector<std::uint64_t>(counts.begin(), counts.end());
}

inline void check_counts_size(collective c, std::span<const std::size_t> counts, std::size_t need,
                              const char* need_text) {
    if (counts.data() == nullptr && !counts.empty())
        throw_arg(c, "`counts` has " + std::to_string(counts.size()) + " entries but a null data pointer");
    if (counts.size() != need)
        throw_arg(c, "`counts` has " + std::to_string(counts.size()) + " entries but needs " + need_text + " = " +
                         std::to_string(need));
}

//! all_to_all with a policy value (what all_to_all<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T>
future all_to_all_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out, bool async,
                      stream_arg stream = {}) {
    constexpr collective c = collective::all_to_all;
    check_policy(c, pol, true);
    check_data(c, "in", in.data(), in.size());
    check_data(c, "out", out.data(), out.size());
    if (out.size() != in.size())
        throw_arg(c, "`out` has " + std::to_string(out.size()) + " elements but `in` has " +
                         std::to_string(in.size()) + " (all_to_all needs in.size() == out.size())");
    const std::size_t n = std::size_t(comm.size());
    if (in.size() % n != 0)
        throw_arg(c, "`in` has " + std::to_string(in.size()) + " elements, not a multiple of size() = " +
                         std::to_string(n));
    if (in.data() != out.data() && overlaps(in.data(), in.size(), out.data(), out.size()))
        throw_arg(c, "`in` overlaps `out` (for in-place, pass the same span as `in` and `out`)");
    return comm.template launch<T, copy_only>(pol, c, in.data(), out.data(), in.size() / n, copy_only{}, 0, async,
                                              stream, std::span<const std::uint64_t>{});
}

template <class Algo, class B, class T>
future all_to_all_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out, bool async,
                       stream_arg stream = {}) {
    if constexpr (!check_element<Algo, T>() || !check_exchange_backend<B, T, copy_only>()) {
        return future();
    } else {
        return all_to_all_run(comm, policy_of<Algo>, in, out, async, stream);
    }
}

} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
void all_to_all(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out) {
    detail::all_to_all_impl<Algo>(comm, in, std::span<T>(out), false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent>
[[nodiscard]] future all_to_all_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in,
                                      std::span<T, E> out) {
    return detail::all_to_all_impl<Algo>(comm, in, std::span<T>(out), true);
}

} // namespace chorus
