#pragma once
//! \file model/cost.hpp
//! The cost model: predicted seconds of one collective call per algorithm,
//! from a small description of the machine (a `topology`). The `automatic`
//! policy asks it which algorithm to run; tools/chorus_calibrate fits it to
//! a machine and checks it; tools/chorus_sim evaluates it at scale.
//! docs/model.md has the formulas with their derivation.
//!
//! The model, per level (intra-node, inter-node):
//!     time = steps * latency + moved / bandwidth + local / local_Bps
//!            + reduced / reduce_Bps
//! `steps` counts dependent steps (each waits for a peer), `moved` the
//! bytes one rank receives (reads from peers) on the critical path,
//! `local` the bytes it reads from and writes to its own buffers besides
//! (AllReduce only: there the algorithms differ most in it), `reduced` the
//! bytes of result one rank computes with the operator. A calibrated
//! topology also carries per-algorithm corrections: measured / predicted
//! at sizes on a grid, for the rank counts it was calibrated with; the
//! prediction is multiplied by the correction interpolated at its size.
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
#include <limits>
#include <locale>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
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

//! The algorithm whose schedule policy `a` runs for collective `c`: the
//! logarithmic and two-shot policies run direct<> for everything but
//! AllReduce, tree<> runs ring<> for AllGather and ReduceScatter, and
//! hierarchical<> runs ring<> for everything but AllReduce (and for
//! AllReduce on one node). The exchange collectives (all_to_all and the
//! "v" ones) run one schedule whatever the policy.
constexpr algorithm runs_as(collective c, algorithm a) {
    if (c == collective::all_reduce || c == collective::barrier || is_exchange(c)) return a;
    switch (a) {
    case algorithm::recursive_doubling:
    case algorithm::rabenseifner:
    case algorithm::two_shot: return algorithm::direct;
    case algorithm::tree: return c == collective::broadcast || c == collective::reduce ? algorithm::tree : algorithm::ring;
    case algorithm::hierarchical: return algorithm::ring;
    default: return a;
    }
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
//! MPI point-to-point between processes of one host: the MPI library's
//! shared-memory transport copies in and out (about half a memcpy stream)
//! and a message costs a few microseconds.
inline constexpr link mpi_shared_memory_link{2e-6, 5e9};
//! Reduction throughput, bytes of result per second and rank: one host core / a GPU.
inline constexpr double host_reduce_Bps = 5e9;
inline constexpr double gpu_reduce_Bps = 1e12;
//! A GPU's own memory (HBM-class, ~2 TB/s): what its local copies cost.
inline constexpr double gpu_local_Bps = 2e12;

//! Grid of a correction: sizes 8 B * 4^i, i = 0 .. correction_points - 1
//! (8 B .. 128 MiB).
inline constexpr int correction_points = 13;
inline constexpr int max_corrections = 64;

//! A calibrated correction of one (collective, algorithm, rank count):
//! measured / first-order prediction at each grid size. Between grid
//! sizes it is interpolated linearly in bytes; outside, the end values hold.
struct correction {
    collective coll = collective::all_reduce;
    algorithm algo = algorithm::ring;
    int nranks = 0;
    float ratio[correction_points]{};

    //! Grid size i in bytes.
    static constexpr double grid_bytes(int i) { return 8.0 * double(std::uint64_t(1) << (2 * i)); }
    constexpr double at(double bytes) const {
        if (!(bytes > grid_bytes(0))) return ratio[0];
        for (int i = 0; i + 1 < correction_points; ++i) {
            const double lo = grid_bytes(i), hi = grid_bytes(i + 1);
            if (bytes < hi) return ratio[i] + (bytes - lo) / (hi - lo) * (ratio[i + 1] - ratio[i]);
        }
        return ratio[correction_points - 1];
    }
};

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
    //! Bandwidth of a rank's own memory for `local` bytes; 0: the level's
    //! link bandwidth (ranks of one host: the same memory).
    double local_Bps = 0;
    //! Flat algorithms use the inter link even between ranks of one node,
    //! and hierarchical runs its node phases at the intra link on one node
    //! too: the MPI backend, whose flat schedules are point-to-point
    //! messages and whose hierarchical<> uses the node's shared memory.
    bool flat_inter = false;
    //! With flat_inter, on one node: hierarchical runs one-shot (direct's
    //! terms) when a rank's input share is at most this many bytes (the
    //! MPI engine's small buffers); 0: never.
    double one_shot_bytes = 0;
    int correction_count = 0;             //!< entries of `corrections` in use
    correction corrections[max_corrections]{};

    //! The correction of (c, a, nranks) at `bytes`; 1 without one.
    constexpr double correction_at(collective c, algorithm a, int nranks, double bytes) const {
        for (int i = 0; i < correction_count && i < max_corrections; ++i) {
            const correction& k = corrections[i];
            if (k.nranks == nranks && k.algo == a && k.coll == c) return k.at(bytes);
        }
        return 1;
    }
};

//! The library's default: one host (topology{}).
inline topology default_topology() { return topology{}; }

//! What the MPI backend assumes without a model file: nodes of
//! `ranks_per_node` processes sharing host memory (hierarchical<>'s node
//! phases), flat schedules as MPI point-to-point messages: between hosts
//! over InfiniBand-class links, within one host over the MPI library's
//! shared-memory transport.
constexpr topology mpi_topology(int ranks_per_node, bool several_hosts) {
    topology t{};
    t.ranks_per_node = ranks_per_node;
    t.intra = host_memory_link;
    t.inter = several_hosts ? infiniband_class_link : mpi_shared_memory_link;
    t.flat_inter = true;
    t.one_shot_bytes = 32.0 * 1024;
    return t;
}

//! A GPU cluster of NVLink-class nodes joined by InfiniBand-class links
//! (what tools/chorus_sim assumes unless told otherwise).
constexpr topology gpu_cluster_topology(int gpus_per_node) {
    topology t{};
    t.ranks_per_node = gpus_per_node;
    t.intra = nvlink_class_link;
    t.inter = infiniband_class_link;
    t.reduce_Bps = gpu_reduce_Bps;
    t.local_Bps = gpu_local_Bps;
    return t;
}

//! Cost of one level: dependent steps, bytes moved and bytes reduced per rank.
struct terms {
    double steps = 0;
    double moved = 0;
    double reduced = 0;
    double local = 0;

    constexpr terms& operator+=(const terms& o) {
        steps += o.steps;
        moved += o.moved;
        reduced += o.reduced;
        local += o.local;
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
    // Local: the own slices read, partials and results written; the last
    // reduce-scatter step also writes the successor's result: (3n-4)/n S.
    case collective::all_reduce: return {2 * (n - 1), 2 * f * S, f * S, (3 * n - 4) / n * S};
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
    case collective::all_reduce: return {1, n * S, (n - 1) * S, S};
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
    return n != p ? terms{2, 2 * S, S, 2 * S} : terms{};
}

constexpr terms flat_terms(collective c, algorithm a, double n, double S, const topology& t) {
    const double p = double(1ll << floor_log2(static_cast<long long>(n)));
    const double m = double(floor_log2(static_cast<long long>(n)));
    switch (a) {
    case algorithm::ring:
    case algorithm::hierarchical: return ring_terms(c, n, S, t);
    case algorithm::direct: return direct_terms(c, n, S);
    case algorithm::two_shot:
        if (c == collective::all_reduce) return {2, S + (n - 1) / n * S, (n - 1) / n * S, S};
        return direct_terms(c, n, S);
    case algorithm::recursive_doubling:
        if (c == collective::all_reduce) {
            terms r{m, m * S, m * S, 2 * m * S};
            r += fold_terms(n, p, S);
            return r;
        }
        return direct_terms(c, n, S);
    case algorithm::rabenseifner:
        if (c == collective::all_reduce) {
            terms r{2 * m, 2 * (p - 1) / p * S, (p - 1) / p * S, 3 * (p - 1) / p * S};
            r += fold_terms(n, p, S);
            return r;
        }
        return direct_terms(c, n, S);
    case algorithm::tree: {
        if (is_exchange(c)) return exchange_terms(c, n, S);
        // Two trees, each carrying S/2 in chunks, reduce up then broadcast down.
        const double chunks = chunks_of(S / 2, t);
        const double up = m + chunks - 1;
        switch (c) {
        case collective::all_reduce: return {2 * up, 2 * S, S, 2 * S};
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
//! `ranks_per_node` in place of t.ranks_per_node (what a backend's node split says).
constexpr breakdown decompose(collective c, algorithm a, int nranks, double bytes, const topology& t,
                              int ranks_per_node) noexcept {
    breakdown b{};
    const double S = bytes > 0 ? bytes : 0;
    if (nranks <= 1) { // a local copy
        if (c != collective::barrier) b.intra.moved = S;
        return b;
    }
    const double n = double(nranks);
    const int L = ranks_per_node;
    const bool spans = L > 0 && L < nranks;
    if (a == algorithm::hierarchical && t.flat_inter && !spans) {
        // One node (MPI): its intra algorithm on the node's shared memory,
        // one-shot for small inputs.
        const double share = c == collective::all_gather ? S / n : S;
        b.intra = share <= t.one_shot_bytes ? detail::direct_terms(c, n, S) : detail::flat_terms(c, a, n, S, t);
        return b;
    }
    const bool split = spans && nranks % L == 0;
    if (a == algorithm::hierarchical && c == collective::all_reduce && split) {
        // Intra ring reduce-scatter, inter ring AllReduce of S/L among the
        // N node groups, intra ring all-gather.
        const double l = double(L);
        const double N = n / l;
        const double fl = (l - 1) / l;
        b.intra = {2 * (l - 1), 2 * fl * S, fl * S, (3 * l - 4) / l * S};
        b.inter = detail::ring_terms(collective::all_reduce, N, S / l, t);
        return b;
    }
    (spans || t.flat_inter ? b.inter : b.intra) = detail::flat_terms(c, a, n, S, t);
    return b;
}

constexpr breakdown decompose(collective c, algorithm a, int nranks, double bytes, const topology& t) noexcept {
    return decompose(c, a, nranks, bytes, t, t.ranks_per_node);
}

//! Seconds of one level's terms on link `l`.
constexpr double seconds(const terms& x, const link& l, double reduce_Bps, double local_Bps = 0) noexcept {
    return x.steps * l.latency_s + x.moved / l.bandwidth_Bps +
           x.local / (local_Bps > 0 ? local_Bps : l.bandwidth_Bps) + x.reduced / reduce_Bps;
}

//! Predicted seconds for one call. `bytes` is the nccl-tests "size":
//! AllReduce/Broadcast/Reduce the buffer; AllGather/ReduceScatter/
//! all_to_all and the v-variants the whole (n-block) buffer.
//! The first-order prediction alone (no correction).
constexpr double predict_uncorrected(collective c, algorithm a, int nranks, double bytes, const topology& t,
                                     int ranks_per_node) noexcept {
    const breakdown b = decompose(c, a, nranks, bytes, t, ranks_per_node);
    double s = 0;
    if (b.intra.steps != 0 || b.intra.moved != 0 || b.intra.reduced != 0 || b.intra.local != 0)
        s += seconds(b.intra, t.intra, t.reduce_Bps, t.local_Bps);
    if (b.inter.steps != 0 || b.inter.moved != 0 || b.inter.reduced != 0 || b.inter.local != 0)
        s += seconds(b.inter, t.inter, t.reduce_Bps, t.local_Bps);
    return s;
}
constexpr double predict_uncorrected(collective c, algorithm a, int nranks, double bytes,
                                     const topology& t) noexcept {
    return predict_uncorrected(c, a, nranks, bytes, t, t.ranks_per_node);
}

//! `ranks_per_node` in place of t.ranks_per_node.
constexpr double predict(collective c, algorithm a, int nranks, double bytes, const topology& t,
                         int ranks_per_node) noexcept {
    // hierarchical<> on MPI (flat_inter) is its own engine for every collective.
    const algorithm key = t.flat_inter && a == algorithm::hierarchical ? a : runs_as(c, a);
    return predict_uncorrected(c, a, nranks, bytes, t, ranks_per_node) * t.correction_at(c, key, nranks, bytes);
}
constexpr double predict(collective c, algorithm a, int nranks, double bytes, const topology& t) noexcept {
    return predict(c, a, nranks, bytes, t, t.ranks_per_node);
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

namespace detail {

// No test of the pointer here: g++ 12 with -fsanitize=undefined does not
// fold a comparison of a namespace-scope array's address with null in a
// constant expression, and best(c, n, bytes, t) must stay constexpr.
constexpr algorithm best_of(collective c, int nranks, double bytes, const topology& t, const algorithm* candidates,
                            int k, int ranks_per_node) noexcept {
    if (k <= 0) return algorithm::ring;
    algorithm win = candidates[0];
    double t_win = predict(c, win, nranks, bytes, t, ranks_per_node);
    for (int i = 1; i < k; ++i) {
        const double ti = predict(c, candidates[i], nranks, bytes, t, ranks_per_node);
        if (ti < t_win) {
            win = candidates[i];
            t_win = ti;
        }
    }
    return win;
}

} // namespace detail

//! The candidate with the least predicted time (the first of equals);
//! candidates[0] when k <= 1, algorithm::ring when there are none.
constexpr algorithm best(collective c, int nranks, double bytes, const topology& t, const algorithm* candidates,
                         int k, int ranks_per_node) noexcept {
    if (candidates == nullptr) return algorithm::ring;
    return detail::best_of(c, nranks, bytes, t, candidates, k, ranks_per_node);
}

constexpr algorithm best(collective c, int nranks, double bytes, const topology& t, const algorithm* candidates,
                         int k) noexcept {
    return best(c, nranks, bytes, t, candidates, k, t.ranks_per_node);
}

//! best() over all_algorithms.
constexpr algorithm best(collective c, int nranks, double bytes, const topology& t) noexcept {
    return detail::best_of(c, nranks, bytes, t, all_algorithms, algorithm_count, t.ranks_per_node);
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
// stream imbued with the classic locale (max_digits10 significant digits).
template <class F>
inline std::string format_number(F v) {
    static_assert(std::is_floating_point_v<F>);
#if defined(__cpp_lib_to_chars)
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
#else
    std::ostringstream out;
    out.imbue(std::locale::classic());
    out.precision(std::numeric_limits<F>::max_digits10);
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

//! One "correction.<collective>.<algorithm>.n<ranks> = r0 r1 ..." line.
inline void parse_correction(topology& t, std::string_view key, std::string_view val, const std::string& source,
                             int line_no) {
    std::string_view rest = key.substr(std::string_view("correction.").size());
    const std::size_t d1 = rest.find('.');
    const std::size_t d2 = d1 == std::string_view::npos ? d1 : rest.find('.', d1 + 1);
    if (d2 == std::string_view::npos)
        model_error(source, line_no, key, "expected correction.<collective>.<algorithm>.n<ranks>");
    const std::string_view cname = rest.substr(0, d1), aname = rest.substr(d1 + 1, d2 - d1 - 1),
                           nname = rest.substr(d2 + 1);
    correction k{};
    bool found = false;
    for (collective c : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                         collective::broadcast, collective::reduce, collective::all_to_all, collective::all_gatherv,
                         collective::reduce_scatterv, collective::all_to_allv})
        if (cname == collective_name(c)) {
            k.coll = c;
            found = true;
        }
    if (!found) model_error(source, line_no, key, "unknown collective '" + std::string(cname) + "'");
    if (!algorithm_from_name(aname, k.algo)) model_error(source, line_no, key, "unknown algorithm '" + std::string(aname) + "'");
    double nr = 0;
    if (nname.size() < 2 || nname[0] != 'n' || !parse_number(nname.substr(1), nr) || nr < 2 || nr > 1 << 24 ||
        nr != double(static_cast<long long>(nr)))
        model_error(source, line_no, key, "expected the rank count as n<ranks> (at least 2), got '" + std::string(nname) + "'");
    k.nranks = int(nr);
    for (int i = 0; i < t.correction_count; ++i)
        if (t.corrections[i].coll == k.coll && t.corrections[i].algo == k.algo && t.corrections[i].nranks == k.nranks)
            model_error(source, line_no, key, "given twice");
    if (t.correction_count >= max_corrections)
        model_error(source, line_no, key, "more than " + std::to_string(max_corrections) + " corrections");
    int got = 0;
    while (true) {
        val = trim(val);
        if (val.empty()) break;
        const std::size_t sp = val.find_first_of(" \t");
        const std::string_view tok = val.substr(0, sp);
        val = sp == std::string_view::npos ? std::string_view{} : val.substr(sp);
        double r = 0;
        if (!parse_number(tok, r) || !(r > 0) || r > 1e30)
            model_error(source, line_no, key, "expected ratios > 0, got '" + std::string(tok) + "'");
        if (got >= correction_points)
            model_error(source, line_no, key, "expected " + std::to_string(correction_points) + " ratios, got more");
        k.ratio[got++] = float(r);
    }
    if (got != correction_points)
        model_error(source, line_no, key,
                    "expected " + std::to_string(correction_points) + " ratios, got " + std::to_string(got));
    t.corrections[t.correction_count++] = k;
}

} // namespace detail

//! The topology as a small "key = value" file, one key per line, after a
//! comment header; parse() reads it back exactly (shortest round-trip digits).
inline std::string to_text(const topology& t) {
    using detail::format_number;
    std::string s;
    s += "# chorus cost model (chorus::model::topology): time = (steps * latency_s\n";
    s += "#   + moved_bytes / bandwidth_Bps + local_bytes / local_Bps + reduced_bytes / reduce_Bps,\n";
    s += "#   per level) * correction (docs/model.md)\n";
    s += "ranks_per_node = " + std::to_string(t.ranks_per_node) + "\n";
    s += "intra.latency_s = " + format_number(t.intra.latency_s) + "\n";
    s += "intra.bandwidth_Bps = " + format_number(t.intra.bandwidth_Bps) + "\n";
    s += "inter.latency_s = " + format_number(t.inter.latency_s) + "\n";
    s += "inter.bandwidth_Bps = " + format_number(t.inter.bandwidth_Bps) + "\n";
    s += "reduce_Bps = " + format_number(t.reduce_Bps) + "\n";
    s += "channels = " + std::to_string(t.channels) + "\n";
    s += "chunk_bytes = " + format_number(t.chunk_bytes) + "\n";
    s += "local_Bps = " + format_number(t.local_Bps) + "\n";
    s += std::string("flat_inter = ") + (t.flat_inter ? "1" : "0") + "\n";
    s += "one_shot_bytes = " + format_number(t.one_shot_bytes) + "\n";
    if (t.correction_count > 0) {
        s += "# corrections: measured / predicted at 8 B * 4^i, i = 0.." + std::to_string(correction_points - 1) +
             " (correction.<collective>.<algorithm>.n<ranks>)\n";
    }
    for (int i = 0; i < t.correction_count && i < max_corrections; ++i) {
        const correction& k = t.corrections[i];
        s += std::string("correction.") + collective_name(k.coll) + "." + algorithm_name(k.algo) + ".n" +
             std::to_string(k.nranks) + " =";
        for (float r : k.ratio) s += " " + format_number(r);
        s += "\n";
    }
    return s;
}

//! Reads what to_text() writes. Throws chorus::error(errc::invalid_argument)
//! naming `source`, the line and the key: unknown or repeated keys, a line
//! without '=', a value that is not a number or out of range.
inline topology parse(std::string_view text, const std::string& source) {
    topology t = default_topology();
    enum key_id { k_rpn, k_ilat, k_ibw, k_xlat, k_xbw, k_red, k_ch, k_chunk, k_local, k_flat, k_oneshot, k_count };
    static constexpr std::string_view names[k_count] = {
        "ranks_per_node", "intra.latency_s", "intra.bandwidth_Bps", "inter.latency_s",
        "inter.bandwidth_Bps", "reduce_Bps", "channels", "chunk_bytes", "local_Bps", "flat_inter", "one_shot_bytes"};
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
        if (key.starts_with("correction.")) {
            detail::parse_correction(t, key, val, source, line_no);
            continue;
        }
        int id = -1;
        for (int i = 0; i < k_count; ++i)
            if (key == names[i]) id = i;
        if (id < 0) {
            std::string known;
            for (std::string_view n : names) known += (known.empty() ? "" : ", ") + std::string(n);
            detail::model_error(source, line_no, key,
                                "unknown key (known: " + known + ", correction.<collective>.<algorithm>.n<ranks>)");
        }
        if (seen_at[id] != 0)
            detail::model_error(source, line_no, key,
                                "given twice (first on line " + std::to_string(seen_at[id]) + ")");
        seen_at[id] = line_no;
        double v = 0;
        if (!detail::parse_number(val, v))
            detail::model_error(source, line_no, key, "expected a number, got '" + std::string(val) + "'");
        const bool is_int = id == k_rpn || id == k_ch || id == k_flat;
        const bool latency = id == k_ilat || id == k_xlat;
        const bool zero_ok = latency || id == k_rpn || id == k_local || id == k_flat || id == k_oneshot;
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
        case k_local: t.local_Bps = v; break;
        case k_oneshot: t.one_shot_bytes = v; break;
        case k_flat:
            if (v > 1) detail::model_error(source, line_no, key, "expected 0 or 1, got '" + std::string(val) + "'");
            t.flat_inter = v == 1;
            break;
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

//! Whether CHORUS_MODEL names a file (then current() is that file's
//! topology); a backend with figures of its own uses them otherwise.
inline bool model_file_given() {
    static const bool given = [] {
        const char* path = std::getenv("CHORUS_MODEL");
        return path != nullptr && *path != '\0';
    }();
    return given;
}

} // namespace chorus::model
