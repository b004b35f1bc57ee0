#pragma once
//! \file exec/rank_program.hpp
//! The rank program: how a schedule is run, written once for both
//! executors. A schedule supplies
//!   int channels(); uint64_t units();   // units per channel
//!   step unit(int channel, uint64_t p); // pure: same answer on host and device
//!   wait_spec final_wait();             // who must be done before this rank returns
//! An executor supplies an Env with
//!   status wait(int peer, int channel, uint64_t units)  // acquire; bounded by deadline and abort flag
//!   status execute(const step&)                         // the data movement of one unit
//!   void   post(int channel, uint64_t units)            // release "units done"
//! and optionally status defer_final(wait_spec, int self, int channel)
//! (see finish_channel).
//! The host executor calls run_unit for every channel in turn on one thread;
//! the GPU executor runs one channel per thread block.

#include <cstdint>

#include "../algo/schedule.hpp"
#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace chorus::detail {

//! Waits as `w` says on channel c: one rank, or a group of ranks
//! (skipping `self`).
CHORUS_HD_TEMPLATE
template <class Env>
CHORUS_HD status wait_on_channel(Env& env, const wait_spec& w, int self, int c) {
    if (w.peer < 0) return status::ok;
    // The single-peer wait on its own path, not as a loop of one: nvcc 13.0
    // (sm_90, -O3) compiled the loop form inside the kernels so that no wait
    // was made at all when the step came from a ring schedule (seen on an
    // H200; the CPU executors were right). Keep this shape.
    if (w.span <= 1) return w.peer == self ? status::ok : env.wait(w.peer, c, w.units);
    for (int i = 0; i < int(w.span); ++i) {
        const int peer = w.peer + i * int(w.stride);
        if (peer == self) continue;
        if (const status st = env.wait(peer, c, w.units); st != status::ok) return st;
    }
    return status::ok;
}

//! Waits as `w` says. With w.every_channel, where the env runs a rank's
//! channels independently (it has independent_channels()), on every
//! channel of the group and on the rank's own other channels; elsewhere
//! channels run in order, which already gives that, and only channel c
//! is waited on.
CHORUS_HD_TEMPLATE
template <class Env>
CHORUS_HD status wait_for(Env& env, const wait_spec& w, int self, int c) {
    if constexpr (requires { env.independent_channels(); }) {
        if (w.every_channel && w.peer >= 0) {
            const int channels = env.independent_channels();
            for (int ch = 0; ch < channels; ++ch) {
                if (ch != c)
                    if (const status st = env.wait(self, ch, w.units); st != status::ok) return st;
                if (const status st = wait_on_channel(env, w, self, ch); st != status::ok) return st;
            }
            return status::ok;
        }
    }
    return wait_on_channel(env, w, self, c);
}

//! Runs unit p of channel c: wait for the peers the step names, move the
//! data, publish progress. Returns the first failed wait's status.
CHORUS_HD_TEMPLATE
template <class Schedule, class Env>
CHORUS_HD status run_unit(const Schedule& sch, Env& env, int c, std::uint64_t p) {
    const step s = sch.unit(c, p);
    for (const wait_spec& w : s.waits)
        if (const status st = wait_for(env, w, sch.rank(), c); st != status::ok) return st;
    if (const status st = env.execute(s); st != status::ok) return st;
    env.post(c, p + 1);
    return status::ok;
}

//! The tail of a channel: wait until the rank reading our buffers is done.
//! An env whose peers can read only memory it owns and the caller never
//! sees (MPI: the window of the node's shared memory) may instead take
//! the wait as a debt (defer_final), paid before it next writes there.
CHORUS_HD_TEMPLATE
template <class Schedule, class Env>
CHORUS_HD status finish_channel(const Schedule& sch, Env& env, int c) {
    if constexpr (requires { env.defer_final(sch.final_wait(), sch.rank(), c); })
        return env.defer_final(sch.final_wait(), sch.rank(), c);
    else
        return wait_for(env, sch.final_wait(), sch.rank(), c);
}

//! All channels of one rank, interleaved unit by unit on the calling thread
//! (the host executor). Channel c's unit p never waits on a peer's unit
//! beyond p, and every rank advances all channels together, so the
//! interleaving cannot deadlock.
template <class Schedule, class Env>
status run_rank_interleaved(const Schedule& sch, Env& env) {
    const std::uint64_t units = sch.units();
    const int channels = sch.channels();
    for (std::uint64_t p = 0; p < units; ++p)
        for (int c = 0; c < channels; ++c)
            if (const status st = run_unit(sch, env, c, p); st != status::ok) return st;
    for (int c = 0; c < channels; ++c)
        if (const status st = finish_channel(sch, env, c); st != status::ok) return st;
    return status::ok;
}

} // namespace chorus::detail
