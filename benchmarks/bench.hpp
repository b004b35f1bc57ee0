#pragma once
//! \file bench.hpp
//! What chorus_bench's translation units share: the measured collectives and
//! their nccl-tests definitions, options, buffers, verifiable data, the
//! reporter, and the rank program (templates). Policies are values
//! (chorus::policy), chosen at run time: the rank program is instantiated
//! once per (element type, operator), in bench_sweep.cpp, and serves every
//! policy; a -j2 build compiles it beside chorus_bench.cpp.
//! chorus_bench_gpu.cu includes it too, for the sweep options and
//! human_bytes. The command line and the collectives by name are cli.hpp's,
//! shared with every benchmark and tool.

#include <chorus/chorus.hpp>

#include "cli.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus_bench {

using comm_type = chorus::communicator<chorus::threads>;
using clock_type = std::chrono::steady_clock;

using chorus_cli::all_colls;
using chorus_cli::bus_factor;
using chorus_cli::cat;
using chorus_cli::coll_count_per_rank;
using chorus_cli::coll_kind;
using chorus_cli::coll_name;
using chorus_cli::to_collective;
using chorus_cli::usage_error;

// ---------------------------------------------------------------------------
// What can be measured
// ---------------------------------------------------------------------------

constexpr bool coll_uses_op(coll_kind c) {
    return c == coll_kind::all_reduce || c == coll_kind::reduce_scatter || c == coll_kind::reduce;
}
constexpr bool coll_uses_root(coll_kind c) { return c == coll_kind::broadcast || c == coll_kind::reduce; }

//! CHORUS_RANKS_PER_NODE as the threads backend reads it (0: one node; a
//! bad value throws chorus::error naming it).
inline int emulated_node_size() { return chorus::detail::env_ranks_per_node(); }
//! Broadcast takes one buffer: it is in place by definition.
constexpr bool coll_has_out_of_place(coll_kind c) { return c != coll_kind::broadcast; }
//! The least bytes a shared-memory implementation must read plus write, for
//! S = the row's size column (see the printed definitions).
inline double least_traffic_bytes(coll_kind c, int n, double s) {
    switch (c) {
    case coll_kind::all_reduce: return 2.0 * n * s;           // n inputs read, n outputs written
    case coll_kind::all_gather: return s + n * s;             // n inputs of S/n read, n outputs of S written
    case coll_kind::reduce_scatter: return n * s + s;         // n inputs of S read, n outputs of S/n written
    case coll_kind::broadcast: return s + (n - 1) * s;        // root read once, n-1 copies written
    case coll_kind::reduce: return n * s + s;                 // n inputs read, root's output written
    }
    return s;
}

enum class op_kind { sum, prod, min, max, avg };
inline constexpr op_kind all_ops[] = {op_kind::sum, op_kind::prod, op_kind::min, op_kind::max, op_kind::avg};
constexpr const char* op_name(op_kind o) {
    switch (o) {
    case op_kind::sum: return "sum";
    case op_kind::prod: return "prod";
    case op_kind::min: return "min";
    case op_kind::max: return "max";
    case op_kind::avg: return "avg";
    }
    return "?";
}

enum class type_kind { int8, uint8, int32, uint32, int64, uint64, float32, float64 };
inline constexpr type_kind all_types[] = {type_kind::int8,  type_kind::uint8,  type_kind::int32,   type_kind::uint32,
                                          type_kind::int64, type_kind::uint64, type_kind::float32, type_kind::float64};
constexpr const char* type_name(type_kind t) {
    switch (t) {
    case type_kind::int8: return "int8";
    case type_kind::uint8: return "uint8";
    case type_kind::int32: return "int32";
    case type_kind::uint32: return "uint32";
    case type_kind::int64: return "int64";
    case type_kind::uint64: return "uint64";
    case type_kind::float32: return "float";
    case type_kind::float64: return "double";
    }
    return "?";
}

// Runtime choice -> element type. Calls f(std::type_identity<T>{}).
template <class F>
void with_type(type_kind t, F&& f) {
    switch (t) {
    case type_kind::int8: f(std::type_identity<std::int8_t>{}); break;
    case type_kind::uint8: f(std::type_identity<std::uint8_t>{}); break;
    case type_kind::int32: f(std::type_identity<std::int32_t>{}); break;
    case type_kind::uint32: f(std::type_identity<std::uint32_t>{}); break;
    case type_kind::int64: f(std::type_identity<std::int64_t>{}); break;
    case type_kind::uint64: f(std::type_identity<std::uint64_t>{}); break;
    case type_kind::float32: f(std::type_identity<float>{}); break;
    case type_kind::float64: f(std::type_identity<double>{}); break;
    }
}

// Runtime choice -> operator type. Calls f(std::type_identity<Op>{}).
template <class F>
void with_op(op_kind o, F&& f) {
    switch (o) {
    case op_kind::sum: f(std::type_identity<chorus::sum>{}); break;
    case op_kind::prod: f(std::type_identity<chorus::prod>{}); break;
    case op_kind::min: f(std::type_identity<chorus::min>{}); break;
    case op_kind::max: f(std::type_identity<chorus::max>{}); break;
    case op_kind::avg: f(std::type_identity<chorus::avg>{}); break;
    }
}


//! A ring<> tuning from --channels x --chunk-bytes (any runs: a policy is
//! a value); ring_default is what ring<> = ring<ring_params{}> runs on the
//! host backends (its fields are chosen per call: there, 1 channel and
//! 256 KiB, chorus::host_tuning).
struct ring_choice {
    int channels;
    std::size_t chunk_bytes;
    friend constexpr bool operator==(const ring_choice&, const ring_choice&) = default;
};
inline constexpr ring_choice ring_default{chorus::host_tuning(chorus::algorithm::ring).channels,
                                          chorus::host_tuning(chorus::algorithm::ring).chunk_bytes};

//! ring<ring_params{.channels = channels, .chunk_bytes = chunk_bytes}> as a value.
constexpr chorus::policy ring_policy(int channels, std::size_t chunk_bytes) {
    return chorus::policy::fixed(chorus::algorithm::ring, chorus::tuning{channels, chunk_bytes});
}
static_assert(chorus::resolve_tuning(chorus::algorithm::ring, chorus::policy_of<chorus::ring<>>.tune,
                                     chorus::collective::all_reduce, 1 << 20, 4, 0) ==
              ring_policy(ring_default.channels, ring_default.chunk_bytes).tune);
static_assert(ring_policy(4, 64 << 10) ==
              chorus::policy_of<chorus::ring<chorus::ring_params{4, 64 << 10}>>);

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

//! The sweep and nccl-tests' other options (cli.hpp: the collectives, -b -e
//! -i -f -n -m -w -c ..., --reps), the same in chorus_bench and
//! chorus_bench_gpu.
struct sweep_options : chorus_cli::nccl_options {};
using chorus_cli::nccl_sizes;

struct options : sweep_options {
    std::vector<op_kind> ops{op_kind::sum};
    std::vector<type_kind> types{type_kind::float32};
    int ranks = 2;        //!< -t x -g, or --ranks
    bool span_time = false; //!< --span: time = latest end - earliest start over ranks (not -a)
    int root = 0;
    std::string algo = "ring";              //!< the policy of the table being measured
    std::vector<std::string> algos{"ring"}; //!< --algo: every policy to measure, in order
    int channels = 1;
    std::size_t chunk_bytes = 256 << 10;
    bool out_of_place = true;
    bool in_place = true;
    std::string json_path;
    std::string csv_path;
    bool quick = false;
    std::string command_line;
};

// ---------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------

inline constexpr std::size_t page_bytes = 4096;
//! Elements past the end of every output that must come back untouched.
inline constexpr std::size_t guard_elems = 64;

struct aligned_deleter {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{page_bytes}); }
};
using buffer_ptr = std::unique_ptr<std::byte, aligned_deleter>;

inline buffer_ptr allocate(std::size_t bytes) {
    return buffer_ptr(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{page_bytes})));
}

//! Two buffers per rank, each `capacity` bytes: A holds inputs (and in-place
//! data), B holds out-of-place outputs.
struct rank_buffers {
    buffer_ptr a;
    buffer_ptr b;
};

//! Keeps the compiler from merging or dropping repeated copies.
inline void clobber_memory() {
#if defined(__GNUC__)
    __asm__ __volatile__("" ::: "memory");
#else
    std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

//! Wall time of work done by several threads: from the earliest start to
//! the latest end. Right even when threads outnumber cores and run one after
//! another (a max of per-thread durations would then overstate bandwidth).
struct span_times {
    std::vector<clock_type::time_point> start, end;
    explicit span_times(std::size_t threads) : start(threads), end(threads) {}
    double seconds() const {
        return std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                             *std::min_element(start.begin(), start.end()))
            .count();
    }
};

//! Copies per timed repetition of the copy ceiling: at least ~16 MiB per
//! thread, so small sizes are timed over many copies.
inline std::size_t copies_per_rep(std::size_t bytes) {
    return std::clamp<std::size_t>((std::size_t(16) << 20) / bytes, 1, 100000);
}

//! How the copy ceiling copies: the C library's memcpy, or a loop of
//! non-temporal (streaming) stores, which bypass the cache. Which is faster
//! depends on the size and the machine (glibc switches to streaming stores
//! only above a cache-size threshold), and chorus itself streams large
//! transfers, so the ceiling is the better of the two.
enum class copy_kind { memcpy, streaming };

//! Copy with the widest non-temporal stores this CPU has (chorus's own
//! run-time choice, exec/host_simd.hpp: 64-byte AVX-512, 32-byte AVX2 or
//! 16-byte SSE2 stores, whole 64-byte lines), the rest with memcpy; plain
//! memcpy where chorus has no streaming stores. dst must be 64-byte aligned
//! (ours are page aligned).
inline void streaming_copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
    namespace d = chorus::detail;
    const d::host_isa isa = d::host_isa_active();
    if (isa == d::host_isa::generic) {
        std::memcpy(dst, src, bytes);
        return;
    }
    const std::size_t lines = bytes / 64;
    d::host_stream_copy_lines(isa, dst, nullptr, src, lines);
    d::store_fence();
    std::memcpy(dst + lines * 64, src + lines * 64, bytes - lines * 64);
}

//! What streaming_copy uses, for the report: "64-byte AVX-512
//! non-temporal stores".
inline std::string streaming_copy_name() {
    namespace d = chorus::detail;
    const d::host_isa isa = d::host_isa_active();
    if (isa == d::host_isa::generic) return "memcpy (no streaming stores on this target)";
    return cat(std::to_string(d::host_isa_store_bytes(isa)), "-byte ", d::host_isa_name(isa),
               " non-temporal stores");
}

//! `copies` back-to-back copies of `bytes`, kept by the compiler.
inline void copy_loop(copy_kind kind, std::byte* dst, const std::byte* src, std::size_t bytes, std::size_t copies) {
    for (std::size_t k = 0; k < copies; ++k) {
        if (kind == copy_kind::memcpy) std::memcpy(dst, src, bytes);
        else streaming_copy(dst, src, bytes);
        clobber_memory();
    }
}

//! STREAM-counted bandwidth (read + write) in GB/s of `threads` threads each
//! copying `bytes` `copies` times in `secs`.
inline double copy_gbps(std::size_t bytes, std::size_t copies, std::size_t threads, double secs) {
    return 2.0 * double(bytes) * double(copies) * double(threads) / secs / 1e9;
}

// ---------------------------------------------------------------------------
// Verifiable data
// ---------------------------------------------------------------------------

//! Inputs repeat with this period (a multiple of every modulus used below),
//! so filling and checking are table look-ups.
inline constexpr std::size_t period = 420;

template <class T>
using wide_t = std::conditional_t<std::is_floating_point_v<T>, double,
                                  std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>>;

//! Integer-valued inputs whose exact reduction does not depend on the order
//! of operations, and that reference. Value of rank r at element i:
//!   sum, min, max: 1 + (i + 3r) mod m, m = clamp(max(T) / n, 1, 7), so the
//!        sum fits in T;
//!   prod: 2 where (i + r) mod 3 == 0, else 1: the product is 2^k, k <= n/3 + 1
//!        (exact in int8 up to 18 ranks; past that both sides wrap modulo 2^8);
//!   avg: c_i + k_i and c_i - k_i on pairs of ranks (c_i alone on an odd last
//!        rank), c_i in 3..7, k_i in 1..3: the sum is exactly n * c_i, so the
//!        average is the integer c_i and sum-then-divide is exact.
template <class T>
struct data_pattern {
    int n = 0;
    std::vector<T> in;  //!< n rows of `period` values
    std::vector<T> ref; //!< `period` reduced values
    T stable{};         //!< x with op(x, x, ..., x) == x: in-place timing input
    T sentinel{};       //!< what untouched memory holds

    const T* row(int r) const { return in.data() + std::size_t(r) * period; }
};

template <class T>
data_pattern<T> make_pattern(op_kind op, int n) {
    data_pattern<T> p;
    p.n = n;
    p.in.resize(std::size_t(n) * period);
    p.ref.resize(period);
    p.sentinel = static_cast<T>(-3); // negative for signed, huge for unsigned: never a result
    p.stable = static_cast<T>(op == op_kind::sum ? 0 : 1);

    long long m = 7;
    if constexpr (std::is_integral_v<T>) {
        const auto largest = static_cast<unsigned long long>(std::numeric_limits<T>::max());
        m = static_cast<long long>(std::clamp<unsigned long long>(largest / static_cast<unsigned long long>(n), 1, 7));
    }

    for (std::size_t i = 0; i < period; ++i) {
        const long long ii = static_cast<long long>(i);
        const long long c = 3 + ii % 5;
        const long long k = 1 + ii % 3;
        for (int r = 0; r < n; ++r) {
            long long v = 0;
            switch (op) {
            case op_kind::sum:
            case op_kind::min:
            case op_kind::max: v = 1 + (ii + 3LL * r) % m; break;
            case op_kind::prod: v = (ii + r) % 3 == 0 ? 2 : 1; break;
            case op_kind::avg:
                if (n % 2 == 1 && r == n - 1) v = c;
                else v = r % 2 == 0 ? c + k : c - k;
                break;
            }
            p.in[std::size_t(r) * period + i] = static_cast<T>(v);
        }
        wide_t<T> acc = static_cast<wide_t<T>>(p.in[i]);
        T best = p.in[i];
        for (int r = 1; r < n; ++r) {
            const T v = p.in[std::size_t(r) * period + i];
            switch (op) {
            case op_kind::sum:
            case op_kind::avg: acc = static_cast<wide_t<T>>(acc + static_cast<wide_t<T>>(v)); break;
            case op_kind::prod: acc = static_cast<wide_t<T>>(acc * static_cast<wide_t<T>>(v)); break;
            case op_kind::min: best = v < best ? v : best; break;
            case op_kind::max: best = best < v ? v : best; break;
            }
        }
        switch (op) {
        case op_kind::sum:
        case op_kind::prod: p.ref[i] = static_cast<T>(acc); break;
        case op_kind::avg: p.ref[i] = static_cast<T>(static_cast<T>(acc) / static_cast<T>(n)); break; // sum, then divide
        case op_kind::min:
        case op_kind::max: p.ref[i] = best; break;
        }
    }
    return p;
}

template <class T>
constexpr const char* name_of() {
    if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
    else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
    else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
    else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
    else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
    else if constexpr (std::is_same_v<T, float>) return "float";
    else return "double";
}

//! dst[j] = row[(first + j) % period]
template <class T>
void fill_from(T* dst, std::size_t count, const T* row, std::size_t first) {
    std::size_t j = first % period;
    for (std::size_t i = 0; i < count; ++i) {
        dst[i] = row[j];
        if (++j == period) j = 0;
    }
}

template <class T>
void fill_value(T* dst, std::size_t count, T value) {
    std::fill(dst, dst + count, value);
}

template <class T>
std::uint64_t count_wrong(const T* got, std::size_t count, const T* row, std::size_t first) {
    std::uint64_t wrong = 0;
    std::size_t j = first % period;
    for (std::size_t i = 0; i < count; ++i) {
        wrong += !(got[i] == row[j]);
        if (++j == period) j = 0;
    }
    return wrong;
}

template <class T>
std::uint64_t count_not(const T* got, std::size_t count, T value) {
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += !(got[i] == value);
    return wrong;
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

struct place_result {
    bool valid = false;
    double time_us = 0;
    double algbw = 0;
    double busbw = 0;
    double eff = 0;
    std::uint64_t wrong = 0;
};

struct row_result {
    coll_kind coll{};
    int elem_bytes = 0;
    std::size_t bytes = 0;
    std::size_t count = 0;
    const char* type = "";
    const char* op = "none";
    int root = -1;
    double cpybw = 0;
    //! The fused streaming reference's time (all_reduce float sum rows; 0: not measured): see measure_row_fused.
    double fused_us = 0;
    place_result place[2]; // [0] out-of-place, [1] in-place
};

inline std::string json_escape(std::string_view s) {
    std::string out;
    for (char ch : s) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (static_cast<unsigned char>(ch) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
            out += buf;
        } else {
            out += ch;
        }
    }
    return out;
}

//! "64 MiB" (or "64MiB" with sep ""): the largest binary unit that divides b.
inline std::string human_bytes(std::size_t b, const char* sep = " ") {
    char buf[64];
    if (b >= (std::size_t(1) << 30) && b % (std::size_t(1) << 30) == 0) std::snprintf(buf, sizeof buf, "%zu%sGiB", b >> 30, sep);
    else if (b >= (std::size_t(1) << 20) && b % (std::size_t(1) << 20) == 0) std::snprintf(buf, sizeof buf, "%zu%sMiB", b >> 20, sep);
    else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%zu%sKiB", b >> 10, sep);
    else std::snprintf(buf, sizeof buf, "%zu%sB", b, sep);
    return buf;
}

inline std::string version_string() {
#if defined(CHORUS_VERSION_MAJOR) && defined(CHORUS_VERSION_MINOR) && defined(CHORUS_VERSION_PATCH)
    return cat(std::to_string(CHORUS_VERSION_MAJOR), ".", std::to_string(CHORUS_VERSION_MINOR), ".",
               std::to_string(CHORUS_VERSION_PATCH));
#else
    return "unknown";
#endif
}

//! What `automatic` runs for a call of `c` with `count` elements (per rank
//! for all_gather and reduce_scatter) of `elem_bytes` on `nranks` threads:
//! the same schedule_args the threads backend passes automatic::choose.
inline const char* automatic_choice(coll_kind c, int nranks, int root, std::size_t count, int elem_bytes,
                                    bool inplace) {
    chorus::schedule_args a{};
    a.coll = to_collective(c);
    a.nranks = nranks;
    a.root = root < 0 ? 0 : root;
    a.count = count;
    a.elem_bytes = std::uint64_t(elem_bytes);
    a.in_place = inplace;
    a.node_size = emulated_node_size();
    // The threads transport's small-message protocol (a barrier's too).
    if (chorus::automatic::small_message(chorus::policy::automatic(), a, chorus::detail::host_small_cap))
        return "small";
    return chorus::model::algorithm_name(chorus::automatic::choose(a));
}

//! The interleaved comparison of one (collective, place, size): every
//! policy timed in turn on the same rank threads, per repetition (see
//! run_interleaved in chorus_bench.cpp). time_us: the fastest repetition.
struct interleaved_row {
    coll_kind coll{};
    int place = 0; //!< 0 out-of-place, 1 in-place
    std::size_t bytes = 0;
    std::size_t count = 0;
    int root = -1;
    const char* op = "sum";
    std::vector<std::string> algos;
    std::vector<double> time_us;
    std::vector<std::uint64_t> wrong;
    int reps = 1;
};

//! Writes the human table (stdout, flushed per row) and the optional CSV and
//! JSON files. Only rank 0's thread or main() call it, never concurrently.
class reporter {
public:
    explicit reporter(const options& o) : opt_(o) {
        if (!o.csv_path.empty()) {
            csv_ = std::fopen(o.csv_path.c_str(), "w");
            if (csv_ == nullptr) throw usage_error{cat("--csv: cannot write ", o.csv_path)};
            std::fprintf(csv_, "collective,place,size_bytes,count,type,redop,root,ranks,algo,channels,chunk_bytes,"
                               "iters,warmup,time_us,algbw_gbps,busbw_gbps,eff,copy_gbps,wrong,chosen,mode,fused_us\n");
        }
        if (!o.json_path.empty()) {
            json_ = std::fopen(o.json_path.c_str(), "w");
            if (json_ == nullptr) throw usage_error{cat("--json: cannot write ", o.json_path)};
        }
    }
    reporter(const reporter&) = delete;
    reporter& operator=(const reporter&) = delete;
    ~reporter() {
        if (csv_ != nullptr) std::fclose(csv_);
        if (json_ != nullptr) {
            std::fprintf(json_, "\n  ],\n  \"interleaved\": [%s%s],\n  \"wrong_total\": %" PRIu64 "\n}\n",
                         json_interleaved_.c_str(), json_interleaved_.empty() ? "" : "\n  ", wrong_total_);
            std::fclose(json_);
        }
    }

    void preamble(std::size_t copy_bytes, double memcpy_gbps, double streaming_gbps) {
        const int n = opt_.ranks;
        const unsigned hw = std::thread::hardware_concurrency();
        std::printf("# %s\n", opt_.command_line.c_str());
        std::printf("# chorus %s, threads backend: %d ranks as threads on %u hardware threads%s\n",
                    version_string().c_str(), n, hw, hw != 0 && unsigned(n) > hw ? " (oversubscribed)" : "");
        std::printf("%s\n", chorus_cli::nccl_config_line(opt_).c_str());
        for (const std::string& note : opt_.notes) std::printf("# %s\n", note.c_str());
        if (opt_.blocking == 1) std::printf("# Blocking Enabled: barrier after each call (-z 1)\n");
        if (opt_.blocking == 3) std::printf("# Blocking Enabled: barrier after each iteration (-n), not timed (-z 3)\n");
        if (opt_.unalign != 0) std::printf("# unalign: operands start %d elements past page alignment (-u)\n", opt_.unalign);
        std::string algos;
        for (const std::string& a : opt_.algos) algos += (algos.empty() ? "" : ",") + a;
        std::printf("# algo %s (channels %d, chunk_bytes %zu), iters %d, warmup %d, check %d, root %d\n",
                    algos.c_str(), opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.warmup, opt_.check,
                    opt_.root);
        std::printf("# buffers: 2 x %s per rank, page aligned, pre-faulted\n",
                    human_bytes(opt_.max_bytes + std::size_t(opt_.unalign) * 8).c_str());
        std::printf("# memcpy (%d threads, %s): %.1f GB/s (read+write); streaming-store copy: %.1f GB/s\n", n,
                    human_bytes(copy_bytes).c_str(), memcpy_gbps, streaming_gbps);
        std::printf("# copy ceiling: the better of memcpy and %s\n", streaming_copy_name().c_str());
        std::printf("#\n"
                    "# S = size(B), nccl-tests' size: all_reduce, broadcast, reduce the buffer, S = count * sizeof(T);\n"
                    "#   all_gather the whole receive buffer and reduce_scatter the whole send buffer, S = n * count *\n"
                    "#   sizeof(T), count per rank (-b/-e / n rounded down to 16-byte groups, as nccl-tests rounds).\n"
                    "# algbw = S / time. busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n,\n"
                    "#   all_gather and reduce_scatter (n-1)/n, broadcast and reduce 1.\n"
                    "# cpybw = copy bandwidth, S bytes per thread, the %d rank threads right after the row's timing,\n"
                    "#   read+write, best of several and of memcpy and streaming (non-temporal) stores\n"
                    "#   (the line above: the same before the sweep).\n"
                    "# eff = least memory traffic / time / cpybw, where the least traffic of a shared-memory\n"
                    "#   collective (every input read once, every output written once) is\n"
                    "#   all_reduce 2nS, all_gather S + nS, reduce_scatter nS + S, broadcast S + (n-1)S, reduce nS + S.\n"
                    "#   It is a bound once the data exceed the caches; for cache-resident sizes the copy and the\n"
                    "#   collective touch different working sets, and eff can exceed 1.\n"
                    "# time = %s, per call: each rank times %lld back-to-back calls (-n x -m) after %d warm-up\n"
                    "#   calls and a barrier; with --reps R, the fastest of R such loops.%s\n"
                    "# #wrong: elements differing from a serial reference (tolerance 0), plus writes past the output\n"
                    "#   and changes to an out-of-place input.\n"
                    "# fused: after each all_reduce float sum row, a hand-written fused streaming reference timed the\n"
                    "#   same way on the same %d threads: thread r computes its 1/n of out_q[i] = in_0[i] + ... +\n"
                    "#   in_{n-1}[i] for every rank q in one pass (%d-byte %s non-temporal stores, whatever\n"
                    "#   --isa says), then a barrier; and the row's time over it.\n",
                    n,
                    opt_.span_time && opt_.blocking != 3 ? "latest end - earliest start over ranks (--span)"
                                                        : chorus_cli::nccl_average_name(opt_.average),
                    opt_.timed_calls(), opt_.warmup,
                    opt_.report_cputime ? " cputime (-C 1): the same, calls are synchronous here." : "", n,
                    int(chorus::detail::host_isa_store_bytes(chorus::detail::host_isa_supported())),
                    chorus::detail::host_isa_name(chorus::detail::host_isa_supported()));
        std::fflush(stdout);

        if (json_ != nullptr) {
            std::fprintf(json_,
                         "{\n  \"command\": \"%s\",\n  \"version\": \"%s\",\n  \"backend\": \"threads\",\n"
                         "  \"ranks\": %d,\n  \"hardware_threads\": %u,\n  \"algo\": \"%s\",\n  \"channels\": %d,\n"
                         "  \"chunk_bytes\": %zu,\n  \"iters\": %d,\n  \"agg_iters\": %d,\n  \"warmup\": %d,\n  \"check\": %s,\n"
                         "  \"check_calls\": %d,\n  \"average\": %d,\n  \"span_time\": %s,\n"
                         "  \"root\": %d,\n  \"copy_bytes\": %zu,\n  \"memcpy_gbps\": %.4f,\n  \"streaming_copy_gbps\": %.4f,\n"
                         "  \"streaming_copy\": \"%s\",\n  \"fused_reference\": \"%d-byte %s non-temporal stores\",\n  \"rows\": [",
                         json_escape(opt_.command_line).c_str(), version_string().c_str(), n, hw, algos.c_str(),
                         opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.agg_iters, opt_.warmup,
                         opt_.check ? "true" : "false", opt_.check, opt_.average, opt_.span_time ? "true" : "false",
                         opt_.root, copy_bytes, memcpy_gbps, streaming_gbps, json_escape(streaming_copy_name()).c_str(),
                         int(chorus::detail::host_isa_store_bytes(chorus::detail::host_isa_supported())),
                         chorus::detail::host_isa_name(chorus::detail::host_isa_supported()));
        }
    }

    //! The policy of the rows that follow.
    void set_algo(const std::string& a) { algo_ = a; }

    void table_header(coll_kind c) {
        busbw_sum_ = 0;
        busbw_count_ = 0;
        table_wrong_ = 0;
        std::printf("#\n# %s, %s\n", coll_name(c), algo_.c_str());
        // Group labels centred over their 44-character column groups (after a 47-character prefix).
        std::string groups(47, ' ');
        groups[0] = '#';
        for (int p = 0; p < 2; ++p) {
            if (!enabled(p)) continue;
            const std::string_view label = p == 0 ? "out-of-place" : "in-place";
            const std::size_t left = (44 - label.size()) / 2;
            groups.append(left, ' ');
            groups.append(label);
            groups.append(44 - left - label.size(), ' ');
        }
        std::printf("%s\n", groups.substr(0, groups.find_last_not_of(' ') + 1).c_str());
        std::printf("#%14s %10s %7s %6s %5s", "size", "count", "type", "redop", "root");
        for (int p = 0; p < 2; ++p)
            if (enabled(p))
                std::printf(" %10s %8s %8s %6s %7s", opt_.report_cputime ? "cputime" : "time", "algbw", "busbw", "eff",
                            "#wrong");
        std::printf(" %8s %18s%s\n", "cpybw", "automatic picks", opt_.report_timestamps ? "  timestamp" : "");
        std::printf("#%14s %10s %7s %6s %5s", "(B)", "(elements)", "", "", "");
        for (int p = 0; p < 2; ++p)
            if (enabled(p)) std::printf(" %10s %8s %8s %6s %7s", "(us)", "(GB/s)", "(GB/s)", "", "");
        std::printf(" %8s\n", "(GB/s)");
        std::fflush(stdout);
    }

    void row(const row_result& r) {
        std::printf(" %14zu %10zu %7s %6s %5d", r.bytes, r.count, r.type, r.op, r.root);
        for (int p = 0; p < 2; ++p) {
            if (!enabled(p)) continue;
            const place_result& pr = r.place[p];
            if (!pr.valid) {
                std::printf(" %10s %8s %8s %6s %7s", "n/a", "n/a", "n/a", "n/a", "n/a");
                continue;
            }
            std::printf(" %10.2f %8.3f %8.3f %6.3f %7" PRIu64, pr.time_us, pr.algbw, pr.busbw, pr.eff, pr.wrong);
            busbw_sum_ += pr.busbw;
            ++busbw_count_;
            table_wrong_ += pr.wrong;
            wrong_total_ += pr.wrong;
            write_files(r, p);
        }
        std::printf(" %8.2f %18s%s%s\n", r.cpybw, chosen(r), opt_.report_timestamps ? "  " : "",
                    opt_.report_timestamps ? chorus_cli::timestamp_now().c_str() : "");
        if (r.fused_us > 0) {
            std::printf("#%14s fused reference %10.2f us", "", r.fused_us);
            for (int p = 0; p < 2; ++p)
                if (enabled(p) && r.place[p].valid)
                    std::printf(", %s %.3fx", p == 0 ? "out-of-place" : "in-place", r.place[p].time_us / r.fused_us);
            std::printf("\n");
        }
        std::fflush(stdout);
    }

    void table_footer() {
        std::printf("# Out of bounds / wrong values : %" PRIu64 " %s\n", table_wrong_, table_wrong_ == 0 ? "OK" : "FAILED");
        std::printf("# Avg bus bandwidth            : %.3f GB/s\n",
                    busbw_count_ ? busbw_sum_ / double(busbw_count_) : 0.0);
        std::fflush(stdout);
    }

    std::uint64_t wrong_total() const { return wrong_total_; }

    //! Takes one row of the interleaved comparison (rank 0 of
    //! run_interleaved): kept for selection_summary, written to the CSV
    //! (one line per policy, mode `interleaved`) and to the JSON file's
    //! "interleaved" array. Its wrong values count towards wrong_total().
    void interleaved(const interleaved_row& r) {
        for (const std::uint64_t w : r.wrong) wrong_total_ += w;
        write_interleaved(r);
        interleaved_.push_back(r);
    }

    //! With `automatic` and at least one fixed policy measured: per size
    //! and place, from the interleaved rows of collective c, the best fixed
    //! policy, automatic's time over it (the bar: within 10 %), ring<>'s
    //! time over automatic's and what automatic ran. Returns the rows
    //! missing the 10 % bar.
    int selection_summary(coll_kind c) {
        std::vector<const interleaved_row*> rows;
        for (const interleaved_row& r : interleaved_)
            if (r.coll == c) rows.push_back(&r);
        if (rows.empty()) return 0;
        std::stable_sort(rows.begin(), rows.end(), [](const interleaved_row* x, const interleaved_row* y) {
            return x->bytes != y->bytes ? x->bytes < y->bytes : x->place < y->place;
        });
        std::string names;
        for (const std::string& a : rows.front()->algos) names += (names.empty() ? "" : ",") + a;
        std::printf("#\n# %s: automatic against the best fixed policy, INTERLEAVED (not the tables above): per size\n"
                    "#   and repetition every policy in turn on the same %d rank threads, the first one rotated each\n"
                    "#   repetition; %d warm-up + %lld timed calls per policy per repetition, fastest of %d repetitions;\n"
                    "#   float, sum. Policies: %s.\n"
                    "#   auto chose: the algorithm automatic ran. #wrong: over every policy's checked call.\n",
                    coll_name(c), opt_.ranks, opt_.warmup, opt_.timed_calls(), rows.front()->reps, names.c_str());
        std::printf("#%14s %5s %6s %19s %10s %10s %9s %9s %6s %18s %7s\n", "size(B)", "place", "redop", "best fixed",
                    "best(us)", "auto(us)", "auto/best", "ring/auto", "<=1.10", "auto chose", "#wrong");
        int missed = 0;
        std::uint64_t wrong = 0;
        for (const interleaved_row* r : rows) {
            int best = -1, autom = -1, ring = -1;
            std::uint64_t row_wrong = 0;
            for (std::size_t i = 0; i < r->algos.size(); ++i) {
                const std::string& a = r->algos[i];
                row_wrong += r->wrong[i];
                if (a == "automatic") {
                    autom = int(i);
                    continue;
                }
                if (a == "ring") ring = int(i);
                if (best < 0 || r->time_us[i] < r->time_us[std::size_t(best)]) best = int(i);
            }
            wrong += row_wrong;
            if (best < 0 || autom < 0) continue;
            const double t_best = r->time_us[std::size_t(best)];
            const double t_auto = r->time_us[std::size_t(autom)];
            const double ratio = t_auto / t_best;
            const bool ok = ratio <= 1.10;
            missed += ok ? 0 : 1;
            char ring_ratio[32] = "-";
            if (ring >= 0) std::snprintf(ring_ratio, sizeof ring_ratio, "%.2f", r->time_us[std::size_t(ring)] / t_auto);
            std::printf(" %14zu %5s %6s %19s %10.2f %10.2f %9.3f %9s %6s %18s %7" PRIu64 "\n", r->bytes,
                        r->place == 0 ? "out" : "in", r->op, r->algos[std::size_t(best)].c_str(), t_best, t_auto, ratio,
                        ring_ratio, ok ? "yes" : "NO",
                        automatic_choice(r->coll, opt_.ranks, r->root, r->count, 4, r->place == 1), row_wrong);
        }
        std::printf("# automatic within 10 %% of the best fixed policy (interleaved): %s; wrong values: %" PRIu64 " %s\n",
                    missed == 0 ? "every row" : (std::to_string(missed) + " rows missed").c_str(), wrong,
                    wrong == 0 ? "OK" : "FAILED");
        std::fflush(stdout);
        return missed;
    }

private:
    //! What `automatic` runs for this row's call, in place or not (the
    //! same choice the library makes on this backend).
    const char* chosen(const row_result& r, bool inplace = false) const {
        return automatic_choice(r.coll, opt_.ranks, r.root, r.count, r.elem_bytes, inplace);
    }

    void write_interleaved(const interleaved_row& r) {
        const char* place = r.place == 0 ? "out" : "in";
        const char* chosen_algo = automatic_choice(r.coll, opt_.ranks, r.root, r.count, 4, r.place == 1);
        for (std::size_t i = 0; i < r.algos.size(); ++i) {
            const double algbw = double(r.bytes) / (r.time_us[i] * 1e-6) / 1e9;
            const double busbw = algbw * bus_factor(r.coll, opt_.ranks);
            if (csv_ != nullptr)
                std::fprintf(csv_, "%s,%s,%zu,%zu,float,%s,%d,%d,%s,%d,%zu,%d,%d,%.3f,%.6f,%.6f,nan,nan,%" PRIu64
                                   ",%s,interleaved,nan\n",
                             coll_name(r.coll), place, r.bytes, r.count, r.op, r.root, opt_.ranks, r.algos[i].c_str(),
                             opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.warmup, r.time_us[i], algbw, busbw,
                             r.wrong[i], chosen_algo);
            if (json_ != nullptr) {
                char buf[768];
                std::snprintf(buf, sizeof buf,
                              "%s\n    {\"collective\": \"%s\", \"algo\": \"%s\", \"place\": \"%s\", \"size_bytes\": %zu, "
                              "\"count\": %zu, \"type\": \"float\", \"redop\": \"%s\", \"root\": %d, \"reps\": %d, "
                              "\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": %" PRIu64
                              ", \"chosen\": \"%s\", \"mode\": \"interleaved\"}",
                              json_interleaved_.empty() ? "" : ",", coll_name(r.coll), r.algos[i].c_str(), place,
                              r.bytes, r.count, r.op, r.root, r.reps, r.time_us[i], algbw, busbw, r.wrong[i],
                              chosen_algo);
                json_interleaved_ += buf;
            }
        }
        if (csv_ != nullptr) std::fflush(csv_);
    }

    bool enabled(int p) const { return p == 0 ? opt_.out_of_place : opt_.in_place; }

    void write_files(const row_result& r, int p) {
        const place_result& pr = r.place[p];
        const char* place = p == 0 ? "out" : "in";
        if (csv_ != nullptr) {
            char fused[32] = "nan";
            if (r.fused_us > 0) std::snprintf(fused, sizeof fused, "%.3f", r.fused_us);
            std::fprintf(csv_, "%s,%s,%zu,%zu,%s,%s,%d,%d,%s,%d,%zu,%d,%d,%.3f,%.6f,%.6f,%.6f,%.4f,%" PRIu64 ",%s,sequential,%s\n",
                         coll_name(r.coll), place, r.bytes, r.count, r.type, r.op, r.root, opt_.ranks,
                         algo_.c_str(), opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.warmup, pr.time_us,
                         pr.algbw, pr.busbw, pr.eff, r.cpybw, pr.wrong, chosen(r, p == 1), fused);
            std::fflush(csv_);
        }
        if (json_ != nullptr) {
            std::fprintf(json_,
                         "%s\n    {\"collective\": \"%s\", \"algo\": \"%s\", \"place\": \"%s\", \"size_bytes\": %zu, \"count\": %zu, "
                         "\"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.6f, "
                         "\"busbw_gbps\": %.6f, \"eff\": %.6f, \"copy_gbps\": %.4f, \"wrong\": %" PRIu64 ", \"mode\": \"sequential\"%s}",
                         json_rows_ ? "," : "", coll_name(r.coll), algo_.c_str(), place, r.bytes, r.count, r.type, r.op, r.root,
                         pr.time_us, pr.algbw, pr.busbw, pr.eff, r.cpybw, pr.wrong,
                         r.fused_us > 0 ? cat(", \"fused_us\": ", std::to_string(r.fused_us)).c_str() : "");
            ++json_rows_;
            std::fflush(json_);
        }
    }

    const options& opt_;
    std::string algo_ = "ring";
    std::vector<interleaved_row> interleaved_;
    std::string json_interleaved_; //!< the JSON "interleaved" array's entries, written at the end
    std::FILE* csv_ = nullptr;
    std::FILE* json_ = nullptr;
    std::size_t json_rows_ = 0;
    double busbw_sum_ = 0;
    std::size_t busbw_count_ = 0;
    std::uint64_t table_wrong_ = 0;
    std::uint64_t wrong_total_ = 0;
};

// ---------------------------------------------------------------------------
// The measured rank program
// ---------------------------------------------------------------------------

//! State shared by the rank threads of one run_threads() call. Ranks write
//! only their own slot of the per-rank vectors, and rank 0 reads them after a
//! barrier.
struct bench_state {
    bench_state(const options& o, std::vector<rank_buffers>& b, const std::vector<std::size_t>& s, reporter& r)
        : opt(o), bufs(b), sizes(s), rep(r), rank_times(b.size()), rank_secs(b.size()), rank_wrong(b.size()),
          copy_sync(static_cast<std::ptrdiff_t>(b.size())),
          copy_times(std::size_t(o.quick ? 3 : 5), span_times(b.size())) {}

    const options& opt;
    std::vector<rank_buffers>& bufs;
    const std::vector<std::size_t>& sizes;
    reporter& rep;
    span_times rank_times; //!< of the timed loop, per rank
    std::vector<double> rank_secs; //!< each rank's own time of the timed loop (what -a combines)
    std::vector<std::uint64_t> rank_wrong;
    //! The per-row copy ceiling is synchronised with a std::barrier, not
    //! with chorus, so it measures nothing of the library.
    std::barrier<> copy_sync;
    std::vector<span_times> copy_times; //!< one per repetition
};

//! The copy ceiling for one row, measured by the rank threads right after
//! the row's collective (same threads, same moment, same S per thread): each
//! rank copies its own A to its own B, with memcpy and with streaming
//! stores. Every rank calls it; rank 0 gets the best GB/s, the others 0.
inline double measure_row_copy(bench_state& st, int rank, std::size_t bytes) {
    const rank_buffers& rb = st.bufs[std::size_t(rank)];
    const std::size_t copies = copies_per_rep(bytes);
    double best = 0;
    for (const copy_kind kind : {copy_kind::memcpy, copy_kind::streaming}) {
        for (span_times& t : st.copy_times) {
            st.copy_sync.arrive_and_wait();
            t.start[std::size_t(rank)] = clock_type::now();
            copy_loop(kind, rb.b.get(), rb.a.get(), bytes, copies);
            t.end[std::size_t(rank)] = clock_type::now();
        }
        st.copy_sync.arrive_and_wait();
        if (rank == 0)
            for (const span_times& t : st.copy_times)
                best = std::max(best, copy_gbps(bytes, copies, st.bufs.size(), t.seconds()));
        st.copy_sync.arrive_and_wait(); // copy_times are free again
    }
    return best;
}

//! The fused streaming reference of an all_reduce float sum of `count`
//! elements, timed like a row (warm-up calls, then --reps loops of --iters
//! calls, latest end - earliest start, fastest loop): rank thread r computes
//! its 1/n of the 64-byte lines of out_q[i] = in_0[i] + ... + in_{n-1}[i]
//! for every rank q (in: each rank's A, out: each rank's B) in one pass, in
//! vector registers, with the widest non-temporal stores the CPU has
//! (whatever --isa says), then a barrier: the ideal single pass a
//! shared-memory all_reduce can make. The last count % 16 elements go to
//! the last rank, scalar. Every rank calls it; rank 0 gets the time per
//! call in microseconds, the others 0. It overwrites every rank's B.
inline double measure_row_fused(bench_state& st, int rank, std::size_t count) {
    namespace d = chorus::detail;
    const std::size_t n = st.bufs.size();
    std::vector<const float*> in(n);
    std::vector<float*> out(n);
    for (std::size_t q = 0; q < n; ++q) {
        in[q] = reinterpret_cast<const float*>(st.bufs[q].a.get());
        out[q] = reinterpret_cast<float*>(st.bufs[q].b.get());
    }
    constexpr std::size_t per = 64 / sizeof(float);
    const d::host_isa isa = d::host_isa_supported(); // the ideal, whatever --isa says
    const std::size_t lines = count / per, me = std::size_t(rank);
    const std::size_t l0 = lines * me / n, l1 = lines * (me + 1) / n;
    const auto one_call = [&] {
        const chorus::sum op{};
        if (!d::host_stream_fan_lines(isa, out.data(), int(n), in.data(), int(n), l0 * per, l1 - l0, op))
            for (std::size_t i = l0 * per; i < l1 * per; ++i) {
                float v = in[0][i];
                for (std::size_t q = 1; q < n; ++q) v += in[q][i];
                for (std::size_t q = 0; q < n; ++q) out[q][i] = v;
            }
        if (me + 1 == n)
            for (std::size_t i = lines * per; i < count; ++i) {
                float v = in[0][i];
                for (std::size_t q = 1; q < n; ++q) v += in[q][i];
                for (std::size_t q = 0; q < n; ++q) out[q][i] = v;
            }
        d::store_fence();
        st.copy_sync.arrive_and_wait();
    };
    for (int i = 0; i < st.opt.warmup; ++i) one_call();
    double best = 0;
    span_times& t = st.copy_times.front();
    for (int rep = 0; rep < st.opt.reps; ++rep) {
        st.copy_sync.arrive_and_wait();
        t.start[me] = clock_type::now();
        for (int i = 0; i < st.opt.iters; ++i) one_call();
        t.end[me] = clock_type::now();
        st.copy_sync.arrive_and_wait(); // every rank's times are in
        if (rank == 0) {
            const double us = t.seconds() * 1e6 / st.opt.iters;
            if (rep == 0 || us < best) best = us;
        }
        st.copy_sync.arrive_and_wait(); // t is free again
    }
    return rank == 0 ? best : 0;
}

//! One rank's timed loop of a row, between barriers: -n iterations of -m
//! calls (no grouping on the host: -m multiplies the calls), with -z 1 a
//! barrier after every call (timed, as nccl-tests times it), with -z 3 a
//! barrier after every iteration that is left out of the time. Records the
//! rank's start and end (--span) and its own elapsed seconds (-a); rank 0
//! reads them with row_seconds() after it returns, and they are written
//! again only after a later barrier.
template <class Call>
void timed_loop(comm_type& comm, bench_state& st, Call&& call) {
    const options& opt = st.opt;
    const std::size_t me = std::size_t(comm.rank());
    chorus::barrier(comm);
    if (opt.blocking == 3) {
        double secs = 0;
        st.rank_times.start[me] = clock_type::now();
        for (int it = 0; it < opt.iters; ++it) {
            const auto t0 = clock_type::now();
            for (int k = 0; k < opt.agg_iters; ++k) call();
            secs += std::chrono::duration<double>(clock_type::now() - t0).count();
            chorus::barrier(comm);
        }
        st.rank_times.end[me] = clock_type::now();
        st.rank_secs[me] = secs;
    } else {
        const long long calls = opt.timed_calls();
        st.rank_times.start[me] = clock_type::now();
        for (long long i = 0; i < calls; ++i) {
            call();
            if (opt.blocking == 1) chorus::barrier(comm);
        }
        st.rank_times.end[me] = clock_type::now();
        st.rank_secs[me] = std::chrono::duration<double>(st.rank_times.end[me] - st.rank_times.start[me]).count();
    }
    chorus::barrier(comm); // every rank's times are in
}

//! Rank 0, after timed_loop: seconds per call. -a combines the ranks' own
//! times (nccl-tests: 0 rank 0's, 1 the mean, 2 the least, 3 the greatest);
//! --span takes latest end - earliest start over ranks instead (not with
//! -z 3, whose barriers are not timed).
inline double row_seconds(const bench_state& st) {
    const double total = st.opt.span_time && st.opt.blocking != 3
                             ? st.rank_times.seconds()
                             : chorus_cli::nccl_combine(st.rank_secs, st.opt.average);
    return total / double(st.opt.timed_calls());
}

//! One sync call of collective `c` under policy `pol`: the run function the
//! public call runs (chorus::all_reduce<Algo>(...) is
//! detail::all_reduce_run(comm, policy_of<Algo>, ...)). in/out are this
//! rank's operands; `inplace` passes all_reduce the same memory for both,
//! as its one-buffer overload does.
template <class T, class Op>
void call_collective(const chorus::policy& pol, coll_kind c, comm_type& comm, std::span<const T> in,
                     std::span<T> out, bool inplace, int root) {
    namespace d = chorus::detail;
    switch (c) {
    case coll_kind::all_reduce:
        if (inplace) d::all_reduce_run(comm, pol, std::span<const T>(out), out, Op{}, false);
        else d::all_reduce_run(comm, pol, in, out, Op{}, false);
        break;
    case coll_kind::all_gather: d::all_gather_run(comm, pol, in, out, false); break;
    case coll_kind::reduce_scatter: d::reduce_scatter_run(comm, pol, in, out, Op{}, false); break;
    case coll_kind::broadcast: d::broadcast_run(comm, pol, out, root, false); break;
    case coll_kind::reduce: d::reduce_run(comm, pol, in, out, Op{}, root, false); break;
    }
}

//! Where one rank's operands live for a collective of per-call count `count`.
//! A and B are the rank's two buffers (see rank_buffers).
template <class T>
struct operands {
    T* in_ptr = nullptr;
    std::size_t in_count = 0;
    T* out_ptr = nullptr;
    std::size_t out_count = 0;
    //! The whole region the call may touch, and where the guard starts after it.
    T* region = nullptr;
    std::size_t region_count = 0;
};

template <class T>
operands<T> layout(coll_kind c, bool inplace, int rank, int n, int root, std::size_t count, T* a, T* b) {
    operands<T> o;
    const std::size_t nc = std::size_t(n) * count;
    const std::size_t rc = std::size_t(rank) * count;
    switch (c) {
    case coll_kind::all_reduce:
        o = inplace ? operands<T>{a, count, a, count, a, count} : operands<T>{a, count, b, count, b, count};
        break;
    case coll_kind::all_gather: // count per rank
        o = inplace ? operands<T>{b + rc, count, b, nc, b, nc} : operands<T>{a, count, b, nc, b, nc};
        break;
    case coll_kind::reduce_scatter: // count per rank
        o = inplace ? operands<T>{a, nc, a + rc, count, a, nc} : operands<T>{a, nc, b, count, b, count};
        break;
    case coll_kind::broadcast: o = operands<T>{a, count, a, count, a, count}; break;
    case coll_kind::reduce:
        if (inplace) o = operands<T>{a, count, a, count, a, count};
        else o = operands<T>{a, count, b, rank == root ? count : 0, b, count};
        break;
    }
    return o;
}

//! Fills this rank's operands with the verifiable pattern, everything else it
//! may touch (and the guard) with the sentinel.
template <class T>
void fill_for_check(coll_kind c, int rank, int root, std::size_t count, const operands<T>& o,
                    const data_pattern<T>& pat) {
    fill_value(o.region, o.region_count + guard_elems, pat.sentinel);
    switch (c) {
    case coll_kind::broadcast:
        if (rank == root) fill_from(o.in_ptr, count, pat.row(rank), 0);
        break;
    default: fill_from(o.in_ptr, o.in_count, pat.row(rank), 0); break;
    }
}

//! Wrong elements in this rank's result, guard and (out-of-place) input.
template <class T>
std::uint64_t verify(coll_kind c, bool inplace, int rank, int n, int root, std::size_t count, const operands<T>& o,
                     const data_pattern<T>& pat) {
    std::uint64_t wrong = count_not(o.region + o.region_count, guard_elems, pat.sentinel);
    switch (c) {
    case coll_kind::all_reduce: wrong += count_wrong(o.out_ptr, count, pat.ref.data(), 0); break;
    case coll_kind::all_gather:
        for (int q = 0; q < n; ++q) wrong += count_wrong(o.out_ptr + std::size_t(q) * count, count, pat.row(q), 0);
        break;
    case coll_kind::reduce_scatter:
        wrong += count_wrong(o.out_ptr, count, pat.ref.data(), std::size_t(rank) * count);
        break;
    case coll_kind::broadcast: wrong += count_wrong(o.out_ptr, count, pat.row(root), 0); break;
    case coll_kind::reduce:
        if (rank == root) wrong += count_wrong(o.out_ptr, count, pat.ref.data(), 0);
        else if (inplace) wrong += count_wrong(o.in_ptr, count, pat.row(rank), 0); // non-root: buffer untouched
        else wrong += count_not(o.region, o.region_count, pat.sentinel);          // non-root: B untouched
        break;
    }
    if (!inplace) wrong += count_wrong(o.in_ptr, o.in_count, pat.row(rank), 0); // input never modified
    return wrong;
}

//! All sizes of one collective, one type, one operator, on this rank, under policy `pol`.
template <class T, class Op>
void bench_rows(comm_type& comm, bench_state& st, coll_kind c, op_kind op, const chorus::policy& pol) {
    const options& opt = st.opt;
    const int n = comm.size();
    const int rank = comm.rank();
    const int root = coll_uses_root(c) ? opt.root : -1;
    const data_pattern<T> pat = make_pattern<T>(op, n);
    // -u: the operands start that many elements past the page alignment (the buffers have room for it).
    T* const a = reinterpret_cast<T*>(st.bufs[std::size_t(rank)].a.get()) + opt.unalign;
    T* const b = reinterpret_cast<T*>(st.bufs[std::size_t(rank)].b.get()) + opt.unalign;

    for (int cycle = 0; opt.run_cycles == 0 || cycle < opt.run_cycles; ++cycle)
    for (const std::size_t nominal : st.sizes) {
        // nccl-tests' counts: per rank for all_gather and reduce_scatter, rounded to 16-byte groups.
        const std::size_t count = chorus_cli::nccl_count(c, nominal, sizeof(T), n);
        if (count == 0) continue; // identical on every rank
        const std::size_t bytes = chorus_cli::nccl_size_bytes(c, count, sizeof(T), n);

        row_result row;
        row.coll = c;
        row.bytes = bytes;
        row.count = count;
        row.type = name_of<T>();
        row.elem_bytes = int(sizeof(T));
        row.op = coll_uses_op(c) ? op_name(op) : "none";
        row.root = root;

        for (int place = 0; place < 2; ++place) {
            const bool inplace = place == 1;
            if (inplace ? !opt.in_place : !opt.out_of_place) continue;
            if (!inplace && !coll_has_out_of_place(c)) continue;
            const operands<T> o = layout(c, inplace, rank, n, root, count, a, b);
            const std::span<const T> in(o.in_ptr, o.in_count);
            const std::span<T> out(o.out_ptr, o.out_count);

            // Timing. Out-of-place inputs never change; in-place data is a fixed point of the operator.
            if (inplace) fill_value(o.region, o.region_count, pat.stable);
            else fill_from(o.in_ptr, o.in_count, pat.row(rank), 0);
            for (int i = 0; i < opt.warmup; ++i) call_collective<T, Op>(pol, c, comm, in, out, inplace, root);
            double best_s = 0; // seconds per call
            for (int rep = 0; rep < opt.reps; ++rep) { // --reps: the best of several timed loops
                timed_loop(comm, st, [&] { call_collective<T, Op>(pol, c, comm, in, out, inplace, root); });
                if (rank == 0) {
                    const double sec = row_seconds(st);
                    if (rep == 0 || sec < best_s) best_s = sec;
                }
            }

            // Check (-c N): N more calls, each on fresh verifiable data; #wrong sums them.
            std::uint64_t wrong = 0;
            for (int k = 0; k < opt.check; ++k) {
                chorus::barrier(comm); // nobody refills while a peer could still be in the timed loop
                fill_for_check(c, rank, root, count, o, pat);
                call_collective<T, Op>(pol, c, comm, in, out, inplace, root);
                wrong += verify(c, inplace, rank, n, root, count, o, pat);
            }
            st.rank_wrong[std::size_t(rank)] = wrong;
            chorus::barrier(comm);

            if (rank == 0) {
                place_result& pr = row.place[place];
                pr.valid = true;
                pr.time_us = best_s * 1e6;
                for (std::uint64_t w : st.rank_wrong) pr.wrong += w;
                pr.algbw = chorus_cli::nccl_algbw(c, count, sizeof(T), n, best_s);
                pr.busbw = chorus_cli::nccl_busbw(c, count, sizeof(T), n, best_s);
            }
            // The next write to rank_times/rank_wrong follows at least one more barrier that rank 0 enters
            // only after reading them.
        }
        row.cpybw = measure_row_copy(st, rank, bytes);
        if constexpr (std::is_same_v<T, float> && std::is_same_v<Op, chorus::sum>)
            if (c == coll_kind::all_reduce) row.fused_us = measure_row_fused(st, rank, count);
        if (rank == 0) {
            for (place_result& pr : row.place)
                if (pr.valid && row.cpybw > 0)
                    pr.eff = least_traffic_bytes(c, n, double(bytes)) / (pr.time_us * 1e-6) / (row.cpybw * 1e9);
            st.rep.row(row);
        }
    }
}

//! bench_sweep.cpp: every size of collective `c` under policy `pol`, for
//! element type t and each operator in --op (sum alone for the collectives
//! without one), on freshly started ranks.
void run_sweep(bench_state& st, coll_kind c, type_kind t, const chorus::policy& pol);

//! bench_sweep.cpp: one float sum call of a collective under policy `pol`,
//! for the interleaved comparison (run_interleaved in chorus_bench.cpp):
//! call_collective<float, chorus::sum>, which run_sweep instantiates anyway.
void call_float_sum(const chorus::policy& pol, coll_kind c, comm_type& comm, std::span<const float> in,
                    std::span<float> out, bool inplace, int root);

} // namespace chorus_bench
