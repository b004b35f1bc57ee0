// The asynchronous forms: overlap with the caller's work, many operations in
// flight on one communicator (in issue order), sync calls queued behind
// pending async ones, an operator with state (the async call keeps its own
// copy, the caller's may go), and chorus::future's semantics.

#include "test_util.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace chorus_test;
using namespace std::chrono_literals;
using comm_t = chorus::communicator<chorus::threads>;

template <class T>
std::span<const T> cview(const std::vector<T>& v) {
    return std::span<const T>(v);
}

} // namespace

TEST_CASE("all_reduce_async overlaps with work on the calling thread") {
    // 16 MiB of floats (4 MiB under ThreadSanitizer), all-reduced `reps` times
    // back to back so that the communication lasts ~30 ms however fast the
    // machine is (fixed costs such as waking the stream's worker then do not
    // matter). The "work" waits on a clock (sleep_for): on a shared 2-core
    // machine a CPU-bound loop would compete with the collective for the
    // cores, and what is measured is that the collective progresses while the
    // caller is busy elsewhere.
    const std::size_t count = (std::size_t(under_tsan ? 4 : 16) << 20) / sizeof(float);
    constexpr int attempts = 3;
    std::array<double, 2> best{1e9, 1e9};
    std::array<std::string, 2> detail;
    std::atomic<int> wrong{0};
    chorus::run_threads(2, [&](comm_t& comm) {
        comm.set_timeout(60s);
        const int r = comm.rank();
        std::vector<float> in(count, float(r + 1)), out(count, 0.0f);
        auto all_reduce_sync = [&] { chorus::all_reduce(comm, cview(in), std::span(out), chorus::sum{}); };
        all_reduce_sync(); // warm-up: page faults, scratch
        // Agree on the repetition count (every rank must issue the same calls).
        auto t0 = steady::now();
        all_reduce_sync();
        const double one = std::max(seconds_since(t0), 1e-6);
        std::int32_t reps = std::int32_t(std::min(64.0, std::ceil(0.03 / one)));
        chorus::all_reduce(comm, std::span(&reps, 1), chorus::max{});
        for (int a = 0; a < attempts; ++a) {
            chorus::barrier(comm);
            t0 = steady::now();
            for (int i = 0; i < reps; ++i) all_reduce_sync();
            const double t_comm = seconds_since(t0);
            const auto work = std::chrono::duration<double>(t_comm);

            chorus::barrier(comm);
            t0 = steady::now();
            std::this_thread::sleep_for(work);
            const double t_compute = seconds_since(t0);

            std::fill(out.begin(), out.end(), 0.0f);
            chorus::barrier(comm);
            t0 = steady::now();
            std::vector<chorus::future> fs;
            for (int i = 0; i < reps; ++i)
                fs.push_back(chorus::all_reduce_async(comm, cview(in), std::span(out), chorus::sum{}));
            std::this_thread::sleep_for(work);
            for (auto& f : fs) f.wait();
            const double t_overlapped = seconds_since(t0);

            if (std::any_of(out.begin(), out.end(), [](float v) { return v != 3.0f; })) ++wrong;
            const double ratio = t_overlapped / (t_comm + t_compute);
            if (ratio < best[std::size_t(r)]) {
                best[std::size_t(r)] = ratio;
                detail[std::size_t(r)] = "rank " + std::to_string(r) + ": " + std::to_string(reps) +
                                         " x all_reduce " + std::to_string(t_comm * 1e3) + " ms, compute " +
                                         std::to_string(t_compute * 1e3) + " ms, overlapped " +
                                         std::to_string(t_overlapped * 1e3) + " ms";
            }
        }
    });
    CHECK(wrong == 0);
    for (int r = 0; r < 2; ++r) {
        INFO(detail[std::size_t(r)]);
        CHECK(best[std::size_t(r)] < 0.9); // best of 3: overlapped < 0.9 * (comm + compute)
    }
    MESSAGE("overlap (best of " << attempts << "): " << detail[0] << "; " << detail[1]);
}

TEST_CASE("100 collectives in flight on one communicator complete correctly and in issue order") {
    for (int n : {2, 3, 5}) {
        INFO("ranks = " << n);
        std::atomic<int> failures{0};
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(60s);
            const int r = comm.rank();
            const std::int64_t nn = n;
            constexpr int N = 100;
            std::vector<std::vector<std::int32_t>> in(N), out(N);
            std::vector<chorus::future> fs;
            fs.reserve(N + 16);
            auto elems = [](int j) { return std::size_t(1 + (j * 37) % 257); };
            auto value = [](int rank, int j, std::size_t i) { return std::int32_t(rank * 1000 + j * 7 + int(i % 13)); };
            // 100 all_reduce (in-place and out-of-place, two algorithms) with an all_gather every tenth call.
            for (int j = 0; j < N; ++j) {
                in[std::size_t(j)].resize(elems(j));
                for (std::size_t i = 0; i < elems(j); ++i) in[std::size_t(j)][i] = value(r, j, i);
                if (j % 10 == 4) {
                    out[std::size_t(j)].assign(elems(j) * std::size_t(n), -1);
                    fs.push_back(chorus::all_gather_async(comm, cview(in[std::size_t(j)]), std::span(out[std::size_t(j)])));
                } else if (j % 3 == 0) {
                    fs.push_back(chorus::all_reduce_async(comm, std::span(in[std::size_t(j)]), chorus::sum{}));
                } else if (j % 3 == 1) {
                    out[std::size_t(j)].assign(elems(j), -1);
                    fs.push_back(chorus::all_reduce_async<chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 64}>>(
                        comm, cview(in[std::size_t(j)]), std::span(out[std::size_t(j)]), chorus::sum{}));
                } else {
                    out[std::size_t(j)].assign(elems(j), -1);
                    fs.push_back(chorus::all_reduce_async(comm, cview(in[std::size_t(j)]), std::span(out[std::size_t(j)]),
                                                          chorus::max{}));
                }
            }
            // Issue order on one buffer: sum twice gives n^2 x; sum then max gives sum (max then sum would give n * max).
            std::vector<std::int64_t> twice(1000), sum_max(333);
            for (std::size_t i = 0; i < twice.size(); ++i) twice[i] = std::int64_t(i) + r;
            for (std::size_t i = 0; i < sum_max.size(); ++i) sum_max[i] = (r == 0 ? 100 : 1) + std::int64_t(i);
            fs.push_back(chorus::all_reduce_async(comm, std::span(twice), chorus::sum{}));
            fs.push_back(chorus::all_reduce_async(comm, std::span(sum_max), chorus::sum{}));
            fs.push_back(chorus::all_reduce_async(comm, std::span(twice), chorus::sum{}));
            fs.push_back(chorus::all_reduce_async(comm, std::span(sum_max), chorus::max{}));
            // The async form of every other collective.
            std::vector<std::int32_t> rs_in(std::size_t(n) * 5), rs_out(5), bc(64), red_in(9), red_out(9, -1);
            for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = std::int32_t(i) * (r + 1);
            for (std::size_t i = 0; i < bc.size(); ++i) bc[i] = r == n - 1 ? std::int32_t(i) * 3 : -7;
            for (std::size_t i = 0; i < red_in.size(); ++i) red_in[i] = std::int32_t(i) + r;
            fs.push_back(chorus::reduce_scatter_async(comm, cview(rs_in), std::span(rs_out), chorus::sum{}));
            fs.push_back(chorus::broadcast_async(comm, std::span(bc), n - 1));
            fs.push_back(chorus::reduce_async(comm, cview(red_in), std::span(red_out), chorus::sum{}, 0));
            fs.push_back(chorus::barrier_async(comm));

            // Waiting on the last one is enough: the stream runs in issue order.
            fs.back().wait();
            int not_ready = 0;
            for (auto& f : fs) not_ready += f.ready() ? 0 : 1;
            CHECK_MESSAGE(not_ready == 0, "rank " << r << ": " << not_ready << " earlier futures not ready after the last");
            for (auto it = fs.rbegin(); it != fs.rend(); ++it) it->get(); // any order; none may throw

            int bad = 0;
            for (int j = 0; j < N; ++j) {
                const auto& o = j % 10 == 4 || j % 3 != 0 ? out[std::size_t(j)] : in[std::size_t(j)];
                for (std::size_t i = 0; i < o.size(); ++i) {
                    std::int64_t want = 0;
                    if (j % 10 == 4) {
                        want = value(int(i / elems(j)), j, i % elems(j));
                    } else if (j % 3 == 2) {
                        want = value(n - 1, j, i);
                    } else {
                        for (int q = 0; q < n; ++q) want += value(q, j, i);
                    }
                    if (o[i] != want) {
                        if (bad++ == 0)
                            FAIL_CHECK("rank " << r << " op " << j << " [" << i << "] = " << o[i] << ", expected " << want);
                    }
                }
            }
            const std::int64_t sum_r = nn * (nn - 1) / 2;
            for (std::size_t i = 0; i < twice.size(); ++i) {
                const std::int64_t want = nn * (nn * std::int64_t(i) + sum_r);
                if (twice[i] != want && bad++ == 0) FAIL_CHECK("twice[" << i << "] = " << twice[i] << ", expected " << want);
            }
            for (std::size_t i = 0; i < sum_max.size(); ++i) {
                const std::int64_t want = 100 + (nn - 1) + nn * std::int64_t(i);
                if (sum_max[i] != want && bad++ == 0)
                    FAIL_CHECK("sum then max [" << i << "] = " << sum_max[i] << ", expected " << want);
            }
            for (std::size_t i = 0; i < rs_out.size(); ++i) {
                const std::int64_t want = std::int64_t(std::size_t(r) * 5 + i) * (nn * (nn + 1) / 2);
                if (rs_out[i] != want && bad++ == 0) FAIL_CHECK("reduce_scatter_async out[" << i << "] = " << rs_out[i]);
            }
            for (std::size_t i = 0; i < bc.size(); ++i)
                if (bc[i] != std::int32_t(i) * 3 && bad++ == 0) FAIL_CHECK("broadcast_async buf[" << i << "] = " << bc[i]);
            for (std::size_t i = 0; i < red_out.size(); ++i) {
                const std::int64_t want = r == 0 ? nn * std::int64_t(i) + sum_r : -1;
                if (red_out[i] != want && bad++ == 0) FAIL_CHECK("reduce_async out[" << i << "] = " << red_out[i]);
            }
            failures += bad;
        });
        CHECK(failures == 0);
    }
}

namespace {
//! An operator with data: a + k * b (not commutative, so order-keeping policies only).
struct add_scaled {
    int k = 3;
    int operator()(int a, int b) const { return a + k * b; }
};
} // namespace

TEST_CASE("async calls keep their own copy of an operator with state") {
    for (const int n : {2, 3}) {
        CAPTURE(n);
        failure_log log;
        chorus::run_threads(n, [&](comm_t& comm) {
            const int r = comm.rank();
            std::vector<int> in(257), a(257), b(257);
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = int(i % 5) + r;
            std::vector<chorus::future> fs;
            {
                const add_scaled op{}; // gone before the calls run
                fs.push_back(chorus::all_reduce_async<chorus::direct<>>(comm, cview(in), std::span<int>(a), op));
                fs.push_back(chorus::all_reduce_async<chorus::two_shot<>>(comm, cview(in), std::span<int>(b), op));
            }
            for (auto& f : fs) f.get();
            for (std::size_t i = 0; i < in.size(); ++i) {
                int want = int(i % 5); // the left fold in rank order: acc = acc + 3 * x_q
                for (int q = 1; q < n; ++q) want = want + 3 * (int(i % 5) + q);
                if (a[i] != want || b[i] != want)
                    log.add("rank " + std::to_string(r) + " element " + std::to_string(i) + ": " +
                            std::to_string(a[i]) + " / " + std::to_string(b[i]) + ", expected " +
                            std::to_string(want));
            }
        });
        log.report();
    }
}

TEST_CASE("a sync call after pending async calls waits behind them") {
    std::atomic<int> failures{0};
    chorus::run_threads(3, [&](comm_t& comm) {
        comm.set_timeout(60s);
        const int r = comm.rank();
        // Rank 2 issues everything late, so on ranks 0 and 1 the async calls are still pending at the sync call.
        if (r == 2) std::this_thread::sleep_for(200ms);
        std::vector<std::int32_t> a(1000, r + 1), b(77);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::int32_t(i) + 10 * r;
        chorus::future f1 = chorus::all_reduce_async(comm, std::span(a), chorus::sum{}); // a = 6
        chorus::future f2 = chorus::all_reduce_async(comm, std::span(a), chorus::sum{}); // a = 18
        chorus::future f3 = chorus::broadcast_async(comm, std::span(b), 1);
        if (r != 2) CHECK_FALSE(f1.ready()); // rank 2 has not joined yet
        chorus::all_reduce(comm, std::span(a), chorus::sum{}); // a = 54, only after f1 and f2
        CHECK(f1.ready());
        CHECK(f2.ready());
        CHECK(f3.ready());
        if (std::any_of(a.begin(), a.end(), [](std::int32_t v) { return v != 54; })) ++failures;
        for (std::size_t i = 0; i < b.size(); ++i)
            if (b[i] != std::int32_t(i) + 10) ++failures;
        f1.get();
        f2.get();
        f3.get();

        // synchronize() drains the queue too.
        chorus::future f4 = chorus::all_reduce_async(comm, std::span(a), chorus::max{});
        comm.synchronize();
        CHECK(f4.ready());
        f4.get();
        // A sync call on an idle stream after async use still works.
        chorus::all_reduce(comm, std::span(a), chorus::sum{});
        if (a[0] != 162) ++failures;
    });
    CHECK(failures == 0);
}

TEST_CASE("future: ready, wait_for, get, valid, move") {
    SUBCASE("default-constructed") {
        chorus::future f;
        CHECK_FALSE(f.valid());
        CHECK(f.ready());
        CHECK(f.wait_for(0ms));
        CHECK_NOTHROW(f.wait());
        try {
            f.get();
            FAIL_CHECK("get() on an empty future did not throw");
        } catch (const chorus::error& e) {
            CHECK(e.code() == chorus::errc::invalid_argument);
        }
    }
    SUBCASE("on a pending collective") {
        std::atomic<int> failures{0};
        chorus::run_threads(2, [&](comm_t& comm) {
            comm.set_timeout(30s);
            std::vector<double> v(1 << 12, double(comm.rank() + 1));
            if (comm.rank() == 1) {
                std::this_thread::sleep_for(300ms); // the peer is late: rank 0's future cannot be ready
                chorus::all_reduce(comm, std::span(v), chorus::sum{});
            } else {
                chorus::future f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
                CHECK(f.valid());
                CHECK_FALSE(f.ready());
                CHECK_FALSE(f.wait_for(0ms));
                CHECK_FALSE(f.wait_for(20ms));
                chorus::future g = std::move(f); // move construction
                CHECK_FALSE(f.valid());          // NOLINT(bugprone-use-after-move): moved-from is empty
                CHECK(g.valid());
                chorus::future h;
                h = std::move(g); // move assignment
                CHECK_FALSE(g.valid());
                CHECK(h.valid());
                const auto t0 = steady::now();
                while (!h.ready() && seconds_since(t0) < 20) std::this_thread::sleep_for(1ms);
                CHECK(h.ready());
                CHECK(h.wait_for(0ms));
                CHECK_NOTHROW(h.wait()); // wait() does not consume
                CHECK(h.valid());
                CHECK_NOTHROW(h.get());
                CHECK_FALSE(h.valid()); // get() consumes
                CHECK_THROWS_AS(h.get(), chorus::error);
            }
            if (std::any_of(v.begin(), v.end(), [](double x) { return x != 3.0; })) ++failures;
        });
        CHECK(failures == 0);
    }
}

TEST_CASE("a future destroyed by an exception waits for its collective and releases the peers") {
    // The throwing rank's buffer dies while the stack unwinds; its future
    // dies first and must not let the collective outlive the buffer.
    // (The AddressSanitizer run would report a use-after-free otherwise.)
    for (int round = 0; round < 3; ++round) {
        std::atomic<int> peers_settled{0}; // peers that got a correct result or a chorus::error
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH(chorus::run_threads(3,
                                              [&](chorus::communicator<chorus::threads>& comm) {
                                                  comm.set_timeout(std::chrono::seconds(20));
                                                  std::vector<float> v(1 << 20, 1.0f);
                                                  if (comm.rank() == 1) {
                                                      auto f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
                                                      throw std::runtime_error("boom");
                                                  }
                                                  try { // a late peer may find the communicator already broken
                                                      auto f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
                                                      f.wait();
                                                      bool exact = true;
                                                      for (float x : v) exact = exact && x == 3.0f;
                                                      if (exact) ++peers_settled;
                                                  } catch (const chorus::error&) {
                                                      ++peers_settled;
                                                  }
                                              }),
                          "boom");
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
        CHECK(peers_settled.load() == 2);
    }
}
