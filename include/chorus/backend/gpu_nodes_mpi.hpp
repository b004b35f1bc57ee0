#pragma once
//! \file backend/gpu_nodes_mpi.hpp
//! The inter-node step of GPU communicators across nodes
//! (backend/gpu_nodes.hpp) over MPI: an MPI communicator of the ranks
//! with this rank's local index on every node (an MPI_Comm_split by local
//! index, ordered by node). When Open MPI reports CUDA-aware support
//! (MPIX_Query_cuda_support(), <mpi-ext.h>) device pointers go to MPI
//! directly; otherwise the data is staged through one pinned host buffer
//! (gpu::options::inter_staging_bytes, allocated once) in three chunk
//! slots: the device-to-host copy of chunk i+1 (a side stream) overlaps
//! MPI on chunk i (blocking, on the host thread) and the host-to-device
//! copy of chunk i-1 (another side stream). CUDA code that needs <mpi.h>:
//! included by <chorus/gpu_mpi.hpp>. Status: compiled, never run on a GPU.

#if !defined(__CUDACC__)
#  error "chorus/backend/gpu_nodes_mpi.hpp is CUDA code: include <chorus/gpu_mpi.hpp> from a .cu file compiled by nvcc"
#endif

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#  include <mpi-ext.h>
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "../core/error.hpp"
#include "../core/node_layout.hpp"
#include "gpu.hpp"
#include "gpu_nodes.hpp"

namespace chorus::detail {

//! True when the MPI library says at run time that it takes CUDA device
//! pointers (Open MPI's extension); false when it cannot say.
inline bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return false;
#endif
}

inline MPI_Datatype mpi_type_of(inter_elem t) {
    switch (t) {
    case inter_elem::i8: return MPI_INT8_T;
    case inter_elem::u8: return MPI_UINT8_T;
    case inter_elem::i16: return MPI_INT16_T;
    case inter_elem::u16: return MPI_UINT16_T;
    case inter_elem::i32: return MPI_INT32_T;
    case inter_elem::u32: return MPI_UINT32_T;
    case inter_elem::i64: return MPI_INT64_T;
    case inter_elem::u64: return MPI_UINT64_T;
    case inter_elem::f32: return MPI_FLOAT;
    case inter_elem::f64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}
inline std::size_t inter_elem_bytes(inter_elem t) {
    switch (t) {
    case inter_elem::i8:
    case inter_elem::u8: return 1;
    case inter_elem::i16:
    case inter_elem::u16: return 2;
    case inter_elem::i32:
    case inter_elem::u32:
    case inter_elem::f32: return 4;
    default: return 8;
    }
}
inline MPI_Op mpi_op_of(inter_op o) {
    switch (o) {
    case inter_op::sum: return MPI_SUM;
    case inter_op::prod: return MPI_PROD;
    case inter_op::min: return MPI_MIN;
    case inter_op::max: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

//! The inter-node group over MPI (see the file comment). Owns its MPI
//! communicator, the pinned staging buffer, two side streams and the
//! chunk events; one per GPU communicator across nodes.
class mpi_inter_nodes final : public gpu_inter_nodes {
public:
    //! `inter`: this rank's inter-node communicator (taken over: freed
    //! here), rank = node. Allocates on `device` (current).
    mpi_inter_nodes(MPI_Comm inter, const node_layout& lay, int rank, int device, std::size_t staging_bytes)
        : comm_(inter), device_(device) {
        this->rank = rank;
        size = lay.size();
        nodes = lay.nodes;
        node = lay.node_of[std::size_t(rank)];
        local = lay.local_of[std::size_t(rank)];
        local_size = lay.local_size;
        node_of = lay.node_of;
        local_of = lay.local_of;
        consecutive = true;
        for (int r = 0; r < size; ++r)
            consecutive = consecutive && lay.members[std::size_t(r)] == r;
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        aware_ = mpi_cuda_aware();
        if (aware_) return;
        // A constructor that throws runs no destructor: what was made so
        // far (the MPI communicator, pinned memory, streams, events) goes.
        try {
            make_staging(staging_bytes);
        } catch (...) {
            release();
            throw;
        }
    }
    mpi_inter_nodes(const mpi_inter_nodes&) = delete;
    mpi_inter_nodes& operator=(const mpi_inter_nodes&) = delete;
    ~mpi_inter_nodes() override { release(); }

private:
    void make_staging(std::size_t staging_bytes) {
        slot_bytes_ = (staging_bytes / 3) / 256 * 256;
        if (slot_bytes_ == 0)
            throw error(errc::invalid_argument,
                        "chorus::gpu::make_communicator: `gpu::options::inter_staging_bytes` is " +
                            std::to_string(staging_bytes) + "; the inter-node step without CUDA-aware MPI needs at "
                            "least 768 bytes (three chunk slots of 256)");
        device_guard g(device_);
        const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&host_), slot_bytes_ * 3, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            host_ = nullptr;
            throw error(errc::unavailable, "chorus::gpu::make_communicator: cudaHostAlloc of " +
                                               std::to_string(slot_bytes_ * 3) +
                                               " bytes of pinned staging memory failed; lower "
                                               "gpu::options::inter_staging_bytes");
        }
        cuda_check(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking), "cudaStreamCreate");
        cuda_check(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking), "cudaStreamCreate");
        for (int i = 0; i < 3; ++i) {
            cuda_check(cudaEventCreateWithFlags(&d2h_done_[i], cudaEventDisableTiming), "cudaEventCreate");
            cuda_check(cudaEventCreateWithFlags(&h2d_done_[i], cudaEventDisableTiming), "cudaEventCreate");
        }
        cuda_check(cudaEventCreateWithFlags(&mark_, cudaEventDisableTiming), "cudaEventCreate");
    }
    void release() noexcept {
        int prev = 0;
        (void)cudaGetDevice(&prev);
        (void)cudaSetDevice(device_);
        // Copies still in flight use the pinned buffer: let them end first.
        if (d2h_) (void)cudaStreamSynchronize(d2h_);
        if (h2d_) (void)cudaStreamSynchronize(h2d_);
        for (int i = 0; i < 3; ++i) {
            if (d2h_done_[i]) (void)cudaEventDestroy(d2h_done_[i]);
            if (h2d_done_[i]) (void)cudaEventDestroy(h2d_done_[i]);
        }
        if (mark_) (void)cudaEventDestroy(mark_);
        if (d2h_) (void)cudaStreamDestroy(d2h_);
        if (h2d_) (void)cudaStreamDestroy(h2d_);
        if (host_) (void)cudaFreeHost(host_);
        (void)cudaSetDevice(prev);
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
    }

public:
    bool cuda_aware() const noexcept override { return aware_; }

    bool agree(bool ok, const inter_wait& w) override {
        int v = ok ? 1 : 0;
        check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce (agreeing)", w);
        return v != 0;
    }

    void all_reduce(void* buf, std::uint64_t count, inter_elem t, inter_op op, cudaStream_t st,
                    const inter_wait& w) override {
        const MPI_Datatype dt = mpi_type_of(t);
        const MPI_Op mo = mpi_op_of(op);
        const std::size_t eb = inter_elem_bytes(t);
        if (aware_) {
            auto* p = static_cast<std::byte*>(buf);
            for (std::uint64_t off = 0; off < count;) {
                const std::uint64_t k = std::min<std::uint64_t>(count - off, std::uint64_t(1) << 30);
                check(MPI_Allreduce(MPI_IN_PLACE, p + off * eb, int(k), dt, mo, comm_),
                      "MPI_Allreduce (CUDA-aware, on device memory)", w);
                off += k;
            }
            return;
        }
        staged(static_cast<std::byte*>(buf), count * eb, eb, true, true, st, w,
               [&](void* host, std::size_t bytes) {
                   check(MPI_Allreduce(MPI_IN_PLACE, host, int(bytes / eb), dt, mo, comm_),
                         "MPI_Allreduce (staged through pinned host memory)", w);
               });
    }

    void broadcast(void* buf, std::uint64_t bytes, int root_node, cudaStream_t st, const inter_wait& w) override {
        const bool root = node == root_node;
        if (aware_) {
            auto* p = static_cast<std::byte*>(buf);
            for (std::uint64_t off = 0; off < bytes;) {
                const std::uint64_t k = std::min<std::uint64_t>(bytes - off, std::uint64_t(1) << 30);
                check(MPI_Bcast(p + off, int(k), MPI_BYTE, root_node, comm_), "MPI_Bcast (CUDA-aware)", w);
                off += k;
            }
            return;
        }
        staged(static_cast<std::byte*>(buf), bytes, 1, root, !root, st, w, [&](void* host, std::size_t b) {
            check(MPI_Bcast(host, int(b), MPI_BYTE, root_node, comm_), "MPI_Bcast (staged through pinned host memory)",
                  w);
        });
    }

    void all_gather(void* buf, std::uint64_t block_bytes, cudaStream_t st, const inter_wait& w) override {
        auto* p = static_cast<std::byte*>(buf);
        if (block_bytes > std::uint64_t(INT_MAX))
            throw error(errc::invalid_argument, w.fn + ": a node's block of " + std::to_string(block_bytes) +
                                                    " bytes is more than one MPI_Allgather carries across nodes");
        if (aware_) {
            check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, int(block_bytes), MPI_BYTE, comm_),
                  "MPI_Allgather (CUDA-aware)", w);
            return;
        }
        // Chunk j: bytes [j*cw, j*cw + len) of every node's block; a slot
        // holds one such piece per node.
        const std::uint64_t cw = slot_bytes_ / std::uint64_t(nodes);
        if (cw == 0)
            throw error(errc::invalid_argument, w.fn + ": gpu::options::inter_staging_bytes / 3 is less than one "
                                                       "byte per node");
        const std::uint64_t chunks = (block_bytes + cw - 1) / cw;
        auto len = [&](std::uint64_t i) { return std::size_t(std::min(cw, block_bytes - i * cw)); };
        pipeline(
            chunks, true, true, st, w,
            [&](std::uint64_t i, std::byte* slot, cudaStream_t s) {
                cuda_check(cudaMemcpyAsync(slot + std::size_t(node) * len(i), p + std::uint64_t(node) * block_bytes +
                                                                                   i * cw,
                                           len(i), cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync (device to pinned host, inter-node staging)");
            },
            [&](std::uint64_t i, std::byte* slot) {
                check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, slot, int(len(i)), MPI_BYTE, comm_),
                      "MPI_Allgather (staged through pinned host memory)", w);
            },
            [&](std::uint64_t i, std::byte* slot, cudaStream_t s) {
                cuda_check(cudaMemcpy2DAsync(p + i * cw, std::size_t(block_bytes), slot, len(i), len(i),
                                             std::size_t(nodes), cudaMemcpyHostToDevice, s),
                           "cudaMemcpy2DAsync (pinned host to device, inter-node staging)");
            });
    }

private:
    void check(int rc, const char* what, const inter_wait& w) const {
        if (rc == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING] = {};
        int len = 0;
        MPI_Error_string(rc, text, &len);
        throw error(errc::internal, w.fn + ": the inter-node step's " + what + " failed: " +
                                        std::string(text, std::size_t(len)));
    }

    //! The chunked pipeline over `bytes` of device memory at `dev`, in
    //! chunks of whole elements of `eb` bytes that fit a slot: per chunk,
    //! (to_host) a copy into a pinned slot, `mpi` on the slot, and
    //! (to_device) a copy back.
    template <class Mpi>
    void staged(std::byte* dev, std::uint64_t bytes, std::size_t eb, bool to_host, bool to_device, cudaStream_t st,
                const inter_wait& w, Mpi&& mpi) {
        const std::uint64_t chunk = slot_bytes_ / eb * eb;
        if (chunk == 0)
            throw error(errc::invalid_argument, w.fn + ": gpu::options::inter_staging_bytes holds no element");
        const std::uint64_t chunks = (bytes + chunk - 1) / chunk;
        auto len = [&](std::uint64_t i) { return std::size_t(std::min(chunk, bytes - i * chunk)); };
        pipeline(
            chunks, to_host, to_device, st, w,
            [&](std::uint64_t i, std::byte* slot, cudaStream_t s) {
                cuda_check(cudaMemcpyAsync(slot, dev + i * chunk, len(i), cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync (device to pinned host, inter-node staging)");
            },
            [&](std::uint64_t i, std::byte* slot) { mpi(slot, len(i)); },
            [&](std::uint64_t i, std::byte* slot, cudaStream_t s) {
                cuda_check(cudaMemcpyAsync(dev + i * chunk, slot, len(i), cudaMemcpyHostToDevice, s),
                           "cudaMemcpyAsync (pinned host to device, inter-node staging)");
            });
    }

    //! `chunks` chunks through the three slots: chunk i+1's copy in
    //! (copy_in on the d2h stream) is issued before the host runs `mpi` on
    //! chunk i, and chunk i's copy back (copy_out on the h2d stream) right
    //! after it; a slot is refilled only once its copy back has finished.
    template <class In, class Mpi, class Out>
    void pipeline(std::uint64_t chunks, bool to_host, bool to_device, cudaStream_t st, const inter_wait& w,
                  In&& copy_in, Mpi&& mpi, Out&& copy_out) {
        device_guard g(device_);
        // The copies come after the work already on the call's stream.
        cuda_check(cudaEventRecord(mark_, st), "cudaEventRecord");
        cuda_check(cudaStreamWaitEvent(d2h_, mark_, 0), "cudaStreamWaitEvent");
        cuda_check(cudaStreamWaitEvent(h2d_, mark_, 0), "cudaStreamWaitEvent");
        auto slot = [&](std::uint64_t i) { return host_ + std::size_t(i % 3) * slot_bytes_; };
        auto issue_in = [&](std::uint64_t i) {
            const int s = int(i % 3);
            // The slot's previous chunk (i - 3) must have been copied back.
            if (i >= 3) cuda_check(cudaStreamWaitEvent(d2h_, h2d_done_[s], 0), "cudaStreamWaitEvent");
            copy_in(i, slot(i), d2h_);
            cuda_check(cudaEventRecord(d2h_done_[s], d2h_), "cudaEventRecord");
        };
        if (to_host && chunks > 0) issue_in(0);
        for (std::uint64_t i = 0; i < chunks; ++i) {
            const int s = int(i % 3);
            if (to_host) {
                if (i + 1 < chunks) issue_in(i + 1);
                inter_wait_event(d2h_done_[s], w, "a chunk's copy to host memory for the inter-node step");
            } else if (i >= 3) {
                inter_wait_event(h2d_done_[s], w, "a chunk's copy back to the device (its slot is reused)");
            }
            mpi(i, slot(i));
            if (to_device) copy_out(i, slot(i), h2d_);
            cuda_check(cudaEventRecord(h2d_done_[s], h2d_), "cudaEventRecord");
        }
        // Later work on the call's stream (and the next call's copies,
        // which wait on that stream) sees the results.
        cuda_check(cudaEventRecord(mark_, h2d_), "cudaEventRecord");
        cuda_check(cudaStreamWaitEvent(st, mark_, 0), "cudaStreamWaitEvent");
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int device_ = 0;
    bool aware_ = false;
    std::size_t slot_bytes_ = 0;
    std::byte* host_ = nullptr;
    cudaStream_t d2h_ = nullptr, h2d_ = nullptr;
    cudaEvent_t d2h_done_[3] = {}, h2d_done_[3] = {};
    cudaEvent_t mark_ = nullptr;
};

} // namespace chorus::detail
