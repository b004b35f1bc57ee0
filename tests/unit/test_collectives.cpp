// Every collective against a serial reference, bit for bit:
//   collectives {all_reduce, all_gather, reduce_scatter, broadcast, reduce}
//   x algorithms {ring<>, ring<2 channels, 16-byte chunks>, ring<3, 64>}
//   x operators {sum, prod, min, max, avg, bit_and, bit_or, bit_xor, user}
//   x element types {int8..uint64, float, double, two user structs}
//   x counts {0, 1, n-1, n, n+1, a prime (97 or 1009)}, plus 2^20+7 for a few
//     (type, operator) pairs
//   x ranks {1, 2, 3, 4, 5, 8} x in-place / out-of-place
//   x buffers at element offsets 0..3 that differ between ranks, with guard
//     elements around every span (checked untouched), `in` checked unchanged
//     out of place, null spans for count 0.
//
// Each instantiation (collective x algorithm x type x operator) costs about a
// quarter of a second of compile time, so the cross product is covered, not
// multiplied out (see type_plan): every valid (type, operator) pair runs
// through all_reduce; every type runs reduce_scatter and reduce with avg and
// one more operator (all operators for int32 and float), every collective on
// ring<>, and every collective on one of the tuned rings. Run time is small:
// for each (type, ranks) one run_threads issues all of that type's calls
// (the same sequence on every rank).
//
// Inputs are small integers (or full-range bit patterns for bitwise/min/max
// on integers) so that every exact result is representable and independent
// of the order in which the ring combines the ranks' values.

#include "collective_cases.hpp"

#include <atomic>
#include <initializer_list>

namespace {

// --- the matrix ------------------------------------------------------------------------------

inline std::vector<std::size_t> counts_for(int n, std::size_t extra) {
    std::vector<std::size_t> v{0, 1, std::size_t(n - 1), std::size_t(n), std::size_t(n + 1), extra};
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

//! Runs T's plan on n ranks (one run_threads, the same call sequence on
//! every rank); failures go to `log`. Returns the number of calls per rank.
template <class T>
std::uint64_t run_matrix(int n, failure_log& log) {
    using P = type_plan<T>;
    using tuned_a = std::conditional_t<P::swap, ring_c3_64, ring_c2_16>; // reduce_scatter, all_gather
    using tuned_b = std::conditional_t<P::swap, ring_c2_16, ring_c3_64>; // reduce, broadcast
    const char* name_a = P::swap ? "ring<3ch,64B>" : "ring<2ch,16B>";
    const char* name_b = P::swap ? "ring<2ch,16B>" : "ring<3ch,64B>";
    // 16-byte chunks mean many units per call: a smaller prime keeps them fast.
    const std::size_t extra_a = P::swap ? 1009 : 97, extra_b = P::swap ? 97 : 1009;
    std::atomic<std::uint64_t> ran{0};
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(60)); // a hang becomes an error, never a stuck test
        ctx x{comm, log, n, comm.rank()};
        // ring<>: every operator through all_reduce; the plan's through reduce_scatter and reduce.
        for_each_op<typename P::all>([&](auto op) {
            for (std::size_t c : counts_for(n, 1009))
                for (bool ip : {false, true}) case_all_reduce<ring_default, T>(x, "ring<>", c, ip, op);
        });
        for_each_op<typename P::rsr>([&](auto op) {
            for (std::size_t c : counts_for(n, 1009))
                for (bool ip : {false, true}) {
                    case_reduce_scatter<ring_default, T>(x, "ring<>", c, ip, op);
                    case_reduce<ring_default, T>(x, "ring<>", c, ip, op);
                }
        });
        for (std::size_t c : counts_for(n, 1009)) {
            for (bool ip : {false, true}) case_all_gather<ring_default, T>(x, "ring<>", c, ip);
            case_broadcast<ring_default, T>(x, "ring<>", c);
        }
        // Tuned rings: many chunks per channel, ragged chunk ends.
        typename P::x op_x{};
        typename P::y op_y{};
        for (std::size_t c : counts_for(n, extra_a))
            for (bool ip : {false, true}) {
                case_all_reduce<tuned_a, T>(x, name_a, c, ip, op_x);
                case_reduce_scatter<tuned_a, T>(x, name_a, c, ip, op_y);
                case_all_gather<tuned_a, T>(x, name_a, c, ip);
            }
        for (std::size_t c : counts_for(n, extra_b))
            for (bool ip : {false, true}) {
                case_all_reduce<tuned_b, T>(x, name_b, c, ip, op_y);
                case_reduce<tuned_b, T>(x, name_b, c, ip, op_x);
                if (!ip) case_broadcast<tuned_b, T>(x, name_b, c);
            }
        if (x.rank == 0) ran = x.k;
    });
    return ran.load();
}

} // namespace

// Sanitizer builds (CHORUS_TEST_REDUCED_MATRIX, set by tests/CMakeLists.txt)
// run the same code paths for three of the types: the Release build runs
// them all (every instantiation costs compile time, 2-3x more under a
// sanitizer).
#if defined(CHORUS_TEST_REDUCED_MATRIX)
#  define CHORUS_MATRIX_TYPES std::int8_t, float, indexed
#else
#  define CHORUS_MATRIX_TYPES                                                                                   \
      std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t,        \
          std::uint64_t, float, double, indexed, vec3
#endif
TEST_CASE_TEMPLATE("collectives match a serial reference (ops x algorithms x counts x ranks x placement)", T,
                   CHORUS_MATRIX_TYPES) {
    failure_log log;
    std::uint64_t cases = 0;
    for (int n : {1, 2, 3, 4, 5, 8}) {
        INFO("ranks = " << n);
        try {
            cases += run_matrix<T>(n, log);
        } catch (const std::exception& e) {
            FAIL_CHECK("run_threads(" << n << ") threw: " << std::string(e.what()));
        }
    }
    MESSAGE(std::string(type_name<T>()) << ": " << cases << " collective calls per rank");
    log.report();
}

// --- large counts ---------------------------------------------------------------------------------

namespace {

#if CHORUS_TEST_TSAN
constexpr std::size_t big_count = 10007; // ThreadSanitizer: ~10x slower, keep it short
#else
constexpr std::size_t big_count = 1048583; // prime, just over 2^20: 8 MiB of doubles (the streaming-store path)
#endif

//! Large counts for one (type, operator): all_reduce on two algorithms, and
//! every other collective on ring<>; all-gather / reduce-scatter blocks are
//! big_count / n (odd) so the whole buffer stays around big_count elements.
template <class T, class Op>
void run_large(int n, failure_log& log) {
    const std::size_t block = (big_count / std::size_t(n)) | 1;
    std::vector<T> ref(std::max(big_count, block * std::size_t(n)));
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = reference<T>(Op{}, pattern_for<T, Op>(), n, i);
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(120));
        ctx x{comm, log, n, comm.rank()};
        x.shared_ref = &ref;
        x.k = std::uint64_t(n); // vary the offsets with n
        case_all_reduce<ring_default, T>(x, "ring<>", big_count, false, Op{});
        case_all_reduce<ring_c2_64k, T>(x, "ring<2ch,64KiB>", big_count, true, Op{});
        case_reduce_scatter<ring_default, T>(x, "ring<>", block, (n & 1) != 0, Op{});
        case_all_gather<ring_c2_64k, T>(x, "ring<2ch,64KiB>", block, (n & 1) == 0);
        case_broadcast<ring_default, T>(x, "ring<>", big_count);
        case_reduce<ring_c2_64k, T>(x, "ring<2ch,64KiB>", big_count, (n & 1) != 0, Op{});
    });
}

} // namespace

TEST_CASE("collectives with large counts match a serial reference") {
    // Each (type, operator) on a few rank counts only: every call moves
    // megabytes and the reference check reads them all.
    failure_log log;
    const auto t0 = steady::now();
    auto each = [&](std::initializer_list<int> ranks, auto&& run) {
        for (int n : ranks) {
            INFO("ranks = " << n);
            try {
                run(n);
            } catch (const std::exception& e) {
                FAIL_CHECK("run_threads(" << n << ") threw: " << std::string(e.what()));
            }
        }
    };
    each({1, 2, 3, 5, 8}, [&](int n) { run_large<float, chorus::sum>(n, log); });
    each({2, 3, 8}, [&](int n) { run_large<std::int32_t, chorus::max>(n, log); });
    each({1, 3, 5}, [&](int n) { run_large<double, chorus::avg>(n, log); });
    each({2, 5}, [&](int n) { run_large<indexed, argmax_op>(n, log); });
    each({3}, [&](int n) { run_large<vec3, vec3_add>(n, log); });
    MESSAGE("large counts (" << big_count << " elements): " << seconds_since(t0) << " s");
    log.report();
}

TEST_CASE("hierarchical<> on the threads backend (one node) runs its intra-node algorithm") {
    using hier = chorus::hierarchical<chorus::ring<{.channels = 2, .chunk_bytes = 64}>>;
    for (const int n : {1, 3, 4}) {
        CAPTURE(n);
        failure_log log;
        chorus::run_threads(n, [&](comm_t& comm) {
            const int r = comm.rank();
            constexpr std::size_t count = 1001;
            std::vector<float> in(count), out(count), all(count * std::size_t(n)), rs(count);
            for (std::size_t i = 0; i < count; ++i) in[i] = float(i % 7 + std::size_t(r));
            chorus::all_reduce<hier>(comm, std::span<const float>(in), std::span<float>(out));
            chorus::all_gather<hier>(comm, std::span<const float>(in), std::span<float>(all));
            for (std::size_t i = 0; i < count; ++i) {
                if (out[i] != float(n) * float(i % 7) + float(n * (n - 1) / 2)) log.add(std::string("all_reduce rank ") + std::to_string(r) + " element " + std::to_string(i));
                for (int q = 0; q < n; ++q)
                    if (all[std::size_t(q) * count + i] != float(i % 7 + std::size_t(q))) log.add(std::string("all_gather rank ") + std::to_string(r) + " element " + std::to_string(i));
            }
            chorus::reduce_scatter<hier>(comm, std::span<const float>(all), std::span<float>(rs));
            for (std::size_t i = 0; i < count; ++i)
                if (rs[i] != float(n) * all[std::size_t(r) * count + i]) log.add(std::string("reduce_scatter rank ") + std::to_string(r) + " element " + std::to_string(i));
            std::vector<float> b(in);
            chorus::broadcast<hier>(comm, std::span<float>(b), n - 1);
            for (std::size_t i = 0; i < count; ++i)
                if (b[i] != float(i % 7 + std::size_t(n - 1))) log.add(std::string("broadcast rank ") + std::to_string(r) + " element " + std::to_string(i));
        });
        log.report();
    }
}
