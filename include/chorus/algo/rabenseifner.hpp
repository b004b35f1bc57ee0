#pragma once
//! \file algo/rabenseifner.hpp
//! Rabenseifner's AllReduce: a reduce-scatter by recursive halving, then
//! an all-gather by recursive doubling. 2 log2(p) latency steps and
//! 2(p-1)/p of the vector moved per rank: bandwidth-optimal like the ring
//! with logarithmic latency, the algorithm for medium and large messages
//! on many ranks.
//!
//! Non-power-of-two n: the same fix-up as recursive_doubling<>
//! (detail::pow2_fold): rank 2i (i < e) folds in(2i) op in(2i+1) first,
//! rank 2i+1 copies the result at the end. Operand order is preserved
//! (lower virtual ranks first).
//!
//! Each channel's share of the vector is cut into p blocks (the alignment-
//! aware split). Halving round j (1..m) pairs virtual ranks at distance
//! 2^(j-1) (so a partial always covers a contiguous range of ranks and
//! rank order is kept); both hold the same blocks, bit j-1 of v says which
//! half v keeps, and it combines its partial of that half with the
//! partner's: acc = lower.partial op upper.partial. v ends owning one
//! block (v's bits reversed). The partial of round 0
//! is in (folding ranks: in op (r+1).in, in scratch), later ones live in
//! scratch, each round writing only the half it keeps (the partner reads
//! the other half), so one buffer serves every round. The last round
//! writes that block to out with the epilogue. Doubling round j (1..m)
//! undoes halving round m-j+1: pull the partner's (distance 2^(m-j)) owned
//! blocks from its out into ours.
//! A round reads what the partner wrote in its previous round, so it waits
//! for that whole round (chunk boundaries of nested ranges differ).
//!
//! Units (per channel, K chunks per round):
//!   [0, K)              fold (folding ranks)
//!   [K, (m+1)K)         halving rounds 1..m
//!   [(m+1)K, (2m+1)K)   doubling rounds 1..m
//!   [(2m+1)K, (2m+2)K)  extras: out = (r-1).out
//! In place, out is in: the half of in we keep in round 1 is read only by
//! us, the other half by round 1's partner, and only our last doubling
//! round writes it, reading from that same partner after its previous
//! round (so after its first halving round): no extra guard is needed. Before returning a rank
//! waits until every rank is done. Other collectives run direct<> (which
//! keeps operand order too; its ReduceScatter and AllGather read what the
//! ring's do, in one step).

#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "compose.hpp"
#include "recursive_doubling.hpp"
#include "direct.hpp"
#include "schedule.hpp"

namespace chorus {

//! The steps of one rank in a Rabenseifner AllReduce.
struct rabenseifner_schedule {
    int nranks = 1;
    int me = 0;
    int nchannels = 1;
    std::uint64_t count = 0;
    std::uint64_t chunks = 1;
    alignment align{};

    CHORUS_HD constexpr detail::pow2_fold fold() const { return detail::pow2_fold::of(nranks); }
    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return nchannels; }
    CHORUS_HD constexpr std::uint64_t units() const {
        return nranks == 1 ? chunks : std::uint64_t(2 * fold().m + 2) * chunks;
    }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return nranks == 1 ? 0 : count; }

    //! Blocks [b0, b1) of channel c's share.
    CHORUS_HD constexpr index_range blocks(int c, int b0, int b1, int p) const {
        const index_range ch = split({0, count}, std::uint64_t(c), std::uint64_t(nchannels), align);
        const index_range lo = split(ch, std::uint64_t(b0), std::uint64_t(p), align);
        const index_range hi = split(ch, std::uint64_t(b1 - 1), std::uint64_t(p), align);
        return {lo.begin, hi.end};
    }
    struct block_range {
        int first, last; //!< blocks [first, last)
    };
    //! The blocks virtual rank v keeps after halving round j (j = 0: all
    //! p): round i (distance 2^(i-1)) halves them, bit i-1 of v choosing
    //! the upper half. Groups of partners are contiguous virtual ranks.
    CHORUS_HD static constexpr block_range kept(int v, int j, int p) {
        int lo = 0, w = p;
        for (int i = 1; i <= j; ++i) {
            w /= 2;
            if ((v >> (i - 1)) & 1) lo += w;
        }
        return {lo, lo + w};
    }
    //! Rank r's partial of round j (the buffer; j == 0: the input).
    CHORUS_HD constexpr where partial(const detail::pow2_fold& f, int r, int j) const {
        return j == 0 && !f.folds(r) ? where::in : where::scratch;
    }

    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        step s{};
        const std::uint64_t K = chunks;
        const std::uint64_t k = p % K;
        if (nranks == 1) {
            const index_range rg = detail::piece({0, count}, c, nchannels, k, K, align);
            s.count = rg.size();
            s.src0 = {me, where::in, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.finish = true;
            return s;
        }
        const detail::pow2_fold f = fold();
        const int m = f.m;
        const std::uint64_t ph = p / K;
        const index_range whole = split({0, count}, std::uint64_t(c), std::uint64_t(nchannels), align);
        const index_range wk = split(whole, k, K, align);
        if (f.extra(me)) {
            if (ph != std::uint64_t(2 * m + 1)) return s;
            s.count = wk.size();
            s.src0 = {me - 1, where::out, wk.begin};
            s.dst = {me, where::out, wk.begin};
            s.waits[0] = {me - 1, std::uint64_t(2 * m + 1) * K};
            return s;
        }
        if (ph == 0) {
            if (!f.folds(me)) return s;
            s.count = wk.size();
            s.src0 = {me, where::in, wk.begin};
            s.src1 = {me + 1, where::in, wk.begin};
            s.dst = {me, where::scratch, wk.begin};
            s.waits[0] = {me + 1, 0};
            return s;
        }
        const int v = f.virt(me);
        const int P = f.p;
        if (ph <= std::uint64_t(m)) { // halving round j, distance 2^(j-1)
            const int j = int(ph);
            const int pv = v ^ (1 << (j - 1));
            const int partner = f.real(pv);
            const block_range kb = kept(v, j, P);
            const index_range rg = split(blocks(c, kb.first, kb.last, P), k, K, align);
            const bool lower = me < partner;
            const operand mine{me, partial(f, me, j - 1), rg.begin};
            const operand theirs{partner, partial(f, partner, j - 1), rg.begin};
            s.count = rg.size();
            s.src0 = lower ? mine : theirs;
            s.src1 = lower ? theirs : mine;
            s.dst = {me, j == m ? where::out : where::scratch, rg.begin};
            s.finish = j == m;
            s.waits[0] = {partner, std::uint64_t(j) * K}; // its round j-1 (or fold) done
            return s;
        }
        if (ph <= std::uint64_t(2 * m)) { // doubling round j, distance 2^(m-j): undo halving round m-j+1
            const int j = int(ph) - m;
            const int pv = v ^ (1 << (m - j));
            const int partner = f.real(pv);
            const block_range pb = kept(pv, m - j + 1, P); // what the partner owns now
            const index_range rg = split(blocks(c, pb.first, pb.last, P), k, K, align);
            s.count = rg.size();
            s.src0 = {partner, where::out, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.waits[0] = {partner, std::uint64_t(m + j) * K}; // its previous round done
            return s;
        }
        return s;
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return detail::everyone(nranks, units()); }
};

//! Plans rabenseifner<>'s AllReduce with tuning `t` (the other
//! collectives run direct<>: make_fixed_schedule).
constexpr rabenseifner_schedule make_rabenseifner_schedule(const schedule_args& a, tuning t) {
    rabenseifner_schedule r{};
    r.nranks = a.nranks;
    r.me = a.rank;
    r.nchannels = t.channels;
    r.count = a.count;
    r.align = alignment_of(a.elem_bytes, 0);
    // Chunk the largest round: half of a channel's share.
    const std::uint64_t channel_len = max_part_bound(a.count, std::uint64_t(t.channels), r.align);
    const std::uint64_t rounds = 2 * std::uint64_t(detail::pow2_fold::of(a.nranks).m) + 2;
    r.chunks = chunk_count((channel_len + 1) / 2, a.elem_bytes, t.chunk_bytes, r.align, 4 * rounds,
                           (std::uint64_t(1) << 31) - 1);
    return r;
}

//! Rabenseifner: AllReduce as recursive-halving reduce-scatter plus
//! recursive-doubling all-gather. Other collectives run direct<>.
template <recursive_params P = recursive_params{}>
struct rabenseifner {
    static_assert(P.channels >= 0, "chorus: rabenseifner<> needs channels >= 1 (or 0: chosen per call)");
    static_assert(P.channels <= max_channels, "chorus: rabenseifner<> supports at most chorus::max_channels channels");
    static_assert(P.chunk_bytes == 0 || P.chunk_bytes >= 16,
                  "chorus: rabenseifner<> needs chunk_bytes >= 16 (or 0: chosen per call)");
    static constexpr recursive_params params = P;
    static constexpr bool reorders_operands = false;
    static constexpr const char* name = "rabenseifner";
    static constexpr policy describe() { return policy::fixed(algorithm::rabenseifner, {P.channels, P.chunk_bytes}); }
};

} // namespace chorus
