#pragma once
//! \file algo/recursive_doubling.hpp
//! Recursive doubling AllReduce: in round j (1..m, m = log2 p) every
//! rank combines its whole vector with the partner at distance 2^(j-1):
//! m latency steps instead of 2(n-1), at the price of moving the whole
//! vector each round. The small-message algorithm of MPI libraries.
//!
//! Non-power-of-two n: the standard fix-up (detail::pow2_fold). With
//! p = 2^floor(log2 n) and e = n - p, rank 2i (i < e) first combines
//! in(2i) op in(2i+1) and takes part as virtual rank i; rank 2i+1 copies
//! the result from rank 2i at the end. Virtual ranks keep rank order and
//! a round combines (lower half) op (upper half), so operands stay in
//! rank order: non-commutative operators are fine (the association is a
//! tree, not a left fold).
//!
//! Buffers: X_0 = in (folding ranks: scratch slot 0), round j writes X_j
//! to scratch slot j, the last round (j = m) writes out with the epilogue.
//! Each slot is written once per collective, so the only write-after-read
//! hazard is out itself when in place: out is our X_0, which round 1's
//! partner reads. The last round then also waits for that partner to be
//! done with round 1; with m = 1 (that partner is the last one) the
//! result goes to scratch slot 1 and the final units copy it to out.
//!
//! Units (per channel, K chunks of the channel's share, slot-relative):
//!   [0, K)                fold: folding ranks, slot0 = in op (r+1).in
//!   [K + (j-1)K, +K)      round j: X_j = lower.X_{j-1} op upper.X_{j-1}
//!   [(m+1)K, (m+2)K)      extras: out = (r-1).out; staged: out = slot m
//! Every rank has the same unit numbering (units it has no part in are
//! no-ops), so "peer done with chunk k of round j" is the same index on
//! every rank. Before returning a rank waits until every rank is done.
//! Other collectives run direct<> (latency-optimal as well).

#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "compose.hpp"
#include "direct.hpp"
#include "schedule.hpp"

namespace chorus {

//! Tuning knobs of recursive_doubling<>, rabenseifner<> and two_shot<>.
using recursive_params = direct_params;

//! The steps of one rank in a recursive-doubling AllReduce.
struct recursive_doubling_schedule {
    int nranks = 1;
    int me = 0;
    int nchannels = 1;
    bool in_place = false;
    std::uint64_t count = 0;
    std::uint64_t chunks = 1;
    alignment align{};

    CHORUS_HD constexpr detail::pow2_fold fold() const { return detail::pow2_fold::of(nranks); }
    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return nchannels; }
    CHORUS_HD constexpr std::uint64_t units() const {
        return nranks == 1 ? chunks : std::uint64_t(fold().m + 2) * chunks;
    }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const {
        return nranks == 1 ? 0 : std::uint64_t(fold().m + 1) * count;
    }
    //! Rank r's last round goes to scratch and is copied at the end.
    CHORUS_HD constexpr bool staged(const detail::pow2_fold& f, int r, bool r_in_place) const {
        return r_in_place && f.m == 1 && !f.folds(r) && !f.extra(r);
    }
    //! Where rank r keeps X_j (j < m; the final X_m of a folding rank is
    //! its out). What peers read never depends on their reader's in_place.
    CHORUS_HD constexpr operand x(const detail::pow2_fold& f, int r, int j, std::uint64_t off) const {
        if (j == 0 && !f.folds(r)) return {r, where::in, off};
        return {r, where::scratch, std::uint64_t(j) * count + off};
    }

    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        step s{};
        const std::uint64_t K = chunks;
        const std::uint64_t k = p % K;
        const index_range rg = detail::piece({0, count}, c, nchannels, k, K, align);
        if (nranks == 1) {
            s.count = rg.size();
            s.src0 = {me, where::in, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.finish = true;
            return s;
        }
        const detail::pow2_fold f = fold();
        const std::uint64_t ph = p / K; // 0: fold, 1..m: rounds, m+1: final
        if (f.extra(me)) {
            if (ph != std::uint64_t(f.m) + 1) return s;
            s.count = rg.size();
            s.src0 = {me - 1, where::out, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.waits[0] = {me - 1, std::uint64_t(f.m) * K + k + 1};
            return s;
        }
        if (ph == 0) {
            if (!f.folds(me)) return s;
            s.count = rg.size();
            s.src0 = {me, where::in, rg.begin};
            s.src1 = {me + 1, where::in, rg.begin};
            s.dst = x(f, me, 0, rg.begin);
            s.waits[0] = {me + 1, 0};
            return s;
        }
        const int v = f.virt(me);
        if (ph <= std::uint64_t(f.m)) {
            const int j = int(ph);
            const int partner = f.real(v ^ (1 << (j - 1)));
            const operand mine = x(f, me, j - 1, rg.begin);
            const operand theirs = x(f, partner, j - 1, rg.begin);
            const bool lower = me < partner;
            s.count = rg.size();
            s.src0 = lower ? mine : theirs;
            s.src1 = lower ? theirs : mine;
            s.waits[0] = {partner, std::uint64_t(j - 1) * K + k + 1};
            if (j < f.m) {
                s.dst = x(f, me, j, rg.begin);
            } else if (staged(f, me, in_place)) {
                s.dst = {me, where::scratch, std::uint64_t(j) * count + rg.begin};
                s.finish = true;
            } else {
                s.dst = {me, where::out, rg.begin};
                s.finish = true;
                if (in_place && !f.folds(me)) { // our out is our X_0: round 1's partner must be done with it
                    const int first = f.real(v ^ 1);
                    s.waits[1] = {first, K + k + 1};
                }
            }
            return s;
        }
        if (!staged(f, me, in_place)) return s;
        const int partner = f.real(v ^ 1);
        s.count = rg.size();
        s.src0 = {me, where::scratch, std::uint64_t(f.m) * count + rg.begin};
        s.dst = {me, where::out, rg.begin};
        s.waits[0] = {partner, K + k + 1}; // done reading our in (= out)
        return s;
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return detail::everyone(nranks, units()); }
};

//! Plans recursive_doubling<>'s AllReduce with tuning `t` (the other
//! collectives run direct<>: make_fixed_schedule).
constexpr recursive_doubling_schedule make_recursive_doubling_schedule(const schedule_args& a, tuning t) {
    recursive_doubling_schedule r{};
    r.nranks = a.nranks;
    r.me = a.rank;
    r.nchannels = t.channels;
    r.in_place = a.in_place;
    r.count = a.count;
    r.align = alignment_of(a.elem_bytes, 0);
    const std::uint64_t channel_len = max_part_bound(a.count, std::uint64_t(t.channels), r.align);
    const std::uint64_t rounds = std::uint64_t(detail::pow2_fold::of(a.nranks).m) + 2;
    r.chunks = chunk_count(channel_len, a.elem_bytes, t.chunk_bytes, r.align, 4 * rounds, (std::uint64_t(1) << 31) - 1);
    return r;
}

//! Recursive doubling: AllReduce in log2(n) rounds (+2 for the fix-up).
//! The other collectives run direct<> with the same channels and chunks.
template <recursive_params P = recursive_params{}>
struct recursive_doubling {
    static_assert(P.channels >= 0, "chorus: recursive_doubling<> needs channels >= 1 (or 0: chosen per call)");
    static_assert(P.channels <= max_channels,
                  "chorus: recursive_doubling<> supports at most chorus::max_channels channels");
    static_assert(P.chunk_bytes == 0 || P.chunk_bytes >= 16,
                  "chorus: recursive_doubling<> needs chunk_bytes >= 16 (or 0: chosen per call)");
    static constexpr recursive_params params = P;
    static constexpr bool reorders_operands = false;
    static constexpr const char* name = "recursive_doubling";
    static constexpr policy describe() {
        return policy::fixed(algorithm::recursive_doubling, {P.channels, P.chunk_bytes});
    }
};

} // namespace chorus
