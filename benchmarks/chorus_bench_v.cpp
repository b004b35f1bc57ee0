//! \file chorus_bench_v.cpp
//! all_gatherv with ragged counts against the usual workaround: pad every
//! rank's block to the largest count and call all_gather. Threads backend,
//! float elements. By default rank 0 contributes nothing, rank 1 10^6 + 3
//! elements and every other rank nothing (--others N gives them N each), so
//! the padded all_gather moves size() times the data all_gatherv moves.
//!
//! Method: buffers allocated and touched before timing; per iteration every
//! rank enters a barrier, then calls; time = latest end - earliest start
//! over ranks; the median over iterations is printed for both forms, and
//! their ratio. Only the collective calls are timed (padding the input and
//! compacting the padded result, which the workaround also needs, are not).
//! After timing, both results are checked element by element against the
//! expected values.
//!
//! The policy (-a) is a chorus::policy value, the one ring<> or direct<>
//! describes, run through the detail::*_run functions the public calls run:
//! one instantiation serves both.
//!
//! Exit status: 0 all results correct, 1 a wrong value or a chorus error,
//! 2 bad command line.

#include <chorus/chorus.hpp>

#include "cli.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace {

using comm_t = chorus::communicator<chorus::threads>;
using clock_type = std::chrono::steady_clock;

struct options {
    int ranks = 4;
    std::size_t big = 1000003;  // rank 1's count
    std::size_t others = 0;     // ranks 2.. (rank 0 always 0)
    int iters = 20;
    int warmup = 3;
    std::string algo = "ring"; // ring or direct, with its default tuning (chorus::policy_from_name)
};

//! The command line, and the --help text printed from it.
constexpr chorus_cli::option option_table[] = {
    {"ranks", 't', "N", "ranks = threads (default 4, at least 2)"},
    {"big", 0, "N", "elements rank 1 contributes (default 1000003); rank 0 contributes 0"},
    {"others", 0, "N", "elements every rank from 2 on contributes (default 0)"},
    {"iters", 'n', "N", "timed calls of each form (default 20)"},
    {"warmup", 'w', "N", "untimed calls of each form first (default 3)"},
    {"algo", 'a', "NAME", "ring or direct (default ring)"},
    {"quick", 0, {}, "-n 5 -w 1 --big 100003 (a smoke test; explicit flags still win)"},
    {"help", 'h', {}, "this text"},
};

void usage(std::FILE* to, const char* argv0) {
    chorus_cli::print_help(to, chorus_cli::cat("usage: ", argv0, " [options]"), option_table);
}

//! The options of the command line; exits on --help.
options parse_options(int argc, char** argv) {
    using chorus_cli::parse_int;
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table);
    if (line.help) {
        usage(stdout, argv[0]);
        std::exit(0);
    }
    options o;
    //! --quick sets defaults that explicit flags override, wherever they stand.
    for (const chorus_cli::given_option& g : line.given)
        if (g.is("quick")) {
            o.big = 100003;
            o.iters = 5;
            o.warmup = 1;
        }
    constexpr long long most = 1LL << 40; // elements: more than any host holds
    for (const chorus_cli::given_option& g : line.given) {
        if (g.is("ranks")) o.ranks = int(parse_int(g.value, g.flag, 2, 1024));
        else if (g.is("big")) o.big = std::size_t(parse_int(g.value, g.flag, 0, most));
        else if (g.is("others")) o.others = std::size_t(parse_int(g.value, g.flag, 0, most));
        else if (g.is("iters")) o.iters = int(parse_int(g.value, g.flag, 1, 1 << 30));
        else if (g.is("warmup")) o.warmup = int(parse_int(g.value, g.flag, 0, 1 << 30));
        else if (g.is("algo")) {
            chorus_cli::parse_choice(g.value, g.flag, {"ring", "direct"});
            o.algo = g.value;
        }
        else if (!g.is("quick")) chorus_cli::unhandled(g);
    }
    return o;
}

float value(int rank, std::size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 1021) + 1); }

//! Per iteration: earliest start and latest end over ranks (ns since t0).
struct timings {
    explicit timings(int iters) : start(std::size_t(iters)), end(std::size_t(iters)) {
        for (auto& s : start) s.store(INT64_MAX);
        for (auto& e : end) e.store(0);
    }
    std::vector<std::atomic<std::int64_t>> start, end;
    void record(int it, std::int64_t s, std::int64_t e) {
        auto& a = start[std::size_t(it)];
        for (std::int64_t cur = a.load(); s < cur && !a.compare_exchange_weak(cur, s);) {
        }
        auto& b = end[std::size_t(it)];
        for (std::int64_t cur = b.load(); e > cur && !b.compare_exchange_weak(cur, e);) {
        }
    }
    double median_ms() const {
        std::vector<double> d;
        for (std::size_t i = 0; i < start.size(); ++i) d.push_back(double(end[i].load() - start[i].load()) / 1e6);
        std::sort(d.begin(), d.end());
        if (d.empty()) return 0;
        return d.size() % 2 ? d[d.size() / 2] : (d[d.size() / 2 - 1] + d[d.size() / 2]) / 2;
    }
};

int run(const options& o) {
    chorus::policy pol;
    chorus::policy_from_name(o.algo, pol); // ring<> or direct<>

    const int n = o.ranks;
    std::vector<std::size_t> counts(std::size_t(n), o.others);
    counts[0] = 0;
    counts[1] = o.big;
    std::size_t total = 0, largest = 0;
    for (std::size_t c : counts) {
        total += c;
        largest = std::max(largest, c);
    }
    std::printf("# all_gatherv vs padded all_gather, threads backend, %s<>, float, %d ranks\n", o.algo.c_str(), n);
    std::printf("# counts:");
    for (std::size_t c : counts) std::printf(" %zu", c);
    std::printf(" (total %zu elements, %.2f MiB); padded: %d x %zu = %zu elements (%.2f MiB)\n", total,
                double(total * sizeof(float)) / (1 << 20), n, largest, largest * std::size_t(n),
                double(largest * std::size_t(n) * sizeof(float)) / (1 << 20));
    std::printf("# %d timed calls of each form after %d warm-up calls; time = latest end - earliest start over ranks; "
                "only the collectives are timed\n",
                o.iters, o.warmup);
    std::fflush(stdout);

    timings tv(o.iters), tp(o.iters);
    std::atomic<long long> wrong{0};
    std::mutex m;
    std::string failure;
    const auto t0 = clock_type::now();
    auto ns = [&] { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count(); };
    try {
        chorus::run_threads(n, [&](comm_t& comm) {
            comm.set_timeout(std::chrono::minutes(2));
            const int r = comm.rank();
            const std::size_t mine = counts[std::size_t(r)];
            std::vector<float> in(mine), out(total, -1.0f);
            std::vector<float> pin(largest, 0.0f), pout(largest * std::size_t(n), -1.0f);
            for (std::size_t i = 0; i < mine; ++i) in[i] = pin[i] = value(r, i);
            const std::span<const std::size_t> cs(counts);
            // What chorus::all_gatherv<Algo>(comm, in, out, cs) and chorus::all_gather<Algo>(comm, pin, pout) run.
            auto gatherv = [&] {
                chorus::detail::all_gatherv_run(comm, pol, std::span<const float>(in), std::span<float>(out), cs,
                                                false);
            };
            auto padded = [&] {
                chorus::detail::all_gather_run(comm, pol, std::span<const float>(pin), std::span<float>(pout), false);
            };
            for (int i = 0; i < o.warmup; ++i) {
                gatherv();
                padded();
            }
            for (int i = 0; i < o.iters; ++i) {
                chorus::barrier(comm);
                std::int64_t s = ns();
                gatherv();
                tv.record(i, s, ns());
                chorus::barrier(comm);
                s = ns();
                padded();
                tp.record(i, s, ns());
            }
            // Check both results.
            long long bad = 0;
            std::size_t at = 0;
            for (int q = 0; q < n; ++q) {
                for (std::size_t i = 0; i < counts[std::size_t(q)]; ++i) {
                    const float want = value(q, i);
                    bad += out[at + i] != want;
                    bad += pout[std::size_t(q) * largest + i] != want;
                }
                for (std::size_t i = counts[std::size_t(q)]; i < largest; ++i)
                    bad += pout[std::size_t(q) * largest + i] != 0.0f;
                at += counts[std::size_t(q)];
            }
            wrong += bad;
        });
    } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(m);
        failure = e.what();
    }
    if (!failure.empty()) {
        std::printf("FAILED: %s\n", failure.c_str());
        return 1;
    }
    const double v = tv.median_ms(), p = tp.median_ms();
    std::printf("%-28s %10.3f ms  %8.2f GB/s (received bytes per rank)\n", "all_gatherv", v,
                v > 0 ? double(total * sizeof(float)) / (v * 1e6) : 0.0);
    std::printf("%-28s %10.3f ms  %8.2f GB/s\n", "all_gather, padded to max", p,
                p > 0 ? double(largest * std::size_t(n) * sizeof(float)) / (p * 1e6) : 0.0);
    std::printf("%-28s %10.2f\n", "ratio padded / v", v > 0 ? p / v : 0.0);
    if (wrong.load() != 0) {
        std::printf("FAILED: %lld wrong elements\n", wrong.load());
        return 1;
    }
    std::printf("all results correct\n");
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    options o;
    try {
        o = parse_options(argc, argv);
    } catch (const chorus_cli::usage_error& e) {
        std::fprintf(stderr, "%s: %s\n", argv[0], e.what.c_str());
        usage(stderr, argv[0]);
        return 2;
    }
    const std::string cmd = chorus_cli::join_args({argv, std::size_t(argc)});
    std::printf("# chorus_bench_v: %s\n", cmd.c_str());
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
}
