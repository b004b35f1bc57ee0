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

// --- per-call tuning (algo/policy.hpp resolve_tuning) ----------------------------------------

namespace {

using chorus::algorithm;
using chorus::collective;
using chorus::tuning;

bool same_wait(const chorus::wait_spec& a, const chorus::wait_spec& b) {
    return a.peer == b.peer && a.units == b.units && a.span == b.span && a.stride == b.stride &&
           a.every_channel == b.every_channel;
}
bool same_operand(const chorus::operand& a, const chorus::operand& b) {
    return a.rank == b.rank && a.loc == b.loc && a.offset == b.offset;
}

//! Every step of two schedules, compared field by field (units, channels, scratch, waits).
bool same_steps(const chorus::any_schedule& x, const chorus::any_schedule& y) {
    if (x.kind != y.kind || x.channels() != y.channels() || x.units() != y.units() ||
        x.scratch_elems() != y.scratch_elems() || !same_wait(x.final_wait(), y.final_wait()))
        return false;
    for (int c = 0; c < x.channels(); ++c)
        for (std::uint64_t p = 0; p < x.units(); ++p) {
            const chorus::step a = x.unit(c, p), b = y.unit(c, p);
            if (!same_operand(a.dst, b.dst) || !same_operand(a.dst2, b.dst2) || !same_operand(a.src0, b.src0) ||
                !same_operand(a.src1, b.src1) || a.count != b.count || a.finish != b.finish ||
                a.fan_in != b.fan_in || a.fan_stride != b.fan_stride || !same_wait(a.waits[0], b.waits[0]) ||
                !same_wait(a.waits[1], b.waits[1]))
                return false;
        }
    return true;
}

} // namespace

TEST_CASE("per-call tuning: the resolver table over sizes, rank counts and channel budgets") {
    // The policy types' defaults hold 0 in both fields (chosen per call); a given value stays.
    static_assert(chorus::policy_of<chorus::ring<>>.tune == chorus::per_call_tuning);
    static_assert(chorus::policy_of<chorus::direct<>>.tune == chorus::per_call_tuning);
    static_assert(chorus::policy_of<chorus::tree<>>.tune == chorus::per_call_tuning);
    static_assert(chorus::policy_of<chorus::two_shot<>>.tune == chorus::per_call_tuning);
    static_assert(chorus::policy_of<chorus::hierarchical<>>.inter_tune == chorus::per_call_tuning);
    static_assert(chorus::policy_of<chorus::ring<chorus::ring_params{.channels = 2}>>.tune == tuning{2, 0});
    // The measured points the rule comes from (docs/gpu.md): 8 virtual ranks on
    // one 132-SM H200 (budget 2 x 132 / 8 = 33, so 32).
    static_assert(chorus::resolve_tuning(algorithm::ring, {0, 0}, collective::all_reduce, 256u << 20, 8, 32) ==
                  tuning{32, 1 << 20});
    static_assert(chorus::resolve_tuning(algorithm::direct, {0, 0}, collective::all_reduce, 64u << 10, 8, 32) ==
                  tuning{4, 1 << 20});
    static_assert(chorus::resolve_tuning(algorithm::direct, {0, 0}, collective::all_reduce, 8, 8, 32).channels == 1);

    const algorithm algos[] = {algorithm::ring,         algorithm::direct,   algorithm::tree,
                               algorithm::recursive_doubling, algorithm::rabenseifner, algorithm::two_shot,
                               algorithm::hierarchical};
    const collective colls[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce, collective::all_to_all};
    const tuning explicit_ones[] = {{1, 16}, {2, 64 << 10}, {32, 1 << 20}, {7, 3000}};
    // Plain checks, counted (millions of them: doctest's per-assertion cost
    // would dominate); the first failure is reported with its inputs.
    long long checked = 0;
    std::string failure;
    auto expect = [&](bool ok, const char* what, algorithm a, collective c, std::uint64_t bytes, int n, int budget) {
        ++checked;
        if (ok || !failure.empty()) return;
        failure = std::string(what) + ": " + chorus::algorithm_name(a) + " " + chorus::collective_name(c) +
                  " bytes=" + std::to_string(bytes) + " n=" + std::to_string(n) + " budget=" + std::to_string(budget);
    };
    for (const algorithm a : algos)
        for (const collective c : colls)
            for (int n : {1, 2, 3, 4, 7, 8, 16, 64})
                for (int budget : {0, 1, 2, 3, 5, 8, 16, 31, 32, 33, 40, 264}) {
                    int prev = 1;
                    for (int e = 0; e <= 34; ++e)
                        for (const std::uint64_t bytes : {(std::uint64_t(1) << e) - 1, std::uint64_t(1) << e,
                                                          (std::uint64_t(3) << e) / 2}) {
                            const tuning t = chorus::resolve_tuning(a, chorus::per_call_tuning, c, bytes, n, budget);
                            if (budget == 0 || chorus::is_exchange(c)) {
                                // Host transports (and the exchange collectives): the old defaults.
                                expect(t == chorus::host_tuning(a), "host values", a, c, bytes, n, budget);
                                continue;
                            }
                            const int cap = budget < chorus::max_channels ? budget : chorus::max_channels;
                            expect(t.channels >= 1 && t.channels <= cap, "within the budget", a, c, bytes, n, budget);
                            expect((t.channels & (t.channels - 1)) == 0, "a power of two", a, c, bytes, n, budget);
                            if (bytes >= (std::uint64_t(1) << e)) { // sizes in increasing order
                                expect(t.channels >= prev, "monotone in the size", a, c, bytes, n, budget);
                                prev = t.channels;
                            }
                            const bool chain =
                                a == algorithm::tree || c == collective::broadcast || c == collective::reduce;
                            expect(t.chunk_bytes ==
                                       (chain ? chorus::host_tuning(a).chunk_bytes : chorus::gpu_chunk_bytes),
                                   "chunk", a, c, bytes, n, budget);
                            // Enough work for every channel, and not fewer channels than the work and budget allow.
                            const bool split = a == algorithm::ring || a == algorithm::two_shot ||
                                               a == algorithm::rabenseifner || a == algorithm::hierarchical;
                            const std::uint64_t work = split && n > 1 ? bytes / std::uint64_t(n) : bytes;
                            const std::uint64_t per = chorus::gpu_channel_work_bytes;
                            expect(t.channels == 1 || work >= std::uint64_t(t.channels) * per, "work per channel", a,
                                   c, bytes, n, budget);
                            expect(t.channels * 2 > cap || work < std::uint64_t(t.channels) * 2 * per,
                                   "as many channels as pay", a, c, bytes, n, budget);
                            // One field given: that one kept, the other resolved as above.
                            expect(chorus::resolve_tuning(a, {3, 0}, c, bytes, n, budget) == tuning{3, t.chunk_bytes},
                                   "channels given", a, c, bytes, n, budget);
                            expect(chorus::resolve_tuning(a, {0, 4096}, c, bytes, n, budget) ==
                                       tuning{t.channels, 4096},
                                   "chunk given", a, c, bytes, n, budget);
                        }
                    for (const tuning x : explicit_ones) // given values are used exactly as given
                        expect(chorus::resolve_tuning(a, x, c, std::uint64_t(1) << 28, n, budget) == x, "explicit",
                               a, c, std::uint64_t(1) << 28, n, budget);
                }
    CHECK(failure == "");
    CHECK(checked > 100000);
    MESSAGE(checked << " resolutions checked");
}

TEST_CASE("per-call tuning: host transports plan exactly what the old defaults planned") {
    // channel_budget 0 (threads, shm, MPI): every policy type's default plans
    // the schedule of its old explicit tuning, step for step.
    const std::pair<chorus::policy, chorus::policy> pairs[] = {
        {chorus::policy_of<chorus::ring<>>, chorus::policy::fixed(algorithm::ring, {1, 256 << 10})},
        {chorus::policy_of<chorus::direct<>>, chorus::policy::fixed(algorithm::direct, {1, 1 << 20})},
        {chorus::policy_of<chorus::tree<>>, chorus::policy::fixed(algorithm::tree, {1, 128 << 10})},
        {chorus::policy_of<chorus::two_shot<>>, chorus::policy::fixed(algorithm::two_shot, {1, 1 << 20})},
        {chorus::policy_of<chorus::recursive_doubling<>>,
         chorus::policy::fixed(algorithm::recursive_doubling, {1, 1 << 20})},
        {chorus::policy_of<chorus::rabenseifner<>>, chorus::policy::fixed(algorithm::rabenseifner, {1, 1 << 20})},
        {chorus::policy_of<chorus::hierarchical<>>,
         chorus::policy::hierarchical(algorithm::ring, {1, 256 << 10}, algorithm::ring, {1, 256 << 10})},
        {chorus::policy_of<chorus::hierarchical<chorus::direct<>, chorus::ring<>>>,
         chorus::policy::hierarchical(algorithm::direct, {1, 1 << 20}, algorithm::ring, {1, 256 << 10})},
        {chorus::policy_of<chorus::deterministic<chorus::ring<>>>,
         chorus::policy::fixed(algorithm::ring, {1, 256 << 10}).deterministic_of()},
        {chorus::policy_of<chorus::deterministic<chorus::direct<>>>,
         chorus::policy::fixed(algorithm::direct, {1, 1 << 20}).deterministic_of()},
    };
    const collective colls[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce};
    int compared = 0;
    for (const auto& pair : pairs) {
        // Named, not a structured binding: clang 14 cannot capture one (INFO's lambda).
        const auto& now = pair.first;
        const auto& old = pair.second;
        for (const collective c : colls)
            for (int n : {1, 2, 3, 4, 8})
                for (int node_size : {0, 2})
                    for (const std::uint64_t count : {std::uint64_t(0), std::uint64_t(5), std::uint64_t(1000),
                                                      std::uint64_t(300000)})
                        for (int r = 0; r < n; ++r) {
                            chorus::schedule_args a{c, r, n, 0, count, 4, false, n % 2 == 0 ? node_size : 0};
                            INFO(chorus::detail::policy_text(now) << " " << chorus::collective_name(c) << " n=" << n
                                                                  << " count=" << count);
                            REQUIRE(same_steps(chorus::make_schedule(now, a), chorus::make_schedule(old, a)));
                            ++compared;
                        }
    }
    MESSAGE(compared << " schedules compared");
}

TEST_CASE("per-call tuning: a GPU channel budget resolves defaults per call, given values stay") {
    chorus::schedule_args a{collective::all_reduce, 0, 8, 0, (256u << 20) / 4, 4, false, 0};
    a.channel_budget = 32;
    // ring<> at 256 MiB on 8 ranks: 32 channels, one 1 MiB chunk per channel slice.
    const chorus::any_schedule big = chorus::make_schedule<chorus::ring<>>(a);
    CHECK(big.channels() == 32);
    CHECK(same_steps(big, chorus::make_schedule<chorus::ring<chorus::ring_params{32, 1 << 20}>>(a)));
    // A budget below that caps it (every rank's blocks must be resident).
    a.channel_budget = 5;
    CHECK(chorus::make_schedule<chorus::ring<>>(a).channels() == 4);
    a.channel_budget = 32;
    // Explicit tuning is used exactly as given.
    using two = chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 64 << 10}>;
    CHECK(chorus::make_schedule<two>(a).channels() == 2);
    CHECK(chorus::make_schedule<two>(a).ring.plan.chunks > 200); // 16 MiB per channel in 64 KiB chunks
    // Small calls: one channel; every rank resolves alike (the inputs are the call's, not the rank's).
    a.count = 2;
    for (int r = 0; r < 8; ++r) {
        a.rank = r;
        CHECK(chorus::make_schedule<chorus::ring<>>(a).channels() == 1);
        CHECK(chorus::make_schedule<chorus::direct<>>(a).channels() == 1);
    }
    // deterministic<ring<>> on a GPU: the reduction that runs (direct or
    // two_shot) with its own per-call tuning.
    a.count = (64u << 20) / 4;
    const chorus::any_schedule det = chorus::make_schedule<chorus::deterministic<chorus::ring<>>>(a);
    CHECK(det.channels() > 1);
    // The exchange collectives keep the host values on a GPU too.
    a.coll = collective::all_to_all;
    a.count = 1 << 20;
    CHECK(chorus::make_schedule<chorus::ring<>>(a).channels() == 1);
    // The memo of a repeated call notices a changed budget.
    chorus::detail::schedule_memo memo;
    a.coll = collective::all_reduce;
    a.count = (256u << 20) / 4;
    a.rank = 0;
    CHECK(memo.make(chorus::policy_of<chorus::ring<>>, a).channels() == 32);
    a.channel_budget = 0;
    CHECK(memo.make(chorus::policy_of<chorus::ring<>>, a).channels() == 1);
}
