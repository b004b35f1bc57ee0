#pragma once
//! Every algorithm policy against the serial reference on the threads
//! backend (the ring's own, larger matrix is types_matrix.hpp):
//!   policies: see test_policies_*.cpp, each with its default tuning and a
//!     tuned variant (several channels, tiny chunks: many ragged units),
//!     as run-time values: each case below is instantiated once per
//!     (type, operator) and serves every policy
//!   x collectives {all_reduce, all_gather, reduce_scatter, broadcast, reduce}
//!   x (type, operator) pairs: every operator on int32 and float (sanitizer
//!     builds: sum, max, bit_xor on int32, sum and avg on float), sum and
//!     avg on int8, sum on double, argmax on a user struct, and, for the
//!     policies that keep operand order, a non-commutative user operator
//!     (affine-map composition)
//!   x ranks 1..9 x counts {0, 1, n-1, n, n+1, a prime} x in place or not
//!   x buffers at rank-dependent element offsets with guards.
//! Inputs are small integers or bit patterns: exact whatever the order.
//! Tuned variants run AllReduce only (their other collectives take the
//! same code paths as the default's).

#include "collective_cases.hpp"

#include <atomic>
#include <initializer_list>

namespace {

inline std::vector<std::size_t> policy_counts(int n, std::size_t extra) {
    std::vector<std::size_t> v{0, 1, std::size_t(n - 1), std::size_t(n), std::size_t(n + 1), extra};
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

//! One policy's cases on one communicator (the same sequence on every rank).
inline void policy_cases(ctx& x, const named_policy& algo, bool full) {
    const int n = x.n;
    const auto counts = policy_counts(n, full ? 1009 : 211);
    auto ar = [&]<class T>(T*, auto op) {
        for (std::size_t c : counts)
            for (bool ip : {false, true}) case_all_reduce<T>(x, algo, c, ip, op);
    };
#if defined(CHORUS_TEST_REDUCED_MATRIX) // sanitizer builds: the same paths, fewer operators (run time)
    for_each_op<op_list<chorus::sum, chorus::max, chorus::bit_xor>>([&](auto op) { ar(static_cast<std::int32_t*>(nullptr), op); });
    for_each_op<op_list<chorus::sum, chorus::avg>>([&](auto op) { ar(static_cast<float*>(nullptr), op); });
#else
    for_each_op<all_integral_ops>([&](auto op) { ar(static_cast<std::int32_t*>(nullptr), op); });
    for_each_op<all_float_ops>([&](auto op) { ar(static_cast<float*>(nullptr), op); });
#endif
    if (!algo.pol.reorders_operands()) ar(static_cast<affine*>(nullptr), compose_op{});
    if (!full) return;
    {
        ar(static_cast<std::int8_t*>(nullptr), chorus::sum{});
        ar(static_cast<std::int8_t*>(nullptr), chorus::avg{});
        ar(static_cast<double*>(nullptr), chorus::sum{});
        ar(static_cast<indexed*>(nullptr), argmax_op{});
        for (std::size_t c : counts)
            for (bool ip : {false, true}) {
                case_reduce_scatter<std::int32_t>(x, algo, c, ip, chorus::bit_xor{});
                case_reduce_scatter<float>(x, algo, c, ip, chorus::avg{});
                case_reduce_scatter<std::int8_t>(x, algo, c, ip, chorus::sum{});
                case_reduce<std::int32_t>(x, algo, c, ip, chorus::max{});
                case_reduce<float>(x, algo, c, ip, chorus::sum{});
                case_reduce<double>(x, algo, c, ip, chorus::avg{});
                case_all_gather<std::int8_t>(x, algo, c, ip);
                case_all_gather<double>(x, algo, c, ip);
                if (!algo.pol.reorders_operands()) {
                    case_reduce_scatter<affine>(x, algo, c, ip, compose_op{});
                    case_reduce<affine>(x, algo, c, ip, compose_op{});
                }
            }
        for (std::size_t c : counts) {
            case_broadcast<std::int32_t>(x, algo, c);
            case_broadcast<double>(x, algo, c);
        }
    }
}

//! Runs the cases of a policy for n = 1..9 (`full`: every collective, else
//! AllReduce only); returns calls per rank.
inline std::uint64_t run_policy(const named_policy& algo, bool full = true) {
    failure_log log;
    std::uint64_t calls = 0;
    for (int n = 1; n <= 9; ++n) {
        INFO(algo.name << " on " << n << " ranks");
        std::atomic<std::uint64_t> ran{0};
        try {
            chorus::run_threads(n, [&](comm_t& comm) {
                comm.set_timeout(std::chrono::seconds(60));
                ctx x{comm, log, n, comm.rank()};
                x.k = std::uint64_t(n) * 5;
                policy_cases(x, algo, full);
                if (x.rank == 0) ran = x.k;
            });
        } catch (const std::exception& e) {
            FAIL_CHECK("run_threads(" << n << ") threw: " << std::string(e.what()));
        }
        calls += ran.load();
    }
    log.report();
    return calls;
}

} // namespace
