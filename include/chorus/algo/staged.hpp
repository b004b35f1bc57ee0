#pragma once
//! \file algo/staged.hpp
//! hierarchical<>'s AllReduce where a rank's node peers can read only its
//! scratch: a transport whose ranks keep their buffers private (MPI
//! processes) registers each rank's scratch in memory its node shares and
//! says how much (schedule_args::node_window_bytes). Every byte a node
//! peer reads goes through that window; ranks of other nodes exchange
//! messages, which reach private buffers too.
//!
//! Planned when node_window_bytes > 0, the split is regular (node_size =
//! L >= 2 divides n; N = n / L nodes, one node included) and the window
//! holds at least one granule per rank. Scratch (elements, P the piece):
//!   X = [0, P)          this rank's input of the piece, staged
//!   Y = [P, P + B)      its block of the piece, reduced (B bounds a block)
//!   [P + B, ...)        phase B's own scratch, if it needs any
//! The count is cut into pieces of P elements (P a multiple of the
//! alignment granule, as large as the window allows). Per piece k
//! (elements [a, a + p); block q = split([a, a + p), q of L), the
//! alignment-aware split; b = our block; units counted from the piece's
//! first one):
//!   0, 1     stage: X = in, all but block b (below it, above it): only we
//!            read our own block, straight from `in`.
//!   2 ..     A: Y = source(0) op source(1), then Y = Y op source(q) for
//!            q = 2 .. L-1 (L-1 units; source(q) = node peer q's X at b,
//!            ours is in[b]); the first waits until every node peer has
//!            staged (and so has finished the piece before). N = 1: the
//!            last applies the epilogue.
//!   then B   N > 1: Inter's whole AllReduce of Y among the ranks
//!            {j L + l : j} (one per node, ours at local rank l), in place,
//!            with the epilogue; padded with no-op units to UB, the most
//!            any local rank's block needs, so every rank agrees on where
//!            the next part starts.
//!   sync     waits until every node peer and every rank of our inter-node
//!            group has done A and B (C reads the peers' final Y).
//!   C        out[block q] = node peer q's Y (L units, ours too).
//! Before returning a rank waits until every node peer has finished (they
//! read our X and Y). Across pieces nothing more is needed: piece k+1
//! rewrites X only after our own sync of piece k (every node peer has done
//! its A of piece k), and Y only after the wait in A (every node peer has
//! finished piece k, its C included).
//! One-shot (N = 1 and the whole input within one_shot_bytes): unit 0
//! stages all of `in` into X; unit 1 waits until every node peer has done
//! so and reduces the L windows into out (fan-in, local rank order, with
//! the epilogue): one round of flags instead of three.
//! One channel: the pieces are the pipeline, and phase B pipelines in
//! Inter's chunks. What a rank reads from its peers and waits for does
//! not depend on its own in_place. The operator must be commutative
//! (hierarchical<> is checked for that where collectives are issued).

#include <cstdint>

#include "../plan/partition.hpp"
#include "hierarchical.hpp"
#include "policy.hpp"
#include "schedule.hpp"

namespace chorus {

struct staged_schedule {
    static constexpr std::uint64_t one_shot_bytes = std::uint64_t(32) << 10;

    leaf_schedule b_full{}; //!< phase B of a full piece (group-relative, on Y)
    leaf_schedule b_last{}; //!< phase B of the last piece
    int me = 0;
    int node_size = 1;             //!< L
    int nodes = 1;                 //!< N
    bool one_shot = false;
    std::uint64_t count = 0;
    std::uint64_t piece = 0;       //!< P
    std::uint64_t pieces = 1;
    std::uint64_t block_cap = 0;   //!< B: Y's size
    std::uint64_t ub = 0;          //!< phase B's units per piece, padded
    std::uint64_t elem_bytes = 1;

    // The schedule interface (exec/rank_program.hpp).
    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return 1; }
    CHORUS_HD constexpr std::uint64_t per_piece() const { return one_shot ? 2 : 2 * std::uint64_t(node_size) + 2 + ub; }
    CHORUS_HD constexpr std::uint64_t units() const { return pieces * per_piece(); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const {
        if (one_shot) return count;
        const std::uint64_t sb = b_full.scratch_elems() > b_last.scratch_elems() ? b_full.scratch_elems()
                                                                                   : b_last.scratch_elems();
        return piece + block_cap + sb;
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return node_group(units()); }

    CHORUS_HD constexpr int local() const { return me % node_size; }
    CHORUS_HD constexpr int node_base() const { return me - local(); }
    CHORUS_HD constexpr alignment align() const { return alignment_of(elem_bytes, 0); }
    //! Every other rank of our node has done `u` units.
    CHORUS_HD constexpr wait_spec node_group(std::uint64_t u) const {
        return {node_base(), u, static_cast<std::uint16_t>(node_size), 1};
    }
    //! Every other rank of our inter-node group has done `u` units.
    CHORUS_HD constexpr wait_spec inter_group(std::uint64_t u) const {
        if (nodes <= 1) return {};
        return {local(), u, static_cast<std::uint16_t>(nodes), static_cast<std::uint16_t>(node_size)};
    }
    //! Block q of piece k (absolute element indices).
    CHORUS_HD constexpr index_range block(std::uint64_t k, int q) const {
        const std::uint64_t a = k * piece;
        const std::uint64_t e = a + piece < count ? a + piece : count;
        return split({a, e}, std::uint64_t(q), std::uint64_t(node_size), align());
    }

    CHORUS_HD constexpr step unit(int, std::uint64_t p) const {
        step s{};
        if (one_shot) {
            if (p == 0) {
                s.dst = {me, where::scratch, 0};
                s.src0 = {me, where::in, 0};
            } else {
                s.waits[0] = node_group(1);
                s.dst = {me, where::out, 0};
                s.src0 = {node_base(), where::scratch, 0};
                s.fan_in = static_cast<std::uint16_t>(node_size);
                s.finish = true;
            }
            s.count = count;
            return s;
        }
        const std::uint64_t k = p / per_piece(), u = p % per_piece(), base = k * per_piece();
        const std::uint64_t a = k * piece;
        const std::uint64_t e = a + piece < count ? a + piece : count;
        const int L = node_size, l = local();
        const index_range b = block(k, l);
        if (u < 2) { // stage: all of the piece but our block
            const index_range r = u == 0 ? index_range{a, b.begin} : index_range{b.end, e};
            s.dst = {me, where::scratch, r.begin - a};
            s.src0 = {me, where::in, r.begin};
            s.count = r.size();
            return s;
        }
        const std::uint64_t ua = u - 2;
        if (ua < std::uint64_t(L - 1)) { // A
            auto source = [&](int q) -> operand {
                if (q == l) return {me, where::in, b.begin};
                return {node_base() + q, where::scratch, b.begin - a};
            };
            s.dst = {me, where::scratch, piece};
            if (ua == 0) {
                s.waits[0] = node_group(base + 2);
                s.src0 = source(0);
                s.src1 = source(1);
            } else {
                s.src0 = {me, where::scratch, piece};
                s.src1 = source(int(ua) + 1);
            }
            s.count = b.size();
            s.finish = nodes == 1 && ua == std::uint64_t(L - 2);
            return s;
        }
        const std::uint64_t sync = std::uint64_t(L) + 1 + ub; // piece-relative
        if (u < sync) { // B
            const std::uint64_t q = u - (std::uint64_t(L) + 1);
            const leaf_schedule& sub = k + 1 == pieces ? b_last : b_full;
            // One named result on every path (NRVO): a step copied out of
            // a temporary was rebuilt through the stack at every unit.
            if (q < sub.units()) s = lift(sub.unit(0, q), base + std::uint64_t(L) + 1);
            return s;
        }
        if (u == sync) {
            s.waits[0] = node_group(base + sync);
            s.waits[1] = inter_group(base + sync);
            return s;
        }
        const int q = int(u - sync - 1); // C
        const index_range bq = block(k, q);
        s.dst = {me, where::out, bq.begin};
        s.src0 = {node_base() + q, where::scratch, piece};
        s.count = bq.size();
        return s;
    }

    //! Phase B's step in absolute terms: group rank g is rank g L + l, its
    //! in and out are Y, its scratch follows Y, its waits move by `ubase`.
    CHORUS_HD constexpr operand lift_operand(operand o) const {
        if (o.loc == where::none) return o;
        o.rank = o.rank * node_size + local();
        o.offset += o.loc == where::scratch ? piece + block_cap : piece;
        o.loc = where::scratch;
        return o;
    }
    CHORUS_HD constexpr step lift(step s, std::uint64_t ubase) const {
        s.dst = lift_operand(s.dst);
        s.dst2 = lift_operand(s.dst2);
        s.src0 = lift_operand(s.src0);
        s.src1 = lift_operand(s.src1);
        detail::lift_group(s, local(), node_size, ubase);
        return s;
    }
};

//! The largest piece (elements) whose X, Y and phase B scratch fit the
//! window, for L ranks per node (0: not even one granule fits). Phase B
//! in place needs scratch of a block's size where Inter is direct<> (its
//! own staging), none where it is ring<>.
constexpr std::uint64_t staged_piece(const policy& pol, const schedule_args& a) {
    const std::uint64_t blocks = pol.inter == algorithm::direct ? 2 : 1;
    const alignment al = alignment_of(a.elem_bytes, 0);
    const std::uint64_t g = al.aligned ? al.granule : 1;
    const std::uint64_t w = a.node_window_bytes / a.elem_bytes;
    const std::uint64_t L = std::uint64_t(a.node_size);
    // P + k max_part_bound(P, L) <= P + k ((P / g + 1) / L + 3) g <= w
    if (w < (4 * blocks + 2) * g) return 0;
    std::uint64_t p = (w - (4 * blocks + 1) * g) * L / (L + blocks) / g * g;
    while (p >= g && p + blocks * max_part_bound(p, L, al) > w) p -= g;
    return p >= g ? p : 0;
}

//! True when hierarchical<> (policy `p`) runs the staged composite for call `a`.
constexpr bool staged_split(const policy& p, const schedule_args& a) {
    const int L = a.node_size;
    return a.coll == collective::all_reduce && a.node_window_bytes != 0 && L >= 2 && L <= a.nranks &&
           a.nranks % L == 0 && a.count != 0 && staged_piece(p, a) != 0;
}

//! Plans the staged composite of hierarchical<Intra, Inter> (policy `p`)
//! for call `a`; staged_split(a) must hold. Intra's own algorithm is
//! replaced by the window reduction above (a node's phases are direct).
constexpr staged_schedule make_staged_schedule(const policy& p, const schedule_args& a) {
    staged_schedule s{};
    s.me = a.rank;
    s.node_size = a.node_size;
    s.nodes = a.nranks / a.node_size;
    s.count = a.count;
    s.elem_bytes = a.elem_bytes;
    if (s.nodes == 1 && a.count * a.elem_bytes <= staged_schedule::one_shot_bytes &&
        a.count * a.elem_bytes <= a.node_window_bytes) {
        s.one_shot = true;
        return s;
    }
    const std::uint64_t P = staged_piece(p, a);
    s.piece = a.count < P ? a.count : P;
    s.pieces = (a.count + s.piece - 1) / s.piece;
    s.block_cap = max_part_bound(s.piece, std::uint64_t(s.node_size), s.align());
    if (s.nodes == 1) return s;
    const std::uint64_t last = a.count - (s.pieces - 1) * s.piece;
    const int l = s.local();
    for (int full = 0; full < 2; ++full) {
        const std::uint64_t len = full ? s.piece : last;
        if (full && s.pieces == 1) continue;
        for (int q = 0; q < s.node_size; ++q) {
            schedule_args grp = a;
            grp.rank = a.rank / s.node_size;
            grp.nranks = s.nodes;
            grp.root = 0;
            grp.count = split({0, len}, std::uint64_t(q), std::uint64_t(s.node_size), s.align()).size();
            grp.in_place = true;
            const leaf_schedule sub = detail::phase_schedule(p.inter, p.inter_tune.chunk_bytes, grp, 1,
                                                             detail::hier_phase::all_reduce, 0);
            if (sub.units() > s.ub) s.ub = sub.units();
            if (q == l) (full ? s.b_full : s.b_last) = sub;
        }
    }
    return s;
}

} // namespace chorus
