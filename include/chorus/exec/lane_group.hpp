#pragma once
//! \file exec/lane_group.hpp
//! Group launch on the lane executor: one launch runs several collective
//! calls of one rank (same element type and operator) in issue order. Lane
//! group c (GPU: block c) runs channel c of call 0, then channel c of call
//! 1, and so on; a call with fewer channels than the launch has groups
//! leaves its missing channels out (run_lane_channel's channel 0 advances
//! their counters, as in a launch of its own).
//!
//! Between two calls the groups of the rank pass a barrier of their own
//! (group_barrier, in the rank's lane_rank_area): the flag protocol, the
//! per-channel collective counters (each channel reads its own counter at
//! the start of a call; channel 0 writes the unused channels' at its end)
//! and the every-channel waits all assume that one rank's calls do not
//! overlap across its channels, which consecutive launches on one stream
//! guarantee and which the barrier restores inside one launch. Ranks are
//! not synchronised with each other by it: a rank may start its next call
//! while a peer still finishes the previous one, exactly as with separate
//! launches (the descriptors are double-buffered by the counter's parity).
//!
//! Every lane group of the launch passes every barrier. After a barrier a
//! group stops when the abort word is set (a call of any rank failed, or
//! the host aborted): the calls left run no more. The barrier waits like
//! every other wait: bounded by the previous call's timeout, stopped by the
//! abort word.
//!
//! Shared by the GPU kernel (kernels/collective.cuh, collective_kernel: one
//! call or several; its blocks run call 0 from the kernel parameter and
//! each further call from a copy of its descriptor in shared memory) and
//! the CPU lane tests (tests/unit/test_lanes.cpp: the descriptors in place).

#include <cstdint>

#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "lane_channel.hpp"
#include "lane_env.hpp"

namespace chorus::detail {

//! Most calls one group launch holds (the GPU kernel and the CPU lanes).
inline constexpr int max_group_calls = 16;

//! The calls of one group launch on the CPU lanes: `ncalls` launch
//! descriptors of one rank, run in order by `blocks` lane groups (the most
//! channels of any call). The GPU kernel holds the same calls differently
//! (kernels/collective.cuh: call 0 in its parameter, the others in device
//! memory) and reaches them through run_lane_calls's fetch functor.
template <class T, class Op, class Schedule, int K = max_group_calls>
struct lane_group_launch {
    static_assert(K >= 1 && K <= max_group_calls, "chorus: a group launch holds 1 to max_group_calls calls");
    static constexpr int capacity = K;
    int ncalls = 0;
    int blocks = 0;
    lane_launch<T, Op, Schedule> calls[K];
};

//! The barrier of one rank's lane groups between two calls of a group
//! launch: `blocks` groups arrive; the last resets the count and advances
//! the generation. Lane 0 of each group does the atomics after a barrier of
//! its lanes (their stores precede its release, as in post()); the outcome
//! goes to every lane. Fails with status::aborted when the abort word is
//! set, status::timeout past `deadline_ns`.
CHORUS_HD_TEMPLATE
template <class Lanes>
CHORUS_HD status group_barrier(const Lanes& lanes, const lane_world& w, int rank, int blocks,
                               std::uint64_t deadline_ns) {
    int st = 0;
    lanes.sync();
    if (lanes.id() == 0) {
        lane_rank_area* own = w.areas[rank];
        atomic_ref<std::uint32_t> gen(own->group_gen);
        atomic_ref<std::uint32_t> arrived(own->group_arrived);
        // The generation cannot move before this group arrives: read it first.
        const std::uint32_t g = gen.load(mo::memory_order_acquire);
        if (arrived.fetch_add(1, mo::memory_order_acq_rel) + 1 == std::uint32_t(blocks)) {
            arrived.store(0, mo::memory_order_relaxed); // ordered before the release below
            gen.store(g + 1, mo::memory_order_release);
        } else {
            for (unsigned i = 1;; ++i) {
                if (gen.load(mo::memory_order_acquire) != g) break;
                lanes.relax();
                if ((i & 63u) == 0) {
                    const bool ab = atomic_ref<std::uint32_t>(*w.abort).load(mo::memory_order_acquire) != 0;
                    if (ab) {
                        st = static_cast<int>(status::aborted);
                        break;
                    }
                    if (lanes.now_ns() > deadline_ns) {
                        st = static_cast<int>(status::timeout);
                        break;
                    }
                }
            }
        }
    }
    return static_cast<status>(lanes.share(st));
}

//! Lane group `c` of one rank's group launch: channel c of every call in
//! order, a barrier of the rank's groups between calls. Returns the first
//! failure of this group (its calls record theirs as run_lane_channel
//! does; a barrier that times out records status::timeout naming the rank
//! itself as the peer and the call it was about to start as the unit).
//! `fetch(lanes, k)` gives call k's descriptor (k = 0 .. ncalls-1, in
//! order, every lane of the group calling it): in place (the CPU lanes,
//! group_call_in_place) or a copy in shared memory (the GPU kernel,
//! kernels/collective.cuh). A reference it returned may be invalid after
//! the next call to it. One call alone (ncalls 1) is run_lane_channel.
CHORUS_HD_TEMPLATE
template <class T, class Op, class Schedule, class Lanes, class Fetch>
CHORUS_HD status run_lane_calls(const Lanes& lanes, int ncalls, int blocks, int c, lane_shared<T>& sh,
                                const Fetch& fetch) {
    status first = status::ok;
    std::uint64_t prev_timeout_ns = 0;
    for (int k = 0; k < ncalls; ++k) {
        const lane_launch<T, Op, Schedule>& L = fetch(lanes, k);
        if (k > 0) {
            const std::uint64_t deadline =
                lanes.share(lanes.id() == 0 ? lanes.now_ns() + prev_timeout_ns : std::uint64_t(0));
            const status b = group_barrier(lanes, L.world, L.rank, blocks, deadline);
            if (b == status::timeout && lanes.id() == 0) {
                lane_fault f{};
                f.peer = L.rank; // its own lane groups kept it waiting
                f.channel = c;
                f.unit = std::uint64_t(k);
                record_lane_fault(L.world, L.rank, f, b);
            }
            if (b != status::ok) return first != status::ok ? first : b;
            // A failure anywhere (recorded, abort word set) stops the rest.
            const int ab = lanes.share(
                lanes.id() == 0 && atomic_ref<std::uint32_t>(*L.world.abort).load(mo::memory_order_acquire) != 0 ? 1
                                                                                                                 : 0);
            if (ab) return first != status::ok ? first : status::aborted;
        }
        prev_timeout_ns = L.timeout_ns;
        if (c < L.sch.channels()) {
            const status s = run_lane_channel(lanes, L, c, sh);
            if (s != status::ok && first == status::ok) first = s;
        }
    }
    return first;
}

//! The CPU lanes' fetch: call k read in place from the group launch.
template <class G>
struct group_call_in_place {
    const G& g;
    template <class Lanes>
    CHORUS_HD const auto& operator()(const Lanes&, int k) const {
        return g.calls[k];
    }
};

//! Lane group `c` of a group launch held in a lane_group_launch.
CHORUS_HD_TEMPLATE
template <class T, class Op, class Schedule, int K, class Lanes>
CHORUS_HD status run_lane_group(const Lanes& lanes, const lane_group_launch<T, Op, Schedule, K>& G, int c,
                                lane_shared<T>& sh) {
    using G_t = lane_group_launch<T, Op, Schedule, K>;
    return run_lane_calls<T, Op, Schedule>(lanes, G.ncalls, G.blocks, c, sh, group_call_in_place<G_t>{G});
}

} // namespace chorus::detail
