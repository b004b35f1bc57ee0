//! \file chorus_calibrate_gpu.cu
//! chorus_calibrate's GPU mode: fits the cost model to this machine's CUDA
//! devices and writes the model file `automatic` loads (CHORUS_MODEL, see
//! model/file.hpp and docs/gpu.md "Calibrating automatic").
//!
//! Ranks: -t N virtual ranks on device 0 (default 8: gpu::make_communicators
//! of N entries 0), or --devices: one rank per visible device.
//! 1. Copy bandwidth of each device: cudaMemcpyAsync device to device of
//!    the largest size (read + write counted), best of 5.
//! 2. For every size 8 B * 4^i in [-b, -e] (the model's correction grid),
//!    in increasing order, every series interleaved at that size: the
//!    algorithms automatic weighs for the collective (AllReduce: direct,
//!    two_shot, recursive_doubling, rabenseifner, ring, tree; AllGather and
//!    ReduceScatter: ring, direct; Broadcast and Reduce: ring, direct,
//!    tree), each with its default tuning, i.e. chosen per call exactly as
//!    a call of the default policy runs it (algo/policy.hpp resolve_tuning),
//!    float sum. A point: every rank's stream captures `iters` calls into a
//!    CUDA graph (iters = --budget / size, 3..100), each graph launched once
//!    untimed, then --reps times timed (host clock around launching every
//!    rank's graph and synchronising every stream) / iters; the least of
//!    the reps. A series whose call needs more scratch than the
//!    communicators have (gpu::options{}.scratch_bytes, as a default user
//!    has: automatic leaves such candidates out too) has no point there.
//!    Once --seconds have passed, larger sizes are not measured (the fit
//!    repeats the largest measured ratio for them, and the file says so).
//! 3. The fit: the first-order figures are the built-in GPU topology
//!    (model::gpu_cluster_topology), with the measured copy bandwidth as the
//!    bandwidth of a rank's own memory (virtual ranks: also of the links
//!    between them, shared by the ranks of the device); per series a
//!    correction, measured / first-order prediction at each grid size
//!    (model::fit_correction). `automatic`'s crossovers then come from the
//!    measurements.
//! 4. Writes the file (-o FILE, default stdout) with a comment header: the
//!    device, the ranks, the channel budget, the copy bandwidth, the command
//!    and, per collective and size, which algorithm was fastest (the
//!    measured crossovers). --merge FILE keeps FILE's corrections for the
//!    rank counts this run does not measure, so runs with different -t build
//!    one file.
//! Exit status: 0 written, 1 a chorus or CUDA error, 2 bad command line,
//! 77 no CUDA device (it prints "CHORUS_SKIP: no CUDA device").

#include <chorus/gpu.hpp>
#include <chorus/model/cost.hpp>
#include <chorus/model/file.hpp>
#include <chorus/model/fit.hpp>

#include "cli.hpp" // the command line, shared with the benchmarks and chorus_calibrate

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
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

using chorus_cli::call_bytes;
using chorus_cli::call_count;
using chorus_cli::cat;
using chorus_cli::coll_kind;
using chorus_cli::coll_name;
using chorus_cli::to_collective;
using chorus_cli::usage_error;
using chorus_cli::utc_now;
namespace model = chorus::model;
using clock_type = std::chrono::steady_clock;

//! A CUDA error: the program reports it and exits 1.
struct cuda_failure {
    std::string what;
};
void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw cuda_failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

std::span<const chorus_cli::option> option_table() {
    static const chorus_cli::option table[] = {
        {"ranks", 't', "N", "virtual ranks on device 0 (default 8)"},
        {"devices", 0, {}, "one rank per visible device instead of -t"},
        {"output", 'o', "FILE", "write the model file here (default stdout); point CHORUS_MODEL at it"},
        {"minbytes", 'b', "SIZE", "smallest size, bytes; K M G suffixes (default 8)"},
        {"maxbytes", 'e', "SIZE", "largest size (default 128M, the last size of the correction grid)"},
        {"collectives", 0, "LIST", "all_reduce,all_gather,reduce_scatter,broadcast,reduce or all\n"
                                   "(default all_reduce)"},
        {"reps", 'r', "N", "timed graph launches per point, the least kept (default 3)"},
        {"budget", 0, "SIZE", "bytes per captured graph: iterations = budget / size, 3..100 (default 256M)"},
        {"seconds", 0, "S", "stop measuring larger sizes after this many seconds (default 25)"},
        {"merge", 0, "FILE", "keep this file's corrections for the rank counts this run does not measure"},
        {"help", 'h', {}, "this text"},
    };
    return table;
}

struct options {
    int ranks = 8;
    bool devices = false;
    std::string output;
    double min_bytes = 8;
    double max_bytes = 128.0 * 1024 * 1024;
    std::vector<coll_kind> colls{coll_kind::all_reduce};
    int reps = 3;
    double budget = 256.0 * 1024 * 1024;
    double seconds = 25;
    std::string merge_path;
    std::string command;
};

options parse_options(int argc, char** argv) {
    using chorus_cli::parse_bytes;
    using chorus_cli::parse_int;
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
    if (line.help) {
        chorus_cli::print_help(stdout, cat("usage: ", argv[0], " [options]"), option_table());
        std::exit(0);
    }
    options o;
    o.command = "chorus_calibrate_gpu";
    if (argc > 1) o.command.append(cat(" ", chorus_cli::join_args({argv + 1, std::size_t(argc - 1)}, true)));
    bool ranks_given = false;
    for (const chorus_cli::given_option& g : line.given) {
        const std::string_view v = g.value;
        const std::string& flag = g.flag;
        if (g.is("ranks")) {
            o.ranks = int(parse_int(v, flag, 2, chorus::detail::max_lane_ranks));
            ranks_given = true;
        } else if (g.is("devices")) o.devices = true;
        else if (g.is("output")) o.output = v;
        else if (g.is("minbytes")) o.min_bytes = double(parse_bytes(v, flag));
        else if (g.is("maxbytes")) o.max_bytes = double(parse_bytes(v, flag));
        else if (g.is("collectives")) {
            const std::vector<coll_kind> given = chorus_cli::parse_collectives(v, flag);
            o.colls.clear();
            for (const coll_kind k : chorus_cli::all_colls)
                if (std::find(given.begin(), given.end(), k) != given.end()) o.colls.push_back(k);
        } else if (g.is("reps")) o.reps = int(parse_int(v, flag, 1, 100));
        else if (g.is("budget")) o.budget = double(parse_bytes(v, flag));
        else if (g.is("seconds")) o.seconds = chorus_cli::parse_number(v, flag);
        else if (g.is("merge")) o.merge_path = v;
        else chorus_cli::unhandled(g);
    }
    if (o.devices && ranks_given) throw usage_error{"--devices and -t both give the ranks: use one"};
    if (o.min_bytes < 4) throw usage_error{"--minbytes must be at least 4 (one float)"};
    if (o.min_bytes > o.max_bytes) throw usage_error{"--minbytes is larger than --maxbytes"};
    if (o.max_bytes > 4.0 * 1024 * 1024 * 1024) throw usage_error{"--maxbytes: at most 4G"};
    if (o.budget < 1) throw usage_error{"--budget must be at least 1 byte"};
    if (!(o.seconds > 0)) throw usage_error{"--seconds must be more than 0"};
    return o;
}

//! The algorithms automatic weighs for collective `k` with a commutative
//! operator on one node (algo/automatic.hpp auto_candidates; those that
//! run another's schedule there are measured as that one).
std::vector<model::algorithm> series_of(coll_kind k) {
    using model::algorithm;
    switch (k) {
    case coll_kind::all_reduce:
        return {algorithm::direct, algorithm::two_shot, algorithm::recursive_doubling, algorithm::rabenseifner,
                algorithm::ring, algorithm::tree};
    case coll_kind::all_gather:
    case coll_kind::reduce_scatter: return {algorithm::ring, algorithm::direct};
    case coll_kind::broadcast:
    case coll_kind::reduce: return {algorithm::ring, algorithm::direct, algorithm::tree};
    }
    return {};
}

struct rank_state {
    int dev = 0;
    cudaStream_t stream = nullptr;
    float* in = nullptr;
    float* out = nullptr;
};

struct world {
    std::vector<int> devices;
    std::vector<chorus::gpu::communicator> comms;
    std::vector<rank_state> ranks;
    std::size_t buffer_bytes = 0;
    world() = default;
    world(const world&) = delete;
    world& operator=(const world&) = delete;
    ~world() {
        for (rank_state& r : ranks) {
            (void)cudaSetDevice(r.dev);
            if (r.stream) (void)cudaStreamSynchronize(r.stream);
            if (r.stream) (void)cudaStreamDestroy(r.stream);
            if (r.in) (void)cudaFree(r.in);
            if (r.out) (void)cudaFree(r.out);
        }
    }
    int n() const { return int(ranks.size()); }
    void sync_all() {
        for (const rank_state& r : ranks) {
            cuda_ok(cudaSetDevice(r.dev), "cudaSetDevice");
            cuda_ok(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
        }
        for (auto& c : comms) c.check();
    }
};

//! One call of collective `k` with policy `pol` by rank r on its stream
//! (what chorus::all_reduce<Algo>(..., stream) etc. run with policy_of<Algo>).
void issue(world& w, int r, const chorus::policy& pol, coll_kind k, std::size_t count) {
    namespace cd = chorus::detail;
    rank_state& rs = w.ranks[std::size_t(r)];
    chorus::gpu::communicator& comm = w.comms[std::size_t(r)];
    const cd::stream_arg on = cd::on_stream(rs.stream);
    const std::size_t n = std::size_t(w.n());
    switch (k) {
    case coll_kind::all_reduce:
        (void)cd::all_reduce_run(comm, pol, std::span<const float>(rs.in, count), std::span<float>(rs.out, count),
                                 chorus::sum{}, false, on);
        break;
    case coll_kind::all_gather:
        (void)cd::all_gather_run(comm, pol, std::span<const float>(rs.in, count),
                                 std::span<float>(rs.out, count * n), false, on);
        break;
    case coll_kind::reduce_scatter:
        (void)cd::reduce_scatter_run(comm, pol, std::span<const float>(rs.in, count * n),
                                     std::span<float>(rs.out, count), chorus::sum{}, false, on);
        break;
    case coll_kind::broadcast: (void)cd::broadcast_run(comm, pol, std::span<float>(rs.out, count), 0, false, on); break;
    case coll_kind::reduce:
        (void)cd::reduce_run(comm, pol, std::span<const float>(rs.in, count), std::span<float>(rs.out, count),
                             chorus::sum{}, 0, false, on);
        break;
    }
}

//! Seconds per call of (k, pol) at `count` (see the file comment); a
//! negative value and `why` set when the call is refused (scratch).
double time_point(world& w, const options& o, const chorus::policy& pol, coll_kind k, std::size_t count,
                  double bytes, std::string& why) {
    const int iters = int(std::clamp(o.budget / std::max(bytes, 1.0), 3.0, 100.0));
    std::vector<cudaGraphExec_t> execs(w.ranks.size(), nullptr);
    auto destroy = [&] {
        for (auto& x : execs)
            if (x) (void)cudaGraphExecDestroy(x);
    };
    try {
        for (int r = 0; r < w.n(); ++r) {
            rank_state& rs = w.ranks[std::size_t(r)];
            cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
            cudaGraph_t g = nullptr;
            cuda_ok(cudaStreamBeginCapture(rs.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
            try {
                for (int i = 0; i < iters; ++i) issue(w, r, pol, k, count);
            } catch (...) {
                (void)cudaStreamEndCapture(rs.stream, &g);
                if (g) (void)cudaGraphDestroy(g);
                throw;
            }
            cuda_ok(cudaStreamEndCapture(rs.stream, &g), "cudaStreamEndCapture");
            const cudaError_t e = cudaGraphInstantiate(&execs[std::size_t(r)], g, 0);
            (void)cudaGraphDestroy(g);
            cuda_ok(e, "cudaGraphInstantiate");
        }
    } catch (const chorus::error& e) {
        destroy();
        if (e.code() != chorus::errc::invalid_argument) throw;
        why = e.what();
        return -1;
    } catch (...) {
        destroy();
        throw;
    }
    auto launch_all = [&] {
        for (std::size_t r = 0; r < execs.size(); ++r) {
            cuda_ok(cudaSetDevice(w.ranks[r].dev), "cudaSetDevice");
            cuda_ok(cudaGraphLaunch(execs[r], w.ranks[r].stream), "cudaGraphLaunch");
        }
    };
    double best = -1;
    try {
        launch_all(); // untimed: the first launch of a graph
        w.sync_all();
        for (int rep = 0; rep < o.reps; ++rep) {
            const auto t0 = clock_type::now();
            launch_all();
            w.sync_all();
            const double s = std::chrono::duration<double>(clock_type::now() - t0).count() / double(iters);
            if (best < 0 || s < best) best = s;
        }
    } catch (...) {
        destroy();
        throw;
    }
    destroy();
    return best;
}

//! Device-to-device copy bandwidth of each distinct device (read + write
//! counted, bytes per second), best of 5, with rank buffers of that device.
std::vector<std::pair<int, double>> copy_bandwidth(world& w) {
    std::vector<std::pair<int, double>> out;
    const std::size_t bytes = w.buffer_bytes;
    for (const rank_state& rs : w.ranks) {
        if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.first == rs.dev; })) continue;
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cudaEvent_t a = nullptr, b = nullptr;
        cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
        cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
        float best_ms = 0;
        for (int i = 0; i < 6; ++i) {
            cuda_ok(cudaEventRecord(a, rs.stream), "cudaEventRecord");
            cuda_ok(cudaMemcpyAsync(rs.out, rs.in, bytes, cudaMemcpyDeviceToDevice, rs.stream), "cudaMemcpyAsync");
            cuda_ok(cudaEventRecord(b, rs.stream), "cudaEventRecord");
            cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
            float ms = 0;
            cuda_ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
            if (i > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms; // the first is a warm-up
        }
        (void)cudaEventDestroy(a);
        (void)cudaEventDestroy(b);
        out.emplace_back(rs.dev, best_ms > 0 ? 2.0 * double(bytes) / (double(best_ms) * 1e-3) : 0.0);
    }
    return out;
}

std::string bytes_text(double b) {
    char buf[32];
    if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%g MiB", b / (1024.0 * 1024));
    else if (b >= 1024) std::snprintf(buf, sizeof buf, "%g KiB", b / 1024);
    else std::snprintf(buf, sizeof buf, "%g B", b);
    return buf;
}

int run(const options& o) {
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        std::printf("chorus_calibrate_gpu: no CUDA device (%s): nothing to calibrate\nCHORUS_SKIP: no CUDA device\n",
                    e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    world w;
    if (o.devices) {
        if (count < 2) throw usage_error{"--devices: this machine has one device; use -t N virtual ranks"};
        for (int d = 0; d < count && d < chorus::detail::max_lane_ranks; ++d) w.devices.push_back(d);
    } else {
        w.devices.assign(std::size_t(o.ranks), 0);
    }
    const int n = int(w.devices.size());
    // Sizes: the correction grid within [-b, -e].
    std::vector<double> grid;
    for (int i = 0; i < model::correction_points; ++i) {
        const double b = model::correction::grid_bytes(i);
        if (b >= o.min_bytes * (1 - 1e-12) && b <= o.max_bytes * (1 + 1e-12)) grid.push_back(b);
    }
    if (grid.empty()) throw usage_error{"no size 8 B * 4^i (the correction grid) lies within -b .. -e"};
    w.buffer_bytes = (std::size_t(grid.back()) + 255) / 256 * 256;
    chorus::gpu::options gopt{}; // the scratch a default user has: automatic plans against it
    w.comms = chorus::gpu::make_communicators(w.devices, gopt);
    w.ranks.resize(std::size_t(n));
    for (int r = 0; r < n; ++r) {
        rank_state& rs = w.ranks[std::size_t(r)];
        rs.dev = w.devices[std::size_t(r)];
        cuda_ok(cudaSetDevice(rs.dev), "cudaSetDevice");
        cuda_ok(cudaStreamCreateWithFlags(&rs.stream, cudaStreamNonBlocking), "cudaStreamCreate");
        cuda_ok(cudaMalloc(reinterpret_cast<void**>(&rs.in), w.buffer_bytes), "cudaMalloc");
        cuda_ok(cudaMalloc(reinterpret_cast<void**>(&rs.out), w.buffer_bytes), "cudaMalloc");
        // Small integers: exact sums in any order, no denormals or infinities.
        cuda_ok(cudaMemset(rs.in, 0, w.buffer_bytes), "cudaMemset");
        cuda_ok(cudaMemset(rs.out, 0, w.buffer_bytes), "cudaMemset");
    }
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const auto start = clock_type::now();

    const std::vector<std::pair<int, double>> copies = copy_bandwidth(w);
    double copy_min = 0;
    for (const auto& c : copies) copy_min = copy_min == 0 ? c.second : std::min(copy_min, c.second);

    struct series {
        coll_kind k;
        model::algorithm a;
        std::vector<model::measurement> points;
        std::vector<double> secs; // per grid size, < 0: not measured
    };
    std::vector<series> all;
    for (const coll_kind k : o.colls)
        for (const model::algorithm a : series_of(k)) all.push_back({k, a, {}, std::vector<double>(grid.size(), -1)});
    std::string notes;
    std::size_t measured_sizes = 0;
    for (std::size_t i = 0; i < grid.size(); ++i) {
        const double spent = std::chrono::duration<double>(clock_type::now() - start).count();
        if (spent > o.seconds) {
            char line[160];
            std::snprintf(line, sizeof line,
                          "# sizes from %s on not measured (--seconds %g spent): the fit repeats the largest measured\n",
                          bytes_text(grid[i]).c_str(), o.seconds);
            notes += line;
            break;
        }
        for (series& s : all) {
            const std::size_t cnt = call_count(s.k, grid[i], n);
            if (cnt == 0) continue;
            std::string why;
            const double sec = time_point(w, o, chorus::policy::fixed(s.a), s.k, cnt, grid[i], why);
            if (sec > 0) {
                s.points.push_back({call_bytes(s.k, cnt, n), sec});
                s.secs[i] = sec;
            } else if (!why.empty() && notes.find(why) == std::string::npos) {
                notes += "# " + std::string(model::algorithm_name(s.a)) + " " + coll_name(s.k) + " at " +
                         bytes_text(grid[i]) + " not measured: " + why + "\n";
            }
        }
        measured_sizes = i + 1;
        std::fprintf(stderr, "chorus_calibrate_gpu: %s measured (%.1f s)\n", bytes_text(grid[i]).c_str(),
                     std::chrono::duration<double>(clock_type::now() - start).count());
    }

    // The fit (see the file comment).
    const bool virtual_ranks = copies.size() == 1 && n > 1;
    model::topology t = model::gpu_cluster_topology(0);
    if (copy_min > 0) {
        const int per_device = virtual_ranks ? n : 1;
        t.local_Bps = copy_min / double(per_device);
        if (virtual_ranks) t.intra.bandwidth_Bps = copy_min / double(n);
    }
    t.correction_count = 0;
    const model::topology base = t;
    std::string summary;
    for (const series& s : all) {
        model::correction k{};
        if (!model::fit_correction(base, to_collective(s.k), s.a, n, 0, s.points, k)) continue;
        model::set_correction(t, k);
        float lo = k.ratio[0], hi = k.ratio[0];
        for (const float r : k.ratio) lo = std::min(lo, r), hi = std::max(hi, r);
        char line[160];
        std::snprintf(line, sizeof line, "#   %s %s: %zu sizes, measured / first-order %.3g .. %.3g\n",
                      model::algorithm_name(s.a), coll_name(s.k), s.points.size(), double(lo), double(hi));
        summary += line;
    }
    if (t.correction_count == 0) throw usage_error{"nothing could be measured: no correction to write"};
    // The measured fastest per collective and size: the crossovers the file now gives automatic.
    std::string fastest;
    for (const coll_kind k : o.colls) {
        std::string row = std::string("#   ") + coll_name(k) + ":";
        const char* prev = "";
        for (std::size_t i = 0; i < measured_sizes; ++i) {
            const series* win = nullptr;
            for (const series& s : all)
                if (s.k == k && s.secs[i] > 0 && (win == nullptr || s.secs[i] < win->secs[i])) win = &s;
            if (win == nullptr) continue;
            const char* name = model::algorithm_name(win->a);
            if (std::string_view(name) != prev) row += " " + std::string(name) + " from " + bytes_text(grid[i]) + ";";
            prev = name;
        }
        fastest += row + "\n";
    }
    if (!o.merge_path.empty()) {
        const model::topology old = model::load_file(o.merge_path);
        int kept = 0;
        for (int i = 0; i < old.correction_count; ++i)
            if (old.corrections[i].nranks != n) {
                model::set_correction(t, old.corrections[i]);
                ++kept;
            }
        notes += "# merged " + std::to_string(kept) + " correction(s) for other rank counts from " + o.merge_path + "\n";
    }

    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, w.devices[0]), "cudaGetDeviceProperties");
    std::string text = "# chorus_calibrate_gpu: " + std::string(prop.name) + " (" +
                       std::to_string(prop.multiProcessorCount) + " SMs), " + std::to_string(n) +
                       (virtual_ranks ? " virtual ranks on device " + std::to_string(w.devices[0])
                                      : std::string(" ranks, one per device")) +
                       ", channel budget " + std::to_string(chorus::detail::channel_budget_of(w.devices)) + ", " +
                       utc_now() + "\n";
    text += "# command: " + o.command + "\n";
    char line[200];
    std::snprintf(line, sizeof line, "# copy bandwidth (device to device, read + write): %.0f GB/s (least over %zu device(s))\n",
                  copy_min * 1e-9, copies.size());
    text += line;
    text += "# first-order figures: model::gpu_cluster_topology, with the copy bandwidth per rank as local_Bps" +
            std::string(virtual_ranks ? " and intra.bandwidth_Bps" : "") + "\n";
    text += "# corrections (measured / first-order prediction at 8 B * 4^i), default policies' tunings chosen per call:\n";
    text += summary;
    text += "# fastest measured, by size (automatic's crossovers follow these):\n" + fastest;
    text += notes;
    text += model::to_text(t);
    if (chorus_cli::write_output(o.output, text)) {
        // Read back as automatic will (model::load_file): the same corrections.
        const model::topology back = model::load_file(o.output);
        if (back.correction_count != t.correction_count)
            throw usage_error{"-o: " + o.output + " read back with " + std::to_string(back.correction_count) +
                              " corrections instead of " + std::to_string(t.correction_count)};
        std::fputs(text.c_str(), stderr);
        std::fprintf(stderr, "chorus_calibrate_gpu: wrote %s (%.1f s); use it: export CHORUS_MODEL=%s\n",
                     o.output.c_str(), std::chrono::duration<double>(clock_type::now() - start).count(),
                     o.output.c_str());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    // Virtual ranks spin on each other from separate streams: at least as
    // many hardware queues as ranks (docs/gpu.md "Virtual ranks"); before
    // the CUDA runtime starts. A value the user set stays.
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    try {
        return run(parse_options(argc, argv));
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_calibrate_gpu: %s\n", e.what.c_str());
        return 2;
    } catch (const cuda_failure& e) {
        std::fprintf(stderr, "chorus_calibrate_gpu: CUDA error: %s\n", e.what.c_str());
        return 1;
    } catch (const chorus::error& e) {
        std::fprintf(stderr, "chorus_calibrate_gpu: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chorus_calibrate_gpu: %s\n", e.what());
        return 1;
    }
}
