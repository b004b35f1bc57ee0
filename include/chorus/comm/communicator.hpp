#pragma once
//! \file comm/communicator.hpp
//! communicator<Backend>: written once over the backend's transport
//! (backend/transport.hpp has the contract). What every backend shares
//! lives here: sequence numbers, the deadline and checked-mode settings,
//! the order calls run in (the communicator's host stream, or the CUDA
//! stream passed as an argument), futures, the broken state's error texts,
//! point-to-point message numbers, the one dispatch from a policy (and
//! automatic's choice) to this rank's schedule, and what a call shows of
//! itself (the CHORUS_DEBUG log, NVTX ranges, last_call():
//! docs/observability.md).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../algo/any_schedule.hpp"
#include "../algo/automatic.hpp"
#include "../algo/exchange.hpp"
#include "../async/future.hpp"
#include "../async/host_stream.hpp"
#include "../backend/host_common.hpp"
#include "../backend/transport.hpp"
#include "../core/communicator.hpp"
#include "../core/error.hpp"
#include "../core/log.hpp"
#include "../core/nvtx.hpp"
#include "../exec/host_kernel.hpp"
#include "../model/file.hpp"
#include "../ops/operators.hpp"
#include "../ops/traits.hpp"

namespace chorus {

namespace detail {

//! This rank's schedules for one call, made when a transport asks (a
//! transport that runs the call otherwise never pays for them).
class call_schedules {
public:
    call_schedules(schedule_memo& memo, const call& c) : memo_(memo), c_(c) {}
    //! This rank's schedule (remembered: a repeated call costs a comparison).
    const any_schedule& mine() { return memo_.make(c_.planned, c_.args); }
    //! Rank q's schedule, planned out of place (what a rank reads from
    //! others does not depend on its own in_place).
    any_schedule of(int q) const {
        schedule_args a = c_.args;
        a.rank = q;
        a.in_place = false;
        return make_schedule(c_.planned, a, &memo_.choices());
    }
    //! The policy that runs, as a fixed policy: `automatic` resolved to its
    //! pick (the one make_schedule makes), anything else as it is.
    policy chosen() const {
        const policy& p = c_.planned;
        if (!p.choose || p.deterministic || is_exchange(c_.args.coll)) return p;
        return policy::fixed(automatic::choose(c_.args, &memo_.choices()));
    }
    const call& what() const noexcept { return c_; }
    //! The same rank's schedules for `other`, a variant of this call
    //! (other schedule_args: communicator<mpi>'s zero-copy path), made
    //! and remembered the same way; `other` must outlive the result.
    call_schedules with(const call& other) const { return call_schedules(memo_, other); }

private:
    schedule_memo& memo_;
    const call& c_;
};

//! The nccl-tests size of call `c` in bytes (call_info::bytes).
inline std::uint64_t call_size_bytes(const call& c) {
    const std::uint64_t e = c.types.elem_bytes;
    switch (c.coll) {
    case collective::all_gather:
    case collective::reduce_scatter:
    case collective::all_to_all: return c.count * e * std::uint64_t(c.args.nranks);
    case collective::all_gatherv:
    case collective::reduce_scatterv:
    case collective::all_to_allv: return c.signature_count * e;
    case collective::barrier: return 0;
    default: return c.count * e;
    }
}

//! What call `c` runs (call_info). `s`: the call's schedules on the thread
//! that runs it (automatic's memo); null: planned again here, as
//! communicator::last_call() does (the same pick: automatic's choice
//! depends on the call's schedule_args only).
inline call_info info_of(const call& c, call_schedules* s) {
    call_info i;
    i.seq = c.seq;
    i.coll = c.coll;
    i.bytes = call_size_bytes(c);
    const policy& p = c.planned;
    i.policy = c.coll == collective::barrier ? ""
               : c.pol.deterministic         ? "deterministic"
               : c.pol.choose                ? "automatic"
                                             : algorithm_name(c.pol.algo);
    if (c.small) {
        i.algorithm = "small";
        i.channels = 1;
        return i;
    }
    if (is_exchange(c.coll)) { // not planned here: its counts may be gone (last_call())
        i.algorithm = "exchange";
        i.channels = p.tune.channels > 0 ? p.tune.channels : 1;
        return i;
    }
    const any_schedule sch = s != nullptr ? s->mine() : make_schedule(p, c.args);
    i.channels = sch.channels();
    if (sch.kind == schedule_kind::ll) { // the LL protocol (algo/ll.hpp)
        i.algorithm = "direct_ll";
        return i;
    }
    if (p.deterministic) {
        // Reductions fold in rank order (direct or two-shot); copies run Algo, or automatic's pick.
        i.algorithm = sch.kind == schedule_kind::two_shot ? "two_shot"
                      : sch.kind == schedule_kind::direct ? "direct"
                      : algorithm_name(p.choose ? automatic::choose(c.args) : p.algo);
    } else {
        // What runs: automatic's pick or the named algorithm, as the
        // collective runs it (tree<>'s AllGather runs ring<>'s schedule, ...).
        const algorithm a = !p.choose ? p.algo : s != nullptr ? s->chosen().algo : automatic::choose(c.args);
        i.algorithm = algorithm_name(model::runs_as(c.coll, a));
    }
    return i;
}

//! Nothing: the stream member of a communicator whose transport orders
//! calls on CUDA streams.
struct no_host_stream {};

//! The communicator whose collective the calling thread is running (null:
//! none): a call on it from there, from a user operator, is refused.
inline thread_local const void* running_collective = nullptr;

//! Set while a thread issues a call on a communicator. A communicator
//! copied or moved (GPU ranks live in a vector) starts clear: no call can
//! be under way on the object it came from.
struct issue_flag {
    std::atomic<bool> busy{false};
    issue_flag() = default;
    issue_flag(const issue_flag&) noexcept {}
    issue_flag& operator=(const issue_flag&) noexcept { return *this; }
};

} // namespace detail

//! A rank's handle on a communicator of backend `Backend` (threads, mpi,
//! gpu::device): made by run_threads, from an MPI communicator, or by
//! gpu::make_communicators. All ranks must issue collectives in the same
//! order. Host backends' communicators are not copyable or movable (the
//! async stream and peers refer to them); a GPU communicator is a cheap
//! handle.
template <class Backend>
class communicator : public Backend::template api<communicator<Backend>>, public detail::call_options {
    using transport_type = typename Backend::transport;
    static_assert(detail::transport<transport_type>, "chorus: Backend::transport must meet backend/transport.hpp");
    static constexpr bool host_ordered = std::is_same_v<typename transport_type::ordering, detail::host_ordered>;

public:
    template <class... A>
        requires std::constructible_from<transport_type, A...>
    explicit communicator(A&&... a) : t_(std::forward<A>(a)...) {
        schedules_.choices().owner = rank(); // the log names the rank whose choice it was
        load_defaults();
        // Checked mode changes what a call exchanges: where ranks could
        // read different settings (MPI processes), the transport makes them
        // agree (on where any rank asked for it).
        if constexpr (requires { t_.agree_checked(true); }) set_checked(t_.agree_checked(checked()));
        if (detail::log_enabled(detail::log_level::version)) [[unlikely]]
            log_setup();
    }
    ~communicator() {
        if constexpr (host_ordered) stream_.drain();
    }

    int rank() const noexcept { return t_.rank(); }
    int size() const noexcept { return t_.size(); }

    // set_timeout, set_call_timeout, set_checked: detail::call_options.

    //! Breaks the communicator: waiters of every rank it reaches are
    //! released with an error, and every later call fails (threads and GPU:
    //! every rank; MPI: the ranks of this node, the others at their deadline).
    //! Callable from any thread.
    void abort(const std::string& why = "comm.abort() called") {
        t_.abort(errc::aborted, "rank " + std::to_string(rank()) + ": " + why);
    }
    //! True after abort() or after a failed call broke the communicator.
    bool broken() const noexcept { return t_.broken(); }

    //! Blocks until every call issued on this communicator has finished
    //! (GPU: on the rank's own stream; then throws if one of them failed).
    void synchronize() {
        if constexpr (host_ordered) stream_.drain();
        else t_.synchronize();
    }

    //! What the last collective issued on this communicator runs: its
    //! collective, the algorithm (automatic's pick, "small", "exchange"),
    //! channels and bytes (call_info; seq 0 before the first call). Ask from
    //! the thread that issues the calls; an async call counts once issued.
    call_info last_call() const { return last_.seq == 0 ? call_info{} : detail::info_of(last_, nullptr); }
    //! last_call().algorithm: "ring", "direct", "small", ... ("" before the first call).
    const char* last_algorithm() const { return last_call().algorithm; }

    //! The transport (backend/transport.hpp), for the backend's own calls.
    transport_type& transport() noexcept { return t_; }
    const transport_type& transport() const noexcept { return t_; }

    //! \internal Runs (or queues) one collective. Buffers were validated by
    //! the caller. `stream`: the stream a stream-ordered call is ordered on
    //! (host backends refuse one). `counts`: the "v" collectives' counts
    //! (copied for an async call, so the caller may free them at once).
    template <class T, class Op>
    future launch(const policy& pol, collective coll, const T* in, T* out, std::uint64_t count, const Op& op,
                  int root, bool async, detail::stream_arg stream = {},
                  std::span<const std::uint64_t> counts = {}) {
        if constexpr (!std::is_same_v<detail::canonical_op_t<Op, T>, Op>) {
            // std::plus<> and kin run as the built-in they equal (ops/operators.hpp).
            (void)op;
            return launch<T>(pol, coll, in, out, count, detail::canonical_op_t<Op, T>{}, root, async, stream, counts);
        }
        if constexpr (host_ordered) refuse_stream(coll, stream);
        const issue_guard guard(*this, collective_name(coll));
        if (t_.broken()) throw_broken(collective_name(coll));
        t_.check_launch(coll, in, out, count, async);
        if constexpr (host_ordered)
            if (async) stream_.start(); // a worker that cannot start fails the call before it has a number
        // The call is described in last_ (what last_call() reports): no copy.
        detail::call& c = last_;
        describe<T, Op>(c, pol, coll, in, out, count, root, counts);
        if constexpr (host_ordered) {
            if (!async) {
                // Sync: the caller's counts and operator outlive the call.
                stream_.run_sync([this, &c, &op] { run<T>(c, op); });
                return future();
            }
            // An async call keeps its own counts and operator.
            auto owned = std::make_shared<const std::vector<std::uint64_t>>(counts.begin(), counts.end());
            c.counts = std::span<const std::uint64_t>(*owned);
            c.args.counts = owned->empty() ? nullptr : owned->data();
            auto task = [this, c, op, owned] { run<T>(c, op); };
            return stream_.enqueue(std::function<void()>(std::move(task)), [this, coll] {
                t_.abort(errc::peer_failed, "rank " + std::to_string(rank()) + " left an unfinished " +
                                                collective_name(coll) + " behind while an exception unwound");
            });
        } else {
            detail::call_schedules s(schedules_, c);
            detail::nvtx_range range; // around the launch
            if (detail::log_enabled(detail::log_level::trace) || detail::nvtx_range::active()) [[unlikely]]
                observe(c, s, range);
            t_.template enqueue<T>(c, op, s, stream.given ? stream.handle : nullptr);
            if (!async) {
                if (!stream.given) t_.synchronize(); // a call without a stream: wait, and report
                return future();
            }
            return t_.completion(stream.given ? stream.handle : nullptr);
        }
    }

    //! \internal Runs (or queues) one send (is_send) or receive of `count`
    //! elements to or from `peer`, on transports that have point-to-point.
    //! Messages between two ranks match in issue order, independently of
    //! the collectives. Validated by the caller (collectives/p2p.hpp: buf
    //! holds count elements, peer is another rank).
    template <class T>
        requires requires(transport_type& t, T* buf, detail::call_settings cs) {
            t.template transfer<T>(true, buf, std::uint64_t{}, 0, std::uint64_t{}, cs);
        }
    future p2p(bool is_send, T* buf, std::uint64_t count, int peer, bool async) {
        const char* fn = is_send ? "send" : "recv";
        const issue_guard guard(*this, fn);
        if (t_.broken()) throw_broken(fn);
        t_.check_p2p(fn, buf, async);
        if (sent_.empty()) {
            sent_.assign(static_cast<std::size_t>(size()), 0);
            received_.assign(static_cast<std::size_t>(size()), 0);
        }
        if (async) stream_.start(); // before the message takes its number
        std::uint64_t& counter = (is_send ? sent_ : received_)[static_cast<std::size_t>(peer)];
        const std::uint64_t msg = ++counter;
        const detail::call_settings cs = issue();
        auto task = [this, is_send, buf, count, peer, msg, cs] {
            t_.template transfer<T>(is_send, buf, count, peer, msg, cs);
        };
        if (async)
            return stream_.enqueue(std::function<void()>(task), [this, fn, peer] {
                t_.abort(errc::peer_failed, "rank " + std::to_string(rank()) + " left an unfinished " + fn +
                                                (fn[0] == 's' ? " to" : " from") + " rank " + std::to_string(peer) +
                                                " behind while an exception unwound");
            });
        stream_.run_sync(task);
        return future();
    }

    //! \internal One send (is_send) or receive on a stream-ordered
    //! transport (GPU): enqueued on `stream` (not given: the rank's own
    //! stream, waited for when the call is synchronous). The pair's
    //! message numbers are kept by the transport (on the device), not here.
    //! Validated by the caller as above.
    template <class T>
        requires requires(transport_type& t, T* buf, detail::call_settings cs) {
            t.template enqueue_p2p<T>(true, buf, std::uint64_t{}, 0, cs, static_cast<void*>(nullptr));
        }
    future p2p(bool is_send, T* buf, std::uint64_t count, int peer, bool async, detail::stream_arg stream = {}) {
        const char* fn = is_send ? "send" : "recv";
        const issue_guard guard(*this, fn);
        if (t_.broken()) throw_broken(fn);
        void* handle = stream.given ? stream.handle : nullptr;
        t_.template enqueue_p2p<T>(is_send, buf, count, peer, issue(), handle);
        if (!async) {
            if (!stream.given) t_.synchronize(); // a call without a stream: wait, and report
            return future();
        }
        return t_.completion(handle);
    }

private:
    //! Held while a call is issued (and, for a synchronous call on the
    //! host stream, run). A communicator takes its calls from one thread
    //! at a time, and never from code its own collective runs (a user
    //! operator): both are refused with errc::invalid_argument before
    //! anything of the communicator is touched (the flag's acquire and
    //! release also order one thread's calls after another's).
    class issue_guard {
    public:
        issue_guard(communicator& c, const char* fn) : flag_(c.issuing_.busy) {
            if (detail::running_collective == static_cast<const void*>(&c))
                throw error(errc::invalid_argument,
                            std::string("chorus::") + fn +
                                ": called from inside one of this communicator's own collectives (a user operator, "
                                "or other code the collective runs, re-entered the communicator)");
            if (flag_.exchange(true, std::memory_order_acquire))
                throw error(errc::invalid_argument,
                            std::string("chorus::") + fn +
                                ": called while another thread is issuing a call on this communicator; issue a "
                                "communicator's calls from one thread at a time (a thread that needs its own "
                                "calls needs a communicator of its own)");
            owned_ = true;
        }
        ~issue_guard() {
            if (owned_) flag_.store(false, std::memory_order_release);
        }
        issue_guard(const issue_guard&) = delete;
        issue_guard& operator=(const issue_guard&) = delete;

    private:
        std::atomic<bool>& flag_;
        bool owned_ = false;
    };
    //! Marks the calling thread as running this communicator's collective.
    class running_scope {
    public:
        explicit running_scope(const void* c) : prev_(detail::running_collective) { detail::running_collective = c; }
        ~running_scope() { detail::running_collective = prev_; }
        running_scope(const running_scope&) = delete;
        running_scope& operator=(const running_scope&) = delete;

    private:
        const void* prev_;
    };

    //! The call as data: its signature, the policy that runs and this
    //! rank's schedule_args.
    template <class T, class Op>
    void describe(detail::call& c, const policy& pol, collective coll, const T* in, T* out, std::uint64_t count,
                  int root, std::span<const std::uint64_t> counts) {
        // Every field is assigned below (no temporary: this runs on every call).
        c.counts_id = 0;
        c.small = false;
        c.coll = coll;
        c.pol = pol;
        c.in = in;
        c.out = out;
        c.count = count;
        c.root = root;
        c.seq = next_seq_++;
        c.settings = issue();
        c.counts = counts;
        c.types = detail::call_types_of<T, Op>();
        c.signature_count = count;
        schedule_args& a = c.args;
        a = schedule_args{coll, rank(), size(), root, count, sizeof(T), false, t_.node_size()};
        a.commutative = op_traits<Op>::commutative;
        a.topo = &t_.topology();
        a.scratch_limit_bytes = t_.scratch_limit_bytes();
        a.node_window_bytes = t_.node_window_bytes();
        if constexpr (requires { t_.ll_limit_bytes(); }) a.ll_limit_bytes = t_.ll_limit_bytes();
        if constexpr (requires { t_.channel_budget(); }) a.channel_budget = t_.channel_budget();
        if (coll == collective::barrier) {
            // Every rank registers and waits for every other: a direct<>
            // AllReduce of nothing, where a transport runs it as a schedule.
            c.planned = policy::fixed(algorithm::direct);
            a = schedule_args{collective::all_reduce, rank(), size(), 0, 0, 1, false, 0};
            c.small = small_bytes() > 0;
            return;
        }
        if (is_exchange(coll)) {
            // Every policy runs the exchange schedule, tuned by the policy.
            std::uint64_t total = 0;
            for (const std::uint64_t k : counts) total += k;
            a.counts = counts.empty() ? nullptr : counts.data();
            a.in_place = exchange_in_place<T>(coll, in, out, rank(), a.counts);
            if (coll != collective::all_to_all) {
                c.signature_count = total;
                c.counts_id = detail::counts_hash(counts.data(), counts.size());
            }
            c.planned = pol;
            return;
        }
        a.in_place = in_place_call<T>(coll, in, out, rank(), count);
        c.planned = pol;
        c.small = automatic::small_message(pol, a, small_bytes());
    }

    //! The most data the transport's small-message protocol carries (0: none).
    std::uint64_t small_bytes() const noexcept {
        if constexpr (requires { t_.small_message_bytes(); }) return t_.small_message_bytes();
        else return 0;
    }

    //! One call on a host-ordered transport, in issue order (the transport
    //! fails it if an earlier call broke the communicator meanwhile).
    template <class T, class Op>
    void run(const detail::call& c, const Op& op) {
        const running_scope scope(this);
        detail::call_schedules s(schedules_, c);
        if (detail::log_enabled(detail::log_level::info) || detail::nvtx_range::active()) [[unlikely]]
            return run_observed<T>(c, op, s);
        t_.template run<T>(c, op, s);
    }
    //! run() while the log is at INFO or an NVTX tool listens: the call in
    //! its range, on the thread that runs it (kept off the plain path).
    template <class T, class Op>
    CHORUS_NOINLINE void run_observed(const detail::call& c, const Op& op, detail::call_schedules& s) {
        detail::nvtx_range range;
        observe(c, s, range);
        t_.template run<T>(c, op, s);
    }

    //! What a call shows of itself while the log or an NVTX tool is on: at
    //! INFO automatic's pick of the small-message protocol (once per size:
    //! the others are logged where automatic's memo is filled,
    //! algo/automatic.hpp), at TRACE a line per call, and its NVTX range.
    [[gnu::cold]] CHORUS_NOINLINE void observe(const detail::call& c, detail::call_schedules& s,
                                               detail::nvtx_range& range) {
        using detail::log_level;
        if (c.small && c.pol.choose && c.coll != collective::barrier && detail::log_enabled(log_level::info))
            note_small(c);
        const bool trace = detail::log_enabled(log_level::trace);
        if (!trace && !detail::nvtx_range::active()) return;
        const call_info i = detail::info_of(c, &s);
        range.push(c.coll, detail::nvtx_kind_of(i.algorithm), i.channels, i.bytes);
        if (!trace) return;
        const bool moves = c.coll != collective::barrier;
        detail::log_line(log_level::trace, rank(), size(), "%s #%llu: %s, %d channel%s, %s%s%s%s%s%s%s%s",
                         collective_name(c.coll), static_cast<unsigned long long>(c.seq), i.algorithm, i.channels,
                         i.channels == 1 ? "" : "s", detail::bytes_text(i.bytes).text, moves ? " of " : "",
                         moves ? c.types.type_name : "", moves && c.types.op_id != 0 ? ", " : "",
                         moves && c.types.op_id != 0 ? c.types.op_name : "",
                         moves && c.args.in_place ? ", in place" : "", moves ? ", policy " : "", i.policy);
    }
    //! automatic's pick of the small-message protocol, at INFO, once per size.
    void note_small(const detail::call& c) {
        const std::uint64_t key = c.count * c.types.elem_bytes + 1;
        for (const std::uint64_t k : small_noted_)
            if (k == key) return;
        small_noted_[small_next_++ % std::size(small_noted_)] = key;
        const model::topology& t = t_.topology();
        char costs[1024];
        automatic::predictions_text(c.args, t, costs, sizeof costs);
        detail::log_line(detail::log_level::info, rank(), size(),
                         "automatic: %s %s (%llu x %llu B), %d ranks -> small (the small-message protocol: at most "
                         "%g B by the model's small_bytes, %llu B by the transport); the schedules' predictions: %s",
                         collective_name(c.coll), detail::bytes_text(key - 1).text,
                         static_cast<unsigned long long>(c.count), static_cast<unsigned long long>(c.types.elem_bytes),
                         size(), t.small_bytes, static_cast<unsigned long long>(small_bytes()), costs);
    }

    //! The communicator's setup, at VERSION (the version line), INFO (the
    //! settings, then the transport's own lines: how it reaches each peer)
    //! and WARN (a model file that does not fit this communicator).
    [[gnu::cold]] CHORUS_NOINLINE void log_setup() {
        using detail::log_level;
        detail::log_version(rank(), size());
        const model::topology& t = t_.topology();
        const bool file = model::model_file_given();
        if (detail::log_enabled(log_level::info)) {
            char split[64] = "one node";
            if (t_.node_size() > 0 && t_.node_size() < size())
                std::snprintf(split, sizeof split, "nodes of %d ranks", t_.node_size());
            char small[112] = "off";
            if (small_bytes() > 0)
                std::snprintf(small, sizeof small, "on (automatic's AllReduce up to %g B, barriers; transport cap %llu B)",
                              t.small_bytes < double(small_bytes()) ? t.small_bytes : double(small_bytes()),
                              static_cast<unsigned long long>(small_bytes()));
            const char* path = std::getenv("CHORUS_MODEL");
            detail::log_line(log_level::info, rank(), size(),
                             "init: backend %s, rank %d of %d, %s, checked mode %s, timeout %lld ms, model %s%s%s, "
                             "small-message protocol %s",
                             Backend::name, rank(), size(), split, checked() ? "on" : "off",
                             static_cast<long long>(timeout().count()), file ? "CHORUS_MODEL=" : "built-in",
                             file && path != nullptr ? path : "", file ? "" : " (the backend's assumptions)", small);
            if constexpr (requires { t_.log_setup(); }) t_.log_setup();
        }
        if (file && t.correction_count > 0 && detail::log_enabled(log_level::warn)) {
            bool mine = false;
            int sizes[max_corrections_listed] = {};
            std::size_t k = 0;
            for (int i = 0; i < t.correction_count && i < model::max_corrections; ++i) {
                const int n = t.corrections[i].nranks;
                mine = mine || n == size();
                bool seen = false;
                for (std::size_t j = 0; j < k; ++j) seen = seen || sizes[j] == n;
                if (!seen && k < max_corrections_listed) sizes[k++] = n;
            }
            if (!mine) {
                std::sort(sizes, sizes + k);
                detail::log_line(log_level::warn, rank(), size(),
                                 "CHORUS_MODEL's corrections are for %s ranks, not %d: automatic plans with the "
                                 "uncorrected model here (calibrate with %d ranks)",
                                 detail::rank_list_text(sizes, k).c_str(), size(), size());
            }
        }
    }
    static constexpr std::size_t max_corrections_listed = 16;

    [[noreturn]] void throw_broken(const char* fn) const {
        if constexpr (requires { t_.check(); }) t_.check(); // the transport's own report first (GPU faults)
        throw error(errc::aborted, std::string("chorus::") + fn + ": the communicator is broken (" + t_.reason() +
                                       "); create a new one");
    }

    //! Host-ordered calls run on the host stream: a stream argument
    //! (core/communicator.hpp) is refused, naming it.
    static void refuse_stream(collective coll, detail::stream_arg stream) {
        if (stream.given)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + collective_name(coll) +
                            ": `stream`: this backend orders calls on its host stream and takes no stream (CUDA "
                            "streams are for communicator<gpu::device>)");
    }

    transport_type t_;
    detail::issue_flag issuing_; //!< a thread is issuing a call (issue_guard)
    std::uint64_t next_seq_ = 1;
    detail::schedule_memo schedules_; //!< this rank's last schedule, and automatic's recent choices
    std::vector<std::uint64_t> sent_, received_; //!< point-to-point messages issued, per peer
    detail::call last_{};                        //!< the last collective issued (last_call())
    std::uint64_t small_noted_[8] = {};          //!< sizes + 1 of small calls logged at INFO (note_small)
    unsigned small_next_ = 0;
    // Last: destroyed first (the destructor drains it while the rest is alive).
    [[no_unique_address]] std::conditional_t<host_ordered, detail::host_stream, detail::no_host_stream> stream_;
};

} // namespace chorus
