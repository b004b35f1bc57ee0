//! \file chorus_bench_gpu.cu
//! nccl-tests-style table for chorus on the GPU backend: ranks are virtual
//! ranks on device 0 (default 8) or one rank per visible device
//! (--devices). Columns: size, count, type, redop, root, time, algbw,
//! busbw, #wrong, plus
//!   moved(GB/s)  the bytes the schedules read and write per collective over
//!                the time: the real schedule of every rank is iterated on
//!                the host, summing step.count * elem_bytes * (sources +
//!                destinations) over all ranks, channels and units;
//!   /copy        moved over the device-to-device copy bandwidth measured
//!                in the same run (cudaMemcpyAsync D2D of the largest size,
//!                read + write counted: 2 * size per copy; with several
//!                devices, the sum of each device's copy bandwidth);
//!   nccl         NCCL's time per call for the same collective, operands
//!                and count, timed the same way right after chorus's (once
//!                per row and run), where NCCL runs: one rank per device,
//!                more than one device, a build that found nccl.h and
//!                libnccl (--nccl 0 turns it off); "-" elsewhere;
//!   limit        on one device: the least bytes any implementation reads
//!                and writes (every input once, every output once: AllReduce
//!                2 n b for n ranks of b bytes) over the copy bandwidth; the
//!                physical floor of the row's time. "-" with several devices.
//!
//! Method:
//!  - buffers are allocated once at the largest size (in and out per rank,
//!    plus a guard), scratch once in make_communicators;
//!  - the command line and the sizes are nccl-tests' (cli.hpp: nccl_rows,
//!    nccl_count): -t x -g ranks one per device, or --ranks virtual ranks on
//!    device 0; AllGather's size is its whole receive buffer, ReduceScatter's
//!    its whole send buffer;
//!  - per size: `warmup` eager calls per rank, -c N checked calls on
//!    fresh integer-valued inputs (exact in float and bfloat16 whatever the
//!    reduction order, checked on the device against the closed form;
//!    writes past the output and changes to the input count as wrong), then
//!    -n x -m calls per rank captured into one CUDA graph per rank (on the
//!    rank's own stream), one untimed launch of every graph, and -G timed
//!    launches: time per call = (host clock around launching every rank's
//!    graph and synchronising every stream) / (launches x calls), as
//!    nccl-tests -G does (-G 1 by default here);
//!  - with -G 0 the timed calls are issued eagerly instead (launch overhead
//!    included);
//!  - out-of-place only (Broadcast, with one buffer, is in place by
//!    definition); AllGather and ReduceScatter: S = the total (n blocks),
//!    count = elements per rank, as in chorus_bench.
//!
//! Policies: every algorithm (ring, direct, hierarchical = hierarchical<
//! ring<P>, ring<P>>, tree, recursive_doubling, rabenseifner, two_shot)
//! with every tuning P of --channels x --chunk, deterministic =
//! deterministic<ring<P>>, and automatic (its own choices; the tuning does
//! not apply), for both element types. Policies are values (chorus::policy)
//! chosen at run time: the calls go through chorus::detail::*_run (what
//! chorus::all_reduce<Algo>(..., stream) runs with policy_of<Algo>), so the
//! whole program has four collective kernels, (float | bfloat16) x (sum |
//! the copy-only operator), whatever it measures. A table of automatic or
//! deterministic adds a column with the algorithm that ran for the row:
//! automatic::choose (automatic) or the schedule make_schedule plans
//! (deterministic), from the schedule arguments launch() builds (the
//! topology make_communicators plans against: the CHORUS_MODEL file, else
//! model::gpu_cluster_topology(node size); the scratch allocated).
//!
//! One process per GPU (--processes; built when CMake found MPI): run
//! under `mpiexec -n P`, every process is one rank, made with
//! gpu::make_communicator(MPI_COMM_WORLD, device) on device 0 (or rank %
//! devices with --process-devices spread). --buffers registered (default):
//! operands from comm.alloc (the registered area peers map: zero-copy);
//! staged: plain cudaMalloc operands, staged through the shared scratch;
//! user: cudaMalloc operands registered once with comm.register_buffer
//! (peers map them: zero-copy), deregistered before they are freed.
//! The same tables, checks and CSV; timing: MPI_Barrier, then the calls
//! (eager by default, -G 0: whether graph capture works with the process
//! backend is unknown; -G N asks for graphs), then the stream synchronised;
//! each process's time, and its #wrong, are combined over the processes
//! (MPI_Allreduce: the largest time, the sum of #wrong). Only process 0
//! prints the tables and writes --csv/-J. The copy ceiling is each
//! device's copy bandwidth measured by one process alone (the others wait
//! at a barrier), summed over the distinct devices used: with P processes
//! on one device, moved (all P ranks' bytes) over that one device's copy
//! bandwidth, as for P virtual ranks. A chorus or CUDA error in any
//! process aborts the job (comm.abort, then MPI_Abort): no process waits
//! forever for a peer that gave up.
//!
//! Group launch (--group N, virtual ranks or one rank per device): instead
//! of the tables, for each size and policy, N AllReduces per rank, each on
//! its own slice of the rank's buffers, timed like one collective above
//! (graphs with -G, eager with -G 0) two ways: one by one (N launches per
//! rank) and inside chorus::gpu::group_start/group_end (one launch per
//! detail::group_kernel_calls of them, 16 for float/sum); columns size,
//! count, separate(us), grouped(us) (both for all N calls), speedup and
//! #wrong (each way run once per size on fresh inputs and checked). No CSV
//! rows; the summary line gives the speedup at the smallest size and the least.
//!
//! Without a CUDA device: prints "CHORUS_SKIP: no CUDA device", exits 77
//! (every process of --processes too).
//! Exit status: 0 all checks passed, 1 a wrong value or a chorus/CUDA
//! error, 2 bad command line, 77 no device.

#if CHORUS_BENCH_GPU_MPI
#  include <chorus/gpu_mpi.hpp> // <chorus/gpu.hpp> and make_communicator(MPI_Comm, ...)
#else
#  include <chorus/gpu.hpp>
#endif
#if CHORUS_BENCH_NCCL
#  include <nccl.h> // the NCCL column (benchmarks/CMakeLists.txt: where nccl.h and libnccl are found)
#endif

#include "bench.hpp" // shared with chorus_bench: sweep_options, human_bytes, ... (and cli.hpp: the command line)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using u64 = std::uint64_t;
using chorus_bench::clock_type;

// ---------------------------------------------------------------------------
// What can be measured
// ---------------------------------------------------------------------------

using chorus_bench::all_colls;
using chorus_bench::coll_kind;
using chorus_bench::coll_name;
using chorus_bench::coll_uses_op;
using chorus_bench::coll_uses_root;

using chorus_bench::to_collective;
enum class type_kind { float32, bf16 };
//! nccl-tests' names (the type column; "bf16" is accepted by -d too).
constexpr const char* type_name(type_kind t) { return t == type_kind::float32 ? "float" : "bfloat16"; }

constexpr type_kind all_types[] = {type_kind::float32, type_kind::bf16};

//! Where a rank's operands live: device (virtual ranks / one rank per
//! device: cudaMalloc, read by peers directly), registered (--processes:
//! comm.alloc, mapped by every peer process: zero-copy), staged
//! (--processes: cudaMalloc, staged through the shared scratch), user
//! (--processes: cudaMalloc, comm.register_buffer: zero-copy). CSV column 24.
enum class buffer_kind { device, registered, staged, user };
constexpr const char* buffer_name(buffer_kind b) {
    return b == buffer_kind::device       ? "device"
           : b == buffer_kind::registered ? "registered"
           : b == buffer_kind::staged     ? "staged"
                                          : "user";
}
constexpr buffer_kind process_buffers[] = {buffer_kind::registered, buffer_kind::staged, buffer_kind::user};

//! --algo takes the policies by name (chorus::policy_names, in that order
//! for "all"); automatic chooses its algorithms with their default
//! tunings: --channels and --chunk do not apply (one table per collective
//! and type).
constexpr bool takes_tuning(std::string_view algo) { return algo != "automatic"; }

//! The policy `--algo algo` names with tuning `t` (see the file comment):
//! an algorithm's policy with `t`, automatic as it is, deterministic as
//! deterministic<ring<t>>.
constexpr chorus::policy policy_for(std::string_view algo, chorus::tuning t) {
    chorus::policy p;
    if (!chorus::policy_from_name(algo, p)) return chorus::policy::automatic(); // parse_args() checked the name
    if (p.deterministic) return chorus::policy::fixed(chorus::algorithm::ring, t).deterministic_of();
    return p.choose ? p : chorus::policy::fixed(p.algo, t);
}
// The names mean what the policy types say.
static_assert(policy_for("ring", {8, 256 << 10}) == chorus::policy_of<chorus::ring<chorus::ring_params{8, 256 << 10}>>);
static_assert(policy_for("hierarchical", {16, 1 << 20}) ==
              chorus::policy_of<chorus::hierarchical<chorus::ring<chorus::ring_params{16, 1 << 20}>,
                                                     chorus::ring<chorus::ring_params{16, 1 << 20}>>>);
static_assert(policy_for("two_shot", {4, 64 << 10}) ==
              chorus::policy_of<chorus::two_shot<chorus::recursive_params{4, 64 << 10}>>);
static_assert(policy_for("deterministic", {2, 64 << 10}) ==
              chorus::policy_of<chorus::deterministic<chorus::ring<chorus::ring_params{2, 64 << 10}>>>);
static_assert(policy_for("automatic", {8, 1 << 20}) == chorus::policy_of<chorus::automatic>);

//! Why policy `algo` has no table of its own for collective `c` (it runs
//! another policy's schedule there), or nullptr.
constexpr const char* not_measured(std::string_view algo, coll_kind c) {
    if (c == coll_kind::all_reduce) return nullptr;
    if (algo == "hierarchical")
        return "hierarchical<> runs its Intra policy, ring<>, for every collective but all_reduce; see --algo ring";
    if (algo == "recursive_doubling" || algo == "rabenseifner" || algo == "two_shot")
        return "it runs direct<>'s schedule for every collective but all_reduce; see --algo direct";
    if (algo == "tree")
        return c == coll_kind::all_gather || c == coll_kind::reduce_scatter
                   ? "tree<> runs ring<>'s schedule for all_gather and reduce_scatter; see --algo ring"
                   : nullptr;
    if (algo == "deterministic")
        return c == coll_kind::all_gather || c == coll_kind::broadcast
                   ? "deterministic<ring<>> runs ring<>'s schedule for all_gather and broadcast; see --algo ring"
                   : "deterministic<> runs direct<>'s schedule for reduce_scatter and reduce; see --algo direct";
    return nullptr;
}

//! What --algo's --help says after the policies: policy_for and not_measured in words.
constexpr std::string_view algo_note =
    "each with every tuning P of --channels x --chunk but automatic, which chooses with default tunings (one "
    "table per collective); hierarchical = hierarchical<ring<P>, ring<P>>, all_reduce only (other collectives "
    "run ring<P>'s schedule); deterministic = deterministic<ring<P>>, all_reduce only (direct<P>'s or ring<P>'s "
    "schedule elsewhere); recursive_doubling, rabenseifner and two_shot all_reduce only, tree all_reduce, "
    "broadcast and reduce (elsewhere they run direct<P>'s or ring<P>'s schedule); automatic every collective; "
    "automatic and deterministic tables have a column naming the algorithm that ran for each row";

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

struct options : chorus_bench::sweep_options {
    //! -G 1 by default here (one timed launch of a graph of the calls); nccl-tests' default is 0, eager.
    options() { cudagraph = 1; }
    int ranks = 8;
    bool per_device = false;
    bool by_nccl_ranks = false; //!< -t/-g given: -t x -g ranks, one per device
    int root = 0;
    int ranks_per_node = 0; // 0: n/2 for hierarchical (two emulated nodes), else CHORUS_RANKS_PER_NODE
    int timeout_ms = 20000;
    std::vector<std::string> algos{"ring"}; //!< policy names (chorus::policy_names)
    std::vector<int> channels{8};
    std::vector<std::size_t> chunks{std::size_t(256) << 10};
    std::vector<type_kind> types{type_kind::float32};
    std::string csv_path;
    std::string command_line;
    bool processes = false;       //!< --processes: one rank per MPI process
    bool spread_devices = false;  //!< --process-devices spread: process r on device r % devices
    bool graph_given = false;     //!< -G/--graph given (--processes: eager unless given)
    std::vector<buffer_kind> buffers; //!< --buffers (empty: the mode's default)
    bool nccl = true;             //!< --nccl 0: no NCCL column
    int group = 0;                //!< --group N: N AllReduces per rank, one by one vs in a chorus::gpu::group
};

using chorus_cli::usage_error;

//! "64MiB": chorus_bench's human_bytes without the space.
std::string human_bytes(std::size_t b) { return chorus_bench::human_bytes(b, ""); }

//! nccl-tests' options and --collectives, with chorus_bench_gpu's defaults (no --reps: -G launches), and
//! what they do here where that is not what they do in nccl-tests.
const chorus_cli::nccl_rows sweep_table(
    options(), chorus_cli::all_colls,
    {
        {"nthreads", "one host thread drives every rank: ranks = -t x -g, one per device (0, 1, ...)"},
        {"ngpus", "ranks = -t x -g, one per device (0, 1, ...); --ranks N puts N virtual ranks on device 0"},
        {"parallel_init", "no effect: make_communicators sets up every rank in one call"},
        {"blocking", "eager launches only (-G 0): 1 and 2 synchronise every rank's stream after each call, 3 after "
                         "each iteration (one host thread: no barrier beyond that); ignored with -G"},
        {"stream_null", "ignored: every rank runs on a stream of its own (virtual ranks on one device must run "
                            "concurrently)"},
        {"average", "no per-rank times: one host clock around every rank's launches and stream syncs"},
        {"output_file", "JSON rows of the tables (chorus's layout, the same fields as --csv)"},
        {"local_register", "no-op: make_communicators needs no registration (it allocates its scratch); with "
                               "--processes, --buffers user registers cudaMalloc buffers (comm.register_buffer)"},
        {"cta_policy", "ignored: --channels sets chorus's blocks per rank"},
        {"device_implementation", "ignored: an NCCL setting"},
        {"device_cta_count", "ignored: --channels sets chorus's blocks per rank"},
        {"per_iter_timing", "ignored: no per-iteration timing (CUDA graphs time whole loops)"},
        {"per_iter_skip", "ignored: no per-iteration timing"},
    },
    false);

//! The options, in the order --help lists them.
std::span<const chorus_cli::option> option_table() {
    static const std::string algo_help = chorus_cli::policies_help(nullptr, "ring", algo_note);
    static const std::vector<chorus_cli::option> table = sweep_table.then({
        {"op", 'o', "OP", "sum (default; the one reduction measured here)"},
        {"datatype", 'd', "LIST", "float,bfloat16 or all (default float; also float32, bf16)"},
        {"type", 0, "LIST"},  // this program's older spelling of --datatype
        {"graph", 0, "N"},    // this program's older spelling of --cudagraph (0: eager, 1: graphs)
        {"root", 'r', "N", "root of broadcast and reduce (default 0)"},
        {{}, 0, {}, "chorus only:"},
        {"ranks", 0, "N", "virtual ranks on device 0 (default 8, at most 64), instead of -t x -g"},
        {"devices", 0, {}, "one rank per visible device instead of --ranks"},
        {"processes", 0, {}, "one rank per MPI process (run under mpiexec -n P; needs a build with MPI): "
                             "gpu::make_communicator(MPI_COMM_WORLD); eager launches unless -G is given"},
        {"process-devices", 0, "WHICH", "with --processes: one (default: every process on device 0) or spread "
                                        "(process r on device r % devices)"},
        {"buffers", 0, "LIST", "with --processes: registered (default: comm.alloc, zero-copy), staged "
                               "(cudaMalloc, staged through the scratch) and/or user (cudaMalloc, "
                               "comm.register_buffer: zero-copy)"},
        {"algo", 0, "LIST", algo_help},
        {"channels", 0, "LIST", "channels (thread blocks of 512 threads per rank), each 1..32, or 0: chosen per\n"
                                "call, as the policy types' defaults are (default 8)"},
        {"chunk", 0, "LIST", "chunk_bytes, each at least 16, or 0: chosen per call; suffixes K M G (default 256K)"},
        {"chunk-bytes", 0, "LIST"}, // chorus_bench's spelling of --chunk
        {"ranks-per-node", 0, "N", "node size for hierarchical (default: ranks/2 when that splits the ranks "
                                   "into two nodes, else CHORUS_RANKS_PER_NODE)"},
        {"timeout-ms", 0, "N", "chorus wait deadline per collective (default 20000; -T gives it in seconds)"},
        {"csv", 0, "FILE", "also write every row as CSV"},
        {"nccl", 0, "0|1", "NCCL's time per row in the same run, where it runs: one rank per device, more than "
                           "one device, a build that found NCCL (default 1)"},
        {"group", 0, "N", "instead of the tables: N AllReduces of each size per rank (one buffer each), timed "
                          "one by one (N launches) and in a chorus::gpu::group (one launch per 16 calls); "
                          "--collectives, -c and --csv do not apply"},
        {"help", 'h', {}, "this text"},
    });
    return table;
}

void print_usage(std::FILE* to, const char* argv0) {
    chorus_cli::print_help(to, chorus_bench::cat("usage: ", argv0, " [options]"), option_table(),
                           "Lists are comma separated; every combination of algo x channels x chunk x type x\n"
                           "collective runs as its own table.\n"
                           "Exit: 0 ok, 1 wrong results or error, 2 usage, 77 no CUDA device.\n");
}

options parse_args(int argc, char** argv) {
    using chorus_cli::parse_bytes;
    using chorus_cli::parse_int;
    using chorus_cli::split_list;
    options o;
    o.command_line = chorus_cli::join_args({argv, std::size_t(argc)});
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
    if (line.help) {
        print_usage(stdout, argv[0]);
        std::exit(0);
    }
    constexpr int most_ranks = chorus::detail::max_lane_ranks;
    bool ranks_given = false;
    for (const chorus_cli::given_option& g : line.given) {
        const std::string_view v = g.value;
        const std::string& flag = g.flag;
        if (g.is("cudagraph") || g.is("graph")) o.graph_given = true;
        if (sweep_table.read(g, o)) continue;
        if (g.is("op")) chorus_cli::parse_choice(v, flag, {"sum"});
        else if (g.is("graph")) o.cudagraph = int(parse_int(v, flag, 0, 1 << 20));
        else if (g.is("processes")) o.processes = true;
        else if (g.is("process-devices")) o.spread_devices = chorus_cli::parse_choice(v, flag, {"one", "spread"}) == 1;
        else if (g.is("buffers"))
            o.buffers = chorus_cli::parse_names(v, flag, "buffer kind", process_buffers, buffer_name, {});
        else if (g.is("ranks")) {
            o.ranks = int(parse_int(v, flag, 1, most_ranks));
            ranks_given = true;
        } else if (g.is("devices")) o.per_device = true;
        else if (g.is("root")) o.root = int(parse_int(v, flag, 0, most_ranks - 1));
        else if (g.is("ranks-per-node")) o.ranks_per_node = int(parse_int(v, flag, 1, most_ranks));
        else if (g.is("timeout-ms")) o.timeout_ms = int(parse_int(v, flag, 1, 3600000));
        else if (g.is("csv")) o.csv_path = std::string(v);
        else if (g.is("nccl")) o.nccl = parse_int(v, flag, 0, 1) == 1;
        else if (g.is("group")) o.group = int(parse_int(v, flag, 1, 1024));
        else if (g.is("type") || g.is("datatype")) {
            for (const std::string_view item : split_list(v))
                for (const std::string_view other : {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
                                                     "double", "f8e4m3", "f8e5m2", "char", "int"})
                    if (item == other)
                        throw usage_error{chorus_bench::cat(flag, ": ", item, " is not measured by chorus_bench_gpu "
                                                            "(float and bfloat16; chorus_bench measures the integer "
                                                            "types and double on the host)")};
            o.types = chorus_cli::parse_names(v, flag, "type", all_types, type_name,
                                              {{"float32", type_kind::float32}, {"bf16", type_kind::bf16}});
        }
        else if (g.is("algo")) o.algos = chorus_cli::parse_policies(v, flag);
        else if (g.is("channels")) {
            o.channels.clear();
            for (auto c : split_list(v)) o.channels.push_back(int(parse_int(c, flag, 0, chorus::max_channels)));
        } else if (g.is("chunk") || g.is("chunk-bytes")) {
            o.chunks.clear();
            for (auto c : split_list(v)) {
                const std::size_t bytes = parse_bytes(c, flag);
                if (bytes != 0 && bytes < 16)
                    throw usage_error{chorus_bench::cat(flag, ": ", c, " is below 16 bytes (0: chosen per call)")};
                o.chunks.push_back(bytes);
            }
        } else chorus_cli::unhandled(g);
    }
    if (o.min_bytes == 0) o.min_bytes = 1;
    chorus_cli::nccl_rows::check_sweep(o);
    if (o.nthreads_given || o.ngpus_given) {
        if (ranks_given || o.per_device)
            throw usage_error{"-t/-g (one rank per device) and --ranks/--devices both give the ranks: use one"};
        if (std::int64_t(o.nthreads) * o.ngpus > most_ranks)
            throw usage_error{chorus_bench::cat("-t x -g: at most ", std::to_string(most_ranks), " ranks")};
        o.by_nccl_ranks = true;
    }
    if (o.processes) {
#if !CHORUS_BENCH_GPU_MPI // first: gpu_check.sh asks with --processes --ranks 2 whether the build has it
        throw usage_error{"--processes: this chorus_bench_gpu was built without MPI (configure with MPI found)"};
#endif
        if (ranks_given || o.per_device || o.by_nccl_ranks)
            throw usage_error{"--processes (one rank per MPI process) and --ranks/--devices/-t/-g both give the ranks: "
                              "use one"};
        if (!o.graph_given) o.cudagraph = 0; // eager: see the file comment
        if (o.buffers.empty()) o.buffers = {buffer_kind::registered};
    } else {
        if (!o.buffers.empty()) throw usage_error{"--buffers: only with --processes"};
        o.buffers = {buffer_kind::device};
    }
    if (o.timeout_s > 0) o.timeout_ms = int(std::min<long long>(o.timeout_s * 1000LL, 1LL << 30));
    if (o.group > 0 && o.processes)
        throw usage_error{"--group: with virtual ranks or one rank per device only (not --processes)"};
    return o;
}

// ---------------------------------------------------------------------------
// CUDA helpers
// ---------------------------------------------------------------------------

struct cuda_failure {
    std::string what;
};

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw cuda_failure{std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

// ---------------------------------------------------------------------------
// Verifiable data (on the device)
// ---------------------------------------------------------------------------

//! Value of rank r at element i: 1 + (i + 3r) mod m, m = min(7, 256 / n):
//! every partial sum is an integer <= 256, exact in float and bfloat16, so
//! results do not depend on the reduction order.
__host__ __device__ inline int pattern_mod(int n) {
    const int m = 256 / (n > 0 ? n : 1);
    return m < 1 ? 1 : (m > 7 ? 7 : m);
}
__host__ __device__ inline float pattern_value(int r, u64 i, int m) {
    return float(1 + (unsigned(i % unsigned(m)) + 3u * unsigned(r)) % unsigned(m));
}

//! What a buffer should hold.
enum class expect_kind : int { constant, pattern, sum, gather };
struct expect_spec {
    expect_kind kind = expect_kind::constant;
    int rank = 0;    //!< pattern: whose row
    int n = 1;       //!< sum: over ranks 0..n-1
    int m = 7;       //!< pattern modulus
    u64 first = 0;   //!< element index of the buffer's first element
    u64 block = 1;   //!< gather: elements per rank block
    float value = 0; //!< constant
};
constexpr float sentinel = -3.0f; // never a result: inputs and sums are >= 1

__device__ inline float expected_value(const expect_spec& e, u64 j) {
    switch (e.kind) {
    case expect_kind::constant: return e.value;
    case expect_kind::pattern: return pattern_value(e.rank, e.first + j, e.m);
    case expect_kind::sum: {
        const unsigned base = unsigned((e.first + j) % unsigned(e.m));
        unsigned s = 0;
        for (int q = 0; q < e.n; ++q) s += 1 + (base + 3u * unsigned(q)) % unsigned(e.m);
        return float(s);
    }
    case expect_kind::gather: return pattern_value(int(j / e.block), j % e.block, e.m);
    }
    return 0;
}

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ inline T from_float(float v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return __float2bfloat16(v);
}

template <class T>
__global__ void fill_kernel(T* p, u64 count, expect_spec e) {
    for (u64 j = u64(blockIdx.x) * blockDim.x + threadIdx.x; j < count; j += u64(gridDim.x) * blockDim.x)
        p[j] = from_float<T>(expected_value(e, j));
}

template <class T>
__global__ void count_wrong_kernel(const T* p, u64 count, expect_spec e, unsigned long long* wrong) {
    unsigned long long bad = 0;
    for (u64 j = u64(blockIdx.x) * blockDim.x + threadIdx.x; j < count; j += u64(gridDim.x) * blockDim.x)
        if (to_float(p[j]) != expected_value(e, j)) ++bad;
    if (bad) atomicAdd(wrong, bad);
}

unsigned grid_for(u64 count) {
    const u64 blocks = (count + 255) / 256;
    return unsigned(std::clamp<u64>(blocks, 1, 4096));
}

// ---------------------------------------------------------------------------
// Ranks, buffers, results
// ---------------------------------------------------------------------------

constexpr std::size_t guard_elems = 64;
constexpr std::size_t guard_bytes = 4096; // >= guard_elems * largest element

struct rank_state {
    int dev = 0;
    cudaStream_t stream = nullptr;
    void* in = nullptr;  //!< max_bytes + guard_bytes + -u elements (operands start at in_of<T>): plain_in or reg_in
    void* out = nullptr; //!< the same size (operands start at out_of<T>): plain_out or reg_out
    void* plain_in = nullptr; //!< cudaMalloc'd (buffer_kind device and staged); freed by release()
    void* plain_out = nullptr;
    void* reg_in = nullptr;   //!< comm.alloc'd (buffer_kind registered); go with the communicator
    void* reg_out = nullptr;
    void* user_in = nullptr;  //!< cudaMalloc'd and registered (buffer_kind user); freed by release()
    void* user_out = nullptr;
    chorus::gpu::buffer_handle user_in_h, user_out_h; //!< their registrations (deregistered by release())
    unsigned long long* wrong = nullptr;
};

struct row_result {
    std::size_t bytes = 0;
    std::size_t count = 0;
    double time_us = 0;
    double algbw = 0;
    double busbw = 0;
    double moved_bytes = 0;
    double moved_gbps = 0;
    double copy_ratio = 0;
    u64 wrong = 0;
};

struct table_summary {
    std::string label;
    double peak_busbw = 0;
    std::size_t peak_busbw_bytes = 0;
    double peak_ratio = 0;
    std::size_t peak_ratio_bytes = 0;
    std::size_t smallest_bytes = 0;
    double smallest_time_us = 0;
    double worst_time_us = 0;
    u64 wrong = 0;
    bool skipped = false;
    std::string note;
    std::string group_line; //!< --group: the summary's text (no bandwidth columns)
};

//! What launch() adds to a call's schedule arguments.
struct plan_ctx {
    const chorus::model::topology* topo = nullptr; //!< what automatic plans against
    u64 scratch_limit = 0;                         //!< the scratch per rank (0: as much as needed)
    int channel_budget = 0;                        //!< schedule_args::channel_budget, as the transport gives it
};

struct bench {
    options opt;
    std::vector<int> devices;            //!< per rank of the collective (every process's, with --processes)
    std::vector<int> distinct_devices;
    std::vector<rank_state> ranks;       //!< the ranks this process drives: ranks first, first + 1, ...
    std::vector<chorus::gpu::communicator> comms; //!< one per entry of `ranks`
    int world = 0;                       //!< ranks in the collective
    int first = 0;                       //!< the rank of ranks[0] (--processes: this process's MPI rank)
    buffer_kind buffers = buffer_kind::device; //!< where the operands of the current table live
    std::vector<std::size_t> sizes;
    int node_size = 0;
    //! What make_communicators plans automatic against: the CHORUS_MODEL file, else
    //! model::gpu_cluster_topology(node_size) (the world's own copy is not reachable).
    chorus::model::topology topo{};
    std::size_t scratch = 0;              //!< scratch per rank, as allocated
    double copy_gbps = 0;                 //!< sum over distinct devices
    std::vector<double> copy_per_device;
    std::FILE* csv = nullptr;
    std::FILE* json = nullptr; //!< -J
    std::size_t json_rows = 0;
    std::vector<table_summary> summaries;
    u64 wrong_total = 0;
#if CHORUS_BENCH_NCCL
    std::vector<ncclComm_t> nccl; //!< one per rank (ncclCommInitAll), where the NCCL column is measured
#endif
    //! NCCL's time per call (us) per (collective, type, count): measured once per run, by the first
    //! table that reaches the row, right after chorus's time for it.
    std::map<std::tuple<int, int, u64>, double> nccl_us;
    std::string nccl_note; //!< why there is no NCCL column (empty: there is one)

    int n() const { return world; }
    int local() const { return int(ranks.size()); }
    int processes() const { return opt.processes ? world : 1; }
    //! What the communicators resolve per-call tunings against (gpu_world::channel_budget:
    //! channel_budget_of the devices; one process per GPU: 0).
    int channel_budget = 0;
    plan_ctx ctx() const { return {&topo, scratch, channel_budget}; }
};

// ---------------------------------------------------------------------------
// Across processes (--processes): MPI_COMM_WORLD; without it, the value itself
// ---------------------------------------------------------------------------

double across_max(const bench& B, double v) {
#if CHORUS_BENCH_GPU_MPI
    if (B.opt.processes) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#else
    (void)B;
#endif
    return v;
}
u64 across_sum(const bench& B, u64 v) {
#if CHORUS_BENCH_GPU_MPI
    unsigned long long x = v;
    if (B.opt.processes) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    v = x;
#else
    (void)B;
#endif
    return v;
}
void barrier(const bench& B) {
#if CHORUS_BENCH_GPU_MPI
    if (B.opt.processes) MPI_Barrier(MPI_COMM_WORLD);
#else
    (void)B;
#endif
}

//! Says why the run failed: on stdout (process 0's is the table), and with
//! --processes on stderr too, naming the rank (the other processes' stdout
//! is /dev/null). Then, with --processes, stops every process (comm.abort,
//! MPI_Abort): a peer may be waiting in a collective or in MPI for this one.
void fail_run(bench& B, const std::string& why) {
    std::printf("# FAILED: %s\n", why.c_str());
    std::fflush(stdout);
#if CHORUS_BENCH_GPU_MPI
    if (B.opt.processes) {
        std::fprintf(stderr, "chorus_bench_gpu: rank %d: FAILED: %s; aborting every process\n", B.first, why.c_str());
        std::fflush(stderr);
        if (B.csv) std::fflush(B.csv);
        if (B.json) std::fflush(B.json);
        for (auto& c : B.comms) {
            try {
                c.abort(why);
            } catch (...) {
            }
        }
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
#else
    (void)B;
#endif
}

//! Per-call element counts of collective `c` for a nominal size in bytes
//! (0: the row is skipped, on every rank alike).
std::size_t count_for(coll_kind c, std::size_t nominal, std::size_t elem, int n) {
    return chorus_cli::nccl_count(c, nominal, elem, n); // nccl-tests' count (per rank: 16-byte groups)
}

//! Rank `rs`'s operands for element type T: -u elements past the start of its buffers.
template <class T>
T* in_of(const bench& B, const rank_state& rs) {
    return static_cast<T*>(rs.in) + B.opt.unalign;
}
template <class T>
T* out_of(const bench& B, const rank_state& rs) {
    return static_cast<T*>(rs.out) + B.opt.unalign;
}

//! The schedule arguments launch() builds for rank r (out-of-place calls;
//! Broadcast is in place by definition; sum is commutative, the copy-only
//! stand-in operator of AllGather and Broadcast is not).
chorus::schedule_args args_for(coll_kind c, int r, int n, int root, u64 count, std::size_t elem, int node_size,
                               const plan_ctx& pc) {
    chorus::schedule_args a{};
    a.coll = to_collective(c);
    a.rank = r;
    a.nranks = n;
    a.root = root;
    a.count = count;
    a.elem_bytes = elem;
    a.in_place = c == coll_kind::broadcast;
    a.node_size = node_size;
    a.commutative = coll_uses_op(c);
    a.topo = pc.topo;
    a.scratch_limit_bytes = pc.scratch_limit;
    a.channel_budget = pc.channel_budget;
    return a;
}

//! What automatic runs for this call on every rank: the algorithm's name,
//! or "mixed:" and each rank's pick when the ranks disagree (they must not).
std::string automatic_choice(coll_kind c, int n, int root, u64 count, std::size_t elem, int node_size,
                             const plan_ctx& pc) {
    const auto first = chorus::automatic::choose(args_for(c, 0, n, root, count, elem, node_size, pc));
    std::string all = chorus::model::algorithm_name(first);
    bool same = true;
    for (int r = 1; r < n; ++r) {
        const auto x = chorus::automatic::choose(args_for(c, r, n, root, count, elem, node_size, pc));
        same = same && x == first;
        all += std::string(",") + chorus::model::algorithm_name(x);
    }
    return same ? std::string(chorus::model::algorithm_name(first)) : "mixed:" + all;
}

//! The algorithm deterministic<> runs for this call on rank 0 (direct or two_shot for the reductions).
std::string deterministic_choice(const chorus::policy& pol, coll_kind c, int n, int root, u64 count, std::size_t elem,
                                 int node_size, const plan_ctx& pc) {
    switch (chorus::make_schedule(pol, args_for(c, 0, n, root, count, elem, node_size, pc)).kind) {
    case chorus::schedule_kind::ring: return "ring";
    case chorus::schedule_kind::direct: return "direct";
    case chorus::schedule_kind::two_shot: return "two_shot";
    default: return "other";
    }
}

//! Bytes every rank's schedule reads and writes for one collective.
double schedule_traffic(const chorus::policy& pol, coll_kind c, int n, int root, u64 count, std::size_t elem,
                        int node_size, const plan_ctx& pc) {
    double total = 0;
    for (int r = 0; r < n; ++r) {
        const chorus::any_schedule sch =
            chorus::make_schedule(pol, args_for(c, r, n, root, count, elem, node_size, pc));
        const u64 units = sch.units();
        for (int ch = 0; ch < sch.channels(); ++ch) {
            for (u64 p = 0; p < units; ++p) {
                const chorus::step s = sch.unit(ch, p);
                if (s.count == 0) continue;
                const int srcs = s.fan_in >= 2 ? int(s.fan_in)
                                               : int(s.src0.loc != chorus::where::none) +
                                                     int(s.src1.loc != chorus::where::none);
                const int dsts = int(s.dst.loc != chorus::where::none) + int(s.dst2.loc != chorus::where::none);
                total += double(s.count) * double(elem) * double(srcs + dsts);
            }
        }
    }
    return total;
}

std::size_t scratch_needed(const chorus::policy& pol, coll_kind c, int n, int root, u64 count, std::size_t elem,
                           int node_size, const plan_ctx& pc) {
    std::size_t most = 0;
    for (int r = 0; r < n; ++r) {
        const chorus::any_schedule sch =
            chorus::make_schedule(pol, args_for(c, r, n, root, count, elem, node_size, pc));
        most = std::max<std::size_t>(most, std::size_t(sch.scratch_elems()) * elem);
    }
    return most;
}

//! One call of collective `c` with policy `pol` by one rank on its stream:
//! what chorus::all_reduce<Algo>(..., stream) etc. run with policy_of<Algo>
//! (chorus::detail::*_run with the stream as an argument).
template <class T>
void issue(const chorus::policy& pol, coll_kind c, chorus::gpu::communicator& comm, const T* in, T* out, u64 count,
           int n, int root, cudaStream_t s) {
    namespace cd = chorus::detail;
    const cd::stream_arg on = cd::on_stream(s);
    switch (c) {
    case coll_kind::all_reduce:
        (void)cd::all_reduce_run(comm, pol, std::span<const T>(in, count), std::span<T>(out, count), chorus::sum{},
                                 false, on);
        break;
    case coll_kind::all_gather:
        (void)cd::all_gather_run(comm, pol, std::span<const T>(in, count), std::span<T>(out, count * u64(n)), false,
                                 on);
        break;
    case coll_kind::reduce_scatter:
        (void)cd::reduce_scatter_run(comm, pol, std::span<const T>(in, count * u64(n)), std::span<T>(out, count),
                                     chorus::sum{}, false, on);
        break;
    case coll_kind::broadcast: (void)cd::broadcast_run(comm, pol, std::span<T>(out, count), root, false, on); break;
    case coll_kind::reduce:
        (void)cd::reduce_run(comm, pol, std::span<const T>(in, count), std::span<T>(out, count), chorus::sum{}, root,
                             false, on);
        break;
    }
}

void sync_all(bench& B) { // this process's ranks
    for (const rank_state& rs : B.ranks) {
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaStreamSynchronize(rs.stream), "cudaStreamSynchronize");
    }
    for (auto& c : B.comms) c.check();
}

//! The wrong elements this process's ranks counted (their device
//! counters), once their work is done.
u64 wrong_here(bench& B) {
    sync_all(B);
    u64 wrong = 0;
    for (const rank_state& rs : B.ranks) {
        unsigned long long w = 0;
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaMemcpy(&w, rs.wrong, sizeof w, cudaMemcpyDeviceToHost), "cudaMemcpy");
        wrong += w;
    }
    return wrong;
}

template <class T>
void launch_fill(const rank_state& rs, T* p, u64 count, const expect_spec& e) {
    if (count == 0) return;
    fill_kernel<T><<<grid_for(count), 256, 0, rs.stream>>>(p, count, e);
    cuda_ok(cudaGetLastError(), "fill_kernel");
}
template <class T>
void launch_count(const rank_state& rs, const T* p, u64 count, const expect_spec& e) {
    if (count == 0) return;
    count_wrong_kernel<T><<<grid_for(count), 256, 0, rs.stream>>>(p, count, e, rs.wrong);
    cuda_ok(cudaGetLastError(), "count_wrong_kernel");
}

//! One call on fresh verifiable inputs; returns the wrong elements over all
//! ranks (results, guards, out-of-place inputs).
template <class T>
u64 check_once(bench& B, const chorus::policy& pol, coll_kind c, u64 count, int root) {
    const int n = B.n();
    const int m = pattern_mod(n);
    const u64 in_count = c == coll_kind::reduce_scatter ? count * u64(n) : count;
    const u64 out_count = c == coll_kind::all_gather ? count * u64(n) : count;
    expect_spec sent{};
    sent.value = sentinel;
    for (int l = 0; l < B.local(); ++l) {
        const int r = B.first + l;
        const rank_state& rs = B.ranks[std::size_t(l)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        T* in = in_of<T>(B, rs);
        T* out = out_of<T>(B, rs);
        cuda_ok(cudaMemsetAsync(rs.wrong, 0, sizeof(unsigned long long), rs.stream), "cudaMemsetAsync");
        launch_fill<T>(rs, out, out_count + guard_elems, sent);
        expect_spec mine{};
        mine.kind = expect_kind::pattern;
        mine.rank = c == coll_kind::broadcast ? root : r;
        mine.m = m;
        if (c == coll_kind::broadcast) {
            if (r == root) launch_fill<T>(rs, out, count, mine);
        } else {
            launch_fill<T>(rs, in, in_count, mine);
        }
    }
    for (int l = 0; l < B.local(); ++l) {
        rank_state& rs = B.ranks[std::size_t(l)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        issue<T>(pol, c, B.comms[std::size_t(l)], in_of<T>(B, rs), out_of<T>(B, rs), count, n, root, rs.stream);
    }
    for (int l = 0; l < B.local(); ++l) {
        const int r = B.first + l;
        const rank_state& rs = B.ranks[std::size_t(l)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        const T* in = in_of<T>(B, rs);
        const T* out = out_of<T>(B, rs);
        launch_count<T>(rs, out + out_count, guard_elems, sent); // nothing written past the output
        expect_spec want{};
        want.n = n;
        want.m = m;
        switch (c) {
        case coll_kind::all_reduce: want.kind = expect_kind::sum; break;
        case coll_kind::all_gather:
            want.kind = expect_kind::gather;
            want.block = count;
            break;
        case coll_kind::reduce_scatter:
            want.kind = expect_kind::sum;
            want.first = u64(r) * count;
            break;
        case coll_kind::broadcast:
            want.kind = expect_kind::pattern;
            want.rank = root;
            break;
        case coll_kind::reduce:
            if (r == root) want.kind = expect_kind::sum;
            else want = sent; // a non-root's out is untouched
            break;
        }
        launch_count<T>(rs, out, out_count, want);
        if (c != coll_kind::broadcast) { // out-of-place input never modified
            expect_spec mine{};
            mine.kind = expect_kind::pattern;
            mine.rank = r;
            mine.m = m;
            launch_count<T>(rs, in, in_count, mine);
        }
    }
    return across_sum(B, wrong_here(B)); // --processes: over every process's ranks
}

//! What one row's timing gives: seconds per call, and the host's seconds
//! per call to issue them (-C: launches, without the final stream syncs).
struct timed {
    double secs = 0;
    double cpu_secs = 0;
};

//! One instantiated graph per rank of this process, destroyed with it, and
//! their timing: one untimed launch of every graph, then -G timed launches
//! (host clock around launching every rank's graph and synchronising every
//! stream) / (launches x calls).
struct rank_graphs {
    bench& B;
    std::vector<cudaGraphExec_t> execs;
    explicit rank_graphs(bench& b) : B(b), execs(b.ranks.size(), nullptr) {}
    rank_graphs(const rank_graphs&) = delete;
    rank_graphs& operator=(const rank_graphs&) = delete;
    ~rank_graphs() {
        for (auto x : execs)
            if (x) (void)cudaGraphExecDestroy(x);
    }
    //! Takes g (destroys it); rank r's device is current.
    void instantiate(int r, cudaGraph_t g) {
        const cudaError_t e = cudaGraphInstantiate(&execs[std::size_t(r)], g, 0);
        (void)cudaGraphDestroy(g);
        cuda_ok(e, "cudaGraphInstantiate");
        cuda_ok(cudaGraphUpload(execs[std::size_t(r)], B.ranks[std::size_t(r)].stream), "cudaGraphUpload");
    }
    void launch_all(int launches) {
        for (int l = 0; l < launches; ++l)
            for (std::size_t r = 0; r < execs.size(); ++r) {
                cuda_ok(cudaSetDevice(B.ranks[r].dev), "cudaSetDevice");
                cuda_ok(cudaGraphLaunch(execs[r], B.ranks[r].stream), "cudaGraphLaunch");
            }
    }
    timed time(long long calls) {
        launch_all(1); // untimed: first launch of a graph
        sync_all(B);
        barrier(B);
        timed t;
        const auto t0 = clock_type::now();
        launch_all(B.opt.cudagraph);
        const double per = double(calls) * B.opt.cudagraph;
        t.cpu_secs = std::chrono::duration<double>(clock_type::now() - t0).count() / per;
        sync_all(B);
        t.secs = std::chrono::duration<double>(clock_type::now() - t0).count() / per;
        return t;
    }
};

//! Time per call of every rank: -n iterations of -m calls, captured into one
//! graph per rank, launched once untimed, then -G times timed (nccl-tests
//! -G); or with -G 0 issued eagerly (-z 1/2: every stream synchronised after
//! each call, -z 3: after each iteration). What one "call" is: whatever
//! issue_rank(r) issues on rank r's stream (time_calls: one collective;
//! --group: N AllReduces, one by one or in a group).
template <class F>
timed time_issue(bench& B, F&& issue_rank) {
    const options& o = B.opt;
    const long long calls = o.timed_calls();
    const int local = B.local(); // the ranks of this process: r below indexes B.ranks and B.comms
    // --processes: every process starts after a barrier; a row's time is the slowest process's.
    auto combine = [&](timed x) {
        x.secs = across_max(B, x.secs);
        x.cpu_secs = across_max(B, x.cpu_secs);
        return x;
    };
    timed t;
    if (o.cudagraph == 0) {
        barrier(B);
        const auto t0 = clock_type::now();
        for (int it = 0; it < o.iters; ++it) {
            for (int k = 0; k < o.agg_iters; ++k) {
                for (int r = 0; r < local; ++r) {
                    cuda_ok(cudaSetDevice(B.ranks[std::size_t(r)].dev), "cudaSetDevice");
                    issue_rank(r);
                }
                if (o.blocking == 1 || o.blocking == 2) sync_all(B);
            }
            if (o.blocking == 3) sync_all(B);
        }
        t.cpu_secs = std::chrono::duration<double>(clock_type::now() - t0).count() / double(calls);
        sync_all(B);
        t.secs = std::chrono::duration<double>(clock_type::now() - t0).count() / double(calls);
        return combine(t);
    }
    rank_graphs graphs(B);
    for (int r = 0; r < local; ++r) {
        rank_state& rs = B.ranks[std::size_t(r)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cudaGraph_t g = nullptr;
        cuda_ok(cudaStreamBeginCapture(rs.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
        try {
            for (long long i = 0; i < calls; ++i) issue_rank(r);
        } catch (...) {
            (void)cudaStreamEndCapture(rs.stream, &g);
            if (g) (void)cudaGraphDestroy(g);
            throw;
        }
        cuda_ok(cudaStreamEndCapture(rs.stream, &g), "cudaStreamEndCapture");
        graphs.instantiate(r, g);
    }
    return combine(graphs.time(calls));
}

//! One collective per call (see time_issue).
template <class T>
timed time_calls(bench& B, const chorus::policy& pol, coll_kind c, u64 count, int root) {
    const int n = B.n();
    return time_issue(B, [&](int r) {
        rank_state& rs = B.ranks[std::size_t(r)];
        issue<T>(pol, c, B.comms[std::size_t(r)], in_of<T>(B, rs), out_of<T>(B, rs), count, n, root, rs.stream);
    });
}

#if CHORUS_BENCH_NCCL
void nccl_ok(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw cuda_failure{std::string(what) + ": " + ncclGetErrorString(r)};
}
template <class T>
constexpr ncclDataType_t nccl_type() {
    if constexpr (std::is_same_v<T, float>) return ncclFloat32;
    else return ncclBfloat16;
}

//! One call of every rank in one NCCL group: the same operands, counts and
//! root as issue() gives chorus (Broadcast in place on `out`).
template <class T>
void issue_nccl(bench& B, coll_kind c, u64 count, int root) {
    const ncclDataType_t t = nccl_type<T>();
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < B.local(); ++r) {
        rank_state& rs = B.ranks[std::size_t(r)];
        const T* in = in_of<T>(B, rs);
        T* out = out_of<T>(B, rs);
        ncclComm_t comm = B.nccl[std::size_t(r)];
        switch (c) {
        case coll_kind::all_reduce:
            nccl_ok(ncclAllReduce(in, out, count, t, ncclSum, comm, rs.stream), "ncclAllReduce");
            break;
        case coll_kind::all_gather: nccl_ok(ncclAllGather(in, out, count, t, comm, rs.stream), "ncclAllGather"); break;
        case coll_kind::reduce_scatter:
            nccl_ok(ncclReduceScatter(in, out, count, t, ncclSum, comm, rs.stream), "ncclReduceScatter");
            break;
        case coll_kind::broadcast:
            nccl_ok(ncclBroadcast(out, out, count, t, root, comm, rs.stream), "ncclBroadcast");
            break;
        case coll_kind::reduce:
            nccl_ok(ncclReduce(in, out, count, t, ncclSum, root, comm, rs.stream), "ncclReduce");
            break;
        }
    }
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
}

//! NCCL's time per call, measured as time_calls measures chorus's (the same
//! warm-up, -n x -m calls, -G graph launches or eager with -G 0). Graphs as
//! nccl-tests makes them: every rank's stream captured at once
//! (thread-local mode), the group calls, one graph per stream.
template <class T>
double time_nccl(bench& B, coll_kind c, u64 count, int root) {
    const options& o = B.opt;
    const long long calls = o.timed_calls();
    for (int i = 0; i < std::max(o.warmup, 1); ++i) issue_nccl<T>(B, c, count, root);
    sync_all(B);
    if (o.cudagraph == 0) {
        const auto t0 = clock_type::now();
        for (long long i = 0; i < calls; ++i) issue_nccl<T>(B, c, count, root);
        sync_all(B);
        return std::chrono::duration<double>(clock_type::now() - t0).count() / double(calls);
    }
    rank_graphs graphs(B);
    for (auto& rs : B.ranks) {
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaStreamBeginCapture(rs.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    }
    std::vector<cudaGraph_t> g(B.ranks.size(), nullptr);
    auto end_all = [&] {
        for (std::size_t r = 0; r < B.ranks.size(); ++r) {
            (void)cudaSetDevice(B.ranks[r].dev);
            const cudaError_t e = cudaStreamEndCapture(B.ranks[r].stream, &g[r]);
            if (e != cudaSuccess) throw cuda_failure{std::string("cudaStreamEndCapture (NCCL): ") + cudaGetErrorString(e)};
        }
    };
    try {
        for (long long i = 0; i < calls; ++i) issue_nccl<T>(B, c, count, root);
    } catch (...) {
        try {
            end_all();
        } catch (...) {
        }
        for (auto x : g)
            if (x) (void)cudaGraphDestroy(x);
        throw;
    }
    end_all();
    for (int r = 0; r < B.local(); ++r) {
        cuda_ok(cudaSetDevice(B.ranks[std::size_t(r)].dev), "cudaSetDevice");
        graphs.instantiate(r, g[std::size_t(r)]);
    }
    return graphs.time(calls).secs;
}

//! One communicator per rank, where the NCCL column is measured (else B.nccl_note says why not).
void init_nccl(bench& B) {
    if (!B.opt.nccl) {
        B.nccl_note = "--nccl 0";
        return;
    }
    if (B.opt.processes || B.distinct_devices.size() < 2 || B.distinct_devices.size() != B.devices.size()) {
        B.nccl_note = "NCCL needs one rank per device and more than one device (this run: " +
                      std::to_string(B.devices.size()) + " rank(s) on " + std::to_string(B.distinct_devices.size()) +
                      " device(s)" + (B.opt.processes ? ", --processes" : "") + ")";
        return;
    }
    B.nccl.assign(B.devices.size(), nullptr);
    const ncclResult_t r = ncclCommInitAll(B.nccl.data(), int(B.devices.size()), B.devices.data());
    if (r != ncclSuccess) {
        B.nccl.clear();
        B.nccl_note = std::string("ncclCommInitAll failed: ") + ncclGetErrorString(r);
    }
}
void release_nccl(bench& B) {
    for (ncclComm_t c : B.nccl) (void)ncclCommDestroy(c);
    B.nccl.clear();
}
#else
void init_nccl(bench& B) { B.nccl_note = "built without NCCL (nccl.h or libnccl not found)"; }
void release_nccl(bench&) {}
#endif

//! NCCL's time per call (us) for a row, or a negative value where there
//! is no NCCL column. A failing NCCL call leaves the column empty from
//! then on (said once); chorus's measurements go on.
template <class T>
double nccl_row_us(bench& B, coll_kind c, type_kind tk, u64 count, int root) {
#if CHORUS_BENCH_NCCL
    if (B.nccl.empty()) return -1;
    const auto key = std::make_tuple(int(c), int(tk), count);
    if (const auto it = B.nccl_us.find(key); it != B.nccl_us.end()) return it->second;
    try {
        const double us = time_nccl<T>(B, c, count, root) * 1e6;
        B.nccl_us[key] = us;
        return us;
    } catch (const cuda_failure& e) {
        B.nccl_note = "NCCL failed (" + e.what + "); no NCCL times from here on";
        std::printf("# %s\n", B.nccl_note.c_str());
        release_nccl(B);
        return -1;
    }
#else
    (void)B, (void)c, (void)tk, (void)count, (void)root;
    return -1;
#endif
}

//! The least bytes any AllReduce (etc.) of n ranks on one device must read
//! and write in that device's memory: every input read once, every output
//! written once (S = the row's nccl-tests size, count per rank as issue()).
double minimum_bytes(coll_kind c, int n, u64 count, std::size_t elem) {
    const double b = double(count) * double(elem), N = n;
    switch (c) {
    case coll_kind::all_reduce: return 2 * N * b;          // read n inputs, write n outputs
    case coll_kind::all_gather: return N * b + N * N * b;  // read n blocks, write n whole outputs
    case coll_kind::reduce_scatter: return N * N * b + N * b;
    case coll_kind::broadcast: return N * b;               // read the root's, write n - 1 others (in place)
    case coll_kind::reduce: return N * b + b;              // read n inputs, write the root's output
    }
    return 0;
}

//! Blocks the kernel of this (T, Op) can keep resident on `dev` at once:
//! all ranks on one device must be resident together (they wait for each
//! other), else they time out.
template <class T>
long long resident_blocks(coll_kind c, int dev) {
    int per_sm = 0;
    const cudaError_t e =
        coll_uses_op(c)
            ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chorus::detail::collective_kernel<T, chorus::sum>,
                                                            chorus::detail::collective_block_threads, 0)
            : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                  &per_sm, chorus::detail::collective_kernel<T, chorus::detail::copy_only>,
                  chorus::detail::collective_block_threads, 0);
    cuda_ok(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    int sms = 0;
    cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    return (long long)per_sm * sms;
}

std::string algo_label(const std::string& a, const chorus::policy& pol, int node_size) {
    // 0: chosen per call (algo/policy.hpp resolve_tuning).
    const std::string p =
        "<channels=" + (pol.tune.channels == 0 ? std::string("per-call") : std::to_string(pol.tune.channels)) +
        ",chunk=" + (pol.tune.chunk_bytes == 0 ? std::string("per-call") : human_bytes(std::size_t(pol.tune.chunk_bytes))) +
        ">";
    if (a == "hierarchical")
        return "hierarchical<ring" + p + ",ring" + p + ">(ranks_per_node=" + std::to_string(node_size) + ")";
    if (a == "automatic")
        return "automatic(default tunings, chosen per call; column 'chosen': its pick per row" +
               (node_size ? ", ranks_per_node=" + std::to_string(node_size) : std::string()) + ")";
    if (a == "deterministic") return "deterministic<ring" + p + ">(column 'chosen': the schedule per row)";
    return a + p;
}

void print_table_header(const options& o, const std::string& title, bool chosen) {
    std::printf("#\n# %s\n", title.c_str());
    std::printf("#%14s %11s %6s %6s %5s %11s %9s %9s %7s %10s %7s %10s %10s%s%s\n", "size", "count", "type", "redop",
                "root", o.report_cputime ? "cputime" : "time", "algbw", "busbw", "#wrong", "moved", "/copy", "nccl",
                "limit", chosen ? "  chosen" : "", o.report_timestamps ? "  timestamp" : "");
    std::printf("#%14s %11s %6s %6s %5s %11s %9s %9s %7s %10s %7s %10s %10s\n", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "", "(GB/s)", "", "(us)", "(us)");
    std::fflush(stdout);
}

//! Every size of one collective for one policy (named `ak`) and element type.
template <class T>
void run_table(bench& B, const std::string& ak, const chorus::policy& pol, type_kind tk, coll_kind c) {
    const int n = B.n();
    const int root = coll_uses_root(c) ? B.opt.root : -1;
    const int call_root = root < 0 ? 0 : root;
    const std::string algo = algo_label(ak, pol, B.node_size);
    const bool chooses = ak == "automatic" || ak == "deterministic"; // a 'chosen' column
    table_summary sum;
    sum.label = std::string(coll_name(c)) + " " + type_name(tk) + " " + algo + " ranks=" + std::to_string(n) +
                " devices=" + std::to_string(B.distinct_devices.size()) +
                (B.opt.processes ? " processes=" + std::to_string(B.processes()) + " buffers=" + buffer_name(B.buffers)
                                 : std::string());
    print_table_header(B.opt, sum.label, chooses);

    // All ranks of a device must be resident at once.
    {
        const chorus::any_schedule sch =
            chorus::make_schedule(pol, args_for(c, 0, n, call_root, 1, sizeof(T), B.node_size, B.ctx()));
        for (int d : B.distinct_devices) {
            const long long on_dev = std::count(B.devices.begin(), B.devices.end(), d);
            cuda_ok(cudaSetDevice(d), "cudaSetDevice");
            const long long avail = resident_blocks<T>(c, d);
            const long long need = on_dev * sch.channels();
            if (need > avail) {
                sum.skipped = true;
                sum.note = "needs " + std::to_string(need) + " co-resident blocks of 512 threads on device " +
                           std::to_string(d) + ", which holds " + std::to_string(avail);
                std::printf("# skipped: %s\n", sum.note.c_str());
                B.summaries.push_back(sum);
                return;
            }
        }
    }

    const char* redop = coll_uses_op(c) ? "sum" : "none";
    bool first_row = true;
    for (int cycle = 0; B.opt.run_cycles == 0 || cycle < B.opt.run_cycles; ++cycle)
    for (const std::size_t nominal : B.sizes) {
        const u64 count = count_for(c, nominal, sizeof(T), n);
        if (count == 0) continue;
        row_result row;
        row.count = std::size_t(count);
        row.bytes = chorus_cli::nccl_size_bytes(c, std::size_t(count), sizeof(T), n);

        // Warm-up: eager calls (the inputs are whatever the last check left: any data will do).
        for (int i = 0; i < B.opt.warmup; ++i)
            for (int l = 0; l < B.local(); ++l) {
                rank_state& rs = B.ranks[std::size_t(l)];
                cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
                issue<T>(pol, c, B.comms[std::size_t(l)], in_of<T>(B, rs), out_of<T>(B, rs), count, n, call_root,
                         rs.stream);
            }
        sync_all(B);
        for (int k = 0; k < B.opt.check; ++k) row.wrong += check_once<T>(B, pol, c, count, call_root); // -c N
        const timed tm = time_calls<T>(B, pol, c, count, call_root);
        const double secs = B.opt.report_cputime ? tm.cpu_secs : tm.secs; // -C: the host's time to issue

        row.time_us = secs * 1e6;
        row.algbw = chorus_cli::nccl_algbw(c, std::size_t(count), sizeof(T), n, secs);
        row.busbw = chorus_cli::nccl_busbw(c, std::size_t(count), sizeof(T), n, secs);
        row.moved_bytes = schedule_traffic(pol, c, n, call_root, count, sizeof(T), B.node_size, B.ctx());
        const std::string chosen =
            ak == "automatic"       ? automatic_choice(c, n, call_root, count, sizeof(T), B.node_size, B.ctx())
            : ak == "deterministic" ? deterministic_choice(pol, c, n, call_root, count, sizeof(T), B.node_size, B.ctx())
                                    : ak;
        row.moved_gbps = row.moved_bytes / (row.time_us * 1e-6) / 1e9;
        row.copy_ratio = B.copy_gbps > 0 ? row.moved_gbps / B.copy_gbps : 0;
        // NCCL's time for the same row (right after chorus's), and on one
        // device the physical limit: the least bytes moved / copy bandwidth.
        const double nccl_us = nccl_row_us<T>(B, c, tk, count, call_root);
        const double limit_us = B.distinct_devices.size() == 1 && B.copy_gbps > 0
                                    ? minimum_bytes(c, n, count, sizeof(T)) / (B.copy_gbps * 1e9) * 1e6
                                    : -1;
        const auto cell = [](double v) { // "%10.2f", or "-" (and empty in the CSV) where not measured
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.2f", v);
            return v < 0 ? std::string() : std::string(buf);
        };
        const std::string nccl_cell = cell(nccl_us), limit_cell = cell(limit_us);

        const std::string stamp = B.opt.report_timestamps ? "  " + chorus_cli::timestamp_now() : "";
        std::printf(" %14zu %11zu %6s %6s %5d %11.2f %9.2f %9.2f %7" PRIu64 " %10.1f %7.3f %10s %10s%s%s%s\n",
                    row.bytes, row.count, type_name(tk), redop, root, row.time_us, row.algbw, row.busbw, row.wrong,
                    row.moved_gbps, row.copy_ratio, nccl_us < 0 ? "-" : nccl_cell.c_str(),
                    limit_us < 0 ? "-" : limit_cell.c_str(), chooses ? "  " : "", chooses ? chosen.c_str() : "",
                    stamp.c_str());
        std::fflush(stdout);
        if (B.json) {
            std::fprintf(B.json,
                         "%s\n    {\"collective\": \"%s\", \"type\": \"%s\", \"algo\": \"%s\", \"channels\": %d, "
                         "\"chunk_bytes\": %zu, \"size_bytes\": %zu, \"count\": %zu, \"root\": %d, \"time_us\": %.3f, "
                         "\"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"moved_gbps\": %.6f, \"copy_ratio\": %.6f, "
                         "\"wrong\": %" PRIu64 ", \"chosen\": \"%s\", \"buffers\": \"%s\", \"nccl_time_us\": %s, "
                         "\"limit_us\": %s}",
                         B.json_rows++ ? "," : "", coll_name(c), type_name(tk), ak.c_str(), pol.tune.channels,
                         std::size_t(pol.tune.chunk_bytes), row.bytes, row.count, root, row.time_us, row.algbw,
                         row.busbw, row.moved_gbps, row.copy_ratio, row.wrong, chosen.c_str(), buffer_name(B.buffers),
                         nccl_us < 0 ? "null" : nccl_cell.c_str(), limit_us < 0 ? "null" : limit_cell.c_str());
            std::fflush(B.json);
        }
        if (B.csv) {
            std::fprintf(B.csv,
                         "%s,%s,%s,%d,%zu,%d,%zu,%d,%d,%d,%d,%zu,%zu,%.3f,%.4f,%.4f,%.0f,%.4f,%.4f,%.5f,%" PRIu64
                         ",%s,%d,%s,%s,%s\n",
                         coll_name(c), type_name(tk), ak.c_str(), pol.tune.channels,
                         std::size_t(pol.tune.chunk_bytes), n, B.distinct_devices.size(), B.node_size,
                         B.opt.cudagraph, B.opt.iters, B.opt.warmup, row.bytes, row.count, row.time_us, row.algbw,
                         row.busbw, row.moved_bytes, row.moved_gbps, B.copy_gbps, row.copy_ratio, row.wrong,
                         chosen.c_str(), B.processes(), buffer_name(B.buffers), nccl_cell.c_str(), limit_cell.c_str());
            std::fflush(B.csv);
        }

        if (row.busbw > sum.peak_busbw) {
            sum.peak_busbw = row.busbw;
            sum.peak_busbw_bytes = row.bytes;
        }
        if (row.copy_ratio > sum.peak_ratio) {
            sum.peak_ratio = row.copy_ratio;
            sum.peak_ratio_bytes = row.bytes;
        }
        if (first_row) {
            sum.smallest_bytes = row.bytes;
            sum.smallest_time_us = row.time_us;
            first_row = false;
        }
        sum.worst_time_us = std::max(sum.worst_time_us, row.time_us);
        sum.wrong += row.wrong;
        B.wrong_total += row.wrong;
    }
    if (first_row) {
        sum.skipped = true;
        sum.note = "no size gives a nonzero count";
    }
    B.summaries.push_back(sum);
}

void print_summary(const table_summary& s) {
    if (s.skipped) {
        std::printf("# summary %s: skipped (%s)\n", s.label.c_str(), s.note.c_str());
        return;
    }
    if (!s.group_line.empty()) {
        std::printf("# summary %s: %s, #wrong %" PRIu64 "\n", s.label.c_str(), s.group_line.c_str(), s.wrong);
        return;
    }
    std::printf("# summary %s: peak busbw %.2f GB/s at %s, peak /copy %.3f at %s, smallest %s %.2f us, "
                "worst time %.2f us, #wrong %" PRIu64 "\n",
                s.label.c_str(), s.peak_busbw, human_bytes(s.peak_busbw_bytes).c_str(), s.peak_ratio,
                human_bytes(s.peak_ratio_bytes).c_str(), human_bytes(s.smallest_bytes).c_str(), s.smallest_time_us,
                s.worst_time_us, s.wrong);
}

//! Calls f(std::type_identity<T>{}) for the element type `t`: the one
//! compile-time choice (a kernel per element type and operator).
template <class F>
void with_type(type_kind t, F&& f) {
    if (t == type_kind::float32) f(std::type_identity<float>{});
    else f(std::type_identity<__nv_bfloat16>{});
}

// ---------------------------------------------------------------------------
// Set-up
// ---------------------------------------------------------------------------

//! STREAM-counted (read + write) bandwidth of cudaMemcpyAsync D2D of
//! `bytes` on rank `rs`'s device: best of three timed batches.
double measure_copy(const rank_state& rs, std::size_t bytes) {
    cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
    const int reps = int(std::clamp<std::size_t>((std::size_t(2) << 30) / std::max<std::size_t>(bytes, 1), 5, 2000));
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    cuda_ok(cudaEventCreate(&e0), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&e1), "cudaEventCreate");
    double best = 0;
    for (int i = 0; i < 2; ++i) cuda_ok(cudaMemcpyAsync(rs.out, rs.in, bytes, cudaMemcpyDeviceToDevice, rs.stream), "copy");
    for (int t = 0; t < 3; ++t) {
        cuda_ok(cudaEventRecord(e0, rs.stream), "cudaEventRecord");
        for (int i = 0; i < reps; ++i)
            cuda_ok(cudaMemcpyAsync(rs.out, rs.in, bytes, cudaMemcpyDeviceToDevice, rs.stream), "cudaMemcpyAsync");
        cuda_ok(cudaEventRecord(e1, rs.stream), "cudaEventRecord");
        cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float ms = 0;
        cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (ms > 0) best = std::max(best, 2.0 * double(bytes) * reps / (double(ms) * 1e-3) / 1e9);
    }
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(e1);
    return best;
}

// ---------------------------------------------------------------------------
// --group N: many small AllReduces, one by one vs in a chorus::gpu::group
// ---------------------------------------------------------------------------

//! Elements between the operands of the N calls of --group (256-byte steps).
u64 group_stride(u64 count) { return (count + 63) / 64 * 64; }

//! Rank r's N AllReduces of `count` elements with policy `pol` on its
//! stream, call k on the k-th slice of its buffers; in one group when `grouped`.
template <class T>
void issue_group(bench& B, int r, const chorus::policy& pol, u64 count, bool grouped) {
    rank_state& rs = B.ranks[std::size_t(r)];
    chorus::gpu::communicator& comm = B.comms[std::size_t(r)];
    const u64 stride = group_stride(count);
    if (grouped) chorus::gpu::group_start(comm, rs.stream);
    try {
        for (int k = 0; k < B.opt.group; ++k)
            issue<T>(pol, coll_kind::all_reduce, comm, in_of<T>(B, rs) + u64(k) * stride,
                     out_of<T>(B, rs) + u64(k) * stride, count, B.n(), 0, rs.stream);
    } catch (...) {
        if (grouped) (void)comm.transport().group_drop();
        throw;
    }
    if (grouped) chorus::gpu::group_end(comm);
}

//! --group N: the N calls once on fresh inputs; the wrong elements of
//! every rank's N results (and nothing written between them).
template <class T>
u64 check_group(bench& B, const chorus::policy& pol, u64 count, bool grouped) {
    const int n = B.n();
    const int m = pattern_mod(n);
    const u64 stride = group_stride(count);
    const u64 span_elems = stride * u64(B.opt.group);
    expect_spec sent{};
    sent.value = sentinel;
    for (int l = 0; l < B.local(); ++l) {
        const rank_state& rs = B.ranks[std::size_t(l)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaMemsetAsync(rs.wrong, 0, sizeof(unsigned long long), rs.stream), "cudaMemsetAsync");
        launch_fill<T>(rs, out_of<T>(B, rs), span_elems, sent);
        expect_spec mine{};
        mine.kind = expect_kind::pattern;
        mine.rank = B.first + l;
        mine.m = m;
        for (int k = 0; k < B.opt.group; ++k) launch_fill<T>(rs, in_of<T>(B, rs) + u64(k) * stride, count, mine);
    }
    for (int l = 0; l < B.local(); ++l) {
        cuda_ok(cudaSetDevice(B.ranks[std::size_t(l)].dev), "cudaSetDevice");
        issue_group<T>(B, l, pol, count, grouped);
    }
    for (int l = 0; l < B.local(); ++l) {
        const rank_state& rs = B.ranks[std::size_t(l)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        expect_spec want{};
        want.kind = expect_kind::sum;
        want.n = n;
        want.m = m;
        for (int k = 0; k < B.opt.group; ++k) {
            const T* out = out_of<T>(B, rs) + u64(k) * stride;
            launch_count<T>(rs, out, count, want);
            launch_count<T>(rs, out + count, stride - count, sent); // the gap to the next call's result
        }
    }
    return wrong_here(B);
}

//! --group N: per size, N AllReduces per rank timed one by one (N launches
//! per rank) and in a group (one launch per group_kernel_calls of them), as
//! time_calls times one collective (graphs with -G, else eager); both
//! checked once per size (#wrong).
template <class T>
void run_group_table(bench& B, const std::string& ak, const chorus::policy& pol, type_kind tk) {
    const int n = B.n();
    const int N = B.opt.group;
    table_summary sum;
    sum.label = "AllReduce x" + std::to_string(N) + " grouped vs separate " + type_name(tk) + " " +
                algo_label(ak, pol, B.node_size) + " ranks=" + std::to_string(n) +
                " devices=" + std::to_string(B.distinct_devices.size());
    std::printf("#\n# %s: per size, %d AllReduces per rank (one buffer each), one by one (%d launches) and in a\n"
                "#   chorus::gpu::group (one launch per %d calls); times for all %d calls\n",
                sum.label.c_str(), N, N, chorus::detail::group_kernel_calls<T, chorus::sum>, N);
    std::printf("# %10s %12s %12s %12s %9s %8s\n", "size(B)", "count", "separate(us)", "grouped(us)", "speedup",
                "#wrong");
    std::size_t first_bytes = 0;
    double first_speedup = 0, least_speedup = 1e300;
    for (const std::size_t nominal : B.sizes) {
        const u64 count = count_for(coll_kind::all_reduce, nominal, sizeof(T), n);
        if (count == 0) continue;
        u64 wrong = 0;
        double us[2] = {0, 0};
        for (int grouped = 0; grouped < 2; ++grouped) {
            for (int i = 0; i < B.opt.warmup; ++i)
                for (int l = 0; l < B.local(); ++l) {
                    cuda_ok(cudaSetDevice(B.ranks[std::size_t(l)].dev), "cudaSetDevice");
                    issue_group<T>(B, l, pol, count, grouped != 0);
                }
            sync_all(B);
            wrong += check_group<T>(B, pol, count, grouped != 0);
            const timed tm = time_issue(B, [&](int r) { issue_group<T>(B, r, pol, count, grouped != 0); });
            us[grouped] = (B.opt.report_cputime ? tm.cpu_secs : tm.secs) * 1e6;
        }
        std::printf("  %10zu %12llu %12.2f %12.2f %8.2fx %8llu\n", nominal, (unsigned long long)count, us[0], us[1],
                    us[1] > 0 ? us[0] / us[1] : 0.0, (unsigned long long)wrong);
        std::fflush(stdout);
        sum.wrong += wrong;
        B.wrong_total += wrong;
        const double speedup = us[1] > 0 ? us[0] / us[1] : 0.0;
        if (first_bytes == 0) {
            first_bytes = nominal;
            first_speedup = speedup;
        }
        least_speedup = std::min(least_speedup, speedup);
        char line[160];
        std::snprintf(line, sizeof line, "grouped/separate speedup %.2fx at %s, least %.2fx", first_speedup,
                      human_bytes(first_bytes).c_str(), least_speedup);
        sum.group_line = line;
    }
    B.summaries.push_back(sum);
}

int run(bench& B) {
    const options& o = B.opt;
    int count = 0;
    cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (o.by_nccl_ranks) { // nccl-tests: -t x -g ranks, devices 0, 1, ... (one per rank)
        const int want = o.nthreads * o.ngpus;
        if (want > count) {
            std::fprintf(stderr,
                         "-t %d x -g %d: %d GPUs requested but only %d found (--ranks %d puts %d virtual ranks on "
                         "device 0)\n",
                         o.nthreads, o.ngpus, want, count, want, want);
            return 2;
        }
        for (int d = 0; d < want; ++d) B.devices.push_back(d);
    } else if (o.per_device) {
        for (int d = 0; d < count && d < chorus::detail::max_lane_ranks; ++d) B.devices.push_back(d);
    } else if (o.processes) { // one rank per process: the MPI rank; device 0, or rank % devices
#if CHORUS_BENCH_GPU_MPI
        int size = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &B.first);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (size > chorus::detail::max_lane_ranks) {
            std::fprintf(stderr, "--processes: %d processes; at most %d\n", size, chorus::detail::max_lane_ranks);
            return 2;
        }
        for (int q = 0; q < size; ++q) B.devices.push_back(o.spread_devices ? q % count : 0);
#endif
    } else {
        B.devices.assign(std::size_t(o.ranks), 0);
    }
    const int n = int(B.devices.size());
    B.world = n;
    const int local = o.processes ? 1 : n; // the ranks this process drives: first .. first + local - 1
    for (int d : B.devices)
        if (std::find(B.distinct_devices.begin(), B.distinct_devices.end(), d) == B.distinct_devices.end())
            B.distinct_devices.push_back(d);
    if (o.root >= n) {
        std::fprintf(stderr, "-r/--root %d: only %d ranks\n", o.root, n);
        return 2;
    }
    // The node size make_communicators will use (it falls back to CHORUS_RANKS_PER_NODE).
    const bool wants_hier = std::find(o.algos.begin(), o.algos.end(), "hierarchical") != o.algos.end();
    B.node_size = o.ranks_per_node;
    if (B.node_size == 0 && wants_hier && n >= 4 && n % 2 == 0) B.node_size = n / 2;
    if (B.node_size == 0) B.node_size = chorus::detail::env_ranks_per_node(); // as make_communicators reads it

    B.topo = chorus::model::model_file_given() ? chorus::model::current()
                                               : chorus::model::gpu_cluster_topology(B.node_size);

    B.sizes = chorus_bench::nccl_sizes(o);

    // Scratch: the most any planned call needs, found from the schedules
    // themselves (automatic: what its picks need when it may use the default
    // gpu::options::scratch_bytes).
    const std::size_t default_scratch = chorus::gpu::options{}.scratch_bytes;
    B.channel_budget = o.processes ? 0 : chorus::detail::channel_budget_of(B.devices);
    const plan_ctx sizing{&B.topo, default_scratch, B.channel_budget};
    std::size_t scratch = 0;
    for (const std::string& a : o.algos)
        for (int ch : o.channels)
            for (std::size_t chunk : o.chunks)
                for (type_kind t : o.types) {
                    const chorus::policy pol = policy_for(a, {ch, chunk});
                    const std::size_t elem = t == type_kind::float32 ? sizeof(float) : sizeof(__nv_bfloat16);
                    for (coll_kind c : o.colls)
                        for (std::size_t s : B.sizes) {
                            if (not_measured(a, c)) break;
                            const u64 cnt = count_for(c, s, elem, n);
                            if (cnt)
                                scratch = std::max(scratch, scratch_needed(pol, c, n, coll_uses_root(c) ? o.root : 0,
                                                                           cnt, elem, B.node_size, sizing));
                        }
                }
    scratch = std::max<std::size_t>(scratch, 4096);
    // automatic plans against the scratch the communicators have: give it at
    // least the default, so that it picks what it would for a default user.
    if (std::find(o.algos.begin(), o.algos.end(), "automatic") != o.algos.end())
        scratch = std::max(scratch, default_scratch);
    // Each operand buffer: the largest size, a guard, and room to shift by -u elements.
    // (--group N: N operands of the largest size, 256-byte aligned, one per call.)
    const std::size_t bytes = (o.group > 0 ? std::size_t(o.group) * ((o.max_bytes + 255) / 256 * 256) : o.max_bytes) +
                              guard_bytes + std::size_t(o.unalign) * 8;
    const std::size_t padded = (bytes + 255) / 256 * 256; // comm.alloc and staging align to 256 bytes
    const auto wants = [&](buffer_kind k) { return std::find(o.buffers.begin(), o.buffers.end(), k) != o.buffers.end(); };
    // --buffers staged: the scratch holds the schedule's scratch plus the staged in and out.
    if (wants(buffer_kind::staged)) scratch += 2 * padded + 4096;
    B.scratch = scratch;

    // Plain buffers (allocated and touched once) and streams, for this process's ranks.
    B.ranks.resize(std::size_t(local));
    for (int l = 0; l < local; ++l) {
        rank_state& rs = B.ranks[std::size_t(l)];
        rs.dev = B.devices[std::size_t(B.first + l)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaStreamCreateWithFlags(&rs.stream, cudaStreamNonBlocking), "cudaStreamCreate");
        cuda_ok(cudaMalloc(reinterpret_cast<void**>(&rs.wrong), sizeof(unsigned long long)), "cudaMalloc");
        if (!wants(buffer_kind::device) && !wants(buffer_kind::staged)) continue;
        cuda_ok(cudaMalloc(&rs.plain_in, bytes), "cudaMalloc (in)");
        cuda_ok(cudaMalloc(&rs.plain_out, bytes), "cudaMalloc (out)");
        cuda_ok(cudaMemsetAsync(rs.plain_in, 0, bytes, rs.stream), "cudaMemsetAsync");
        cuda_ok(cudaMemsetAsync(rs.plain_out, 0, bytes, rs.stream), "cudaMemsetAsync");
    }
    for (auto& rs : B.ranks) {
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaStreamSynchronize(rs.stream), "cudaStreamSynchronize");
    }

    chorus::gpu::options gopt;
    gopt.scratch_bytes = scratch;
    gopt.ranks_per_node = B.node_size;
    if (o.processes) {
#if CHORUS_BENCH_GPU_MPI
        // --buffers registered: in and out from the registered area (zero-filled when made).
        if (wants(buffer_kind::registered)) gopt.registered_bytes = 2 * padded + 4096;
        rank_state& rs = B.ranks[0];
        B.comms.push_back(chorus::gpu::make_communicator(MPI_COMM_WORLD, rs.dev, gopt));
        if (wants(buffer_kind::registered)) {
            const std::size_t floats = padded / sizeof(float);
            rs.reg_in = B.comms[0].alloc<float>(floats).data();
            rs.reg_out = B.comms[0].alloc<float>(floats).data();
        }
        // --buffers user: cudaMalloc'd in and out, registered (collective: every process).
        if (wants(buffer_kind::user)) {
            cuda_ok(cudaMalloc(&rs.user_in, bytes), "cudaMalloc (user in)");
            cuda_ok(cudaMalloc(&rs.user_out, bytes), "cudaMalloc (user out)");
            cuda_ok(cudaMemset(rs.user_in, 0, bytes), "cudaMemset");
            cuda_ok(cudaMemset(rs.user_out, 0, bytes), "cudaMemset");
            rs.user_in_h = B.comms[0].register_buffer(std::span<std::byte>(static_cast<std::byte*>(rs.user_in), bytes));
            rs.user_out_h = B.comms[0].register_buffer(std::span<std::byte>(static_cast<std::byte*>(rs.user_out), bytes));
        }
#endif
    } else {
        B.comms = chorus::gpu::make_communicators(B.devices, gopt);
    }
    for (auto& c : B.comms) c.set_timeout(std::chrono::milliseconds(o.timeout_ms));
    for (auto& rs : B.ranks) { // the copy below uses the first kind's buffers
        rs.in = rs.plain_in ? rs.plain_in : rs.reg_in ? rs.reg_in : rs.user_in;
        rs.out = rs.plain_out ? rs.plain_out : rs.reg_out ? rs.reg_out : rs.user_out;
    }

    // Copy ceiling: the largest size, on every device used, measured by its
    // first rank (--processes: its first process, while the others wait at a
    // barrier, so that each device copies alone); the sum over the devices.
    for (int d : B.distinct_devices) {
        const int owner = int(std::find(B.devices.begin(), B.devices.end(), d) - B.devices.begin());
        double g = 0;
        if (owner >= B.first && owner < B.first + local) g = measure_copy(B.ranks[std::size_t(owner - B.first)], o.max_bytes);
        barrier(B);
        g = across_max(B, g); // the owner's figure, on every process
        B.copy_per_device.push_back(g);
        B.copy_gbps += g;
    }
    init_nccl(B);

    // Header.
    int rt = 0, drv = 0;
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaDriverGetVersion(&drv);
    std::printf("# %s\n", o.command_line.c_str());
    std::printf("# chorus %d.%d.%d, GPU backend; CUDA runtime %d, driver %d\n", CHORUS_VERSION_MAJOR,
                CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH, rt, drv);
    for (std::size_t i = 0; i < B.distinct_devices.size(); ++i) {
        const int d = B.distinct_devices[i];
        cudaDeviceProp p{};
        cuda_ok(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
        const long long on_dev = std::count(B.devices.begin(), B.devices.end(), d);
        std::printf("# device %d: %s, sm_%d%d, %d SMs, %.1f GiB; %lld rank(s); copy (cudaMemcpyAsync D2D %s, "
                    "read+write): %.1f GB/s\n",
                    d, p.name, p.major, p.minor, p.multiProcessorCount, double(p.totalGlobalMem) / double(1 << 30),
                    on_dev, human_bytes(o.max_bytes).c_str(), B.copy_per_device[i]);
    }
    const char* conns = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    std::printf("# ranks %d on %zu device(s)%s; CUDA_DEVICE_MAX_CONNECTIONS=%s\n", n, B.distinct_devices.size(),
                o.processes                      ? " (one per MPI process: gpu::make_communicator(MPI_COMM_WORLD))"
                : o.per_device || o.by_nccl_ranks ? " (one per device)"
                                                  : " (virtual ranks)",
                conns ? conns : "(unset: 8)");
    if (o.processes) {
        const char* mps = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
        std::printf("# processes %d, devices %s; buffers:", n, o.spread_devices ? "rank % devices" : "all on device 0");
        for (buffer_kind k : o.buffers) std::printf(" %s", buffer_name(k));
        std::printf(" (registered: comm.alloc, zero-copy; staged: cudaMalloc, staged through the scratch; user: "
                    "cudaMalloc + comm.register_buffer, zero-copy); "
                    "CUDA_MPS_PIPE_DIRECTORY=%s\n",
                    mps ? mps : "(unset: processes sharing a device are time-sliced unless an MPS daemon serves them)");
    }
    {
        chorus_cli::nccl_options shown = o; // the header's nThread/nGpus: -t x -g, or one "GPU" per rank
        if (!o.by_nccl_ranks) {
            shown.nthreads = 1;
            shown.ngpus = n;
        }
        std::printf("%s\n", chorus_cli::nccl_config_line(shown).c_str());
    }
    for (const std::string& note : o.notes) std::printf("# %s\n", note.c_str());
    if (o.blocking != 0 && o.cudagraph == 0)
        std::printf("# Blocking Enabled: every rank's stream synchronised after each %s (-z %d)\n",
                    o.blocking == 3 ? "iteration" : "call", o.blocking);
    if (o.memory_report) {
        for (int d : B.distinct_devices) {
            std::size_t free_b = 0, total_b = 0;
            cuda_ok(cudaSetDevice(d), "cudaSetDevice");
            cuda_ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
            std::printf("# memory (-M): device %d: %.3f GiB used of %.3f GiB (buffers 2 x %s + scratch %zu B per "
                        "rank)\n",
                        d, double(total_b - free_b) / double(1 << 30), double(total_b) / double(1 << 30),
                        human_bytes(o.max_bytes + guard_bytes + std::size_t(o.unalign) * 8).c_str(), scratch);
        }
    }
    {
        long long most = 0;
        if (!o.processes) // one stream per process otherwise
            for (int d : B.distinct_devices)
                most = std::max<long long>(most, std::count(B.devices.begin(), B.devices.end(), d));
        const int limit = conns ? std::atoi(conns) : 8;
        if (most > limit)
            std::printf("# warning: %lld ranks share a device but CUDA_DEVICE_MAX_CONNECTIONS is %d: "
                        "their kernels may not run concurrently (timeouts); export CUDA_DEVICE_MAX_CONNECTIONS=32\n",
                        most, limit);
    }
    const std::string how = o.cudagraph ? chorus_bench::cat("CUDA graphs, ", std::to_string(o.cudagraph),
                                                          " timed launch(es) (nccl-tests -G)")
                                        : std::string("eager launches (-G 0)");
    std::printf("# iters %d x agg %d, warmup %d, check %d, %s, timeout %d ms, checked mode %s, scratch %zu B per rank%s\n",
                o.iters, o.agg_iters, o.warmup, o.check, how.c_str(), o.timeout_ms, B.comms[0].checked() ? "on" : "off", scratch,
                B.node_size ? (", ranks_per_node " + std::to_string(B.node_size)).c_str() : "");
    std::printf("# copy_gbps=%.2f\n", B.copy_gbps);
    std::printf("# nccl: %s\n", B.nccl_note.empty() ? "NCCL's time per row in the same run (column nccl)"
                                                     : ("no column: " + B.nccl_note).c_str());
    std::printf("#\n"
                "# S = size(B), nccl-tests' size: AllGather the whole receive buffer, ReduceScatter the whole send\n"
                "#   buffer (n blocks; count = per rank, -b/-e / n rounded down to 16-byte groups), the others the\n"
                "#   buffer. algbw = S / time. busbw = algbw * factor (nccl-tests): AllReduce 2(n-1)/n,\n"
                "#   AllGather and ReduceScatter (n-1)/n, Broadcast and Reduce 1.\n"
                "# time = per call: (host clock around every rank's graph launches + stream syncs) / (-G launches x\n"
                "#   -n x -m calls); -G 0: around eager launches; -C 1 (cputime): without the final stream syncs.\n"
                "#   --processes: each process's clock from an MPI_Barrier; the slowest process's time.\n"
                "# moved = bytes all ranks' schedules read + write per call (from the schedules), / time.\n"
                "# /copy = moved / copy bandwidth above (sum over devices). #wrong: elements differing from the\n"
                "#   exact result, writes past the output, changes to the input (one call per size).\n"
                "# nccl = NCCL's time per call for the same operands, timed the same way, right after chorus's\n"
                "#   (one rank per device, more than one device). limit = on one device, the least bytes any\n"
                "#   implementation reads + writes (every input once, every output once) / copy bandwidth.\n");
    std::fflush(stdout);

    if (!o.output_file.empty() && B.first == 0) { // --processes: process 0 writes the files
        B.json = std::fopen(o.output_file.c_str(), "w");
        if (!B.json) {
            std::fprintf(stderr, "-J: cannot open %s\n", o.output_file.c_str());
            return 2;
        }
        std::string cmd;
        for (const char ch : o.command_line)
            if (static_cast<unsigned char>(ch) >= 0x20) cmd += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
        std::fprintf(B.json,
                     "{\n  \"command\": \"%s\",\n  \"backend\": \"gpu\",\n  \"ranks\": %d,\n  \"processes\": %d,\n"
                     "  \"devices\": %zu,\n"
                     "  \"iters\": %d,\n  \"agg_iters\": %d,\n  \"warmup\": %d,\n  \"graph_launches\": %d,\n"
                     "  \"copy_gbps\": %.4f,\n  \"rows\": [",
                     cmd.c_str(), n, B.processes(), B.distinct_devices.size(), o.iters, o.agg_iters, o.warmup, o.cudagraph,
                     B.copy_gbps);
    }
    if (!o.csv_path.empty() && B.first == 0) {
        B.csv = std::fopen(o.csv_path.c_str(), "w");
        if (!B.csv) {
            std::fprintf(stderr, "cannot open %s\n", o.csv_path.c_str());
            return 2;
        }
        std::fprintf(B.csv, "collective,type,algo,channels,chunk_bytes,ranks,devices,node_size,graph,iters,warmup,"
                            "size_bytes,count,time_us,algbw_gbps,busbw_gbps,moved_bytes,moved_gbps,copy_gbps,"
                            "copy_ratio,wrong,chosen,processes,buffers,nccl_time_us,limit_us\n");
    }

    int status = 0;
    try {
        for (const buffer_kind bk : o.buffers) { // --processes --buffers registered,staged: each table set
            B.buffers = bk;
            for (auto& rs : B.ranks) {
                rs.in = bk == buffer_kind::registered ? rs.reg_in : bk == buffer_kind::user ? rs.user_in : rs.plain_in;
                rs.out = bk == buffer_kind::registered ? rs.reg_out : bk == buffer_kind::user ? rs.user_out : rs.plain_out;
            }
        if (o.group > 0) { // --group N: AllReduce only, grouped vs separate
            for (const std::string& a : o.algos)
                for (int ch : o.channels)
                    for (std::size_t chunk : o.chunks)
                        for (type_kind t : o.types) {
                            if (!takes_tuning(a) && (ch != o.channels.front() || chunk != o.chunks.front())) continue;
                            const chorus::policy pol = policy_for(a, {ch, chunk});
                            with_type(t, [&](auto type_tag) {
                                run_group_table<typename decltype(type_tag)::type>(B, a, pol, t);
                            });
                        }
            continue;
        }
        for (const std::string& a : o.algos)
            for (int ch : o.channels)
                for (std::size_t chunk : o.chunks)
                    for (type_kind t : o.types)
                        for (coll_kind c : o.colls) {
                            // automatic takes no tuning: one table per collective and type.
                            if (!takes_tuning(a) && (ch != o.channels.front() || chunk != o.chunks.front())) continue;
                            if (const char* why = not_measured(a, c)) {
                                std::printf("#\n# %s %s %s: not measured (%s)\n", coll_name(c), type_name(t),
                                            a.c_str(), why);
                                continue;
                            }
                            const chorus::policy pol = policy_for(a, {ch, chunk});
                            with_type(t, [&](auto type_tag) {
                                run_table<typename decltype(type_tag)::type>(B, a, pol, t, c);
                            });
                        }
        }
    } catch (const chorus::error& e) {
        fail_run(B, std::string("chorus error: ") + e.what()); // --processes: does not return
        status = 1;
    } catch (const cuda_failure& e) {
        fail_run(B, "CUDA error: " + e.what);
        status = 1;
    }

    std::printf("#\n");
    for (const auto& s : B.summaries) print_summary(s);
    std::printf("# Out of bounds / wrong values : %" PRIu64 " %s\n", B.wrong_total, B.wrong_total ? "FAILED" : "OK");
    if (B.wrong_total) status = 1;
    std::printf("# %s\n", status == 0 ? "all results correct" : "FAILED");
    if (B.csv) std::fclose(B.csv);
    if (B.json) {
        std::fprintf(B.json, "%s],\n  \"wrong_total\": %" PRIu64 "\n}\n", B.json_rows ? "\n  " : "", B.wrong_total);
        std::fclose(B.json);
        B.json = nullptr;
    }
    return status;
}

void release(bench& B) {
    for (auto& rs : B.ranks) {
        (void)cudaSetDevice(rs.dev);
        if (rs.stream) (void)cudaStreamSynchronize(rs.stream);
    }
    release_nccl(B);
    // --buffers user: deregistered (collective) before the communicator goes and they are freed.
    for (auto& rs : B.ranks)
        if (!B.comms.empty() && (rs.user_in_h || rs.user_out_h)) {
            try {
                if (rs.user_in_h) B.comms[0].deregister_buffer(rs.user_in_h);
                if (rs.user_out_h) B.comms[0].deregister_buffer(rs.user_out_h);
            } catch (const chorus::error& e) {
                std::fprintf(stderr, "chorus_bench_gpu: deregister_buffer: %s\n", e.what());
            }
        }
    B.comms.clear(); // --processes: waits for the peer processes to destroy theirs; takes reg_in/reg_out along
    for (auto& rs : B.ranks) {
        (void)cudaSetDevice(rs.dev);
        if (rs.stream) (void)cudaStreamDestroy(rs.stream);
        if (rs.plain_in) (void)cudaFree(rs.plain_in);
        if (rs.plain_out) (void)cudaFree(rs.plain_out);
        if (rs.user_in) (void)cudaFree(rs.user_in);
        if (rs.user_out) (void)cudaFree(rs.user_out);
        if (rs.wrong) (void)cudaFree(rs.wrong);
    }
    B.ranks.clear();
}

//! --processes: MPI_Init (before any CUDA call, as MPI libraries like it),
//! and process 0 alone prints (the others' stdout goes to /dev/null; their
//! failures go to stderr, see fail_run). Without --processes: nothing.
void start_processes(bench& B, int& argc, char**& argv) {
#if CHORUS_BENCH_GPU_MPI
    if (!B.opt.processes) return;
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &B.first);
    if (B.first != 0 && !std::freopen("/dev/null", "w", stdout))
        std::fprintf(stderr, "chorus_bench_gpu: rank %d: cannot send stdout to /dev/null\n", B.first);
#else
    (void)B;
    (void)argc;
    (void)argv;
#endif
}
int end_processes(const bench& B, int status) {
#if CHORUS_BENCH_GPU_MPI
    if (B.opt.processes) {
        std::fflush(stdout);
        MPI_Finalize();
    }
#else
    (void)B;
#endif
    return status;
}

} // namespace

int main(int argc, char** argv) {
    bench B;
    try {
        B.opt = parse_args(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "%s: %s\n", argv[0], e.what.c_str());
        print_usage(stderr, argv[0]);
        return 2;
    }
    start_processes(B, argc, argv);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        (void)cudaGetLastError();
        std::printf("CHORUS_SKIP: no CUDA device\n"); // every process alike: all exit 77
        return end_processes(B, 77);
    }
    int status = 1;
    try {
        status = run(B);
    } catch (const cuda_failure& e) {
        fail_run(B, "CUDA error: " + e.what); // --processes: does not return
        status = 1;
    } catch (const chorus::error& e) {
        fail_run(B, std::string("chorus error: ") + e.what());
        status = 1;
    } catch (const std::exception& e) {
        fail_run(B, e.what());
        status = 1;
    }
    std::fflush(stdout);
    release(B);
    return end_processes(B, status);
}
