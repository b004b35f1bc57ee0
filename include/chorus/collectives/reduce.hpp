#pragma once
//! \file collectives/reduce.hpp
//! Reduce: the root's `out` is op over all ranks' `in`. `out` is used only
//! on the root (where out.size() == in.size(); in-place when equal); other
//! ranks may pass an empty span.

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
//! reduce with a policy value (what reduce<Algo> runs with policy_of<Algo>; a policy
//! made at run time is checked by check_policy).
template <class B, class T, class Op>
future reduce_run(communicator<B>& comm, const policy& pol, std::span<const T> in, std::span<T> out, const Op& op,
                  int root, bool async, stream_arg stream = {}) {
    constexpr collective c = collective::reduce;
    check_policy(c, pol, op_traits<Op>::commutative);
    check_root(c, root, comm.size());
    check_data(c, "in", in.data(), in.size());
    T* dst = nullptr;
    if (comm.rank() == root) {
        check_data(c, "out", out.data(), out.size());
        if (out.size() != in.size())
            throw_arg(c, "at the root `out` has " + std::to_string(out.size()) + " elements but `in` has " +
                             std::to_string(in.size()) + "; they must be equal");
        if (in.data() != out.data() && overlaps(in.data(), in.size(), out.data(), out.size()))
            throw_arg(c, "`in` and `out` overlap without being the same buffer");
        dst = out.data();
    }
    return comm.template launch<T, Op>(pol, c, in.data(), dst, in.size(), op, root, async, stream);
}

template <class Algo, class B, class T, class Op>
future reduce_impl(communicator<B>& comm, std::span<const T> in, std::span<T> out, const Op& op, int root,
                   bool async, stream_arg stream = {}) {
    if constexpr (!check_reduction<Algo, T, Op>()) {
        return future();
    } else {
        return reduce_run(comm, policy_of<Algo>, in, out, op, root, async, stream);
    }
}
} // namespace detail

template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op>
    requires detail::op_like<Op>
void reduce(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out, Op op, int root) {
    detail::reduce_impl<Algo>(comm, in, std::span<T>(out), op, root, false);
}
template <class Algo = automatic, class B, class T, std::size_t E = std::dynamic_extent, class Op>
    requires detail::op_like<Op>
[[nodiscard]] future reduce_async(communicator<B>& comm, std::span<const std::type_identity_t<T>> in, std::span<T, E> out,
                                  Op op, int root) {
    return detail::reduce_impl<Algo>(comm, in, std::span<T>(out), op, root, true);
}

} // namespace chorus
