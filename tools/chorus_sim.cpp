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

#include <algorithm>
#include <cctype>
#include <charconv>
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

struct usage_error {
    std::string what;
};

void print_usage(std::FILE* to, const char* argv0) {
    std::fprintf(to,
                 "usage: %s [options]\n"
                 "machine (default: 2 nodes x 8 GPUs):\n"
                 "  --nodes N               nodes\n"
                 "  --gpus-per-node G       ranks per node (default 8)\n"
                 "  --ranks n               total ranks instead of --nodes (the last node may be partial)\n"
                 "  --ranks-per-node L      same as --gpus-per-node\n"
                 "  --model FILE            start from this topology file (chorus_calibrate -o FILE);\n"
                 "                          its ranks_per_node is used unless -G/-L is given\n"
                 "  --intra-lat US          intra-node latency per step, microseconds (default 2)\n"
                 "  --intra-bw GBPS         intra-node bandwidth per rank, GB/s = 1e9 B/s (default 150)\n"
                 "  --inter-lat US          inter-node latency per step, microseconds (default 5)\n"
                 "  --inter-bw GBPS         inter-node bandwidth per rank, GB/s (default 25)\n"
                 "  --reduce-bw GBPS        reduction throughput per rank, GB/s of result (default 1000)\n"
                 "  --channels K            channels (default 1)\n"
                 "  --chunk-bytes SIZE      pipelining chunk (default 256K)\n"
                 "what to predict:\n"
                 "  --collective LIST       all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all\n"
                 "                          or all (default all_reduce)\n"
                 "  --algos LIST            algorithms to compare (default all: %s)\n"
                 "  --sizes MIN:MAX[:F]     message sizes, times F each row (default 8:1G:2); K M G suffixes\n"
                 "  -b, --minbytes SIZE     same as MIN\n"
                 "  -e, --maxbytes SIZE     same as MAX\n"
                 "  -f, --stepfactor F      same as F\n"
                 "  --scale-size SIZE       the size of the scaling table (default 256M)\n"
                 "  --csv FILE              also write every prediction as CSV\n"
                 "  --check                 check every prediction is finite, positive and monotone in size;\n"
                 "                          prints 'model checks passed' or exits 1\n"
                 "  -h, --help              this text\n",
                 argv0, [] {
                     static std::string s;
                     for (model::algorithm a : model::all_algorithms)
                         s += std::string(s.empty() ? "" : ",") + model::algorithm_name(a);
                     return s.c_str();
                 }());
}

double parse_number(std::string_view s, const std::string& flag) {
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || !(v >= 0) || v > 1e300)
        throw usage_error{flag + ": expected a number >= 0, got '" + std::string(s) + "'"};
    return v;
}

//! Bytes: a whole number with an optional K, M, G or T suffix (powers of 1024), "B"/"iB" allowed after it.
double parse_bytes(std::string_view s, const std::string& flag) {
    std::string_view num = s;
    double mult = 1;
    if (num.ends_with("iB")) num.remove_suffix(2);
    else if (num.ends_with("B") && num.size() > 1 && !std::isdigit(static_cast<unsigned char>(num[num.size() - 2])))
        num.remove_suffix(1);
    if (!num.empty()) {
        switch (num.back()) {
        case 'K': case 'k': mult = 1024.0; break;
        case 'M': case 'm': mult = 1024.0 * 1024; break;
        case 'G': case 'g': mult = 1024.0 * 1024 * 1024; break;
        case 'T': case 't': mult = 1024.0 * 1024 * 1024 * 1024; break;
        default: break;
        }
        if (mult != 1) num.remove_suffix(1);
    }
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
    if (num.empty() || ec != std::errc{} || end != num.data() + num.size())
        throw usage_error{flag + ": expected a size such as 4096, 64K, 1M or 1G, got '" + std::string(s) + "'"};
    return double(v) * mult;
}

long parse_int(std::string_view s, const std::string& flag, long lo, long hi) {
    long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi)
        throw usage_error{flag + ": expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got '" + std::string(s) + "'"};
    return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    while (true) {
        const std::size_t p = s.find(sep);
        out.push_back(s.substr(0, p));
        if (p == std::string_view::npos) break;
        s = s.substr(p + 1);
    }
    return out;
}

constexpr collective sim_collectives[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                          collective::broadcast,  collective::reduce,     collective::all_to_all};

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
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_value = false;
        if (arg.starts_with("--")) {
            if (const std::size_t eq = arg.find('='); eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_value = true;
            }
        } else if (arg.size() > 2 && arg[0] == '-') {
            value = arg.substr(2);
            arg = arg.substr(0, 2);
            has_value = true;
        }
        if (arg == "-h" || arg == "--help") {
            print_usage(stdout, argv[0]);
            std::exit(0);
        }
        if (arg == "--check") {
            if (has_value) throw usage_error{"--check takes no value"};
            o.check = true;
            continue;
        }
        static constexpr std::string_view valued[] = {
            "--nodes",    "--gpus-per-node", "--ranks",     "--ranks-per-node", "--model",      "--intra-lat",
            "--intra-bw", "--inter-lat",     "--inter-bw",  "--reduce-bw",      "--channels",   "--chunk-bytes",
            "--collective", "--collectives", "--algos",     "--sizes",          "-b",           "--minbytes",
            "-e",         "--maxbytes",      "-f",          "--stepfactor",     "--scale-size", "--csv"};
        if (std::find(std::begin(valued), std::end(valued), arg) == std::end(valued))
            throw usage_error{"unknown argument '" + std::string(argv[i]) + "' (see --help)"};
        if (!has_value) {
            if (i + 1 >= argc) throw usage_error{arg + " needs a value"};
            value = argv[++i];
        }
        if (arg == "--nodes") o.nodes = parse_int(value, arg, 1, 1 << 20);
        else if (arg == "--gpus-per-node" || arg == "--ranks-per-node") o.per_node = parse_int(value, arg, 1, 1 << 16);
        else if (arg == "--ranks") o.ranks = parse_int(value, arg, 1, 1 << 24);
        else if (arg == "--model") o.model_path = value;
        else if (arg == "--intra-lat") o.intra_lat_us = parse_number(value, arg);
        else if (arg == "--intra-bw") o.intra_bw = parse_number(value, arg);
        else if (arg == "--inter-lat") o.inter_lat_us = parse_number(value, arg);
        else if (arg == "--inter-bw") o.inter_bw = parse_number(value, arg);
        else if (arg == "--reduce-bw") o.reduce_bw = parse_number(value, arg);
        else if (arg == "--channels") o.channels = parse_int(value, arg, 1, 64);
        else if (arg == "--chunk-bytes") o.chunk_bytes = parse_bytes(value, arg);
        else if (arg == "--collective" || arg == "--collectives") {
            o.colls.clear();
            if (value == "all") o.colls.assign(std::begin(sim_collectives), std::end(sim_collectives));
            else
                for (std::string_view item : split(value, ',')) {
                    bool found = false;
                    for (collective c : sim_collectives)
                        if (item == chorus::collective_name(c)) {
                            o.colls.push_back(c);
                            found = true;
                        }
                    if (!found) throw usage_error{arg + ": unknown collective '" + std::string(item) + "'"};
                }
        } else if (arg == "--algos") {
            o.algos.clear();
            if (value != "all")
                for (std::string_view item : split(value, ',')) {
                    model::algorithm a{};
                    if (!model::algorithm_from_name(item, a))
                        throw usage_error{arg + ": unknown algorithm '" + std::string(item) + "'"};
                    o.algos.push_back(a);
                }
            else o.algos.assign(std::begin(model::all_algorithms), std::end(model::all_algorithms));
        } else if (arg == "--sizes") {
            const auto parts = split(value, ':');
            if (parts.size() < 2 || parts.size() > 3) throw usage_error{"--sizes: expected MIN:MAX or MIN:MAX:FACTOR"};
            o.min_bytes = parse_bytes(parts[0], arg);
            o.max_bytes = parse_bytes(parts[1], arg);
            if (parts.size() == 3) o.factor = double(parse_int(parts[2], arg, 2, 1 << 20));
        } else if (arg == "-b" || arg == "--minbytes") o.min_bytes = parse_bytes(value, arg);
        else if (arg == "-e" || arg == "--maxbytes") o.max_bytes = parse_bytes(value, arg);
        else if (arg == "-f" || arg == "--stepfactor") o.factor = double(parse_int(value, arg, 2, 1 << 20));
        else if (arg == "--scale-size") o.scale_bytes = parse_bytes(value, arg);
        else if (arg == "--csv") o.csv_path = value;
    }
    if (o.min_bytes < 1) throw usage_error{"the smallest size must be at least 1 byte"};
    if (o.min_bytes > o.max_bytes) throw usage_error{"the smallest size is larger than the largest"};
    if (o.algos.empty()) throw usage_error{"--algos: no algorithm"};
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
