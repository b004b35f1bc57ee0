#pragma once
//! \file backend/mpi_schedule.hpp
//! The MPI backend's schedule executor: runs a schedule
//! (algo/schedule.hpp) over the node's shared memory and MPI
//! point-to-point. Part of backend/mpi.hpp, which includes it.
//!
//! Connections per pair. A read (or push) of a node peer's scratch, where
//! the owner's scratch fits its window half, is done in shared memory
//! (node_link, the plan's `shared`): the reader waits on the owner's flag
//! in the node segment and reads the window directly. Every other read of
//! another rank's buffer is a message, as follows.
//!
//! Translation. A schedule step of rank r that reads a slice of peer q's
//! buffer (src0/src1, or a fan-in source) becomes a message from q to r:
//!  * trigger: r's step runs, in shared memory, only after r has seen q's
//!    progress on the step's channel c reach the largest unit count r has
//!    waited for on q so far on c (this step's waits and the earlier
//!    steps', group waits expanded; 0 if none). That is the trigger
//!    (c, u): q sends the slice right after it posts u on c (u = 0: before
//!    its first unit). Taking the earlier waits too (progress only grows)
//!    makes the data exactly what the shared-memory executor would read,
//!    also where a step relies on a wait of an earlier step; a later
//!    trigger than the step's own waits adds no dependency the
//!    shared-memory run does not have, so it cannot deadlock either.
//!  * both sides plan the message list from the same schedule: r's with
//!    in_place = false, whatever r's own in_place (schedule.hpp's
//!    invariant: what a rank reads from a peer and the progress it waits
//!    for do not depend on its own in_place), so sender and receiver agree
//!    by construction; r checks, as it runs its real schedule, that each
//!    peer read is the planned one. Reads are visited in execution order
//!    (unit-major, then channel, then sources in combination order), and
//!    reads of one pair with the same trigger and buffer whose slices are
//!    contiguous are merged into one transfer, so a chunked step costs one
//!    message, not one per chunk.
//!  * tags: transfers of one (sender, receiver) pair are numbered in that
//!    order; a transfer over 1 GiB goes as several messages with
//!    consecutive tags. Every collective uses a dedicated duplicate
//!    communicator, so the numbering restarts at 0 per collective: every
//!    message of a collective is received before either side leaves it.
//!  * receives: every transfer is received into private staging
//!    (MPI_Irecv posted for all of them before the first unit), and the
//!    step uses the staged data in place of the peer's buffer, in the
//!    step's own reduction order (fan-in in q order, src0 op src1).
//!  * sends go straight from the rank's buffers (MPI_Isend, no copy) and
//!    are tracked: before a step writes a region of this rank's buffers
//!    that a pending send still reads, that send completes. Before
//!    returning every send completes (this replaces final_wait); waits
//!    that only order memory (write-after-read guards, sync units) need
//!    nothing else: a rank's buffers change only by its own steps.
//! Pushes. A step of rank q that also stores its result into peer r's
//! buffer (dst2; ring AllReduce's "reduce, copy and send") becomes a
//! message from q's own dst, triggered by q's post of that unit (u + 1 on
//! its channel), which r receives straight into the dst2 slice of its own
//! buffer (posted at the start like every receive). In shared memory r
//! may use that slice once it has seen q's progress reach u + 1 on the
//! channel; here r's wait for exactly that completes the receive (every
//! wait of the rank program on (q, c, units) completes the pushes from q
//! on c whose trigger it covers), so the data is there when the shared
//! memory executor would see it. Both ranks plan the message from q's
//! schedule; tags number a pair's transfers in the order both walk the
//! schedules (rank order, then execution order), so pushes and reads of
//! one pair agree. A step whose dst is a peer's buffer (a push without a
//! copy of its own) is refused: every rank sees every rank's schedule, so
//! all of them refuse the call before a byte moves.
//! Cost per call: every rank computes every rank's schedule and walks all
//! of its units, O(n * units * channels) step evaluations (the exchange
//! schedule's cost O(n) each), plus one transfer record per merged
//! message: well under a millisecond for the rank and chunk counts this
//! backend is tested with. Far more ranks or chunks would want the plan
//! cached per call shape.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <string>
#include <vector>

#include "../algo/schedule.hpp"
#include "../core/error.hpp"
#include "../exec/host_kernel.hpp"
#include "../exec/host_reduce_copy.hpp"
#include "../exec/rank_program.hpp"
#include "host_common.hpp"
#include "host_wait.hpp"
#include "mpi_c.hpp"
#include "mpi_node.hpp"
#include "mpi_plan.hpp"

namespace chorus::detail {

//! The executor's per-call bookkeeping, kept by the communicator so that a
//! call allocates nothing once the vectors have grown.
struct sched_workspace {
    std::vector<MPI_Request> recv_reqs;
    std::vector<char> received;
    std::vector<std::size_t> push_next;
    std::vector<MPI_Request> send_reqs;
    std::vector<std::uintptr_t> send_begin, send_end;
    std::vector<int> send_peer;
    std::vector<const void*> srcs;
};

//! A final wait taken as a debt (rank_program.hpp's defer_final): node
//! peers may still read the window half a call used until their
//! progress reaches `w.units` of call `seq` on every channel.
struct window_debt {
    std::uint64_t seq = 0;
    wait_spec w{};
    int channels = 0;
    int self = -1;
    bool owed = false;
};

//! The connection to this rank's node peers for one call: their flags
//! and windows in the node's shared memory. Windows are used in halves,
//! by the call's parity: a call's final wait on its node peers (they
//! read only windows; whatever they read of private memory went as a
//! message, complete before the call returns) is deferred until this
//! rank next writes that half, two calls later, by when the waits of the
//! call in between have usually shown it done.
struct node_link {
    const node_area* area = nullptr;            //!< this rank's node
    const std::vector<int>* local_of = nullptr; //!< per rank: its local rank on our node, -1 elsewhere
    std::uint64_t seq = 0;                      //!< the call's sequence number (flags' high half)
    std::size_t half_bytes = 0;                 //!< a window half (the call uses half seq & 1)
    bool scratch_in_window = false;             //!< this rank's scratch is in its window half
    bool streaming = false;                     //!< write `out` with streaming stores (large calls)
    window_debt* debt = nullptr;                //!< per half: the deferred final wait of its last call
    std::uint64_t* seen = nullptr;              //!< per (local rank, channel): the largest flag value seen
    std::uint64_t fingerprint = 0;              //!< the call's (call_fingerprint), published in node_flag::call
    std::uint64_t* verified = nullptr;          //!< per local rank: the last call whose fingerprint matched ours
    //! Zero-copy calls (run_zero_copy): per local rank, its `in` and
    //! `out` as mapped in this process (null: none); null otherwise.
    std::byte* const* zc_in = nullptr;
    std::byte* const* zc_out = nullptr;
};

//! Runs one planned collective on one rank. `Waiter` is the backend's
//! bounded wait: status wait(MPI_Request*, int k, int peer, p2p, keep)
//! (deadline, abort, peer death; with `keep` the requests are left to the
//! caller on failure), status poll(ready,
//! peer) (the same bounds around a predicate) and a static
//! retire(MPI_Request*, int k, grace) (cancel, let what cannot be
//! cancelled end within the grace, free).
template <class T, class Op, class Waiter>
class sched_executor {
public:
    //! `tag_base` is added to every planned tag: the bits above the
    //! plan's carry part of the call's fingerprint, so a peer's message
    //! from a call that differs from ours never matches our receives.
    sched_executor(const sched_plan& plan, sched_workspace& ws, Waiter& waiter, MPI_Comm comm, const Op& op, int me,
                   int n, const T* in, T* out, T* scratch, std::byte* staging, node_link link, int tag_base)
        : plan_(plan), w_(waiter), comm_(comm), op_(op), me_(me), n_(n), in_(const_cast<T*>(in)), out_(out),
          scratch_(scratch), staging_(staging), link_(link), tag_base_(tag_base),
          shared_((plan.shared || link.zc_in != nullptr) && link.area != nullptr),
          half_(link.area != nullptr ? std::size_t(link.seq & 1) * link.half_bytes : 0), recv_reqs_(ws.recv_reqs),
          received_(ws.received),
          push_next_(ws.push_next), send_reqs_(ws.send_reqs), send_begin_(ws.send_begin), send_end_(ws.send_end),
          send_peer_(ws.send_peer), srcs_(ws.srcs) {
        send_reqs_.clear();
        send_begin_.clear();
        send_end_.clear();
        send_peer_.clear();
    }
    sched_executor(const sched_executor&) = delete;
    sched_executor& operator=(const sched_executor&) = delete;
    //! Whatever is still in flight (a failed call) is retired: cancelled,
    //! and waited for within a grace, so that MPI is no longer inside the
    //! caller's buffers when the call throws. Requests with a peer that
    //! made another call are freed at once (they never match).
    ~sched_executor() {
        auto open = [](const std::vector<MPI_Request>& v) {
            for (const MPI_Request& r : v)
                if (r != MPI_REQUEST_NULL) return true;
            return false;
        };
        if (!open(recv_reqs_) && !open(send_reqs_)) return; // a call that succeeded
        for (const sched_xfer& x : plan_.recvs)
            if (x.peer == mismatched_peer_)
                for (int f = 0; f < x.frags && x.req + std::size_t(f) < recv_reqs_.size(); ++f)
                    Waiter::retire(&recv_reqs_[x.req + std::size_t(f)], 1, std::chrono::milliseconds(0));
        for (std::size_t i = 0; i < send_reqs_.size(); ++i)
            if (send_peer_[i] == mismatched_peer_) Waiter::retire(&send_reqs_[i], 1, std::chrono::milliseconds(0));
        recv_reqs_.insert(recv_reqs_.end(), send_reqs_.begin(), send_reqs_.end());
        send_reqs_.clear();
        Waiter::retire(recv_reqs_.data(), static_cast<int>(recv_reqs_.size()));
    }

    int bad_peer = -1;  //!< the rank a failed wait waited for
    std::string doing;  //!< what the failed wait waited for

    template <class Sched>
    status run(const Sched& sch) {
        const std::uint64_t per = std::max<std::uint64_t>(1, sched_plan::max_message_bytes / sizeof(T));
        recv_reqs_.assign(plan_.recv_messages, MPI_REQUEST_NULL);
        received_.assign(plan_.recvs.size(), 0);
        if (!plan_.push_recvs.empty()) push_next_.assign(plan_.push_recvs.size(), 0);
        // Node peers may still read our window half (a deferred final wait).
        if (link_.scratch_in_window)
            if (const status st = settle(link_.debt[link_.seq & 1]); st != status::ok) return st;
        const int C = sch.channels();
        // Entered this call (a wait for 0 units asks for that), as the
        // threads backend publishes it; a store fewer on the flags node
        // peers poll where no rank asks.
        if (plan_.entry_waited[std::size_t(me_)])
            for (int c = 0; c < C; ++c) node_post(c, 0);
        for (const sched_xfer& x : plan_.recvs) {
            T* base = x.push ? own({me_, x.loc, x.offset}) : reinterpret_cast<T*>(staging_ + x.staging);
            for (int f = 0; f < x.frags; ++f) {
                const std::uint64_t first = std::uint64_t(f) * per;
                const std::uint64_t m = std::min(per, x.count - first);
                mpi_check(MPI_Irecv(base + first, static_cast<int>(m * sizeof(T)), MPI_BYTE, x.peer,
                                    tag_base_ + x.tag + f, comm_, &recv_reqs_[x.req + std::size_t(f)]),
                          "MPI_Irecv");
            }
        }
        // Trigger u = 0: before unit 0; and what can go early.
        if (const status st = flush(0, C - 1, true); st != status::ok) return st;
        // The shared rank program (exec/rank_program.hpp), with messages.
        message_env env{*this, C};
        if (const status st = run_rank_interleaved(sch, env); st != status::ok) return st;
        // Triggers beyond our last unit (a schedule that waits for more
        // units than we run would hang in shared memory too): send now.
        if (const status st = flush(~std::uint64_t(0), C); st != status::ok) return st;
        for (std::size_t i = 0; i < send_reqs_.size(); ++i)
            if (send_reqs_[i] != MPI_REQUEST_NULL)
                if (const status st = wait_send(i, " to receive this rank's data"); st != status::ok) return st;
        for (std::size_t i = 0; i < plan_.recvs.size(); ++i)
            if (const status st = receive(i); st != status::ok) return st;
        publish();
        return status::ok;
    }

    //! Runs schedule `sch` zero-copy: every rank of the communicator is
    //! a node peer whose in, out (link.zc_in/zc_out) and scratch (its
    //! window half) this process maps, so a step reads and writes peers'
    //! buffers directly, as the threads transport does: waits are waits
    //! on the node flags, no message is planned or sent, and the final
    //! wait is made before returning (peers read the caller's buffers).
    template <class Sched>
    status run_zero_copy(const Sched& sch) {
        recv_reqs_.clear();
        // Node peers may still read our window half (a deferred final
        // wait of an earlier staged call on it).
        if (link_.scratch_in_window)
            if (const status st = settle(link_.debt[link_.seq & 1]); st != status::ok) return st;
        const int C = sch.channels();
        for (int c = 0; c < C; ++c) node_post(c, 0); // entered, as the threads transport publishes it
        direct_env env{*this};
        const status st = run_rank_interleaved(sch, env);
        publish();
        return st;
    }

private:
    //! The rank program's environment of a zero-copy call (run_zero_copy).
    struct direct_env {
        sched_executor& x;
        status wait(int peer, int channel, std::uint64_t units) { return x.node_wait(peer, channel, units); }
        status execute(const step& s) { return s.count != 0 ? x.execute_direct(s) : status::ok; }
        void post(int channel, std::uint64_t units) { x.node_post(channel, units); }
    };
    //! Where operand `o` is in this process, on a zero-copy call.
    T* mapped(const operand& o) const {
        if (o.rank == me_) return own(o);
        const int q = o.rank >= 0 && o.rank < n_ ? (*link_.local_of)[std::size_t(o.rank)] : -1;
        std::byte* b = q < 0                       ? nullptr
                       : o.loc == where::in      ? link_.zc_in[q]
                       : o.loc == where::out     ? link_.zc_out[q]
                       : o.loc == where::scratch ? link_.area->window(q) + half_
                                                 : nullptr;
        if (b == nullptr)
            throw error(errc::internal, "chorus: rank " + std::to_string(me_) + "'s zero-copy schedule uses a buffer "
                                        "rank " + std::to_string(o.rank) + " did not publish");
        return reinterpret_cast<T*>(b) + o.offset;
    }
    //! One step of a zero-copy call: straight between the ranks' buffers.
    status execute_direct(const step& s) {
        srcs_.clear();
        for_each_source(s, [&](const operand& o) { srcs_.push_back(mapped(o)); });
        T* dst = mapped(s.dst);
        T* dst2 = s.dst2.loc == where::none ? nullptr : mapped(s.dst2);
        const int finish_n = s.finish ? n_ : 0;
        const std::size_t m = static_cast<std::size_t>(s.count);
        if (s.fan_in >= 2) {
            host_reduce_fan_erased<T, Op>(&op_, dst, dst2, srcs_.data(), int(s.fan_in), m, finish_n);
            return status::ok;
        }
        // A large call's results in our own `out` go past the cache
        // (node_post() fences them before a node peer can look).
        const bool streaming = link_.streaming && s.dst.rank == me_ && s.dst.loc == where::out && dst2 == nullptr;
        streamed_ = streamed_ || streaming;
        host_reduce_copy(dst, dst2, static_cast<const T*>(srcs_[0]),
                         srcs_.size() > 1 ? static_cast<const T*>(srcs_[1]) : static_cast<const T*>(nullptr), m, op_,
                         finish_n, streaming);
        return status::ok;
    }

    //! The rank program's environment over messages: a wait completes the
    //! pushes it covers and is otherwise already satisfied (the plan
    //! turned it into the triggers of the peers' sends, and execute()
    //! receives what a step reads before using it), execute() runs one
    //! step on staged peer data, and post() sends what peers wait for
    //! after this unit. Units run in the interleaved order
    //! (unit-major, then channel), the order the plan numbered messages in.
    struct message_env {
        sched_executor& x;
        int channels;
        int c = 0;          //!< the unit running now, for error messages
        std::uint64_t p = 0;

        status wait(int peer, int channel, std::uint64_t units) {
            if (const status st = x.node_wait(peer, channel, units); st != status::ok) return st;
            return x.pushed(peer, channel, units);
        }
        status execute(const step& s) { return s.count != 0 ? x.execute(s, c, p) : status::ok; }
        status defer_final(const wait_spec& w, int self, int channel) {
            if (!x.shared_) return wait_for(*this, w, self, channel);
            // Node peers read only our window; the rest (receives of
            // pushes) run() completes. Owed on the half, once per call.
            // Field by field: an aggregate built on the stack and copied
            // in stalled on store forwarding at every call.
            window_debt& d = x.link_.debt[x.link_.seq & 1];
            d.seq = x.link_.seq;
            d.w = w;
            d.channels = channels;
            d.self = self;
            d.owed = true;
            return status::ok;
        }
        void post(int channel, std::uint64_t units) {
            x.node_post(channel, units);
            (void)x.flush(units, channel);
            c = channel + 1 < channels ? channel + 1 : 0;
            p = channel + 1 < channels ? units - 1 : units;
        }
    };

    const sched_plan& plan_;
    Waiter& w_;
    MPI_Comm comm_;
    Op op_;
    int me_, n_;
    T* in_;
    T* out_;
    T* scratch_;
    std::byte* staging_;
    node_link link_;
    int tag_base_;
    bool shared_;           //!< node peers are reached in shared memory in this call
    std::size_t half_;      //!< byte offset of this call's window half
    bool streamed_ = false; //!< streaming stores since the last post
    std::vector<MPI_Request>& recv_reqs_;
    std::vector<char>& received_;
    std::size_t next_send_ = 0;
    std::size_t next_read_ = 0;
    std::size_t next_push_ = 0;
    std::vector<std::size_t>& push_next_; //!< per (sender, channel): pushes received so far
    // Sends in flight: request, the bytes it reads, its receiver.
    std::vector<MPI_Request>& send_reqs_;
    std::vector<std::uintptr_t>& send_begin_;
    std::vector<std::uintptr_t>& send_end_;
    std::vector<int>& send_peer_;
    std::size_t prune_at_ = 64;
    int mismatched_peer_ = -1; //!< a peer found to have made another call
    bool published_ = false;   //!< our call is in node_flag::call
    std::vector<const void*>& srcs_;

    status failed(status st, int peer, std::string what) {
        if (bad_peer < 0) bad_peer = peer;
        doing = std::move(what);
        return st;
    }

    T* own(const operand& o) const {
        unsigned char* b = operand_address(o, in_, out_, scratch_, sizeof(T));
        if (b == nullptr)
            throw error(errc::internal, "chorus: rank " + std::to_string(me_) +
                                            "'s schedule uses a buffer this call does not have");
        return reinterpret_cast<T*>(b);
    }

    //! Whether this rank reaches operand `o` of a node peer in shared
    //! memory (the plan's rule: a node peer's scratch in its window).
    bool direct(const operand& o) const {
        return shared_ && o.loc == where::scratch && (*link_.local_of)[std::size_t(o.rank)] >= 0 &&
               plan_.in_window[std::size_t(o.rank)];
    }
    T* peer_window(const operand& o) const {
        return reinterpret_cast<T*>(link_.area->window((*link_.local_of)[std::size_t(o.rank)]) + half_) + o.offset;
    }

    //! Pays a deferred final wait: every node peer it names has reached
    //! its units on every channel of that call.
    status settle(window_debt& d) {
        if (!d.owed) return status::ok;
        const int span = d.w.span > 1 ? int(d.w.span) : 1;
        for (int c = 0; c < d.channels; ++c)
            for (int i = 0; i < span && d.w.peer >= 0; ++i) {
                const int q = d.w.peer + i * int(d.w.stride);
                if (q == d.self) continue;
                if (const status st = node_wait(q, c, d.w.units, d.seq); st != status::ok) return st;
            }
        d.owed = false;
        return status::ok;
    }

    //! Node peer `peer` has posted `units` on `channel` (a flag in shared
    //! memory). Other ranks: nothing to wait for here. While it waits it
    //! keeps MPI's progress going: a send of ours to another node may be
    //! what lets that peer's own wait end.
    status node_wait(int peer, int channel, std::uint64_t units) {
        return shared_ ? node_wait(peer, channel, units, link_.seq) : status::ok;
    }
    status node_wait(int peer, int channel, std::uint64_t units, std::uint64_t seq) {
        if (link_.area == nullptr || peer < 0 || peer >= n_) return status::ok;
        const int q = (*link_.local_of)[std::size_t(peer)];
        if (q < 0) return status::ok;
        std::atomic<std::uint64_t>& f = link_.area->flag(q, channel);
        const std::uint64_t target = (seq << 32) | units;
        std::uint64_t& seen = link_.seen[std::size_t(q) * std::size_t(max_channels) + std::size_t(channel)];
        // Only a wait of this call compares calls (a deferred final wait
        // is of an earlier one, compared then).
        const bool compare = seq == link_.seq && link_.verified[q] != seq;
        if (seen >= target || (seen = f.load(std::memory_order_acquire)) >= target) {
            if (compare && !same_call(q)) return mismatched(peer);
            return status::ok; // flags only grow
        }
        const bool messages = !plan_.sends.empty() || !plan_.recvs.empty();
        bool differs = false;
        publish();
        unsigned polls = 0;
        const status st = w_.poll(
            [&] {
                // Now and then: a load of the word the peer stores just
                // before its flag would pull the line away between the two.
                if (compare && (++polls & 63) == 0 && !same_call(q)) return differs = true;
                if ((seen = f.load(std::memory_order_acquire)) >= target) return true;
                if (messages) {
                    int flag = 0;
                    mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
                }
                return false;
            },
            peer);
        if (differs || (st == status::ok && compare && !same_call(q))) return mismatched(peer);
        if (st == status::ok) return st;
        return failed(st, peer, "waiting for rank " + std::to_string(peer) + " to finish its unit " +
                                    std::to_string(units) + " of channel " + std::to_string(channel) +
                                    " (shared memory)");
    }
    //! Publishes our call for node peers to compare before they touch
    //! anything of ours (we compare theirs: same_call): before our first
    //! post (the same cache line, one transfer), before we first block,
    //! and at the end of the call.
    void publish() {
        if (published_ || link_.area == nullptr) return;
        published_ = true;
        link_.area->call(link_.area->local(), unsigned(link_.seq & 1))
            .store(node_call_word(link_.seq, link_.fingerprint), std::memory_order_release);
    }
    //! Whether local rank q's published call, if it is this call, is the
    //! same as ours (false: it differs). Remembered once it matched; a
    //! peer already past this call (its word names a later one) is not
    //! compared again.
    bool same_call(int q) {
        const std::uint64_t v = link_.area->call(q, unsigned(link_.seq & 1)).load(std::memory_order_acquire);
        if ((v >> 32) != (link_.seq & 0xffffffffu)) return true; // not published yet, or moved on
        if ((v & 0xffffffffu) != (link_.fingerprint & 0xffffffffu)) return false;
        link_.verified[q] = link_.seq;
        return true;
    }
    status mismatched(int peer) {
        mismatched_peer_ = peer;
        return failed(status::mismatch, peer, different_call_text(peer));
    }
    //! Waits for k requests with `peer`; a failure is recorded as
    //! failed(st, peer, what()). A node peer whose call has not been
    //! compared yet is compared while waiting: its messages carry another
    //! call's tags and would never arrive (mismatched()). What is left of
    //! the requests on failure the destructor retires.
    template <class What>
    status wait_on(MPI_Request* reqs, int k, int peer, What&& what) {
        const int q = link_.area != nullptr && peer >= 0 && peer < n_ ? (*link_.local_of)[std::size_t(peer)] : -1;
        publish();
        status st = status::ok;
        if (q < 0 || link_.verified[q] == link_.seq) {
            st = w_.wait(reqs, k, peer, true, true);
        } else {
            bool differs = false;
            int done = 0, rc = MPI_SUCCESS;
            st = w_.poll(
                [&] {
                    if (!same_call(q)) return differs = true;
                    rc = MPI_Testall(k, reqs, &done, MPI_STATUSES_IGNORE);
                    return rc != MPI_SUCCESS || done != 0;
                },
                peer);
            mpi_check(rc, "MPI_Testall");
            if (differs) return mismatched(peer);
        }
        return st == status::ok ? st : failed(st, peer, what());
    }
    //! Waits for send i, "waiting for rank <its peer><until>" if it fails.
    status wait_send(std::size_t i, const char* until) {
        return wait_on(&send_reqs_[i], 1, send_peer_[i],
                       [&] { return "waiting for rank " + std::to_string(send_peer_[i]) + until; });
    }
    //! Publishes this rank's progress to its node peers.
    void node_post(int channel, std::uint64_t units) {
        if (!shared_) return;
        publish();
        if (streamed_) store_fence();
        streamed_ = false;
        link_.area->flag(link_.area->local(), channel).store((link_.seq << 32) | units, std::memory_order_release);
    }

    //! Whether transfer x can go before its trigger: it reads this rank's
    //! input and the call is out of place, so no step of this rank writes
    //! it (the input is const) and it is the same at every trigger.
    bool early(const sched_xfer& x) const { return !x.push && x.loc == where::in && in_ != out_; }

    //! Sends every transfer whose trigger is at or before (u, c), or (at
    //! the start: early_too) that can go early.
    status flush(std::uint64_t u, int c, bool early_too = false) {
        if (early_too)
            for (std::size_t i = next_send_; i < plan_.sends.size(); ++i)
                if (early(plan_.sends[i])) send(plan_.sends[i]);
        while (next_send_ < plan_.sends.size()) {
            const sched_xfer& x = plan_.sends[next_send_];
            if (x.unit > u || (x.unit == u && x.channel > c)) break;
            ++next_send_;
            if (!early(x)) send(x);
        }
        if (send_reqs_.size() >= prune_at_) prune();
        return status::ok;
    }

    //! Starts transfer x (straight from this rank's buffer).
    void send(const sched_xfer& x) {
        const std::uint64_t per = std::max<std::uint64_t>(1, sched_plan::max_message_bytes / sizeof(T));
        const T* base = own({me_, x.loc, x.offset});
        for (int f = 0; f < x.frags; ++f) {
            const std::uint64_t first = std::uint64_t(f) * per;
            const std::uint64_t m = std::min(per, x.count - first);
            send_reqs_.push_back(MPI_REQUEST_NULL);
            send_peer_.push_back(x.peer);
            send_begin_.push_back(reinterpret_cast<std::uintptr_t>(base + first));
            send_end_.push_back(reinterpret_cast<std::uintptr_t>(base + first + m));
            mpi_check(MPI_Isend(base + first, static_cast<int>(m * sizeof(T)), MPI_BYTE, x.peer, tag_base_ + x.tag + f,
                                comm_, &send_reqs_.back()),
                      "MPI_Isend");
        }
    }

    //! Forgets the sends that have completed.
    void prune() {
        int done = 0;
        std::vector<int> idx(send_reqs_.size());
        mpi_check(MPI_Testsome(static_cast<int>(send_reqs_.size()), send_reqs_.data(), &done, idx.data(),
                               MPI_STATUSES_IGNORE),
                  "MPI_Testsome");
        std::size_t k = 0;
        for (std::size_t i = 0; i < send_reqs_.size(); ++i) {
            if (send_reqs_[i] == MPI_REQUEST_NULL) continue;
            send_reqs_[k] = send_reqs_[i];
            send_begin_[k] = send_begin_[i];
            send_end_[k] = send_end_[i];
            send_peer_[k] = send_peer_[i];
            ++k;
        }
        send_reqs_.resize(k);
        send_begin_.resize(k);
        send_end_.resize(k);
        send_peer_.resize(k);
        prune_at_ = std::max<std::size_t>(64, 2 * k);
    }

    //! Before a step writes [p, p + m): complete the sends that read it.
    status guard(const T* p, std::uint64_t m) {
        const auto b = reinterpret_cast<std::uintptr_t>(p), e = reinterpret_cast<std::uintptr_t>(p + m);
        for (std::size_t i = 0; i < send_reqs_.size(); ++i) {
            if (send_reqs_[i] == MPI_REQUEST_NULL || send_end_[i] <= b || e <= send_begin_[i]) continue;
            if (const status st = wait_send(i, " to receive data before this rank overwrites it"); st != status::ok)
                return st;
        }
        return status::ok;
    }

    //! The pushes from `peer` on `channel` that its progress `units`
    //! covers have arrived.
    status pushed(int peer, int channel, std::uint64_t units) {
        if (plan_.push_recvs.empty() || peer < 0 || peer >= n_ || channel >= plan_.push_channels) return status::ok;
        const std::size_t k = std::size_t(peer) * std::size_t(plan_.push_channels) + std::size_t(channel);
        const std::vector<std::size_t>& list = plan_.push_recvs[k];
        for (std::size_t& i = push_next_[k]; i < list.size() && plan_.recvs[list[i]].unit <= units; ++i)
            if (const status st = receive(list[i]); st != status::ok) return st;
        return status::ok;
    }

    //! Receive transfer i has arrived.
    status receive(std::size_t i) {
        if (received_[i]) return status::ok;
        const sched_xfer& x = plan_.recvs[i];
        if (const status st = wait_on(&recv_reqs_[x.req], x.frags, x.peer,
                                      [&] {
                                          return "waiting for rank " + std::to_string(x.peer) +
                                                 "'s data (its channel " + std::to_string(x.channel) +
                                                 ", after its unit " + std::to_string(x.unit) + ")";
                                      });
            st != status::ok)
            return st;
        received_[i] = 1;
        return status::ok;
    }

    //! Step s's push is this rank's next planned one.
    bool planned_push(const step& s) {
        if (next_push_ >= plan_.pushes.size()) return false;
        const sched_push& q = plan_.pushes[next_push_++];
        return q.count == s.count && q.dst.loc == s.dst.loc && q.dst.offset == s.dst.offset &&
               q.target.rank == s.dst2.rank && q.target.loc == s.dst2.loc && q.target.offset == s.dst2.offset;
    }

    status execute(const step& s, int c, std::uint64_t p) {
        srcs_.clear();
        status st = status::ok;
        for_each_source(s, [&](const operand& o) {
            if (o.rank == me_) {
                srcs_.push_back(own(o));
                return;
            }
            if (direct(o)) {
                srcs_.push_back(peer_window(o));
                return;
            }
            if (next_read_ >= plan_.reads.size())
                throw error(errc::internal, "chorus: rank " + std::to_string(me_) + " reads more peer data in unit " +
                                                std::to_string(p) + " of channel " + std::to_string(c) +
                                                " than it planned");
            const sched_read rd = plan_.reads[next_read_++];
            if (rd.src.rank != o.rank || rd.src.loc != o.loc || rd.src.offset != o.offset || rd.count != s.count)
                throw error(errc::internal, "chorus: rank " + std::to_string(me_) + "'s unit " + std::to_string(p) +
                                                " of channel " + std::to_string(c) + " reads rank " +
                                                std::to_string(o.rank) + "'s data differently in place than out "
                                                "of place (the schedule breaks schedule.hpp's invariant)");
            if (st == status::ok) st = receive(rd.xfer);
            srcs_.push_back(reinterpret_cast<const T*>(staging_ + plan_.recvs[rd.xfer].staging) + rd.skip);
        });
        if (st != status::ok) return st;
        if (srcs_.empty())
            throw error(errc::internal, "chorus: rank " + std::to_string(me_) + "'s unit " + std::to_string(p) +
                                            " of channel " + std::to_string(c) + " moves data but has no source");
        const bool push = s.dst2.loc != where::none && s.dst2.rank != me_ && !direct(s.dst2);
        if (s.dst.rank != me_ || (push && !planned_push(s)))
            throw error(errc::internal, "chorus: rank " + std::to_string(me_) + "'s unit " + std::to_string(p) +
                                            " of channel " + std::to_string(c) +
                                            " writes another rank's buffer differently in place than out of place "
                                            "(the schedule breaks schedule.hpp's invariant)");
        // A push: the result goes to our own dst, and from there to the
        // peer as the message post() sends after this unit.
        T* dst = own(s.dst);
        T* dst2 = s.dst2.loc == where::none || push ? nullptr
                  : s.dst2.rank != me_                ? peer_window(s.dst2)
                                                      : own(s.dst2);
        if (const status g = guard(dst, s.count); g != status::ok) return g;
        if (dst2 != nullptr && s.dst2.rank == me_)
            if (const status g = guard(dst2, s.count); g != status::ok) return g;
        const int finish_n = s.finish ? n_ : 0;
        const std::size_t m = static_cast<std::size_t>(s.count);
        if (s.fan_in >= 2)
            host_reduce_fan_erased<T, Op>(&op_, dst, dst2, srcs_.data(), int(s.fan_in), m, finish_n);
        else {
            // A large call's results in `out` go past the cache (post()
            // fences them before a node peer can look).
            const bool streaming = shared_ && link_.streaming && s.dst.loc == where::out && dst2 == nullptr;
            streamed_ = streamed_ || streaming;
            host_reduce_copy(dst, dst2, static_cast<const T*>(srcs_[0]),
                             srcs_.size() > 1 ? static_cast<const T*>(srcs_[1]) : static_cast<const T*>(nullptr), m,
                             op_, finish_n, streaming);
        }
        return status::ok;
    }
};

} // namespace chorus::detail
