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
    bool direct = false;
};

void usage(std::FILE* to, const char* argv0) {
    std::fprintf(to,
                 "usage: %s [options]\n"
                 "  -t, --ranks N      ranks = threads (default 4, at least 2)\n"
                 "      --big N        elements rank 1 contributes (default 1000003); rank 0 contributes 0\n"
                 "      --others N     elements every rank from 2 on contributes (default 0)\n"
                 "  -n, --iters N      timed calls of each form (default 20)\n"
                 "  -w, --warmup N     untimed calls of each form first (default 3)\n"
                 "  -a, --algo NAME    ring or direct (default ring)\n"
                 "      --quick        -n 5 -w 1 --big 100003 (a smoke test; explicit flags still win)\n"
                 "  -h, --help         this text\n",
                 argv0);
}

bool parse_size(const char* s, std::size_t& v) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(s, &end, 10);
    if (end == s || *end != '\0' || s[0] == '-') return false;
    v = static_cast<std::size_t>(x);
    return true;
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
    const chorus::policy pol = o.direct ? chorus::policy_of<chorus::direct<>> : chorus::policy_of<chorus::ring<>>;
    const int n = o.ranks;
    std::vector<std::size_t> counts(std::size_t(n), o.others);
    counts[0] = 0;
    counts[1] = o.big;
    std::size_t total = 0, largest = 0;
    for (std::size_t c : counts) {
        total += c;
        largest = std::max(largest, c);
    }
    std::printf("# all_gatherv vs padded all_gather, threads backend, %s<>, float, %d ranks\n",
                o.direct ? "direct" : "ring", n);
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
    bool quick = false, big_set = false, n_set = false, w_set = false;
    std::string cmd;
    for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&](std::size_t& v) {
            if (i + 1 >= argc || !parse_size(argv[++i], v)) {
                std::fprintf(stderr, "%s: %s needs a non-negative integer\n", argv[0], a.c_str());
                std::exit(2);
            }
        };
        std::size_t v = 0;
        if (a == "-h" || a == "--help") {
            usage(stdout, argv[0]);
            return 0;
        } else if (a == "-t" || a == "--ranks") {
            next(v);
            o.ranks = int(v);
        } else if (a == "--big") {
            next(o.big);
            big_set = true;
        } else if (a == "--others") {
            next(o.others);
        } else if (a == "-n" || a == "--iters") {
            next(v);
            o.iters = int(v);
            n_set = true;
        } else if (a == "-w" || a == "--warmup") {
            next(v);
            o.warmup = int(v);
            w_set = true;
        } else if (a == "-a" || a == "--algo") {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s: %s needs ring or direct\n", argv[0], a.c_str());
                return 2;
            }
            const std::string name = argv[++i];
            if (name != "ring" && name != "direct") {
                std::fprintf(stderr, "%s: unknown algorithm '%s' (ring or direct)\n", argv[0], name.c_str());
                return 2;
            }
            o.direct = name == "direct";
        } else if (a == "--quick") {
            quick = true;
        } else {
            std::fprintf(stderr, "%s: unknown option '%s'\n", argv[0], a.c_str());
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (quick) {
        if (!big_set) o.big = 100003;
        if (!n_set) o.iters = 5;
        if (!w_set) o.warmup = 1;
    }
    if (o.ranks < 2 || o.ranks > 1024 || o.iters < 1) {
        std::fprintf(stderr, "%s: need 2 <= ranks <= 1024 and iters >= 1\n", argv[0]);
        return 2;
    }
    std::printf("# chorus_bench_v: %s\n", cmd.c_str());
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
}
