#pragma once
//! \file algo/tree.hpp
//! The double binary tree policy (as NCCL uses across nodes): the data is
//! cut in two halves, each reduced up one binary tree and broadcast back
//! down it, pipelined in chunks. Latency grows with the depth, log2(n),
//! instead of n; in the second tree (the first one mirrored, rank
//! v -> n-1-v) most leaves of the first are inner nodes, so the two halves
//! load the ranks evenly.
//!
//! Tree shape: the in-order balanced tree over [0, n): the root of a range
//! [lo, hi) is its middle (lo + hi) / 2, its children the roots of
//! [lo, mid) and [mid+1, hi). A node's lower child holds lower ranks. Each
//! node combines (lower subtree) op (itself) op (upper subtree), so the
//! operands stay in rank order (but not in a left fold).
//! Broadcast and Reduce rotate the ranks so that the tree's root is the
//! collective's root (operand order then rotates: the policy declares
//! reorders_operands).
//!
//! Schedule (per channel; K chunks per half; half t uses tree t;
//! R(k,t,j) = (2k + t) * 2 + j, B(k,t) = 4K + 2k + t):
//!   R(k,t,0)  acc = lower.partial op in   (no lower child: acc = in)
//!   R(k,t,1)  acc = acc op upper.partial  (no upper child: nothing)
//!             partial = acc in scratch; at the root the result goes to
//!             out with the epilogue instead.
//!   B(k,t)    out = parent.out            (AllReduce, Broadcast; not at the root)
//! Reading a child's partial waits for its R(k,t,1); reading the parent's
//! out waits for its B(k,t) (or R(k,t,1) at the root). Scratch and out are
//! written once per collective, so no write-after-read guard is needed
//! inside one; before returning a rank waits until every rank is done
//! (its parent reads its scratch, its children its out).
//! Broadcast: only the B units (the root's data is its out). Reduce: only
//! the R units. AllGather and ReduceScatter run ring<> (trees suit neither).

#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "compose.hpp"
#include "ring.hpp"
#include "schedule.hpp"

namespace chorus {

//! Tuning knobs of tree<>.
//! A field left at 0 is chosen per call (resolve_tuning in algo/policy.hpp;
//! host transports: 1 channel and 128 KiB); a value given is used as given.
struct tree_params {
    int channels = 0;             //!< independent channels (GPU: thread blocks); 0: per call
    std::size_t chunk_bytes = 0;  //!< pipelining granularity per channel and half; 0: per call
};

//! Where a rank sits in one binary tree.
struct tree_node {
    int parent = -1; //!< -1: the root
    int lower = -1;  //!< child with the lower ranks (-1: none)
    int upper = -1;  //!< child with the higher ranks (-1: none)
};

namespace detail {
//! Node v of the in-order balanced tree over labels [0, n).
CHORUS_HD constexpr tree_node inorder_node(int v, int n) {
    tree_node t{};
    int lo = 0, hi = n, parent = -1;
    for (;;) {
        const int mid = lo + (hi - lo) / 2;
        if (v == mid) break;
        parent = mid;
        if (v < mid) hi = mid;
        else lo = mid + 1;
    }
    const int mid = lo + (hi - lo) / 2;
    t.parent = parent;
    if (lo < mid) t.lower = lo + (mid - lo) / 2;
    if (mid + 1 < hi) t.upper = mid + 1 + (hi - mid - 1) / 2;
    return t;
}
} // namespace detail

//! The steps of one rank in a double-binary-tree collective.
struct tree_schedule {
    collective coll = collective::all_reduce;
    int nranks = 1;
    int me = 0;
    int root = 0;
    int nchannels = 1;
    std::uint64_t count = 0;
    std::uint64_t chunks = 1; //!< K
    alignment align{};

    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return nchannels; }
    CHORUS_HD constexpr bool reduces() const { return coll != collective::broadcast; }
    CHORUS_HD constexpr bool broadcasts() const { return coll != collective::reduce; }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return nranks > 1 && reduces() ? count : 0; }
    CHORUS_HD constexpr std::uint64_t units() const {
        if (nranks == 1) return coll == collective::broadcast ? 0 : chunks;
        return (reduces() ? 4 * chunks : 0) + (broadcasts() ? 2 * chunks : 0);
    }

    //! Rank <-> tree label: tree 1 is tree 0 mirrored; for Broadcast and
    //! Reduce both are rotated so that their root (label mid) is `root`.
    CHORUS_HD constexpr int shift(int t) const {
        if (coll == collective::all_reduce) return 0;
        const int mid = nranks / 2;
        return detail::mod(root - (t == 0 ? mid : nranks - 1 - mid), nranks);
    }
    CHORUS_HD constexpr int label(int r, int t) const {
        const int v = detail::mod(r - shift(t), nranks);
        return t == 0 ? v : nranks - 1 - v;
    }
    CHORUS_HD constexpr int rank_of(int v, int t) const {
        if (v < 0) return -1;
        const int u = t == 0 ? v : nranks - 1 - v;
        return detail::mod(u + shift(t), nranks);
    }
    //! This rank's node in tree t, in ranks; lower/upper in operand order.
    CHORUS_HD constexpr tree_node node(int t) const {
        const tree_node l = detail::inorder_node(label(me, t), nranks);
        tree_node r{rank_of(l.parent, t), rank_of(l.lower, t), rank_of(l.upper, t)};
        if (t == 1) { // mirrored: the label-lower child holds the higher ranks
            const int x = r.lower;
            r.lower = r.upper;
            r.upper = x;
        }
        return r;
    }
    CHORUS_HD constexpr index_range half(int t) const {
        return split({0, count}, std::uint64_t(t), 2, align);
    }
    CHORUS_HD constexpr index_range range(int c, std::uint64_t k, int t) const {
        return detail::piece(half(t), c, nchannels, k, chunks, align);
    }
    CHORUS_HD constexpr std::uint64_t r_unit(std::uint64_t k, int t, int j) const {
        return (2 * k + std::uint64_t(t)) * 2 + std::uint64_t(j);
    }
    CHORUS_HD constexpr std::uint64_t b_unit(std::uint64_t k, int t) const {
        return (reduces() ? 4 * chunks : 0) + 2 * k + std::uint64_t(t);
    }

    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        step s{};
        if (nranks == 1) {
            const index_range rg = detail::piece({0, count}, c, nchannels, p, chunks, align);
            s.count = rg.size();
            s.src0 = {me, where::in, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.finish = true;
            return s;
        }
        const std::uint64_t rsz = reduces() ? 4 * chunks : 0;
        if (p < rsz) {
            const int j = int(p % 2);
            const int t = int((p / 2) % 2);
            const std::uint64_t k = p / 4;
            const tree_node nd = node(t);
            const index_range rg = range(c, k, t);
            const bool last = j == 1 || nd.upper < 0; // this unit finishes our partial
            if (j == 1 && nd.upper < 0) return s;
            s.count = rg.size();
            const operand acc{me, where::scratch, rg.begin};
            s.dst = last && nd.parent < 0 ? operand{me, where::out, rg.begin} : acc;
            s.finish = last && nd.parent < 0;
            if (j == 0) {
                if (nd.lower >= 0) {
                    s.src0 = {nd.lower, where::scratch, rg.begin};
                    s.src1 = {me, where::in, rg.begin};
                    s.waits[0] = {nd.lower, r_unit(k, t, 1) + 1};
                } else {
                    s.src0 = {me, where::in, rg.begin};
                }
            } else {
                s.src0 = acc;
                s.src1 = {nd.upper, where::scratch, rg.begin};
                s.waits[0] = {nd.upper, r_unit(k, t, 1) + 1};
            }
            return s;
        }
        const std::uint64_t q = p - rsz;
        const int t = int(q % 2);
        const std::uint64_t k = q / 2;
        const tree_node nd = node(t);
        if (nd.parent < 0) return s; // the root's out already holds the data
        const index_range rg = range(c, k, t);
        s.count = rg.size();
        s.src0 = {nd.parent, where::out, rg.begin};
        s.dst = {me, where::out, rg.begin};
        const bool parent_is_root = node_of(nd.parent, t).parent < 0;
        s.waits[0] = {nd.parent, parent_is_root && reduces() ? r_unit(k, t, 1) + 1
                                 : parent_is_root          ? 0
                                                           : b_unit(k, t) + 1};
        return s;
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return detail::everyone(nranks, units()); }

    //! Rank r's node in tree t (labels as for this rank).
    CHORUS_HD constexpr tree_node node_of(int r, int t) const {
        tree_schedule o = *this;
        o.me = r;
        return o.node(t);
    }
};

//! Plans tree<>'s own schedule (AllReduce, Broadcast, Reduce, barrier)
//! with tuning `t`; AllGather and ReduceScatter run ring<> (make_fixed_schedule).
constexpr tree_schedule make_tree_schedule(const schedule_args& a, tuning t) {
    tree_schedule s{};
    s.coll = a.coll;
    s.nranks = a.nranks;
    s.me = a.rank;
    s.root = a.root;
    s.nchannels = t.channels;
    s.count = a.coll == collective::barrier ? 0 : a.count;
    s.align = alignment_of(a.elem_bytes, 0);
    if (a.coll == collective::barrier) {
        s.coll = collective::broadcast; // a broadcast of nothing: every rank waits for every rank at the end
        s.chunks = 1;
        return s;
    }
    const std::uint64_t half_len = max_part_bound(s.count, 2, s.align);
    const std::uint64_t channel_len = max_part_bound(half_len, std::uint64_t(t.channels), s.align);
    s.chunks = chunk_count(channel_len, a.elem_bytes, t.chunk_bytes, s.align, 12, (std::uint64_t(1) << 31) - 1);
    return s;
}

//! Double binary tree policy: AllReduce, Broadcast, Reduce (AllGather and
//! ReduceScatter run ring<> with the same channels and chunk size).
template <tree_params P = tree_params{}>
struct tree {
    static_assert(P.channels >= 0, "chorus: tree<> needs channels >= 1 (or 0: chosen per call)");
    static_assert(P.channels <= max_channels, "chorus: tree<> supports at most chorus::max_channels channels");
    static_assert(P.chunk_bytes == 0 || P.chunk_bytes >= 16,
                  "chorus: tree<> needs chunk_bytes >= 16 (or 0: chosen per call)");
    static constexpr tree_params params = P;
    static constexpr bool reorders_operands = true;
    static constexpr const char* name = "tree";
    static constexpr policy describe() { return policy::fixed(algorithm::tree, {P.channels, P.chunk_bytes}); }
};

} // namespace chorus
