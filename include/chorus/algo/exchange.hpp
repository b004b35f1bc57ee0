#pragma once
//! \file algo/exchange.hpp
//! The exchange schedule: AllToAll and the per-rank-count ("v") collectives
//! AllGatherV, ReduceScatterV and AllToAllV. Every policy plans these with
//! this one schedule (its params.channels and params.chunk_bytes tune it).
//!
//! Pull only: a step reads peers' registered buffers, and its dst (and
//! dst2, never used here) is always the executing rank's own buffer.
//!
//! Geometry (n ranks, rank r; counts as in schedule_args::counts):
//!   AllToAll       r.out[q*c, (q+1)*c) = q.in[r*c, (r+1)*c), c = count.
//!   AllGatherV     r.out[D_q, D_q + counts[q]) = q.in, D_q = sum_{j<q} counts[j].
//!   ReduceScatterV r.out = in_0 op ... op in_{n-1} over [D_r, D_r + counts[r]),
//!                  in rank order, with the operator's epilogue.
//!   AllToAllV      r.out[O_q, O_q + counts[q*n+r]) = q.in[S_q, S_q + counts[q*n+r]),
//!                  O_q = sum_{p<q} counts[p*n+r], S_q = sum_{j<r} counts[q*n+j].
//! In place (per rank, as exchange_in_place defines it): AllToAll(V),
//! in == out; AllGatherV, in is block r of out; ReduceScatterV, out is
//! block r of in.
//!
//! Schedules (K chunks per channel, the same K on every rank: it depends
//! only on the counts, n, the element size and the tuning):
//!   AllToAll(V), AllGatherV  n*K copy units, block q = r, r+1, ... (own
//!                  block first); a unit reading peer q first waits until q
//!                  registered ({q, 0}). In place (AllToAll(V)) a peer may
//!                  still read our input while we would overwrite it, so
//!                  the pulls go to scratch (laid out like out), one unit
//!                  waits until every peer has done its n*K pulls, then n*K
//!                  units copy scratch to out (like direct's staged
//!                  AllReduce). Our own block is skipped when it is already
//!                  where it belongs (AllGatherV in place; AllToAll(V) in
//!                  place when its in and out offsets coincide).
//!   ReduceScatterV K fan-in units over every rank's [D_r, D_r + counts[r])
//!                  (in place too: peers read only their own blocks of our
//!                  input, and only we read and write ours).
//!   n == 1         the same patterns reduce to local copies (ReduceScatterV
//!                  applies the epilogue).
//! Before returning, a rank waits until every peer has done all its pulls
//! (AllToAll(V), AllGatherV: everyone(n*K); ReduceScatterV: everyone(K)).
//!
//! Invariant (the MPI executor relies on it): what a rank reads from a peer
//! and the peer progress it waits for do not depend on the reader's own
//! in_place. Reads of peer q are the same slices of q.in either way; the
//! waits are {q, 0} before them and everyone(n*K) (resp. K) before the rank
//! is done: out of place in final_wait, in place at the staging unit (and
//! again, already satisfied, in final_wait). Only where our own data goes
//! (scratch or out) and whether our own block is copied change.
//!
//! The schedule stores the caller's counts pointer (no per-rank arrays):
//! offsets are prefix sums computed per unit, O(n) each.

#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "schedule.hpp"

namespace chorus {

namespace detail {
//! sum of c[first + i * stride] for i < len.
CHORUS_HD constexpr std::uint64_t strided_sum(const std::uint64_t* c, std::uint64_t first, std::uint64_t len,
                                              std::uint64_t stride) {
    std::uint64_t s = 0;
    for (std::uint64_t i = 0; i < len; ++i) s += c[first + i * stride];
    return s;
}
} // namespace detail

//! Whether one rank's exchange call is in place (see the file comment), on
//! buffers seen as bytes of `elem_bytes`-byte elements. `counts` as in
//! schedule_args (unused for AllToAll).
CHORUS_HD constexpr bool exchange_in_place(collective coll, const unsigned char* in, const unsigned char* out,
                                           int rank, const std::uint64_t* counts, std::uint64_t elem_bytes) {
    if (coll == collective::all_gatherv || coll == collective::reduce_scatterv) {
        const std::uint64_t displ = counts ? detail::strided_sum(counts, 0, std::uint64_t(rank), 1) * elem_bytes : 0;
        if (displ == 0) return in == out;
        if (coll == collective::all_gatherv) return out != nullptr && out + displ == in;
        return in != nullptr && in + displ == out;
    }
    return in == out;
}
//! The same on typed buffers.
template <class T>
CHORUS_HD constexpr bool exchange_in_place(collective coll, const T* in, const T* out, int rank,
                                           const std::uint64_t* counts) {
    return exchange_in_place(coll, reinterpret_cast<const unsigned char*>(in),
                             reinterpret_cast<const unsigned char*>(out), rank, counts, sizeof(T));
}

//! The steps of one rank in an exchange collective.
struct exchange_schedule {
    collective coll = collective::all_to_all;
    int nranks = 1;
    int me = 0;
    int nchannels = 1;
    bool in_place = false;
    std::uint64_t count = 0;                //!< AllToAll: elements per peer block; unused otherwise
    const std::uint64_t* counts = nullptr;  //!< the v-collectives' counts (schedule_args::counts)
    std::uint64_t chunks = 1;               //!< K
    alignment align{};

    //! Where one pulled block lies: offset in the source rank's `in`,
    //! offset in this rank's `out`, length.
    struct block {
        std::uint64_t src = 0;
        std::uint64_t dst = 0;
        std::uint64_t len = 0;
    };

    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return nchannels; }
    CHORUS_HD constexpr bool copies() const { return coll != collective::reduce_scatterv; }
    CHORUS_HD constexpr bool staged() const {
        return (coll == collective::all_to_all || coll == collective::all_to_allv) && in_place && nranks > 1;
    }

    //! counts[q] (AllGatherV, ReduceScatterV) and its prefix sum D_q.
    CHORUS_HD constexpr std::uint64_t vcount(int q) const { return counts ? counts[q] : 0; }
    CHORUS_HD constexpr std::uint64_t displ(int q) const {
        return counts ? detail::strided_sum(counts, 0, std::uint64_t(q), 1) : 0;
    }

    //! What this rank pulls from rank q (copy collectives).
    CHORUS_HD constexpr block pull(int q) const {
        const std::uint64_t n = std::uint64_t(nranks);
        switch (coll) {
        case collective::all_to_all:
            return {std::uint64_t(me) * count, std::uint64_t(q) * count, count};
        case collective::all_gatherv: return {0, displ(q), vcount(q)};
        case collective::all_to_allv: {
            if (counts == nullptr) return {};
            const std::uint64_t row = std::uint64_t(q) * n;
            return {detail::strided_sum(counts, row, std::uint64_t(me), 1),
                    detail::strided_sum(counts, std::uint64_t(me), std::uint64_t(q), n), counts[row + std::uint64_t(me)]};
        }
        default: return {};
        }
    }

    //! True when our own block needs no copy (it already is where it belongs).
    CHORUS_HD constexpr bool own_in_place(const block& b) const {
        if (!in_place) return false;
        return coll == collective::all_gatherv || b.src == b.dst;
    }

    //! Elements of this rank's out (the staging scratch mirrors it).
    CHORUS_HD constexpr std::uint64_t out_elems() const {
        const std::uint64_t n = std::uint64_t(nranks);
        switch (coll) {
        case collective::all_to_all: return n * count;
        case collective::all_gatherv: return displ(nranks);
        case collective::reduce_scatterv: return vcount(me);
        case collective::all_to_allv: return counts ? detail::strided_sum(counts, std::uint64_t(me), n, n) : 0;
        default: return 0;
        }
    }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return staged() ? out_elems() : 0; }

    CHORUS_HD constexpr std::uint64_t units() const {
        const std::uint64_t K = chunks;
        if (!copies()) return K;
        const std::uint64_t pulls = std::uint64_t(nranks) * K;
        return staged() ? 2 * pulls + 1 : pulls;
    }

    //! Chunk k of channel c of the index range [base, base + len).
    CHORUS_HD constexpr index_range piece(std::uint64_t base, std::uint64_t len, int c, std::uint64_t k) const {
        const index_range ch = split({base, base + len}, std::uint64_t(c), std::uint64_t(nchannels), align);
        return split(ch, k, chunks, align);
    }

    //! Waits until every rank (but this one) has done `units` units.
    CHORUS_HD constexpr wait_spec everyone(std::uint64_t u) const {
        return {0, u, static_cast<std::uint16_t>(nranks), 1};
    }

    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        const std::uint64_t K = chunks;
        const int n = nranks;
        step s{};
        if (!copies()) { // ReduceScatterV
            const std::uint64_t base = displ(me);
            const index_range rg = piece(base, vcount(me), c, p);
            s.count = rg.size();
            s.dst = {me, where::out, rg.begin - base};
            s.finish = true;
            if (n == 1) {
                s.src0 = {me, where::in, rg.begin};
                return s;
            }
            s.src0 = {0, where::in, rg.begin};
            s.fan_in = static_cast<std::uint16_t>(n);
            s.waits[0] = everyone(0);
            return s;
        }
        const std::uint64_t pulls = std::uint64_t(n) * K;
        if (p == pulls) { // staged: every peer has pulled from our input
            // On every channel: a reader splits a block over channels by
            // its output offsets, this rank what it overwrites by its own,
            // and the aligned splits need not agree, so an element this
            // channel rewrites may be read on another (found by the
            // independent-channel simulator, tests/unit/schedule_sim.hpp).
            s.waits[0] = everyone(pulls);
            s.waits[0].every_channel = true;
            return s;
        }
        const bool second = p > pulls; // staged: scratch -> out
        const std::uint64_t i = second ? p - pulls - 1 : p;
        const int q = detail::mod(me + static_cast<long long>(i / K), n);
        const block b = pull(q);
        if (q == me && own_in_place(b)) return s;
        const index_range rg = piece(b.dst, b.len, c, i % K);
        s.count = rg.size();
        if (second) {
            s.src0 = {me, where::scratch, rg.begin};
            s.dst = {me, where::out, rg.begin};
            return s;
        }
        s.src0 = {q, where::in, b.src + (rg.begin - b.dst)};
        s.dst = {me, staged() ? where::scratch : where::out, rg.begin};
        if (q != me) s.waits[0] = {q, 0};
        return s;
    }

    //! Who reads this rank's buffers, and how far they must get.
    CHORUS_HD constexpr wait_spec final_wait() const {
        if (nranks == 1) return {};
        if (!copies()) return everyone(chunks);
        return everyone(std::uint64_t(nranks) * chunks);
    }
};

//! Plans an exchange collective (a.coll: all_to_all, all_gatherv,
//! reduce_scatterv or all_to_allv) with the policy's channels and chunk size.
CHORUS_HD constexpr exchange_schedule make_exchange_schedule(const schedule_args& a, int channels,
                                                             std::uint64_t chunk_bytes) {
    exchange_schedule s{};
    s.coll = a.coll;
    s.nranks = a.nranks;
    s.me = a.rank;
    s.nchannels = channels < 1 ? 1 : channels;
    s.in_place = a.in_place;
    s.count = a.coll == collective::all_to_all ? a.count : 0;
    s.counts = a.coll == collective::all_to_all ? nullptr : a.counts;
    s.align = alignment_of(a.elem_bytes, 0);
    // The largest block any rank moves: K must be the same on every rank.
    const std::uint64_t n = std::uint64_t(a.nranks);
    std::uint64_t largest = 0;
    if (a.coll == collective::all_to_all) {
        largest = a.count;
    } else if (s.counts != nullptr) {
        const std::uint64_t entries = a.coll == collective::all_to_allv ? n * n : n;
        for (std::uint64_t i = 0; i < entries; ++i)
            if (s.counts[i] > largest) largest = s.counts[i];
    }
    const std::uint64_t channel_len = max_part_bound(largest, std::uint64_t(s.nchannels), s.align);
    // Units fit the flag's low 32 bits (staged AllToAll(V): 2nK + 1).
    const std::uint64_t per_chunk = a.coll == collective::reduce_scatterv ? 1
                                    : a.coll == collective::all_gatherv   ? n
                                                                          : 2 * n + 1;
    s.chunks = chunk_count(channel_len, a.elem_bytes, chunk_bytes, s.align, per_chunk, (std::uint64_t(1) << 31) - 1);
    return s;
}

} // namespace chorus
