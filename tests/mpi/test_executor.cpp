// The MPI schedule executor and send/recv: failures (a rank that never
// joins, a receive nobody sends to), pushes over messages, ordering of
// point-to-point messages, size mismatches, and async calls of every kind
// interleaved on one communicator.

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include "mpi_test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

bool mentions(const chorus::error& e, const std::string& what) {
    return std::string(e.what()).find(what) != std::string::npos;
}

//! A rank that never joins a collective run by policy `p`: the others fail
//! within their deadline (timeout naming the rank they waited for, or
//! aborted when a node peer failed first), and the communicator is broken.
//! `reads_all`: every rank reads the missing one directly, so a timeout
//! names it.
void never_joins(comm_t& world_comm, const named_policy& p, bool reads_all) {
    const int n = world_comm.size(), r = world_comm.rank();
    const std::string algo_s = p.name;
    CAPTURE(algo_s);
    comm_t sub(MPI_COMM_WORLD);
    sub.set_timeout(std::chrono::milliseconds(400));
    sub.set_checked(false); // the executor's own waits (checked mode would fail first, in its check)
    if (r != n - 1) {
        std::vector<float> v(5000, 1.0f);
        const auto t0 = std::chrono::steady_clock::now();
        try {
            chorus::detail::all_reduce_run(sub, p.pol, std::span<const float>(v), std::span<float>(v), chorus::sum{},
                                           false);
            FAIL("no error without rank n-1");
        } catch (const chorus::error& e) {
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            CHECK(s < 10.0);
            const bool expected = e.code() == chorus::errc::timeout || e.code() == chorus::errc::aborted;
            CHECK(expected);
            if (e.code() == chorus::errc::timeout)
                CHECK(mentions(e, reads_all ? "waiting for rank " + std::to_string(n - 1) : "waiting for rank "));
            MESSAGE(std::string(e.what()));
        }
        CHECK(sub.broken());
    }
    chorus::barrier(world_comm);
}

} // namespace

TEST_CASE("schedule executor: a rank that never joins makes the others time out naming it, not hang") {
    comm_t& comm = world();
    if (comm.size() < 2) return;
    using namespace chorus;
    never_joins(comm, named<direct<>>(), true);
    never_joins(comm, named<hierarchical<direct<>, direct<>>>(), comm.nodes() == 1);
    never_joins(comm, named<tree<>>(), false);
}

TEST_CASE("schedule executor: every pair's sends and receives agree, pushes included (plans of 1-7 ranks)") {
    // The plans of all ranks, built as each rank builds its own: for every
    // (sender, receiver) pair the sender's transfers and the receiver's
    // must match one to one by tag (count, fragments, push or read), or
    // a call would deadlock or mix data; and every rank must agree on
    // whether node peers meet in shared memory (windows of 4 KiB: the
    // staged hierarchical<>, in pieces). No MPI traffic: one rank checks.
    using namespace chorus;
    if (world().rank() != 0) return;
    const policy policies[] = {
        policy_of<ring<>>,
        policy_of<ring<ring_params{.channels = 2, .chunk_bytes = 256}>>,
        policy_of<hierarchical<ring<ring_params{.channels = 2, .chunk_bytes = 256}>, direct<>>>,
        policy_of<hierarchical<direct<>, ring<ring_params{.chunk_bytes = 512}>>>,
        policy_of<direct<>>,
        policy_of<tree<>>,
        policy_of<rabenseifner<>>,
    };
    const collective colls[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce};
    int plans = 0, pushes = 0, shared = 0;
    for (int n = 1; n <= 7; ++n)
        for (const policy& p : policies)
            for (const collective coll : colls)
                for (const std::uint64_t count : {std::uint64_t(1), std::uint64_t(37), std::uint64_t(1000)})
                    for (const int node_size : {0, 2, 3})
                    for (const std::uint64_t window : {std::uint64_t(0), std::uint64_t(4096)}) {
                        if (node_size > 0 && n % node_size != 0) continue;
                        if (window != 0 && node_size == 0) continue;
                        std::vector<int> node_of(static_cast<std::size_t>(n), 0);
                        for (int q = 0; q < n; ++q) node_of[std::size_t(q)] = node_size > 0 ? q / node_size : 0;
                        CAPTURE(n);
                        CAPTURE(int(coll));
                        CAPTURE(count);
                        CAPTURE(node_size);
                        CAPTURE(window);
                        const std::string algo = detail::policy_text(p);
                        CAPTURE(algo);
                        std::vector<detail::sched_plan> plan(static_cast<std::size_t>(n));
                        for (int me = 0; me < n; ++me) {
                            auto schedule_of = [&](int q) {
                                schedule_args a{coll, q, n, n - 1, count, 4, false, node_size};
                                a.node_window_bytes = window;
                                return make_schedule(p, a);
                            };
                            REQUIRE(plan[std::size_t(me)].build(schedule_of, me, n, 4, node_of, window / 4));
                            REQUIRE(plan[std::size_t(me)].shared == plan[0].shared);
                            ++plans;
                        }
                        shared += plan[0].shared ? 1 : 0;
                        for (int q = 0; q < n; ++q)
                            for (int r = 0; r < n; ++r) {
                                if (q == r) continue;
                                std::vector<const detail::sched_xfer*> out, in;
                                for (const auto& x : plan[std::size_t(q)].sends)
                                    if (x.peer == r) out.push_back(&x);
                                for (const auto& x : plan[std::size_t(r)].recvs)
                                    if (x.peer == q) in.push_back(&x);
                                auto by_tag = [](const detail::sched_xfer* a, const detail::sched_xfer* b) {
                                    return a->tag < b->tag;
                                };
                                std::sort(out.begin(), out.end(), by_tag);
                                std::sort(in.begin(), in.end(), by_tag);
                                REQUIRE(out.size() == in.size());
                                for (std::size_t i = 0; i < out.size(); ++i) {
                                    REQUIRE(out[i]->tag == in[i]->tag);
                                    REQUIRE(out[i]->count == in[i]->count);
                                    REQUIRE(out[i]->frags == in[i]->frags);
                                    REQUIRE(out[i]->push == in[i]->push);
                                    pushes += out[i]->push ? 1 : 0;
                                }
                            }
                    }
    MESSAGE(plans << " plans checked, " << pushes << " pushes, " << shared << " calls in shared memory");
    CHECK(pushes > 0);
    CHECK(shared > 0);
}

TEST_CASE("schedule executor: pushes travel as messages into the peer's buffer, in place and not") {
    comm_t& comm = world();
    const int n = comm.size();
    const int r = comm.rank();
    // ring<> AllReduce pushes its finished slice into the successor's
    // output; so do the ring phases of hierarchical<ring<>, direct<>>.
    // Small chunks: many pushes per channel, on two channels.
    using small_ring = chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 256}>;
    using pushing = chorus::hierarchical<small_ring, chorus::direct<>>;
    for (const std::size_t count : {std::size_t(1), std::size_t(100), std::size_t(3001)}) {
        std::vector<int> in(count), out(count, -1), v(count);
        for (std::size_t i = 0; i < count; ++i) in[i] = v[i] = int(i % 7) + r;
        auto want = [&](std::size_t i) { return n * int(i % 7) + n * (n - 1) / 2; };
        chorus::all_reduce<small_ring>(comm, std::span<const int>(in), std::span<int>(out));
        for (std::size_t i = 0; i < count; ++i) REQUIRE(out[i] == want(i));
        chorus::all_reduce<pushing>(comm, std::span<int>(v)); // in place
        for (std::size_t i = 0; i < count; ++i) REQUIRE(v[i] == want(i));
        std::fill(out.begin(), out.end(), -1);
        chorus::all_reduce<pushing>(comm, std::span<const int>(in), std::span<int>(out));
        for (std::size_t i = 0; i < count; ++i) REQUIRE(out[i] == want(i));
    }
    CHECK_FALSE(comm.broken());
}

TEST_CASE("send/recv: messages between a pair arrive in issue order, sync and async, 0 bytes included") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return;
    // Pairs (2i, 2i+1); a last odd rank out sits this one out.
    const int partner = r % 2 == 0 ? r + 1 : r - 1;
    if (partner < n) {
        const std::vector<std::size_t> sizes = {3, 0, 1000, 1, 0, 70001, 17};
        auto value = [](int from, std::size_t msg, std::size_t i) {
            return double(from * 1000 + int(msg)) + double(i);
        };
        auto send_all = [&](bool async) {
            std::vector<std::vector<double>> bufs;
            for (std::size_t k = 0; k < sizes.size(); ++k) {
                bufs.emplace_back(sizes[k]);
                for (std::size_t i = 0; i < sizes[k]; ++i) bufs[k][i] = value(r, k, i);
            }
            std::vector<chorus::future> fs;
            for (auto& b : bufs) {
                if (async) fs.push_back(chorus::send_async(comm, std::span<const double>(b), partner));
                else chorus::send(comm, std::span<const double>(b), partner);
            }
            for (auto& f : fs) f.get();
        };
        auto recv_all = [&](bool async) {
            std::vector<std::vector<double>> bufs;
            for (const std::size_t s : sizes) bufs.emplace_back(s, -1.0);
            std::vector<chorus::future> fs;
            for (auto& b : bufs) {
                if (async) fs.push_back(chorus::recv_async(comm, std::span<double>(b), partner));
                else chorus::recv(comm, std::span<double>(b), partner);
            }
            for (auto& f : fs) f.get();
            bool ok = true;
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i) ok = ok && bufs[k][i] == value(partner, k, i);
            CHECK(ok);
        };
        for (const bool async : {false, true}) {
            CAPTURE(async);
            if (r % 2 == 0) {
                send_all(async);
                recv_all(async);
            } else {
                recv_all(async);
                send_all(async);
            }
        }
    }
    chorus::barrier(comm);
}

TEST_CASE("send/recv: a size or type mismatch fails both calls naming both counts; the pair carries on") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return;
    if (r < 2) {
        const int peer = 1 - r;
        std::vector<int> ten(10, 7), eleven(11, -1);
        try {
            if (r == 0) chorus::send(comm, std::span<const int>(ten), peer);
            else chorus::recv(comm, std::span<int>(eleven), peer);
            FAIL("a size mismatch was not detected");
        } catch (const chorus::error& e) {
            CHECK(e.code() == chorus::errc::mismatch);
            CHECK(mentions(e, "sends 10 elements of int32"));
            CHECK(mentions(e, "receives 11 elements of int32"));
        }
        CHECK(eleven[0] == -1);
        std::vector<float> f(10, 1.5f);
        try {
            if (r == 0) chorus::send(comm, std::span<const int>(ten), peer);
            else chorus::recv(comm, std::span<float>(f), peer);
            FAIL("a type mismatch was not detected");
        } catch (const chorus::error& e) {
            CHECK(e.code() == chorus::errc::mismatch);
            CHECK(mentions(e, "float"));
        }
        CHECK_FALSE(comm.broken());
        // The pair is still in step.
        if (r == 0) chorus::send(comm, std::span<const int>(ten), peer);
        else chorus::recv(comm, std::span<int>(eleven.data(), 10), peer);
        if (r == 1) CHECK(eleven[9] == 7);
    }
    chorus::barrier(comm);
}

TEST_CASE("send/recv: a receive nobody sends to, and a send nobody receives, time out naming the peer") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return;
    for (const bool receiving : {true, false}) {
        CAPTURE(receiving);
        comm_t sub(MPI_COMM_WORLD); // the failure breaks it, not the world
        sub.set_timeout(std::chrono::milliseconds(300));
        if (r == 1) {
            std::vector<double> v(1000, 2.0);
            const auto t0 = std::chrono::steady_clock::now();
            try {
                if (receiving) chorus::recv(sub, std::span<double>(v), 0);
                else chorus::send(sub, std::span<const double>(v), 0);
                FAIL("no error although rank 0 never matched the call");
            } catch (const chorus::error& e) {
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                CHECK(s < 10.0);
                CHECK(e.code() == chorus::errc::timeout);
                CHECK(mentions(e, "rank 0"));
                MESSAGE(std::string(e.what()));
            }
            CHECK(sub.broken());
        }
        chorus::barrier(comm);
    }
}

TEST_CASE("async calls of every kind interleave on one communicator in issue order") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    constexpr int depth = 16;
    constexpr std::size_t count = 3001;
    std::vector<std::vector<int>> bufs(depth, std::vector<int>(count));
    std::vector<chorus::future> fs;
    for (int k = 0; k < depth; ++k) {
        for (std::size_t i = 0; i < count; ++i) bufs[std::size_t(k)][i] = int(i % 100) + k * r;
        std::span<int> b(bufs[std::size_t(k)]);
        using namespace chorus;
        switch (k % 4) {
        case 0: fs.push_back(all_reduce_async<direct<>>(comm, b)); break;
        case 1: fs.push_back(all_reduce_async<ring<>>(comm, b)); break;
        case 2: fs.push_back(all_reduce_async<direct<direct_params{2, 4096}>>(comm, b)); break;
        default: fs.push_back(all_reduce_async<hierarchical<direct<>, direct<>>>(comm, b));
        }
    }
    for (auto& f : fs) f.get();
    const int rank_sum = n * (n - 1) / 2;
    for (int k = 0; k < depth; ++k) {
        CAPTURE(k);
        bool ok = true;
        for (std::size_t i = 0; i < count && ok; ++i) ok = bufs[std::size_t(k)][i] == n * int(i % 100) + k * rank_sum;
        CHECK(ok);
    }
}

TEST_CASE("checked mode: v-collectives whose counts disagree fail on every rank with mismatch") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return;
    const bool was_checked = comm.checked();
    comm.set_checked(true);
    std::vector<std::size_t> counts(static_cast<std::size_t>(n), 3);
    if (r == 0) counts[1] = 4; // rank 0 believes rank 1 gives 4
    const std::size_t total = std::size_t(n) * 3 + (r == 0 ? 1 : 0);
    std::vector<int> in(counts[std::size_t(r)], r), out(total, -1);
    try {
        chorus::all_gatherv<chorus::direct<>>(comm, std::span<const int>(in), std::span<int>(out),
                                              std::span<const std::size_t>(counts));
        FAIL("disagreeing counts were not detected");
    } catch (const chorus::error& e) {
        CHECK(e.code() == chorus::errc::mismatch);
    }
    CHECK(out[0] == -1);
    comm.set_checked(was_checked);
    CHECK_FALSE(comm.broken());
}
