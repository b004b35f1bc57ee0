#pragma once
//! \file algo/two_shot.hpp
//! The two-shot AllReduce (as in the custom all-reduce kernels of
//! inference engines): a direct reduce-scatter (rank r reduces part r of
//! every rank's input, reading each peer once, in rank order) then a
//! direct all-gather (rank r copies every other part from its owner).
//! Two latency steps, and each rank reads about 2x the vector instead of
//! n x (direct<>): the algorithm between direct<> and ring<>.
//!
//! Reductions are fan-ins in rank order 0..n-1, so the result is the
//! left fold of the ranks' inputs, bit for bit what direct<> computes,
//! whatever the channel count, chunk size or timing.
//!
//! Units (per channel): [0, A) direct's reduce-scatter phase with the
//! epilogue; A: sync, every rank has done its reduce-scatter (the
//! all-gather overwrites parts of out that peers may still read as their
//! input when in place, and reads their finished parts); [A+1, A+1+G)
//! direct's all-gather phase. Before returning a rank waits until every
//! rank has finished (they read our part). ReduceScatter, AllGather,
//! Broadcast and Reduce run direct<> (whose ReduceScatter and AllGather
//! are exactly these two shots).

#include <cstdint>

#include "../core/config.hpp"
#include "compose.hpp"
#include "direct.hpp"
#include "recursive_doubling.hpp"
#include "schedule.hpp"

namespace chorus {

//! The steps of one rank in a two-shot AllReduce.
struct two_shot_schedule {
    direct_schedule rs{}; //!< reduce-scatter phase
    direct_schedule ag{}; //!< all-gather phase
    int nranks = 1;

    CHORUS_HD constexpr int rank() const { return rs.rank(); }
    CHORUS_HD constexpr int channels() const { return rs.channels(); }
    CHORUS_HD constexpr std::uint64_t sync_unit() const { return rs.units(); }
    CHORUS_HD constexpr std::uint64_t units() const { return nranks == 1 ? rs.units() : rs.units() + 1 + ag.units(); }
    CHORUS_HD constexpr std::uint64_t scratch_elems() const { return 0; }

    CHORUS_HD constexpr step unit(int c, std::uint64_t p) const {
        if (nranks == 1) { // a local copy with the epilogue
            step s = unit_of(rs, c, p);
            s.finish = true;
            return s;
        }
        const std::uint64_t a = rs.units();
        if (p < a) {
            step s = unit_of(rs, c, p);
            s.finish = true; // the fan-in covers every rank
            return s;
        }
        if (p == a) {
            step s{};
            s.waits[0] = detail::everyone(nranks, a);
            return s;
        }
        step s = unit_of(ag, c, p - a - 1);
        for (wait_spec& w : s.waits)
            if (w.peer >= 0) w.units += a + 1;
        return s;
    }
    CHORUS_HD constexpr wait_spec final_wait() const { return detail::everyone(nranks, units()); }
};

//! Plans two_shot<>'s AllReduce with tuning `t` (the other collectives
//! run direct<>: make_fixed_schedule).
constexpr two_shot_schedule make_two_shot_schedule(const schedule_args& a, tuning t) {
    two_shot_schedule s{};
    s.nranks = a.nranks;
    s.rs = make_direct_schedule(a, t.channels, t.chunk_bytes, direct_phase::reduce_scatter);
    s.ag = make_direct_schedule(a, t.channels, t.chunk_bytes, direct_phase::all_gather);
    return s;
}

//! Two-shot policy: AllReduce as direct reduce-scatter + direct all-gather.
template <recursive_params P = recursive_params{}>
struct two_shot {
    static_assert(P.channels >= 0, "chorus: two_shot<> needs channels >= 1 (or 0: chosen per call)");
    static_assert(P.channels <= max_channels, "chorus: two_shot<> supports at most chorus::max_channels channels");
    static_assert(P.chunk_bytes == 0 || P.chunk_bytes >= 16,
                  "chorus: two_shot<> needs chunk_bytes >= 16 (or 0: chosen per call)");
    static constexpr recursive_params params = P;
    static constexpr bool reorders_operands = false;
    static constexpr const char* name = "two_shot";
    static constexpr policy describe() { return policy::fixed(algorithm::two_shot, {P.channels, P.chunk_bytes}); }
};

} // namespace chorus
