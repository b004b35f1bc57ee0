#pragma once
//! \file algo/hierarchical.hpp
//! The hierarchical policy: reduce inside each node first, then across
//! nodes, then share inside the node (the bandwidth-optimal form: an
//! intra-node reduce-scatter, an inter-node all-reduce of each rank's
//! share, an intra-node all-gather).
//!
//! `Intra` names the algorithm inside a node and `Inter` the one between
//! nodes; each may be ring<...> or direct<...>. On the MPI backend the
//! intra-node phases run over shared memory (each rank reduces its share
//! straight out of its node peers' windows) and the inter-node phase runs
//! `Inter` over MPI point-to-point, pipelined in Inter::params.chunk_bytes.
//!
//! make_fixed_schedule (algo/any_schedule.hpp; the schedule executors run
//! it, e.g. the threads backend, which emulates a node split with
//! CHORUS_RANKS_PER_NODE) plans a hierarchical_schedule when
//! schedule_args::node_size = L, 0 < L < n and n % L == 0 (N = n / L nodes;
//! node j = ranks jL .. jL+L-1; rank jL+l has local rank l): AllReduce is
//! the composite below. Every other case (the other collectives,
//! node_size 0, node_size >= n, n % node_size != 0) runs Intra's own
//! schedule over all ranks ("flat").
//!
//! Composite AllReduce, per channel (all phases use Intra's channel count;
//! part l = split(count, l of L), the alignment-aware split):
//!   [0, UA)          A: Intra's reduce-scatter phase inside the node: local
//!                    rank l ends with part l reduced over its node in
//!                    out, no epilogue.
//!   UA               sync: waits until every node peer has done A (phase
//!                    B overwrites part l, which A may still read).
//!   [UA+1, S)        B: Inter's whole AllReduce of part l among the ranks
//!                    {jL + l : j}, in place on out (its `in` is our out),
//!                    with the epilogue; padded with no-op units to UB,
//!                    the largest B over all l, so S = UA + 1 + UB is the
//!                    same point on every rank.
//!   S                sync: waits until every node peer and every rank of
//!                    our inter-node group has done B (C overwrites what
//!                    B and A read, and reads the peers' final parts).
//!   [S+1, S+1+UC)    C: Intra's all-gather phase inside the node.
//! A sub-schedule's waits "peer >= u" become "peer >= (phase start) + u",
//! its ranks are mapped from group to absolute ranks. Before returning a
//! rank waits until every node peer has finished (they read our out in C;
//! the inter-node readers of B were covered by the sync at S).
//! (With ring/direct phases the two syncs overlap: each alone, together
//! with the lifted waits, already orders A's reads before B's and C's
//! writes, as the simulation in tests/unit/test_schedule.cpp confirms; both
//! are kept so that correctness does not hinge on the phases' internals.)
//! Each phase keeps its unit count within a quarter of the flag's 2^31
//! unit range (by using fewer, larger chunks), so the composite's fits.
//! The operator must be commutative (checked where collectives are issued).

#include <cstdint>

#include "direct.hpp"
#include "policy.hpp"
#include "ring.hpp"

namespace chorus {

//! A ring or a direct schedule: what hierarchical<> composes its phases of.
//! Trivially copyable and device-clean like its parts.
struct leaf_schedule {
    bool is_direct = false;
    union {
        ring_schedule ring;
        direct_schedule direct;
    };

    CHORUS_HD constexpr leaf_schedule() : ring{} {}
    CHORUS_HD constexpr leaf_schedule(const ring_schedule& s) : ring{s} {}
    CHORUS_HD constexpr leaf_schedule(const direct_schedule& s) : is_direct{true}, direct{s} {}

    CHORUS_HD constexpr int rank() const { return is_direct ? direct.rank() : ring.rank(); }
    CHORUS_HD constexpr int channels() const { return is_direct ? direct.channels() : ring.channels(); }
    CHORUS_HD constexpr std::uint64_t units() const { return is_direct ? direct.units() : ring.units(); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const {
        return is_direct ? direct.scratch_elems() : ring.scratch_elems();
    }
    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        return is_direct ? unit_of(direct, c, p) : unit_of(ring, c, p);
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return is_direct ? direct.final_wait() : ring.final_wait(); }
};

namespace detail {
//! A group sub-schedule's fan-in stride and waits in absolute terms:
//! group rank g is rank gbase + g * gstride, and its units start at
//! `ubase` (hierarchical_schedule's and staged_schedule's phases).
CHORUS_HD constexpr void lift_group(step& s, int gbase, int gstride, std::uint64_t ubase) {
    s.fan_stride = static_cast<std::uint16_t>(int(s.fan_stride) * gstride);
    for (wait_spec& w : s.waits) {
        if (w.peer < 0) continue;
        w.peer = gbase + w.peer * gstride;
        w.units += ubase;
        w.stride = static_cast<std::uint16_t>(int(w.stride) * gstride);
    }
}

//! The parts of an AllReduce pattern hierarchical<> composes.
enum class hier_phase : std::uint8_t { reduce_scatter, all_reduce, all_gather };

//! Algorithm `a` (ring or direct) for one phase of AllReduce over the group
//! of ranks `g` describes, with `channels` and a's chunk size;
//! `base_offset` as in make_ring_plan. Every phase keeps its unit count
//! within a quarter of the flag's range (fewer chunks: larger ones).
constexpr leaf_schedule phase_schedule(algorithm a, std::uint64_t chunk_bytes, const schedule_args& g, int channels,
                                       hier_phase ph, std::uint64_t base_offset) {
    if (a == algorithm::direct) {
        const direct_phase dp = ph == hier_phase::reduce_scatter ? direct_phase::reduce_scatter
                                : ph == hier_phase::all_gather   ? direct_phase::all_gather
                                                                 : direct_phase::whole;
        direct_schedule s = make_direct_schedule(g, channels, chunk_bytes, dp, base_offset);
        const std::uint64_t cap = ((std::uint64_t(1) << 29) - 1) / 2;
        if (dp == direct_phase::whole && s.chunks > cap) s.chunks = cap;
        return s;
    }
    const ring_phase rp = ph == hier_phase::reduce_scatter ? ring_phase::reduce_scatter
                          : ph == hier_phase::all_gather   ? ring_phase::all_gather
                                                           : ring_phase::whole;
    ring_schedule s{make_ring_plan(collective::all_reduce, g.rank, g.nranks, 0, g.count, g.elem_bytes, base_offset,
                                   channels, chunk_bytes, rp)};
    // The whole pattern is planned for the flag's full range: keep it to a
    // quarter, like the other phases.
    const std::uint64_t cap = (std::uint64_t(1) << 29) / (s.plan.steps ? s.plan.steps : 1);
    if (s.plan.chunks > cap) s.plan.chunks = cap;
    return s;
}
} // namespace detail

//! The composite AllReduce described above (only where a node split
//! applies; elsewhere hierarchical<> runs Intra's schedule itself).
//! Trivially copyable, constexpr and device-clean like its parts.
struct hierarchical_schedule {
    leaf_schedule a{};            //!< phase A (node reduce-scatter)
    leaf_schedule b{};            //!< phase B (inter-node all-reduce of our part, group-relative)
    leaf_schedule c{};            //!< phase C (node all-gather)
    int me = 0;                   //!< absolute rank
    int node_size = 1;            //!< L
    int nodes = 1;                //!< N
    std::uint64_t part_begin = 0; //!< where our part starts (phase B's offset)
    std::uint64_t ua = 0, ub = 0, uc = 0;

    // The schedule interface (exec/rank_program.hpp).
    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return a.channels(); }
    CHORUS_HD constexpr std::uint64_t units() const { return start_c() + uc; }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const {
        std::uint64_t m = a.scratch_elems() > c.scratch_elems() ? a.scratch_elems() : c.scratch_elems();
        const std::uint64_t mb = b.scratch_elems() ? part_begin + b.scratch_elems() : 0;
        return mb > m ? mb : m;
    }
    CHORUS_HD constexpr step unit(int ch, std::uint64_t p) const {
        if (p < ua) return lift(a.unit(ch, p), node_base(), 1, 0, 0, false);
        step s{};
        // The phase transitions wait on every channel: phase B splits our
        // part over channels otherwise than phase A split it (and phase C
        // reads the whole part phase B wrote), so a channel reads what the
        // rank's and its peers' other channels wrote.
        if (p == ua) {
            s.waits[0] = transition(node_group(ua), ua);
            return s;
        }
        if (p < sync_c()) {
            const std::uint64_t q = p - start_b();
            if (q >= b.units()) return s; // padding: our part needs fewer units than the largest
            return lift(b.unit(ch, q), local(), node_size, part_begin, start_b(), true);
        }
        if (p == sync_c()) {
            s.waits[0] = transition(node_group(p), p);
            s.waits[1] = transition(inter_group(p), p);
            return s;
        }
        return lift(c.unit(ch, p - start_c()), node_base(), 1, 0, start_c(), false);
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return node_group(units()); }

    CHORUS_HD constexpr int local() const { return me % node_size; }
    CHORUS_HD constexpr int node_base() const { return me - local(); }
    CHORUS_HD constexpr std::uint64_t start_b() const { return ua + 1; }
    CHORUS_HD constexpr std::uint64_t sync_c() const { return ua + 1 + ub; }
    CHORUS_HD constexpr std::uint64_t start_c() const { return ua + 2 + ub; }
    //! Every other rank of our node has done `u` units.
    CHORUS_HD constexpr wait_spec node_group(std::uint64_t u) const {
        if (node_size <= 1) return {};
        return {node_base(), u, static_cast<std::uint16_t>(node_size), 1};
    }
    //! A phase transition's wait `w` (on `u` units) over every channel;
    //! a rank alone in its node still waits on its own other channels.
    CHORUS_HD constexpr wait_spec transition(wait_spec w, std::uint64_t u) const {
        if (w.peer < 0) w = {me, u};
        w.every_channel = true;
        return w;
    }
    //! Every other rank of our inter-node group has done `u` units.
    CHORUS_HD constexpr wait_spec inter_group(std::uint64_t u) const {
        if (nodes <= 1) return {};
        return {local(), u, static_cast<std::uint16_t>(nodes), static_cast<std::uint16_t>(node_size)};
    }

    //! A sub-schedule's step in absolute terms: group rank g is rank
    //! gbase + g * gstride, offsets move by `off`, waits by `ubase` units;
    //! `in_to_out`: the sub-schedule's `in` is our `out` (phase B, in place).
    //! Only phase B keeps the epilogue.
    CHORUS_HD static constexpr operand lift_operand(operand o, int gbase, int gstride, std::uint64_t off,
                                                    bool in_to_out) {
        if (o.loc == where::none) return o;
        o.rank = gbase + o.rank * gstride;
        o.offset += off;
        if (in_to_out && o.loc == where::in) o.loc = where::out;
        return o;
    }
    CHORUS_HD static constexpr step lift(step s, int gbase, int gstride, std::uint64_t off, std::uint64_t ubase,
                                         bool phase_b) {
        s.dst = lift_operand(s.dst, gbase, gstride, off, phase_b);
        s.dst2 = lift_operand(s.dst2, gbase, gstride, off, phase_b);
        s.src0 = lift_operand(s.src0, gbase, gstride, off, phase_b);
        s.src1 = lift_operand(s.src1, gbase, gstride, off, phase_b);
        if (!phase_b) s.finish = false;
        detail::lift_group(s, gbase, gstride, ubase);
        return s;
    }
};

//! True when hierarchical<> runs its composite for call `a` (see the file comment).
constexpr bool hierarchical_split(const schedule_args& a) {
    const int L = a.node_size;
    return a.coll == collective::all_reduce && L > 0 && L < a.nranks && a.nranks % L == 0;
}

//! Plans the composite AllReduce of hierarchical<Intra, Inter> (policy `p`)
//! for call `a`; hierarchical_split(a) must hold.
constexpr hierarchical_schedule make_hierarchical_schedule(const policy& p, const schedule_args& a) {
    hierarchical_schedule s{};
    s.me = a.rank;
    const int L = a.node_size;
    const int ch = p.tune.channels;
    s.node_size = L;
    s.nodes = a.nranks / L;
    const int l = a.rank % L;
    schedule_args node = a;
    node.coll = collective::all_reduce;
    node.rank = l;
    node.nranks = L;
    node.root = 0;
    s.a = detail::phase_schedule(p.intra, p.tune.chunk_bytes, node, ch, detail::hier_phase::reduce_scatter, 0);
    s.c = detail::phase_schedule(p.intra, p.tune.chunk_bytes, node, ch, detail::hier_phase::all_gather, 0);
    s.ua = s.a.units();
    s.uc = s.c.units();
    const alignment al = alignment_of(a.elem_bytes, 0);
    for (int q = 0; q < L; ++q) { // every local rank's phase B, for the common length UB
        const index_range pt = split({0, a.count}, std::uint64_t(q), std::uint64_t(L), al);
        schedule_args grp = a;
        grp.rank = a.rank / L;
        grp.nranks = s.nodes;
        grp.root = 0;
        grp.count = pt.size();
        grp.in_place = true; // phase B works on out
        const leaf_schedule sub = detail::phase_schedule(p.inter, p.inter_tune.chunk_bytes, grp, ch,
                                                         detail::hier_phase::all_reduce,
                                                         (pt.begin * a.elem_bytes) % vector_bytes);
        if (sub.units() > s.ub) s.ub = sub.units();
        if (q == l) {
            s.b = sub;
            s.part_begin = pt.begin;
        }
    }
    return s;
}

namespace detail {
//! The algorithm a policy type of hierarchical<>'s phases names (ring or direct).
template <class Algo>
constexpr algorithm phase_algorithm() {
    constexpr policy p = policy_of<Algo>;
    static_assert(!p.choose && !p.deterministic &&
                      (p.algo == algorithm::ring || p.algo == algorithm::direct),
                  "chorus: hierarchical<Intra, Inter>: Intra and Inter must be ring<...> or direct<...>");
    return p.algo;
}
} // namespace detail

template <class Intra = ring<>, class Inter = ring<>>
struct hierarchical {
    static_assert(requires { Intra::params; }, "chorus: hierarchical<Intra, Inter>: Intra must be an algorithm policy");
    static_assert(requires { Inter::params; }, "chorus: hierarchical<Intra, Inter>: Inter must be an algorithm policy");
    using intra = Intra;
    using inter = Inter;
    //! The tuning every backend without a node split uses (threads: one node).
    static constexpr auto params = Intra::params;
    static constexpr bool reorders_operands = true;
    static constexpr bool is_hierarchical = true;
    static constexpr const char* name = "hierarchical";
    static constexpr policy describe() {
        return policy::hierarchical(detail::phase_algorithm<Intra>(), policy_of<Intra>.tune,
                                    detail::phase_algorithm<Inter>(), policy_of<Inter>.tune);
    }
};

namespace detail {
template <class Algo>
concept hierarchical_policy = requires { requires Algo::is_hierarchical; };
} // namespace detail

} // namespace chorus
