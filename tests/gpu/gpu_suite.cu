// The GPU correctness suite: every collective with ring<>, direct<> and
// hierarchical<> on virtual ranks (2, 4 and 8 ranks on device 0) and, when
// the machine has several GPUs, on one rank per device; element types from
// int8 to double, __half and __nv_bfloat16 (accumulating in float), a user
// struct with a user operator; ragged counts and misaligned buffers; in
// place and out of place; the future, stream_wait, CUDA graph capture and
// replay; bad input and a rank that never joins.
//
// The newer policies (tree<>, recursive_doubling<>, rabenseifner<>,
// two_shot<>, automatic, deterministic<>) run the same matrix (every
// collective, ragged counts, in and out of place, misaligned buffers) in a
// LIGHT variant, to keep the compile time down (each (element type,
// operator, schedule type) is one more kernel, for every architecture, and
// automatic's and two_shot's kernels are among the largest): float/sum
// only (float with the copy-only stand-in operator for AllGather and
// Broadcast). They run on 2, 4 and 8 virtual ranks and on 3 and 6
// (non-powers of two: the fold-in of recursive_doubling<> and
// rabenseifner<>, uneven trees); automatic also with a node split (where it
// picks hierarchical<> for large messages). Tunings are free (a kernel is a
// template of the schedule type, not of the tuning), so each policy runs a
// multi-channel tuning and its default one. The build compiles this file
// twice, as two halves whose kernels compile in parallel (see
// CHORUS_GPU_SUITE_PART below). Also:
//  - automatic with a non-commutative user operator (composition of affine
//    maps on uint32, `commutative = false`; one more kernel): correct
//    results for AllReduce, ReduceScatter and Reduce up to sizes where it
//    picks ring<> or hierarchical<> for a commutative one, and
//    automatic::choose never names a reordering algorithm (ring, tree,
//    hierarchical) for it;
//  - deterministic<> gives bitwise-identical results for non-integer float
//    inputs (AllReduce in and out of place, ReduceScatter, Reduce) with
//    different channel counts and chunk sizes (deterministic<ring<>>: 1
//    channel, 256 KiB; deterministic<ring<4 channels, 64 KiB>>), equal to
//    the serial left fold in rank order and to what direct<2 channels> and
//    two_shot<4 channels> give, while ring<> gives other bits (so the
//    inputs tell orders apart). deterministic<> is instantiated as
//    deterministic<ring<...>>, not deterministic<automatic>: its reductions
//    run the same direct<>/two_shot<> schedules whatever the underlying
//    policy, and a kernel over automatic's schedule costs 4-5x more to
//    compile (measured, sm_90: about 45 s per (type, operator) against 10 s);
//  - scratch limits: a fixed policy whose scratch does not fit is refused
//    at issue naming gpu::options::scratch_bytes; automatic leaves such
//    algorithms out and still runs.
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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// CHORUS_GPU_SUITE_PART: the build compiles this file twice
// (tests/gpu/CMakeLists.txt) so that the kernels of its two halves compile
// in parallel: part 1 (the original matrix, automatic, graphs, errors and
// main) and part 2 (the other newer policies: chorus_gpu_suite::
// newer_policies). Undefined (0): one translation unit with both.
#ifndef CHORUS_GPU_SUITE_PART
#  define CHORUS_GPU_SUITE_PART 0
#endif

namespace chorus_gpu_suite {
extern int g_failures; //!< defined in part 1
extern int g_cases;
//! Part 2: tree<>, recursive_doubling<>, rabenseifner<>, two_shot<>,
//! deterministic<>, automatic with a non-commutative operator, scratch limits.
void newer_policies(bool quick, int devices);
} // namespace chorus_gpu_suite

#if CHORUS_GPU_SUITE_PART != 2
int chorus_gpu_suite::g_failures = 0;
int chorus_gpu_suite::g_cases = 0;
#endif

namespace {

using chorus_gpu_suite::g_cases;
using chorus_gpu_suite::g_failures;

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

} // namespace

// The user element types and operators. Outside the anonymous namespace:
// each part of the suite uses only some of them (nvcc warns about unused
// members of internal-linkage classes).
namespace chorus_gpu_suite {

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

// A non-commutative user operator: composition of the affine maps
// t -> a*t + b on uint32 (wrapping). Associative and exact in any
// association, but the operand order matters: a policy that reorders
// operands gives wrong results.
struct affine {
    std::uint32_t a, b;
};
struct compose {
    static constexpr bool commutative = false;
    __host__ __device__ affine operator()(const affine& x, const affine& y) const {
        return {x.a * y.a, x.a * y.b + x.b};
    }
};

} // namespace chorus_gpu_suite

namespace {

using chorus_gpu_suite::affine;
using chorus_gpu_suite::compose;
using chorus_gpu_suite::span2;
using chorus_gpu_suite::widen;

__host__ __device__ inline std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

template <class T>
__host__ __device__ T make_value(int r, std::uint64_t i) {
    if constexpr (std::is_same_v<T, span2>) {
        const float v = float((r * 7 + i * 3) % 17);
        return span2{v, v + 1.f};
    } else if constexpr (std::is_same_v<T, affine>) {
        const std::uint32_t h = hash32(std::uint32_t(r) * 1000003u + std::uint32_t(i) * 2654435761u);
        return affine{h | 1u, hash32(h ^ 0x9e3779b9u)};
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
    if constexpr (std::is_same_v<T, span2> || std::is_same_v<T, affine>) return 0;
    else return as_double(v);
}

template <class T>
bool close_enough(const T& got, const T& want, double ref, int n) {
    if constexpr (std::is_same_v<T, span2>) return got.lo == want.lo && got.hi == want.hi;
    else if constexpr (std::is_same_v<T, affine>) return got.a == want.a && got.b == want.b;
    else if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
        // A ring stores each partial sum in T between hops: up to n - 1
        // roundings, each at most half an ulp of a partial sum no larger
        // than the total (bfloat16: 2^-9, half: 2^-12 of it). Allowed: one
        // ulp per rounding, at least 1 %. (With a flat 1 %, 8 ranks of
        // bfloat16 ring failed at 8 of 1009 and 3000 of 1000003 elements.)
        const double eps = std::is_same_v<T, __half> ? 1.0 / 2048 : 1.0 / 256;
        const double rel = std::max(1e-2, double(n - 1) * eps);
        return std::fabs(as_double(got) - ref) <= rel * std::fabs(ref) + 1e-3;
    } else return got == want;
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
    chorus::gpu::options opt;
    explicit world(const std::vector<int>& devs, chorus::gpu::options o = {})
        : comms(chorus::gpu::make_communicators(devs, o)), opt(o) {
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
#if CHORUS_GPU_SUITE_PART != 1
    //! The node size make_communicators uses (ranks_per_node, else CHORUS_RANKS_PER_NODE, else 0).
    int node_size() const {
        if (opt.ranks_per_node > 0) return opt.ranks_per_node;
        if (const char* e = std::getenv("CHORUS_RANKS_PER_NODE")) return std::atoi(e) > 0 ? std::atoi(e) : 0;
        return 0;
    }
    //! What automatic plans against on this world (as make_communicators sets it).
    chorus::model::topology topology() const {
        return chorus::model::model_file_given() ? chorus::model::current()
                                                 : chorus::model::gpu_cluster_topology(node_size());
    }
#endif
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
    // The element types that only the reductions run with (their copies would be kernels nobody calls).
    constexpr bool copies = !std::is_same_v<T, affine>;
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
            if constexpr (copies) {
                if (in_place)
                    chorus::all_gather<Algo>(c, std::span<const T>(out + std::uint64_t(r) * count, count),
                                             std::span<T>(out, big), s);
                else chorus::all_gather<Algo>(c, std::span<const T>(in, count), std::span<T>(out, big), s);
            }
            break;
        case collective::reduce_scatter:
            if (in_place)
                chorus::reduce_scatter<Algo>(c, std::span<const T>(in, big),
                                             std::span<T>(in + std::uint64_t(r) * count, count), op, s);
            else chorus::reduce_scatter<Algo>(c, std::span<const T>(in, big), std::span<T>(out, count), op, s);
            break;
        case collective::broadcast:
            if constexpr (copies) chorus::broadcast<Algo>(c, std::span<T>(in, count), root, s);
            break;
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
            if (!close_enough(got, want, ref, n)) ++wrong;
        }
    }
    EXPECT(ok && wrong == 0, "%s %s(channels=%d)<%s> n=%d count=%llu in_place=%d: %lld wrong",
           chorus::collective_name(coll), Algo::name, int(Algo::params.channels), tname, n,
           static_cast<unsigned long long>(count), int(in_place), wrong);
}

// Which element types (and operators) a matrix runs: each (type, operator,
// schedule type) is one more kernel to compile, for every architecture.
enum class types {
    all,     //!< every element type and operator
    common,  //!< float/sum, int32/max, bfloat16/sum
    float32, //!< float/sum (the newer policies)
};

template <class Algo, types ty = types::all>
void matrix(world& w, bool full) {
    constexpr bool all_types = ty == types::all;
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
                if constexpr (ty != types::float32) run_case<Algo, int>(w, coll, count, ip, chorus::max{}, "int32");
                if constexpr (all_types) if (count <= 1009 || !full) {
                    run_case<Algo, double>(w, coll, count, ip, chorus::avg{}, "double");
                    run_case<Algo, std::int8_t>(w, coll, count, ip, chorus::min{}, "int8");
                    run_case<Algo, std::uint64_t>(w, coll, count, ip, chorus::bit_xor{}, "uint64");
                    run_case<Algo, span2>(w, coll, count, ip, widen{}, "span2");
                }
                if constexpr (all_types) run_case<Algo, __half>(w, coll, count, ip, chorus::sum{}, "half");
                if constexpr (ty == types::all || ty == types::common)
                    run_case<Algo, __nv_bfloat16>(w, coll, count, ip, chorus::sum{}, "bfloat16");
            }
        }
    }
}

// Runs one part of the suite on new communicators: a chorus::error that
// escapes it (a call refused at issue, or communicators broken by a failed
// collective, on which every later call throws) fails that part only.
template <class F>
void on_fresh_world(const char* what, const std::vector<int>& devs, const chorus::gpu::options& opt, F&& f) {
    try {
        world w(devs, opt);
        f(w);
    } catch (const chorus::error& e) {
        ++g_failures;
        std::printf("FAIL %s on %zu ranks: %s\n", what, devs.size(), e.what());
    }
}

#if CHORUS_GPU_SUITE_PART != 1
// The newer policies but automatic (part 1), light (see the file comment):
// a multi-channel tuning over `full` counts, then the default tuning over a
// few counts; each policy on its own communicators (none of them has run on
// a GPU before).
void new_policies(const std::vector<int>& devs, bool full, const chorus::gpu::options& opt = {}) {
    using namespace chorus;
    auto part = [&](const char* what, auto run) { on_fresh_world(what, devs, opt, run); };
    part("tree<>", [&](world& w) {
        matrix<tree<tree_params{2, 16 << 10}>, types::float32>(w, full);
        matrix<tree<>, types::float32>(w, false);
    });
    part("recursive_doubling<>", [&](world& w) {
        matrix<recursive_doubling<recursive_params{2, 16 << 10}>, types::float32>(w, full);
        matrix<recursive_doubling<>, types::float32>(w, false);
    });
    part("rabenseifner<>", [&](world& w) {
        matrix<rabenseifner<recursive_params{3, 16 << 10}>, types::float32>(w, full);
        matrix<rabenseifner<>, types::float32>(w, false);
    });
    part("two_shot<>", [&](world& w) {
        matrix<two_shot<recursive_params{4, 64 << 10}>, types::float32>(w, full);
        matrix<two_shot<>, types::float32>(w, false);
    });
    // deterministic<ring<>>, not deterministic<automatic> (see the file comment)
    part("deterministic<>", [&](world& w) {
        matrix<deterministic<ring<ring_params{4, 64 << 10}>>, types::float32>(w, full);
    });
}

// automatic with a non-commutative operator: it may only pick algorithms
// that keep rank order (direct, two_shot, recursive_doubling, rabenseifner),
// and the results are the left fold in rank order.
void non_commutative_automatic(world& w, bool full) {
    using chorus::collective;
    using chorus::model::algorithm;
    const int n = w.size();
    const chorus::model::topology topo = w.topology();
    std::vector<std::uint64_t> counts = {1, std::uint64_t(n + 1), 1009, 65537};
    if (full) counts.push_back(1000003);
    std::string picks, commutative_picks;
    for (collective coll : {collective::all_reduce, collective::reduce_scatter, collective::reduce}) {
        for (std::uint64_t count : counts) {
            for (bool ip : {false, true}) {
                // What automatic chooses for this call, as the backend asks (rank 0's arguments).
                chorus::schedule_args a{};
                a.coll = coll;
                a.rank = 0;
                a.nranks = n;
                a.root = coll == collective::reduce ? n - 1 : 0;
                a.count = count;
                a.elem_bytes = sizeof(affine);
                a.in_place = ip;
                a.node_size = w.node_size();
                a.commutative = false;
                a.topo = &topo;
                a.scratch_limit_bytes = w.opt.scratch_bytes;
                const algorithm pick = chorus::automatic::choose(a);
                a.commutative = true;
                const algorithm if_commutative = chorus::automatic::choose(a);
                const bool reorders =
                    pick == algorithm::ring || pick == algorithm::tree || pick == algorithm::hierarchical;
                EXPECT(!reorders, "automatic picked %s for a non-commutative operator: %s n=%d count=%llu",
                       chorus::model::algorithm_name(pick), chorus::collective_name(coll), n,
                       static_cast<unsigned long long>(count));
                if (!ip) {
                    char buf[160];
                    std::snprintf(buf, sizeof buf, " %s/%llu:%s", chorus::collective_name(coll),
                                  static_cast<unsigned long long>(count), chorus::model::algorithm_name(pick));
                    picks += buf;
                    std::snprintf(buf, sizeof buf, " %s/%llu:%s", chorus::collective_name(coll),
                                  static_cast<unsigned long long>(count),
                                  chorus::model::algorithm_name(if_commutative));
                    commutative_picks += buf;
                }
                run_case<chorus::automatic, affine>(w, coll, count, ip, compose{}, "affine/compose");
            }
        }
    }
    std::printf("  n=%d automatic, non-commutative:%s\n  n=%d automatic, same calls if commutative:%s\n", n,
                picks.c_str(), n, commutative_picks.c_str());
}

// Non-integer floats spanning magnitudes: the rounding of every addition
// depends on the order of the operands.
std::uint64_t mix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
float noisy(int r, std::uint64_t i) {
    const std::uint64_t h = mix64(std::uint64_t(r) * 1000003u + i);
    const float mant = float(h % 1000003) / 7919.0f;
    const int e = int((h >> 20) % 24) - 12;
    return std::ldexp(mant, e) * ((h >> 40) & 1 ? -1.0f : 1.0f);
}

// Every rank's noisy() input of `len` elements.
std::vector<thrust::host_vector<float>> noisy_inputs(int n, std::uint64_t len) {
    std::vector<thrust::host_vector<float>> in(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        in[std::size_t(r)].resize(len);
        for (std::uint64_t i = 0; i < len; ++i) in[std::size_t(r)][i] = noisy(r, i);
    }
    return in;
}

// One float sum reduction (all_reduce, reduce_scatter out of place, or
// reduce to rank n-1 out of place) of the inputs `host_in` (count, or
// count * n for reduce_scatter, per rank) with Algo: the results of every
// rank that has one (reduce: the root only), or nothing when the call failed.
template <class Algo>
std::vector<std::vector<float>> reduce_bits(world& w, chorus::collective coll, std::uint64_t count, bool in_place,
                                            const std::vector<thrust::host_vector<float>>& host_in) {
    using chorus::collective;
    const int n = w.size();
    const int root = n - 1;
    const std::uint64_t in_len = coll == collective::reduce_scatter ? count * std::uint64_t(n) : count;
    std::vector<thrust::device_vector<float>> in(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        cuda_ok(cudaSetDevice(w.comms[std::size_t(r)].device()), "cudaSetDevice");
        in[std::size_t(r)] = host_in[std::size_t(r)];
        out[std::size_t(r)].assign(count, 0.f);
    }
    cuda_ok(cudaDeviceSynchronize(), "fill");
    for (int r = 0; r < n; ++r) {
        auto& c = w.comms[std::size_t(r)];
        cudaStream_t s = w.streams[std::size_t(r)];
        float* ip = thrust::raw_pointer_cast(in[std::size_t(r)].data());
        float* op = thrust::raw_pointer_cast(out[std::size_t(r)].data());
        switch (coll) {
        case collective::all_reduce:
            if (in_place) chorus::all_reduce<Algo>(c, std::span<float>(ip, count), chorus::sum{}, s);
            else chorus::all_reduce<Algo>(c, std::span<const float>(ip, count), std::span<float>(op, count),
                                          chorus::sum{}, s);
            break;
        case collective::reduce_scatter:
            chorus::reduce_scatter<Algo>(c, std::span<const float>(ip, in_len), std::span<float>(op, count),
                                         chorus::sum{}, s);
            break;
        default:
            chorus::reduce<Algo>(c, std::span<const float>(ip, count), std::span<float>(op, count), chorus::sum{},
                                 root, s);
            break;
        }
    }
    std::vector<std::vector<float>> got;
    try {
        w.sync();
    } catch (const chorus::error& e) {
        std::printf("  error: %s\n", e.what());
        return got;
    }
    for (int r = 0; r < n; ++r) {
        if (coll == collective::reduce && r != root) continue;
        thrust::host_vector<float> h(coll == collective::all_reduce && in_place ? in[std::size_t(r)]
                                                                                : out[std::size_t(r)]);
        got.emplace_back(h.begin(), h.begin() + std::ptrdiff_t(count));
    }
    return got;
}

// The serial left fold in rank order 0..n-1 of what reduce_bits reduces
// (one vector per rank that has a result).
std::vector<std::vector<float>> left_fold(int n, chorus::collective coll, std::uint64_t count,
                                          const std::vector<thrust::host_vector<float>>& in) {
    std::vector<std::vector<float>> want;
    for (int r = 0; r < n; ++r) {
        if (coll == chorus::collective::reduce && r != n - 1) continue;
        const std::uint64_t base = coll == chorus::collective::reduce_scatter ? std::uint64_t(r) * count : 0;
        std::vector<float> v(count);
        for (std::uint64_t i = 0; i < count; ++i) {
            float acc = in[0][base + i];
            for (int q = 1; q < n; ++q) acc = acc + in[std::size_t(q)][base + i];
            v[i] = acc;
        }
        want.push_back(std::move(v));
    }
    return want;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t r = 0; r < a.size(); ++r)
        if (a[r].size() != b[r].size() || std::memcmp(a[r].data(), b[r].data(), a[r].size() * sizeof(float)) != 0)
            return false;
    return true;
}

// deterministic<> is bitwise reproducible: the same bits with different
// channel counts and chunk sizes, equal to the serial left fold, which
// direct<> and two_shot<> (the policies deterministic<> runs) compute too;
// the ring's order differs (so these inputs tell orders apart).
void deterministic_bits(world& w) {
    using chorus::collective;
    // Two tunings, one kernel (the kernel is a template of the schedule type): 1 channel, 256 KiB chunks
    // and 4 channels, 64 KiB chunks.
    using det_1ch = chorus::deterministic<chorus::ring<>>;
    using det_4ch = chorus::deterministic<chorus::ring<chorus::ring_params{4, 64 << 10}>>;
    using fold_direct = chorus::direct<chorus::direct_params{2, 1 << 20}>;
    using fold_two_shot = chorus::two_shot<chorus::recursive_params{4, 64 << 10}>;
    using reordering = chorus::ring<chorus::ring_params{4, 64 << 10}>;
    const int n = w.size();
    bool ring_differs = false;
    for (std::uint64_t count : {std::uint64_t(1), std::uint64_t(1009), std::uint64_t(65537), std::uint64_t(262147)}) {
        const auto in_vec = noisy_inputs(n, count);                         // all_reduce, reduce
        const auto in_blocks = noisy_inputs(n, count * std::uint64_t(n)); // reduce_scatter
        struct call {
            collective coll;
            bool in_place;
        };
        for (call c : {call{collective::all_reduce, false}, call{collective::all_reduce, true},
                       call{collective::reduce_scatter, false}, call{collective::reduce, false}}) {
            const auto& in = c.coll == collective::reduce_scatter ? in_blocks : in_vec;
            const auto want = left_fold(n, c.coll, count, in);
            const auto a = reduce_bits<det_1ch>(w, c.coll, count, c.in_place, in);
            const auto b = reduce_bits<det_4ch>(w, c.coll, count, c.in_place, in);
            const auto d = reduce_bits<fold_direct>(w, c.coll, count, c.in_place, in);
            const auto t = reduce_bits<fold_two_shot>(w, c.coll, count, c.in_place, in);
            g_cases += 4;
            const char* cn = chorus::collective_name(c.coll);
            const unsigned long long cnt = count;
            EXPECT(!a.empty() && same_bits(a, b),
                   "deterministic<ring<1ch,256K>> and deterministic<ring<4ch,64K>> differ: %s n=%d count=%llu "
                   "in_place=%d", cn, n, cnt, int(c.in_place));
            EXPECT(same_bits(a, want), "deterministic<ring<1ch,256K>> is not the left fold: %s n=%d count=%llu "
                   "in_place=%d", cn, n, cnt, int(c.in_place));
            EXPECT(same_bits(b, want), "deterministic<ring<4ch,64K>> is not the left fold: %s n=%d count=%llu "
                   "in_place=%d", cn, n, cnt, int(c.in_place));
            EXPECT(same_bits(d, want), "direct<2ch,1M> is not the left fold: %s n=%d count=%llu in_place=%d", cn, n,
                   cnt, int(c.in_place));
            EXPECT(same_bits(t, want), "two_shot<4ch,64K> is not the left fold: %s n=%d count=%llu in_place=%d", cn,
                   n, cnt, int(c.in_place));
            if (c.coll == collective::all_reduce && !c.in_place && count >= 1009) {
                const auto r = reduce_bits<reordering>(w, c.coll, count, false, in);
                ++g_cases;
                EXPECT(!r.empty(), "ring<4ch,64K> all_reduce failed: n=%d count=%llu", n, cnt);
                if (!r.empty() && !same_bits(r, want)) ring_differs = true;
            }
        }
    }
    // With 2 ranks every order is the same sum; from 3 on the ring's is not the left fold.
    if (n >= 3) EXPECT(ring_differs, "n=%d: ring<> gave the left fold's bits: the inputs do not tell orders apart", n);
}

// Scratch limits: a fixed policy whose scratch does not fit is refused at
// issue, naming gpu::options::scratch_bytes, on every rank (nothing is
// enqueued); automatic leaves such algorithms out and runs one that fits.
void scratch_limits(const std::vector<int>& devs) {
    chorus::gpu::options opt;
    opt.scratch_bytes = 64 << 10;
    world w(devs, opt);
    const int n = w.size();
    const std::uint64_t count = std::uint64_t(1) << 18; // 1 MiB of floats: recursive_doubling<> needs m+1 copies
    thrust::device_vector<float> buf(count, 1.f);
    int refused = 0;
    std::string first;
    for (int r = 0; r < n; ++r) {
        try {
            chorus::all_reduce<chorus::recursive_doubling<>>(
                w.comms[std::size_t(r)], std::span<float>(thrust::raw_pointer_cast(buf.data()), count), chorus::sum{},
                w.streams[std::size_t(r)]);
        } catch (const chorus::error& e) {
            const std::string what = e.what();
            if (e.code() == chorus::errc::invalid_argument && what.find("gpu::options::scratch_bytes") != std::string::npos)
                ++refused;
            if (first.empty()) first = what;
        }
    }
    std::printf("  scratch too small: %s\n", first.c_str());
    EXPECT(refused == n, "recursive_doubling<> with 64 KiB of scratch: %d of %d ranks refused naming "
           "gpu::options::scratch_bytes", refused, n);
    ++g_cases;
    try {
        w.sync(); // nothing was enqueued: the communicators are still usable
    } catch (const chorus::error& e) {
        std::printf("  error after the refused calls: %s\n", e.what());
        ++g_failures;
        return;
    }
    run_case<chorus::automatic, float>(w, chorus::collective::all_reduce, count, false, chorus::sum{}, "float");
    run_case<chorus::automatic, float>(w, chorus::collective::all_reduce, count, true, chorus::sum{}, "float");
}

#endif // part 2

#if CHORUS_GPU_SUITE_PART != 2
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
#endif // part 1

} // namespace

#if CHORUS_GPU_SUITE_PART != 1
void chorus_gpu_suite::newer_policies(bool quick, int devices) {
    // On 2..8 ranks, non-powers of two included.
    for (int n : {2, 3, 4, 6, 8}) {
        const std::vector<int> devs(static_cast<std::size_t>(n), 0);
        const int before = g_failures;
        new_policies(devs, !quick && (n == 4 || n == 6));
        // full: up to 8 MB, where automatic would pick ring<> for a commutative operator on 2-3 ranks
        on_fresh_world("automatic, non-commutative operator", devs, {},
                       [&](world& w) { non_commutative_automatic(w, !quick && n <= 3); });
        if (n == 4) { // with a node split, where it would pick hierarchical<> for a commutative one
            chorus::gpu::options opt;
            opt.ranks_per_node = 2;
            on_fresh_world("automatic, non-commutative operator, node split", devs, opt,
                           [&](world& w) { non_commutative_automatic(w, !quick); });
        }
        on_fresh_world("deterministic<> bits", devs, {}, [&](world& w) { deterministic_bits(w); });
        std::printf("newer policies, virtual ranks %d on device 0: %s\n", n, g_failures == before ? "ok" : "FAILED");
    }
    if (devices >= 2) {
        std::vector<int> devs;
        for (int d = 0; d < devices && d < 8; ++d) devs.push_back(d);
        const int before = g_failures;
        new_policies(devs, false);
        on_fresh_world("automatic, non-commutative operator", devs, {},
                       [&](world& w) { non_commutative_automatic(w, false); });
        on_fresh_world("deterministic<> bits", devs, {}, [&](world& w) { deterministic_bits(w); });
        std::printf("newer policies, one rank per device on %d devices: %s\n", int(devs.size()),
                    g_failures == before ? "ok" : "FAILED");
    }
    try {
        scratch_limits(std::vector<int>(4, 0));
    } catch (const chorus::error& e) {
        ++g_failures;
        std::printf("FAIL scratch limits: %s\n", e.what());
    }
}
#endif // part 2

#if CHORUS_GPU_SUITE_PART != 2
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
            matrix<hierarchical<ring<chorus::ring_params{2, 64 << 10}>, direct<chorus::direct_params{2, 1 << 20}>>,
                   types::common>(w, !quick && n == 4);
            matrix<hierarchical<direct<chorus::direct_params{2, 1 << 20}>, ring<chorus::ring_params{2, 64 << 10}>>,
                   types::common>(w, false);
        }
        // automatic, the default policy: alone, and with a node split (hierarchical<> is one of its
        // candidates: it picks it for large messages)
        on_fresh_world("automatic", devs, {},
                       [&](world& w) { matrix<chorus::automatic, types::float32>(w, !quick && n == 4); });
        {
            chorus::gpu::options opt;
            opt.ranks_per_node = n / 2;
            on_fresh_world("automatic, node split", devs, opt,
                           [&](world& w) { matrix<chorus::automatic, types::float32>(w, false); });
        }
        std::printf("virtual ranks %d on device 0: %s\n", n, g_failures == before ? "ok" : "FAILED");
    }
    // automatic, the default policy, on 2..8 ranks (non-powers of two included; see the file comment)
    for (int n : {3, 6}) {
        const std::vector<int> devs(static_cast<std::size_t>(n), 0);
        const int before = g_failures;
        on_fresh_world("automatic", devs, {},
                       [&](world& w) { matrix<chorus::automatic, types::float32>(w, !quick && n == 6); });
        std::printf("automatic, virtual ranks %d on device 0: %s\n", n, g_failures == before ? "ok" : "FAILED");
    }
    chorus_gpu_suite::newer_policies(quick, devices);
    if (devices >= 2) {
        std::vector<int> devs;
        for (int d = 0; d < devices && d < 8; ++d) devs.push_back(d);
        const int before = g_failures;
        try {
            world w(devs);
            matrix<ring<chorus::ring_params{4, 64 << 10}>>(w, !quick);
            matrix<direct<chorus::direct_params{2, 1 << 20}>>(w, false);
            matrix<chorus::automatic, types::float32>(w, false);
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
#endif // part 1
