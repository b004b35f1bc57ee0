// The ring schedules and the flag protocol, checked by simulation without
// threads: every rank runs the real schedule (algo/ring.hpp) step by step
// under the real wait rules (exec/rank_program.hpp's order: waits, data,
// post), in many random interleavings, over symbolic data that records
// which ranks' inputs each element has absorbed and how often. At every
// state, any two units that could run concurrently are checked for
// conflicting buffer accesses, and no rank may touch a buffer of a rank
// that has already returned.
#include <chorus/chorus.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace chorus;

namespace {

// A symbolic element: per-rank contribution counts (7 bits per rank, n <= 9),
// the source index it belongs to, and how many epilogues were applied.
struct sym {
    std::uint64_t counts = 0;
    std::uint64_t index = 0; // 0 = garbage / uninitialised
    int finishes = 0;
    bool operator==(const sym&) const = default;
};

struct buffers {
    std::vector<sym> in, out, scratch;
};

struct footprint {
    int rank;
    where loc;
    std::uint64_t begin, end;
};

bool overlap(const footprint& a, const footprint& b) {
    return a.rank == b.rank && a.loc == b.loc && a.begin < b.end && b.begin < a.end && a.loc != where::none;
}

// Runs the schedules policy `pol` makes (exec/rank_program.hpp's interface):
// any_schedule, what every executor runs.
struct sim {
    using schedule = any_schedule;
    collective coll;
    bool in_place;
    int n, root, channels;
    std::uint64_t count;
    std::vector<schedule> sch;
    std::vector<buffers> buf;
    // per (rank, channel): units done; started / returned flags per rank
    std::vector<std::vector<std::uint64_t>> done;
    std::vector<std::uint64_t> next; // next unit index, interleaved over channels: unit p of channel c is p*C + c
    std::vector<int> state;          // 0 not started, 1 running, 2 final waits, 3 returned
    std::string error;

    sim(const policy& pol, collective c, bool ip, int n_, int root_, std::uint64_t cnt, int node_size = 0)
        : coll(c), in_place(ip), n(n_), root(root_), count(cnt) {
        for (int r = 0; r < n; ++r) {
            const bool ip_r = in_place && (coll != collective::reduce || r == root) && coll != collective::broadcast;
            sch.push_back(make_schedule(pol, schedule_args{coll, r, n, root, count, 4, ip_r, node_size}));
        }
        channels = sch[0].channels();
        const std::uint64_t big = (coll == collective::all_gather || coll == collective::reduce_scatter)
                                      ? count * std::uint64_t(n)
                                      : count;
        buf.resize(std::size_t(n));
        for (int r = 0; r < n; ++r) {
            auto& b = buf[std::size_t(r)];
            const std::uint64_t in_len = coll == collective::all_gather ? count : big;
            const std::uint64_t out_len = coll == collective::reduce_scatter ? count : big;
            b.in.resize(in_len);
            b.out.resize(out_len);
            b.scratch.resize(sch[std::size_t(r)].scratch_elems());
            for (std::uint64_t i = 0; i < in_len; ++i) {
                const std::uint64_t idx = coll == collective::all_gather ? std::uint64_t(r) * count + i : i;
                b.in[i] = {std::uint64_t(1) << (7 * r), idx + 1, 0};
            }
            if (in_place && (coll == collective::all_reduce || (coll == collective::reduce && r == root)))
                b.out = b.in;
            if (in_place && coll == collective::all_gather)
                for (std::uint64_t i = 0; i < count; ++i) b.out[std::uint64_t(r) * count + i] = b.in[i];
            if (coll == collective::broadcast) // broadcast works in `out`; only the root's is meaningful
                for (std::uint64_t i = 0; i < out_len; ++i)
                    b.out[i] = r == root ? sym{std::uint64_t(1) << (7 * r), i + 1, 0} : sym{};
        }
        done.assign(std::size_t(n), std::vector<std::uint64_t>(std::size_t(channels), 0));
        next.assign(std::size_t(n), 0);
        state.assign(std::size_t(n), 0);
    }

    std::uint64_t total_units(int r) const { return sch[std::size_t(r)].units() * std::uint64_t(channels); }

    // In-place calls alias `in` and `out` the way the API defines it:
    // all_reduce / reduce (at the root): in == out; all_gather: in is block
    // r of out; reduce_scatter: out is block r of in.
    operand resolve(operand o) const {
        if (!in_place || o.loc == where::none || o.loc == where::scratch) return o;
        const std::uint64_t blk = std::uint64_t(o.rank) * count;
        switch (coll) {
        case collective::all_reduce: if (o.loc == where::in) o.loc = where::out; break;
        case collective::reduce: if (o.loc == where::in && o.rank == root) o.loc = where::out; break;
        case collective::all_gather: if (o.loc == where::in) { o.loc = where::out; o.offset += blk; } break;
        case collective::reduce_scatter: if (o.loc == where::out) { o.loc = where::in; o.offset += blk; } break;
        default: break;
        }
        return o;
    }
    std::vector<sym>& vec(const operand& o) {
        auto& b = buf[std::size_t(o.rank)];
        return o.loc == where::in ? b.in : o.loc == where::out ? b.out : b.scratch;
    }

    // The unit rank r would run next, with its channel.
    step peek(int r, int& c) const {
        const std::uint64_t q = next[std::size_t(r)];
        c = int(q % std::uint64_t(channels));
        const std::uint64_t p = q / std::uint64_t(channels);
        return sch[std::size_t(r)].unit(c, p);
    }

    // A wait_spec as exec/rank_program.hpp's wait_for expands it.
    bool wait_ok(const wait_spec& w, int self, int c) const {
        if (w.peer < 0) return true;
        const int span = w.span > 1 ? int(w.span) : 1;
        for (int i = 0; i < span; ++i) {
            const int peer = w.peer + i * int(w.stride);
            if (span > 1 && peer == self) continue;
            if (peer < 0 || peer >= n) return false; // never satisfiable: reported as a deadlock
            if (state[std::size_t(peer)] == 0 || done[std::size_t(peer)][std::size_t(c)] < w.units) return false;
        }
        return true;
    }
    bool waits_ok(const step& s, int self, int c) const {
        for (const auto& w : s.waits)
            if (!wait_ok(w, self, c)) return false;
        return true;
    }

    bool final_ok(int r) const {
        const wait_spec w = sch[std::size_t(r)].final_wait();
        for (int c = 0; c < channels; ++c)
            if (!wait_ok(w, r, c)) return false;
        return true;
    }

    bool enabled(int r, step* s_out = nullptr, int* c_out = nullptr) const {
        switch (state[std::size_t(r)]) {
        case 0: return true;
        case 1: {
            int c = 0;
            const step s = peek(r, c);
            if (s_out) *s_out = s;
            if (c_out) *c_out = c;
            return waits_ok(s, r, c);
        }
        case 2: return final_ok(r);
        default: return false;
        }
    }

    void add_fp(std::vector<footprint>& v, operand o, std::uint64_t cnt) const {
        o = resolve(o);
        if (o.loc != where::none && cnt != 0) v.push_back({o.rank, o.loc, o.offset, o.offset + cnt});
    }

    // Conflicts between the enabled units of different ranks.
    void check_concurrency() {
        std::vector<std::vector<footprint>> rd(static_cast<std::size_t>(n)), wr(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
            step s{};
            if (state[std::size_t(r)] != 1 || !enabled(r, &s)) continue;
            if (s.fan_in >= 2) {
                for (int q = 0; q < int(s.fan_in); ++q)
                    add_fp(rd[std::size_t(r)], {s.source_rank(q), s.src0.loc, s.src0.offset}, s.count);
            } else {
                add_fp(rd[std::size_t(r)], s.src0, s.count);
                add_fp(rd[std::size_t(r)], s.src1, s.count);
            }
            add_fp(wr[std::size_t(r)], s.dst, s.count);
            add_fp(wr[std::size_t(r)], s.dst2, s.count);
        }
        for (int a = 0; a < n; ++a)
            for (int b = 0; b < n; ++b) {
                if (a == b) continue;
                for (const auto& w : wr[std::size_t(a)]) {
                    for (const auto& x : rd[std::size_t(b)])
                        if (overlap(w, x)) error = "rank " + std::to_string(a) + " may write what rank " + std::to_string(b) + " reads concurrently";
                    for (const auto& x : wr[std::size_t(b)])
                        if (overlap(w, x)) error = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " may write the same elements concurrently";
                }
            }
    }

    void apply(int r) {
        int& st = state[std::size_t(r)];
        if (st == 0) {
            st = total_units(r) ? 1 : 2;
            return;
        }
        if (st == 2) {
            st = 3;
            return;
        }
        int c = 0;
        step s = peek(r, c);
        const operand fan_src = s.src0; // fan-in sources are named before aliasing
        const bool writes_peer = s.dst.rank != r && s.dst.loc != where::none && s.count != 0;
        s.dst = resolve(s.dst);
        s.src0 = resolve(s.src0);
        s.src1 = resolve(s.src1);
        s.dst2 = resolve(s.dst2);
        if (writes_peer) error = "a step's dst is another rank's buffer";
        std::vector<operand> srcs;
        if (s.fan_in >= 2) {
            for (int q = 0; q < int(s.fan_in); ++q)
                srcs.push_back(resolve({fan_src.rank + q * int(s.fan_stride), fan_src.loc, fan_src.offset}));
        } else {
            srcs.push_back(s.src0);
            if (s.src1.loc != where::none) srcs.push_back(s.src1);
        }
        std::vector<const operand*> all{&s.dst, &s.dst2};
        for (const operand& o : srcs) all.push_back(&o);
        for (const operand* o : all) {
            if (o->loc == where::none || s.count == 0) continue;
            if (o->rank < 0 || o->rank >= n) {
                error = "operand names rank " + std::to_string(o->rank);
                return;
            }
            if (state[std::size_t(o->rank)] == 0) error = "rank " + std::to_string(r) + " touches a buffer of rank " + std::to_string(o->rank) + " before it registered them";
            if (state[std::size_t(o->rank)] == 3) error = "rank " + std::to_string(r) + " touches a buffer of returned rank " + std::to_string(o->rank);
            if (o->offset + s.count > vec(*o).size()) {
                error = "operand out of bounds";
                return;
            }
        }
        if (s.count != 0 && error.empty()) {
            std::vector<sym> tmp(s.count);
            for (std::uint64_t i = 0; i < s.count; ++i) {
                sym v = vec(srcs[0])[srcs[0].offset + i];
                for (std::size_t q = 1; q < srcs.size(); ++q) {
                    const sym& b = vec(srcs[q])[srcs[q].offset + i];
                    if (b.index != v.index || v.index == 0) error = "combined elements of different indices or garbage: " + std::to_string(v.index) + " vs " + std::to_string(b.index) + " src rank " + std::to_string(srcs[q].rank) + " loc " + std::to_string(int(srcs[q].loc)) + " first loc " + std::to_string(int(srcs[0].loc));
                    if (b.finishes != 0 || v.finishes != 0) error = "combined a finished element";
                    v.counts += b.counts;
                }
                if (s.finish) ++v.finishes;
                tmp[i] = v;
            }
            auto& d = vec(s.dst);
            for (std::uint64_t i = 0; i < s.count; ++i) d[s.dst.offset + i] = tmp[i];
            if (s.dst2.loc != where::none)
                for (std::uint64_t i = 0; i < s.count; ++i) vec(s.dst2)[s.dst2.offset + i] = tmp[i];
        }
        ++done[std::size_t(r)][std::size_t(c)];
        if (++next[std::size_t(r)] == total_units(r)) st = 2;
    }

    // Runs to completion picking enabled ranks at random; false on deadlock.
    bool run(std::mt19937& rng) {
        for (;;) {
            std::vector<int> en;
            bool all_done = true;
            for (int r = 0; r < n; ++r) {
                if (state[std::size_t(r)] != 3) all_done = false;
                if (enabled(r)) en.push_back(r);
            }
            if (all_done) return true;
            if (en.empty()) {
                error = "deadlock";
                return false;
            }
            check_concurrency();
            if (!error.empty()) return false;
            apply(en[std::uniform_int_distribution<std::size_t>(0, en.size() - 1)(rng)]);
            if (!error.empty()) return false;
        }
    }

    std::string verify() const {
        const std::uint64_t all = [&] {
            std::uint64_t m = 0;
            for (int r = 0; r < n; ++r) m += std::uint64_t(1) << (7 * r);
            return m;
        }();
        const bool reducing = coll == collective::all_reduce || coll == collective::reduce_scatter || coll == collective::reduce;
        for (int r = 0; r < n; ++r) {
            const auto& b = buf[std::size_t(r)];
            if (coll == collective::reduce && r != root) continue;
            const std::uint64_t out_len = coll == collective::reduce_scatter ? count : b.out.size();
            for (std::uint64_t i = 0; i < out_len; ++i) {
                const sym& v = (in_place && coll == collective::reduce_scatter) ? b.in[std::uint64_t(r) * count + i] : b.out[i];
                std::uint64_t want_index = i + 1, want_counts = all;
                if (coll == collective::reduce_scatter) want_index = std::uint64_t(r) * count + i + 1;
                if (coll == collective::all_gather) want_counts = std::uint64_t(1) << (7 * (i / (count ? count : 1)));
                if (coll == collective::broadcast) want_counts = std::uint64_t(1) << (7 * root);
                if (v.index != want_index) return "rank " + std::to_string(r) + " out[" + std::to_string(i) + "] has the wrong element";
                if (v.counts != want_counts) return "rank " + std::to_string(r) + " out[" + std::to_string(i) + "] has the wrong contributions";
                if (v.finishes != (reducing ? 1 : 0)) return "epilogue applied " + std::to_string(v.finishes) + " times";
            }
        }
        return "";
    }
};

} // namespace

// Every collective x n = 1..9 x counts x roots x in place, sampled
// interleavings, for each policy of `policies` (run-time values: one sim
// serves them all).
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
                        for (const policy& pol : policies) {
                            sim s(pol, coll, in_place, n, root == 2 ? n - 1 : root, count, node_size);
                            const bool ok = s.run(rng);
                            ++runs;
                            const std::string algo = detail::policy_text(pol), coll_name = collective_name(coll);
                            CAPTURE(algo);
                            CAPTURE(coll_name);
                            CAPTURE(n);
                            CAPTURE(s.channels);
                            CAPTURE(count);
                            CAPTURE(root);
                            CAPTURE(in_place);
                            CAPTURE(node_size);
                            REQUIRE_MESSAGE(ok, s.error);
                            const std::string v = s.verify();
                            REQUIRE_MESSAGE(v.empty(), v);
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
    // n (and L < n), Intra's flat schedule everywhere else.
    std::mt19937 rng(4242);
    int runs = 0;
    const algorithm r = algorithm::ring, d = algorithm::direct;
    for (int L : {1, 2, 3, 4}) {
        CAPTURE(L);
        runs += simulate_policies(rng,
                                  {hier(r, 1, 16, r, 1, 16), hier(r, 2, 16, d, 1, 4096), hier(d, 1, 16, r, 3, 4096),
                                   hier(d, 2, 4096, d, 1, 16)},
                                  L);
    }
    MESSAGE("simulated runs: " << runs);
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
    constexpr policy H = policy_of<hierarchical<ring<{2, 64}>, direct<{1, 16}>>>;
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
    static_assert(policy_of<ring<{3, 4096}>> == policy::fixed(algorithm::ring, {3, 4096}));
    static_assert(policy_of<ring<>> == policy::fixed(algorithm::ring));
    static_assert(policy_of<direct<>> == policy::fixed(algorithm::direct, {1, 1 << 20}));
    static_assert(policy_of<tree<>> == policy::fixed(algorithm::tree, {1, 128 << 10}));
    static_assert(policy_of<recursive_doubling<{2, 64}>> == policy::fixed(algorithm::recursive_doubling, {2, 64}));
    static_assert(policy_of<rabenseifner<>> == policy::fixed(algorithm::rabenseifner));
    static_assert(policy_of<two_shot<{4, 16}>> == policy::fixed(algorithm::two_shot, {4, 16}));
    static_assert(policy_of<hierarchical<>> ==
                  policy::hierarchical(algorithm::ring, {1, 256 << 10}, algorithm::ring, {1, 256 << 10}));
    static_assert(policy_of<hierarchical<direct<{2, 64}>, ring<{1, 32}>>> ==
                  policy::hierarchical(algorithm::direct, {2, 64}, algorithm::ring, {1, 32}));
    static_assert(policy_of<automatic> == policy::automatic() && policy_of<automatic>.choose);
    static_assert(policy_of<deterministic<>> == policy::automatic().deterministic_of());
    static_assert(policy_of<deterministic<tree<{2, 64}>>> ==
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
    const policy all[] = {policy_of<ring<>>, policy_of<ring<{2, 256 << 10}>>, policy_of<ring<{1, 128 << 10}>>,
                          policy_of<direct<>>, policy_of<tree<>>, policy_of<recursive_doubling<>>,
                          policy_of<rabenseifner<>>, policy_of<two_shot<>>, policy_of<hierarchical<>>,
                          policy_of<hierarchical<direct<>, ring<>>>, policy_of<automatic>, policy_of<deterministic<>>,
                          policy_of<deterministic<ring<>>>};
    for (const policy& a : all)
        for (const policy& b : all) CHECK((a.id() == b.id()) == (a == b));
    CHECK(detail::policy_text(policy_of<hierarchical<direct<{2, 64}>, ring<>>>) ==
          "hierarchical<direct<channels=2,chunk_bytes=64>,ring<channels=1,chunk_bytes=262144>>");
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
