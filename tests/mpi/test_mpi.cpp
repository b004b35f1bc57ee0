// chorus over MPI, run under mpiexec with 1 to 9 processes and with
// emulated node splits (CHORUS_RANKS_PER_NODE, e.g. 2 or 3,2,1) and small
// windows (CHORUS_SHM_BYTES, so large counts go through in pieces): see
// tests/mpi/CMakeLists.txt. Covers hierarchical<> on every
// classic collective with the built-in operators on every arithmetic
// element type and with the commutative user operators, ring<> with a
// user type, hierarchical<> with small inter-node chunks, async ordering,
// split(), checked mode, argument errors, a rank that never joins, and the
// chorus::train helpers.
//
// Every rank can compute every rank's input (a function of rank and index),
// so each rank checks its own result against a serial reference folded in
// rank order, bit for bit, without any communication (the checkers of
// mpi_checks.hpp, which take the policy as a value).

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>
#include <chorus/train.hpp>

#include "mpi_test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

using hier = chorus::hierarchical<>;
//! Small inter-node chunks: large segments are pipelined in many messages.
using hier_small = chorus::hierarchical<chorus::ring<>, chorus::ring<chorus::ring_params{.chunk_bytes = 4096}>>;
using flat_ring = chorus::ring<>;

} // namespace

TEST_CASE("hierarchical<>: every collective, operator and type matches the serial reference") {
    comm_t& comm = world();
    using namespace chorus;
    const named_policy h = named<hier>();
    check_type<std::int8_t, sum, prod, min, max, avg, bit_and, bit_or, bit_xor>(comm, h);
    check_type<std::uint8_t, sum, max>(comm, h);
    check_type<std::int32_t, sum, prod, min, max, avg, bit_and, bit_or, bit_xor>(comm, h);
    check_type<std::uint32_t, sum, bit_xor>(comm, h);
    check_type<std::int64_t, sum, min, avg>(comm, h);
    check_type<std::uint64_t, sum, bit_or>(comm, h);
    check_type<float, sum, prod, min, max, avg>(comm, h);
    check_type<double, sum, max, avg>(comm, h);
    check_type<vec3, vec3_add>(comm, h);
    check_type<indexed, argmax_op>(comm, h);
}

// (ring<> on the arithmetic types: the policy matrix, test_matrix.cpp.)
TEST_CASE("ring<> over point-to-point and hierarchical with small chunks match the serial reference") {
    comm_t& comm = world();
    using namespace chorus;
    check_type<vec3, vec3_add>(comm, named<flat_ring>());
    const named_policy small = named<hier_small>();
    check_type<float, sum>(comm, small);
    check_type<std::int64_t, sum>(comm, small);
}

TEST_CASE("async collectives complete in issue order with exact results") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    constexpr int depth = 24;
    constexpr std::size_t count = 5000;
    std::vector<std::vector<int>> bufs(depth, std::vector<int>(count));
    std::vector<chorus::future> fs;
    for (int k = 0; k < depth; ++k) {
        for (std::size_t i = 0; i < count; ++i) bufs[k][i] = int(i) + k * r;
        if (k % 2 == 0) fs.push_back(chorus::all_reduce_async<hier>(comm, std::span<int>(bufs[k])));
        else fs.push_back(chorus::all_reduce_async<flat_ring>(comm, std::span<int>(bufs[k])));
    }
    for (auto& f : fs) f.get();
    for (int k = 0; k < depth; ++k) {
        CAPTURE(k);
        const int rank_sum = n * (n - 1) / 2;
        bool ok = true;
        for (std::size_t i = 0; i < count && ok; ++i) ok = bufs[k][i] == n * int(i) + k * rank_sum;
        CHECK(ok);
    }
    chorus::barrier(comm);
}

TEST_CASE("split() makes independent communicators; the node split is consistent") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    CHECK(comm.nodes() >= 1);
    CHECK(comm.local_rank() < comm.local_size());
    // Every rank agrees on the node split.
    std::vector<int> mine = {comm.node(), comm.local_rank(), comm.local_size(), comm.nodes()};
    std::vector<int> all(4 * std::size_t(n));
    chorus::all_gather<hier>(comm, std::span<const int>(mine), std::span<int>(all));
    for (int q = 0; q < n; ++q) CHECK(all[4 * std::size_t(q) + 3] == comm.nodes());

    auto sub = comm.split(r % 2, -r); // reversed order inside each colour
    REQUIRE(sub != nullptr);
    const int m = (n + 1 - r % 2) / 2;
    CHECK(sub->size() == m);
    std::vector<long long> v(333, r);
    chorus::all_reduce<hier>(*sub, std::span<long long>(v));
    long long want = 0;
    for (int q = r % 2; q < n; q += 2) want += q;
    CHECK(v[0] == want);
    CHECK(v[332] == want);
    CHECK(comm.split(MPI_UNDEFINED, 0) == nullptr);
}

TEST_CASE("checked mode: ranks that disagree all fail with the same report, nothing moved, and carry on") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return;
    comm.set_checked(true);
    std::vector<float> in(10 + (r == 1), 1.0f), out(in.size(), -1.0f);
    try {
        chorus::all_reduce<hier>(comm, std::span<const float>(in), std::span<float>(out));
        FAIL("a count mismatch was not detected");
    } catch (const chorus::error& e) {
        CHECK(e.code() == chorus::errc::mismatch);
        const std::string what = e.what();
        CHECK(what.find("rank 1 called all_reduce count 11") != std::string::npos);
        CHECK(what.find("count 10") != std::string::npos);
    }
    CHECK(out[0] == -1.0f);
    // A different operator is a mismatch too.
    std::vector<int> iv(4, 1);
    try {
        if (r == 0) chorus::all_reduce<hier>(comm, std::span<int>(iv), chorus::max{});
        else chorus::all_reduce<hier>(comm, std::span<int>(iv), chorus::sum{});
        FAIL("an operator mismatch was not detected");
    } catch (const chorus::error& e) {
        CHECK(e.code() == chorus::errc::mismatch);
    }
    // The communicator still works.
    chorus::all_reduce<hier>(comm, std::span<int>(iv));
    CHECK(iv[0] == n);
    comm.set_checked(false);
}

TEST_CASE("bad arguments are rejected before any rank moves a byte") {
    comm_t& comm = world();
    std::vector<float> a(8), b(7);
    try {
        chorus::all_reduce<hier>(comm, std::span<const float>(a), std::span<float>(b));
        FAIL("size mismatch accepted");
    } catch (const chorus::error& e) {
        CHECK(e.code() == chorus::errc::invalid_argument);
        CHECK(std::string(e.what()).find("`out`") != std::string::npos);
    }
    try {
        chorus::broadcast<hier>(comm, std::span<float>(a), comm.size());
        FAIL("bad root accepted");
    } catch (const chorus::error& e) {
        CHECK(e.code() == chorus::errc::invalid_argument);
        CHECK(std::string(e.what()).find("`root`") != std::string::npos);
    }
}

TEST_CASE("a rank that never joins makes the others time out with the missing rank named, not hang") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return;
    // Fresh communicators: the failure breaks them, not the world. Without
    // and with checked mode (which waits in an MPI_Iallgather first).
    for (const bool checked : {false, true}) {
        CAPTURE(checked);
        comm_t sub(MPI_COMM_WORLD);
        sub.set_timeout(std::chrono::milliseconds(400));
        sub.set_checked(checked);
        const bool straggler = r == n - 1;
        if (!straggler) {
            std::vector<double> v(1000, 1.0);
            const auto t0 = std::chrono::steady_clock::now();
            try {
                chorus::all_reduce<hier>(sub, std::span<double>(v));
                FAIL("no error without rank n-1");
            } catch (const chorus::error& e) {
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                CHECK(s < 10.0);
                const bool expected = e.code() == chorus::errc::timeout || e.code() == chorus::errc::aborted;
                CHECK(expected);
                MESSAGE(std::string(e.what()));
            }
            CHECK(sub.broken());
            try {
                chorus::all_reduce<hier>(sub, std::span<double>(v));
                FAIL("a broken communicator accepted a collective");
            } catch (const chorus::error& e) {
                CHECK(e.code() == chorus::errc::aborted);
            }
        }
        chorus::barrier(comm); // on the world communicator: everyone is still in step
    }
}

TEST_CASE("chorus::train helpers run on communicator<mpi>: buckets, accumulation, the ZeRO step") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    // Gradient buckets over three separate tensors, marked in reverse (as
    // a backward pass would); avg of r + 1 is (n + 1) / 2 exactly.
    std::vector<float> a(1000), b(37), c(5000);
    std::vector<std::span<float>> tensors{std::span<float>(a), std::span<float>(b), std::span<float>(c)};
    chorus::train::gradient_buckets<comm_t, float> buckets(comm, tensors, 8 << 10);
    CHECK(buckets.bucket_count() >= 2);
    for (int step = 0; step < 3; ++step) {
        for (auto& t : tensors) std::fill(t.begin(), t.end(), float(r + 1 + step));
        for (std::size_t i = tensors.size(); i-- > 0;) buckets.mark_ready(i);
        buckets.wait_all();
        const float want = float(n + 1) / 2 + float(step);
        bool ok = true;
        for (auto& t : tensors)
            for (float v : t) ok = ok && v == want;
        CAPTURE(step);
        CHECK(ok);
    }
    // Accumulation: k = 2 micro-batches of r, then the mean over all.
    chorus::train::gradient_accumulator<comm_t, double> acc(comm, 100, 2);
    std::vector<double> g(100, double(r));
    CHECK_FALSE(acc.add(std::span<const double>(g)));
    CHECK(acc.add(std::span<const double>(g)));
    CHECK(acc.gradient()[0] == double(n - 1) / 2);
    CHECK(acc.gradient()[99] == double(n - 1) / 2);
    // ZeRO-style step (ReduceScatter, shard update, AllGather) over a count
    // that does not divide by the rank count.
    chorus::train::sharded_sgd<comm_t, double> sgd(comm, 1001, 0.5);
    std::vector<double> params(1001, 1.0), grad(1001, double(r));
    sgd.step(std::span<double>(params), std::span<const double>(grad), 0.5);
    bool same = true;
    for (double p : params) same = same && p == 1.0 - 0.5 * double(n - 1) / 2;
    CHECK(same);
}
