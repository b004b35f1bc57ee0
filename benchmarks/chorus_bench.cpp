//! \file chorus_bench.cpp
//! The table every collectives user already reads (nccl-tests), for chorus on
//! the threads backend: size, count, type, redop, root, then time, algbw,
//! busbw and #wrong for out-of-place and in-place calls, one table per
//! collective, rows printed as they finish.
//!
//! Beside the nccl-tests columns it measures, in the same process and with as
//! many threads as ranks, the ceiling a shared-memory collective is judged
//! against: host memcpy bandwidth (STREAM counting, bytes read + bytes written
//! per second, summed over threads, best of several repetitions). `eff` is the
//! least memory traffic the collective must cause, over its time, as a
//! fraction of that bandwidth (DESIGN.md §9): 1.0 is the physical limit.
//!
//! Method (what makes the numbers honest):
//!  - every rank's buffers are allocated once at the largest size, page
//!    aligned, and pre-faulted (every page touched) before anything is timed;
//!  - per size and placement, each rank runs `warmup` calls, a barrier, then
//!    `iters` back-to-back calls; time = max over ranks of the per-call time;
//!  - the check (-c 1) is a separate call on fresh, integer-valued inputs whose
//!    exact result does not depend on the reduction order, compared with a
//!    serial reference at tolerance 0; it also counts writes past the end of
//!    the output and changes to an out-of-place input as wrong;
//!  - in-place timing repeats the collective on its own output, so its input
//!    is a value the operator maps to itself (0 for sum, 1 otherwise): the
//!    data never overflows or turns denormal, and arithmetic on integers and
//!    normal floats takes the same time whatever the values.
//!
//! Exit status: 0 all checks passed, 1 a wrong value or a chorus error,
//! 2 bad command line.

#include <chorus/chorus.hpp>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
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

namespace {

using comm_type = chorus::communicator<chorus::threads>;
using clock_type = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// What can be measured
// ---------------------------------------------------------------------------

enum class coll_kind { all_reduce, all_gather, reduce_scatter, broadcast, reduce };
constexpr coll_kind all_colls[] = {coll_kind::all_reduce, coll_kind::all_gather, coll_kind::reduce_scatter,
                                   coll_kind::broadcast, coll_kind::reduce};

constexpr const char* coll_name(coll_kind c) {
    switch (c) {
    case coll_kind::all_reduce: return "all_reduce";
    case coll_kind::all_gather: return "all_gather";
    case coll_kind::reduce_scatter: return "reduce_scatter";
    case coll_kind::broadcast: return "broadcast";
    case coll_kind::reduce: return "reduce";
    }
    return "?";
}
constexpr bool coll_uses_op(coll_kind c) {
    return c == coll_kind::all_reduce || c == coll_kind::reduce_scatter || c == coll_kind::reduce;
}
constexpr bool coll_uses_root(coll_kind c) { return c == coll_kind::broadcast || c == coll_kind::reduce; }
//! Broadcast takes one buffer: it is in place by definition.
constexpr bool coll_has_out_of_place(coll_kind c) { return c != coll_kind::broadcast; }
//! A row's per-call count is per rank for these (nccl-tests' convention).
constexpr bool coll_count_per_rank(coll_kind c) {
    return c == coll_kind::all_gather || c == coll_kind::reduce_scatter;
}

//! nccl-tests doc/PERFORMANCE.md: busbw = algbw * factor.
double bus_factor(coll_kind c, int n) {
    switch (c) {
    case coll_kind::all_reduce: return 2.0 * (n - 1) / n;
    case coll_kind::all_gather:
    case coll_kind::reduce_scatter: return double(n - 1) / n;
    case coll_kind::broadcast:
    case coll_kind::reduce: return 1.0;
    }
    return 1.0;
}

//! The least bytes a shared-memory implementation must read plus write, for
//! S = the row's size column (see the printed definitions).
double least_traffic_bytes(coll_kind c, int n, double s) {
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
constexpr op_kind all_ops[] = {op_kind::sum, op_kind::prod, op_kind::min, op_kind::max, op_kind::avg};
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
constexpr type_kind all_types[] = {type_kind::int8,   type_kind::uint8,  type_kind::int32,   type_kind::uint32,
                                   type_kind::int64,  type_kind::uint64, type_kind::float32, type_kind::float64};
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

// Runtime choice -> compile-time type. Each calls f(std::type_identity<X>{}).
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

//! The precompiled ring<> tunings. Every entry multiplies the compile time
//! (8 types x 5 ops x 5 collectives each), so the set is a small grid.
struct ring_choice {
    int channels;
    std::size_t chunk_bytes;
};
constexpr ring_choice ring_choices[] = {
    {1, 64 << 10}, {1, 256 << 10}, {1, 1 << 20},  //
    {2, 64 << 10}, {2, 256 << 10}, {2, 1 << 20},  //
    {4, 64 << 10}, {4, 256 << 10}, {4, 1 << 20},
};

template <std::size_t I = 0, class F>
bool with_ring(int channels, std::size_t chunk_bytes, F& f) {
    if constexpr (I == std::size(ring_choices)) {
        (void)channels;
        (void)chunk_bytes;
        (void)f;
        return false;
    } else {
        constexpr ring_choice c = ring_choices[I];
        if (channels == c.channels && chunk_bytes == c.chunk_bytes) {
            f(std::type_identity<chorus::ring<chorus::ring_params{.channels = c.channels, .chunk_bytes = c.chunk_bytes}>>{});
            return true;
        }
        return with_ring<I + 1>(channels, chunk_bytes, f);
    }
}

// ---------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------

struct options {
    std::size_t min_bytes = 8;
    std::size_t max_bytes = std::size_t(64) << 20;
    std::size_t step_factor = 2;
    int iters = 20;
    int warmup = 5;
    bool check = true;
    std::vector<op_kind> ops{op_kind::sum};
    std::vector<type_kind> types{type_kind::float32};
    int ranks = 2;
    int root = 0;
    std::string algo = "ring";
    int channels = 1;
    std::size_t chunk_bytes = 256 << 10;
    std::vector<coll_kind> colls{std::begin(all_colls), std::end(all_colls)};
    bool out_of_place = true;
    bool in_place = true;
    std::string json_path;
    std::string csv_path;
    bool quick = false;
    std::string command_line;
};

void print_usage(std::FILE* to, const char* argv0) {
    std::fprintf(to,
                 "usage: %s [options]\n"
                 "  -b, --minbytes SIZE       smallest message, bytes; suffixes K M G (default 8)\n"
                 "  -e, --maxbytes SIZE       largest message (default 64M)\n"
                 "  -f, --stepfactor N        multiply the size by N each row (default 2)\n"
                 "  -n, --iters N             timed calls per size (default 20)\n"
                 "  -w, --warmup N            untimed calls before timing (default 5)\n"
                 "  -c, --check 0|1           verify results, count #wrong (default 1)\n"
                 "  -o, --op LIST             sum,prod,min,max,avg or all (default sum)\n"
                 "  -d, --datatype LIST       int8,uint8,int32,uint32,int64,uint64,float,double or all (default float)\n"
                 "  -t, --ranks N             ranks = threads (default 2)\n"
                 "  -r, --root N              root of broadcast and reduce (default 0)\n"
                 "  -a, --algo NAME           algorithm: ring (default ring)\n"
                 "      --channels K          ring channels: 1, 2 or 4 (default 1)\n"
                 "      --chunk-bytes SIZE    ring chunk: 64K, 256K or 1M (default 256K)\n"
                 "      --collectives LIST    all_reduce,all_gather,reduce_scatter,broadcast,reduce or all (default all)\n"
                 "      --place out|in|both   out-of-place, in-place or both columns (default both)\n"
                 "      --inplace             same as --place in\n"
                 "      --outofplace          same as --place out\n"
                 "      --json FILE           also write every row as JSON\n"
                 "      --csv FILE            also write every row as CSV\n"
                 "      --quick               short sweep 8 B..4 MiB, -n 10 -w 2 (explicit flags still win)\n"
                 "  -h, --help                this text\n",
                 argv0);
}

struct usage_error {
    std::string what;
};

std::size_t parse_bytes(std::string_view s, std::string_view flag) {
    if (s.empty()) throw usage_error{std::string(flag) + ": empty size"};
    std::size_t value = 0;
    std::size_t i = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
        if (value > (std::numeric_limits<std::size_t>::max() - 9) / 10)
            throw usage_error{std::string(flag) + ": size too large: " + std::string(s)};
        value = value * 10 + std::size_t(s[i] - '0');
    }
    if (i == 0) throw usage_error{std::string(flag) + ": not a size: " + std::string(s)};
    std::string_view suffix = s.substr(i);
    int shift = 0;
    if (!suffix.empty()) {
        switch (suffix[0]) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 'b': case 'B': shift = 0; break;
        default: throw usage_error{std::string(flag) + ": unknown size suffix in '" + std::string(s) + "' (use K, M or G)"};
        }
        std::string_view rest = suffix.substr(1);
        if (shift != 0 && (rest == "B" || rest == "iB" || rest == "b")) rest = {};
        if (!rest.empty()) throw usage_error{std::string(flag) + ": unknown size suffix in '" + std::string(s) + "'"};
    }
    if (shift != 0 && value > (std::numeric_limits<std::size_t>::max() >> shift))
        throw usage_error{std::string(flag) + ": size too large: " + std::string(s)};
    return value << shift;
}

long long parse_int(std::string_view s, std::string_view flag, long long lo, long long hi) {
    long long value = 0;
    bool neg = false;
    std::size_t i = 0;
    if (!s.empty() && s[0] == '-') {
        neg = true;
        i = 1;
    }
    if (i == s.size()) throw usage_error{std::string(flag) + ": not a number: '" + std::string(s) + "'"};
    for (; i < s.size(); ++i) {
        if (s[i] < '0' || s[i] > '9') throw usage_error{std::string(flag) + ": not a number: '" + std::string(s) + "'"};
        value = value * 10 + (s[i] - '0');
        if (value > hi + 1) break;
    }
    if (neg) value = -value;
    if (value < lo || value > hi)
        throw usage_error{std::string(flag) + ": " + std::string(s) + " is out of range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]"};
    return value;
}

std::vector<std::string_view> split_list(std::string_view s) {
    std::vector<std::string_view> out;
    while (true) {
        const std::size_t comma = s.find(',');
        out.push_back(s.substr(0, comma));
        if (comma == std::string_view::npos) break;
        s.remove_prefix(comma + 1);
    }
    return out;
}

template <class Kind, std::size_t N>
std::vector<Kind> parse_list(std::string_view s, std::string_view flag, const Kind (&all)[N],
                             const char* (*name)(Kind), std::initializer_list<std::pair<std::string_view, Kind>> aliases = {}) {
    if (s == "all") return {std::begin(all), std::end(all)};
    std::vector<Kind> out;
    for (std::string_view item : split_list(s)) {
        bool found = false;
        for (Kind k : all)
            if (item == name(k)) {
                out.push_back(k);
                found = true;
            }
        for (const auto& [alias, k] : aliases)
            if (!found && item == alias) {
                out.push_back(k);
                found = true;
            }
        if (!found) throw usage_error{std::string(flag) + ": unknown value '" + std::string(item) + "'"};
    }
    return out;
}

std::string quote_arg(std::string_view a) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789-_.,/=:+@%") == std::string_view::npos;
    if (plain) return std::string(a);
    std::string q = "'";
    for (char ch : a) {
        if (ch == '\'') q += "'\\''";
        else q += ch;
    }
    return q + "'";
}

options parse_options(int argc, char** argv) {
    options o;
    for (int i = 0; i < argc; ++i) {
        if (i) o.command_line += ' ';
        o.command_line += quote_arg(argv[i]);
    }

    struct flag_spec {
        char short_name;
        std::string_view long_name;
        bool takes_value;
    };
    static constexpr flag_spec specs[] = {
        {'b', "minbytes", true},  {'e', "maxbytes", true},   {'f', "stepfactor", true}, {'n', "iters", true},
        {'w', "warmup", true},    {'w', "warmup_iters", true}, {'c', "check", true},    {'o', "op", true},
        {'d', "datatype", true},  {'t', "ranks", true},      {'r', "root", true},       {'a', "algo", true},
        {0, "channels", true},    {0, "chunk-bytes", true},  {0, "collectives", true},  {0, "place", true},
        {0, "inplace", false},    {0, "outofplace", false},  {0, "json", true},         {0, "csv", true},
        {0, "quick", false},      {'h', "help", false},
    };

    // First pass: collect (flag, value); --quick sets defaults that explicit flags override.
    std::vector<std::pair<const flag_spec*, std::string_view>> given;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        const flag_spec* spec = nullptr;
        std::string_view value;
        bool has_value = false;
        if (arg.size() > 2 && arg.starts_with("--")) {
            std::string_view name = arg.substr(2);
            if (const std::size_t eq = name.find('='); eq != std::string_view::npos) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
                has_value = true;
            }
            for (const flag_spec& s : specs)
                if (s.long_name == name) spec = &s;
        } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
            for (const flag_spec& s : specs)
                if (s.short_name == arg[1]) {
                    spec = &s;
                    break;
                }
            if (arg.size() > 2) {
                value = arg.substr(2);
                has_value = true;
            }
        }
        if (spec == nullptr) throw usage_error{"unknown argument '" + std::string(arg) + "'"};
        if (spec->takes_value && !has_value) {
            if (i + 1 >= argc) throw usage_error{"--" + std::string(spec->long_name) + " needs a value"};
            value = argv[++i];
        } else if (!spec->takes_value && has_value) {
            throw usage_error{"--" + std::string(spec->long_name) + " takes no value"};
        }
        given.emplace_back(spec, value);
    }

    for (const auto& [spec, value] : given)
        if (spec->long_name == "quick") {
            o.quick = true;
            o.min_bytes = 8;
            o.max_bytes = std::size_t(4) << 20;
            o.iters = 10;
            o.warmup = 2;
        }

    bool channels_given = false, chunk_given = false;
    for (const auto& [spec, value] : given) {
        const std::string flag = "--" + std::string(spec->long_name);
        const std::string_view name = spec->long_name;
        if (name == "minbytes") o.min_bytes = parse_bytes(value, flag);
        else if (name == "maxbytes") o.max_bytes = parse_bytes(value, flag);
        else if (name == "stepfactor") o.step_factor = std::size_t(parse_int(value, flag, 2, 1 << 20));
        else if (name == "iters") o.iters = int(parse_int(value, flag, 1, 1 << 30));
        else if (name == "warmup" || name == "warmup_iters") o.warmup = int(parse_int(value, flag, 0, 1 << 30));
        else if (name == "check") o.check = parse_int(value, flag, 0, 1) != 0;
        else if (name == "op") o.ops = parse_list(value, flag, all_ops, op_name);
        else if (name == "datatype")
            o.types = parse_list(value, flag, all_types, type_name,
                                 {{"float32", type_kind::float32}, {"float64", type_kind::float64},
                                  {"int", type_kind::int32}, {"char", type_kind::int8}});
        else if (name == "ranks") o.ranks = int(parse_int(value, flag, 1, 4096));
        else if (name == "root") o.root = int(parse_int(value, flag, 0, 4095));
        else if (name == "algo") o.algo = std::string(value);
        else if (name == "channels") {
            o.channels = int(parse_int(value, flag, 1, 64));
            channels_given = true;
        } else if (name == "chunk-bytes") {
            o.chunk_bytes = parse_bytes(value, flag);
            chunk_given = true;
        } else if (name == "collectives") o.colls = parse_list(value, flag, all_colls, coll_name);
        else if (name == "place") {
            if (value == "out") o.out_of_place = true, o.in_place = false;
            else if (value == "in") o.out_of_place = false, o.in_place = true;
            else if (value == "both") o.out_of_place = true, o.in_place = true;
            else throw usage_error{flag + ": expected out, in or both, got '" + std::string(value) + "'"};
        } else if (name == "inplace") o.out_of_place = false, o.in_place = true;
        else if (name == "outofplace") o.out_of_place = true, o.in_place = false;
        else if (name == "json") o.json_path = std::string(value);
        else if (name == "csv") o.csv_path = std::string(value);
        else if (name == "quick") {
        } else if (name == "help") {
            print_usage(stdout, argv[0]);
            std::exit(0);
        }
    }

    if (o.min_bytes == 0) throw usage_error{"--minbytes must be at least 1"};
    if (o.min_bytes > o.max_bytes) throw usage_error{"--minbytes is larger than --maxbytes"};
    if (o.root >= o.ranks)
        throw usage_error{"--root " + std::to_string(o.root) + " is not a rank of " + std::to_string(o.ranks)};
    if (o.algo != "ring") throw usage_error{"--algo: unknown algorithm '" + o.algo + "' (available: ring)"};
    if (channels_given || chunk_given || true) {
        bool known = false;
        for (const ring_choice& c : ring_choices) known = known || (c.channels == o.channels && c.chunk_bytes == o.chunk_bytes);
        if (!known) {
            std::string list;
            for (const ring_choice& c : ring_choices)
                list += " " + std::to_string(c.channels) + "x" + std::to_string(c.chunk_bytes >> 10) + "K";
            throw usage_error{"ring with --channels " + std::to_string(o.channels) + " --chunk-bytes " +
                              std::to_string(o.chunk_bytes) + " is not compiled in; channels x chunk available:" + list};
        }
    }
    return o;
}

// ---------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------

constexpr std::size_t page_bytes = 4096;
//! Elements past the end of every output that must come back untouched.
constexpr std::size_t guard_elems = 64;

struct aligned_deleter {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{page_bytes}); }
};
using buffer_ptr = std::unique_ptr<std::byte, aligned_deleter>;

buffer_ptr allocate(std::size_t bytes) {
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

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

//! memcpy bandwidth with `nthreads` threads, each copying its own rank's A to
//! its own B, `bytes` per thread, for every size: GB/s (1e9), read + write,
//! summed over threads, best of `reps`. One thread start for the whole sweep.
std::vector<double> measure_memcpy(std::vector<rank_buffers>& bufs, const std::vector<std::size_t>& sizes, int reps) {
    const int nthreads = int(bufs.size());
    std::vector<double> times(std::size_t(nthreads) * sizes.size() * std::size_t(reps));
    std::barrier sync(nthreads);
    auto worker = [&](int t) {
        std::byte* src = bufs[std::size_t(t)].a.get();
        std::byte* dst = bufs[std::size_t(t)].b.get();
        for (std::size_t s = 0; s < sizes.size(); ++s) {
            const std::size_t bytes = sizes[s];
            // At least ~16 MiB per thread and repetition, so small sizes are timed over many copies.
            const std::size_t inner = std::clamp<std::size_t>((std::size_t(16) << 20) / bytes, 1, 20000);
            for (int r = 0; r < reps; ++r) {
                sync.arrive_and_wait();
                const auto t0 = clock_type::now();
                for (std::size_t k = 0; k < inner; ++k) {
                    std::memcpy(dst, src, bytes);
                    clobber_memory();
                }
                times[(s * std::size_t(reps) + std::size_t(r)) * std::size_t(nthreads) + std::size_t(t)] =
                    seconds_since(t0) / double(inner);
            }
        }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < nthreads; ++t) threads.emplace_back(worker, t);
    worker(0);
    for (auto& th : threads) th.join();

    std::vector<double> gbs(sizes.size(), 0.0);
    for (std::size_t s = 0; s < sizes.size(); ++s)
        for (int r = 0; r < reps; ++r) {
            double slowest = 0;
            for (int t = 0; t < nthreads; ++t)
                slowest = std::max(slowest, times[(s * std::size_t(reps) + std::size_t(r)) * std::size_t(nthreads) + std::size_t(t)]);
            gbs[s] = std::max(gbs[s], 2.0 * double(sizes[s]) * nthreads / slowest / 1e9);
        }
    return gbs;
}

// ---------------------------------------------------------------------------
// Verifiable data
// ---------------------------------------------------------------------------

//! Inputs repeat with this period (a multiple of every modulus used below),
//! so filling and checking are table look-ups.
constexpr std::size_t period = 420;

template <class T>
using wide_t = std::conditional_t<std::is_floating_point_v<T>, double,
                                  std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>>;

//! Integer-valued inputs whose exact reduction does not depend on the order
//! of operations, and that reference. Value of rank r at element i:
//!   sum, min, max: 1 + (i + 3r) mod m, m = min(7, max(T) / n) so the sum fits;
//!   prod: 2 where (i + r) mod 3 == 0, else 1 (a product of a few twos);
//!   avg: c_i ± k_i in pairs of ranks (0 for an odd last rank), so the sum is
//!        exactly n * c_i and avg = c_i whether it divides or not.
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
    if constexpr (std::is_integral_v<T>) m = std::clamp<long long>((long long)(std::numeric_limits<T>::max()) / n, 1, 7);

    for (std::size_t i = 0; i < period; ++i) {
        const long long c = 3 + long long(i % 5);
        const long long k = 1 + long long(i % 3);
        for (int r = 0; r < n; ++r) {
            long long v = 0;
            switch (op) {
            case op_kind::sum:
            case op_kind::min:
            case op_kind::max: v = 1 + (long long(i) + 3LL * r) % m; break;
            case op_kind::prod: v = (long long(i) + r) % 3 == 0 ? 2 : 1; break;
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
    std::size_t bytes = 0;
    std::size_t count = 0;
    const char* type = "";
    const char* op = "none";
    int root = -1;
    double cpybw = 0;
    place_result place[2]; // [0] out-of-place, [1] in-place
};

std::string json_escape(std::string_view s) {
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

std::string human_bytes(std::size_t b) {
    char buf[32];
    if (b >= (std::size_t(1) << 30) && b % (std::size_t(1) << 30) == 0) std::snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
    else if (b >= (std::size_t(1) << 20) && b % (std::size_t(1) << 20) == 0) std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
    else std::snprintf(buf, sizeof buf, "%zu B", b);
    return buf;
}

std::string version_string() {
#if defined(CHORUS_VERSION_MAJOR) && defined(CHORUS_VERSION_MINOR) && defined(CHORUS_VERSION_PATCH)
    return std::to_string(CHORUS_VERSION_MAJOR) + "." + std::to_string(CHORUS_VERSION_MINOR) + "." +
           std::to_string(CHORUS_VERSION_PATCH);
#else
    return "unknown";
#endif
}

//! Writes the human table (stdout, flushed per row) and the optional CSV and
//! JSON files. Only rank 0's thread or main() call it, never concurrently.
class reporter {
public:
    explicit reporter(const options& o) : opt_(o) {
        if (!o.csv_path.empty()) {
            csv_ = std::fopen(o.csv_path.c_str(), "w");
            if (csv_ == nullptr) throw usage_error{"--csv: cannot write " + o.csv_path};
            std::fprintf(csv_, "collective,place,size_bytes,count,type,redop,root,ranks,algo,channels,chunk_bytes,"
                               "iters,warmup,time_us,algbw_gbps,busbw_gbps,eff,memcpy_gbps,wrong\n");
        }
        if (!o.json_path.empty()) {
            json_ = std::fopen(o.json_path.c_str(), "w");
            if (json_ == nullptr) throw usage_error{"--json: cannot write " + o.json_path};
        }
    }
    reporter(const reporter&) = delete;
    reporter& operator=(const reporter&) = delete;
    ~reporter() {
        if (csv_ != nullptr) std::fclose(csv_);
        if (json_ != nullptr) {
            std::fprintf(json_, "\n  ],\n  \"wrong_total\": %" PRIu64 "\n}\n", wrong_total_);
            std::fclose(json_);
        }
    }

    void preamble(const std::vector<std::size_t>& sizes, const std::vector<double>& cpy) {
        const int n = opt_.ranks;
        const unsigned hw = std::thread::hardware_concurrency();
        std::printf("# %s\n", opt_.command_line.c_str());
        std::printf("# chorus %s, threads backend: %d ranks as threads on %u hardware threads%s\n",
                    version_string().c_str(), n, hw, hw != 0 && unsigned(n) > hw ? " (oversubscribed)" : "");
        std::printf("# algo %s<{.channels = %d, .chunk_bytes = %zu}>, iters %d, warmup %d, check %d, root %d\n",
                    opt_.algo.c_str(), opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.warmup, opt_.check ? 1 : 0,
                    opt_.root);
        std::printf("# buffers: 2 x %s per rank, page aligned, pre-faulted\n", human_bytes(opt_.max_bytes).c_str());
        std::printf("# memcpy (%d threads, %s): %.1f GB/s (read+write)\n", n, human_bytes(sizes.back()).c_str(),
                    cpy.back());
        std::printf("#\n"
                    "# S = size(B). algbw = S / time. busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md):\n"
                    "#   all_reduce S = count * sizeof(T), factor 2(n-1)/n; all_gather and reduce_scatter\n"
                    "#   S = n * count * sizeof(T) (count is per rank), factor (n-1)/n; broadcast, reduce factor 1.\n"
                    "# cpybw = memcpy bandwidth at S bytes per thread, %d threads, read+write, best of several.\n"
                    "# eff = least memory traffic / time / cpybw, where the least traffic of a shared-memory\n"
                    "#   collective (every input read once, every output written once) is\n"
                    "#   all_reduce 2nS, all_gather S + nS, reduce_scatter nS + S, broadcast S + (n-1)S, reduce nS + S.\n"
                    "# time = max over ranks of the per-call time of %d back-to-back calls after %d warm-up calls.\n"
                    "# #wrong: elements differing from a serial reference (tolerance 0), plus writes past the output\n"
                    "#   and changes to an out-of-place input.\n",
                    n, opt_.iters, opt_.warmup);
        std::fflush(stdout);

        if (json_ != nullptr) {
            std::fprintf(json_,
                         "{\n  \"command\": \"%s\",\n  \"version\": \"%s\",\n  \"backend\": \"threads\",\n"
                         "  \"ranks\": %d,\n  \"hardware_threads\": %u,\n  \"algo\": \"%s\",\n  \"channels\": %d,\n"
                         "  \"chunk_bytes\": %zu,\n  \"iters\": %d,\n  \"warmup\": %d,\n  \"check\": %s,\n"
                         "  \"root\": %d,\n  \"memcpy\": [",
                         json_escape(opt_.command_line).c_str(), version_string().c_str(), n, hw, opt_.algo.c_str(),
                         opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.warmup, opt_.check ? "true" : "false",
                         opt_.root);
            for (std::size_t i = 0; i < sizes.size(); ++i)
                std::fprintf(json_, "%s\n    {\"bytes\": %zu, \"gbps\": %.4f}", i ? "," : "", sizes[i], cpy[i]);
            std::fprintf(json_, "\n  ],\n  \"rows\": [");
        }
    }

    void table_header(coll_kind c) {
        busbw_sum_ = 0;
        busbw_count_ = 0;
        table_wrong_ = 0;
        std::printf("#\n# %s\n", coll_name(c));
        std::printf("#%53s%s%s\n", "",
                    opt_.out_of_place ? "             out-of-place                 " : "",
                    opt_.in_place ? "               in-place                   " : "");
        std::printf("#%14s %10s %7s %6s %5s", "size", "count", "type", "redop", "root");
        for (int p = 0; p < 2; ++p)
            if (enabled(p)) std::printf(" %10s %8s %8s %6s %7s", "time", "algbw", "busbw", "eff", "#wrong");
        std::printf(" %8s\n", "cpybw");
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
        std::printf(" %8.2f\n", r.cpybw);
        std::fflush(stdout);
    }

    void table_footer() {
        std::printf("# Out of bounds / wrong values : %" PRIu64 " %s\n", table_wrong_, table_wrong_ == 0 ? "OK" : "FAILED");
        std::printf("# Avg bus bandwidth            : %.3f GB/s\n",
                    busbw_count_ ? busbw_sum_ / double(busbw_count_) : 0.0);
        std::fflush(stdout);
    }

    std::uint64_t wrong_total() const { return wrong_total_; }

private:
    bool enabled(int p) const { return p == 0 ? opt_.out_of_place : opt_.in_place; }

    void write_files(const row_result& r, int p) {
        const place_result& pr = r.place[p];
        const char* place = p == 0 ? "out" : "in";
        if (csv_ != nullptr) {
            std::fprintf(csv_, "%s,%s,%zu,%zu,%s,%s,%d,%d,%s,%d,%zu,%d,%d,%.3f,%.6f,%.6f,%.6f,%.4f,%" PRIu64 "\n",
                         coll_name(r.coll), place, r.bytes, r.count, r.type, r.op, r.root, opt_.ranks,
                         opt_.algo.c_str(), opt_.channels, opt_.chunk_bytes, opt_.iters, opt_.warmup, pr.time_us,
                         pr.algbw, pr.busbw, pr.eff, r.cpybw, pr.wrong);
            std::fflush(csv_);
        }
        if (json_ != nullptr) {
            std::fprintf(json_,
                         "%s\n    {\"collective\": \"%s\", \"place\": \"%s\", \"size_bytes\": %zu, \"count\": %zu, "
                         "\"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.6f, "
                         "\"busbw_gbps\": %.6f, \"eff\": %.6f, \"memcpy_gbps\": %.4f, \"wrong\": %" PRIu64 "}",
                         json_rows_ ? "," : "", coll_name(r.coll), place, r.bytes, r.count, r.type, r.op, r.root,
                         pr.time_us, pr.algbw, pr.busbw, pr.eff, r.cpybw, pr.wrong);
            ++json_rows_;
            std::fflush(json_);
        }
    }

    const options& opt_;
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
    const options& opt;
    std::vector<rank_buffers>& bufs;
    std::size_t capacity_bytes; //!< of each buffer
    const std::vector<std::size_t>& sizes;
    const std::vector<double>& cpybw;
    reporter& rep;
    std::vector<double> rank_us;
    std::vector<std::uint64_t> rank_wrong;
};

//! One call of collective `c`. in/out are this rank's operands; `inplace`
//! selects the one-buffer overload of all_reduce.
template <class Algo, class T, class Op>
void call_collective(coll_kind c, comm_type& comm, std::span<const T> in, std::span<T> out, bool inplace, int root) {
    switch (c) {
    case coll_kind::all_reduce:
        if (inplace) chorus::all_reduce<Algo>(comm, out, Op{});
        else chorus::all_reduce<Algo>(comm, in, out, Op{});
        break;
    case coll_kind::all_gather: chorus::all_gather<Algo>(comm, in, out); break;
    case coll_kind::reduce_scatter: chorus::reduce_scatter<Algo>(comm, in, out, Op{}); break;
    case coll_kind::broadcast: chorus::broadcast<Algo>(comm, out, root); break;
    case coll_kind::reduce: chorus::reduce<Algo>(comm, in, out, Op{}, root); break;
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
void fill_for_check(coll_kind c, bool inplace, int rank, int root, std::size_t count, const operands<T>& o,
                    const data_pattern<T>& pat) {
    fill_value(o.region, o.region_count + guard_elems, pat.sentinel);
    if (!inplace) fill_value(o.out_ptr, o.out_count, pat.sentinel);
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

//! All sizes of one collective, one type, one operator, on this rank.
template <class Algo, class T, class Op>
void bench_rows(comm_type& comm, bench_state& st, coll_kind c, op_kind op) {
    const options& opt = st.opt;
    const int n = comm.size();
    const int rank = comm.rank();
    const int root = coll_uses_root(c) ? opt.root : -1;
    const data_pattern<T> pat = make_pattern<T>(op, n);
    T* const a = reinterpret_cast<T*>(st.bufs[std::size_t(rank)].a.get());
    T* const b = reinterpret_cast<T*>(st.bufs[std::size_t(rank)].b.get());

    for (std::size_t si = 0; si < st.sizes.size(); ++si) {
        const std::size_t elems = st.sizes[si] / sizeof(T);
        const std::size_t count = coll_count_per_rank(c) ? elems / std::size_t(n) : elems;
        if (count == 0) continue; // identical on every rank
        const std::size_t bytes = (coll_count_per_rank(c) ? count * std::size_t(n) : count) * sizeof(T);

        row_result row;
        row.coll = c;
        row.bytes = bytes;
        row.count = count;
        row.type = chorus::element_traits<T>::name();
        row.op = coll_uses_op(c) ? op_name(op) : "none";
        row.root = root;
        row.cpybw = st.cpybw[si];

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
            for (int i = 0; i < opt.warmup; ++i) call_collective<Algo, T, Op>(c, comm, in, out, inplace, root);
            chorus::barrier(comm);
            const auto t0 = clock_type::now();
            for (int i = 0; i < opt.iters; ++i) call_collective<Algo, T, Op>(c, comm, in, out, inplace, root);
            st.rank_us[std::size_t(rank)] = seconds_since(t0) * 1e6 / opt.iters;

            // Check: one more call on fresh verifiable data.
            std::uint64_t wrong = 0;
            if (opt.check) {
                chorus::barrier(comm); // nobody refills while a peer could still be in the timed loop
                fill_for_check(c, inplace, rank, root, count, o, pat);
                call_collective<Algo, T, Op>(c, comm, in, out, inplace, root);
                wrong = verify(c, inplace, rank, n, root, count, o, pat);
            }
            st.rank_wrong[std::size_t(rank)] = wrong;
            chorus::barrier(comm);

            if (rank == 0) {
                place_result& pr = row.place[place];
                pr.valid = true;
                pr.time_us = *std::max_element(st.rank_us.begin(), st.rank_us.end());
                for (std::uint64_t w : st.rank_wrong) pr.wrong += w;
                const double secs = pr.time_us * 1e-6;
                pr.algbw = double(bytes) / secs / 1e9;
                pr.busbw = pr.algbw * bus_factor(c, n);
                pr.eff = row.cpybw > 0 ? least_traffic_bytes(c, n, double(bytes)) / secs / (row.cpybw * 1e9) : 0.0;
            }
            // The next write to rank_us/rank_wrong follows at least one more barrier that rank 0 enters
            // only after reading them.
        }
        if (rank == 0) st.rep.row(row);
    }
}

//! Sweep sizes: min, min*f, ... up to max.
std::vector<std::size_t> sweep_sizes(const options& o) {
    std::vector<std::size_t> sizes;
    for (std::size_t s = o.min_bytes; s <= o.max_bytes; s *= o.step_factor) {
        sizes.push_back(s);
        if (s > o.max_bytes / o.step_factor) break;
    }
    return sizes;
}

int run(const options& opt) {
    reporter rep(opt);
    const int n = opt.ranks;
    const std::vector<std::size_t> sizes = sweep_sizes(opt);

    // Buffers: allocated once at the largest size (+ guard), pre-faulted by
    // the thread that will use them, never reallocated.
    const std::size_t capacity = (opt.max_bytes + guard_elems * 8 + page_bytes - 1) / page_bytes * page_bytes;
    std::vector<rank_buffers> bufs(static_cast<std::size_t>(n));
    for (rank_buffers& rb : bufs) {
        rb.a = allocate(capacity);
        rb.b = allocate(capacity);
    }
    {
        std::vector<std::thread> touch;
        for (int r = 0; r < n; ++r)
            touch.emplace_back([&, r] {
                std::memset(bufs[std::size_t(r)].a.get(), 1, capacity);
                std::memset(bufs[std::size_t(r)].b.get(), 2, capacity);
            });
        for (auto& t : touch) t.join();
    }

    const std::vector<double> cpybw = measure_memcpy(bufs, sizes, opt.quick ? 3 : 5);
    rep.preamble(sizes, cpybw);

    bench_state st{opt, bufs, capacity, sizes, cpybw, rep, std::vector<double>(std::size_t(n)),
                   std::vector<std::uint64_t>(std::size_t(n))};

    auto with_algo = [&](auto&& f) {
        // parse_options() accepted only compiled-in (channels, chunk) pairs
        if (!with_ring(opt.channels, opt.chunk_bytes, f)) std::abort();
    };

    for (coll_kind c : opt.colls) {
        rep.table_header(c);
        for (type_kind t : opt.types) {
            with_algo([&](auto algo_tag) {
                using Algo = typename decltype(algo_tag)::type;
                with_type(t, [&](auto type_tag) {
                    using T = typename decltype(type_tag)::type;
                    chorus::run_threads(n, [&](comm_type& comm) {
                        if (coll_uses_op(c)) {
                            for (op_kind op : opt.ops)
                                with_op(op, [&](auto op_tag) {
                                    using Op = typename decltype(op_tag)::type;
                                    bench_rows<Algo, T, Op>(comm, st, c, op);
                                });
                        } else {
                            bench_rows<Algo, T, chorus::sum>(comm, st, c, op_kind::sum);
                        }
                    });
                });
            });
        }
        rep.table_footer();
    }
    const std::uint64_t wrong = rep.wrong_total();
    std::printf("#\n# %s: %" PRIu64 " wrong values in total\n", wrong == 0 ? "OK" : "FAILED", wrong);
    return wrong == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    options opt;
    try {
        opt = parse_options(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_bench: %s\n\n", e.what.c_str());
        print_usage(stderr, argv[0]);
        return 2;
    }
    try {
        return run(opt);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "chorus_bench: %s\n", e.what.c_str());
        return 2;
    } catch (const chorus::error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "chorus_bench: chorus error (%s): %s\n", chorus::to_string(e.code()), e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "chorus_bench: error: %s\n", e.what());
        return 1;
    }
}
