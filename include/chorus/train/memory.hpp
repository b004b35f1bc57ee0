#pragma once
//! \file train/memory.hpp
//! Where the training helpers keep and move their data: the small layer of
//! operations (buffers, copies, the elementwise loops, the collectives) that
//! buckets, accumulation, staleness and the sharded step are written
//! against, so that one body of code serves host and GPU communicators.
//!
//! train_memory<Comm> below is the host version: std::vector buffers,
//! std::memcpy, plain loops, the blocking and future-returning collectives.
//! Nothing here names CUDA. <chorus/gpu.hpp> (train/gpu.hpp, nvcc only)
//! specialises it for chorus::gpu::communicator: device buffers, copies and
//! small kernels enqueued on CUDA streams, the stream-ordered collectives.
//!
//! A helper holds one `context` (its streams; on the host, nothing) and
//! passes one of its streams to each operation. On the host the streams are
//! empty tags and every operation has finished when it returns.

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "../async/future.hpp"
#include "../collectives/all_gather.hpp"
#include "../collectives/all_reduce.hpp"
#include "../collectives/reduce_scatter.hpp"

namespace chorus::train::detail {

//! The stream argument of a host operation: nothing.
struct no_stream {};

//! Host communicators (every chorus communicator but the GPU one).
template <class Comm>
struct train_memory {
    //! False: buffers are host memory and operations complete on return.
    static constexpr bool device = false;
    using stream_type = no_stream;
    template <class T>
    using buffer = std::vector<T>;
    //! Orders later work on one stream after earlier work on another (GPU:
    //! a CUDA event); on the host there is nothing to order.
    struct marker {};

    //! The helper's streams: `compute`, where the caller's kernels produce
    //! and consume its data, and `comm`, where its collectives run.
    struct context {
        context(Comm&, stream_type, stream_type) {}
        stream_type compute{}, comm{};
        bool overlapped() const noexcept { return false; }
    };

    template <class T>
    static buffer<T> alloc(const context&, std::size_t n) {
        return buffer<T>(n, T(0));
    }
    //! Throws unless [p, p + n) is memory this backend's collectives take
    //! (host: any; the null checks are the helpers' own).
    template <class T>
    static void check_memory(const context&, const T*, const char*, const std::string&) {}

    template <class T>
    static void copy(stream_type, T* dst, const T* src, std::size_t n) {
        std::memcpy(dst, src, n * sizeof(T));
    }
    //! dst = src (first) or dst += src.
    template <class T>
    static void accumulate(stream_type, T* dst, const T* src, std::size_t n, bool first) {
        if (first) {
            for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
        } else {
            for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
        }
    }
    //! x[i] /= d.
    template <class T>
    static void divide(stream_type, T* x, std::size_t n, T d) {
        for (std::size_t i = 0; i < n; ++i) x[i] /= d;
    }
    //! *p = v.
    template <class T>
    static void store(stream_type, T* p, T v) {
        *p = v;
    }
    static void prepare_load(context&) {}
    //! *p, once the collective that wrote it has completed.
    template <class T>
    static T load(const context&, const T* p) {
        return *p;
    }
    //! SGD with momentum on n elements: v = mu * v + g; p -= a * v.
    template <class T>
    static void sgd(stream_type, T* p, T* v, const T* g, std::size_t n, T mu, T a) {
        for (std::size_t i = 0; i < n; ++i) {
            v[i] = mu * v[i] + g[i];
            p[i] -= a * v[i];
        }
    }

    static void record(context&, marker&, stream_type) {}
    static void wait(context&, const marker&, stream_type) {}
    //! Later work on `to` waits for the work issued so far on `from`.
    static void join(context&, stream_type /*from*/, stream_type /*to*/) {}

    template <class T, class Op>
    static void all_reduce(Comm& comm, std::span<T> buf, Op op, stream_type) {
        chorus::all_reduce(comm, buf, op);
    }
    //! What start_all_reduce returns: wait() blocks until that AllReduce
    //! is done (GPU: a no-op; the work is ordered by the streams instead).
    using handle = chorus::future;
    template <class T, class Op>
    static handle start_all_reduce(Comm& comm, std::span<T> buf, Op op, stream_type) {
        return chorus::all_reduce_async(comm, buf, op);
    }
    template <class T, class Op>
    static chorus::future all_reduce_async(Comm& comm, std::span<T> buf, Op op, stream_type) {
        return chorus::all_reduce_async(comm, buf, op);
    }
    template <class T, class Op>
    static void reduce_scatter(Comm& comm, std::span<const T> in, std::span<T> out, Op op, stream_type) {
        chorus::reduce_scatter(comm, in, out, op);
    }
    template <class T>
    static void all_gather(Comm& comm, std::span<const T> in, std::span<T> out, stream_type) {
        chorus::all_gather(comm, in, out);
    }
};

} // namespace chorus::train::detail
