// The shared rank program on a GPU: the same ring schedules, partitions and
// flag protocol that the CPU suite tests, compiled by nvcc and run as one
// CUDA kernel with "virtual ranks" on one device (one thread block per
// (rank, channel); blocks spin on each other's progress flags).
//
// Without a device this program prints "CHORUS_SKIP: no CUDA device" and
// exits 77 (CTest: Skipped). It then proves only that the shared code is
// device-clean: ring_plan, ring_schedule, run_unit, the operators and the
// flag helpers all instantiate in device code.
#include <chorus/chorus.hpp> // the whole host API must also compile under nvcc

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using chorus::collective;
using chorus::detail::status;

// Device executor environment: called by every thread of the block.
template <class T, class Op>
struct device_env {
    T* const* in;            // per-rank buffers (virtual ranks share the device)
    T* const* out;
    T* const* scratch;
    std::uint64_t* flags;    // [rank * max_channels + channel]
    int* abort_flag;
    int rank;
    int nranks;
    std::uint64_t seq;
    long long spin_limit_cycles;
    Op op;

    __device__ status wait(int peer, int c, std::uint64_t units) {
        const std::uint64_t target = (seq << 32) | units;
        std::uint64_t* word = &flags[peer * chorus::max_channels + c];
        const long long start = clock64();
        for (unsigned i = 0;; ++i) {
            if (chorus::detail::flag_load_acquire(word) >= target) return status::ok;
            if ((i & 255u) == 0) {
                if (chorus::detail::atomic_ref<int>(*abort_flag).load(chorus::detail::mo::memory_order_relaxed))
                    return status::aborted;
                if (clock64() - start > spin_limit_cycles) {
                    chorus::detail::atomic_ref<int>(*abort_flag).store(1, chorus::detail::mo::memory_order_relaxed);
                    return status::timeout;
                }
            }
        }
    }

    __device__ T* base(const chorus::operand& o) const {
        switch (o.loc) {
        case chorus::where::in: return in[o.rank] + o.offset;
        case chorus::where::out: return out[o.rank] + o.offset;
        case chorus::where::scratch: return scratch[o.rank] + o.offset;
        default: return nullptr;
        }
    }

    // Lane-parallel reduce-copy over the step's elements.
    __device__ status execute(const chorus::step& s) {
        if (s.count == 0) return status::ok;
        T* dst = base(s.dst);
        T* dst2 = s.dst2.loc == chorus::where::none ? nullptr : base(s.dst2);
        const T* a = base(s.src0);
        const T* b = s.src1.loc == chorus::where::none ? nullptr : base(s.src1);
        for (std::uint64_t i = threadIdx.x; i < s.count; i += blockDim.x) {
            T v = b ? static_cast<T>(op(a[i], b[i])) : a[i];
            if (s.finish) v = chorus::detail::finish(op, v, nranks);
            dst[i] = v;
            if (dst2) dst2[i] = v;
        }
        return status::ok;
    }

    __device__ void post(int c, std::uint64_t units) {
        __syncthreads(); // every lane's stores precede the release below
        if (threadIdx.x == 0) {
            __threadfence();
            chorus::detail::flag_store_release(&flags[rank * chorus::max_channels + c], (seq << 32) | units);
        }
    }
};

template <class T, class Op>
__global__ void ring_kernel(chorus::ring_plan plan0, int channels, T* const* in, T* const* out, T* const* scratch,
                            std::uint64_t* flags, int* abort_flag, int* result, std::uint64_t seq, Op op) {
    const int rank = blockIdx.x / channels;
    const int c = blockIdx.x % channels;
    chorus::ring_plan plan = plan0;
    plan.rank = rank;
    const chorus::ring_schedule sch{plan};
    device_env<T, Op> env{in, out, scratch, flags, abort_flag, rank, plan.nranks, seq, 20000000000LL, op};
    env.post(c, 0); // publish: this rank's buffers are ready for this sequence number
    status st = status::ok;
    for (std::uint64_t p = 0; p < plan.units() && st == status::ok; ++p) st = chorus::detail::run_unit(sch, env, c, p);
    if (st == status::ok) st = chorus::detail::finish_channel(sch, env, c);
    if (threadIdx.x == 0 && st != status::ok) atomicExch(result, static_cast<int>(st));
}

#define CHECK_CUDA(x)                                                                                   \
    do {                                                                                                \
        cudaError_t e_ = (x);                                                                           \
        if (e_ != cudaSuccess) {                                                                        \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);       \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

// Runs one collective on n virtual ranks and checks it against a serial reference.
template <class T, class Op>
int run_case(collective coll, int n, int root, std::uint64_t count, int channels, std::uint64_t chunk_bytes, Op op,
             std::uint64_t seq, std::uint64_t* d_flags) {
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    const std::uint64_t in_len = coll == collective::all_gather ? count : big;
    const std::uint64_t out_len = coll == collective::reduce_scatter ? count : big;
    const chorus::ring_plan plan = chorus::make_ring_plan(coll, 0, n, root, count, sizeof(T), 0, channels, chunk_bytes);
    std::vector<T*> h_in(n), h_out(n), h_scr(n);
    std::vector<std::vector<T>> host_in(n);
    for (int r = 0; r < n; ++r) {
        host_in[r].resize(in_len);
        for (std::uint64_t i = 0; i < in_len; ++i) host_in[r][i] = T((r * 7 + i * 3) % 11);
        CHECK_CUDA(cudaMalloc(&h_in[r], (in_len + 1) * sizeof(T)));
        CHECK_CUDA(cudaMalloc(&h_out[r], (out_len + 1) * sizeof(T)));
        CHECK_CUDA(cudaMalloc(&h_scr[r], (plan.scratch_elems() + 1) * sizeof(T)));
        CHECK_CUDA(cudaMemcpy(h_in[r], host_in[r].data(), in_len * sizeof(T), cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemset(h_out[r], 0, (out_len + 1) * sizeof(T)));
        if (coll == collective::broadcast && r == root)
            CHECK_CUDA(cudaMemcpy(h_out[r], host_in[r].data(), in_len * sizeof(T), cudaMemcpyHostToDevice));
    }
    T** d_ptrs = nullptr;
    CHECK_CUDA(cudaMalloc(&d_ptrs, 3 * n * sizeof(T*)));
    CHECK_CUDA(cudaMemcpy(d_ptrs, h_in.data(), n * sizeof(T*), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_ptrs + n, h_out.data(), n * sizeof(T*), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_ptrs + 2 * n, h_scr.data(), n * sizeof(T*), cudaMemcpyHostToDevice));
    int* d_misc = nullptr; // [0] abort flag, [1] result
    CHECK_CUDA(cudaMalloc(&d_misc, 2 * sizeof(int)));
    CHECK_CUDA(cudaMemset(d_misc, 0, 2 * sizeof(int)));
    ring_kernel<T, Op><<<n * channels, 128>>>(plan, channels, d_ptrs, d_ptrs + n, d_ptrs + 2 * n, d_flags, d_misc,
                                             d_misc + 1, seq, op);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    int result = 0;
    CHECK_CUDA(cudaMemcpy(&result, d_misc + 1, sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = result != 0 ? 1 : 0;
    for (int r = 0; r < n; ++r) {
        if (coll == collective::reduce && r != root) continue;
        std::vector<T> got(out_len);
        CHECK_CUDA(cudaMemcpy(got.data(), h_out[r], out_len * sizeof(T), cudaMemcpyDeviceToHost));
        for (std::uint64_t i = 0; i < out_len; ++i) {
            T want{};
            switch (coll) {
            case collective::all_reduce:
            case collective::reduce:
                want = host_in[0][i];
                for (int q = 1; q < n; ++q) want = op(want, host_in[q][i]);
                want = chorus::detail::finish(op, want, n);
                break;
            case collective::reduce_scatter:
                want = host_in[0][r * count + i];
                for (int q = 1; q < n; ++q) want = op(want, host_in[q][r * count + i]);
                want = chorus::detail::finish(op, want, n);
                break;
            case collective::all_gather: want = host_in[i / count][i % count]; break;
            case collective::broadcast: want = host_in[root][i]; break;
            default: break;
            }
            if (got[i] != want) ++wrong;
        }
    }
    for (int r = 0; r < n; ++r) {
        cudaFree(h_in[r]);
        cudaFree(h_out[r]);
        cudaFree(h_scr[r]);
    }
    cudaFree(d_ptrs);
    cudaFree(d_misc);
    std::printf("%-15s n=%d channels=%d count=%-8llu root=%d: %s\n", chorus::collective_name(coll), n, channels,
                static_cast<unsigned long long>(count), root, wrong ? "WRONG" : "ok");
    return wrong ? 1 : 0;
}

} // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("CHORUS_SKIP: no CUDA device\n");
        return 77;
    }
    std::uint64_t* d_flags = nullptr;
    const int max_ranks = 8;
    CHECK_CUDA(cudaMalloc(&d_flags, max_ranks * chorus::max_channels * sizeof(std::uint64_t)));
    CHECK_CUDA(cudaMemset(d_flags, 0, max_ranks * chorus::max_channels * sizeof(std::uint64_t)));
    int failures = 0;
    std::uint64_t seq = 1; // flags are shared by every case, as in one communicator
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                            collective::broadcast, collective::reduce}) {
        for (int n : {1, 2, 3, 4, 8}) {
            for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(n + 1), std::uint64_t(1009),
                                        std::uint64_t(1000003)}) {
                failures += run_case<float>(coll, n, n - 1, count, 2, 64 << 10, chorus::sum{}, seq++, d_flags);
                failures += run_case<int>(coll, n, 0, count, 1, 4096, chorus::max{}, seq++, d_flags);
            }
        }
    }
    cudaFree(d_flags);

    // A device pointer handed to a host (threads) communicator is rejected
    // by name before any rank touches it.
    {
        float* d_buf = nullptr;
        CHECK_CUDA(cudaMalloc(&d_buf, 64 * sizeof(float)));
        bool rejected = false;
        chorus::run_threads(1, [&](chorus::communicator<chorus::threads>& comm) {
            try {
                chorus::all_reduce(comm, std::span<float>(d_buf, 64), chorus::sum{});
            } catch (const chorus::error& e) {
                rejected = e.code() == chorus::errc::invalid_argument && std::string(e.what()).find("GPU memory") != std::string::npos;
            }
        });
        cudaFree(d_buf);
        std::printf("device pointer on a threads communicator: %s\n", rejected ? "rejected" : "NOT REJECTED");
        if (!rejected) ++failures;
    }
    std::printf("%s: %d failing case(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
