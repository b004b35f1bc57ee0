// Bad arguments, failing / stalled / disagreeing peers and abort(): every
// failure is a chorus::error with the right code and a message naming the
// argument, collective or rank at fault, never a hang. Every communicator
// here has a timeout, so a regression fails instead of hanging.

#include "test_util.hpp"
#include "fault_util.hpp" // chorus_fault::sanitized
#include "../misuse_ops.hpp"
#include "../scoped_env.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace chorus_test;
using namespace std::chrono_literals;
using comm_t = chorus::communicator<chorus::threads>;
using chorus::errc;

//! Runs f, which must throw chorus::error(errc::invalid_argument) whose
//! message contains every needle. Usable from rank threads.
template <class F>
void expect_invalid(const std::string& what, F&& f, std::initializer_list<const char*> needles) {
    try {
        f();
        FAIL_CHECK(what << ": no exception");
    } catch (const chorus::error& e) {
        CHECK_MESSAGE(e.code() == errc::invalid_argument, what << ": code " << std::string(chorus::to_string(e.code())) << ": " << std::string(e.what()));
        for (const char* s : needles) CHECK_MESSAGE(contains(e.what(), s), what << ": message lacks '" << std::string(s) << "': " << std::string(e.what()));
    } catch (const std::exception& e) {
        FAIL_CHECK(what << ": not a chorus::error: " << std::string(e.what()));
    }
}

//! What one rank saw when its collective failed.
struct seen {
    bool threw = false;
    errc code = errc::internal;
    std::string what;
    double after_s = 0; //!< seconds from the call to the exception
};

template <class F>
seen capture(F&& f) {
    seen s;
    const auto t0 = steady::now();
    try {
        f();
    } catch (const chorus::error& e) {
        s.threw = true;
        s.code = e.code();
        s.what = e.what();
    } catch (const std::exception& e) {
        s.threw = true;
        s.what = std::string("not a chorus::error: ") + e.what();
    }
    s.after_s = seconds_since(t0);
    return s;
}

template <class T>
std::span<const T> cview(const std::vector<T>& v) {
    return std::span<const T>(v);
}

//! The message names rank r as the one that never joined ("... rank 2 ..."
//! or "... ranks that have not joined it: 2").
bool names_missing_rank(const std::string& what, int r) {
    return contains(what, "rank " + std::to_string(r)) || contains(what, "not joined it: " + std::to_string(r));
}

} // namespace

// --- bad arguments ----------------------------------------------------------------------

TEST_CASE("bad arguments throw invalid_argument naming the argument, on every rank, and break nothing") {
    for (int n : {1, 3}) {
        INFO("ranks = " << n);
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(10s);
            const int r = comm.rank();
            const std::size_t nn = std::size_t(n);
            std::vector<float> a(10), b(12), big(64);
            std::vector<float> gather_out(nn * 4), rs_in(nn * 4);
            float* null = nullptr;

            // Sizes.
            expect_invalid("all_reduce in/out sizes", [&] { chorus::all_reduce(comm, cview(a), std::span(b)); }, {"all_reduce", "`out`", "`in`", "12", "10"});
            expect_invalid("all_reduce_async in/out sizes", [&] { (void)chorus::all_reduce_async(comm, cview(b), std::span(a)); }, {"`out`", "`in`"});
            expect_invalid("all_gather out size", [&] { chorus::all_gather(comm, cview(a).first(4), std::span(gather_out).first(nn * 4 - 1)); }, {"all_gather", "`out`"});
            expect_invalid("all_gather out size (too big)", [&] { chorus::all_gather(comm, cview(a).first(4), std::span(big).first(nn * 4 + 1)); }, {"all_gather", "`out`"});
            expect_invalid("reduce_scatter in size", [&] { chorus::reduce_scatter(comm, cview(rs_in).first(nn * 4 - 1), std::span(a).first(4)); }, {"reduce_scatter", "`in`"});
            expect_invalid("reduce_scatter_async in size", [&] { (void)chorus::reduce_scatter_async(comm, cview(big).first(nn * 4 + 1), std::span(a).first(4)); }, {"`in`"});

            // Partial overlap (in-place is only the exact shape).
            expect_invalid("all_reduce partial overlap", [&] { chorus::all_reduce(comm, cview(big).subspan(0, 10), std::span(big).subspan(5, 10)); }, {"all_reduce", "`in`", "`out`", "overlap"});
            expect_invalid("all_reduce overlap by one element", [&] { chorus::all_reduce(comm, cview(big).subspan(9, 10), std::span(big).subspan(0, 10)); }, {"overlap"});
            // all_gather: `in` inside `out` but not at block rank().
            expect_invalid("all_gather overlap not at block rank()", [&] {
                std::span<float> o = std::span(big).first(nn * 4);
                chorus::all_gather(comm, std::span<const float>(o.subspan(std::size_t(r) * 4 + 1, 3).data(), 4), o);
            }, {"all_gather", "`in`", "overlap"});
            expect_invalid("reduce_scatter overlap not at block rank()", [&] {
                std::span<float> i = std::span(big).first(nn * 4);
                chorus::reduce_scatter(comm, std::span<const float>(i), std::span(i.data() + std::size_t(r) * 4 + 2, 4));
            }, {"reduce_scatter", "`out`", "overlap"});

            // Roots.
            for (int root : {-1, n, n + 7}) {
                expect_invalid("broadcast root", [&] { chorus::broadcast(comm, std::span(a), root); }, {"broadcast", "`root`", std::to_string(root).c_str()});
                expect_invalid("broadcast_async root", [&] { (void)chorus::broadcast_async(comm, std::span(a), root); }, {"`root`"});
                expect_invalid("reduce root", [&] { chorus::reduce(comm, cview(a), std::span(b).first(10), chorus::sum{}, root); }, {"reduce", "`root`"});
            }

            // Null data with a non-zero count.
            const std::span<float> null5(null, 5);
            expect_invalid("all_reduce null in", [&] { chorus::all_reduce(comm, std::span<const float>(null5), std::span(a).first(5)); }, {"`in`", "null"});
            expect_invalid("all_reduce null out", [&] { chorus::all_reduce(comm, cview(a).first(5), null5); }, {"`out`", "null"});
            expect_invalid("all_reduce null in-place", [&] { chorus::all_reduce(comm, null5, chorus::sum{}); }, {"null"});
            expect_invalid("all_gather null in", [&] { chorus::all_gather(comm, std::span<const float>(null5), std::span(big).first(nn * 5)); }, {"`in`", "null"});
            expect_invalid("reduce_scatter null out", [&] { chorus::reduce_scatter(comm, cview(big).first(nn * 5), null5); }, {"`out`", "null"});
            expect_invalid("broadcast null buf", [&] { chorus::broadcast(comm, null5, 0); }, {"`buf`", "null"});
            expect_invalid("reduce null in", [&] { chorus::reduce(comm, std::span<const float>(null5), std::span(a).first(5), chorus::sum{}, 0); }, {"`in`", "null"});

            // reduce checks `out` only at the root: only the root calls (nothing was launched, so the
            // ranks' call sequences stay in step).
            if (r == n - 1) {
                expect_invalid("reduce out size at the root", [&] { chorus::reduce(comm, cview(a), std::span(b), chorus::sum{}, n - 1); }, {"reduce", "`out`", "`in`"});
                expect_invalid("reduce null out at the root", [&] { chorus::reduce(comm, cview(a).first(5), null5, chorus::sum{}, n - 1); }, {"`out`", "null"});
            }

            // A stream argument (the GPU backend's stream-ordered forms) on a host backend.
            const chorus::detail::stream_arg some_stream{nullptr, true};
            expect_invalid("a stream on the threads backend", [&] { (void)chorus::detail::all_reduce_run(comm, chorus::policy_of<chorus::ring<>>, cview(a), std::span(a), chorus::sum{}, false, some_stream); }, {"all_reduce", "`stream`"});
            expect_invalid("a stream on the threads backend (broadcast)", [&] { (void)chorus::detail::broadcast_run(comm, chorus::policy::automatic(), std::span(a), 0, true, some_stream); }, {"broadcast", "`stream`"});

            // Timeouts must be positive.
            expect_invalid("set_timeout(0)", [&] { comm.set_timeout(0ms); }, {"`t`"});
            expect_invalid("set_timeout(-1)", [&] { comm.set_timeout(-1ms); }, {"`t`"});

            // Nothing above moved a byte or broke the communicator.
            CHECK_FALSE(comm.broken());
            std::vector<float> ok(7, float(r + 1));
            chorus::all_reduce(comm, std::span(ok), chorus::sum{});
            CHECK(ok[6] == float(n * (n + 1) / 2));
        });
    }
}

TEST_CASE("run_threads rejects a non-positive rank count") {
    bool called = false;
    for (int n : {0, -1}) {
        expect_invalid("run_threads(n)", [&] { chorus::run_threads(n, [&](comm_t&) { called = true; }); }, {"`n`"});
    }
    CHECK_FALSE(called);
}

TEST_CASE("empty future: get() throws invalid_argument") {
    chorus::future f;
    expect_invalid("future::get", [&] { f.get(); }, {"get"});
}

TEST_CASE("CHORUS_TIMEOUT_MS sets the default timeout") {
    {
        chorus_test::scoped_env e("CHORUS_TIMEOUT_MS", "1234");
        std::chrono::milliseconds t{};
        chorus::run_threads(1, [&](comm_t& comm) { t = comm.timeout(); });
        CHECK(t == 1234ms);
    }
    {
        chorus_test::scoped_env e("CHORUS_TIMEOUT_MS", "nonsense"); // rejected, not ignored
        expect_invalid("CHORUS_TIMEOUT_MS=nonsense", [] { chorus::detail::default_timeout(); },
                       {"CHORUS_TIMEOUT_MS", "'nonsense'"});
    }
    chorus_test::scoped_env e("CHORUS_TIMEOUT_MS", ""); // empty: the built-in default
    CHECK(chorus::detail::default_timeout() == std::chrono::minutes(5));
}

// --- a peer that throws ---------------------------------------------------------------

namespace {

//! Rank 1 throws std::runtime_error("boom") after `before` successful
//! all_reduces; ranks 0 and 2 go on into another all_reduce (sync or async).
void peer_throws(int before, bool async) {
    std::array<seen, 3> s{};
    std::atomic<int> completed{0};
    const auto t0 = steady::now();
    std::string rethrown;
    try {
        chorus::run_threads(3, [&](comm_t& comm) {
            comm.set_timeout(20s);
            std::vector<float> v(4099, 1.0f);
            for (int i = 0; i < before; ++i) {
                chorus::all_reduce(comm, std::span(v), chorus::sum{});
                ++completed;
            }
            if (comm.rank() == 1) {
                // Throw only once every rank has returned from the successful collectives:
                // the abort that the exception triggers also fails a collective that a peer
                // is still finishing (e.g. waiting in its final handshake), although every
                // rank did its part of it.
                const auto t1 = steady::now();
                while (completed < 3 * before && seconds_since(t1) < 10) std::this_thread::sleep_for(1ms);
                throw std::runtime_error("boom");
            }
            s[std::size_t(comm.rank())] = capture([&] {
                if (async) {
                    chorus::future f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
                    f.get();
                } else {
                    chorus::all_reduce(comm, std::span(v), chorus::sum{});
                }
            });
            // The communicator is broken now: the next call fails at once.
            CHECK(comm.broken());
            const seen next = capture([&] { chorus::barrier(comm); });
            CHECK(next.threw);
            CHECK(next.code == errc::aborted);
            CHECK(next.after_s < 0.5);
        });
        FAIL_CHECK("run_threads returned normally");
    } catch (const chorus::error& e) {
        FAIL_CHECK("run_threads rethrew a chorus::error, not rank 1's exception: " << std::string(e.what()));
    } catch (const std::runtime_error& e) {
        rethrown = e.what();
    }
    const double elapsed = seconds_since(t0);
    CHECK(rethrown == "boom");
    CHECK(completed.load() == 3 * before);
    CHECK(elapsed < 5.0); // well under the 20 s deadline: peers are released, not timed out
    for (int r : {0, 2}) {
        const seen& x = s[std::size_t(r)];
        INFO("rank " << r << ": " << x.what);
        CHECK(x.threw);
        CHECK((x.code == errc::peer_failed || x.code == errc::aborted));
        CHECK(contains(x.what, "rank 1"));
        CHECK(contains(x.what, "boom"));
        CHECK(contains(x.what, "all_reduce"));
    }
}

} // namespace

TEST_CASE("a rank that throws releases its peers (peer_failed), and run_threads rethrows its exception") {
    SUBCASE("before the first collective") { peer_throws(0, false); }
    SUBCASE("after two successful collectives") { peer_throws(2, false); }
    SUBCASE("peers waiting on an async collective") { peer_throws(1, true); }
}

TEST_CASE("run_threads rethrows a non-std exception and reports it to the peers") {
    std::array<seen, 2> s{};
    bool caught = false;
    try {
        chorus::run_threads(2, [&](comm_t& comm) {
            comm.set_timeout(20s);
            if (comm.rank() == 0) throw 42;
            std::vector<int> v(10, 1);
            s[1] = capture([&] { chorus::all_reduce(comm, std::span(v), chorus::sum{}); });
        });
    } catch (int x) {
        caught = x == 42;
    }
    CHECK(caught);
    INFO(s[1].what);
    CHECK(s[1].threw);
    CHECK(contains(s[1].what, "rank 0"));
    CHECK(s[1].after_s < 5.0);
}

// --- a stalled peer -----------------------------------------------------------------------

TEST_CASE("a stalled peer makes the waiting ranks time out, naming the collective and the rank") {
    std::array<seen, 3> s{}, after{};
    std::array<bool, 3> broken{};
    chorus::run_threads(3, [&](comm_t& comm) {
        comm.set_timeout(300ms);
        const int r = comm.rank();
        std::vector<float> v(1000, 1.0f);
        if (r == 2) std::this_thread::sleep_for(2s);
        s[std::size_t(r)] = capture([&] { chorus::all_reduce(comm, std::span(v), chorus::sum{}); });
        broken[std::size_t(r)] = comm.broken();
        after[std::size_t(r)] = capture([&] { chorus::all_reduce(comm, std::span(v), chorus::sum{}); });
    });
    const double limit = under_tsan ? 2.0 : 1.0;
    for (int r : {0, 1}) {
        const seen& x = s[std::size_t(r)];
        INFO("rank " << r << ": " << x.what);
        CHECK(x.threw);
        CHECK((x.code == errc::timeout || x.code == errc::aborted));
        CHECK(x.after_s >= 0.25);
        CHECK(x.after_s < limit);
        CHECK(contains(x.what, "all_reduce"));
        CHECK(contains(x.what, "waiting for rank")); // names the rank waited for
        CHECK(names_missing_rank(x.what, 2));         // and the one that never came
    }
    // Rank 0 waits for rank 2 directly: when it is the one that timed out, it names rank 2.
    if (contains(s[0].what, "timed out after")) CHECK(contains(s[0].what, "waiting for rank 2"));
    {
        // The late rank finds the communicator broken.
        INFO("rank 2: " << s[2].what);
        CHECK(s[2].threw);
        CHECK(s[2].code == errc::aborted);
        CHECK(s[2].after_s < 0.1);
    }
    for (int r = 0; r < 3; ++r) {
        INFO("rank " << r << " afterwards: " << after[std::size_t(r)].what);
        CHECK(broken[std::size_t(r)]);
        CHECK(after[std::size_t(r)].threw);
        CHECK(after[std::size_t(r)].code == errc::aborted);
        CHECK(after[std::size_t(r)].after_s < 0.1); // immediately, not after another timeout
    }
}

// The no-hang guarantee (docs/reliability.md): a stalled peer makes the others fail "with a timeout
// error naming the collective and the missing rank". Rank 1 waits for rank 0,
// which waits for the missing rank 2; rank 1's deadline passes first (a
// shorter timeout makes that deterministic), yet every message must still
// name rank 2, not only the innocent rank 0.
TEST_CASE("a stall is blamed on the rank that never entered the collective") {
    std::array<seen, 3> s{};
    chorus::run_threads(3, [&](comm_t& comm) {
        const int r = comm.rank();
        comm.set_timeout(r == 1 ? 200ms : 1000ms);
        std::vector<float> v(1000, 1.0f);
        if (r == 2) std::this_thread::sleep_for(1500ms);
        s[std::size_t(r)] = capture([&] { chorus::all_reduce(comm, std::span(v), chorus::sum{}); });
    });
    for (int r : {0, 1}) {
        INFO("rank " << r << ": " << s[std::size_t(r)].what);
        CHECK(s[std::size_t(r)].threw);
        CHECK(names_missing_rank(s[std::size_t(r)].what, 2));
    }
}

TEST_CASE("a rank that returns without joining a collective fails its peers at once") {
    std::array<seen, 3> s{};
    chorus::run_threads(3, [&](comm_t& comm) {
        comm.set_timeout(20s);
        if (comm.rank() == 1) return;
        std::vector<int> v(100, 1);
        s[std::size_t(comm.rank())] = capture([&] { chorus::all_reduce(comm, std::span(v), chorus::sum{}); });
    });
    for (int r : {0, 2}) {
        const seen& x = s[std::size_t(r)];
        INFO("rank " << r << ": " << x.what);
        CHECK(x.threw);
        CHECK((x.code == errc::peer_failed || x.code == errc::aborted));
        CHECK(contains(x.what, "rank 1"));
        CHECK(contains(x.what, "all_reduce"));
        CHECK(x.after_s < 2.0);
    }
}

TEST_CASE("a stalled peer fails an async collective through its future") {
    std::array<seen, 2> s{};
    chorus::run_threads(2, [&](comm_t& comm) {
        comm.set_timeout(200ms);
        std::vector<int> v(100, 1);
        if (comm.rank() == 1) {
            std::this_thread::sleep_for(1s);
            return;
        }
        chorus::future f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
        s[0] = capture([&] { f.wait(); });
        CHECK(f.ready());
        s[1] = capture([&] { f.get(); }); // get() rethrows the same error
    });
    for (const seen& x : s) {
        INFO(x.what);
        CHECK(x.threw);
        CHECK(x.code == errc::timeout);
        CHECK(contains(x.what, "all_reduce"));
        CHECK(contains(x.what, "rank 1"));
    }
}

// --- ranks that disagree ----------------------------------------------------------------------

namespace {
struct disagreement {
    const char* name;
    void (*call)(comm_t&);
};

//! Runs each variant on 3 ranks (timeout 2 s): every rank must get a
//! mismatch (or aborted) error, well before the timeout.
void expect_disagreement_reported(std::initializer_list<disagreement> variants) {
    for (const disagreement& v : variants) {
        INFO(std::string(v.name));
        std::array<seen, 3> s{};
        const auto t0 = steady::now();
        chorus::run_threads(3, [&](comm_t& comm) {
            comm.set_timeout(2s);
            s[std::size_t(comm.rank())] = capture([&] { v.call(comm); });
        });
        const double elapsed = seconds_since(t0);
        for (int r = 0; r < 3; ++r) {
            const seen& x = s[std::size_t(r)];
            INFO("rank " << r << " (" << x.after_s << " s): " << x.what);
            CHECK(x.threw);
            CHECK((x.code == errc::mismatch || x.code == errc::aborted));
        }
        CHECK(elapsed < 1.9); // detected, not timed out
    }
}
} // namespace

TEST_CASE("ranks that disagree get an error on every rank, not a hang") {
    expect_disagreement_reported({
        {"all_reduce count 10 on rank 0, 12 elsewhere",
         [](comm_t& comm) {
             std::vector<float> v(comm.rank() == 0 ? 10 : 12, 1.0f);
             chorus::all_reduce(comm, std::span(v), chorus::sum{});
         }},
        {"all_reduce on rank 0, all_gather elsewhere",
         [](comm_t& comm) {
             std::vector<float> in(12, 1.0f), out(36);
             if (comm.rank() == 0) chorus::all_reduce(comm, std::span(in), chorus::sum{});
             else chorus::all_gather(comm, cview(in), std::span(out));
         }},
        {"element size 4 on rank 2, 8 elsewhere",
         [](comm_t& comm) {
             std::vector<float> f(50, 1.0f);
             std::vector<double> d(50, 1.0);
             if (comm.rank() == 2) chorus::all_reduce(comm, std::span(f), chorus::sum{});
             else chorus::all_reduce(comm, std::span(d), chorus::sum{});
         }},
    });
}

// Checked mode (docs/reliability.md): peers that disagree are "reported on every rank".
// Broadcast chain: the root only posts progress and never reads a peer's
// descriptor, so a rank that names a different root goes unnoticed there.
TEST_CASE("broadcast with different roots is reported on every rank, the root included") {
    expect_disagreement_reported({
        {"broadcast: root 1 on rank 1, root 0 elsewhere",
         [](comm_t& comm) {
             std::vector<float> v(100, 1.0f);
             chorus::broadcast(comm, std::span(v), comm.rank() == 1 ? 1 : 0);
         }},
    });
}

// Barrier only waits for the peers' flags and never compares descriptors: a
// barrier on one rank "matches" any collective on the others and returns
// normally there, while the others report the mismatch.
TEST_CASE("a barrier facing another collective is reported on every rank, the barrier's included") {
    expect_disagreement_reported({
        {"barrier on rank 0, all_reduce elsewhere",
         [](comm_t& comm) {
             std::vector<float> v(10, 1.0f);
             if (comm.rank() == 0) chorus::barrier(comm);
             else chorus::all_reduce(comm, std::span(v), chorus::sum{});
         }},
    });
}

// Reduce chain: with different roots the ranks wait on each other in a cycle
// before anyone reads a descriptor, so the disagreement surfaces only as a
// timeout (after the full deadline: 5 minutes by default).
TEST_CASE("reduce with different roots is reported as a mismatch, not after the timeout") {
    expect_disagreement_reported({
        {"reduce: root 0 on rank 0, root 2 elsewhere",
         [](comm_t& comm) {
             std::vector<float> in(100, 1.0f), out(100);
             chorus::reduce(comm, std::span<const float>(in), std::span(out), chorus::sum{}, comm.rank() == 0 ? 0 : 2);
         }},
    });
}

// --- buffers of a failed collective ---------------------------------------------------------

namespace {
// A sum whose first combine of a partial equal to 5 sleeps, on one chosen
// thread: it holds that rank in the middle of a ring step (a user operator may
// be slow; a preempted thread on a busy machine looks the same).
std::atomic<std::thread::id> g_slow_thread{};
std::atomic<bool> g_slept{false};
struct slow_sum {
    static constexpr bool commutative = true;
    float operator()(const float& a, const float& b) const {
        if (a == 5.0f && std::this_thread::get_id() == g_slow_thread.load() && !g_slept.exchange(true))
            std::this_thread::sleep_for(300ms);
        return a + b;
    }
};
} // namespace

// Once a collective has thrown on a rank, the caller owns its buffers again
// (it may free or reuse them): no peer may still read or write them. Here
// rank 0 is held inside its second ring step, in which it writes its result
// to rank 1's `out` too (the reduce-scatter -> all-gather push); the
// communicator is aborted meanwhile, rank 1's all_reduce throws, rank 1
// refills `out`, and rank 0, once it resumes, still writes into it.
// (ThreadSanitizer shows the same with no sleeping operator: a rank that
// fails returns and frees its buffers while a peer is still reading them.)
TEST_CASE("after a collective throws, peers no longer write into the caller's buffers") {
    g_slept = false;
    std::atomic<int> clobbered{0};
    std::array<seen, 3> s{};
    chorus::run_threads(3, [&](comm_t& comm) {
        comm.set_timeout(10s);
        const int r = comm.rank();
        std::vector<float> in(64, float(r + 1)), out(64, 0.0f);
        if (r == 0) g_slow_thread = std::this_thread::get_id();
        chorus::barrier(comm);
        std::thread aborter;
        if (r == 2)
            aborter = std::thread([&] {
                std::this_thread::sleep_for(100ms);
                comm.abort("test: abort while rank 0 is inside a step");
            });
        s[std::size_t(r)] = capture([&] { chorus::all_reduce<chorus::ring<>>(comm, cview(in), std::span(out), slow_sum{}); });
        if (r == 1 && s[1].threw) {
            std::fill(out.begin(), out.end(), -1.0f); // the buffer is the caller's again
            std::this_thread::sleep_for(600ms);
            clobbered = int(std::count_if(out.begin(), out.end(), [](float v) { return v != -1.0f; }));
        }
        if (aborter.joinable()) aborter.join();
    });
    g_slow_thread = std::thread::id();
    for (int r = 0; r < 3; ++r) {
        INFO("rank " << r << ": " << s[std::size_t(r)].what);
        CHECK(s[std::size_t(r)].threw);
    }
    CHECK(g_slept.load());
    CHECK_MESSAGE(clobbered == 0, clobbered.load() << " of rank 1's 64 `out` elements were written after its all_reduce threw");
}

// --- abort() ---------------------------------------------------------------------------------

TEST_CASE("comm.abort() releases a rank blocked in a collective with errc::aborted") {
    SUBCASE("abort from the peer rank's thread") {
        seen s{};
        chorus::run_threads(2, [&](comm_t& comm) {
            comm.set_timeout(20s);
            std::vector<float> v(1000, 1.0f);
            if (comm.rank() == 0) {
                s = capture([&] { chorus::all_reduce(comm, std::span(v), chorus::sum{}); });
            } else {
                std::this_thread::sleep_for(200ms);
                comm.abort();
                CHECK(comm.broken());
            }
        });
        INFO(s.what);
        CHECK(s.threw);
        CHECK(s.code == errc::aborted);
        CHECK(s.after_s < 2.0);
        CHECK(contains(s.what, "all_reduce"));
        CHECK(contains(s.what, "rank 1"));
    }
    SUBCASE("abort from another thread, with a reason, releasing an async collective") {
        seen s{};
        chorus::run_threads(2, [&](comm_t& comm) {
            comm.set_timeout(20s);
            std::vector<float> v(1000, 1.0f);
            if (comm.rank() == 0) {
                chorus::future f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
                s = capture([&] { f.get(); });
            } else {
                std::thread t([&] {
                    std::this_thread::sleep_for(200ms);
                    comm.abort("operator pressed stop");
                });
                t.join();
            }
        });
        INFO(s.what);
        CHECK(s.threw);
        CHECK(s.code == errc::aborted);
        CHECK(s.after_s < 2.0);
        CHECK(contains(s.what, "operator pressed stop"));
    }
}

// --- user code failing inside a collective, misuse of one communicator -----------------------

TEST_CASE("a throwing user operator fails every rank at once with its message; the thrower gets its own exception") {
    for (int n : {2, 3}) {
        CAPTURE(n);
        std::vector<seen> s(static_cast<std::size_t>(n));
        std::vector<int> own(static_cast<std::size_t>(n), 0);
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_checked(false);
            comm.set_timeout(10s);
            const int r = comm.rank();
            std::vector<float> in(1000, 1.0f), out(1000);
            s[std::size_t(r)] = capture([&] {
                try {
                    chorus::all_reduce<chorus::ring<>>(comm, cview(in), std::span(out), misuse::throwing_sum{r == 1});
                } catch (const std::runtime_error& e) {
                    if (contains(e.what(), "test: the user operator failed")) own[std::size_t(r)] = 1;
                    throw;
                }
            });
        });
        for (int r = 0; r < n; ++r) {
            INFO("rank " << r << ": " << s[std::size_t(r)].what);
            CHECK(s[std::size_t(r)].threw);
            CHECK(s[std::size_t(r)].after_s < 1.0);
            if (r == 1) {
                CHECK(own[1] == 1); // rethrown as it was thrown
            } else {
                // peer_failed inside the call; aborted ("the communicator is
                // broken (...)") for a rank that issued it after the throw.
                CHECK((s[std::size_t(r)].code == errc::peer_failed || s[std::size_t(r)].code == errc::aborted));
                CHECK(contains(s[std::size_t(r)].what, "rank 1 failed in all_reduce: test: the user operator failed"));
            }
        }
    }
}

TEST_CASE("an operator that calls back into its communicator is refused, and every rank fails at once") {
    std::array<seen, 2> s{};
    chorus::run_threads(2, [&](comm_t& comm) {
        comm.set_checked(false);
        comm.set_timeout(10s);
        const int r = comm.rank();
        std::vector<float> in(1000, 1.0f), out(1000);
        s[std::size_t(r)] = capture([&] {
            chorus::all_reduce<chorus::direct<>>(comm, cview(in), std::span(out), misuse::reentrant_sum<comm_t>{r == 1 ? &comm : nullptr});
        });
    });
    CHECK(s[1].code == errc::invalid_argument);
    CHECK(contains(s[1].what, "called from inside one of this communicator's own collectives"));
    CHECK(s[0].code == errc::peer_failed);
    for (const seen& x : s) CHECK(x.after_s < 1.0);
}

namespace {
//! Holds the first call of the operator (on the rank that passes a gate)
//! until the test lets it go: the collective is then surely under way.
struct gate_sum {
    static constexpr bool commutative = true;
    static constexpr const char* name = "gate_sum";
    std::atomic<int>* phase = nullptr; // 0: not yet, 1: inside, 2: go on
    float operator()(float a, float b) const {
        if (phase != nullptr) {
            int expected = 0;
            if (phase->compare_exchange_strong(expected, 1))
                while (phase->load() != 2) std::this_thread::yield();
        }
        return a + b;
    }
};
} // namespace

TEST_CASE("a call from a second thread while one is under way is refused, and the first completes") {
    std::atomic<int> phase{0};
    seen second{};
    std::array<seen, 2> first{};
    chorus::run_threads(2, [&](comm_t& comm) {
        comm.set_checked(false);
        comm.set_timeout(10s);
        const int r = comm.rank();
        std::thread other;
        if (r == 0)
            other = std::thread([&] {
                while (phase.load() != 1) std::this_thread::yield(); // rank 0's call is inside its operator
                std::vector<float> x(16, 1.0f);
                second = capture([&] { chorus::all_reduce(comm, std::span(x)); });
                phase = 2;
            });
        std::vector<float> in(1000, 1.0f), out(1000);
        first[std::size_t(r)] = capture([&] {
            chorus::all_reduce<chorus::direct<>>(comm, cview(in), std::span(out), gate_sum{r == 0 ? &phase : nullptr});
        });
        if (other.joinable()) other.join();
        if (!first[std::size_t(r)].threw) CHECK(out[999] == 2.0f);
    });
    CHECK(second.threw);
    CHECK(second.code == errc::invalid_argument);
    CHECK(contains(second.what, "called while another thread is issuing a call on this communicator"));
    for (const seen& f : first) CHECK_FALSE(f.threw); // the refused call touched nothing
}

// --- strict configuration: environment variables, timeouts, the model file ------------

TEST_CASE("CHORUS_TIMEOUT_MS is parsed whole and range-checked") {
    for (const char* v : {"1e3", "2000xyz", "0", "-5", "+5", "99999999999999999", "1000000001", " ", "5 ms"}) {
        chorus_test::scoped_env g("CHORUS_TIMEOUT_MS", v);
        expect_invalid(std::string("CHORUS_TIMEOUT_MS=") + v, [] { chorus::detail::default_timeout(); },
                       {"CHORUS_TIMEOUT_MS", (std::string("'") + v + "'").c_str(), "whole number of milliseconds",
                        "1000000000"});
    }
    {
        chorus_test::scoped_env g("CHORUS_TIMEOUT_MS", "2500");
        CHECK(chorus::detail::default_timeout() == 2500ms);
        std::chrono::milliseconds t{};
        chorus::run_threads(1, [&](comm_t& comm) { t = comm.timeout(); });
        CHECK(t == 2500ms);
    }
    {
        chorus_test::scoped_env g("CHORUS_TIMEOUT_MS", " 1000000000\n"); // blanks around it are allowed; so is the cap
        CHECK(chorus::detail::default_timeout() == chorus::max_timeout);
    }
}

TEST_CASE("CHORUS_CHECK accepts booleans only") {
    for (const char* v : {"false", "off", "no", "0", "OFF", "No", ""}) {
        chorus_test::scoped_env g("CHORUS_CHECK", v);
        CHECK_MESSAGE(chorus::detail::default_checked() == false, "CHORUS_CHECK='" << std::string(v) << "'");
    }
    for (const char* v : {"true", "ON", "1", "yes", " True "}) {
        chorus_test::scoped_env g("CHORUS_CHECK", v);
        CHECK_MESSAGE(chorus::detail::default_checked() == true, "CHORUS_CHECK='" << std::string(v) << "'");
    }
    for (const char* v : {"maybe", "2", "01", "truee"}) {
        chorus_test::scoped_env g("CHORUS_CHECK", v);
        expect_invalid(std::string("CHORUS_CHECK=") + v, [] { chorus::detail::default_checked(); },
                       {"CHORUS_CHECK", (std::string("'") + v + "'").c_str(), "is not a boolean"});
    }
}

TEST_CASE("timeouts: timeout_scope and set_timeout reject non-positive and huge values") {
    chorus::run_threads(1, [&](comm_t& comm) {
        comm.set_timeout(10s);
        for (std::chrono::milliseconds t : {0ms, -1ms, std::chrono::milliseconds(std::chrono::hours(24 * 365 * 100))}) {
            expect_invalid("timeout_scope(" + std::to_string(t.count()) + "ms)",
                           [&] { chorus::timeout_scope s(comm, t); }, {"chorus::timeout_scope", "`t`", "1000000000"});
            CHECK(comm.call_timeout() == 0ms); // nothing was changed
        }
        expect_invalid("set_timeout(100 years)", [&] { comm.set_timeout(std::chrono::hours(24 * 365 * 100)); },
                       {"set_timeout", "`t`", "1000000000"});
        CHECK(comm.timeout() == 10s);
        comm.set_timeout(chorus::max_timeout); // the cap itself is accepted
        CHECK(comm.timeout() == chorus::max_timeout);
        {
            chorus::timeout_scope s(comm, 250ms);
            CHECK(comm.call_timeout() == 250ms);
        }
        CHECK(comm.call_timeout() == 0ms); // restored
    });
}

TEST_CASE("model files: directories, devices and oversized files are refused by path") {
    // model::current() reads CHORUS_MODEL once (a function-local static): test load_file.
    const auto refused = [](const std::string& path, const char* why) {
        expect_invalid("load_file(" + path + ")", [&] { chorus::model::load_file(path); },
                       {(std::string("model file '") + path + "'").c_str(), why});
    };
    refused("/tmp", "not a regular file");
    refused("/dev/zero", "not a regular file");
    refused("/no/such/chorus.model", "cannot be read");
    const std::string big = "/tmp/chorus_test_errors_big.model";
    if (std::FILE* f = std::fopen(big.c_str(), "wb")) {
        const std::string line(1023, '#');
        for (int i = 0; i < 1025; ++i) std::fprintf(f, "%s\n", line.c_str()); // 1 MiB + 1 KiB of comments
        std::fclose(f);
        refused(big, "larger than 1048576 bytes");
        std::remove(big.c_str());
    } else {
        FAIL_CHECK("cannot write " << big);
    }
}

TEST_CASE("CHORUS_RANKS_PER_NODE is parsed whole and range-checked") {
    // Read when run_threads makes its ranks' shared state: a bad value fails the call before any rank runs.
    for (const char* v : {"2x", "abc", "0", "-2", "+2", "1e1", "65536", "2,2", "2 ranks", " "}) {
        chorus_test::scoped_env g("CHORUS_RANKS_PER_NODE", v);
        std::atomic<int> ran{0};
        expect_invalid(std::string("run_threads with CHORUS_RANKS_PER_NODE=") + v,
                       [&] { chorus::run_threads(2, [&](comm_t&) { ++ran; }); },
                       {"CHORUS_RANKS_PER_NODE", (std::string("'") + v + "'").c_str(), "whole number of ranks per node",
                        "65535"});
        CHECK(ran == 0);
        expect_invalid(std::string("env_ranks_per_node() with CHORUS_RANKS_PER_NODE=") + v,
                       [] { chorus::detail::env_ranks_per_node(); }, {"CHORUS_RANKS_PER_NODE"});
    }
    {
        chorus_test::scoped_env g("CHORUS_RANKS_PER_NODE", "");
        CHECK(chorus::detail::env_ranks_per_node() == 0); // empty: one node
    }
    for (const char* v : {"2", " 2\n"}) {
        chorus_test::scoped_env g("CHORUS_RANKS_PER_NODE", v);
        CHECK(chorus::detail::env_ranks_per_node() == 2);
        std::atomic<int> wrong{0};
        chorus::run_threads(4, [&](comm_t& comm) {
            comm.set_timeout(20s);
            if (comm.transport().node_size() != 2) ++wrong;
            std::vector<int> x(37, comm.rank() + 1);
            chorus::all_reduce<chorus::hierarchical<>>(comm, std::span<int>(x));
            if (x != std::vector<int>(37, 1 + 2 + 3 + 4)) ++wrong;
        });
        CHECK_MESSAGE(wrong == 0, "CHORUS_RANKS_PER_NODE='" << std::string(v) << "'");
    }
}

TEST_CASE("exchange collectives: counts whose sum overflows, in elements or in bytes, are refused on every rank") {
    constexpr std::size_t huge = std::numeric_limits<std::size_t>::max();
    constexpr std::size_t half = std::size_t(1) << (std::numeric_limits<std::size_t>::digits - 1); // 2^63
    std::atomic<int> ranks_done{0};
    chorus::run_threads(2, [&](comm_t& comm) {
        comm.set_timeout(20s);
        const std::size_t r = std::size_t(comm.rank());
        std::vector<int> a(8), b(8);
        std::vector<double> da(8), db(8);
        // {SIZE_MAX, 2} sums to 1 when it wraps: the sum is checked before any size is compared with it.
        const std::vector<std::size_t> wraps{huge, 2};
        expect_invalid("all_gatherv {SIZE_MAX, 2}", [&] {
            chorus::all_gatherv(comm, std::span<const int>(a).first(r == 0 ? 0 : 1), std::span(b).first(1),
                                std::span<const std::size_t>(wraps));
        }, {"chorus::all_gatherv", "the sum of `counts` overflows"});
        expect_invalid("reduce_scatterv {SIZE_MAX, 2}", [&] {
            chorus::reduce_scatterv(comm, std::span<const int>(a).first(1), std::span(b).first(r == 0 ? 0 : 1),
                                    std::span<const std::size_t>(wraps));
        }, {"chorus::reduce_scatterv", "the sum of `counts` overflows"});
        // Every rank's row and column sum fits (2^63), the whole matrix's (2^64) does not.
        const std::vector<std::size_t> matrix{0, half, half, 0};
        expect_invalid("all_to_allv {0, 2^63; 2^63, 0}", [&] {
            chorus::all_to_allv(comm, std::span<const int>(a).first(2), std::span(b).first(2),
                                std::span<const std::size_t>(matrix));
        }, {"chorus::all_to_allv", "the sum of `counts` overflows"});
        // Sums that fit as element counts but not as bytes of 8-byte elements.
        const std::vector<std::size_t> big2{half / 2, half / 2}, big4{half / 4, half / 4, half / 4, half / 4};
        expect_invalid("all_gatherv<double> {2^62, 2^62}", [&] {
            chorus::all_gatherv(comm, std::span<const double>(da).first(2), std::span(db).first(4),
                                std::span<const std::size_t>(big2));
        }, {"chorus::all_gatherv", "the sum of `counts` in bytes overflows", "* 8"});
        expect_invalid("reduce_scatterv<double> {2^62, 2^62}", [&] {
            chorus::reduce_scatterv(comm, std::span<const double>(da).first(4), std::span(db).first(2),
                                    std::span<const std::size_t>(big2));
        }, {"chorus::reduce_scatterv", "the sum of `counts` in bytes overflows"});
        expect_invalid("all_to_allv<double> {2^61 x 4}", [&] {
            chorus::all_to_allv(comm, std::span<const double>(da).first(2), std::span(db).first(2),
                                std::span<const std::size_t>(big4));
        }, {"chorus::all_to_allv", "the sum of `counts` in bytes overflows"});
        // size() * count overflows: spans of a bogus size, refused before anything reads them.
        expect_invalid("all_gather with size() * in.size() overflowing", [&] {
            chorus::all_gather(comm, std::span<const char>(reinterpret_cast<const char*>(a.data()), half),
                               std::span(reinterpret_cast<char*>(b.data()), 2));
        }, {"chorus::all_gather", "size() * in.size() overflows"});
        expect_invalid("reduce_scatter with size() * out.size() overflowing", [&] {
            chorus::reduce_scatter(comm, std::span<const char>(reinterpret_cast<const char*>(a.data()), 2),
                                   std::span(reinterpret_cast<char*>(b.data()), half));
        }, {"chorus::reduce_scatter", "size() * out.size() overflows"});
        // Nothing above reached the backend: the communicator still works.
        const std::vector<std::size_t> ok{1, 3};
        std::vector<int> mine(ok[r], int(r) + 1), all(4);
        chorus::all_gatherv(comm, std::span<const int>(mine), std::span(all), std::span<const std::size_t>(ok));
        CHECK(all == std::vector<int>{1, 2, 2, 2});
        ++ranks_done;
    });
    CHECK(ranks_done == 2);
}

namespace {

//! The address space this process maps, in bytes (what RLIMIT_AS limits).
std::size_t mapped_bytes() {
    unsigned long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
        std::fclose(f);
    }
    return std::size_t(pages) * std::size_t(sysconf(_SC_PAGESIZE));
}

//! The stack size of a thread started with default attributes (std::thread's).
std::size_t default_stack_bytes() {
    std::size_t s = 0;
    pthread_attr_t a;
    if (pthread_getattr_default_np(&a) == 0) {
        pthread_attr_getstacksize(&a, &s);
        pthread_attr_destroy(&a);
    }
    return s != 0 ? s : std::size_t(8) << 20;
}

//! Caps this process's address space at what it maps now plus `extra` bytes.
bool cap_address_space(std::size_t extra) {
    rlimit lim{};
    if (getrlimit(RLIMIT_AS, &lim) != 0) return false;
    lim.rlim_cur = rlim_t(mapped_bytes() + extra);
    return setrlimit(RLIMIT_AS, &lim) == 0;
}

//! Runs child() in a forked process that exits with its result; returns
//! that exit code, or -1 (with `how` saying why) when the child died of a
//! signal (std::terminate: SIGABRT) or ran past `timeout` (then killed).
template <class F>
int run_in_child(F&& child, std::chrono::seconds timeout, std::string& how) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        how = "fork failed";
        return -1;
    }
    if (pid == 0) {
        int rc = 99;
        try {
            rc = child();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "child: uncaught: %s\n", e.what());
            rc = 98;
        } catch (...) {
            rc = 98;
        }
        std::fflush(nullptr);
        ::_exit(rc);
    }
    const auto t0 = steady::now();
    int st = 0;
    for (;;) {
        const pid_t w = ::waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0) {
            how = "waitpid failed";
            return -1;
        }
        if (steady::now() - t0 > timeout) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
            how = "hung: killed after " + std::to_string(timeout.count()) + " s";
            return -1;
        }
        std::this_thread::sleep_for(10ms);
    }
    if (WIFSIGNALED(st)) {
        how = "died of signal " + std::to_string(WTERMSIG(st)) + (WTERMSIG(st) == SIGABRT ? " (std::terminate?)" : "");
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

//! In a child: what a call that must fail with errc::unavailable naming
//! `needles` did, as an exit code (0: as expected), reported on stderr.
template <class F>
int expect_unavailable_in_child(const char* what, F&& f, std::initializer_list<const char*> needles) {
    try {
        f();
        std::fprintf(stderr, "%s: no exception\n", what);
        return 10;
    } catch (const chorus::error& e) {
        if (e.code() != errc::unavailable) {
            std::fprintf(stderr, "%s: code %s: %s\n", what, chorus::to_string(e.code()), e.what());
            return 11;
        }
        for (const char* n : needles)
            if (!contains(e.what(), n)) {
                std::fprintf(stderr, "%s: message lacks '%s': %s\n", what, n, e.what());
                return 12;
            }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: not a chorus::error: %s\n", what, e.what());
        return 13;
    }
}

void* block_on_pipe(void* fd) {
    char c;
    while (::read(*static_cast<int*>(fd), &c, 1) < 0) {
    }
    return nullptr;
}

} // namespace

// RLIMIT_AS makes thread creation fail for real; sanitizers reserve terabytes of address space, so not there.
TEST_CASE("run_threads: a rank thread that cannot be started ends in errc::unavailable naming the limit" *
          doctest::skip(chorus_fault::sanitized)) {
    std::string how;
    const int rc = run_in_child([] {
        // Room for about three more default stacks: of 64 ranks a few start (and wait in all_reduce for the
        // others), then starting the next fails.
        const std::size_t stack = default_stack_bytes();
        if (!cap_address_space(3 * stack + stack / 2)) return 20;
        return expect_unavailable_in_child("run_threads(64)", [] {
            chorus::run_threads(64, [](comm_t& comm) {
                comm.set_timeout(60s); // longer than the test waits: only the abort releases them
                std::vector<float> v(64, 1.0f);
                chorus::all_reduce(comm, std::span<float>(v));
            });
        }, {"chorus::run_threads: could not start the thread of rank ", " of 64", "ulimit -u", "threads-max"});
    }, 30s, how);
    CHECK_MESSAGE(rc == 0, "child exit " << rc << " " << how << " (20: setrlimit failed; 10: every thread started; "
                                                               "11-13: another error, see stderr)");
}

TEST_CASE("async calls: a worker thread that cannot be started ends in errc::unavailable, the stream stays usable" *
          doctest::skip(chorus_fault::sanitized)) {
    std::string how;
    const int rc = run_in_child([] {
        const std::size_t stack = default_stack_bytes();
        const std::size_t spare = stack / 2; // room for small allocations, not for a thread's stack
        int fds[2];
        if (::pipe(fds) != 0) return 21;
        std::vector<pthread_t> blockers;
        blockers.reserve(4096);
        void* reserve = ::mmap(nullptr, spare, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        void* later = ::mmap(nullptr, 2 * stack, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); // for the retry
        if (reserve == MAP_FAILED || later == MAP_FAILED || !cap_address_space(2 * stack)) return 20;
        // Take the rest of the address space, then every stack glibc keeps cached for reuse.
        for (std::size_t chunk = 2 * stack; chunk >= 4096; chunk /= 2)
            while (::mmap(nullptr, chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
            }
        for (pthread_t t{}; blockers.size() < 4096 && pthread_create(&t, nullptr, block_on_pipe, &fds[0]) == 0;)
            blockers.push_back(t);
        if (blockers.size() == 4096) return 22;
        ::munmap(reserve, spare);
        int result = 0;
        chorus::run_threads(1, [&](comm_t& comm) {
            std::vector<float> v(16, 1.0f);
            result = expect_unavailable_in_child("all_reduce_async", [&] {
                chorus::future f = chorus::all_reduce_async(comm, std::span<float>(v));
                f.wait();
            }, {"could not start the worker thread", "async calls", "ulimit -u", "nothing was queued"});
            if (result != 0) return;
            chorus::all_reduce(comm, std::span<float>(v)); // sync, inline: the stream holds nothing half-queued
            // With room for a thread again, the next async call starts the worker and runs.
            ::close(fds[1]);
            for (pthread_t t : blockers) pthread_join(t, nullptr);
            ::munmap(later, 2 * stack);
            chorus::all_reduce_async(comm, std::span<float>(v)).wait();
            if (v != std::vector<float>(16, 1.0f)) result = 30;
        });
        return result; // and the communicator's end (draining its stream) did not hang
    }, 30s, how);
    CHECK_MESSAGE(rc == 0, "child exit " << rc << " " << how << " (20-22: set-up failed; 10: the worker started; "
                                                               "11-13: another error, see stderr)");
}
