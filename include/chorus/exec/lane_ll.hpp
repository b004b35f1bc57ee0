#pragma once
//! \file exec/lane_ll.hpp
//! The lane executor's low-latency (LL) protocol: how one rank runs an
//! ll_schedule (algo/ll.hpp). Included by exec/lane_env.hpp (include
//! that); run_lane_channel calls run_ll in place of the unit loop. Like the
//! rest of the lane executor it is __host__ __device__: the CPU lane tests
//! (tests/unit/test_lanes_ll.cpp) run this very code on CPU threads.
//!
//! Memory. Every rank owns an LL receive region that its peers write
//! (lane_world::ll[r], as this process addresses it): 2 call parities x
//! nranks slots (one per source rank; the owner's own unused) of
//! lane_world::ll_slot_words 8-byte words. Word w of the slot
//! [parity][q] in rank r's region carries, for call number s:
//!   bits 0..31   4 bytes of data: w = 0, 1: the call's 64-bit fingerprint
//!                (call_signature::hash(), low half first); w >= 2: bytes
//!                4(w-2) .. 4(w-2)+3 of q's payload for r (zero-padded);
//!   bits 32..63  the flag ll_flag(s) (never 0, never ll_flag(s - 2)).
//! Flag and data travel in one 8-byte store (a relaxed system-scope atomic
//! store: st.relaxed.sys.u64 on a GPU, std::atomic_ref on a CPU), so a
//! reader polls the data itself: a word whose flag is ll_flag(s) holds
//! call s's data, with no separate flag wait and no fence.
//!
//! One call, on every rank (lanes share every phase; lane = thread of
//! the block on a GPU, CPU thread in the lane test):
//!   0. reuse guard: for each peer q (spread over the lanes), wait until
//!      q has acknowledged (area ll_ack[q], written by q) the last call
//!      in which this rank wrote its slot of this parity in q's region
//!      (area ll_sent[q][parity], this rank's own record);
//!   1. push: every (peer, word) pair, spread over the lanes, neighbouring
//!      lanes on neighbouring words: the header, then the payload;
//!   2. poll: every (source, word) pair this rank receives, spread over
//!      the lanes, until its flag is this call's; the header must carry
//!      this rank's fingerprint (else status::mismatch); with them, each
//!      peer's registration of this call (acquire, see "Order" below);
//!   3. reduce (or copy) out of the region: lanes take 16-byte chunks of
//!      the payload and fold the n contributions in rank order 0..n-1
//!      (this rank's own straight from its input), then write the output;
//!   4. acknowledge: for each peer q, ll_ack[this rank] in q's area = s
//!      (release, after a barrier of the lanes: every lane's reads of the
//!      region come before it).
//! There is no read of host memory on this path: the abort word (mapped
//! host memory on a GPU) is read every 1024 polls of a word not yet
//! arrived, and the deadline every 64, as in lane_env::poll.
//!
//! Why a slot is never overwritten while its reader still reads it.
//! Claim: rank r reads slot [p][q] of its region during call s (p = s&1)
//! only while q writes nothing into it but call s's words.
//! (a) q writes slot [p] of r's region in call s only after phase 0 saw
//!     ll_ack[r] >= ll_sent[r][p] = s', the last call < s in which q wrote
//!     that slot (0: never). r stores ll_ack = s' only in phase 4 of s',
//!     after its lanes' barrier, so every read r made of the slot for s'
//!     happens before any write q makes for s (release/acquire).
//! (b) Between s' and s, q wrote the slot in no call (ll_sent records the
//!     latest), so during call s r sees in the slot only words of call s
//!     or of calls <= s' (or the zeroed region). Those carry other flags:
//!     ll_flag(x) = (x mod (2^32 - 1)) + 1 is never 0, and two calls share
//!     a flag only 2^32 - 1 calls apart; r accepts only ll_flag(s).
//! (c) A writer is at most one call ahead of any reader in the LL slots:
//!     q's call s + 2 writes parity p again and waits (phase 0) for r's
//!     ack of s, so q may run call s + 1 (the other parity) while r still
//!     reads call s, never further. Phase 0 waits only on calls already
//!     complete at the writer (s' < s, whose data was pushed), so no cycle
//!     of waits can form (by induction on s).
//! Calls of other protocols between LL calls do not touch the regions
//! and do not break (a)-(c): ll_sent/ll_ack compare call numbers.
//!
//! Order with the other calls ("Order"). The flag protocol's safety (a rank's
//! descriptors, double-buffered by call parity, and its buffers) rests on
//! a chain of release/acquire: a rank that saw a peer start call s + 1
//! knows everything that peer did in call s happened before. Relaxed LL
//! words carry no such order, so in phase 2 every rank also acquires each
//! peer's registration of this call (its flag, released by
//! run_lane_channel's first post before the peer pushed anything, after
//! a barrier that follows all of the peer's previous call).

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../algo/ll.hpp"
#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../ops/traits.hpp"
#include "lane_env.hpp"
#include "lane_reduce_copy.hpp"

namespace chorus::detail {

//! The flag of call number `seq` (see the file comment): never 0 (a zeroed
//! region holds no call's words) and never equal for calls 2 apart.
CHORUS_HD constexpr std::uint32_t ll_flag(std::uint64_t seq) {
    return static_cast<std::uint32_t>(seq % 0xffffffffull) + 1u;
}

CHORUS_HD inline void ll_store(std::uint64_t* p, std::uint32_t data, std::uint32_t flag) {
    atomic_ref<std::uint64_t>(*p).store(std::uint64_t(flag) << 32 | data, mo::memory_order_relaxed);
}
CHORUS_HD inline std::uint64_t ll_load(std::uint64_t* p) {
    return atomic_ref<std::uint64_t>(*p).load(mo::memory_order_relaxed);
}

//! 4 bytes of `src` from byte `b`, those at or past `len` as zeros (any
//! alignment of `src`).
CHORUS_HD inline std::uint32_t ll_pack(const unsigned char* src, std::uint64_t b, std::uint64_t len) {
    std::uint32_t v = 0;
    if (b + 4 <= len) {
        if ((reinterpret_cast<std::uintptr_t>(src + b) & 3u) == 0) {
            std::memcpy(&v, __builtin_assume_aligned(src + b, 4), 4);
            return v;
        }
        std::memcpy(&v, src + b, 4);
        return v;
    }
    unsigned char t[4] = {0, 0, 0, 0};
    for (std::uint64_t k = 0; k < 4 && b + k < len; ++k) t[k] = src[b + k];
    std::memcpy(&v, t, 4);
    return v;
}

//! Writes `len` (<= 16) bytes of `src` (16-byte aligned) to `dst`, any alignment.
CHORUS_HD inline void ll_write(unsigned char* dst, const unsigned char* src, std::uint64_t len) {
    if (len == 16 && (reinterpret_cast<std::uintptr_t>(dst) & 15u) == 0) {
        vec16 v;
        std::memcpy(&v, src, 16);
        store16(dst, v);
        return;
    }
    if ((reinterpret_cast<std::uintptr_t>(dst) & 3u) == 0 && len % 4 == 0) {
        for (std::uint64_t k = 0; k < len; k += 4) {
            std::uint32_t v;
            std::memcpy(&v, src + k, 4);
            std::memcpy(__builtin_assume_aligned(dst + k, 4), &v, 4);
        }
        return;
    }
    for (std::uint64_t k = 0; k < len; ++k) dst[k] = src[k];
}

//! Records a lane's failure in the group's cell (the first one stays).
CHORUS_HD inline void ll_record(std::uint32_t& cell, status st, int peer) {
    std::uint32_t expect = 0;
    atomic_ref<std::uint32_t>(cell).compare_exchange_strong(
        expect, (static_cast<std::uint32_t>(st) << 16) | static_cast<std::uint32_t>(peer + 1),
        mo::memory_order_relaxed, mo::memory_order_relaxed);
}
CHORUS_HD inline std::uint32_t ll_failed(std::uint32_t& cell) {
    return atomic_ref<std::uint32_t>(cell).load(mo::memory_order_relaxed);
}

//! The executor's view of one LL call (the phases of the file comment).
template <class T, class Op, class Lanes>
struct ll_run {
    lane_env<T, Op, Lanes>& env;
    const ll_schedule& s;
    std::uint32_t flag;
    unsigned par;
    std::uint64_t fp;          //!< this rank's call fingerprint
    std::uint64_t words;       //!< the largest slot this call uses, in words
    std::uint64_t slot_words;  //!< the world's slot size

    CHORUS_HD std::uint64_t* word(int owner, int src, std::uint64_t w) const {
        return env.world.ll[owner] + (std::uint64_t(par) * std::uint64_t(env.world.nranks) + std::uint64_t(src)) *
                                         slot_words +
               w;
    }
    //! Peer i (0 .. n-2) of this rank, starting after it (ranks do not all start with rank 0).
    CHORUS_HD int peer(std::uint64_t i) const {
        const int n = env.world.nranks;
        return int((std::uint64_t(env.me) + 1 + i) % std::uint64_t(n));
    }

    //! Rank q has registered call `seq` (flag word) with a call other than ours.
    CHORUS_HD bool registered_other(int q) const {
        const std::uint64_t f = flag_load_acquire(&env.world.areas[q]->flags[0].value);
        if ((f >> 32) != env.seq) return false;
        return !env.world.areas[q]->desc[env.seq & 1][0].sig.same_call(env.sig);
    }
    //! Rank q's header for this call has arrived and differs from ours.
    CHORUS_HD bool header_differs(int q) const {
        const std::uint64_t h0 = ll_load(word(env.me, q, 0));
        const std::uint64_t h1 = ll_load(word(env.me, q, 1));
        if (std::uint32_t(h0 >> 32) != flag || std::uint32_t(h1 >> 32) != flag) return false;
        return (std::uint64_t(std::uint32_t(h1)) << 32 | std::uint32_t(h0)) != fp;
    }

    //! Polls word w of q's slot in this rank's region until it is this
    //! call's; its data in `data`. Bounded by the deadline and the abort
    //! word; stops early when another lane failed.
    CHORUS_HD status poll(int q, std::uint64_t w, std::uint32_t& data) const {
        std::uint64_t* p = word(env.me, q, w);
        for (unsigned i = 1;; ++i) {
            const std::uint64_t v = ll_load(p);
            if (std::uint32_t(v >> 32) == flag) {
                data = std::uint32_t(v);
                return status::ok;
            }
            env.lanes.relax();
            if ((i & 63u) == 0) {
                if (ll_failed(env.sh.ll_fail) != 0) return status::aborted; // another lane's failure stands
                if (header_differs(q) || registered_other(q)) return status::mismatch;
                if ((i & 1023u) == 0 && env.aborted()) return status::aborted;
                if (env.lanes.now_ns() > env.deadline_ns) return env.aborted() ? status::aborted : status::timeout;
            }
        }
    }

    //! Waits (acquire) until `cell` reaches `v`: a peer's acknowledgement
    //! in this rank's area, or a peer's progress flag.
    CHORUS_HD status wait_ack(std::uint64_t* cell, std::uint64_t v) const {
        for (unsigned i = 1;; ++i) {
            if (flag_load_acquire(cell) >= v) return status::ok;
            env.lanes.relax();
            if ((i & 63u) == 0) {
                if ((i & 1023u) == 0 && env.aborted()) return status::aborted;
                if (env.lanes.now_ns() > env.deadline_ns) return env.aborted() ? status::aborted : status::timeout;
            }
        }
    }

    //! The 16 bytes of chunk k of rank q's contribution (zero past `len`),
    //! as 4 data words: this rank's own from `mine`, a peer's from its slot.
    CHORUS_HD status fetch(int q, const unsigned char* mine, std::uint64_t k, std::uint64_t len,
                           std::uint32_t (&raw)[4]) const {
        const std::uint64_t b = 16 * k;
        for (int j = 0; j < 4; ++j) {
            const std::uint64_t at = b + 4 * std::uint64_t(j);
            raw[j] = 0;
            if (at >= len) continue;
            if (q == env.me) {
                raw[j] = ll_pack(mine, at, len);
                continue;
            }
            const std::uint64_t v = ll_load(word(env.me, q, ll_header_words + at / 4));
            if (std::uint32_t(v >> 32) == flag) raw[j] = std::uint32_t(v);
            else if (const status st = poll(q, ll_header_words + at / 4, raw[j]); st != status::ok) return st;
        }
        return status::ok;
    }
};

//! Runs LL schedule `s` for this rank (see the file comment); `in`/`out`
//! as the launch's. Every lane calls it and gets the same status.
CHORUS_HD_TEMPLATE
template <class T, class Op, class Lanes>
CHORUS_HD status run_ll(lane_env<T, Op, Lanes>& env, const ll_schedule& s, const T* in, T* out) {
    const Lanes& lanes = env.lanes;
    const lane_world& w = env.world;
    const int n = w.nranks;
    const int me = env.me;
    const std::uint64_t L = std::uint64_t(lanes.count());
    const std::uint64_t id = std::uint64_t(lanes.id());
    const std::uint64_t eb = sizeof(T);
    const std::uint64_t P = s.count * eb; // the largest payload of any pair
    ll_run<T, Op, Lanes> r{env, s, ll_flag(env.seq), unsigned(env.seq & 1), env.sig.hash(), ll_slot_words(P),
                           w.ll_slot_words};
    lane_rank_area* own = w.areas[me];
    std::uint32_t& cell = env.sh.ll_fail;
    // (cell was cleared by lane 0 in run_lane_channel, before a barrier.)
    // Every lane leaves alike on a failure, after a barrier.
    // Two barriers: every lane's record is in before any lane reads the
    // cell, and every lane has read it before any lane (going on to the
    // next phase) may record again.
    auto failed = [&]() -> status {
        lanes.sync();
        const std::uint32_t f = ll_failed(cell);
        lanes.sync();
        if (f == 0) return status::ok;
        const status st = static_cast<status>(f >> 16);
        const int q = int(f & 0xffffu) - 1;
        if (id == 0) {
            env.bad_peer = q;
            env.bad_unit = 0;
            if (st == status::mismatch && q >= 0 && q != me) {
                // The peer's published call, for the report (it registered
                // before pushing; wait for that to be visible, boundedly).
                for (unsigned i = 1;; ++i) {
                    if ((flag_load_acquire(&w.areas[q]->flags[0].value) >> 32) >= env.seq) {
                        env.theirs = w.areas[q]->desc[env.seq & 1][0].sig;
                        break;
                    }
                    lanes.relax();
                    if ((i & 63u) == 0 && lanes.now_ns() > env.deadline_ns) break;
                }
            }
        }
        return st;
    };
    if (r.words > r.slot_words || s.nranks != n) { // the planner never makes one: defensive
        if (id == 0) ll_record(cell, status::unreachable, me);
        return failed();
    }

    // 0. Reuse guard (see the file comment), one lane per peer.
    for (std::uint64_t i = id; i < std::uint64_t(n - 1); i += L) {
        const int q = r.peer(i);
        const status st = r.wait_ack(&own->ll_ack[q], own->ll_sent[q][r.par]);
        if (st != status::ok) ll_record(cell, st, q);
        else own->ll_sent[q][r.par] = env.seq;
    }
    if (const status st = failed(); st != status::ok) return st;

    // 1. Push: (peer, word) pairs, neighbouring lanes on neighbouring words.
    const unsigned char* src =
        reinterpret_cast<const unsigned char*>(s.coll == collective::broadcast ? static_cast<const T*>(out) : in);
    const std::uint64_t items = std::uint64_t(n - 1) * r.words;
    for (std::uint64_t t = id; t < items; t += L) {
        const std::uint64_t wd = t % r.words;
        const int q = r.peer(t / r.words);
        const std::uint64_t len = s.payload(me, q);
        if (wd >= ll_slot_words(len)) continue;
        std::uint32_t data;
        if (wd < ll_header_words) data = wd == 0 ? std::uint32_t(r.fp) : std::uint32_t(r.fp >> 32);
        else data = ll_pack(src + s.send_offset(q) * eb, (wd - ll_header_words) * 4, len);
        ll_store(r.word(q, me, wd), data, r.flag);
    }

    // 2. Poll: first one item per peer, its registration of this call
    // (acquire: see "Order with the other calls" in the file comment),
    // then the (source, word) pairs, the headers compared on arrival. All
    // at once over the lanes: the registration was published before the
    // push, so it costs no round trip of its own.
    const std::uint64_t regs = std::uint64_t(n - 1);
    for (std::uint64_t t = id; t < regs + items; t += L) {
        if (t < regs) {
            const int q = r.peer(t);
            const status st = r.wait_ack(&w.areas[q]->flags[0].value, env.seq << 32);
            if (st != status::ok) {
                ll_record(cell, st, q);
                break;
            }
            continue;
        }
        const std::uint64_t wd = (t - regs) % r.words;
        const int q = r.peer((t - regs) / r.words);
        if (wd >= ll_slot_words(s.payload(q, me))) continue;
        std::uint32_t data = 0;
        status st = r.poll(q, wd, data);
        if (st == status::ok && wd < ll_header_words && data != std::uint32_t(wd == 0 ? r.fp : r.fp >> 32))
            st = status::mismatch;
        if (st != status::ok) {
            ll_record(cell, st, q);
            break;
        }
    }
    if (const status st = failed(); st != status::ok) return st;

    // 3. Reduce or copy, 16-byte chunks over the lanes.
    unsigned char* ob = reinterpret_cast<unsigned char*>(out);
    const unsigned char* ib = reinterpret_cast<const unsigned char*>(in);
    const std::uint64_t chunks = (P + 15) / 16;
    if (s.reduces()) {
        if constexpr (sizeof(T) > 16 || 16 % sizeof(T) != 0) {
            if (id == 0) ll_record(cell, status::unreachable, me); // never planned (ll_fits)
        } else if (!(s.coll == collective::reduce && me != s.root)) {
            const unsigned char* mine = ib + s.send_offset(me) * eb;
            using A = accum_t<T>;
            constexpr int W = int(16 / sizeof(T));
            for (std::uint64_t k = id; k < chunks; k += L) {
                const std::uint64_t len = P - 16 * k < 16 ? P - 16 * k : 16;
                const int m = int(len / eb); // elements in this chunk
                alignas(16) std::uint32_t raw[4];
                status st = status::ok;
                if constexpr (std::is_default_constructible_v<T> && std::is_default_constructible_v<A>) {
                    T x[W];
                    A acc[W];
                    st = r.fetch(0, mine, k, P, raw);
                    std::memcpy(static_cast<void*>(x), raw, sizeof(T) * W);
                    for (int j = 0; j < m; ++j) acc[j] = static_cast<A>(x[j]);
                    for (int q = 1; q < n && st == status::ok; ++q) {
                        st = r.fetch(q, mine, k, P, raw);
                        std::memcpy(static_cast<void*>(x), raw, sizeof(T) * W);
                        for (int j = 0; j < m; ++j) acc[j] = static_cast<A>(env.op(acc[j], static_cast<A>(x[j])));
                    }
                    if (st == status::ok) {
                        for (int j = 0; j < m; ++j) x[j] = static_cast<T>(finish(env.op, acc[j], n));
                        std::memcpy(raw, static_cast<const void*>(x), sizeof(T) * W);
                        ll_write(ob + 16 * k, reinterpret_cast<const unsigned char*>(raw), len);
                    }
                } else {
                    // Element by element (T or its accumulator has no default constructor).
                    for (int j = 0; j < m && st == status::ok; ++j) {
                        st = r.fetch(0, mine, k, P, raw);
                        if (st != status::ok) break;
                        A acc = static_cast<A>(*reinterpret_cast<const T*>(reinterpret_cast<const unsigned char*>(raw) + j * eb));
                        for (int q = 1; q < n && st == status::ok; ++q) {
                            st = r.fetch(q, mine, k, P, raw);
                            if (st == status::ok)
                                acc = static_cast<A>(env.op(
                                    acc, static_cast<A>(*reinterpret_cast<const T*>(
                                             reinterpret_cast<const unsigned char*>(raw) + j * eb))));
                        }
                        if (st != status::ok) break;
                        const T v = static_cast<T>(finish(env.op, acc, n));
                        std::memcpy(static_cast<void*>(ob + 16 * k + j * eb), static_cast<const void*>(&v), eb);
                    }
                }
                if (st != status::ok) {
                    ll_record(cell, st, me);
                    break;
                }
            }
        }
    } else {
        // AllGather: block q of out from q (this rank's own from its input
        // unless in place); Broadcast: the root's payload, on the others.
        const bool gather = s.coll == collective::all_gather;
        const int sources = gather ? n : (me == s.root ? 0 : 1);
        const std::uint64_t all = std::uint64_t(sources) * chunks;
        for (std::uint64_t t = id; t < all; t += L) {
            const int q = gather ? int(t / chunks) : s.root;
            const std::uint64_t k = t % chunks;
            if (q == me && s.in_place) continue;
            const std::uint64_t len = P - 16 * k < 16 ? P - 16 * k : 16;
            alignas(16) std::uint32_t raw[4];
            const status st = r.fetch(q, ib, k, P, raw);
            if (st != status::ok) {
                ll_record(cell, st, q);
                break;
            }
            ll_write(ob + (gather ? std::uint64_t(q) * P : 0) + 16 * k, reinterpret_cast<const unsigned char*>(raw),
                     len);
        }
    }
    if (const status st = failed(); st != status::ok) return st;

    // 4. Acknowledge (after the barrier in failed(): every lane's reads are done).
    for (std::uint64_t i = id; i < std::uint64_t(n - 1); i += L) {
        const int q = r.peer(i);
        atomic_ref<std::uint64_t>(w.areas[q]->ll_ack[me]).store(env.seq, mo::memory_order_release);
    }
    return status::ok;
}

} // namespace chorus::detail
