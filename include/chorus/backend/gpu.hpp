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
//! One process per GPU (make_communicator, backend/gpu_process.hpp): the
//! same transport over a gpu_world holding one local rank of a process
//! world (backend/lane_process.hpp) whose rank segments are CUDA IPC
//! memory and whose node page (abort word, failure records) is POSIX
//! shared memory registered for the device. A kernel reaches its peers'
//! buffers through lane_peer_map translation; a call whose buffers are
//! neither in this rank's registered area (comm.alloc) nor in one of its
//! registrations (comm.register_buffer) is staged: `in` copied into
//! the rank's shared scratch before the kernel, `out` copied back after
//! it, on the call's stream (plan_staging).
//!
//! Include <chorus/gpu.hpp> from a CUDA translation unit (nvcc).

#if !defined(__CUDACC__)
#  error "chorus/backend/gpu.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "../core/env.hpp"
#include "../core/element.hpp"
#include "../core/error.hpp"
#include "../core/log.hpp"
#include "../core/split_plan.hpp"
#include "../exec/lane_env.hpp"
#include "../exec/host_kernel.hpp"
#include "../kernels/collective.cuh"
#include "../kernels/p2p.cuh"
#include "../model/cost.hpp"
#include "../model/file.hpp"
#include "../ops/operators.hpp"
#include "../ops/traits.hpp"
#include "gpu_checks.hpp"
#include "host_common.hpp"
#include "lane_process.hpp"
#include "transport.hpp"

namespace chorus {

namespace gpu {

//! A registration of a user buffer (communicator::register_buffer): the
//! same value on every rank; 0 is none.
struct buffer_handle {
    std::uint64_t id = 0;
    explicit operator bool() const noexcept { return id != 0; }
    friend bool operator==(buffer_handle, buffer_handle) = default;
};

} // namespace gpu
namespace detail {
class gpu_transport;
class gpu_inter_nodes; // backend/gpu_nodes.hpp
}
namespace gpu {

//! Backend tag: ranks are CUDA devices (or virtual ranks sharing one).
//! communicator<gpu::device> runs on detail::gpu_transport; api<> adds
//! the rank's device and stream.
struct device {
    static constexpr const char* name = "gpu";
    using transport = detail::gpu_transport;
    template <class Comm>
    class api;
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
    //! One process per GPU (make_communicator) only: the rank's registered
    //! area, device memory its peers map, from which comm.alloc hands out
    //! zero-copy buffers. 0: none (every call is staged). Every rank
    //! passes the same value, and the same scratch_bytes.
    std::size_t registered_bytes = 0;
    //! make_communicators only: payload bytes per source of each rank's
    //! LL receive region (the low-latency protocol, algo/ll.hpp): calls
    //! moving at most this many bytes per rank pair run with it under
    //! automatic, deterministic<> and direct<{.proto = protocol::ll}>.
    //! Costs ll_region_bytes(ranks, ll_bytes) of device memory per rank
    //! (64 KiB, 8 ranks: 2 MiB). 0: no LL region, no LL protocol.
    std::size_t ll_bytes = std::size_t(64) << 10;
    //! One process per GPU only: how long each setup exchange waits for
    //! the other processes (they may start seconds apart under mpirun).
    std::chrono::milliseconds setup_timeout{60000};
    //! GPU ranks across nodes (make_communicator over an MPI communicator
    //! spanning several nodes, backend/gpu_nodes.hpp) without CUDA-aware
    //! MPI only: the pinned host buffer the inter-node step stages through,
    //! allocated once with the communicator, used in three chunk slots
    //! (device-to-host copy, MPI, host-to-device copy overlapped).
    std::size_t inter_staging_bytes = std::size_t(12) << 20;
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

//! The channels one rank may use per call where `devices` lists each
//! rank's device: every rank's blocks on a device must be resident at once
//! (gpu_transport::enqueue_local checks it per call), and a device holds at
//! least collective_min_blocks_per_sm blocks of the collective kernel per
//! SM (its __launch_bounds__), so per device that many x its SMs / its
//! ranks; the least over the devices (every rank then resolves a call
//! alike), clamped to 1 .. max_channels. What tuning fields left at 0 are
//! resolved against (schedule_args::channel_budget, algo/policy.hpp).
//! 8 ranks on one 132-SM H100/H200: 2 x 132 / 8 = 33, so 32.
inline int channel_budget_of(const std::vector<int>& devices) {
    int budget = max_channels;
    for (const int d : devices) {
        int ranks = 0;
        for (const int x : devices) ranks += x == d;
        int sms = 0;
        cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d), "cudaDeviceGetAttribute");
        budget = std::min(budget, collective_min_blocks_per_sm * sms / std::max(ranks, 1));
    }
    return std::max(budget, 1);
}

//! The state the ranks of one make_communicators call share.
struct gpu_world {
    int n = 0;
    int node_size = 0;
    //! What automatic plans against: the CHORUS_MODEL file when one is
    //! given, else NVLink-class GPUs (model::gpu_cluster_topology).
    model::topology topo{};
    std::size_t scratch_bytes = 0;
    //! schedule_args::channel_budget of every call (channel_budget_of; 0:
    //! one process per GPU, whose ranks cannot see each other's devices:
    //! fields left at 0 take the host values there).
    int channel_budget = 0;
    std::vector<int> dev;                       //!< per rank
    std::vector<lane_rank_area*> areas;         //!< per rank, on its device
    std::vector<void*> scratch;                 //!< per rank, on its device
    std::vector<cudaStream_t> streams;          //!< per rank: its stream for calls without one
    std::vector<int> table_device;              //!< devices with a table
    std::vector<lane_rank_area**> tables;       //!< per entry of table_device: the area pointers, on that device
    std::vector<std::uint64_t*> ll;             //!< per rank, on its device: its LL receive region (none: empty)
    std::vector<std::uint64_t**> ll_tables;     //!< per entry of table_device: the LL region pointers, on that device
    std::uint64_t ll_slot_words = 0;            //!< words of one LL slot (lane_world::ll_slot_words)
    std::uint64_t ll_limit = 0;                 //!< payload bytes per source the regions hold (0: no LL)
    std::uint32_t* abort_word = nullptr;        //!< mapped pinned host memory
    lane_fault* faults = nullptr;               //!< mapped pinned host memory, [n]
    //! Per rank (one process per GPU: `self` only): the "v" collectives'
    //! counts as that rank's kernel reads them, n * n entries of private
    //! device memory of its device, rewritten on the call's stream before
    //! each such call (gpu_transport::enqueue).
    std::vector<std::uint64_t*> counts_dev;
    gpu::options opt{}; //!< what the world was made with (split makes its worlds alike)
    std::mutex m;
    std::string reason;

    //! split's rendezvous (every rank a thread of this process): round
    //! `split_round` collects one color and key per rank; the rank that
    //! arrives last builds a world per color and publishes it; the round
    //! ends when every rank took its result.
    std::mutex split_m;
    std::condition_variable split_cv;
    std::uint64_t split_round = 1;
    std::vector<std::uint64_t> split_calls;  //!< per rank: splits it called
    std::vector<int> split_color, split_key; //!< per rank, this round
    std::vector<char> split_present;         //!< per rank: arrived this round
    int split_arrived = 0, split_taken = 0;
    bool split_built = false;
    split_plan split_result;
    std::vector<std::shared_ptr<gpu_world>> split_worlds; //!< per group of split_result
    std::exception_ptr split_failure;

    // One process per GPU (make_communicator): the vectors above have n
    // entries, of which only this process's rank (`self`) is filled; its
    // area and scratch live in proc's rank segment (CUDA IPC memory, not
    // freed here), abort_word and faults in proc's node page (host
    // pointers; the device uses the *_dev ones).
    std::unique_ptr<lane_process_world> proc; //!< null: every rank in this process
    int self = -1;
    std::uint32_t* abort_dev = nullptr;  //!< the abort word as the device sees it
    lane_fault* faults_dev = nullptr;    //!< the failure records as the device sees them
    lane_peer_map* maps_dev = nullptr;   //!< [n], device memory: lane_world::maps
    void* node_registered = nullptr;     //!< the node page, while cudaHostRegister'ed
    std::chrono::milliseconds linger{0}; //!< how long destruction waits for the peers to leave
    //! GPU ranks across nodes: the inter-node half (backend/gpu_nodes.hpp);
    //! this world is then the process world of this rank's node. Null:
    //! every rank of the communicator is in this world.
    std::shared_ptr<gpu_inter_nodes> nodes;
    int nodes_rank = 0, nodes_size = 0; //!< across nodes: this rank and the rank count of the whole communicator

    //! What a kernel of rank `r`'s device is given as its world.
    lane_world device_world(int d) const {
        if (!proc) {
            lane_world w{table_for(d), abort_word, faults, n, nullptr};
            for (std::size_t i = 0; i < table_device.size() && ll_limit != 0; ++i)
                if (table_device[i] == d) {
                    w.ll = ll_tables[i];
                    w.ll_slot_words = ll_slot_words;
                }
            return w;
        }
        return {table_for(d), abort_dev, faults_dev, n, maps_dev};
    }

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
            if (r < int(dev.size()) && dev[std::size_t(r)] >= 0) (void)cudaSetDevice(dev[std::size_t(r)]);
            if (r < int(streams.size()) && streams[std::size_t(r)]) {
                (void)cudaStreamSynchronize(streams[std::size_t(r)]);
                (void)cudaStreamDestroy(streams[std::size_t(r)]);
            }
            if (r < int(counts_dev.size()) && counts_dev[std::size_t(r)]) (void)cudaFree(counts_dev[std::size_t(r)]);
            if (proc) continue; // the area and scratch are proc's
            if (r < int(areas.size()) && areas[std::size_t(r)]) (void)cudaFree(areas[std::size_t(r)]);
            if (r < int(scratch.size()) && scratch[std::size_t(r)]) (void)cudaFree(scratch[std::size_t(r)]);
            if (r < int(ll.size()) && ll[std::size_t(r)]) (void)cudaFree(ll[std::size_t(r)]);
        }
        for (auto* t : tables) (void)cudaFree(t);
        for (auto* t : ll_tables) (void)cudaFree(t);
        if (proc) {
            // A peer's kernel may still read this rank's flags to finish
            // its last wait: free this rank's segment only once every peer
            // has left (or died), or after the setup timeout.
            proc->mark_left();
            const auto until = std::chrono::steady_clock::now() + linger;
            while (!proc->peers_left() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (maps_dev) (void)cudaFree(maps_dev);
            if (node_registered) (void)cudaHostUnregister(node_registered);
            // Marks this rank as left, stops the watcher, closes the IPC
            // mappings and frees this rank's segment (on its device).
            if (self >= 0 && self < int(dev.size())) (void)cudaSetDevice(dev[std::size_t(self)]);
            proc.reset();
        } else {
            if (abort_word) (void)cudaFreeHost(abort_word);
            if (faults) (void)cudaFreeHost(faults);
        }
        (void)cudaSetDevice(prev);
    }
};

} // namespace detail

namespace detail {

//! Group launch (collectives/gpu_group.hpp): one call queued by an open
//! group, launched at its end together with the calls of the same kind
//! (element type and operator) next to it.
struct gpu_group_item {
    virtual ~gpu_group_item() = default;
    const void* kind = nullptr; //!< one per (T, Op): calls of one kind may share a launch
    int capacity = 1;           //!< calls of this kind one launch carries
    //! Launches items[0, n) (all of this kind, n <= capacity; this is
    //! items[0]) on `st` as one collective_kernel.
    virtual void launch(const gpu_group_item* const* items, std::size_t n, cudaStream_t st) const = 0;
};

template <class T, class Op>
struct gpu_group_call final : gpu_group_item {
    inline static const char tag = 0; //!< its address: this (T, Op)'s kind
    lane_launch<T, Op, any_schedule> L{};
    gpu_group_call() {
        kind = &tag;
        capacity = group_kernel_calls<T, Op>;
    }
    void launch(const gpu_group_item* const* items, std::size_t n, cudaStream_t st) const override {
        using launch_t = lane_launch<T, Op, any_schedule>;
        static_assert(std::is_trivially_copyable_v<launch_t> && sizeof(launch_t) % 8 == 0,
                      "chorus: a launch descriptor is written to the device in 8-byte words");
        collective_params<T, Op> P{};
        P.first = L;
        P.blocks = L.sch.channels();
        P.more_count = int(n) - 1;
        if (n == 1) {
            collective_kernel<T, Op><<<P.blocks, collective_block_threads, 0, st>>>(P);
            cuda_check(cudaGetLastError(), "launching the collective kernel");
            return;
        }
        // Calls 1 .. n-1: their descriptors in device memory allocated on
        // the stream, written there by counts_fill_kernel launches carrying
        // the bytes as parameters (a CUDA graph captures the values, and the
        // host copy may go at once; cudaMemcpyAsync from pageable memory is
        // neither captured by value nor asynchronous), freed on the stream
        // after the kernel. All three are stream-ordered and capturable.
        const std::size_t words_per = sizeof(launch_t) / 8;
        std::vector<std::uint64_t> words((n - 1) * words_per);
        for (std::size_t i = 1; i < n; ++i) {
            const launch_t& Li = static_cast<const gpu_group_call&>(*items[i]).L;
            std::memcpy(words.data() + (i - 1) * words_per, &Li, sizeof(launch_t));
            P.blocks = std::max(P.blocks, Li.sch.channels());
        }
        void* more = nullptr;
        cuda_check(cudaMallocAsync(&more, words.size() * 8, st),
                   "cudaMallocAsync (a group launch's call descriptors)");
        for (std::size_t first = 0; first < words.size(); first += counts_piece_max) {
            counts_piece piece{};
            piece.dst = static_cast<std::uint64_t*>(more) + first;
            piece.n = std::uint32_t(std::min<std::size_t>(counts_piece_max, words.size() - first));
            std::memcpy(piece.v, words.data() + first, std::size_t(piece.n) * 8);
            counts_fill_kernel<><<<1, counts_fill_threads, 0, st>>>(piece);
            cuda_check(cudaGetLastError(), "launching the kernel writing a group launch's call descriptors");
        }
        P.more = static_cast<const launch_t*>(more);
        collective_kernel<T, Op><<<P.blocks, collective_block_threads, 0, st>>>(P);
        const cudaError_t launched = cudaGetLastError();
        cuda_check(cudaFreeAsync(more, st), "cudaFreeAsync (a group launch's call descriptors)");
        cuda_check(launched, "launching the collective kernel (a group launch)");
    }
};

//! A rank's open group: nesting depth, its stream, the calls queued.
//! Shared by the copies of one rank's transport (the communicator's
//! handle and the futures' copies).
struct gpu_group_state {
    int depth = 0;
    cudaStream_t stream = nullptr;
    bool bypass = false; //!< set while a call that cannot be grouped runs (across nodes: its local parts)
    std::vector<std::unique_ptr<gpu_group_item>> queued;
};

//! The GPU transport (backend/transport.hpp): a rank of a gpu_world. A
//! cheap handle; every rank of a make_communicators call shares one world.
//! One rank's calls must be ordered (one stream, or streams joined by events).
class gpu_transport {
public:
    using ordering = stream_ordered;

    gpu_transport(std::shared_ptr<gpu_world> world, int rank) : world_(std::move(world)), rank_(rank) {}

    //! This rank and the rank count of the whole communicator (across
    //! nodes: of every node; the world holds this node's ranks).
    int rank() const noexcept;
    int size() const noexcept;
    //! This rank in its world (across nodes: its index inside its node).
    int local_rank() const noexcept { return rank_; }
    const std::shared_ptr<gpu_world>& world() const noexcept { return world_; }
    int node_size() const noexcept { return world_->node_size; }
    const model::topology& topology() const noexcept { return world_->topo; }
    //! Scratch was allocated once per rank: automatic leaves out what needs more.
    std::uint64_t scratch_limit_bytes() const noexcept { return world_->scratch_bytes; }
    //! Peers read each other's buffers directly.
    std::uint64_t node_window_bytes() const noexcept { return 0; }
    //! What the LL receive regions hold per source (0: none; one process
    //! per GPU has none yet): schedule_args::ll_limit_bytes.
    std::uint64_t ll_limit_bytes() const noexcept { return world_->proc ? 0 : world_->ll_limit; }
    //! What tuning fields left at 0 are chosen against: schedule_args::channel_budget.
    int channel_budget() const noexcept { return world_->channel_budget; }
    //! The CUDA device this rank runs on.
    int device() const noexcept { return world_->dev[std::size_t(rank_)]; }
    //! The stream calls without a stream argument use (owned by chorus).
    cudaStream_t stream() const noexcept { return world_->streams[std::size_t(rank_)]; }

    //! CHORUS_DEBUG=INFO: how this rank reaches its peers (the communicator
    //! calls it after its own setup line).
    void log_setup() const {
        const int me = device();
        if (world_->proc) {
            log_line(log_level::info, rank_, size(),
                     "transport: one process per GPU: device %d; scratch %s and registered area %s per rank, "
                     "shared by CUDA IPC (peers' memory opened with cudaIpcOpenMemHandle, pointers translated); "
                     "abort word and failure records in host shared memory mapped for the device; buffers outside "
                     "the registered area and register_buffer's registrations are staged through the scratch",
                     me, bytes_text(world_->scratch_bytes).text, bytes_text(world_->proc->registered_bytes()).text);
            return;
        }
        std::vector<int> same, other;
        for (int q = 0; q < world_->n; ++q)
            if (q != rank_) (world_->dev[std::size_t(q)] == me ? same : other).push_back(q);
        log_line(log_level::info, rank_, size(),
                 "transport: device %d (%d rank(s) on it); scratch %s per rank; a channel is a block of %d threads",
                 me, world_->ranks_on_device(me), bytes_text(world_->scratch_bytes).text, collective_block_threads);
        if (!same.empty())
            log_line(log_level::info, rank_, size(),
                     "transport: peers %s (same device: virtual ranks): device memory, read directly",
                     rank_list_text(same.data(), same.size()).c_str());
        if (!other.empty())
            log_line(log_level::info, rank_, size(),
                     "transport: peers %s (other devices): P2P (CUDA peer access, enabled both ways)",
                     rank_list_text(other.data(), other.size()).c_str());
    }

    //! Stops every running and future collective of every rank: waiting
    //! kernels exit at their next poll; later calls throw.
    void abort(errc, const std::string& why) { world_->abort(why); }
    bool broken() const { return world_->aborted(); }
    std::string reason() const {
        std::lock_guard<std::mutex> lk(world_->m);
        return world_->reason.empty() ? std::string("another rank failed") : world_->reason;
    }

    //! Waits for everything issued on this rank's own stream, then throws if
    //! any collective of this rank failed.
    void synchronize() const {
        if (grouping()) group_flush(); // inside a group: launch what it queued, then wait for it
        device_guard g(device());
        cuda_check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
        check();
    }
    //! Throws if a collective of this rank has failed (after the stream
    //! work it depends on has finished: synchronize the stream first).
    void check() const {
        const lane_fault& f = world_->faults[std::size_t(rank_)];
        // One process per GPU: a peer process that died (the watcher set
        // the abort word) is reported as such, naming it.
        if (world_->proc && (f.code != 0 || world_->aborted()))
            if (auto e = world_->proc->failure(); e && e->code() == errc::peer_failed) throw *e;
        if (f.code != 0) {
            std::string why;
            {
                std::lock_guard<std::mutex> lk(world_->m);
                why = world_->reason;
            }
            throw gpu_fault_error(rank_, world_->faults, world_->n, why);
        }
        if (world_->aborted())
            throw error(errc::aborted, "chorus::gpu: the communicator is broken (" + reason() + "); make new communicators");
    }

    //! Buffers must be device memory of this rank's device (or managed).
    //! The exchange collectives: `count` is in.size() (AllToAll: per
    //! peer), and `out` may be empty (null) while `in` is not, or the
    //! other way round (zero counts): an empty buffer is not looked at.
    void check_launch(collective coll, const void* in, const void* out, std::uint64_t count, bool) const {
        const bool exchange = is_exchange(coll);
        if (count == 0 && !(exchange && out != nullptr)) return;
        device_guard guard(device());
        int pd = -1;
        const char* in_name = coll == collective::broadcast ? "buf" : "in";
        if (count != 0) check_gpu_buffer(coll, in_name, query_memory(in, pd), pd, device());
        if (coll == collective::broadcast) return;
        // Reduce: a rank other than the root passes no `out` (null here).
        if (out == nullptr && (coll == collective::reduce || exchange)) return;
        check_gpu_buffer(coll, "out", query_memory(out, pd), pd, device());
    }

    //! Enqueues one collective on `stream` (null: the rank's own): one
    //! kernel per (element type, operator) runs every policy's schedule.
    //! Across nodes: enqueue_across_nodes (comm/gpu_nodes.hpp).
    template <class T, class Op, class Schedules>
    void enqueue(const call& c, const Op& op, Schedules& s, void* stream);
    //! \internal One collective of this world's ranks (`c` planned for them).
    template <class T, class Op, class Schedules>
    void enqueue_local(const call& c, const Op& op, Schedules& s, void* stream);

    //! A future that completes when `stream` (null: the rank's own) has
    //! run everything enqueued so far, and reports this rank's faults.
    future completion(void* stream) const;

    //! One process per GPU: `bytes` of the rank's registered area (device
    //! memory peers map: zero-copy), and its release. `fn` names the
    //! caller in errors.
    void* alloc_registered(std::uint64_t bytes, const std::string& fn) const {
        require_process(fn);
        try {
            return world_->proc->allocate_registered(bytes);
        } catch (const error& e) {
            throw error(e.code(), fn + ": " + e.what());
        }
    }
    void free_registered(const void* p, const std::string& fn, const char* arg) const {
        require_process(fn);
        try {
            world_->proc->free_registered(p, std::string("`") + arg + "`");
        } catch (const error& e) {
            throw error(e.code(), fn + ": " + e.what());
        }
    }
    //! One process per GPU: registers [p, p + bytes) of the rank's device
    //! memory (collective, blocking: see register_buffer), and its
    //! deregistration. Both wait for the rank's device to finish all its
    //! work first, and then copy the rank's new peer maps to the device.
    std::uint64_t register_range(const void* p, std::uint64_t bytes, const std::string& fn) const {
        require_process(fn);
        device_guard guard(device());
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before a registration)");
        try {
            const std::uint64_t h = world_->proc->register_range(p, bytes, "`buf`");
            upload_maps();
            return h;
        } catch (const error& e) {
            throw error(e.code(), fn + ": " + e.what());
        }
    }
    void deregister_range(std::uint64_t handle, const std::string& fn) const {
        require_process(fn);
        device_guard guard(device());
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before a deregistration)");
        try {
            world_->proc->deregister_range(handle, "`handle`");
            upload_maps();
        } catch (const error& e) {
            upload_maps_noexcept(); // the maps may have changed before a later wait failed
            throw error(e.code(), fn + ": " + e.what());
        }
    }
    //! True for a communicator of make_communicator (one process per GPU).
    bool one_process_per_gpu() const noexcept { return world_->proc != nullptr; }

    // Point-to-point (collectives/gpu_p2p.hpp, protocol in exec/lane_p2p.hpp).

    //! Enqueues one send (is_send) or receive of `count` elements at `buf`
    //! to or from `peer` on `stream` (null: the rank's own): one block of
    //! p2p_kernel. The pair's message numbers live in the rank areas (a
    //! graph replay is the next message). One process per GPU: a send
    //! whose `buf` is neither in the registered area (comm.alloc) nor
    //! registered (comm.register_buffer) is staged,
    //! copied into the start of the rank's shared scratch on the stream
    //! before the kernel (so it uses the scratch like a collective: a
    //! rank's calls must be ordered); one larger than the scratch is
    //! refused, naming `buf`. A receive writes into its own memory: any
    //! device buffer of the rank's device. `peer` was checked by the caller.
    template <class T>
    void enqueue_p2p(bool is_send, T* buf, std::uint64_t count, int peer, call_settings cs, void* stream_handle) {
        const std::string fn = is_send ? "chorus::send" : "chorus::recv";
        if (grouping()) group_check_stream(stream_handle, is_send ? "send" : "recv");
        if (world_->nodes)
            throw error(errc::invalid_argument, fn + ": not available on a GPU communicator across nodes (send and "
                                                     "receive run inside one node only)");
        cudaStream_t st = stream_handle != nullptr ? static_cast<cudaStream_t>(stream_handle) : stream();
        const int dev = device();
        device_guard guard(dev);
        if (count > std::numeric_limits<std::uint64_t>::max() / sizeof(T))
            throw error(errc::invalid_argument, fn + ": `buf` has " + std::to_string(count) +
                                                    " elements, more bytes than 64 bits count");
        const std::uint64_t bytes = count * sizeof(T);
        if (count != 0) {
            int pd = -1;
            check_gpu_buffer(is_send ? "send" : "recv", "buf", query_memory(buf, pd), pd, dev);
        }
        lane_p2p_launch L{};
        L.world = world_->device_world(dev);
        L.rank = rank_;
        L.peer = peer;
        L.is_send = is_send;
        L.buf = const_cast<void*>(static_cast<const void*>(buf));
        L.count = count;
        L.elem_bytes = sizeof(T);
        L.type_id = type_hash<T>();
        L.timeout_ns = std::uint64_t(cs.timeout.count()) * 1000000ull;
        if (world_->proc && is_send && count != 0 && !world_->proc->reachable(buf, bytes)) {
            if (bytes > world_->scratch_bytes)
                throw error(errc::invalid_argument,
                            fn + ": `buf` (" + std::to_string(bytes) + " bytes) is neither in this rank's "
                                 "registered area (comm.alloc) nor registered (comm.register_buffer), so it is staged through the rank's scratch, which holds " +
                                 std::to_string(world_->scratch_bytes) + " bytes (gpu::options::scratch_bytes); "
                                 "send from comm.alloc or registered memory, or raise scratch_bytes");
            void* staged = world_->scratch[std::size_t(rank_)];
            group_flush(); // a group's queued calls use the scratch first
            cuda_check(cudaMemcpyAsync(staged, buf, std::size_t(bytes), cudaMemcpyDefault, st),
                       "cudaMemcpyAsync (staging a send's `buf` through the shared scratch)");
            L.buf = staged;
        }
        group_flush(); // not grouped: after the calls a group queued before it
        p2p_kernel<><<<1, collective_block_threads, 0, st>>>(L);
        cuda_check(cudaGetLastError(), is_send ? "launching the send kernel" : "launching the recv kernel");
    }

    // Group launch (collectives/gpu_group.hpp).

    //! Opens (or, on the same stream, nests) this rank's group on `stream`
    //! (null: the rank's own stream). Throws errc::invalid_argument when a
    //! group is open on another stream.
    void group_start(cudaStream_t stream_handle) {
        const cudaStream_t st = stream_handle != nullptr ? stream_handle : stream();
        if (group_->depth > 0 && st != group_->stream)
            throw error(errc::invalid_argument, "chorus::gpu::group_start: a group is already open on this "
                                                "communicator on another stream (`stream`)");
        if (group_->depth == 0) group_->stream = st;
        ++group_->depth;
    }
    //! Closes one level; the outermost launches every call queued, in
    //! order, consecutive calls of one kind sharing a launch. Throws
    //! errc::invalid_argument when no group is open.
    void group_end() {
        if (group_->depth == 0)
            throw error(errc::invalid_argument, "chorus::gpu::group_end: no group is open on this communicator");
        if (--group_->depth == 0) group_flush();
    }
    //! Closes one level launching nothing: every call queued so far is
    //! dropped (how many is returned). For a group left by an exception.
    std::size_t group_drop() noexcept {
        const std::size_t n = group_->queued.size();
        group_->queued.clear();
        if (group_->depth > 0) --group_->depth;
        return n;
    }
    //! True while a group is open on this rank.
    bool in_group() const noexcept { return group_->depth > 0; }

    //! Collective over the ranks of this world (threads of this process):
    //! the world of this rank's color and its rank there (null world for
    //! a negative color). Waits at most `timeout` for the other ranks.
    std::pair<std::shared_ptr<gpu_world>, int> split(int color, int key, std::chrono::milliseconds timeout) const;

private:
    //! One process per GPU: the device copy of this rank's peer maps
    //! (lane_world::maps) from the process world's (no kernel of the rank
    //! may run: the caller synchronized the device).
    void upload_maps() const {
        if (world_->maps_dev == nullptr) return;
        cuda_check(cudaMemcpy(world_->maps_dev, world_->proc->maps().data(),
                              sizeof(lane_peer_map) * std::size_t(world_->n), cudaMemcpyHostToDevice),
                   "cudaMemcpy (the peer maps)");
    }
    void upload_maps_noexcept() const noexcept {
        try {
            upload_maps();
        } catch (...) {
        }
    }
    void require_process(const std::string& fn) const {
        if (!world_->proc)
            throw error(errc::invalid_argument,
                        fn + ": this communicator was made by gpu::make_communicators (every rank in this process "
                             "reads the others' device memory directly: pass any cudaMalloc memory); registered "
                             "memory is for gpu::make_communicator (one process per GPU)");
    }
    //! One process per GPU: where this call's `in` and `out` run (the
    //! user's when peers can reach them, else copies in the shared
    //! scratch) and where the schedule's scratch starts; what to copy
    //! before the kernel (copy_in_bytes from copy_in_src to copy_in_dst)
    //! and after it (copy_back_bytes from run_out to the user's `out`).
    struct staged {
        const void* run_in;
        void* run_out;
        void* schedule_scratch;
        const void* copy_in_src = nullptr;
        void* copy_in_dst = nullptr;
        std::uint64_t copy_in_bytes = 0;
        std::uint64_t copy_back_bytes = 0;
    };
    //! The staging plan of one call (nothing is copied yet). Throws
    //! errc::invalid_argument when the scratch is too small.
    staged stage(const call& c, std::uint64_t elem_bytes, std::uint64_t schedule_scratch_elems) const;

    //! Inside a group: a call on another stream than the group's is refused.
    void group_check_stream(void* stream_handle, const char* fn) const {
        const cudaStream_t st = stream_handle != nullptr ? static_cast<cudaStream_t>(stream_handle) : stream();
        if (st != group_->stream)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + fn + ": inside a chorus::gpu::group every call of the communicator "
                            "must run on the group's stream, and `stream` is another (a call without a stream runs "
                            "on the rank's own stream)");
    }
    //! Launches the calls queued by the open group (if any), in order:
    //! runs of consecutive calls of one kind, up to its capacity, as one
    //! launch each. The queue is empty afterwards, even when a launch fails.
    void group_flush() const {
        if (group_->queued.empty()) return;
        std::vector<std::unique_ptr<gpu_group_item>> items = std::move(group_->queued);
        group_->queued.clear();
        device_guard guard(device());
        std::vector<const gpu_group_item*> run;
        for (std::size_t i = 0; i < items.size();) {
            std::size_t j = i + 1;
            while (j < items.size() && items[j]->kind == items[i]->kind && j - i < std::size_t(items[i]->capacity)) ++j;
            run.clear();
            for (std::size_t k = i; k < j; ++k) run.push_back(items[k].get());
            items[i]->launch(run.data(), run.size(), group_->stream);
            i = j;
        }
    }
    //! Runs the calls that cannot be grouped (across nodes: their local
    //! parts) past the open group.
    struct group_bypass {
        gpu_group_state& g;
        explicit group_bypass(gpu_group_state& s) : g(s) { g.bypass = true; }
        ~group_bypass() { g.bypass = false; }
        group_bypass(const group_bypass&) = delete;
        group_bypass& operator=(const group_bypass&) = delete;
    };
    bool grouping() const noexcept { return group_->depth > 0 && !group_->bypass; }

    std::shared_ptr<gpu_world> world_;
    int rank_ = 0;
    std::shared_ptr<gpu_group_state> group_ = std::make_shared<gpu_group_state>();
};

inline int gpu_transport::rank() const noexcept { return world_->nodes ? world_->nodes_rank : rank_; }
inline int gpu_transport::size() const noexcept { return world_->nodes ? world_->nodes_size : world_->n; }

inline gpu_transport::staged gpu_transport::stage(const call& c, std::uint64_t eb,
                                                  std::uint64_t sched_elems) const {
    const collective coll = c.coll;
    std::byte* const scratch = static_cast<std::byte*>(world_->scratch[std::size_t(rank_)]);
    staged r{c.in, c.out, scratch};
    lane_process_world& pw = *world_->proc;
    const std::uint64_t n = std::uint64_t(world_->n);
    const std::uint64_t in_len = coll == collective::reduce_scatter ? c.count * n : c.count;
    const std::uint64_t out_len = c.out == nullptr ? 0 : coll == collective::all_gather ? c.count * n : c.count;
    const bool in_ok = c.in == nullptr || pw.reachable(c.in, in_len * eb);
    const bool out_ok = c.out == nullptr || pw.reachable(c.out, out_len * eb);
    const std::string knob = "gpu::options::scratch_bytes";
    if (is_exchange(coll) && c.count != 0 && !((c.in == nullptr || pw.reachable(c.in, 1)) &&
                                               (c.out == nullptr || pw.reachable(c.out, 1))))
        throw error(errc::invalid_argument,
                    std::string("chorus::") + collective_name(coll) + ": with one process per GPU this collective "
                        "runs only on buffers from comm.alloc or comm.register_buffer (it is not staged)");
    // (An exchange's extents are its counts': the kernel refuses any
    // part of them outside what its peers mapped, status::unreachable.)
    if (c.count == 0 || is_exchange(coll) || (in_ok && out_ok)) {
        if (sched_elems * eb > world_->scratch_bytes)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + collective_name(coll) + ": this call needs " +
                            std::to_string(sched_elems * eb) + " bytes of scratch per rank but the communicator was "
                            "made with " + std::to_string(world_->scratch_bytes) + " (" + knob + ")");
        return r; // zero-copy (nothing moves at count 0)
    }
    if (c.args.in_place) {
        // One buffer laid out as the user's, so the call stays in place
        // and runs the schedule already chosen for it.
        const auto* in = static_cast<const std::byte*>(c.in);
        const auto* out = static_cast<const std::byte*>(c.out);
        const std::byte* lo = std::min(in, out);
        const std::byte* hi = std::max(in + in_len * eb, out + out_len * eb);
        const std::uint64_t elems = std::uint64_t(hi - lo) / eb;
        const lane_staging_plan p = plan_staging(sched_elems, elems, elems, eb, true, world_->scratch_bytes, knob);
        std::byte* base = scratch + p.in_offset_bytes;
        r.copy_in_src = lo;
        r.copy_in_dst = base;
        r.copy_in_bytes = std::uint64_t(hi - lo);
        r.run_in = base + (in - lo);
        r.run_out = base + (out - lo);
        r.schedule_scratch = scratch + p.schedule_offset_bytes;
        r.copy_back_bytes = out_len * eb;
        return r;
    }
    const lane_staging_plan p =
        plan_staging(sched_elems, in_ok ? 0 : in_len, out_ok ? 0 : out_len, eb, false, world_->scratch_bytes, knob);
    if (!in_ok) {
        r.run_in = scratch + p.in_offset_bytes;
        r.copy_in_src = c.in;
        r.copy_in_dst = scratch + p.in_offset_bytes;
        r.copy_in_bytes = in_len * eb;
    }
    if (!out_ok) {
        r.run_out = scratch + p.out_offset_bytes;
        r.copy_back_bytes = out_len * eb;
    }
    r.schedule_scratch = scratch + p.schedule_offset_bytes;
    return r;
}

template <class T, class Op, class Schedules>
void enqueue_across_nodes(gpu_transport& t, const call& c, const Op& op, Schedules& s, void* stream_handle);

template <class T, class Op, class Schedules>
void gpu_transport::enqueue(const call& c, const Op& op, Schedules& s, void* stream_handle) {
    if (grouping()) group_check_stream(stream_handle, collective_name(c.coll));
    if (world_->nodes) {
        if (grouping()) {
            // Across nodes: not grouped; launched after the calls queued before it.
            group_flush();
            const group_bypass bypass(*group_);
            enqueue_across_nodes<T>(*this, c, op, s, stream_handle);
            return;
        }
        enqueue_across_nodes<T>(*this, c, op, s, stream_handle);
    } else {
        enqueue_local<T>(c, op, s, stream_handle);
    }
}

template <class T, class Op, class Schedules>
void gpu_transport::enqueue_local(const call& c, const Op& op, Schedules& s, void* stream_handle) {
    cudaStream_t st = stream_handle != nullptr ? static_cast<cudaStream_t>(stream_handle) : stream();
    const int dev = device();
    device_guard guard(dev);
    const collective coll = c.coll;
    const auto& sch = s.mine();
    lane_launch<T, Op, std::remove_cvref_t<decltype(sch)>> L{};
    L.sch = sch;
    L.world = world_->device_world(dev);
    L.rank = rank_;
    L.in = static_cast<const T*>(c.in);
    L.out = static_cast<T*>(c.out);
    staged stg{c.in, c.out, world_->scratch[std::size_t(rank_)]};
    if (world_->proc) {
        // One process per GPU: peers reach only this rank's registered
        // area and scratch; anything else is staged (copied just before
        // the launch below, once every check passed).
        stg = stage(c, sizeof(T), sch.scratch_elems());
        L.in = static_cast<const T*>(stg.run_in);
        L.out = static_cast<T*>(stg.run_out);
    } else {
        const std::uint64_t need = sch.scratch_elems() * sizeof(T);
        if (need > world_->scratch_bytes)
            throw error(errc::invalid_argument,
                        std::string("chorus::") + collective_name(coll) + ": this call needs " + std::to_string(need) +
                            " bytes of scratch per rank but the communicators were made with " +
                            std::to_string(world_->scratch_bytes) + " (gpu::options::scratch_bytes)");
    }
    L.scratch = static_cast<T*>(stg.schedule_scratch);
    // What ranks compare: a barrier runs (and names) the direct<> schedule.
    const policy& p = coll == collective::barrier ? c.planned : c.pol;
    L.sig = signature_of(c, sch.channels(), p.id());
    L.timeout_ns = std::uint64_t(c.settings.timeout.count()) * 1000000ull;
    L.checked = c.settings.checked;
    L.op.set(op);
    // The blocks of every rank on this device spin on each other: all of
    // them must be resident at once, or the collective could only time out.
    // (One process per GPU counts this process's rank only: kernels of
    // other processes on the same device share it by time slicing, or
    // side by side under MPS.)
    const int blocks = world_->ranks_on_device(dev) * sch.channels();
    const int resident = resident_blocks(collective_kernel<T, Op>, dev);
    if (blocks > resident)
        throw error(errc::invalid_argument,
                    std::string("chorus::") + collective_name(coll) + ": " +
                        std::to_string(world_->ranks_on_device(dev)) + " rank(s) on device " + std::to_string(dev) +
                        " x " + std::to_string(sch.channels()) + " channel(s) need " + std::to_string(blocks) +
                        " resident thread blocks, but the device holds " + std::to_string(resident) +
                        " of this kernel at once; use fewer channels (Algo's params) or fewer ranks per device");
    // Inside a group (collectives/gpu_group.hpp) a call that moves no
    // staged bytes and reads no counts is queued, to be launched with its
    // neighbours of the same kind at the group's end; any other call is
    // launched here after the calls queued before it.
    if (grouping()) {
        const bool plain = stg.copy_in_bytes == 0 && stg.copy_back_bytes == 0 &&
                           !(L.sch.kind == schedule_kind::exchange && !c.counts.empty());
        if (plain) {
            auto item = std::make_unique<gpu_group_call<T, Op>>();
            item->L = L;
            group_->queued.push_back(std::move(item));
            return;
        }
        group_flush();
    }
    // The "v" collectives' counts, where the kernel can read them: this
    // rank's device counts area, written on the same stream just before
    // the kernel by kernels carrying the values as parameters (so a CUDA
    // graph captures them, and the caller may free its counts as soon as
    // the call returns; cudaMemcpyAsync from pageable memory could do
    // neither). The schedule above was planned on the host counts.
    if (L.sch.kind == schedule_kind::exchange && !c.counts.empty()) {
        std::uint64_t* area = world_->counts_dev[std::size_t(rank_)];
        const std::size_t total = c.counts.size();
        if (area == nullptr || total > std::size_t(world_->n) * std::size_t(world_->n))
            throw error(errc::internal, std::string("chorus::") + collective_name(coll) + ": " +
                                            std::to_string(total) + " counts do not fit the rank's counts area");
        for (std::size_t first = 0; first < total; first += counts_piece_max) {
            counts_piece piece{};
            piece.dst = area + first;
            piece.n = std::uint32_t(std::min<std::size_t>(counts_piece_max, total - first));
            for (std::uint32_t i = 0; i < piece.n; ++i) piece.v[i] = c.counts[first + i];
            counts_fill_kernel<><<<1, counts_fill_threads, 0, st>>>(piece);
            cuda_check(cudaGetLastError(), "launching the counts kernel");
        }
        L.sch.exchange.counts = area;
    }
    if (stg.copy_in_bytes != 0)
        cuda_check(cudaMemcpyAsync(stg.copy_in_dst, stg.copy_in_src, std::size_t(stg.copy_in_bytes),
                                   cudaMemcpyDefault, st),
                   "cudaMemcpyAsync (staging a call's `in` through the shared scratch)");
    collective_params<T, Op> P{};
    P.first = L;
    P.blocks = sch.channels();
    collective_kernel<T, Op><<<P.blocks, collective_block_threads, 0, st>>>(P);
    cuda_check(cudaGetLastError(), "launching the collective kernel");
    if (stg.copy_back_bytes != 0)
        cuda_check(cudaMemcpyAsync(c.out, stg.run_out, std::size_t(stg.copy_back_bytes), cudaMemcpyDefault, st),
                   "cudaMemcpyAsync (copying a staged call's `out` back)");
}

inline future gpu_transport::completion(void* stream_handle) const {
    if (grouping()) group_flush(); // the future's event follows the queued calls' launches
    cudaStream_t st = stream_handle != nullptr ? static_cast<cudaStream_t>(stream_handle) : stream();
    device_guard guard(device());
    cudaEvent_t ev = nullptr;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ev, st), "cudaEventRecord");
    auto state = std::shared_ptr<detail::completion>(new detail::completion(), [ev](detail::completion* c) {
        (void)cudaEventDestroy(ev);
        delete c;
    });
    state->device_event = ev;
    std::weak_ptr<detail::completion> weak = state;
    state->drive = [weak, ev, self = *this](bool block) {
        auto sp = weak.lock();
        if (!sp) return;
        {
            std::lock_guard<std::mutex> lk(sp->m);
            if (sp->done) return;
        }
        cudaError_t e = block ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return;
        }
        std::exception_ptr err;
        try {
            if (e != cudaSuccess) throw_cuda(e, "waiting for a collective");
            self.check();
        } catch (...) {
            err = std::current_exception();
        }
        sp->complete(err);
    };
    return future(std::move(state));
}

//! Allocates what the ranks on `devices` share (see the file comment).
inline std::shared_ptr<gpu_world> make_gpu_world(const std::vector<int>& devices, const gpu::options& opt);

} // namespace detail

//! What only GPU communicators have: the rank's device and own stream, and
//! a check for failures of calls issued on other streams.
template <class Comm>
class gpu::device::api {
public:
    //! The CUDA device this rank runs on.
    int device() const noexcept { return t().device(); }
    //! The stream calls without a stream argument use (owned by chorus).
    cudaStream_t stream() const noexcept { return t().stream(); }
    //! Throws if a collective of this rank has failed (after the stream
    //! work it depends on has finished: synchronize the stream first).
    void check() const { t().check(); }

    //! One process per GPU (gpu::make_communicator) only: `count`
    //! elements of T in this rank's registered area (device memory of its
    //! device that every peer process has mapped, like ncclMemAlloc),
    //! zero-filled when the communicator was made, 256-byte aligned. A
    //! collective whose buffers lie in it runs zero-copy; any other
    //! device buffer is staged through the shared scratch. Not collective.
    //! Errors (errc::invalid_argument): `count` 0 or overflowing, no gap
    //! of gpu::options::registered_bytes that large, or a communicator of
    //! make_communicators. Named as communicator<mpi>::alloc.
    template <element T>
    std::span<T> alloc(std::size_t count) const {
        const std::string fn = "chorus::gpu::communicator::alloc<T>";
        void* p = t().alloc_registered(detail::alloc_bytes(count, sizeof(T), fn), fn);
        return std::span<T>(static_cast<T*>(p), count);
    }
    //! Returns a buffer from alloc (the span, or its start) to the
    //! registered area. Not collective, but no collective of any rank may
    //! still use it (synchronize first). Anything else: errc::invalid_argument.
    template <class T>
    void free(std::span<T> buf) const {
        t().free_registered(buf.data(), "chorus::gpu::communicator::free", "buf");
    }
    void free(const void* p) const { t().free_registered(p, "chorus::gpu::communicator::free", "p"); }

    //! One process per GPU (gpu::make_communicator) only: registers `buf`,
    //! device memory of this rank's device from cudaMalloc (any part of
    //! one allocation), so that every peer process maps it (CUDA IPC, like
    //! ncclCommRegister): a collective whose buffers lie in a registration
    //! (or in alloc's area) runs zero-copy, without staging. Returns the
    //! registration's handle (the same on every rank).
    //! Collective and blocking: every rank calls register_buffer and
    //! deregister_buffer in the same order, each with its own buffer (any
    //! size); each waits for its device to finish all its work
    //! (cudaDeviceSynchronize), then for every peer (at most
    //! gpu::options::setup_timeout). No other call of the communicator may
    //! run meanwhile. At most detail::max_lane_registrations (14) are live
    //! at once; register once and reuse. Errors: a buffer that is empty,
    //! not cudaMalloc memory of this device, overlapping a live
    //! registration or alloc's area, or the limit reached:
    //! errc::invalid_argument naming `buf` on this rank and
    //! errc::peer_failed naming it on its peers, nothing registered; ranks
    //! calling differently: errc::mismatch; a rank that does not come:
    //! errc::timeout naming it (the communicator is then aborted); a dead
    //! rank: errc::peer_failed. A communicator of make_communicators
    //! (which reaches every buffer already): errc::invalid_argument.
    template <class T>
    gpu::buffer_handle register_buffer(std::span<T> buf) const {
        return {t().register_range(buf.data(), buf.size_bytes(), "chorus::gpu::communicator::register_buffer")};
    }
    //! Ends a registration (collective and blocking as register_buffer,
    //! and a barrier: when it returns, no peer maps the buffer any more;
    //! free it only then). No call may still use the buffer. A handle that
    //! is not live on this rank: errc::invalid_argument here,
    //! errc::peer_failed on the peers, nothing deregistered.
    void deregister_buffer(gpu::buffer_handle h) const {
        t().deregister_range(h.id, "chorus::gpu::communicator::deregister_buffer");
    }

    //! Collective: a new communicator of the ranks that pass the same
    //! `color`, ordered by `key`, ties by rank (as MPI_Comm_split and
    //! communicator<mpi>::split); nullptr for a negative color. Each color
    //! gets a world of its own over its ranks' devices (scratch and the
    //! other gpu::options as this one's), with default settings.
    //! gpu::make_communicators only: the ranks are threads of this
    //! process and every rank must call split from its own host thread
    //! (it blocks until all have come, at most timeout(); a rank that
    //! never comes makes the others throw errc::timeout/aborted and breaks
    //! this communicator). With one process per GPU (make_communicator) it
    //! throws errc::invalid_argument: not available there.
    std::unique_ptr<Comm> split(int color, int key) const {
        const Comm& self = static_cast<const Comm&>(*this);
        const std::chrono::milliseconds timeout =
            self.call_timeout().count() > 0 ? self.call_timeout() : self.timeout();
        auto [w, rank] = t().split(color, key, timeout);
        if (!w) return nullptr;
        return std::make_unique<Comm>(std::move(w), rank);
    }

private:
    const detail::gpu_transport& t() const { return static_cast<const Comm&>(*this).transport(); }
};

inline std::shared_ptr<detail::gpu_world> detail::make_gpu_world(const std::vector<int>& devices,
                                                                 const gpu::options& opt) {
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
    w->opt = opt;
    w->node_size = opt.ranks_per_node;
    if (w->node_size == 0) w->node_size = detail::env_ranks_per_node(); // strict: a bad value throws
    w->topo = model::model_file_given() ? model::current() : model::gpu_cluster_topology(w->node_size);
    w->channel_budget = detail::channel_budget_of(devices);
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
    w->counts_dev.assign(devices.size(), nullptr);
    w->ll.assign(devices.size(), nullptr);
    if (devices.size() >= 2 && opt.ll_bytes != 0) {
        w->ll_limit = (std::uint64_t(opt.ll_bytes) + 3) / 4 * 4;
        w->ll_slot_words = chorus::ll_slot_words(w->ll_limit);
    }
    w->split_calls.assign(devices.size(), 0);
    w->split_color.assign(devices.size(), -1);
    w->split_key.assign(devices.size(), 0);
    w->split_present.assign(devices.size(), 0);
    for (std::size_t r = 0; r < devices.size(); ++r) {
        detail::device_guard g(devices[r]);
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&w->counts_dev[r]),
                              sizeof(std::uint64_t) * devices.size() * devices.size()),
                   "cudaMalloc (counts area)");
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&w->areas[r]), sizeof(detail::lane_rank_area)), "cudaMalloc");
        cuda_check(cudaMemset(w->areas[r], 0, sizeof(detail::lane_rank_area)), "cudaMemset");
        if (opt.scratch_bytes) cuda_check(cudaMalloc(&w->scratch[r], opt.scratch_bytes), "cudaMalloc (scratch)");
        if (w->ll_limit != 0) { // the LL receive region, zeroed: no call's flag (exec/lane_ll.hpp)
            const std::size_t bytes = std::size_t(chorus::ll_region_bytes(w->n, w->ll_limit));
            cuda_check(cudaMalloc(reinterpret_cast<void**>(&w->ll[r]), bytes), "cudaMalloc (LL region)");
            cuda_check(cudaMemset(w->ll[r], 0, bytes), "cudaMemset (LL region)");
        }
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
        std::uint64_t** lt = nullptr;
        if (w->ll_limit != 0) {
            cuda_check(cudaMalloc(reinterpret_cast<void**>(&lt), sizeof(void*) * devices.size()), "cudaMalloc");
            cuda_check(cudaMemcpy(lt, w->ll.data(), sizeof(void*) * devices.size(), cudaMemcpyHostToDevice),
                       "cudaMemcpy");
        }
        w->ll_tables.push_back(lt);
    }
    for (int d : devices) {
        detail::device_guard g(d);
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    (void)cudaSetDevice(prev);
    return w;
}

inline std::pair<std::shared_ptr<detail::gpu_world>, int> detail::gpu_transport::split(int color, int key,
                                                                              std::chrono::milliseconds timeout) const {
    const std::string fn = "chorus::gpu::communicator::split";
    if (world_->proc)
        throw error(errc::invalid_argument,
                    fn + ": not available with one process per GPU (gpu::make_communicator): the processes' setup "
                         "exchange is closed once the communicator is made, so they have nothing to agree on a new "
                         "group through; call gpu::make_communicator again for each group instead");
    if (world_->aborted())
        throw error(errc::aborted, fn + ": the communicator is broken (" + reason() + "); make new communicators");
    gpu_world& w = *world_;
    const int n = w.n;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lk(w.split_m);
    const std::uint64_t round = ++w.split_calls[std::size_t(rank_)];
    // Waits in slices (abort() does not notify split_cv); `until_all`:
    // the deadline applies only while a rank has not arrived.
    auto wait_for = [&](auto done, bool until_all) {
        while (!done()) {
            if (w.aborted())
                throw error(errc::aborted, fn + ": the communicator was aborted while rank " + std::to_string(rank_) +
                                               " waited for the others (" + reason() + ")");
            if (until_all && w.split_arrived < n && std::chrono::steady_clock::now() >= deadline) {
                std::vector<int> missing;
                if (w.split_round == round) {
                    for (int q = 0; q < n; ++q)
                        if (!w.split_present[std::size_t(q)]) missing.push_back(q);
                }
                const std::string who = missing.empty() ? std::string("an earlier split to finish")
                                                        : "rank(s) " + rank_list_text(missing.data(), missing.size());
                const std::string why = fn + ": rank " + std::to_string(rank_) + " timed out after " +
                                        std::to_string(timeout.count()) + " ms waiting for " + who +
                                        " to call split";
                lk.unlock();
                w.abort(why); // the others fail too, never hang
                throw error(errc::timeout, why);
            }
            w.split_cv.wait_for(lk, std::chrono::milliseconds(2));
        }
    };
    // The previous round must have been taken by every rank.
    wait_for([&] { return w.split_round == round; }, true);
    w.split_color[std::size_t(rank_)] = color;
    w.split_key[std::size_t(rank_)] = key;
    w.split_present[std::size_t(rank_)] = 1;
    if (++w.split_arrived == n) {
        // The last to arrive builds every color's world (outside the lock:
        // cudaMalloc and friends), then publishes them.
        lk.unlock();
        split_plan plan;
        std::vector<std::shared_ptr<gpu_world>> worlds;
        std::exception_ptr failure;
        try {
            plan = plan_split(w.split_color, w.split_key, fn);
            for (const std::vector<int>& members : plan.members) {
                std::vector<int> devs;
                for (int q : members) devs.push_back(w.dev[std::size_t(q)]);
                worlds.push_back(make_gpu_world(devs, w.opt));
            }
        } catch (...) {
            failure = std::current_exception();
        }
        lk.lock();
        w.split_result = std::move(plan);
        w.split_worlds = std::move(worlds);
        w.split_failure = failure;
        w.split_built = true;
        w.split_cv.notify_all();
    }
    wait_for([&] { return w.split_built; }, true);
    std::exception_ptr failure = w.split_failure;
    std::pair<std::shared_ptr<gpu_world>, int> mine{nullptr, -1};
    if (!failure) {
        const int g = w.split_result.group[std::size_t(rank_)];
        if (g >= 0) mine = {w.split_worlds[std::size_t(g)], w.split_result.new_rank[std::size_t(rank_)]};
    }
    if (++w.split_taken == n) { // the round is over: the next one may start
        w.split_arrived = w.split_taken = 0;
        w.split_built = false;
        std::fill(w.split_present.begin(), w.split_present.end(), char(0));
        w.split_worlds.clear();
        w.split_result = {};
        w.split_failure = nullptr;
        ++w.split_round;
        w.split_cv.notify_all();
    }
    lk.unlock();
    if (failure) std::rethrow_exception(failure);
    return mine;
}

namespace gpu {

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

} // namespace chorus
