// Limits and configuration on MPI (docs/reliability.md): construction that
// fails on some ranks only fails on every rank (a rejected environment
// variable, a /dev/shm too small for the node's windows), with the error
// naming the variable or the size, and leaves nothing in /dev/shm; names a
// killed job left behind are swept; checked mode is agreed across ranks.
// Named "misuse: ..." so that they run in the misuse runs only
// (tests/mpi/CMakeLists.txt).

#include "mpi_test_util.hpp"
#include "../scoped_env.hpp"

#include <chorus/mpi.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using comm_t = chorus::communicator<chorus::mpi>;

// What constructing a communicator (and one AllReduce on it) gave.
struct outcome {
    bool ok = false;
    chorus::errc code = chorus::errc::internal;
    std::string what;
};
outcome construct() {
    outcome o;
    try {
        comm_t comm(MPI_COMM_WORLD);
        std::vector<float> v(64, 1.0f);
        chorus::all_reduce(comm, std::span<float>(v));
        o.ok = v[0] == float(comm.size());
    } catch (const chorus::error& e) {
        o.code = e.code();
        o.what = e.what();
    }
    return o;
}

// The names in /dev/shm that start with `prefix`.
std::vector<std::string> shm_names(const std::string& prefix) {
    std::vector<std::string> found;
    if (DIR* d = opendir("/dev/shm")) {
        while (const dirent* e = readdir(d))
            if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
        closedir(d);
    }
    return found;
}
std::string own_prefix() { return "chorus-" + std::to_string(getpid()) + "-"; }

bool all_ranks(bool mine) {
    int v = mine ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return v != 0;
}

} // namespace

TEST_CASE("misuse: a variable one rank rejects fails every rank at construction, none waits") {
    const int r = mpi_test::world().rank();
    for (const char* var : {"CHORUS_TIMEOUT_MS", "CHORUS_CHECK", "CHORUS_SHM_BYTES"}) {
        CAPTURE(var);
        outcome o;
        {
            chorus_test::scoped_env bad(var, r == mpi_test::world().size() - 1 ? "2000xyz" : nullptr);
            o = construct();
        }
        INFO(o.what);
        CHECK_FALSE(o.ok);
        if (r == mpi_test::world().size() - 1) {
            CHECK(o.code == chorus::errc::invalid_argument);
            CHECK(o.what.find(var) != std::string::npos);
        } else {
            CHECK(o.code == chorus::errc::peer_failed);
            CHECK(o.what.find("rank " + std::to_string(mpi_test::world().size() - 1) + " rejected its environment") !=
                  std::string::npos);
        }
        CHECK(shm_names(own_prefix()).empty());
    }
    CHECK(construct().ok); // and the next one works
}

TEST_CASE("misuse: windows /dev/shm cannot hold are an error naming the sizes and the knob, nothing left") {
    // Ask for more than /dev/shm has free, where every rank shares its
    // node with another (nodes of one rank keep their window in private
    // memory) and the cap of CHORUS_SHM_BYTES (64 GiB) allows it.
    int local = 0;
    {
        comm_t probe(MPI_COMM_WORLD);
        local = probe.transport().local_size();
    }
    struct statvfs v{};
    const std::uint64_t avail = statvfs("/dev/shm", &v) == 0 ? std::uint64_t(v.f_bavail) * v.f_frsize : 0;
    // Each rank's window alone takes all of it (the node's windows twice
    // that or more): no other job's use of /dev/shm can make it fit.
    const std::uint64_t want = avail;
    if (!all_ranks(local >= 2 && avail != 0 && want <= (std::uint64_t(64) << 30))) {
        MESSAGE("skipped: some node has one rank, or /dev/shm has more than 64 GiB free");
        return;
    }
    outcome o;
    {
        chorus_test::scoped_env big("CHORUS_SHM_BYTES", std::to_string(want).c_str());
        o = construct();
    }
    INFO(o.what);
    CHECK_FALSE(o.ok);
    // Every node is short of room, so every rank reports it itself.
    CHECK(o.code == chorus::errc::unavailable);
    CHECK(o.what.find("/dev/shm") != std::string::npos);
    CHECK(o.what.find("CHORUS_SHM_BYTES") != std::string::npos);
    CHECK(o.what.find("bytes free") != std::string::npos);
    CHECK(shm_names(own_prefix()).empty());
    CHECK(construct().ok);
}

TEST_CASE("misuse: names a killed job left in /dev/shm are swept, a live process's are kept") {
    const int r = mpi_test::world().rank();
    std::string stale, live;
    if (r == 0) {
        // A process id that no longer exists, and one that does.
        const pid_t child = fork();
        if (child == 0) _exit(0);
        waitpid(child, nullptr, 0);
        stale = "/chorus-" + std::to_string(child) + "-00000000deadbeef";
        live = "/chorus-" + std::to_string(getppid()) + "-00000000feedf00d";
        for (const std::string& n : {stale, live}) {
            const int fd = shm_open(n.c_str(), O_CREAT | O_RDWR, S_IRUSR | S_IWUSR);
            REQUIRE(fd >= 0);
            close(fd);
        }
    }
    int local = 0;
    {
        comm_t comm(MPI_COMM_WORLD); // rank 0's node makes a segment when it has several ranks
        local = comm.transport().local_size();
    }
    if (r == 0) {
        const int stale_fd = shm_open(stale.c_str(), O_RDWR, 0);
        if (local >= 2) CHECK(stale_fd < 0);
        if (stale_fd >= 0) close(stale_fd);
        const int live_fd = shm_open(live.c_str(), O_RDWR, 0);
        CHECK(live_fd >= 0);
        if (live_fd >= 0) close(live_fd);
        shm_unlink(stale.c_str());
        shm_unlink(live.c_str());
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("misuse: checked mode is agreed: one rank's CHORUS_CHECK=1 turns it on everywhere") {
    const int r = mpi_test::world().rank();
    chorus_test::scoped_env check("CHORUS_CHECK", r == 0 ? "1" : "0");
    comm_t comm(MPI_COMM_WORLD);
    CHECK(comm.checked());
    std::vector<float> v(64, 1.0f);
    chorus::all_reduce(comm, std::span<float>(v));
    CHECK(v[0] == float(comm.size()));
    if (comm.size() < 2) return;
    // Mismatched counts: checked mode reports them on every rank.
    std::vector<float> w(r == 0 ? 10 : 12, 1.0f);
    comm.set_timeout(std::chrono::milliseconds(5000));
    chorus::errc code = chorus::errc::internal;
    try {
        chorus::all_reduce(comm, std::span<float>(w));
    } catch (const chorus::error& e) {
        code = e.code();
    }
    CHECK(code == chorus::errc::mismatch);
}
