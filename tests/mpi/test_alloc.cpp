// communicator<mpi>::alloc/free and the zero-copy path: collectives whose
// ranks all pass buffers from alloc run as one fused pass over the ranks'
// buffers when every rank shares one node (zero_copy_possible()); a rank
// that passes other memory makes the call staged, still right. Runs under
// every process count and node split of tests/mpi/CMakeLists.txt (with
// emulated nodes and with one rank the calls are staged: checked too).
// Inputs are small integers in float: sums are exact in any order.

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include "mpi_test_util.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

float val(std::size_t i, int r) { return float((i * 7 + std::size_t(r) * 3) % 11 + 1); }

//! Sum over ranks of val(i, r).
float sum_at(std::size_t i, int n) {
    float s = 0;
    for (int r = 0; r < n; ++r) s += val(i, r);
    return s;
}

//! Every rank agrees that this rank's check passed (MPI_LAND).
bool all_ok(comm_t& comm, bool ok) {
    int v = ok ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LAND, comm.mpi_comm());
    return v != 0;
}

//! Counts wrong elements of out[0, n) against want(i).
template <class F>
std::size_t wrong(std::span<const float> out, F&& want) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < out.size(); ++i) bad += out[i] != want(i);
    return bad;
}

//! The policies the zero-copy path is checked with.
const std::vector<named_policy>& zc_policies() {
    static const std::vector<named_policy> p = {named<chorus::automatic>(), named<chorus::ring<>>(),
                                                named<chorus::direct<>>(), named<chorus::two_shot<>>(),
                                                named<chorus::hierarchical<>>(), named<chorus::tree<>>()};
    return p;
}

//! AllReduce, AllGather, ReduceScatter, Broadcast and Reduce of `count`
//! elements under `pol` on buffers `a` (input side) and `b` (output
//! side), in place and out of place; both must hold count * size()
//! elements. Returns the wrong elements on this rank.
std::size_t run_all(comm_t& comm, const chorus::policy& pol, std::span<float> a, std::span<float> b,
                    std::size_t count) {
    using namespace chorus::detail;
    const int n = comm.size(), r = comm.rank();
    const std::size_t N = std::size_t(n);
    std::size_t bad = 0;
    // AllReduce out of place
    for (std::size_t i = 0; i < count; ++i) a[i] = val(i, r);
    all_reduce_run(comm, pol, std::span<const float>(a.first(count)), b.first(count), chorus::sum{}, false);
    bad += wrong(b.first(count), [&](std::size_t i) { return sum_at(i, n); });
    // AllReduce in place
    all_reduce_run(comm, pol, std::span<const float>(a.first(count)), a.first(count), chorus::sum{}, false);
    bad += wrong(a.first(count), [&](std::size_t i) { return sum_at(i, n); });
    // AllGather out of place, then in place
    for (std::size_t i = 0; i < count; ++i) a[i] = val(i, r);
    all_gather_run(comm, pol, std::span<const float>(a.first(count)), b.first(count * N), false);
    bad += wrong(b.first(count * N), [&](std::size_t i) { return val(i % count, int(i / count)); });
    for (std::size_t i = 0; i < count * N; ++i) b[i] = -1;
    for (std::size_t i = 0; i < count; ++i) b[std::size_t(r) * count + i] = val(i, r);
    all_gather_run(comm, pol, std::span<const float>(b.subspan(std::size_t(r) * count, count)), b.first(count * N),
                   false);
    bad += wrong(b.first(count * N), [&](std::size_t i) { return val(i % count, int(i / count)); });
    // ReduceScatter out of place, then in place
    for (std::size_t i = 0; i < count * N; ++i) a[i] = val(i, r);
    reduce_scatter_run(comm, pol, std::span<const float>(a.first(count * N)), b.first(count), chorus::sum{}, false);
    bad += wrong(b.first(count), [&](std::size_t i) { return sum_at(std::size_t(r) * count + i, n); });
    reduce_scatter_run(comm, pol, std::span<const float>(a.first(count * N)), a.subspan(std::size_t(r) * count, count),
                       chorus::sum{}, false);
    bad += wrong(a.subspan(std::size_t(r) * count, count),
                 [&](std::size_t i) { return sum_at(std::size_t(r) * count + i, n); });
    // Broadcast from the last rank
    const int root = n - 1;
    for (std::size_t i = 0; i < count; ++i) a[i] = r == root ? val(i, root) : -1.0f;
    broadcast_run(comm, pol, a.first(count), root, false);
    bad += wrong(a.first(count), [&](std::size_t i) { return val(i, root); });
    // Reduce to rank 0, out of place and in place
    for (std::size_t i = 0; i < count; ++i) a[i] = val(i, r);
    reduce_run(comm, pol, std::span<const float>(a.first(count)), b.first(count), chorus::sum{}, 0, false);
    if (r == 0) bad += wrong(b.first(count), [&](std::size_t i) { return sum_at(i, n); });
    reduce_run(comm, pol, std::span<const float>(a.first(count)), a.first(count), chorus::sum{}, 0, false);
    if (r == 0) bad += wrong(a.first(count), [&](std::size_t i) { return sum_at(i, n); });
    return bad;
}

//! run_all's calls that move data (count > 0): 9.
constexpr std::uint64_t calls_per_run = 9;

} // namespace

TEST_CASE("zero-copy: every collective on buffers from alloc, every policy, odd counts and sub-spans") {
    comm_t& comm = world();
    const std::size_t N = std::size_t(comm.size());
    for (const std::size_t count : {std::size_t(1), std::size_t(3), std::size_t(1000), std::size_t(65537)}) {
        // The buffers hold more than the call: sub-spans at odd offsets.
        const std::size_t skip = 5;
        std::span<float> a = comm.alloc<float>(count * N + 2 * skip);
        std::span<float> b = comm.alloc<float>(count * N + 2 * skip);
        for (const named_policy& p : zc_policies()) {
            CAPTURE(p.name);
            CAPTURE(count);
            const std::uint64_t before = comm.zero_copy_calls();
            const std::size_t bad = run_all(comm, p.pol, a.subspan(skip, count * N), b.subspan(skip, count * N), count);
            CHECK(all_ok(comm, bad == 0));
            const std::uint64_t ran = comm.zero_copy_calls() - before;
            // A schedule whose scratch does not fit the call's window half
            // runs staged: small windows (CHORUS_SHM_BYTES) send some there.
            // automatic's small AllReduces (both of them) take the
            // small-message protocol instead (host_small.hpp).
            const bool small = p.pol.choose && double(count * sizeof(float)) <= comm.topology().small_bytes;
            const std::uint64_t zero_copy = calls_per_run - (small ? 2 : 0);
            if (std::getenv("CHORUS_SHM_BYTES") == nullptr)
                CHECK(ran == (comm.zero_copy_possible() ? zero_copy : 0));
            else
                CHECK(ran <= calls_per_run);
            // Bytes outside the spans are untouched.
            CHECK(a[0] == 0.0f);
            CHECK(b[skip + count * N] == 0.0f);
        }
        comm.free(a);
        comm.free(b.data());
    }
}

TEST_CASE("zero-copy: a large AllReduce (streaming stores) and many calls in a row") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    const std::size_t count = (std::size_t(3) << 20) / sizeof(float) * 2 + 11; // over 4 MiB
    std::span<float> in = comm.alloc<float>(count);
    std::span<float> out = comm.alloc<float>(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = val(i, r);
    const std::uint64_t before = comm.zero_copy_calls();
    std::size_t bad = 0;
    for (int k = 0; k < 3; ++k) {
        chorus::all_reduce(comm, std::span<const float>(in), out, chorus::sum{});
        bad += wrong(out, [&](std::size_t i) { return sum_at(i, n); });
    }
    // Small calls back to back: the window halves and flags alternate
    // (direct<>: automatic would take the small-message protocol).
    for (int k = 0; k < 20; ++k) {
        chorus::all_reduce<chorus::direct<>>(comm, std::span<const float>(in.first(17)), out.first(17), chorus::sum{});
        bad += wrong(out.first(17), [&](std::size_t i) { return sum_at(i, n); });
    }
    CHECK(all_ok(comm, bad == 0));
    CHECK(comm.zero_copy_calls() - before == (comm.zero_copy_possible() ? 23u : 0u));
    comm.free(in);
    comm.free(out);
}

TEST_CASE("zero-copy: a rank with plain memory makes the call staged, still right") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    const std::size_t count = 4099;
    std::vector<float> plain_in(count), plain_out(count);
    std::span<float> in = comm.alloc<float>(count), out = comm.alloc<float>(count);
    for (const int odd : {0, n - 1}) { // the rank whose input, then output, is plain
        for (int which = 0; which < 2; ++which) {
            std::span<float> i_buf = r == odd && which == 0 ? std::span<float>(plain_in) : in;
            std::span<float> o_buf = r == odd && which == 1 ? std::span<float>(plain_out) : out;
            for (std::size_t i = 0; i < count; ++i) i_buf[i] = val(i, r);
            const std::uint64_t before = comm.zero_copy_calls();
            chorus::all_reduce(comm, std::span<const float>(i_buf), o_buf, chorus::sum{});
            std::size_t bad = wrong(o_buf, [&](std::size_t i) { return sum_at(i, n); });
            // Staged and zero-copy calls alternate on one communicator.
            for (std::size_t i = 0; i < count; ++i) in[i] = val(i, r) + 1;
            chorus::all_reduce(comm, std::span<const float>(in), out, chorus::sum{});
            bad += wrong(out, [&](std::size_t i) { return sum_at(i, n) + float(n); });
            CHECK(all_ok(comm, bad == 0));
            CHECK(comm.zero_copy_calls() - before == (comm.zero_copy_possible() ? 1u : 0u));
        }
    }
    comm.free(in);
    comm.free(out);
}

TEST_CASE("zero-copy: free while peers map the buffer, then allocate again") {
    comm_t& comm = world();
    const int n = comm.size(), r = comm.rank();
    std::size_t bad = 0;
    const std::uint64_t before = comm.zero_copy_calls();
    for (int round = 0; round < 6; ++round) {
        // Sizes change, so a new buffer may land where an old one was.
        const std::size_t count = 1000 + std::size_t(round % 3) * 5000 + std::size_t(r);
        const std::size_t c = 1000 + std::size_t(round % 3) * 5000; // the call's count
        std::span<float> in = comm.alloc<float>(count), out = comm.alloc<float>(count);
        for (std::size_t i = 0; i < c; ++i) in[i] = val(i, r);
        chorus::all_reduce(comm, std::span<const float>(in.first(c)), out.first(c), chorus::sum{});
        bad += wrong(out.first(c), [&](std::size_t i) { return sum_at(i, n); });
        comm.free(in);
        comm.free(out);
        // Only this rank's buffers change between rounds on odd rounds.
        if (round % 2 == 1 && r == 0) {
            std::span<float> extra = comm.alloc<float>(123);
            comm.free(extra);
        }
    }
    CHECK(all_ok(comm, bad == 0));
    CHECK(comm.zero_copy_calls() - before == (comm.zero_copy_possible() ? 6u : 0u));
}

TEST_CASE("zero-copy: alloc and free refuse misuse, naming the argument") {
    comm_t& comm = world();
    auto code_of = [](auto&& f) {
        try {
            f();
        } catch (const chorus::error& e) {
            return std::pair<chorus::errc, std::string>(e.code(), e.what());
        }
        return std::pair<chorus::errc, std::string>(chorus::errc::internal, "no error");
    };
    auto [c0, t0] = code_of([&] { (void)comm.alloc<float>(0); });
    CHECK(c0 == chorus::errc::invalid_argument);
    CHECK(t0.find("`count`") != std::string::npos);
    auto [c1, t1] = code_of([&] { (void)comm.alloc<double>(std::size_t(-1) / 4); });
    CHECK(c1 == chorus::errc::invalid_argument);
    CHECK(t1.find("`count`") != std::string::npos);
    // More than /dev/shm (or the memory) holds: 1 PiB.
    auto [c2, t2] = code_of([&] { (void)comm.alloc<char>(std::size_t(1) << 50); });
    CHECK(c2 == chorus::errc::unavailable);
    CHECK(t2.find("alloc") != std::string::npos);
    std::vector<float> plain(16);
    auto [c3, t3] = code_of([&] { comm.free(std::span<float>(plain)); });
    CHECK(c3 == chorus::errc::invalid_argument);
    CHECK(t3.find("`buf`") != std::string::npos);
    std::span<float> s = comm.alloc<float>(1000);
    auto [c4, t4] = code_of([&] { comm.free(s.data() + 1); });
    CHECK(c4 == chorus::errc::invalid_argument);
    CHECK(t4.find("`p`") != std::string::npos);
    CHECK(t4.find("not at its start") != std::string::npos);
    comm.free(s);
    auto [c5, t5] = code_of([&] { comm.free(s); });
    CHECK(c5 == chorus::errc::invalid_argument);
    CHECK(t5.find("freed already") != std::string::npos);
    // The communicator is fine after all of that.
    std::span<float> x = comm.alloc<float>(8);
    for (std::size_t i = 0; i < 8; ++i) x[i] = 1;
    chorus::all_reduce(comm, x, chorus::sum{});
    CHECK(all_ok(comm, x[7] == float(comm.size())));
    comm.free(x);
}
