#pragma once
//! \file exec/lane_channel.hpp
//! run_lane_channel: one channel of one rank's collective, from
//! registration to the final wait, on the lane executor (exec/lane_env.hpp)
//! with the LL protocol (exec/lane_ll.hpp) where the schedule and the world
//! have it. The body of the GPU kernel's thread block (kernels/collective.cuh)
//! and of the CPU lane tests. A header of its own so that lane_env.hpp and
//! lane_ll.hpp, which this needs both of, need not include each other.

#include <cstdint>

#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "lane_env.hpp"
#include "lane_ll.hpp"

namespace chorus::detail {

//! One channel of one rank, from registration to the final wait: the
//! body of the GPU kernel's thread block and of the CPU lane test.
CHORUS_HD_TEMPLATE
template <class T, class Op, class Schedule, class Lanes>
CHORUS_HD status run_lane_channel(const Lanes& lanes, const lane_launch<T, Op, Schedule>& L, int c,
                                  lane_shared<T>& sh) {
    lane_rank_area* own = L.world.areas[L.rank];
    const std::uint64_t seq = lanes.share(lanes.id() == 0 ? own->seq[c] + 1 : std::uint64_t(0));
    const std::uint64_t deadline = lanes.share(lanes.id() == 0 ? lanes.now_ns() + L.timeout_ns : std::uint64_t(0));
    lane_desc mine{L.in, L.out, L.scratch, L.sig};
    lane_env<T, Op, Lanes> env{lanes, L.world, sh, L.rank, seq, deadline, L.sig, mine, L.op.get()};
    env.channel = c;
    env.nchannels = L.sch.channels();
    if (lanes.id() == 0) {
        for (auto& m : sh.checked) m = 0;
        sh.ll_fail = 0; // (exec/lane_ll.hpp) before post()'s barrier: no lane records earlier
        own->desc[seq & 1][c] = mine; // published by the release in post()
    }
    env.post(c, 0);
    status st = status::ok;
    if (L.checked) st = wait_for(env, wait_spec{0, 0, static_cast<std::uint16_t>(L.world.nranks), 1}, L.rank, c);
    bool ran = false;
    if constexpr (requires { L.sch.as_ll(); }) {
        // The LL protocol (exec/lane_ll.hpp) where the world has LL regions;
        // without them the schedule's direct<> fallback below.
        if (const ll_schedule* ll = L.sch.as_ll(); ll != nullptr && L.world.ll != nullptr) {
            if (st == status::ok) st = run_ll(env, *ll, L.in, L.out);
            ran = true;
        }
    }
    if (!ran) {
        const std::uint64_t units = L.sch.units();
        for (std::uint64_t p = 0; p < units && st == status::ok; ++p) st = run_unit(L.sch, env, c, p);
        if (st == status::ok) st = finish_channel(L.sch, env, c);
    }
    if (lanes.id() == 0) {
        own->seq[c] = seq;
        if (c == 0)
            for (int ch = L.sch.channels(); ch < max_channels; ++ch) own->seq[ch] = seq;
        if (st != status::ok) {
            lane_fault f{};
            f.peer = env.bad_peer;
            f.channel = c;
            f.unit = env.bad_unit;
            f.theirs = env.theirs;
            record_lane_fault(L.world, L.rank, f, st);
        }
    }
    return st;
}

} // namespace chorus::detail
