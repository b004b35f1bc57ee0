#pragma once
//! \file train/gpu.hpp
//! The training helpers (<chorus/train.hpp>) on GPU communicators: the
//! specialisation of train_memory (train/memory.hpp) for
//! chorus::gpu::communicator. Buffers are device memory of the rank's
//! device, copies are cudaMemcpyAsync device to device, the elementwise
//! loops are small kernels, the collectives are the stream-ordered forms
//! (collectives/gpu_stream.hpp), and two streams are ordered by CUDA
//! events. Nothing is copied through the host but the one step count per
//! bounded_staleness round. CUDA code: <chorus/gpu.hpp> includes it.

#if !defined(__CUDACC__)
#  error "chorus/train/gpu.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "../async/future.hpp"
#include "../backend/gpu.hpp"
#include "../collectives/gpu_stream.hpp"
#include "check.hpp"
#include "memory.hpp"

namespace chorus::train::detail {

// The kernels: grid-stride loops, one thread per element.
template <class T>
__global__ void train_accumulate_kernel(T* dst, const T* src, std::size_t n, bool first) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x)
        dst[i] = first ? src[i] : dst[i] + src[i];
}
template <class T>
__global__ void train_divide_kernel(T* x, std::size_t n, T d) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x)
        x[i] = x[i] / d;
}
template <class T>
__global__ void train_store_kernel(T* p, T v) {
    *p = v;
}
template <class T>
__global__ void train_sgd_kernel(T* p, T* v, const T* g, std::size_t n, T mu, T a) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        // Rounded as the host loop rounds: no contraction into fused multiply-adds.
        T vi, pi;
        if constexpr (sizeof(T) == sizeof(float)) {
            vi = __fadd_rn(__fmul_rn(mu, v[i]), g[i]);
            pi = __fsub_rn(p[i], __fmul_rn(a, vi));
        } else {
            vi = __dadd_rn(__dmul_rn(mu, v[i]), g[i]);
            pi = __dsub_rn(p[i], __dmul_rn(a, vi));
        }
        v[i] = vi;
        p[i] = pi;
    }
}

//! Blocks of 256 threads for n elements (at most 1024 blocks; the loops stride).
inline unsigned train_blocks(std::size_t n) {
    return unsigned(std::min<std::size_t>((n + 255) / 256, 1024));
}

//! Device memory of n elements of T on one device, zero-filled; move-only.
template <class T>
class device_buffer {
public:
    device_buffer() = default;
    //! Zero-filled on `stream` (not on the legacy default stream, which
    //! would wait for other ranks' kernels on the same device).
    device_buffer(std::size_t n, int device, cudaStream_t stream) : n_(n) {
        if (n == 0) return;
        chorus::detail::device_guard g(device);
        chorus::detail::cuda_check(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)), "cudaMalloc");
        chorus::detail::cuda_check(cudaMemsetAsync(p_, 0, n * sizeof(T), stream), "cudaMemsetAsync");
    }
    device_buffer(device_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    device_buffer& operator=(device_buffer&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    ~device_buffer() {
        if (p_) (void)cudaFree(p_); // synchronizes the device: nothing still uses it
    }
    T* data() const noexcept { return p_; }
    std::size_t size() const noexcept { return n_; }
    friend void swap(device_buffer& a, device_buffer& b) noexcept {
        std::swap(a.p_, b.p_);
        std::swap(a.n_, b.n_);
    }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

//! A CUDA event (no timing), created on first use; move-only.
class device_marker {
public:
    device_marker() = default;
    device_marker(device_marker&& o) noexcept : ev_(std::exchange(o.ev_, nullptr)) {}
    device_marker& operator=(device_marker&& o) noexcept {
        std::swap(ev_, o.ev_);
        return *this;
    }
    device_marker(const device_marker&) = delete;
    device_marker& operator=(const device_marker&) = delete;
    ~device_marker() {
        if (ev_) (void)cudaEventDestroy(ev_);
    }
    void record(cudaStream_t s) {
        if (!ev_) chorus::detail::cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
        chorus::detail::cuda_check(cudaEventRecord(ev_, s), "cudaEventRecord");
    }
    void wait(cudaStream_t s) const {
        if (ev_) chorus::detail::cuda_check(cudaStreamWaitEvent(s, ev_, 0), "cudaStreamWaitEvent");
    }

private:
    cudaEvent_t ev_ = nullptr;
};

//! What stands for "wait for this AllReduce" in gradient_buckets on a GPU:
//! nothing, the streams order the work (wait_all joins them).
struct stream_ordered {
    void wait() const noexcept {}
};

template <>
struct train_memory<chorus::gpu::communicator> {
    using Comm = chorus::gpu::communicator;
    static constexpr bool device = true;
    using stream_type = cudaStream_t;
    template <class T>
    using buffer = device_buffer<T>;
    using marker = device_marker;
    using handle = stream_ordered;

    //! `compute`: the caller's stream (null: comm.stream()); `comm`: where
    //! the collectives run (null: comm.stream()). Equal streams are never
    //! joined by events.
    struct context {
        context(Comm& c, cudaStream_t compute_stream, cudaStream_t comm_stream)
            : compute(compute_stream ? compute_stream : c.stream()), comm(comm_stream ? comm_stream : c.stream()),
              dev(c.device()) {}
        context(context&& o) noexcept
            : compute(o.compute), comm(o.comm), dev(o.dev), to_comm(std::move(o.to_comm)),
              to_compute(std::move(o.to_compute)), side(std::exchange(o.side, nullptr)),
              pinned(std::exchange(o.pinned, nullptr)) {}
        context& operator=(context&&) = delete;
        ~context() {
            if (side) (void)cudaStreamDestroy(side);
            if (pinned) (void)cudaFreeHost(pinned);
        }
        bool overlapped() const noexcept { return compute != comm; }

        cudaStream_t compute, comm;
        int dev;
        device_marker to_comm, to_compute; // the joins
        cudaStream_t side = nullptr;       // load(): its own stream, so that it waits for neither of the others
        double* pinned = nullptr;          // load(): where the value lands (8 bytes of pinned memory)
    };

    template <class T>
    static buffer<T> alloc(const context& ctx, std::size_t n) {
        return buffer<T>(n, ctx.dev, ctx.compute);
    }
    //! Device memory of the rank's device (or managed memory), as the
    //! collectives require; host memory is refused by name.
    template <class T>
    static void check_memory(const context& ctx, const T* p, const char* who, const std::string& what) {
        int pd = -1;
        const chorus::detail::mem_kind k = chorus::detail::query_memory(p, pd);
        if (k == chorus::detail::mem_kind::host)
            throw_arg(who, what + " is host memory; on a GPU communicator it must be device memory (cudaMalloc) of device " +
                               std::to_string(ctx.dev));
        if (k == chorus::detail::mem_kind::device && pd >= 0 && pd != ctx.dev)
            throw_arg(who, what + " is memory of device " + std::to_string(pd) + " but this rank runs on device " +
                               std::to_string(ctx.dev));
    }

    template <class T>
    static void copy(cudaStream_t s, T* dst, const T* src, std::size_t n) {
        if (n == 0 || dst == src) return;
        chorus::detail::cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, s),
                                   "cudaMemcpyAsync");
    }
    template <class T>
    static void accumulate(cudaStream_t s, T* dst, const T* src, std::size_t n, bool first) {
        if (n == 0) return;
        train_accumulate_kernel<T><<<train_blocks(n), 256, 0, s>>>(dst, src, n, first);
        chorus::detail::cuda_check(cudaGetLastError(), "train_accumulate_kernel");
    }
    template <class T>
    static void divide(cudaStream_t s, T* x, std::size_t n, T d) {
        if (n == 0) return;
        train_divide_kernel<T><<<train_blocks(n), 256, 0, s>>>(x, n, d);
        chorus::detail::cuda_check(cudaGetLastError(), "train_divide_kernel");
    }
    template <class T>
    static void store(cudaStream_t s, T* p, T v) {
        train_store_kernel<T><<<1, 1, 0, s>>>(p, v);
        chorus::detail::cuda_check(cudaGetLastError(), "train_store_kernel");
    }
    //! What load() needs, allocated up front (a pinned allocation during
    //! training could stall behind other ranks' kernels).
    static void prepare_load(context& ctx) {
        chorus::detail::device_guard g(ctx.dev);
        if (!ctx.side)
            chorus::detail::cuda_check(cudaStreamCreateWithFlags(&ctx.side, cudaStreamNonBlocking), "cudaStreamCreate");
        if (!ctx.pinned)
            chorus::detail::cuda_check(cudaMallocHost(reinterpret_cast<void**>(&ctx.pinned), sizeof(double)),
                                       "cudaMallocHost");
    }
    //! Reads *p back once the collective that wrote it has completed (its
    //! future is ready), on a stream of its own.
    template <class T>
    static T load(context& ctx, const T* p) {
        static_assert(sizeof(T) <= sizeof(double));
        prepare_load(ctx);
        chorus::detail::cuda_check(cudaMemcpyAsync(ctx.pinned, p, sizeof(T), cudaMemcpyDeviceToHost, ctx.side),
                                   "cudaMemcpyAsync");
        chorus::detail::cuda_check(cudaStreamSynchronize(ctx.side), "cudaStreamSynchronize");
        return *reinterpret_cast<const T*>(ctx.pinned);
    }
    template <class T>
    static void sgd(cudaStream_t s, T* p, T* v, const T* g, std::size_t n, T mu, T a) {
        if (n == 0) return;
        train_sgd_kernel<T><<<train_blocks(n), 256, 0, s>>>(p, v, g, n, mu, a);
        chorus::detail::cuda_check(cudaGetLastError(), "train_sgd_kernel");
    }

    static void record(context&, marker& m, cudaStream_t s) { m.record(s); }
    static void wait(context&, const marker& m, cudaStream_t s) { m.wait(s); }
    static void join(context& ctx, cudaStream_t from, cudaStream_t to) {
        if (from == to) return;
        device_marker& m = to == ctx.comm ? ctx.to_comm : ctx.to_compute;
        m.record(from);
        m.wait(to);
    }

    template <class T, class Op>
    static void all_reduce(Comm& comm, std::span<T> buf, Op op, cudaStream_t s) {
        chorus::all_reduce(comm, buf, op, s);
    }
    template <class T, class Op>
    static handle start_all_reduce(Comm& comm, std::span<T> buf, Op op, cudaStream_t s) {
        chorus::all_reduce(comm, buf, op, s);
        return {};
    }
    template <class T, class Op>
    static chorus::future all_reduce_async(Comm& comm, std::span<T> buf, Op op, cudaStream_t s) {
        return chorus::all_reduce_async(comm, buf, op, s);
    }
    template <class T, class Op>
    static void reduce_scatter(Comm& comm, std::span<const T> in, std::span<T> out, Op op, cudaStream_t s) {
        chorus::reduce_scatter(comm, in, out, op, s);
    }
    template <class T>
    static void all_gather(Comm& comm, std::span<const T> in, std::span<T> out, cudaStream_t s) {
        chorus::all_gather(comm, in, out, s);
    }
};

} // namespace chorus::train::detail
