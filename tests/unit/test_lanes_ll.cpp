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

#include <algorithm>
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

// Several calls per rank, run back to back by each rank's lane group (as a
// CUDA stream runs one kernel after another), then checked.
struct ll_bench {
    int n;
    lane_world_host w;
    std::vector<chorus_test::lane_stream> streams;
    std::vector<std::function<void()>> checks;
    std::vector<std::shared_ptr<void>> keep; // launches, buffers, shared memory
    std::uint64_t timeout_ms = 20000;

    ll_bench(int nranks, std::uint64_t ll_bytes) : n(nranks), w(nranks), streams(std::size_t(nranks)) {
        for (int r = 0; r < n; ++r) streams[std::size_t(r)].rank = r;
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
            L.sig.count = cnt;
            L.sig.elem_bytes = eb;
            L.sig.shape = detail::call_signature::make_shape(coll, L.sch.channels(), root);
            L.sig.type_id = detail::type_hash<T>();
            L.sig.op_id = detail::type_hash<Op>();
            L.sig.algo_id = p.id();
            L.timeout_ns = timeout_ms * 1000000ull;
            L.op.set(op);
            rank_call* rcp = &rc;
            streams[std::size_t(r)].calls.push_back([rcp, r, before](const host_lanes& hl) {
                if (before && hl.id() == 0) before(r);
                return detail::run_lane_channel(hl, rcp->L, 0, rcp->sh);
            });
        }
        const std::size_t index = streams[0].calls.size() - 1;
        checks.push_back([this, calls, coll, root, n = n, eb, index, op, salt] {
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

    void run(int lanes) {
        chorus_test::run_lane_streams(streams, lanes);
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
