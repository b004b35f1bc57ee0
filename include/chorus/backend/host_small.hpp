#pragma once
//! \file backend/host_small.hpp
//! The small-message protocol of the host transports (threads; MPI when
//! every rank shares one node): what a call marked call::small runs
//! instead of a schedule (`automatic`'s AllReduce of at most the model's
//! small_bytes, and every barrier).
//!
//! Each rank owns two boxes in memory its peers can read (threads: the
//! world's rank slots; MPI: the node segment), used by calls of odd and
//! even sequence numbers. A call copies the rank's input into its box for
//! the call (up to 48 bytes in the one cache line that also holds the
//! sequence number and the call's 64-bit hash), posts the sequence number
//! (release), reads every rank's box for the call, compares the hashes
//! (checked mode: the whole signatures) and folds the inputs in rank
//! order into the output: the same fold on every rank, as deterministic<>
//! requires. No descriptor, no progress flags, no final wait. A box is
//! rewritten only once every peer has entered the call after the one that
//! last used it (a rank that saw every peer at the previous call, as a
//! small call does, needs no wait for that): having entered it, a peer
//! has finished reading. Peers never read the caller's buffers, so a
//! failing rank hands them back at once. A peer found at the same call on
//! the scheduled path made a different call: a mismatch, found at once.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../core/collective.hpp"
#include "../core/error.hpp"
#include "../core/signature.hpp"
#include "../exec/host_kernel.hpp"
#include "host_common.hpp"
#include "transport.hpp"

namespace chorus::detail {

//! The most bytes of data a call may have to run with the small-message
//! protocol; the model's small_bytes (model/cost.hpp) chooses up to
//! where, within this.
inline constexpr std::uint64_t host_small_cap = 4096;

//! One of a rank's two boxes, indexed by seq & 1. The owner writes data,
//! hash and record, then `seq` (release); a peer reads them after an
//! acquire load of `seq` that shows its call. Trivially destructible and
//! address-free: it may live in memory shared between processes.
struct alignas(64) small_box {
    static constexpr std::uint64_t line_bytes = 48;
    unsigned char line[line_bytes];            //!< the data of a call of at most line_bytes
    std::atomic<std::uint64_t> seq{0};         //!< the call whose data this box holds
    std::uint64_t hash = 0;                    //!< call_signature::hash() of that call
    alignas(64) unsigned char rest[host_small_cap]; //!< the data of a larger call
    call_text rec{};                           //!< the call in full, names as text: read only to compare and report

    unsigned char* data(std::uint64_t bytes) { return bytes <= line_bytes ? line : rest; }
    const unsigned char* data(std::uint64_t bytes) const { return bytes <= line_bytes ? line : rest; }
};

//! What one rank keeps between small calls.
struct small_state {
    std::uint64_t seen = 0;       //!< the latest call at which it saw every peer
    std::vector<const void*> src; //!< the fold's sources, one per rank
    std::vector<descriptor> calls; //!< checked mode's report: every rank's call
};

//! What went wrong in a small call, for the transport's error.
struct small_failure {
    status st = status::ok;
    int peer = -1;   //!< the rank waited for, or that disagreed
    std::string why; //!< a mismatch, described
};

//! One call of the protocol on rank `rank` of `n` (see the file comment).
//! Env gives the transport's side:
//!   small_box& box(int q, unsigned parity)    rank q's box (this rank's is written)
//!   std::uint64_t entered(int q)              the latest call q entered, by either path
//!   std::uint64_t scheduled(int q)            the latest call q entered by the scheduled path
//!   bool scheduled_call(int q, std::uint64_t seq, descriptor& d)
//!                                             q's call `seq` as the scheduled path published
//!                                             it (false: not readable)
//!   void posted()                             this rank posted a box (wake sleeping peers)
//!   template <class R> status wait(int q, R ready)
//!                                             until ready(); bounded by the deadline, the
//!                                             abort state and q's liveness
//! The fold runs the call's erased kernel; an exception from the operator
//! propagates (the transport breaks the communicator).
template <class Env>
small_failure run_small_call(Env& env, const call& cl, const host_kernel& k, int rank, int n, small_state& state) {
    small_failure f;
    const std::uint64_t seq = cl.seq;
    const unsigned parity = unsigned(seq & 1);
    const std::uint64_t bytes = cl.coll == collective::barrier ? 0 : cl.count * k.types.elem_bytes;

    // Reuse: box seq & 1 last carried a call before seq - 1.
    if (state.seen + 1 < seq)
        for (int q = 0; q < n && f.st == status::ok; ++q)
            if (q != rank) {
                f.st = env.wait(q, [&] { return env.entered(q) + 1 >= seq; });
                if (f.st != status::ok) f.peer = q;
            }
    if (f.st != status::ok) return f;

    small_box& mine = env.box(rank, parity);
    descriptor me{};
    describe_call(me, cl, 1);
    mine.rec.set(me);
    mine.hash = me.sig.hash();
    if (bytes != 0) std::memcpy(mine.data(bytes), cl.in, bytes);
    mine.seq.store(seq, std::memory_order_release);
    env.posted();

    // Every rank's box for this call, in rank order, compared as it comes.
    const bool full = cl.settings.checked;
    state.src.resize(static_cast<std::size_t>(n));
    auto describe = [&](int q, const descriptor& d) {
        return "rank " + std::to_string(rank) + " called " + me.call() + " but rank " + std::to_string(q) +
               " called " + d.call();
    };
    for (int q = 0; q < n && f.st == status::ok; ++q) {
        const small_box& b = env.box(q, parity);
        if (q != rank) {
            f.st = env.wait(q, [&] {
                return b.seq.load(std::memory_order_acquire) >= seq || env.scheduled(q) >= seq;
            });
            if (f.st != status::ok) {
                f.peer = q;
                break;
            }
            if (b.seq.load(std::memory_order_acquire) < seq) { // q took the scheduled path: another call
                f.st = status::mismatch;
                f.peer = q;
                descriptor d{};
                f.why = env.scheduled_call(q, seq, d)
                            ? describe(q, d)
                            : "rank " + std::to_string(rank) + " called " + me.call() + " but rank " +
                                  std::to_string(q) + " called a different collective";
                break;
            }
            if (b.hash != mine.hash || (full && !b.rec.to_descriptor().same_call(me))) {
                f.st = status::mismatch;
                f.peer = q;
                f.why = describe(q, b.rec.to_descriptor());
                break;
            }
        }
        state.src[static_cast<std::size_t>(q)] = b.data(bytes);
    }
    if (f.st == status::mismatch && full) {
        // Checked mode's report: every rank's call, once each has entered it.
        state.calls.assign(static_cast<std::size_t>(n), me);
        for (int q = 0; q < n; ++q) {
            if (q == rank) continue;
            const small_box& b = env.box(q, parity);
            const status got = env.wait(q, [&] {
                return b.seq.load(std::memory_order_acquire) >= seq || env.scheduled(q) >= seq;
            });
            descriptor& d = state.calls[static_cast<std::size_t>(q)];
            if (got != status::ok) continue;
            if (b.seq.load(std::memory_order_acquire) >= seq) d = b.rec.to_descriptor();
            else if (!env.scheduled_call(q, seq, d)) {
                d = descriptor{}; // unknown: listed as a call of its own
                d.type_name = d.op_name = d.algo_name = "(not published)";
            }
        }
        f.why = calls_report(seq, state.calls);
    }
    if (f.st != status::ok) return f;

    if (bytes != 0) {
        const std::size_t count = static_cast<std::size_t>(cl.count);
        if (n == 2) k.reduce_copy(k.op, cl.out, nullptr, state.src[0], state.src[1], count, n, false);
        else k.reduce_fan(k.op, cl.out, nullptr, state.src.data(), n, count, n);
    }
    state.seen = seq;
    return f;
}

//! The ranks that have not entered call `seq` ("" if every one has), for a
//! timeout's message.
template <class Env>
std::string small_absent(Env& env, int n, std::uint64_t seq) {
    std::string absent;
    for (int r = 0; r < n; ++r)
        if (env.entered(r) < seq) absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    return absent.empty() ? std::string("every rank has entered it") : "ranks that have not joined it: " + absent;
}

} // namespace chorus::detail
