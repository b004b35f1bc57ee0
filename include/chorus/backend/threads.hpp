#pragma once
//! \file backend/threads.hpp
//! The threads backend: ranks are threads of one process sharing memory.
//! Zero-copy: for the duration of a collective each rank registers its
//! buffers in a descriptor, and peers read them directly. Progress flags
//! are per (rank, channel); see algo/schedule.hpp for the protocol.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__unix__)
#  include <unistd.h>
#endif
#if defined(__CUDACC__)
#  include <cuda_runtime_api.h>
#endif

#include "../algo/ring.hpp"
#include "../async/future.hpp"
#include "../async/host_stream.hpp"
#include "../core/error.hpp"
#include "../exec/host_reduce_copy.hpp"
#include "../exec/rank_program.hpp"
#include "host_common.hpp"
#include "host_wait.hpp"

namespace chorus {

//! Backend tag: ranks are threads of one process (see run_threads).
struct threads {
    static constexpr const char* name = "threads";
};

template <class Backend>
class communicator;

namespace detail {

//! The comparable part of a descriptor, published under a sequence lock so
//! that a peer may read it while the owner already rewrites it for a later
//! collective: the reader sees either a consistent copy or "moved on".
struct sig_slot {
    std::atomic<std::uint64_t> seq{0}; //!< 0 while being written
    std::atomic<std::uint64_t> count{0}, elem_bytes{0}, type_id{0}, op_id{0}, algo_id{0}, shape{0};
    std::atomic<const char*> type_name{""}, op_name{""}, algo_name{""};

    void store(const descriptor& d) {
        seq.store(0);
        count.store(d.count);
        elem_bytes.store(d.elem_bytes);
        type_id.store(d.type_id);
        op_id.store(d.op_id);
        algo_id.store(d.algo_id);
        algo_name.store(d.algo_name);
        shape.store(std::uint64_t(d.coll) | std::uint64_t(std::uint32_t(d.channels)) << 8 |
                    std::uint64_t(std::uint32_t(d.root)) << 32);
        type_name.store(d.type_name);
        op_name.store(d.op_name);
        seq.store(d.seq);
    }
    //! False when the owner is not (or no longer) at collective `want`.
    bool load(std::uint64_t want, descriptor& d) const {
        if (seq.load() != want) return false;
        d.count = count.load();
        d.elem_bytes = elem_bytes.load();
        d.type_id = type_id.load();
        d.op_id = op_id.load();
        d.algo_id = algo_id.load();
        d.algo_name = algo_name.load();
        const std::uint64_t sh = shape.load();
        d.coll = static_cast<collective>(sh & 0xff);
        d.channels = static_cast<int>((sh >> 8) & 0xffffff);
        d.root = static_cast<int>(static_cast<std::uint32_t>(sh >> 32));
        d.type_name = type_name.load();
        d.op_name = op_name.load();
        d.seq = want;
        return seq.load() == want;
    }
};

struct alignas(64) rank_slot {
    descriptor desc[2];            //!< indexed by seq & 1
    sig_slot sig[2];               //!< the same, comparable part, indexed by seq & 1
    //! Sequence number of the collective this rank is executing (0: none):
    //! a failing rank waits until no peer is inside its collective before
    //! handing its buffers back to the caller.
    alignas(64) std::atomic<std::uint64_t> busy_seq{0};
    host_flag flags[max_channels]; //!< one per channel
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
        // communicator; unset, invalid or non-positive: 0 (one node).
        if (const char* v = std::getenv("CHORUS_RANKS_PER_NODE"); v != nullptr && *v != '\0') {
            char* end = nullptr;
            const long k = std::strtol(v, &end, 10);
            if (end != nullptr && *end == '\0' && k > 0 && k <= 65535) node_size_ = static_cast<int>(k);
        }
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
        for (int r = 0; r < size_; ++r)
            for (auto& f : slot(r).flags) nudge_flag(f);
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
    std::atomic<bool> aborted_{false};
    mutable std::mutex m_;
    std::string reason_;
    errc code_ = errc::aborted;
    backoff_policy backoff_{};
    std::uint64_t llc_bytes_ = std::uint64_t(32) << 20;
    int node_size_ = 0;
};

//! Throws when `p` is GPU device memory: ranks that are host threads cannot
//! read it. Only a CUDA translation unit (nvcc, which links the CUDA runtime)
//! can ask; elsewhere the check is compiled out. Managed memory is fine.
inline void check_host_pointer([[maybe_unused]] collective coll, [[maybe_unused]] const char* name,
                               [[maybe_unused]] const void* p) {
#if defined(__CUDACC__)
    if (p == nullptr) return;
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError(); // not a CUDA pointer (or no device): host memory
        return;
    }
    if (attr.type == cudaMemoryTypeDevice)
        throw error(errc::invalid_argument, std::string("chorus::") + collective_name(coll) + ": `" + name +
                                                "` points to GPU memory (device " + std::to_string(attr.device) +
                                                "); a threads communicator needs host or managed memory");
#endif
}

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

} // namespace detail

//! A rank's handle on a group of thread ranks. Not copyable or movable
//! (peers hold pointers into it while collectives run). All ranks must
//! issue collectives in the same order.
template <>
class communicator<threads> : public detail::host_call_options {
public:
    communicator(std::shared_ptr<detail::threads_world> world, int rank)
        : world_(std::move(world)), rank_(rank),
          peer_desc_(static_cast<std::size_t>(world_->size())),
          peer_checked_(static_cast<std::size_t>(world_->size()), 0) {}
    communicator(const communicator&) = delete;
    communicator& operator=(const communicator&) = delete;
    ~communicator() { stream_.drain(); }

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return world_->size(); }

    // set_timeout, set_call_timeout, set_checked: detail::host_call_options.
    // Threads checked mode costs one all-to-all round of flags.

    //! Releases every waiter of every rank with an error; the communicator
    //! is broken afterwards (every call fails). Callable from any thread.
    void abort(const std::string& why = "comm.abort() called") {
        world_->abort(errc::aborted, "rank " + std::to_string(rank_) + ": " + why);
    }
    //! True after abort() or after any rank's collective failed.
    bool broken() const noexcept { return world_->aborted(); }

    //! Blocks until every collective issued on this communicator has finished.
    void synchronize() { stream_.drain(); }

    //! \internal Runs (or queues) one collective. Buffers were validated by the caller.
    template <class T, class Op, class Algo>
    future launch(collective coll, const T* in, T* out, std::uint64_t count, const Op& op, int root, bool async) {
        if (world_->aborted())
            throw error(errc::aborted, std::string("chorus::") + collective_name(coll) +
                                           ": the communicator is broken (" + world_->reason() + "); create a new one");
        detail::check_host_pointer(coll, coll == collective::broadcast ? "buf" : "in", in);
        detail::check_host_pointer(coll, coll == collective::broadcast ? "buf" : "out", out);
        const std::uint64_t seq = next_seq_++;
        const call_settings cs = issue();
        auto task = [this, coll, in, out, count, op, root, seq, cs] {
            run<T, Op, Algo>(coll, in, out, count, op, root, seq, cs);
        };
        if (async)
            return stream_.enqueue(std::function<void()>(task), [w = world_, r = rank_, coll] {
                w->abort(errc::peer_failed, "rank " + std::to_string(r) + " left an unfinished " +
                                                collective_name(coll) + " behind while an exception unwound");
            });
        stream_.run_sync(task);
        return future();
    }

private:
    template <class T, class Op>
    struct env;

    using call_settings = detail::call_settings;

    template <class T, class Op, class Algo>
    void run(collective coll, const T* in, T* out, std::uint64_t count, const Op& op, int root, std::uint64_t seq,
             call_settings cs);
    detail::status check_all(detail::descriptor& mine, std::uint64_t seq, std::chrono::steady_clock::time_point deadline,
                             std::string& report, int& bad_peer);

    std::shared_ptr<detail::threads_world> world_;
    int rank_;
    std::uint64_t next_seq_ = 1;
    detail::scratch_buffer scratch_;
    std::vector<detail::descriptor> peer_desc_; //!< peers' descriptors, cached per collective
    std::vector<std::uint64_t> peer_checked_;   //!< seq for which each peer's signature was checked
    std::vector<detail::descriptor> all_calls_; //!< checked mode: every rank's call
    detail::host_stream stream_;
};

//! The host executor's environment for one collective on one rank.
template <class T, class Op>
struct communicator<threads>::env {
    detail::threads_world& w;
    communicator<threads>& self;
    const detail::descriptor& mine;
    std::uint64_t seq;
    Op op;
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
        if (d.seq != seq) {
            if (self.peer_checked_[static_cast<std::size_t>(r)] != seq && !check_peer(r)) return nullptr;
            d = w.slot(r).desc[seq & 1];
            if (d.seq != seq) {
                mismatch = "rank " + std::to_string(r) + " is at a different collective";
                d.seq = 0;
                return nullptr;
            }
        }
        return &d;
    }

    std::string describe(int r, const detail::descriptor& d) const {
        return "rank " + std::to_string(self.rank_) + " called " + mine.call() + " but rank " + std::to_string(r) +
               " called " + d.call();
    }
    T* base(const operand& o) {
        const detail::descriptor* d = o.rank == self.rank_ ? &mine : peer_desc(o.rank);
        if (d == nullptr) return nullptr;
        switch (o.loc) {
        case where::in: return const_cast<T*>(static_cast<const T*>(d->in)) + o.offset;
        case where::out: return static_cast<T*>(d->out) + o.offset;
        case where::scratch: return static_cast<T*>(d->scratch) + o.offset;
        case where::none: break;
        }
        return nullptr;
    }

    detail::status execute(const step& s) {
        if (s.count == 0) return detail::status::ok;
        T* dst = base(s.dst);
        T* dst2 = s.dst2.loc == where::none ? nullptr : base(s.dst2);
        if (s.fan_in >= 2) {
            thread_local std::vector<const T*> srcs; // grows once per thread and type
            srcs.resize(s.fan_in);
            for (int q = 0; q < int(s.fan_in); ++q) {
                srcs[std::size_t(q)] = base({s.source_rank(q), s.src0.loc, s.src0.offset});
                if (srcs[std::size_t(q)] == nullptr) return detail::status::mismatch;
            }
            if (dst == nullptr || (s.dst2.loc != where::none && dst2 == nullptr)) return detail::status::mismatch;
            detail::host_reduce_fan(dst, dst2, srcs.data(), int(s.fan_in),
                                    static_cast<std::size_t>(s.count), op, s.finish ? w.size() : 0);
            return detail::status::ok;
        }
        const T* a = base(s.src0);
        const T* b = s.src1.loc == where::none ? nullptr : base(s.src1);
        if (dst == nullptr || a == nullptr || (s.src1.loc != where::none && b == nullptr) ||
            (s.dst2.loc != where::none && dst2 == nullptr))
            return detail::status::mismatch;
        detail::host_reduce_copy(dst, dst2, a, b, static_cast<std::size_t>(s.count), op, s.finish ? w.size() : 0,
                                 streaming);
        return detail::status::ok;
    }
};

template <class T, class Op, class Algo>
void communicator<threads>::run(collective coll, const T* in, T* out, std::uint64_t count, const Op& op, int root,
                                std::uint64_t seq, call_settings cs) {
    const std::chrono::milliseconds timeout_ = cs.timeout; // this call's deadline
    detail::threads_world& w = *world_;
    if (w.aborted()) detail::throw_for(w, coll, detail::status::aborted, {});
    const int n = w.size();
    schedule_args args{coll, rank_, n, root, count, sizeof(T), false, w.node_size()};
    args.in_place = in_place_call<T>(coll, in, out, rank_, count);
    const auto sch = Algo::make_schedule(args);
    const int channels = sch.channels();

    detail::descriptor& mine = w.slot(rank_).desc[seq & 1];
    mine.in = in;
    mine.out = out;
    mine.scratch = sch.scratch_elems() ? scratch_.reserve(sch.scratch_elems() * sizeof(T)) : nullptr;
    detail::describe_call<T, Op, Algo>(mine, coll, seq, count, root, channels);
    w.slot(rank_).sig[seq & 1].store(mine);

    // Stream stores past the cache when the ranks' buffers together
    // cannot stay in the last-level cache anyway.
    const std::uint64_t bytes = (coll == collective::all_gather ? count * std::uint64_t(n) : count) * sizeof(T);
    const std::uint64_t working_set = bytes * std::uint64_t(n) * (in == out ? 1 : 2);
    env<T, Op> e{w, *this, mine, seq, op, working_set > w.llc_bytes(), std::chrono::steady_clock::now() + timeout_,
                 sch.units(), -1, 0, 0, {}};
    std::atomic<std::uint64_t>& busy = w.slot(rank_).busy_seq;
    busy.store(seq, std::memory_order_seq_cst);
    for (int c = 0; c < channels; ++c) detail::post_flag(w.slot(rank_).flags[c], seq << 32); // publish

    detail::status st = detail::status::ok;
    if (cs.checked) st = check_all(mine, seq, e.deadline, e.mismatch, e.bad_peer);
    if (st == detail::status::ok) {
        if (coll == collective::barrier) {
            for (int r = 0; r < n && st == detail::status::ok; ++r)
                if (r != rank_) st = e.wait(r, 0, 0);
        } else {
            st = detail::run_rank_interleaved(sch, e);
        }
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
        msg = "timed out after " + std::to_string(timeout_.count()) + " ms waiting for rank " +
              std::to_string(e.bad_peer) + " (channel " + std::to_string(e.bad_channel) + ", unit " +
              std::to_string(e.bad_units) + " of " + std::to_string(sch.units()) + "); " + missing;
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
    detail::throw_for(w, coll, st, msg);
}

//! Checked mode: wait until every rank entered collective `seq`, then
//! compare every rank's call with this rank's. On a disagreement `report`
//! lists which ranks called what (the same text on every rank).
inline detail::status communicator<threads>::check_all(detail::descriptor& mine, std::uint64_t seq,
                                                       std::chrono::steady_clock::time_point deadline,
                                                       std::string& report, int& bad_peer) {
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

//! Starts `n` ranks as threads, calls fn(communicator<threads>&) on each,
//! and joins them. If a rank throws, the others are released with an error
//! (peer_failed) instead of hanging, and the first rank's original
//! exception is rethrown here.
template <class F>
void run_threads(int n, F&& fn) {
    if (n < 1) throw error(errc::invalid_argument, "chorus::run_threads: `n` must be >= 1, got " + std::to_string(n));
    auto world = std::make_shared<detail::threads_world>(n);
    std::mutex m;
    std::exception_ptr first;      // the first failure that is not a consequence of another
    std::exception_ptr first_any;  // the first failure of any kind
    auto body = [&](int r) {
        try {
            struct leave { // runs after comm drained its queue (declared first, destroyed last)
                detail::threads_world& w;
                int r;
                ~leave() { w.mark_gone(r); }
            } on_exit{*world, r};
            communicator<threads> comm(world, r);
            try {
                fn(comm);
            } catch (...) {
                // Release peers before this rank's communicator drains its queue.
                std::string what = "unknown exception";
                bool secondary = false;
                try {
                    throw;
                } catch (const error& e) {
                    what = e.what();
                    secondary = e.code() == errc::aborted || e.code() == errc::peer_failed;
                } catch (const std::exception& e) {
                    what = e.what();
                } catch (...) {
                }
                world->abort(errc::peer_failed, "rank " + std::to_string(r) + " failed: " + what);
                std::lock_guard<std::mutex> lk(m);
                if (!first_any) first_any = std::current_exception();
                if (!first && !secondary) first = std::current_exception();
            }
        } catch (...) {
            std::lock_guard<std::mutex> lk(m);
            if (!first_any) first_any = std::current_exception();
        }
    };
    std::vector<std::thread> ts;
    ts.reserve(static_cast<std::size_t>(n));
    for (int r = 1; r < n; ++r) ts.emplace_back(body, r);
    body(0);
    for (auto& t : ts) t.join();
    if (first) std::rethrow_exception(first);
    if (first_any) std::rethrow_exception(first_any);
}

} // namespace chorus
