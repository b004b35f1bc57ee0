#pragma once
//! \file core/communicator.hpp
//! The one declaration of chorus::communicator<Backend>, and what the
//! collective calls (collectives/*.hpp) require of it.
//!
//! The class is written once (comm/communicator.hpp) over the transport a
//! backend tag names (threads: backend/threads.hpp; MPI: backend/mpi.hpp;
//! CUDA devices: backend/gpu.hpp; the contract: backend/transport.hpp).
//! The collectives check their arguments and hand one call to it as data:
//!
//!   comm.rank(), comm.size()             this rank, the rank count
//!   comm.launch<T, Op>(policy, collective, in, out, count, op, root, async
//!                      [, stream [, counts]])
//!                                       runs or queues the call; returns a
//!                                         chorus::future (ready for a sync call)
//!
//! `stream` (detail::stream_arg) is the stream a stream-ordered call is
//! ordered on, passed as an argument (never left in the communicator);
//! host backends run calls in issue order and refuse one. `counts`: the
//! exchange collectives' per-rank counts.
//!
//! `policy` is the value of the policy type the user named (algo/policy.hpp);
//! the communicator turns it into the rank's schedule with
//! make_schedule(policy, schedule_args) (algo/automatic.hpp) and its
//! transport runs that schedule. Point-to-point (collectives/p2p.hpp) needs comm.p2p<T>(...),
//! which not every backend has.

#include <concepts>
#include <cstdint>

#include "collective.hpp"

namespace chorus {

class future;
struct policy;

template <class Backend>
class communicator;

namespace detail {
//! The stream a call is ordered on, for a backend that has streams: on the
//! GPU backend a cudaStream_t (a pointer type), `given` false meaning the
//! communicator's own stream.
struct stream_arg {
    void* handle = nullptr;
    bool given = false;
};

//! What every collective call uses of a communicator (see the file comment),
//! checked for one element type and operator.
template <class Comm, class T, class Op>
concept collective_backend = requires(Comm& c, const policy& p, const T* in, T* out, const Op& op) {
    { c.rank() } -> std::convertible_to<int>;
    { c.size() } -> std::convertible_to<int>;
    { c.template launch<T, Op>(p, collective::all_reduce, in, out, std::uint64_t{}, op, 0, false) }
        -> std::same_as<future>;
};
} // namespace detail

} // namespace chorus
