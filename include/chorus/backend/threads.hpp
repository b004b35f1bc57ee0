#pragma once
//! \file backend/threads.hpp
//! The threads backend: ranks are threads of one process sharing memory.
//! Zero-copy: for the duration of a collective each rank registers its
//! buffers in a descriptor, and peers read them directly. Progress flags
//! are per (rank, channel); see algo/schedule.hpp for the protocol.
//! AllToAll and the "v" collectives run the exchange schedule
//! (algo/exchange.hpp) whatever the policy.
//!
//! Small messages (`automatic`'s AllReduce up to the model's small_bytes,
//! every barrier) take the small-message protocol instead (run_small): a
//! copy into the rank's own box, one posted line, a read of every rank's
//! box, a fold in rank order; about one cross-core cache-line transfer per
//! call with two ranks.
//!
//! Point-to-point (send/recv): one mailbox per ordered pair (src, dst),
//! messages numbered in issue order on each side. The sender publishes
//! pointer, count and element type and waits; the receiver claims the
//! message, copies it straight from the sender's buffer into its own and
//! acknowledges (or reports a size/type mismatch to both). A sender that
//! gives up (deadline, abort, receiver gone) withdraws its message first,
//! so a late receiver never reads a buffer handed back to the caller; if
//! the receiver already claimed it, the sender waits for the copy, which
//! cannot block. Rendezvous semantics: a send completes once received, so
//! two ranks that both send to each other first (on their in-order
//! streams) wait until the deadline.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#if defined(__unix__)
#  include <unistd.h>
#endif

#include "../core/communicator.hpp"
#include "../core/element.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/log.hpp"
#include "../exec/host_kernel.hpp"
#include "../exec/host_reduce_copy.hpp"
#include "../exec/rank_program.hpp"
#include "../model/file.hpp"
#include "../ops/operators.hpp"
#include "host_common.hpp"
#include "host_small.hpp"
#include "host_wait.hpp"
#include "transport.hpp"

namespace chorus {

namespace detail {
class threads_transport;
}

//! Backend tag: ranks are threads of one process (see run_threads in
//! comm/run_threads.hpp); communicator<threads> runs on detail::threads_transport.
struct threads {
    static constexpr const char* name = "threads";
    using transport = detail::threads_transport;
    //! No calls beyond the common ones.
    template <class Comm>
    struct api {};
};

namespace detail {

//! The comparable part of a descriptor (its signature and names),
//! published under a sequence lock so that a peer may read it while the
//! owner already rewrites it for a later collective: the reader sees
//! either a consistent copy or "moved on". Word 0 is the sequence number,
//! 0 while being written.
struct sig_slot {
    std::atomic<std::uint64_t> word[call_signature::words]{};
    std::atomic<const char*> type_name{""}, op_name{""}, algo_name{""};

    // A sequence lock without fences or locked stores: word 0 is cleared,
    // then every other word is stored with release, so a reader that
    // acquires any new word also sees word 0 cleared when it looks again.
    void store(const descriptor& d) {
        std::uint64_t w[call_signature::words];
        std::memcpy(w, &d.sig, sizeof w);
        word[0].store(0, std::memory_order_relaxed);
        for (int i = 1; i < call_signature::words; ++i) word[i].store(w[i], std::memory_order_release);
        type_name.store(d.type_name, std::memory_order_release);
        op_name.store(d.op_name, std::memory_order_release);
        algo_name.store(d.algo_name, std::memory_order_release);
        word[0].store(w[0], std::memory_order_release);
    }
    //! False when the owner is not (or no longer) at collective `want`.
    bool load(std::uint64_t want, descriptor& d) const {
        if (word[0].load(std::memory_order_acquire) != want) return false;
        std::uint64_t w[call_signature::words];
        w[0] = want;
        for (int i = 1; i < call_signature::words; ++i) w[i] = word[i].load(std::memory_order_acquire);
        d.type_name = type_name.load(std::memory_order_acquire);
        d.op_name = op_name.load(std::memory_order_acquire);
        d.algo_name = algo_name.load(std::memory_order_acquire);
        std::memcpy(&d.sig, w, sizeof w);
        return word[0].load(std::memory_order_relaxed) == want;
    }
};
static_assert(sizeof(call_signature) == sizeof(std::uint64_t) * call_signature::words);

//! What a rank blocked on another rank's small boxes sleeps on.
struct alignas(64) small_wake {
    std::atomic<std::uint32_t> epoch{0};   //!< the futex word: bumped when a box is posted with waiters
    std::atomic<std::uint32_t> waiters{0}; //!< ranks blocked (or about to block) on epoch
};

struct alignas(64) rank_slot {
    descriptor desc[2];            //!< indexed by seq & 1
    sig_slot sig[2];               //!< the same, comparable part, indexed by seq & 1
    //! Sequence number of the collective this rank is executing (0: none):
    //! a failing rank waits until no peer is inside its collective before
    //! handing its buffers back to the caller.
    alignas(64) std::atomic<std::uint64_t> busy_seq{0};
    host_flag flags[max_channels]; //!< one per channel
    small_box box[2];              //!< the small-message protocol's buffers, indexed by seq & 1
    small_wake wake;               //!< where peers wait for this rank's boxes

    //! The latest call this rank has entered, by either protocol.
    std::uint64_t entered() const {
        const std::uint64_t f = flags[0].value.load(std::memory_order_acquire) >> 32;
        const std::uint64_t b0 = box[0].seq.load(std::memory_order_acquire);
        const std::uint64_t b1 = box[1].seq.load(std::memory_order_acquire);
        return std::max(f, std::max(b0, b1));
    }
};

//! Wakes whoever sleeps on `w` (abort, a rank gone).
inline void nudge_wake(small_wake& w) {
    w.epoch.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(w.epoch);
}

//! The phases of one point-to-point message in its mailbox; the mailbox's
//! flag holds (message number << 3) | phase, so it only ever grows.
enum p2p_phase : std::uint64_t {
    p2p_posted = 1,     //!< the sender published the message
    p2p_copying = 2,    //!< the receiver claimed it and copies
    p2p_cancelled = 3,  //!< the sender withdrew it (its call failed)
    p2p_delivered = 4,  //!< copied; the sender may return
    p2p_mismatched = 5, //!< sizes or types differ; both calls fail
};

//! One ordered pair's point-to-point mailbox (see the file comment).
struct alignas(64) mailbox {
    host_flag state;
    std::atomic<const void*> buf{nullptr};
    std::atomic<std::uint64_t> count{0}, elem_bytes{0}, type_id{0};
    std::atomic<const char*> type_name{""};
    //! Written by the receiver before p2p_mismatched: what it expected.
    std::atomic<std::uint64_t> recv_count{0}, recv_elem_bytes{0};
    std::atomic<const char*> recv_type_name{""};
};

//! State shared by the ranks of one threads communicator.
class threads_world {
public:
    explicit threads_world(int n)
        : size_(n), slots_(new rank_slot[static_cast<std::size_t>(n)]),
          gone_(new std::atomic<bool>[static_cast<std::size_t>(n)]) {
        for (int r = 0; r < n; ++r) gone_[static_cast<std::size_t>(r)].store(false);
        const unsigned hw = std::thread::hardware_concurrency();
        // More ranks than cores: spinning only steals the core from the rank
        // being waited for; yielding hands it over.
        if (hw != 0 && static_cast<unsigned>(n) > hw) backoff_.spin = std::chrono::microseconds(2);
#if defined(_SC_LEVEL3_CACHE_SIZE)
        // sysconf reports the whole package's L3; a core sees only its own
        // complex's slice (typically 16-32 MiB), so cap it there.
        if (const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0 && static_cast<std::uint64_t>(l3) < llc_bytes_)
            llc_bytes_ = static_cast<std::uint64_t>(l3);
#endif
        // CHORUS_RANKS_PER_NODE=k: emulate a node split for hierarchical<>
        // policies (ranks are threads of one process, so the split only
        // changes the schedule: nodes of k consecutive ranks). Read once per
        // communicator; unset or empty: 0 (one node); a value that is not a
        // whole number from 1 to 65535 throws errc::invalid_argument (before
        // run_threads starts any rank).
        node_size_ = env_ranks_per_node();
    }
    int size() const noexcept { return size_; }
    rank_slot& slot(int r) { return slots_[static_cast<std::size_t>(r)]; }
    const backoff_policy& backoff() const noexcept { return backoff_; }
    //! Last-level cache size: working sets beyond it are streamed past the cache.
    std::uint64_t llc_bytes() const noexcept { return llc_bytes_; }
    //! Ranks per emulated node (CHORUS_RANKS_PER_NODE; 0: one node).
    int node_size() const noexcept { return node_size_; }
    const std::atomic<bool>& abort_flag() const noexcept { return aborted_; }
    bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }
    const std::atomic<bool>& gone(int r) const noexcept { return gone_[static_cast<std::size_t>(r)]; }

    //! Rank r will issue no more collectives (its function returned):
    //! peers still waiting for it fail at once instead of at their deadline.
    void mark_gone(int r) {
        gone_[static_cast<std::size_t>(r)].store(true, std::memory_order_seq_cst);
        for (auto& f : slot(r).flags) nudge_flag(f);
        nudge_wake(slot(r).wake);
        if (mailbox* m = mail_.load(std::memory_order_seq_cst))
            for (int q = 0; q < size_; ++q) {
                nudge_flag(m[std::size_t(r) * std::size_t(size_) + std::size_t(q)].state);
                nudge_flag(m[std::size_t(q) * std::size_t(size_) + std::size_t(r)].state);
            }
    }

    //! The mailbox of messages from rank `src` to rank `dst` (allocated,
    //! for every pair, on the first point-to-point call).
    mailbox& mail(int src, int dst) {
        mailbox* m = mail_.load(std::memory_order_acquire);
        if (m == nullptr) {
            std::lock_guard<std::mutex> lk(m_);
            m = mail_.load(std::memory_order_relaxed);
            if (m == nullptr) {
                mail_store_.reset(new mailbox[std::size_t(size_) * std::size_t(size_)]);
                m = mail_store_.get();
                mail_.store(m, std::memory_order_seq_cst);
            }
        }
        return m[std::size_t(src) * std::size_t(size_) + std::size_t(dst)];
    }

    //! Breaks the communicator: every current and future wait fails with
    //! `reason`. The first reason wins.
    void abort(errc code, const std::string& reason) {
        {
            std::lock_guard<std::mutex> lk(m_);
            if (!aborted_.load()) {
                reason_ = reason;
                code_ = code;
            }
            aborted_.store(true, std::memory_order_seq_cst);
        }
        for (int r = 0; r < size_; ++r) {
            for (auto& f : slot(r).flags) nudge_flag(f);
            nudge_wake(slot(r).wake);
        }
        if (mailbox* m = mail_.load(std::memory_order_seq_cst))
            for (std::size_t i = 0; i < std::size_t(size_) * std::size_t(size_); ++i) nudge_flag(m[i].state);
    }
    std::string reason() const {
        std::lock_guard<std::mutex> lk(m_);
        return reason_;
    }
    errc reason_code() const {
        std::lock_guard<std::mutex> lk(m_);
        return code_;
    }

private:
    int size_;
    std::unique_ptr<rank_slot[]> slots_;
    std::unique_ptr<std::atomic<bool>[]> gone_;
    std::unique_ptr<mailbox[]> mail_store_; //!< n * n mailboxes, [src * n + dst]
    std::atomic<mailbox*> mail_{nullptr};
    std::atomic<bool> aborted_{false};
    mutable std::mutex m_;
    std::string reason_;
    errc code_ = errc::aborted;
    backoff_policy backoff_{};
    std::uint64_t llc_bytes_ = std::uint64_t(32) << 20;
    int node_size_ = 0;
};

//! Builds an error for collective `coll` from a failed status.
[[noreturn]] inline void throw_for(threads_world& w, collective coll, status st, const std::string& detail_msg) {
    const std::string head = std::string("chorus::") + collective_name(coll) + ": ";
    if (st == status::aborted) {
        const errc code = w.reason_code();
        throw error(code == errc::aborted ? errc::aborted : code, head + "communicator aborted: " + w.reason());
    }
    throw error(st == status::timeout       ? errc::timeout
                : st == status::peer_exited ? errc::peer_failed
                                            : errc::mismatch,
                head + detail_msg);
}

//! The threads transport (backend/transport.hpp): one rank's side of a
//! threads_world. Peers read its registered buffers straight from memory.
class threads_transport {
public:
    using ordering = host_ordered;

    threads_transport(std::shared_ptr<threads_world> world, int rank)
        : world_(std::move(world)), rank_(rank), peer_desc_(static_cast<std::size_t>(world_->size())),
          peer_checked_(static_cast<std::size_t>(world_->size()), 0) {}
    threads_transport(const threads_transport&) = delete;
    threads_transport& operator=(const threads_transport&) = delete;

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return world_->size(); }
    int node_size() const noexcept { return world_->node_size(); }
    //! The CHORUS_MODEL file, else the built-in topology.
    const model::topology& topology() const { return model::current(); }
    std::uint64_t scratch_limit_bytes() const noexcept { return 0; }
    //! Peers read each other's buffers directly.
    std::uint64_t node_window_bytes() const noexcept { return 0; }
    //! Releases every waiter of every rank; every later call fails.
    void abort(errc code, const std::string& why) { world_->abort(code, why); }
    bool broken() const noexcept { return world_->aborted(); }
    std::string reason() const { return world_->reason(); }

    //! Ranks that are host threads cannot read GPU memory.
    void check_launch(collective coll, const void* in, const void* out, std::uint64_t, bool) const {
        check_host_buffers(coll, in, out);
    }
    void check_p2p(const char* fn, const void* buf, bool) const { check_host_pointer(fn, "buf", buf); }

    //! One call: the element type and operator are erased here, so
    //! everything below is compiled once, whatever T and Op.
    template <class T, class Op, class Schedules>
    void run(const call& c, const Op& op, Schedules& s) {
        if (world_->aborted()) throw_for(*world_, c.coll, status::aborted, {});
        const host_kernel k = host_kernel_of<T>(op);
        if (c.small) return run_small(c, k);
        run_schedule(c, s.mine(), k);
    }
    //! The small-message protocol carries calls of up to this many bytes.
    static constexpr std::uint64_t small_message_bytes() noexcept { return host_small_cap; }

    //! CHORUS_DEBUG=INFO: how this rank reaches its peers (the communicator
    //! calls it after its own setup line).
    void log_setup() const {
        const threads_world& w = *world_;
        std::vector<int> peers;
        for (int q = 0; q < w.size(); ++q)
            if (q != rank_) peers.push_back(q);
        log_line(log_level::info, rank_, w.size(),
                 "transport: peers %s: shared address space (threads of one process): a step reads the peer's "
                 "registered buffers directly, zero-copy; small calls through the ranks' small boxes",
                 rank_list_text(peers.data(), peers.size()).c_str());
        const backoff_policy& b = w.backoff();
        log_line(log_level::info, rank_, w.size(),
                 "transport: waits spin %lld us, yield, then sleep (futex)%s; stores stream past the cache above "
                 "%s of buffers (last-level cache)",
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(b.spin).count()),
                 std::thread::hardware_concurrency() != 0 &&
                         static_cast<unsigned>(w.size()) > std::thread::hardware_concurrency()
                     ? " (short spin: more ranks than cores)"
                     : "",
                 bytes_text(w.llc_bytes()).text);
    }

    //! One send or receive (see the file comment for the mailbox protocol).
    template <class T>
    void transfer(bool is_send, T* buf, std::uint64_t count, int peer, std::uint64_t msg, call_settings cs);

private:
    struct env;

    // Compiled once: the element type and operator reach it erased
    // (exec/host_kernel.hpp); the schedule type is any_schedule.
    template <class Schedule>
    void run_schedule(const call& c, const Schedule& sch, const host_kernel& k);
    status check_all(descriptor& mine, std::uint64_t seq, std::chrono::steady_clock::time_point deadline,
                     std::string& report, int& bad_peer);
    struct small_env;
    void run_small(const call& c, const host_kernel& k);
    template <class Ready>
    status wait_small(int peer, Ready ready, std::chrono::steady_clock::time_point deadline);

    std::shared_ptr<threads_world> world_;
    int rank_;
    scratch_buffer scratch_;
    std::vector<descriptor> peer_desc_;       //!< peers' descriptors, cached per collective
    std::vector<std::uint64_t> peer_checked_; //!< seq for which each peer's signature was checked
    std::vector<descriptor> all_calls_;       //!< checked mode: every rank's call
    small_state small_;                       //!< the small-message protocol's (host_small.hpp)
};

//! The host executor's environment for one collective on one rank.
struct threads_transport::env {
    detail::threads_world& w;
    threads_transport& self;
    const detail::descriptor& mine;
    std::uint64_t seq;
    const detail::host_kernel& k;
    bool streaming;
    std::chrono::steady_clock::time_point deadline;
    std::uint64_t units;
    // where a wait failed, for the error message
    int bad_peer = -1;
    int bad_channel = 0;
    std::uint64_t bad_units = 0;
    std::string mismatch;

    detail::status wait(int peer, int c, std::uint64_t u) {
        // Stop at the next unit once the communicator is aborted, even where
        // the data this unit needs is already there.
        if (w.aborted()) return detail::status::aborted;
        detail::host_flag& f = w.slot(peer).flags[c];
        detail::status st = detail::status::ok;
        // First contact with this peer in this collective: as soon as it has
        // registered, check that it called the same collective (before
        // reading its buffers, and before waiting on progress that a
        // disagreeing peer may never make).
        if (self.peer_checked_[static_cast<std::size_t>(peer)] != seq) {
            st = detail::wait_flag(f, seq << 32, w.abort_flag(), w.gone(peer), deadline, w.backoff());
            if (st == detail::status::ok && !check_peer(peer)) st = detail::status::mismatch;
        }
        if (st == detail::status::ok)
            st = detail::wait_flag(f, (seq << 32) | u, w.abort_flag(), w.gone(peer), deadline, w.backoff());
        if (st != detail::status::ok) {
            bad_peer = peer;
            bad_channel = c;
            bad_units = u;
        }
        return st;
    }

    void post(int c, std::uint64_t u) {
        if (streaming) detail::store_fence();
        detail::post_flag(w.slot(self.rank_).flags[c], (seq << 32) | u);
    }

    //! Compares the peer's signature for this collective with ours. A peer
    //! that has already moved past it cannot be checked any more (some rank
    //! it waited for did), and is not needed: false only on a disagreement.
    bool check_peer(int r) {
        self.peer_checked_[static_cast<std::size_t>(r)] = seq;
        detail::descriptor d{};
        if (!w.slot(r).sig[seq & 1].load(seq, d)) return true;
        if (d.same_call(mine)) return true;
        mismatch = describe(r, d);
        return false;
    }

    //! The peer's buffers for this collective. Only peers whose buffers this
    //! rank reads or writes get here, and those cannot move past the
    //! collective before this rank is done with them.
    const detail::descriptor* peer_desc(int r) {
        detail::descriptor& d = self.peer_desc_[static_cast<std::size_t>(r)];
        if (d.sig.seq != seq) {
            if (self.peer_checked_[static_cast<std::size_t>(r)] != seq && !check_peer(r)) return nullptr;
            d = w.slot(r).desc[seq & 1];
            if (d.sig.seq != seq) {
                mismatch = "rank " + std::to_string(r) + " is at a different collective";
                d.sig.seq = 0;
                return nullptr;
            }
        }
        return &d;
    }

    std::string describe(int r, const detail::descriptor& d) const {
        return "rank " + std::to_string(self.rank_) + " called " + mine.call() + " but rank " + std::to_string(r) +
               " called " + d.call();
    }
    //! Where operand `o` starts (bytes: the element size is k.types.elem_bytes).
    unsigned char* base(const operand& o) {
        const detail::descriptor* d = o.rank == self.rank_ ? &mine : peer_desc(o.rank);
        if (d == nullptr) return nullptr;
        return operand_address(o, d->in, d->out, d->scratch, k.types.elem_bytes);
    }

    detail::status execute(const step& s) {
        if (s.count == 0) return detail::status::ok;
        unsigned char* dst = base(s.dst);
        unsigned char* dst2 = s.dst2.loc == where::none ? nullptr : base(s.dst2);
        if (s.fan_in >= 2) {
            thread_local std::vector<const void*> srcs; // grows once per thread
            srcs.resize(s.fan_in);
            for (int q = 0; q < int(s.fan_in); ++q) {
                srcs[std::size_t(q)] = base(s.fan_source(q));
                if (srcs[std::size_t(q)] == nullptr) return detail::status::mismatch;
            }
            if (dst == nullptr || (s.dst2.loc != where::none && dst2 == nullptr)) return detail::status::mismatch;
            k.reduce_fan(k.op, dst, dst2, srcs.data(), int(s.fan_in), static_cast<std::size_t>(s.count),
                         s.finish ? w.size() : 0);
            return detail::status::ok;
        }
        const unsigned char* a = base(s.src0);
        const unsigned char* b = s.src1.loc == where::none ? nullptr : base(s.src1);
        if (dst == nullptr || a == nullptr || (s.src1.loc != where::none && b == nullptr) ||
            (s.dst2.loc != where::none && dst2 == nullptr))
            return detail::status::mismatch;
        k.reduce_copy(k.op, dst, dst2, a, b, static_cast<std::size_t>(s.count), s.finish ? w.size() : 0, streaming);
        return detail::status::ok;
    }
};

template <class Schedule>
void threads_transport::run_schedule(const call& cl, const Schedule& sch, const host_kernel& k) {
    const std::chrono::milliseconds timeout_ = cl.settings.timeout; // this call's deadline
    const collective coll = cl.coll;
    const std::uint64_t seq = cl.seq;
    const void* in = cl.in;
    detail::threads_world& w = *world_;
    const int n = w.size();
    const int channels = sch.channels();

    detail::descriptor& mine = w.slot(rank_).desc[seq & 1];
    mine.in = in;
    mine.out = cl.out;
    mine.scratch = sch.scratch_elems() ? scratch_.reserve(sch.scratch_elems() * k.types.elem_bytes) : nullptr;
    detail::describe_call(mine, cl, channels);
    w.slot(rank_).sig[seq & 1].store(mine);

    // Stream stores past the cache when the ranks' buffers together
    // cannot stay in the last-level cache anyway. The elements of one
    // rank's larger buffer:
    const std::uint64_t rank_elems = coll == collective::all_gather || coll == collective::all_to_all
                                         ? cl.count * std::uint64_t(n)
                                     : coll == collective::all_to_allv ? cl.signature_count / std::uint64_t(n)
                                     : is_exchange(coll)               ? cl.signature_count
                                                                       : cl.count;
    const std::uint64_t bytes = rank_elems * k.types.elem_bytes;
    const std::uint64_t working_set = bytes * std::uint64_t(n) * (in == cl.out ? 1 : 2);
    env e{w, *this, mine, seq, k, working_set > w.llc_bytes(), std::chrono::steady_clock::now() + timeout_,
          sch.units(), -1, 0, 0, {}};
    std::atomic<std::uint64_t>& busy = w.slot(rank_).busy_seq;
    busy.store(seq, std::memory_order_seq_cst);
    for (int c = 0; c < channels; ++c) detail::post_flag(w.slot(rank_).flags[c], seq << 32); // publish

    detail::status st = detail::status::ok;
    std::exception_ptr user_error; // thrown by the operator (or anything run on this rank's behalf)
    try {
        if (cl.settings.checked) st = check_all(mine, seq, e.deadline, e.mismatch, e.bad_peer);
        if (st == detail::status::ok) {
            if (coll == collective::barrier) {
                for (int r = 0; r < n && st == detail::status::ok; ++r)
                    if (r != rank_) st = e.wait(r, 0, 0);
            } else {
                st = detail::run_rank_interleaved(sch, e);
            }
        }
    } catch (...) {
        user_error = std::current_exception();
        st = detail::status::aborted;
        // A failing rank, like one that throws out of its function: every
        // peer fails at once with this text.
        w.abort(errc::peer_failed, "rank " + std::to_string(rank_) + " failed in " + collective_name(coll) + ": " +
                                       detail::exception_text(user_error));
    }
    busy.store(0, std::memory_order_seq_cst);
    if (st == detail::status::ok) return;

    // Failed: make every rank fail, then report what this rank saw.
    std::string msg;
    if (st == detail::status::timeout) {
        // Which ranks never entered this collective? (The usual culprit: the
        // rank waited for may itself be waiting for one of them.)
        std::string absent;
        for (int r = 0; r < n; ++r)
            if ((w.slot(r).flags[0].value.load(std::memory_order_acquire) >> 32) < seq)
                absent += (absent.empty() ? "" : ", ") + std::to_string(r);
        const std::string missing =
            absent.empty() ? std::string("every rank has entered it") : "ranks that have not joined it: " + absent;
        msg = detail::timed_out_waiting(timeout_.count(), detail::rank_text(e.bad_peer)) + " (channel " +
              std::to_string(e.bad_channel) + ", unit " + std::to_string(e.bad_units) + " of " +
              std::to_string(sch.units()) + "); " + missing;
        w.abort(errc::timeout, "rank " + std::to_string(rank_) + " timed out in " + collective_name(coll) +
                                   " waiting for rank " + std::to_string(e.bad_peer) + "; " + missing);
    } else if (st == detail::status::peer_exited) {
        msg = "rank " + std::to_string(e.bad_peer) + " returned without joining this " + collective_name(coll) +
              " (it issued fewer collectives than this rank)";
        w.abort(errc::peer_failed, std::string(collective_name(coll)) + ": " + msg);
    } else if (st == detail::status::mismatch) {
        msg = "ranks disagree: " + e.mismatch;
        w.abort(errc::mismatch, std::string(collective_name(coll)) + ": " + e.mismatch);
    }
    // Peers may be in the middle of a step on this rank's buffers; they
    // stop at their next unit (the abort is set). Hand the buffers back to
    // the caller only once none is inside this collective any more.
    if (!w.aborted()) w.abort(errc::aborted, std::string(collective_name(coll)) + " failed on rank " + std::to_string(rank_));
    const auto quiesce_deadline = std::chrono::steady_clock::now() + timeout_;
    for (int r = 0; r < n; ++r) {
        if (r == rank_) continue;
        while (w.slot(r).busy_seq.load(std::memory_order_seq_cst) == seq &&
               std::chrono::steady_clock::now() < quiesce_deadline)
            std::this_thread::yield();
    }
    if (user_error) std::rethrow_exception(user_error); // the caller's own exception, as it was thrown
    detail::throw_for(w, coll, st, msg);
}

//! Waits until ready() (a condition on rank `peer`'s small boxes): spin,
//! yield, then sleep on the peer's small_wake in slices of at most a
//! millisecond (a poster wakes sleepers without a fence, so a wake-up can
//! be missed by a sleeper that was just counting itself in: the slice
//! bounds what that costs). Fails on abort, at the deadline, and when the
//! peer has left for good.
template <class Ready>
status threads_transport::wait_small(int peer, Ready ready, std::chrono::steady_clock::time_point deadline) {
    using clock = std::chrono::steady_clock;
    threads_world& w = *world_;
    small_wake& wk = w.slot(peer).wake;
    const backoff_policy& bp = w.backoff();
    auto stop = [&]() -> status {
        if (w.aborted()) return status::aborted;
        if (w.gone(peer).load(std::memory_order_seq_cst) && !ready()) return status::peer_exited;
        return status::ok;
    };
    if (ready()) return status::ok;
    const auto start = clock::now();
    for (unsigned i = 1;; ++i) {
        if (ready()) return status::ok;
        cpu_relax();
        if (i % 64 == 0) {
            if (const status st = stop(); st != status::ok) return st;
            if (clock::now() - start >= bp.spin) break;
        }
    }
    for (;;) {
        if (ready()) return status::ok;
        if (const status st = stop(); st != status::ok) return st;
        const auto now = clock::now();
        if (now - start >= bp.spin + bp.yield) break;
        if (now >= deadline) return status::timeout;
        std::this_thread::yield();
    }
    const std::chrono::nanoseconds slice =
        std::min<std::chrono::nanoseconds>(bp.block_slice, std::chrono::milliseconds(1));
    for (;;) {
        const std::uint32_t e = wk.epoch.load(std::memory_order_seq_cst);
        wk.waiters.fetch_add(1, std::memory_order_seq_cst);
        status st = ready() ? status::ok : stop();
        const auto now = clock::now();
        if (st == status::ok && !ready() && now >= deadline) st = status::timeout;
        if (st != status::ok || ready()) {
            wk.waiters.fetch_sub(1, std::memory_order_relaxed);
            return st;
        }
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
        futex_wait(wk.epoch, e, left < slice ? left : slice);
        wk.waiters.fetch_sub(1, std::memory_order_relaxed);
    }
}

//! The small-message protocol's view of the world (host_small.hpp).
struct threads_transport::small_env {
    threads_transport& self;
    std::chrono::steady_clock::time_point deadline;

    small_box& box(int q, unsigned parity) { return self.world_->slot(q).box[parity & 1]; }
    std::uint64_t entered(int q) const { return self.world_->slot(q).entered(); }
    std::uint64_t scheduled(int q) const {
        return self.world_->slot(q).flags[0].value.load(std::memory_order_acquire) >> 32;
    }
    bool scheduled_call(int q, std::uint64_t seq, descriptor& d) const {
        return self.world_->slot(q).sig[seq & 1].load(seq, d);
    }
    void posted() {
        small_wake& wk = self.world_->slot(self.rank_).wake;
        if (wk.waiters.load(std::memory_order_relaxed) != 0) nudge_wake(wk);
    }
    template <class Ready>
    status wait(int q, Ready ready) {
        return self.wait_small(q, ready, deadline);
    }
};

//! A call marked call::small: the small-message protocol (host_small.hpp).
inline void threads_transport::run_small(const call& cl, const host_kernel& k) {
    threads_world& w = *world_;
    const int n = w.size();
    const collective coll = cl.coll;
    small_env e{*this, std::chrono::steady_clock::now() + cl.settings.timeout};
    small_failure f;
    try {
        f = run_small_call(e, cl, k, rank_, n, small_);
    } catch (...) { // the operator threw: every peer fails at once, this rank gets its exception
        const std::exception_ptr user_error = std::current_exception();
        w.abort(errc::peer_failed, "rank " + std::to_string(rank_) + " failed in " + collective_name(coll) + ": " +
                                       detail::exception_text(user_error));
        std::rethrow_exception(user_error);
    }
    if (f.st == status::ok) return;

    std::string msg;
    if (f.st == status::timeout) {
        const std::string missing = small_absent(e, n, cl.seq);
        msg = detail::timed_out_waiting(cl.settings.timeout.count(), detail::rank_text(f.peer)) +
              " (small-message protocol); " + missing;
        w.abort(errc::timeout, "rank " + std::to_string(rank_) + " timed out in " + collective_name(coll) +
                                   " waiting for rank " + std::to_string(f.peer) + "; " + missing);
    } else if (f.st == status::peer_exited) {
        msg = "rank " + std::to_string(f.peer) + " returned without joining this " + collective_name(coll) +
              " (it issued fewer collectives than this rank)";
        w.abort(errc::peer_failed, std::string(collective_name(coll)) + ": " + msg);
    } else if (f.st == status::mismatch) {
        msg = "ranks disagree: " + (cl.settings.checked ? f.why : mismatch_text(f.why));
        // The ranks that wait for this one fail with this text.
        w.abort(errc::mismatch, std::string(collective_name(coll)) + ": " + msg);
    }
    throw_for(w, coll, f.st, msg);
}

//! Checked mode: wait until every rank entered collective `seq`, then
//! compare every rank's call with this rank's. On a disagreement `report`
//! lists which ranks called what (the same text on every rank).
inline status threads_transport::check_all(descriptor& mine, std::uint64_t seq,
                                           std::chrono::steady_clock::time_point deadline, std::string& report,
                                           int& bad_peer) {
    detail::threads_world& w = *world_;
    const int n = w.size();
    all_calls_.resize(static_cast<std::size_t>(n));
    bool same = true;
    for (int r = 0; r < n; ++r) {
        detail::descriptor& d = all_calls_[static_cast<std::size_t>(r)];
        if (r == rank_) {
            d = mine;
            continue;
        }
        const detail::status st =
            detail::wait_flag(w.slot(r).flags[0], seq << 32, w.abort_flag(), w.gone(r), deadline, w.backoff());
        if (st != detail::status::ok) {
            bad_peer = r;
            return st;
        }
        // Nobody gets past this check before every rank entered, so no peer
        // can have rewritten this slot yet.
        if (!w.slot(r).sig[seq & 1].load(seq, d)) d = mine;
        same = same && d.same_call(mine);
    }
    if (same) return detail::status::ok;
    report = detail::calls_report(seq, all_calls_);
    return detail::status::mismatch;
}

template <class T>
void threads_transport::transfer(bool is_send, T* buf, std::uint64_t count, int peer, std::uint64_t msg,
                                     call_settings cs) {
    detail::threads_world& w = *world_;
    const std::string head = is_send ? "chorus::send: " : "chorus::recv: ";
    const int src = is_send ? rank_ : peer;
    const int dst = is_send ? peer : rank_;
    const std::string which = "message #" + std::to_string(msg) + " from rank " + std::to_string(src) + " to rank " +
                              std::to_string(dst);
    auto broken = [&] {
        const errc code = w.reason_code();
        throw error(code == errc::aborted ? errc::aborted : code, head + "communicator aborted: " + w.reason());
    };
    if (w.aborted()) broken();
    detail::mailbox& mb = w.mail(src, dst);
    std::atomic<std::uint64_t>& state = mb.state.value;
    const std::uint64_t base = msg << 3;
    const auto deadline = std::chrono::steady_clock::now() + cs.timeout;

    // A failed wait: break the communicator (the pair's message numbers no
    // longer agree) and report what this rank waited for.
    auto fail = [&](detail::status st, bool withdrawn = false) {
        if (st == detail::status::aborted && !withdrawn) broken();
        std::string msg_text;
        errc code = errc::timeout;
        if (withdrawn) {
            code = errc::peer_failed;
            msg_text = "rank " + std::to_string(peer) + " withdrew " + which + " (its send failed)";
        } else if (st == detail::status::timeout) {
            msg_text = detail::timed_out_waiting(cs.timeout.count(), detail::rank_text(peer)) +
                       (is_send ? " to receive " : " to send ") + which;
        } else {
            code = errc::peer_failed;
            msg_text = "rank " + std::to_string(peer) + " returned without " + (is_send ? "receiving " : "sending ") +
                       which;
        }
        w.abort(code, head + msg_text);
        throw error(code, head + msg_text);
    };

    if (is_send) {
        mb.buf.store(buf, std::memory_order_relaxed);
        mb.count.store(count, std::memory_order_relaxed);
        mb.elem_bytes.store(sizeof(T), std::memory_order_relaxed);
        mb.type_id.store(detail::type_hash<T>(), std::memory_order_relaxed);
        mb.type_name.store(element_traits<T>::name(), std::memory_order_relaxed);
        detail::post_flag(mb.state, base | detail::p2p_posted);
        const detail::status st = detail::wait_flag(mb.state, base | detail::p2p_delivered, w.abort_flag(),
                                                    w.gone(peer), deadline, w.backoff());
        if (st != detail::status::ok) {
            std::uint64_t expect = base | detail::p2p_posted;
            if (state.compare_exchange_strong(expect, base | detail::p2p_cancelled, std::memory_order_seq_cst))
                fail(st); // withdrawn: no receiver will read `buf`
            // The receiver claimed the message: its copy cannot block.
            while (state.load(std::memory_order_acquire) < (base | detail::p2p_delivered)) std::this_thread::yield();
        }
        if ((state.load(std::memory_order_acquire) & 7) == detail::p2p_delivered) return;
        throw error(errc::mismatch,
                    head + "rank " + std::to_string(src) + " sends " + std::to_string(count) + " elements of " +
                        element_traits<T>::name() + " (" + std::to_string(sizeof(T)) + "-byte) but rank " +
                        std::to_string(dst) + " receives " + std::to_string(mb.recv_count.load()) + " elements of " +
                        mb.recv_type_name.load() + " (" + std::to_string(mb.recv_elem_bytes.load()) + "-byte) (" +
                        which + ")");
    }

    detail::status st = detail::wait_flag(mb.state, base | detail::p2p_posted, w.abort_flag(), w.gone(peer),
                                          deadline, w.backoff());
    if (st == detail::status::ok) {
        std::uint64_t expect = base | detail::p2p_posted;
        if (!state.compare_exchange_strong(expect, base | detail::p2p_copying, std::memory_order_seq_cst))
            fail(detail::status::aborted, true); // the sender withdrew it: its call failed
    }
    if (st != detail::status::ok) fail(st);
    const std::uint64_t sent = mb.count.load(std::memory_order_relaxed);
    const std::uint64_t sent_bytes = mb.elem_bytes.load(std::memory_order_relaxed);
    const bool same_type = mb.type_id.load(std::memory_order_relaxed) == detail::type_hash<T>();
    if (sent != count || sent_bytes != sizeof(T) || !same_type) {
        const std::string what = head + "rank " + std::to_string(src) + " sends " + std::to_string(sent) +
                                 " elements of " + mb.type_name.load() + " (" + std::to_string(sent_bytes) +
                                 "-byte) but rank " + std::to_string(dst) + " receives " + std::to_string(count) +
                                 " elements of " + element_traits<T>::name() + " (" + std::to_string(sizeof(T)) +
                                 "-byte) (" + which + ")";
        mb.recv_count.store(count, std::memory_order_relaxed);
        mb.recv_elem_bytes.store(sizeof(T), std::memory_order_relaxed);
        mb.recv_type_name.store(element_traits<T>::name(), std::memory_order_relaxed);
        detail::post_flag(mb.state, base | detail::p2p_mismatched);
        throw error(errc::mismatch, what);
    }
    if (count != 0) std::memcpy(static_cast<void*>(buf), mb.buf.load(std::memory_order_relaxed), count * sizeof(T));
    detail::post_flag(mb.state, base | detail::p2p_delivered);
}

} // namespace detail

} // namespace chorus
