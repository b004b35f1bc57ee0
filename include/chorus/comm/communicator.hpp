#pragma once
//! \file comm/communicator.hpp
//! communicator<Backend>: written once over the backend's transport
//! (backend/transport.hpp has the contract). What every backend shares
//! lives here: sequence numbers, the deadline and checked-mode settings,
//! the order calls run in (the communicator's host stream, or the CUDA
//! stream passed as an argument), futures, the broken state's error texts,
//! point-to-point message numbers, and the one dispatch from a policy
//! (and automatic's choice) to this rank's schedule.

#include <atomic>
#include <cstdint>
#include <functional>
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
#include "../exec/host_kernel.hpp"
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
        load_defaults();
        // Checked mode changes what a call exchanges: where ranks could
        // read different settings (MPI processes), the transport makes them
        // agree (on where any rank asked for it).
        if constexpr (requires { t_.agree_checked(true); }) set_checked(t_.agree_checked(checked()));
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
        detail::call c = describe<T, Op>(pol, coll, in, out, count, root, counts);
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
    detail::call describe(const policy& pol, collective coll, const T* in, T* out, std::uint64_t count, int root,
                          std::span<const std::uint64_t> counts) {
        detail::call c;
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
        if (coll == collective::barrier) {
            // Every rank registers and waits for every other: a direct<>
            // AllReduce of nothing, where a transport runs it as a schedule.
            c.planned = policy::fixed(algorithm::direct);
            a = schedule_args{collective::all_reduce, rank(), size(), 0, 0, 1, false, 0};
            c.small = small_bytes() > 0;
            return c;
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
            return c;
        }
        a.in_place = in_place_call<T>(coll, in, out, rank(), count);
        c.planned = pol;
        c.small = automatic::small_message(pol, a, small_bytes());
        return c;
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
        t_.template run<T>(c, op, s);
    }

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
    // Last: destroyed first (the destructor drains it while the rest is alive).
    [[no_unique_address]] std::conditional_t<host_ordered, detail::host_stream, detail::no_host_stream> stream_;
};

} // namespace chorus
