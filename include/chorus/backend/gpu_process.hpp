#pragma once
//! \file backend/gpu_process.hpp
//! The GPU backend with one process per GPU (or several processes sharing
//! one GPU): what gpu::make_communicator (comm/make_communicators.hpp)
//! builds. A communicator<gpu::device> whose
//! gpu_world holds one local rank of a process world
//! (backend/lane_process.hpp), made of:
//!
//!   - rank segments from cuda_ipc_provider(): cudaMalloc'd on the rank's
//!     device, zero-filled with cudaMemset, exported with
//!     cudaIpcGetMemHandle (the 64-byte handle is the segment's exchanged
//!     name) and opened by every peer with cudaIpcOpenMemHandle(...,
//!     cudaIpcMemLazyEnablePeerAccess). Each holds the rank's
//!     lane_rank_area, its scratch (schedule scratch and staged copies)
//!     and its registered area (gpu::communicator::alloc);
//!   - user buffers registered later (gpu::communicator::register_buffer,
//!     lane_process_world::register_range): the cudaMalloc allocation
//!     holding each is exported the same way (export_range) and opened
//!     by every peer, one peer-map range per registration;
//!   - the node page (abort word, dead rank, process ids, failure records)
//!     in POSIX shared memory, registered with cudaHostRegister(...,
//!     cudaHostRegisterMapped | cudaHostRegisterPortable): kernels poll the
//!     abort word and write their failure records there through the
//!     pointer cudaHostGetDevicePointer gives. The process world's watcher
//!     thread sets the abort word when a peer process dies, so every
//!     kernel stops at its next poll and the host reports
//!     errc::peer_failed naming the dead rank;
//!   - device copies of the area table and of this process's
//!     lane_peer_map of every peer (lane_world::maps), so the one
//!     collective kernel (kernels/collective.cuh) runs unchanged,
//!     translating every peer pointer it dereferences.
//!
//! The ranks meet through a lane_bootstrap: a unique_id (files, as
//! NCCL's ncclCommInitRank) here, or an MPI communicator
//! (<chorus/gpu_mpi.hpp>). Every process of one communicator runs on one
//! node. CUDA IPC between processes on the same device is allowed; their
//! kernels then share the device by time slicing (or side by side under
//! MPS), which makes every collective slow but correct.
//!
//! Status: compiled (nvcc, CUDA 13), never run on a GPU yet.

#if !defined(__CUDACC__)
#  error "chorus/backend/gpu_process.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda.h> // types only (cuMemGetAddressRange is found through the runtime: no -lcuda)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../model/cost.hpp"
#include "../model/file.hpp"
#include "bootstrap.hpp"
#include "gpu.hpp"
#include "lane_process.hpp"

namespace chorus {
namespace detail {

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(lane_segment_name::text),
              "a CUDA IPC handle must fit a process world's segment name");

//! lane_mapping::handle of a segment this process allocated (cudaFree it)
//! and of one it opened from a peer (cudaIpcCloseMemHandle it).
inline void* ipc_owned_tag() noexcept { return reinterpret_cast<void*>(std::uintptr_t(1)); }
inline void* ipc_opened_tag() noexcept { return reinterpret_cast<void*>(std::uintptr_t(2)); }

//! The driver's cuMemGetAddressRange, found through the runtime
//! (cudaGetDriverEntryPointByVersion: no link to libcuda); null when the
//! driver does not give it.
inline CUresult (*driver_mem_address_range())(CUdeviceptr*, std::size_t*, CUdeviceptr) {
    using fn_t = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
    static const fn_t fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            return fn_t(nullptr);
        }
        return reinterpret_cast<fn_t>(f);
    }();
    return fn;
}

//! lane_memory_provider::export_range over CUDA IPC: [p, p + bytes) must
//! be device memory of the current device that cudaMalloc gave (any part
//! of one allocation); its allocation (found with cuMemGetAddressRange) is
//! exported with cudaIpcGetMemHandle, the handle is the name peers open.
inline void cuda_ipc_export_range(const void* p, std::size_t bytes, lane_segment_name& name,
                                  std::uint64_t& alloc_base, std::uint64_t& alloc_bytes) {
    int dev = -1;
    cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        a.type = cudaMemoryTypeUnregistered;
    }
    if (a.type != cudaMemoryTypeDevice)
        throw error(errc::invalid_argument,
                    std::string("is ") + (a.type == cudaMemoryTypeManaged ? "managed" : "host") +
                        " memory; only device memory from cudaMalloc can be registered (CUDA IPC shares nothing "
                        "else)");
    if (a.device != dev)
        throw error(errc::invalid_argument, "is memory of device " + std::to_string(a.device) +
                                                " but this rank runs on device " + std::to_string(dev));
    const auto range = driver_mem_address_range();
    if (range == nullptr)
        throw error(errc::unavailable, "cannot be registered: the CUDA driver does not give cuMemGetAddressRange");
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const auto at = reinterpret_cast<CUdeviceptr>(p);
    if (range(&base, &size, at) != CUDA_SUCCESS)
        throw error(errc::invalid_argument, "lies in no allocation the CUDA driver knows");
    if (bytes > size - (at - base))
        throw error(errc::invalid_argument, "(" + std::to_string(bytes) + " bytes) runs past the end of its " +
                                                std::to_string(size) + "-byte allocation");
    cudaIpcMemHandle_t h{};
    if (const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)); e != cudaSuccess) {
        (void)cudaGetLastError();
        throw error(errc::invalid_argument,
                    std::string("cannot be exported by CUDA IPC (cudaIpcGetMemHandle: ") + cudaGetErrorString(e) +
                        "); register memory from cudaMalloc (not from a stream-ordered pool or cuMemCreate)");
    }
    std::memcpy(name.text, &h, sizeof h);
    alloc_base = base;
    alloc_bytes = size;
}

//! Rank segments in device memory of the current device, shared by CUDA
//! IPC (see the file comment), and user buffers registered the same way
//! (export_range: cuda_ipc_export_range; a peer opens and closes one as a
//! segment). The caller makes the rank's device current around the
//! process world's construction and destruction and around registrations.
inline lane_memory_provider cuda_ipc_provider() {
    lane_memory_provider p;
    p.create = [](std::size_t bytes, lane_segment_name& name, const std::string& knob) {
        void* d = nullptr;
        const cudaError_t e = cudaMalloc(&d, bytes);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            throw error(errc::unavailable, "chorus::gpu: cudaMalloc of " + std::to_string(bytes) +
                                               " bytes for the rank's shared segment failed (out of device memory); "
                                               "lower " + knob);
        }
        cuda_check(e, "cudaMalloc (the rank's shared segment)");
        try {
            cuda_check(cudaMemset(d, 0, bytes), "cudaMemset (the rank's shared segment)");
            // Peers read the segment as soon as they open it: zero before.
            cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
            cudaIpcMemHandle_t h{};
            cuda_check(cudaIpcGetMemHandle(&h, d), "cudaIpcGetMemHandle");
            std::memcpy(name.text, &h, sizeof h);
        } catch (...) {
            (void)cudaFree(d);
            throw;
        }
        return lane_mapping{static_cast<std::byte*>(d), bytes, ipc_owned_tag()};
    };
    p.open = [](const lane_segment_name& name, std::size_t bytes) {
        cudaIpcMemHandle_t h{};
        std::memcpy(&h, name.text, sizeof h);
        void* d = nullptr;
        cuda_check(cudaIpcOpenMemHandle(&d, h, cudaIpcMemLazyEnablePeerAccess),
                   "cudaIpcOpenMemHandle (a peer process's segment; every process of a communicator must run on "
                   "one node, on devices with peer access to each other or on one device)");
        return lane_mapping{static_cast<std::byte*>(d), bytes, ipc_opened_tag()};
    };
    p.unlink = [](const lane_segment_name&) {}; // a handle names nothing that outlives the allocation
    p.close = [](lane_mapping& m) {
        if (m.handle == ipc_opened_tag()) (void)cudaIpcCloseMemHandle(m.base);
        else if (m.handle == ipc_owned_tag()) (void)cudaFree(m.base);
        m = {};
    };
    // A peer's registered buffer is opened as a segment (open: its whole
    // allocation; cudaIpcOpenMemHandle counts a handle opened twice, so two
    // registrations in one allocation are opened and closed independently).
    p.export_range = cuda_ipc_export_range;
    return p;
}

//! Throws unless this process sees device `device`: errc::unavailable
//! without any CUDA device, errc::invalid_argument naming `device`.
inline void check_process_device(int device, const std::string& fn) {
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        throw error(errc::unavailable, fn + ": no CUDA device is available (" +
                                           (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
    }
    if (device < 0 || device >= count)
        throw error(errc::invalid_argument, fn + ": `device` is " + std::to_string(device) +
                                                " but this process sees " + std::to_string(count) + " device(s) (0.." +
                                                std::to_string(count - 1) + ")");
}

//! The gpu_world of rank boot.rank() of boot.size() processes, on
//! `device` (checked by the caller). Collective over `boot`.
inline std::shared_ptr<gpu_world> make_gpu_process_world(lane_bootstrap& boot, int device, const gpu::options& opt,
                                                          const std::string& fn) {
    device_guard g(device);
    auto w = std::make_shared<gpu_world>();
    const int n = boot.size(), self = boot.rank();
    w->n = n;
    w->self = self;
    w->scratch_bytes = opt.scratch_bytes;
    w->opt = opt;
    w->linger = opt.setup_timeout;
    w->node_size = opt.ranks_per_node;
    if (w->node_size < 0) throw error(errc::invalid_argument, fn + ": `opt.ranks_per_node` must be >= 0");
    if (w->node_size == 0) w->node_size = env_ranks_per_node(); // strict: a bad value throws
    w->topo = model::model_file_given() ? model::current() : model::gpu_cluster_topology(w->node_size);
    w->dev.assign(std::size_t(n), -1);
    w->dev[std::size_t(self)] = device;
    w->areas.assign(std::size_t(n), nullptr);
    w->scratch.assign(std::size_t(n), nullptr);
    w->streams.assign(std::size_t(n), nullptr);
    w->counts_dev.assign(std::size_t(n), nullptr);
    // The "v" collectives' counts as this rank's kernel reads them: private
    // device memory (no peer reads it), not part of the shared segment.
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&w->counts_dev[std::size_t(self)]),
                          sizeof(std::uint64_t) * std::size_t(n) * std::size_t(n)),
               "cudaMalloc (counts area)");

    lane_process_config cfg;
    cfg.scratch_bytes = opt.scratch_bytes;
    cfg.registered_bytes = opt.registered_bytes;
    cfg.setup_timeout = opt.setup_timeout;
    cfg.memory = cuda_ipc_provider();
    cfg.node_memory = posix_shm_provider();
    cfg.knob_prefix = "gpu::options::";
    cfg.size_name = "nranks";
    try {
        w->proc = std::make_unique<lane_process_world>(boot, cfg);
    } catch (const error& e) {
        throw error(e.code(), fn + ": " + e.what());
    }
    lane_process_world& pw = *w->proc;
    w->scratch[std::size_t(self)] = pw.scratch();

    // The node page, mapped for the device: the abort word and the failure records.
    const lane_mapping& node = pw.node_mapping();
    cuda_check(cudaHostRegister(node.base, node.bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
               "cudaHostRegister (the node page of shared memory)");
    w->node_registered = node.base;
    void* node_dev = nullptr;
    cuda_check(cudaHostGetDevicePointer(&node_dev, node.base, 0), "cudaHostGetDevicePointer");
    auto on_device = [&](const void* host) {
        return static_cast<std::byte*>(node_dev) + (static_cast<const std::byte*>(host) - node.base);
    };
    w->abort_word = pw.abort_word();
    w->faults = pw.fault_records();
    w->abort_dev = reinterpret_cast<std::uint32_t*>(on_device(w->abort_word));
    w->faults_dev = reinterpret_cast<lane_fault*>(on_device(w->faults));

    // The area table and the peer maps, on the device, as the kernel reads them.
    lane_rank_area** table = nullptr;
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&table), sizeof(void*) * std::size_t(n)), "cudaMalloc");
    w->table_device.push_back(device);
    w->tables.push_back(table);
    cuda_check(cudaMemcpy(table, pw.areas().data(), sizeof(void*) * std::size_t(n), cudaMemcpyHostToDevice),
               "cudaMemcpy");
    if (n > 1) {
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&w->maps_dev), sizeof(lane_peer_map) * std::size_t(n)),
                   "cudaMalloc");
        cuda_check(cudaMemcpy(w->maps_dev, pw.maps().data(), sizeof(lane_peer_map) * std::size_t(n),
                              cudaMemcpyHostToDevice),
                   "cudaMemcpy");
    }
    cuda_check(cudaStreamCreateWithFlags(&w->streams[std::size_t(self)], cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return w;
}

//! The checks make_communicator makes before it meets the other ranks.
inline void check_process_args(int rank, int nranks, int device, const std::string& fn) {
    if (nranks < 1 || nranks > max_lane_ranks)
        throw error(errc::invalid_argument, fn + ": `nranks` is " + std::to_string(nranks) + "; 1.." +
                                                std::to_string(max_lane_ranks) + " ranks are supported");
    if (rank < 0 || rank >= nranks)
        throw error(errc::invalid_argument, fn + ": `rank` is " + std::to_string(rank) + " but `nranks` is " +
                                                std::to_string(nranks) + " (ranks 0.." + std::to_string(nranks - 1) +
                                                ")");
    check_process_device(device, fn);
}

} // namespace detail

} // namespace chorus
