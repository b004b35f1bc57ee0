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

#include <cstdint>

#include "../core/collective.hpp"

namespace chorus::model {

// The algorithms the model knows: one per policy in algo/ (core/collective.hpp).
using chorus::algorithm;
using chorus::algorithm_count;
using chorus::algorithm_from_name;
using chorus::algorithm_name;
using chorus::all_algorithms;

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
    //! and hierarchical AllReduce runs its node phases at the intra link on
    //! one node too: the MPI backend, whose flat schedules are
    //! point-to-point messages and whose hierarchical<> AllReduce stages
    //! through the node's shared memory (algo/staged.hpp).
    bool flat_inter = false;
    //! With flat_inter, on one node: hierarchical AllReduce runs one-shot
    //! (direct's terms) when the input is at most this many bytes
    //! (staged_schedule::one_shot_bytes); 0: never.
    double one_shot_bytes = 0;
    //! `automatic` (and deterministic<>) runs AllReduce calls of at most
    //! this many bytes with the transport's small-message protocol, where
    //! it has one (threads: one hand-off of a few cache lines per rank,
    //! backend/threads.hpp); 0: never. The default is the crossover
    //! measured against direct<> on the threads backend (docs/performance.md).
    double small_bytes = 2048;
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
    if (a == algorithm::hierarchical && c == collective::all_reduce && t.flat_inter && !spans) {
        // One node (MPI): staged through the node's shared memory,
        // one-shot for small inputs.
        b.intra = S <= t.one_shot_bytes ? detail::direct_terms(c, n, S) : detail::flat_terms(c, a, n, S, t);
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
    // hierarchical<> AllReduce is itself (runs_as); its other collectives run Intra (ring) flat.
    const algorithm key = runs_as(c, a);
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

} // namespace chorus::model
