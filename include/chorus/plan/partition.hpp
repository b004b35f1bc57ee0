#pragma once
//! \file plan/partition.hpp
//! Alignment-aware partitioning: split an index range of a buffer into
//! contiguous parts whose interior boundaries fall on 16-byte aligned
//! addresses, without padding and without losing or doubling an element.
//!
//! Indices are element indices into one buffer whose base address has byte
//! offset `base_offset` modulo 16. An index i is *aligned* when
//! (base_offset + i * elem_bytes) % 16 == 0; aligned indices, if any exist,
//! are exactly those congruent to `first` modulo `granule`. Parts are
//! balanced in whole granules; the ragged head (before the first aligned
//! index) goes to the first non-empty part and the ragged tail to the last,
//! to be handled in place by scalar code. All arithmetic is 64-bit and
//! overflow-free for any count below 2^63 and up to 2^31 parts.
//! Everything here is constexpr and device-clean.

#include <cstdint>

#include "../core/config.hpp"

namespace chorus {

//! A half-open range of element indices [begin, end).
struct index_range {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    CHORUS_HD constexpr std::uint64_t size() const { return end - begin; }
    CHORUS_HD constexpr bool empty() const { return end == begin; }
    friend constexpr bool operator==(const index_range&, const index_range&) = default;
};

//! Where the aligned indices of a buffer are.
struct alignment {
    std::uint64_t granule = 1; //!< elements between consecutive aligned indices
    std::uint64_t first = 0;   //!< smallest aligned index (meaningful when `aligned`)
    bool aligned = false;      //!< false: no element starts on a 16-byte boundary (e.g. a float at an odd address)
};

namespace detail {
CHORUS_HD constexpr std::uint64_t gcd(std::uint64_t a, std::uint64_t b) {
    while (b != 0) {
        std::uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
CHORUS_HD constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }
//! floor(u * k / parts) without overflow (k <= parts).
CHORUS_HD constexpr std::uint64_t scaled(std::uint64_t u, std::uint64_t k, std::uint64_t parts) {
    return (u / parts) * k + ((u % parts) * k) / parts;
}
} // namespace detail

//! The aligned indices of a buffer of `elem_bytes`-sized elements whose base
//! address is `base_offset` bytes past a 16-byte boundary.
CHORUS_HD constexpr alignment alignment_of(std::uint64_t elem_bytes, std::uint64_t base_offset,
                                           std::uint64_t align_bytes = vector_bytes) {
    alignment a{};
    if (elem_bytes == 0) return a;
    const std::uint64_t off = base_offset % align_bytes;
    const std::uint64_t g = detail::gcd(elem_bytes % align_bytes == 0 ? align_bytes : elem_bytes % align_bytes,
                                        align_bytes);
    // elem_bytes * i == -off (mod align) is solvable iff gcd(elem, align) divides off.
    const std::uint64_t need = (align_bytes - off) % align_bytes;
    if (need % g != 0) return a; // never aligned: plain balanced split
    a.aligned = true;
    a.granule = align_bytes / g;
    // Smallest i with (i * elem) % align == need: at most granule candidates.
    for (std::uint64_t i = 0; i < a.granule; ++i) {
        if ((i * elem_bytes) % align_bytes == need) {
            a.first = i;
            break;
        }
    }
    return a;
}

//! Part `part` of `parts` of [begin, end). Interior boundaries are aligned
//! indices (when the buffer has any); parts are contiguous, in order, and
//! together cover the range exactly.
CHORUS_HD constexpr std::uint64_t split_boundary(std::uint64_t begin, std::uint64_t end, std::uint64_t k,
                                                 std::uint64_t parts, const alignment& a) {
    if (k == 0) return begin;
    if (k >= parts) return end;
    const std::uint64_t g = a.aligned ? a.granule : 1;
    // First aligned index at or after begin.
    std::uint64_t f = begin;
    if (a.aligned) f = begin <= a.first ? a.first : a.first + detail::ceil_div(begin - a.first, g) * g;
    if (f >= end) return end; // no aligned index inside: everything goes to the first part
    const std::uint64_t units = (end - f) / g;
    const std::uint64_t b = f + g * detail::scaled(units, k, parts);
    return b < end ? b : end;
}

CHORUS_HD constexpr index_range split(index_range r, std::uint64_t part, std::uint64_t parts, const alignment& a) {
    return {split_boundary(r.begin, r.end, part, parts, a), split_boundary(r.begin, r.end, part + 1, parts, a)};
}

//! An upper bound on the size of any part of split(r, *, parts, a) for any r
//! of length `len`: the planner sizes scratch slots with it.
CHORUS_HD constexpr std::uint64_t max_part_bound(std::uint64_t len, std::uint64_t parts, const alignment& a) {
    const std::uint64_t g = a.aligned ? a.granule : 1;
    // whole granules per part (rounded up) plus a ragged head and tail
    const std::uint64_t bound = (detail::ceil_div(len / g + 1, parts)) * g + 2 * g;
    return bound < len ? bound : len;
}

//! How many chunks a channel of `channel_len` elements is cut into so that
//! each holds about `chunk_bytes` (whole aligned granules, at least one),
//! and `units_per_chunk * chunks` stays within `max_units` (more, larger
//! chunks otherwise). At least 1.
CHORUS_HD constexpr std::uint64_t chunk_count(std::uint64_t channel_len, std::uint64_t elem_bytes,
                                              std::uint64_t chunk_bytes, const alignment& a,
                                              std::uint64_t units_per_chunk, std::uint64_t max_units) {
    const std::uint64_t g = a.aligned ? a.granule : 1;
    std::uint64_t chunk_elems = chunk_bytes / (elem_bytes ? elem_bytes : 1);
    chunk_elems = chunk_elems / g * g;
    if (chunk_elems < g) chunk_elems = g;
    std::uint64_t k = detail::ceil_div(channel_len, chunk_elems);
    const std::uint64_t max_chunks = max_units / (units_per_chunk ? units_per_chunk : 1);
    if (k > max_chunks) k = max_chunks;
    return k ? k : 1;
}

} // namespace chorus
