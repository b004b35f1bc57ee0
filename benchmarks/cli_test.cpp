//! \file cli_test.cpp
//! The benchmarks' command line against nccl-tests' (ctest: bench.cli):
//! the size semantics and bandwidth definitions of cli.hpp (nccl_count,
//! nccl_size_bytes, nccl_algbw, nccl_busbw), the sweep (nccl_sizes: -b -e
//! -i -f) and the option table (nccl_rows) reading nccl-tests' flags with
//! nccl-tests' meanings, and refusing what clashes with a message naming the
//! flag.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "cli.hpp"

#include <string>
#include <vector>

using namespace chorus_cli;

namespace {

//! A table like chorus_bench's: nccl-tests' rows, then -o -d -r and chorus-only long options.
const nccl_rows& rows() {
    static const nccl_rows r([] {
        nccl_options d;
        d.nthreads = 1;
        return d;
    }(),
                             all_colls, {{"cudagraph", "ignored: no CUDA graph on the threads backend"}});
    return r;
}
std::span<const option> table() {
    static const std::vector<option> t = rows().then({
        {"op", 'o', "LIST", "operators"},
        {"datatype", 'd', "LIST", "types"},
        {"root", 'r', "N", "root"},
        {"algo", 0, "LIST", "policies"},
        {"ranks", 0, "N", "ranks"},
        {"help", 'h', {}, "this text"},
    });
    return t;
}

//! Parses `args` (argv[0] is added) into nccl_options, as a program does.
nccl_options read(std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>("prog")};
    for (std::string& a : args) argv.push_back(a.data());
    const parsed_line line = parse(int(argv.size()), argv.data(), table());
    nccl_options o;
    for (const given_option& g : line.given)
        if (!rows().read(g, o) && !(g.is("op") || g.is("datatype") || g.is("root") || g.is("algo") || g.is("ranks")))
            unhandled(g);
    nccl_rows::check_sweep(o);
    return o;
}

//! The usage error `args` give ("" if none).
std::string error_of(std::vector<std::string> args) {
    try {
        read(std::move(args));
    } catch (const usage_error& e) {
        return e.what;
    }
    return {};
}

} // namespace

TEST_CASE("AllGather and ReduceScatter sizes are the whole buffer; busbw = (n-1)/n x algbw") {
    for (const int n : {2, 3, 4, 8}) {
        for (const coll_kind c : {coll_kind::all_gather, coll_kind::reduce_scatter}) {
            const std::size_t bytes = std::size_t(64) << 20; // -b 64M
            const std::size_t count = nccl_count(c, bytes, sizeof(float), n);
            CHECK(count == bytes / sizeof(float) / std::size_t(n) / 4 * 4); // per rank, whole 16-byte groups
            const std::size_t size = nccl_size_bytes(c, count, sizeof(float), n);
            CHECK(size == count * std::size_t(n) * sizeof(float)); // the whole buffer, not one rank's block
            if (n == 2 || n == 4 || n == 8) CHECK(size == bytes);
            const double secs = 1e-3;
            const double algbw = nccl_algbw(c, count, sizeof(float), n, secs);
            CHECK(algbw == doctest::Approx(double(size) / secs / 1e9));
            CHECK(nccl_busbw(c, count, sizeof(float), n, secs) == doctest::Approx(algbw * (n - 1) / n));
        }
    }
    // 8 ranks, 128 MiB AllGather in 10 ms: algbw 13.42 GB/s, busbw 11.74 GB/s (per-rank sizes would read 8x lower).
    const std::size_t count = nccl_count(coll_kind::all_gather, std::size_t(128) << 20, 4, 8);
    CHECK(count == (std::size_t(4) << 20));
    CHECK(nccl_algbw(coll_kind::all_gather, count, 4, 8, 0.01) == doctest::Approx(13.4217728));
    CHECK(nccl_busbw(coll_kind::all_gather, count, 4, 8, 0.01) == doctest::Approx(13.4217728 * 7 / 8));
}

TEST_CASE("AllReduce, Broadcast and Reduce sizes are the buffer, with nccl-tests' factors") {
    const std::size_t count = nccl_count(coll_kind::all_reduce, 1000, 4, 3);
    CHECK(count == 250);
    CHECK(nccl_size_bytes(coll_kind::all_reduce, count, 4, 3) == 1000);
    CHECK(nccl_busbw(coll_kind::all_reduce, count, 4, 3, 1e-6) ==
          doctest::Approx(nccl_algbw(coll_kind::all_reduce, count, 4, 3, 1e-6) * 4.0 / 3.0));
    for (const coll_kind c : {coll_kind::broadcast, coll_kind::reduce}) {
        CHECK(nccl_count(c, 1000, 4, 3) == 250);
        CHECK(nccl_busbw(c, 250, 4, 3, 1e-6) == doctest::Approx(nccl_algbw(c, 250, 4, 3, 1e-6)));
    }
}

TEST_CASE("a size that does not divide by the ranks is rounded down as nccl-tests rounds it") {
    // (count / nranks) & ~(16 / eltSize - 1): whole 16-byte groups per rank.
    CHECK(nccl_count(coll_kind::all_gather, 100, 4, 3) == 8);      // 25 floats / 3 = 8
    CHECK(nccl_size_bytes(coll_kind::all_gather, 8, 4, 3) == 96); // the size column: 3 x 8 floats
    CHECK(nccl_count(coll_kind::all_gather, 100, 1, 3) == 32);     // int8: 33 -> 32
    CHECK(nccl_count(coll_kind::reduce_scatter, 100, 8, 3) == 4);  // double: 4 -> 4
    CHECK(nccl_count(coll_kind::reduce_scatter, 120, 8, 3) == 4);  // double: 5 -> 4
    CHECK(nccl_count(coll_kind::all_gather, 32, 4, 4) == 0);       // 2 floats per rank: no group, nothing moves
    CHECK(nccl_count(coll_kind::all_reduce, 7, 4, 4) == 1);        // AllReduce: not divided
}

TEST_CASE("-b 8 -e 128M -f 2 -g 1 -t 2 -n 2 -w 1 reads as nccl-tests reads it") {
    const nccl_options o = read({"-b", "8", "-e", "128M", "-f", "2", "-g", "1", "-t", "2", "-n", "2", "-w", "1"});
    CHECK(o.min_bytes == 8);
    CHECK(o.max_bytes == (std::size_t(128) << 20));
    CHECK(o.step_factor == 2);
    CHECK(o.ngpus == 1);
    CHECK(o.nthreads == 2);
    CHECK(o.iters == 2);
    CHECK(o.warmup == 1);
    const std::vector<std::size_t> sizes = nccl_sizes(o);
    REQUIRE(sizes.size() == 25);
    CHECK(sizes.front() == 8);
    CHECK(sizes.back() == (std::size_t(128) << 20));
    CHECK(nccl_config_line(o) == "# nThread 2 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 1 "
                                 "iters: 2 agg iters: 1 validation: 1 graph: 0");
}

TEST_CASE("the long names, -i stepping and the other nccl-tests options") {
    nccl_options o = read({"--nthreads=3", "--ngpus", "2", "--minbytes", "1M", "--maxbytes", "4M", "--stepbytes",
                           "1M", "--iters", "7", "--agg_iters", "3", "--warmup_iters", "2", "-c", "4", "-a", "3",
                           "-z", "1", "-T", "30", "-G", "5", "-C", "1", "-S", "1", "-J", "out.json", "-R", "1", "-N",
                           "2", "-u", "1", "-p", "1", "-y", "0", "-M", "1", "-I", "0", "-K", "0", "-x", "1", "-D",
                           "0", "-V", "16"});
    CHECK(o.nthreads == 3);
    CHECK(o.ngpus == 2);
    CHECK(o.timed_calls() == 21);
    CHECK(o.check == 4);
    CHECK(o.average == 3);
    CHECK(o.blocking == 1);
    CHECK(o.timeout_s == 30);
    CHECK(o.cudagraph == 5);
    CHECK(o.report_cputime == 1);
    CHECK(o.report_timestamps == 1);
    CHECK(o.output_file == "out.json");
    CHECK(o.local_register == 1);
    CHECK(o.run_cycles == 2);
    CHECK(o.unalign == 1);
    // -i without -f adds (nccl-tests' -f defaults to 1): 1M, 2M, 3M, 4M.
    CHECK(nccl_sizes(o) == std::vector<std::size_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20});
    CHECK(nccl_config_line(o).find("step: 1048576(bytes)") != std::string::npos);
    // -f 1 adds -i too; a factor > 1 given with -i multiplies, as in nccl-tests.
    CHECK(nccl_sizes(read({"-b", "1K", "-e", "3K", "-f", "1", "-i", "1K"})).size() == 3);
    CHECK(nccl_sizes(read({"-b", "1K", "-e", "4K", "-f", "2", "-i", "1K"})).size() == 3);
    // The note of an option a program does not honour goes to its header.
    o = read({"-G", "1"});
    REQUIRE(o.notes.size() == 1);
    CHECK(o.notes[0] == "-G 1: ignored: no CUDA graph on the threads backend");
}

TEST_CASE("flags that clash with chorus's old ones, or are bad, name the flag") {
    CHECK(error_of({"-a", "ring"}).find("-a:") == 0);                        // averaging now; the algorithm is --algo
    CHECK(error_of({"-a", "ring"}).find("--algo") != std::string::npos);
    CHECK(error_of({"-a", "4"}).find("-a:") == 0);
    CHECK(error_of({"-t", "0"}).find("-t:") == 0);
    CHECK(error_of({"-g", "x"}).find("-g:") == 0);
    CHECK(error_of({"-z", "4"}).find("-z:") == 0);
    CHECK(error_of({"-e", "12Q"}).find("-e:") == 0);
    CHECK(error_of({"-i", "0"}).find("-i:") == 0);
    CHECK(error_of({"-Q", "1"}).find("'-Q'") != std::string::npos);
    CHECK(error_of({"-b", "1M", "-e", "1K"}).find("-b/--minbytes") == 0);
    CHECK(error_of({"--ranks", "4"}).empty()); // chorus's long option stays
    CHECK(error_of({"--warmup", "3"}).empty()); // chorus's older spelling of -w
}
