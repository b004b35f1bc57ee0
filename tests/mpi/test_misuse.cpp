// Misuse with checked mode off (docs/reliability.md): mismatched calls
// fail on every rank (errc::mismatch where it notices, aborted or timeout
// elsewhere), none returns success, within the deadline and the retire
// grace; a user operator that throws or re-enters the communicator fails
// every rank within a second; nothing is written out of bounds (run under
// AddressSanitizer in CI).
// Each scenario uses a fresh communicator (a failed call breaks one).
// Selected by name: CTest runs "misuse*" only in the runs listed in
// tests/mpi/CMakeLists.txt.

#include "mpi_test_util.hpp"
#include "../misuse_ops.hpp"

#include <chorus/mpi.hpp>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono;
using comm_t = chorus::communicator<chorus::mpi>;

constexpr milliseconds deadline{300};
// The retire grace (mpi_wait.hpp) and scheduling noise on top of it.
constexpr double slack_s = 1.0;

enum class kind { count, count_zero, large_count, type, op, root, reduce_root, gather_count };

// Rank 0 makes one call, every other rank another.
template <class Algo>
void call(comm_t& comm, kind k) {
    const bool odd = comm.rank() == 0;
    const int n = comm.size();
    switch (k) {
    case kind::count:
    case kind::count_zero:
    case kind::large_count: {
        const std::size_t c = k == kind::count ? (odd ? 100 : 120)
                              : k == kind::count_zero ? (odd ? 100 : 0)
                                                      : (odd ? 300000 : 300007);
        std::vector<float> in(c, 1.0f), out(c);
        chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out));
        break;
    }
    case kind::type: {
        if (odd) {
            std::vector<float> in(256, 1.0f), out(256);
            chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out));
        } else {
            std::vector<int> in(256, 1), out(256);
            chorus::all_reduce<Algo>(comm, std::span<const int>(in), std::span<int>(out));
        }
        break;
    }
    case kind::op: {
        std::vector<float> in(256, 1.0f), out(256);
        if (odd) chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out), chorus::max{});
        else chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out), chorus::sum{});
        break;
    }
    case kind::root: {
        std::vector<float> buf(100, 1.0f);
        chorus::broadcast<Algo>(comm, std::span<float>(buf), odd ? 0 : 1);
        break;
    }
    case kind::reduce_root: {
        std::vector<float> in(100, 1.0f), out(100);
        chorus::reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out), chorus::sum{}, odd ? 0 : 1);
        break;
    }
    case kind::gather_count: {
        const std::size_t c = odd ? 100 : 120;
        std::vector<float> in(c, 1.0f), out(c * std::size_t(n));
        chorus::all_gather<Algo>(comm, std::span<const float>(in), std::span<float>(out));
        break;
    }
    }
}

const char* name_of(kind k) {
    switch (k) {
    case kind::count: return "count 100 vs 120";
    case kind::count_zero: return "count 100 vs 0";
    case kind::large_count: return "count 300000 vs 300007";
    case kind::type: return "float vs int";
    case kind::op: return "max vs sum";
    case kind::root: return "broadcast root 0 vs 1";
    case kind::reduce_root: return "reduce root 0 vs 1";
    case kind::gather_count: return "all_gather count 100 vs 120";
    }
    return "?";
}

template <class Algo>
void every_kind(const char* policy) {
    for (kind k : {kind::count, kind::count_zero, kind::large_count, kind::type, kind::op, kind::root,
                   kind::reduce_root, kind::gather_count}) {
        CAPTURE(policy);
        const std::string what = name_of(k);
        CAPTURE(what);
        comm_t comm(MPI_COMM_WORLD);
        comm.set_checked(false);
        comm.set_timeout(deadline);
        const auto t0 = steady_clock::now();
        bool ok = false;
        chorus::errc code = chorus::errc::internal;
        try {
            call<Algo>(comm, k);
            ok = true;
        } catch (const chorus::error& e) {
            code = e.code();
        }
        const double s = duration<double>(steady_clock::now() - t0).count();
        CHECK_FALSE(ok);
        CHECK((code == chorus::errc::mismatch || code == chorus::errc::aborted || code == chorus::errc::timeout));
        CHECK(s < duration<double>(deadline).count() + slack_s);
        CHECK(comm.broken());
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

} // namespace

TEST_CASE("misuse: mismatched calls with checked mode off fail on every rank, none succeeds") {
    if (mpi_test::world().size() < 2) return;
    every_kind<chorus::direct<>>("direct");
    every_kind<chorus::ring<>>("ring");
    every_kind<chorus::tree<>>("tree");
    every_kind<chorus::hierarchical<>>("hierarchical");
    every_kind<chorus::automatic>("automatic");
}

TEST_CASE("misuse: the same calls with checked mode off still succeed on a fresh communicator") {
    comm_t comm(MPI_COMM_WORLD);
    comm.set_checked(false);
    std::vector<float> in(300007, 1.0f), out(in.size());
    chorus::all_reduce<chorus::ring<>>(comm, std::span<const float>(in), std::span<float>(out));
    CHECK(out[0] == float(comm.size()));
    std::vector<float> none;
    chorus::all_reduce<chorus::ring<>>(comm, std::span<const float>(none), std::span<float>(none));
    std::vector<float> buf(100, float(comm.rank()));
    chorus::broadcast<chorus::direct<>>(comm, std::span<float>(buf), comm.size() - 1);
    CHECK(buf[99] == float(comm.size() - 1));
    chorus::reduce<chorus::tree<>>(comm, std::span<const float>(in.data(), 100), std::span<float>(out.data(), 100),
                                   chorus::sum{}, 0);
    if (comm.rank() == 0) CHECK(out[0] == float(comm.size()));
}

namespace {

template <class Algo>
void user_code_fails(const char* policy, bool reenter) {
    CAPTURE(policy);
    CAPTURE(reenter);
    comm_t comm(MPI_COMM_WORLD);
    comm.set_checked(false);
    comm.set_timeout(milliseconds(5000));
    const int r = comm.rank();
    std::vector<float> in(1000, 1.0f), out(1000);
    const auto t0 = steady_clock::now();
    bool ok = false, own = false;
    chorus::errc code = chorus::errc::internal;
    std::string what;
    try {
        if (reenter)
            chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out),
                                     misuse::reentrant_sum<comm_t>{r == 1 ? &comm : nullptr});
        else
            chorus::all_reduce<Algo>(comm, std::span<const float>(in), std::span<float>(out), misuse::throwing_sum{r == 1});
        ok = true;
    } catch (const chorus::error& e) {
        code = e.code();
        what = e.what();
    } catch (const std::runtime_error& e) {
        own = std::string(e.what()) == "test: the user operator failed";
    }
    const double s = duration<double>(steady_clock::now() - t0).count();
    INFO(what);
    CHECK_FALSE(ok);
    CHECK(s < 1.5); // within 1 s of the throw (which comes at once), with scheduling noise
    if (r == 1 && !reenter) CHECK(own);
    if (r == 1 && reenter) CHECK(code == chorus::errc::invalid_argument);
    if (r != 1) CHECK((code == chorus::errc::peer_failed || code == chorus::errc::aborted));
    if (r != 1) CHECK(what.find("rank 1") != std::string::npos);
    MPI_Barrier(MPI_COMM_WORLD);
}
} // namespace

TEST_CASE("misuse: a throwing or re-entrant user operator fails every rank within a second, none succeeds") {
    if (mpi_test::world().size() < 2) return;
    for (bool reenter : {false, true}) {
        user_code_fails<chorus::direct<>>("direct", reenter);
        user_code_fails<chorus::ring<>>("ring", reenter);
        user_code_fails<chorus::hierarchical<>>("hierarchical", reenter);
    }
}
