// The LL (low-latency) protocol of the lane executor (exec/lane_ll.hpp) on
// CPU threads: the very code a GPU thread block runs, every rank a group of
// lanes. Covered: the planner (direct<> with protocol::ll, automatic and
// deterministic<> pick ll_schedule where the LL region holds the call, and
// only there; host backends never get one); every LL collective (all_reduce,
// reduce_scatter, all_gather, broadcast, reduce) on 2-8 ranks (1 rank: the
// direct<> path) x lanes {1, 2, 4, 8} x float/int8/int16/double x sum/max x
// counts 0..~1100 bytes incl. odd sizes x element-misaligned buffers
// (byte-misaligned for int8) x in/out of place, run back to back on one
// world (calls of every shape follow each other in both parities); float
// buffers misaligned by 1-3 bytes; results checked bitwise against a serial
// fold in rank order and across ranks; 60+ consecutive calls with randomly
// lagging ranks and non-LL calls in between (the slot reuse guard); a rank
// that never joins (timeout, no hang), abort while waiting, calls that
// differ (mismatch, with the peer's call reported).
#include <doctest/doctest.h>

#include <chorus/chorus.hpp>
#include "lane_test_util.hpp"
#include "test_util.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace chorus;
using chorus::detail::status;
using chorus_test::host_lanes;
using chorus_test::lane_world_host;

namespace {

policy direct_ll() { return policy_of<direct<direct_params{.proto = protocol::ll}>>; }

template <class T>
T ll_value(int r, std::uint64_t i, std::uint64_t salt) {
    if constexpr (std::is_floating_point_v<T>)
        return T(1) / T(3 + r + int((i + salt) % 7)) + T(int((i * 7 + salt) % 5)); // rounding: order matters
    else
        return T(int((std::uint64_t(r) * 5 + i * 3 + salt) % 23) - 11);
}

// CPU lanes whose lane 0, on a lagging rank, sleeps now and then before a
// barrier: a rank then stalls inside a call (between pushing and reading,
// say), so its peers run ahead into the next calls.
struct lag_lanes : chorus_test::host_lanes {
    std::mt19937* rng = nullptr; // null: no lag
    int stall_us = 0;            // > 0: lane 0 sleeps this long before every barrier
    void maybe_lag() const {
        if (stall_us > 0 && lane == 0) std::this_thread::sleep_for(std::chrono::microseconds(stall_us));
        if (rng != nullptr && lane == 0 && (*rng)() % 4 == 0)
            std::this_thread::sleep_for(std::chrono::microseconds((*rng)() % 400));
    }
    void sync() const {
        maybe_lag();
        host_lanes::sync();
    }
    template <class V>
    V share(V v) const {
        maybe_lag();
        return host_lanes::share(v);
    }
};
using ll_call = std::function<status(const lag_lanes&)>;

// Several calls per rank, run back to back by each rank's lane group (as a
// CUDA stream runs one kernel after another), then checked.
struct ll_bench {
    int n;
    lane_world_host w;
    struct stream {
        std::vector<ll_call> calls;
        std::vector<status> result;
    };
    std::vector<stream> streams;
    std::vector<std::function<void()>> checks;
    std::vector<std::shared_ptr<void>> keep; // launches, buffers, shared memory
    std::uint64_t timeout_ms = 20000;

    ll_bench(int nranks, std::uint64_t ll_bytes) : n(nranks), w(nranks), streams(std::size_t(nranks)) {
        if (ll_bytes != 0) w.enable_ll(ll_bytes);
    }

    // Plans call `coll` of policy `pol` on every rank; `count` per rank
    // (empty: `count0` everywhere); `byte_off[r]`: rank r's buffers start
    // that many bytes past an aligned base. Returns the rank launches.
    template <class T, class Op>
    void add(const policy& pol, collective coll, int root, std::uint64_t count, bool in_place, Op op,
             std::uint64_t salt, std::size_t byte_off = 0, bool expect_ll = true, std::vector<policy> pols = {},
             std::vector<std::uint64_t> counts = {}, std::function<void(int)> before = {}) {
        const std::size_t nn = std::size_t(n);
        const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
        struct rank_call {
            std::vector<unsigned char> inb, outb;
            std::vector<T> scratch;
            detail::lane_launch<T, Op, any_schedule> L{};
            detail::lane_shared<T> sh{};
            const unsigned char* in = nullptr;
            unsigned char* out = nullptr;
            std::uint64_t count = 0;
        };
        auto calls = std::make_shared<std::vector<rank_call>>(nn);
        keep.push_back(calls);
        const std::uint64_t eb = sizeof(T);
        for (int r = 0; r < n; ++r) {
            rank_call& rc = (*calls)[std::size_t(r)];
            const std::uint64_t cnt = counts.empty() ? count : counts[std::size_t(r)];
            rc.count = cnt;
            const std::uint64_t big = blocks ? cnt * nn : cnt;
            const std::uint64_t in_len = coll == collective::all_gather ? cnt : big;
            const std::size_t off = byte_off != 0 ? byte_off : std::size_t((r % 3) * eb); // element-misaligned
            rc.inb.assign(off + std::size_t(big * eb) + 64, 0xEE);
            rc.outb.assign(off + std::size_t(big * eb) + 64, 0xEE);
            unsigned char* ib = rc.inb.data() + off;
            for (std::uint64_t i = 0; i < in_len; ++i) {
                const T v = ll_value<T>(r, i, salt);
                std::memcpy(ib + i * eb, &v, eb);
            }
            rc.in = ib;
            rc.out = rc.outb.data() + off;
            if (coll == collective::broadcast) {
                rc.out = ib;
                if (r != root) std::memset(ib, 0, std::size_t(in_len * eb));
            } else if (in_place) {
                if (coll == collective::all_reduce || (coll == collective::reduce && r == root)) rc.out = ib;
                if (coll == collective::reduce_scatter) rc.out = ib + std::uint64_t(r) * cnt * eb;
                if (coll == collective::all_gather) {
                    std::memcpy(rc.out + std::uint64_t(r) * cnt * eb, ib, std::size_t(cnt * eb));
                    rc.in = rc.out + std::uint64_t(r) * cnt * eb;
                }
            }
            const policy& p = pols.empty() ? pol : pols[std::size_t(r)];
            schedule_args a{coll, r, n, root, cnt, eb, false, 0};
            a.in_place = in_place_call<T>(coll, reinterpret_cast<const T*>(rc.in), reinterpret_cast<T*>(rc.out), r,
                                          cnt);
            a.commutative = op_traits<Op>::commutative;
            a.ll_limit_bytes = w.ll_limit;
            auto& L = rc.L;
            L.sch = make_schedule(p, a);
            if (expect_ll) REQUIRE(L.sch.kind == schedule_kind::ll);
            L.world = w.view();
            L.rank = r;
            L.in = reinterpret_cast<const T*>(rc.in);
            L.out = reinterpret_cast<T*>(rc.out);
            rc.scratch.resize(std::size_t(L.sch.scratch_elems()) + 1);
            L.scratch = rc.scratch.data();
            L.sig = chorus_test::lane_signature_of<T, Op>(coll, L.sch.channels(), root, cnt, p.id());
            L.timeout_ns = timeout_ms * 1000000ull;
            L.op.set(op);
            rank_call* rcp = &rc;
            streams[std::size_t(r)].calls.push_back([rcp, r, before](const lag_lanes& hl) {
                if (before && hl.id() == 0) before(r);
                return detail::run_lane_channel(hl, rcp->L, 0, rcp->sh);
            });
        }
        const std::size_t index = streams[0].calls.size() - 1;
        checks.push_back([this, calls, coll, root, n = n, index, op, salt] {
            auto ll_value_at = [salt](int q, std::uint64_t i) { return ll_value<T>(q, i, salt); };
            const std::string what = std::string(collective_name(coll)) + " " + element_traits<T>::name() + " " +
                                     op_traits<Op>::name() + " n=" + std::to_string(n) +
                                     " count=" + std::to_string((*calls)[0].count) + " call " + std::to_string(index);
            CAPTURE(what);
            for (int r = 0; r < n; ++r) REQUIRE(streams[std::size_t(r)].result[index] == status::ok);
            const std::uint64_t cnt = (*calls)[0].count;
            using A = accum_t<T>;
            int wrong = 0;
            for (int r = 0; r < n; ++r) {
                if (coll == collective::reduce && r != root) continue;
                const rank_call& rc = (*calls)[std::size_t(r)];
                const std::uint64_t out_len = coll == collective::all_gather ? cnt * std::uint64_t(n) : cnt;
                for (std::uint64_t i = 0; i < out_len; ++i) {
                    T want{};
                    switch (coll) {
                    case collective::all_reduce:
                    case collective::reduce:
                    case collective::reduce_scatter: {
                        const std::uint64_t j = coll == collective::reduce_scatter ? std::uint64_t(r) * cnt + i : i;
                        A acc = static_cast<A>(ll_value_at(0, j));
                        for (int q = 1; q < n; ++q) acc = static_cast<A>(op(acc, static_cast<A>(ll_value_at(q, j))));
                        want = static_cast<T>(detail::finish(op, acc, n));
                        break;
                    }
                    case collective::all_gather: want = ll_value_at(int(i / cnt), i % cnt); break;
                    case collective::broadcast: want = ll_value_at(root, i); break;
                    default: break;
                    }
                    T got;
                    std::memcpy(&got, rc.out + i * eb, eb);
                    if (std::memcmp(&got, &want, eb) != 0 && ++wrong <= 5)
                        FAIL_CHECK("rank " << r << " element " << i << ": " << double(got) << " != " << double(want));
                }
                // Past the end: untouched.
                for (std::uint64_t b = out_len * eb; b < out_len * eb + 16 && coll != collective::broadcast; ++b)
                    if (rc.out + b < rc.outb.data() + rc.outb.size() && rc.out + b >= rc.outb.data() &&
                        !(coll == collective::reduce_scatter) && rc.out[b] != 0xEE && ++wrong <= 5)
                        FAIL_CHECK("rank " << r << " wrote past its output at byte " << b);
            }
            CHECK(wrong == 0);
        });
    }

    // Runs every rank's calls in order on its own group of `lanes`
    // threads; `lag`: ranks stall at random inside calls.
    void run_only(int lanes, bool lag = false, std::vector<int> stall_us = {}) {
        std::vector<std::unique_ptr<std::barrier<>>> bars;
        std::vector<std::unique_ptr<unsigned char[]>> boxes;
        std::vector<std::unique_ptr<std::mt19937>> rngs;
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
            stream& s = streams[std::size_t(r)];
            s.result.assign(s.calls.size(), status::ok);
            bars.push_back(std::make_unique<std::barrier<>>(lanes));
            boxes.push_back(std::make_unique<unsigned char[]>(16));
            rngs.push_back(std::make_unique<std::mt19937>(std::uint32_t(977 * r + 13)));
            for (int l = 0; l < lanes; ++l) {
                lag_lanes hl;
                hl.lane = l;
                hl.nlanes = lanes;
                hl.bar = bars.back().get();
                hl.box = boxes.back().get();
                hl.rng = lag ? rngs.back().get() : nullptr;
                hl.stall_us = stall_us.empty() ? 0 : stall_us[std::size_t(r)];
                threads.emplace_back([&s, hl] {
                    for (std::size_t i = 0; i < s.calls.size(); ++i) {
                        const status st = s.calls[i](hl);
                        if (hl.lane == 0) s.result[i] = st;
                    }
                });
            }
        }
        for (auto& t : threads) t.join();
    }
    // A call every rank "makes" without touching the others: its call
    // counters advance (as after a collective whose end does not need
    // every rank: none of chorus's do, but the LL guard must not rely on it).
    void skip_call() {
        for (int r = 0; r < n; ++r) {
            detail::lane_rank_area* a = w.table[std::size_t(r)];
            streams[std::size_t(r)].calls.push_back([a](const lag_lanes& hl) {
                hl.sync();
                if (hl.lane == 0)
                    for (auto& x : a->seq) ++x;
                hl.sync();
                return status::ok;
            });
        }
    }
    void run(int lanes, bool lag = false, std::vector<int> stall_us = {}) {
        run_only(lanes, lag, stall_us);
        for (auto& c : checks) c();
    }
};

} // namespace

TEST_CASE("ll: the planner picks the LL protocol where the region holds the call, and only there") {
    schedule_args a{collective::all_reduce, 0, 8, 0, 1024, 4, false, 0};
    CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::direct); // no LL region (host backends)
    a.ll_limit_bytes = 4096;
    CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::ll);
    CHECK(make_schedule(policy::automatic(), a).kind == schedule_kind::ll);
    CHECK(make_schedule(policy::automatic().deterministic_of(), a).kind == schedule_kind::ll);
    CHECK(make_schedule(policy_of<direct<>>, a).kind == schedule_kind::direct); // simple unless asked
    CHECK(make_schedule(policy_of<ring<>>, a).kind == schedule_kind::ring);
    a.count = 1025; // one element too many
    CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::direct);
    CHECK(make_schedule(policy::automatic(), a).kind != schedule_kind::ll);
    a.count = 100;
    a.elem_bytes = 12; // not 1, 2, 4, 8 or 16 bytes
    CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::direct);
    a.elem_bytes = 16;
    CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::ll);
    a.nranks = 1;
    CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::direct);
    a.nranks = 8;
    a.coll = collective::barrier;
    CHECK(make_schedule(direct_ll(), a).kind != schedule_kind::ll);
    for (collective c : {collective::reduce_scatter, collective::all_gather, collective::broadcast, collective::reduce}) {
        a.coll = c;
        CHECK(make_schedule(direct_ll(), a).kind == schedule_kind::ll);
    }
    // In-place direct<> AllReduce needs scratch: a limit too small for the
    // fallback keeps LL out (the fallback must fit wherever LL runs).
    a.coll = collective::all_reduce;
    a.in_place = true;
    a.scratch_limit_bytes = 16;
    CHECK(make_schedule(direct_ll(), a).kind != schedule_kind::ll);
    // The fallback is direct<>'s schedule of the same call, one channel.
    a.scratch_limit_bytes = 0;
    const any_schedule s = make_schedule(direct_ll(), a);
    REQUIRE(s.as_ll() != nullptr);
    CHECK(s.channels() == 1);
    CHECK(s.units() == make_direct_schedule(a, 1, 1 << 20).units());
    CHECK(s.scratch_elems() == 100);
    // Vocabulary: the policy's id and name.
    CHECK(direct_ll().id() != policy_of<direct<>>.id());
    policy p{};
    CHECK(policy_from_name("direct_ll", p));
    CHECK(p == direct_ll());
    CHECK(ll_region_bytes(8, 64 << 10) == 2ull * 8 * (2 + 16384) * 8);
    CHECK(detail::ll_flag(1) != detail::ll_flag(3));
    CHECK(detail::ll_flag(0xffffffffull) != 0);
}

TEST_CASE("ll: every collective, 1-8 ranks x lanes x types x operators x sizes, back to back on one world") {
    const std::uint64_t cap = 1200; // bytes per source
    for (int n = 1; n <= 8; ++n) {
        for (int lanes : {1, 2, 4, 8}) {
            if (n * lanes > 32 && lanes > 4) continue; // keep the thread count sane on 2 cores
            CAPTURE(n);
            CAPTURE(lanes);
            ll_bench b(n, cap);
            const bool ll = n >= 2;
            std::uint64_t salt = 0;
            int k = 0;
            for (collective c : {collective::all_reduce, collective::reduce_scatter, collective::all_gather,
                                 collective::broadcast, collective::reduce}) {
                for (std::uint64_t bytes : {0ull, 1ull, 3ull, 4ull, 7ull, 8ull, 15ull, 16ull, 17ull, 33ull, 257ull,
                                            1031ull, 1200ull}) {
                    const int root = int(++salt % std::uint64_t(n));
                    const bool in_place = (salt & 1) != 0;
                    // Rotate types and operators over the sizes: every pair meets many sizes.
                    switch (k++ % 6) {
                    case 0: b.add<float>(direct_ll(), c, root, bytes / 4, in_place, chorus::sum{}, salt, 0, ll); break;
                    case 1: b.add<std::int8_t>(direct_ll(), c, root, bytes, in_place, chorus::max{}, salt, 0, ll); break;
                    case 2:
                        b.add<std::int16_t>(direct_ll(), c, root, bytes / 2, in_place, chorus::sum{}, salt, 0, ll);
                        break;
                    case 3: b.add<double>(policy::automatic(), c, root, bytes / 8, in_place, chorus::sum{}, salt, 0, ll); break;
                    case 4: b.add<float>(direct_ll(), c, root, bytes / 4, in_place, chorus::max{}, salt, 0, ll); break;
                    default:
                        b.add<std::int8_t>(policy::automatic().deterministic_of(), c, root, bytes, in_place,
                                           chorus::sum{}, salt, 0, ll);
                        break;
                    }
                }
            }
            b.run(lanes);
        }
    }
}

TEST_CASE("ll: float buffers misaligned by 1-3 bytes") {
    for (int n : {2, 3, 8}) {
        ll_bench b(n, 4096);
        std::uint64_t salt = 0;
        for (std::size_t off : {1u, 2u, 3u, 5u})
            for (collective c : {collective::all_reduce, collective::reduce_scatter, collective::all_gather,
                                 collective::broadcast, collective::reduce})
                for (std::uint64_t count : {1ull, 5ull, 67ull, 1024ull}) {
                    ++salt;
                    b.add<float>(direct_ll(), c, int(salt % std::uint64_t(n)), count, false, chorus::sum{}, salt, off);
                }
        b.run(3);
    }
}

TEST_CASE("ll: 60+ consecutive calls with randomly lagging ranks and non-LL calls in between (slot reuse)") {
    for (int n : {2, 5, 8}) {
        CAPTURE(n);
        for (int lanes : {1, 4}) {
            ll_bench b(n, 2048);
            b.timeout_ms = 5000;
            std::mt19937 rng(std::uint32_t(1234 + n * 10 + lanes));
            // Per rank and call, a random delay before it starts: any rank may
            // fall a call or more behind, so writers run ahead of readers and
            // wait for their acknowledgements.
            auto delays = std::make_shared<std::vector<std::vector<int>>>(std::size_t(n));
            const int calls = 72;
            for (auto& d : *delays) {
                d.resize(calls);
                for (int& x : d) x = int(rng() % 6 == 0 ? rng() % 2000 : rng() % 50);
            }
            auto next = std::make_shared<std::vector<int>>(std::size_t(n), 0);
            auto lag = [delays, next](int r) {
                const int i = (*next)[std::size_t(r)]++;
                std::this_thread::sleep_for(std::chrono::microseconds((*delays)[std::size_t(r)][std::size_t(i)]));
            };
            for (int i = 0; i < calls; ++i) {
                const std::uint64_t salt = std::uint64_t(i) * 31 + 7;
                const std::uint64_t count = (salt * 13) % 513; // 0..512 floats, both parities see every size
                if (i % 9 == 4) // a non-LL call: the regions' history skips a call number
                    b.add<std::int32_t>(policy_of<ring<>>, collective::all_reduce, 0, count, false, chorus::sum{}, salt,
                                        0, false, {}, {}, lag);
                else if (i % 3 == 1)
                    // direct<> Reduce to rank 0: a rank other than the root
                    // leaves it once the root has read its input, so it may
                    // start the next LL call while a third rank still reads
                    // the LL call before (the case the reuse guard is for).
                    b.add<std::int32_t>(policy_of<direct<>>, collective::reduce, 0, count, false, chorus::sum{}, salt,
                                        0, false, {}, {}, lag);
                else if (i % 7 == 3)
                    b.add<std::int16_t>(direct_ll(), collective::broadcast, i % n, count, false, chorus::sum{}, salt,
                                        0, true, {}, {}, lag);
                else
                    b.add<float>(direct_ll(), collective::all_reduce, 0, count, (i & 1) != 0, chorus::sum{}, salt, 0,
                                 true, {}, {}, lag);
            }
            b.run(lanes, true);
        }
    }
}

TEST_CASE("ll: a writer two calls ahead waits for the reader of its slot (the reuse guard)") {
    // Rank 1 stalls inside every call (before each barrier, so between its
    // push and its reads too); rank 0 runs call 1, a call that does not
    // need rank 1, and call 3, which writes the same slots (parity 1) of
    // rank 1's region that rank 1 is still reading for call 1. Without the
    // guard rank 1 would find call 3's words there and time out.
    // Not under ThreadSanitizer: no collective lets a rank run two calls
    // ahead of a peer (finishing call 2 needs every peer in it), so the
    // descriptors' two parities (lane_rank_area::desc) are not built for
    // it, and rank 0's call-3 descriptor races with rank 1's read of its
    // call-1 one, by the test's construction. The LL slots it checks run
    // in the Release and ASan builds.
    if (chorus_test::under_tsan) return;
    for (int lanes : {1, 3}) {
        ll_bench b(2, 1024);
        b.timeout_ms = 5000;
        for (int rep = 0; rep < 3; ++rep) {
            b.add<float>(direct_ll(), collective::all_reduce, 0, 200, false, chorus::sum{}, 11 + std::uint64_t(rep));
            b.skip_call();
            b.add<std::int8_t>(direct_ll(), collective::all_gather, 0, 700, false, chorus::sum{}, 21 + std::uint64_t(rep));
        }
        b.run(lanes, false, {0, 3000});
    }
}

namespace {
// One LL AllReduce of 100 floats on `n` ranks; rank `absent` never joins.
std::vector<status> ll_run_missing(lane_world_host& w, int n, int absent, int lanes, std::uint64_t timeout_ms,
                                   std::function<void()> meanwhile = {}) {
    std::vector<std::vector<float>> in(std::size_t(n), std::vector<float>(100, 1.0f)), out = in;
    std::vector<detail::lane_launch<float, chorus::sum, any_schedule>> L{std::size_t(n)};
    for (int r = 0; r < n; ++r) {
        schedule_args a{collective::all_reduce, r, n, 0, 100, 4, false, 0};
        a.ll_limit_bytes = w.ll_limit;
        auto& l = L[std::size_t(r)];
        l.sch = make_schedule(direct_ll(), a);
        REQUIRE(l.sch.kind == schedule_kind::ll);
        l.world = w.view();
        l.rank = r;
        l.in = in[std::size_t(r)].data();
        l.out = out[std::size_t(r)].data();
        l.sig.count = 100;
        l.sig.elem_bytes = 4;
        l.sig.shape = detail::call_signature::make_shape(collective::all_reduce, 1, 0);
        l.sig.algo_id = direct_ll().id();
        l.timeout_ns = timeout_ms * 1000000ull;
        l.op.set(chorus::sum{});
    }
    std::vector<std::unique_ptr<chorus_test::lane_group<float>>> groups;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        if (r != absent) chorus_test::start_lane_groups(L[std::size_t(r)], lanes, groups, threads);
    if (meanwhile) meanwhile();
    for (auto& t : threads) t.join();
    std::vector<status> st(std::size_t(n), status::ok);
    for (const auto& g : groups) st[std::size_t(g->rank)] = g->st;
    return st;
}
} // namespace

TEST_CASE("ll: a rank that never joins makes the others time out, naming it; abort stops the wait") {
    for (int lanes : {1, 4}) {
        lane_world_host w(4);
        w.enable_ll(1024);
        const auto t0 = std::chrono::steady_clock::now();
        const auto st = ll_run_missing(w, 4, 2, lanes, 200);
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)); // bounded: no hang
        // The first to time out sets the abort word; the others may see
        // that first (aborted), as with the flag protocol.
        int timeouts = 0;
        for (int r : {0, 1, 3}) {
            const status s = st[std::size_t(r)];
            CHECK((s == status::timeout || s == status::aborted));
            CHECK(w.faults[std::size_t(r)].code == int(s));
            if (s == status::timeout) {
                ++timeouts;
                CHECK(w.faults[std::size_t(r)].peer == 2);
            }
        }
        CHECK(timeouts >= 1);
        CHECK(w.abort == 1); // a failed rank sets the abort word
    }
    // Abort while waiting: a 60 s deadline, the abort word set after 50 ms.
    lane_world_host w(3);
    w.enable_ll(1024);
    const auto t0 = std::chrono::steady_clock::now();
    const auto st = ll_run_missing(w, 3, 0, 2, 60000, [&w] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        w.set_abort();
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(50)); // far below the 60 s deadline
    CHECK(st[1] == status::aborted);
    CHECK(st[2] == status::aborted);
}

TEST_CASE("ll: calls that differ are a mismatch, with the peer's call reported") {
    // Counts differ (both fit): the headers' fingerprints differ.
    for (std::uint64_t other : {50ull, 99ull, 101ull, 400ull}) {
        CAPTURE(other);
        ll_bench b(3, 4096);
        b.timeout_ms = 5000;
        b.add<float>(direct_ll(), collective::all_reduce, 0, 100, false, chorus::sum{}, 1, 0, true, {}, {100, other, 100});
        b.run_only(2);
        for (int r = 0; r < 3; ++r) CHECK(b.streams[std::size_t(r)].result[0] == status::mismatch);
        const auto& f = b.w.faults[0];
        CHECK(f.code == int(status::mismatch));
        CHECK(f.peer == 1);
        CHECK(f.theirs.count == other);
    }
    // LL on one rank, direct<> (simple protocol) on another: the LL rank
    // sees the peer registered a different call (no header ever comes).
    {
        ll_bench b(2, 4096);
        b.timeout_ms = 5000;
        b.add<float>(direct_ll(), collective::all_reduce, 0, 100, false, chorus::sum{}, 1, 0, false,
                     {direct_ll(), policy_of<direct<>>});
        b.run_only(2);
        CHECK(b.streams[0].result[0] == status::mismatch); // not a timeout: found before the deadline
        CHECK(b.streams[1].result[0] != status::ok);
    }
}

TEST_CASE("ll: host backends run direct<> with protocol::ll as direct<> (no LL region)") {
    using ll_policy = direct<direct_params{.proto = protocol::ll}>;
    for (int n : {1, 2, 4}) {
        std::vector<std::vector<float>> got{std::size_t(n)};
        run_threads(n, [&](communicator<threads>& comm) {
            std::vector<float> v(100, float(comm.rank() + 1));
            all_reduce<ll_policy>(comm, std::span<float>(v), chorus::sum{});
            std::vector<float> g(100 * std::size_t(n));
            all_gather<ll_policy>(comm, std::span<const float>(v), std::span<float>(g));
            broadcast<ll_policy>(comm, std::span<float>(v), 0);
            got[std::size_t(comm.rank())] = v;
            CHECK(comm.last_call().algorithm == std::string("direct"));
        });
        for (const auto& v : got)
            for (float x : v) CHECK(x == float(n * (n + 1) / 2));
    }
}
