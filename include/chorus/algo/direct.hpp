#pragma once
//! \file algo/direct.hpp
//! The direct (one-shot) policy: every rank reads what it needs straight
//! from every peer's registered buffers in one step, instead of passing
//! data around a ring. One latency step instead of 2(n-1), at the price of
//! n-fold reads: the algorithm for small messages.
//!
//! Reductions combine the ranks' values in rank order 0, 1, ..., n-1, in
//! one fan-in step per chunk (step::fan_in): results do not depend on
//! the channel count, the chunk size or timing, and non-commutative
//! operators are fine.
//!
//! Schedules (K chunks per channel; units run chunk by chunk):
//!   AllReduce      K fan-in units: out[k] = in_0[k] op ... op in_{n-1}[k].
//!                  In place a peer may still be reading our input while
//!                  we would overwrite it, so the fan-in goes to scratch,
//!                  then one unit waits until every peer has done its K
//!                  fan-in units, then K units copy scratch to out.
//!   ReduceScatter  K fan-in units over block r of every rank's input.
//!   AllGather      n*K copies: out[block q] = in_q, starting with q = r.
//!   Broadcast      non-roots: K copies out = root.out; the root: K empty
//!                  units (posted on entry). Every rank waits for all at the end.
//!   Reduce         the root: K fan-in units; the others: none.
//! Phases (direct_phase; hierarchical<> composes them, direct<> itself
//! always runs `whole`). AllReduce only, part q = split(count, q of n):
//!   reduce_scatter  K fan-in units: out[part r] = in_0 op ... op in_{n-1}
//!                   over part r, no epilogue (in place too: only we read
//!                   our own part). n = 1: K copies in -> out.
//!   all_gather      (n-1)K copies: out[part q] = q.out[part q], q = r+1,
//!                   r+2, ...; part r of out is taken as final. n = 1: none.
//! Every data unit first waits until the ranks it reads have registered
//! (progress >= 0). Before returning, a rank waits until every rank that
//! reads its buffers has finished reading them.

#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "compose.hpp"
#include "policy.hpp"
#include "schedule.hpp"

namespace chorus {

//! Tuning knobs of direct<> (and of recursive_doubling<>, rabenseifner<>,
//! two_shot<>). A field left at 0 is chosen per call (resolve_tuning in
//! algo/policy.hpp: on GPU transports from the size and the device, on
//! host transports 1 channel and 1 MiB); a value given is used as given.
struct direct_params {
    int channels = 0;             //!< independent channels (GPU: thread blocks); 0: per call
    std::size_t chunk_bytes = 0;  //!< work granularity per channel; 0: per call
    //! protocol::ll: GPU communicators run calls that fit their LL region
    //! with the low-latency protocol (algo/ll.hpp; one channel, the two
    //! fields above unused); everything else runs as protocol::simple.
    protocol proto = protocol::simple;
};

struct direct_schedule;

//! Which part of the AllReduce pattern a direct schedule runs (see above).
enum class direct_phase : std::uint8_t { whole, reduce_scatter, all_gather };

//! One-shot policy: every rank reads every peer directly; reductions in rank order.
template <direct_params P = direct_params{}>
struct direct {
    static_assert(P.channels >= 0, "chorus: direct<> needs channels >= 1 (or 0: chosen per call)");
    static_assert(P.channels <= max_channels, "chorus: direct<> supports at most chorus::max_channels channels");
    static_assert(P.chunk_bytes == 0 || P.chunk_bytes >= 16,
                  "chorus: direct<> needs chunk_bytes >= 16 (or 0: chosen per call)");
    static constexpr direct_params params = P;
    static constexpr bool reorders_operands = false;
    static constexpr const char* name = "direct";
    static constexpr policy describe() {
        policy p = policy::fixed(algorithm::direct, {P.channels, P.chunk_bytes});
        p.proto = P.proto;
        return p;
    }
};

//! The steps of one rank in a direct collective.
struct direct_schedule {
    collective coll = collective::all_reduce;
    int nranks = 1;
    int me = 0;
    int root = 0;
    int nchannels = 1;
    bool in_place = false;
    std::uint64_t count = 0;   //!< as schedule_args::count
    std::uint64_t chunks = 1;  //!< K
    alignment align{};
    direct_phase phase = direct_phase::whole; //!< AllReduce only: the part of the pattern to run

    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return nchannels; }
    CHORUS_HD constexpr bool staged() const {
        return coll == collective::all_reduce && phase == direct_phase::whole && in_place && nranks > 1;
    }
    //! AllReduce phases: the part rank q owns.
    CHORUS_HD constexpr index_range part(int q) const {
        return split({0, count}, std::uint64_t(q), std::uint64_t(nranks), align);
    }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return staged() ? count : 0; }

    CHORUS_HD constexpr std::uint64_t units() const {
        const std::uint64_t K = chunks;
        const bool gather_phase = coll == collective::all_reduce && phase == direct_phase::all_gather;
        if (nranks == 1) return coll == collective::broadcast || gather_phase ? 0 : K;
        switch (coll) {
        case collective::all_reduce:
            if (gather_phase) return std::uint64_t(nranks - 1) * K;
            return staged() ? 2 * K + 1 : K;
        case collective::reduce_scatter: return K;
        case collective::all_gather: return std::uint64_t(nranks) * K;
        case collective::broadcast: return K; // the root's K are empty: it posts them on entry
        case collective::reduce: return me == root ? K : 0;
        case collective::barrier:
        default: return 0;
        }
        return 0;
    }

    //! Chunk k of channel c of the index range [base, base + len).
    CHORUS_HD constexpr index_range piece(std::uint64_t base, std::uint64_t len, int c, std::uint64_t k) const {
        return detail::piece({base, base + len}, c, nchannels, k, chunks, align);
    }

    //! Waits until every rank (but this one) has done `units` units.
    CHORUS_HD constexpr wait_spec everyone(std::uint64_t u) const { return detail::everyone(nranks, u); }

    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        const std::uint64_t K = chunks;
        const int n = nranks;
        step s{};
        if (n == 1) {
            const index_range rg = piece(0, count, c, p);
            s.count = rg.size();
            s.src0 = {me, where::in, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.finish = coll != collective::all_gather && phase == direct_phase::whole;
            return s;
        }
        switch (coll) {
        case collective::all_reduce: {
            if (phase == direct_phase::reduce_scatter) {
                const index_range pt = part(me);
                const index_range rg = piece(pt.begin, pt.size(), c, p);
                s.count = rg.size();
                s.src0 = {0, where::in, rg.begin};
                s.fan_in = static_cast<std::uint16_t>(n);
                s.dst = {me, where::out, rg.begin};
                s.waits[0] = everyone(0);
                return s;
            }
            if (phase == direct_phase::all_gather) {
                const int q = detail::mod(me + 1 + int(p / K), n);
                const index_range pt = part(q);
                const index_range rg = piece(pt.begin, pt.size(), c, p % K);
                s.count = rg.size();
                s.src0 = {q, where::out, rg.begin};
                s.dst = {me, where::out, rg.begin};
                s.waits[0] = {q, 0};
                return s;
            }
            if (p < K) {
                const index_range rg = piece(0, count, c, p);
                s.count = rg.size();
                s.src0 = {0, where::in, rg.begin};
                s.fan_in = static_cast<std::uint16_t>(n);
                s.dst = {me, staged() ? where::scratch : where::out, rg.begin};
                s.finish = true;
                s.waits[0] = everyone(0);
                return s;
            }
            if (p == K) { // staged: every peer has read our input
                s.waits[0] = everyone(K);
                return s;
            }
            const index_range rg = piece(0, count, c, p - K - 1);
            s.count = rg.size();
            s.src0 = {me, where::scratch, rg.begin};
            s.dst = {me, where::out, rg.begin};
            return s;
        }
        case collective::reduce_scatter:
        case collective::reduce: {
            const std::uint64_t base = coll == collective::reduce ? 0 : std::uint64_t(me) * count;
            const index_range rg = piece(base, count, c, p);
            s.count = rg.size();
            s.src0 = {0, where::in, rg.begin};
            s.fan_in = static_cast<std::uint16_t>(n);
            s.dst = {me, where::out, rg.begin - base};
            s.finish = true;
            s.waits[0] = everyone(0);
            return s;
        }
        case collective::all_gather: {
            const int q = detail::mod(me + int(p / K), n);
            const std::uint64_t base = std::uint64_t(q) * count;
            const index_range rg = piece(base, count, c, p % K);
            if (q == me && in_place) return s; // our block is already in place
            s.count = rg.size();
            s.src0 = {q, where::in, rg.begin - base};
            s.dst = {me, where::out, rg.begin};
            if (q != me) s.waits[0] = {q, 0};
            return s;
        }
        case collective::broadcast: {
            if (me == root) return s; // a pure synchronisation unit
            const index_range rg = piece(0, count, c, p);
            s.count = rg.size();
            s.src0 = {root, where::out, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.waits[0] = {root, 0};
            return s;
        }
        case collective::barrier:
        default: return s;
        }
        return s;
    }

    //! Who reads this rank's buffers, and how far they must get.
    CHORUS_HD constexpr wait_spec final_wait() const {
        const std::uint64_t K = chunks;
        if (nranks == 1) return {};
        switch (coll) {
        case collective::all_reduce:
            if (phase == direct_phase::all_gather) return everyone(std::uint64_t(nranks - 1) * K);
            return everyone(K);
        case collective::reduce_scatter: return everyone(K);
        case collective::all_gather: return everyone(std::uint64_t(nranks) * K);
        // Every rank, not only the root: no rank returns success from a
        // broadcast some rank did not finish (docs/reliability.md).
        case collective::broadcast: return everyone(K);
        case collective::reduce: return me == root ? wait_spec{} : wait_spec{root, K};
        case collective::barrier:
        default: return {};
        }
        return {};
    }
};

//! Plans a direct collective with explicit tuning (direct<P> passes P).
//! `phase` (AllReduce only) selects a part of the AllReduce pattern;
//! `base_offset` is the byte offset modulo 16 of the buffer all ranks agree on.
CHORUS_HD constexpr direct_schedule make_direct_schedule(const schedule_args& a, int channels,
                                                         std::uint64_t chunk_bytes,
                                                         direct_phase phase = direct_phase::whole,
                                                         std::uint64_t base_offset = 0) {
    direct_schedule s{};
    s.coll = a.coll;
    s.nranks = a.nranks;
    s.me = a.rank;
    s.root = a.root;
    s.nchannels = channels;
    s.in_place = a.in_place;
    s.count = a.count;
    s.align = alignment_of(a.elem_bytes, base_offset);
    s.phase = a.coll == collective::all_reduce ? phase : direct_phase::whole;
    const bool whole = s.phase == direct_phase::whole;
    // A phase works on one part at a time: chunk the largest part.
    const std::uint64_t slice_len = whole ? a.count : max_part_bound(a.count, std::uint64_t(a.nranks), s.align);
    const std::uint64_t channel_len = max_part_bound(slice_len, std::uint64_t(channels), s.align);
    const std::uint64_t per_chunk =
        a.coll == collective::all_gather || s.phase == direct_phase::all_gather ? std::uint64_t(a.nranks) : 2;
    // Units fit the flag's low 32 bits; a composite runs three phases in one count.
    const std::uint64_t max_units = ((std::uint64_t(1) << 31) - 1) / (whole ? 1 : 4);
    s.chunks = chunk_count(channel_len, a.elem_bytes, chunk_bytes, s.align, per_chunk, max_units);
    return s;
}

} // namespace chorus
