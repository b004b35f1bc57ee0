// chorus_bench_mpi: the MPI mode of chorus_bench, launched by mpiexec. For
// each size it times chorus's collectives on communicator<mpi> and, in the
// same run on the same buffers and sizes, MPI's own (MPI_Allreduce,
// MPI_Allgather, MPI_Reduce_scatter_block), and prints the nccl-tests
// columns for both and the ratio of chorus's busbw to MPI's.
//
//   mpiexec -n 4 chorus_bench_mpi -b 8 -e 64M -f 4 --algo hierarchical,ring
//
// Time per call is the slowest rank's mean over the timed iterations, after
// warm-up. Inputs are small integers in float (sums exact in any order),
// and every chorus and MPI result is checked (#wrong). glibc returns freed
// blocks above 128 KiB to the kernel, so an MPI that allocates scratch per
// call pays page faults on every call; the benchmark turns that off with
// mallopt (as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=... would) unless
// --keep-malloc is given, so the comparison does not flatter chorus.
//
// With `automatic` and at least one fixed policy in --algo, the table is
// followed, per collective, by an interleaved comparison: per size and per
// repetition (--reps, default 3 there), every listed policy and MPI's own
// collective are timed in turn in the same processes, the first one rotated
// each repetition, the fastest repetition kept per policy; the summary
// compares automatic with the best fixed policy (the bar: within 10 %) and
// with MPI. The table's rows time one policy after another, which on a
// shared machine is not a fair comparison between them.
//
// Policies are chorus::policy values (the ones the policy types describe),
// run through the detail::*_run functions the public calls run: one
// instantiation of each collective serves every policy.

#include <chorus/mpi.hpp>

#include "cli.hpp"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using chorus_cli::cat;
using chorus_cli::coll_kind;
using chorus_cli::coll_name;
using chorus_cli::to_collective;
using chorus_cli::usage_error;

//! The collectives measured here: the ones MPI has a direct counterpart of
//! with the same buffers (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block).
constexpr coll_kind mpi_colls[] = {coll_kind::all_reduce, coll_kind::all_gather, coll_kind::reduce_scatter};

using comm_type = chorus::communicator<chorus::mpi>;

//! One rank's buffers: plain memory, or (`shm` set: --alloc) buffers from
//! comm.alloc, which run zero-copy where every rank shares one node.
struct bufs {
    comm_type* shm = nullptr;
    std::span<float> in, out;
    std::vector<float> in_v, out_v;

    bufs() = default;
    explicit bufs(comm_type* c) : shm(c) {}
    bufs(const bufs&) = delete;
    bufs& operator=(const bufs&) = delete;
    ~bufs() {
        if (shm == nullptr) return;
        if (!in.empty()) shm->free(in);
        if (!out.empty()) shm->free(out);
    }
    void size(std::size_t in_n, std::size_t out_n) {
        if (shm == nullptr) {
            in_v.resize(in_n);
            out_v.resize(out_n);
            in = in_v;
            out = out_v;
            return;
        }
        if (in.size() != in_n) {
            if (!in.empty()) shm->free(in);
            in = shm->alloc<float>(in_n);
        }
        if (out.size() != out_n) {
            if (!out.empty()) shm->free(out);
            out = shm->alloc<float>(out_n);
        }
    }
};

//! The policies --algo knows (chorus_cli::parse_policies): chorus::policy_names
//! but deterministic, in that order for --algo all, each with its default
//! tuning (the values the policy types describe). All of them run every
//! collective measured here on communicator<mpi>, as schedules.
bool known_algo(std::string_view name) { return name != "deterministic"; }

//! The policy --algo calls `name` (parse() checked that it is known).
chorus::policy policy_named(std::string_view name) {
    chorus::policy p;
    chorus::policy_from_name(name, p);
    return p;
}

//! One float sum call of `coll` under policy `pol`, out of place on b: the
//! run function the public call runs (chorus::all_reduce<Algo>(comm, in,
//! out) is detail::all_reduce_run(comm, policy_of<Algo>, in, out, sum{}, false)).
void chorus_call(comm_type& comm, const chorus::policy& pol, coll_kind coll, bufs& b) {
    const std::span<const float> in(b.in);
    const std::span<float> out(b.out);
    switch (coll) {
    case coll_kind::all_reduce: chorus::detail::all_reduce_run(comm, pol, in, out, chorus::sum{}, false); break;
    case coll_kind::all_gather: chorus::detail::all_gather_run(comm, pol, in, out, false); break;
    case coll_kind::reduce_scatter:
        chorus::detail::reduce_scatter_run(comm, pol, in, out, chorus::sum{}, false);
        break;
    default: break; // not in mpi_colls
    }
}

struct options : chorus_cli::sweep_options {
    //! Every collective here; -f 4: fewer rows, each timing MPI and every policy.
    options() {
        colls.assign(std::begin(mpi_colls), std::end(mpi_colls));
        step_factor = 4;
    }
    std::vector<std::string> algos{"hierarchical", "ring"};
    bool keep_malloc = false;
    bool alloc = false;
};

//! What chorus_bench_mpi sweeps: -b -e -f -n -w --reps, and --collectives of mpi_colls.
const chorus_cli::sweep_rows sweep_table(options(), true, mpi_colls);

//! The command line; --help is printed from it.
std::span<const chorus_cli::option> option_table() {
    static const std::string algo_help = chorus_cli::policies_help(
        known_algo, "hierarchical,ring",
        "chorus policies, each a row per size; every one runs every collective here. With automatic and a fixed "
        "policy, each collective is followed by an interleaved comparison (every listed policy and MPI's own "
        "collective in turn per size and repetition, fastest of --reps) of automatic against the best fixed "
        "policy and MPI");
    static const std::vector<chorus_cli::option> table = sweep_table.then({
        {"algo", 0, "LIST", algo_help},
        {"keep-malloc", 0, {}, "leave glibc's malloc as it is (default: no mmap, no trim)"},
        {"alloc", 0, {}, "also time every policy on buffers from comm.alloc (rows NAME+alloc: zero-copy where every "
                         "rank shares one node); MPI keeps its plain buffers"},
        {"help", 'h', {}, "this text"},
    });
    return table;
}

void print_usage(std::FILE* to) {
    chorus_cli::print_help(to, "usage: mpiexec -n N chorus_bench_mpi [options]", option_table());
}

[[noreturn]] void usage(int rank, const std::string& why) {
    if (rank == 0) {
        std::fprintf(stderr, "chorus_bench_mpi: %s\n", why.c_str());
        print_usage(stderr);
    }
    MPI_Finalize();
    std::exit(2);
}

options parse(const chorus_cli::parsed_line& line) {
    options o;
    for (const chorus_cli::given_option& g : line.given) {
        if (sweep_table.read(g, o)) continue;
        if (g.is("algo")) o.algos = chorus_cli::parse_policies(g.value, g.flag, known_algo);
        else if (g.is("keep-malloc")) o.keep_malloc = true;
        else if (g.is("alloc")) o.alloc = true;
        else chorus_cli::unhandled(g);
    }
    if (o.min_bytes < 4) throw usage_error{"--minbytes must be at least 4 (one float)"};
    if (o.min_bytes > o.max_bytes) throw usage_error{"--minbytes is larger than --maxbytes"};
    return o;
}

float value(std::size_t i, int r) { return float(1 + (i + 3 * std::size_t(r)) % 7); }

struct timing {
    double us = 0;
    std::uint64_t wrong = 0;
};

// Per-call time of `iters` calls on this rank, after `warmup` calls and a barrier.
template <class F>
double local_loop_us(MPI_Comm comm, int warmup, int iters, F&& call) {
    for (int i = 0; i < warmup; ++i) call();
    MPI_Barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Mean time per call over `iters` (slowest rank), after `warmup` calls; the fastest of `reps` loops.
template <class F>
double time_calls(MPI_Comm comm, int warmup, int iters, int reps, F&& call) {
    double best = 0;
    for (int rep = 0; rep < reps; ++rep) {
        const double us = local_loop_us(comm, warmup, iters, call);
        double worst = 0;
        MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
        if (rep == 0 || worst < best) best = worst;
    }
    return best;
}

// Sizes the buffers for `count` (per rank for AllGather's input and
// ReduceScatter's output) and fills the input.
void prepare(coll_kind coll, std::size_t count, int n, int r, bufs& b) {
    const std::size_t in_n = coll == coll_kind::reduce_scatter ? count * std::size_t(n) : count;
    const std::size_t out_n = coll == coll_kind::all_gather ? count * std::size_t(n) : count;
    b.size(in_n, out_n);
    std::fill(b.out.begin(), b.out.end(), -1.0f);
    for (std::size_t i = 0; i < in_n; ++i) b.in[i] = value(i, r);
}

// Clears the output, runs one call of `coll` through `call`, and returns
// the wrong elements summed over ranks.
template <class F>
std::uint64_t check_call(MPI_Comm comm, coll_kind coll, std::size_t count, int n, int r, bufs& b, F&& call) {
    std::fill(b.out.begin(), b.out.end(), -1.0f);
    call();
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < b.out.size(); ++i) {
        float want = 0;
        if (coll == coll_kind::all_reduce) {
            for (int q = 0; q < n; ++q) want += value(i, q);
        } else if (coll == coll_kind::reduce_scatter) {
            for (int q = 0; q < n; ++q) want += value(std::size_t(r) * count + i, q);
        } else {
            want = value(i % count, int(i / count));
        }
        wrong += b.out[i] != want;
    }
    std::uint64_t total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_UINT64_T, MPI_SUM, comm);
    return total;
}

// Fills in, runs one call of `coll` through `call`, counts wrong elements
// (summed over ranks), then times it.
template <class F>
timing measure(chorus::communicator<chorus::mpi>& comm, const options& o, coll_kind coll, std::size_t count, bufs& b,
               F&& call) {
    const int n = comm.size(), r = comm.rank();
    prepare(coll, count, n, r, b);
    timing t;
    t.wrong = check_call(comm.mpi_comm(), coll, count, n, r, b, call);
    t.us = time_calls(comm.mpi_comm(), o.warmup, o.iters, o.reps, call);
    return t;
}

void mpi_call(MPI_Comm c, coll_kind coll, bufs& b) {
    switch (coll) {
    case coll_kind::all_reduce:
        MPI_Allreduce(b.in.data(), b.out.data(), static_cast<int>(b.out.size()), MPI_FLOAT, MPI_SUM, c);
        break;
    case coll_kind::all_gather:
        MPI_Allgather(b.in.data(), static_cast<int>(b.in.size()), MPI_FLOAT, b.out.data(), static_cast<int>(b.in.size()),
                      MPI_FLOAT, c);
        break;
    case coll_kind::reduce_scatter:
        MPI_Reduce_scatter_block(b.in.data(), b.out.data(), static_cast<int>(b.out.size()), MPI_FLOAT, MPI_SUM, c);
        break;
    default: break; // not in mpi_colls
    }
}

//! The node split communicator<mpi> hands automatic (schedule_args::node_size):
//! ranks per node when every node has the same size and holds consecutive
//! ranks, else 0. Collective.
int schedule_node_size(comm_type& comm) {
    const int n = comm.size();
    int mine = comm.node();
    std::vector<int> node_of(static_cast<std::size_t>(n));
    MPI_Allgather(&mine, 1, MPI_INT, node_of.data(), 1, MPI_INT, comm.mpi_comm());
    auto at = [&](int q) { return node_of[static_cast<std::size_t>(q)]; };
    int L = 0; // the consecutive ranks of rank 0's node
    while (L < n && at(L) == at(0)) ++L;
    if (n % L != 0) return 0;
    for (int q = 0; q < n; ++q) {
        if (at(q) != at(q / L * L)) return 0;                  // a block of L ranks is one node
        for (int s = 0; s < q / L * L; s += L)
            if (at(s) == at(q)) return 0;                      // and no node is two blocks
    }
    return L;
}

//! Whether the ranks of `comm` run on more than one host (shared-memory
//! domain). Collective.
bool several_hosts(MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared);
    int leader = rank;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);
    int highest = 0;
    MPI_Allreduce(&leader, &highest, 1, MPI_INT, MPI_MAX, comm);
    return highest != 0;
}

//! What automatic runs for this call on communicator<mpi>: the
//! schedule_args its run() passes automatic::choose, with the topology it
//! plans against (the CHORUS_MODEL file, else model::mpi_topology).
const char* automatic_choice(coll_kind coll, int n, std::size_t count, int node_size,
                             const chorus::model::topology& topo) {
    chorus::schedule_args a{};
    a.coll = to_collective(coll);
    a.nranks = n;
    a.count = count;
    a.elem_bytes = sizeof(float);
    a.node_size = node_size;
    a.topo = &topo;
    return chorus::model::algorithm_name(chorus::automatic::choose(a));
}

//! One size of the interleaved comparison, on every rank: `reps`
//! repetitions, each timing every entry of `calls` in turn (the first
//! rotated by one per repetition, `turn` carried over between sizes);
//! per entry the slowest rank's mean per call, the fastest repetition.
//! Then one checked call per entry. Returns (time_us, wrong) per entry.
template <class Call>
std::vector<timing> interleaved_size(comm_type& comm, const options& o, coll_kind coll, std::size_t count,
                                     std::size_t np, Call&& call, int reps, std::size_t& turn, bufs& b) {
    const int n = comm.size(), r = comm.rank();
    prepare(coll, count, n, r, b);
    std::vector<double> local(static_cast<std::size_t>(reps) * np, 0.0);
    for (int rep = 0; rep < reps; ++rep, ++turn)
        for (std::size_t k = 0; k < np; ++k) {
            const std::size_t p = (turn + k) % np;
            local[static_cast<std::size_t>(rep) * np + p] =
                local_loop_us(comm.mpi_comm(), o.warmup, o.iters, [&] { call(p); });
        }
    std::vector<double> worst(local.size(), 0.0);
    MPI_Allreduce(local.data(), worst.data(), static_cast<int>(local.size()), MPI_DOUBLE, MPI_MAX, comm.mpi_comm());
    std::vector<timing> out(np);
    for (std::size_t p = 0; p < np; ++p) {
        for (int rep = 0; rep < reps; ++rep) {
            const double us = worst[static_cast<std::size_t>(rep) * np + p];
            if (rep == 0 || us < out[p].us) out[p].us = us;
        }
        out[p].wrong = check_call(comm.mpi_comm(), coll, count, n, r, b, [&] { call(p); });
    }
    return out;
}

} // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    options o;
    try {
        const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
        if (line.help) {
            if (rank == 0) print_usage(stdout);
            MPI_Finalize();
            return 0;
        }
        o = parse(line);
    } catch (const usage_error& e) {
        usage(rank, e.what);
    }
    if (!o.keep_malloc) {
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }

    // The interleaved comparison: the listed policies (once each) and MPI's own collective.
    std::vector<std::string> cmp_names;
    for (const std::string& a : o.algos)
        if (std::find(cmp_names.begin(), cmp_names.end(), a) == cmp_names.end()) cmp_names.push_back(a);
    const bool interleave =
        std::find(cmp_names.begin(), cmp_names.end(), "automatic") != cmp_names.end() && cmp_names.size() >= 2;
    const int cmp_reps = o.reps_given ? o.reps : 3;

    std::uint64_t total_wrong = 0;
    int missed = 0;
    {
        comm_type comm(MPI_COMM_WORLD);
        MPI_Comm mpi_comm = MPI_COMM_NULL;
        MPI_Comm_dup(MPI_COMM_WORLD, &mpi_comm);
        const int node_size = schedule_node_size(comm);
        const bool hosts = several_hosts(MPI_COMM_WORLD);
        const chorus::model::topology topo = chorus::model::model_file_given()
                                                 ? chorus::model::current()
                                                 : chorus::model::mpi_topology(node_size, hosts);
        if (rank == 0) {
            std::printf("# chorus_bench_mpi: %d ranks on %d node(s) (%d on rank 0's), float sum, %d iters after %d warm-up, "
                        "fastest of %d, malloc %s\n",
                        n, comm.nodes(), comm.local_size(), o.iters, o.warmup, o.reps,
                        o.keep_malloc ? "as is" : "without mmap/trim (MALLOC_MMAP_MAX_=0 equivalent)");
            std::printf("# size: bytes per rank (AllReduce: the buffer; AllGather: the input; ReduceScatter: the output)\n");
            std::printf("# busbw = algbw * 2(n-1)/n (AllReduce), (n-1)/n (AllGather, ReduceScatter); algbw = size/time\n");
            std::printf("# ratio = chorus busbw / MPI busbw, same run, same buffers; each row times its policy after MPI\n");
            std::printf("%-15s %10s %10s %-18s %10s %9s %9s %6s %10s %9s %6s %7s\n", "collective", "size", "count", "algo",
                        "time(us)", "algbw", "busbw", "#wrong", "mpi(us)", "mpi_bus", "#wrong", "ratio");
        }
        bufs b;
        bufs shm(&comm); // --alloc
        for (const coll_kind coll : o.colls) {
            const char* cname = coll_name(coll);
            for (const std::size_t bytes : chorus_cli::sweep_sizes(o)) {
                const std::size_t count = bytes / sizeof(float);
                const timing m = measure(comm, o, coll, count, b, [&] { mpi_call(mpi_comm, coll, b); });
                for (std::size_t row = 0; row < o.algos.size() * (o.alloc ? 2 : 1); ++row) {
                    const bool on_shm = o.alloc && row % 2 == 1;
                    const std::string algo = o.algos[o.alloc ? row / 2 : row] + (on_shm ? "+alloc" : "");
                    const chorus::policy pol = policy_named(o.algos[o.alloc ? row / 2 : row]);
                    bufs& x = on_shm ? shm : b;
                    const timing t = measure(comm, o, coll, count, x, [&] { chorus_call(comm, pol, coll, x); });
                    total_wrong += t.wrong + m.wrong;
                    if (rank == 0) {
                        const double algbw = double(count * sizeof(float)) / t.us / 1e3;
                        const double mpi_algbw = double(count * sizeof(float)) / m.us / 1e3;
                        const double f = chorus_cli::bus_factor(coll, n);
                        std::printf("%-15s %10zu %10zu %-18s %10.2f %9.2f %9.2f %6llu %10.2f %9.2f %6llu %7.2f\n",
                                    cname, count * sizeof(float), count, algo.c_str(), t.us, algbw, algbw * f,
                                    static_cast<unsigned long long>(t.wrong), m.us, mpi_algbw * f,
                                    static_cast<unsigned long long>(m.wrong), m.us / t.us);
                        std::fflush(stdout);
                    }
                }
            }
        }

        if (interleave) {
            // The entries timed in turn: the policies, then MPI's collective (last in the list, not last in time).
            std::vector<chorus::policy> pols;
            for (const std::string& a : cmp_names) pols.push_back(policy_named(a));
            const std::size_t np = pols.size() + 1;
            std::string names;
            for (const std::string& a : cmp_names) names += a + ",";
            names += "MPI";
            std::size_t turn = 0;
            for (const coll_kind coll : o.colls) {
                if (rank == 0) {
                    std::printf("#\n# %s: automatic against the best fixed policy and MPI, INTERLEAVED (not the table "
                                "above):\n"
                                "#   per size and repetition every policy and MPI's own collective in turn in the same %d\n"
                                "#   processes, the first one rotated each repetition; %d warm-up + %d timed calls each per\n"
                                "#   repetition, time = the slowest rank's mean, fastest of %d repetitions; float, sum.\n"
                                "#   In turn: %s.\n"
                                "#   auto/mpi = automatic's time / MPI's (< 1: automatic faster). auto chose: what "
                                "automatic ran.\n",
                                coll_name(coll), n, o.warmup, o.iters, cmp_reps, names.c_str());
                    std::printf("#%11s %10s %19s %10s %10s %9s %9s %6s %18s %10s %8s %7s\n", "size(B)", "count",
                                "best fixed", "best(us)", "auto(us)", "auto/best", "ring/auto", "<=1.10", "auto chose",
                                "mpi(us)", "auto/mpi", "#wrong");
                }
                int coll_missed = 0;
                std::uint64_t coll_wrong = 0;
                for (const std::size_t bytes : chorus_cli::sweep_sizes(o)) {
                    const std::size_t count = bytes / sizeof(float);
                    const std::vector<timing> t = interleaved_size(
                        comm, o, coll, count, np,
                        [&](std::size_t p) {
                            p < pols.size() ? chorus_call(comm, pols[p], coll, b) : mpi_call(mpi_comm, coll, b);
                        },
                        cmp_reps, turn, b);
                    std::uint64_t wrong = 0;
                    for (const timing& x : t) wrong += x.wrong;
                    coll_wrong += wrong;
                    std::size_t best = t.size(), autom = t.size(), ring = t.size();
                    for (std::size_t i = 0; i < cmp_names.size(); ++i) {
                        if (cmp_names[i] == "automatic") {
                            autom = i;
                            continue;
                        }
                        if (cmp_names[i] == "ring") ring = i;
                        if (best == t.size() || t[i].us < t[best].us) best = i;
                    }
                    const double ratio = t[autom].us / t[best].us;
                    const bool ok = ratio <= 1.10;
                    coll_missed += ok ? 0 : 1;
                    if (rank == 0) {
                        char ring_ratio[32] = "-";
                        if (ring < t.size()) std::snprintf(ring_ratio, sizeof ring_ratio, "%.2f", t[ring].us / t[autom].us);
                        const double mpi_us = t.back().us;
                        std::printf(" %11zu %10zu %19s %10.2f %10.2f %9.3f %9s %6s %18s %10.2f %8.3f %7" PRIu64 "\n",
                                    count * sizeof(float), count, cmp_names[best].c_str(), t[best].us, t[autom].us, ratio,
                                    ring_ratio, ok ? "yes" : "NO", automatic_choice(coll, n, count, node_size, topo), mpi_us,
                                    t[autom].us / mpi_us, wrong);
                        std::fflush(stdout);
                    }
                }
                total_wrong += coll_wrong;
                missed += coll_missed;
                if (rank == 0) {
                    std::printf("# automatic within 10 %% of the best fixed policy (interleaved): %s; wrong values: "
                                "%" PRIu64 " %s\n",
                                coll_missed == 0 ? "every row" : (std::to_string(coll_missed) + " rows missed").c_str(),
                                coll_wrong, coll_wrong == 0 ? "OK" : "FAILED");
                    std::fflush(stdout);
                }
            }
        }
        MPI_Comm_free(&mpi_comm);
    }
    if (rank == 0) {
        if (missed != 0) std::printf("# automatic missed the 10 %% bar in %d rows (reported, not an error)\n", missed);
        std::printf("# %s\n", total_wrong ? "FAILED: wrong results" : "all results correct");
    }
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
