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
//! The command line is nccl-tests' (cli.hpp: nccl_rows): -t x -g ranks; -b/-e
//! sweep the whole receive buffer (nccl-tests' AllGather size), rank 1
//! contributing what the others leave. The policy (--algo) is a chorus::policy value, the one ring<> or direct<>
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
#include <iterator>
#include <span>
#include <string>
#include <vector>

namespace {

using comm_t = chorus::communicator<chorus::threads>;
using clock_type = std::chrono::steady_clock;

//! all_gatherv is measured against nccl-tests' AllGather definitions: the
//! size is the whole receive buffer, busbw = algbw * (n-1)/n.
constexpr chorus_cli::coll_kind v_colls[] = {chorus_cli::coll_kind::all_gather};

struct options : chorus_cli::nccl_options {
    options() {
        colls.assign(std::begin(v_colls), std::end(v_colls));
        iters = 20;
        warmup = 3;
    }
    int ranks = 4;              //!< -t x -g, or --ranks
    std::size_t big = 1000003;  // rank 1's count (without -b/-e)
    std::size_t others = 0;     // ranks 2.. (rank 0 always 0)
    bool sweep = false;         //!< -b or -e given: rows of whole receive buffers from -b to -e
    std::string algo = "ring"; // ring or direct, with its default tuning (chorus::policy_from_name)
};

//! nccl-tests' options, and what they do here where that is not what they do in nccl-tests.
const chorus_cli::nccl_rows nccl_table(
    options(), v_colls,
    {
        {"nthreads", "ranks = -t x -g rank threads (at least 2); with neither, --ranks (default 4)"},
        {"ngpus", "every \"GPU\" is one more rank thread: ranks = -t x -g"},
        {"minbytes", "with -b/-e, each row's size is the whole receive buffer S: rank 1 contributes "
                     "S/4 - (n-2) x --others floats, rank 0 none (without them: one row of --big)"},
        {"parallel_init", "no effect: run_threads sets up every rank's communicator at once"},
        {"blocking", "every iteration starts with a barrier (not timed), as -z 3; the value changes nothing"},
        {"stream_null", "ignored: no streams on the threads backend"},
        {"cudagraph", "ignored: no CUDA graph on the threads backend"},
        {"report_cputime", "calls are synchronous on the threads backend: cputime = time"},
        {"average", "ignored: time = the median over iterations of latest end - earliest start over ranks"},
        {"local_register", "no-op: nothing to register on the threads backend"},
        {"cta_policy", "ignored: an NCCL setting"},
        {"device_implementation", "ignored: an NCCL setting"},
        {"device_cta_count", "ignored: an NCCL setting"},
        {"memory", "ignored: no memory report"},
        {"check", "0 skips the check; any other value checks the results of the last timed calls once"},
        {"output_file", "JSON rows of the table (chorus's layout)"},
        {"unalign", "ignored: the buffers are std::vector<float>s"},
        {"per_iter_timing", "ignored: the median over iterations is printed"},
        {"per_iter_skip", "ignored: no per-iteration timing"},
        {"collectives", "all_gather only: all_gatherv against a padded all_gather"},
    },
    false);

//! The command line, and the --help text printed from it.
std::span<const chorus_cli::option> option_table() {
    static const std::vector<chorus_cli::option> table = nccl_table.then({
        {"op", 'o', "OP", "accepted and unused: all_gatherv has no operator"},
        {"datatype", 'd', "TYPE", "float (default; the one type measured here)"},
        {"root", 'r', "N", "accepted and unused: all_gatherv has no root"},
        {{}, 0, {}, "chorus only:"},
        {"ranks", 0, "N", "ranks = threads, instead of -t x -g (default 4, at least 2)"},
        {"big", 0, "N", "elements rank 1 contributes without -b/-e (default 1000003); rank 0 contributes 0"},
        {"others", 0, "N", "elements every rank from 2 on contributes (default 0)"},
        {"algo", 0, "NAME", "ring or direct (default ring)"},
        {"quick", 0, {}, "-n 5 -w 1 --big 100003 (a smoke test; explicit flags still win)"},
        {"help", 'h', {}, "this text"},
    });
    return table;
}

void usage(std::FILE* to, const char* argv0) {
    chorus_cli::print_help(to, chorus_cli::cat("usage: ", argv0, " [options]"), option_table());
}

//! The options of the command line; exits on --help.
options parse_options(int argc, char** argv) {
    using chorus_cli::parse_int;
    using chorus_cli::usage_error;
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
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
    bool ranks_given = false;
    for (const chorus_cli::given_option& g : line.given) {
        if (g.is("minbytes") || g.is("maxbytes")) o.sweep = true;
        if (nccl_table.read(g, o)) continue;
        if (g.is("op")) chorus_cli::parse_choice(g.value, g.flag, {"sum", "prod", "min", "max", "avg"});
        else if (g.is("datatype")) chorus_cli::parse_choice(g.value, g.flag, {"float", "float32"});
        else if (g.is("root")) parse_int(g.value, g.flag, 0, 4095);
        else if (g.is("ranks")) {
            o.ranks = int(parse_int(g.value, g.flag, 2, 1024));
            ranks_given = true;
        } else if (g.is("big")) o.big = std::size_t(parse_int(g.value, g.flag, 0, most));
        else if (g.is("others")) o.others = std::size_t(parse_int(g.value, g.flag, 0, most));
        else if (g.is("algo")) {
            chorus_cli::parse_choice(g.value, g.flag, {"ring", "direct"});
            o.algo = g.value;
        }
        else if (!g.is("quick")) chorus_cli::unhandled(g);
    }
    if (ranks_given && (o.nthreads_given || o.ngpus_given))
        throw usage_error{"--ranks and -t/-g both give the rank count: use one"};
    if (o.nthreads_given || o.ngpus_given) {
        if (!o.nthreads_given) o.nthreads = 1;
        o.ranks = o.nthreads * o.ngpus;
        if (o.ranks < 2 || o.ranks > 1024)
            throw usage_error{chorus_cli::cat("-t x -g: ", std::to_string(o.ranks), " ranks (2 to 1024 here)")};
    } else {
        o.nthreads = o.ranks;
        o.ngpus = 1;
    }
    if (o.sweep) {
        chorus_cli::nccl_rows::check_sweep(o);
        const std::size_t fixed = o.others * std::size_t(o.ranks - 2) * sizeof(float);
        if (o.min_bytes < fixed + sizeof(float))
            throw usage_error{chorus_cli::cat("-b/--minbytes ", std::to_string(o.min_bytes),
                                              ": below the --others ranks' share plus one float of rank 1 (",
                                              std::to_string(fixed + sizeof(float)), " B)")};
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

//! One row: rank r contributes counts[r] floats; both forms timed and checked.
struct row_result {
    double v_ms = 0, p_ms = 0; //!< medians over iterations
    long long wrong = 0;
};

row_result measure(const options& o, const chorus::policy& pol, const std::vector<std::size_t>& counts) {
    const int n = o.ranks;
    std::size_t total = 0, largest = 0;
    for (std::size_t c : counts) {
        total += c;
        largest = std::max(largest, c);
    }
    timings tv(o.iters), tp(o.iters);
    std::atomic<long long> wrong{0};
    const auto t0 = clock_type::now();
    auto ns = [&] { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count(); };
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(o.timeout_s > 0 ? std::chrono::milliseconds(std::chrono::seconds(o.timeout_s))
                                         : std::chrono::milliseconds(std::chrono::minutes(2)));
        const int r = comm.rank();
        const std::size_t mine = counts[std::size_t(r)];
        std::vector<float> in(mine), out(total, -1.0f);
        std::vector<float> pin(largest, 0.0f), pout(largest * std::size_t(n), -1.0f);
        for (std::size_t i = 0; i < mine; ++i) in[i] = pin[i] = value(r, i);
        const std::span<const std::size_t> cs(counts);
        // What chorus::all_gatherv<Algo>(comm, in, out, cs) and chorus::all_gather<Algo>(comm, pin, pout) run.
        auto gatherv = [&] {
            chorus::detail::all_gatherv_run(comm, pol, std::span<const float>(in), std::span<float>(out), cs, false);
        };
        auto padded = [&] {
            chorus::detail::all_gather_run(comm, pol, std::span<const float>(pin), std::span<float>(pout), false);
        };
        for (int i = 0; i < o.warmup; ++i) {
            gatherv();
            padded();
        }
        // Per iteration: a barrier (not timed), then -m calls of one form; the same for the other.
        for (int i = 0; i < o.iters; ++i) {
            chorus::barrier(comm);
            std::int64_t s = ns();
            for (int k = 0; k < o.agg_iters; ++k) gatherv();
            tv.record(i, s, ns());
            chorus::barrier(comm);
            s = ns();
            for (int k = 0; k < o.agg_iters; ++k) padded();
            tp.record(i, s, ns());
        }
        if (o.check == 0) return;
        // Check both results.
        long long bad = 0;
        std::size_t at = 0;
        for (int q = 0; q < n; ++q) {
            for (std::size_t i = 0; i < counts[std::size_t(q)]; ++i) {
                const float want = value(q, i);
                bad += out[at + i] != want;
                bad += pout[std::size_t(q) * largest + i] != want;
            }
            for (std::size_t i = counts[std::size_t(q)]; i < largest; ++i) bad += pout[std::size_t(q) * largest + i] != 0.0f;
            at += counts[std::size_t(q)];
        }
        wrong += bad;
    });
    return {tv.median_ms() / o.agg_iters, tp.median_ms() / o.agg_iters, wrong.load()};
}

int run(const options& o) {
    chorus::policy pol;
    chorus::policy_from_name(o.algo, pol); // ring<> or direct<>

    const int n = o.ranks;
    // Rank 1's count per row: --big, or with -b/-e what the whole receive buffer S leaves after the others.
    std::vector<std::size_t> big_counts;
    if (o.sweep) {
        for (const std::size_t s : chorus_cli::nccl_sizes(o))
            big_counts.push_back(s / sizeof(float) - o.others * std::size_t(n - 2));
    } else {
        big_counts.push_back(o.big);
    }
    std::printf("# all_gatherv vs padded all_gather, threads backend, %s<>, float, %d ranks\n", o.algo.c_str(), n);
    chorus_cli::nccl_options shown = o; // one row of --big: the header's sizes are that row's
    if (!o.sweep) shown.min_bytes = shown.max_bytes = (o.big + o.others * std::size_t(n - 2)) * sizeof(float);
    std::printf("%s\n", chorus_cli::nccl_config_line(shown).c_str());
    std::FILE* json = nullptr;
    std::size_t json_rows = 0;
    if (!o.output_file.empty()) {
        json = std::fopen(o.output_file.c_str(), "w");
        if (json == nullptr) throw chorus_cli::usage_error{chorus_cli::cat("-J: cannot write ", o.output_file)};
        std::fprintf(json, "{\n  \"backend\": \"threads\",\n  \"collective\": \"all_gatherv\",\n  \"algo\": \"%s\",\n"
                           "  \"ranks\": %d,\n  \"others\": %zu,\n  \"iters\": %d,\n  \"agg_iters\": %d,\n  \"rows\": [",
                     o.algo.c_str(), n, o.others, o.iters, o.agg_iters);
    }
    for (const std::string& note : o.notes) std::printf("# %s\n", note.c_str());
    std::printf("# counts: rank 0 none, rank 1 the count column, ranks 2.. %zu each; padded: every rank to rank 1's count\n",
                o.others);
    std::printf("# size = the whole receive buffer (nccl-tests' AllGather size): all_gatherv's n counts; the padded\n"
                "#   all_gather's is n x the largest count. algbw = size / time, busbw = algbw x (n-1)/n.\n");
    std::printf("# time: the median over %d iterations of (latest end - earliest start over ranks) / %d calls, after %d\n"
                "#   warm-up calls; every iteration starts with a barrier. Only the collectives are timed.\n",
                o.iters, o.agg_iters, o.warmup);
    std::printf("#%13s %10s %11s %8s %8s %11s %8s %8s %8s %7s%s\n", "size", "count(r1)", "v time", "algbw", "busbw",
                "padded", "algbw", "busbw", "padded/v", "#wrong", o.report_timestamps ? "  timestamp" : "");
    std::printf("#%13s %10s %11s %8s %8s %11s %8s %8s %8s %7s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)",
                "(us)", "(GB/s)", "(GB/s)", "", "");
    std::fflush(stdout);

    long long wrong = 0;
    const double f = double(n - 1) / double(n);
    for (int cycle = 0; o.run_cycles == 0 || cycle < o.run_cycles; ++cycle)
        for (const std::size_t big : big_counts) {
            std::vector<std::size_t> counts(std::size_t(n), o.others);
            counts[0] = 0;
            counts[1] = big;
            std::size_t total = 0;
            for (std::size_t c : counts) total += c;
            const std::size_t largest = std::max(big, o.others);
            const row_result r = measure(o, pol, counts);
            const double vs = total * sizeof(float), ps = double(largest) * n * sizeof(float);
            const double v_bw = r.v_ms > 0 ? vs / (r.v_ms * 1e6) : 0.0;
            const double p_bw = r.p_ms > 0 ? ps / (r.p_ms * 1e6) : 0.0;
            std::printf(" %13zu %10zu %11.2f %8.3f %8.3f %11.2f %8.3f %8.3f %8.2f %7lld%s%s\n", total * sizeof(float), big,
                        r.v_ms * 1e3, v_bw, v_bw * f, r.p_ms * 1e3, p_bw, p_bw * f, r.v_ms > 0 ? r.p_ms / r.v_ms : 0.0,
                        r.wrong, o.report_timestamps ? "  " : "",
                        o.report_timestamps ? chorus_cli::timestamp_now().c_str() : "");
            std::fflush(stdout);
            if (json != nullptr)
                std::fprintf(json,
                             "%s\n    {\"size_bytes\": %zu, \"big_count\": %zu, \"v_time_us\": %.3f, \"v_algbw_gbps\": %.6f, "
                             "\"v_busbw_gbps\": %.6f, \"padded_time_us\": %.3f, \"padded_algbw_gbps\": %.6f, "
                             "\"padded_busbw_gbps\": %.6f, \"wrong\": %lld}",
                             json_rows++ ? "," : "", total * sizeof(float), big, r.v_ms * 1e3, v_bw, v_bw * f,
                             r.p_ms * 1e3, p_bw, p_bw * f, r.wrong);
            wrong += r.wrong;
        }
    if (json != nullptr) {
        std::fprintf(json, "%s],\n  \"wrong_total\": %lld\n}\n", json_rows ? "\n  " : "", wrong);
        std::fclose(json);
    }
    if (wrong != 0) {
        std::printf("FAILED: %lld wrong elements\n", wrong);
        return 1;
    }
    std::printf(o.check ? "all results correct\n" : "results not checked (-c 0)\n");
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
    const std::string cmd = chorus_cli::join_args({argv, std::size_t(argc)}, true);
    std::printf("# chorus_bench_v: %s\n", cmd.c_str());
    try {
        return run(o);
    } catch (const chorus_cli::usage_error& e) {
        std::fprintf(stderr, "%s: %s\n", argv[0], e.what.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
}
