//! \file bench_ring.cpp
//! chorus_bench's instantiations of the default ring<>: every element type,
//! every operator, every collective (the bulk of the compile time, kept in
//! its own translation unit), and its float sum call for the interleaved
//! comparison (one of those instantiations).

#include "bench.hpp"

namespace chorus_bench {

void run_ring_default(bench_state& st, coll_kind c, type_kind t) {
    with_type(t, [&](auto type_tag) {
        using T = typename decltype(type_tag)::type;
        run_sweep<chorus::ring<>, T, chorus::sum, chorus::prod, chorus::min, chorus::max, chorus::avg>(st, c);
    });
}

float_sum_call ring_default_call() { return &call_collective<chorus::ring<>, float, chorus::sum>; }

} // namespace chorus_bench
