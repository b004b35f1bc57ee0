#pragma once
//! \file algo/compose.hpp
//! Building blocks the policies share: the "every other rank" group wait,
//! the piece of an index range a (channel, chunk) unit works on, and the
//! non-power-of-two fold of the recursive algorithms.

#include <cstdint>

#include "../core/config.hpp"
#include "../plan/partition.hpp"
#include "schedule.hpp"

namespace chorus {

namespace detail {

//! Waits until every rank but the waiting one has done `u` units.
CHORUS_HD constexpr wait_spec everyone(int nranks, std::uint64_t u) {
    return nranks > 1 ? wait_spec{0, u, static_cast<std::uint16_t>(nranks), 1} : wait_spec{};
}

//! Chunk k (of K) of channel c's share (of C) of [begin, end).
CHORUS_HD constexpr index_range piece(index_range r, int c, int C, std::uint64_t k, std::uint64_t K,
                                      const alignment& al) {
    return split(split(r, std::uint64_t(c), std::uint64_t(C), al), k, K, al);
}

//! Largest power of two <= n (n >= 1), and its log2.
CHORUS_HD constexpr int floor_pow2(int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}
CHORUS_HD constexpr int log2_exact(int p) {
    int m = 0;
    while ((1 << m) < p) ++m;
    return m;
}

//! The standard non-power-of-two fix-up of the recursive algorithms: with
//! p = floor_pow2(n) and e = n - p, ranks 0..2e-1 pair up (2i, 2i+1); the
//! even one takes part in the power-of-two algorithm for both (virtual
//! rank i), the odd one ("extra") waits for the result. Ranks >= 2e are
//! virtual rank r - e. Virtual ranks keep the ranks' order, so operand
//! order (lower ranks first) is preserved.
struct pow2_fold {
    int n = 1, p = 1, e = 0, m = 0;

    CHORUS_HD static constexpr pow2_fold of(int n) {
        pow2_fold f{};
        f.n = n;
        f.p = floor_pow2(n);
        f.e = n - f.p;
        f.m = log2_exact(f.p);
        return f;
    }
    CHORUS_HD constexpr bool extra(int r) const { return r < 2 * e && (r & 1) != 0; }
    CHORUS_HD constexpr bool folds(int r) const { return r < 2 * e && (r & 1) == 0; } //!< combines with r + 1 first
    CHORUS_HD constexpr int virt(int r) const { return r < 2 * e ? r / 2 : r - e; }
    CHORUS_HD constexpr int real(int v) const { return v < e ? 2 * v : v + e; }
};

} // namespace detail
} // namespace chorus
