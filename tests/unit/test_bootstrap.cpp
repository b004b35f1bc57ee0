// The bootstrap of ranks that share no MPI (backend/bootstrap.hpp): a
// unique_id made once, file exchanges in its directory. Ranks here are
// threads of one process, which the files do not know: the same protocol
// as between processes (the process liveness checks see one live process).

#include "test_util.hpp"

#include <chorus/backend/bootstrap.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using chorus::detail::file_bootstrap;
using namespace std::chrono;

// A fresh directory for one test, removed (it must be empty) at the end.
struct temp_dir {
    std::string path;
    temp_dir() {
        char tmpl[] = "/tmp/chorus-bootstrap-test-XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    std::vector<std::string> files() const {
        std::vector<std::string> out;
        if (DIR* d = opendir(path.c_str())) {
            while (const dirent* e = readdir(d))
                if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
            closedir(d);
        }
        return out;
    }
    ~temp_dir() {
        for (const std::string& f : files()) unlink((path + "/" + f).c_str());
        rmdir(path.c_str());
    }
};

// Only failure markers (which stay while their process lives) are left.
void only_markers_left(const temp_dir& d) {
    for (const auto& f : d.files()) CHECK(f.find("-failed-") != std::string::npos);
    for (const auto& f : d.files()) unlink((d.path + "/" + f).c_str());
}

// Runs body(rank) on n threads; returns each rank's error text ("" if none).
template <class F>
std::vector<std::string> on_ranks(int n, F body) {
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
        ts.emplace_back([&, r] {
            try {
                body(r);
            } catch (const chorus::error& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : ts) t.join();
    return errors;
}

} // namespace

TEST_CASE("bootstrap: unique ids name their directory and a fresh token, and bad ids are refused") {
    temp_dir d;
    const chorus::unique_id a = chorus::make_unique_id(d.path), b = chorus::make_unique_id(d.path);
    CHECK(std::strncmp(a.internal, "chorus1:", 8) == 0);
    CHECK(std::string(a.internal).find(d.path) != std::string::npos);
    CHECK(std::memcmp(a.internal, b.internal, sizeof a.internal) != 0);
    CHECK_THROWS_WITH_AS(chorus::make_unique_id(d.path + "/missing"), doctest::Contains("`dir`"), chorus::error);
    CHECK_THROWS_WITH_AS(chorus::make_unique_id(std::string(120, '/')), doctest::Contains("at most 100"),
                         chorus::error);
    chorus::unique_id junk;
    std::memcpy(junk.internal, "hello", 6);
    CHECK_THROWS_WITH_AS(file_bootstrap(junk, 0, 1, seconds(1)), doctest::Contains("`id`"), chorus::error);
    CHECK_THROWS_WITH_AS(file_bootstrap(a, 2, 2, seconds(1)), doctest::Contains("`rank` is 2"), chorus::error);
    CHECK_THROWS_WITH_AS(file_bootstrap(a, 0, 0, seconds(1)), doctest::Contains("`size`"), chorus::error);
    CHECK(d.files().empty());
}

TEST_CASE("bootstrap: all_gather over files gives every rank every part, in rank order, and leaves nothing") {
    for (int n : {1, 2, 3, 4, 7}) {
        CAPTURE(n);
        temp_dir d;
        const chorus::unique_id id = chorus::make_unique_id(d.path);
        std::atomic<int> wrong{0};
        const auto errors = on_ranks(n, [&](int r) {
            file_bootstrap b(id, r, n, seconds(20));
            for (std::size_t bytes : {std::size_t(8), std::size_t(0), std::size_t(1000), std::size_t(3)}) {
                std::vector<std::uint8_t> mine(bytes);
                for (std::size_t i = 0; i < bytes; ++i) mine[i] = std::uint8_t(r * 31 + i);
                const std::vector<std::byte> all = b.all_gather(mine.data(), bytes);
                if (all.size() != bytes * std::size_t(n)) ++wrong;
                for (int q = 0; q < n && all.size() == bytes * std::size_t(n); ++q)
                    for (std::size_t i = 0; i < bytes; ++i)
                        if (std::uint8_t(all[bytes * std::size_t(q) + i]) != std::uint8_t(q * 31 + i)) ++wrong;
            }
            b.close();
        });
        for (const auto& e : errors) CHECK(e.empty());
        CHECK(wrong == 0);
        CHECK(d.files().empty());
    }
}

TEST_CASE("bootstrap: a rank that never joins is named at the deadline, a size mismatch on every rank, nothing left") {
    temp_dir d;
    {
        const chorus::unique_id id = chorus::make_unique_id(d.path);
        const auto t0 = steady_clock::now();
        const auto errors = on_ranks(2, [&](int r) { file_bootstrap b(id, r, 3, milliseconds(300)); });
        CHECK(duration<double>(steady_clock::now() - t0).count() < 5.0);
        for (const auto& e : errors) {
            CHECK(e.find("timed out after 300 ms waiting for rank 2") != std::string::npos);
        }
        only_markers_left(d);
    }
    {
        const chorus::unique_id id = chorus::make_unique_id(d.path);
        const auto errors = on_ranks(3, [&](int r) {
            file_bootstrap b(id, r, 3, seconds(2));
            std::vector<char> mine(r == 1 ? 5 : 4, 'x');
            b.all_gather(mine.data(), mine.size());
        });
        // A rank that reads a different size says so; one waiting for a
        // rank that failed first learns it from its failure marker, at once.
        for (const auto& e : errors) CHECK(e.find("bytes to exchange") != std::string::npos);
        only_markers_left(d);
    }
}

TEST_CASE("bootstrap: the abort flag releases a waiting rank at once") {
    temp_dir d;
    const chorus::unique_id id = chorus::make_unique_id(d.path);
    std::atomic<bool> abort{false};
    std::thread stop([&] {
        std::this_thread::sleep_for(milliseconds(100));
        abort = true;
    });
    const auto t0 = steady_clock::now();
    chorus::errc code = chorus::errc::internal;
    try {
        file_bootstrap b(id, 0, 2, seconds(30), &abort);
    } catch (const chorus::error& e) {
        code = e.code();
    }
    stop.join();
    CHECK(code == chorus::errc::aborted);
    CHECK(duration<double>(steady_clock::now() - t0).count() < 5.0);
    only_markers_left(d);
}

TEST_CASE("bootstrap: between processes, a rank whose process died is reported at once, not at the deadline") {
    temp_dir d;
    const chorus::unique_id id = chorus::make_unique_id(d.path);
    // Rank 1: a child that reports by exit status (0: peer_failed naming
    // rank 2); rank 2: a child that joins the first exchange, then dies.
    const pid_t one = fork();
    if (one == 0) {
        int rc = 1;
        try {
            file_bootstrap b(id, 1, 3, seconds(30));
            std::uint64_t v = 1;
            b.all_gather(&v, sizeof v);
        } catch (const chorus::error& e) {
            rc = e.code() == chorus::errc::peer_failed &&
                         std::string(e.what()).find("rank 2") != std::string::npos ? 0 : 2;
        }
        _exit(rc);
    }
    const pid_t two = fork();
    if (two == 0) {
        try {
            file_bootstrap b(id, 2, 3, seconds(30));
            std::_Exit(0); // dies without closing, its files left where they are
        } catch (...) {
        }
        std::_Exit(3);
    }
    // Reap rank 2 as soon as it dies (a zombie still looks alive to kill(0)).
    int two_status = -1;
    std::thread reaper([&] { waitpid(two, &two_status, 0); });
    const auto t0 = steady_clock::now();
    chorus::errc code = chorus::errc::internal;
    std::string what;
    try {
        file_bootstrap b(id, 0, 3, seconds(30));
        std::uint64_t v = 0;
        b.all_gather(&v, sizeof v);
    } catch (const chorus::error& e) {
        code = e.code();
        what = e.what();
    }
    const double s = duration<double>(steady_clock::now() - t0).count();
    reaper.join();
    int one_status = -1;
    waitpid(one, &one_status, 0);
    INFO(what);
    CHECK(code == chorus::errc::peer_failed);
    CHECK(what.find("rank 2") != std::string::npos);
    CHECK(s < 5.0);
    CHECK(WIFEXITED(one_status));
    CHECK(WEXITSTATUS(one_status) == 0);
    CHECK(WIFEXITED(two_status));
    // The survivors removed the dead rank's files too; the failure markers
    // stay while their process lives: a later bootstrap in the directory
    // removes rank 1's (its process is gone), not rank 0's (this one).
    for (const auto& f : d.files()) CHECK(f.find("-failed-") != std::string::npos);
    {
        file_bootstrap later(chorus::make_unique_id(d.path), 0, 1, seconds(1));
    }
    const auto left = d.files();
    REQUIRE(left.size() == 1);
    CHECK(left[0].find("-failed-0") != std::string::npos);
}
