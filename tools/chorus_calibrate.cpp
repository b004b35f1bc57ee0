//! \file chorus_calibrate.cpp
//! Fits the cost model (include/chorus/model/cost.hpp) to this machine on
//! the threads backend, and checks it.
//!
//! Calibration (the default): with -t ranks (threads), times
//!   ring<> AllReduce, AllGather and ReduceScatter over a size sweep, and
//!   direct<> AllReduce at 8 B .. 1 KiB (one dependent step: latency alone),
//! each point the minimum (or --stat median) over --reps repetitions of a
//! timed loop (time = latest end - earliest start over ranks, / iterations,
//! as chorus_bench does). Then a least-squares fit, weighted by 1/measured
//! (relative error, so 8 B and 64 MiB count alike), of
//!     time = steps * alpha + moved / bandwidth + reduced / reduce_Bps
//! where steps, moved and reduced are the model's own terms for each call
//! (model::decompose): AllGather only copies, so it pins the bandwidth; the
//! reductions pin reduce_Bps; the small sizes pin alpha. Non-negative
//! (every subset of the three unknowns is tried, the best feasible one
//! kept). Writes the topology file (-o FILE, default stdout) with a comment
//! header: ranks, date, command, the fit's residuals. The inter-node link
//! is not measured (one host): the file keeps the defaults for it.
//!
//! --validate [--model FILE]: times every policy below (--algos: some) for
//! AllReduce over the sweep (default 8 B .. 64 MiB), the policies
//! interleaved size by size so that they see the same machine, and prints
//! size, algorithm, measured, predicted, predicted/measured and whether
//! |ratio - 1| <= 25 % (judged for sizes >= 64 KiB only), then per size
//! which algorithm the model picks and which was fastest. --csv FILE
//! writes the same rows.
//!
//! Exit status: 0 fine (validation: whatever the ratios), 1 a chorus error,
//! 2 bad command line.

#include <chorus/chorus.hpp>
#include <chorus/model/cost.hpp>
#include <chorus/model/fit.hpp>

#include "cli.hpp" // the command line and the collectives by name, shared with the benchmarks
#if defined(CHORUS_CALIBRATE_MPI) // chorus_calibrate_mpi: the same tool on communicator<mpi>
#  include <chorus/mpi.hpp>
#  include <unistd.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using chorus::collective;
using chorus_cli::all_colls;
using chorus_cli::call_bytes;
using chorus_cli::call_count;
using chorus_cli::cat;
using chorus_cli::coll_kind;
using chorus_cli::coll_name;
using chorus_cli::to_collective;
using chorus_cli::usage_error;
using chorus_cli::utc_now;
namespace model = chorus::model;
#if defined(CHORUS_CALIBRATE_MPI)
using comm_type = chorus::communicator<chorus::mpi>;
constexpr bool on_mpi = true;
constexpr const char* backend_name = "MPI backend";
#else
using comm_type = chorus::communicator<chorus::threads>;
constexpr bool on_mpi = false;
constexpr const char* backend_name = "threads backend";
#endif
int g_rank = 0; //!< this process's rank (MPI); 0 on the threads backend, where rank 0 reports
using clock_type = std::chrono::steady_clock;

// --- the policies --validate measures: the one list to extend ---------------------
// Policy values (the ones the policy types describe), timed through the
// detail::*_run functions the public calls run, so one instantiation of
// each collective serves them all. `automatic` is predicted as the
// algorithm it chooses for the call.
struct named_policy {
    const char* name;
    chorus::policy pol;
};
//! Every policy chorus::policy_names spells but deterministic (which runs
//! direct or two_shot, already here), each with its default tuning: the
//! names --algos takes (validated()).
constexpr auto validated_policies = [] {
    std::array<named_policy, std::size(chorus::policy_names) - 1> out{};
    std::size_t i = 0;
    for (const char* name : chorus::policy_names)
        if (std::string_view(name) != "deterministic") {
            out[i].name = name;
            chorus::policy_from_name(name, out[i].pol);
            ++i;
        }
    return out;
}();

//! The policy with its default tuning that runs model algorithm `a` (ring<>, direct<>, ...).
constexpr chorus::policy default_policy(model::algorithm a) { return chorus::policy::fixed(a); }
// -------------------------------------------------------------------------------------

//! The policies --validate measures by name: validated_policies.
bool validated(std::string_view name) { return name != "deterministic"; }

//! The command line, and the --help text printed from it.
std::span<const chorus_cli::option> option_table() {
    static const std::string algos_help = chorus_cli::policies_help(validated, "all", "--validate only these");
    static const std::string colls_help =
        cat(chorus_cli::names_of(all_colls, coll_name), " or all (default all_reduce); --validate these");
    static const chorus_cli::option table[] = {
        {"ranks", 't', "N[,M...]", "ranks = threads (default 2); calibration with a list fits the\n"
                                   "first-order terms at the first and measures corrections at each"},
        {"output", 'o', "FILE", "write the topology file here (default stdout)"},
        {"minbytes", 'b', "SIZE", "smallest size, bytes; K M G suffixes (default 8); the latency\n"
                                  "series (direct<> AllReduce, 8 B .. 1 KiB) is always measured"},
        {"maxbytes", 'e', "SIZE", "largest size (default 64M)"},
        {"stepfactor", 'f', "N", "size factor between rows (default 2)"},
        {"reps", 'r', "N", "repetitions of each timed loop (default 7)"},
        {"stat", 0, "min|median", "statistic over the repetitions (default min: best-of, since other\n"
                                  "processes only ever add time)"},
        {"budget", 0, "SIZE", "bytes per timed loop: iterations = budget / size, 3..200 (default 64M)"},
        {"validate", 0, {}, "compare every policy's AllReduce with the model instead"},
        {"model", 0, "FILE", "the model --validate checks (default: CHORUS_MODEL or the built-in)"},
        {"algos", 0, "LIST", algos_help},
        {"collectives", 0, "LIST", colls_help},
        {"no-corrections", 0, {}, "write the first-order fit alone, without the per-algorithm\n"
                                  "corrections (measured / predicted at 8 B * 4^i)"},
        {"merge", 0, "FILE", "chorus_calibrate_mpi: keep this file's corrections for the rank counts\n"
                             "this run does not measure"},
        {"csv", 0, "FILE", "also write the rows (fit samples, or the validation) as CSV"},
        {"help", 'h', {}, "this text"},
    };
    return table;
}

struct options {
    int ranks = 2;
    std::vector<int> rank_list{2}; // -t 2,4: the fit at the first, corrections at each
    std::string output;
    double min_bytes = 8, max_bytes = 64.0 * 1024 * 1024;
    double factor = 2;
    int reps = 7;
    bool use_min = true;
    double budget = 64.0 * 1024 * 1024;
    bool validate = false;
    std::string model_path;
    std::string csv_path;
    std::vector<std::string> algos; // --validate: these policies, empty: all
    bool corrections = true; // --no-corrections: the first-order fit alone
    std::vector<coll_kind> colls{coll_kind::all_reduce}; // --validate: these collectives, in all_colls order
    std::string merge_path;                               // MPI: keep this file's corrections for other rank counts
    bool ranks_given = false;
    std::string command;
};

std::string base_name(std::string_view p) {
    const std::size_t slash = p.find_last_of('/');
    return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

options parse_options(int argc, char** argv) {
    using chorus_cli::parse_bytes;
    using chorus_cli::parse_int;
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
    if (line.help) {
        chorus_cli::print_help(stdout, cat("usage: ", argv[0], " [options]"), option_table());
        std::exit(0);
    }
    options o;
    o.command = base_name(argv[0]);
    if (argc > 1) o.command.append(cat(" ", chorus_cli::join_args({argv + 1, std::size_t(argc - 1)})));
    for (const chorus_cli::given_option& g : line.given) {
        const std::string_view v = g.value;
        const std::string& flag = g.flag;
        if (g.is("ranks")) {
            o.rank_list.clear();
            for (const std::string_view r : chorus_cli::split_list(v))
                o.rank_list.push_back(int(parse_int(r, flag, 1, 64)));
            o.ranks = o.rank_list.front();
            o.ranks_given = true;
        } else if (g.is("output")) o.output = v;
        else if (g.is("minbytes")) o.min_bytes = double(parse_bytes(v, flag));
        else if (g.is("maxbytes")) o.max_bytes = double(parse_bytes(v, flag));
        else if (g.is("stepfactor")) o.factor = double(parse_int(v, flag, 2, 1 << 20));
        else if (g.is("reps")) o.reps = int(parse_int(v, flag, 1, 1000));
        else if (g.is("stat")) o.use_min = chorus_cli::parse_choice(v, flag, {"min", "median"}) == 0;
        else if (g.is("budget")) o.budget = double(parse_bytes(v, flag));
        else if (g.is("validate")) o.validate = true;
        else if (g.is("model")) o.model_path = v;
        else if (g.is("algos")) o.algos = chorus_cli::parse_policies(v, flag, validated);
        else if (g.is("collectives")) {
            // The tables list the collectives in all_colls order, each once, whatever the order given.
            const std::vector<coll_kind> given = chorus_cli::parse_collectives(v, flag);
            o.colls.clear();
            for (const coll_kind k : all_colls)
                if (std::find(given.begin(), given.end(), k) != given.end()) o.colls.push_back(k);
        } else if (g.is("no-corrections")) o.corrections = false;
        else if (g.is("merge")) o.merge_path = v;
        else if (g.is("csv")) o.csv_path = v;
        else chorus_cli::unhandled(g);
    }
    if (o.min_bytes < 4) throw usage_error{"--minbytes must be at least 4 (one float)"};
    if (o.min_bytes > o.max_bytes) throw usage_error{"--minbytes is larger than --maxbytes"};
    if (o.max_bytes > 4.0 * 1024 * 1024 * 1024) throw usage_error{"--maxbytes: at most 4G"};
    if (o.budget < 1) throw usage_error{"--budget must be at least 1 byte"};
    if (o.validate && !o.output.empty()) throw usage_error{"-o writes a calibration; --validate writes --csv"};
    if (!o.validate && !o.model_path.empty()) throw usage_error{"--model is for --validate"};
    if (!o.validate && !o.algos.empty()) throw usage_error{"--algos is for --validate"};
    if (!o.validate && o.colls != std::vector<coll_kind>{coll_kind::all_reduce})
        throw usage_error{"--collectives is for --validate"};
    if (o.validate && !o.corrections) throw usage_error{"--no-corrections is for calibration"};
    if (o.validate && o.rank_list.size() > 1) throw usage_error{"--validate takes one rank count (-t N)"};
    for (int r : o.rank_list)
        if (std::count(o.rank_list.begin(), o.rank_list.end(), r) > 1) throw usage_error{"-t: a rank count twice"};
    return o;
}

std::vector<double> sweep(double lo, double hi, double f) {
    std::vector<double> s;
    for (double b = lo; b <= hi * (1 + 1e-12); b *= f) s.push_back(b);
    return s;
}

double statistic(std::vector<double> v, bool use_min) {
    std::sort(v.begin(), v.end());
    if (use_min) return v.front();
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

//! What one rank needs to time calls: its buffers (at the largest size,
//! touched, so every page is faulted in before timing) and the shared
//! per-rank start/end times.
struct timer {
    const options& o;
    comm_type& comm;
    std::vector<clock_type::time_point>& start;
    std::vector<clock_type::time_point>& end;
    std::vector<float> in, out;

    timer(const options& opt, comm_type& c, std::vector<clock_type::time_point>& s,
          std::vector<clock_type::time_point>& e, double biggest)
        : o(opt), comm(c), start(s), end(e), in(std::size_t(biggest) / sizeof(float) + 1, 0.5f),
          out(std::size_t(biggest) / sizeof(float) + 1, 0.0f) {}

    //! Seconds per call of collective `k` of per-rank count `count` under
    //! policy `pol` (rank 0; the others return 0): the statistic over `reps`
    //! timed loops, each timed like chorus_bench (latest end - earliest
    //! start over ranks, / iterations). Each call is what the public call
    //! with the policy type runs (chorus::all_reduce<Algo>(comm, in, out) is
    //! detail::all_reduce_run(comm, policy_of<Algo>, in, out, sum{}, false)).
    double time(const chorus::policy& pol, coll_kind k, std::size_t count) {
        namespace d = chorus::detail;
        const int n = comm.size();
        const int rank = comm.rank();
        const double bytes = call_bytes(k, count, n);
        const auto call = [&] {
            switch (k) {
            case coll_kind::all_reduce:
                d::all_reduce_run(comm, pol, std::span<const float>(in.data(), count),
                                  std::span<float>(out.data(), count), chorus::sum{}, false);
                break;
            case coll_kind::all_gather:
                d::all_gather_run(comm, pol, std::span<const float>(in.data(), count),
                                  std::span<float>(out.data(), count * std::size_t(n)), false);
                break;
            case coll_kind::reduce_scatter:
                d::reduce_scatter_run(comm, pol, std::span<const float>(in.data(), count * std::size_t(n)),
                                      std::span<float>(out.data(), count), chorus::sum{}, false);
                break;
            case coll_kind::broadcast:
                d::broadcast_run(comm, pol, std::span<float>(out.data(), count), 0, false);
                break;
            case coll_kind::reduce:
                d::reduce_run(comm, pol, std::span<const float>(in.data(), count),
                              std::span<float>(out.data(), count), chorus::sum{}, 0, false);
                break;
            }
        };
        // Short loops, several of them: on a shared machine some catch a quiet moment.
        const int iters = int(std::clamp(o.budget / bytes, 3.0, 200.0));
        const int warmup = std::max(2, iters / 10);
        for (int w = 0; w < warmup; ++w) call();
        std::vector<double> reps;
        for (int r = 0; r < o.reps; ++r) {
            chorus::barrier(comm);
#if defined(CHORUS_CALIBRATE_MPI)
            // Processes: the slowest rank's time (clocks of several hosts are not comparable).
            const auto t0 = clock_type::now();
            for (int it = 0; it < iters; ++it) call();
            double mine = std::chrono::duration<double>(clock_type::now() - t0).count(), worst = 0;
            MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm.mpi_comm());
            if (rank == 0) reps.push_back(worst / iters);
#else
            start[std::size_t(rank)] = clock_type::now();
            for (int it = 0; it < iters; ++it) call();
            end[std::size_t(rank)] = clock_type::now();
            chorus::barrier(comm);
            if (rank == 0) {
                const auto t0 = *std::min_element(start.begin(), start.end());
                const auto t1 = *std::max_element(end.begin(), end.end());
                reps.push_back(std::chrono::duration<double>(t1 - t0).count() / iters);
            }
            // Rank 0 reads start/end before it enters the next barrier; nobody writes them before that.
#endif
        }
        return rank == 0 ? statistic(reps, o.use_min) : 0.0;
    }
};

#if defined(CHORUS_CALIBRATE_MPI)
//! The processes' communicator, made once.
comm_type& world() {
    static comm_type c(MPI_COMM_WORLD);
    return c;
}
//! Runs `body(timer&)` on this process (the job's `n` ranks) with buffers for calls up to `biggest` bytes.
template <class F>
void with_ranks(const options& o, int n, double biggest, F&& body) {
    comm_type& comm = world();
    if (n != comm.size())
        throw usage_error{"-t " + std::to_string(n) + " but the job has " + std::to_string(comm.size()) +
                          " processes (mpiexec -n)"};
    std::vector<clock_type::time_point> unused(1);
    timer t(o, comm, unused, unused, biggest);
    body(t);
}
#else
//! Runs `body(timer&)` on `n` fresh ranks with buffers for calls up to `biggest` bytes.
template <class F>
void with_ranks(const options& o, int n, double biggest, F&& body) {
    std::vector<clock_type::time_point> start(static_cast<std::size_t>(n)), end(static_cast<std::size_t>(n));
    chorus::run_threads(n, [&](comm_type& comm) {
        timer t(o, comm, start, end, biggest);
        body(t);
    });
}
#endif

//! Seconds per call of the policy that runs model algorithm `a` (rank 0; the others 0).
double time_algo(timer& tm, model::algorithm a, coll_kind k, std::size_t count) {
    return tm.time(default_policy(a), k, count);
}

//! The (collective, algorithm) pairs calibration corrects: every distinct
//! schedule automatic may pick on one node (model::runs_as: the other
//! policies run one of these for that collective).
struct series_spec {
    coll_kind kind;
    model::algorithm algo;
};
constexpr series_spec correction_plan[] = {
    {coll_kind::all_reduce, model::algorithm::ring},
    {coll_kind::all_reduce, model::algorithm::direct},
    {coll_kind::all_reduce, model::algorithm::tree},
    {coll_kind::all_reduce, model::algorithm::recursive_doubling},
    {coll_kind::all_reduce, model::algorithm::rabenseifner},
    {coll_kind::all_reduce, model::algorithm::two_shot},
    {coll_kind::all_reduce, model::algorithm::hierarchical},
    {coll_kind::all_gather, model::algorithm::ring},
    {coll_kind::all_gather, model::algorithm::direct},
    {coll_kind::reduce_scatter, model::algorithm::ring},
    {coll_kind::reduce_scatter, model::algorithm::direct},
    {coll_kind::broadcast, model::algorithm::ring},
    {coll_kind::broadcast, model::algorithm::direct},
    {coll_kind::broadcast, model::algorithm::tree},
    {coll_kind::reduce, model::algorithm::ring},
    {coll_kind::reduce, model::algorithm::direct},
    {coll_kind::reduce, model::algorithm::tree},
};

//! Times collective `k` under policy `pol` at every size: seconds per call;
//! sizes too small for one float per rank come back as 0.
std::vector<double> time_sweep(const chorus::policy& pol, const options& o, int n, coll_kind k,
                               const std::vector<double>& sizes) {
    std::vector<double> result(sizes.size(), 0.0);
    with_ranks(o, n, *std::max_element(sizes.begin(), sizes.end()), [&](timer& t) {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const std::size_t count = call_count(k, sizes[i], n);
            if (count == 0) continue; // the same on every rank
            const double s = t.time(pol, k, count);
            if (t.comm.rank() == 0) result[i] = s;
        }
    });
    return result;
}

// --- least squares ----------------------------------------------------------------

struct sample {
    coll_kind kind;
    model::algorithm algo;
    double bytes;
    double seconds;
    model::terms x; // the model's terms for this call
};

//! Solves the k x k system A z = b (k <= 3) by Gaussian elimination with
//! partial pivoting; false if singular.
bool solve(std::array<std::array<double, 3>, 3> A, std::array<double, 3> b, int k, std::array<double, 3>& z) {
    for (int c = 0; c < k; ++c) {
        int piv = c;
        for (int r = c + 1; r < k; ++r)
            if (std::fabs(A[std::size_t(r)][std::size_t(c)]) > std::fabs(A[std::size_t(piv)][std::size_t(c)])) piv = r;
        if (std::fabs(A[std::size_t(piv)][std::size_t(c)]) < 1e-300) return false;
        std::swap(A[std::size_t(c)], A[std::size_t(piv)]);
        std::swap(b[std::size_t(c)], b[std::size_t(piv)]);
        for (int r = c + 1; r < k; ++r) {
            const double f = A[std::size_t(r)][std::size_t(c)] / A[std::size_t(c)][std::size_t(c)];
            for (int j = c; j < k; ++j) A[std::size_t(r)][std::size_t(j)] -= f * A[std::size_t(c)][std::size_t(j)];
            b[std::size_t(r)] -= f * b[std::size_t(c)];
        }
    }
    for (int r = k - 1; r >= 0; --r) {
        double s = b[std::size_t(r)];
        for (int j = r + 1; j < k; ++j) s -= A[std::size_t(r)][std::size_t(j)] * z[std::size_t(j)];
        z[std::size_t(r)] = s / A[std::size_t(r)][std::size_t(r)];
    }
    return true;
}

// The threads backend's ranks share one memory: local bytes cost what moved
// bytes cost (topology::local_Bps = 0), so they share one unknown.
std::array<double, 3> features(const sample& s) { return {s.x.steps, s.x.moved + s.x.local, s.x.reduced}; }

//! Relative residuals of coefficients c = (alpha, 1/bw, 1/red).
double sum_sq_rel(const std::vector<sample>& v, const std::array<double, 3>& c) {
    double s = 0;
    for (const sample& p : v) {
        const auto f = features(p);
        const double r = (f[0] * c[0] + f[1] * c[1] + f[2] * c[2]) / p.seconds - 1;
        s += r * r;
    }
    return s;
}

//! Non-negative weighted least squares over every subset of the unknowns.
std::array<double, 3> fit(const std::vector<sample>& v) {
    std::array<double, 3> best{0, 0, 0};
    double best_err = sum_sq_rel(v, best);
    for (int mask = 1; mask < 8; ++mask) {
        int idx[3];
        int k = 0;
        for (int j = 0; j < 3; ++j)
            if (mask & (1 << j)) idx[k++] = j;
        std::array<std::array<double, 3>, 3> A{};
        std::array<double, 3> b{};
        for (const sample& p : v) {
            const auto f = features(p);
            const double w = 1 / p.seconds; // relative error: row / measured
            for (int r = 0; r < k; ++r) {
                for (int c = 0; c < k; ++c)
                    A[std::size_t(r)][std::size_t(c)] += f[std::size_t(idx[r])] * w * f[std::size_t(idx[c])] * w;
                b[std::size_t(r)] += f[std::size_t(idx[r])] * w * (p.seconds * w);
            }
        }
        std::array<double, 3> z{};
        if (!solve(A, b, k, z)) continue;
        std::array<double, 3> c{0, 0, 0};
        bool ok = true;
        for (int r = 0; r < k; ++r) {
            if (!(z[std::size_t(r)] >= 0)) ok = false;
            c[std::size_t(idx[r])] = z[std::size_t(r)];
        }
        if (!ok) continue;
        const double err = sum_sq_rel(v, c);
        if (err < best_err) {
            best_err = err;
            best = c;
        }
    }
    return best;
}

//! Times every correction_plan series at the correction grid sizes within
//! [-b, -e] (all series interleaved size by size, so they see the same
//! machine) and stores measured / predicted in t.corrections; grid sizes
//! outside the sweep take the nearest measured ratio. Returns the header
//! lines that describe them.
std::string measure_corrections(const options& o, int n, model::topology& t) {
    constexpr int G = model::correction_points;
    std::vector<series_spec> plan(std::begin(correction_plan), std::end(correction_plan));
    const std::size_t S = plan.size();
    std::vector<double> grid;
    for (int i = 0; i < G; ++i) {
        const double b = model::correction::grid_bytes(i);
        if (b >= o.min_bytes * (1 - 1e-12) && b <= o.max_bytes * (1 + 1e-12)) grid.push_back(b);
    }
    if (grid.empty()) return "# corrections: none (no grid size 8 B * 4^i within -b .. -e)\n";
    std::fprintf(stderr, "chorus_calibrate: timing %zu series for the corrections on %d ranks, %zu sizes\n", S, n,
                 grid.size());
    std::vector<std::vector<double>> m(S, std::vector<double>(grid.size(), 0.0));
    with_ranks(o, n, grid.back(), [&](timer& tm) {
        for (std::size_t i = 0; i < grid.size(); ++i)
            for (std::size_t q = 0; q < S; ++q) {
                const std::size_t count = call_count(plan[q].kind, grid[i], n);
                if (count == 0) continue; // the same on every rank
                const double sec = time_algo(tm, plan[q].algo, plan[q].kind, count);
                if (tm.comm.rank() == 0) m[q][i] = sec;
            }
    });
    std::string out = "# corrections (measured / first-order prediction) at 8 B * 4^i, from " +
                      std::to_string(grid.size()) + " sizes, interleaved; the other grid sizes repeat the nearest\n";
    for (std::size_t q = 0; q < S; ++q) {
        const collective c = to_collective(plan[q].kind);
        std::vector<model::measurement> pts;
        double lo = 0, hi = 0;
        for (std::size_t i = 0; i < grid.size(); ++i) {
            const std::size_t count = call_count(plan[q].kind, grid[i], n);
            if (count == 0 || !(m[q][i] > 0)) continue;
            const double bytes = call_bytes(plan[q].kind, count, n);
            pts.push_back({bytes, m[q][i]});
            const double pred = model::predict_uncorrected(c, plan[q].algo, n, bytes, t);
            if (!(pred > 0)) continue;
            const double r = m[q][i] / pred;
            lo = lo == 0 ? r : std::min(lo, r);
            hi = std::max(hi, r);
        }
        // measured / predicted at each grid size, the nearest measured one elsewhere (model/fit.hpp).
        model::correction k{};
        if (!model::fit_correction(t, c, plan[q].algo, n, t.ranks_per_node, pts, k)) continue;
        model::set_correction(t, k);
        char line[160];
        std::snprintf(line, sizeof line, "#   %s %s: %.2f .. %.2f\n", model::algorithm_name(k.algo),
                      coll_name(plan[q].kind), lo, hi);
        out += line;
    }
    return out;
}

//! Writes the topology file (-o, default stdout); rank 0 only.
void write_model(const options& o, const std::string& text) {
    if (g_rank != 0) return;
    if (chorus_cli::write_output(o.output, text)) {
        std::fputs(text.c_str(), stderr);
        std::fprintf(stderr, "chorus_calibrate: wrote %s\n", o.output.c_str());
    }
}

#if defined(CHORUS_CALIBRATE_MPI)
//! MPI: the first-order figures stay the backend's (model::mpi_topology:
//! shared memory inside a node, point-to-point messages for flat
//! schedules, which one process cannot tell apart by fitting); the
//! corrections measure every schedule automatic can pick against them.
//! --merge FILE keeps FILE's corrections for other rank counts, so runs
//! with different mpiexec -n build one file.
int calibrate_mpi(const options& o) {
    const int n = world().size();
    if (n < 2) throw usage_error{"calibration needs at least 2 processes"};
    model::topology t = world().topology();
    t.correction_count = 0;
    std::string text = "# chorus_calibrate_mpi: MPI backend, " + std::to_string(n) + " processes (" +
                       std::to_string(world().nodes()) + " node(s)), " + utc_now() + "\n";
    text += "# command: " + o.command + "\n";
    text += "# first-order figures: the MPI backend's (model::mpi_topology); corrections measured against them\n";
    text += measure_corrections(o, n, t);
    if (!o.merge_path.empty()) {
        const model::topology old = model::load_file(o.merge_path);
        int kept = 0;
        for (int i = 0; i < old.correction_count; ++i)
            if (old.corrections[i].nranks != n && t.correction_count < model::max_corrections) {
                t.corrections[t.correction_count++] = old.corrections[i];
                ++kept;
            }
        text += "# merged " + std::to_string(kept) + " correction(s) for other rank counts from " + o.merge_path + "\n";
    }
    text += model::to_text(t);
    write_model(o, text);
    return 0;
}
#endif

[[maybe_unused]] int calibrate(const options& o) {
    const int n = o.ranks;
    if (n < 2) throw usage_error{"calibration needs at least 2 ranks"};
    model::topology one_node = model::default_topology();
    one_node.ranks_per_node = 0;
    const std::vector<double> sizes = sweep(o.min_bytes, o.max_bytes, o.factor);
    // Alpha: direct<> AllReduce at 8 B .. 1 KiB whatever the sweep, so that
    // -b 1M (calibrating the large-message regime) still resolves it.
    const std::vector<double> small = sweep(8, 1024, 2);

    struct series {
        coll_kind kind;
        model::algorithm algo;
        const std::vector<double>* sizes;
    };
    const series plan[] = {{coll_kind::all_reduce, model::algorithm::ring, &sizes},
                           {coll_kind::all_gather, model::algorithm::ring, &sizes},
                           {coll_kind::reduce_scatter, model::algorithm::ring, &sizes},
                           {coll_kind::all_reduce, model::algorithm::direct, &small}};
    std::vector<sample> samples;
    for (const series& s : plan) {
        if (s.sizes->empty()) continue;
        std::fprintf(stderr, "chorus_calibrate: timing %s %s on %d ranks, %zu sizes\n", model::algorithm_name(s.algo),
                     coll_name(s.kind), n, s.sizes->size());
        const std::vector<double> t = time_sweep(default_policy(s.algo), o, n, s.kind, *s.sizes);
        for (std::size_t i = 0; i < t.size(); ++i) {
            const std::size_t count = call_count(s.kind, (*s.sizes)[i], n);
            if (count == 0 || !(t[i] > 0)) continue;
            const double bytes = call_bytes(s.kind, count, n);
            samples.push_back({s.kind, s.algo, bytes, t[i],
                               model::decompose(to_collective(s.kind), s.algo, n, bytes, one_node).intra});
        }
    }
    if (samples.size() < 3) throw usage_error{"too few samples to fit (widen -b/-e)"};
    const std::array<double, 3> c = fit(samples);

    // A coefficient the fit sets to 0 costs nothing measurable: alpha 0, or a
    // bandwidth of `free_Bps` (the file needs a finite number).
    constexpr double free_Bps = 1e13;
    model::topology t = one_node;
    t.intra.latency_s = c[0];
    t.intra.bandwidth_Bps = c[1] > 1 / free_Bps ? 1 / c[1] : free_Bps;
    t.reduce_Bps = c[2] > 1 / free_Bps ? 1 / c[2] : free_Bps;
    t.local_Bps = 0; // one memory: local bytes at the link bandwidth (features())
    std::string corrections_report;
    t.correction_count = 0;
    if (o.corrections)
        for (int r : o.rank_list) {
            if (r < 2) continue; // one rank is a local copy: nothing to correct
            corrections_report += "# " + std::to_string(r) + " ranks:\n" + measure_corrections(o, r, t);
        }

    // Residuals per series with the fitted (and clamped) model.
    std::string report;
    char line[256];
    double worst = 0;
    double total_sq = 0;
    for (const series& s : plan) {
        double sq = 0, mx = 0;
        int cnt = 0;
        for (const sample& p : samples) {
            if (p.kind != s.kind || p.algo != s.algo) continue;
            const double r = model::predict_uncorrected(to_collective(p.kind), p.algo, n, p.bytes, t) / p.seconds - 1;
            sq += r * r;
            mx = std::max(mx, std::fabs(r));
            ++cnt;
        }
        if (cnt == 0) continue;
        total_sq += sq;
        worst = std::max(worst, mx);
        std::snprintf(line, sizeof line, "#   %s %s: %d sizes, rms relative error %.1f %%, worst %.1f %%\n",
                      model::algorithm_name(s.algo), coll_name(s.kind), cnt, 100 * std::sqrt(sq / cnt), 100 * mx);
        report += line;
    }

    std::string text;
    std::string ranks_text;
    for (int r : o.rank_list) ranks_text += (ranks_text.empty() ? "" : ",") + std::to_string(r);
    text += "# chorus_calibrate: threads backend, " + ranks_text + " ranks (first-order fit at " + std::to_string(n) +
            "), " + utc_now() + "\n";
    text += "# command: " + o.command + "\n";
    std::snprintf(line, sizeof line,
                  "# fit: time = steps*alpha + moved/bw + reduced/reduce_Bps, weighted (1/measured) non-negative\n"
                  "#   least squares over %zu samples, each the %s of %d timed loops\n",
                  samples.size(), o.use_min ? "minimum" : "median", o.reps);
    text += line;
    std::snprintf(line, sizeof line, "# alpha %.3f us, intra bandwidth %.3f GB/s per rank, reduce %.3f GB/s per rank\n",
                  t.intra.latency_s * 1e6, t.intra.bandwidth_Bps / 1e9, t.reduce_Bps / 1e9);
    text += line;
    text += report;
    std::snprintf(line, sizeof line, "#   all: rms relative error %.1f %%, worst %.1f %%\n",
                  100 * std::sqrt(total_sq / double(samples.size())), 100 * worst);
    text += line;
    text += corrections_report;
    if (c[0] <= 0 || c[1] <= 1 / free_Bps || c[2] <= 1 / free_Bps)
        text += "# note: the best non-negative fit gives a term no cost (alpha 0 or a bandwidth of 1e13 B/s):\n"
                "#   the data do not resolve it from the others\n";
    text += "# inter.* are not measured (one host): the defaults, InfiniBand-class assumptions\n";
    text += model::to_text(t);

    if (!o.csv_path.empty()) {
        std::FILE* f = std::fopen(o.csv_path.c_str(), "w");
        if (f == nullptr) throw usage_error{"--csv: cannot write " + o.csv_path};
        std::fprintf(f, "collective,algorithm,ranks,size_bytes,measured_s,predicted_s,steps,moved_bytes,"
                        "reduced_bytes\n");
        for (const sample& p : samples)
            std::fprintf(f, "%s,%s,%d,%.0f,%.9g,%.9g,%.9g,%.9g,%.9g\n", coll_name(p.kind),
                         model::algorithm_name(p.algo), n, p.bytes, p.seconds,
                         model::predict_uncorrected(to_collective(p.kind), p.algo, n, p.bytes, t), p.x.steps, p.x.moved,
                         p.x.reduced);
        std::fclose(f);
    }
    write_model(o, text);
    return 0;
}

// --- validation ----------------------------------------------------------------------

struct vrow {
    coll_kind kind;
    double bytes;
    std::string name;     // the policy
    model::algorithm ran; // what the model predicts it as
    double measured;
    double predicted;
};

//! What the model predicts policy `p` runs for collective k of per-rank count `count` floats.
model::algorithm modelled_as(const named_policy& p, const model::topology& t, int n, std::size_t count, coll_kind k) {
    if (p.pol.choose) {
        chorus::schedule_args a{};
        a.coll = to_collective(k);
        a.nranks = n;
        a.count = count;
        a.elem_bytes = sizeof(float);
        a.commutative = true;
        a.topo = &t;
#if defined(CHORUS_CALIBRATE_MPI)
        a.node_size = world().planning_node_size();
#endif
        return chorus::automatic::choose(a);
    }
    return model::runs_as(to_collective(k), p.pol.algo);
}

bool selected(const options& o, const named_policy& p) {
    return o.algos.empty() || std::find(o.algos.begin(), o.algos.end(), p.name) != o.algos.end();
}

//! Times every selected policy's collective `kind` at every size, the
//! policies interleaved per size (all of one size, then the next): they see
//! the same machine, which on a shared one drifts from minute to minute.
void validate_all(const options& o, coll_kind kind, const model::topology& t, const std::vector<double>& sizes,
                  std::vector<vrow>& rows) {
    const int n = o.ranks;
    constexpr std::size_t np = std::size(validated_policies);
    std::vector<std::vector<double>> m(np, std::vector<double>(sizes.size(), 0.0));
    std::fprintf(stderr, "chorus_calibrate: timing %s on %d ranks, %zu sizes:", coll_name(kind), n, sizes.size());
    for (const named_policy& p : validated_policies)
        if (selected(o, p)) std::fprintf(stderr, " %s", p.name);
    std::fprintf(stderr, "\n");
    with_ranks(o, n, *std::max_element(sizes.begin(), sizes.end()), [&](timer& tm) {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const std::size_t count = call_count(kind, sizes[i], n);
            if (count == 0) continue;
            for (std::size_t q = 0; q < np; ++q) {
                if (!selected(o, validated_policies[q])) continue;
                const double s = tm.time(validated_policies[q].pol, kind, count);
                if (tm.comm.rank() == 0) m[q][i] = s; // the others return 0
            }
        }
    });
    for (std::size_t q = 0; q < np; ++q) {
        const named_policy& p = validated_policies[q];
        if (!selected(o, p)) continue;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const std::size_t count = call_count(kind, sizes[i], n);
            if (count == 0 || !(m[q][i] > 0)) continue;
            const double bytes = call_bytes(kind, count, n);
            const model::algorithm a = modelled_as(p, t, n, count, kind);
            rows.push_back({kind, bytes, p.name, a, m[q][i], model::predict(to_collective(kind), a, n, bytes, t)});
        }
    }
}

int validate(const options& o) {
    const int n = o.ranks;
    model::topology t = o.model_path.empty() ? model::current() : model::load_file(o.model_path);
    const std::string model_desc = o.model_path.empty()
                                       ? (std::getenv("CHORUS_MODEL") ? "CHORUS_MODEL" : "the built-in default")
                                       : o.model_path;
    // `automatic` reads model::current(): point it at the same file.
    if (!o.model_path.empty()) setenv("CHORUS_MODEL", o.model_path.c_str(), 1);
    if (!on_mpi) t.ranks_per_node = 0; // the threads backend here: one node
#if defined(CHORUS_CALIBRATE_MPI)
    if (o.model_path.empty() && !model::model_file_given()) t = world().topology(); // what the backend plans with
#endif
    const std::vector<double> sizes = sweep(o.min_bytes, o.max_bytes, o.factor);
    const std::vector<coll_kind>& kinds = o.colls;
    std::vector<vrow> rows;
    for (coll_kind k : kinds) validate_all(o, k, t, sizes, rows);

    constexpr double judged_from = 64.0 * 1024;
    std::string kinds_text;
    for (coll_kind k : kinds) kinds_text += (kinds_text.empty() ? "" : ", ") + std::string(coll_name(k));
    std::printf("# chorus_calibrate --validate: %s (float, sum, out of place; root 0), %s, %d ranks, %s\n",
                kinds_text.c_str(), backend_name, n, utc_now().c_str());
    std::printf("# model: %s (alpha %.3f us, intra %.3f GB/s, reduce %.3f GB/s); %s of %d timed loops per point\n",
                model_desc.c_str(), t.intra.latency_s * 1e6, t.intra.bandwidth_Bps / 1e9, t.reduce_Bps / 1e9,
                o.use_min ? "minimum" : "median", o.reps);
    std::printf("# ok: |predicted/measured - 1| <= 25 %%, judged for sizes >= 64 KiB ('-' below)\n");
    std::printf("%-14s %12s %-28s %14s %14s %8s %4s\n", "collective", "size", "algorithm", "measured_us",
                "predicted_us", "ratio", "ok");
    std::FILE* csv = nullptr;
    if (!o.csv_path.empty()) {
        csv = g_rank == 0 ? std::fopen(o.csv_path.c_str(), "w") : std::fopen("/dev/null", "w");
        if (csv == nullptr) throw usage_error{"--csv: cannot write " + o.csv_path};
        std::fprintf(csv, "size_bytes,algorithm,modelled_as,ranks,measured_s,predicted_s,ratio,judged,within_25,"
                          "collective\n");
    }
    std::stable_sort(rows.begin(), rows.end(), [](const vrow& a, const vrow& b) {
        return a.kind != b.kind ? int(a.kind) < int(b.kind) : a.bytes < b.bytes;
    });
    struct tally {
        std::string name;
        int judged = 0, ok = 0;
        std::vector<double> ratios;
    };
    std::vector<tally> tallies;
    for (const vrow& r : rows) {
        const double ratio = r.predicted / r.measured;
        const bool judged = r.bytes >= judged_from;
        const bool ok = std::fabs(ratio - 1) <= 0.25;
        std::string label = r.name;
        if (label != model::algorithm_name(r.ran)) label += std::string("(") + model::algorithm_name(r.ran) + ")";
        std::printf("%-14s %12.0f %-28s %14.2f %14.2f %8.3f %4s\n", coll_name(r.kind), r.bytes, label.c_str(),
                    r.measured * 1e6, r.predicted * 1e6, ratio, judged ? (ok ? "yes" : "NO") : "-");
        if (csv != nullptr)
            std::fprintf(csv, "%.0f,%s,%s,%d,%.9g,%.9g,%.6f,%d,%d,%s\n", r.bytes, r.name.c_str(),
                         model::algorithm_name(r.ran), n, r.measured, r.predicted, ratio, judged ? 1 : 0,
                         judged && ok ? 1 : 0, coll_name(r.kind));
        const std::string key = kinds.size() > 1 ? r.name + " " + coll_name(r.kind) : r.name;
        auto it = std::find_if(tallies.begin(), tallies.end(), [&](const tally& x) { return x.name == key; });
        if (it == tallies.end()) it = tallies.insert(tallies.end(), tally{key, 0, 0, {}});
        if (judged) {
            ++it->judged;
            it->ok += ok ? 1 : 0;
            it->ratios.push_back(ratio);
        }
    }
    if (csv != nullptr) std::fclose(csv);

    std::printf("\n# per algorithm, sizes >= 64 KiB: within 25 %% / judged, median predicted/measured\n");
    int all_ok = 0, all_judged = 0;
    for (const tally& x : tallies) {
        all_ok += x.ok;
        all_judged += x.judged;
        std::printf("%-34s %3d / %-3d  median ratio %s\n", x.name.c_str(), x.ok, x.judged,
                    x.ratios.empty() ? "-" : std::to_string(statistic(x.ratios, false)).c_str());
    }
    std::printf("%-34s %3d / %-3d\n", "all", all_ok, all_judged);

    // The selector's view: per size, the model's pick among the measured
    // (non-automatic) algorithms against the fastest measured one.
    std::printf("\n# per size: the model's pick vs the fastest measured (automatic left out); "
                "cost = measured time of the pick / fastest\n");
    std::printf("%-14s %12s %-20s %-20s %8s\n", "collective", "size", "model_pick", "fastest", "cost");
    std::vector<double> costs;
    for (std::size_t i = 0; i < rows.size();) {
        std::size_t j = i;
        while (j < rows.size() && rows[j].bytes == rows[i].bytes && rows[j].kind == rows[i].kind) ++j;
        const vrow* pick = nullptr;
        const vrow* fast = nullptr;
        for (std::size_t q = i; q < j; ++q) {
            if (rows[q].name != model::algorithm_name(rows[q].ran)) continue; // automatic or an alias
            if (pick == nullptr || rows[q].predicted < pick->predicted) pick = &rows[q];
            if (fast == nullptr || rows[q].measured < fast->measured) fast = &rows[q];
        }
        if (pick != nullptr && fast != nullptr) {
            costs.push_back(pick->measured / fast->measured);
            std::printf("%-14s %12.0f %-20s %-20s %8.2f\n", coll_name(rows[i].kind), rows[i].bytes,
                        pick->name.c_str(), fast->name.c_str(), pick->measured / fast->measured);
        }
        i = j;
    }
    if (!costs.empty())
        std::printf("# the pick's cost over the fastest: median %.2f, worst %.2f\n", statistic(costs, false),
                    *std::max_element(costs.begin(), costs.end()));
    return 0;
}

} // namespace

#if defined(CHORUS_CALIBRATE_MPI)
int main(int argc, char** argv) {
    int provided = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    // Rank 0 reports; the others' progress and tables go nowhere, their errors to stderr.
    std::FILE* err = fdopen(dup(2), "w");
    if (g_rank != 0) {
        if (std::freopen("/dev/null", "w", stdout) == nullptr || std::freopen("/dev/null", "w", stderr) == nullptr)
            return 1;
    }
    int rc = 0;
    try {
        options o = parse_options(argc, argv);
        if (!o.ranks_given) {
            o.ranks = size;
            o.rank_list = {size};
        }
        if (o.rank_list.size() > 1) throw usage_error{"-t: one rank count per MPI job (use --merge to combine runs)"};
        rc = o.validate ? validate(o) : calibrate_mpi(o);
    } catch (const usage_error& e) {
        std::fprintf(err, "chorus_calibrate_mpi: rank %d: %s\n", g_rank, e.what.c_str());
        rc = 2;
    } catch (const std::exception& e) {
        std::fprintf(err, "chorus_calibrate_mpi: rank %d: %s\n", g_rank, e.what());
        rc = 1;
    }
    std::fflush(err);
    if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc); // peers may wait in a collective
    MPI_Finalize();
    return 0;
}
#else
int main(int argc, char** argv) {
    try {
        const options o = parse_options(argc, argv);
        if (!o.merge_path.empty()) throw usage_error{"--merge is for chorus_calibrate_mpi"};
        return o.validate ? validate(o) : calibrate(o);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_calibrate: %s\n", e.what.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chorus_calibrate: %s\n", e.what());
        return 1;
    }
}
#endif
