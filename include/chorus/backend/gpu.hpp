#pragma once
//! \file backend/gpu.hpp
//! The GPU backend: ranks are CUDA devices of one process, or several
//! "virtual ranks" on one device (NCCL refuses those; chorus is tested with
//! them). Stream-ordered: a collective is one kernel launch per rank on
//! that rank's stream; the kernel's blocks (one per channel) run the shared
//! rank program (exec/lane_env.hpp) and read peers' buffers directly
//! (device memory, peer access between distinct devices).
//!
//! Allocated once, when the communicators are made, never per call: each
//! rank's flag/descriptor area and scratch on its device, one table of
//! area pointers per device, and the abort word and failure records in
//! mapped pinned host memory (the host can abort running kernels and read
//! why a kernel failed). Every call registers its buffers in the kernel
//! itself, and each rank's collective counter lives in device memory, so a
//! launch captured in a CUDA graph runs correctly on every replay.
//!
//! Ranks sharing one device must be issued on different streams (their
//! kernels spin on each other and must run concurrently); with more than 8
//! ranks per device raise CUDA_DEVICE_MAX_CONNECTIONS (default 8) to at
//! least the rank count. Each wait is bounded by the communicator's
//! timeout and stops when the abort word is set, so a missing rank makes
//! the others fail, never hang.
//!
//! Include <chorus/gpu.hpp> from a CUDA translation unit (nvcc).

#if !defined(__CUDACC__)
#  error "chorus/backend/gpu.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "../algo/any_schedule.hpp"
#include "../algo/automatic.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "../core/error.hpp"
#include "../exec/lane_env.hpp"
#include "../kernels/collective.cuh"
#include "../model/cost.hpp"
#include "../model/file.hpp"
#include "../ops/operators.hpp"
#include "../ops/traits.hpp"
#include "gpu_checks.hpp"
#include "host_common.hpp"

namespace chorus {

namespace gpu {

//! Backend tag: ranks are CUDA devices (or virtual ranks sharing one).
struct device {
    static constexpr const char* name = "gpu";
};

//! A GPU rank's communicator: chorus::communicator<chorus::gpu::device>.
using communicator = chorus::communicator<device>;

//! What make_communicators allocates and assumes.
struct options {
    //! Scratch per rank, allocated once on its device. ring<> ReduceScatter
    //! and Reduce need 2 chunks per channel; direct<> in-place AllReduce
    //! needs the whole vector.
    std::size_t scratch_bytes = std::size_t(64) << 20;
    //! Ranks per (emulated) node for hierarchical<>: 0 takes
    //! CHORUS_RANKS_PER_NODE from the environment, else one node.
    int ranks_per_node = 0;
};

} // namespace gpu

namespace detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const std::string& what) {
    throw error(errc::internal, "chorus::gpu: " + what + " failed: " + cudaGetErrorName(e) + " (" +
                                    cudaGetErrorString(e) + ")");
}
inline void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw_cuda(e, what);
}

//! Makes `dev` current for a scope.
class device_guard {
public:
    explicit device_guard(int dev) {
        cuda_check(cudaGetDevice(&prev_), "cudaGetDevice");
        if (prev_ != dev) cuda_check(cudaSetDevice(dev), "cudaSetDevice");
    }
    device_guard(const device_guard&) = delete;
    device_guard& operator=(const device_guard&) = delete;
    ~device_guard() { (void)cudaSetDevice(prev_); }

private:
    int prev_ = 0;
};

inline mem_kind query_memory(const void* p, int& ptr_device) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        ptr_device = -1;
        return mem_kind::host;
    }
    ptr_device = a.device;
    if (a.type == cudaMemoryTypeDevice) return mem_kind::device;
    if (a.type == cudaMemoryTypeManaged) return mem_kind::managed;
    return mem_kind::host;
}

//! How many blocks of `kernel` device `dev` can hold at once (cached per
//! kernel and device: it does not change).
template <class Kernel>
int resident_blocks(Kernel kernel, int dev) {
    static std::atomic<int> cache[64] = {}; // 0: not asked yet
    if (dev >= 0 && dev < 64)
        if (const int v = cache[dev].load(std::memory_order_relaxed)) return v;
    int per_sm = 0, sms = 0;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, collective_block_threads, 0),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    const int v = per_sm * sms > 0 ? per_sm * sms : 1;
    if (dev >= 0 && dev < 64) cache[dev].store(v, std::memory_order_relaxed);
    return v;
}

//! The state the ranks of one make_communicators call share.
struct gpu_world {
    int n = 0;
    int node_size = 0;
    //! What automatic plans against: the CHORUS_MODEL file when one is
    //! given, else NVLink-class GPUs (model::gpu_cluster_topology).
    model::topology topo{};
    std::size_t scratch_bytes = 0;
    std::vector<int> dev;                       //!< per rank
    std::vector<lane_rank_area*> areas;         //!< per rank, on its device
    std::vector<void*> scratch;                 //!< per rank, on its device
    std::vector<cudaStream_t> streams;          //!< per rank: its stream for calls without one
    std::vector<int> table_device;              //!< devices with a table
    std::vector<lane_rank_area**> tables;       //!< per entry of table_device: the area pointers, on that device
    std::uint32_t* abort_word = nullptr;        //!< mapped pinned host memory
    lane_fault* faults = nullptr;               //!< mapped pinned host memory, [n]
    std::mutex m;
    std::string reason;

    int ranks_on_device(int d) const {
        int k = 0;
        for (int x : dev) k += x == d;
        return k;
    }
    lane_rank_area* const* table_for(int d) const {
        for (std::size_t i = 0; i < table_device.size(); ++i)
            if (table_device[i] == d) return tables[i];
        return nullptr;
    }
    bool aborted() const { return atomic_ref<std::uint32_t>(*abort_word).load(mo::memory_order_acquire) != 0; }
    void abort(const std::string& why) {
        {
            std::lock_guard<std::mutex> lk(m);
            if (reason.empty()) reason = why;
        }
        atomic_ref<std::uint32_t>(*abort_word).store(1, mo::memory_order_release);
    }

    ~gpu_world() {
        int prev = 0;
        (void)cudaGetDevice(&prev);
        // Kernels still queued on the users' streams use the areas and the
        // scratch: let every device finish before freeing them.
        for (int d : table_device) {
            (void)cudaSetDevice(d);
            (void)cudaDeviceSynchronize();
        }
        for (int r = 0; r < n; ++r) {
            if (r < int(dev.size())) (void)cudaSetDevice(dev[std::size_t(r)]);
            if (r < int(streams.size()) && streams[std::size_t(r)]) {
                (void)cudaStreamSynchronize(streams[std::size_t(r)]);
                (void)cudaStreamDestroy(streams[std::size_t(r)]);
            }
            if (r < int(areas.size()) && areas[std::size_t(r)]) (void)cudaFree(areas[std::size_t(r)]);
            if (r < int(scratch.size()) && scratch[std::size_t(r)]) (void)cudaFree(scratch[std::size_t(r)]);
        }
        for (auto* t : tables) (void)cudaFree(t);
        if (abort_word) (void)cudaFreeHost(abort_word);
        if (faults) (void)cudaFreeHost(faults);
        (void)cudaSetDevice(prev);
    }
};

} // namespace detail

//! A rank of a GPU communicator. A cheap, movable handle; every rank of a
//! make_communicators call shares one world. All ranks must issue the same
//! collectives in the same order; one rank's calls must be ordered (one
//! stream, or streams joined by events).
template <>
class communicator<gpu::device> : public detail::host_call_options {
public:
    communicator(std::shared_ptr<detail::gpu_world> world, int rank) : world_(std::move(world)), rank_(rank) {}

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return world_->n; }
    //! The CUDA device this rank runs on.
    int device() const noexcept { return world_->dev[std::size_t(rank_)]; }
    //! The stream calls without a stream argument use (owned by chorus).
    cudaStream_t stream() const noexcept { return world_->streams[std::size_t(rank_)]; }

    //! Stops every running and future collective of every rank: waiting
    //! kernels exit at their next poll; later calls throw.
    void abort(const std::string& why = "comm.abort() called") {
        world_->abort("rank " + std::to_string(rank_) + ": " + why);
    }
    bool broken() const { return world_->aborted(); }

    //! Waits for everything issued on this rank's own stream, then throws if
    //! any collective of this rank failed.
    void synchronize() {
        detail::device_guard g(device());
        detail::cuda_check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
        check();
    }
    //! Throws if a collective of this rank has failed (after the stream
    //! work it depends on has finished: synchronize the stream first).
    void check() const {
        const detail::lane_fault& f = world_->faults[std::size_t(rank_)];
        if (f.code != 0) throw_fault();
        if (world_->aborted()) {
            std::lock_guard<std::mutex> lk(world_->m);
            throw error(errc::aborted, "chorus::gpu: the communicator is broken (" +
                                           (world_->reason.empty() ? std::string("another rank failed") : world_->reason) +
                                           "); make new communicators");
        }
    }

    //! \internal Enqueues one collective on `stream` (the stream-ordered
    //! forms, collectives/gpu_stream.hpp) or on the communicator's own
    //! stream. Buffers were validated by the caller.
    template <class T, class Op>
    future launch(const policy& pol, collective coll, const T* in, T* out, std::uint64_t count, const Op& op, int root,
                  bool async, detail::stream_arg stream = {});

private:
    [[noreturn]] void throw_fault() const {
        std::string reason;
        {
            std::lock_guard<std::mutex> lk(world_->m);
            reason = world_->reason;
        }
        throw detail::gpu_fault_error(rank_, world_->faults, world_->n, reason);
    }

    std::shared_ptr<detail::gpu_world> world_;
    int rank_ = 0;
    detail::choice_memo choices_{}; //!< automatic's recent choices (launches come from one host thread)
};

template <class T, class Op>
future communicator<gpu::device>::launch(const policy& pol, collective coll, const T* in, T* out, std::uint64_t count,
                                         const Op& op, int root, bool async, detail::stream_arg stream_a) {
    const bool user = stream_a.given;
    cudaStream_t s = user ? static_cast<cudaStream_t>(stream_a.handle) : stream();
    if (world_->aborted()) check();
    const int dev = device();
    detail::device_guard guard(dev);
    const int n = size();
    if (count != 0) {
        int pd = -1;
        const char* in_name = coll == collective::broadcast ? "buf" : "in";
        detail::check_gpu_buffer(coll, in_name, detail::query_memory(in, pd), pd, dev);
        // Reduce: a rank other than the root passes no `out` (null here).
        if (coll != collective::broadcast && !(coll == collective::reduce && out == nullptr))
            detail::check_gpu_buffer(coll, "out", detail::query_memory(out, pd), pd, dev);
    }
    const detail::call_settings cs = issue();

    // One kernel per (element type, operator) runs every policy's schedule.
    auto enqueue = [&](const any_schedule& sch, const policy& p) {
        detail::lane_launch<T, Op, any_schedule> L{};
        L.sch = sch;
        L.world = {world_->table_for(dev), world_->abort_word, world_->faults, n};
        L.rank = rank_;
        L.in = in;
        L.out = out;
        const std::uint64_t need = sch.scratch_elems() * sizeof(T);
        if (need > world_->scratch_bytes)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + collective_name(coll) + ": this call needs " + std::to_string(need) +
                            " bytes of scratch per rank but the communicators were made with " +
                            std::to_string(world_->scratch_bytes) + " (gpu::options::scratch_bytes)");
        L.scratch = static_cast<T*>(world_->scratch[std::size_t(rank_)]);
        L.sig = {count, std::uint64_t(coll) | std::uint64_t(std::uint32_t(sch.channels())) << 8 |
                            std::uint64_t(std::uint32_t(root)) << 32,
                 detail::type_hash<T>(), detail::type_hash<Op>(), p.id()};
        L.timeout_ns = std::uint64_t(cs.timeout.count()) * 1000000ull;
        L.checked = cs.checked;
        L.op = op;
        // The blocks of every rank on this device spin on each other: all of
        // them must be resident at once, or the collective could only time out.
        const int blocks = world_->ranks_on_device(dev) * sch.channels();
        const int resident = detail::resident_blocks(detail::collective_kernel<T, Op>, dev);
        if (blocks > resident)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + collective_name(coll) + ": " +
                            std::to_string(world_->ranks_on_device(dev)) + " rank(s) on device " + std::to_string(dev) +
                            " x " + std::to_string(sch.channels()) + " channel(s) need " + std::to_string(blocks) +
                            " resident thread blocks, but the device holds " + std::to_string(resident) +
                            " of this kernel at once; use fewer channels (Algo's params) or fewer ranks per device");
        detail::collective_kernel<T, Op><<<sch.channels(), detail::collective_block_threads, 0, s>>>(L);
        detail::cuda_check(cudaGetLastError(), "launching the collective kernel");
    };

    if (coll == collective::barrier) {
        // Every rank registers and waits for every other: a direct<>
        // AllReduce of nothing.
        const policy d = policy::fixed(algorithm::direct);
        enqueue(make_fixed_schedule(d, schedule_args{collective::all_reduce, rank_, n, 0, 0, 1, false, 0}), d);
    } else {
        schedule_args a{coll, rank_, n, root, count, sizeof(T), false, world_->node_size};
        a.in_place = in_place_call<T>(coll, in, out, rank_, count);
        a.commutative = op_traits<Op>::commutative;
        a.topo = &world_->topo;
        a.scratch_limit_bytes = world_->scratch_bytes;
        enqueue(make_schedule(pol, a, &choices_), pol);
    }

    if (!async) {
        if (!user) synchronize(); // a call without a stream: wait, and report
        return future();
    }
    cudaEvent_t ev = nullptr;
    detail::cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    detail::cuda_check(cudaEventRecord(ev, s), "cudaEventRecord");
    auto state = std::shared_ptr<detail::completion>(new detail::completion(), [ev](detail::completion* c) {
        (void)cudaEventDestroy(ev);
        delete c;
    });
    state->device_event = ev;
    std::weak_ptr<detail::completion> weak = state;
    state->drive = [weak, ev, self = *this](bool block) {
        auto st = weak.lock();
        if (!st) return;
        {
            std::lock_guard<std::mutex> lk(st->m);
            if (st->done) return;
        }
        cudaError_t e = block ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return;
        }
        std::exception_ptr err;
        try {
            if (e != cudaSuccess) detail::throw_cuda(e, "waiting for a collective");
            self.check();
        } catch (...) {
            err = std::current_exception();
        }
        st->complete(err);
    };
    return future(std::move(state));
}

namespace gpu {

//! Makes one communicator per entry of `devices` (a device id may repeat:
//! several ranks on one GPU). Rank r runs on devices[r].
inline std::vector<communicator> make_communicators(const std::vector<int>& devices, const options& opt = {}) {
    using detail::cuda_check;
    if (devices.empty()) throw error(errc::invalid_argument, "chorus::gpu::make_communicators: `devices` is empty");
    if (int(devices.size()) > detail::max_lane_ranks)
        throw error(errc::invalid_argument, "chorus::gpu::make_communicators: `devices` has " +
                                                std::to_string(devices.size()) + " entries; at most " +
                                                std::to_string(detail::max_lane_ranks) + " ranks are supported");
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        throw error(errc::unavailable, std::string("chorus::gpu::make_communicators: no CUDA device is available (") +
                                           (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
    }
    for (std::size_t i = 0; i < devices.size(); ++i)
        if (devices[i] < 0 || devices[i] >= count)
            throw error(errc::invalid_argument, "chorus::gpu::make_communicators: `devices[" + std::to_string(i) +
                                                    "]` is " + std::to_string(devices[i]) + " but this process sees " +
                                                    std::to_string(count) + " device(s)");
    int prev = 0;
    cuda_check(cudaGetDevice(&prev), "cudaGetDevice");
    auto w = std::make_shared<detail::gpu_world>();
    w->n = int(devices.size());
    w->dev = devices;
    w->scratch_bytes = opt.scratch_bytes;
    w->node_size = opt.ranks_per_node;
    if (w->node_size == 0)
        if (const char* e = std::getenv("CHORUS_RANKS_PER_NODE")) w->node_size = std::atoi(e) > 0 ? std::atoi(e) : 0;
    w->topo = model::model_file_given() ? model::current() : model::gpu_cluster_topology(w->node_size);
    if (w->node_size < 0)
        throw error(errc::invalid_argument, "chorus::gpu::make_communicators: `ranks_per_node` must be >= 0");
    // Distinct devices read each other's memory: peer access both ways.
    for (int a : devices)
        for (int b : devices) {
            if (a == b) continue;
            int ok = 0;
            cuda_check(cudaDeviceCanAccessPeer(&ok, a, b), "cudaDeviceCanAccessPeer");
            if (!ok)
                throw error(errc::unavailable, "chorus::gpu::make_communicators: device " + std::to_string(a) +
                                                   " cannot access the memory of device " + std::to_string(b) +
                                                   " (no peer access); chorus::gpu needs peer access between distinct devices");
            detail::device_guard g(a);
            const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
            else cuda_check(e, "cudaDeviceEnablePeerAccess");
        }
    cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&w->abort_word), 64, cudaHostAllocMapped | cudaHostAllocPortable),
               "cudaHostAlloc");
    *w->abort_word = 0;
    cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&w->faults), sizeof(detail::lane_fault) * devices.size(),
                             cudaHostAllocMapped | cudaHostAllocPortable),
               "cudaHostAlloc");
    for (std::size_t r = 0; r < devices.size(); ++r) w->faults[r] = detail::lane_fault{};
    w->areas.assign(devices.size(), nullptr);
    w->scratch.assign(devices.size(), nullptr);
    w->streams.assign(devices.size(), nullptr);
    for (std::size_t r = 0; r < devices.size(); ++r) {
        detail::device_guard g(devices[r]);
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&w->areas[r]), sizeof(detail::lane_rank_area)), "cudaMalloc");
        cuda_check(cudaMemset(w->areas[r], 0, sizeof(detail::lane_rank_area)), "cudaMemset");
        if (opt.scratch_bytes) cuda_check(cudaMalloc(&w->scratch[r], opt.scratch_bytes), "cudaMalloc (scratch)");
        cuda_check(cudaStreamCreateWithFlags(&w->streams[r], cudaStreamNonBlocking), "cudaStreamCreate");
    }
    for (int d : devices) {
        if (w->table_for(d) != nullptr) continue;
        detail::device_guard g(d);
        detail::lane_rank_area** t = nullptr;
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&t), sizeof(void*) * devices.size()), "cudaMalloc");
        w->table_device.push_back(d);
        w->tables.push_back(t);
        cuda_check(cudaMemcpy(t, w->areas.data(), sizeof(void*) * devices.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    for (int d : devices) {
        detail::device_guard g(d);
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    (void)cudaSetDevice(prev);
    std::vector<communicator> comms;
    comms.reserve(devices.size());
    for (int r = 0; r < int(devices.size()); ++r) comms.emplace_back(w, r);
    return comms;
}

//! Makes `stream` wait (on the device) until the collective behind `f` has finished.
inline void stream_wait(cudaStream_t stream, const future& f) {
    if (f.device_event() == nullptr) {
        f.wait(); // a host operation: nothing to wait for on the device
        return;
    }
    detail::cuda_check(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(f.device_event()), 0),
                       "cudaStreamWaitEvent");
}

} // namespace gpu

// The contract of core/communicator.hpp, for one element type and operator.
static_assert(detail::collective_backend<gpu::communicator, float, sum>);

} // namespace chorus
