//! \file bench_ring_grid.cpp
//! chorus_bench's instantiations of the ring<> tuning grid (channels x
//! chunk_bytes, see ring_grid in bench.hpp) other than the default: float and
//! sum only, to keep the compile time small.

#include "bench.hpp"

namespace chorus_bench {
namespace {

template <std::size_t I = 0>
bool dispatch(bench_state& st, coll_kind c, ring_choice want) {
    if constexpr (I == std::size(ring_grid)) {
        (void)st;
        (void)c;
        (void)want;
        return false;
    } else {
        constexpr ring_choice rc = ring_grid[I];
        if constexpr (!(rc == ring_default)) { // the default lives in bench_ring.cpp
            if (want == rc) {
                using Algo = chorus::ring<chorus::ring_params{.channels = rc.channels, .chunk_bytes = rc.chunk_bytes}>;
                run_sweep<Algo, float, chorus::sum>(st, c);
                return true;
            }
        }
        return dispatch<I + 1>(st, c, want);
    }
}

} // namespace

bool run_ring_grid(bench_state& st, coll_kind c, int channels, std::size_t chunk_bytes) {
    return dispatch(st, c, ring_choice{channels, chunk_bytes});
}

} // namespace chorus_bench
