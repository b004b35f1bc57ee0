// The GPU executor's code on a CPU. exec/lane_env.hpp's run_lane_channel is
// the body of every thread block of the GPU kernel (kernels/collective.cuh);
// here the very same function runs with each lane a CPU thread, several
// lanes per (rank, channel) and a barrier in place of __syncthreads. So the
// lane-parallel reduce-copy (vector interior, scalar head and tail, fan-in,
// two destinations), the descriptor exchange, the first-contact call check,
// the flag protocol, the deadline and the abort flag are all exercised
// without a GPU, on the same schedules the kernels run.
#include <doctest/doctest.h>

#include <chorus/chorus.hpp>
#include "test_util.hpp"

#include <chorus/backend/gpu_checks.hpp>
#include <chorus/exec/lane_env.hpp>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace chorus;
using chorus::detail::status;

namespace {

struct host_lanes {
    int lane = 0;
    int nlanes = 1;
    std::barrier<>* bar = nullptr;
    unsigned char* box = nullptr; // 16 bytes shared by the group

    int id() const { return lane; }
    int count() const { return nlanes; }
    void sync() const { bar->arrive_and_wait(); }
    template <class V>
    V share(V v) const {
        static_assert(sizeof(V) <= 16);
        bar->arrive_and_wait();
        if (lane == 0) std::memcpy(box, &v, sizeof(V));
        bar->arrive_and_wait();
        V r;
        std::memcpy(&r, box, sizeof(V));
        return r;
    }
    std::uint64_t now_ns() const {
        return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
    }
    void relax() const { std::this_thread::yield(); }
};

// What one rank's memory looks like to its peers, kept across collectives
// (the counters in the areas continue, as on a device).
struct lane_world_host {
    std::vector<std::unique_ptr<detail::lane_rank_area>> areas;
    std::vector<detail::lane_rank_area*> table;
    std::uint32_t abort = 0;
    std::vector<detail::lane_fault> faults;
    explicit lane_world_host(int n) : faults(static_cast<std::size_t>(n)) {
        for (int r = 0; r < n; ++r) {
            areas.push_back(std::make_unique<detail::lane_rank_area>());
            table.push_back(areas.back().get());
        }
    }
    detail::lane_world view() { return {table.data(), &abort, faults.data(), int(table.size())}; }
};

// Runs one collective: every (rank, channel) is a group of `lanes` threads.
// `present[r] == false`: rank r never joins (its peers must time out).
template <class T, class Op, class Algo>
std::vector<status> run_lanes(lane_world_host& w, collective coll, int root, std::uint64_t count,
                              const std::vector<const T*>& in, const std::vector<T*>& out, int lanes, Op op,
                              std::vector<std::vector<T>>& scratch, std::uint64_t timeout_ms = 20000,
                              const std::vector<bool>& present = {}, const std::vector<std::uint64_t>& counts = {},
                              int node_size = 0) {
    const int n = int(in.size());
    std::vector<status> result(std::size_t(n), status::ok);
    std::vector<std::thread> threads;
    struct group {
        std::unique_ptr<std::barrier<>> bar;
        alignas(16) unsigned char box[16];
        detail::lane_shared<T> sh;
    };
    std::vector<std::unique_ptr<group>> groups;
    std::vector<detail::lane_launch<T, Op, decltype(Algo::make_schedule(schedule_args{}))>> launches(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        const std::uint64_t cnt = counts.empty() ? count : counts[std::size_t(r)];
        schedule_args a{coll, r, n, root, cnt, sizeof(T), false, node_size};
        a.in_place = in_place_call<T>(coll, in[std::size_t(r)], out[std::size_t(r)], r, cnt);
        auto& L = launches[std::size_t(r)];
        L.sch = Algo::make_schedule(a);
        L.world = w.view();
        L.rank = r;
        L.in = in[std::size_t(r)];
        L.out = out[std::size_t(r)];
        scratch[std::size_t(r)].resize(std::size_t(L.sch.scratch_elems()) + 1);
        L.scratch = scratch[std::size_t(r)].data();
        L.sig = {cnt, std::uint64_t(coll) | std::uint64_t(L.sch.channels()) << 8 | std::uint64_t(root) << 32, sizeof(T),
                 1, 2};
        L.timeout_ns = timeout_ms * 1000000ull;
        L.op = op;
    }
    for (int r = 0; r < n; ++r) {
        if (!present.empty() && !present[std::size_t(r)]) continue;
        const int channels = launches[std::size_t(r)].sch.channels();
        for (int c = 0; c < channels; ++c) {
            groups.push_back(std::make_unique<group>());
            group& g = *groups.back();
            g.bar = std::make_unique<std::barrier<>>(lanes);
            for (int l = 0; l < lanes; ++l)
                threads.emplace_back([&, r, c, l, gp = &g] {
                    host_lanes hl{l, lanes, gp->bar.get(), gp->box};
                    const status st = detail::run_lane_channel(hl, launches[std::size_t(r)], c, gp->sh);
                    if (l == 0 && st != status::ok) result[std::size_t(r)] = st;
                });
        }
    }
    for (auto& t : threads) t.join();
    return result;
}

template <class T>
T value_of(int r, std::uint64_t i) {
    return T((r * 5 + i * 3) % 13 + 1);
}

// All five collectives on `n` ranks, checked element by element against a
// serial reduction in rank order; buffers start at rank-dependent offsets
// so the vector interiors differ between ranks.
template <class T, class Op, class Algo>
void check_collective(collective coll, int n, std::uint64_t count, int lanes, bool in_place, Op op,
                      lane_world_host* reuse = nullptr, int node_size = 0) {
    lane_world_host fresh(reuse ? 0 : n);
    lane_world_host& w = reuse ? *reuse : fresh;
    const int root = n - 1;
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    const std::uint64_t in_len = coll == collective::all_gather ? count : big;
    const std::uint64_t out_len = coll == collective::reduce_scatter ? count : big;
    std::vector<std::vector<T>> inb(static_cast<std::size_t>(n)), outb(static_cast<std::size_t>(n)), scratch(static_cast<std::size_t>(n));
    std::vector<const T*> in(static_cast<std::size_t>(n));
    std::vector<T*> out(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        const std::size_t off = std::size_t(r % 3); // misalign by 0, 1, 2 elements
        inb[std::size_t(r)].assign(off + big + 8, T(0));
        outb[std::size_t(r)].assign(off + big + 8, T(0));
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
                for (std::uint64_t i = 0; i < in_len; ++i) ib[i] = T(0);
        }
    }
    const auto st = run_lanes<T, Op, Algo>(w, coll, root, count, in, out, lanes, op, scratch, 20000, {}, {}, node_size);
    for (int r = 0; r < n; ++r) REQUIRE(st[std::size_t(r)] == status::ok);
    int wrong = 0;
    for (int r = 0; r < n; ++r) {
        if (coll == collective::reduce && r != root) continue;
        for (std::uint64_t i = 0; i < out_len; ++i) {
            T want{};
            switch (coll) {
            case collective::all_reduce:
            case collective::reduce:
            case collective::reduce_scatter: {
                const std::uint64_t j = coll == collective::reduce_scatter ? std::uint64_t(r) * count + i : i;
                want = value_of<T>(0, j);
                for (int q = 1; q < n; ++q) want = op(want, value_of<T>(q, j));
                want = detail::finish(op, want, n);
                break;
            }
            case collective::all_gather: want = value_of<T>(int(i / count), i % count); break;
            case collective::broadcast: want = value_of<T>(root, i); break;
            default: break;
            }
            if (out[std::size_t(r)][i] != want) ++wrong;
        }
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
                            ts.emplace_back([&, l] { detail::lane_reduce_copy(host_lanes{l, lanes, &bar, box}, a, avg{}); });
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
                        check_collective<float, sum, ring<{2, 64}>>(coll, n, count, lanes, in_place, sum{});
                        check_collective<int, max, ring<>>(coll, n, count, lanes, in_place, max{});
                        check_collective<float, avg, direct<{2, 64}>>(coll, n, count, lanes, in_place, avg{});
                        check_collective<std::int8_t, sum, direct<>>(coll, n, count, lanes, in_place, sum{});
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
    for (int n : {2, 3, 4, 8}) {
        if (chorus_test::under_tsan && n > 3) continue; // dozens of spinning threads on two cores
        lane_world_host w(n);
        for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce}) {
            for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(2), std::uint64_t(n + 1), std::uint64_t(1009)}) {
                for (bool in_place : {false, true}) {
                    CAPTURE(collective_name(coll));
                    CAPTURE(n);
                    CAPTURE(count);
                    CAPTURE(in_place);
                    check_collective<float, sum, ring<{4, 64 << 10}>>(coll, n, count, 2, in_place, sum{}, &w);
                    check_collective<float, sum, ring<>>(coll, n, count, 2, in_place, sum{}, &w);
                    check_collective<int, max, ring<{4, 64 << 10}>>(coll, n, count, 2, in_place, max{}, &w);
                    check_collective<float, avg, direct<{2, 1 << 20}>>(coll, n, count, 2, in_place, avg{}, &w);
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
    using H = hierarchical<ring<{4, 256}>, ring<{4, 256}>>;
    using H2 = hierarchical<ring<{2, 256}>, ring<{2, 256}>>;
    for (int n : {4, 6, 8}) {
        if (chorus_test::under_tsan && n > 4) continue;
        for (int node : {1, 2, n / 2}) {
            lane_world_host w(n);
            for (std::uint64_t count : {std::uint64_t(1), std::uint64_t(13), std::uint64_t(1001), std::uint64_t(5003)}) {
                for (bool in_place : {false, true}) {
                    CAPTURE(n);
                    CAPTURE(node);
                    CAPTURE(count);
                    CAPTURE(in_place);
                    check_collective<float, sum, H>(collective::all_reduce, n, count, 2, in_place, sum{}, &w, node);
                    check_collective<float, sum, H2>(collective::all_reduce, n, count, 2, in_place, sum{}, &w, node);
                    check_collective<float, sum, ring<>>(collective::all_reduce, n, count, 2, in_place, sum{}, &w);
                }
            }
        }
    }
}

TEST_CASE("lane executor: every policy with several channels, each channel its own thread group") {
    for (int n : {2, 3, 5, 8}) {
        if (chorus_test::under_tsan && n > 3) continue;
        lane_world_host w(n);
        for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce}) {
            for (std::uint64_t count : {std::uint64_t(1), std::uint64_t(29), std::uint64_t(3001)}) {
                CAPTURE(collective_name(coll));
                CAPTURE(n);
                CAPTURE(count);
                check_collective<float, sum, tree<{3, 256}>>(coll, n, count, 2, false, sum{}, &w);
                check_collective<float, sum, recursive_doubling<{3, 256}>>(coll, n, count, 2, false, sum{}, &w);
                check_collective<float, sum, rabenseifner<{3, 256}>>(coll, n, count, 2, true, sum{}, &w);
                check_collective<float, sum, two_shot<{3, 256}>>(coll, n, count, 2, false, sum{}, &w);
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
        const auto st = run_lanes<float, sum, ring<>>(w, collective::all_reduce, 0, 64, in, out, 2, sum{}, s, 300,
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
    {
        const int n = 2;
        lane_world_host w(n);
        std::vector<std::vector<float>> b(n, std::vector<float>(64, 1.f)), o(n, std::vector<float>(64)), s(n);
        std::vector<const float*> in{b[0].data(), b[1].data()};
        std::vector<float*> out{o[0].data(), o[1].data()};
        const auto st = run_lanes<float, sum, direct<>>(w, collective::all_reduce, 0, 64, in, out, 2, sum{}, s, 5000,
                                                        {}, {64, 63});
        // Whichever rank compares first reports the mismatch (with the
        // other's call) and stops the other.
        CHECK(st[0] != status::ok);
        CHECK(st[1] != status::ok);
        const bool zero_saw = w.faults[0].code == int(status::mismatch);
        const bool one_saw = w.faults[1].code == int(status::mismatch);
        CHECK((zero_saw || one_saw));
        if (zero_saw) CHECK(w.faults[0].theirs.count == 63);
        if (one_saw) CHECK(w.faults[1].theirs.count == 64);
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
    f[1].theirs = {63, std::uint64_t(collective::all_reduce) | 1u << 8, 1, 2, 3};
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
