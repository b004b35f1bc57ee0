#pragma once
// What the translation units of the GPU suite share (see gpu_suite.cu for
// what the suite covers): the failure counters, the communicators of one
// run (world), device buffers, the inputs and the serial reference, and
// run_case, one checked call of one collective with one policy value.
//
// Each (element type, operator) is one kernel (chorus::detail::
// collective_kernel<T, Op>, plus <T, copy_only> for AllGather and
// Broadcast) that runs every policy: run_case<T, Op> is instantiated in one
// translation unit only (the pairs are spread over gpu_suite.cu and
// gpu_suite_pairs_*.cu so that their kernels compile in parallel) and
// reached through a pair_case (a function pointer); the policies are
// values, iterated at run time.
#include <chorus/gpu.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus_gpu_suite {

extern int g_failures; //!< defined in gpu_suite.cu
extern int g_cases;

#define EXPECT(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            ++::chorus_gpu_suite::g_failures;                                              \
            std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            std::printf(__VA_ARGS__);                                                      \
            std::printf("\n");                                                             \
        }                                                                                  \
    } while (0)

inline void cuda_ok(cudaError_t e, const char* what) {
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

// A non-commutative user operator: composition of the affine maps
// t -> a*t + b on uint32 (wrapping). Associative and exact in any
// association, but the operand order matters: a policy that reorders
// operands gives wrong results (and is refused with it at issue).
struct affine {
    std::uint32_t a, b;
};
struct compose {
    static constexpr bool commutative = false;
    __host__ __device__ affine operator()(const affine& x, const affine& y) const {
        return {x.a * y.a, x.a * y.b + x.b};
    }
};

__host__ __device__ inline std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

//! Rank r's input at element i (integer-valued: exact whatever the reduction order).
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

//! p[j] = make_value<T>(r, first + j) for j < n.
template <class T>
__global__ void fill_kernel(T* p, std::uint64_t n, int r, std::uint64_t first) {
    for (std::uint64_t j = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
         j += std::uint64_t(gridDim.x) * blockDim.x)
        p[j] = make_value<T>(r, first + j);
}

//! Device memory of `n` elements of T on the current device (never per
//! element: one cudaMalloc), freed on destruction.
template <class T>
class dev_buf {
public:
    dev_buf() = default;
    explicit dev_buf(std::size_t n) : n_(n) {
        cuda_ok(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    }
    dev_buf(dev_buf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    dev_buf& operator=(dev_buf&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    dev_buf(const dev_buf&) = delete;
    dev_buf& operator=(const dev_buf&) = delete;
    ~dev_buf() {
        if (p_) (void)cudaFree(p_);
    }
    T* data() const { return p_; }
    std::size_t size() const { return n_; }
    //! Elements [at, at + n) := make_value<T>(r, first + j), on the current device's null stream (not
    //! waited for: synchronize the device before the collectives read them).
    void fill(std::size_t at, std::size_t n, int r, std::uint64_t first = 0) {
        if (n == 0) return;
        const unsigned blocks = unsigned(std::min<std::size_t>((n + 255) / 256, 1024));
        fill_kernel<T><<<blocks, 256>>>(p_ + at, n, r, first);
        cuda_ok(cudaGetLastError(), "fill_kernel");
    }
    //! Copies `h` in and waits until the copy has landed (a copy from pageable memory may still be in
    //! flight when cudaMemcpy returns, and the collectives run on other, non-blocking streams).
    void upload(const std::vector<T>& h) {
        cuda_ok(cudaMemcpy(p_, h.data(), std::min(h.size(), n_) * sizeof(T), cudaMemcpyHostToDevice), "upload");
        cuda_ok(cudaDeviceSynchronize(), "upload");
    }
    std::vector<T> download() const {
        std::vector<T> h(n_);
        cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
        return h;
    }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

//! The communicators of one run, each rank with its own stream.
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
    world(const world&) = delete;
    world& operator=(const world&) = delete;
    ~world() {
        for (auto s : streams) cudaStreamDestroy(s);
    }
    int size() const { return int(comms.size()); }
    chorus::gpu::communicator& comm(int r) { return comms[std::size_t(r)]; }
    cudaStream_t stream(int r) const { return streams[std::size_t(r)]; }
    void set_device(int r) { cuda_ok(cudaSetDevice(comms[std::size_t(r)].device()), "cudaSetDevice"); }
    //! The node size make_communicators uses (ranks_per_node, else CHORUS_RANKS_PER_NODE, else 0).
    int node_size() const {
        if (opt.ranks_per_node > 0) return opt.ranks_per_node;
        return chorus::detail::env_ranks_per_node();
    }
    //! What automatic plans against on this world (as make_communicators sets it).
    chorus::model::topology topology() const {
        return chorus::model::model_file_given() ? chorus::model::current()
                                                 : chorus::model::gpu_cluster_topology(node_size());
    }
    //! Waits for every rank's stream, then reports the first rank's error (chorus::error).
    void sync() {
        for (int r = 0; r < size(); ++r) {
            cuda_ok(cudaStreamSynchronize(streams[std::size_t(r)]), "cudaStreamSynchronize");
            comms[std::size_t(r)].check();
        }
    }
};

//! One CUDA graph per rank: what `capture(r)` enqueues on rank r's stream,
//! captured (relaxed mode) and instantiated; replay() launches every
//! rank's graph, then waits for all of them (world::sync). A capture or
//! an instantiation that throws ends the capture it left open and frees
//! what was made before it rethrows.
struct rank_graphs {
    world& w;
    std::vector<cudaGraphExec_t> execs; // null where not (yet) instantiated
    template <class Capture>
    rank_graphs(world& wr, Capture&& capture) : w(wr), execs(std::size_t(wr.size()), nullptr) {
        try {
            for (int r = 0; r < w.size(); ++r) {
                w.set_device(r);
                cuda_ok(cudaStreamBeginCapture(w.stream(r), cudaStreamCaptureModeRelaxed), "capture");
                cudaGraph_t g = nullptr;
                try {
                    capture(r);
                } catch (...) {
                    if (cudaStreamEndCapture(w.stream(r), &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
                    throw;
                }
                cuda_ok(cudaStreamEndCapture(w.stream(r), &g), "end capture");
                cudaGraphExec_t e = nullptr;
                const cudaError_t rc = cudaGraphInstantiate(&e, g, 0);
                cudaGraphDestroy(g);
                cuda_ok(rc, "instantiate");
                execs[std::size_t(r)] = e;
            }
        } catch (...) {
            release();
            throw;
        }
    }
    rank_graphs(const rank_graphs&) = delete;
    rank_graphs& operator=(const rank_graphs&) = delete;
    ~rank_graphs() { release(); }
    void release() noexcept {
        for (auto& e : execs)
            if (e != nullptr) {
                cudaGraphExecDestroy(e);
                e = nullptr;
            }
    }
    void replay() {
        for (int r = 0; r < w.size(); ++r) cuda_ok(cudaGraphLaunch(execs[std::size_t(r)], w.stream(r)), "replay");
        w.sync();
    }
};

//! The calls of the suite with a policy value, on a rank's stream: what the
//! public stream-ordered forms (chorus::all_reduce<Algo>(..., stream)) run,
//! chorus::detail::*_run(comm, policy_of<Algo>, ..., stream argument), so
//! with every check they make.
struct on_stream {
    chorus::gpu::communicator& comm;
    cudaStream_t stream;
    const chorus::policy& pol;

    template <class T, class Op>
    void all_reduce(const T* in, T* out, std::uint64_t count, const Op& op) {
        (void)chorus::detail::all_reduce_run(comm, pol, std::span<const T>(in, count), std::span<T>(out, count), op,
                                             false, chorus::detail::on_stream(stream));
    }
    template <class T>
    void all_gather(const T* in, T* out, std::uint64_t count) {
        (void)chorus::detail::all_gather_run(comm, pol, std::span<const T>(in, count),
                                             std::span<T>(out, count * std::uint64_t(comm.size())), false,
                                             chorus::detail::on_stream(stream));
    }
    template <class T, class Op>
    void reduce_scatter(const T* in, T* out, std::uint64_t count, const Op& op) {
        (void)chorus::detail::reduce_scatter_run(comm, pol, std::span<const T>(in, count * std::uint64_t(comm.size())),
                                                 std::span<T>(out, count), op, false,
                                                 chorus::detail::on_stream(stream));
    }
    template <class T>
    void broadcast(T* buf, std::uint64_t count, int root) {
        (void)chorus::detail::broadcast_run(comm, pol, std::span<T>(buf, count), root, false,
                                            chorus::detail::on_stream(stream));
    }
    template <class T, class Op>
    void reduce(const T* in, T* out, std::uint64_t count, const Op& op, int root) {
        (void)chorus::detail::reduce_run(comm, pol, std::span<const T>(in, count), std::span<T>(out, count), op, root,
                                         false, chorus::detail::on_stream(stream));
    }
};

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

//! The element type's name in messages.
template <class T>
constexpr const char* type_label() {
    if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, double>) return "double";
    else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
    else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
    else if constexpr (std::is_same_v<T, __half>) return "half";
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return "bfloat16";
    else if constexpr (std::is_same_v<T, span2>) return "span2";
    else if constexpr (std::is_same_v<T, affine>) return "affine";
    else return "?";
}

//! Guard elements on either side of every buffer of a case.
inline constexpr std::size_t guard = 4;

//! Elements [a, b) of `got` and `want` have the same bytes.
template <class T>
bool same_bytes(const std::vector<T>& got, const std::vector<T>& want, std::size_t a, std::size_t b) {
    return b <= a || std::memcmp(got.data() + a, want.data() + a, (b - a) * sizeof(T)) == 0;
}

// One checked call of `coll` with policy `pol` on every rank: `count`
// elements (per rank block for AllGather and ReduceScatter), in place or
// not, each rank's buffers `r % 3` elements past an allocation (misaligned
// for every element size) with guard elements on both sides that must not
// change, and a non-root's Reduce output left as it was. Returns false
// when the call failed or gave a wrong value (counted in g_failures).
template <class T, class Op>
bool run_case(world& w, const chorus::policy& pol, const char* pname, chorus::collective coll, std::uint64_t count,
              bool in_place, Op op, const char* tname) {
    using chorus::collective;
    const int n = w.size();
    const int root = n - 1;
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    const std::uint64_t in_len = coll == collective::all_gather ? count : big;
    struct rank_bufs {
        dev_buf<T> in, out;
        std::size_t off = 0;
        std::vector<T> in0, out0; // the contents before the call
    };
    std::vector<rank_bufs> b(static_cast<std::size_t>(n));
    constexpr int sentinel_rank = 97; // guards and untouched outputs hold rank 97's values
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        auto& x = b[std::size_t(r)];
        x.off = std::size_t(r % 3) + guard;
        const std::size_t len = x.off + big + guard;
        x.in = dev_buf<T>(len);
        x.out = dev_buf<T>(len);
        x.in.fill(0, len, sentinel_rank);
        x.out.fill(0, len, sentinel_rank);
        x.in.fill(x.off, in_len, r);
        if (in_place && coll == collective::all_gather) x.out.fill(x.off + std::uint64_t(r) * count, count, r);
    }
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        cuda_ok(cudaDeviceSynchronize(), "fill");
        b[std::size_t(r)].in0 = b[std::size_t(r)].in.download();
        b[std::size_t(r)].out0 = b[std::size_t(r)].out.download();
    }
    // The element types that only the reductions run with (their copies would be kernels nobody calls).
    constexpr bool copies = !std::is_same_v<T, affine>;
    for (int r = 0; r < n; ++r) {
        auto& x = b[std::size_t(r)];
        on_stream call{w.comm(r), w.stream(r), pol};
        T* in = x.in.data() + x.off;
        T* out = x.out.data() + x.off;
        switch (coll) {
        case collective::all_reduce: call.all_reduce<T>(in, in_place ? in : out, count, op); break;
        case collective::all_gather:
            if constexpr (copies) call.all_gather<T>(in_place ? out + std::uint64_t(r) * count : in, out, count);
            break;
        case collective::reduce_scatter:
            call.reduce_scatter<T>(in, in_place ? in + std::uint64_t(r) * count : out, count, op);
            break;
        case collective::broadcast:
            if constexpr (copies) call.broadcast<T>(in, count, root);
            break;
        case collective::reduce: call.reduce<T>(in, in_place && r == root ? in : out, count, op, root); break;
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
    // The reductions' serial reference, once per element (ReduceScatter: over all blocks).
    const bool reduces = coll == collective::all_reduce || coll == collective::reduce_scatter ||
                         coll == collective::reduce;
    std::vector<T> reduced;
    std::vector<double> reduced_ref;
    if (ok && reduces) {
        reduced.resize(in_len);
        reduced_ref.resize(in_len);
        for (std::uint64_t i = 0; i < in_len; ++i) reference<T>(n, i, op, reduced[i], reduced_ref[i]);
    }
    long long wrong = 0, clobbered = 0;
    for (int r = 0; r < n && ok; ++r) {
        auto& x = b[std::size_t(r)];
        w.set_device(r);
        const std::vector<T> in_now = x.in.download();
        const std::vector<T> out_now = x.out.download();
        // The part of each buffer the call writes ([lo, hi) past x.off: the result); every other element,
        // the guards included, must keep its bytes (an input, the other blocks of an in-place
        // ReduceScatter's input, a non-root's Reduce output).
        std::uint64_t in_lo = 0, in_hi = 0, out_hi = 0;
        switch (coll) {
        case collective::all_reduce: (in_place ? in_hi : out_hi) = count; break;
        case collective::all_gather: out_hi = big; break;
        case collective::reduce_scatter:
            if (in_place) {
                in_lo = std::uint64_t(r) * count;
                in_hi = in_lo + count;
            } else out_hi = count;
            break;
        case collective::broadcast: in_hi = count; break;
        case collective::reduce:
            if (r == root) (in_place ? in_hi : out_hi) = count;
            break;
        default: break;
        }
        const std::size_t len = in_now.size();
        clobbered += !same_bytes(in_now, x.in0, 0, x.off + in_lo) || !same_bytes(in_now, x.in0, x.off + in_hi, len);
        clobbered += !same_bytes(out_now, x.out0, 0, x.off) || !same_bytes(out_now, x.out0, x.off + out_hi, len);
        const bool result_in = in_hi > in_lo;
        const T* got = (result_in ? in_now : out_now).data() + x.off + (result_in ? in_lo : 0);
        const std::uint64_t result_len = result_in ? in_hi - in_lo : out_hi;
        for (std::uint64_t i = 0; i < result_len; ++i) {
            if (reduces) {
                const std::uint64_t j = coll == collective::reduce_scatter ? std::uint64_t(r) * count + i : i;
                if (!close_enough(got[i], reduced[j], reduced_ref[j], n)) ++wrong;
            } else {
                const T want = coll == collective::all_gather ? make_value<T>(int(i / count), i % count)
                                                              : make_value<T>(root, i);
                if (!close_enough(got[i], want, as_double_or_zero(want), n)) ++wrong;
            }
        }
    }
    EXPECT(ok && wrong == 0 && clobbered == 0,
           "%s %s<%s> n=%d count=%llu in_place=%d: %lld wrong, %lld buffer(s) written outside the result",
           chorus::collective_name(coll), pname, tname, n, static_cast<unsigned long long>(count), int(in_place),
           wrong, clobbered);
    return ok && wrong == 0 && clobbered == 0;
}

//! One (element type, operator) of the matrix, its type erased: `run` is
//! run_case<T, Op>, compiled in one translation unit.
struct pair_case {
    //! Which policies run the largest count (1000003 elements) of a full matrix with the pair.
    enum largest_count { none, every_pair_policies, every_policy };
    const char* name;      //!< "float/sum"
    bool core;             //!< one of the pairs every policy runs (else: only the policies that run every pair)
    bool commutative;      //!< false: only policies that keep operand order run it
    bool copies;           //!< AllGather and Broadcast run with the type too
    largest_count largest; //!< (the others: counts up to 1009)
    bool (*run)(world&, const chorus::policy&, const char* pname, chorus::collective, std::uint64_t count,
                bool in_place);
};

//! The pair_case of run_case<T, Op>.
template <class T, class Op>
pair_case make_pair_case(const char* name, bool core, pair_case::largest_count largest) {
    return pair_case{name, core, chorus::op_traits<Op>::commutative, !std::is_same_v<T, affine>, largest,
                     [](world& w, const chorus::policy& pol, const char* pname, chorus::collective coll,
                        std::uint64_t count, bool in_place) {
                         return run_case<T, Op>(w, pol, pname, coll, count, in_place, Op{}, type_label<T>());
                     }};
}

// The pairs of each translation unit (each pair's kernels compile in the one that lists it).
std::vector<pair_case> pairs_main(); //!< gpu_suite.cu
std::vector<pair_case> pairs_a();    //!< gpu_suite_pairs_a.cu
std::vector<pair_case> pairs_b();    //!< gpu_suite_pairs_b.cu
//! Point-to-point cases on the ranks `devs` (gpu_suite_p2p.cu).
void p2p_cases(const std::vector<int>& devs);
void train_cases(const std::vector<int>& devs); //!< chorus::train on the ranks `devs` (gpu_suite_train.cu)

} // namespace chorus_gpu_suite
