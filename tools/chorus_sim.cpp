//! \file chorus_sim.cpp
//! The cost model (include/chorus/model/cost.hpp) evaluated for a cluster:
//! no communication, no allocation per prediction, instant even at 4096
//! ranks. For every message size it prints each algorithm's predicted
//! time, algorithm bandwidth and bus bandwidth (nccl-tests definitions) and
//! the winner; then a scaling table for one size: the best time and bus
//! bandwidth as the rank count grows 1, 2, 4, ... within a node and then
//! node by node, which shows what crossing the node boundary onto the
//! slower link costs.
//!
//! The machine: `--nodes N --gpus-per-node G` (or `--ranks n
//! --ranks-per-node L`); links default to NVLink-class inside a node
//! (2 us per step, 150 GB/s per GPU) and InfiniBand-class between nodes
//! (5 us, 25 GB/s per GPU), reductions 1 TB/s: assumptions, not
//! measurements (docs/model.md). `--model FILE` starts from a topology
//! file instead (chorus_calibrate -o FILE); explicit flags override it.
//!
//! Exit status: 0 fine, 1 a failed --check, 2 bad command line.

#include <chorus/model/cost.hpp>
#include <chorus/model/file.hpp>

#include "cli.hpp" // the command line, shared with the benchmarks

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

using chorus::collective;
namespace model = chorus::model;

using chorus_cli::usage_error;

constexpr collective sim_collectives[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                          collective::broadcast,  collective::reduce,     collective::all_to_all};

//! The command line, and the --help text printed from it.
std::span<const chorus_cli::option> option_table() {
    using chorus_cli::cat;
    using chorus_cli::names_of;
    static const std::string colls_help =
        cat(names_of(sim_collectives, chorus::collective_name), " or all (default all_reduce)");
    static const std::string algos_help =
        cat("algorithms to compare (default all: ", names_of(model::all_algorithms, model::algorithm_name), ")");
    static const chorus_cli::option table[] = {
        {{}, 0, {}, "machine (default: 2 nodes x 8 GPUs):"},
        {"nodes", 0, "N", "nodes"},
        {"gpus-per-node", 0, "G", "ranks per node (default 8)"},
        {"ranks", 0, "n", "total ranks instead of --nodes (the last node may be partial)"},
        {"ranks-per-node", 0, "L", "same as --gpus-per-node"},
        {"model", 0, "FILE", "start from this topology file (chorus_calibrate -o FILE);\n"
                             "its ranks_per_node is used unless --gpus-per-node is given"},
        {"intra-lat", 0, "US", "intra-node latency per step, microseconds (default 2)"},
        {"intra-bw", 0, "GBPS", "intra-node bandwidth per rank, GB/s = 1e9 B/s (default 150)"},
        {"inter-lat", 0, "US", "inter-node latency per step, microseconds (default 5)"},
        {"inter-bw", 0, "GBPS", "inter-node bandwidth per rank, GB/s (default 25)"},
        {"reduce-bw", 0, "GBPS", "reduction throughput per rank, GB/s of result (default 1000)"},
        {"channels", 0, "K", "channels (default 1)"},
        {"chunk-bytes", 0, "SIZE", "pipelining chunk (default 256K)"},
        {{}, 0, {}, "what to predict:"},
        {"collective", 0, "LIST", colls_help},
        {"collectives", 0, "LIST"}, // the benchmarks' spelling of --collective
        {"algos", 0, "LIST", algos_help},
        {"sizes", 0, "MIN:MAX[:F]", "message sizes, times F each row (default 8:1G:2); K M G suffixes"},
        {"minbytes", 'b', "SIZE", "same as MIN"},
        {"maxbytes", 'e', "SIZE", "same as MAX"},
        {"stepfactor", 'f', "F", "same as F"},
        {"scale-size", 0, "SIZE", "the size of the scaling table (default 256M)"},
        {"csv", 0, "FILE", "also write every prediction as CSV"},
        {"check", 0, {}, "check every prediction is finite, positive and monotone in size;\n"
                         "prints 'model checks passed' or exits 1"},
        {"help", 'h', {}, "this text"},
    };
    return table;
}

struct options {
    long nodes = -1, per_node = -1, ranks = -1;
    std::string model_path;
    double intra_lat_us = -1, intra_bw = -1, inter_lat_us = -1, inter_bw = -1, reduce_bw = -1;
    long channels = -1;
    double chunk_bytes = -1;
    std::vector<collective> colls{collective::all_reduce};
    std::vector<model::algorithm> algos{std::begin(model::all_algorithms), std::end(model::all_algorithms)};
    double min_bytes = 8, max_bytes = 1024.0 * 1024 * 1024, factor = 2;
    double scale_bytes = 256.0 * 1024 * 1024;
    std::string csv_path;
    bool check = false;
    // derived
    int n = 0;
    int L = 0;
    model::topology topo{};
};

options parse_options(int argc, char** argv) {
    using chorus_cli::parse_bytes;
    using chorus_cli::parse_int;
    using chorus_cli::parse_number;
    const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, option_table());
    if (line.help) {
        chorus_cli::print_help(stdout, chorus_cli::cat("usage: ", argv[0], " [options]"), option_table());
        std::exit(0);
    }
    options o;
    for (const chorus_cli::given_option& g : line.given) {
        const std::string_view v = g.value;
        const std::string& flag = g.flag;
        if (g.is("nodes")) o.nodes = long(parse_int(v, flag, 1, 1 << 20));
        else if (g.is("gpus-per-node") || g.is("ranks-per-node")) o.per_node = long(parse_int(v, flag, 1, 1 << 16));
        else if (g.is("ranks")) o.ranks = long(parse_int(v, flag, 1, 1 << 24));
        else if (g.is("model")) o.model_path = v;
        else if (g.is("intra-lat")) o.intra_lat_us = parse_number(v, flag);
        else if (g.is("intra-bw")) o.intra_bw = parse_number(v, flag);
        else if (g.is("inter-lat")) o.inter_lat_us = parse_number(v, flag);
        else if (g.is("inter-bw")) o.inter_bw = parse_number(v, flag);
        else if (g.is("reduce-bw")) o.reduce_bw = parse_number(v, flag);
        else if (g.is("channels")) o.channels = long(parse_int(v, flag, 1, 64));
        else if (g.is("chunk-bytes")) o.chunk_bytes = double(parse_bytes(v, flag));
        else if (g.is("collective") || g.is("collectives"))
            o.colls = chorus_cli::parse_names(v, flag, "collective", sim_collectives, chorus::collective_name);
        else if (g.is("algos"))
            o.algos = chorus_cli::parse_names(v, flag, "algorithm", model::all_algorithms, model::algorithm_name);
        else if (g.is("sizes")) {
            const auto parts = chorus_cli::split_list(v, ':');
            if (parts.size() < 2 || parts.size() > 3)
                throw usage_error{chorus_cli::cat(flag, ": expected MIN:MAX or MIN:MAX:FACTOR")};
            o.min_bytes = double(parse_bytes(parts[0], flag));
            o.max_bytes = double(parse_bytes(parts[1], flag));
            if (parts.size() == 3) o.factor = double(parse_int(parts[2], flag, 2, 1 << 20));
        } else if (g.is("minbytes")) o.min_bytes = double(parse_bytes(v, flag));
        else if (g.is("maxbytes")) o.max_bytes = double(parse_bytes(v, flag));
        else if (g.is("stepfactor")) o.factor = double(parse_int(v, flag, 2, 1 << 20));
        else if (g.is("scale-size")) o.scale_bytes = double(parse_bytes(v, flag));
        else if (g.is("csv")) o.csv_path = v;
        else if (g.is("check")) o.check = true;
        else chorus_cli::unhandled(g);
    }
    if (o.min_bytes < 1) throw usage_error{"the smallest size must be at least 1 byte"};
    if (o.min_bytes > o.max_bytes) throw usage_error{"the smallest size is larger than the largest"};
    if (o.nodes > 0 && o.ranks > 0) throw usage_error{"give --nodes or --ranks, not both"};

    // The machine: defaults < model file < flags.
    if (!o.model_path.empty()) {
        o.topo = model::load_file(o.model_path);
    } else {
        o.topo = model::gpu_cluster_topology(8);
    }
    long L = o.per_node;
    if (L < 0) L = o.model_path.empty() ? 8 : o.topo.ranks_per_node;
    long n = 0;
    if (o.ranks > 0) n = o.ranks;
    else if (L > 0) n = (o.nodes > 0 ? o.nodes : (o.model_path.empty() ? 2 : 1)) * L;
    else throw usage_error{"the model file describes one node of unknown size: give --ranks (and --ranks-per-node)"};
    if (n > (1 << 24)) throw usage_error{"too many ranks (at most 2^24)"};
    if (L <= 0 || L > n) L = n; // one node
    o.n = int(n);
    o.L = int(L);
    o.topo.ranks_per_node = o.L;
    if (o.intra_lat_us >= 0) o.topo.intra.latency_s = o.intra_lat_us * 1e-6;
    if (o.intra_bw >= 0) o.topo.intra.bandwidth_Bps = o.intra_bw * 1e9;
    if (o.inter_lat_us >= 0) o.topo.inter.latency_s = o.inter_lat_us * 1e-6;
    if (o.inter_bw >= 0) o.topo.inter.bandwidth_Bps = o.inter_bw * 1e9;
    if (o.reduce_bw >= 0) o.topo.reduce_Bps = o.reduce_bw * 1e9;
    if (o.channels > 0) o.topo.channels = int(o.channels);
    if (o.chunk_bytes > 0) o.topo.chunk_bytes = o.chunk_bytes;
    if (!(o.topo.intra.bandwidth_Bps > 0) || !(o.topo.inter.bandwidth_Bps > 0) || !(o.topo.reduce_Bps > 0))
        throw usage_error{"bandwidths must be > 0"};
    return o;
}

std::vector<double> sweep(const options& o) {
    std::vector<double> s;
    for (double b = o.min_bytes; b <= o.max_bytes * (1 + 1e-12); b *= o.factor) s.push_back(b);
    return s;
}

//! Rank counts of the scaling table: 1, 2, 4, ... below L, L, then 2L, 4L, ... up to n, and n.
std::vector<int> scale_counts(int n, int L) {
    std::vector<int> v;
    for (long m = 1; m < L && m <= n; m *= 2) v.push_back(int(m));
    for (long m = L; m <= n; m *= 2) v.push_back(int(m));
    if (v.empty() || v.back() != n) v.push_back(n);
    return v;
}

struct checker {
    bool enabled = false;
    int failures = 0;
    void expect(bool ok, const std::string& what) {
        if (!enabled || ok) return;
        if (failures < 20) std::fprintf(stderr, "check failed: %s\n", what.c_str());
        ++failures;
    }
};

std::string fmt_us(double s) {
    char buf[32];
    const double us = s * 1e6;
    if (us < 1e5) std::snprintf(buf, sizeof buf, "%.2f", us);
    else std::snprintf(buf, sizeof buf, "%.4g", us);
    return buf;
}

int run(const options& o) {
    const model::topology& t = o.topo;
    const int n = o.n;
    const int nodes = (n + o.L - 1) / o.L;
    std::FILE* csv = nullptr;
    if (!o.csv_path.empty()) {
        csv = std::fopen(o.csv_path.c_str(), "w");
        if (csv == nullptr) throw usage_error{"--csv: cannot write " + o.csv_path};
        std::fprintf(csv, "table,collective,size_bytes,ranks,ranks_per_node,nodes,algorithm,time_s,algbw_gbps,"
                          "busbw_gbps,winner\n");
    }
    checker chk;
    chk.enabled = o.check;

    std::printf("# chorus_sim: cost model predictions (include/chorus/model/cost.hpp, docs/model.md)\n");
    std::printf("# %d ranks = %d node(s) x %d ranks per node%s\n", n, nodes, o.L,
                n % o.L != 0 ? " (last node partial: hierarchical runs flat ring)" : "");
    std::printf("# intra: %.3g us/step, %.4g GB/s per rank | inter: %.3g us/step, %.4g GB/s per rank | "
                "reduce %.4g GB/s | channels %d, chunk %.0f B\n",
                t.intra.latency_s * 1e6, t.intra.bandwidth_Bps / 1e9, t.inter.latency_s * 1e6,
                t.inter.bandwidth_Bps / 1e9, t.reduce_Bps / 1e9, t.channels, t.chunk_bytes);
    std::printf("# size: nccl-tests size (AllReduce/Broadcast/Reduce the buffer, AllGather/ReduceScatter/all_to_all\n"
                "#   the whole n-block buffer); time in us; algbw = size/time, busbw = algbw x nccl-tests factor,"
                " GB/s\n");

    const std::vector<double> sizes = sweep(o);
    const std::size_t na = o.algos.size();
    for (collective c : o.colls) {
        std::vector<std::vector<model::prediction>> pred(sizes.size(), std::vector<model::prediction>(na));
        std::vector<std::size_t> win(sizes.size(), 0);
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            for (std::size_t k = 0; k < na; ++k) {
                pred[i][k] = model::evaluate(c, o.algos[k], n, sizes[i], t);
                if (pred[i][k].seconds < pred[i][win[i]].seconds) win[i] = k;
                const double s = pred[i][k].seconds;
                chk.expect(std::isfinite(s) && (n == 1 || s > 0),
                           std::string(chorus::collective_name(c)) + " " + model::algorithm_name(o.algos[k]) +
                               " at " + std::to_string(sizes[i]) + " B: " + std::to_string(s) + " s");
                if (i > 0)
                    chk.expect(s >= pred[i - 1][k].seconds, std::string(chorus::collective_name(c)) + " " +
                                                              model::algorithm_name(o.algos[k]) +
                                                              ": not monotone at " + std::to_string(sizes[i]) + " B");
            }
            if (csv != nullptr)
                for (std::size_t k = 0; k < na; ++k)
                    std::fprintf(csv, "sweep,%s,%.0f,%d,%d,%d,%s,%.9g,%.6f,%.6f,%d\n", chorus::collective_name(c),
                                 sizes[i], n, o.L, nodes, model::algorithm_name(o.algos[k]), pred[i][k].seconds,
                                 pred[i][k].algbw_Bps / 1e9, pred[i][k].busbw_Bps / 1e9, k == win[i] ? 1 : 0);
        }
        struct metric {
            const char* title;
            int which; // 0 time, 1 algbw, 2 busbw
        };
        for (const metric m :
             {metric{"predicted time (us)", 0}, metric{"algbw (GB/s)", 1}, metric{"busbw (GB/s)", 2}}) {
            std::printf("\n# %s, %d ranks: %s\n", chorus::collective_name(c), n, m.title);
            std::printf("%14s", "size");
            for (model::algorithm a : o.algos) std::printf(" %18s", model::algorithm_name(a));
            std::printf("  %s\n", "winner");
            for (std::size_t i = 0; i < sizes.size(); ++i) {
                std::printf("%14.0f", sizes[i]);
                for (std::size_t k = 0; k < na; ++k) {
                    const model::prediction& p = pred[i][k];
                    if (m.which == 0) std::printf(" %18s", fmt_us(p.seconds).c_str());
                    else std::printf(" %18.3f", (m.which == 1 ? p.algbw_Bps : p.busbw_Bps) / 1e9);
                }
                std::printf("  %s\n", model::algorithm_name(o.algos[win[i]]));
            }
        }
    }

    // Scaling: one size, growing rank counts, the first collective asked for.
    const collective sc = o.colls.front();
    std::printf("\n# scaling: %s of %.0f B, ranks per node %d; best over the algorithms compared; flat ring for "
                "reference.\n# eff = busbw / intra bandwidth per rank (%.4g GB/s); a note marks where busbw falls by "
                "10 %% or more from the row above\n",
                chorus::collective_name(sc), o.scale_bytes, o.L, t.intra.bandwidth_Bps / 1e9);
    std::printf("%8s %6s %20s %14s %12s %12s %6s %14s\n", "ranks", "nodes", "best", "time_us", "algbw_GB/s",
                "busbw_GB/s", "eff", "ring_us");
    double prev_bus = -1;
    int prev_nodes = 1;
    for (int m : scale_counts(n, o.L)) {
        std::size_t w = 0;
        std::vector<model::prediction> p(na);
        for (std::size_t k = 0; k < na; ++k) {
            p[k] = model::evaluate(sc, o.algos[k], m, o.scale_bytes, t);
            if (p[k].seconds < p[w].seconds) w = k;
            chk.expect(std::isfinite(p[k].seconds), std::string("scaling at ") + std::to_string(m) + " ranks");
        }
        const double ring_s = model::predict(sc, model::algorithm::ring, m, o.scale_bytes, t);
        const int mnodes = (m + o.L - 1) / o.L;
        char eff[16] = "-";
        if (m > 1) std::snprintf(eff, sizeof eff, "%.3f", p[w].busbw_Bps / t.intra.bandwidth_Bps);
        char note[64] = "";
        if (prev_bus > 0 && p[w].busbw_Bps <= 0.9 * prev_bus)
            std::snprintf(note, sizeof note, "busbw %+.0f%%%s", (p[w].busbw_Bps / prev_bus - 1) * 100,
                          mnodes > 1 && prev_nodes == 1 ? ": crosses the node boundary" : "");
        std::printf("%8d %6d %20s %14s %12.3f %12.3f %6s %14s%s%s\n", m, mnodes, model::algorithm_name(o.algos[w]),
                    fmt_us(p[w].seconds).c_str(), p[w].algbw_Bps / 1e9, p[w].busbw_Bps / 1e9, eff,
                    fmt_us(ring_s).c_str(), *note ? "  " : "", note);
        if (m > 1) prev_bus = p[w].busbw_Bps;
        prev_nodes = mnodes;
        if (csv != nullptr)
            for (std::size_t k = 0; k < na; ++k)
                std::fprintf(csv, "scaling,%s,%.0f,%d,%d,%d,%s,%.9g,%.6f,%.6f,%d\n", chorus::collective_name(sc),
                             o.scale_bytes, m, o.L, mnodes, model::algorithm_name(o.algos[k]), p[k].seconds,
                             p[k].algbw_Bps / 1e9, p[k].busbw_Bps / 1e9, k == w ? 1 : 0);
    }
    if (csv != nullptr) {
        if (std::fclose(csv) != 0) throw usage_error{"--csv: error writing " + o.csv_path};
        std::printf("# wrote %s\n", o.csv_path.c_str());
    }
    if (o.check) {
        if (chk.failures != 0) {
            std::fprintf(stderr, "chorus_sim: %d model check(s) FAILED\n", chk.failures);
            return 1;
        }
        std::printf("# model checks passed\n");
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_options(argc, argv));
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_sim: %s\n", e.what.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chorus_sim: %s\n", e.what());
        return 2;
    }
}
