// What chorus shows of itself (docs/observability.md; core/log.hpp):
//   * CHORUS_DEBUG's parsing (levels, any case, blanks; a bad value is
//     refused and leaves the log off), CHORUS_DEBUG_FILE's %h/%p/%%
//     expansion and the file it opens, the line format, level filtering;
//   * at INFO: the communicator's setup and transport lines, automatic's
//     choice once per call shape with every candidate's predicted time
//     (and the small-message protocol's), at TRACE a line per call;
//   * last_call() / last_algorithm() for ring<>, direct<>, the small
//     protocol, automatic, deterministic<>, the exchange collectives, a
//     barrier and an async call.
// The NVTX ranges are checked by tests/nvtx (a tool attached to a program).

#include "test_util.hpp"

#include "../scoped_env.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using chorus::detail::log_level;
using comm_t = chorus::communicator<chorus::threads>;
using chorus_test::contains;

//! The log at `level` into a temporary file for a scope; text() is what was written.
class captured_log {
public:
    explicit captured_log(log_level level) : file_(std::tmpfile()), scope_(level, file_) {}
    ~captured_log() = default;
    captured_log(const captured_log&) = delete;
    captured_log& operator=(const captured_log&) = delete;
    std::string text() const {
        std::fflush(file_);
        std::rewind(file_);
        std::string s;
        char buf[4096];
        std::size_t got = 0;
        while ((got = std::fread(buf, 1, sizeof buf, file_)) > 0) s.append(buf, got);
        std::fseek(file_, 0, SEEK_END);
        return s;
    }
    std::vector<std::string> lines() const {
        std::vector<std::string> out;
        const std::string t = text();
        std::size_t b = 0;
        for (std::size_t e = t.find('\n'); e != std::string::npos; b = e + 1, e = t.find('\n', b))
            out.push_back(t.substr(b, e - b));
        return out;
    }
    std::size_t count(const std::string& a, const std::string& b = "") const {
        std::size_t k = 0;
        for (const std::string& l : lines()) k += contains(l, a) && contains(l, b) ? 1u : 0u;
        return k;
    }

private:
    struct closer {
        std::FILE* f;
        ~closer() { std::fclose(f); }
    };
    std::FILE* file_;
    closer close_{file_};
    chorus::detail::scoped_log scope_;
};

std::string pid_text() { return std::to_string(chorus::detail::log_pid()); }

} // namespace

TEST_CASE("observe: CHORUS_DEBUG levels parse in any case; anything else is refused") {
    log_level l = log_level::trace;
    CHECK(chorus::detail::parse_log_level(nullptr, l));
    CHECK(l == log_level::off);
    for (const char* off : {"", "  ", "none", "NONE"}) {
        l = log_level::trace;
        CHECK(chorus::detail::parse_log_level(off, l));
        CHECK(l == log_level::off);
    }
    const std::pair<const char*, log_level> good[] = {{"WARN", log_level::warn},       {"warn", log_level::warn},
                                                      {" Info ", log_level::info},     {"INFO\n", log_level::info},
                                                      {"trace", log_level::trace},     {"TrAcE", log_level::trace},
                                                      {"VERSION", log_level::version}};
    for (const auto& g : good) {
        const char* text = g.first;
        CAPTURE(text);
        CHECK(chorus::detail::parse_log_level(text, l));
        CHECK(l == g.second);
    }
    for (const char* bad : {"LOUD", "1", "INFO2", "debug", "WARN,INFO", "ABORT"}) {
        CAPTURE(bad);
        l = log_level::trace;
        CHECK_FALSE(chorus::detail::parse_log_level(bad, l));
        CHECK(l == log_level::off);
    }
    CHECK(contains(chorus::detail::log_level_values, "WARN, INFO or TRACE"));
}

TEST_CASE("observe: the log state reads the environment; a bad value leaves it off") {
    using chorus_test::scoped_env;
    {
        scoped_env d("CHORUS_DEBUG", "loud"); // prints one warning to stderr
        scoped_env f("CHORUS_DEBUG_FILE", nullptr);
        chorus::detail::log_state s;
        CHECK(s.level() == log_level::off);
        CHECK(s.out() == stderr);
    }
    {
        scoped_env d("CHORUS_DEBUG", "Trace");
        scoped_env f("CHORUS_DEBUG_FILE", nullptr);
        chorus::detail::log_state s;
        CHECK(s.level() == log_level::trace);
        CHECK(s.out() == stderr);
    }
    {
        const std::string dir = std::filesystem::temp_directory_path().string();
        const std::string pattern = dir + "/chorus_debug.%p.%%.log";
        const std::string path = dir + "/chorus_debug." + pid_text() + ".%.log";
        std::remove(path.c_str());
        scoped_env d("CHORUS_DEBUG", "INFO");
        scoped_env f("CHORUS_DEBUG_FILE", pattern.c_str());
        chorus::detail::log_state s;
        CHECK(s.level() == log_level::info);
        CHECK(s.out() != stderr);
        std::FILE* check = std::fopen(path.c_str(), "r");
        CHECK(check != nullptr);
        if (check != nullptr) std::fclose(check);
        std::remove(path.c_str());
    }
}

TEST_CASE("observe: CHORUS_DEBUG_FILE expands %h, %p and %%") {
    using chorus::detail::expand_log_path;
    CHECK(expand_log_path("/tmp/chorus.%h.%p.log", "node7", 4242) == "/tmp/chorus.node7.4242.log");
    CHECK(expand_log_path("a%%b", "h", 1) == "a%b");
    CHECK(expand_log_path("a%qb%", "h", 1) == "a%qb%");
    CHECK(expand_log_path("plain", "h", 1) == "plain");
    CHECK_FALSE(chorus::detail::log_host().empty());
}

TEST_CASE("observe: helpers format ranks and sizes") {
    const int a[] = {1, 2, 3, 5, 7, 8};
    CHECK(chorus::detail::rank_list_text(a, 6) == "1-3, 5, 7, 8");
    const int b[] = {0};
    CHECK(chorus::detail::rank_list_text(b, 1) == "0");
    CHECK(chorus::detail::rank_list_text(nullptr, 0) == "none");
    CHECK(std::string(chorus::detail::bytes_text(8).text) == "8 B");
    CHECK(std::string(chorus::detail::bytes_text(4096).text) == "4 KiB");
    CHECK(std::string(chorus::detail::bytes_text(std::uint64_t(3) << 19).text) == "1.5 MiB");
}

TEST_CASE("observe: one line per event, prefixed with level, rank and pid, filtered by level") {
    captured_log log(log_level::info);
    chorus::detail::log_line(log_level::info, 1, 4, "hello %d", 5);
    chorus::detail::log_line(log_level::warn, -1, 0, "process-wide");
    chorus::detail::log_line(log_level::trace, 2, 4, "not at INFO");
    const std::vector<std::string> lines = log.lines();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "chorus INFO [rank 1/4 pid " + pid_text() + "] hello 5");
    CHECK(lines[1] == "chorus WARN [pid " + pid_text() + "] process-wide");
    CHECK(chorus::detail::log_enabled(log_level::warn));
    CHECK_FALSE(chorus::detail::log_enabled(log_level::trace));
}

TEST_CASE("observe: at INFO, setup, transport and automatic's choices with their predictions, once per shape") {
    captured_log log(log_level::info);
    std::vector<std::string> picked(2);
    chorus::run_threads(2, [&](comm_t& comm) {
        std::vector<float> x(1 << 18, 1.0f); // 1 MiB
        for (int i = 0; i < 3; ++i) chorus::all_reduce(comm, std::span(x));
        picked[std::size_t(comm.rank())] = comm.last_algorithm();
        std::vector<float> s(2, 1.0f); // 8 B: the small-message protocol
        for (int i = 0; i < 3; ++i) chorus::all_reduce(comm, std::span(s));
        CHECK(std::string(comm.last_algorithm()) == "small");
    });
    const std::string text = log.text();
    CAPTURE(text);
    for (int r = 0; r < 2; ++r) {
        const std::string who = "[rank " + std::to_string(r) + "/2 pid " + pid_text() + "] ";
        CHECK(log.count(who + "init: backend threads, rank " + std::to_string(r) + " of 2") == 1);
        CHECK(log.count(who + "transport: peers " + std::to_string(1 - r) + ": shared address space") == 1);
        // The choice, once although called three times, with every candidate's prediction.
        CHECK(log.count(who + "automatic: all_reduce 1 MiB", "-> " + picked[std::size_t(r)] + "; predicted: ") == 1);
        CHECK(log.count(who + "automatic: all_reduce 1 MiB", "direct ") == 1);
        CHECK(log.count(who + "automatic: all_reduce 1 MiB", ", ring ") == 1);
        CHECK(log.count(who + "automatic: all_reduce 8 B", "-> small") == 1);
    }
    CHECK(log.count("chorus TRACE") == 0);
}

TEST_CASE("observe: at TRACE, a line per call with algorithm, channels and bytes") {
    captured_log log(log_level::trace);
    chorus::run_threads(2, [&](comm_t& comm) {
        std::vector<float> x(1024, 1.0f);
        chorus::all_reduce<chorus::ring<chorus::ring_params{.channels = 2}>>(comm, std::span(x));
        chorus::all_reduce<chorus::ring<chorus::ring_params{.channels = 2}>>(comm, std::span(x));
        chorus::barrier(comm);
    });
    CHECK(log.count("chorus TRACE [rank 0/2", "all_reduce #1: ring, 2 channels, 4 KiB of float, sum, in place, "
                                               "policy ring") == 1);
    CHECK(log.count("chorus TRACE [rank 1/2", "all_reduce #2: ring, 2 channels") == 1);
    CHECK(log.count("chorus TRACE", "barrier #3: small, 1 channel, 0 B") == 2);
}

TEST_CASE("observe: last_call() and last_algorithm() name what ran") {
    chorus_test::failure_log fails;
    chorus::run_threads(3, [&](comm_t& comm) {
        auto expect = [&](const char* what, const char* algo, int channels, std::uint64_t bytes,
                          const char* policy) {
            const chorus::call_info i = comm.last_call();
            if (std::string(i.algorithm) != algo || i.channels != channels || i.bytes != bytes ||
                std::string(i.policy) != policy || std::string(comm.last_algorithm()) != algo)
                fails.add(std::string(what) + ": rank " + std::to_string(comm.rank()) + " got " + i.algorithm + ", " +
                          std::to_string(i.channels) + " channel(s), " + std::to_string(i.bytes) + " B, policy " +
                          i.policy);
        };
        CHECK(comm.last_call().seq == 0);
        CHECK(std::string(comm.last_algorithm()).empty());

        std::vector<float> x(4096, 1.0f); // 16 KiB
        chorus::all_reduce<chorus::ring<chorus::ring_params{.channels = 3}>>(comm, std::span(x));
        expect("ring<3 channels>", "ring", 3, 16384, "ring");
        CHECK(comm.last_call().seq == 1);
        CHECK(comm.last_call().coll == chorus::collective::all_reduce);

        chorus::all_reduce<chorus::direct<>>(comm, std::span(x));
        expect("direct<>", "direct", 1, 16384, "direct");

        std::vector<double> s(1, 1.0);
        chorus::all_reduce(comm, std::span(s));
        expect("automatic, 8 B", "small", 1, 8, "automatic");

        std::vector<float> big(1 << 20, 1.0f); // 4 MiB: automatic's pick, as automatic::choose names it
        chorus::all_reduce(comm, std::span(big));
        chorus::schedule_args a{chorus::collective::all_reduce, comm.rank(), 3, 0, big.size(), sizeof(float), true, 0};
        a.topo = &chorus::model::current();
        const char* pick = chorus::algorithm_name(chorus::automatic::choose(a));
        expect("automatic, 4 MiB", pick, chorus::make_schedule(chorus::policy::fixed(chorus::automatic::choose(a)), a)
                                             .channels(),
               std::uint64_t(4) << 20, "automatic");

        chorus::all_reduce<chorus::deterministic<>>(comm, std::span(x));
        const std::string det = comm.last_algorithm();
        if (det != "direct" && det != "two_shot") fails.add("deterministic<> ran " + det);
        CHECK(std::string(comm.last_call().policy) == "deterministic");

        std::vector<int> mine(8, 1), all(24);
        chorus::all_gather<chorus::tree<>>(comm, std::span<const int>(mine), std::span(all));
        expect("tree<> all_gather", "ring", 1, 96, "tree"); // tree<> gathers with ring's schedule

        std::vector<int> send(6, 1), recv(6);
        chorus::all_to_all(comm, std::span<const int>(send), std::span(recv));
        expect("all_to_all", "exchange", 1, 24, "automatic");

        chorus::barrier(comm);
        expect("barrier", "small", 1, 0, "");

        chorus::future f = chorus::all_reduce_async<chorus::direct<>>(comm, std::span(x));
        expect("async direct<>", "direct", 1, 16384, "direct"); // issued, maybe not run yet
        f.wait();
        CHECK(comm.last_call().seq == 9);
    });
    fails.report();
}
