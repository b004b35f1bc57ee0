// The GPU correctness suite: every collective with ring<>, direct<> and
// hierarchical<> on virtual ranks (2, 4 and 8 ranks on device 0) and, when
// the machine has several GPUs, on one rank per device; element types from
// int8 to double, __half and __nv_bfloat16 (accumulating in float), a user
// struct with a user operator; ragged counts and misaligned buffers; in
// place and out of place; the future, stream_wait, CUDA graph capture and
// replay; bad input and a rank that never joins.
//
// Integer-valued inputs make every float and integer result exact whatever
// the reduction order; bfloat16 and half are checked against a float64
// reference with a relative bound.
//
// Without a device it prints "CHORUS_SKIP: no CUDA device" and exits 77
// (CTest: Skipped): then it only proves that all of this compiles.
#include <chorus/gpu.hpp>

#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/sequence.h>
#include <thrust/transform.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_failures = 0;
int g_cases = 0;

#define EXPECT(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            ++g_failures;                                                                  \
            std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            std::printf(__VA_ARGS__);                                                      \
            std::printf("\n");                                                             \
        }                                                                                  \
    } while (0)

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// A user element and operator: a (min, max) pair combined component-wise.
struct span2 {
    float lo, hi;
};
struct widen {
    static constexpr bool commutative = true;
    __host__ __device__ span2 operator()(const span2& a, const span2& b) const {
        return {a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? b.hi : a.hi};
    }
};

template <class T>
__host__ __device__ T make_value(int r, std::uint64_t i) {
    if constexpr (std::is_same_v<T, span2>) {
        const float v = float((r * 7 + i * 3) % 17);
        return span2{v, v + 1.f};
    } else if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
        return T(0.5f + float((r * 131 + i * 71) % 1000) / 1000.f);
    } else {
        return T((r * 7 + i * 3) % 11 + 1);
    }
}

template <class T>
double as_double(const T& v) {
    if constexpr (std::is_same_v<T, __half>) return double(__half2float(v));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return double(__bfloat162float(v));
    else return double(v);
}

template <class T>
double as_double_or_zero(const T& v) {
    if constexpr (std::is_same_v<T, span2>) return 0;
    else return as_double(v);
}

template <class T>
bool close_enough(const T& got, const T& want, double ref) {
    if constexpr (std::is_same_v<T, span2>) return got.lo == want.lo && got.hi == want.hi;
    else if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
        return std::fabs(as_double(got) - ref) <= 1e-2 * std::fabs(ref) + 1e-3;
    else return got == want;
}

// The serial reference, in rank order, in double for the 16-bit floats.
template <class T, class Op>
void reference(int n, std::uint64_t j, Op op, T& want, double& ref) {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
        ref = 0;
        for (int q = 0; q < n; ++q) ref += as_double(make_value<T>(q, j));
        if constexpr (std::is_same_v<Op, chorus::avg>) ref /= n;
        want = T(float(ref));
    } else {
        want = make_value<T>(0, j);
        for (int q = 1; q < n; ++q) want = op(want, make_value<T>(q, j));
        want = chorus::detail::finish(op, want, n);
        ref = 0;
    }
}

template <class T>
struct fill_fn {
    int r;
    __host__ __device__ T operator()(std::uint64_t i) const { return make_value<T>(r, i); }
};

struct world {
    std::vector<chorus::gpu::communicator> comms;
    std::vector<cudaStream_t> streams;
    explicit world(const std::vector<int>& devs, chorus::gpu::options opt = {})
        : comms(chorus::gpu::make_communicators(devs, opt)) {
        for (auto& c : comms) {
            cuda_ok(cudaSetDevice(c.device()), "cudaSetDevice");
            cudaStream_t s;
            cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
            streams.push_back(s);
            c.set_timeout(std::chrono::milliseconds(20000));
        }
    }
    ~world() {
        for (auto s : streams) cudaStreamDestroy(s);
    }
    int size() const { return int(comms.size()); }
    void sync() {
        for (int r = 0; r < size(); ++r) {
            cuda_ok(cudaStreamSynchronize(streams[std::size_t(r)]), "cudaStreamSynchronize");
            comms[std::size_t(r)].check();
        }
    }
};

// Buffers of one rank: `off` elements of misalignment in front.
template <class T>
struct rank_bufs {
    thrust::device_vector<T> in, out;
    std::size_t off = 0;
    T* in_ptr() { return thrust::raw_pointer_cast(in.data()) + off; }
    T* out_ptr() { return thrust::raw_pointer_cast(out.data()) + off; }
};

template <class Algo, class T, class Op>
void run_case(world& w, chorus::collective coll, std::uint64_t count, bool in_place, Op op, const char* tname) {
    using chorus::collective;
    const int n = w.size();
    const int root = n - 1;
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    const std::uint64_t in_len = coll == collective::all_gather ? count : big;
    const std::uint64_t out_len = coll == collective::reduce_scatter ? count : big;
    std::vector<rank_bufs<T>> b(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        cuda_ok(cudaSetDevice(w.comms[std::size_t(r)].device()), "cudaSetDevice");
        auto& x = b[std::size_t(r)];
        x.off = std::size_t(r % 3);
        x.in.resize(x.off + big + 4);
        x.out.resize(x.off + big + 4);
        thrust::counting_iterator<std::uint64_t> it(0);
        thrust::transform(it, it + in_len, x.in.begin() + std::ptrdiff_t(x.off), fill_fn<T>{r});
        if (in_place && coll == collective::all_gather)
            thrust::transform(it, it + count, x.out.begin() + std::ptrdiff_t(x.off + std::uint64_t(r) * count),
                              fill_fn<T>{r});
    }
    cuda_ok(cudaDeviceSynchronize(), "fill");
    for (int r = 0; r < n; ++r) {
        auto& c = w.comms[std::size_t(r)];
        auto& x = b[std::size_t(r)];
        cudaStream_t s = w.streams[std::size_t(r)];
        T* in = x.in_ptr();
        T* out = x.out_ptr();
        switch (coll) {
        case collective::all_reduce:
            if (in_place) chorus::all_reduce<Algo>(c, std::span<T>(in, count), op, s);
            else chorus::all_reduce<Algo>(c, std::span<const T>(in, count), std::span<T>(out, count), op, s);
            break;
        case collective::all_gather:
            if (in_place)
                chorus::all_gather<Algo>(c, std::span<const T>(out + std::uint64_t(r) * count, count),
                                         std::span<T>(out, big), s);
            else chorus::all_gather<Algo>(c, std::span<const T>(in, count), std::span<T>(out, big), s);
            break;
        case collective::reduce_scatter:
            if (in_place)
                chorus::reduce_scatter<Algo>(c, std::span<const T>(in, big),
                                             std::span<T>(in + std::uint64_t(r) * count, count), op, s);
            else chorus::reduce_scatter<Algo>(c, std::span<const T>(in, big), std::span<T>(out, count), op, s);
            break;
        case collective::broadcast: chorus::broadcast<Algo>(c, std::span<T>(in, count), root, s); break;
        case collective::reduce:
            chorus::reduce<Algo>(c, std::span<const T>(in, count),
                                 std::span<T>(in_place && r == root ? in : out, count), op, root, s);
            break;
        default: break;
        }
    }
    bool ok = true;
    try {
        w.sync();
    } catch (const chorus::error& e) {
        std::printf("  error: %s\n", e.what());
        ok = false;
    }
    ++g_cases;
    long long wrong = 0;
    for (int r = 0; r < n && ok; ++r) {
        if (coll == collective::reduce && r != root) continue;
        auto& x = b[std::size_t(r)];
        thrust::host_vector<T> got_all = coll == collective::broadcast || (in_place && coll != collective::all_gather &&
                                                                           (coll != collective::reduce || r == root))
                                             ? thrust::host_vector<T>(x.in)
                                             : thrust::host_vector<T>(x.out);
        const std::uint64_t base = x.off + (in_place && coll == collective::reduce_scatter ? std::uint64_t(r) * count : 0);
        for (std::uint64_t i = 0; i < out_len; ++i) {
            const T got = got_all[base + i];
            T want{};
            double ref = 0;
            switch (coll) {
            case collective::all_reduce:
            case collective::reduce: reference<T>(n, i, op, want, ref); break;
            case collective::reduce_scatter: reference<T>(n, std::uint64_t(r) * count + i, op, want, ref); break;
            case collective::all_gather:
                want = make_value<T>(int(i / count), i % count);
                ref = as_double_or_zero(want);
                break;
            case collective::broadcast:
                want = make_value<T>(root, i);
                ref = as_double_or_zero(want);
                break;
            default: break;
            }
            if (!close_enough(got, want, ref)) ++wrong;
        }
    }
    EXPECT(ok && wrong == 0, "%s %s<%s> n=%d count=%llu in_place=%d: %lld wrong", chorus::collective_name(coll),
           Algo::name, tname, n, static_cast<unsigned long long>(count), int(in_place), wrong);
}

// all_types: every element type and operator; else float, int32 and
// bfloat16 only (each (type, operator, schedule) is one more kernel to compile).
template <class Algo, bool all_types = true>
void matrix(world& w, bool full) {
    using chorus::collective;
    const int n = w.size();
    const std::uint64_t counts_full[] = {0, 1, std::uint64_t(n + 1), 1009, 1000003};
    const std::uint64_t counts_small[] = {1, 1009};
    const auto counts = full ? std::vector<std::uint64_t>(std::begin(counts_full), std::end(counts_full))
                             : std::vector<std::uint64_t>(std::begin(counts_small), std::end(counts_small));
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                            collective::broadcast, collective::reduce}) {
        for (std::uint64_t count : counts) {
            for (bool ip : {false, true}) {
                if (ip && coll == collective::broadcast) continue;
                run_case<Algo, float>(w, coll, count, ip, chorus::sum{}, "float");
                run_case<Algo, int>(w, coll, count, ip, chorus::max{}, "int32");
                if constexpr (all_types) if (count <= 1009 || !full) {
                    run_case<Algo, double>(w, coll, count, ip, chorus::avg{}, "double");
                    run_case<Algo, std::int8_t>(w, coll, count, ip, chorus::min{}, "int8");
                    run_case<Algo, std::uint64_t>(w, coll, count, ip, chorus::bit_xor{}, "uint64");
                    run_case<Algo, span2>(w, coll, count, ip, widen{}, "span2");
                }
                if constexpr (all_types) run_case<Algo, __half>(w, coll, count, ip, chorus::sum{}, "half");
                run_case<Algo, __nv_bfloat16>(w, coll, count, ip, chorus::sum{}, "bfloat16");
            }
        }
    }
}

void async_and_graphs(world& w) {
    const int n = w.size();
    const std::uint64_t count = 4099;
    std::vector<thrust::device_vector<float>> bufs(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        cuda_ok(cudaSetDevice(w.comms[std::size_t(r)].device()), "cudaSetDevice");
        bufs[std::size_t(r)].assign(count, float(r + 1));
    }
    // _async: a future backed by an event; stream_wait orders another stream after it.
    std::vector<chorus::future> fs;
    for (int r = 0; r < n; ++r)
        fs.push_back(chorus::all_reduce_async(w.comms[std::size_t(r)],
                                              std::span<float>(thrust::raw_pointer_cast(bufs[std::size_t(r)].data()), count),
                                              chorus::sum{}, w.streams[std::size_t(r)]));
    cudaStream_t other;
    cuda_ok(cudaSetDevice(w.comms[0].device()), "cudaSetDevice");
    cuda_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate");
    chorus::gpu::stream_wait(other, fs[0]);
    cuda_ok(cudaStreamSynchronize(other), "other");
    cudaStreamDestroy(other);
    for (auto& f : fs) f.wait();
    EXPECT(fs[0].ready(), "future ready after wait");
    const float want = float(n * (n + 1) / 2);
    for (int r = 0; r < n; ++r) {
        thrust::host_vector<float> h(bufs[std::size_t(r)]);
        EXPECT(h[0] == want && h[count - 1] == want, "async all_reduce rank %d: %f", r, double(h[0]));
    }
    ++g_cases;

    // CUDA graphs: capture one AllReduce per rank, replay three times.
    std::vector<cudaGraphExec_t> execs(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        cuda_ok(cudaSetDevice(w.comms[std::size_t(r)].device()), "cudaSetDevice");
        cudaGraph_t g;
        cuda_ok(cudaStreamBeginCapture(w.streams[std::size_t(r)], cudaStreamCaptureModeRelaxed), "capture");
        chorus::all_reduce<chorus::ring<chorus::ring_params{2, 4096}>>(
            w.comms[std::size_t(r)], std::span<float>(thrust::raw_pointer_cast(bufs[std::size_t(r)].data()), count),
            chorus::sum{}, w.streams[std::size_t(r)]);
        cuda_ok(cudaStreamEndCapture(w.streams[std::size_t(r)], &g), "end capture");
        cuda_ok(cudaGraphInstantiate(&execs[std::size_t(r)], g, 0), "instantiate");
        cudaGraphDestroy(g);
    }
    for (int rep = 0; rep < 3; ++rep) {
        for (int r = 0; r < n; ++r) {
            cuda_ok(cudaSetDevice(w.comms[std::size_t(r)].device()), "cudaSetDevice");
            thrust::fill(bufs[std::size_t(r)].begin(), bufs[std::size_t(r)].end(), float(r + rep));
        }
        cuda_ok(cudaDeviceSynchronize(), "fill");
        for (int r = 0; r < n; ++r) cuda_ok(cudaGraphLaunch(execs[std::size_t(r)], w.streams[std::size_t(r)]), "replay");
        w.sync();
        const float wr = float(n * (n - 1) / 2 + n * rep);
        for (int r = 0; r < n; ++r) {
            thrust::host_vector<float> h(bufs[std::size_t(r)]);
            EXPECT(h[0] == wr && h[count - 1] == wr, "graph replay %d rank %d: %f, want %f", rep, r, double(h[0]),
                   double(wr));
        }
        ++g_cases;
    }
    for (auto e : execs) cudaGraphExecDestroy(e);

    // barrier, and the calls without a stream (synchronous on chorus's own stream) from one thread per rank
    for (int r = 0; r < n; ++r) chorus::barrier(w.comms[std::size_t(r)], w.streams[std::size_t(r)]);
    w.sync();
    ++g_cases;
}

struct failure_tally {
    int errors = 0;
    int mismatches = 0;
    std::string first;
};

// Rank r issues an AllReduce of counts[r] floats (none when 0); then every
// rank that issued one reports whether it failed.
failure_tally failing_all_reduce(world& w, const std::vector<std::size_t>& counts) {
    const int n = w.size();
    std::vector<thrust::device_vector<float>> bufs(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        cuda_ok(cudaSetDevice(w.comms[std::size_t(r)].device()), "cudaSetDevice");
        bufs[std::size_t(r)].assign(64, 1.f);
    }
    for (int r = 0; r < n; ++r)
        if (counts[std::size_t(r)] != 0)
            chorus::all_reduce(w.comms[std::size_t(r)],
                               std::span<float>(thrust::raw_pointer_cast(bufs[std::size_t(r)].data()),
                                                counts[std::size_t(r)]),
                               chorus::sum{}, w.streams[std::size_t(r)]);
    failure_tally t;
    for (int r = 0; r < n; ++r) {
        if (counts[std::size_t(r)] == 0) continue;
        cuda_ok(cudaStreamSynchronize(w.streams[std::size_t(r)]), "sync");
        try {
            w.comms[std::size_t(r)].check();
        } catch (const chorus::error& e) {
            ++t.errors;
            if (e.code() == chorus::errc::mismatch) ++t.mismatches;
            if (t.first.empty()) t.first = e.what();
        }
    }
    return t;
}

void bad_input(const std::vector<int>& devs) {
    // A host pointer is refused by name before anything is enqueued.
    {
        world w(devs);
        std::vector<float> host(16, 1.f);
        bool refused = false;
        try {
            chorus::all_reduce(w.comms[0], std::span<float>(host), chorus::sum{}, w.streams[0]);
        } catch (const chorus::error& e) {
            refused = e.code() == chorus::errc::invalid_argument && std::string(e.what()).find("`in`") != std::string::npos;
            std::printf("  host pointer: %s\n", e.what());
        }
        EXPECT(refused, "host pointer refused");
        ++g_cases;
    }
    // Different counts on different ranks: every rank fails with an error, nobody hangs.
    {
        world w(devs);
        for (auto& c : w.comms) c.set_checked(true);
        std::vector<std::size_t> counts(w.comms.size(), 64);
        counts[1] = 63;
        const failure_tally t = failing_all_reduce(w, counts);
        std::printf("  mismatch: %s\n", t.first.c_str());
        EXPECT(t.errors == w.size() && t.mismatches >= 1, "mismatch: %d errors, %d mismatches", t.errors, t.mismatches);
        ++g_cases;
    }
    // A rank that never joins: the others time out instead of hanging.
    {
        world w(devs);
        for (auto& c : w.comms) c.set_timeout(std::chrono::milliseconds(300));
        std::vector<std::size_t> counts(w.comms.size(), 64);
        counts.back() = 0; // the last rank issues nothing
        const auto t0 = std::chrono::steady_clock::now();
        const failure_tally t = failing_all_reduce(w, counts);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  never joins: %s\n", t.first.c_str());
        EXPECT(t.errors == w.size() - 1 && secs < 10, "never joins: %d errors after %.2f s", t.errors, secs);
        ++g_cases;
    }
    // A device pointer handed to a threads communicator is refused too.
    {
        float* d = nullptr;
        cuda_ok(cudaMalloc(&d, 64 * sizeof(float)), "cudaMalloc");
        bool refused = false;
        chorus::run_threads(1, [&](chorus::communicator<chorus::threads>& comm) {
            try {
                chorus::all_reduce(comm, std::span<float>(d, 64), chorus::sum{});
            } catch (const chorus::error& e) {
                refused = e.code() == chorus::errc::invalid_argument;
            }
        });
        cudaFree(d);
        EXPECT(refused, "device pointer on a threads communicator refused");
        ++g_cases;
    }
}

} // namespace

int main(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        // Even here: asking for GPU communicators fails with a clear error.
        try {
            (void)chorus::gpu::make_communicators({0, 0});
            std::printf("FAIL: make_communicators without a device did not throw\n");
            return 1;
        } catch (const chorus::error& e) {
            if (e.code() != chorus::errc::unavailable) {
                std::printf("FAIL: make_communicators without a device: %s\n", e.what());
                return 1;
            }
            std::printf("without a device: %s\n", e.what());
        }
        std::printf("CHORUS_SKIP: no CUDA device\n");
        return 77;
    }
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("device 0: %s, %d device(s)\n", prop.name, devices);
    using chorus::direct;
    using chorus::hierarchical;
    using chorus::ring;
    for (int n : {2, 4, 8}) {
        const std::vector<int> devs(static_cast<std::size_t>(n), 0);
        const int before = g_failures;
        {
            world w(devs);
            matrix<ring<chorus::ring_params{4, 64 << 10}>>(w, !quick);
            matrix<direct<chorus::direct_params{2, 1 << 20}>>(w, !quick && n != 8);
            async_and_graphs(w);
        }
        {
            chorus::gpu::options opt;
            opt.ranks_per_node = n / 2;
            world w(devs, opt);
            matrix<hierarchical<ring<chorus::ring_params{2, 64 << 10}>, direct<chorus::direct_params{2, 1 << 20}>>, false>(
                w, !quick && n == 4);
            matrix<hierarchical<direct<chorus::direct_params{2, 1 << 20}>, ring<chorus::ring_params{2, 64 << 10}>>, false>(
                w, false);
        }
        std::printf("virtual ranks %d on device 0: %s\n", n, g_failures == before ? "ok" : "FAILED");
    }
    if (devices >= 2) {
        std::vector<int> devs;
        for (int d = 0; d < devices && d < 8; ++d) devs.push_back(d);
        const int before = g_failures;
        try {
            world w(devs);
            matrix<ring<chorus::ring_params{4, 64 << 10}>>(w, !quick);
            matrix<direct<chorus::direct_params{2, 1 << 20}>>(w, false);
            async_and_graphs(w);
        } catch (const chorus::error& e) {
            std::printf("real multi-GPU: %s\n", e.what());
            ++g_failures;
        }
        std::printf("one rank per device on %d devices: %s\n", int(devs.size()), g_failures == before ? "ok" : "FAILED");
    }
    bad_input(std::vector<int>(4, 0));
    std::printf("%s: %d case(s), %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_cases, g_failures);
    return g_failures ? 1 : 0;
}
