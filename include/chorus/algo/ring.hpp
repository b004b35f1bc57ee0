#pragma once
//! \file algo/ring.hpp
//! The ring policy and its schedules.
//!
//! Data model: zero-copy pull. Every rank registers its buffers (in, out,
//! scratch) for the duration of a collective; in each unit a rank reads from
//! its ring predecessor's buffers and writes only its own. Work is split
//! into `channels` independent channels (one thread block each on a GPU,
//! interleaved on a host thread) and each channel into `chunks` pipelined
//! chunks; units run chunk-major (all steps of chunk 0, then chunk 1, ...).
//!
//! AllReduce (n > 1), T = 2(n-1) steps per chunk, slice s = part s of n:
//!   t <  n-1 (reduce-scatter): s = r-t-1; out[s] = pred.(t ? out : in)[s] op in[s]
//!            The last of these (t = n-2) finishes slice r+1 (epilogue,
//!            e.g. avg's division, applied here) and writes it to both our
//!            out and succ's out ("reduce, copy and send"), so the first
//!            all-gather step has nothing left to copy.
//!   t == n-1:  sync only (pred pushed slice r into our out at its t = n-2)
//!   t >  n-1 (all-gather):     s = r-(t-n+1); out[s] = pred.out[s]
//!   waits: pred >= p (it finished unit p-1, whose output we read);
//!          succ >= 0 before the push (succ has registered this
//!          collective's buffers). No other write-after-read wait is
//!          needed: a slice of out (or, in place, of in) is rewritten n
//!          steps after it was written or read, and the chain of data
//!          waits around the ring has by then made the reader finish. The
//!          simulation test (tests/unit/test_schedule.cpp) checks this for
//!          n = 1..9, in place and not.
//! AllGather, T = n: t = 0 copies in -> out[block r]; t >= 1 copies
//!   pred.out[block r-t]; waits: pred >= p.
//! ReduceScatter, T = n-1: block b = r-t-2; partials travel in a two-slot
//!   scratch per channel (slot p mod 2); the last step writes out.
//!   waits: pred >= p, succ >= p.
//! Broadcast / Reduce: a pipelined chain (root first / root last), T = 1;
//!   Reduce partials use the same two-slot scratch. waits: pred >= p+1;
//!   Reduce also succ >= p-1 before reusing a slot.
//! Every rank finally waits until its reader (succ) has finished all units
//! (in a chain: until the end of the chain has), so a returned collective
//! never leaves a peer reading the caller's buffers.
//! Operand order: dst = (value from pred) op (own value), so ring<> needs a
//! commutative operator (the chain starts at a different rank per slice).
//!
//! Phases (ring_phase; hierarchical<> composes them, ring<> itself always
//! runs `whole`). AllReduce only:
//!   reduce_scatter  T = n: the steps t = 0..n-1 of AllReduce (the last one
//!                   the sync step), without the epilogue: rank r ends with
//!                   part r reduced over the ring in its out. (n = 1: a copy.)
//!   all_gather      T = n-1: t: s = r-t-1; out[s] = pred.out[s], taking
//!                   part r of out as final. waits: pred >= p. (n = 1: none.)

#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "policy.hpp"
#include "schedule.hpp"

namespace chorus {

//! Tuning knobs of ring<>, given as one aggregate:
//! ring<ring_params{.channels = 2, .chunk_bytes = 1 << 20}>. A field left
//! at 0 is chosen per call (resolve_tuning in algo/policy.hpp: on GPU
//! transports from the size and the device, on host transports 1 channel
//! and 256 KiB); a value given is used as given.
struct ring_params {
    int channels = 0;             //!< independent channels (GPU: thread blocks); 0: per call
    std::size_t chunk_bytes = 0;  //!< pipelining granularity per channel; 0: per call
};

struct ring_schedule;

//! Which part of the AllReduce pattern a ring schedule runs (see above).
enum class ring_phase : std::uint8_t { whole, reduce_scatter, all_gather };

//! Ring algorithm policy: bandwidth-optimal, 2(n-1) latency steps for AllReduce.
template <ring_params P = ring_params{}>
struct ring {
    static_assert(P.channels >= 0, "chorus: ring<> needs channels >= 1 (or 0: chosen per call)");
    static_assert(P.channels <= max_channels, "chorus: ring<> supports at most chorus::max_channels channels");
    static_assert(P.chunk_bytes == 0 || P.chunk_bytes >= 16,
                  "chorus: ring<> needs chunk_bytes >= 16 (or 0: chosen per call)");
    static constexpr ring_params params = P;
    static constexpr bool reorders_operands = true;
    static constexpr const char* name = "ring";
    static constexpr policy describe() { return policy::fixed(algorithm::ring, {P.channels, P.chunk_bytes}); }
};

//! Everything every rank must agree on to run one ring collective.
struct ring_plan {
    collective coll = collective::all_reduce;
    int nranks = 1;
    int rank = 0;
    int root = 0;
    int channels = 1;
    std::uint64_t count = 0;      //!< AllReduce/Broadcast/Reduce: elements; AllGather/ReduceScatter: per-rank block
    std::uint64_t chunks = 1;     //!< chunks per channel (K)
    std::uint32_t steps = 0;      //!< steps per chunk (T)
    alignment align{};            //!< aligned indices of the full-size buffer
    std::uint64_t slot_elems = 0; //!< scratch slot capacity (ReduceScatter, Reduce), else 0
    ring_phase phase = ring_phase::whole; //!< AllReduce only: the part of the pattern to run

    CHORUS_HD constexpr std::uint64_t units() const { return chunks * steps; }
    //! Elements of scratch each rank registers: two slots per channel.
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return slot_elems * 2 * std::uint64_t(channels); }

    //! Slice s of the full-size index space (AllReduce: part s; AllGather /
    //! ReduceScatter: block s; Broadcast / Reduce: everything).
    CHORUS_HD constexpr index_range slice(int s) const {
        switch (coll) {
        case collective::all_reduce: return split({0, count}, std::uint64_t(s), std::uint64_t(nranks), align);
        case collective::all_gather:
        case collective::reduce_scatter: return {std::uint64_t(s) * count, std::uint64_t(s) * count + count};
        default: return {0, count};
        }
    }
    CHORUS_HD constexpr index_range chunk(int s, int c, std::uint64_t k) const {
        const index_range ch = split(slice(s), std::uint64_t(c), std::uint64_t(channels), align);
        return split(ch, k, chunks, align);
    }
};

//! Plans a ring collective. `count` as in ring_plan::count; `base_offset`
//! is the byte offset modulo 16 of the full-size buffer that all ranks agree on.
//! `phase` (AllReduce only) selects a part of the AllReduce pattern.
CHORUS_HD constexpr ring_plan make_ring_plan(collective coll, int rank, int nranks, int root, std::uint64_t count,
                                             std::uint64_t elem_bytes, std::uint64_t base_offset, int channels,
                                             std::uint64_t chunk_bytes, ring_phase phase = ring_phase::whole) {
    ring_plan p{};
    p.coll = coll;
    p.nranks = nranks;
    p.rank = rank;
    p.root = root;
    p.channels = channels;
    p.count = count;
    p.align = alignment_of(elem_bytes, base_offset);
    const int n = nranks;
    if (coll != collective::all_reduce) phase = ring_phase::whole;
    p.phase = phase;
    switch (coll) {
    case collective::all_reduce:
        p.steps = phase == ring_phase::reduce_scatter ? std::uint32_t(n)
                  : phase == ring_phase::all_gather   ? std::uint32_t(n - 1)
                  : n == 1                            ? 1u
                                                      : std::uint32_t(2 * (n - 1));
        break;
    case collective::all_gather: p.steps = std::uint32_t(n); break;
    case collective::reduce_scatter: p.steps = n == 1 ? 1u : std::uint32_t(n - 1); break;
    case collective::broadcast:
    case collective::reduce: p.steps = 1; break;
    case collective::barrier:
    default: p.steps = 0; break;
    }
    if (coll == collective::barrier || p.steps == 0) return p;
    const std::uint64_t slice_len =
        coll == collective::all_reduce ? max_part_bound(count, std::uint64_t(n), p.align) : count;
    const std::uint64_t channel_len = max_part_bound(slice_len, std::uint64_t(channels), p.align);
    // Units fit the flag's low 32 bits; a composite runs three phases in one count.
    const std::uint64_t max_units = (std::uint64_t(1) << 31) / (phase != ring_phase::whole ? 4 : 1);
    p.chunks = chunk_count(channel_len, elem_bytes, chunk_bytes, p.align, p.steps, max_units);
    if (coll == collective::reduce_scatter || coll == collective::reduce)
        p.slot_elems = n > 1 ? max_part_bound(channel_len, p.chunks, p.align) : 0;
    return p;
}

//! The steps of one rank in a planned ring collective. Pure: the same
//! (plan, channel, chunk, step) gives the same step on host and device.
struct ring_schedule {
    ring_plan plan{};

    // The schedule interface (exec/rank_program.hpp).
    CHORUS_HD constexpr int rank() const { return plan.rank; }
    CHORUS_HD constexpr int channels() const { return plan.channels; }
    CHORUS_HD constexpr std::uint64_t units() const { return plan.units(); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return plan.scratch_elems(); }
    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        return at(c, p / plan.steps, static_cast<std::uint32_t>(p % plan.steps));
    }

    CHORUS_HD constexpr int n() const { return plan.nranks; }
    CHORUS_HD constexpr int r() const { return plan.rank; }
    //! Position in the chain of Broadcast (root first) and Reduce (root last).
    CHORUS_HD constexpr int chain_pos() const {
        return plan.coll == collective::broadcast ? detail::mod(r() - plan.root, n())
                                                  : detail::mod(r() - plan.root - 1, n());
    }
    //! The rank whose buffers this rank reads (-1: none).
    CHORUS_HD constexpr int pred() const {
        if (n() == 1) return -1;
        if (plan.coll == collective::broadcast || plan.coll == collective::reduce)
            return chain_pos() == 0 ? -1 : detail::mod(r() - 1, n());
        return detail::mod(r() - 1, n());
    }
    //! The rank that reads this rank's buffers (-1: none).
    CHORUS_HD constexpr int succ() const {
        if (n() == 1) return -1;
        if (plan.coll == collective::broadcast || plan.coll == collective::reduce)
            return chain_pos() == n() - 1 ? -1 : detail::mod(r() + 1, n());
        return detail::mod(r() + 1, n());
    }
    CHORUS_HD constexpr std::uint64_t slot(int c, std::uint64_t s) const {
        return (std::uint64_t(c) * 2 + (s & 1)) * plan.slot_elems;
    }

    CHORUS_HD constexpr step at(int c, std::uint64_t k, std::uint32_t t) const {
        const int n_ = n();
        const int me = r();
        const std::uint64_t p = k * plan.steps + t;
        const std::uint64_t blk = plan.count; // block length for AllGather / ReduceScatter
        step s{};
        if (n_ == 1) { // a local copy (with the epilogue) is the whole collective
            if (plan.coll == collective::broadcast) return s;
            const index_range rg = plan.chunk(0, c, k);
            s.count = rg.size();
            s.src0 = {me, where::in, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.finish = plan.coll != collective::all_gather && plan.phase == ring_phase::whole;
            return s;
        }
        const int pr = pred();
        const int su = succ();
        switch (plan.coll) {
        case collective::all_reduce: {
            if (plan.phase == ring_phase::all_gather) {
                const index_range rg = plan.chunk(detail::mod(me - int(t) - 1, n_), c, k);
                s.count = rg.size();
                s.dst = {me, where::out, rg.begin};
                s.src0 = {pr, where::out, rg.begin};
                s.waits[0] = {pr, p};
                return s;
            }
            const bool rs = t < std::uint32_t(n_ - 1);
            const int sl = rs ? detail::mod(me - int(t) - 1, n_) : detail::mod(me - (int(t) - (n_ - 1)), n_);
            const index_range rg = plan.chunk(sl, c, k);
            s.waits[0] = {pr, p};
            if (t == std::uint32_t(n_ - 1)) return s; // slice r arrived by push
            s.count = rg.size();
            s.dst = {me, where::out, rg.begin};
            if (rs) {
                s.src0 = {pr, t == 0 ? where::in : where::out, rg.begin};
                s.src1 = {me, where::in, rg.begin};
                if (t == std::uint32_t(n_ - 2)) {
                    s.finish = plan.phase == ring_phase::whole;
                    s.dst2 = {su, where::out, rg.begin};
                    s.waits[1] = {su, 0};
                }
            } else {
                s.src0 = {pr, where::out, rg.begin};
            }
            return s;
        }
        case collective::all_gather: {
            const int b = detail::mod(me - int(t), n_);
            const index_range rg = plan.chunk(b, c, k);
            s.count = rg.size();
            s.dst = {me, where::out, rg.begin};
            if (t == 0) {
                s.src0 = {me, where::in, rg.begin - std::uint64_t(me) * blk};
            } else {
                s.src0 = {pr, where::out, rg.begin};
                s.waits[0] = {pr, p};
            }
            return s;
        }
        case collective::reduce_scatter: {
            const int b = detail::mod(me - int(t) - 2, n_);
            const index_range rg = plan.chunk(b, c, k);
            const bool last = t + 1 == plan.steps;
            s.count = rg.size();
            s.src0 = t == 0 ? operand{pr, where::in, rg.begin} : operand{pr, where::scratch, slot(c, p - 1)};
            s.src1 = {me, where::in, rg.begin};
            s.dst = last ? operand{me, where::out, rg.begin - std::uint64_t(me) * blk}
                         : operand{me, where::scratch, slot(c, p)};
            s.finish = last;
            s.waits[0] = {pr, p};
            s.waits[1] = {su, p};
            return s;
        }
        case collective::broadcast: {
            if (pr < 0) return s; // the root only posts progress
            const index_range rg = plan.chunk(0, c, k);
            s.count = rg.size();
            s.src0 = {pr, where::out, rg.begin};
            s.dst = {me, where::out, rg.begin};
            s.waits[0] = {pr, p + 1};
            return s;
        }
        case collective::reduce: {
            const int pos = chain_pos();
            if (pos == 0) return s; // first in the chain: its input is read in place by pos 1
            const index_range rg = plan.chunk(0, c, k);
            s.count = rg.size();
            s.src0 = pos == 1 ? operand{pr, where::in, rg.begin} : operand{pr, where::scratch, slot(c, k)};
            s.src1 = {me, where::in, rg.begin};
            const bool root = su < 0;
            s.dst = root ? operand{me, where::out, rg.begin} : operand{me, where::scratch, slot(c, k)};
            s.finish = root;
            s.waits[0] = {pr, p + 1};
            if (!root) s.waits[1] = {su, p == 0 ? 0 : p - 1};
            return s;
        }
        case collective::barrier:
        default: return s;
        }
        return s;
    }

    //! Before returning, wait until the reader of this rank's buffers is
    //! done with them: until succ finished its last unit that reads them.
    //! (Two-rank AllReduce: succ's last unit is the sync-only step, so its
    //! last read is one unit earlier, which our own last data wait already
    //! saw: returning costs no extra hand-off.)
    //! Chains (Broadcast, Reduce) wait for the end of the chain instead:
    //! it finishes last, after every reader, and so a rank returns success
    //! only if the whole chain succeeded (in a ring every rank already
    //! depends on every other).
    CHORUS_HD constexpr wait_spec final_wait() const {
        const int su = succ();
        if (su < 0 || plan.coll == collective::barrier) return {};
        if (plan.coll == collective::broadcast) return {detail::mod(plan.root - 1, n()), plan.units()};
        if (plan.coll == collective::reduce) return {plan.root, plan.units()};
        if (plan.coll == collective::all_reduce && plan.phase == ring_phase::whole && n() == 2)
            return {su, plan.units() - 1};
        return {su, plan.units()};
    }
};

//! Plans ring<> with tuning `t` for one rank's call `a`.
CHORUS_HD constexpr ring_schedule make_ring_schedule(const schedule_args& a, tuning t) {
    // Planned relative to a 16-byte aligned base: ranks must agree on the
    // plan and may hold buffers at different offsets; executors peel each
    // chunk's ragged head and tail themselves.
    return ring_schedule{make_ring_plan(a.coll, a.rank, a.nranks, a.root, a.count, a.elem_bytes, 0, t.channels,
                                        t.chunk_bytes)};
}

} // namespace chorus
