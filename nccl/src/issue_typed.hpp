#pragma once
//! \file nccl/src/issue_typed.hpp
//! issue_typed<T, reductions>: one NCCL operation on chorus's templates,
//! for one element type. Each types_*.cpp instantiates it for its types,
//! so the (type x operator) instantiations compile in parallel.

#include <span>
#include <string>
#include <vector>

#include "internal.hpp"

namespace chorus_nccl {

//! Calls f(op) with the chorus operator NCCL's `red` names.
template <class F>
chorus::future with_operator(int red, F&& f) {
    switch (red) {
    case ncclSum: return f(chorus::sum{});
    case ncclProd: return f(chorus::prod{});
    case ncclMax: return f(chorus::max{});
    case ncclMin: return f(chorus::min{});
    case ncclAvg: return f(chorus::avg{});
    default: break;
    }
    // Validated at the call; reaching here is a bug.
    throw chorus::error(chorus::errc::internal, "libchorus_nccl: operator " + std::to_string(red) +
                                                    " reached the dispatch unvalidated");
}

template <class T, bool reductions>
chorus::future issue_typed(const op_desc& d, bool async) {
    chorus::communicator<chorus::threads>& c = *d.comm->comm;
    const std::size_t k = d.count;
    const std::size_t n = static_cast<std::size_t>(c.size());
    const T* in = static_cast<const T*>(d.send);
    T* out = static_cast<T*>(d.recv);
    switch (d.kind) {
    case op_kind::all_gather: {
        const std::span<const T> i(in, k);
        const std::span<T> o(out, k * n);
        if (async) return chorus::all_gather_async(c, i, o);
        chorus::all_gather(c, i, o);
        return {};
    }
    case op_kind::broadcast: {
        // An all_gatherv to which only the root contributes: the root's
        // sendbuff goes to every rank's recvbuff, out of place or in place,
        // as one collective in stream order (chorus::broadcast is in place
        // only, and the root's copy from sendbuff would otherwise have to
        // run on the stream between earlier queued work and the broadcast).
        std::vector<std::size_t> counts(n, 0);
        counts[static_cast<std::size_t>(d.root)] = k;
        const std::span<const T> i = c.rank() == d.root ? std::span<const T>(in, k) : std::span<const T>();
        const std::span<T> o(out, k);
        if (async) return chorus::all_gatherv_async(c, i, o, std::span<const std::size_t>(counts));
        chorus::all_gatherv(c, i, o, std::span<const std::size_t>(counts));
        return {};
    }
    case op_kind::send: {
        const std::span<const T> b(in, k);
        if (async) return chorus::send_async(c, b, d.root);
        chorus::send(c, b, d.root);
        return {};
    }
    case op_kind::recv: {
        const std::span<T> b(out, k);
        if (async) return chorus::recv_async(c, b, d.root);
        chorus::recv(c, b, d.root);
        return {};
    }
    case op_kind::all_reduce:
    case op_kind::reduce_scatter:
    case op_kind::reduce: break;
    }
    if constexpr (reductions) {
        return with_operator(d.red, [&](auto op) -> chorus::future {
            switch (d.kind) {
            case op_kind::all_reduce: {
                const std::span<const T> i(in, k);
                const std::span<T> o(out, k);
                if (async) return chorus::all_reduce_async(c, i, o, op);
                chorus::all_reduce(c, i, o, op);
                return {};
            }
            case op_kind::reduce_scatter: {
                const std::span<const T> i(in, k * n);
                const std::span<T> o(out, k);
                if (async) return chorus::reduce_scatter_async(c, i, o, op);
                chorus::reduce_scatter(c, i, o, op);
                return {};
            }
            default: { // reduce: recvbuff matters at the root only
                const std::span<const T> i(in, k);
                const std::span<T> o = c.rank() == d.root ? std::span<T>(out, k) : std::span<T>();
                if (async) return chorus::reduce_async(c, i, o, op, d.root);
                chorus::reduce(c, i, o, op, d.root);
                return {};
            }
            }
        });
    } else {
        throw chorus::error(chorus::errc::internal,
                            "libchorus_nccl: a reduction on a copy-only data type reached the dispatch");
    }
}

} // namespace chorus_nccl

//! Explicit instantiation, one line per type in the types_*.cpp files.
#define CHORUS_NCCL_INSTANTIATE(T, reductions) \
    template chorus::future chorus_nccl::issue_typed<T, reductions>(const chorus_nccl::op_desc&, bool);
