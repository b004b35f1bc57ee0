#pragma once
//! \file model/cost.hpp
//! The cost model: predicted seconds of one collective call per algorithm,
//! from a small description of the machine (a `topology`). The `automatic`
//! policy asks it which algorithm to run; tools/chorus_calibrate fits it to
//! a machine and checks it; tools/chorus_sim evaluates it at scale.
//! docs/model.md has the formulas with their derivation.
//!
//! The model, per level (intra-node, inter-node):
//!     time = steps * latency + moved / bandwidth + reduced / reduce_Bps
//! `steps` counts dependent steps (each waits for a peer), `moved` the
//! bytes one rank receives (reads from peers) on the critical path,
//! `reduced` the bytes of result one rank computes with the operator.
//! Bandwidth is per rank: ranks move data concurrently. A flat algorithm
//! whose ranks span several nodes (0 < ranks_per_node < n) runs every step
//! at the inter-node link (the slowest link bounds a ring or tree step);
//! hierarchical AllReduce charges its intra-node phases to the intra link
//! and its inter-node phase to the inter link.
//!
//! predict() is constexpr, noexcept, allocation-free and a few dozen flops:
//! the selector calls it on every collective call.

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <locale>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <version>

#include "../algo/schedule.hpp"
#include "../core/error.hpp"

namespace chorus::model {

//! The algorithms the model knows (one per policy in algo/).
enum class algorithm : std::uint8_t { ring, direct, tree, recursive_doubling, rabenseifner, two_shot, hierarchical };

inline constexpr algorithm all_algorithms[] = {algorithm::ring,         algorithm::direct,   algorithm::tree,
                                               algorithm::recursive_doubling, algorithm::rabenseifner,
                                               algorithm::two_shot,     algorithm::hierarchical};
inline constexpr int algorithm_count = int(sizeof(all_algorithms) / sizeof(all_algorithms[0]));

//! The policy's name (the `name` member of ring<>, direct<>, ...).
constexpr const char* algorithm_name(algorithm a) {
    switch (a) {
    case algorithm::ring: return "ring";
    case algorithm::direct: return "direct";
    case algorithm::tree: return "tree";
    case algorithm::recursive_doubling: return "recursive_doubling";
    case algorithm::rabenseifner: return "rabenseifner";
    case algorithm::two_shot: return "two_shot";
    case algorithm::hierarchical: return "hierarchical";
    }
    return "?";
}

//! The algorithm called `name` (as algorithm_name spells it); false if none.
constexpr bool algorithm_from_name(std::string_view name, algorithm& out) {
    for (algorithm a : all_algorithms)
        if (name == algorithm_name(a)) {
            out = a;
            return true;
        }
    return false;
}

//! One level of the machine: alpha (seconds per dependent step) and the
//! bandwidth one rank gets (bytes per second, 1 / beta).
struct link {
    double latency_s;
    double bandwidth_Bps;
};

// Assumed figures, not measurements (docs/model.md says where they come from).
//! Ranks that are threads or processes of one host: a hand-off through a
//! cache line (~1 us with polling), a memcpy stream per core (~10 GB/s).
inline constexpr link host_memory_link{1e-6, 10e9};
//! GPUs of one node over NVLink-class links (~2 us per step, ~150 GB/s per GPU and direction).
inline constexpr link nvlink_class_link{2e-6, 150e9};
//! Nodes over InfiniBand-class links (HDR 200 Gb/s = 25 GB/s per rank, ~5 us per step).
inline constexpr link infiniband_class_link{5e-6, 25e9};
//! Reduction throughput, bytes of result per second and rank: one host core / a GPU.
inline constexpr double host_reduce_Bps = 5e9;
inline constexpr double gpu_reduce_Bps = 1e12;

//! What the model knows about the machine. The defaults describe ranks
//! sharing one host's memory (the threads and shm backends), with an
//! InfiniBand-class link in case a node split is set.
struct topology {
    int ranks_per_node = 0;               //!< 0 or >= nranks: one node
    link intra{host_memory_link};         //!< between ranks of one node
    link inter{infiniband_class_link};    //!< between nodes
    double reduce_Bps = host_reduce_Bps;  //!< reduction throughput per rank, bytes of result per second
    int channels = 1;                     //!< channels per collective (pipelined chunks are per channel)
    double chunk_bytes = 256.0 * 1024;    //!< pipelining granularity (ring Broadcast/Reduce, tree)
};

//! The library's default: one host (topology{}).
inline topology default_topology() { return topology{}; }

//! A GPU cluster of NVLink-class nodes joined by InfiniBand-class links
//! (what tools/chorus_sim assumes unless told otherwise).
constexpr topology gpu_cluster_topology(int gpus_per_node) {
    topology t{};
    t.ranks_per_node = gpus_per_node;
    t.intra = nvlink_class_link;
    t.inter = infiniband_class_link;
    t.reduce_Bps = gpu_reduce_Bps;
    return t;
}

//! Cost of one level: dependent steps, bytes moved and bytes reduced per rank.
struct terms {
    double steps = 0;
    double moved = 0;
    double reduced = 0;

    constexpr terms& operator+=(const terms& o) {
        steps += o.steps;
        moved += o.moved;
        reduced += o.reduced;
        return *this;
    }
};

//! A call's cost split by level (only hierarchical uses both).
struct breakdown {
    terms intra{};
    terms inter{};
};

namespace detail {

//! floor(log2 n) for n >= 1.
constexpr int floor_log2(long long n) {
    int k = 0;
    while (n > 1) {
        n >>= 1;
        ++k;
    }
    return k;
}

//! ceil(x), at least 1 (chunk counts); constexpr, unlike std::ceil in C++20.
constexpr double ceil_count(double x) {
    if (!(x > 1)) return 1; // also NaN
    if (x >= 4.0e15) return x; // beyond 2^52 every double is an integer
    const double i = double(static_cast<std::uint64_t>(x));
    return i < x ? i + 1 : i;
}

//! Chunks a pipelined schedule cuts `bytes` into (per channel).
constexpr double chunks_of(double bytes, const topology& t) {
    const double ch = t.channels > 0 ? double(t.channels) : 1.0;
    const double cb = t.chunk_bytes > 0 ? t.chunk_bytes : 256.0 * 1024;
    return ceil_count(bytes / (ch * cb));
}

constexpr terms exchange_terms(collective c, double n, double S) {
    const double share = (n - 1) / n * S;
    return {1, share, c == collective::reduce_scatterv ? share : 0};
}

constexpr terms ring_terms(collective c, double n, double S, const topology& t) {
    if (is_exchange(c)) return exchange_terms(c, n, S);
    const double f = (n - 1) / n;
    switch (c) {
    case collective::all_reduce: return {2 * (n - 1), 2 * f * S, f * S};
    case collective::all_gather: return {n - 1, f * S, 0};
    case collective::reduce_scatter: return {n - 1, f * S, f * S};
    case collective::broadcast:
    case collective::reduce: {
        // A pipelined chain: chunk k leaves rank i at step i + k.
        const double chunks = chunks_of(S, t);
        const double steps = n - 1 + chunks - 1;
        const double per_step = S / chunks;
        return {steps, steps * per_step, c == collective::reduce ? steps * per_step : 0};
    }
    case collective::barrier:
    default: return {1, 0, 0};
    }
}

constexpr terms direct_terms(collective c, double n, double S) {
    if (is_exchange(c)) return exchange_terms(c, n, S);
    switch (c) {
    case collective::all_reduce: return {1, n * S, (n - 1) * S};
    case collective::all_gather: return {1, (n - 1) / n * S, 0};
    case collective::reduce_scatter: return {1, S, (n - 1) / n * S};
    // Broadcast: every rank reads S, but the root serves all n-1 of them:
    // its link carries (n-1) S, and bounds the step (Reduce's root reads n S).
    case collective::broadcast: return {1, (n - 1) * S, 0};
    case collective::reduce: return {1, n * S, (n - 1) * S};
    case collective::barrier:
    default: return {1, 0, 0};
    }
}

//! Non-power-of-two fix-up of recursive doubling and Rabenseifner: the
//! first 2(n - p) ranks pair up before (with a reduce) and after (a copy).
constexpr terms fold_terms(double n, double p, double S) {
    return n != p ? terms{2, 2 * S, S} : terms{};
}

constexpr terms flat_terms(collective c, algorithm a, double n, double S, const topology& t) {
    const double p = double(1ll << floor_log2(static_cast<long long>(n)));
    const double m = double(floor_log2(static_cast<long long>(n)));
    switch (a) {
    case algorithm::ring:
    case algorithm::hierarchical: return ring_terms(c, n, S, t);
    case algorithm::direct: return direct_terms(c, n, S);
    case algorithm::two_shot:
        if (c == collective::all_reduce) return {2, S + (n - 1) / n * S, (n - 1) / n * S};
        return direct_terms(c, n, S);
    case algorithm::recursive_doubling:
        if (c == collective::all_reduce) {
            terms r{m, m * S, m * S};
            r += fold_terms(n, p, S);
            return r;
        }
        return direct_terms(c, n, S);
    case algorithm::rabenseifner:
        if (c == collective::all_reduce) {
            terms r{2 * m, 2 * (p - 1) / p * S, (p - 1) / p * S};
            r += fold_terms(n, p, S);
            return r;
        }
        return ring_terms(c, n, S, t);
    case algorithm::tree: {
        if (is_exchange(c)) return exchange_terms(c, n, S);
        // Two trees, each carrying S/2 in chunks, reduce up then broadcast down.
        const double chunks = chunks_of(S / 2, t);
        const double up = m + chunks - 1;
        switch (c) {
        case collective::all_reduce: return {2 * up, 2 * S, S};
        case collective::broadcast: return {up, S, 0};
        case collective::reduce: return {up, S, S};
        case collective::barrier: return {1, 0, 0};
        default: return ring_terms(c, n, S, t);
        }
    }
    }
    return ring_terms(c, n, S, t);
}

} // namespace detail

//! Steps, bytes moved and bytes reduced per rank and level for one call.
//! `bytes` as for predict().
constexpr breakdown decompose(collective c, algorithm a, int nranks, double bytes, const topology& t) noexcept {
    breakdown b{};
    const double S = bytes > 0 ? bytes : 0;
    if (nranks <= 1) { // a local copy
        if (c != collective::barrier) b.intra.moved = S;
        return b;
    }
    const double n = double(nranks);
    const int L = t.ranks_per_node;
    const bool spans = L > 0 && L < nranks;
    if (a == algorithm::hierarchical && c == collective::all_reduce && spans && nranks % L == 0) {
        // Intra ring reduce-scatter, inter ring AllReduce of S/L among the
        // N node groups, intra ring all-gather.
        const double l = double(L);
        const double N = n / l;
        const double fl = (l - 1) / l;
        b.intra = {2 * (l - 1), 2 * fl * S, fl * S};
        b.inter = detail::ring_terms(collective::all_reduce, N, S / l, t);
        return b;
    }
    (spans ? b.inter : b.intra) = detail::flat_terms(c, a, n, S, t);
    return b;
}

//! Seconds of one level's terms on link `l`.
constexpr double seconds(const terms& x, const link& l, double reduce_Bps) noexcept {
    return x.steps * l.latency_s + x.moved / l.bandwidth_Bps + x.reduced / reduce_Bps;
}

//! Predicted seconds for one call. `bytes` is the nccl-tests "size":
//! AllReduce/Broadcast/Reduce the buffer; AllGather/ReduceScatter/
//! all_to_all and the v-variants the whole (n-block) buffer.
constexpr double predict(collective c, algorithm a, int nranks, double bytes, const topology& t) noexcept {
    const breakdown b = decompose(c, a, nranks, bytes, t);
    double s = 0;
    if (b.intra.steps != 0 || b.intra.moved != 0 || b.intra.reduced != 0) s += seconds(b.intra, t.intra, t.reduce_Bps);
    if (b.inter.steps != 0 || b.inter.moved != 0 || b.inter.reduced != 0) s += seconds(b.inter, t.inter, t.reduce_Bps);
    return s;
}

//! The nccl-tests bus bandwidth factor: busbw = algbw * factor.
constexpr double bus_factor(collective c, int nranks) noexcept {
    const double n = nranks > 0 ? double(nranks) : 1.0;
    switch (c) {
    case collective::all_reduce: return 2 * (n - 1) / n;
    case collective::all_gather:
    case collective::reduce_scatter:
    case collective::all_to_all:
    case collective::all_gatherv:
    case collective::reduce_scatterv:
    case collective::all_to_allv: return (n - 1) / n;
    case collective::broadcast:
    case collective::reduce:
    case collective::barrier: return 1;
    }
    return 1;
}

//! A prediction in the units of nccl-tests: seconds, algbw = bytes /
//! seconds, busbw = algbw * bus_factor (bytes per second; 0 for a call
//! predicted to take no time).
struct prediction {
    double seconds;
    double algbw_Bps;
    double busbw_Bps;
};

constexpr prediction evaluate(collective c, algorithm a, int nranks, double bytes, const topology& t) noexcept {
    const double s = predict(c, a, nranks, bytes, t);
    const double alg = s > 0 ? bytes / s : 0;
    return {s, alg, alg * bus_factor(c, nranks)};
}

//! The candidate with the least predicted time (the first of equals);
//! candidates[0] when k <= 1, algorithm::ring when there are none.
constexpr algorithm best(collective c, int nranks, double bytes, const topology& t, const algorithm* candidates,
                         int k) noexcept {
    if (candidates == nullptr || k <= 0) return algorithm::ring;
    algorithm win = candidates[0];
    double t_win = predict(c, win, nranks, bytes, t);
    for (int i = 1; i < k; ++i) {
        const double ti = predict(c, candidates[i], nranks, bytes, t);
        if (ti < t_win) {
            win = candidates[i];
            t_win = ti;
        }
    }
    return win;
}

//! best() over all_algorithms.
constexpr algorithm best(collective c, int nranks, double bytes, const topology& t) noexcept {
    return best(c, nranks, bytes, t, all_algorithms, algorithm_count);
}

// --- the topology file ---------------------------------------------------------
//
//   # comment lines and trailing comments start with '#'
//   ranks_per_node = 0
//   intra.latency_s = 1e-06
//   ...
// Keys may come in any order and may be left out (the default stays);
// a key may appear once. Numbers are C floating-point literals.

namespace detail {

// Locale-independent number text: std::to_chars / from_chars where the
// library has them for floating point (shortest round-trip digits), else a
// stream imbued with the classic locale (17 significant digits).
inline std::string format_number(double v) {
#if defined(__cpp_lib_to_chars)
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
#else
    std::ostringstream out;
    out.imbue(std::locale::classic());
    out.precision(17);
    out << v;
    return out.str();
#endif
}

//! The whole of `s` as a number; false if it is not one.
inline bool parse_number(std::string_view s, double& v) {
    if (s.empty()) return false;
#if defined(__cpp_lib_to_chars)
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && end == s.data() + s.size();
#else
    std::istringstream in{std::string(s)};
    in.imbue(std::locale::classic());
    in >> v;
    return !in.fail() && in.peek() == std::char_traits<char>::eof();
#endif
}

inline std::string_view trim(std::string_view s) {
    const auto ws = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return s;
}

[[noreturn]] inline void model_error(const std::string& source, int line, std::string_view key,
                                     const std::string& what) {
    std::string msg = "chorus: model file '" + source + "', line " + std::to_string(line);
    if (!key.empty()) msg += ", key '" + std::string(key) + "'";
    throw error(errc::invalid_argument, msg + ": " + what);
}

} // namespace detail

//! The topology as a small "key = value" file, one key per line, after a
//! comment header; parse() reads it back exactly (shortest round-trip digits).
inline std::string to_text(const topology& t) {
    using detail::format_number;
    std::string s;
    s += "# chorus cost model (chorus::model::topology): time = steps * latency_s\n";
    s += "#   + moved_bytes / bandwidth_Bps + reduced_bytes / reduce_Bps, per level (docs/model.md)\n";
    s += "ranks_per_node = " + std::to_string(t.ranks_per_node) + "\n";
    s += "intra.latency_s = " + format_number(t.intra.latency_s) + "\n";
    s += "intra.bandwidth_Bps = " + format_number(t.intra.bandwidth_Bps) + "\n";
    s += "inter.latency_s = " + format_number(t.inter.latency_s) + "\n";
    s += "inter.bandwidth_Bps = " + format_number(t.inter.bandwidth_Bps) + "\n";
    s += "reduce_Bps = " + format_number(t.reduce_Bps) + "\n";
    s += "channels = " + std::to_string(t.channels) + "\n";
    s += "chunk_bytes = " + format_number(t.chunk_bytes) + "\n";
    return s;
}

//! Reads what to_text() writes. Throws chorus::error(errc::invalid_argument)
//! naming `source`, the line and the key: unknown or repeated keys, a line
//! without '=', a value that is not a number or out of range.
inline topology parse(std::string_view text, const std::string& source) {
    topology t = default_topology();
    enum key_id { k_rpn, k_ilat, k_ibw, k_xlat, k_xbw, k_red, k_ch, k_chunk, k_count };
    static constexpr std::string_view names[k_count] = {
        "ranks_per_node", "intra.latency_s", "intra.bandwidth_Bps", "inter.latency_s",
        "inter.bandwidth_Bps", "reduce_Bps", "channels", "chunk_bytes"};
    int seen_at[k_count] = {};
    int line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        line = detail::trim(line);
        if (line.empty()) continue;
        const std::size_t eq = line.find('=');
        if (eq == std::string_view::npos)
            detail::model_error(source, line_no, {}, "expected 'key = value', got '" + std::string(line) + "'");
        const std::string_view key = detail::trim(line.substr(0, eq));
        const std::string_view val = detail::trim(line.substr(eq + 1));
        int id = -1;
        for (int i = 0; i < k_count; ++i)
            if (key == names[i]) id = i;
        if (id < 0) {
            std::string known;
            for (std::string_view n : names) known += (known.empty() ? "" : ", ") + std::string(n);
            detail::model_error(source, line_no, key, "unknown key (known: " + known + ")");
        }
        if (seen_at[id] != 0)
            detail::model_error(source, line_no, key,
                                "given twice (first on line " + std::to_string(seen_at[id]) + ")");
        seen_at[id] = line_no;
        double v = 0;
        if (!detail::parse_number(val, v))
            detail::model_error(source, line_no, key, "expected a number, got '" + std::string(val) + "'");
        const bool is_int = id == k_rpn || id == k_ch;
        const bool latency = id == k_ilat || id == k_xlat;
        const bool zero_ok = latency || id == k_rpn;
        if (!(v == v) || v > 1e300 || v < 0 || (!zero_ok && v == 0))
            detail::model_error(source, line_no, key,
                                std::string(zero_ok ? "expected a number >= 0" : "expected a number > 0") +
                                    ", got '" + std::string(val) + "'");
        if (is_int && (v != double(static_cast<long long>(v)) || v > 1 << 24))
            detail::model_error(source, line_no, key,
                                "expected a whole number up to 2^24, got '" + std::string(val) + "'");
        switch (id) {
        case k_rpn: t.ranks_per_node = int(v); break;
        case k_ilat: t.intra.latency_s = v; break;
        case k_ibw: t.intra.bandwidth_Bps = v; break;
        case k_xlat: t.inter.latency_s = v; break;
        case k_xbw: t.inter.bandwidth_Bps = v; break;
        case k_red: t.reduce_Bps = v; break;
        case k_ch: t.channels = int(v); break;
        case k_chunk: t.chunk_bytes = v; break;
        default: break;
        }
    }
    return t;
}

//! parse() of the file at `path`; throws chorus::error naming the path when
//! it cannot be read.
inline topology load_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error(errc::invalid_argument, "chorus: cannot read model file '" + path + "'");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw error(errc::invalid_argument, "chorus: error reading model file '" + path + "'");
    return parse(text, path);
}

//! The process-wide topology: the file named by CHORUS_MODEL (read once,
//! on first use), else default_topology(). A file that cannot be read or
//! parsed throws chorus::error from this call (and from every later one).
inline const topology& current() {
    static const topology t = [] {
        const char* path = std::getenv("CHORUS_MODEL");
        if (path != nullptr && *path != '\0') return load_file(path);
        return default_topology();
    }();
    return t;
}

} // namespace chorus::model
