#pragma once
//! \file algo/automatic.hpp
//! Policies that choose for the user.
//!
//! `automatic` (the default policy of every collective) picks, per call,
//! the algorithm the cost model (model/cost.hpp) predicts fastest for this
//! collective, size, rank count and topology: the topology the backend
//! passes in schedule_args::topo, else model::current() (the file named
//! by CHORUS_MODEL, else the built-in default), with ranks_per_node taken
//! from schedule_args::node_size when the backend knows a node split.
//! The choice costs a few predictions of a handful of flops each; a user
//! who names a policy type (ring<>, tree<>, ...) pays nothing for it.
//! Candidates are the order-preserving algorithms, and when the operator
//! is commutative (schedule_args::commutative) also ring<>, tree<> and
//! hierarchical<> (with a node split), so non-commutative operators are
//! safe with the default. All candidates run with their default tuning.
//!
//! `deterministic<Algo>` guarantees that reductions are bitwise
//! reproducible: for a given rank count every element is reduced as the
//! left fold in rank order 0, 1, ..., n-1 (one fan-in per element), so
//! the result is the same whatever Algo, channel count, chunk size or
//! timing — and the same as a serial loop over the ranks. AllReduce runs
//! direct<> or two_shot<> (the model picks; both fold in rank order),
//! ReduceScatter and Reduce run direct<>, all with Algo's channels and
//! chunk size where Algo has them. The collectives that only copy
//! (AllGather, Broadcast) are exact under any algorithm and run Algo.

#include <cstdint>

#include "../core/config.hpp"
#include "../model/cost.hpp"
#include "compose.hpp"
#include "direct.hpp"
#include "hierarchical.hpp"
#include "rabenseifner.hpp"
#include "recursive_doubling.hpp"
#include "ring.hpp"
#include "schedule.hpp"
#include "tree.hpp"
#include "two_shot.hpp"

namespace chorus {

//! What automatic::make_schedule returns: the schedule of the chosen
//! algorithm (the other members are unused).
struct auto_schedule {
    model::algorithm which = model::algorithm::ring;
    ring_schedule ring_s{};
    direct_schedule direct_s{};
    tree<>::schedule tree_s{};
    recursive_doubling<>::schedule rd_s{};
    rabenseifner<>::schedule rab_s{};
    two_shot<>::schedule two_s{};
    hierarchical<>::schedule hier_s{};

    template <class F>
    CHORUS_HD constexpr auto visit(F&& f) const {
        switch (which) {
        case model::algorithm::direct: return f(direct_s);
        case model::algorithm::tree: return f(tree_s);
        case model::algorithm::recursive_doubling: return f(rd_s);
        case model::algorithm::rabenseifner: return f(rab_s);
        case model::algorithm::two_shot: return f(two_s);
        case model::algorithm::hierarchical: return f(hier_s);
        case model::algorithm::ring: break;
        }
        return f(ring_s);
    }
    CHORUS_HD constexpr int rank() const { return visit([](const auto& s) { return s.rank(); }); }
    CHORUS_HD constexpr int channels() const { return visit([](const auto& s) { return s.channels(); }); }
    CHORUS_HD constexpr std::uint64_t units() const { return visit([](const auto& s) { return s.units(); }); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const {
        return visit([](const auto& s) { return s.scratch_elems(); });
    }
    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        return visit([c, p](const auto& s) { return s.unit(c, p); });
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return visit([](const auto& s) { return s.final_wait(); }); }
};

namespace detail {
//! The topology a choice is made against (see the file comment).
inline model::topology choice_topology(const schedule_args& a) {
    model::topology t = a.topo != nullptr ? *a.topo : model::current();
    if (a.node_size > 0) t.ranks_per_node = a.node_size;
    return t;
}
//! nccl-tests "size" of a call, in bytes.
constexpr double call_bytes(const schedule_args& a) {
    const bool blocks = a.coll == collective::all_gather || a.coll == collective::reduce_scatter;
    return double(a.count) * double(a.elem_bytes) * (blocks ? double(a.nranks) : 1.0);
}
} // namespace detail

//! The default policy: the model's pick per call (see the file comment).
struct automatic {
    static constexpr direct_params params{1, 256 << 10}; //!< tuning of the exchange collectives
    static constexpr bool reorders_operands = false;     //!< reordering candidates only for commutative operators
    static constexpr bool is_automatic = true;
    static constexpr const char* name = "automatic";
    using schedule = auto_schedule;

    //! The algorithm automatic runs for this call.
    static model::algorithm choose(const schedule_args& a) {
        using model::algorithm;
        if (a.nranks <= 1 || a.coll == collective::barrier || is_exchange(a.coll)) return algorithm::direct;
        const bool comm = a.commutative;
        const bool split = a.node_size > 0 && a.node_size < a.nranks && a.nranks % a.node_size == 0;
        algorithm cand[7]{};
        int k = 0;
        cand[k++] = algorithm::direct;
        switch (a.coll) {
        case collective::all_reduce:
            cand[k++] = algorithm::two_shot;
            cand[k++] = algorithm::recursive_doubling;
            cand[k++] = algorithm::rabenseifner;
            if (comm) {
                cand[k++] = algorithm::ring;
                cand[k++] = algorithm::tree;
                if (split) cand[k++] = algorithm::hierarchical;
            }
            break;
        case collective::broadcast:
            cand[k++] = algorithm::ring;
            cand[k++] = algorithm::tree;
            break;
        case collective::reduce:
            if (comm) {
                cand[k++] = algorithm::ring;
                cand[k++] = algorithm::tree;
            }
            break;
        default: // all_gather, reduce_scatter
            if (comm || a.coll == collective::all_gather) cand[k++] = algorithm::ring;
            break;
        }
        const model::topology t = detail::choice_topology(a);
        return model::best(a.coll, a.nranks, detail::call_bytes(a), t, cand, k);
    }

    static schedule make_schedule(const schedule_args& a) {
        schedule s{};
        s.which = choose(a);
        switch (s.which) {
        case model::algorithm::direct: s.direct_s = direct<>::make_schedule(a); break;
        case model::algorithm::tree: s.tree_s = tree<>::make_schedule(a); break;
        case model::algorithm::recursive_doubling: s.rd_s = recursive_doubling<>::make_schedule(a); break;
        case model::algorithm::rabenseifner: s.rab_s = rabenseifner<>::make_schedule(a); break;
        case model::algorithm::two_shot: s.two_s = two_shot<>::make_schedule(a); break;
        case model::algorithm::hierarchical: s.hier_s = hierarchical<>::make_schedule(a); break;
        case model::algorithm::ring: s.ring_s = ring<>::make_schedule(a); break;
        }
        return s;
    }
};

namespace detail {
template <class Algo>
constexpr direct_params tuning_of() {
    if constexpr (requires { Algo::params.channels; Algo::params.chunk_bytes; })
        return direct_params{Algo::params.channels, Algo::params.chunk_bytes};
    else
        return direct_params{};
}
} // namespace detail

//! Bitwise-reproducible reductions (see the file comment).
template <class Algo = automatic>
struct deterministic {
    static constexpr direct_params params = detail::tuning_of<Algo>();
    static constexpr bool reorders_operands = false;
    static constexpr const char* name = "deterministic";
    using own_schedule = decltype(Algo::make_schedule(schedule_args{}));
    using schedule = alt_schedule<own_schedule, alt_schedule<direct_schedule, two_shot_schedule>>;

    static schedule make_schedule(const schedule_args& a) {
        schedule s{};
        if (a.coll == collective::all_gather || a.coll == collective::broadcast || a.coll == collective::barrier ||
            is_exchange(a.coll)) {
            s.a = Algo::make_schedule(a);
            return s;
        }
        s.use_b = true;
        bool two = false;
        if (a.coll == collective::all_reduce && a.nranks > 1) {
            const model::algorithm cand[2] = {model::algorithm::direct, model::algorithm::two_shot};
            two = model::best(a.coll, a.nranks, detail::call_bytes(a), detail::choice_topology(a), cand, 2) ==
                  model::algorithm::two_shot;
        }
        s.b.use_b = two;
        if (two) s.b.b = two_shot<params>::make_schedule(a).a;
        else s.b.a = direct<params>::make_schedule(a);
        return s;
    }
};

} // namespace chorus
