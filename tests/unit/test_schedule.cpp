// The schedules of every policy and the flag protocol, checked by
// simulation without threads (schedule_sim.hpp): every rank's real units
// (any_schedule, as make_schedule plans it) under the real wait rules of
// both executors (channels independent, as GPU thread blocks run them, and
// interleaved on one thread, as the host executors run them), in many
// random interleavings, over symbolic data that records which ranks'
// inputs each element has absorbed and how often. At every state any two
// units that could run concurrently are checked for conflicting buffer
// accesses, and no unit may touch a buffer of a rank that has not
// registered it or has returned; at the end, every output element must
// hold its index with each rank's contribution exactly once and the
// epilogue applied once.
#include "schedule_sim.hpp"

#include <chorus/chorus.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace chorus;
using chorus_sim::channel_order;
using chorus_sim::schedule_sim;

namespace {

//! One call of `coll` on every rank, as the API lays out its buffers and
//! in place aliasing; inputs hold rank r's contribution and the element's
//! index (AllGather: its index in the gathered output).
//! `window`: schedule_args::node_window_bytes (the node's ranks then keep
//! their buffers private, and the simulation checks they do).
schedule_sim simulation(const policy& pol, collective coll, bool in_place, int n, int root, std::uint64_t count,
                        int node_size, channel_order order, std::uint64_t window = 0) {
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    std::vector<chorus_sim::rank_call> calls(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        chorus_sim::rank_call& k = calls[std::size_t(r)];
        const bool ip = in_place && (coll != collective::reduce || r == root) && coll != collective::broadcast;
        schedule_args a{coll, r, n, root, count, 4, ip, node_size};
        a.node_window_bytes = window;
        k.sch = make_schedule(pol, a);
        k.in.resize(coll == collective::all_gather ? count : big);
        k.out.resize(coll == collective::reduce_scatter ? count : big);
        const std::uint64_t first = coll == collective::all_gather ? std::uint64_t(r) * count : 0;
        for (std::uint64_t i = 0; i < k.in.size(); ++i) k.in[i] = chorus_sim::input(r, first + i);
        if (coll == collective::broadcast && r == root) // broadcast works in `out`
            for (std::uint64_t i = 0; i < k.out.size(); ++i) k.out[i] = chorus_sim::input(r, i);
        if (!ip) continue;
        if (coll == collective::all_gather) k.in_place = {where::in, std::uint64_t(r) * count};
        else if (coll == collective::reduce_scatter) k.in_place = {where::out, std::uint64_t(r) * count};
        else k.in_place = {where::in, 0};
    }
    schedule_sim s(std::move(calls), order, true);
    if (window != 0 && s.schedule(0).kind == schedule_kind::staged) s.private_buffers(node_size);
    return s;
}

//! Every output element: its index, each rank's contribution exactly once
//! (copies: the one rank it comes from), the epilogue once for reductions.
std::string verify(const schedule_sim& s, collective coll, int root, std::uint64_t count) {
    const int n = s.ranks();
    const bool reducing =
        coll == collective::all_reduce || coll == collective::reduce_scatter || coll == collective::reduce;
    for (int r = 0; r < n; ++r) {
        if (coll == collective::reduce && r != root) continue;
        const std::uint64_t out_len = coll == collective::all_gather ? count * std::uint64_t(n) : count;
        for (std::uint64_t i = 0; i < out_len; ++i) {
            const chorus_sim::sym& v = s.at(r, where::out, i);
            std::uint64_t want_index = i + 1, want_counts = chorus_sim::every_contribution(n);
            if (coll == collective::reduce_scatter) want_index = std::uint64_t(r) * count + i + 1;
            if (coll == collective::all_gather) want_counts = chorus_sim::contribution(int(i / count));
            if (coll == collective::broadcast) want_counts = chorus_sim::contribution(root);
            const std::string at = "rank " + std::to_string(r) + " out[" + std::to_string(i) + "]";
            if (v.index != want_index) return at + " has the wrong element";
            if (v.counts != want_counts) return at + " has the wrong contributions";
            if (v.finishes != (reducing ? 1 : 0)) return at + ": epilogue applied " + std::to_string(v.finishes) +
                                                          " times";
        }
    }
    return "";
}

} // namespace

// Every collective x n = 1..9 x counts x roots x in place, sampled
// interleavings, for each policy of `policies` (run-time values: one
// simulation serves them all). Multi-channel schedules alternate between
// the two executors' channel semantics.
int simulate_policies(std::mt19937& rng, std::initializer_list<policy> policies, int node_size = 0) {
    int runs = 0;
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                            collective::broadcast, collective::reduce}) {
        for (int n = 1; n <= 9; ++n) {
            for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(n - 1 > 0 ? n - 1 : 0),
                                        std::uint64_t(n + 1), std::uint64_t(37)}) {
                const int roots = (coll == collective::broadcast || coll == collective::reduce) ? (n < 3 ? n : 3) : 1;
                for (int root = 0; root < roots; ++root) {
                    const int tries = n <= 4 ? 6 : 2;
                    for (int t = 0; t < 2 * tries; ++t) {
                        const bool in_place = t % 2 == 1 && coll != collective::broadcast;
                        const channel_order order = t / 2 % 2 ? channel_order::interleaved : channel_order::independent;
                        for (const policy& pol : policies) {
                            schedule_sim s = simulation(pol, coll, in_place, n, root == 2 ? n - 1 : root, count,
                                                        node_size, order);
                            const bool ok = s.run(rng);
                            ++runs;
                            const std::string algo = detail::policy_text(pol), coll_name = collective_name(coll);
                            const int channels = s.channels();
                            const bool independent = order == channel_order::independent;
                            CAPTURE(algo);
                            CAPTURE(coll_name);
                            CAPTURE(n);
                            CAPTURE(channels);
                            CAPTURE(independent);
                            CAPTURE(count);
                            CAPTURE(root);
                            CAPTURE(in_place);
                            CAPTURE(node_size);
                            REQUIRE_MESSAGE(ok, s.error);
                            const std::string v = verify(s, coll, root == 2 ? n - 1 : root, count);
                            REQUIRE_MESSAGE(v.empty(), v << "\n  " << s.moves(64));
                        }
                    }
                }
            }
        }
    }
    return runs;
}

namespace {
//! Algorithm `a` with `channels` channels and `chunk` bytes per chunk.
policy fixed(algorithm a, int channels, std::uint64_t chunk) { return policy::fixed(a, {channels, chunk}); }
//! hierarchical<Intra, Inter> of two (algorithm, channels, chunk) phases.
policy hier(algorithm intra, int ci, std::uint64_t bi, algorithm inter, int cx, std::uint64_t bx) {
    return policy::hierarchical(intra, {ci, bi}, inter, {cx, bx});
}
} // namespace

TEST_CASE("ring schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(12345);
    const algorithm a = algorithm::ring;
    const int runs = simulate_policies(rng, {fixed(a, 1, 16), fixed(a, 1, 4096), fixed(a, 2, 16), fixed(a, 2, 4096)});
    MESSAGE("simulated runs: " << runs);
}

TEST_CASE("direct schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(777);
    const algorithm a = algorithm::direct;
    const int runs =
        simulate_policies(rng, {fixed(a, 1, 16), fixed(a, 1, 4096), fixed(a, 2, 16), fixed(a, 3, 1 << 20)});
    MESSAGE("simulated runs: " << runs);
}

TEST_CASE("hierarchical schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    // n = 1..9 with node sizes 1..4: the composite AllReduce where L divides
    // n (and L < n), Intra's flat schedule everywhere else. The last two
    // split phases A/C and B over channels differently, in small chunks:
    // with channels independent, a transition that waited only on its own
    // channel let a channel overwrite what another still read (found on a
    // GPU first; every_channel waits fix it, and these catch its return).
    std::mt19937 rng(4242);
    int runs = 0;
    const algorithm r = algorithm::ring, d = algorithm::direct;
    for (int L : {1, 2, 3, 4}) {
        CAPTURE(L);
        runs += simulate_policies(rng,
                                  {hier(r, 1, 16, r, 1, 16), hier(r, 2, 16, d, 1, 4096), hier(d, 1, 16, r, 3, 4096),
                                   hier(d, 2, 4096, d, 1, 16), hier(r, 2, 16, r, 3, 16), hier(d, 2, 16, r, 2, 16)},
                                  L);
    }
    MESSAGE("simulated runs: " << runs);
}

TEST_CASE("staged hierarchical schedules: node peers touch only windows; race-free, deadlock-free and exact") {
    // hierarchical<> AllReduce where ranks keep their buffers private (MPI):
    // nodes of L = 2..4 ranks, one node (one-shot or not) or several,
    // windows from 256 B (many pieces, ragged blocks) to 1 MiB (one piece),
    // in place or not, under both executors' channel semantics.
    std::mt19937 rng(777);
    int runs = 0, pieces = 0;
    const algorithm r = algorithm::ring, d = algorithm::direct;
    for (const policy& pol : {hier(r, 1, 16, r, 1, 16), hier(d, 1, 4096, r, 1, 4096), hier(r, 2, 16, d, 1, 16)})
        for (int n = 2; n <= 9; ++n)
            for (int L = 2; L <= 4 && L <= n; ++L) {
                if (n % L != 0) continue;
                for (const std::uint64_t window : {std::uint64_t(256), std::uint64_t(4096), std::uint64_t(1) << 20})
                    for (const std::uint64_t count : {std::uint64_t(1), std::uint64_t(n + 1), std::uint64_t(37),
                                                      std::uint64_t(1000), std::uint64_t(9001)})
                        for (int t = 0; t < 4; ++t) {
                            const bool in_place = t % 2 == 1;
                            const channel_order order = t / 2 ? channel_order::interleaved : channel_order::independent;
                            schedule_sim s = simulation(pol, collective::all_reduce, in_place, n, 0, count, L, order, window);
                            const std::string algo = detail::policy_text(pol);
                            CAPTURE(algo);
                            CAPTURE(n);
                            CAPTURE(L);
                            CAPTURE(window);
                            CAPTURE(count);
                            CAPTURE(in_place);
                            REQUIRE(s.schedule(0).kind == schedule_kind::staged);
                            REQUIRE(s.schedule(0).scratch_elems() * 4 <= window);
                            const bool ok = s.run(rng);
                            ++runs;
                            pieces += s.schedule(0).staged.pieces > 1 ? 1 : 0;
                            REQUIRE_MESSAGE(ok, s.error);
                            const std::string v = verify(s, collective::all_reduce, 0, count);
                            REQUIRE_MESSAGE(v.empty(), v << "\n  " << s.moves(64));
                        }
            }
    MESSAGE("simulated runs: " << runs << " (" << pieces << " in several pieces)");
    CHECK(pieces > 0);
    // Where it does not apply: other collectives, no window, a window too
    // small for one granule per rank, nodes of one rank.
    const policy H = hier(r, 1, 16, r, 1, 16);
    auto kind = [&](collective c, int L, std::uint64_t w) {
        schedule_args a{c, 0, 4, 0, 100, 4, false, L};
        a.node_window_bytes = w;
        return make_schedule(H, a).kind;
    };
    CHECK(kind(collective::all_reduce, 2, 4096) == schedule_kind::staged);
    CHECK(kind(collective::all_reduce, 4, 4096) == schedule_kind::staged);
    CHECK(kind(collective::all_reduce, 2, 0) == schedule_kind::hierarchical);
    CHECK(kind(collective::all_reduce, 2, 16) == schedule_kind::hierarchical);
    CHECK(kind(collective::all_reduce, 1, 4096) == schedule_kind::hierarchical);
    CHECK(kind(collective::reduce_scatter, 2, 4096) == schedule_kind::ring);
}

TEST_CASE("tree schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(4242);
    const algorithm a = algorithm::tree;
    const int runs = simulate_policies(rng, {fixed(a, 1, 16), fixed(a, 1, 4096), fixed(a, 2, 16)});
    MESSAGE(runs << " tree runs");
}

TEST_CASE("recursive doubling schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(4343);
    const algorithm a = algorithm::recursive_doubling;
    const int runs = simulate_policies(rng, {fixed(a, 1, 16), fixed(a, 1, 4096), fixed(a, 2, 16)});
    MESSAGE(runs << " recursive doubling runs");
}

TEST_CASE("rabenseifner schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(4444);
    const algorithm a = algorithm::rabenseifner;
    const int runs = simulate_policies(rng, {fixed(a, 1, 16), fixed(a, 1, 4096), fixed(a, 2, 16)});
    MESSAGE(runs << " rabenseifner runs");
}

TEST_CASE("two-shot schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(4545);
    const algorithm a = algorithm::two_shot;
    const int runs = simulate_policies(rng, {fixed(a, 1, 16), fixed(a, 1, 4096), fixed(a, 3, 16)});
    MESSAGE(runs << " two-shot runs");
}

TEST_CASE("automatic and deterministic schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    // What they pick is one of the schedules above; simulated as a value like any other.
    std::mt19937 rng(4646);
    const int runs = simulate_policies(rng, {policy_of<automatic>, policy_of<deterministic<>>,
                                             policy::fixed(algorithm::ring, {2, 16}).deterministic_of()});
    MESSAGE(runs << " automatic / deterministic runs");
}

TEST_CASE("hierarchical schedules: one type, the same unit count on every rank, flat fallback") {
    constexpr policy H = policy_of<hierarchical<ring<ring_params{2, 64}>, direct<direct_params{1, 16}>>>;
    static_assert(std::is_trivially_copyable_v<any_schedule>);
    constexpr schedule_args args{collective::all_reduce, 5, 8, 0, 1009, 4, false, 2};
    constexpr any_schedule s = make_fixed_schedule(H, args);
    static_assert(s.kind == schedule_kind::hierarchical && s.channels() == 2 && s.hier.nodes == 4 &&
                  s.hier.node_size == 2);
    constexpr step st = s.at(1, 0); // phase A: ring reduce-scatter with the node peer, rank 4
    static_assert(st.src0.rank == 4 && st.dst.rank == 5 && !st.finish);
    CHECK(s.unit(1, 0).src0.rank == 4); // the executors' (out-of-line) entry gives the same step
    for (int L : {2, 4})
        for (std::uint64_t count : {0ull, 1ull, 3ull, 1009ull, 100003ull}) {
            const std::uint64_t u0 = make_schedule(H, {collective::all_reduce, 0, 8, 0, count, 4, false, L}).units();
            for (int r = 1; r < 8; ++r)
                CHECK(make_schedule(H, {collective::all_reduce, r, 8, 0, count, 4, r % 2 == 1, L}).units() == u0);
        }
    // Flat: Intra's own schedule (ring) over all ranks.
    for (int L : {0, 3, 8, 9})
        CHECK(make_schedule(H, {collective::all_reduce, 1, 8, 0, 100, 4, false, L}).kind == schedule_kind::ring);
    CHECK(make_schedule(H, {collective::reduce_scatter, 1, 8, 0, 100, 4, false, 2}).kind == schedule_kind::ring);
}

TEST_CASE("every policy type describes itself as the policy value it names") {
    static_assert(policy_of<ring<ring_params{3, 4096}>> == policy::fixed(algorithm::ring, {3, 4096}));
    static_assert(policy_of<ring<>> == policy::fixed(algorithm::ring));
    static_assert(policy_of<direct<>> == policy::fixed(algorithm::direct, per_call_tuning));
    static_assert(policy_of<tree<>> == policy::fixed(algorithm::tree, per_call_tuning));
    static_assert(policy_of<recursive_doubling<recursive_params{2, 64}>> == policy::fixed(algorithm::recursive_doubling, {2, 64}));
    static_assert(policy_of<rabenseifner<>> == policy::fixed(algorithm::rabenseifner));
    static_assert(policy_of<two_shot<recursive_params{4, 16}>> == policy::fixed(algorithm::two_shot, {4, 16}));
    static_assert(policy_of<hierarchical<>> ==
                  policy::hierarchical(algorithm::ring, per_call_tuning, algorithm::ring, per_call_tuning));
    static_assert(policy_of<hierarchical<direct<direct_params{2, 64}>, ring<ring_params{1, 32}>>> ==
                  policy::hierarchical(algorithm::direct, {2, 64}, algorithm::ring, {1, 32}));
    static_assert(policy_of<automatic> == policy::automatic() && policy_of<automatic>.choose);
    static_assert(policy_of<deterministic<>> == policy::automatic().deterministic_of());
    static_assert(policy_of<deterministic<tree<tree_params{2, 64}>>> ==
                  policy::fixed(algorithm::tree, {2, 64}).deterministic_of());
    // policy_from_name spells each default-tuned policy type.
    constexpr auto named = [](const char* name) {
        policy p{};
        p.tune.channels = -1;
        return policy_from_name(name, p) ? p : policy{};
    };
    static_assert(named("ring") == policy_of<ring<>> && named("direct") == policy_of<direct<>>);
    static_assert(named("tree") == policy_of<tree<>> && named("two_shot") == policy_of<two_shot<>>);
    static_assert(named("recursive_doubling") == policy_of<recursive_doubling<>>);
    static_assert(named("rabenseifner") == policy_of<rabenseifner<>>);
    static_assert(named("hierarchical") == policy_of<hierarchical<>>);
    static_assert(named("automatic") == policy_of<automatic> && named("deterministic") == policy_of<deterministic<>>);
    for (const char* name : policy_names) {
        policy p{};
        CHECK(policy_from_name(name, p));
    }
    policy unchanged = policy_of<tree<>>;
    CHECK_FALSE(policy_from_name("rings", unchanged));
    CHECK_FALSE(policy_from_name("", unchanged));
    CHECK(unchanged == policy_of<tree<>>);
    // Which of them may reorder operands (a non-commutative operator is refused there).
    static_assert(policy_of<ring<>>.reorders_operands() && policy_of<tree<>>.reorders_operands() &&
                  policy_of<hierarchical<>>.reorders_operands());
    static_assert(!policy_of<direct<>>.reorders_operands() && !policy_of<automatic>.reorders_operands() &&
                  !policy_of<deterministic<ring<>>>.reorders_operands() && !policy_of<two_shot<>>.reorders_operands());
    // Distinct policies have distinct ids (what checked mode compares), equal ones equal ids.
    const policy all[] = {policy_of<ring<>>, policy_of<ring<ring_params{2, 256 << 10}>>, policy_of<ring<ring_params{1, 128 << 10}>>,
                          policy_of<direct<>>, policy_of<tree<>>, policy_of<recursive_doubling<>>,
                          policy_of<rabenseifner<>>, policy_of<two_shot<>>, policy_of<hierarchical<>>,
                          policy_of<hierarchical<direct<>, ring<>>>, policy_of<automatic>, policy_of<deterministic<>>,
                          policy_of<deterministic<ring<>>>};
    for (const policy& a : all)
        for (const policy& b : all) CHECK((a.id() == b.id()) == (a == b));
    CHECK(detail::policy_text(policy_of<hierarchical<direct<direct_params{2, 64}>, ring<>>>) ==
          "hierarchical<direct<channels=2,chunk_bytes=64>,ring<channels=per-call,chunk_bytes=per-call>>");
    CHECK(detail::policy_text(policy_of<deterministic<>>) == "deterministic<automatic>");
}

TEST_CASE("ring schedules compile to constant expressions (device-clean, no allocation)") {
    constexpr ring_plan p = make_ring_plan(collective::all_reduce, 1, 4, 0, 1000, 4, 0, 2, 256);
    constexpr ring_schedule s{p};
    constexpr step st = s.at(1, 0, 0);
    static_assert(st.dst.rank == 1 && st.src0.rank == 0 && st.src1.rank == 1);
    static_assert(st.waits[0].peer == 0 && st.dst2.loc == where::none);
    constexpr step last_rs = s.at(1, 0, 2);
    static_assert(last_rs.dst2.rank == 2 && last_rs.waits[1].peer == 2 && last_rs.finish);
    CHECK(p.units() == p.chunks * 6);
}
