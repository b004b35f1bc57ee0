//! \file bench_ring.cpp
//! chorus_bench's instantiations of the default ring<>: every element type,
//! every operator, every collective (the bulk of the compile time, kept in
//! its own translation unit).

#include "bench.hpp"

namespace chorus_bench {

void run_ring_default(bench_state& st, coll_kind c, type_kind t) {
    with_type(t, [&](auto type_tag) {
        using T = typename decltype(type_tag)::type;
        run_sweep<chorus::ring<>, T, chorus::sum, chorus::prod, chorus::min, chorus::max, chorus::avg>(st, c);
    });
}

} // namespace chorus_bench
