#pragma once
// What a (float, sum) call of one of the five rooted/unrooted collectives
// must leave at element i of rank `rank`'s `out`, when rank q's input
// element j is value_of(q, j) (integer-valued floats: exact whatever the
// reduction order). Shared by the process-world lane test and the GPU
// one-process-per-GPU test.

#include <chorus/chorus.hpp>

#include <cstdint>

namespace chorus_test {

template <class ValueOf>
float expected_sum(chorus::collective coll, int rank, int n, int root, std::uint64_t count, std::uint64_t i,
                   ValueOf value_of) {
    using chorus::collective;
    float want = 0.f;
    switch (coll) {
    case collective::all_reduce:
    case collective::reduce:
    case collective::reduce_scatter: {
        const std::uint64_t j = coll == collective::reduce_scatter ? std::uint64_t(rank) * count + i : i;
        for (int q = 0; q < n; ++q) want += value_of(q, j);
        break;
    }
    case collective::all_gather: want = value_of(int(i / count), i % count); break;
    case collective::broadcast: want = value_of(root, i); break;
    default: break;
    }
    return want;
}

} // namespace chorus_test
