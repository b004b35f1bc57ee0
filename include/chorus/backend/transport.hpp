#pragma once
//! \file backend/transport.hpp
//! The transport contract: what the one communicator<Backend>
//! (comm/communicator.hpp) requires of a backend. A backend tag (threads,
//! mpi, gpu::device) names its transport (`Backend::transport`) and the
//! extra calls its communicators offer (`Backend::api<Comm>`, a base class
//! of communicator<Backend>: MPI's split() and node queries, the GPU's
//! device() and stream()).
//!
//! The communicator owns what every backend shares: the sequence numbers,
//! the settings (deadline, checked mode), the order calls run in (its host
//! stream, or the CUDA stream passed as an argument), futures, the broken
//! state's error texts, and the one dispatch from a policy (and
//! `automatic`'s choice) to the rank's schedule. A transport owns how
//! ranks reach each other:
//!
//!   rank(), size()              this rank, the rank count
//!   node_size()                 ranks per node of a regular split into nodes of
//!                               consecutive ranks (schedule_args::node_size; 0: none)
//!   topology()                  what `automatic` plans against
//!   scratch_limit_bytes()       scratch one call can have (0: as much as it needs)
//!   node_window_bytes()         scratch a rank's node peers can read where they
//!                               can read nothing else of it (0: peers read each
//!                               other's buffers, or share no memory;
//!                               schedule_args::node_window_bytes)
//!   abort(code, why), broken(), reason()
//!                               the broken state every rank of the
//!                               communicator shares (the first reason wins)
//!   check_launch(coll, in, out, count, async)
//!                               what the transport refuses at issue, naming
//!                               the argument (GPU memory on a host transport,
//!                               an async call without MPI_THREAD_MULTIPLE)
//!   ordering                    host_ordered or stream_ordered (below)
//!
//! and, for one call handed over as data (`call`, below) with the rank's
//! schedules (`Schedules`: mine(), this rank's schedule; of(q), rank q's
//! schedule as planned out of place; chosen(), the policy that runs, with
//! `automatic` resolved to its pick), a host-ordered transport has
//!
//!   run<T>(const call&, const Op&, Schedules&)    runs the call; throws a
//!                                                 chorus::error on failure
//!
//! and a stream-ordered one
//!
//!   enqueue<T>(const call&, const Op&, Schedules&, void* stream)
//!   completion(void* stream) -> future            done when the stream got there
//!   synchronize(), check()                        wait for / report the rank's own stream
//!
//! A transport runs a schedule with the shared rank program
//! (exec/rank_program.hpp: run_unit) through an environment with the step
//! primitives: wait(peer, channel, units) (a flag in shared memory, a
//! message's arrival, a device flag; bounded by the call's deadline and an
//! abort word), post(channel, units), and execute(step), which reads a
//! peer's slice where the peer's memory is mapped (threads; GPU peer
//! access; MPI: a node peer's scratch in its window) or out of a received
//! message where it is not (MPI: everything else), the connection NCCL's
//! transports (p2p, shm, net) choose per pair of ranks.
//! A small-message protocol is optional: small_message_bytes() > 0 (the
//! most data it carries) makes the communicator mark small AllReduce calls
//! of `automatic` (automatic::small_message) and every barrier as
//! call::small, which the transport's run() runs without a schedule.
//! Point-to-point is optional: transfer<T>(is_send, buf, count, peer, msg,
//! settings) and check_p2p(fn, async) give the communicator send/recv.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "../algo/policy.hpp"
#include "../algo/schedule.hpp"
#include "../core/communicator.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/signature.hpp"
#include "../exec/host_kernel.hpp"
#include "../model/cost.hpp"

namespace chorus::detail {

//! The communicator runs every call on its host stream (async/host_stream.hpp),
//! one at a time, in issue order: sync calls inline when it is idle.
struct host_ordered {};
//! The transport enqueues each call on a CUDA stream (the one passed as an
//! argument, else the rank's own) and returns at once.
struct stream_ordered {};

//! Checked mode default: CHORUS_CHECK (1/true/on/yes or 0/false/off/no,
//! any case; empty: off; anything else throws errc::invalid_argument), else
//! on in debug builds.
inline bool default_checked() {
#if defined(NDEBUG)
    return env_bool("CHORUS_CHECK", false);
#else
    return env_bool("CHORUS_CHECK", true);
#endif
}

//! Timeout default: CHORUS_TIMEOUT_MS, a whole number of milliseconds from 1
//! to max_timeout (anything else throws errc::invalid_argument), else 5 minutes.
inline std::chrono::milliseconds default_timeout() {
    const std::chrono::milliseconds fallback = std::chrono::minutes(5);
    return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(
        env_positive("CHORUS_TIMEOUT_MS", std::uint64_t(fallback.count()), std::uint64_t(max_timeout.count()),
                     "milliseconds", " (about 11.6 days)")));
}

//! What a call fixes when it is issued.
struct call_settings {
    std::chrono::milliseconds timeout;
    bool checked;
};

//! The deadline and checked-mode settings of a communicator: set by the
//! user, fixed per call when the call is issued.
class call_options {
public:
    //! Deadline for every wait inside one collective (default: CHORUS_TIMEOUT_MS or 5 minutes).
    void set_timeout(std::chrono::milliseconds t) {
        check_timeout("chorus::communicator::set_timeout", t);
        timeout_ = t;
    }
    std::chrono::milliseconds timeout() const noexcept { return timeout_; }

    //! Per-call deadline override used by chorus::timeout_scope (0: none).
    //! Unchecked: timeout_scope checks `t` (positive, at most max_timeout).
    void set_call_timeout(std::chrono::milliseconds t) noexcept { call_timeout_ = t; }
    std::chrono::milliseconds call_timeout() const noexcept { return call_timeout_; }

    //! Checked mode: before moving data, the ranks compare their calls
    //! (collective, count, element type, operator, root, algorithm,
    //! sequence number); a disagreement fails the call on every rank with
    //! errc::mismatch and a message listing which ranks called what.
    //! Default: CHORUS_CHECK, else on in builds without NDEBUG.
    void set_checked(bool on) noexcept { checked_ = on; }
    bool checked() const noexcept { return checked_; }

protected:
    //! The settings of the call being issued now. Both timeouts are at most
    //! max_timeout, so a deadline steady_clock::now() + timeout cannot overflow.
    call_settings issue() const noexcept { return {call_timeout_.count() > 0 ? call_timeout_ : timeout_, checked_}; }

    //! The defaults from the environment (default_timeout, default_checked),
    //! read by the communicator once its transport exists: an MPI transport
    //! first makes sure every rank accepts its environment, so a rank that
    //! rejects a value fails with the others instead of leaving them waiting.
    void load_defaults() {
        timeout_ = default_timeout();
        checked_ = default_checked();
    }

private:
    std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
    std::chrono::milliseconds call_timeout_{0};
    bool checked_ = false;
};

//! One collective call, as the communicator hands it to its transport.
struct call {
    collective coll = collective::barrier;
    policy pol{};     //!< the policy the user named (what checked mode compares)
    policy planned{}; //!< what is planned: pol, or direct<> for a barrier
    const void* in = nullptr;
    void* out = nullptr;
    std::uint64_t count = 0; //!< as the user passed it (the "v" collectives: unused)
    int root = 0;
    std::uint64_t seq = 0; //!< 1, 2, ... in issue order, the same on every rank
    call_settings settings{};
    std::span<const std::uint64_t> counts; //!< the "v" collectives' counts
    //! What ranks compare: count, or for the "v" collectives the sum of
    //! all counts, with the counts' fingerprint (counts_hash; 0: none).
    std::uint64_t signature_count = 0;
    std::uint64_t counts_id = 0;
    call_types types{};  //!< the element type and operator
    schedule_args args{}; //!< this rank's schedule_args (args.counts points into `counts`)
    //! Run with the transport's small-message protocol, not a schedule:
    //! `automatic`'s pick for a small AllReduce, and every barrier, on a
    //! transport that has one (small_message_bytes() > 0).
    bool small = false;
};

//! What ranks compare for call `c` (core/signature.hpp) planned on
//! `channels` channels by the policy with id `algo_id`; `seq` left 0 (the
//! GPU kernels count calls themselves). Every transport fills its
//! signature with it.
inline call_signature signature_of(const call& c, int channels, std::uint64_t algo_id) {
    call_signature s{};
    s.count = c.signature_count; // the "v" collectives: the sum of all counts
    s.counts_id = c.counts_id;
    s.elem_bytes = c.types.elem_bytes;
    s.shape = call_signature::make_shape(c.coll, channels, c.root);
    s.type_id = c.types.type_id;
    s.op_id = c.types.op_id;
    s.algo_id = algo_id;
    return s;
}

//! The contract above, for the part that does not depend on the element
//! type and operator (comm/communicator.hpp static_asserts it).
template <class T>
concept transport = requires(T& t, const T& ct, errc code, const std::string& why, const void* p, bool flag) {
    typename T::ordering;
    requires std::same_as<typename T::ordering, host_ordered> || std::same_as<typename T::ordering, stream_ordered>;
    { ct.rank() } -> std::convertible_to<int>;
    { ct.size() } -> std::convertible_to<int>;
    { ct.node_size() } -> std::convertible_to<int>;
    { ct.topology() } -> std::convertible_to<const model::topology&>;
    { ct.scratch_limit_bytes() } -> std::convertible_to<std::uint64_t>;
    { ct.node_window_bytes() } -> std::convertible_to<std::uint64_t>;
    { t.abort(code, why) };
    { ct.broken() } -> std::convertible_to<bool>;
    { ct.reason() } -> std::convertible_to<std::string>;
    { t.check_launch(collective::all_reduce, p, p, std::uint64_t{}, flag) };
};

} // namespace chorus::detail
