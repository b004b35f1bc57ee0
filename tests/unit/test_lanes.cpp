// The GPU executor's code on a CPU. exec/lane_env.hpp's run_lane_channel is
// the body of every thread block of the GPU kernel (kernels/collective.cuh);
// here the very same function runs with each lane a CPU thread, several
// lanes per (rank, channel) and a barrier in place of __syncthreads. So the
// lane-parallel reduce-copy (vector interior, scalar head and tail, fan-in,
// two destinations), the descriptor exchange, the first-contact call check,
// the flag protocol, the deadline and the abort flag are all exercised
// without a GPU, on the same schedules the kernels run: what the GPU
// backend launches, detail::lane_launch<T, Op, any_schedule> with
// make_schedule(policy, args), one instantiation per (element type,
// operator) whatever the policy (policies are run-time values here).
// Covered: the reduce-copy alone (lanes x lengths x sources x destinations x
// alignment); ring<> and direct<> (default and 2 channels x 64 B) x every
// collective x n {1, 2, 3, 5} x counts x lanes {1, 3} x placement with
// (float, sum), (int, max), (float, avg), (int8, sum); one world reused over
// a sequence of calls (n up to 8); hierarchical<> over node splits with
// channels as independent thread groups; every policy (ring, direct, tree,
// recursive_doubling, rabenseifner, two_shot, hierarchical flat, automatic,
// deterministic) x every collective with (float, sum) and, on up to 5 ranks
// rotating over the counts, (int8, sum), (double, avg) and, for the policies
// that keep operand order, a non-commutative user operator; a rank that
// never joins (timeout, abort), calls that differ in count or in policy
// (mismatch); the GPU backend's host-side argument checks and failure
// reports; the exchange collectives (all_to_all, all_gatherv,
// reduce_scatterv, all_to_allv) on 1-5 ranks x counts with zeros, uneven
// and one large block x lanes {1, 3} x in and out of place x three
// tunings, the counts read from a per-rank copy as on the device (the
// caller's array overwritten before the lanes start), in sequence with
// other collectives on one world, and counts that differ between ranks
// (checked mode: mismatch); split's grouping (core/split_plan.hpp); and group
// launch (exec/lane_group.hpp: several calls of a rank in one launch, a
// barrier of its lane groups between calls): mixed collectives, sizes,
// policies, channel counts and LL calls on 2-8 ranks, exact and leaving the
// counters as separate calls do; groups that differ between ranks (mismatch,
// a missing call: reported, not hung); a lane group that never arrives at the
// barrier (timeout recorded, not hung); abort stopping a group.
#include <doctest/doctest.h>

#include <chorus/chorus.hpp>
#include "lane_test_util.hpp"
#include "test_util.hpp"

#include <chorus/backend/gpu_checks.hpp>
#include <chorus/core/split_plan.hpp>
#include <chorus/exec/lane_channel.hpp>
#include <chorus/exec/lane_group.hpp>

#include <barrier>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace chorus;
using chorus::detail::status;
using chorus_test::affine;
using chorus_test::compose_op;
using chorus_test::host_lanes;
using chorus_test::named_policy;

namespace {

using chorus_test::lane_world_host;

// One rank's launch of one collective, as the GPU backend builds it (the
// schedule of make_schedule(pol, args), the call's signature with the
// policy's id); `scratch` is resized to what the schedule needs.
template <class T, class Op>
detail::lane_launch<T, Op, any_schedule> make_launch(lane_world_host& w, const policy& p, collective coll, int root,
                                                     std::uint64_t cnt, int r, const T* in, T* out, Op op,
                                                     std::vector<T>& scratch, std::uint64_t timeout_ms,
                                                     int node_size = 0) {
    const int n = int(w.table.size());
    schedule_args a{coll, r, n, root, cnt, sizeof(T), false, node_size};
    a.in_place = in_place_call<T>(coll, in, out, r, cnt);
    a.commutative = op_traits<Op>::commutative;
    a.ll_limit_bytes = w.ll_limit;
    detail::lane_launch<T, Op, any_schedule> L{};
    L.sch = make_schedule(p, a);
    L.world = w.view();
    L.rank = r;
    L.in = in;
    L.out = out;
    scratch.resize(std::size_t(L.sch.scratch_elems()) + 1);
    L.scratch = scratch.data();
    L.sig = chorus_test::lane_signature_of<T, Op>(coll, L.sch.channels(), root, cnt, p.id());
    L.timeout_ns = timeout_ms * 1000000ull;
    L.op.set(op);
    return L;
}

// Runs one collective: every (rank, channel) is a group of `lanes` threads,
// as the GPU backend launches it (the schedule of make_schedule(pol, args),
// the call's signature with the policy's id). `present[r] == false`: rank r
// never joins (its peers must time out). `pols`, when given, overrides the
// policy per rank.
template <class T, class Op>
std::vector<status> run_lanes(lane_world_host& w, const policy& pol, collective coll, int root, std::uint64_t count,
                              const std::vector<const T*>& in, const std::vector<T*>& out, int lanes, Op op,
                              std::vector<std::vector<T>>& scratch, std::uint64_t timeout_ms = 20000,
                              const std::vector<bool>& present = {}, const std::vector<std::uint64_t>& counts = {},
                              int node_size = 0, const std::vector<policy>& pols = {}) {
    const int n = int(in.size());
    std::vector<status> result(std::size_t(n), status::ok);
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<chorus_test::lane_group<T>>> groups;
    std::vector<detail::lane_launch<T, Op, any_schedule>> launches(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        const policy& p = pols.empty() ? pol : pols[std::size_t(r)];
        const std::uint64_t cnt = counts.empty() ? count : counts[std::size_t(r)];
        launches[std::size_t(r)] = make_launch<T>(w, p, coll, root, cnt, r, in[std::size_t(r)], out[std::size_t(r)], op,
                                                  scratch[std::size_t(r)], timeout_ms, node_size);
    }
    for (int r = 0; r < n; ++r) {
        if (!present.empty() && !present[std::size_t(r)]) continue;
        chorus_test::start_lane_groups(launches[std::size_t(r)], lanes, groups, threads);
    }
    for (auto& t : threads) t.join();
    for (const auto& g : groups)
        if (g->st != status::ok) result[std::size_t(g->rank)] = g->st;
    return result;
}

template <class T>
T value_of(int r, std::uint64_t i) {
    const std::uint64_t g = (std::uint64_t(r) * 5 + i * 3) % 13 + 1;
    if constexpr (std::is_same_v<T, affine>) return {std::uint32_t(2 * g + 1), std::uint32_t(r * 7919 + int(i % 1000))};
    else return T(g);
}

// Element i of rank r's result of `coll` over value_of's inputs on n ranks.
template <class T, class Op>
T expected_value(collective coll, int n, int root, std::uint64_t count, int r, std::uint64_t i, Op op) {
    switch (coll) {
    case collective::all_reduce:
    case collective::reduce:
    case collective::reduce_scatter: {
        const std::uint64_t j = coll == collective::reduce_scatter ? std::uint64_t(r) * count + i : i;
        T want = value_of<T>(0, j);
        for (int q = 1; q < n; ++q) want = op(want, value_of<T>(q, j));
        return detail::finish(op, want, n);
    }
    case collective::all_gather: return value_of<T>(int(i / count), i % count);
    case collective::broadcast: return value_of<T>(root, i);
    default: return T{};
    }
}

// The buffers of one collective on n ranks (root n - 1): inputs of
// value_of, rank-dependent misalignment, in place as the collective allows;
// returns the elements of a rank's result.
template <class T>
std::uint64_t prepare_buffers(collective coll, int n, std::uint64_t count, bool in_place,
                              std::vector<std::vector<T>>& inb, std::vector<std::vector<T>>& outb,
                              std::vector<const T*>& in, std::vector<T*>& out) {
    const int root = n - 1;
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    const std::uint64_t in_len = coll == collective::all_gather ? count : big;
    const std::uint64_t out_len = coll == collective::reduce_scatter ? count : big;
    const std::size_t nn = static_cast<std::size_t>(n);
    inb.assign(nn, {});
    outb.assign(nn, {});
    in.assign(nn, nullptr);
    out.assign(nn, nullptr);
    for (int r = 0; r < n; ++r) {
        const std::size_t off = std::size_t(r % 3); // misalign by 0, 1, 2 elements
        inb[std::size_t(r)].assign(off + big + 8, T{});
        outb[std::size_t(r)].assign(off + big + 8, T{});
        T* ib = inb[std::size_t(r)].data() + off;
        for (std::uint64_t i = 0; i < in_len; ++i) ib[i] = value_of<T>(r, i);
        in[std::size_t(r)] = ib;
        out[std::size_t(r)] = outb[std::size_t(r)].data() + off;
        if (in_place) {
            switch (coll) {
            case collective::all_reduce: out[std::size_t(r)] = ib; break;
            case collective::reduce: if (r == root) out[std::size_t(r)] = ib; break;
            case collective::all_gather: {
                T* ob = out[std::size_t(r)];
                for (std::uint64_t i = 0; i < count; ++i) ob[std::uint64_t(r) * count + i] = ib[i];
                in[std::size_t(r)] = ob + std::uint64_t(r) * count;
                break;
            }
            case collective::reduce_scatter: out[std::size_t(r)] = ib + std::uint64_t(r) * count; break;
            default: break;
            }
        }
        if (coll == collective::broadcast) {
            out[std::size_t(r)] = ib; // broadcast works in one buffer
            if (r != root)
                for (std::uint64_t i = 0; i < in_len; ++i) ib[i] = T{};
        }
    }
    return out_len;
}

// All five collectives on `n` ranks, checked element by element against a
// serial reduction in rank order; buffers start at rank-dependent offsets
// so the vector interiors differ between ranks.
template <class T, class Op>
void check_collective(const named_policy& p, collective coll, int n, std::uint64_t count, int lanes, bool in_place,
                      Op op, lane_world_host* reuse = nullptr, int node_size = 0) {
    const char* type = std::is_same_v<T, affine> ? "affine" : element_traits<T>::name();
    const std::string what = std::string(p.name) + " " + type + " " + op_traits<Op>::name();
    CAPTURE(what);
    lane_world_host fresh(reuse ? 0 : n);
    lane_world_host& w = reuse ? *reuse : fresh;
    const int root = n - 1;
    const std::size_t nn = static_cast<std::size_t>(n);
    std::vector<std::vector<T>> inb(nn), outb(nn), scratch(nn);
    std::vector<const T*> in(nn);
    std::vector<T*> out(nn);
    const std::uint64_t out_len = prepare_buffers<T>(coll, n, count, in_place, inb, outb, in, out);
    const auto st =
        run_lanes<T, Op>(w, p.pol, coll, root, count, in, out, lanes, op, scratch, 20000, {}, {}, node_size);
    for (int r = 0; r < n; ++r) REQUIRE(st[std::size_t(r)] == status::ok);
    int wrong = 0;
    for (int r = 0; r < n; ++r) {
        if (coll == collective::reduce && r != root) continue;
        for (std::uint64_t i = 0; i < out_len; ++i)
            if (!chorus_test::same_bits(out[std::size_t(r)][i], expected_value<T>(coll, n, root, count, r, i, op)))
                ++wrong;
    }
    CHECK(wrong == 0);
    for (int r = 0; r < n; ++r) CHECK(w.faults[std::size_t(r)].code == 0);
}


} // namespace

TEST_CASE("lane reduce-copy: vector interior, scalar edges, fan-in, two destinations, any alignment") {
    std::mt19937 rng(3);
    for (int lanes : {1, 2, 5}) {
        for (std::uint64_t n : {0u, 1u, 3u, 4u, 5u, 17u, 64u, 1001u}) {
            for (int nsrc : {1, 2, 4}) {
                for (int ndst : {1, 2}) {
                    for (int misalign : {0, 1}) { // 1: sources at different offsets mod 16
                        std::vector<std::vector<float>> srcb(std::size_t(nsrc), std::vector<float>(n + 8));
                        std::vector<const float*> src;
                        for (int q = 0; q < nsrc; ++q) {
                            auto& b = srcb[std::size_t(q)];
                            for (auto& x : b) x = float(rng() % 50);
                            src.push_back(b.data() + (misalign ? std::size_t(q % 3) : 1));
                        }
                        std::vector<float> d0(n + 8, -1.f), d1(n + 8, -1.f);
                        detail::reduce_copy_args<float> a{};
                        a.src = src.data();
                        a.nsrc = nsrc;
                        a.dst[0] = d0.data() + 1;
                        a.dst[1] = d1.data() + 1;
                        a.ndst = ndst;
                        a.count = n;
                        a.finish_n = 2;
                        std::barrier<> bar(lanes);
                        alignas(16) unsigned char box[16];
                        std::vector<std::thread> ts;
                        for (int l = 0; l < lanes; ++l)
                            ts.emplace_back(
                                [&, l] { detail::lane_reduce_copy(host_lanes{l, lanes, &bar, box}, a, avg{}); });
                        for (auto& t : ts) t.join();
                        int wrong = 0;
                        for (std::uint64_t i = 0; i < n; ++i) {
                            float want = src[0][i];
                            for (int q = 1; q < nsrc; ++q) want += src[std::size_t(q)][i];
                            want /= 2.f;
                            if (d0[i + 1] != want) ++wrong;
                            if (ndst == 2 && d1[i + 1] != want) ++wrong;
                        }
                        if (d0[0] != -1.f || d0[n + 1] != -1.f) ++wrong; // nothing outside
                        if (ndst == 1 && d1[1] != -1.f) ++wrong;
                        CAPTURE(lanes);
                        CAPTURE(n);
                        CAPTURE(nsrc);
                        CAPTURE(ndst);
                        CAPTURE(misalign);
                        CHECK(wrong == 0);
                    }
                }
            }
        }
    }
}

TEST_CASE("lane executor: ring<> and direct<> on several lanes per rank, every collective, exact") {
    const named_policy ring_2x64{"ring<2ch,64B>", policy_of<ring<ring_params{2, 64}>>};
    const named_policy ring_default{"ring<>", policy_of<ring<>>};
    const named_policy direct_2x64{"direct<2ch,64B>", policy_of<direct<direct_params{2, 64}>>};
    const named_policy direct_default{"direct<>", policy_of<direct<>>};
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                            collective::broadcast, collective::reduce}) {
        for (int n : {1, 2, 3, 5}) {
            if (chorus_test::under_tsan && n == 5) continue; // dozens of spinning threads on two cores
            for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(13), std::uint64_t(1001)}) {
                for (int lanes : {1, 3}) {
                    if (chorus_test::under_tsan && lanes == 1) continue;
                    for (bool in_place : {false, true}) {
                        CAPTURE(collective_name(coll));
                        CAPTURE(n);
                        CAPTURE(count);
                        CAPTURE(lanes);
                        CAPTURE(in_place);
                        check_collective<float>(ring_2x64, coll, n, count, lanes, in_place, sum{});
                        check_collective<int>(ring_default, coll, n, count, lanes, in_place, max{});
                        check_collective<float>(direct_2x64, coll, n, count, lanes, in_place, avg{});
                        check_collective<std::int8_t>(direct_default, coll, n, count, lanes, in_place, sum{});
                    }
                }
            }
        }
    }
}

TEST_CASE("lane executor: one world over a sequence of collectives, as the GPU suite runs them") {
    // The counters and descriptor slots carry over from call to call, as on
    // a device: ring<> with 4 channels and 1 channel, direct<> with 2, in
    // the GPU suite's order, on 2, 3, 4 and 8 ranks (ranks 4 and 8 were
    // never run here before the first GPU run found wrong reads there).
    const named_policy ring_4ch{"ring<4ch,64KiB>", policy_of<ring<ring_params{4, 64 << 10}>>};
    const named_policy ring_default{"ring<>", policy_of<ring<>>};
    const named_policy direct_2ch{"direct<2ch,1MiB>", policy_of<direct<direct_params{2, 1 << 20}>>};
    for (int n : {2, 3, 4, 8}) {
        if (chorus_test::under_tsan && n > 3) continue; // dozens of spinning threads on two cores
        lane_world_host w(n);
        for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce}) {
            for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(2), std::uint64_t(n + 1),
                                        std::uint64_t(1009)}) {
                for (bool in_place : {false, true}) {
                    CAPTURE(collective_name(coll));
                    CAPTURE(n);
                    CAPTURE(count);
                    CAPTURE(in_place);
                    check_collective<float>(ring_4ch, coll, n, count, 2, in_place, sum{}, &w);
                    check_collective<float>(ring_default, coll, n, count, 2, in_place, sum{}, &w);
                    check_collective<int>(ring_4ch, coll, n, count, 2, in_place, max{}, &w);
                    check_collective<float>(direct_2ch, coll, n, count, 2, in_place, avg{}, &w);
                }
            }
        }
    }
}

TEST_CASE("lane executor: hierarchical<> AllReduce over a node split, channels run independently") {
    // Phase B splits a rank's part over channels otherwise than phase A
    // did: its transitions wait on every channel (wait_spec::every_channel).
    // Each channel here is its own group of threads, as each is its own
    // thread block on a GPU (where 16 channels once read stale sums).
    // One world with 4-, 2- and 1-channel calls mixed: a rank numbers a
    // collective alike on every channel, used by this call or not.
    const named_policy h4{"hierarchical<ring<4ch,256B>, ring<4ch,256B>>",
                          policy_of<hierarchical<ring<ring_params{4, 256}>, ring<ring_params{4, 256}>>>};
    const named_policy h2{"hierarchical<ring<2ch,256B>, ring<2ch,256B>>",
                          policy_of<hierarchical<ring<ring_params{2, 256}>, ring<ring_params{2, 256}>>>};
    const named_policy ring_default{"ring<>", policy_of<ring<>>};
    for (int n : {4, 6, 8}) {
        if (chorus_test::under_tsan && n > 4) continue;
        for (int node : {1, 2, n / 2}) {
            // The composite is what runs, not Intra's flat schedule.
            for (const named_policy* h : {&h4, &h2})
                CHECK(make_schedule(h->pol, {collective::all_reduce, 0, n, 0, 13, sizeof(float), false, node}).kind ==
                      schedule_kind::hierarchical);
            lane_world_host w(n);
            for (std::uint64_t count :
                 {std::uint64_t(1), std::uint64_t(13), std::uint64_t(1001), std::uint64_t(5003)}) {
                for (bool in_place : {false, true}) {
                    CAPTURE(n);
                    CAPTURE(node);
                    CAPTURE(count);
                    CAPTURE(in_place);
                    check_collective<float>(h4, collective::all_reduce, n, count, 2, in_place, sum{}, &w, node);
                    check_collective<float>(h2, collective::all_reduce, n, count, 2, in_place, sum{}, &w, node);
                    check_collective<float>(ring_default, collective::all_reduce, n, count, 2, in_place, sum{}, &w);
                }
            }
        }
    }
}

TEST_CASE("lane executor: every policy with several channels, each channel its own thread group") {
    // Each policy with 3 channels of 256-byte chunks (automatic: its own
    // choice and tuning). (float, sum) runs every collective and count in the
    // policy's placement; on up to 5 ranks one more pair runs in the other
    // placement, rotating over the counts so that each collective sees each
    // pair: (int8, sum), (double, avg) and, for the policies that keep
    // operand order, the non-commutative composition.
    struct entry {
        named_policy p;
        bool in_place;
    };
    const tuning t{3, 256};
    const entry every[] = {
        {{"ring<3ch,256B>", policy::fixed(algorithm::ring, t)}, true},
        {{"direct<3ch,256B>", policy::fixed(algorithm::direct, t)}, false},
        {{"tree<3ch,256B>", policy_of<tree<tree_params{3, 256}>>}, false},
        {{"recursive_doubling<3ch,256B>", policy_of<recursive_doubling<recursive_params{3, 256}>>}, false},
        {{"rabenseifner<3ch,256B>", policy_of<rabenseifner<recursive_params{3, 256}>>}, true},
        {{"two_shot<3ch,256B>", policy_of<two_shot<recursive_params{3, 256}>>}, false},
        {{"hierarchical<ring<3ch,256B>, direct<3ch,256B>> (one node)",
          policy::hierarchical(algorithm::ring, t, algorithm::direct, t)},
         true},
        {{"automatic", policy_of<automatic>}, false},
        {{"deterministic<two_shot<3ch,256B>>", policy_of<deterministic<two_shot<recursive_params{3, 256}>>>}, true},
    };
    for (int n : {2, 3, 5, 8}) {
        if (chorus_test::under_tsan && n > 3) continue;
        lane_world_host w(n);
        int k = 0;
        for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce}) {
            ++k;
            int ci = 0;
            for (std::uint64_t count : {std::uint64_t(1), std::uint64_t(29), std::uint64_t(3001)}) {
                ++ci;
                CAPTURE(collective_name(coll));
                CAPTURE(n);
                CAPTURE(count);
                for (const entry& e : every) {
                    CAPTURE(e.in_place);
                    check_collective<float>(e.p, coll, n, count, 2, e.in_place, sum{}, &w);
                    if (n == 8) continue; // 48 threads a call: the extra pairs run on fewer ranks
                    const int extras = e.p.pol.reorders_operands() ? 2 : 3;
                    switch ((k + ci) % extras) {
                    case 0: check_collective<std::int8_t>(e.p, coll, n, count, 2, !e.in_place, sum{}, &w); break;
                    case 1: check_collective<double>(e.p, coll, n, count, 2, !e.in_place, avg{}, &w); break;
                    default: check_collective<affine>(e.p, coll, n, count, 2, !e.in_place, compose_op{}, &w); break;
                    }
                }
            }
        }
    }
}

TEST_CASE("lane executor: a rank that never joins times out and the others stop, a mismatch is caught") {
    {
        const int n = 3;
        lane_world_host w(n);
        std::vector<std::vector<float>> b(n, std::vector<float>(64, 1.f)), o(n, std::vector<float>(64)), s(n);
        std::vector<const float*> in;
        std::vector<float*> out;
        for (int r = 0; r < n; ++r) {
            in.push_back(b[std::size_t(r)].data());
            out.push_back(o[std::size_t(r)].data());
        }
        const auto t0 = std::chrono::steady_clock::now();
        const auto st = run_lanes<float>(w, policy_of<ring<>>, collective::all_reduce, 0, 64, in, out, 2, sum{}, s, 300,
                                         {true, true, false});
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CHECK(secs < 10.0);
        CHECK(w.abort != 0);
        int timeouts = 0;
        for (int r = 0; r < 2; ++r) {
            CHECK(st[std::size_t(r)] != status::ok);
            if (w.faults[std::size_t(r)].code == int(status::timeout)) {
                ++timeouts;
                CHECK(w.faults[std::size_t(r)].peer >= 0);
            }
        }
        CHECK(timeouts >= 1);
    }
    // Two ranks whose calls differ in the count, then in the policy only:
    // whichever rank compares first reports the mismatch (with the other's
    // call) and stops the other.
    for (bool policies_differ : {false, true}) {
        CAPTURE(policies_differ);
        const int n = 2;
        lane_world_host w(n);
        std::vector<std::vector<float>> b(n, std::vector<float>(64, 1.f)), o(n, std::vector<float>(64)), s(n);
        std::vector<const float*> in{b[0].data(), b[1].data()};
        std::vector<float*> out{o[0].data(), o[1].data()};
        const policy d = policy_of<direct<>>, other = policy::fixed(algorithm::two_shot, d.tune);
        // Differing policies: rank 0 direct<>, rank 1 two_shot<> with the same tuning.
        const std::vector<policy> per_rank = {d, other};
        const auto st = policies_differ ? run_lanes<float>(w, d, collective::all_reduce, 0, 64, in, out, 2, sum{}, s,
                                                           5000, {}, {}, 0, per_rank)
                                        : run_lanes<float>(w, d, collective::all_reduce, 0, 64, in, out, 2, sum{}, s,
                                                           5000, {}, {64, 63});
        CHECK(st[0] != status::ok);
        CHECK(st[1] != status::ok);
        const bool zero_saw = w.faults[0].code == int(status::mismatch);
        const bool one_saw = w.faults[1].code == int(status::mismatch);
        CHECK((zero_saw || one_saw));
        if (policies_differ) {
            if (zero_saw) CHECK(w.faults[0].theirs.algo_id == other.id());
            if (one_saw) CHECK(w.faults[1].theirs.algo_id == d.id());
        } else {
            if (zero_saw) CHECK(w.faults[0].theirs.count == 63);
            if (one_saw) CHECK(w.faults[1].theirs.count == 64);
        }
    }
}

TEST_CASE("GPU backend argument checks and failure reports (host code, no GPU needed)") {
    using detail::mem_kind;
    auto msg = [](auto&& f) {
        try {
            f();
        } catch (const error& e) {
            return std::string(to_string(e.code())) + ": " + e.what();
        }
        return std::string("no error");
    };
    const std::string host = msg([] { detail::check_gpu_buffer(collective::all_reduce, "in", mem_kind::host, -1, 0); });
    CHECK(host.find("invalid argument") == 0);
    CHECK(host.find("`in` is host memory") != std::string::npos);
    const std::string other =
        msg([] { detail::check_gpu_buffer(collective::reduce_scatter, "out", mem_kind::device, 1, 0); });
    CHECK(other.find("`out` is memory of device 1 but this rank runs on device 0") != std::string::npos);
    CHECK(msg([] { detail::check_gpu_buffer(collective::all_gather, "in", mem_kind::device, 2, 2); }) == "no error");
    // The runtime may not name the device of cudaMalloc memory (-1): accepted.
    CHECK(msg([] { detail::check_gpu_buffer(collective::all_gather, "in", mem_kind::device, -1, 0); }) == "no error");
    CHECK(msg([] { detail::check_gpu_buffer(collective::all_gather, "in", mem_kind::managed, 0, 3); }) == "no error");

    // What the lane executor records becomes the error each rank throws.
    std::vector<detail::lane_fault> f(3);
    f[1].code = int(status::mismatch);
    f[1].peer = 2;
    f[1].theirs = {};
    f[1].theirs.count = 63;
    f[1].theirs.shape = detail::call_signature::make_shape(collective::all_reduce, 1, 0);
    f[0].code = int(status::aborted);
    const error e1 = detail::gpu_fault_error(1, f.data(), 3, "");
    CHECK(e1.code() == errc::mismatch);
    CHECK(std::string(e1.what()).find("rank 2 called all_reduce(count=63") != std::string::npos);
    const error e0 = detail::gpu_fault_error(0, f.data(), 3, "");
    CHECK(e0.code() == errc::peer_failed);
    CHECK(std::string(e0.what()).find("because rank 1 failed") != std::string::npos);
    f[2].code = int(status::timeout);
    f[2].peer = 0;
    f[2].unit = 5;
    const error e2 = detail::gpu_fault_error(2, f.data(), 3, "");
    CHECK(e2.code() == errc::timeout);
    CHECK(std::string(e2.what()).find("timed out waiting for rank 0") != std::string::npos);
}

// --- the exchange collectives (AllToAll, AllGatherV, ReduceScatterV,
// AllToAllV) on the lane executor, as the GPU backend runs them: the
// schedule is planned on the caller's counts, then its counts pointer is
// moved to a per-rank copy (the GPU: the rank's device counts area, filled
// by the counts kernel) and the caller's array is overwritten before the
// lanes start, so a read of it would show as wrong results. The call's
// signature carries the sum of the counts and their fingerprint, as
// gpu_transport::enqueue sets it.

namespace {

struct exchange_run {
    collective coll = collective::all_to_all;
    int n = 1;
    std::uint64_t count = 0;            // AllToAll: elements per block
    std::vector<std::uint64_t> counts;  // the v-collectives: n or n * n entries
};

// Per-rank lengths of `in` and `out`, and the prefix sums D (AllGatherV,
// ReduceScatterV).
struct exchange_geometry {
    std::vector<std::uint64_t> in_len, out_len, displ;
    std::uint64_t total = 0;
};

exchange_geometry geometry_of(const exchange_run& x) {
    const std::size_t n = std::size_t(x.n);
    exchange_geometry g;
    g.in_len.assign(n, 0);
    g.out_len.assign(n, 0);
    g.displ.assign(n + 1, 0);
    for (std::uint64_t k : x.counts) g.total += k;
    for (std::size_t r = 0; r < n; ++r) {
        switch (x.coll) {
        case collective::all_to_all: g.in_len[r] = g.out_len[r] = x.count * n; break;
        case collective::all_gatherv:
            g.in_len[r] = x.counts[r];
            g.out_len[r] = g.total;
            break;
        case collective::reduce_scatterv:
            g.in_len[r] = g.total;
            g.out_len[r] = x.counts[r];
            break;
        default:
            for (std::size_t j = 0; j < n; ++j) {
                g.in_len[r] += x.counts[r * n + j];
                g.out_len[r] += x.counts[j * n + r];
            }
        }
        if (x.coll == collective::all_gatherv || x.coll == collective::reduce_scatterv)
            g.displ[r + 1] = g.displ[r] + x.counts[r];
    }
    return g;
}

// What element i of rank r's `out` must hold.
template <class T, class Op>
T exchange_want(const exchange_run& x, const exchange_geometry& g, int r, std::uint64_t i, Op op) {
    const std::uint64_t n = std::uint64_t(x.n);
    switch (x.coll) {
    case collective::all_to_all: return value_of<T>(int(i / x.count), std::uint64_t(r) * x.count + i % x.count);
    case collective::all_gatherv: {
        int q = 0;
        while (i >= g.displ[std::size_t(q) + 1]) ++q;
        return value_of<T>(q, i - g.displ[std::size_t(q)]);
    }
    case collective::reduce_scatterv: {
        const std::uint64_t j = g.displ[std::size_t(r)] + i;
        T want = value_of<T>(0, j);
        for (int q = 1; q < x.n; ++q) want = op(want, value_of<T>(q, j));
        return detail::finish(op, want, x.n);
    }
    default: { // AllToAllV: out[O_q + j] = q.in[S_q + j]
        std::uint64_t o = 0;
        for (std::uint64_t q = 0; q < n; ++q) {
            const std::uint64_t len = x.counts[q * n + std::uint64_t(r)];
            if (i < o + len) {
                std::uint64_t s = 0;
                for (std::uint64_t j = 0; j < std::uint64_t(r); ++j) s += x.counts[q * n + j];
                return value_of<T>(int(q), s + (i - o));
            }
            o += len;
        }
        return T{};
    }
    }
}

// Runs one exchange collective on the lanes, checks every rank's `out`
// element by element, that nothing past it was written, and (out of
// place) that `in` is unchanged. `differ`: rank n-1 passes counts that
// differ in one entry (checked mode: every rank must fail, one at least
// with a mismatch).
template <class T, class Op>
void check_exchange(const named_policy& p, const exchange_run& x, int lanes, bool in_place, Op op,
                    lane_world_host* reuse = nullptr, bool differ = false) {
    const char* type = element_traits<T>::name();
    const std::string what = std::string(p.name) + " " + collective_name(x.coll) + " " + type + " " +
                             op_traits<Op>::name() + (in_place ? " in place" : "");
    CAPTURE(what);
    const int n = x.n;
    const std::size_t nn = std::size_t(n);
    lane_world_host fresh(reuse ? 0 : n);
    lane_world_host& w = reuse ? *reuse : fresh;
    const exchange_geometry g = geometry_of(x);
    const T sentinel = T(100);
    std::vector<std::vector<T>> inb(nn), outb(nn), scratch(nn);
    std::vector<const T*> in(nn);
    std::vector<T*> out(nn);
    for (int r = 0; r < n; ++r) {
        const std::size_t ru = std::size_t(r);
        const std::size_t off = ru % 3; // misalign by 0, 1, 2 elements
        const std::uint64_t room = std::max(g.in_len[ru], g.out_len[ru]) + g.total;
        inb[ru].assign(off + room + 8, sentinel);
        outb[ru].assign(off + room + 8, sentinel);
        T* ib = inb[ru].data() + off;
        T* ob = outb[ru].data() + off;
        for (std::uint64_t i = 0; i < g.in_len[ru]; ++i) ib[i] = value_of<T>(r, i);
        in[ru] = ib;
        out[ru] = ob;
        if (in_place) {
            switch (x.coll) {
            case collective::all_gatherv: // in is block r of out
                for (std::uint64_t i = 0; i < g.in_len[ru]; ++i) ob[g.displ[ru] + i] = ib[i];
                in[ru] = ob + g.displ[ru];
                break;
            case collective::reduce_scatterv: out[ru] = ib + g.displ[ru]; break; // out is block r of in
            default: out[ru] = ib; break;                                       // the same buffer
            }
        }
    }
    // Per rank: the caller's counts (overwritten once planned) and the copy
    // the executor reads (the device counts area on a GPU).
    std::vector<std::vector<std::uint64_t>> caller(nn, x.counts), area(nn, x.counts);
    if (differ) {
        caller[nn - 1][0] += 1;
        area[nn - 1][0] += 1;
    }
    std::vector<detail::lane_launch<T, Op, any_schedule>> launches(nn);
    for (int r = 0; r < n; ++r) {
        const std::size_t ru = std::size_t(r);
        const bool v = x.coll != collective::all_to_all;
        schedule_args a{x.coll, r, n, 0, v ? g.in_len[ru] : x.count, sizeof(T), false, 0};
        a.counts = v ? caller[ru].data() : nullptr;
        a.in_place = exchange_in_place<T>(x.coll, in[ru], out[ru], r, a.counts);
        REQUIRE(a.in_place == in_place);
        a.commutative = op_traits<Op>::commutative;
        auto& L = launches[ru];
        L.sch = make_schedule(p.pol, a);
        REQUIRE(L.sch.kind == schedule_kind::exchange);
        scratch[ru].assign(std::size_t(L.sch.scratch_elems()) + 1, sentinel);
        L.scratch = scratch[ru].data();
        if (v) L.sch.exchange.counts = area[ru].data();
        L.world = w.view();
        L.rank = r;
        L.in = in[ru];
        L.out = out[ru];
        std::uint64_t sum_counts = 0;
        for (std::uint64_t k : caller[ru]) sum_counts += k;
        L.sig = chorus_test::lane_signature_of<T, Op>(x.coll, L.sch.channels(), 0, v ? sum_counts : x.count,
                                                      p.pol.id(),
                                                      v ? detail::counts_hash(caller[ru].data(), caller[ru].size()) : 0);
        L.timeout_ns = (differ ? 3000ull : 20000ull) * 1000000ull;
        L.checked = differ;
        L.op.set(op);
    }
    for (auto& c : caller) std::fill(c.begin(), c.end(), ~std::uint64_t(0) >> 8); // the caller frees its counts
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<chorus_test::lane_group<T>>> groups;
    for (int r = 0; r < n; ++r) chorus_test::start_lane_groups(launches[std::size_t(r)], lanes, groups, threads);
    for (auto& t : threads) t.join();
    std::vector<status> st(nn, status::ok);
    for (const auto& grp : groups)
        if (grp->st != status::ok) st[std::size_t(grp->rank)] = grp->st;
    if (differ) {
        int mismatches = 0;
        for (int r = 0; r < n; ++r) {
            CHECK(st[std::size_t(r)] != status::ok);
            mismatches += st[std::size_t(r)] == status::mismatch;
        }
        CHECK(mismatches >= 1);
        return;
    }
    for (int r = 0; r < n; ++r) REQUIRE(st[std::size_t(r)] == status::ok);
    int wrong = 0, outside = 0, changed = 0;
    for (int r = 0; r < n; ++r) {
        const std::size_t ru = std::size_t(r);
        for (std::uint64_t i = 0; i < g.out_len[ru]; ++i)
            if (!chorus_test::same_bits(out[ru][i], exchange_want<T>(x, g, r, i, op))) ++wrong;
        // Nothing past this rank's buffers (the in-place ones: past the one buffer).
        const T* end = out[ru] + g.out_len[ru];
        if (in_place && x.coll == collective::reduce_scatterv) end = in[ru] + g.in_len[ru];
        if (in_place && x.coll == collective::all_gatherv) end = out[ru] + g.out_len[ru];
        for (int k = 0; k < 8; ++k)
            if (!chorus_test::same_bits(end[k], sentinel)) ++outside;
        if (!in_place) {
            for (std::uint64_t i = 0; i < g.in_len[ru]; ++i)
                if (!chorus_test::same_bits(in[ru][i], value_of<T>(r, i))) ++changed;
            for (int k = 0; k < 8; ++k)
                if (!chorus_test::same_bits(in[ru][g.in_len[ru] + std::uint64_t(k)], sentinel)) ++outside;
        }
    }
    CHECK(wrong == 0);
    CHECK(outside == 0);
    CHECK(changed == 0);
    for (int r = 0; r < n; ++r) CHECK(w.faults[std::size_t(r)].code == 0);
}

// Counts patterns for n ranks (entries: n, or n * n for AllToAllV):
// 0 uneven with zeros, 1 all zero, 2 one large block among small ones.
// AllToAllV's are symmetric (counts[q][r] == counts[r][q]), so every rank
// sends what it receives and the call can run in place.
std::vector<std::uint64_t> counts_pattern(collective coll, int n, int pattern) {
    const std::size_t nn = std::size_t(n);
    const bool matrix = coll == collective::all_to_allv;
    std::vector<std::uint64_t> c(matrix ? nn * nn : nn, 0);
    for (std::size_t i = 0; i < c.size(); ++i) {
        const std::size_t a = matrix ? std::min(i / nn, i % nn) : i, b = matrix ? std::max(i / nn, i % nn) : i;
        const std::size_t k = a * 5 + b * 3;
        switch (pattern) {
        case 0: c[i] = k % 4 == 1 ? 0 : (k * 7 + 3) % 23; break;
        case 1: c[i] = 0; break;
        default: c[i] = (a + b) % 3 == 1 ? 1001 : (k % 5); break;
        }
    }
    return c;
}

} // namespace

TEST_CASE("lane executor: the exchange collectives, counts read from a per-rank copy, exact") {
    const named_policy direct_2x64{"direct<2ch,64B>", policy_of<direct<direct_params{2, 64}>>};
    const named_policy ring_3x16{"ring<3ch,16B>", policy_of<ring<ring_params{3, 16}>>};
    const named_policy automatic_default{"automatic", policy_of<automatic>};
    for (collective coll : {collective::all_to_all, collective::all_gatherv, collective::reduce_scatterv,
                            collective::all_to_allv}) {
        for (int n : {1, 2, 3, 4, 5}) {
            if (chorus_test::under_tsan && n >= 4) continue; // dozens of spinning threads on two cores
            for (int pattern : {0, 1, 2}) {
                exchange_run x;
                x.coll = coll;
                x.n = n;
                if (coll == collective::all_to_all) x.count = pattern == 0 ? 13 : pattern == 1 ? 0 : 257;
                else x.counts = counts_pattern(coll, n, pattern);
                for (int lanes : {1, 3}) {
                    if (chorus_test::under_tsan && lanes == 1) continue;
                    for (bool in_place : {false, true}) {
                        CAPTURE(n);
                        CAPTURE(pattern);
                        CAPTURE(lanes);
                        if (coll == collective::reduce_scatterv) {
                            check_exchange<float>(direct_2x64, x, lanes, in_place, sum{});
                            check_exchange<int>(ring_3x16, x, lanes, in_place, max{});
                            check_exchange<double>(automatic_default, x, lanes, in_place, avg{});
                        } else {
                            check_exchange<float>(direct_2x64, x, lanes, in_place, detail::copy_only{});
                            check_exchange<std::int8_t>(ring_3x16, x, lanes, in_place, detail::copy_only{});
                            check_exchange<float>(automatic_default, x, lanes, in_place, detail::copy_only{});
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("lane executor: exchange collectives in sequence on one world, and counts that differ") {
    // The counters carry over from call to call, as on a device, between
    // exchange and other collectives.
    const named_policy direct_2x64{"direct<2ch,64B>", policy_of<direct<direct_params{2, 64}>>};
    const named_policy ring_4ch{"ring<4ch,64KiB>", policy_of<ring<ring_params{4, 64 << 10}>>};
    for (int n : {2, 3, 4}) {
        if (chorus_test::under_tsan && n > 3) continue;
        lane_world_host w(n);
        for (int round = 0; round < 2; ++round) {
            for (collective coll : {collective::all_to_allv, collective::all_gatherv, collective::reduce_scatterv,
                                    collective::all_to_all}) {
                exchange_run x;
                x.coll = coll;
                x.n = n;
                if (coll == collective::all_to_all) x.count = 5 + std::uint64_t(round);
                else x.counts = counts_pattern(coll, n, round == 0 ? 0 : 2);
                const bool in_place = round == 1;
                CAPTURE(n);
                CAPTURE(round);
                if (coll == collective::reduce_scatterv) check_exchange<float>(direct_2x64, x, 2, in_place, sum{}, &w);
                else check_exchange<float>(direct_2x64, x, 2, in_place, detail::copy_only{}, &w);
                check_collective<float>(ring_4ch, collective::all_reduce, n, 1001, 2, in_place, sum{}, &w);
            }
        }
    }
    // Checked mode: rank n-1's counts differ in one entry; every rank fails.
    for (collective coll : {collective::all_gatherv, collective::reduce_scatterv, collective::all_to_allv}) {
        exchange_run x;
        x.coll = coll;
        x.n = 3;
        x.counts = counts_pattern(coll, 3, 0);
        CAPTURE(collective_name(coll));
        if (coll == collective::reduce_scatterv)
            check_exchange<float>(direct_2x64, x, 2, false, sum{}, nullptr, true);
        else check_exchange<float>(direct_2x64, x, 2, false, detail::copy_only{}, nullptr, true);
    }
}

TEST_CASE("split plan: MPI_Comm_split grouping by color, ordered by key then rank") {
    {
        const std::vector<int> colors{1, 0, 1, -1, 0, 1};
        const std::vector<int> keys{5, 0, 5, 9, -3, 2};
        const detail::split_plan p = detail::plan_split(colors, keys);
        REQUIRE(p.members.size() == 2);
        CHECK(p.color == std::vector<int>{0, 1});
        CHECK(p.members[0] == std::vector<int>{4, 1}); // key -3 before key 0
        CHECK(p.members[1] == std::vector<int>{5, 0, 2}); // key 2, then key 5 by old rank
        CHECK(p.group == std::vector<int>{1, 0, 1, -1, 0, 1});
        CHECK(p.new_rank == std::vector<int>{1, 1, 2, -1, 0, 0});
    }
    {
        const std::vector<int> colors{-1, -5};
        const std::vector<int> keys{0, 0};
        const detail::split_plan p = detail::plan_split(colors, keys);
        CHECK(p.members.empty());
        CHECK(p.new_rank == std::vector<int>{-1, -1});
    }
    {
        const std::vector<int> colors{7, 7, 7, 7};
        const std::vector<int> keys{0, 0, 0, 0};
        const detail::split_plan p = detail::plan_split(colors, keys);
        REQUIRE(p.members.size() == 1);
        CHECK(p.members[0] == std::vector<int>{0, 1, 2, 3}); // ties keep the old order
        CHECK(p.new_rank == std::vector<int>{0, 1, 2, 3});
    }
    {
        const std::vector<int> colors{3, 1, 2};
        const std::vector<int> keys{0, 0, 0};
        const detail::split_plan p = detail::plan_split(colors, keys);
        CHECK(p.color == std::vector<int>{1, 2, 3});
        CHECK(p.group == std::vector<int>{2, 0, 1});
        CHECK(p.new_rank == std::vector<int>{0, 0, 0});
    }
    const std::vector<int> two{0, 1}, one{0};
    CHECK_THROWS_WITH_AS(detail::plan_split(two, one, "chorus::gpu::communicator::split"),
                         doctest::Contains("chorus::gpu::communicator::split: 2 colors but 1 keys"), error);
}

// Group launch (exec/lane_group.hpp): several calls of a rank in one launch,
// lane group c running channel c of each call in turn, a barrier of the
// rank's groups between calls.
namespace {

using group_launch = detail::lane_group_launch<float, sum, any_schedule>;

// One collective of a group on every rank: its policy, shape and buffers.
struct group_call {
    named_policy p;
    collective coll;
    std::uint64_t count;
    bool in_place;
    std::vector<std::vector<float>> inb, outb, scratch;
    std::vector<const float*> in;
    std::vector<float*> out;
    std::uint64_t out_len = 0;
};

group_call make_group_call(const named_policy& p, collective coll, std::uint64_t count, bool in_place, int n) {
    group_call g{p, coll, count, in_place, {}, {}, {}, {}, {}, 0};
    g.out_len = prepare_buffers<float>(coll, n, count, in_place, g.inb, g.outb, g.in, g.out);
    g.scratch.assign(std::size_t(n), {});
    return g;
}

// Rank r's group launch of calls[first], calls[first + 1], ... (`ncalls`).
group_launch make_group(lane_world_host& w, std::vector<group_call>& calls, std::size_t first, std::size_t ncalls,
                        int r, std::uint64_t timeout_ms) {
    REQUIRE(ncalls <= std::size_t(group_launch::capacity));
    const int n = int(w.table.size());
    group_launch G{};
    for (std::size_t k = 0; k < ncalls; ++k) {
        group_call& g = calls[first + k];
        G.calls[k] = make_launch<float>(w, g.p.pol, g.coll, n - 1, g.count, r, g.in[std::size_t(r)],
                                        g.out[std::size_t(r)], sum{}, g.scratch[std::size_t(r)], timeout_ms);
        G.blocks = std::max(G.blocks, G.calls[k].sch.channels());
    }
    G.ncalls = int(ncalls);
    return G;
}

// Runs every rank's group launch, lane group c of rank r (c < G[r].blocks) a
// group of `lanes` threads running run_lane_group; `during` runs on this
// thread once they all started. A rank with present[r] false never starts.
std::vector<status> run_group_lanes(const std::vector<group_launch>& G, int lanes, const std::vector<bool>& present = {},
                                    const std::function<void()>& during = {}) {
    const int n = int(G.size());
    std::vector<status> result(std::size_t(n), status::ok);
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<chorus_test::lane_group<float>>> groups;
    for (int r = 0; r < n; ++r) {
        if (!present.empty() && !present[std::size_t(r)]) continue;
        const group_launch& L = G[std::size_t(r)];
        for (int c = 0; c < L.blocks; ++c) {
            groups.push_back(std::make_unique<chorus_test::lane_group<float>>());
            chorus_test::lane_group<float>* g = groups.back().get();
            g->rank = r;
            g->channel = c;
            g->bar = std::make_unique<std::barrier<>>(lanes);
            for (int l = 0; l < lanes; ++l)
                threads.emplace_back([&L, lanes, l, c, g] {
                    const host_lanes hl{l, lanes, g->bar.get(), g->box};
                    const status st = detail::run_lane_group(hl, L, c, g->sh);
                    if (l == 0) g->st = st;
                });
        }
    }
    if (during) during();
    for (auto& t : threads) t.join();
    for (const auto& g : groups)
        if (g->st != status::ok && result[std::size_t(g->rank)] == status::ok) result[std::size_t(g->rank)] = g->st;
    return result;
}

// Wrong elements of call g's results on n ranks (root n - 1).
int wrong_elements(const group_call& g, int n) {
    int wrong = 0;
    for (int r = 0; r < n; ++r) {
        if (g.coll == collective::reduce && r != n - 1) continue;
        for (std::uint64_t i = 0; i < g.out_len; ++i)
            if (!chorus_test::same_bits(g.out[std::size_t(r)][i],
                                        expected_value<float>(g.coll, n, n - 1, g.count, r, i, sum{})))
                ++wrong;
    }
    return wrong;
}

} // namespace

TEST_CASE("lane executor: a group launch runs several calls of a rank in order, exactly as separate calls") {
    // Calls of several collectives, sizes, policies and channel counts (4,
    // 2 and 1 channel: lane groups skip the channels a call lacks) in one
    // launch per rank, three times in a row (the barrier's generation continues),
    // then a call of its own on the same world (the per-channel counters
    // were kept equal); the LL protocol's calls among them. Integer-valued
    // floats: the results are exact, so equal to separate calls'.
    const named_policy ring_4ch{"ring<4ch,64KiB>", policy_of<ring<ring_params{4, 64 << 10}>>};
    const named_policy ring_1ch{"ring<1ch>", policy_of<ring<ring_params{1, 64 << 10}>>};
    const named_policy direct_2ch{"direct<2ch,1MiB>", policy_of<direct<direct_params{2, 1 << 20}>>};
    const named_policy two_shot_p{"two_shot<>", policy_of<two_shot<>>};
    const named_policy tree_p{"tree<>", policy_of<tree<>>};
    const named_policy rab_p{"rabenseifner<>", policy_of<rabenseifner<>>};
    const named_policy ll_p{"direct<ll>", policy_of<direct<direct_params{.proto = protocol::ll}>>};
    for (int n : {2, 3, 5, 8}) {
        if (chorus_test::under_tsan && n > 3) continue; // dozens of spinning threads on two cores
        CAPTURE(n);
        lane_world_host w(n);
        w.enable_ll(4096);
        std::vector<group_call> calls;
        const auto add = [&](const named_policy& p, collective coll, std::uint64_t count, bool in_place) {
            calls.push_back(make_group_call(p, coll, count, in_place, n));
        };
        add(ring_4ch, collective::all_reduce, 1009, false);
        add(direct_2ch, collective::all_gather, 17, false);
        add(ring_1ch, collective::reduce_scatter, std::uint64_t(n + 1), true);
        add(two_shot_p, collective::all_reduce, 300, true);
        add(ll_p, collective::all_reduce, 33, false);
        add(tree_p, collective::all_reduce, 0, false);
        add(ring_4ch, collective::reduce_scatter, 64, false);
        add(rab_p, collective::all_reduce, 257, false);
        add(ll_p, collective::all_gather, 5, true);
        add(direct_2ch, collective::broadcast, 40, false);
        add(ring_1ch, collective::reduce, 129, false);
        add(ring_4ch, collective::all_gather, 3, true);
        // LL calls back to back (both slot parities, the reuse guard inside one launch).
        add(ll_p, collective::all_reduce, 7, true);
        add(ll_p, collective::reduce_scatter, 3, false);
        add(ll_p, collective::all_gather, 6, false);
        add(ll_p, collective::broadcast, 9, false);
        add(ll_p, collective::all_reduce, 100, false);
        // First launch: calls 0-6; second: 7-11; third: 12-16.
        for (const auto& [first, count] :
             {std::pair<std::size_t, std::size_t>{0, 7}, {7, 5}, {12, 5}}) {
            std::vector<group_launch> G;
            for (int r = 0; r < n; ++r) G.push_back(make_group(w, calls, first, count, r, 20000));
            const auto st = run_group_lanes(G, 2);
            for (int r = 0; r < n; ++r) REQUIRE(st[std::size_t(r)] == status::ok);
        }
        for (const group_call& g : calls) {
            CAPTURE(g.p.name);
            CAPTURE(collective_name(g.coll));
            CAPTURE(g.count);
            CHECK(wrong_elements(g, n) == 0);
        }
        for (int r = 0; r < n; ++r) CHECK(w.faults[std::size_t(r)].code == 0);
        // The counters after two groups: a call of its own runs as the next.
        for (int r = 0; r < n; ++r)
            for (int c = 1; c < chorus::max_channels; ++c)
                CHECK(w.areas[std::size_t(r)]->seq[c] == w.areas[std::size_t(r)]->seq[0]);
        CHECK(w.areas[0]->seq[0] == calls.size());
        check_collective<float>(ring_4ch, collective::all_reduce, n, 100, 2, false, sum{}, &w);
        check_collective<float>(direct_2ch, collective::all_gather, n, 9, 1, false, sum{}, &w);
    }
}

TEST_CASE("lane executor: groups that differ between ranks are reported, abort stops a group") {
    const named_policy d{"direct<>", policy_of<direct<>>};
    const named_policy ring_2ch{"ring<2ch>", policy_of<ring<ring_params{2, 64 << 10}>>};
    // The second call differs in its count: the mismatch is found in the
    // group (whichever rank compares first), the first call's results stand.
    {
        const int n = 2;
        lane_world_host w(n);
        std::vector<group_call> calls;
        calls.push_back(make_group_call(ring_2ch, collective::all_reduce, 64, false, n));
        calls.push_back(make_group_call(d, collective::all_reduce, 32, false, n));
        calls.push_back(make_group_call(d, collective::all_reduce, 33, false, n));
        std::vector<group_launch> G{make_group(w, calls, 0, 2, 0, 5000), make_group(w, calls, 0, 1, 1, 5000)};
        group_launch other = make_group(w, calls, 2, 1, 1, 5000); // rank 1's second call: 33 elements
        G[1].calls[1] = other.calls[0];
        G[1].ncalls = 2;
        const auto t0 = std::chrono::steady_clock::now();
        const auto st = run_group_lanes(G, 2);
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
        CHECK(st[0] != status::ok);
        CHECK(st[1] != status::ok);
        const bool zero_saw = w.faults[0].code == int(status::mismatch);
        const bool one_saw = w.faults[1].code == int(status::mismatch);
        CHECK((zero_saw || one_saw));
        if (zero_saw) CHECK(w.faults[0].theirs.count == 33);
        if (one_saw) CHECK(w.faults[1].theirs.count == 32);
        CHECK(wrong_elements(calls[0], n) == 0);
    }
    // A rank whose group lacks the last call: the others time out on it
    // (short timeout), nothing hangs; the calls before it are complete.
    {
        const int n = 3;
        lane_world_host w(n);
        std::vector<group_call> calls;
        calls.push_back(make_group_call(ring_2ch, collective::all_reduce, 100, false, n));
        calls.push_back(make_group_call(d, collective::all_gather, 10, false, n));
        std::vector<group_launch> G;
        for (int r = 0; r < n; ++r) G.push_back(make_group(w, calls, 0, r == 2 ? 1 : 2, r, 300));
        const auto t0 = std::chrono::steady_clock::now();
        const auto st = run_group_lanes(G, 2);
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
        CHECK(st[0] != status::ok);
        CHECK(st[1] != status::ok);
        CHECK(w.abort != 0);
        CHECK((w.faults[0].code == int(status::timeout) || w.faults[1].code == int(status::timeout)));
        CHECK(wrong_elements(calls[0], n) == 0);
    }
    // A lane group of the launch that never runs (a block that never
    // started): the others wait for it at the barrier only until the
    // previous call's timeout, record it (the rank itself, the next call)
    // and stop; the call before the barrier is complete, the next never runs.
    {
        const int n = 1;
        lane_world_host w(n);
        std::vector<group_call> calls;
        calls.push_back(make_group_call(d, collective::all_reduce, 20, false, n));
        calls.push_back(make_group_call(d, collective::all_reduce, 20, false, n));
        group_launch G = make_group(w, calls, 0, 2, 0, 200);
        G.blocks = 2; // lane group 1 never starts
        chorus_test::lane_group<float> g;
        g.bar = std::make_unique<std::barrier<>>(2);
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        for (int l = 0; l < 2; ++l)
            threads.emplace_back([&G, &g, l] {
                const host_lanes hl{l, 2, g.bar.get(), g.box};
                const status st = detail::run_lane_group(hl, G, 0, g.sh);
                if (l == 0) g.st = st;
            });
        for (auto& t : threads) t.join();
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
        CHECK(g.st == status::timeout);
        CHECK(w.faults[0].code == int(status::timeout));
        CHECK(w.faults[0].peer == 0);
        CHECK(w.faults[0].unit == 1);
        CHECK(w.abort != 0);
        CHECK(wrong_elements(calls[0], n) == 0);
        int touched = 0;
        for (std::uint64_t i = 0; i < calls[1].out_len; ++i) touched += calls[1].out[0][i] != 0.f;
        CHECK(touched == 0);
    }
    // Abort while a group waits (a rank never starts, long timeout): every
    // rank's group stops at once; the calls after the failed one never run
    // (their outputs keep their zeros).
    {
        const int n = 3;
        lane_world_host w(n);
        std::vector<group_call> calls;
        calls.push_back(make_group_call(ring_2ch, collective::all_reduce, 100, false, n));
        calls.push_back(make_group_call(d, collective::all_reduce, 50, false, n));
        calls.push_back(make_group_call(ring_2ch, collective::all_gather, 7, false, n));
        std::vector<group_launch> G;
        for (int r = 0; r < n; ++r) G.push_back(make_group(w, calls, 0, 3, r, 20000));
        const auto t0 = std::chrono::steady_clock::now();
        const auto st = run_group_lanes(G, 2, {true, true, false}, [&w] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            w.set_abort();
        });
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
        int touched = 0;
        for (int r = 0; r < 2; ++r) {
            CHECK(st[std::size_t(r)] == status::aborted);
            for (std::size_t k = 1; k < calls.size(); ++k)
                for (std::uint64_t i = 0; i < calls[k].out_len; ++i) touched += calls[k].out[std::size_t(r)][i] != 0.f;
        }
        CHECK(touched == 0);
    }
}
