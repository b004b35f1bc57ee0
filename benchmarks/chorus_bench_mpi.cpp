// chorus_bench_mpi: the MPI mode of chorus_bench, launched by mpiexec. For
// each size it times chorus's collectives on communicator<mpi> and, in the
// same run on the same buffers and sizes, MPI's own (MPI_Allreduce,
// MPI_Allgather, MPI_Reduce_scatter_block), and prints the nccl-tests
// columns for both and the ratio of chorus's busbw to MPI's.
//
//   mpiexec -n 4 chorus_bench_mpi -b 8 -e 64M -f 4 --algo hierarchical,ring
//
// Time per call is the slowest rank's mean over the timed iterations, after
// warm-up. Inputs are small integers in float (sums exact in any order),
// and every chorus and MPI result is checked (#wrong). glibc returns freed
// blocks above 128 KiB to the kernel, so an MPI that allocates scratch per
// call pays page faults on every call; the benchmark turns that off with
// mallopt (as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=... would) unless
// --keep-malloc is given, so the comparison does not flatter chorus.

#include <chorus/mpi.hpp>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct options {
    std::size_t min_bytes = 8, max_bytes = std::size_t(64) << 20, factor = 4;
    int iters = 20, warmup = 5;
    std::vector<std::string> colls{"all_reduce", "all_gather", "reduce_scatter"};
    std::vector<std::string> algos{"hierarchical", "ring"};
    bool keep_malloc = false;
};

std::size_t parse_size(const char* s) {
    char* end = nullptr;
    double v = std::strtod(s, &end);
    switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return static_cast<std::size_t>(v);
}

std::vector<std::string> parse_list(const char* s) {
    std::vector<std::string> out;
    std::string cur;
    for (; *s; ++s) {
        if (*s == ',') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += *s;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

[[noreturn]] void usage(int rank, const char* why) {
    if (rank == 0)
        std::fprintf(stderr,
                     "chorus_bench_mpi: %s\n"
                     "usage: mpiexec -n N chorus_bench_mpi [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
                     "         [--collectives all_reduce,all_gather,reduce_scatter] [--algo hierarchical,ring]\n"
                     "         [--keep-malloc]\n",
                     why);
    MPI_Finalize();
    std::exit(2);
}

options parse(int argc, char** argv, int rank) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) usage(rank, ("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "-b") o.min_bytes = parse_size(next());
        else if (a == "-e") o.max_bytes = parse_size(next());
        else if (a == "-f") o.factor = parse_size(next());
        else if (a == "-n") o.iters = std::atoi(next());
        else if (a == "-w") o.warmup = std::atoi(next());
        else if (a == "--collectives") o.colls = parse_list(next());
        else if (a == "--algo") o.algos = parse_list(next());
        else if (a == "--keep-malloc") o.keep_malloc = true;
        else usage(rank, ("unknown option " + a).c_str());
    }
    if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.factor < 2 || o.iters < 1 || o.warmup < 0)
        usage(rank, "bad sizes or counts");
    for (const auto& c : o.colls)
        if (c != "all_reduce" && c != "all_gather" && c != "reduce_scatter") usage(rank, ("unknown collective " + c).c_str());
    for (const auto& a : o.algos)
        if (a != "hierarchical" && a != "ring") usage(rank, ("unknown algorithm " + a).c_str());
    return o;
}

// nccl-tests: busbw = algbw * 2(n-1)/n for AllReduce, (n-1)/n for AllGather and ReduceScatter.
double bus_factor(const std::string& c, int n) {
    return c == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
}

float value(std::size_t i, int r) { return float(1 + (i + 3 * std::size_t(r)) % 7); }

struct timing {
    double us = 0;
    std::uint64_t wrong = 0;
};

// Mean time per call over `iters` (slowest rank), after `warmup` calls.
template <class F>
double time_calls(MPI_Comm comm, int warmup, int iters, F&& call) {
    for (int i = 0; i < warmup; ++i) call();
    MPI_Barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    double worst = 0;
    MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
    return worst;
}

struct bufs {
    std::vector<float> in, out;
};

// Fills in, runs one call of `coll` through `call`, counts wrong elements
// (summed over ranks), then times it.
template <class F>
timing measure(chorus::communicator<chorus::mpi>& comm, const options& o, const std::string& coll, std::size_t count,
               bufs& b, F&& call) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t in_n = coll == "reduce_scatter" ? count * std::size_t(n) : count;
    const std::size_t out_n = coll == "all_gather" ? count * std::size_t(n) : count;
    b.in.resize(in_n);
    b.out.assign(out_n, -1.0f);
    for (std::size_t i = 0; i < in_n; ++i) b.in[i] = value(i, r);
    call();
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < out_n; ++i) {
        float want = 0;
        if (coll == "all_reduce") {
            for (int q = 0; q < n; ++q) want += value(i, q);
        } else if (coll == "reduce_scatter") {
            for (int q = 0; q < n; ++q) want += value(std::size_t(r) * count + i, q);
        } else {
            want = value(i % count, int(i / count));
        }
        wrong += b.out[i] != want;
    }
    timing t;
    MPI_Allreduce(&wrong, &t.wrong, 1, MPI_UINT64_T, MPI_SUM, comm.mpi_comm());
    t.us = time_calls(comm.mpi_comm(), o.warmup, o.iters, call);
    return t;
}

template <class Algo>
void chorus_call(chorus::communicator<chorus::mpi>& comm, const std::string& coll, bufs& b) {
    const std::span<const float> in(b.in);
    const std::span<float> out(b.out);
    if (coll == "all_reduce") chorus::all_reduce<Algo>(comm, in, out);
    else if (coll == "all_gather") chorus::all_gather<Algo>(comm, in, out);
    else chorus::reduce_scatter<Algo>(comm, in, out);
}

void mpi_call(MPI_Comm c, const std::string& coll, bufs& b) {
    if (coll == "all_reduce")
        MPI_Allreduce(b.in.data(), b.out.data(), static_cast<int>(b.out.size()), MPI_FLOAT, MPI_SUM, c);
    else if (coll == "all_gather")
        MPI_Allgather(b.in.data(), static_cast<int>(b.in.size()), MPI_FLOAT, b.out.data(), static_cast<int>(b.in.size()),
                      MPI_FLOAT, c);
    else
        MPI_Reduce_scatter_block(b.in.data(), b.out.data(), static_cast<int>(b.out.size()), MPI_FLOAT, MPI_SUM, c);
}

} // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const options o = parse(argc, argv, rank);
    if (!o.keep_malloc) {
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    std::uint64_t total_wrong = 0;
    {
        chorus::communicator<chorus::mpi> comm(MPI_COMM_WORLD);
        MPI_Comm mpi_comm = MPI_COMM_NULL;
        MPI_Comm_dup(MPI_COMM_WORLD, &mpi_comm);
        if (rank == 0) {
            std::printf("# chorus_bench_mpi: %d ranks on %d node(s) (%d on rank 0's), float sum, %d iters after %d warm-up, "
                        "malloc %s\n",
                        n, comm.nodes(), comm.local_size(), o.iters, o.warmup,
                        o.keep_malloc ? "as is" : "without mmap/trim (MALLOC_MMAP_MAX_=0 equivalent)");
            std::printf("# size: bytes per rank (AllReduce: the buffer; AllGather: the input; ReduceScatter: the output)\n");
            std::printf("# busbw = algbw * 2(n-1)/n (AllReduce), (n-1)/n (AllGather, ReduceScatter); algbw = size/time\n");
            std::printf("# ratio = chorus busbw / MPI busbw, same run, same buffers\n");
            std::printf("%-15s %10s %10s %-13s %10s %9s %9s %6s %10s %9s %6s %7s\n", "collective", "size", "count", "algo",
                        "time(us)", "algbw", "busbw", "#wrong", "mpi(us)", "mpi_bus", "#wrong", "ratio");
        }
        bufs b;
        for (const auto& coll : o.colls) {
            for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
                const std::size_t count = bytes / sizeof(float);
                const timing m = measure(comm, o, coll, count, b, [&] { mpi_call(mpi_comm, coll, b); });
                for (const auto& algo : o.algos) {
                    const timing t =
                        algo == "hierarchical"
                            ? measure(comm, o, coll, count, b, [&] { chorus_call<chorus::hierarchical<>>(comm, coll, b); })
                            : measure(comm, o, coll, count, b, [&] { chorus_call<chorus::ring<>>(comm, coll, b); });
                    total_wrong += t.wrong + m.wrong;
                    if (rank == 0) {
                        const double algbw = double(count * sizeof(float)) / t.us / 1e3;
                        const double mpi_algbw = double(count * sizeof(float)) / m.us / 1e3;
                        const double f = bus_factor(coll, n);
                        std::printf("%-15s %10zu %10zu %-13s %10.2f %9.2f %9.2f %6llu %10.2f %9.2f %6llu %7.2f\n",
                                    coll.c_str(), count * sizeof(float), count, algo.c_str(), t.us, algbw, algbw * f,
                                    static_cast<unsigned long long>(t.wrong), m.us, mpi_algbw * f,
                                    static_cast<unsigned long long>(m.wrong), m.us / t.us);
                        std::fflush(stdout);
                    }
                }
            }
        }
        MPI_Comm_free(&mpi_comm);
    }
    if (rank == 0) std::printf("# %s\n", total_wrong ? "FAILED: wrong results" : "all results correct");
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
