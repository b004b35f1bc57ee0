// Every algorithm policy against the serial reference (policy_matrix.hpp
// has the matrix: the policies are run-time values, so one instantiation
// per (type, operator) serves them all), and determinism: deterministic<>
// gives the bits of the serial left fold whatever the algorithm, channels,
// chunks or timing.
#include "policy_matrix.hpp"

#include <cmath>
#include <cstring>

TEST_CASE("tree policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"tree<>", chorus::policy_of<chorus::tree<>>}) << " calls per rank");
    MESSAGE(run_policy({"tree<2ch,16B>", chorus::policy::fixed(chorus::algorithm::tree, {2, 16})}, false)
            << " calls per rank");
}

TEST_CASE("recursive_doubling policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"recursive_doubling<>", chorus::policy_of<chorus::recursive_doubling<>>}) << " calls per rank");
    MESSAGE(run_policy({"recursive_doubling<2ch,16B>", chorus::policy::fixed(chorus::algorithm::recursive_doubling, {2, 16})},
                       false)
            << " calls per rank");
}

TEST_CASE("rabenseifner policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"rabenseifner<>", chorus::policy_of<chorus::rabenseifner<>>}) << " calls per rank");
    MESSAGE(run_policy({"rabenseifner<3ch,64B>", chorus::policy::fixed(chorus::algorithm::rabenseifner, {3, 64})}, false)
            << " calls per rank");
}

TEST_CASE("two_shot policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"two_shot<>", chorus::policy_of<chorus::two_shot<>>}) << " calls per rank");
    MESSAGE(run_policy({"two_shot<2ch,16B>", chorus::policy::fixed(chorus::algorithm::two_shot, {2, 16})}, false)
            << " calls per rank");
}

TEST_CASE("direct policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"direct<>", chorus::policy_of<chorus::direct<>>}) << " calls per rank");
    MESSAGE(run_policy({"direct<3ch,64B>", chorus::policy::fixed(chorus::algorithm::direct, {3, 64})}, false)
            << " calls per rank");
}

TEST_CASE("hierarchical direct policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"hierarchical<direct,direct>",
                        chorus::policy_of<chorus::hierarchical<chorus::direct<>, chorus::direct<>>>})
            << " calls per rank");
}

TEST_CASE("automatic policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"automatic", chorus::policy_of<chorus::automatic>}) << " calls per rank");
}

TEST_CASE("deterministic policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy({"deterministic<>", chorus::policy_of<chorus::deterministic<>>}) << " calls per rank");
    MESSAGE(run_policy({"deterministic<ring<2ch,16B>>",
                        chorus::policy::fixed(chorus::algorithm::ring, {2, 16}).deterministic_of()},
                       false)
            << " calls per rank");
}

// --- determinism -------------------------------------------------------------------------

namespace {

//! A float input that is not an integer and spans magnitudes, so the
//! rounding of every addition depends on the order of the operands.
float noisy(int r, std::size_t i) {
    const std::uint64_t h = mix(std::uint64_t(r) * 1000003u + i);
    const float mant = float(h % 1000003) / 7919.0f;
    const int e = int((h >> 20) % 24) - 12;
    return std::ldexp(mant, e) * ((h >> 40) & 1 ? -1.0f : 1.0f);
}

//! The bits every deterministic<Algo> AllReduce (or ReduceScatter block)
//! must produce: the left fold in rank order 0..n-1, then avg's division.
template <class Op>
std::vector<float> left_fold(int n, std::size_t count) {
    std::vector<float> r(count);
    for (std::size_t i = 0; i < count; ++i) {
        float acc = noisy(0, i);
        for (int q = 1; q < n; ++q) acc = Op{}(acc, noisy(q, i));
        if constexpr (std::is_same_v<Op, chorus::avg>) acc = chorus::detail::finish(Op{}, acc, n);
        r[i] = acc;
    }
    return r;
}

template <class Op>
void all_reduce_bits(comm_t& comm, const chorus::policy& pol, std::size_t count, bool in_place,
                     std::vector<float>& got) {
    std::vector<float> in(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = noisy(comm.rank(), i);
    got.assign(count, 0.0f);
    if (in_place) {
        chorus::detail::all_reduce_run(comm, pol, std::span<const float>(in), std::span<float>(in), Op{}, false);
        got = in;
    } else {
        chorus::detail::all_reduce_run(comm, pol, std::span<const float>(in), std::span<float>(got), Op{}, false);
    }
}

} // namespace

TEST_CASE("deterministic results are bitwise identical whatever the algorithm, channels, chunks or timing") {
    using namespace chorus;
    // Non-deterministic reference point: the ring's own order differs from
    // the left fold for these inputs (checked below), so the test can fail.
    for (int n : {2, 3, 4, 5, 7, 8}) {
        for (std::size_t count : {std::size_t(1), std::size_t(1000), std::size_t(65537)}) {
            CAPTURE(n);
            CAPTURE(count);
            const std::vector<float> want_sum = left_fold<sum>(n, count);
            const std::vector<float> want_avg = left_fold<avg>(n, count);
            failure_log log;
            std::atomic<int> ring_differs{0};
            run_threads(n, [&](comm_t& comm) {
                comm.set_timeout(std::chrono::seconds(60));
                std::vector<float> got;
                int run = 0;
                auto expect = [&](const char* what, const std::vector<float>& want) {
                    ++run;
                    if (std::memcmp(got.data(), want.data(), count * sizeof(float)) != 0)
                        log.add(std::string(what) + " differs from the left fold (rank " +
                                std::to_string(comm.rank()) + ", run " + std::to_string(run) + ")");
                };
                for (bool ip : {false, true}) {
                    all_reduce_bits<sum>(comm, policy_of<deterministic<>>, count, ip, got);
                    expect("deterministic<>", want_sum);
                    all_reduce_bits<sum>(comm, policy_of<deterministic<ring<>>>, count, ip, got);
                    expect("deterministic<ring<>>", want_sum);
                    all_reduce_bits<sum>(comm, policy::fixed(algorithm::ring, {3, 64}).deterministic_of(), count, ip, got);
                    expect("deterministic<ring<3ch,64B>>", want_sum);
                    all_reduce_bits<sum>(comm, policy_of<deterministic<tree<>>>, count, ip, got);
                    expect("deterministic<tree<>>", want_sum);
                    all_reduce_bits<sum>(
                        comm, policy::fixed(algorithm::recursive_doubling, {2, 256}).deterministic_of(), count, ip, got);
                    expect("deterministic<recursive_doubling<2ch,256B>>", want_sum);
                    all_reduce_bits<avg>(comm, policy_of<deterministic<rabenseifner<>>>, count, ip, got);
                    expect("deterministic<rabenseifner<>> avg", want_avg);
                    all_reduce_bits<avg>(comm, policy_of<deterministic<hierarchical<>>>, count, ip, got);
                    expect("deterministic<hierarchical<>> avg", want_avg);
                    all_reduce_bits<sum>(comm, policy::fixed(algorithm::direct, {2, 128}), count, ip, got);
                    expect("direct<2ch,128B>", want_sum);
                    all_reduce_bits<sum>(comm, policy::fixed(algorithm::two_shot, {4, 4096}), count, ip, got);
                    expect("two_shot<4ch,4KiB>", want_sum);
                    // ReduceScatter: block r of the left fold.
                    std::vector<float> in(count * std::size_t(n)), out(count);
                    for (std::size_t i = 0; i < in.size(); ++i) in[i] = noisy(comm.rank(), i % count);
                    reduce_scatter<deterministic<ring<>>>(comm, std::span<const float>(in), std::span<float>(out));
                    got = out;
                    expect("deterministic<ring<>> reduce_scatter", want_sum);
                    all_reduce_bits<sum>(comm, policy_of<ring<>>, count, ip, got);
                    if (std::memcmp(got.data(), want_sum.data(), count * sizeof(float)) != 0) ring_differs = 1;
                }
            });
            log.report();
            if (n >= 3 && count >= 1000) CHECK_MESSAGE(ring_differs.load() == 1, "the inputs do not tell orders apart");
        }
    }
}
