#pragma once
//! \file algo/ll.hpp
//! The low-latency (LL) protocol's plan: direct<> with protocol::ll, and
//! what automatic and deterministic<> pick for small calls on transports
//! that have an LL receive region (GPU communicators made by
//! gpu::make_communicators). The lane executor runs it
//! (exec/lane_ll.hpp); every other executor runs `fallback`, the direct<>
//! schedule of the same call (one channel), so a host backend handed an
//! LL schedule still computes the right thing (the planners never hand
//! them one: their schedule_args::ll_limit_bytes is 0).
//!
//! One shot, push: every rank writes what each peer needs from it (its
//! payload: AllReduce, AllGather, Reduce to the root: its input;
//! ReduceScatter: block q of its input for peer q; Broadcast: the root's
//! buffer) into that peer's LL region, slot [call parity][source rank],
//! as 8-byte words of {4 payload bytes, 4 flag bytes}, after a 2-word
//! header carrying the call's fingerprint. Every pair of ranks exchanges
//! at least the header on every call (a rank with no payload for a peer
//! sends the header alone), so every rank compares its call with every
//! other rank's and every failure is seen by every rank, as in direct<>'s
//! AllReduce. Readers reduce in rank order 0..n-1 (own input read
//! locally), so results are bitwise identical on every rank and equal to
//! direct<>'s: deterministic<> may use it.
//!
//! Eligible calls (ll_fits): 2 or more ranks; AllReduce, ReduceScatter,
//! AllGather, Broadcast or Reduce; an element of 1, 2, 4, 8 or 16 bytes;
//! a per-pair payload (count * element size) of at most
//! schedule_args::ll_limit_bytes; and the fallback's scratch within the
//! transport's scratch limit.

#include <cstdint>

#include "../core/config.hpp"
#include "direct.hpp"
#include "policy.hpp"
#include "schedule.hpp"

namespace chorus {

//! Words of an LL slot's header (the call's 64-bit fingerprint, 4 bytes per word).
inline constexpr std::uint64_t ll_header_words = 2;

//! LL words a slot needs to carry `payload_bytes`: the header and one word per 4 bytes.
CHORUS_HD constexpr std::uint64_t ll_slot_words(std::uint64_t payload_bytes) {
    return ll_header_words + (payload_bytes + 3) / 4;
}

//! Bytes of one rank's LL receive region for `nranks` ranks with room for
//! `payload_bytes` per source: 2 call parities x nranks slots (the
//! owner's own unused) x ll_slot_words x 8 bytes. With 64 KiB and 8 ranks:
//! 2 x 8 x (2 + 16384) x 8 B = 2 MiB + 256 B.
constexpr std::uint64_t ll_region_bytes(int nranks, std::uint64_t payload_bytes) {
    return 2 * std::uint64_t(nranks) * ll_slot_words(payload_bytes) * 8;
}

//! The LL plan of one rank's call (see the file comment).
struct ll_schedule {
    direct_schedule fallback{}; //!< what executors without the LL path run (one channel)
    collective coll = collective::all_reduce;
    int nranks = 1;
    int me = 0;
    int root = 0;
    bool in_place = false;
    std::uint64_t count = 0; //!< as schedule_args::count
    std::uint64_t elem_bytes = 1;

    // The schedule interface (exec/rank_program.hpp): the fallback's.
    CHORUS_HD constexpr int rank() const { return me; }
    CHORUS_HD constexpr int channels() const { return 1; }
    CHORUS_HD constexpr std::uint64_t units() const { return fallback.units(); }
    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const { return fallback.unit(c, p); }
    CHORUS_HD constexpr wait_spec final_wait() const { return fallback.final_wait(); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return fallback.scratch_elems(); }

    //! Payload bytes rank `from` sends rank `to` (from != to).
    CHORUS_HD constexpr std::uint64_t payload(int from, int to) const {
        if (coll == collective::broadcast && from != root) return 0;
        if (coll == collective::reduce && to != root) return 0;
        return count * elem_bytes;
    }
    //! True when the reader folds the payloads (else it copies them).
    CHORUS_HD constexpr bool reduces() const {
        return coll == collective::all_reduce || coll == collective::reduce_scatter || coll == collective::reduce;
    }
    //! Element offset, in the sender's input, of what it sends rank `to`.
    CHORUS_HD constexpr std::uint64_t send_offset(int to) const {
        return coll == collective::reduce_scatter ? std::uint64_t(to) * count : 0;
    }
};

//! Whether call `a` can run with the LL protocol (see the file comment).
constexpr bool ll_fits(const schedule_args& a) {
    if (a.nranks < 2 || a.ll_limit_bytes == 0) return false;
    switch (a.coll) {
    case collective::all_reduce:
    case collective::reduce_scatter:
    case collective::all_gather:
    case collective::broadcast:
    case collective::reduce: break;
    default: return false;
    }
    const std::uint64_t e = a.elem_bytes;
    if (e != 1 && e != 2 && e != 4 && e != 8 && e != 16) return false;
    if (a.count > a.ll_limit_bytes / e) return false;
    if (a.scratch_limit_bytes != 0) {
        const direct_schedule d = make_direct_schedule(a, 1, std::uint64_t(1) << 20);
        if (d.scratch_elems() * e > a.scratch_limit_bytes) return false;
    }
    return true;
}

//! The LL plan of call `a` (ll_fits(a) must hold).
constexpr ll_schedule make_ll_schedule(const schedule_args& a) {
    ll_schedule s{};
    s.fallback = make_direct_schedule(a, 1, std::uint64_t(1) << 20);
    s.coll = a.coll;
    s.nranks = a.nranks;
    s.me = a.rank;
    s.root = a.root;
    s.in_place = a.in_place;
    s.count = a.count;
    s.elem_bytes = a.elem_bytes;
    return s;
}

} // namespace chorus
