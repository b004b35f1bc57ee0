// hierarchical<Intra, Inter> AllReduce end to end on the threads backend,
// with the node split emulated through CHORUS_RANKS_PER_NODE:
//   nodes x ranks per node {2x2, 2x3, 3x2, 2x4, 4x2}
//   x {ring, direct} x {ring, direct} (Intra x Inter, small chunks for some)
//   x operators {sum, avg, max} x {int32, integer-valued float}
//   x counts {0, 1, 7, 1009, 100003} x in place / out of place,
// bit for bit against a serial reference, with buffers at element offsets
// that differ between ranks and guard elements around every span.
// The four policies are run-time values (policy_of<hierarchical<...>>) that
// one check_all_reduce<T, Op> per (type, operator) serves through
// chorus::detail::all_reduce_run; the public chorus::all_reduce<hierarchical<...>>
// and reduce_scatter<...> run too (split and flat). Each split shape checks
// that the composite schedule is what runs; a node size unusable for the
// split (CHORUS_RANKS_PER_NODE 2 or 6 on 5 ranks) runs Intra's flat
// schedule.

#include "test_util.hpp"
#include "../scoped_env.hpp"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace chorus_test;
using comm_t = chorus::communicator<chorus::threads>;

//! Rank r's input element i: small integers (exact in float, sums exact).
template <class T>
T input(int r, std::uint64_t i, int op_kind) {
    const long long h = static_cast<long long>((i * 2654435761ull + std::uint64_t(r) * 40503ull + 17ull) % 1000003ull);
    if (op_kind == 2) return static_cast<T>(h % 20001 - 10000); // max: a wide range
    return static_cast<T>(h % 201 - 100);
}

template <class T, class Op>
std::vector<T> reference(int n, std::uint64_t count, int op_kind, const Op& op) {
    std::vector<T> ref(count);
    for (std::uint64_t i = 0; i < count; ++i) {
        T acc = input<T>(0, i, op_kind);
        for (int r = 1; r < n; ++r) acc = op(acc, input<T>(r, i, op_kind));
        if constexpr (requires { op.finish(acc, n); }) acc = op.finish(acc, n);
        ref[i] = acc;
    }
    return ref;
}

constexpr std::uint64_t counts[] = {0, 1, 7, 1009, 100003};
// Under ThreadSanitizer (ten times slower, 8 threads on 2 cores) the largest count is left out.
constexpr std::size_t n_counts = chorus_test::under_tsan ? 4 : 5;

//! Runs `call(in, out)` (an AllReduce with `op`; in place: in and out are the
//! same memory) for every count, in place and out of place, and checks it.
template <class T, class Op, class Call>
void check_all_reduce(comm_t& comm, failure_log& log, const std::string& algo, int op_kind, const Op& op,
                      const Call& call) {
    const int n = comm.size();
    const int r = comm.rank();
    for (std::uint64_t count : std::span(counts, n_counts)) {
        const std::vector<T> ref = reference<T>(n, count, op_kind, op);
        for (bool in_place : {false, true}) {
            const std::size_t off = std::size_t((r + int(in_place)) % 3);
            guarded<T> out(count, off);
            guarded<T> in(count, std::size_t(r % 2));
            for (std::uint64_t i = 0; i < count; ++i) {
                in[i] = input<T>(r, i, op_kind);
                out[i] = input<T>(r, i, op_kind);
            }
            const std::string where = algo + " " + Op::name + " " + (std::is_floating_point_v<T> ? "float" : "int32") +
                                      " n=" + std::to_string(n) + " count=" + std::to_string(count) +
                                      (in_place ? " in place" : " out of place") + " rank " + std::to_string(r);
            try {
                if (in_place) call(std::span<const T>(out.span()), out.span());
                else call(in.cspan(), out.span());
            } catch (const std::exception& e) {
                log.add(where + ": threw " + e.what());
                return;
            }
            std::uint64_t bad = 0;
            for (std::uint64_t i = 0; i < count; ++i) {
                if (!same_bits(out[i], ref[i])) {
                    if (bad++ == 0)
                        log.add(where + ": out[" + std::to_string(i) + "] = " + show(out[i]) + ", want " +
                                show(ref[i]));
                }
            }
            if (bad > 1) log.add(where + ": " + std::to_string(bad) + " wrong elements");
            if (!out.guards_intact()) log.add(where + ": guard elements of out clobbered");
            if (!in.guards_intact()) log.add(where + ": guard elements of in clobbered");
            if (!in_place)
                for (std::uint64_t i = 0; i < count; ++i)
                    if (!same_bits(in[i], input<T>(r, i, op_kind))) {
                        log.add(where + ": in changed");
                        break;
                    }
        }
    }
}

//! AllReduce with a policy value (chorus::detail::all_reduce_run): one instantiation per (type, operator).
template <class T, class Op>
void check_value(comm_t& comm, failure_log& log, const named_policy& p, int op_kind, const Op& op) {
    check_all_reduce<T>(comm, log, p.name, op_kind, op, [&](std::span<const T> in, std::span<T> out) {
        chorus::detail::all_reduce_run(comm, p.pol, in, out, op, false);
    });
}

//! AllReduce through the public template API, both overloads.
template <class Algo, class T, class Op>
void check_public(comm_t& comm, failure_log& log, const std::string& algo, int op_kind, const Op& op) {
    check_all_reduce<T>(comm, log, algo + " (public API)", op_kind, op, [&](std::span<const T> in, std::span<T> out) {
        if (in.data() == out.data()) chorus::all_reduce<Algo>(comm, out, op);
        else chorus::all_reduce<Algo>(comm, in, out, op);
    });
}

void check_policy(comm_t& comm, failure_log& log, const named_policy& p) {
    check_value<std::int32_t>(comm, log, p, 0, chorus::sum{});
    check_value<std::int32_t>(comm, log, p, 1, chorus::avg{});
    check_value<std::int32_t>(comm, log, p, 2, chorus::max{});
    check_value<float>(comm, log, p, 0, chorus::sum{});
    check_value<float>(comm, log, p, 1, chorus::avg{});
    check_value<float>(comm, log, p, 2, chorus::max{});
}

using chorus::algorithm;
using hier_rr = chorus::hierarchical<chorus::ring<chorus::ring_params{2, 4096}>, chorus::ring<chorus::ring_params{1, 1024}>>;
using hier_rd = chorus::hierarchical<chorus::ring<chorus::ring_params{1, 16 << 10}>, chorus::direct<chorus::direct_params{1, 4096}>>;
using hier_dr = chorus::hierarchical<chorus::direct<chorus::direct_params{2, 8192}>, chorus::ring<chorus::ring_params{1, 1024}>>;
using hier_dd = chorus::hierarchical<chorus::direct<chorus::direct_params{1, 1 << 20}>, chorus::direct<chorus::direct_params{2, 256}>>;

const named_policy policies[] = {
    {"hierarchical<ring, ring>", chorus::policy_of<hier_rr>},
    {"hierarchical<ring, direct>", chorus::policy_of<hier_rd>},
    {"hierarchical<direct, ring>", chorus::policy_of<hier_dr>},
    {"hierarchical<direct, direct>", chorus::policy_of<hier_dd>},
};

//! The kind of schedule `p` plans for rank 1's AllReduce of 1009 int32 on n ranks in nodes of `per_node`.
chorus::schedule_kind kind_of(const chorus::policy& p, int n, int per_node) {
    return chorus::make_schedule(p, {chorus::collective::all_reduce, 1, n, 0, 1009, 4, false, per_node}).kind;
}

} // namespace

TEST_CASE("hierarchical all_reduce on an emulated node split is bit-exact (threads backend)") {
    // The policy types describe themselves as these values.
    using chorus::policy;
    CHECK(policies[0].pol == policy::hierarchical(algorithm::ring, {2, 4096}, algorithm::ring, {1, 1024}));
    CHECK(policies[1].pol == policy::hierarchical(algorithm::ring, {1, 16 << 10}, algorithm::direct, {1, 4096}));
    CHECK(policies[2].pol == policy::hierarchical(algorithm::direct, {2, 8192}, algorithm::ring, {1, 1024}));
    CHECK(policies[3].pol == policy::hierarchical(algorithm::direct, {1, 1 << 20}, algorithm::direct, {2, 256}));
    struct shape {
        int n, per_node;
    };
    for (const shape sh : {shape{4, 2}, shape{6, 3}, shape{6, 2}, shape{8, 4}, shape{8, 2}}) {
        CAPTURE(sh.n);
        CAPTURE(sh.per_node);
        // The composite is what runs, not the flat fallback.
        for (const named_policy& p : policies) {
            const std::string name = p.name;
            CAPTURE(name);
            CHECK(kind_of(p.pol, sh.n, sh.per_node) == chorus::schedule_kind::hierarchical);
        }
        const std::string k = std::to_string(sh.per_node);
        scoped_env env("CHORUS_RANKS_PER_NODE", k.c_str());
        failure_log log;
        chorus::run_threads(sh.n, [&](comm_t& comm) {
            for (const named_policy& p : policies) check_policy(comm, log, p);
            check_public<hier_dr, std::int32_t>(comm, log, "hierarchical<direct, ring>", 0, chorus::sum{});
            check_public<hier_rd, float>(comm, log, "hierarchical<ring, direct>", 1, chorus::avg{});
        });
        log.report();
    }
}

TEST_CASE("hierarchical with CHORUS_RANKS_PER_NODE unusable for the split runs the flat schedule") {
    // 5 ranks cannot split into nodes of 2; 6 >= n ("abc" and "0" are
    // refused: test_errors.cpp).
    struct setting {
        const char* env;
        int per_node;
    };
    for (const setting v : {setting{"2", 2}, setting{"6", 6}}) {
        CAPTURE(v.env);
        // Intra's own schedule over all ranks.
        for (const named_policy& p : policies) {
            const std::string name = p.name;
            CAPTURE(name);
            const auto flat = p.pol.intra == algorithm::direct ? chorus::schedule_kind::direct
                                                               : chorus::schedule_kind::ring;
            CHECK(kind_of(p.pol, 5, v.per_node) == flat);
        }
        scoped_env env("CHORUS_RANKS_PER_NODE", v.env);
        failure_log log;
        chorus::run_threads(5, [&](comm_t& comm) {
            for (const named_policy& p : policies) check_value<std::int32_t>(comm, log, p, 1, chorus::avg{});
            check_public<hier_rd, std::int32_t>(comm, log, "hierarchical<ring, direct>", 1, chorus::avg{});
            // Other collectives run Intra's schedule: a quick reduce_scatter.
            std::vector<std::int32_t> in(5 * 3), out(3);
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::int32_t(i) + comm.rank();
            chorus::reduce_scatter<hier_rd>(comm, std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
            for (std::size_t i = 0; i < out.size(); ++i) {
                const std::int32_t want = 5 * std::int32_t(std::size_t(comm.rank()) * 3 + i) + 10;
                if (out[i] != want)
                    log.add("reduce_scatter rank " + std::to_string(comm.rank()) + " out[" + std::to_string(i) + "]");
            }
        });
        log.report();
    }
}
