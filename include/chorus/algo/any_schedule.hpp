#pragma once
//! \file algo/any_schedule.hpp
//! Schedules are data: any_schedule holds the schedule of any policy for
//! one rank's call (a tagged union of the schedule kinds, as small as the
//! largest; trivially copyable, so it travels to a kernel as it is), and
//! every executor runs it. Nothing here depends on the element type or
//! the operator, so one executor instantiation (host) or one kernel (GPU)
//! per (element type, operator) serves every algorithm.
//!
//! any_schedule::unit() is the one place that dispatches on the kind; each
//! kind's unit() is kept out of line (unit_of, CHORUS_NOINLINE), so a
//! translation unit compiles the schedules' code once, not once per
//! (element type, operator), and a kernel stays small. A unit is a whole
//! chunk's work: the calls cost nothing measurable.
//!
//! make_fixed_schedule() plans the schedule of a policy that names its
//! algorithm; algo/automatic.hpp's make_schedule() adds the choosing
//! policies (automatic, deterministic<...>).

#include <cstdint>

#include "../core/config.hpp"
#include "direct.hpp"
#include "exchange.hpp"
#include "hierarchical.hpp"
#include "ll.hpp"
#include "policy.hpp"
#include "rabenseifner.hpp"
#include "recursive_doubling.hpp"
#include "ring.hpp"
#include "schedule.hpp"
#include "staged.hpp"
#include "tree.hpp"
#include "two_shot.hpp"

namespace chorus {

//! Which schedule an any_schedule holds.
enum class schedule_kind : std::uint8_t {
    ring,
    direct,
    tree,
    recursive_doubling,
    rabenseifner,
    two_shot,
    hierarchical,
    staged,
    exchange,
    ll, //!< direct<> with protocol::ll (algo/ll.hpp)
};

//! The schedule of one rank's call, whatever the policy (see the file comment).
struct any_schedule {
    schedule_kind kind = schedule_kind::ring;
    union {
        ring_schedule ring;
        direct_schedule direct;
        tree_schedule tree;
        recursive_doubling_schedule rd;
        rabenseifner_schedule rab;
        two_shot_schedule two_shot;
        hierarchical_schedule hier;
        staged_schedule staged;
        exchange_schedule exchange;
        ll_schedule ll;
    };

    CHORUS_HD constexpr any_schedule() : ring{} {}
    CHORUS_HD constexpr any_schedule(const ring_schedule& s) : kind{schedule_kind::ring}, ring{s} {}
    CHORUS_HD constexpr any_schedule(const direct_schedule& s) : kind{schedule_kind::direct}, direct{s} {}
    CHORUS_HD constexpr any_schedule(const tree_schedule& s) : kind{schedule_kind::tree}, tree{s} {}
    CHORUS_HD constexpr any_schedule(const recursive_doubling_schedule& s)
        : kind{schedule_kind::recursive_doubling}, rd{s} {}
    CHORUS_HD constexpr any_schedule(const rabenseifner_schedule& s) : kind{schedule_kind::rabenseifner}, rab{s} {}
    CHORUS_HD constexpr any_schedule(const two_shot_schedule& s) : kind{schedule_kind::two_shot}, two_shot{s} {}
    CHORUS_HD constexpr any_schedule(const hierarchical_schedule& s) : kind{schedule_kind::hierarchical}, hier{s} {}
    CHORUS_HD constexpr any_schedule(const staged_schedule& s) : kind{schedule_kind::staged}, staged{s} {}
    CHORUS_HD constexpr any_schedule(const leaf_schedule& s) : any_schedule() {
        if (s.is_direct) *this = any_schedule(s.direct);
        else *this = any_schedule(s.ring);
    }
    CHORUS_HD constexpr any_schedule(const exchange_schedule& s) : kind{schedule_kind::exchange}, exchange{s} {}
    CHORUS_HD constexpr any_schedule(const ll_schedule& s) : kind{schedule_kind::ll}, ll{s} {}

    //! The LL plan held, or null: the lane executor runs it with the LL
    //! protocol (exec/lane_ll.hpp); the others run it as its direct<> fallback.
    CHORUS_HD constexpr const ll_schedule* as_ll() const { return kind == schedule_kind::ll ? &ll : nullptr; }

    //! f(the schedule held).
    template <class F>
    CHORUS_HD constexpr decltype(auto) visit(F&& f) const {
        switch (kind) {
        case schedule_kind::direct: return f(direct);
        case schedule_kind::tree: return f(tree);
        case schedule_kind::recursive_doubling: return f(rd);
        case schedule_kind::rabenseifner: return f(rab);
        case schedule_kind::two_shot: return f(two_shot);
        case schedule_kind::hierarchical: return f(hier);
        case schedule_kind::staged: return f(staged);
        case schedule_kind::exchange: return f(exchange);
        case schedule_kind::ll: return f(ll);
        case schedule_kind::ring: break;
        }
        return f(ring);
    }

    // The schedule interface (exec/rank_program.hpp).
    CHORUS_HD constexpr int rank() const { return visit([](const auto& s) { return s.rank(); }); }
    CHORUS_HD constexpr int channels() const { return visit([](const auto& s) { return s.channels(); }); }
    CHORUS_HD constexpr std::uint64_t units() const { return visit([](const auto& s) { return s.units(); }); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const {
        return visit([](const auto& s) { return s.scratch_elems(); });
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return visit([](const auto& s) { return s.final_wait(); }); }
    //! Unit p of channel c, usable in constant expressions.
    CHORUS_HD constexpr step at(int c, std::uint64_t p) const {
        return visit([c, p](const auto& s) { return s.unit(c, p); });
    }
    //! Unit p of channel c: what the executors call (each kind's code out of
    //! line, compiled once: see unit_of in algo/schedule.hpp).
    CHORUS_HD step unit(int c, std::uint64_t p) const {
        return visit([c, p](const auto& s) { return unit_of(s, c, p); });
    }
};

//! The nccl-tests size of call `a` in bytes (AllGather / ReduceScatter:
//! all n blocks).
CHORUS_HD constexpr std::uint64_t call_size_of(const schedule_args& a) {
    const bool blocks = a.coll == collective::all_gather || a.coll == collective::reduce_scatter;
    return a.count * a.elem_bytes * (blocks ? std::uint64_t(a.nranks > 0 ? a.nranks : 1) : 1u);
}

//! Tuning `t` of algorithm `algo` for call `a`, its 0 fields chosen per
//! call (resolve_tuning in algo/policy.hpp, against a.channel_budget).
constexpr tuning resolved_tuning(algorithm algo, tuning t, const schedule_args& a) {
    return resolve_tuning(algo, t, a.coll, call_size_of(a), a.nranks, a.channel_budget);
}

//! Policy `p` (one that names its algorithm) with every 0 field of its
//! tunings chosen for call `a`: hierarchical<>'s against Intra and Inter.
constexpr policy resolved_policy(const policy& p, const schedule_args& a) {
    policy r = p;
    if (p.algo == algorithm::hierarchical) {
        r.tune = resolved_tuning(p.intra, p.tune, a);
        r.inter_tune = resolved_tuning(p.inter, p.inter_tune, a);
    } else {
        r.tune = resolved_tuning(p.algo, p.tune, a);
    }
    return r;
}

//! Plans the schedule of `p` for one rank's call `a`, for a policy that
//! names its algorithm (p.choose and p.deterministic false; algo/
//! automatic.hpp's make_schedule handles every policy). The exchange
//! collectives run the exchange schedule whatever the algorithm. Tuning
//! fields left at 0 are chosen for the call first (resolved_policy).
constexpr any_schedule make_fixed_schedule(const policy& given, const schedule_args& a) {
    const policy p = resolved_policy(given, a);
    const tuning t = p.tune;
    if (is_exchange(a.coll)) return make_exchange_schedule(a, t.channels, t.chunk_bytes);
    const bool all_reduce = a.coll == collective::all_reduce;
    switch (p.algo) {
    case algorithm::ring: return make_ring_schedule(a, t);
    case algorithm::direct:
        // protocol::ll where the transport has an LL region the call fits.
        if (p.proto == protocol::ll && ll_fits(a)) return make_ll_schedule(a);
        return make_direct_schedule(a, t.channels, t.chunk_bytes);
    case algorithm::tree:
        if (a.coll == collective::all_gather || a.coll == collective::reduce_scatter) return make_ring_schedule(a, t);
        return make_tree_schedule(a, t);
    case algorithm::recursive_doubling:
        if (!all_reduce) return make_direct_schedule(a, t.channels, t.chunk_bytes);
        return make_recursive_doubling_schedule(a, t);
    case algorithm::rabenseifner:
        if (!all_reduce) return make_direct_schedule(a, t.channels, t.chunk_bytes);
        return make_rabenseifner_schedule(a, t);
    case algorithm::two_shot:
        if (!all_reduce) return make_direct_schedule(a, t.channels, t.chunk_bytes);
        return make_two_shot_schedule(a, t);
    case algorithm::hierarchical:
        if (staged_split(p, a)) return make_staged_schedule(p, a);
        if (hierarchical_split(a)) return make_hierarchical_schedule(p, a);
        // Flat: Intra's own schedule over all ranks.
        if (p.intra == algorithm::direct) return make_direct_schedule(a, t.channels, t.chunk_bytes);
        return make_ring_schedule(a, t);
    }
    return make_ring_schedule(a, t);
}

} // namespace chorus
