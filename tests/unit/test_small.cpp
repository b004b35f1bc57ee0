// The threads backend's small-message protocol (backend/threads.hpp:
// threads_transport::run_small): what `automatic` runs for an AllReduce of
// at most the model's small_bytes, and every barrier.
//
//   * an exhaustive model check of the protocol's buffer rule (every
//     interleaving of 2 and 3 ranks over a sequence of small and scheduled
//     calls): no box is rewritten while a peer may still read it, no rank
//     reads data of another call, nothing deadlocks; and the same checker
//     catches a protocol that posts before writing (a reordered flag),
//     forgets a post (a lost flag) or skips the reuse wait;
//   * the real transport: results exact and bitwise the same on every rank
//     (the fold in rank order), small calls mixed with scheduled calls and
//     barriers, lagging ranks; disagreements (small against small, small
//     against scheduled) fail on every rank at once with errc::mismatch,
//     a rank that leaves with peer_failed, a stall with a timeout that
//     names the protocol.

#include "test_util.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace chorus_test;
using namespace std::chrono_literals;
using comm_t = chorus::communicator<chorus::threads>;
using chorus::errc;

// --- the model check ---------------------------------------------------------------------

//! How the modelled protocol may be broken (each must be caught).
enum class mutation { none, post_before_write, lost_post, no_reuse_wait };

//! The protocol of run_small as a state machine, a step per shared-memory
//! action. A rank runs calls 1..K in order; call i is small or scheduled
//! (`small[i]`). Small call i: (reuse) unless it saw every peer at i - 1,
//! wait until every peer entered i - 1; write its data into box i & 1;
//! post the box's sequence number; then for each rank q: wait until q's box
//! i & 1 shows i, and read it (a separate step: anything may happen in
//! between). Scheduled call i: post "entered i" (the progress flag) and
//! leave at once (the weakest schedule: no waits at all).
struct model {
    int n = 2;
    std::vector<bool> small; // index 1..K
    mutation mut = mutation::none;

    struct rank_state {
        int call = 1;  // the call being run (K + 1: done)
        int phase = 0; // small: 0 reuse, 1 write, 2 post, 3 + 2q wait for q, 4 + 2q read q
        int seen = 0;  // the latest call at which it saw every peer
        int flag = 0;  // scheduled calls entered
        int box_seq[2] = {0, 0};
        int box_data[2] = {0, 0};
        auto key() const { return std::vector<int>{call, phase, seen, flag, box_seq[0], box_seq[1], box_data[0], box_data[1]}; }
    };
    using state = std::vector<rank_state>;

    int calls() const { return int(small.size()) - 1; }
    static int entered(const rank_state& s) { return std::max(s.flag, std::max(s.box_seq[0], s.box_seq[1])); }

    //! Applies rank r's next step if it can move; false if it waits or is done.
    //! `error` is set when the step reads data of another call.
    bool step(state& st, int r, std::string& error) const {
        rank_state& me = st[std::size_t(r)];
        const int i = me.call;
        if (i > calls()) return false;
        if (!small[std::size_t(i)]) {
            me.flag = i;
            me.call++;
            me.phase = 0;
            return true;
        }
        const int b = i & 1;
        auto next_call = [&] {
            me.seen = i;
            me.call++;
            me.phase = 0;
        };
        switch (me.phase) {
        case 0: // reuse
            if (mut != mutation::no_reuse_wait && me.seen + 1 < i)
                for (int q = 0; q < n; ++q)
                    if (q != r && entered(st[std::size_t(q)]) + 1 < i) return false;
            me.phase = mut == mutation::post_before_write ? 2 : 1;
            return true;
        case 1: // write
            me.box_data[b] = i;
            me.phase = mut == mutation::post_before_write ? 3 : 2;
            return true;
        case 2: // post
            if (!(mut == mutation::lost_post && r == 0 && i == 3)) me.box_seq[b] = i;
            me.phase = mut == mutation::post_before_write ? 1 : 3;
            return true;
        default: {
            const int q = (me.phase - 3) / 2;
            if (q >= n) {
                next_call();
                return true;
            }
            const rank_state& peer = st[std::size_t(q)];
            if ((me.phase - 3) % 2 == 0) { // wait for q's box
                if (q != r && peer.box_seq[b] < i) return false;
                me.phase++;
                return true;
            }
            if (peer.box_data[b] != i && error.empty())
                error = "rank " + std::to_string(r) + " read data of call " + std::to_string(peer.box_data[b]) +
                        " in rank " + std::to_string(q) + "'s box during call " + std::to_string(i);
            me.phase++;
            if (me.phase - 3 >= 2 * n) next_call();
            return true;
        }
        }
    }

    //! Every interleaving from the start; returns the first violation ("" if none).
    std::string explore() const {
        std::set<std::vector<int>> visited;
        std::vector<state> stack{state(std::size_t(n))};
        while (!stack.empty()) {
            state st = stack.back();
            stack.pop_back();
            std::vector<int> key;
            for (const rank_state& s : st)
                for (int x : s.key()) key.push_back(x);
            if (!visited.insert(key).second) continue;
            bool moved = false, done = true;
            for (int r = 0; r < n; ++r) {
                done = done && st[std::size_t(r)].call > calls();
                state next = st;
                std::string error;
                if (!step(next, r, error)) continue;
                if (!error.empty()) return error;
                moved = true;
                stack.push_back(std::move(next));
            }
            if (!moved && !done) return "deadlock: no rank can move and not every rank has finished";
        }
        return {};
    }
};

//! The call sequences checked: small runs, and small calls after scheduled ones.
std::vector<std::vector<bool>> sequences() {
    return {{false, true, true, true, true},
            {false, false, true, true, false, true},
            {false, true, false, true, true},
            {false, true, true, false, false, true, true}};
}

} // namespace

TEST_CASE("small-message protocol: model check of the buffer rule over every interleaving") {
    for (int n : {2, 3}) {
        for (const std::vector<bool>& seq : sequences()) {
            if (n == 3 && seq.size() > 6) continue; // the 3-rank state space of the longest sequence is slow
            model m{n, seq, mutation::none};
            INFO("ranks " << n << ", calls " << seq.size() - 1);
            CHECK(m.explore() == "");
        }
    }
}

TEST_CASE("small-message protocol: the model check catches a reordered, a lost post and a skipped reuse wait") {
    // A scheduled call between small ones: the reuse wait's case (a run of
    // small calls sees every peer at each call and needs no wait).
    const std::vector<bool> seq{false, true, false, true, true};
    for (int n : {2, 3}) {
        INFO("ranks " << n);
        const std::string reordered = model{n, seq, mutation::post_before_write}.explore();
        CHECK_MESSAGE(contains(reordered, "read data of call"), reordered);
        const std::string lost = model{n, seq, mutation::lost_post}.explore();
        CHECK_MESSAGE(contains(lost, "deadlock"), lost);
        const std::string no_reuse = model{n, seq, mutation::no_reuse_wait}.explore();
        CHECK_MESSAGE(contains(no_reuse, "read data of call"), no_reuse);
    }
}

TEST_CASE("small-message protocol: which calls automatic sends to it") {
    using chorus::automatic;
    using chorus::policy;
    chorus::schedule_args a{};
    a.coll = chorus::collective::all_reduce;
    a.nranks = 2;
    a.elem_bytes = 4;
    a.count = 4;
    const std::uint64_t cap = chorus::detail::host_small_cap;
    CHECK(automatic::small_message(policy::automatic(), a, cap));
    CHECK(automatic::small_message(chorus::policy_of<chorus::deterministic<>>, a, cap));
    CHECK_FALSE(automatic::small_message(chorus::policy_of<chorus::ring<>>, a, cap)); // named: runs as named
    CHECK_FALSE(automatic::small_message(policy::automatic(), a, 0));                  // no protocol
    a.count = 0;
    CHECK(automatic::small_message(policy::automatic(), a, cap));
    CHECK_FALSE(automatic::small_message(policy::automatic(), a, 0)); // not even for nothing
    a.count = 512; // 2 KiB: the default small_bytes
    CHECK(automatic::small_message(policy::automatic(), a, cap));
    a.count = 513;
    CHECK_FALSE(automatic::small_message(policy::automatic(), a, cap));
    a.count = 4;
    a.nranks = 1;
    CHECK_FALSE(automatic::small_message(policy::automatic(), a, cap));
    a.nranks = 2;
    a.coll = chorus::collective::all_gather;
    CHECK_FALSE(automatic::small_message(policy::automatic(), a, cap));
    chorus::model::topology off{};
    off.small_bytes = 0; // a model file can turn it off
    a.coll = chorus::collective::all_reduce;
    a.topo = &off;
    CHECK_FALSE(automatic::small_message(policy::automatic(), a, cap));
}

// --- the real transport -------------------------------------------------------------------

TEST_CASE("small-message protocol: exact, and bitwise the same fold in rank order on every rank") {
    const std::uint64_t cap = chorus::detail::host_small_cap;
    for (int n : {2, 3, 5}) {
        failure_log log;
        INFO("ranks " << n);
        // Counts around the one-line case (48 bytes) and up to small_bytes.
        const std::vector<std::size_t> counts{0, 1, 2, 11, 12, 13, 100, 511, 512};
        std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(20s);
            const int r = comm.rank();
            for (std::size_t c : counts) {
                REQUIRE(c * sizeof(float) <= cap);
                // Non-integer values: the sum depends on the order.
                std::vector<float> in(c), out(c, -1.0f);
                for (std::size_t i = 0; i < c; ++i) in[i] = 1.0f / float(3 + r * 7 + int(i % 13)) + float(r) * 1e3f;
                chorus::all_reduce(comm, std::span<const float>(in), std::span(out));
                std::vector<float> ref(c);
                for (std::size_t i = 0; i < c; ++i) {
                    float acc = 0;
                    for (int q = 0; q < n; ++q) {
                        const float v = 1.0f / float(3 + q * 7 + int(i % 13)) + float(q) * 1e3f;
                        acc = q == 0 ? v : acc + v;
                    }
                    ref[i] = acc;
                }
                if (c != 0 && std::memcmp(out.data(), ref.data(), c * sizeof(float)) != 0)
                    log.add("rank " + std::to_string(r) + ": count " + std::to_string(c) + " differs from the rank-order fold");
                // In place, avg and max on integers.
                std::vector<std::int64_t> v(c);
                for (std::size_t i = 0; i < c; ++i) v[i] = std::int64_t(r * 100 + int(i));
                chorus::all_reduce(comm, std::span(v), chorus::max{});
                for (std::size_t i = 0; i < c; ++i)
                    if (v[i] != std::int64_t((n - 1) * 100 + int(i))) {
                        log.add("rank " + std::to_string(r) + ": max in place, count " + std::to_string(c));
                        break;
                    }
                std::vector<double> d(c, double(r * 2)), davg(c);
                chorus::all_reduce(comm, std::span<const double>(d), std::span(davg), chorus::avg{});
                for (std::size_t i = 0; i < c; ++i)
                    if (davg[i] != double(n - 1)) {
                        log.add("rank " + std::to_string(r) + ": avg, count " + std::to_string(c));
                        break;
                    }
                got[std::size_t(r)] = out;
            }
        });
        log.report();
        for (int q = 1; q < n; ++q) CHECK(got[std::size_t(q)] == got[0]);
    }
}

TEST_CASE("small-message protocol: mixed with scheduled calls and barriers, with lagging ranks") {
    for (int n : {2, 3, 4}) {
        failure_log log;
        INFO("ranks " << n);
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(30s);
            const int r = comm.rank();
            std::mt19937 lag(unsigned(1234 + r)); // each rank lags at its own moments
            std::mt19937 shape(99);               // the same call sequence on every rank
            for (int it = 0; it < 300; ++it) {
                const int kind = int(shape() % 5);
                const std::size_t c = 1 + shape() % 700;
                if (lag() % 7 == 0) std::this_thread::yield();
                if (lag() % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(lag() % 300));
                std::vector<std::int32_t> in(c), out(c);
                for (std::size_t i = 0; i < c; ++i) in[i] = std::int32_t(r + 1) * std::int32_t(i + it);
                std::int32_t tri = 0;
                for (int q = 0; q < n; ++q) tri += q + 1;
                switch (kind) {
                case 0: chorus::barrier(comm); continue;
                case 1: chorus::all_reduce<chorus::ring<>>(comm, std::span<const std::int32_t>(in), std::span(out)); break;
                case 2: chorus::all_reduce<chorus::direct<>>(comm, std::span<const std::int32_t>(in), std::span(out)); break;
                default: chorus::all_reduce(comm, std::span<const std::int32_t>(in), std::span(out)); break;
                }
                for (std::size_t i = 0; i < c; ++i)
                    if (out[i] != tri * std::int32_t(i + it)) {
                        log.add("rank " + std::to_string(r) + ": call " + std::to_string(it) + " kind " +
                                    std::to_string(kind) + " count " + std::to_string(c) + " wrong at " + std::to_string(i));
                        break;
                    }
            }
        });
        log.report();
    }
}

namespace {

struct outcome {
    bool threw = false;
    errc code = errc::internal;
    std::string what;
    double after_s = 0;
};

template <class F>
outcome capture(F&& f) {
    outcome o;
    const auto t0 = steady::now();
    try {
        f();
    } catch (const chorus::error& e) {
        o.threw = true;
        o.code = e.code();
        o.what = e.what();
    }
    o.after_s = seconds_since(t0);
    return o;
}

//! Runs `call(comm, rank)` on n ranks (after one good small AllReduce) and
//! returns what each rank saw.
template <class Call>
std::vector<outcome> run_case(int n, bool checked, std::chrono::milliseconds timeout, Call call) {
    std::vector<outcome> seen(static_cast<std::size_t>(n));
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_checked(checked);
        comm.set_timeout(timeout);
        std::vector<float> warm(4, 1.0f);
        chorus::all_reduce(comm, std::span(warm));
        seen[std::size_t(comm.rank())] = capture([&] { call(comm, comm.rank()); });
    });
    return seen;
}

} // namespace

TEST_CASE("small-message protocol: disagreeing ranks all fail at once with errc::mismatch") {
    for (bool checked : {false, true}) {
        INFO("checked " << checked);
        // Small against small: another operator.
        auto seen = run_case(3, checked, 30s, [](comm_t& comm, int r) {
            std::vector<float> v(4, 1.0f);
            if (r == 1) chorus::all_reduce(comm, std::span(v), chorus::max{});
            else chorus::all_reduce(comm, std::span(v), chorus::sum{});
        });
        for (int r = 0; r < 3; ++r) {
            const outcome& o = seen[std::size_t(r)];
            INFO("rank " << r << ": " << o.what);
            // A rank that issues its call after the others broke the
            // communicator gets errc::aborted, with the same reason.
            CHECK(o.threw);
            CHECK((o.code == errc::mismatch || o.code == errc::aborted));
            CHECK(o.after_s < 10);
            CHECK(contains(o.what, "ranks disagree"));
        }
        CHECK((contains(seen[0].what, "max") || contains(seen[1].what, "max") || contains(seen[2].what, "max")));
        // Small against scheduled: another count (one rank past small_bytes).
        seen = run_case(2, checked, 30s, [](comm_t& comm, int r) {
            std::vector<float> v(r == 0 ? 4 : 100000, 1.0f);
            chorus::all_reduce(comm, std::span(v));
        });
        for (int r = 0; r < 2; ++r) {
            const outcome& o = seen[std::size_t(r)];
            INFO("rank " << r << ": " << o.what);
            CHECK(o.threw);
            CHECK((o.code == errc::mismatch || o.code == errc::aborted));
            CHECK(contains(o.what, "ranks disagree"));
            CHECK(o.after_s < 10);
        }
        // Small against a barrier.
        seen = run_case(2, checked, 30s, [](comm_t& comm, int r) {
            std::vector<float> v(4, 1.0f);
            if (r == 0) chorus::barrier(comm);
            else chorus::all_reduce(comm, std::span(v));
        });
        for (int r = 0; r < 2; ++r) {
            INFO("rank " << r << ": " << seen[std::size_t(r)].what);
            CHECK((seen[std::size_t(r)].code == errc::mismatch || seen[std::size_t(r)].code == errc::aborted));
            CHECK(contains(seen[std::size_t(r)].what, "ranks disagree"));
        }
    }
}

TEST_CASE("small-message protocol: a rank that leaves fails its peers; a stall times out naming the protocol") {
    auto seen = run_case(3, false, 30s, [](comm_t& comm, int r) {
        std::vector<float> v(4, 1.0f);
        if (r != 2) chorus::all_reduce(comm, std::span(v));
    });
    for (int r = 0; r < 2; ++r) {
        INFO("rank " << r << ": " << seen[std::size_t(r)].what);
        CHECK(seen[std::size_t(r)].code == errc::peer_failed);
        CHECK(contains(seen[std::size_t(r)].what, "rank 2"));
        CHECK(seen[std::size_t(r)].after_s < 10);
    }
    CHECK_FALSE(seen[2].threw);

    std::atomic<bool> released{false};
    seen = run_case(2, false, 300ms, [&](comm_t& comm, int r) {
        std::vector<float> v(4, 1.0f);
        if (r == 1) {
            while (!released.load()) std::this_thread::sleep_for(1ms);
            chorus::all_reduce(comm, std::span(v)); // the communicator is broken by then
        } else {
            try {
                chorus::all_reduce(comm, std::span(v));
            } catch (...) {
                released = true;
                throw;
            }
            released = true;
        }
    });
    INFO("rank 0: " << seen[0].what);
    CHECK(seen[0].code == errc::timeout);
    CHECK(contains(seen[0].what, "small-message protocol"));
    CHECK(contains(seen[0].what, "not joined it: 1"));
    CHECK(seen[1].threw);
}
