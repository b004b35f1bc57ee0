#pragma once
//! \file backend/mpi.hpp
//! The MPI backend: ranks are MPI processes, possibly on many nodes. MPI
//! launches, places and connects them; chorus moves the data with its own
//! algorithms, operators, partitioning and async API.
//!
//! Every collective runs its policy's schedule with the shared rank
//! program (exec/rank_program.hpp) on the schedule executor
//! (backend/mpi_schedule.hpp), whatever the policy; the exchange
//! collectives (all_to_all, all_gatherv, reduce_scatterv, all_to_allv)
//! run algo/exchange.hpp's schedule. Schedules get schedule_args::node_size
//! = ranks per node when every node has the same size and holds
//! consecutive ranks (the real split, or CHORUS_RANKS_PER_NODE's), else 0,
//! and node_window_bytes = each rank's window in its node's shared memory
//! (CHORUS_SHM_BYTES, default 16 MiB) when nodes have several ranks:
//! hierarchical<> AllReduce then stages through the windows
//! (algo/staged.hpp). send/recv (p2p) are MPI point-to-point on a
//! communicator of their own; barrier is MPI_Ibarrier, polled.
//!
//! Connections, per pair of ranks: a rank's scratch lives in its window
//! when it fits, and a node peer reads (or pushes to) it there, in shared
//! memory, waiting on the owner's progress flags in the node segment
//! (mpi_node.hpp). Everything else a rank reads of another rank (its
//! private in, out, or scratch on another node) travels as a message.
//!
//! Zero-copy: on a communicator whose ranks all share one node, a call
//! whose ranks all pass buffers from mpi::api::alloc (mpi_alloc.hpp) runs
//! its schedule over the ranks' own buffers, peers' in/out mapped by name
//! and read or written directly, as the threads transport does
//! (offer_zero_copy, zero_copy_agreed, run_zero_copy below); any other
//! call takes the paths above and below.
//!
//! The message protocol (details in mpi_schedule.hpp): every
//! rank computes every rank's schedule, out of place (what a rank reads
//! from others does not depend on its own in_place). A step of rank r
//! that reads a slice of peer q becomes a message from q to r, which q
//! sends (MPI_Isend straight from its buffer) right after it posts the
//! largest progress r has waited for on q on that channel so far (0:
//! before its first unit), and which r receives (MPI_Irecv, posted for
//! every message at the start) into private staging and uses in place of
//! q's buffer, in the step's reduction order. A step that also stores its
//! result into a peer's buffer (a push: ring<>'s AllReduce) sends it from
//! its own copy after the unit, and the peer receives it straight into its
//! buffer; the peer's wait for that unit completes the receive. Pending
//! sends are tracked: a step that overwrites bytes a send still reads
//! first completes that send, and every send completes before the call
//! returns. Messages travel on a duplicate communicator of their own,
//! tagged by their index in the (sender, receiver) pair's sequence for
//! the collective. A step that writes only a peer's buffer is refused with
//! errc::internal on every rank before anything moves. Every wait is
//! bounded by the call's deadline, the abort flags and a check that the
//! awaited process is alive: a dead peer gives errc::peer_failed, a
//! deadline errc::timeout naming the rank.
//!
//! Include <chorus/mpi.hpp> and link MPI (CMake: MPI::MPI_CXX).

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "../core/communicator.hpp"
#include "../core/element.hpp"
#include "../core/error.hpp"
#include "../core/log.hpp"
#include "../exec/host_reduce_copy.hpp"
#include "../model/cost.hpp"
#include "../model/file.hpp"
#include "../ops/operators.hpp"
#include "../ops/traits.hpp"
#include "../plan/partition.hpp"
#include "host_common.hpp"
#include "host_small.hpp"
#include "host_wait.hpp"
#include "mpi_alloc.hpp"
#include "mpi_c.hpp"
#include "mpi_compare.hpp"
#include "mpi_node.hpp"
#include "mpi_p2p.hpp"
#include "mpi_schedule.hpp"
#include "mpi_wait.hpp"
#include "mpi_wire.hpp"
#include "transport.hpp"

namespace chorus {

namespace detail {
class mpi_transport;
}

//! Backend tag: ranks are MPI processes. communicator<mpi> runs on
//! detail::mpi_transport; api<> adds what only MPI communicators have.
struct mpi {
    using transport = detail::mpi_transport;
    template <class Comm>
    class api;
    static constexpr const char* name = "mpi";
};

namespace detail {




} // namespace detail

namespace detail {

//! The MPI transport (backend/transport.hpp). Construction is collective
//! over the MPI communicator (it sets up the node split and the
//! shared-memory windows, once: no collective allocates them). Async
//! calls run on a worker thread, so they need MPI initialised with
//! MPI_THREAD_MULTIPLE.
class mpi_transport {
public:
    using ordering = host_ordered;

    explicit mpi_transport(MPI_Comm parent) {
        using detail::mpi_check;
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized)
            throw error(errc::invalid_argument, "chorus::communicator<mpi>: MPI is not initialised (call MPI_Init_thread first)");
        try {
            setup(parent);
        } catch (...) {
            release(); // the communicators duplicated so far
            throw;
        }
    }
    mpi_transport(const mpi_transport&) = delete;
    mpi_transport& operator=(const mpi_transport&) = delete;
    ~mpi_transport() { release(); }

    //! Checked mode, agreed: on for every rank where any rank asked for it
    //! (communicator's constructor; collective).
    bool agree_checked(bool mine) {
        int on = mine ? 1 : 0;
        detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &on, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
        return on != 0;
    }

private:
    void setup(MPI_Comm parent) {
        using detail::mpi_check;
        mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
        MPI_Query_thread(&thread_level_);
        const std::size_t window = agree_environment();

        // Who shares memory with whom, and the node split hierarchical<> uses.
        detail::node_discovery found = detail::discover_nodes(comm_, rank_, size_);
        real_node_ = std::move(found.real_node);
        pids_ = std::move(found.pids);
        node_topo_ = std::move(found.topo);

        // Every rank must use the same window size (pieces are planned from it).
        long long w = static_cast<long long>(window);
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_LONG_LONG, MPI_MIN, comm_), "MPI_Allreduce");
        const int node = node_topo_.node_of[static_cast<std::size_t>(rank_)];
        MPI_Comm node_comm = MPI_COMM_NULL;
        mpi_check(MPI_Comm_split(comm_, node, rank_, &node_comm), "MPI_Comm_split");
        // A node whose memory cannot be set up fails every rank, not only
        // its own (the others would wait in the collectives below).
        all_or_none("could not set up its node's shared memory", [&] {
            struct free_comm {
                MPI_Comm& c;
                ~free_comm() { MPI_Comm_free(&c); }
            } on_exit{node_comm};
            node_area_.init(node_comm, static_cast<std::size_t>(w));
        });
        area_local_.assign(static_cast<std::size_t>(size_), -1);
        for (int r : node_topo_.nodes[static_cast<std::size_t>(node)])
            area_local_[static_cast<std::size_t>(r)] = node_topo_.local_of[static_cast<std::size_t>(r)];
        seen_.assign(static_cast<std::size_t>(node_area_.size()) * std::size_t(max_channels), 0);
        verified_.assign(static_cast<std::size_t>(node_area_.size()), 0);
        // Spinning only steals the core from the rank being waited for when
        // the machine runs more of our processes than it has cores. Sleeping
        // is no better there: a rank that waited long (it ran ahead into the
        // next collective) then sleeps in slices of up to 1 ms, and every
        // hand-off it is part of pays that (9 ranks on 2 cores: the ring
        // paths ran 7x slower). Yielding hands the core to a runnable peer
        // and notices the data at once, so wait that way for much longer.
        const unsigned hw = std::thread::hardware_concurrency();
        const auto here = std::count(real_node_.begin(), real_node_.end(), real_node_[static_cast<std::size_t>(rank_)]);
        if (hw != 0 && static_cast<unsigned>(here) > hw) {
            backoff_.spin = std::chrono::microseconds(2);
            backoff_.yield = std::chrono::milliseconds(20);
        }

        // The schedule executor's node split: nodes of L consecutive ranks
        // each, else none (a hierarchical schedule then runs flat).
        const int L = node_topo_.size(0);
        bool regular = true;
        for (int k = 0; k < node_topo_.count() && regular; ++k)
            for (int l = 0; l < node_topo_.size(k) && regular; ++l)
                regular = node_topo_.size(k) == L &&
                          node_topo_.nodes[static_cast<std::size_t>(k)][static_cast<std::size_t>(l)] == k * L + l;
        sched_node_size_ = regular ? L : 0;
        // What automatic plans against: the CHORUS_MODEL file, else the
        // MPI assumptions (model::mpi_topology): shared memory within a
        // node, point-to-point messages for flat schedules.
        const bool several_hosts =
            std::any_of(real_node_.begin(), real_node_.end(), [&](int h) { return h != real_node_[0]; });
        topo_ = model::model_file_given() ? model::current() : model::mpi_topology(sched_node_size_, several_hosts);
        // Ranks that plan against different models would run different
        // algorithms: refuse that here, not with a timeout later.
        {
            const std::uint64_t h = std::hash<std::string>{}(model::to_text(topo_));
            std::uint64_t lo = h, hi = h;
            mpi_check(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, comm_), "MPI_Allreduce");
            mpi_check(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce");
            if (lo != hi) {
                throw error(errc::invalid_argument,
                            "chorus: the ranks' cost models differ (CHORUS_MODEL must name the same file, with "
                            "the same contents, on every rank)");
            }
        }
        // Zero-copy calls (run()): a communicator whose ranks all share the
        // node segment; they plan as ranks of one host do (the CHORUS_MODEL
        // file, else model::default_topology(), no node split).
        zc_node_ = size_ >= 2 && node_topo_.count() == 1;
        zc_topo_ = model::model_file_given() ? topo_ : model::default_topology();
        zc_in_.assign(static_cast<std::size_t>(size_), nullptr);
        zc_out_.assign(static_cast<std::size_t>(size_), nullptr);
        zc_maps_.resize(static_cast<std::size_t>(size_));
        zc_frees_.assign(static_cast<std::size_t>(size_), 0);
        // Communicators of their own for the schedule executor's messages,
        // for the comparisons of calls and for send/recv, so none can match
        // another's or checked mode's.
        mpi_check(MPI_Comm_dup(comm_, &sched_comm_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(sched_comm_, MPI_ERRORS_RETURN);
        mpi_check(MPI_Comm_dup(comm_, &confirm_comm_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(confirm_comm_, MPI_ERRORS_RETURN);
        mpi_check(MPI_Comm_dup(comm_, &abort_comm_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(abort_comm_, MPI_ERRORS_RETURN);
        mpi_check(MPI_Comm_dup(comm_, &p2p_comm_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
        void* ub = nullptr;
        int has_ub = 0;
        mpi_check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &has_ub), "MPI_Comm_get_attr(MPI_TAG_UB)");
        if (has_ub && ub != nullptr) tag_ub_ = *static_cast<int*>(ub);
        tag_top_ = static_cast<int>(std::bit_width(static_cast<std::uint64_t>(tag_ub_) + 1)) - 1;
    }
    //! Every rank parses the environment it will read (CHORUS_CHECK,
    //! CHORUS_TIMEOUT_MS, CHORUS_SHM_BYTES, CHORUS_RANKS_PER_NODE,
    //! CHORUS_MODEL) before the first collective that needs it: a rank
    //! that rejects a value makes every rank throw here, instead of
    //! leaving the others inside an MPI collective it never joins.
    //! Returns this rank's window size (default_window_bytes).
    std::size_t agree_environment() {
        std::size_t window = 0;
        all_or_none("rejected its environment (its error names the variable)", [&] {
            (void)detail::default_checked();
            (void)detail::default_timeout();
            window = detail::default_window_bytes();
            (void)detail::emulated_node_of_process(std::getenv("CHORUS_RANKS_PER_NODE"));
            if (model::model_file_given()) (void)model::current();
        });
        return window;
    }
    //! Runs `f` (a step of construction that may fail on some ranks only)
    //! and then makes every rank fail if one did: that rank with its own
    //! error, the others with errc::peer_failed naming it and `what`.
    //! Collective.
    template <class F>
    void all_or_none(const char* what, F&& f) {
        std::string bad;
        errc code = errc::invalid_argument;
        try {
            f();
        } catch (const error& e) {
            bad = e.what();
            code = e.code();
        }
        int first = bad.empty() ? size_ : rank_;
        detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
        if (!bad.empty()) throw error(code, bad);
        if (first < size_)
            throw error(errc::peer_failed, "chorus::communicator<mpi>: rank " + std::to_string(first) + " " + what);
    }
    //! Frees what construction made (also after it failed part way).
    void release() noexcept {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        detail::mpi_waiter<mpi_transport>::retire(abort_reqs_.data(), static_cast<int>(abort_reqs_.size()),
                                                  std::chrono::milliseconds(100));
        for (MPI_Comm* c : {&p2p_comm_, &abort_comm_, &confirm_comm_, &sched_comm_, &comm_})
            if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }

public:

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }
    //! The communicator's own MPI communicator (a duplicate of the one given).
    MPI_Comm mpi_comm() const noexcept { return comm_; }
    //! The node split hierarchical<> uses: this rank's node, its rank
    //! within the node, the node's size and the number of nodes.
    int node() const { return node_topo_.node_of[static_cast<std::size_t>(rank_)]; }
    int local_rank() const { return node_topo_.local_of[static_cast<std::size_t>(rank_)]; }
    int local_size() const { return node_topo_.size(node()); }
    int nodes() const { return node_topo_.count(); }
    //! What `automatic` plans against (the CHORUS_MODEL file, else
    //! model::mpi_topology) and the node size it is given (0: no regular
    //! split into nodes of consecutive ranks).
    const model::topology& topology() const noexcept { return topo_; }
    int planning_node_size() const noexcept { return sched_node_size_; }

    int node_size() const noexcept { return sched_node_size_; }
    std::uint64_t scratch_limit_bytes() const noexcept { return 0; }
    //! Whether calls whose buffers every rank took from alloc run
    //! zero-copy here (every rank of the communicator on one node, at
    //! least two ranks), and how many collectives did so far.
    bool zero_copy_possible() const noexcept { return zc_node_; }
    //! The small-message protocol (host_small.hpp) runs where zero-copy
    //! does: every rank on one node, at least two.
    std::uint64_t small_message_bytes() const noexcept { return zc_node_ ? host_small_cap : 0; }
    std::uint64_t zero_copy_calls() const noexcept { return zc_calls_.load(std::memory_order_relaxed); }

    //! CHORUS_DEBUG=INFO: how this rank reaches its peers (the communicator
    //! calls it after its own setup line).
    void log_setup() const {
        std::vector<int> same_node, other_nodes;
        for (int q = 0; q < size_; ++q)
            if (q != rank_) (area_local_[static_cast<std::size_t>(q)] >= 0 ? same_node : other_nodes).push_back(q);
        const char* rpn = std::getenv("CHORUS_RANKS_PER_NODE");
        const bool emulated = rpn != nullptr && *rpn != '\0';
        const char* level = thread_level_ >= MPI_THREAD_MULTIPLE    ? "MULTIPLE (async calls allowed)"
                            : thread_level_ >= MPI_THREAD_SERIALIZED ? "SERIALIZED (no async calls)"
                            : thread_level_ >= MPI_THREAD_FUNNELED   ? "FUNNELED (no async calls)"
                                                                     : "SINGLE (no async calls)";
        log_line(log_level::info, rank_, size_,
                 "transport: node %d of %d (%s), local rank %d of %d; shared-memory window %s per rank (%s per call); "
                 "MPI thread level %s",
                 node(), nodes(), emulated ? "emulated: CHORUS_RANKS_PER_NODE" : "MPI_COMM_TYPE_SHARED", local_rank(),
                 local_size(), bytes_text(node_area_.window_bytes()).text, bytes_text(half_window()).text, level);
        if (!same_node.empty())
            log_line(log_level::info, rank_, size_,
                     "transport: peers %s (this node): node shared-memory segment (progress flags, scratch in the "
                     "ranks' windows); their private buffers' data as point-to-point messages",
                     rank_list_text(same_node.data(), same_node.size()).c_str());
        if (!other_nodes.empty())
            log_line(log_level::info, rank_, size_, "transport: peers %s (other nodes): point-to-point messages (MPI)",
                     rank_list_text(other_nodes.data(), other_nodes.size()).c_str());
        log_line(log_level::info, rank_, size_, "transport: zero-copy %s; small-message protocol %s%s",
                 zc_node_ ? "possible (calls whose buffers every rank took from mpi::alloc run over the ranks' own "
                            "buffers)"
                          : "off (the ranks are not all on one node)",
                 small_message_bytes() > 0 ? "on (one node)" : "off (the ranks are not all on one node)",
                 backoff_.yield > std::chrono::milliseconds(1) ? "; waits yield early (more ranks than cores)" : "");
    }
    //! Each rank's window in its node's shared memory, where a schedule's
    //! scratch goes when it fits: hierarchical<> stages through it
    //! (algo/staged.hpp). 0 without a regular split into nodes of several
    //! ranks.
    //! A call has half of it (see node_link in mpi_schedule.hpp).
    std::uint64_t node_window_bytes() const noexcept {
        return sched_node_size_ >= 2 ? half_window() : 0;
    }

    //! Breaks this communicator on this rank, and on every rank of its
    //! node (shared memory); ranks on other nodes fail at their deadline.
    void abort(errc code, const std::string& why) { fail_reason(why, code); }
    bool broken() const noexcept {
        return broken_.load(std::memory_order_acquire) || node_area_.header().aborted_by.load() != 0;
    }
    std::string reason() const {
        std::lock_guard<std::mutex> lk(m_);
        if (!reason_.empty()) return reason_;
        const detail::node_header& h = node_area_.header();
        const std::int64_t by = h.aborted_by.load();
        if (by == 0) return std::string();
        if (h.reason_ready.load(std::memory_order_acquire) != 0)
            return std::string(h.reason, strnlen(h.reason, sizeof h.reason));
        return "rank " + std::to_string(by - 1) + " on this node failed";
    }

    //! Async calls run on the communicator's worker thread.
    void check_launch(collective coll, const void* in, const void* out, std::uint64_t, bool async) const {
        detail::check_host_buffers(coll, in, out);
        if (async) need_threads(collective_name(coll), "collectives");
    }
    void check_p2p(const char* fn, const void* buf, bool async) const {
        detail::check_host_pointer(fn, "buf", buf);
        if (async) need_threads(fn, "calls");
    }

    //! One collective (see the file comment for which policy runs where).
    template <class T, class Op, class Schedules>
    void run(const call& c, const Op& op, Schedules& s);

    //! One send or receive of `count` elements to or from `peer` (see
    //! the definition). A send returns once the receiver has the data.
    //! Sizes or element types that differ fail both calls with
    //! errc::mismatch naming both (the data is consumed; the communicator
    //! stays usable); a wait past the deadline or for a dead peer breaks
    //! the communicator.
    template <class T>
    void transfer(bool is_send, T* buf, std::uint64_t count, int peer, std::uint64_t msg, call_settings cs) {
        detail::mpi_p2p<mpi_transport>{*this}.template transfer<T>(is_send, buf, count, peer, msg, cs);
    }

private:
    //! The bounded wait of every MPI path (mpi_wait.hpp).
    template <class>
    friend struct mpi_waiter;
    template <class>
    friend struct mpi_compare;
    template <class>
    friend struct mpi_p2p;

    //! Breaks the communicator with `why` (the first reason stays). With
    //! `tell` (the thread running this rank's calls, which may call MPI)
    //! the first failure is also sent to every rank (abort_comm_): ranks
    //! on other nodes, which cannot see the node's abort word, fail at
    //! their next wait too instead of at their deadline.
    void fail_reason(const std::string& why, errc code, bool tell = false) {
        bool first = false;
        {
            std::lock_guard<std::mutex> lk(m_);
            if (!broken_.load()) {
                reason_ = why;
                code_ = code;
                first = true;
            }
            broken_.store(true, std::memory_order_release);
        }
        std::int64_t expected = 0;
        if (node_area_.header().aborted_by.compare_exchange_strong(expected, rank_ + 1)) {
            detail::node_header& h = node_area_.header();
            std::snprintf(h.reason, sizeof h.reason, "%s", why.c_str());
            h.reason_ready.store(1, std::memory_order_release);
        }
        if (first && tell && abort_comm_ != MPI_COMM_NULL) {
            std::snprintf(abort_text_, sizeof abort_text_, "%s", why.c_str());
            for (int r = 0; r < size_; ++r) {
                if (r == rank_ || area_local_[std::size_t(r)] >= 0) continue; // they see the node's abort word
                abort_reqs_.push_back(MPI_REQUEST_NULL);
                MPI_Isend(abort_text_, int(sizeof abort_text_), MPI_CHAR, r, 0, abort_comm_, &abort_reqs_.back());
            }
        }
    }
    //! A failure another rank sent (fail_reason's `tell`): the
    //! communicator breaks with its text. Polled by every wait.
    bool told_to_fail() {
        if (abort_comm_ == MPI_COMM_NULL) return false;
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, 0, abort_comm_, &flag, &st) != MPI_SUCCESS || !flag) return false;
        char text[sizeof abort_text_] = {};
        MPI_Recv(text, int(sizeof text), MPI_CHAR, st.MPI_SOURCE, 0, abort_comm_, MPI_STATUS_IGNORE);
        text[sizeof text - 1] = '\0';
        fail_reason(text, errc::peer_failed);
        return true;
    }
    template <class T, class Op, class Schedules>
    void run_schedule(const call& c, std::uint64_t fp, const policy& pol, const T* in, T* out, const Op& op, Schedules& s,
                      std::chrono::steady_clock::time_point deadline);
    template <class T, class Op, class Schedules>
    void run_zero_copy(const call& c, std::uint64_t fp, const policy& pol, const T* in, T* out, const Op& op,
                       Schedules& s, std::chrono::steady_clock::time_point deadline);
    template <class T, class Schedules>
    bool offer_zero_copy(const call& c, std::uint64_t fp, Schedules& s, call& zc);
    bool zero_copy_agreed(const call& c, std::uint64_t fp, std::chrono::steady_clock::time_point deadline);
    struct small_env;
    void run_small(const call& c, const host_kernel& k);
    std::byte* map_peer_buffer(int q, const std::atomic<std::uint64_t> (&loc)[3], const char* head_name);
    //! What a failed run of the executor reports (st != ok): the
    //! communicator breaks and the call throws.
    [[noreturn]] void schedule_failed(detail::status st, int bad, const std::string& doing, const char* head_name,
                                      const call_settings& cs, const policy& pol);
    void need_threads(const char* fn, const char* what) const {
        if (thread_level_ < MPI_THREAD_MULTIPLE)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + fn + "_async: MPI was initialised without MPI_THREAD_MULTIPLE, but " +
                            "async " + what + " run on chorus's worker thread (use MPI_Init_thread(..., " +
                            "MPI_THREAD_MULTIPLE, ...))");
    }
    //! "rank R (process P) died": how every wait names a peer whose process is gone.
    std::string died_text(int r) const {
        return "rank " + std::to_string(r) + " (process " + std::to_string(pids_[static_cast<std::size_t>(r)]) +
               ") died";
    }
    //! Inside a catch block of a call: this rank fails like one that died
    //! (its node peers at once, through the abort word), and the exception
    //! goes on to the caller as it was thrown.
    [[noreturn]] void fail_current(const char* head_name) {
        try {
            throw;
        } catch (const error& err) {
            fail_reason("rank " + std::to_string(rank_) + ": " + head_name + ": " + err.what(), err.code(), true);
            throw;
        } catch (...) {
            fail_reason("rank " + std::to_string(rank_) + " failed in " + head_name + ": " +
                            detail::exception_text(std::current_exception()),
                        errc::peer_failed, true);
            throw;
        }
    }
    [[noreturn]] void fail_call(const std::string& head, errc code, const std::string& msg) {
        fail_reason("rank " + std::to_string(rank_) + ": " + head + ": " + msg, code, true);
        throw error(code, "chorus::" + head + ": " + msg);
    }
    void check_all(const detail::descriptor& mine, std::chrono::steady_clock::time_point deadline);

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0, size_ = 1;
    int thread_level_ = MPI_THREAD_SINGLE;
    std::vector<int> real_node_, pids_;
    detail::mpi_topology node_topo_;
    detail::node_area node_area_;
    detail::backoff_policy backoff_{};
    std::atomic<bool> broken_{false};
    mutable std::mutex m_;
    std::string reason_;
    errc code_ = errc::aborted;
    std::vector<int> area_local_; //!< per rank: its local rank in node_area_, -1 on other nodes
    detail::window_debt debt_[2];    //!< per window half: its last call's deferred final wait
    std::vector<std::uint64_t> seen_; //!< per (local rank, channel): the largest flag value seen
    std::vector<std::uint64_t> verified_; //!< per local rank: the last call whose fingerprint matched ours
    // The zero-copy path (offer_zero_copy, zero_copy_agreed, run_zero_copy).
    bool zc_node_ = false;        //!< every rank in node_area_, at least two
    model::topology zc_topo_{};   //!< what zero-copy calls plan against
    std::vector<std::byte*> zc_in_, zc_out_; //!< per rank: its in and out in this call, as mapped here
    struct zc_mapping {
        std::uint64_t token = 0;
        detail::shm_segment seg;
    };
    std::vector<std::vector<zc_mapping>> zc_maps_; //!< per rank: its buffers this process maps
    std::vector<std::uint64_t> zc_frees_;          //!< per rank: its frees when zc_maps_ was last pruned
    std::atomic<std::uint64_t> zc_calls_{0};       //!< collectives run zero-copy
    bool zc_warned_ = false, zc_noted_ = false;    //!< the log's zero-copy lines, said once (CHORUS_DEBUG)
    detail::small_state small_;                    //!< the small-message protocol's (host_small.hpp)
    //! The base added to a call's planned tags: the low bits stay the
    //! plan's (`tags` of them at least), the bits above carry part of the
    //! call's fingerprint (0 where MPI_TAG_UB leaves fewer than 8 bits).
    int tag_base(std::uint64_t fingerprint, std::uint64_t tags) const {
        int idx = 12;
        while (idx < 30 && (std::uint64_t(1) << idx) < tags) ++idx;
        if (tag_top_ - idx < 8) return 0;
        return static_cast<int>((fingerprint >> 32) & ((std::uint64_t(1) << (tag_top_ - idx)) - 1)) << idx;
    }
    //! Compares this call with every rank's: on one node, every node
    //! peer's published call (node_flag::call); else (sequence,
    //! fingerprint) as messages under tags carrying the fingerprint, so a
    //! rank whose peers made another call fails (at the deadline, or as
    //! soon as a node peer reports the mismatch) instead of returning
    //! success. Run by a call that moves no data (count 0), and after a
    //! broadcast or a reduce, where a rank may otherwise hear only from
    //! ranks that made its own call.
    void confirm_call(const call& c, std::uint64_t fp, const char* head_name,
                      std::chrono::steady_clock::time_point deadline) {
        detail::mpi_compare<mpi_transport>{*this}.confirm_call(c, fp, head_name, deadline);
    }
    //! After a call whose operator may throw (a user operator not
    //! declared noexcept): waits until every rank finished it, so that no
    //! rank returns success from a call in which another rank's operator
    //! threw (that rank aborts instead; its node peers see it at once).
    //! On one node, every node peer's node_flag::done; else a
    //! dissemination under the call's tags.
    void confirm_done(const call& c, std::uint64_t fp, const char* head_name,
                      std::chrono::steady_clock::time_point deadline) {
        detail::mpi_compare<mpi_transport>{*this}.confirm_done(c, fp, head_name, deadline);
    }
    std::size_t half_window() const noexcept { return node_area_.window_bytes() / 2 / 4096 * 4096; }
    // The schedule executor (mpi_schedule.hpp).
    MPI_Comm sched_comm_ = MPI_COMM_NULL; //!< its messages
    MPI_Comm confirm_comm_ = MPI_COMM_NULL; //!< confirm_call's and confirm_done's messages
    MPI_Comm abort_comm_ = MPI_COMM_NULL;   //!< failures sent to other nodes' ranks (fail_reason)
    char abort_text_[256] = {};             //!< what they were sent (alive until the sends end)
    std::vector<MPI_Request> abort_reqs_;
    int tag_ub_ = 32767;                  //!< MPI_TAG_UB (at least 32767 by the standard)
    int tag_top_ = 15;                    //!< tags are below 2^tag_top_ (tag_base)
    int sched_node_size_ = 0;             //!< schedule_args::node_size (0: no regular node split)
    model::topology topo_{};              //!< schedule_args::topo: what automatic plans against
    detail::sched_plan plan_;
    detail::sched_plan zc_plan_; //!< empty: a zero-copy call plans no message
    //! What plan_ was built for (every rank's schedule out of place), so a
    //! repeated call (the same buckets every step) skips walking n
    //! schedules; the exchange collectives are planned every time (their
    //! counts may change behind the same pointer).
    policy plan_pol_{};
    schedule_args plan_args_{};
    bool plan_valid_ = false;
    detail::sched_workspace sched_ws_;     //!< the executor's bookkeeping
    detail::scratch_buffer sched_scratch_; //!< the schedules' scratch
    detail::scratch_buffer staging_;       //!< received data (kept while a failed call may still write it)
    // send/recv
    MPI_Comm p2p_comm_ = MPI_COMM_NULL;
    detail::p2p_header p2p_mine_{}, p2p_theirs_{}; //!< this call's header and the peer's
    detail::scratch_buffer p2p_sink_;              //!< where a mismatched message's data goes
};

template <class T, class Op, class Schedules>
void mpi_transport::run(const call& c, const Op& op, Schedules& s) {
    const call_settings cs = c.settings;
    const collective coll = c.coll;
    const auto* in = static_cast<const T*>(c.in);
    auto* out = static_cast<T*>(c.out);
    const auto deadline = std::chrono::steady_clock::now() + cs.timeout;
    const char* head_name = collective_name(coll);
    if (broken()) fail_call(head_name, errc::aborted, "the communicator is broken (" + reason() + ")");
    if (c.small) return run_small(c, detail::host_kernel_of<T>(op));
    const std::uint64_t fp = detail::call_fingerprint(c);
    // One node: every call says whether this rank could run it zero-copy.
    call zc{};
    const bool zc_offered = zc_node_ && offer_zero_copy<T>(c, fp, s, zc);

    if (cs.checked) {
        detail::descriptor mine{};
        detail::describe_call(mine, c, 0);
        check_all(mine, deadline);
    }
    if (coll == collective::barrier) {
        MPI_Request r = MPI_REQUEST_NULL;
        detail::mpi_check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
        detail::mpi_waiter<mpi_transport> e{*this, deadline};
        const detail::status st = e.wait(&r, 1, -1, false);
        if (st == detail::status::ok) return;
        if (st == detail::status::peer_exited)
            fail_call(head_name, errc::peer_failed, died_text(e.bad_peer));
        if (broken()) fail_call(head_name, errc::aborted, "the communicator was aborted (" + reason() + ")");
        fail_call(head_name, errc::timeout,
                  "timed out after " + std::to_string(cs.timeout.count()) + " ms; some rank never entered it");
    }

    // Every policy runs the exchange collectives' schedule, tuned by the policy.
    if (!is_exchange(coll) && c.count == 0) return confirm_call(c, fp, head_name, deadline);
    if (zc_offered && zero_copy_agreed(c, fp, deadline)) {
        auto zs = s.with(zc);
        run_zero_copy<T>(zc, fp, zs.chosen(), in, out, op, zs, deadline);
        zc_calls_.fetch_add(1, std::memory_order_relaxed);
    } else {
        run_schedule<T>(c, fp, s.chosen(), in, out, op, s, deadline); // chosen(): automatic as its pick
    }
    // After the data (it cannot reach a rank that made another call: the
    // tags and the published calls differ), before returning success.
    if (coll == collective::broadcast || coll == collective::reduce) confirm_call(c, fp, head_name, deadline);
    if constexpr (detail::op_may_throw<Op, T>) confirm_done(c, fp, head_name, deadline);
}

//! A collective: its schedule on the schedule executor (mpi_schedule.hpp).
template <class T, class Op, class Schedules>
void mpi_transport::run_schedule(const call& c, std::uint64_t fp, const policy& pol, const T* in, T* out, const Op& op,
                                 Schedules& s, std::chrono::steady_clock::time_point deadline) {
    const collective coll = c.coll; // pol: automatic as its pick, the plan key and what errors name
    const call_settings cs = c.settings;
    const char* head_name = collective_name(coll);
    const auto& sch = s.mine();
    // Every rank's schedule (this one's too) as planned out of place: what
    // a rank reads from others does not depend on its own in_place.
    const bool planned =
        plan_valid_ && !is_exchange(coll) && pol == plan_pol_ && same_args(c.args, plan_args_, true);
    if (!planned) {
        schedule_args key = c.args;
        key.in_place = false;
        plan_valid_ = false;
        const std::uint64_t window = node_window_bytes() / sizeof(T);
        if (!plan_.build([&s](int q) { return s.of(q); }, rank_, size_, sizeof(T), node_topo_.node_of, window)) {
            // Every rank walks every rank's schedule, so every rank refuses the
            // call here, before anything moved: the communicator stays usable.
            const auto& p = plan_.push;
            throw error(errc::internal,
                        std::string("chorus::") + head_name + ": algorithm " + detail::policy_name(pol) + ": rank " +
                            std::to_string(p.rank) + "'s unit " + std::to_string(p.unit) + " of channel " +
                            std::to_string(p.channel) + " writes rank " + std::to_string(p.target) +
                            "'s buffer and not its own, which communicator<mpi>'s schedule executor does not run");
        }
        plan_pol_ = pol;
        plan_args_ = key;
        plan_valid_ = true;
    }
    if (plan_.tags > std::uint64_t(tag_ub_) + 1)
        fail_call(head_name, errc::invalid_argument,
                  "this call needs " + std::to_string(plan_.tags) +
                      " messages between two ranks, more than MPI_TAG_UB + 1 = " + std::to_string(tag_ub_) +
                      " + 1; use a larger chunk_bytes");
    // Scratch in this call's window half when it fits there (node peers
    // may read it), else private. In place a schedule may need more
    // scratch than planned (its own staging, which no peer reads).
    const std::size_t me = static_cast<std::size_t>(rank_);
    const bool fits = sch.scratch_elems() * sizeof(T) <= half_window();
    if (plan_.reached[me] && !fits)
        throw error(errc::internal, std::string("chorus::") + head_name + ": algorithm " + detail::policy_name(pol) +
                                        ": rank " + std::to_string(rank_) + "'s scratch, which its node peers read, "
                                        "does not fit its window in place (" + std::to_string(sch.scratch_elems() * sizeof(T)) +
                                        " bytes; raise CHORUS_SHM_BYTES)");
    const bool in_window = sch.scratch_elems() != 0 && plan_.in_window[me] && fits;
    T* scratch = sch.scratch_elems() == 0 ? nullptr
                 : in_window ? reinterpret_cast<T*>(node_area_.window(node_area_.local()) + (c.seq & 1) * half_window())
                             : static_cast<T*>(sched_scratch_.reserve(static_cast<std::size_t>(sch.scratch_elems() * sizeof(T))));
    auto* staging = plan_.staging_bytes != 0
                        ? static_cast<std::byte*>(staging_.reserve(static_cast<std::size_t>(plan_.staging_bytes)))
                        : nullptr;
    detail::mpi_waiter<mpi_transport> e{*this, deadline};
    detail::status st = detail::status::ok;
    int bad = -1;
    std::string doing;
    try {
        // The executor cancels and frees whatever is still in flight when it
        // goes (a failed call); `staging_` outlives it for what cannot be.
        // Large results go past the cache: the caller's buffer is not read
        // again by the call.
        const bool streaming = c.count * sizeof(T) >= (std::uint64_t(4) << 20);
        detail::sched_executor<T, Op, detail::mpi_waiter<mpi_transport>> x(
            plan_, sched_ws_, e, sched_comm_, op, rank_, size_, in, out, scratch, staging,
            {&node_area_, &area_local_, c.seq, half_window(), in_window, streaming, debt_, seen_.data(), fp,
             verified_.data()},
            tag_base(fp, plan_.tags));
        st = x.run(sch);
        bad = x.bad_peer;
        doing = x.doing;
    } catch (...) {
        // The operator (user code) threw, or the executor failed: the
        // executor retired what MPI still had of the caller's buffers.
        fail_current(head_name);
    }
    if (st == detail::status::ok) return;
    if (bad < 0) bad = e.bad_peer;
    schedule_failed(st, bad, doing, head_name, cs, pol);
}

//! Publishes, for call `c`, whether this rank can run it zero-copy:
//! a collective that moves data (AllReduce, AllGather, ReduceScatter,
//! Broadcast, Reduce; count > 0) whose `in` and `out` (each null, or all
//! of its extent) lie in buffers of this process from alloc, with the
//! zero-copy schedule's scratch within this call's window half. Every
//! call on a one-node communicator publishes (node_buffers), so that a
//! peer deciding zero_copy_agreed() never waits for a call that does not
//! answer. Returns the answer; `zc` is then the call as it runs
//! zero-copy (planned as ranks of one host: no node split, no window).
template <class T, class Schedules>
bool mpi_transport::offer_zero_copy(const call& c, std::uint64_t fp, Schedules& s, call& zc) {
    detail::node_buffers& b = node_area_.buffers(node_area_.local(), unsigned(c.seq & 1));
    detail::shm_buffers& reg = detail::shm_buffers::process();
    detail::shm_buffers::location li{}, lo{};
    bool capable = false;
    const collective k = c.coll;
    if (c.count != 0 && (k == collective::all_reduce || k == collective::all_gather ||
                         k == collective::reduce_scatter || k == collective::broadcast || k == collective::reduce)) {
        const std::uint64_t n = static_cast<std::uint64_t>(size_);
        const std::uint64_t in_bytes = (k == collective::reduce_scatter ? c.count * n : c.count) * sizeof(T);
        const std::uint64_t out_bytes = (k == collective::all_gather ? c.count * n : c.count) * sizeof(T);
        if ((c.in == nullptr || reg.find(c.in, in_bytes, li)) && (c.out == nullptr || reg.find(c.out, out_bytes, lo))) {
            zc = c;
            zc.args.node_size = 0;
            zc.args.node_window_bytes = 0;
            zc.args.topo = &zc_topo_;
            capable = s.with(zc).mine().scratch_elems() * sizeof(T) <= half_window();
        }
    }
    constexpr auto relaxed = std::memory_order_relaxed;
    b.fingerprint.store(fp, relaxed);
    b.capable.store(capable ? 1 : 0, relaxed);
    b.frees.store(reg.frees(), relaxed);
    b.in[0].store(capable ? li.token : 0, relaxed);
    b.in[1].store(li.offset, relaxed);
    b.in[2].store(li.seg_bytes, relaxed);
    b.out[0].store(capable ? lo.token : 0, relaxed);
    b.out[1].store(lo.offset, relaxed);
    b.out[2].store(lo.seg_bytes, relaxed);
    b.seq.store(c.seq, std::memory_order_release);
    return capable;
}

//! The small-message protocol's view of the node (host_small.hpp): the
//! boxes live in the node segment; a call on the scheduled path shows in
//! the rank's offer (node_buffers, published by every call on a one-node
//! communicator).
struct mpi_transport::small_env {
    mpi_transport& self;
    detail::mpi_waiter<mpi_transport> waiter;

    detail::small_box& box(int q, unsigned parity) { return self.node_area_.box(q, parity); }
    std::uint64_t scheduled(int q) const {
        return std::max(self.node_area_.buffers(q, 0).seq.load(std::memory_order_acquire),
                        self.node_area_.buffers(q, 1).seq.load(std::memory_order_acquire));
    }
    std::uint64_t entered(int q) const {
        return std::max(scheduled(q), std::max(self.node_area_.box(q, 0).seq.load(std::memory_order_acquire),
                                               self.node_area_.box(q, 1).seq.load(std::memory_order_acquire)));
    }
    bool scheduled_call(int, std::uint64_t, detail::descriptor&) const { return false; }
    void posted() {}
    template <class Ready>
    detail::status wait(int q, Ready ready) {
        return waiter.poll(ready, q);
    }
};

//! A call marked call::small (every rank on one node): the small-message
//! protocol over the node segment, in place of the scheduled path and of
//! MPI_Ibarrier (host_small.hpp; one node: local rank q is rank q).
inline void mpi_transport::run_small(const call& c, const host_kernel& k) {
    const char* head_name = collective_name(c.coll);
    small_env env{*this, {*this, std::chrono::steady_clock::now() + c.settings.timeout}};
    detail::small_failure f;
    try {
        f = detail::run_small_call(env, c, k, rank_, size_, small_);
    } catch (...) {
        fail_current(head_name);
    }
    switch (f.st) {
    case detail::status::ok: return;
    case detail::status::timeout:
        fail_call(head_name, errc::timeout,
                  detail::timed_out_waiting(c.settings.timeout.count(), detail::rank_text(f.peer)) +
                      " (small-message protocol); " + detail::small_absent(env, size_, c.seq));
    case detail::status::peer_exited: fail_call(head_name, errc::peer_failed, died_text(f.peer));
    case detail::status::mismatch:
        fail_call(head_name, errc::mismatch,
                  "ranks disagree: " + (c.settings.checked ? f.why : detail::mismatch_text(f.why)));
    case detail::status::unreachable: // the small protocol copies through its own shared memory only
        fail_call(head_name, errc::internal, "the small-message protocol met a buffer of " +
                                                 detail::rank_text(f.peer) + " it cannot reach (a bug in chorus)");
    default: fail_call(head_name, errc::aborted, "the communicator was aborted (" + reason() + ")");
    }
}

//! Whether every rank runs call `c` zero-copy: this rank offered it; waits
//! (bounded: deadline, abort, a dead peer) for every peer's offer of the
//! same call, and agrees when every one is capable with the same
//! fingerprint. Every rank sees the same offers, so every rank decides
//! alike (one that offered nothing takes the staged path at once; the
//! others see it). A peer cannot publish its offer of the call after
//! next over this one before this rank has decided: every collective it
//! finishes needs this rank's part, which comes after the decision. On
//! agreement the peers' buffers are mapped (once per buffer; mappings of
//! buffers a peer freed since are dropped here).
inline bool mpi_transport::zero_copy_agreed(const call& c, std::uint64_t fp,
                                            std::chrono::steady_clock::time_point deadline) {
    const unsigned parity = unsigned(c.seq & 1);
    const char* head_name = collective_name(c.coll);
    detail::mpi_waiter<mpi_transport> e{*this, deadline};
    for (int q = 0; q < size_; ++q) { // one node: local rank q is rank q
        if (q == rank_) continue;
        const detail::node_buffers& b = node_area_.buffers(q, parity);
        const detail::status st = e.poll([&] { return b.seq.load(std::memory_order_acquire) >= c.seq; }, q);
        if (st == detail::status::timeout)
            fail_call(head_name, errc::timeout,
                      detail::timed_out_waiting(c.settings.timeout.count(), detail::rank_text(q)) +
                          " (to enter this call: rank " + std::to_string(q) + " never issued it)");
        if (st == detail::status::peer_exited)
            fail_call(head_name, errc::peer_failed, died_text(q) + " before entering the collective");
        if (st != detail::status::ok)
            fail_call(head_name, errc::aborted, "the communicator was aborted (" + reason() + ")");
        if (b.seq.load(std::memory_order_acquire) != c.seq || b.capable.load(std::memory_order_relaxed) == 0 ||
            b.fingerprint.load(std::memory_order_relaxed) != fp) {
            if (!zc_warned_ && b.capable.load(std::memory_order_relaxed) == 0 && log_enabled(log_level::warn)) {
                zc_warned_ = true;
                log_line(log_level::warn, rank_, size_,
                         "zero-copy: this rank's buffers come from mpi::alloc, rank %d's do not (or its scratch "
                         "does not fit its window): %s #%llu and calls like it run over the node segment and "
                         "messages instead (said once)",
                         q, head_name, static_cast<unsigned long long>(c.seq));
            }
            return false;
        }
    }
    if (!zc_noted_ && log_enabled(log_level::info)) {
        zc_noted_ = true;
        log_line(log_level::info, rank_, size_,
                 "zero-copy: agreed for %s #%llu: every rank's buffers come from mpi::alloc, the call runs over the "
                 "ranks' own buffers (said once)",
                 head_name, static_cast<unsigned long long>(c.seq));
    }
    for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        const detail::node_buffers& b = node_area_.buffers(q, parity);
        const std::size_t i = static_cast<std::size_t>(q);
        const std::uint64_t frees = b.frees.load(std::memory_order_relaxed);
        if (frees != zc_frees_[i]) {
            // The peer freed buffers since: keep only what this call uses.
            const std::uint64_t keep_in = b.in[0].load(std::memory_order_relaxed);
            const std::uint64_t keep_out = b.out[0].load(std::memory_order_relaxed);
            std::erase_if(zc_maps_[i], [&](const zc_mapping& m) { return m.token != keep_in && m.token != keep_out; });
            zc_frees_[i] = frees;
        }
        zc_in_[i] = map_peer_buffer(q, b.in, head_name);
        zc_out_[i] = map_peer_buffer(q, b.out, head_name);
    }
    return true;
}

//! Rank q's buffer (token, byte offset, mapped bytes) as mapped in this
//! process (null for token 0); mapped by name at first use, kept.
inline std::byte* mpi_transport::map_peer_buffer(int q, const std::atomic<std::uint64_t> (&loc)[3],
                                                 const char* head_name) {
    const std::uint64_t token = loc[0].load(std::memory_order_relaxed);
    const std::uint64_t offset = loc[1].load(std::memory_order_relaxed);
    const std::uint64_t bytes = loc[2].load(std::memory_order_relaxed);
    if (token == 0) return nullptr;
    std::vector<zc_mapping>& maps = zc_maps_[static_cast<std::size_t>(q)];
    zc_mapping* m = nullptr;
    for (zc_mapping& x : maps)
        if (x.token == token) m = &x;
    if (m == nullptr) {
        try {
            maps.push_back({token, detail::shm_segment::open(
                                       detail::shm_buffers::name_of(pids_[static_cast<std::size_t>(q)], token),
                                       static_cast<std::size_t>(bytes), true)});
        } catch (const error& err) {
            fail_call(head_name, errc::internal,
                      "could not map rank " + std::to_string(q) + "'s buffer from alloc: " + err.what());
        }
        m = &maps.back();
    }
    if (offset >= m->seg.bytes())
        fail_call(head_name, errc::internal,
                  "rank " + std::to_string(q) + " published an offset past its buffer from alloc");
    return m->seg.data() + offset;
}

//! A collective zero-copy: the schedule of `s` (planned as ranks of one
//! host) on the schedule executor's direct path (run_zero_copy in
//! mpi_schedule.hpp): peers' in, out and scratch read and written in
//! place, node flags between steps, nothing staged, no message.
template <class T, class Op, class Schedules>
void mpi_transport::run_zero_copy(const call& c, std::uint64_t fp, const policy& pol, const T* in, T* out, const Op& op,
                                  Schedules& s, std::chrono::steady_clock::time_point deadline) {
    const char* head_name = collective_name(c.coll);
    const auto& sch = s.mine();
    T* scratch = sch.scratch_elems() == 0
                     ? nullptr
                     : reinterpret_cast<T*>(node_area_.window(node_area_.local()) + (c.seq & 1) * half_window());
    detail::mpi_waiter<mpi_transport> e{*this, deadline};
    detail::status st = detail::status::ok;
    int bad = -1;
    std::string doing;
    try {
        const bool streaming = c.count * sizeof(T) >= (std::uint64_t(4) << 20);
        detail::node_link link{&node_area_, &area_local_, c.seq, half_window(), scratch != nullptr, streaming, debt_,
                               seen_.data(), fp, verified_.data(), zc_in_.data(), zc_out_.data()};
        detail::sched_executor<T, Op, detail::mpi_waiter<mpi_transport>> x(
            zc_plan_, sched_ws_, e, sched_comm_, op, rank_, size_, in, out, scratch, nullptr, link, 0);
        st = x.run_zero_copy(sch);
        bad = x.bad_peer;
        doing = x.doing;
    } catch (...) {
        fail_current(head_name);
    }
    if (st == detail::status::ok) return;
    if (bad < 0) bad = e.bad_peer;
    schedule_failed(st, bad, doing, head_name, c.settings, pol);
}

inline void mpi_transport::schedule_failed(detail::status st, int bad, const std::string& doing, const char* head_name,
                                           const call_settings& cs, const policy& pol) {
    if (st == detail::status::timeout)
        fail_call(head_name, errc::timeout,
                  detail::timed_out_waiting(cs.timeout.count(), detail::rank_text(bad)) + " (" + doing +
                      ", algorithm " + detail::policy_name(pol) + ")");
    if (st == detail::status::peer_exited && bad >= 0)
        fail_call(head_name, errc::peer_failed, died_text(bad) + " during the collective (" + doing + ")");
    if (st == detail::status::mismatch) fail_call(head_name, errc::mismatch, detail::mismatch_text(doing));
    const std::string why = reason();
    throw error(errc::aborted, std::string("chorus::") + head_name + ": communicator aborted" +
                                   (why.empty() ? std::string() : ": " + why));
}

inline void mpi_transport::check_all(const detail::descriptor& mine, std::chrono::steady_clock::time_point deadline) {
    const detail::call_text sig = detail::call_text::of(mine);
    std::vector<detail::call_text> all(static_cast<std::size_t>(size_));
    MPI_Request r = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallgather(&sig, sizeof sig, MPI_BYTE, all.data(), sizeof sig, MPI_BYTE, comm_, &r),
                      "MPI_Iallgather");
    detail::mpi_waiter<mpi_transport> e{*this, deadline};
    const char* head_name = collective_name(mine.sig.coll());
    if (const detail::status st = e.wait(&r, 1, -1, false); st != detail::status::ok) {
        const bool ab = broken();
        const errc code = st == detail::status::peer_exited ? errc::peer_failed : ab ? errc::aborted : errc::timeout;
        const std::string msg =
            st == detail::status::peer_exited ? died_text(e.bad_peer) + " before every rank entered it"
            : ab ? "communicator aborted (" + reason() + ")"
                 : "checked mode: timed out waiting for every rank to enter it";
        fail_reason("rank " + std::to_string(rank_) + ": " + head_name + ": " + msg, code, true);
        throw error(code, std::string("chorus::") + head_name + ": " + msg);
    }
    std::vector<detail::descriptor> calls;
    bool same = true;
    for (const auto& s : all) {
        calls.push_back(s.to_descriptor());
        same = same && calls.back().same_call(mine);
    }
    if (same) return;
    // Every rank saw the same signatures: all fail with the same report, and
    // nobody has moved a byte. The communicator stays usable.
    throw error(errc::mismatch, std::string("chorus::") + head_name + ": ranks disagree: " +
                                    detail::calls_report(mine.sig.seq, calls));
}

} // namespace detail

//! What only MPI communicators have: the MPI communicator, the node split,
//! what automatic plans against, and split().
template <class Comm>
class mpi::api {
public:
    //! The communicator's own MPI communicator (a duplicate of the one given).
    MPI_Comm mpi_comm() const noexcept { return t().mpi_comm(); }
    //! The node split hierarchical<> uses: this rank's node, its rank
    //! within the node, the node's size and the number of nodes.
    int node() const { return t().node(); }
    int local_rank() const { return t().local_rank(); }
    int local_size() const { return t().local_size(); }
    int nodes() const { return t().nodes(); }
    //! What `automatic` plans against (the CHORUS_MODEL file, else
    //! model::mpi_topology) and the node size it is given (0: no regular
    //! split into nodes of consecutive ranks).
    const model::topology& topology() const noexcept { return t().topology(); }
    int planning_node_size() const noexcept { return t().planning_node_size(); }

    //! Memory for zero-copy collectives (like ncclMemAlloc): `count`
    //! elements of T, zero-filled, page-aligned, in a shared-memory
    //! segment of this process that node peers can map. Not collective.
    //! A collective whose ranks all pass buffers from alloc (any span
    //! inside one, in place or not), on a communicator whose ranks share
    //! one node, runs as one fused pass over the ranks' buffers (as the
    //! threads backend does); otherwise, and where any rank passes other
    //! memory, it takes the staged path (docs/scaling.md). Errors:
    //! errc::invalid_argument for count 0 or a size that overflows,
    //! errc::unavailable when /dev/shm or the memory cannot hold it.
    //! Release it with free(); buffers never freed go at exit.
    template <element T>
    std::span<T> alloc(std::size_t count) const {
        const std::string fn = "chorus::communicator<mpi>::alloc<T>";
        void* p = detail::shm_buffers::process().allocate(detail::alloc_bytes(count, sizeof(T), fn), fn);
        return std::span<T>(static_cast<T*>(p), count);
    }
    //! Releases a buffer from alloc (the span alloc returned, or its
    //! start). Not collective, but no collective may still use it on any
    //! rank; peers that mapped it drop their mapping at their next
    //! zero-copy call with this rank. Anything else: errc::invalid_argument.
    template <class T>
    void free(std::span<T> buf) const {
        detail::shm_buffers::process().release(buf.data(), "chorus::communicator<mpi>::free: `buf`");
    }
    void free(const void* p) const {
        detail::shm_buffers::process().release(p, "chorus::communicator<mpi>::free: `p`");
    }
    //! Whether this communicator can run collectives zero-copy (every rank
    //! on one node, at least two; CHORUS_RANKS_PER_NODE splits count), and
    //! how many of its collectives did so far.
    bool zero_copy_possible() const noexcept { return t().zero_copy_possible(); }
    std::uint64_t zero_copy_calls() const noexcept { return t().zero_copy_calls(); }

    //! Collective: a new communicator of the ranks that pass the same
    //! `color`, ordered by `key` (as MPI_Comm_split); nullptr for
    //! MPI_UNDEFINED.
    std::unique_ptr<Comm> split(int color, int key) const {
        MPI_Comm sub = MPI_COMM_NULL;
        detail::mpi_check(MPI_Comm_split(t().mpi_comm(), color, key, &sub), "MPI_Comm_split");
        if (sub == MPI_COMM_NULL) return nullptr;
        struct release {
            MPI_Comm& c;
            ~release() { MPI_Comm_free(&c); }
        } on_exit{sub};
        return std::make_unique<Comm>(sub);
    }

private:
    const detail::mpi_transport& t() const { return static_cast<const Comm&>(*this).transport(); }
};

} // namespace chorus
