// AllToAll, the per-rank-count ("v") collectives and send/recv.
//
//   * The exchange schedule (algo/exchange.hpp) by simulation without
//     threads (schedule_sim.hpp): every rank's real units under the real
//     wait rules of both executors (channels independent, as GPU thread
//     blocks, or interleaved on one thread), in random interleavings, over
//     symbolic elements that record where each element came from; any two
//     units that could run at the same time (two channels of one rank
//     included) are checked for conflicting accesses, no rank writes a
//     peer's buffer or touches a buffer of a rank that has not registered
//     or has returned, and what a rank reads from peers and waits for does
//     not depend on its in_place.
//   * End to end on the threads backend against serial references: every
//     collective x n = 1..9 x ragged counts (zeros; one rank with none and
//     another with many) x in place / out of place x buffers offset by one
//     element on some ranks (guards checked) x every policy (ring, direct,
//     hierarchical, tree, recursive_doubling, rabenseifner, two_shot,
//     automatic, deterministic with their default tuning; ring with 3
//     channels x 16 B, direct with 2 x 32 B) x element types uint8, int32,
//     float, double (ReduceScatterV with sum, max and avg), and, for the
//     policies that keep operand order, a non-commutative user operator on
//     an 8-byte user type. Policies are run-time values: run_case<T, Op>
//     calls chorus::detail::*_run, one instantiation per (type, operator).
//   * Large ragged counts (a million elements on one rank).
//   * Async forms (counts freed right after issuing; every policy through
//     the run functions' async flag), the public template API
//     (chorus::all_to_all<chorus::ring<>> etc., sync and async), bad input
//     (each argument named; policy values refused as the policy types are
//     at compile time), counts or policies that disagree between ranks, and
//     send/recv: ordering, sizes 0 .. 4 MiB, mismatch, timeouts, a peer that
//     returned.

#include "schedule_sim.hpp"
#include "test_util.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace chorus_test;
using namespace std::chrono_literals;
using chorus::collective;
using chorus::operand;
using chorus::step;
using chorus::wait_spec;
using chorus::where;
using comm_t = chorus::communicator<chorus::threads>;
using u64 = std::uint64_t;

// ----------------------------------------------------------------------------
// Geometry shared by the simulator and the end-to-end references.

//! One call's shape: the collective, n, and the counts (AllToAll: `block`).
struct shape {
    collective coll = collective::all_to_all;
    int n = 1;
    u64 block = 0;
    std::vector<u64> counts; // v-collectives (n or n*n entries)

    u64 at(int q, int r) const { return counts[std::size_t(q) * static_cast<std::size_t>(n) + std::size_t(r)]; }
    u64 displ(int q) const {
        u64 s = 0;
        for (int j = 0; j < q; ++j) s += counts[std::size_t(j)];
        return s;
    }
    u64 total() const {
        u64 s = 0;
        for (u64 c : counts) s += c;
        return s;
    }
    u64 in_len(int r) const {
        switch (coll) {
        case collective::all_to_all: return block * u64(n);
        case collective::all_gatherv: return counts[std::size_t(r)];
        case collective::reduce_scatterv: return total();
        default: {
            u64 s = 0;
            for (int j = 0; j < n; ++j) s += at(r, j);
            return s;
        }
        }
    }
    u64 out_len(int r) const {
        switch (coll) {
        case collective::all_to_all: return block * u64(n);
        case collective::all_gatherv: return total();
        case collective::reduce_scatterv: return counts[std::size_t(r)];
        default: {
            u64 s = 0;
            for (int q = 0; q < n; ++q) s += at(q, r);
            return s;
        }
        }
    }
    //! Copy collectives: element j of rank r's out comes from element
    //! `index` of rank `src`'s in.
    void source(int r, u64 j, int& src, u64& index) const {
        switch (coll) {
        case collective::all_to_all:
            src = int(j / block);
            index = u64(r) * block + j % block;
            return;
        case collective::all_gatherv:
            for (src = 0; j >= counts[std::size_t(src)]; ++src) j -= counts[std::size_t(src)];
            index = j;
            return;
        default:
            for (src = 0; j >= at(src, r); ++src) j -= at(src, r);
            index = j;
            for (int p = 0; p < r; ++p) index += at(src, p);
            return;
        }
    }
    //! May rank r call in place? (AllToAllV: only when its in and out have the same size.)
    bool in_place_ok(int r) const { return coll != collective::all_to_allv || in_len(r) == out_len(r); }
    const u64* counts_ptr() const { return counts.empty() ? nullptr : counts.data(); }
};

const char* coll_name(collective c) { return chorus::collective_name(c); }

//! Count patterns for n ranks: (AllGatherV / ReduceScatterV) n entries.
std::vector<std::vector<u64>> vector_patterns(int n, u64 many) {
    std::vector<std::vector<u64>> out;
    out.emplace_back(static_cast<std::size_t>(n), 0);                 // all empty
    out.emplace_back(static_cast<std::size_t>(n), 1);                 // uniform
    std::vector<u64> ragged(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) ragged[std::size_t(q)] = u64((q * 7 + 3) % 5); // includes zeros
    out.push_back(ragged);
    std::vector<u64> skew(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) skew[std::size_t(q)] = u64(q % 3);
    skew[0] = 0;
    skew[std::size_t(n > 1 ? 1 : 0)] = many;             // rank 0 none, rank 1 many
    out.push_back(skew);
    return out;
}

//! n x n matrices: random (zeros included), one row/column heavy, symmetric (in place possible everywhere).
std::vector<std::vector<u64>> matrix_patterns(int n, u64 many, std::mt19937& rng, bool with_zero = true) {
    std::vector<std::vector<u64>> out;
    const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    if (with_zero) out.emplace_back(nn, 0);
    std::uniform_int_distribution<int> d(0, 6);
    std::vector<u64> rnd(nn);
    for (auto& c : rnd) c = u64(std::max(0, d(rng) - 1)); // about 2 in 7 zeros
    out.push_back(rnd);
    std::vector<u64> heavy(nn, 0);
    for (int q = 0; q < n; ++q)
        for (int r = 0; r < n; ++r)
            heavy[std::size_t(q * n + r)] = q == 1 % n ? many / u64(n) + u64(r) : u64((q + r) % 2);
    out.push_back(heavy);
    std::vector<u64> circ(nn); // row sums equal column sums (in place possible), own offsets differ
    for (int q = 0; q < n; ++q)
        for (int r = 0; r < n; ++r) {
            const int d = (r - q + n) % n;
            circ[std::size_t(q * n + r)] = u64(d * 2 % 5 + 1 + (d == 1));
        }
    out.push_back(circ);
    std::vector<u64> sym(nn);
    for (int q = 0; q < n; ++q)
        for (int r = 0; r <= q; ++r) sym[std::size_t(q * n + r)] = sym[std::size_t(r * n + q)] = u64(d(rng));
    out.push_back(sym);
    return out;
}

// ----------------------------------------------------------------------------
// The schedule simulator (schedule_sim.hpp) on exchange calls.

//! One exchange call on every rank (`ip`: which ranks call in place): inputs
//! hold rank r's contribution and the element's index in r's `in`.
chorus_sim::schedule_sim simulation(const shape& sh, const std::vector<char>& ip, int ch, u64 chunk_bytes,
                                    chorus_sim::channel_order order) {
    std::vector<chorus_sim::rank_call> calls(static_cast<std::size_t>(sh.n));
    for (int r = 0; r < sh.n; ++r) {
        chorus_sim::rank_call& k = calls[std::size_t(r)];
        chorus::schedule_args a{sh.coll, r, sh.n, 0, sh.block, 4, ip[std::size_t(r)] != 0, 0};
        a.counts = sh.counts_ptr();
        k.sch = chorus::make_exchange_schedule(a, ch, chunk_bytes);
        k.in.resize(sh.in_len(r));
        for (u64 i = 0; i < k.in.size(); ++i) k.in[i] = chorus_sim::input(r, i);
        k.out.resize(sh.out_len(r));
        if (!ip[std::size_t(r)]) continue;
        if (sh.coll == collective::all_gatherv) k.in_place = {where::in, sh.displ(r)};
        else if (sh.coll == collective::reduce_scatterv) k.in_place = {where::out, sh.displ(r)};
        else k.in_place = {where::in, 0};
    }
    return chorus_sim::schedule_sim(std::move(calls), order, false);
}

//! Every output element: ReduceScatterV, its index with every rank's
//! contribution once and the epilogue once; the copies, the one element
//! of the one rank the geometry says, untouched.
std::string verify(const chorus_sim::schedule_sim& s, const shape& sh) {
    for (int r = 0; r < sh.n; ++r) {
        for (u64 j = 0; j < sh.out_len(r); ++j) {
            const std::string at = "rank " + std::to_string(r) + " out[" + std::to_string(j) + "]";
            const chorus_sim::sym& v = s.at(r, where::out, j);
            if (sh.coll == collective::reduce_scatterv) {
                if (v.index != sh.displ(r) + j + 1 || v.counts != chorus_sim::every_contribution(sh.n) ||
                    v.finishes != 1)
                    return at + " is not the reduction";
                continue;
            }
            int src = 0;
            u64 index = 0;
            sh.source(r, j, src, index);
            if (v.index != index + 1 || v.counts != chorus_sim::contribution(src) || v.finishes != 0)
                return at + " does not hold element " + std::to_string(index) + " of rank " + std::to_string(src);
        }
    }
    return "";
}

//! What rank r reads from peers and which peer progress it waits for.
struct peer_traffic {
    std::vector<std::vector<u64>> reads, waits;
    bool operator==(const peer_traffic&) const = default;
};
peer_traffic traffic(const chorus::exchange_schedule& s) {
    peer_traffic t;
    auto add_wait = [&](const wait_spec& w, int c) {
        if (w.peer < 0) return;
        const int span = w.span > 1 ? int(w.span) : 1;
        for (int i = 0; i < span; ++i) {
            const int peer = w.peer + i * int(w.stride);
            if (span > 1 && peer == s.rank()) continue;
            t.waits.push_back({u64(c), u64(peer), w.units});
        }
    };
    for (int c = 0; c < s.channels(); ++c) {
        for (u64 p = 0; p < s.units(); ++p) {
            const step st = s.unit(c, p);
            for (const auto& w : st.waits) add_wait(w, c);
            if (st.count == 0) continue;
            const int fan = st.fan_in >= 2 ? int(st.fan_in) : 1;
            for (int q = 0; q < fan; ++q) {
                const int src = fan > 1 ? st.source_rank(q) : st.src0.rank;
                if (src != s.rank()) t.reads.push_back({u64(src), u64(st.src0.loc), st.src0.offset, st.count});
            }
        }
        add_wait(s.final_wait(), c);
    }
    for (auto* v : {&t.reads, &t.waits}) {
        std::sort(v->begin(), v->end());
        v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    return t;
}

// ----------------------------------------------------------------------------
// End-to-end helpers.


template <class T>
T value_of(int rank, u64 i) {
    if constexpr (std::is_same_v<T, affine>) return {std::uint32_t(rank * 2 + 1), std::uint32_t(rank * 1000 + int(i))};
    else if constexpr (sizeof(T) == 1) return static_cast<T>((rank * 31 + int(i % 251) * 7 + 1) & 0x7f);
    else return static_cast<T>(rank * 1000 + int(i % 997) + 1);
}
//! Small values for reductions: sums over 9 ranks stay exact in every type.
template <class T>
T red_value(int rank, u64 i) {
    const int g = (rank * 3 + int(i % 13)) % 11 + 1;
    if constexpr (std::is_same_v<T, affine>)
        return {std::uint32_t(2 * g + 1), std::uint32_t(rank * 7919) + std::uint32_t(i)};
    else return static_cast<T>(g);
}

template <class T, class Op>
T red_reference(int n, u64 i) {
    if constexpr (std::is_same_v<Op, compose_op>) {
        T acc = red_value<T>(0, i); // in rank order
        for (int q = 1; q < n; ++q) acc = Op{}(acc, red_value<T>(q, i));
        return acc;
    } else if constexpr (std::is_same_v<Op, chorus::max>) {
        int m = 0;
        for (int q = 0; q < n; ++q) m = std::max(m, int(red_value<T>(q, i)));
        return static_cast<T>(m);
    } else {
        long long s = 0;
        for (int q = 0; q < n; ++q) s += (long long)red_value<T>(q, i);
        if constexpr (std::is_same_v<Op, chorus::avg>) return static_cast<T>(static_cast<T>(s) / static_cast<T>(n));
        else return static_cast<T>(s);
    }
}

template <class T>
const char* type_name() {
    if constexpr (std::is_same_v<T, affine>) return "affine";
    else return chorus::element_traits<T>::name();
}

std::vector<std::size_t> sizes(const std::vector<u64>& c) { return std::vector<std::size_t>(c.begin(), c.end()); }


//! Runs one call shape on one rank with policy `p` (chorus::detail::*_run:
//! one instantiation per (type, operator) serves every policy) and checks
//! its result; failures go to `log`. Op: ReduceScatterV's operator.
template <class T, class Op = chorus::sum>
void run_case(comm_t& comm, const named_policy& p, const shape& sh, bool in_place, std::size_t off, failure_log& log,
              const std::string& tag, bool async = false) {
    const int r = comm.rank(), n = comm.size();
    const std::vector<std::size_t> cnt = sizes(sh.counts);
    const std::span<const std::size_t> cs(cnt);
    const std::size_t in_len = sh.in_len(r), out_len = sh.out_len(r);
    const bool reducing = sh.coll == collective::reduce_scatterv;
    auto val = [&](int q, u64 i) { return reducing ? red_value<T>(q, i) : value_of<T>(q, i); };
    std::string where_ = tag + " " + p.name + " " + type_name<T>() + (reducing ? std::string(" ") + Op::name : "") +
                         " " + coll_name(sh.coll) + " n=" + std::to_string(n) + " rank " + std::to_string(r) +
                         (in_place ? " in place" : " out of place") + " offset " + std::to_string(off) +
                         (async ? " async" : "");
    // big: the in-place buffer (or out); small: in for out of place.
    std::size_t big_len = in_place ? std::max(in_len, out_len) : out_len;
    if (reducing && in_place) big_len = in_len;
    guarded<T> big(big_len, off), small(in_place ? 0 : in_len, 1 - off);
    std::span<T> in_s, out_s;
    const u64 displ = sh.coll == collective::all_gatherv || reducing ? sh.displ(r) : 0;
    if (in_place) {
        if (sh.coll == collective::all_gatherv) {
            for (u64 i = 0; i < in_len; ++i) big[displ + i] = val(r, i);
            in_s = big.span().subspan(displ, in_len);
            out_s = big.span();
        } else if (reducing) {
            for (u64 i = 0; i < in_len; ++i) big[i] = val(r, i);
            in_s = big.span();
            out_s = big.span().subspan(displ, out_len);
        } else {
            for (u64 i = 0; i < in_len; ++i) big[i] = val(r, i);
            in_s = big.span();
            out_s = big.span();
        }
    } else {
        for (u64 i = 0; i < in_len; ++i) small[i] = val(r, i);
        in_s = small.span();
        out_s = big.span();
    }
    const std::span<const T> in_c(in_s.data(), in_s.size());
    try {
        namespace d = chorus::detail;
        chorus::future f;
        switch (sh.coll) {
        case collective::all_to_all: f = d::all_to_all_run(comm, p.pol, in_c, out_s, async); break;
        case collective::all_gatherv: f = d::all_gatherv_run(comm, p.pol, in_c, out_s, cs, async); break;
        case collective::reduce_scatterv: f = d::reduce_scatterv_run(comm, p.pol, in_c, out_s, cs, Op{}, async); break;
        default: f = d::all_to_allv_run(comm, p.pol, in_c, out_s, cs, async); break;
        }
        if (async != f.valid()) {
            log.add(where_ + ": the call returned " + (f.valid() ? "a future" : "no future"));
            return;
        }
        if (async) f.wait();
    } catch (const std::exception& e) {
        log.add(where_ + ": threw " + e.what());
        return;
    }
    for (u64 j = 0; j < out_len; ++j) {
        T want{};
        if (reducing) {
            want = red_reference<T, Op>(n, displ + j);
        } else {
            int src = 0;
            u64 index = 0;
            sh.source(r, j, src, index);
            want = value_of<T>(src, index);
        }
        const T got = out_s[j];
        if (!same_bits(got, want)) {
            log.add(where_ + ": out[" + std::to_string(j) + "] = " + show(got) + ", want " + show(want));
            return;
        }
    }
    if (!in_place)
        for (u64 i = 0; i < in_len; ++i)
            if (!same_bits(small[i], val(r, i))) {
                log.add(where_ + ": `in` changed");
                return;
            }
    if (!big.guards_intact() || !small.guards_intact()) log.add(where_ + ": a guard element was written");
}

//! Every collective, pattern and placement for one (policy, type) on n
//! ranks; ReduceScatterV once per operator in Op0, Ops..., the copies once.
template <class T, class Op0, class... Ops>
void suite(const named_policy& p, int n, failure_log& log) {
    std::mt19937 rng(unsigned(1000 + n)); // the same matrices on every rank: drawn before the threads start
    const u64 many = under_tsan ? 300 : 1021;
    std::vector<shape> shapes;
    for (u64 b : {u64(0), u64(1), u64(3), u64(17)}) shapes.push_back({collective::all_to_all, n, b, {}});
    for (const auto& c : vector_patterns(n, many)) {
        shapes.push_back({collective::all_gatherv, n, 0, c});
        shapes.push_back({collective::reduce_scatterv, n, 0, c});
    }
    for (const auto& c : matrix_patterns(n, many, rng)) shapes.push_back({collective::all_to_allv, n, 0, c});
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(60s);
        const int r = comm.rank();
        int k = 0;
        for (const shape& sh : shapes) {
            for (int placement = 0; placement < 2; ++placement) {
                ++k;
                // Every rank calls in place or not as it likes (AllToAllV: where sizes allow).
                const bool ip = placement == 1 && sh.in_place_ok(r) && (r + k) % 3 != 0;
                const std::size_t off = std::size_t((r + k) % 2);
                if (sh.coll == collective::reduce_scatterv)
                    for (auto* run : {&run_case<T, Op0>, &run_case<T, Ops>...})
                        run(comm, p, sh, ip, off, log, "suite", false);
                else run_case<T, Op0>(comm, p, sh, ip, off, log, "suite");
            }
        }
    });
}

using ring_tiny = chorus::ring<chorus::ring_params{.channels = 3, .chunk_bytes = 16}>;
using direct_tiny = chorus::direct<chorus::direct_params{.channels = 2, .chunk_bytes = 32}>;

//! Every policy, each with its default tuning, and two tuned to several
//! channels and tiny chunks (many ragged units). The exchange collectives
//! run the exchange schedule whatever the policy, with its tuning.
const named_policy policies[] = {
    {"ring<>", chorus::policy_of<chorus::ring<>>},
    {"direct<>", chorus::policy_of<chorus::direct<>>},
    {"hierarchical<>", chorus::policy_of<chorus::hierarchical<>>},
    {"tree<>", chorus::policy_of<chorus::tree<>>},
    {"recursive_doubling<>", chorus::policy_of<chorus::recursive_doubling<>>},
    {"rabenseifner<>", chorus::policy_of<chorus::rabenseifner<>>},
    {"two_shot<>", chorus::policy_of<chorus::two_shot<>>},
    {"automatic", chorus::policy_of<chorus::automatic>},
    {"deterministic<>", chorus::policy_of<chorus::deterministic<>>},
    {"ring<3ch,16B>", chorus::policy_of<ring_tiny>},
    {"direct<2ch,32B>", chorus::policy_of<direct_tiny>},
};

//! suite() on n = 1..9 for every policy (`order_keeping_only`: those that keep operand order).
template <class T, class... Ops>
void suite_all(bool order_keeping_only = false) {
    for (const named_policy& p : policies) {
        if (order_keeping_only && p.pol.reorders_operands()) continue;
        failure_log log;
        for (int n = 1; n <= 9; ++n) suite<T, Ops...>(p, n, log);
        log.report();
    }
}

template <class F>
chorus::errc code_of(F&& f, std::string* what = nullptr) {
    try {
        f();
    } catch (const chorus::error& e) {
        if (what) *what = e.what();
        return e.code();
    }
    return chorus::errc::internal; // "did not throw"
}

} // namespace

// ============================================================================

namespace {
// At namespace scope: g++ 12 with -fsanitize=undefined does not treat the
// address of a function-local static as a constant when compared with null.
constexpr u64 constexpr_counts[9] = {0, 2, 1, 3, 0, 4, 5, 5, 1}; // 3 x 3
} // namespace

TEST_CASE("exchange schedules are trivially copyable constant expressions") {
    static_assert(std::is_trivially_copyable_v<chorus::exchange_schedule>);
    constexpr chorus::schedule_args a = [] {
        chorus::schedule_args x{collective::all_to_allv, 1, 3, 0, 0, 4, false, 0};
        x.counts = constexpr_counts;
        return x;
    }();
    constexpr chorus::exchange_schedule s = chorus::make_exchange_schedule(a, 1, 1 << 20);
    static_assert(s.units() == 3);
    CHECK(s.final_wait().units == 3);
    // rank 1 first copies its own block (counts[1*3+1] = 0), then pulls from rank 2 counts[2*3+1] = 5
    // elements at offset counts[2*3+0] = 5 of rank 2's in, into out at counts[0*3+1] + counts[1*3+1] = 2.
    constexpr step st = s.unit(0, 1);
    CHECK(st.src0.rank == 2);
    CHECK(st.src0.offset == 5);
    CHECK(st.count == 5);
    CHECK(st.dst.offset == 2);
    CHECK(st.dst.rank == 1);
    CHECK(st.waits[0].peer == 2);
    CHECK(chorus::make_exchange_schedule([] {
              chorus::schedule_args x{collective::all_to_all, 0, 4, 0, 10, 4, true, 0};
              return x;
          }(),
                                         1, 1 << 20)
              .scratch_elems() == 40);
}

TEST_CASE("exchange schedules: every interleaving sampled is race-free, deadlock-free and exact") {
    std::mt19937 rng(2024);
    int runs = 0;
    struct tuning {
        int channels;
        u64 chunk_bytes;
    };
    const tuning tunings[] = {{1, 16}, {2, 16}, {3, 4096}, {1, 1 << 20}};
    for (int n = 1; n <= 9; ++n) {
        std::vector<shape> shapes;
        for (u64 b : {u64(0), u64(1), u64(5)}) shapes.push_back({collective::all_to_all, n, b, {}});
        for (const auto& c : vector_patterns(n, 13)) {
            shapes.push_back({collective::all_gatherv, n, 0, c});
            shapes.push_back({collective::reduce_scatterv, n, 0, c});
        }
        for (const auto& c : matrix_patterns(n, 13, rng, false)) shapes.push_back({collective::all_to_allv, n, 0, c});
        for (const shape& sh : shapes) {
            for (int placement = 0; placement < 3; ++placement) { // none, all, mixed in place
                std::vector<char> ip(static_cast<std::size_t>(n));
                for (int r = 0; r < n; ++r)
                    ip[std::size_t(r)] = sh.in_place_ok(r) && (placement == 1 || (placement == 2 && r % 2 == 1));
                for (const tuning& t : tunings) {
                    const int tries = n <= 4 ? 2 : 1;
                    for (int i = 0; i < tries; ++i) {
                        // Multi-channel schedules alternate between the two executors' channel semantics.
                        const bool independent = (i + placement) % 2 == 0;
                        chorus_sim::schedule_sim s = simulation(sh, ip, t.channels, t.chunk_bytes,
                                                                independent ? chorus_sim::channel_order::independent
                                                                            : chorus_sim::channel_order::interleaved);
                        for (int r = 0; r < n; ++r) { // the staging scratch mirrors out
                            const u64 scratch = s.schedule(r).scratch_elems();
                            CHECK((scratch == 0 || scratch == sh.out_len(r)));
                        }
                        const bool ok = s.run(rng);
                        ++runs;
                        const std::string coll = coll_name(sh.coll);
                        CAPTURE(coll);
                        CAPTURE(n);
                        CAPTURE(placement);
                        CAPTURE(t.channels);
                        CAPTURE(t.chunk_bytes);
                        CAPTURE(sh.block);
                        CAPTURE(independent);
                        REQUIRE_MESSAGE(ok, s.error);
                        const std::string v = verify(s, sh);
                        REQUIRE_MESSAGE(v.empty(), v << "\n  " << s.moves(64));
                    }
                    // The invariant: peer reads and waits do not depend on the reader's in_place.
                    for (int r = 0; r < n; ++r) {
                        if (!sh.in_place_ok(r)) continue;
                        chorus::schedule_args a{sh.coll, r, n, 0, sh.block, 4, false, 0};
                        a.counts = sh.counts_ptr();
                        const auto out_of_place = chorus::make_exchange_schedule(a, t.channels, t.chunk_bytes);
                        a.in_place = true;
                        const auto in_place = chorus::make_exchange_schedule(a, t.channels, t.chunk_bytes);
                        CAPTURE(r);
                        CHECK(traffic(out_of_place) == traffic(in_place));
                        CHECK(out_of_place.chunks == in_place.chunks);
                    }
                }
            }
        }
    }
    MESSAGE("simulated runs: " << runs);
}

TEST_CASE("exchange collectives match a serial reference - uint8, every policy") {
    suite_all<std::uint8_t, chorus::sum, chorus::max, chorus::avg>();
}
TEST_CASE("exchange collectives match a serial reference - int32, every policy") {
    suite_all<std::int32_t, chorus::sum, chorus::max, chorus::avg>();
}
TEST_CASE("exchange collectives match a serial reference - float, every policy") {
    suite_all<float, chorus::sum, chorus::max, chorus::avg>();
}
TEST_CASE("exchange collectives match a serial reference - double, every policy") {
    suite_all<double, chorus::sum, chorus::max, chorus::avg>();
}
TEST_CASE("exchange collectives match a serial reference - a non-commutative operator keeps rank order") {
    suite_all<affine, compose_op>(true);
}

TEST_CASE("exchange collectives with large ragged counts") {
    // rank 0 contributes nothing, rank 1 about a million elements.
    const named_policy ring_2ch_64k{"ring<2ch,64KiB>", chorus::policy_of<chorus::ring<chorus::ring_params{2, 64 << 10}>>};
    failure_log log;
    const u64 big = under_tsan ? 100003 : 1000003;
    for (int n : {2, 3, 5}) {
        std::vector<u64> c(static_cast<std::size_t>(n), 0);
        c[1] = big;
        for (int q = 2; q < n; ++q) c[std::size_t(q)] = u64(q * 1000 + 1);
        std::vector<u64> m(std::size_t(n * n), 0);
        for (int q = 0; q < n; ++q)
            for (int r = 0; r < n; ++r) m[std::size_t(q * n + r)] = q == 1 ? big / u64(n) + u64(r) : u64(q + r);
        const shape shapes[] = {{collective::all_gatherv, n, 0, c},
                                {collective::reduce_scatterv, n, 0, c},
                                {collective::all_to_allv, n, 0, m},
                                {collective::all_to_all, n, big / u64(n * n), {}}};
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(120s);
            for (const shape& sh : shapes)
                for (int ip = 0; ip < 2; ++ip)
                    run_case<float>(comm, ring_2ch_64k, sh, ip == 1 && sh.in_place_ok(comm.rank()),
                                    std::size_t(comm.rank() % 2), log, "large");
        });
    }
    log.report();
}

TEST_CASE("exchange collectives async - several in flight, counts freed after issuing; the public API") {
    failure_log log;
    for (int n : {1, 3, 4}) {
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(60s);
            const int r = comm.rank();
            // a2a, agv, rsv, a2av in flight together, issued from temporaries
            std::vector<u64> c(static_cast<std::size_t>(n));
            for (int q = 0; q < n; ++q) c[std::size_t(q)] = u64(q * 3 % 4 + (q == 1 ? 50 : 0));
            shape agv{collective::all_gatherv, n, 0, c}, rsv{collective::reduce_scatterv, n, 0, c};
            std::vector<u64> m(std::size_t(n * n));
            for (std::size_t i = 0; i < m.size(); ++i) m[i] = u64((i * 5 + 1) % 7);
            shape a2av{collective::all_to_allv, n, 0, m};
            const u64 blk = 9;
            std::vector<std::int32_t> a_in(blk * u64(n)), a_out(blk * u64(n));
            for (u64 i = 0; i < a_in.size(); ++i) a_in[i] = value_of<std::int32_t>(r, i);
            std::vector<std::int32_t> g_in(agv.in_len(r)), g_out(agv.out_len(r));
            for (u64 i = 0; i < g_in.size(); ++i) g_in[i] = value_of<std::int32_t>(r, i);
            std::vector<std::int32_t> s_in(rsv.in_len(r)), s_out(rsv.out_len(r));
            for (u64 i = 0; i < s_in.size(); ++i) s_in[i] = red_value<std::int32_t>(r, i);
            std::vector<std::int32_t> v_in(a2av.in_len(r)), v_out(a2av.out_len(r));
            for (u64 i = 0; i < v_in.size(); ++i) v_in[i] = value_of<std::int32_t>(r, i);
            std::vector<chorus::future> fs;
            fs.push_back(chorus::all_to_all_async(comm, std::span<const std::int32_t>(a_in), std::span(a_out)));
            {
                const std::vector<std::size_t> tmp = sizes(c);
                fs.push_back(chorus::all_gatherv_async(comm, std::span<const std::int32_t>(g_in), std::span(g_out),
                                                       std::span<const std::size_t>(tmp)));
                fs.push_back(chorus::reduce_scatterv_async(comm, std::span<const std::int32_t>(s_in),
                                                           std::span(s_out), std::span<const std::size_t>(tmp)));
            }
            {
                const std::vector<std::size_t> tmp = sizes(m);
                fs.push_back(chorus::all_to_allv_async<chorus::direct<>>(comm, std::span<const std::int32_t>(v_in),
                                                                         std::span(v_out),
                                                                         std::span<const std::size_t>(tmp)));
            }
            try {
                for (auto& f : fs) f.get();
            } catch (const std::exception& e) {
                log.add(std::string("async threw ") + e.what());
                return;
            }
            const shape a2a{collective::all_to_all, n, blk, {}};
            auto check_copy = [&](const shape& sh, const std::vector<std::int32_t>& out, const std::string& what) {
                for (u64 j = 0; j < out.size(); ++j) {
                    int src = 0;
                    u64 index = 0;
                    sh.source(r, j, src, index);
                    if (out[j] != value_of<std::int32_t>(src, index)) {
                        log.add(what + " wrong at " + std::to_string(j));
                        return;
                    }
                }
            };
            auto check_all = [&](const std::string& how) {
                check_copy(a2a, a_out, "all_to_all" + how);
                check_copy(agv, g_out, "all_gatherv" + how);
                check_copy(a2av, v_out, "all_to_allv" + how);
                for (u64 j = 0; j < s_out.size(); ++j)
                    if (s_out[j] != red_reference<std::int32_t, chorus::sum>(n, rsv.displ(r) + j)) {
                        log.add("reduce_scatterv" + how + " wrong at " + std::to_string(j));
                        break;
                    }
            };
            check_all("_async");
            // The same calls, sync, through the public API with policy types.
            for (auto* v : {&a_out, &g_out, &s_out, &v_out}) std::fill(v->begin(), v->end(), -1);
            try {
                const std::vector<std::size_t> cs = sizes(c), ms = sizes(m);
                chorus::all_to_all<chorus::ring<>>(comm, std::span<const std::int32_t>(a_in), std::span(a_out));
                chorus::all_gatherv<chorus::direct<>>(comm, std::span<const std::int32_t>(g_in), std::span(g_out),
                                                      std::span<const std::size_t>(cs));
                chorus::reduce_scatterv<chorus::hierarchical<>>(comm, std::span<const std::int32_t>(s_in),
                                                                std::span(s_out), std::span<const std::size_t>(cs),
                                                                chorus::sum{});
                chorus::all_to_allv<ring_tiny>(comm, std::span<const std::int32_t>(v_in), std::span(v_out),
                                               std::span<const std::size_t>(ms));
            } catch (const std::exception& e) {
                log.add(std::string("the public API threw ") + e.what());
                return;
            }
            check_all("<Algo>");
            // Each policy: one async call per collective through run_case too.
            for (const named_policy& p : policies) {
                int k = 0;
                for (const shape& sh : {a2a, agv, rsv, a2av})
                    run_case<std::int32_t>(comm, p, sh, ++k % 2 == 0 && sh.in_place_ok(r), 1, log, "async", true);
            }
        });
    }
    log.report();
}

TEST_CASE("exchange collectives reject bad input naming the argument") {
    chorus::run_threads(2, [](comm_t& comm) {
        using chorus::errc;
        const int r = comm.rank();
        std::vector<int> a(8), b(8), big(64);
        const std::span<const int> ca(a);
        std::string w;
        auto expect = [&](auto&& f, const std::string& needle) {
            w.clear();
            const errc e = code_of(f, &w);
            CHECK_MESSAGE(e == errc::invalid_argument, needle << ": " << w);
            CHECK_MESSAGE(contains(w, needle), w);
        };
        // all_to_all
        expect([&] { chorus::all_to_all(comm, ca, std::span(b).first(6)); }, "`out`");
        expect([&] { chorus::all_to_all(comm, ca.first(7), std::span(b).first(7)); }, "`in`");
        expect([&] { chorus::all_to_all(comm, std::span<const int>(big).subspan(2, 8), std::span(big).first(8)); },
               "overlaps");
        // all_gatherv: counts {3, 1}
        const std::vector<std::size_t> c2{3, 1}, c3{3, 1, 2};
        const std::span<const std::size_t> s2(c2), s3(c3);
        expect([&] { chorus::all_gatherv(comm, ca.first(c2[std::size_t(r)]), std::span(b).first(4), s3); }, "`counts`");
        expect([&] { chorus::all_gatherv(comm, ca.first(2), std::span(b).first(4), s2); }, "`in`");
        expect([&] { chorus::all_gatherv(comm, ca.first(c2[std::size_t(r)]), std::span(b).first(5), s2); }, "`out`");
        expect([&] {
            chorus::all_gatherv(comm, std::span<const int>(big).subspan(r == 0 ? 1 : 0, c2[std::size_t(r)]),
                                std::span(big).first(4), s2);
        }, "overlaps");
        // reduce_scatterv
        expect([&] { chorus::reduce_scatterv(comm, ca.first(4), std::span(b).first(c2[std::size_t(r)]), s3); },
               "`counts`");
        expect([&] { chorus::reduce_scatterv(comm, ca.first(5), std::span(b).first(c2[std::size_t(r)]), s2); }, "`in`");
        expect([&] { chorus::reduce_scatterv(comm, ca.first(4), std::span(b).first(2), s2); }, "`out`");
        // all_to_allv: counts {1,2; 3,0}: rank 0 sends 3, receives 4; rank 1 sends 3, receives 2
        const std::vector<std::size_t> m{1, 2, 3, 0};
        const std::span<const std::size_t> sm(m);
        const std::size_t sends = 3, recvs = r == 0 ? 4 : 2;
        expect([&] { chorus::all_to_allv(comm, ca.first(sends), std::span(b).first(recvs), s3); }, "`counts`");
        expect([&] { chorus::all_to_allv(comm, ca.first(sends + 1), std::span(b).first(recvs), sm); }, "`in`");
        expect([&] { chorus::all_to_allv(comm, ca.first(sends), std::span(b).first(recvs + 1), sm); }, "`out`");
        expect([&] { chorus::all_to_allv(comm, std::span<const int>(b).first(sends), std::span(b).first(recvs), sm); },
               "in.size() == out.size()");
        const std::size_t huge = std::numeric_limits<std::size_t>::max();
        const std::vector<std::size_t> mo{huge, 1, 1, 1}, one_each{1, 1};
        expect([&] {
            chorus::all_to_allv(comm, ca.first(sends), std::span(b).first(recvs), std::span<const std::size_t>(mo));
        }, "overflows");
        expect([&] {
            chorus::all_gatherv(comm, ca.first(1), std::span(b).first(4),
                                std::span<const std::size_t>(static_cast<const std::size_t*>(nullptr), 2));
        }, "`counts`");
        // send / recv
        expect([&] { chorus::send(comm, ca, 2); }, "`peer`");
        expect([&] { chorus::send(comm, ca, -1); }, "`peer`");
        expect([&] { chorus::recv(comm, std::span(b), r); }, "`peer`");
        expect([&] { chorus::recv(comm, std::span<int>(static_cast<int*>(nullptr), 3), 1 - r); }, "`buf`");
        // A policy value is refused as the policy types are at compile time.
        const std::span<const std::size_t> ones(one_each);
        std::vector<affine> ain(2), aout(1);
        expect([&] {
            chorus::detail::reduce_scatterv_run(comm, chorus::policy_of<chorus::ring<>>,
                                                std::span<const affine>(ain), std::span(aout), ones, compose_op{},
                                                false);
        }, "reorders operands");
        expect([&] {
            chorus::detail::all_to_all_run(comm, chorus::policy::fixed(chorus::algorithm::ring, {-1, 256}), ca,
                                           std::span(b), false);
        }, "channel(s)");
        expect([&] {
            chorus::detail::all_gatherv_run(comm, chorus::policy::fixed(chorus::algorithm::direct, {1, 8}),
                                            ca.first(1), std::span(b).first(2), ones, false);
        }, "chunk_bytes 8");
        expect([&] {
            chorus::detail::all_to_allv_run(
                comm,
                chorus::policy::hierarchical(chorus::algorithm::tree, {1, 256}, chorus::algorithm::ring, {1, 256}),
                ca.first(2), std::span(b).first(2), std::span<const std::size_t>(m).first(4), false);
        }, "ring or direct phases");
        // Nothing above reached the backend: the communicator still works.
        std::vector<int> o(4);
        const std::vector<std::size_t> one{1, 3};
        std::vector<int> mine(one[std::size_t(r)], r + 1);
        chorus::all_gatherv(comm, std::span<const int>(mine), std::span(o), std::span<const std::size_t>(one));
        CHECK(o == std::vector<int>{1, 2, 2, 2});
    });
}

TEST_CASE("exchange collectives whose counts or policies differ between ranks fail with errc::mismatch") {
    for (bool policies_differ : {false, true}) {
        for (bool checked : {false, true}) {
            std::atomic<int> mismatches{0};
            std::vector<std::string> whats(2);
            chorus::run_threads(2, [&](comm_t& comm) {
                comm.set_timeout(20s);
                comm.set_checked(checked);
                const int r = comm.rank();
                // Counts: rank 0 says {2, 2}, rank 1 says {1, 3}: both consistent with their own sizes.
                // Policies: the same counts, rank 0 ring<>, rank 1 direct<> (another tuning).
                const std::vector<std::size_t> c = r == 0 || policies_differ ? std::vector<std::size_t>{2, 2}
                                                                             : std::vector<std::size_t>{1, 3};
                std::vector<int> in(c[std::size_t(r)], r), out(4);
                std::string w;
                const chorus::errc e = code_of(
                    [&] {
                        if (policies_differ)
                            chorus::detail::all_gatherv_run(comm, policies[r == 0 ? 0 : 1].pol,
                                                            std::span<const int>(in), std::span(out),
                                                            std::span<const std::size_t>(c), false);
                        else
                            chorus::all_gatherv(comm, std::span<const int>(in), std::span(out),
                                                std::span<const std::size_t>(c));
                    },
                    &w);
                if (e == chorus::errc::mismatch) ++mismatches;
                whats[std::size_t(r)] = w;
            });
            CAPTURE(policies_differ);
            CAPTURE(checked);
            CAPTURE(whats[0]);
            CAPTURE(whats[1]);
            CHECK(mismatches == 2);
            if (policies_differ) CHECK((contains(whats[0], "direct<") || contains(whats[1], "ring<")));
            else CHECK(contains(whats[0], "counts #"));
        }
    }
}

TEST_CASE("send and recv deliver in issue order, sizes 0 to 4 MiB") {
    const std::vector<std::size_t> lens = {0, 1, 7, 1000, 0, (std::size_t(1) << 20) + 3, 5};
    failure_log log;
    for (int n : {2, 3, 5}) {
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(60s);
            const int r = comm.rank();
            auto fill = [](int src, int dst, std::size_t k, std::size_t len) {
                std::vector<std::int32_t> v(len);
                for (std::size_t i = 0; i < len; ++i)
                    v[i] = std::int32_t(src * 1000000 + dst * 10000 + int(k) * 100 + int(i % 97));
                return v;
            };
            // rank 0 sends every message to every peer (sync to the first, async to the rest)
            if (r == 0) {
                for (int d = 1; d < n; ++d) {
                    std::vector<std::vector<std::int32_t>> bufs;
                    std::vector<chorus::future> fs;
                    for (std::size_t k = 0; k < lens.size(); ++k) bufs.push_back(fill(0, d, k, lens[k]));
                    for (std::size_t k = 0; k < lens.size(); ++k) {
                        if (d == 1) chorus::send(comm, std::span<const std::int32_t>(bufs[k]), d);
                        else fs.push_back(chorus::send_async(comm, std::span<const std::int32_t>(bufs[k]), d));
                    }
                    for (auto& f : fs) f.get();
                }
            } else {
                std::vector<std::vector<std::int32_t>> got(lens.size());
                std::vector<chorus::future> fs;
                for (std::size_t k = 0; k < lens.size(); ++k) {
                    got[k].assign(lens[k], -1);
                    if (r % 2 == 0) fs.push_back(chorus::recv_async(comm, std::span(got[k]), 0));
                    else chorus::recv(comm, std::span(got[k]), 0);
                }
                for (auto& f : fs) f.get();
                for (std::size_t k = 0; k < lens.size(); ++k)
                    if (got[k] != fill(0, r, k, lens[k]))
                        log.add("message " + std::to_string(k) + " to rank " + std::to_string(r) + " is wrong");
            }
            // a ring shift: rank r sends to r+1 and receives from r-1 (even ranks send first)
            const int to = (r + 1) % n, from = (r + n - 1) % n;
            std::vector<std::int32_t> mine = fill(r, to, 9, 33), theirs(33);
            if (r % 2 == 0) {
                chorus::send(comm, std::span<const std::int32_t>(mine), to);
                chorus::recv(comm, std::span(theirs), from);
            } else {
                chorus::recv(comm, std::span(theirs), from);
                chorus::send(comm, std::span<const std::int32_t>(mine), to);
            }
            if (theirs != fill(from, r, 9, 33)) log.add("ring shift wrong on rank " + std::to_string(r));
            // point-to-point does not disturb the collectives' sequence
            std::vector<std::int32_t> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
            for (int q = 0; q < n; ++q) x[std::size_t(q)] = r * 10 + q;
            chorus::all_to_all(comm, std::span<const std::int32_t>(x), std::span(y));
            for (int q = 0; q < n; ++q)
                if (y[std::size_t(q)] != q * 10 + r) log.add("all_to_all after send/recv wrong");
        });
    }
    log.report();
}

TEST_CASE("send and recv with different sizes or types both fail with errc::mismatch") {
    std::vector<std::string> whats(2), whats2(2);
    std::vector<chorus::errc> codes(2, chorus::errc::internal), codes2(2, chorus::errc::internal);
    std::atomic<int> after_ok{0};
    chorus::run_threads(2, [&](comm_t& comm) {
        comm.set_timeout(20s);
        const int r = comm.rank();
        std::vector<int> five(5, 1), seven(7);
        std::vector<float> fl(5);
        std::size_t ri = std::size_t(r);
        if (r == 0) codes[ri] = code_of([&] { chorus::send(comm, std::span<const int>(five), 1); }, &whats[ri]);
        else codes[ri] = code_of([&] { chorus::recv(comm, std::span(seven), 0); }, &whats[ri]);
        if (r == 0) codes2[ri] = code_of([&] { chorus::send(comm, std::span<const int>(five), 1); }, &whats2[ri]);
        else codes2[ri] = code_of([&] { chorus::recv(comm, std::span(fl), 0); }, &whats2[ri]);
        // the pair is still in step afterwards
        std::vector<int> got(5);
        if (r == 0) chorus::send(comm, std::span<const int>(five), 1);
        else chorus::recv(comm, std::span(got), 0);
        if (r == 0 || got == five) ++after_ok;
    });
    for (int r = 0; r < 2; ++r) {
        CAPTURE(whats[std::size_t(r)]);
        CAPTURE(whats2[std::size_t(r)]);
        CHECK(codes[std::size_t(r)] == chorus::errc::mismatch);
        CHECK(contains(whats[std::size_t(r)], "sends 5 elements"));
        CHECK(contains(whats[std::size_t(r)], "receives 7 elements"));
        CHECK(codes2[std::size_t(r)] == chorus::errc::mismatch);
        CHECK(contains(whats2[std::size_t(r)], "float"));
    }
    CHECK(after_ok == 2);
}

TEST_CASE("recv times out when the peer never sends, send times out when the peer never receives") {
    for (bool sender_waits : {false, true}) {
        std::vector<chorus::errc> codes(2, chorus::errc::internal);
        std::vector<std::string> whats(2);
        std::vector<double> after(2, 0);
        chorus::run_threads(2, [&](comm_t& comm) {
            const int r = comm.rank();
            comm.set_timeout(150ms);
            std::vector<int> buf(100, 3);
            const int waiter = sender_waits ? 0 : 1;
            if (r == waiter) {
                const auto t0 = steady::now();
                codes[std::size_t(r)] = code_of(
                    [&] {
                        if (sender_waits) chorus::send(comm, std::span<const int>(buf), 1);
                        else chorus::recv(comm, std::span(buf), 0);
                    },
                    &whats[std::size_t(r)]);
                after[std::size_t(r)] = seconds_since(t0);
            } else {
                // Stay alive past the peer's deadline, then come late: the
                // communicator is broken by then, so the call fails at once.
                std::this_thread::sleep_for(400ms);
                std::vector<int> late(100);
                codes[std::size_t(r)] = code_of(
                    [&] {
                        if (sender_waits) chorus::recv(comm, std::span(late), 0);
                        else chorus::send(comm, std::span<const int>(late), 1);
                    },
                    &whats[std::size_t(r)]);
            }
        });
        const std::size_t w = sender_waits ? 0 : 1, o = 1 - w;
        CAPTURE(sender_waits);
        CAPTURE(whats[w]);
        CAPTURE(whats[o]);
        CHECK(codes[w] == chorus::errc::timeout);
        CHECK(contains(whats[w], "timed out"));
        CHECK(contains(whats[w], "message #1"));
        CHECK(after[w] >= 0.14);
        CHECK(after[w] < 5.0);
        CHECK(codes[o] != chorus::errc::internal); // the late call failed too
    }
}

TEST_CASE("send and recv fail with errc::peer_failed when the peer returned") {
    for (bool is_send : {false, true}) {
        chorus::errc code = chorus::errc::internal;
        std::string what;
        double after = 0;
        chorus::run_threads(2, [&](comm_t& comm) {
            comm.set_timeout(30s);
            if (comm.rank() == 1) return; // leaves at once
            std::vector<int> buf(10);
            const auto t0 = steady::now();
            code = code_of(
                [&] {
                    if (is_send) chorus::send(comm, std::span<const int>(buf), 1);
                    else chorus::recv(comm, std::span(buf), 1);
                },
                &what);
            after = seconds_since(t0);
        });
        CAPTURE(is_send);
        CAPTURE(what);
        CHECK(code == chorus::errc::peer_failed);
        CHECK(contains(what, "rank 1 returned"));
        CHECK(after < 10.0);
    }
}
