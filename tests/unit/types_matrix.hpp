#pragma once
//! Every collective against a serial reference, bit for bit:
//!   collectives {all_reduce, all_gather, reduce_scatter, broadcast, reduce}
//!   x policies {ring<>, ring<2 channels, 16-byte chunks>, ring<3, 64>}
//!   x operators {sum, prod, min, max, avg, bit_and, bit_or, bit_xor, user}
//!   x element types {int8..uint64, float, double, two user structs}
//!   x counts {0, 1, n-1, n, n+1, a prime (97 or 1009)}, plus 2^20+7 for a few
//!     (type, operator) pairs
//!   x ranks {1, 2, 3, 4, 5, 8} x in-place / out-of-place
//!   x buffers at element offsets 0..3 that differ between ranks, with guard
//!     elements around every span (checked untouched), `in` checked unchanged
//!     out of place, null spans for count 0.
//!
//! Each instantiation (collective x type x operator) costs compile time, so
//! the cross product is covered, not multiplied out (see type_plan): every
//! valid (type, operator) pair runs through all_reduce; every type runs
//! reduce_scatter and reduce with avg and one more operator (all operators
//! for int32 and float), every collective on ring<>, and every collective on
//! one of the tuned rings. The policies are values (run time), so the tuned
//! rings cost no instantiation; every other policy runs every collective in
//! test_policies.cpp, and every (type, operator) pair runs through the
//! reduce-copy layer in test_reduce_copy.cpp. Run time is small: for each
//! (type, ranks) one run_threads issues all of that type's calls (the same
//! sequence on every rank).
//!
//! The types are split over test_types_int.cpp and test_types_float.cpp so
//! that the two halves compile in parallel.
//!
//! Inputs are small integers (or full-range bit patterns for bitwise/min/max
//! on integers) so that every exact result is representable and independent
//! of the order in which the ring combines the ranks' values.

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
    const named_policy& tuned_a = P::swap ? ring_c3_64 : ring_c2_16; // reduce_scatter, all_gather
    const named_policy& tuned_b = P::swap ? ring_c2_16 : ring_c3_64; // reduce, broadcast
    // 16-byte chunks mean many units per call: a smaller prime keeps them fast.
    const std::size_t extra_a = P::swap ? 1009 : 97, extra_b = P::swap ? 97 : 1009;
    std::atomic<std::uint64_t> ran{0};
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(60)); // a hang becomes an error, never a stuck test
        ctx x{comm, log, n, comm.rank()};
        // ring<>: every operator through all_reduce; the plan's through reduce_scatter and reduce.
        for_each_op<typename P::all>([&](auto op) {
            for (std::size_t c : counts_for(n, 1009))
                for (bool ip : {false, true}) case_all_reduce<T>(x, ring_default, c, ip, op);
        });
        for_each_op<typename P::rsr>([&](auto op) {
            for (std::size_t c : counts_for(n, 1009))
                for (bool ip : {false, true}) {
                    case_reduce_scatter<T>(x, ring_default, c, ip, op);
                    case_reduce<T>(x, ring_default, c, ip, op);
                }
        });
        for (std::size_t c : counts_for(n, 1009)) {
            for (bool ip : {false, true}) case_all_gather<T>(x, ring_default, c, ip);
            case_broadcast<T>(x, ring_default, c);
        }
        // Tuned rings: many chunks per channel, ragged chunk ends.
        typename P::x op_x{};
        typename P::y op_y{};
        for (std::size_t c : counts_for(n, extra_a))
            for (bool ip : {false, true}) {
                case_all_reduce<T>(x, tuned_a, c, ip, op_x);
                case_reduce_scatter<T>(x, tuned_a, c, ip, op_y);
                case_all_gather<T>(x, tuned_a, c, ip);
            }
        for (std::size_t c : counts_for(n, extra_b))
            for (bool ip : {false, true}) {
                case_all_reduce<T>(x, tuned_b, c, ip, op_y);
                case_reduce<T>(x, tuned_b, c, ip, op_x);
                if (!ip) case_broadcast<T>(x, tuned_b, c);
            }
        if (x.rank == 0) ran = x.k;
    });
    return ran.load();
}

//! The whole matrix of element type T: every rank count, one failure log.
template <class T>
void run_type_matrix() {
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

} // namespace
