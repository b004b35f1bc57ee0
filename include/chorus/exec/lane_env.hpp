#pragma once
//! \file exec/lane_env.hpp
//! The lane executor: one channel of one rank run by a group of lanes that
//! share the work of every step. On a GPU the lanes are the threads of one
//! block (kernels/collective.cuh); in the CPU lane test they are CPU
//! threads with a barrier. Everything here is __host__ __device__ and is
//! compiled for both, so the CPU suite drives the very code the kernels
//! run: the rank program (exec/rank_program.hpp), the flag protocol, the
//! descriptor exchange, the mismatch check, the deadline and abort checks,
//! and the lane-parallel reduce-copy (exec/lane_reduce_copy.hpp).
//!
//! Memory every rank can reach (device memory with peer access, or host
//! memory): one lane_rank_area per rank holding its progress flag, its
//! buffer descriptors and its own collective counter per channel. The
//! counter lives in that memory (not in the launch), so a launch replayed
//! from a CUDA graph runs as the next collective.
//!
//! Address spaces. With every rank in one process (one address space) a
//! rank dereferences the in/out/scratch pointers its peers publish as they
//! are (lane_world::maps null). With one process per device each process
//! maps its peers' memory (CUDA IPC; on a CPU POSIX shared memory, see
//! backend/lane_process.hpp) at addresses of its own, so a peer's pointer
//! is translated through the reader's lane_peer_map of that peer: the
//! whole extent a step touches must lie in one range the reader mapped, or
//! the step fails with status::unreachable (the peer passed memory it
//! neither registered nor staged) and nothing is dereferenced.
//!
//! Lanes interface:
//!   int id() const; int count() const;
//!   void sync() const;                 // barrier of all lanes
//!   template <class V> V share(V) const;  // lane 0's value, to every lane (includes a barrier)
//!   std::uint64_t now_ns() const;      // a monotonic clock
//!   void relax() const;                // called between polls of a flag

#include <cstdint>
#include <new>

#include "../algo/schedule.hpp"
#include "../core/signature.hpp"
#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "lane_reduce_copy.hpp"
#include "rank_program.hpp"

namespace chorus::detail {

//! Most ranks a lane communicator may have (fan-in table, checked-peer bitmap).
inline constexpr int max_lane_ranks = 64;

//! What ranks compare in checked mode (and on first contact always).
//! What a rank's kernel compares with its peers' (core/signature.hpp).
using lane_signature = call_signature;

//! One rank's buffers for one collective on one channel.
struct lane_desc {
    const void* in = nullptr;
    void* out = nullptr;
    void* scratch = nullptr;
    lane_signature sig{};
};

struct alignas(128) lane_flag {
    std::uint64_t value = 0;
};

//! Point-to-point (exec/lane_p2p.hpp): what a sender publishes for one
//! destination, in the sender's own area. `posted` and `cancelled` are
//! message numbers (1, 2, ... per ordered pair); the descriptor fields
//! are written before `posted` (release).
struct alignas(128) lane_p2p_out {
    std::uint64_t posted = 0;    //!< the latest message published to that peer
    std::uint64_t cancelled = 0; //!< the latest message the sender withdrew (its wait failed)
    const void* buf = nullptr;   //!< the data, in the sender's address space
    std::uint64_t count = 0;     //!< elements
    std::uint64_t elem_bytes = 0;
    std::uint64_t type_id = 0;
    std::uint64_t sent = 0; //!< messages this rank issued to that peer (read and written by this rank only)
};

//! Point-to-point: what a receiver publishes for one source, in the
//! receiver's own area. `state` is (message number << 3) | lane_p2p_phase
//! and only grows; the count, element size and type are the receive's,
//! written before a mismatch is posted.
struct alignas(128) lane_p2p_in {
    std::uint64_t state = 0;
    std::uint64_t count = 0;
    std::uint64_t elem_bytes = 0;
    std::uint64_t type_id = 0;
    std::uint64_t received = 0; //!< messages this rank received from that peer (this rank only)
};

//! A rank's state that its peers read.
struct lane_rank_area {
    lane_flag flags[max_channels];
    lane_desc desc[2][max_channels]; //!< [seq & 1][channel]
    //! Collectives this rank ran, one counter per channel (each read and
    //! written only by that channel's block) kept equal: channel 0 also
    //! advances the channels a collective does not use, so every channel
    //! of a rank numbers a collective alike (an every_channel wait compares
    //! another channel's flag with this channel's number).
    std::uint64_t seq[max_channels];
    //! Point-to-point, per peer: [q] is this rank's side of the pair
    //! (this rank -> q) and (q -> this rank). Independent of the
    //! collectives' flags and counters.
    lane_p2p_out p2p_out[max_lane_ranks];
    lane_p2p_in p2p_in[max_lane_ranks];
    //! The LL protocol (exec/lane_ll.hpp), per peer q. ll_ack[q]: the
    //! latest LL call whose slot from this rank q has finished reading in
    //! its own region (written by q, release). ll_sent[q][parity]: the
    //! latest call in which this rank wrote its slot of that parity in q's
    //! region (this rank only).
    alignas(128) std::uint64_t ll_ack[max_lane_ranks];
    std::uint64_t ll_sent[max_lane_ranks][2];
    //! Group launch (exec/lane_group.hpp): the barrier the blocks of this
    //! rank's grouped launch pass between two calls. group_arrived counts
    //! the blocks at the barrier (the last one resets it), group_gen counts
    //! the barriers passed; both only this rank's blocks touch.
    alignas(128) std::uint32_t group_arrived;
    std::uint32_t group_gen;
};

//! Most address ranges a reader maps of one peer: the peer's scratch and up
//! to 15 registered buffers.
inline constexpr int max_lane_ranges = 16;

//! One range of a peer's memory: [their_base, their_base + bytes) in the
//! peer's address space is [my_base, my_base + bytes) in the reader's.
struct lane_range {
    std::uint64_t their_base = 0;
    std::uint64_t my_base = 0;
    std::uint64_t bytes = 0;
};

//! What a reader can reach of one peer's memory (plain data: it lives
//! where the executor reads it, device memory on a GPU).
struct lane_peer_map {
    lane_range ranges[max_lane_ranges];
    int count = 0; //!< ranges in use

    //! The reader's address of the peer's `p`, when [p, p + bytes) lies
    //! whole in one range; else null (so is a null `p`).
    CHORUS_HD unsigned char* translate(const void* p, std::uint64_t bytes) const {
        if (p == nullptr) return nullptr;
        const std::uint64_t a = reinterpret_cast<std::uint64_t>(p);
        for (int i = 0; i < count; ++i) {
            const lane_range& r = ranges[i];
            // a - their_base <= r.bytes first: the subtraction below cannot wrap.
            if (a >= r.their_base && a - r.their_base <= r.bytes && bytes <= r.bytes - (a - r.their_base))
                return reinterpret_cast<unsigned char*>(r.my_base + (a - r.their_base));
        }
        return nullptr;
    }
};

//! The first failure of a rank, for the host to report.
struct lane_fault {
    int code = 0; //!< a detail::status; 0: none
    int peer = -1;
    int channel = 0;
    std::uint32_t pad = 0;
    std::uint64_t unit = 0;
    lane_signature theirs{}; //!< mismatch: the peer's call (point-to-point: its count, elem_bytes, type_id)
    //! Point-to-point failures (exec/lane_p2p.hpp): 1 a send, 2 a receive;
    //! 0 a collective. `peer` is the other side, `unit` the message number.
    int p2p = 0;
    std::uint32_t pad2 = 0;
    std::uint64_t p2p_count = 0;      //!< this rank's count
    std::uint64_t p2p_elem_bytes = 0; //!< this rank's element size
};

//! The world as one device (or the CPU) sees it.
struct lane_world {
    lane_rank_area* const* areas = nullptr; //!< [nranks]
    std::uint32_t* abort = nullptr;         //!< nonzero: every wait fails
    lane_fault* faults = nullptr;           //!< [nranks]
    int nranks = 1;
    //! [nranks]: how this process reaches each peer's buffers (its own
    //! entry unused); null: one address space, pointers used as published.
    const lane_peer_map* maps = nullptr;
    //! [nranks]: each rank's LL receive region as this process addresses
    //! it (exec/lane_ll.hpp: 2 x nranks slots of ll_slot_words 8-byte
    //! words); null: no LL protocol (LL schedules run their fallback).
    std::uint64_t* const* ll = nullptr;
    std::uint64_t ll_slot_words = 0;
};

//! Records `st` as this rank's failure unless one is recorded already (the
//! first stays), with what `what` says of it, and sets the abort word:
//! every wait of every rank then fails.
CHORUS_HD inline void record_lane_fault(const lane_world& w, int rank, const lane_fault& what, status st) {
    lane_fault& f = w.faults[rank];
    // Channels of one rank may fail at once: the first to claim the record
    // (code 0 -> the status, atomically) fills it. The host reads it after
    // the rank's work has ended.
    int expected = 0;
    if (atomic_ref<int>(f.code).compare_exchange_strong(expected, static_cast<int>(st), mo::memory_order_acq_rel,
                                                         mo::memory_order_relaxed)) {
        f.peer = what.peer;
        f.channel = what.channel;
        f.unit = what.unit;
        f.theirs = what.theirs;
        f.p2p = what.p2p;
        f.p2p_count = what.p2p_count;
        f.p2p_elem_bytes = what.p2p_elem_bytes;
    }
    atomic_ref<std::uint32_t>(*w.abort).store(1, mo::memory_order_release);
}

//! A launch's operator, kept as bytes: Op need not be default-constructible
//! or assignable (a `__host__ __device__` lambda is neither), only
//! trivially copyable, as `reduction` requires.
template <class Op>
struct op_box {
    alignas(Op) unsigned char bytes[sizeof(Op)] = {};
    void set(const Op& o) { ::new (static_cast<void*>(bytes)) Op(o); }
    CHORUS_HD const Op& get() const { return *reinterpret_cast<const Op*>(bytes); }
};

//! Everything one rank's launch needs: the same for every channel.
template <class T, class Op, class Schedule>
struct lane_launch {
    Schedule sch{};
    lane_world world{};
    int rank = 0;
    const T* in = nullptr;
    T* out = nullptr;
    T* scratch = nullptr;
    lane_signature sig{};
    std::uint64_t timeout_ns = 0;
    bool checked = false; //!< compare calls with every rank before moving data (else: with the peers touched)
    op_box<Op> op{};
};

//! Per lane group scratch the executor needs (shared memory on a GPU).
template <class T>
struct lane_shared {
    const T* fan[max_lane_ranks];
    std::uint64_t checked[max_lane_ranks / 64];
    std::uint32_t ll_fail; //!< the LL protocol: the first failing lane's (status << 16 | (peer + 1)), 0: none
};

template <class T, class Op, class Lanes>
struct lane_env {
    const Lanes& lanes;
    lane_world world;
    lane_shared<T>& sh;
    int me;
    std::uint64_t seq;
    std::uint64_t deadline_ns;
    lane_signature sig;
    lane_desc mine;
    Op op;
    // Where a wait failed (lane 0 only).
    int bad_peer = -1;
    std::uint64_t bad_unit = 0;
    lane_signature theirs{};
    std::uint64_t posted = 0; //!< units this channel posted (lane 0 only): the unit execute() runs

    CHORUS_HD bool aborted() const {
        return atomic_ref<std::uint32_t>(*world.abort).load(mo::memory_order_acquire) != 0;
    }

    //! Lane 0 spins on the peer's flag; the outcome goes to every lane.
    //! The abort word may live in host memory (mapped pinned memory on a
    //! GPU: each read crosses PCIe and they queue behind each other), so a
    //! flag that is already set costs no read of it: the deadline is looked
    //! at every 64 polls, the abort word every 1024.
    CHORUS_HD status poll(int peer, int c, std::uint64_t target) {
        std::uint64_t* word = &world.areas[peer]->flags[c].value;
        for (unsigned i = 1;; ++i) {
            if (flag_load_acquire(word) >= target) return status::ok;
            lanes.relax();
            if ((i & 63u) == 0) {
                if ((i & 1023u) == 0 && aborted()) return status::aborted;
                if (lanes.now_ns() > deadline_ns) return aborted() ? status::aborted : status::timeout;
            }
        }
    }

    CHORUS_HD status wait(int peer, int c, std::uint64_t units) {
        int st = 0;
        if (lanes.id() == 0) {
            status s = status::ok;
            // First contact with this peer in this collective: once it has
            // registered, compare its call with ours before trusting its
            // buffers or waiting for progress it may never make.
            const std::uint64_t bit = std::uint64_t(1) << (peer % 64);
            if (s == status::ok && (sh.checked[peer / 64] & bit) == 0) {
                s = poll(peer, c, seq << 32);
                if (s == status::ok) {
                    const lane_signature o = world.areas[peer]->desc[seq & 1][c].sig;
                    if (!o.same_call(sig)) {
                        theirs = o;
                        s = status::mismatch;
                    }
                }
                sh.checked[peer / 64] |= bit;
            }
            if (s == status::ok) s = poll(peer, c, (seq << 32) | units);
            if (s != status::ok) {
                bad_peer = peer;
                bad_unit = units;
            }
            st = static_cast<int>(s);
        }
        return static_cast<status>(lanes.share(st));
    }

    CHORUS_HD void post(int c, std::uint64_t units) {
        lanes.sync(); // every lane's stores precede the release below
        if (lanes.id() == 0) {
            // A release at system scope: it carries the other lanes' stores
            // too (they are ordered before it by the barrier above), so no
            // separate __threadfence_system() (a second MEMBAR.SYS per post).
            flag_store_release(&world.areas[me]->flags[c].value, (seq << 32) | units);
            posted = units;
        }
    }

    //! Where operand `o` starts, for a step that touches `count` elements
    //! from there. A peer's pointer is translated when the world has maps:
    //! null when [start, start + count) is not in one range this process
    //! mapped of that peer (execute() then fails the step).
    CHORUS_HD T* base(const operand& o, int c, std::uint64_t count) const {
        const lane_desc* d = &mine;
        lane_desc peer{};
        if (o.rank != me) {
            const lane_desc& pd = world.areas[o.rank]->desc[seq & 1][c];
            peer.in = pd.in;
            peer.out = pd.out;
            peer.scratch = pd.scratch;
            d = &peer;
        }
        unsigned char* p = operand_address(o, d->in, d->out, d->scratch, sizeof(T));
        if (world.maps != nullptr && o.rank != me) p = world.maps[o.rank].translate(p, count * sizeof(T));
        return reinterpret_cast<T*>(p);
    }

    //! With maps: the rank whose buffer an operand of `a` could not be
    //! reached in (-1: every one was), looked at by every lane alike.
    CHORUS_HD int unreachable_rank(const step& s, const reduce_copy_args<T>& a) const {
        if (a.dst[0] == nullptr) return s.dst.rank;
        if (a.ndst == 2 && a.dst[1] == nullptr) return s.dst2.rank;
        if (s.fan_in >= 2) {
            for (int q = 0; q < int(s.fan_in); ++q)
                if (a.src[q] == nullptr) return s.source_rank(q);
            return -1;
        }
        if (a.src[0] == nullptr) return s.src0.rank;
        if (a.nsrc == 2 && a.src[1] == nullptr) return s.src1.rank;
        return -1;
    }

    int channel = 0;   //!< the channel this env runs (set by run_lane_channel)
    int nchannels = 1; //!< the schedule's channels, each run by its own lane group

    //! Channels run independently of each other (rank_program.hpp's
    //! wait_for then honours wait_spec::every_channel).
    CHORUS_HD int independent_channels() const { return nchannels; }

    CHORUS_HD status execute(const step& s) {
        if (s.count == 0) return status::ok;
        reduce_copy_args<T> a{};
        a.count = s.count;
        a.finish_n = s.finish ? world.nranks : 0;
        a.dst[0] = base(s.dst, channel, s.count);
        a.ndst = 1;
        if (s.dst2.loc != where::none) a.dst[a.ndst++] = base(s.dst2, channel, s.count);
        const T* pair[2];
        if (s.fan_in >= 2) {
            for (int q = lanes.id(); q < int(s.fan_in); q += lanes.count())
                sh.fan[q] = base(s.fan_source(q), channel, s.count);
            lanes.sync();
            a.src = sh.fan;
            a.nsrc = s.fan_in;
        } else {
            pair[0] = base(s.src0, channel, s.count);
            a.nsrc = 1;
            if (s.src1.loc != where::none) pair[a.nsrc++] = base(s.src1, channel, s.count);
            a.src = pair;
        }
        // Every lane sees the same pointers (the fan table after the
        // barrier above), so every lane leaves alike; the next write of the
        // fan table comes after post()'s barrier.
        if (world.maps != nullptr) {
            if (const int bad = unreachable_rank(s, a); bad >= 0) {
                bad_peer = bad;
                bad_unit = posted;
                return status::unreachable;
            }
        }
        lane_reduce_copy(lanes, a, op);
        return status::ok;
    }
};

} // namespace chorus::detail
