// Exhaustive tests of the alignment-aware partitioner (plan/partition.hpp)
// and of the ring planner's nested rank / channel / chunk split.
#include <chorus/chorus.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using chorus::alignment;
using chorus::index_range;

namespace {

bool is_aligned_index(std::uint64_t i, std::uint64_t elem, std::uint64_t off) { return (off + i * elem) % 16 == 0; }

// Checks one split of [b, e) into `parts` and returns "" or a description of the failure.
const char* check_split(std::uint64_t b, std::uint64_t e, std::uint64_t parts, const alignment& a, std::uint64_t elem,
                        std::uint64_t off) {
    std::uint64_t at = b;
    const std::uint64_t bound = chorus::max_part_bound(e - b, parts, a);
    for (std::uint64_t k = 0; k < parts; ++k) {
        const index_range r = chorus::split({b, e}, k, parts, a);
        if (r.begin != at) return "parts are not contiguous";
        if (r.end < r.begin) return "negative part";
        if (r.size() > bound) return "part larger than max_part_bound";
        // every interior boundary strictly inside the range sits on an aligned index
        if (k > 0 && r.begin > b && r.begin < e && a.aligned && !is_aligned_index(r.begin, elem, off))
            return "interior boundary not 16-byte aligned";
        at = r.end;
    }
    if (at != e) return "parts do not cover the range";
    return "";
}

} // namespace

TEST_CASE("alignment_of finds exactly the 16-byte aligned element indices") {
    for (std::uint64_t elem : {1u, 2u, 3u, 4u, 8u, 12u, 16u, 24u, 32u}) {
        for (std::uint64_t off = 0; off < 16; ++off) {
            const alignment a = chorus::alignment_of(elem, off);
            std::uint64_t first = UINT64_MAX;
            std::uint64_t second = UINT64_MAX;
            for (std::uint64_t i = 0; i < 64; ++i) {
                if (is_aligned_index(i, elem, off)) {
                    if (first == UINT64_MAX) first = i;
                    else if (second == UINT64_MAX) second = i;
                }
            }
            CAPTURE(elem);
            CAPTURE(off);
            CHECK(a.aligned == (first != UINT64_MAX));
            if (a.aligned) {
                CHECK(a.first == first);
                CHECK(a.granule == second - first);
            }
        }
    }
}

TEST_CASE("split: every count up to 2500 x parts 1..9 x element sizes x base offsets") {
    std::uint64_t failures = 0;
    for (std::uint64_t elem : {1u, 2u, 4u, 8u, 16u, 12u}) {
        for (std::uint64_t off = 0; off < 16; off += (elem >= 8 ? 1 : 1)) {
            const alignment a = chorus::alignment_of(elem, off);
            for (std::uint64_t count = 0; count <= 2500; ++count) {
                for (std::uint64_t parts = 1; parts <= 9; ++parts) {
                    const char* why = check_split(0, count, parts, a, elem, off);
                    if (*why != '\0') {
                        if (failures++ < 5) {
                            CAPTURE(elem);
                            CAPTURE(off);
                            CAPTURE(count);
                            CAPTURE(parts);
                            FAIL_CHECK(why);
                        }
                    }
                }
            }
        }
    }
    CHECK(failures == 0);
}

TEST_CASE("split: sub-ranges with arbitrary begins (the nested channel and chunk splits)") {
    std::uint64_t failures = 0;
    for (std::uint64_t elem : {1u, 4u, 8u, 16u}) {
        for (std::uint64_t off : {0u, 4u, 8u, 12u}) {
            const alignment a = chorus::alignment_of(elem, off);
            for (std::uint64_t b = 0; b < 70; ++b)
                for (std::uint64_t len = 0; len < 300; len += 7)
                    for (std::uint64_t parts = 1; parts <= 5; ++parts)
                        if (*check_split(b, b + len, parts, a, elem, off) != '\0') ++failures;
        }
    }
    CHECK(failures == 0);
}

TEST_CASE("split: balanced within one granule plus the ragged ends") {
    for (std::uint64_t elem : {1u, 2u, 4u, 8u, 16u}) {
        const alignment a = chorus::alignment_of(elem, 0);
        for (std::uint64_t count = 0; count <= 3000; count += 13) {
            for (std::uint64_t parts = 1; parts <= 9; ++parts) {
                std::uint64_t lo = UINT64_MAX, hi = 0;
                for (std::uint64_t k = 0; k < parts; ++k) {
                    const auto s = chorus::split({0, count}, k, parts, a).size();
                    lo = s < lo ? s : lo;
                    hi = s > hi ? s : hi;
                }
                CAPTURE(count);
                CAPTURE(parts);
                CHECK(hi - lo <= 2 * a.granule);
            }
        }
    }
}

TEST_CASE("split: counts beyond 2^31 and 2^40 elements, no overflow") {
    for (std::uint64_t count : {(std::uint64_t(1) << 31) + 7, (std::uint64_t(1) << 32) + 12345,
                                (std::uint64_t(1) << 40) + 3, (std::uint64_t(1) << 62) - 1}) {
        for (std::uint64_t elem : {1u, 2u, 4u, 8u}) {
            for (std::uint64_t parts : {1u, 2u, 3u, 7u, 8u, 1000u, 4096u}) {
                const alignment a = chorus::alignment_of(elem, 4 % elem == 0 ? 4 : 0);
                CAPTURE(count);
                CAPTURE(parts);
                CHECK(std::string(check_split(0, count, parts, a, elem, 4 % elem == 0 ? 4 : 0)).empty());
            }
        }
    }
}

TEST_CASE("ring_plan: rank x channel x chunk pieces tile the buffer exactly") {
    using chorus::collective;
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                            collective::broadcast, collective::reduce}) {
        for (int n = 1; n <= 9; ++n) {
            for (int channels : {1, 2, 3}) {
                for (std::uint64_t chunk_bytes : {16u, 48u, 1024u}) {
                    for (std::uint64_t count : {0u, 1u, 5u, 8u, 9u, 31u, 97u, 1000u}) {
                        const auto plan = chorus::make_ring_plan(coll, 0, n, 0, count, 4, 0, channels, chunk_bytes);
                        const int slices = (coll == collective::broadcast || coll == collective::reduce) ? 1 : n;
                        const std::uint64_t total = (coll == collective::all_gather || coll == collective::reduce_scatter)
                                                        ? count * std::uint64_t(n)
                                                        : count;
                        std::vector<int> seen(total, 0);
                        bool in_bounds = true;
                        for (int s = 0; s < slices; ++s)
                            for (int c = 0; c < channels; ++c)
                                for (std::uint64_t k = 0; k < plan.chunks; ++k) {
                                    const auto r = plan.chunk(s, c, k);
                                    if (r.end > total) in_bounds = false;
                                    else
                                        for (auto i = r.begin; i < r.end; ++i) ++seen[i];
                                    if ((coll == collective::reduce_scatter || coll == collective::reduce) && n > 1 &&
                                        r.size() > plan.slot_elems)
                                        in_bounds = false; // a scratch slot must hold any chunk
                                }
                        CAPTURE(chorus::collective_name(coll));
                        CAPTURE(n);
                        CAPTURE(channels);
                        CAPTURE(count);
                        CHECK(in_bounds);
                        bool exact = true;
                        for (int v : seen) exact = exact && v == 1;
                        CHECK(exact);
                    }
                }
            }
        }
    }
}
