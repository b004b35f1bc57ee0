// Point-to-point on the lane executor, on CPU threads. exec/lane_p2p.hpp's
// run_lane_p2p is the body of the GPU backend's send/recv kernel
// (kernels/p2p.cuh, one block per call); here the same function runs with
// each lane a CPU thread and each "stream" (a rank's calls in order) one
// group of lanes, so the rendezvous protocol (descriptor, claim, withdrawal,
// acknowledgement), the per-pair message numbers kept in the rank areas,
// the mismatch check, the deadline, the abort word, the address translation
// of one process per GPU and the lane-parallel copy are all exercised
// without a GPU. Covered: ring shifts on 2-5 ranks (one stream per rank,
// even ranks sending first; and separate send and receive streams), several
// messages per pair in order, a pipeline chain, zero-length messages, sizes
// that are not multiples of the vector width and misaligned pointers, count,
// element-size and type mismatches (both sides fail naming both counts), a
// peer that never posts (timeout on one side, peer_failed on the other), the
// abort word set mid-wait, the withdrawal race (a sender that gives up never
// returns while its receiver copies), messages interleaved with collectives
// on the same areas, and translated / unreachable buffers (lane_world::maps).
#include <doctest/doctest.h>

#include <chorus/chorus.hpp>
#include "lane_test_util.hpp"

#include <chorus/backend/gpu_checks.hpp>
#include <chorus/exec/lane_channel.hpp>
#include <chorus/exec/lane_p2p.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace chorus;
using chorus::detail::status;
using chorus_test::lane_stream;
using chorus_test::lane_world_host;
using chorus_test::p2p_call;
using chorus_test::p2p_launch;

namespace {

template <class T>
T pattern(int src, int dst, int msg, std::uint64_t i) {
    return T((std::uint64_t(src) * 31 + std::uint64_t(dst) * 7 + std::uint64_t(msg) * 13 + i * 3) % 97 + 1);
}

// The error rank r reports for its failure record (what the GPU backend's check() throws).
error report(lane_world_host& w, int r) { return detail::gpu_fault_error(r, w.faults.data(), int(w.faults.size()), ""); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Ring shift: every rank sends `msgs` messages to r+1 and receives as many
// from r-1; sizes vary per message; buffers start `offset` elements into
// their storage (misaligned for offsets that are not multiples of the
// vector width). `split`: sends and receives on separate streams;
// otherwise one stream per rank, even ranks sending first.
template <class T>
void ring_shift(int n, int lanes, int msgs, std::uint64_t base_count, std::size_t send_off, std::size_t recv_off,
                bool split) {
    CAPTURE(n);
    CAPTURE(lanes);
    CAPTURE(base_count);
    CAPTURE(send_off);
    CAPTURE(recv_off);
    CAPTURE(split);
    lane_world_host w(n);
    auto count_of = [&](int m) { return base_count == 0 ? 0 : base_count + std::uint64_t(m) * 5; };
    // storage[r][m]: send and receive buffers of rank r's message m.
    std::vector<std::vector<std::vector<T>>> sendb(static_cast<std::size_t>(n)), recvb(static_cast<std::size_t>(n));
    std::vector<lane_stream> streams;
    for (int r = 0; r < n; ++r) {
        const int to = (r + 1) % n, from = (r + n - 1) % n;
        lane_stream s, rs;
        s.rank = rs.rank = r;
        for (int m = 0; m < msgs; ++m) {
            const std::uint64_t c = count_of(m);
            sendb[std::size_t(r)].emplace_back(std::size_t(c) + send_off + 1);
            recvb[std::size_t(r)].emplace_back(std::size_t(c) + recv_off + 1, T(0));
            auto& sb = sendb[std::size_t(r)].back();
            for (std::uint64_t i = 0; i < c; ++i) sb[send_off + i] = pattern<T>(r, to, m, i);
        }
        for (int m = 0; m < msgs; ++m) {
            const std::uint64_t c = count_of(m);
            T* sp = c == 0 ? nullptr : sendb[std::size_t(r)][std::size_t(m)].data() + send_off;
            T* rp = c == 0 ? nullptr : recvb[std::size_t(r)][std::size_t(m)].data() + recv_off;
            auto snd = p2p_call(p2p_launch<T>(w, r, true, to, sp, c));
            auto rcv = p2p_call(p2p_launch<T>(w, r, false, from, rp, c));
            if (split) {
                s.calls.push_back(snd);
                rs.calls.push_back(rcv);
            } else if (r % 2 == 0) {
                s.calls.push_back(snd);
                s.calls.push_back(rcv);
            } else {
                s.calls.push_back(rcv);
                s.calls.push_back(snd);
            }
        }
        streams.push_back(std::move(s));
        if (split) streams.push_back(std::move(rs));
    }
    chorus_test::run_lane_streams(streams, lanes);
    for (const auto& s : streams)
        for (status st : s.result) CHECK(st == status::ok);
    for (int r = 0; r < n; ++r) {
        const int from = (r + n - 1) % n;
        for (int m = 0; m < msgs; ++m) {
            const auto& rb = recvb[std::size_t(r)][std::size_t(m)];
            const std::uint64_t c = count_of(m);
            bool ok = true;
            for (std::size_t i = 0; i < recv_off; ++i) ok = ok && rb[i] == T(0); // nothing before
            for (std::uint64_t i = 0; i < c; ++i) ok = ok && rb[recv_off + i] == pattern<T>(from, r, m, i);
            ok = ok && rb[recv_off + c] == T(0); // nothing after
            CHECK_MESSAGE(ok, "rank " << r << " message " << m);
        }
        CHECK(w.faults[std::size_t(r)].code == 0);
    }
    CHECK(w.abort == 0);
    // The areas' counters: msgs messages per pair and direction.
    for (int r = 0; r < n; ++r) {
        CHECK(w.areas[std::size_t(r)]->p2p_out[(r + 1) % n].sent == std::uint64_t(msgs));
        CHECK(w.areas[std::size_t(r)]->p2p_in[(r + n - 1) % n].received == std::uint64_t(msgs));
    }
}

} // namespace

TEST_CASE("lanes p2p: ring shift on 2-5 ranks, several messages per pair in order") {
    for (int n = 2; n <= 5; ++n)
        for (int lanes : {1, 3}) {
            ring_shift<float>(n, lanes, 3, 37, 0, 0, false);
            ring_shift<float>(n, lanes, 3, 37, 0, 0, true);
        }
    // Larger: vector interior split over the lanes.
    ring_shift<double>(4, 4, 2, 4099, 0, 0, true);
    ring_shift<std::int8_t>(3, 2, 4, 1000, 0, 0, false);
}

TEST_CASE("lanes p2p: sizes that are not multiples of the vector width, misaligned pointers") {
    for (std::uint64_t c : {1ull, 2ull, 3ull, 5ull, 7ull, 15ull, 17ull, 63ull, 65ull, 129ull})
        for (std::size_t so : {0, 1, 3})
            for (std::size_t ro : {0, 1, 2}) {
                ring_shift<float>(2, 3, 2, c, so, ro, true);
                ring_shift<std::int8_t>(3, 2, 1, c, so, ro, false);
            }
    ring_shift<std::uint16_t>(5, 3, 2, 301, 3, 5, true);
}

TEST_CASE("lanes p2p: zero-length messages match and complete") {
    for (int n = 2; n <= 4; ++n) ring_shift<float>(n, 2, 3, 0, 0, 0, false);
    // A zero-length message between two real ones keeps the numbering.
    lane_world_host w(2);
    std::vector<int> a(10), b(10, 0);
    for (int i = 0; i < 10; ++i) a[std::size_t(i)] = i + 1;
    std::vector<lane_stream> s(2);
    s[0].rank = 0;
    s[1].rank = 1;
    s[0].calls = {p2p_call(p2p_launch<int>(w, 0, true, 1, a.data(), 4)),
                  p2p_call(p2p_launch<int>(w, 0, true, 1, static_cast<int*>(nullptr), 0)),
                  p2p_call(p2p_launch<int>(w, 0, true, 1, a.data() + 4, 6))};
    s[1].calls = {p2p_call(p2p_launch<int>(w, 1, false, 0, b.data(), 4)),
                  p2p_call(p2p_launch<int>(w, 1, false, 0, static_cast<int*>(nullptr), 0)),
                  p2p_call(p2p_launch<int>(w, 1, false, 0, b.data() + 4, 6))};
    chorus_test::run_lane_streams(s, 2);
    for (auto& x : s)
        for (status st : x.result) CHECK(st == status::ok);
    CHECK(a == b);
}

TEST_CASE("lanes p2p: a pipeline chain 0 -> 1 -> ... -> n-1") {
    for (int n = 2; n <= 5; ++n) {
        CAPTURE(n);
        lane_world_host w(n);
        const std::uint64_t count = 1000 + std::uint64_t(n);
        const int micro = 3;
        std::vector<std::vector<float>> buf(std::size_t(n) * micro, std::vector<float>(std::size_t(count), 0.f));
        auto at = [&](int r, int m) { return buf[std::size_t(r) * micro + std::size_t(m)].data(); };
        for (int m = 0; m < micro; ++m)
            for (std::uint64_t i = 0; i < count; ++i) at(0, m)[i] = float(m * 10000 + int(i));
        std::vector<lane_stream> streams(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
            streams[std::size_t(r)].rank = r;
            for (int m = 0; m < micro; ++m) {
                if (r > 0) streams[std::size_t(r)].calls.push_back(p2p_call(p2p_launch<float>(w, r, false, r - 1, at(r, m), count)));
                // A stage's work between receive and send: add 1.
                if (r > 0)
                    streams[std::size_t(r)].calls.push_back([p = at(r, m), count](const chorus_test::host_lanes& hl) {
                        hl.sync();
                        for (std::uint64_t i = std::uint64_t(hl.id()); i < count; i += std::uint64_t(hl.count())) p[i] += 1.f;
                        hl.sync();
                        return status::ok;
                    });
                if (r < n - 1)
                    streams[std::size_t(r)].calls.push_back(p2p_call(p2p_launch<float>(w, r, true, r + 1, at(r, m), count)));
            }
        }
        chorus_test::run_lane_streams(streams, 3);
        for (auto& s : streams)
            for (status st : s.result) CHECK(st == status::ok);
        for (int m = 0; m < micro; ++m) {
            bool ok = true;
            for (std::uint64_t i = 0; i < count; ++i) ok = ok && at(n - 1, m)[i] == float(m * 10000 + int(i) + n - 1);
            CHECK_MESSAGE(ok, "micro-batch " << m);
        }
    }
}

TEST_CASE("lanes p2p: a count, element size or type mismatch fails both sides naming both counts") {
    SUBCASE("count") {
        lane_world_host w(2);
        std::vector<float> a(10, 1.f), b(12, 0.f);
        std::vector<lane_stream> s(2);
        s[0].rank = 0;
        s[1].rank = 1;
        s[0].calls = {p2p_call(p2p_launch<float>(w, 0, true, 1, a.data(), 10))};
        s[1].calls = {p2p_call(p2p_launch<float>(w, 1, false, 0, b.data(), 12))};
        chorus_test::run_lane_streams(s, 3);
        CHECK(s[0].result[0] == status::mismatch);
        CHECK(s[1].result[0] == status::mismatch);
        for (float x : b) CHECK(x == 0.f); // nothing copied
        for (int r = 0; r < 2; ++r) {
            const error e = report(w, r);
            CAPTURE(e.what());
            CHECK(e.code() == errc::mismatch);
            CHECK(contains(e.what(), "rank 0 sends 10 elements (4-byte) but rank 1 receives 12 elements (4-byte)"));
            CHECK(contains(e.what(), "message #1 from rank 0 to rank 1"));
            CHECK(contains(e.what(), r == 0 ? "send: " : "recv: "));
        }
        CHECK(w.abort != 0);
    }
    SUBCASE("element size") {
        lane_world_host w(2);
        std::vector<double> a(8, 1.0);
        std::vector<float> b(8, 0.f);
        std::vector<lane_stream> s(2);
        s[0].rank = 0;
        s[1].rank = 1;
        s[0].calls = {p2p_call(p2p_launch<double>(w, 0, true, 1, a.data(), 8))};
        s[1].calls = {p2p_call(p2p_launch<float>(w, 1, false, 0, b.data(), 8))};
        chorus_test::run_lane_streams(s, 1);
        CHECK(s[0].result[0] == status::mismatch);
        CHECK(s[1].result[0] == status::mismatch);
        for (int r = 0; r < 2; ++r) {
            const error e = report(w, r);
            CHECK(e.code() == errc::mismatch);
            CHECK(contains(e.what(), "rank 0 sends 8 elements (8-byte) but rank 1 receives 8 elements (4-byte)"));
        }
    }
    SUBCASE("type of the same size") {
        lane_world_host w(3);
        std::vector<float> a(5, 1.f);
        std::vector<std::int32_t> b(5, 0);
        std::vector<lane_stream> s(2);
        s[0].rank = 2;
        s[1].rank = 1;
        s[0].calls = {p2p_call(p2p_launch<float>(w, 2, true, 1, a.data(), 5))};
        s[1].calls = {p2p_call(p2p_launch<std::int32_t>(w, 1, false, 2, b.data(), 5))};
        chorus_test::run_lane_streams(s, 2);
        CHECK(s[0].result[0] == status::mismatch);
        CHECK(s[1].result[0] == status::mismatch);
        const error e = report(w, 1);
        CHECK(e.code() == errc::mismatch);
        CHECK(contains(e.what(), "rank 2 sends 5 elements (4-byte) but rank 1 receives 5 elements (4-byte) of another element type"));
        CHECK(w.faults[0].code == 0); // the third rank took no part
    }
}

TEST_CASE("lanes p2p: a peer that never posts makes the waiting side time out, never hang") {
    for (bool sender_waits : {true, false}) {
        CAPTURE(sender_waits);
        lane_world_host w(2);
        std::vector<float> a(100, 1.f), b(100, 0.f);
        std::vector<lane_stream> s(1);
        s[0].rank = sender_waits ? 0 : 1;
        s[0].calls = {sender_waits ? p2p_call(p2p_launch<float>(w, 0, true, 1, a.data(), 100, 150))
                                   : p2p_call(p2p_launch<float>(w, 1, false, 0, b.data(), 100, 150))};
        const auto t0 = std::chrono::steady_clock::now();
        chorus_test::run_lane_streams(s, 3);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        CHECK(s[0].result[0] == status::timeout);
        CHECK(ms >= 140);
        CHECK(ms < 10000);
        const error e = report(w, s[0].rank);
        CAPTURE(e.what());
        CHECK(e.code() == errc::timeout);
        CHECK(contains(e.what(), "timed out waiting for rank " + std::to_string(1 - s[0].rank)));
        CHECK(contains(e.what(), "message #1 from rank 0 to rank 1"));
        CHECK(w.abort != 0);
        // The late peer: its call fails at once on the abort word, and it
        // reports the rank whose failure stopped it.
        std::vector<lane_stream> late(1);
        late[0].rank = 1 - s[0].rank;
        late[0].calls = {sender_waits ? p2p_call(p2p_launch<float>(w, 1, false, 0, b.data(), 100, 60000))
                                      : p2p_call(p2p_launch<float>(w, 0, true, 1, a.data(), 100, 60000))};
        const auto t1 = std::chrono::steady_clock::now();
        chorus_test::run_lane_streams(late, 2);
        CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10));
        CHECK(late[0].result[0] == status::aborted);
        if (!sender_waits) {
            // The receiver timed out: it never claimed, so the sender sees only the abort.
            for (float x : b) CHECK(x == 0.f);
        } else {
            // The sender withdrew message #1: the late receiver must not read it.
            for (float x : b) CHECK(x == 0.f);
        }
        const error o = report(w, late[0].rank);
        CAPTURE(o.what());
        CHECK(o.code() == errc::peer_failed);
        CHECK(contains(o.what(), "stopped because rank " + std::to_string(s[0].rank) + " failed"));
        CHECK(contains(o.what(), "message #1 from rank 0 to rank 1"));
    }
}

TEST_CASE("lanes p2p: the abort word set mid-wait releases both sides' waits") {
    for (bool send : {true, false}) {
        CAPTURE(send);
        lane_world_host w(3);
        std::vector<float> a(64, 1.f);
        std::vector<lane_stream> s(1);
        s[0].rank = 1;
        s[0].calls = {p2p_call(p2p_launch<float>(w, 1, send, 2, a.data(), 64, 60000))};
        std::thread aborter([&w] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            w.set_abort();
        });
        const auto t0 = std::chrono::steady_clock::now();
        chorus_test::run_lane_streams(s, 3);
        aborter.join();
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
        CHECK(s[0].result[0] == status::aborted);
        CHECK(w.faults[1].code == int(status::aborted));
        CHECK(w.faults[1].p2p == (send ? 1 : 2));
        const error e = detail::gpu_fault_error(1, w.faults.data(), 3, "rank 0: comm.abort() called");
        CHECK(e.code() == errc::aborted);
    }
}

TEST_CASE("lanes p2p: a sender that gives up never returns while its receiver copies") {
    // The receiver arrives around the sender's deadline: either the
    // receiver copied and the send succeeded (it saw the claim and waited),
    // or the send failed and the receiver never read the buffer.
    std::mt19937 rng(7);
    int both_ok = 0, both_failed = 0;
    for (int it = 0; it < 60; ++it) {
        lane_world_host w(2);
        const std::uint64_t count = 20000;
        std::vector<std::int32_t> a(count, 7), b(count, 0);
        const int delay_us = int(rng() % 6000);
        std::vector<lane_stream> s(2);
        s[0].rank = 0;
        s[1].rank = 1;
        const auto snd = p2p_launch<std::int32_t>(w, 0, true, 1, a.data(), count, 3);
        s[0].calls = {[snd, &a](const chorus_test::host_lanes& hl) {
            const status st = detail::run_lane_p2p(hl, snd);
            // The caller takes its buffer back: a receiver still copying would see this.
            if (hl.id() == 0 && st != status::ok)
                for (auto& x : a) x = -1;
            return st;
        }};
        const auto rcv = p2p_launch<std::int32_t>(w, 1, false, 0, b.data(), count, 20000);
        s[1].calls = {[rcv, delay_us](const chorus_test::host_lanes& hl) {
            if (hl.id() == 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            hl.sync();
            return detail::run_lane_p2p(hl, rcv);
        }};
        chorus_test::run_lane_streams(s, 2);
        const status ss = s[0].result[0], rs = s[1].result[0];
        CAPTURE(it);
        CAPTURE(delay_us);
        if (ss == status::ok) {
            CHECK(rs == status::ok);
            ++both_ok;
            bool ok = true;
            for (auto x : b) ok = ok && x == 7;
            CHECK(ok);
        } else {
            CHECK(ss == status::timeout);
            CHECK(rs != status::ok);
            ++both_failed;
            bool untouched = true;
            for (auto x : b) untouched = untouched && x == 0;
            CHECK(untouched);
        }
    }
    MESSAGE("withdrawal race: " << both_ok << " delivered, " << both_failed << " withdrawn");
}

TEST_CASE("lanes p2p: messages and collectives on the same areas stay independent") {
    // Each rank's stream interleaves sends/receives with all_reduce calls
    // run by the collective executor on the same areas: neither numbering
    // disturbs the other.
    for (int n : {2, 3, 4}) {
        CAPTURE(n);
        lane_world_host w(n);
        const std::uint64_t count = 257;
        std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(count)), got(static_cast<std::size_t>(n), std::vector<float>(count, 0.f));
        auto got2 = got;
        std::vector<std::vector<float>> ar(static_cast<std::size_t>(n), std::vector<float>(count));
        std::vector<std::vector<float>> scratch(static_cast<std::size_t>(n));
        std::vector<detail::lane_launch<float, sum, any_schedule>> coll(static_cast<std::size_t>(n));
        std::vector<std::unique_ptr<detail::lane_shared<float>>> sh;
        for (int r = 0; r < n; ++r) {
            for (std::uint64_t i = 0; i < count; ++i) {
                data[std::size_t(r)][i] = float(r * 1000 + int(i));
                ar[std::size_t(r)][i] = float(r + 1);
            }
            schedule_args a{collective::all_reduce, r, n, 0, count, sizeof(float), true, 0};
            auto& L = coll[std::size_t(r)];
            L.sch = make_schedule(policy_of<ring<>>, a);
            L.world = w.view();
            L.rank = r;
            L.in = ar[std::size_t(r)].data();
            L.out = ar[std::size_t(r)].data();
            scratch[std::size_t(r)].resize(std::size_t(L.sch.scratch_elems()) + 1);
            L.scratch = scratch[std::size_t(r)].data();
            L.sig = chorus_test::lane_signature_of<float, sum>(collective::all_reduce, L.sch.channels(), 0, count,
                                                               policy_of<ring<>>.id());
            L.timeout_ns = 20000ull * 1000000ull;
            L.op.set(sum{});
            REQUIRE(L.sch.channels() == 1);
            sh.push_back(std::make_unique<detail::lane_shared<float>>());
        }
        std::vector<lane_stream> streams(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
            auto& s = streams[std::size_t(r)];
            s.rank = r;
            auto coll_call = [L = &coll[std::size_t(r)], shp = sh[std::size_t(r)].get()](const chorus_test::host_lanes& hl) {
                return detail::run_lane_channel(hl, *L, 0, *shp);
            };
            const int to = (r + 1) % n, from = (r + n - 1) % n;
            // Two rounds of a ring shift (even ranks send first), each
            // between collectives that every rank issues in the same order.
            // (A collective between a rank's send and its receive could
            // deadlock an odd ring: the rendezvous orders the ranks.)
            s.calls.push_back(coll_call);
            for (int round = 0; round < 2; ++round) {
                float* g = round == 0 ? got[std::size_t(r)].data() : got2[std::size_t(r)].data();
                auto snd = p2p_call(p2p_launch<float>(w, r, true, to, data[std::size_t(r)].data(), count));
                auto rcv = p2p_call(p2p_launch<float>(w, r, false, from, g, count));
                s.calls.push_back(r % 2 == 0 ? snd : rcv);
                s.calls.push_back(r % 2 == 0 ? rcv : snd);
                s.calls.push_back(coll_call);
            }
        }
        chorus_test::run_lane_streams(streams, 2);
        for (auto& s : streams)
            for (status st : s.result) CHECK(st == status::ok);
        // Three in-place sums of (r + 1): n(n+1)/2, then times n, twice.
        const float one = float(n * (n + 1) / 2);
        const float expect = one * float(n) * float(n);
        for (int r = 0; r < n; ++r) {
            const int from = (r + n - 1) % n;
            bool ok = true;
            for (std::uint64_t i = 0; i < count; ++i)
                ok = ok && got[std::size_t(r)][i] == float(from * 1000 + int(i)) &&
                     got2[std::size_t(r)][i] == float(from * 1000 + int(i)) && ar[std::size_t(r)][i] == expect;
            CHECK_MESSAGE(ok, "rank " << r);
            CHECK(w.areas[std::size_t(r)]->seq[0] == 3);
        }
    }
}

TEST_CASE("lanes p2p: one process per device: the receiver translates the sender's pointer, or refuses it") {
    // maps as lane_world::maps: rank 1 reaches rank 0's `window` through a
    // copy at another address (as a process that mapped it elsewhere).
    lane_world_host w(2);
    std::vector<float> window(512, 0.f), alias(512, 0.f);
    for (int i = 0; i < 512; ++i) alias[std::size_t(i)] = float(i); // what rank 1 sees there
    w.maps.resize(2);
    detail::lane_range rg{};
    rg.their_base = reinterpret_cast<std::uint64_t>(window.data());
    rg.my_base = reinterpret_cast<std::uint64_t>(alias.data());
    rg.bytes = 512 * sizeof(float);
    w.maps[0].ranges[0] = rg; // how the reader (rank 1) reaches rank 0
    w.maps[0].count = 1;
    std::vector<float> b(100, 0.f);
    std::vector<float> privat(100, 5.f);
    std::vector<lane_stream> s(2);
    s[0].rank = 0;
    s[1].rank = 1;
    s[0].calls = {p2p_call(p2p_launch<float>(w, 0, true, 1, window.data() + 3, 100)),
                  p2p_call(p2p_launch<float>(w, 0, true, 1, privat.data(), 100))};
    s[1].calls = {p2p_call(p2p_launch<float>(w, 1, false, 0, b.data(), 100)),
                  p2p_call(p2p_launch<float>(w, 1, false, 0, b.data(), 100))};
    chorus_test::run_lane_streams(s, 3);
    CHECK(s[0].result[0] == status::ok);
    CHECK(s[1].result[0] == status::ok);
    bool ok = true;
    for (int i = 0; i < 100; ++i) ok = ok && b[std::size_t(i)] == float(i + 3);
    CHECK(ok); // read through the translation, not from window (zeros)
    CHECK(s[1].result[1] == status::unreachable);
    CHECK(s[0].result[1] == status::aborted);
    const error eo = report(w, 0);
    CAPTURE(eo.what());
    CHECK(eo.code() == errc::invalid_argument);
    CHECK(contains(eo.what(), "rank 1 could not read a buffer this rank passed"));
    const error er = report(w, 1);
    CHECK(er.code() == errc::invalid_argument);
    CHECK(contains(er.what(), "neither registered nor staged"));
    CHECK(contains(er.what(), "message #2 from rank 0 to rank 1"));
}

TEST_CASE("lanes p2p: the failure texts name the call, both ranks and the message") {
    std::vector<detail::lane_fault> f(3);
    f[0].code = int(status::timeout);
    f[0].p2p = 2;
    f[0].peer = 2;
    f[0].unit = 4;
    const error e = detail::gpu_fault_error(0, f.data(), 3, "");
    CHECK(e.code() == errc::timeout);
    CHECK(std::string(e.what()) == "chorus::gpu: rank 0: recv: timed out waiting for rank 2 to send message #4 from "
                                   "rank 2 to rank 0; did rank 2 issue the matching send?");
    const error o = detail::gpu_fault_error(1, f.data(), 3, "");
    CHECK(o.code() == errc::peer_failed);
    CHECK(std::string(o.what()) == "chorus::gpu: rank 1: stopped because rank 0 failed (its recv timed out waiting "
                                   "for rank 2, message #4 from rank 2 to rank 0)");
}
