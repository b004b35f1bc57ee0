#pragma once
//! \file exec/rank_program.hpp
//! The rank program: how a schedule is run, written once for both
//! executors. An executor supplies an Env with
//!   status wait(int peer, int channel, uint64_t units)  // acquire; bounded by deadline and abort flag
//!   status execute(const step&)                         // the data movement of one unit
//!   void   post(int channel, uint64_t units)            // release "units done"
//! The host executor calls run_unit for every channel in turn on one thread;
//! the GPU executor runs one channel per thread block.

#include <cstdint>

#include "../algo/schedule.hpp"
#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace chorus::detail {

//! Runs unit p of channel c: wait for the peers the step names, move the
//! data, publish progress. Returns the first failed wait's status.
CHORUS_HD_TEMPLATE
template <class Schedule, class Env>
CHORUS_HD status run_unit(const Schedule& sch, Env& env, int c, std::uint64_t p) {
    const std::uint32_t steps = sch.plan.steps;
    const step s = sch.at(c, p / steps, static_cast<std::uint32_t>(p % steps));
    for (const wait_spec& w : s.waits) {
        if (w.peer < 0) continue;
        const status st = env.wait(w.peer, c, w.units);
        if (st != status::ok) return st;
    }
    if (const status st = env.execute(s); st != status::ok) return st;
    env.post(c, p + 1);
    return status::ok;
}

//! The tail of a channel: wait until the rank reading our buffers is done.
CHORUS_HD_TEMPLATE
template <class Schedule, class Env>
CHORUS_HD status finish_channel(const Schedule& sch, Env& env, int c) {
    const wait_spec w = sch.final_wait();
    return w.peer < 0 ? status::ok : env.wait(w.peer, c, w.units);
}

//! All channels of one rank, interleaved unit by unit on the calling thread
//! (the host executor). Channel c's unit p never waits on a peer's unit
//! beyond p, and every rank advances all channels together, so the
//! interleaving cannot deadlock.
template <class Schedule, class Env>
status run_rank_interleaved(const Schedule& sch, Env& env) {
    const std::uint64_t units = sch.plan.units();
    const int channels = sch.plan.channels;
    for (std::uint64_t p = 0; p < units; ++p)
        for (int c = 0; c < channels; ++c)
            if (const status st = run_unit(sch, env, c, p); st != status::ok) return st;
    for (int c = 0; c < channels; ++c)
        if (const status st = finish_channel(sch, env, c); st != status::ok) return st;
    return status::ok;
}

} // namespace chorus::detail
