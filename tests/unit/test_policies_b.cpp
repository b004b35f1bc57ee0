// The one-shot, two-shot, hierarchical and choosing policies against the
// serial reference (see policy_matrix.hpp for the matrix).
#include "policy_matrix.hpp"

#include <cmath>
#include <cstring>

TEST_CASE("two_shot policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::two_shot<>>("two_shot<>") << " calls per rank");
    MESSAGE(run_policy<chorus::two_shot<{.channels = 2, .chunk_bytes = 16}>, false>("two_shot<2ch,16B>")
            << " calls per rank");
}

TEST_CASE("direct policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::direct<>>("direct<>") << " calls per rank");
    MESSAGE(run_policy<chorus::direct<{.channels = 3, .chunk_bytes = 64}>, false>("direct<3ch,64B>")
            << " calls per rank");
}

TEST_CASE("hierarchical direct policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::hierarchical<chorus::direct<>, chorus::direct<>>>("hierarchical<direct,direct>")
            << " calls per rank");
}

TEST_CASE("automatic policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::automatic>("automatic") << " calls per rank");
}

TEST_CASE("deterministic policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::deterministic<>>("deterministic<>") << " calls per rank");
    MESSAGE(run_policy<chorus::deterministic<chorus::ring<{.channels = 2, .chunk_bytes = 16}>>, false>(
                "deterministic<ring<2ch,16B>>")
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

template <class Algo, class Op>
void all_reduce_bits(comm_t& comm, std::size_t count, bool in_place, std::vector<float>& got) {
    std::vector<float> in(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = noisy(comm.rank(), i);
    got.assign(count, 0.0f);
    if (in_place) {
        chorus::all_reduce<Algo>(comm, std::span<float>(in), Op{});
        got = in;
    } else {
        chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(got), Op{});
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
                    all_reduce_bits<deterministic<>, sum>(comm, count, ip, got);
                    expect("deterministic<>", want_sum);
                    all_reduce_bits<deterministic<ring<>>, sum>(comm, count, ip, got);
                    expect("deterministic<ring<>>", want_sum);
                    all_reduce_bits<deterministic<ring<{.channels = 3, .chunk_bytes = 64}>>, sum>(comm, count, ip, got);
                    expect("deterministic<ring<3ch,64B>>", want_sum);
                    all_reduce_bits<deterministic<tree<>>, sum>(comm, count, ip, got);
                    expect("deterministic<tree<>>", want_sum);
                    all_reduce_bits<deterministic<recursive_doubling<{.channels = 2, .chunk_bytes = 256}>>, sum>(
                        comm, count, ip, got);
                    expect("deterministic<recursive_doubling<2ch,256B>>", want_sum);
                    all_reduce_bits<deterministic<rabenseifner<>>, avg>(comm, count, ip, got);
                    expect("deterministic<rabenseifner<>> avg", want_avg);
                    all_reduce_bits<deterministic<hierarchical<>>, avg>(comm, count, ip, got);
                    expect("deterministic<hierarchical<>> avg", want_avg);
                    all_reduce_bits<direct<{.channels = 2, .chunk_bytes = 128}>, sum>(comm, count, ip, got);
                    expect("direct<2ch,128B>", want_sum);
                    all_reduce_bits<two_shot<{.channels = 4, .chunk_bytes = 4096}>, sum>(comm, count, ip, got);
                    expect("two_shot<4ch,4KiB>", want_sum);
                    // ReduceScatter: block r of the left fold.
                    std::vector<float> in(count * std::size_t(n)), out(count);
                    for (std::size_t i = 0; i < in.size(); ++i) in[i] = noisy(comm.rank(), i % count);
                    reduce_scatter<deterministic<ring<>>>(comm, std::span<const float>(in), std::span<float>(out));
                    got = out;
                    expect("deterministic<ring<>> reduce_scatter", want_sum);
                    all_reduce_bits<ring<>, sum>(comm, count, ip, got);
                    if (std::memcmp(got.data(), want_sum.data(), count * sizeof(float)) != 0) ring_differs = 1;
                }
            });
            log.report();
            if (n >= 3 && count >= 1000) CHECK_MESSAGE(ring_differs.load() == 1, "the inputs do not tell orders apart");
        }
    }
}
