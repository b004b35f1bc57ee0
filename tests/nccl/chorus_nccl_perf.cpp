//! \file tests/nccl/chorus_nccl_perf.cpp
//! chorus_nccl_perf: an nccl-tests-like driver of libchorus_nccl, through
//! the NCCL C API only (nccl.h). nccl-tests' command shape
//! (`-b 8 -e 128M -f 2 -g 1 -t 4 -c 1 -n 20 -w 5 -o sum -d float`) and its
//! table (size, count, type, redop, root, then time, algbw, busbw and
//! #wrong out of place and in place), with its bus bandwidth factors.
//! The collective comes from the program's name (all_reduce_perf,
//! all_gather_perf, reduce_scatter_perf, broadcast_perf, reduce_perf,
//! sendrecv_perf: links to this binary) or --collective.
//!
//! Ranks: -t threads, each driving -g communicators (ranks = t x g). One
//! thread: ncclCommInitAll; several: one ncclGetUniqueId, and each thread
//! initialises its ranks with ncclCommInitRank inside a group. Each timed
//! iteration is one group over the thread's communicators; ncclGroupEnd
//! returns once they completed (the host path's completion: docs/nccl.md).
//! Time is the average over threads of (timed loop) / iterations; -w
//! warm-up iterations run before each size's timed loop. With -c 1 every
//! element of one further run, on fresh data, is checked against a serial
//! reference (exactly: the data are small integers); the program exits 1
//! if any is wrong.

#include <nccl.h>

#include "../../benchmarks/cli.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

enum class coll { all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv };
constexpr std::string_view coll_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                           "broadcast",  "reduce",     "sendrecv"};

//! nccl-tests' bus bandwidth factors (its doc/PERFORMANCE.md) on n ranks.
double bus_factor(coll c, int n) {
    switch (c) {
    case coll::all_reduce: return 2.0 * (n - 1) / n;
    case coll::all_gather:
    case coll::reduce_scatter: return double(n - 1) / n;
    default: return 1.0;
    }
}
bool reduces(coll c) { return c == coll::all_reduce || c == coll::reduce_scatter || c == coll::reduce; }
bool rooted(coll c) { return c == coll::broadcast || c == coll::reduce; }

struct options {
    coll c = coll::all_reduce;
    bool coll_given = false;
    std::size_t min_bytes = 32 << 20, max_bytes = 32 << 20, step = 2;
    int gpus = 1, threads = 1, check = 1, iters = 20, warmup = 5, root = 0;
    ncclRedOp_t op = ncclSum;
    ncclDataType_t type = ncclFloat;
};

constexpr std::string_view op_names[] = {"sum", "prod", "max", "min", "avg"};
constexpr std::string_view type_names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float", "double"};
constexpr ncclDataType_t type_values[] = {ncclInt8,  ncclUint8,  ncclInt32, ncclUint32,
                                          ncclInt64, ncclUint64, ncclFloat, ncclDouble};

std::size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat: return 4;
    default: return 8;
    }
}

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "chorus_nccl_perf: %s\n", what.c_str());
    std::fflush(stderr);
    std::_Exit(1);
}

void nccl_check(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
    if (r != ncclSuccess) die(std::string(call) + " failed: " + ncclGetErrorString(r) + ": " + ncclGetLastError(comm));
}

//! The elements one call moves, nccl-tests' way: `bytes` is the larger
//! buffer; AllGather/ReduceScatter take a per-rank count rounded down to a
//! multiple of 4 elements.
struct shape {
    std::size_t count = 0;      //!< the count argument of the NCCL call
    std::size_t send_elems = 0; //!< elements of the send buffer
    std::size_t recv_elems = 0; //!< elements of the receive buffer
};
shape shape_of(coll c, std::size_t bytes, std::size_t ts, int n) {
    const std::size_t k = bytes / ts;
    shape s;
    if (c == coll::all_gather || c == coll::reduce_scatter) {
        const std::size_t base = k / (4 * std::size_t(n)) * 4;
        s.count = base;
        s.send_elems = c == coll::all_gather ? base : base * std::size_t(n);
        s.recv_elems = c == coll::all_gather ? base * std::size_t(n) : base;
    } else {
        s.count = s.send_elems = s.recv_elems = k;
    }
    return s;
}

//! The data rank r holds at element i (small integers: every reduction is exact).
template <class T>
T value(ncclRedOp_t op, int r, std::size_t i) {
    if (op == ncclProd) return T(1 + (std::size_t(r) + i) % 2);
    if (op == ncclMax || op == ncclMin) return T((std::size_t(r) * 3 + i) % 17);
    return T((std::size_t(r) + i) % 8);
}
template <class T>
T combine(ncclRedOp_t op, T a, T b) {
    switch (op) {
    case ncclProd: return T(a * b);
    case ncclMax: return a < b ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return T(a + b);
    }
}
//! Element i reduced over n ranks, as the serial reference.
template <class T>
T reduced(ncclRedOp_t op, int n, std::size_t i) {
    T acc = value<T>(op, 0, i);
    for (int r = 1; r < n; ++r) acc = combine(op, acc, value<T>(op, r, i));
    if (op == ncclAvg) acc = T(acc / T(n));
    return acc;
}

//! One rank's buffers.
struct rank_buffers {
    ncclComm_t comm = nullptr;
    int rank = 0;
    std::vector<unsigned char> send, recv;
};

//! The pointers of one call on rank `b` (in place: inside one buffer, as NCCL defines it).
struct call_ptrs {
    const void* send;
    void* recv;
};
call_ptrs ptrs_of(coll c, rank_buffers& b, const shape& s, std::size_t ts, bool in_place) {
    unsigned char* sb = b.send.data();
    unsigned char* rb = b.recv.data();
    if (!in_place) return {sb, rb};
    const std::size_t r = std::size_t(b.rank);
    switch (c) {
    case coll::all_gather: return {rb + r * s.count * ts, rb};
    case coll::reduce_scatter: return {sb, sb + r * s.count * ts};
    default: return {rb, rb};
    }
}

void issue(const options& o, coll c, rank_buffers& b, const shape& s, call_ptrs p, int nranks) {
    const char* what = "";
    ncclResult_t r = ncclSuccess;
    switch (c) {
    case coll::all_reduce: r = ncclAllReduce(p.send, p.recv, s.count, o.type, o.op, b.comm, nullptr); what = "ncclAllReduce"; break;
    case coll::all_gather: r = ncclAllGather(p.send, p.recv, s.count, o.type, b.comm, nullptr); what = "ncclAllGather"; break;
    case coll::reduce_scatter: r = ncclReduceScatter(p.send, p.recv, s.count, o.type, o.op, b.comm, nullptr); what = "ncclReduceScatter"; break;
    case coll::broadcast: r = ncclBroadcast(p.send, p.recv, s.count, o.type, o.root, b.comm, nullptr); what = "ncclBroadcast"; break;
    case coll::reduce: r = ncclReduce(p.send, p.recv, s.count, o.type, o.op, o.root, b.comm, nullptr); what = "ncclReduce"; break;
    case coll::sendrecv:
        r = ncclSend(p.send, s.count, o.type, (b.rank + 1) % nranks, b.comm, nullptr);
        if (r == ncclSuccess) r = ncclRecv(p.recv, s.count, o.type, (b.rank - 1 + nranks) % nranks, b.comm, nullptr);
        what = "ncclSend/ncclRecv";
        break;
    }
    nccl_check(r, what, b.comm);
}

//! Fills rank b's input for one checked run; the receive side gets a marker.
template <class T>
void fill(const options& o, coll c, rank_buffers& b, const shape& s, call_ptrs p, int n) {
    std::fill(reinterpret_cast<T*>(b.recv.data()), reinterpret_cast<T*>(b.recv.data()) + b.recv.size() / sizeof(T), T(99));
    T* in = static_cast<T*>(const_cast<void*>(p.send));
    const std::size_t elems = c == coll::reduce_scatter ? s.count * std::size_t(n) : s.count;
    for (std::size_t i = 0; i < elems; ++i) in[i] = value<T>(o.op, b.rank, i);
}

//! Wrong elements of rank b's result.
template <class T>
std::size_t count_wrong(const options& o, coll c, rank_buffers& b, const shape& s, call_ptrs p, int n) {
    const T* out = static_cast<const T*>(p.recv);
    std::size_t wrong = 0;
    switch (c) {
    case coll::all_reduce:
        for (std::size_t i = 0; i < s.count; ++i) wrong += out[i] != reduced<T>(o.op, n, i);
        break;
    case coll::all_gather:
        for (std::size_t j = 0; j < s.count * std::size_t(n); ++j)
            wrong += out[j] != value<T>(o.op, int(j / s.count), j % s.count);
        break;
    case coll::reduce_scatter:
        for (std::size_t i = 0; i < s.count; ++i) wrong += out[i] != reduced<T>(o.op, n, std::size_t(b.rank) * s.count + i);
        break;
    case coll::broadcast:
        for (std::size_t i = 0; i < s.count; ++i) wrong += out[i] != value<T>(o.op, o.root, i);
        break;
    case coll::reduce:
        if (b.rank == o.root)
            for (std::size_t i = 0; i < s.count; ++i) wrong += out[i] != reduced<T>(o.op, n, i);
        break;
    case coll::sendrecv:
        for (std::size_t i = 0; i < s.count; ++i) wrong += out[i] != value<T>(o.op, (b.rank - 1 + n) % n, i);
        break;
    }
    return wrong;
}

//! Whether a run's result is checked: with -c 1, except in-place
//! send/recv (one buffer sent and received in one group has no defined
//! result; nccl-tests reports N/A too).
bool checked(const options& o, coll c, bool in_place) { return o.check != 0 && !(c == coll::sendrecv && in_place); }

template <class F>
auto with_type(ncclDataType_t t, F&& f) {
    switch (t) {
    case ncclInt8: return f(std::int8_t{});
    case ncclUint8: return f(std::uint8_t{});
    case ncclInt32: return f(std::int32_t{});
    case ncclUint32: return f(std::uint32_t{});
    case ncclInt64: return f(std::int64_t{});
    case ncclUint64: return f(std::uint64_t{});
    case ncclDouble: return f(double{});
    default: return f(float{});
    }
}

std::string fmt_time(double us) {
    char b[32];
    if (us >= 1e7) std::snprintf(b, sizeof b, "%7.0e", us);
    else if (us >= 1e4) std::snprintf(b, sizeof b, "%7.0f", us);
    else std::snprintf(b, sizeof b, "%7.2f", us);
    return b;
}

options parse_options(int argc, char** argv) {
    options o;
    static const chorus_cli::option table[] = {
        {"", 0, {}, "nccl-tests' options (the ones the host path has):"},
        {"minbytes", 'b', "SIZE", "smallest size, bytes; suffixes K M G (default 32M)"},
        {"maxbytes", 'e', "SIZE", "largest size (default 32M)"},
        {"stepfactor", 'f', "N", "multiply the size by N each row (default 2)"},
        {"ngpus", 'g', "N", "communicators (ranks) per thread (default 1)"},
        {"nthreads", 't', "N", "threads (default 1); ranks = t x g"},
        {"check", 'c', "0/1", "check every element of one run per size and place (default 1)"},
        {"iters", 'n', "N", "timed iterations per size (default 20)"},
        {"warmup_iters", 'w', "N", "warm-up iterations before each size (default 5)"},
        {"op", 'o', "OP", "sum, prod, max, min or avg (default sum)"},
        {"datatype", 'd', "TYPE", "int8, uint8, int32, uint32, int64, uint64, float or double (default float)"},
        {"root", 'r', "N", "root of broadcast and reduce (default 0)"},
        {"collective", 0, "NAME",
         "all_reduce, all_gather, reduce_scatter, broadcast, reduce or sendrecv\n(default: from the program's "
         "name, <collective>_perf)"},
        {"help", 'h', {}, "this text"},
    };
    const std::string_view usage =
        "usage: <collective>_perf [options]   (or chorus_nccl_perf --collective NAME [options])\n"
        "An nccl-tests-like driver of libchorus_nccl through the NCCL C API (docs/nccl.md).";
    try {
        const chorus_cli::parsed_line line = chorus_cli::parse(argc, argv, table);
        if (line.help) {
            chorus_cli::print_help(stdout, usage, table);
            std::exit(0);
        }
        for (const chorus_cli::given_option& g : line.given) {
            if (g.is("minbytes")) o.min_bytes = chorus_cli::parse_bytes(g.value, g.flag);
            else if (g.is("maxbytes")) o.max_bytes = chorus_cli::parse_bytes(g.value, g.flag);
            else if (g.is("stepfactor")) o.step = std::size_t(chorus_cli::parse_int(g.value, g.flag, 2, 1 << 20));
            else if (g.is("ngpus")) o.gpus = int(chorus_cli::parse_int(g.value, g.flag, 1, 1024));
            else if (g.is("nthreads")) o.threads = int(chorus_cli::parse_int(g.value, g.flag, 1, 1024));
            else if (g.is("check")) o.check = int(chorus_cli::parse_int(g.value, g.flag, 0, 1));
            else if (g.is("iters")) o.iters = int(chorus_cli::parse_int(g.value, g.flag, 1, 1 << 30));
            else if (g.is("warmup_iters")) o.warmup = int(chorus_cli::parse_int(g.value, g.flag, 0, 1 << 30));
            else if (g.is("op")) o.op = ncclRedOp_t(chorus_cli::parse_choice(g.value, g.flag, {"sum", "prod", "max", "min", "avg"}));
            else if (g.is("datatype"))
                o.type = type_values[chorus_cli::parse_choice(
                    g.value, g.flag, {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float", "double"})];
            else if (g.is("root")) o.root = int(chorus_cli::parse_int(g.value, g.flag, 0, 1 << 20));
            else if (g.is("collective")) {
                o.c = coll(chorus_cli::parse_choice(g.value, g.flag, {"all_reduce", "all_gather", "reduce_scatter",
                                                                      "broadcast", "reduce", "sendrecv"}));
                o.coll_given = true;
            } else chorus_cli::unhandled(g);
        }
        if (!o.coll_given) {
            std::string_view prog = argv[0];
            if (const std::size_t slash = prog.rfind('/'); slash != std::string_view::npos) prog.remove_prefix(slash + 1);
            bool found = false;
            for (std::size_t k = 0; k < std::size(coll_names); ++k)
                if (prog == chorus_cli::cat(coll_names[k], "_perf")) {
                    o.c = coll(k);
                    found = true;
                }
            if (!found)
                throw chorus_cli::usage_error{chorus_cli::cat("run as <collective>_perf or name the collective with "
                                                              "--collective (the program is '", prog, "')")};
        }
        if (o.min_bytes > o.max_bytes) throw chorus_cli::usage_error{"-b is larger than -e"};
        if (o.root >= o.threads * o.gpus) throw chorus_cli::usage_error{"-r: the root must be one of the t x g ranks"};
    } catch (const chorus_cli::usage_error& e) {
        std::fprintf(stderr, "chorus_nccl_perf: %s\n", e.what.c_str());
        std::exit(2);
    }
    return o;
}

} // namespace

int main(int argc, char** argv) {
    const options o = parse_options(argc, argv);
    const coll c = o.c;
    const int nranks = o.threads * o.gpus;
    const std::size_t ts = type_size(o.type);
    std::vector<std::size_t> sizes;
    for (std::size_t s = o.min_bytes; s <= o.max_bytes; s *= o.step) {
        sizes.push_back(s);
        if (s == 0 || s > o.max_bytes / o.step) break;
    }

    int version = 0;
    nccl_check(ncclGetVersion(&version), "ncclGetVersion");
    std::printf("# %s_perf: chorus_nccl_perf over libchorus_nccl (NCCL API %d, host path: ranks are threads)\n",
                std::string(coll_names[int(c)]).c_str(), version);
    std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d "
                "validation: %d\n#\n",
                o.threads, o.gpus, o.min_bytes, o.max_bytes, o.step, o.warmup, o.iters, o.check);
    std::printf("# Using devices\n");
    for (int r = 0; r < nranks; ++r)
        std::printf("#  Rank %2d Group  0 Pid %6d on thread %2d device %2d [host memory]\n", r, int(getpid()),
                    r / o.gpus, r);
    std::printf("#\n");

    // Ranks: thread t drives ranks t*g .. t*g+g-1.
    std::vector<rank_buffers> ranks(static_cast<std::size_t>(nranks));
    std::vector<ncclComm_t> all(static_cast<std::size_t>(nranks));
    ncclUniqueId id{};
    if (o.threads == 1) nccl_check(ncclCommInitAll(all.data(), nranks, nullptr), "ncclCommInitAll");
    else nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");

    shape biggest;
    for (const std::size_t s : sizes) {
        const shape sh = shape_of(c, s, ts, nranks);
        biggest.send_elems = std::max(biggest.send_elems, sh.send_elems);
        biggest.recv_elems = std::max(biggest.recv_elems, sh.recv_elems);
    }

    std::barrier sync(o.threads);
    std::vector<double> secs(static_cast<std::size_t>(o.threads));
    std::vector<std::size_t> wrong(static_cast<std::size_t>(o.threads));
    std::atomic<std::size_t> total_wrong{0};
    double bw_sum = 0;
    int bw_rows = 0;

    auto body = [&](int t) {
        std::span<rank_buffers> mine(ranks.data() + std::size_t(t) * std::size_t(o.gpus), std::size_t(o.gpus));
        if (o.threads > 1) {
            nccl_check(ncclGroupStart(), "ncclGroupStart");
            for (int i = 0; i < o.gpus; ++i)
                nccl_check(ncclCommInitRank(&all[std::size_t(t * o.gpus + i)], nranks, id, t * o.gpus + i),
                           "ncclCommInitRank");
            nccl_check(ncclGroupEnd(), "ncclGroupEnd (ncclCommInitRank)");
        }
        for (int i = 0; i < o.gpus; ++i) {
            rank_buffers& b = mine[std::size_t(i)];
            b.rank = t * o.gpus + i;
            b.comm = all[std::size_t(b.rank)];
            // Pre-faulted, as cudaMalloc'd memory is resident.
            b.send.assign(std::max<std::size_t>(biggest.send_elems * ts, 1), 0);
            b.recv.assign(std::max<std::size_t>(biggest.recv_elems * ts, 1), 0);
        }
        auto run = [&](const shape& sh, bool in_place) {
            nccl_check(ncclGroupStart(), "ncclGroupStart");
            for (rank_buffers& b : mine) issue(o, c, b, sh, ptrs_of(c, b, sh, ts, in_place), nranks);
            nccl_check(ncclGroupEnd(), "ncclGroupEnd");
        };
        for (const std::size_t s : sizes) {
            const shape sh = shape_of(c, s, ts, nranks);
            double time_us[2] = {0, 0};
            std::size_t bad[2] = {0, 0};
            for (int place = 0; place < 2; ++place) {
                const bool in_place = place == 1;
                for (int k = 0; k < o.warmup; ++k) run(sh, in_place);
                sync.arrive_and_wait();
                const auto t0 = std::chrono::steady_clock::now();
                for (int k = 0; k < o.iters; ++k) run(sh, in_place);
                secs[std::size_t(t)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::size_t w = 0;
                if (checked(o, c, in_place)) {
                    sync.arrive_and_wait(); // every rank done with the timed calls before inputs change
                    with_type(o.type, [&](auto v) {
                        using T = decltype(v);
                        for (rank_buffers& b : mine) fill<T>(o, c, b, sh, ptrs_of(c, b, sh, ts, in_place), nranks);
                        return 0;
                    });
                    run(sh, in_place);
                    with_type(o.type, [&](auto v) {
                        using T = decltype(v);
                        for (rank_buffers& b : mine)
                            w += count_wrong<T>(o, c, b, sh, ptrs_of(c, b, sh, ts, in_place), nranks);
                        return 0;
                    });
                }
                wrong[std::size_t(t)] = w;
                sync.arrive_and_wait();
                if (t == 0) {
                    double sum = 0;
                    std::size_t wsum = 0;
                    for (int q = 0; q < o.threads; ++q) {
                        sum += secs[std::size_t(q)];
                        wsum += wrong[std::size_t(q)];
                    }
                    time_us[place] = sum / o.threads / o.iters * 1e6;
                    bad[place] = wsum;
                    total_wrong += wsum;
                }
                sync.arrive_and_wait();
            }
            if (t == 0) {
                const std::size_t bytes = std::max(sh.send_elems, sh.recv_elems) * ts;
                const char* redop = reduces(c) ? std::string_view(op_names[int(o.op)]).data() : "none";
                std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, bytes / ts,
                            std::string(type_names[std::find(std::begin(type_values), std::end(type_values), o.type) -
                                                   std::begin(type_values)])
                                .c_str(),
                            redop, rooted(c) ? o.root : -1);
                for (int place = 0; place < 2; ++place) {
                    const double algbw = time_us[place] > 0 ? double(bytes) / (time_us[place] * 1e-6) / 1e9 : 0;
                    const double busbw = algbw * bus_factor(c, nranks);
                    bw_sum += busbw; // over every row, out of place and in place
                    ++bw_rows;
                    char w[24];
                    if (checked(o, c, place == 1)) std::snprintf(w, sizeof w, "%zu", bad[place]);
                    else std::snprintf(w, sizeof w, "N/A");
                    std::printf("  %s  %6.2f  %6.2f  %6s", fmt_time(time_us[place]).c_str(), algbw, busbw, w);
                }
                std::printf("\n");
                std::fflush(stdout);
            }
        }
        for (rank_buffers& b : mine) nccl_check(ncclCommDestroy(b.comm), "ncclCommDestroy");
    };

    std::printf("#\n");
    std::printf("#                                                              out-of-place                       "
                "in-place          \n");
    std::printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
                "algbw   busbw #wrong\n");
    std::printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
                "(GB/s)  (GB/s)       \n");
    std::vector<std::thread> ts_;
    for (int t = 1; t < o.threads; ++t) ts_.emplace_back(body, t);
    body(0);
    for (auto& th : ts_) th.join();
    std::printf("# Out of bounds values : %zu %s\n", total_wrong.load(), total_wrong.load() == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n#\n", bw_rows ? bw_sum / bw_rows : 0.0);
    return total_wrong.load() == 0 ? 0 : 1;
}
