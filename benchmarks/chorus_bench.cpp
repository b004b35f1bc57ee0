//! \file chorus_bench.cpp
//! The table every collectives user already reads (nccl-tests), for chorus on
//! the threads backend: size, count, type, redop, root, then time, algbw,
//! busbw and #wrong for out-of-place and in-place calls, one table per
//! collective, rows printed as they finish.
//!
//! Beside the nccl-tests columns it measures, in the same process and with as
//! many threads as ranks, the ceiling a shared-memory collective is judged
//! against: host copy bandwidth (STREAM counting, bytes read + bytes written
//! per second, all threads together, best of several repetitions and of
//! std::memcpy and a streaming-store copy). `eff` is the
//! least memory traffic the collective must cause, over its time, as a
//! fraction of that bandwidth (docs/performance.md): 1.0 is the physical limit.
//!
//! Method (what makes the numbers honest):
//!  - every rank's buffers are allocated once at the largest size, page
//!    aligned, and pre-faulted (every page touched) before anything is timed;
//!  - the command line and the sizes are nccl-tests' (cli.hpp: nccl_rows,
//!    nccl_count): ranks = -t x -g threads; the size of an all_gather row is
//!    its whole receive buffer, of a reduce_scatter row its whole send buffer;
//!  - per size and placement, each rank runs `warmup` calls, a barrier, then
//!    -n x -m back-to-back calls; time = the ranks' own times combined as
//!    nccl-tests' -a says (default: the mean), / calls; --span takes latest
//!    end - earliest start over ranks instead (this program's measure before
//!    issue 19), which stays right when ranks outnumber cores;
//!  - the check (-c N) is N separate calls on fresh, integer-valued inputs whose
//!    exact result does not depend on the reduction order, compared with a
//!    serial reference at tolerance 0; it also counts writes past the end of
//!    the output and changes to an out-of-place input as wrong;
//!  - in-place timing repeats the collective on its own output, so its input
//!    is a value the operator maps to itself (0 for sum, 1 otherwise): the
//!    data never overflows or turns denormal, and arithmetic on integers and
//!    normal floats takes the same time whatever the values;
//!  - the tables time one policy per sweep, each on freshly started rank
//!    threads; comparing policies across sweeps on a shared machine is
//!    unfair (placement and load change between them), so with automatic
//!    and a fixed policy in --algo the automatic-vs-best-fixed summary comes
//!    from an interleaved run instead (run_interleaved): per collective and
//!    placement one set of rank threads, and per size and repetition every
//!    policy timed in turn, the starting one rotated, fastest repetition kept.
//!
//! Policies are chorus::policy values built from the command line (the
//! values the policy types describe: chorus::policy_from_name, and
//! ring_policy in bench.hpp) and run through the same detail::*_run
//! functions the public calls run, so the rank program is instantiated
//! once per (element type, operator) whatever the policies.
//!
//! Sources: bench.hpp (shared definitions and the rank program), cli.hpp
//! (the command-line machinery every benchmark and tool shares), this file
//! (options, copy ceiling, driver), bench_sweep.cpp (the collective
//! instantiations, compiled in parallel).
//!
//! Exit status: 0 all checks passed, 1 a wrong value or a chorus error,
//! 2 bad command line.

#include "bench.hpp"

#include <barrier>
#include <cstdlib>
#include <exception>
#include <span>

namespace chorus_bench {
namespace {

using chorus_cli::parse_bytes;
using chorus_cli::parse_int;

//! nccl-tests' options (-t -g -b -e -i -f -n -m -w -c -a ... and --reps --collectives) with chorus_bench's
//! defaults, and what they do on the threads backend where that is not what they do in nccl-tests.
const chorus_cli::nccl_rows sweep_table(
    options(), chorus_cli::all_colls,
    {
        {"nthreads", "ranks = -t x -g rank threads; with neither -t nor -g, --ranks (default 2)"},
        {"ngpus", "every \"GPU\" is one more rank thread: ranks = -t x -g"},
        {"parallel_init", "no effect: run_threads sets up every rank's communicator at once (no per-rank init call)"},
        {"blocking", "a call returns complete on the threads backend: 0 and 2 time the same loop"},
        {"stream_null", "ignored: no streams on the threads backend"},
        {"cudagraph", "ignored: no CUDA graph on the threads backend"},
        {"report_cputime", "calls are synchronous on the threads backend: cputime = time (column 'cputime')"},
        {"local_register", "no-op: the threads backend reads and writes the callers' buffers directly, nothing "
                           "to register"},
        {"cta_policy", "ignored: an NCCL setting (no CTAs on the threads backend)"},
        {"device_implementation", "ignored: an NCCL setting"},
        {"device_cta_count", "ignored: an NCCL setting"},
        {"output_file", "the same file as --json"},
        {"memory", "the header's 'buffers' line is the memory report (buffers are allocated once)"},
        {"per_iter_timing", "ignored: no per-iteration timing (--reps R keeps the fastest of R loops)"},
        {"per_iter_skip", "ignored: no per-iteration timing"},
    });

//! What --algo's --help says after the policies.
constexpr std::string_view algo_note =
    "each measured in turn, other than ring with their default tuning and -d float only. With automatic and a "
    "fixed policy, each collective's tables are followed by an interleaved comparison (float sum; per size and "
    "repetition every listed policy but deterministic in turn on the same threads, fastest of --reps) and a "
    "summary of automatic against the best fixed policy";

//! The command line, and the --help text printed from it.
std::span<const chorus_cli::option> option_table() {
    static const std::string algo_help = chorus_cli::policies_help(nullptr, "ring", algo_note);
    static const std::vector<chorus_cli::option> table = sweep_table.then({
        {"op", 'o', "LIST", "sum,prod,min,max,avg or all (default sum; nccl-tests' mulsum: none in chorus)"},
        {"datatype", 'd', "LIST", "int8,uint8,int32,uint32,int64,uint64,float,double or all (default float; "
                                  "also float32, float64, int, char; nccl-tests' half, bfloat16, f8e4m3 and "
                                  "f8e5m2 have no host type in chorus)"},
        {"root", 'r', "N", "root of broadcast and reduce (default 0)"},
        {{}, 0, {}, "chorus only:"},
        {"ranks", 0, "N", "ranks = threads, instead of -t x -g (default 2)"},
        {"span", 0, {}, "time = latest end - earliest start over ranks per loop (chorus's measure before nccl-tests' -a; "
                        "not with -z 3)"},
        {"algo", 0, "LIST", algo_help},
        {"channels", 0, "K", "ring channels, 1..32 (default 1)"},
        {"chunk-bytes", 0, "SIZE", "ring chunk, at least 16 (default 256K)"},
        {"place", 0, "out|in|both", "out-of-place, in-place or both columns (default both)"},
        {"inplace", 0, {}, "same as --place in"},
        {"outofplace", 0, {}, "same as --place out"},
        {"isa", 0, "LEVEL", "at most this vector level in chorus's streaming loops and the copy ceiling: "
                            "generic, sse2, avx2 or avx512 (default: the widest the CPU has)"},
        {"json", 0, "FILE", "also write every row as JSON (the same as -J FILE)"},
        {"csv", 0, "FILE", "also write every row as CSV"},
        {"quick", 0, {}, "short sweep 8 B..4 MiB, -n 10 -w 2 (explicit flags still win)"},
        {"help", 'h', {}, "this text"},
    });
    return table;
}

void print_usage(std::FILE* to, const char* argv0) {
    chorus_cli::print_help(to, cat("usage: ", argv0, " [options]"), option_table());
}

//! The policy value of --algo name `name`: ring with --channels and
//! --chunk-bytes, the others with their default tuning (the values the
//! policy types describe: chorus::policy_from_name). False if none.
bool policy_for(std::string_view name, const options& o, chorus::policy& out) {
    if (name == "ring") {
        out = ring_policy(o.channels, o.chunk_bytes);
        return true;
    }
    return chorus::policy_from_name(name, out);
}

//! Types and operators nccl-tests names that chorus has no host form of: a
//! usage error naming them, rather than "unknown".
void refuse_nccl_only(std::string_view list, const std::string& flag, std::initializer_list<std::string_view> names,
                      std::string_view why) {
    for (const std::string_view item : chorus_cli::split_list(list))
        for (const std::string_view n : names)
            if (item == n) throw usage_error{cat(flag, ": ", item, " ", why)};
}

options parse_options(int argc, char** argv) {
    options o;
    o.command_line = chorus_cli::join_args({argv, std::size_t(argc)}, true);
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
    if (line.help) {
        print_usage(stdout, argv[0]);
        std::exit(0);
    }

    //! --quick sets defaults that explicit flags override, wherever they stand.
    for (const chorus_cli::given_option& g : line.given)
        if (g.is("quick")) {
            o.quick = true;
            o.min_bytes = 8;
            o.max_bytes = std::size_t(4) << 20;
            o.iters = 10;
            o.warmup = 2;
        }

    bool ranks_given = false;
    std::string json_flag; // the flag that named the JSON file
    for (const chorus_cli::given_option& g : line.given) {
        const std::string_view v = g.value;
        const std::string& flag = g.flag;
        if (g.is("output_file") || g.is("json")) {
            if (!json_flag.empty() && o.json_path != v)
                throw usage_error{cat(json_flag, " and ", flag, " name different JSON files")};
            json_flag = flag;
            o.json_path = std::string(v);
            continue;
        }
        if (sweep_table.read(g, o)) continue;
        if (g.is("op")) {
            refuse_nccl_only(v, flag, {"mulsum"}, "(a pre-multiplied sum) is not an operator of chorus");
            o.ops = chorus_cli::parse_names(v, flag, "operator", all_ops, op_name);
        } else if (g.is("datatype")) {
            refuse_nccl_only(v, flag, {"half", "bfloat16", "f8e4m3", "f8e5m2"},
                             "has no host type in chorus: the threads backend measures int8, uint8, int32, uint32, "
                             "int64, uint64, float and double (chorus_bench_gpu: float and bfloat16)");
            o.types = chorus_cli::parse_names(v, flag, "type", all_types, type_name,
                                              {{"float32", type_kind::float32}, {"float64", type_kind::float64},
                                               {"int", type_kind::int32}, {"char", type_kind::int8}});
        } else if (g.is("ranks")) {
            o.ranks = int(parse_int(v, flag, 1, 4096));
            ranks_given = true;
        } else if (g.is("span")) o.span_time = true;
        else if (g.is("root")) o.root = int(parse_int(v, flag, 0, 4095));
        else if (g.is("algo")) o.algos = chorus_cli::parse_policies(v, flag);
        else if (g.is("channels")) o.channels = int(parse_int(v, flag, 1, chorus::max_channels));
        else if (g.is("chunk-bytes")) o.chunk_bytes = parse_bytes(v, flag);
        else if (g.is("place")) {
            const std::size_t k = chorus_cli::parse_choice(v, flag, {"out", "in", "both"});
            o.out_of_place = k != 1;
            o.in_place = k != 0;
        } else if (g.is("inplace")) {
            o.out_of_place = false;
            o.in_place = true;
        } else if (g.is("outofplace")) {
            o.out_of_place = true;
            o.in_place = false;
        } else if (g.is("isa")) {
            const std::size_t k = chorus_cli::parse_choice(v, flag, {"generic", "sse2", "avx2", "avx512"});
            chorus::detail::host_isa_limit(static_cast<chorus::detail::host_isa>(k));
        } else if (g.is("csv")) o.csv_path = std::string(v);
        else if (!g.is("quick")) chorus_cli::unhandled(g);
    }

    // Ranks: nccl-tests' threads x GPUs per thread (each "GPU" a rank thread), or --ranks.
    if (ranks_given && (o.nthreads_given || o.ngpus_given))
        throw usage_error{"--ranks and -t/-g both give the rank count: use one"};
    if (o.nthreads_given || o.ngpus_given) {
        if (!o.nthreads_given) o.nthreads = 1; // nccl-tests' default
        if (std::int64_t(o.nthreads) * o.ngpus > 4096)
            throw usage_error{cat("-t ", std::to_string(o.nthreads), " x -g ", std::to_string(o.ngpus),
                                  ": more than 4096 ranks")};
        o.ranks = o.nthreads * o.ngpus;
    } else {
        o.nthreads = o.ranks; // the header's nThread: one rank per thread
        o.ngpus = 1;
    }

    if (o.min_bytes == 0) throw usage_error{"-b/--minbytes must be at least 1"};
    chorus_cli::nccl_rows::check_sweep(o);
    if (o.root >= o.ranks)
        throw usage_error{cat("-r/--root ", std::to_string(o.root), " is not a rank of ", std::to_string(o.ranks))};
    const bool only_ring = o.algos == std::vector<std::string>{"ring"};
    if (!only_ring && !(ring_choice{o.channels, o.chunk_bytes} == ring_default))
        throw usage_error{"--channels and --chunk-bytes tune ring only: use them with --algo ring"};
    // Any tuning runs (a policy is a value): only what ring<> itself refuses is refused.
    if (o.chunk_bytes < 16)
        throw usage_error{cat("--chunk-bytes must be at least 16, got ", std::to_string(o.chunk_bytes))};
    if (o.span_time && o.blocking == 3) throw usage_error{"--span times whole loops: not with -z 3"};
    return o;
}

//! Copy bandwidth with one thread per rank, each copying its own rank's A
//! to its own B, `bytes` per thread: GB/s (1e9), read + write, all threads
//! together (earliest start to latest end), best of `reps`.
double measure_copy(copy_kind kind, std::vector<rank_buffers>& bufs, std::size_t bytes, int reps) {
    const std::size_t nthreads = bufs.size();
    const std::size_t copies = copies_per_rep(bytes);
    std::vector<span_times> times(static_cast<std::size_t>(reps), span_times(nthreads));
    std::barrier<> sync(static_cast<std::ptrdiff_t>(nthreads));
    auto worker = [&](std::size_t t) {
        for (span_times& st : times) {
            sync.arrive_and_wait();
            st.start[t] = clock_type::now();
            copy_loop(kind, bufs[t].b.get(), bufs[t].a.get(), bytes, copies);
            st.end[t] = clock_type::now();
        }
    };
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < nthreads; ++t) threads.emplace_back(worker, t);
    worker(0);
    for (auto& th : threads) th.join();

    double best = 0;
    for (const span_times& st : times) best = std::max(best, copy_gbps(bytes, copies, nthreads, st.seconds()));
    return best;
}

//! The interleaved measurement behind the automatic-vs-best-fixed summary,
//! for collective c and placement `place` (0 out-of-place, 1 in-place),
//! float sum, in ONE run_threads: the same rank threads time every policy.
//! Per size and per repetition (of `reps`), every policy in turn: `warmup`
//! calls, a barrier, `iters` timed calls (time = latest end - earliest
//! start over ranks, / iters, as in bench_rows). The first policy of a
//! repetition moves on by one each repetition (carried over from size to
//! size), so none always goes first; per policy the fastest repetition is
//! kept. Then, with --check, one checked call per policy on fresh
//! verifiable data. Rank 0 hands each size's row to the reporter.
void run_interleaved(bench_state& st, coll_kind c, int place, const std::vector<std::string>& names,
                     const std::vector<chorus::policy>& policies, int reps) {
    const options& opt = st.opt;
    const bool inplace = place == 1;
    const std::size_t np = policies.size();
    chorus::run_threads(opt.ranks, [&](comm_type& comm) {
        if (opt.timeout_s > 0) comm.set_timeout(std::chrono::seconds(opt.timeout_s));
        const int n = comm.size();
        const int rank = comm.rank();
        const std::size_t me = std::size_t(rank);
        const int root = coll_uses_root(c) ? opt.root : -1;
        const data_pattern<float> pat = make_pattern<float>(op_kind::sum, n);
        float* const a = reinterpret_cast<float*>(st.bufs[me].a.get()) + opt.unalign;
        float* const b = reinterpret_cast<float*>(st.bufs[me].b.get()) + opt.unalign;
        std::size_t turn = 0;
        for (const std::size_t nominal : st.sizes) {
            const std::size_t count = chorus_cli::nccl_count(c, nominal, sizeof(float), n);
            if (count == 0) continue; // identical on every rank
            const std::size_t bytes = chorus_cli::nccl_size_bytes(c, count, sizeof(float), n);
            const operands<float> o = layout(c, inplace, rank, n, root, count, a, b);
            const std::span<const float> in(o.in_ptr, o.in_count);
            const std::span<float> out(o.out_ptr, o.out_count);

            interleaved_row row;
            row.coll = c;
            row.place = place;
            row.bytes = bytes;
            row.count = count;
            row.root = root;
            row.op = coll_uses_op(c) ? "sum" : "none";
            row.algos = names;
            row.time_us.assign(np, 0.0);
            row.wrong.assign(np, 0);
            row.reps = reps;

            // Timing inputs as in bench_rows: out-of-place inputs never change, in-place data is 0 (sum's fixed point).
            if (inplace) fill_value(o.region, o.region_count, pat.stable);
            else fill_from(o.in_ptr, o.in_count, pat.row(rank), 0);
            for (int rep = 0; rep < reps; ++rep, ++turn) {
                for (std::size_t k = 0; k < np; ++k) {
                    const std::size_t p = (turn + k) % np;
                    for (int i = 0; i < opt.warmup; ++i) call_float_sum(policies[p], c, comm, in, out, inplace, root);
                    timed_loop(comm, st, [&] { call_float_sum(policies[p], c, comm, in, out, inplace, root); });
                    if (rank == 0) {
                        const double us = row_seconds(st) * 1e6;
                        if (rep == 0 || us < row.time_us[p]) row.time_us[p] = us;
                    }
                    // Ranks write rank_times again only after the next barrier, which rank 0 enters after reading.
                }
            }

            for (int k = 0; k < opt.check; ++k) { // -c N: N calls per policy, each on fresh verifiable data
                for (std::size_t p = 0; p < np; ++p) {
                    chorus::barrier(comm); // nobody refills while a peer could still read its buffers
                    fill_for_check(c, rank, root, count, o, pat);
                    call_float_sum(policies[p], c, comm, in, out, inplace, root);
                    st.rank_wrong[me] = verify(c, inplace, rank, n, root, count, o, pat);
                    chorus::barrier(comm);
                    if (rank == 0)
                        for (const std::uint64_t w : st.rank_wrong) row.wrong[p] += w;
                }
            }
            if (rank == 0) st.rep.interleaved(row);
        }
    });
}

int run(const options& opt) {
    reporter rep(opt);
    const int n = opt.ranks;
    const std::vector<std::size_t> sizes = nccl_sizes(opt);

    // Buffers: allocated once at the largest size (+ guard, + -u elements of the largest type),
    // pre-faulted (one thread per rank touches every page), never reallocated.
    const std::size_t capacity =
        (opt.max_bytes + guard_elems * 8 + std::size_t(opt.unalign) * 8 + page_bytes - 1) / page_bytes * page_bytes;
    std::vector<rank_buffers> bufs(static_cast<std::size_t>(n));
    for (rank_buffers& rb : bufs) {
        rb.a = allocate(capacity);
        rb.b = allocate(capacity);
    }
    {
        std::vector<std::thread> touch;
        for (int r = 0; r < n; ++r)
            touch.emplace_back([&, r] {
                std::memset(bufs[std::size_t(r)].a.get(), 1, capacity);
                std::memset(bufs[std::size_t(r)].b.get(), 2, capacity);
            });
        for (auto& t : touch) t.join();
    }

    rep.preamble(sizes.back(), measure_copy(copy_kind::memcpy, bufs, sizes.back(), 5),
                 measure_copy(copy_kind::streaming, bufs, sizes.back(), 5));

    bench_state st(opt, bufs, sizes, rep);

    // The interleaved comparison: automatic and the fixed policies listed
    // (deterministic is measured in its tables but not compared).
    std::vector<std::string> cmp_names;
    std::vector<chorus::policy> cmp_policies;
    bool have_auto = false;
    for (const std::string& a : opt.algos) {
        if (a == "deterministic" || std::find(cmp_names.begin(), cmp_names.end(), a) != cmp_names.end()) continue;
        chorus::policy pol;
        if (!policy_for(a, opt, pol)) std::abort(); // parse_options() checked
        have_auto = have_auto || a == "automatic";
        cmp_names.push_back(a);
        cmp_policies.push_back(pol);
    }
    const bool interleave = have_auto && cmp_names.size() >= 2;
    const int cmp_reps = opt.reps_given ? opt.reps : 3;
    if (interleave) {
        std::string names;
        for (const std::string& a : cmp_names) names += (names.empty() ? "" : ",") + a;
        std::printf("# automatic vs best fixed: after each collective's tables, an interleaved run (float sum, the\n"
                    "#   same threads for every policy, fastest of %d repetitions) of\n"
                    "#   %s\n",
                    cmp_reps, names.c_str());
        std::fflush(stdout);
    }

    int missed = 0;
    for (coll_kind c : opt.colls) {
        for (const std::string& algo : opt.algos) {
            chorus::policy pol;
            if (!policy_for(algo, opt, pol)) std::abort(); // parse_options() checked
            rep.set_algo(algo);
            rep.table_header(c);
            for (type_kind t : opt.types) run_sweep(st, c, t, pol);
            rep.table_footer();
        }
        if (interleave) {
            for (int place = 0; place < 2; ++place) {
                if (place == 1 ? !opt.in_place : !opt.out_of_place) continue;
                if (place == 0 && !coll_has_out_of_place(c)) continue;
                run_interleaved(st, c, place, cmp_names, cmp_policies, cmp_reps);
            }
            missed += rep.selection_summary(c);
        }
    }
    if (missed != 0) std::printf("#\n# automatic missed the 10 %% bar in %d rows (reported, not an error)\n", missed);
    const std::uint64_t wrong = rep.wrong_total();
    std::printf("#\n# %s: %" PRIu64 " wrong values in total\n", wrong == 0 ? "OK" : "FAILED", wrong);
    return wrong == 0 ? 0 : 1;
}

} // namespace
} // namespace chorus_bench

int main(int argc, char** argv) {
    using namespace chorus_bench;
    options opt;
    try {
        opt = parse_options(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_bench: %s\n\n", e.what.c_str());
        print_usage(stderr, argv[0]);
        return 2;
    }
    try {
        return run(opt);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_bench: %s\n", e.what.c_str());
        return 2;
    } catch (const chorus::error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "chorus_bench: chorus error (%s): %s\n", chorus::to_string(e.code()), e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "chorus_bench: error: %s\n", e.what());
        return 1;
    }
}
