#pragma once
//! \file backend/lane_process.hpp
//! The lane executor (exec/lane_env.hpp) over N processes of one node, one
//! rank each: what they share, how they find each other, how a dead peer
//! stops the others, and how a call whose buffers no peer can reach is
//! staged through shared scratch. Host code only (no CUDA, no MPI).
//!
//! Memory. Every segment comes from a lane_memory_provider (a struct of
//! four functions: create, open, unlink, close), the node segment from
//! lane_process_config::node_memory and the rank segments from
//! lane_process_config::memory; posix_shm_provider() is POSIX shared
//! memory (backend/shm.hpp) and the default of both. The node segment is
//! read and written by the host here (the watcher, abort(), failure()), so
//! its provider must give host memory; a rank segment is never touched by
//! the host here (only addresses are computed in it), so its provider may
//! give device memory: the GPU backend for one process per GPU
//! (backend/gpu_process.hpp) gives CUDA IPC memory, zero-filled with
//! cudaMemset, and registers the node segment with cudaHostRegister(...,
//! cudaHostRegisterMapped) for its kernels. A provider's create zero-fills
//! by whatever means its memory needs; nothing here calls memset on it.
//!
//!   node segment (created by rank 0):
//!     [0, 128)                 abort word (std::uint32_t; lane_world::abort)
//!     [128, 256)               dead: 1 + the first rank seen dead, 0 none
//!     [256, 256 + 8 * 64)      pid[max_lane_ranks]   (each rank writes its own)
//!     [768, 768 + 64)          left[max_lane_ranks]  (1: the rank closed its world)
//!     [faults_offset, +n)      lane_fault[n] (lane_world::faults)
//!     [reg_offset, +n)         lane_reg_slot[n]: each rank's slot of the
//!                              registration exchange (register_range),
//!                              128-byte aligned
//!   rank segment (one per rank, created by that rank):
//!     [0, area_bytes)          its lane_rank_area (flags, descriptors, counters)
//!     [scratch_offset, +scratch_bytes)        its scratch: the schedule's
//!                                             scratch and, for a staged call,
//!                                             copies of `in` and `out`
//!     [registered_offset, +registered_bytes)  its registered buffers
//!                                             (allocate_registered)
//!
//! Setup. Each rank creates its segment (rank 0 also the node segment),
//! the ranks all_gather one fixed-size record each (segment names, the
//! address each segment has in its creator, sizes, rank count, host name,
//! process id) through a lane_bootstrap (two calls: all_gather of
//! fixed-size bytes, and close): file_lane_bootstrap over
//! detail::file_bootstrap when the world is made from a unique_id, or one
//! over MPI_Allgather (backend/mpi_bootstrap.hpp, MPI builds only), every
//! rank maps every peer's segment wherever
//! its provider puts it (every rank must run on one host: checked), a
//! second exchange says that every rank has mapped
//! everything, and each creator unlinks its names (nothing stays in
//! /dev/shm; a job killed before that leaves names that the next creator
//! sweeps, see shm_segment::sweep_stale_segments). Each rank then holds
//! its area table (lane_rank_area* [n], in its own address space) and one
//! lane_peer_map per peer with two ranges: the peer's scratch and its
//! registered buffers. A peer's pointer outside both is unreachable: the
//! step fails with status::unreachable, nothing is dereferenced.
//!
//! Registration. After setup the ranks may share more memory, memory the
//! provider did not create (for the GPU backend: any cudaMalloc buffer):
//! register_range is collective; the ranks trade their ranges through
//! their slots in the node segment (the bootstrap is closed), open each
//! other's (export_range, open) and append one range per registration to
//! every peer map (up to max_lane_registrations at once);
//! deregister_range undoes it. reachable() counts the live registrations.
//!
//! Liveness. A watcher thread per process polls every peer's process
//! (every `watch_period`) and, when one is gone (or a zombie) without
//! having closed its world, records it in `dead` and sets the abort word:
//! every wait of every rank stops, and failure() reports errc::peer_failed
//! naming the dead rank. The watcher stops in the destructor, which marks
//! the rank as left first, so a rank that finished and exited is not taken
//! for dead.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "../core/error.hpp"
#include "../exec/lane_env.hpp"
#include "bootstrap.hpp"
#include "gpu_checks.hpp"
#include "shm.hpp"

namespace chorus::detail {

// --- staging ---------------------------------------------------------------

//! Alignment of every region of a staged call in the rank's scratch.
inline constexpr std::uint64_t lane_stage_align_bytes = 256;

//! Where a staged call's parts lie in the rank's shared scratch, bytes
//! from its start: the schedule's scratch, the copy of `in` (copied there
//! before the schedule runs), the copy of `out` (copied back after it).
struct lane_staging_plan {
    std::uint64_t schedule_offset_bytes = 0;
    std::uint64_t in_offset_bytes = 0;
    std::uint64_t out_offset_bytes = 0; //!< == in_offset_bytes when in and out are one buffer
    std::uint64_t total_bytes = 0;      //!< end of the last region: <= the scratch size
};

//! The plan of a call staged through `scratch_bytes` of shared scratch:
//! the schedule needs `schedule_scratch_elems` elements, `in_elems` and
//! `out_elems` are the call's buffers (`same_buffer`: in and out are one
//! buffer from one start, as Broadcast's, staged once, max of the two),
//! `elem_bytes` per element. Regions in that order, each at a multiple of
//! 256 bytes. Throws errc::invalid_argument naming the bytes needed, the
//! scratch size and `knob` when it does not fit.
inline lane_staging_plan plan_staging(std::uint64_t schedule_scratch_elems, std::uint64_t in_elems,
                                      std::uint64_t out_elems, std::uint64_t elem_bytes, bool same_buffer,
                                      std::uint64_t scratch_bytes,
                                      const std::string& knob = "lane_process_config::scratch_bytes") {
    if (elem_bytes == 0) throw error(errc::invalid_argument, "chorus::plan_staging: `elem_bytes` must be positive");
    bool overflow = false;
    auto bytes_of = [&](std::uint64_t elems) {
        std::uint64_t b = 0;
        if (__builtin_mul_overflow(elems, elem_bytes, &b)) overflow = true;
        return b;
    };
    auto round_up = [&](std::uint64_t b) {
        std::uint64_t r = 0;
        if (__builtin_add_overflow(b, lane_stage_align_bytes - 1, &r)) overflow = true;
        return r / lane_stage_align_bytes * lane_stage_align_bytes;
    };
    auto add = [&](std::uint64_t a, std::uint64_t b) {
        std::uint64_t r = 0;
        if (__builtin_add_overflow(a, b, &r)) overflow = true;
        return r;
    };
    const std::uint64_t sched = bytes_of(schedule_scratch_elems);
    const std::uint64_t in = bytes_of(same_buffer ? std::max(in_elems, out_elems) : in_elems);
    const std::uint64_t out = same_buffer ? 0 : bytes_of(out_elems);
    lane_staging_plan p;
    p.schedule_offset_bytes = 0;
    p.in_offset_bytes = round_up(sched);
    p.out_offset_bytes = same_buffer ? p.in_offset_bytes : round_up(add(p.in_offset_bytes, in));
    p.total_bytes = add(p.out_offset_bytes, same_buffer ? in : out);
    if (overflow || p.total_bytes > scratch_bytes) {
        const std::string need = overflow ? std::string("more than 2^64") : std::to_string(p.total_bytes);
        throw error(errc::invalid_argument,
                    "chorus::plan_staging: staging this call needs " + need +
                        " bytes of the rank's shared scratch (the schedule's " +
                        std::to_string(schedule_scratch_elems) + " elements, `in` " + std::to_string(in_elems) + " and `out` " + std::to_string(out_elems) +
                        " elements of " + std::to_string(elem_bytes) + " bytes" +
                        (same_buffer ? ", one buffer" : "") + ", each region aligned to " +
                        std::to_string(lane_stage_align_bytes) + " bytes) but the scratch has " +
                        std::to_string(scratch_bytes) + " bytes; raise " + knob +
                        ", or pass registered buffers");
    }
    return p;
}

// --- memory provider --------------------------------------------------------

//! A segment's name as ranks exchange it (fixed size: a bootstrap record).
struct lane_segment_name {
    char text[64] = {};
};

//! One mapping a provider made; `handle` is the provider's own.
struct lane_mapping {
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    void* handle = nullptr;
};

//! Where the process world's memory comes from (see the file comment).
struct lane_memory_provider {
    //! A new segment of `bytes`, zero-filled (by whatever means the memory
    //! needs: cudaMemset for device memory), mapped; `name` gets what peers
    //! pass to open (any 64 bytes: a CUDA IPC handle is one). Errors name
    //! `knob`, what sets the size.
    lane_mapping (*create)(std::size_t bytes, lane_segment_name& name, const std::string& knob) = nullptr;
    //! Maps a segment a peer created.
    lane_mapping (*open)(const lane_segment_name& name, std::size_t bytes) = nullptr;
    //! Removes the name once every rank mapped it (mappings stay valid).
    void (*unlink)(const lane_segment_name& name) = nullptr;
    //! Unmaps (noexcept).
    void (*close)(lane_mapping& m) = nullptr;
    //! Optional (lane_process_world::register_range needs it): shares the
    //! memory [p, p + bytes) of this process, which the provider did not
    //! create: `name` gets what a peer passes to open, `alloc_base` and
    //! `alloc_bytes` the whole allocation that name opens (it holds the
    //! range). Throws chorus::error when the memory cannot be shared.
    void (*export_range)(const void* p, std::size_t bytes, lane_segment_name& name, std::uint64_t& alloc_base,
                         std::uint64_t& alloc_bytes) = nullptr;
};

//! POSIX shared memory (shm_segment).
inline lane_memory_provider posix_shm_provider() {
    lane_memory_provider p;
    p.create = [](std::size_t bytes, lane_segment_name& name, const std::string& knob) {
        shm_segment::sweep_stale_segments();
        std::string n;
        auto seg = std::make_unique<shm_segment>(shm_segment::create_unique(n, bytes, knob));
        std::snprintf(name.text, sizeof name.text, "%s", n.c_str());
        lane_mapping m{seg->data(), seg->bytes(), seg.get()};
        seg.release();
        return m;
    };
    p.open = [](const lane_segment_name& name, std::size_t bytes) {
        auto seg = std::make_unique<shm_segment>(shm_segment::open(name.text, bytes));
        lane_mapping m{seg->data(), seg->bytes(), seg.get()};
        seg.release();
        return m;
    };
    p.unlink = [](const lane_segment_name& name) { shm_segment::unlink(name.text); };
    p.close = [](lane_mapping& m) {
        delete static_cast<shm_segment*>(m.handle);
        m = {};
    };
    return p;
}

// --- bootstrap --------------------------------------------------------------

//! How the ranks of a process world exchange their records while it is
//! made: two collective calls, made by every rank in the same order.
//! file_lane_bootstrap (a unique_id) and mpi_lane_bootstrap (an MPI_Comm,
//! backend/mpi_bootstrap.hpp) implement it; a test can too.
class lane_bootstrap {
public:
    virtual ~lane_bootstrap() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    //! Every rank's `bytes` bytes at `mine`, rank after rank (every rank
    //! gives the same number of bytes). Throws chorus::error.
    virtual std::vector<std::byte> all_gather(const void* mine, std::size_t bytes) = 0;
    //! The last call: a barrier, after which the bootstrap holds nothing.
    virtual void close() = 0;
};

//! lane_bootstrap over detail::file_bootstrap: ranks meet at a unique_id.
class file_lane_bootstrap final : public lane_bootstrap {
public:
    file_lane_bootstrap(const unique_id& id, int rank, int size, std::chrono::milliseconds timeout)
        : b_(id, rank, size, timeout) {}
    int rank() const override { return b_.rank(); }
    int size() const override { return b_.size(); }
    std::vector<std::byte> all_gather(const void* mine, std::size_t bytes) override {
        return b_.all_gather(mine, bytes);
    }
    void close() override { b_.close(); }

private:
    file_bootstrap b_;
};

// --- liveness ---------------------------------------------------------------

//! True when process `pid` no longer runs: gone, or a zombie its parent
//! has not reaped yet (process_alive() counts a zombie as alive).
inline bool process_gone(int pid) {
    if (!process_alive(pid)) return true;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return false; // no /proc: kill(pid, 0) said it exists
    char buf[512];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* close = std::strrchr(buf, ')'); // "pid (comm) S ...": comm may hold anything
    return close != nullptr && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

// --- the world --------------------------------------------------------------

//! What a process world is made with. Every rank passes the same sizes.
struct lane_process_config {
    std::uint64_t scratch_bytes = std::uint64_t(1) << 20; //!< per rank: schedule scratch and staged copies
    std::uint64_t registered_bytes = 0;                   //!< per rank: room for allocate_registered
    std::chrono::milliseconds setup_timeout{10000};       //!< each bootstrap exchange
    std::chrono::milliseconds watch_period{2};            //!< how often the watcher looks at the peers
    lane_memory_provider memory = posix_shm_provider();   //!< the rank segments (host or device memory)
    lane_memory_provider node_memory = posix_shm_provider(); //!< the node segment (host memory)
    //! How errors name the sizes above: "<knob_prefix>scratch_bytes" (the
    //! GPU backend passes "gpu::options::").
    std::string knob_prefix = "lane_process_config::";
    //! How errors name the rank count the caller passed.
    std::string size_name = "size";
};

//! The node segment's fixed part (see the file comment).
struct lane_node_header {
    alignas(128) std::uint32_t abort = 0;
    alignas(128) std::int32_t dead = 0; //!< 1 + the first rank seen dead; 0: none
    alignas(128) std::int64_t pid[max_lane_ranks] = {};
    std::uint8_t left[max_lane_ranks] = {};
};

//! One rank's slot of the registration exchange in the node segment (see
//! lane_process_world::register_range). The rank writes the fields of its
//! call `seq` and then `seq` (release); its peers read `seq` (acquire) and
//! then the fields, and set their own `done` when they finished with them.
//! A rank writes its next call only once every peer's `done` reached the
//! last one, so a slot is never rewritten while a peer reads it.
struct lane_reg_slot {
    alignas(128) std::uint64_t seq = 0; //!< the last registration call this rank published
    std::uint64_t done = 0;             //!< the last registration call this rank finished
    std::uint32_t op = 0;               //!< 1: register_range, 2: deregister_range
    std::int32_t refused = 0;           //!< 1: this rank refused its own call (its arguments)
    std::uint64_t id = 0;               //!< deregister_range: the handle
    lane_segment_name name{};           //!< register_range: what export_range gave
    std::uint64_t alloc_base = 0, alloc_bytes = 0; //!< the allocation that name opens, in this rank
    std::uint64_t base = 0, bytes = 0;  //!< the registered range, in this rank
};

//! Most ranges one rank has registered at once (register_range): each
//! takes one lane_peer_map range of every peer's map, after the scratch
//! and the registered area.
inline constexpr int max_lane_registrations = max_lane_ranges - 2;

//! One rank's share of a process world (see the file comment). Host
//! object; world() is what the lane executor receives.
class lane_process_world {
public:
    //! Joins the world of `size` ranks that meet at `id`, as rank `rank`.
    //! Collective: every rank constructs one with the same config sizes.
    lane_process_world(const unique_id& id, int rank, int size, const lane_process_config& cfg = {})
        : lane_process_world(*file_boot(id, rank, size, cfg), cfg) {}

    //! Joins the world of boot.size() ranks as rank boot.rank(), trading
    //! the records through `boot` (closed when this returns). Collective:
    //! every rank constructs one with the same config sizes.
    lane_process_world(lane_bootstrap& boot, const lane_process_config& cfg)
        : cfg_(cfg), rank_(boot.rank()), n_(boot.size()) {
        const int rank = rank_, size = n_;
        check_args(size, cfg);
        area_bytes_ = round_up(sizeof(lane_rank_area), 4096);
        scratch_offset_ = area_bytes_;
        registered_offset_ = round_up(scratch_offset_ + cfg.scratch_bytes, 4096);
        segment_bytes_ = std::max<std::uint64_t>(registered_offset_ + cfg.registered_bytes, 4096);
        faults_offset_ = round_up(sizeof(lane_node_header), 128);
        reg_offset_ = round_up(faults_offset_ + sizeof(lane_fault) * std::size_t(size), 128);
        node_bytes_ = round_up(reg_offset_ + sizeof(lane_reg_slot) * std::size_t(size), 4096);
        maps_.assign(std::size_t(size), lane_peer_map{});
        table_.assign(std::size_t(size), nullptr);
        segs_.assign(std::size_t(size), lane_mapping{});
        record mine{};
        bool named = false; // this rank's names exist (in /dev/shm, for POSIX shared memory)
        try {
            segs_[std::size_t(rank)] =
                cfg.memory.create(std::size_t(segment_bytes_), mine.own,
                                  cfg.knob_prefix + "scratch_bytes and " + cfg.knob_prefix + "registered_bytes");
            named = true;
            if (rank == 0) node_ = cfg.node_memory.create(std::size_t(node_bytes_), mine.node, "the rank count");
            mine.own_base = reinterpret_cast<std::uint64_t>(segs_[std::size_t(rank)].base);
            mine.scratch_bytes = cfg.scratch_bytes;
            mine.registered_bytes = cfg.registered_bytes;
            mine.pid = getpid();
            mine.size = size;
            gethostname(mine.host, sizeof mine.host - 1);
            const std::vector<std::byte> all = boot.all_gather(&mine, sizeof mine);
            if (all.size() != sizeof(record) * std::size_t(size))
                throw error(errc::internal, "chorus::lane_process: the bootstrap returned " +
                                                std::to_string(all.size()) + " bytes for " + std::to_string(size) +
                                                " records");
            recs_.resize(std::size_t(size));
            std::memcpy(recs_.data(), all.data(), sizeof(record) * std::size_t(size));
            for (int r = 0; r < size; ++r) {
                const record& o = recs_[std::size_t(r)];
                if (o.size != size)
                    throw error(errc::mismatch, "chorus::lane_process: rank " + std::to_string(r) +
                                                    " joined a world of " + std::to_string(o.size) +
                                                    " ranks, this rank one of " + std::to_string(size) +
                                                    " (every rank passes the same `" + cfg.size_name + "`)");
                if (o.scratch_bytes != cfg.scratch_bytes || o.registered_bytes != cfg.registered_bytes)
                    throw error(errc::mismatch,
                                "chorus::lane_process: rank " + std::to_string(r) + " has " + cfg.knob_prefix +
                                    "scratch_bytes " + std::to_string(o.scratch_bytes) + " and registered_bytes " +
                                    std::to_string(o.registered_bytes) + ", this rank " +
                                    std::to_string(cfg.scratch_bytes) + " and " +
                                    std::to_string(cfg.registered_bytes) + " (every rank passes the same)");
                if (std::strncmp(o.host, mine.host, sizeof mine.host) != 0)
                    throw error(errc::unavailable, "chorus::lane_process: rank " + std::to_string(r) +
                                                       " runs on host '" + std::string(o.host, strnlen(o.host, sizeof o.host)) +
                                                       "', this rank on '" + mine.host +
                                                       "'; a process world spans the processes of one node");
            }
            if (rank != 0) node_ = cfg.node_memory.open(recs_[0].node, std::size_t(node_bytes_));
            for (int r = 0; r < size; ++r)
                if (r != rank)
                    segs_[std::size_t(r)] = cfg.memory.open(recs_[std::size_t(r)].own, std::size_t(segment_bytes_));
            const char mapped = 1;
            (void)boot.all_gather(&mapped, 1); // every rank mapped every segment: the names can go
            unlink_own(mine);
            named = false;
            boot.close();
        } catch (...) {
            if (named) unlink_own(mine);
            release();
            throw;
        }
        header()->pid[rank] = mine.pid;
        for (int r = 0; r < size; ++r) {
            table_[std::size_t(r)] = reinterpret_cast<lane_rank_area*>(segs_[std::size_t(r)].base);
            if (r == rank) continue;
            const std::uint64_t theirs = recs_[std::size_t(r)].own_base;
            const std::uint64_t here = reinterpret_cast<std::uint64_t>(segs_[std::size_t(r)].base);
            lane_peer_map& m = maps_[std::size_t(r)];
            m.ranges[0] = {theirs + scratch_offset_, here + scratch_offset_, cfg.scratch_bytes};
            m.ranges[1] = {theirs + registered_offset_, here + registered_offset_, cfg.registered_bytes};
            m.count = 2;
        }
        watcher_ = std::thread([this] { watch(); });
    }
    lane_process_world(const lane_process_world&) = delete;
    lane_process_world& operator=(const lane_process_world&) = delete;
    //! Marks this rank as left (its peers' watchers then never take its
    //! exit for a death), stops the watcher, unmaps everything.
    ~lane_process_world() {
        mark_left();
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        if (watcher_.joinable()) watcher_.join();
        release();
    }

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return n_; }

    //! Marks this rank as having left the world (its peers' watchers then
    //! never take its exit for a death); it issues nothing more. The
    //! destructor does it; a layer whose memory must outlive the peers'
    //! use of it (CUDA IPC: freeing the exporter's memory while peers map
    //! it is not safe) calls it first and waits for peers_left().
    void mark_left() noexcept {
        std::atomic_ref<std::uint8_t>(header()->left[rank_]).store(1, std::memory_order_seq_cst);
    }
    //! True when every peer has left the world or its process is gone.
    bool peers_left() const noexcept {
        for (int r = 0; r < n_; ++r) {
            if (r == rank_ || std::atomic_ref<std::uint8_t>(header()->left[r]).load(std::memory_order_seq_cst))
                continue;
            const int pid = int(std::atomic_ref<std::int64_t>(header()->pid[r]).load(std::memory_order_acquire));
            if (pid == 0 || !process_gone(pid)) return false;
        }
        return true;
    }

    //! What the lane executor of this process receives.
    lane_world world() const {
        return {table_.data(), &header()->abort, faults(), n_, n_ > 1 ? maps_.data() : nullptr};
    }
    //! This process's map of each peer (own entry empty).
    const std::vector<lane_peer_map>& maps() const noexcept { return maps_; }
    //! Every rank's lane_rank_area as this process maps it (rank segment
    //! memory: device memory where the provider gives that).
    const std::vector<lane_rank_area*>& areas() const noexcept { return table_; }
    //! The node segment (host memory) as this process maps it.
    const lane_mapping& node_mapping() const noexcept { return node_; }
    //! The abort word and the failure records [size()], in the node segment.
    std::uint32_t* abort_word() const noexcept { return &header()->abort; }
    lane_fault* fault_records() const noexcept { return faults(); }
    //! The process id of rank `r` (as it wrote it in the node segment).
    std::int64_t pid_of(int r) const noexcept { return header()->pid[r]; }

    //! This rank's shared scratch (peers can read it).
    std::byte* scratch() const noexcept { return own() + scratch_offset_; }
    std::uint64_t scratch_bytes() const noexcept { return cfg_.scratch_bytes; }

    //! `bytes` (> 0) of this rank's registered memory (peers can read it),
    //! aligned to 256 bytes: the first gap that fits among the blocks not
    //! freed. Throws errc::invalid_argument naming the knob when no gap of
    //! registered_bytes fits (or `bytes` is 0).
    void* allocate_registered(std::uint64_t bytes) {
        const std::string head = "chorus::lane_process: allocate_registered: `bytes` ";
        if (bytes == 0) throw error(errc::invalid_argument, head + "is 0");
        const std::uint64_t cap = cfg_.registered_bytes;
        std::uint64_t at = 0, used = 0;
        std::size_t i = 0;
        for (;; ++i) {
            const std::uint64_t end = i < blocks_.size() ? blocks_[i].offset : cap;
            if (at <= end && bytes <= end - at) break;
            if (i == blocks_.size()) {
                for (const block& k : blocks_) used += round_up(k.bytes, lane_stage_align_bytes);
                throw error(errc::invalid_argument,
                            head + std::to_string(bytes) + " do not fit: " + std::to_string(cap - std::min(used, cap)) +
                                " of " + cfg_.knob_prefix + "registered_bytes (" + std::to_string(cap) +
                                ") are free, in no gap that large; raise it");
            }
            at = round_up(blocks_[i].offset + blocks_[i].bytes, lane_stage_align_bytes);
        }
        blocks_.insert(blocks_.begin() + std::ptrdiff_t(i), block{at, bytes});
        return own() + registered_offset_ + at;
    }
    //! Returns a block allocate_registered gave (its start) for reuse; no
    //! collective of any rank may still use it. Anything else (a null
    //! pointer included): errc::invalid_argument naming `what`.
    void free_registered(const void* p, const std::string& what = "`p`") {
        const auto a = reinterpret_cast<std::uint64_t>(p);
        const auto base = reinterpret_cast<std::uint64_t>(own()) + registered_offset_;
        for (std::size_t i = 0; i < blocks_.size(); ++i)
            if (p != nullptr && a >= base && a - base == blocks_[i].offset) {
                blocks_.erase(blocks_.begin() + std::ptrdiff_t(i));
                return;
            }
        throw error(errc::invalid_argument, "chorus::lane_process: free_registered: " + what +
                                                " is not the start of a block this rank's allocate_registered gave "
                                                "(or it was freed already)");
    }
    //! Bytes of registered memory in blocks not freed.
    std::uint64_t registered_in_use_bytes() const noexcept {
        std::uint64_t u = 0;
        for (const block& k : blocks_) u += k.bytes;
        return u;
    }
    std::uint64_t registered_bytes() const noexcept { return cfg_.registered_bytes; }

    //! Whether peers can read [p, p + bytes): it lies in this rank's
    //! scratch or registered memory. A call whose in or out cannot be read
    //! is staged (plan_staging).
    bool reachable(const void* p, std::uint64_t bytes) const noexcept {
        const auto a = reinterpret_cast<std::uint64_t>(p);
        auto in = [&](std::uint64_t off, std::uint64_t len) {
            const std::uint64_t b = reinterpret_cast<std::uint64_t>(own()) + off;
            return p != nullptr && a >= b && a - b <= len && bytes <= len - (a - b);
        };
        if (in(scratch_offset_, cfg_.scratch_bytes) || in(registered_offset_, cfg_.registered_bytes)) return true;
        for (const registration& g : regs_)
            if (p != nullptr && a >= g.base && a - g.base <= g.bytes && bytes <= g.bytes - (a - g.base)) return true;
        return false;
    }

    //! Registers [p, p + bytes), memory of this rank that its provider did
    //! not create (for the GPU backend: any cudaMalloc memory), so that its
    //! peers reach it: a call whose buffers lie in it runs zero-copy.
    //! Returns the registration's handle (> 0, the same on every rank).
    //!
    //! Collective and blocking: every rank calls register_range and
    //! deregister_range in the same order (each with its own range, of any
    //! size). The ranks trade their ranges through their slots in the node
    //! segment (lane_reg_slot; the bootstrap is closed by then): each
    //! exports its range (lane_memory_provider::export_range), publishes
    //! it, waits for every peer's, opens each peer's (open) and adds it to
    //! its map of that peer (one lane_peer_map range per registration). At
    //! most max_lane_registrations are live at once.
    //!
    //! Errors. A refused range (`what` null or empty, overlapping this
    //! rank's segment or one of its live registrations, the limit reached,
    //! a provider without export_range, memory export_range cannot share)
    //! throws errc::invalid_argument naming `what` on this rank and
    //! errc::peer_failed naming this rank on its peers: nothing is
    //! registered anywhere. Peers whose calls differ (a register where
    //! another rank deregisters, other handles): errc::mismatch everywhere,
    //! nothing changes. A peer that does not come within setup_timeout:
    //! errc::timeout naming it, and the world is aborted (its order is
    //! lost); a dead peer: errc::peer_failed naming it.
    std::uint64_t register_range(const void* p, std::uint64_t bytes, const std::string& what = "`p`") {
        const std::uint64_t k = ++calls_;
        const std::string fn =
            "chorus::lane_process: register_range (registration call " + std::to_string(k) + " of this world)";
        if (aborted()) throw broken(fn);
        lane_reg_slot f{};
        f.op = 1;
        f.base = reinterpret_cast<std::uint64_t>(p);
        f.bytes = bytes;
        std::optional<error> refused;
        try {
            check_range(p, bytes, what);
            try {
                cfg_.memory.export_range(p, std::size_t(bytes), f.name, f.alloc_base, f.alloc_bytes);
            } catch (const error& e) {
                throw error(e.code(), what + ": " + e.what());
            }
            if (!(f.alloc_base <= f.base && f.base - f.alloc_base <= f.alloc_bytes &&
                  bytes <= f.alloc_bytes - (f.base - f.alloc_base)))
                throw error(errc::internal, "the provider's export_range gave an allocation that does not hold " +
                                                what);
        } catch (const error& e) {
            refused = error(e.code(), fn + ": " + e.what());
        }
        trade(k, f, refused, fn);
        registration g{k, f.base, bytes, std::vector<lane_mapping>(std::size_t(n_)),
                       std::vector<lane_range>(std::size_t(n_))};
        int q = 0;
        try {
            for (q = 0; q < n_; ++q) {
                if (q == rank_) continue;
                const lane_reg_slot& o = slot(q);
                lane_mapping m = cfg_.memory.open(o.name, std::size_t(o.alloc_bytes));
                g.peers[std::size_t(q)] = m;
                g.ranges[std::size_t(q)] = {o.base, reinterpret_cast<std::uint64_t>(m.base) + (o.base - o.alloc_base),
                                            o.bytes};
            }
        } catch (const error& e) {
            close_all(g);
            finish(k);
            throw error(e.code(), fn + ": opening rank " + std::to_string(q) + "'s range: " + e.what() +
                                      " (the other ranks registered; a call on that range reaches this rank as "
                                      "unreachable)");
        }
        regs_.push_back(std::move(g));
        rebuild_maps();
        finish(k);
        return k;
    }

    //! Ends the registration `handle` (register_range's): this rank closes
    //! its mappings of the peers' ranges and drops them from its maps.
    //! Collective and blocking like register_range, and a barrier: when it
    //! returns, no peer maps this rank's range any more (its owner may free
    //! it). No call of any rank may still use the range. A handle this rank
    //! does not hold: errc::invalid_argument naming `what` here,
    //! errc::peer_failed on the peers; nothing is deregistered.
    void deregister_range(std::uint64_t handle, const std::string& what = "`handle`") {
        const std::uint64_t k = ++calls_;
        const std::string fn =
            "chorus::lane_process: deregister_range (registration call " + std::to_string(k) + " of this world)";
        if (aborted()) throw broken(fn);
        lane_reg_slot f{};
        f.op = 2;
        f.id = handle;
        std::optional<error> refused;
        const auto it = std::find_if(regs_.begin(), regs_.end(), [&](const registration& g) { return g.id == handle; });
        if (it == regs_.end()) {
            refused = error(errc::invalid_argument,
                            fn + ": " + what + " (" + std::to_string(handle) +
                                ") is not a live registration of this world (never returned by register_range, or "
                                "deregistered already)");
        }
        trade(k, f, refused, fn);
        close_all(*it);
        regs_.erase(it);
        rebuild_maps();
        finish(k);
        wait_all(k, &lane_reg_slot::done, fn); // every peer closed its mapping of this rank's range
    }

    //! Live registrations of this rank (register_range).
    std::size_t registrations() const noexcept { return regs_.size(); }

    bool aborted() const noexcept {
        return std::atomic_ref<std::uint32_t>(header()->abort).load(std::memory_order_acquire) != 0;
    }
    //! Stops every rank's waits (the world is broken for good).
    void abort() noexcept { std::atomic_ref<std::uint32_t>(header()->abort).store(1, std::memory_order_release); }
    //! The rank the watcher saw die, or -1.
    int dead_rank() const noexcept {
        return std::atomic_ref<std::int32_t>(header()->dead).load(std::memory_order_acquire) - 1;
    }

    //! Why this rank's last call failed, or nothing when it did not and the
    //! world is not aborted: its own unreachable peer buffer or mismatch
    //! first (gpu_fault_error), else a dead peer (errc::peer_failed naming
    //! it and its process), else what gpu_fault_error makes of the records.
    std::optional<error> failure() const {
        const lane_fault& f = faults()[rank_];
        if (f.code == 0 && !aborted()) return std::nullopt;
        const int own_code = f.code;
        if (own_code != int(status::unreachable) && own_code != int(status::mismatch)) {
            if (const int d = dead_rank(); d >= 0)
                return error(errc::peer_failed, "chorus::lane_process: rank " + std::to_string(rank_) + ": rank " +
                                                    std::to_string(d) + " (process " +
                                                    std::to_string(header()->pid[d]) +
                                                    ") died; the world is broken, make a new one");
        }
        return gpu_fault_error(rank_, faults(), n_, "lane_process_world::abort()");
    }

private:
    struct record {
        lane_segment_name node; //!< rank 0's node segment (others: empty)
        lane_segment_name own;
        std::uint64_t own_base; //!< the segment's address in its creator
        std::uint64_t scratch_bytes, registered_bytes;
        std::int64_t pid;
        std::int32_t size;  //!< the rank count this rank was given
        char host[64];      //!< gethostname
    };

    //! What the constructors check before anything is made.
    static void check_args(int size, const lane_process_config& cfg) {
        if (size < 1 || size > max_lane_ranks)
            throw error(errc::invalid_argument, "chorus::lane_process: `size` is " + std::to_string(size) +
                                                    "; a lane world has 1.." + std::to_string(max_lane_ranks) +
                                                    " ranks");
        for (const lane_memory_provider* m : {&cfg.memory, &cfg.node_memory})
            if (m->create == nullptr || m->open == nullptr || m->unlink == nullptr || m->close == nullptr)
                throw error(errc::invalid_argument, std::string("chorus::lane_process: `cfg.") +
                                                        (m == &cfg.memory ? "memory" : "node_memory") +
                                                        "` lacks a function");
    }
    //! The file bootstrap of a world made from a unique_id (its arguments
    //! checked first: a bad `size` must not wait for ranks that never come).
    static std::unique_ptr<lane_bootstrap> file_boot(const unique_id& id, int rank, int size,
                                                     const lane_process_config& cfg) {
        check_args(size, cfg);
        return std::make_unique<file_lane_bootstrap>(id, rank, size, cfg.setup_timeout);
    }

    static std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
    std::byte* own() const noexcept { return segs_[std::size_t(rank_)].base; }
    lane_node_header* header() const noexcept { return reinterpret_cast<lane_node_header*>(node_.base); }
    lane_fault* faults() const noexcept { return reinterpret_cast<lane_fault*>(node_.base + faults_offset_); }

    void unlink_own(const record& mine) noexcept {
        try {
            cfg_.memory.unlink(mine.own);
            if (rank_ == 0 && node_.base != nullptr) cfg_.node_memory.unlink(mine.node);
        } catch (...) {
        }
    }
    void release() noexcept {
        for (registration& g : regs_) close_all(g);
        regs_.clear();
        for (lane_mapping& m : segs_)
            if (m.base != nullptr) cfg_.memory.close(m);
        if (node_.base != nullptr) cfg_.node_memory.close(node_);
    }

    //! The watcher thread: a peer gone without having left is dead.
    void watch() {
        lane_node_header* h = header();
        std::unique_lock<std::mutex> lk(mu_);
        while (!stop_) {
            for (int r = 0; r < n_; ++r) {
                if (r == rank_) continue;
                const int pid = int(std::atomic_ref<std::int64_t>(h->pid[r]).load(std::memory_order_acquire));
                if (pid == 0) continue;
                // Gone first, then left: a rank marks itself left before it exits.
                if (!process_gone(pid) || std::atomic_ref<std::uint8_t>(h->left[r]).load(std::memory_order_seq_cst))
                    continue;
                std::int32_t none = 0;
                std::atomic_ref<std::int32_t>(h->dead).compare_exchange_strong(none, r + 1);
                std::atomic_ref<std::uint32_t>(h->abort).store(1, std::memory_order_release);
                return; // the world is broken: nothing more to watch for
            }
            cv_.wait_for(lk, cfg_.watch_period, [this] { return stop_; });
        }
    }

    // --- registration (register_range) ---

    //! A live registration: this rank's range and, per peer q, its mapping
    //! of q's range and the lane_peer_map range it adds to maps_[q].
    struct registration {
        std::uint64_t id, base, bytes;
        std::vector<lane_mapping> peers; //!< [n]
        std::vector<lane_range> ranges;  //!< [n]
    };
    lane_reg_slot* slots() const noexcept { return reinterpret_cast<lane_reg_slot*>(node_.base + reg_offset_); }
    lane_reg_slot& slot(int r) const noexcept { return slots()[r]; }

    //! Why register_range may not take [p, p + bytes) (see it).
    void check_range(const void* p, std::uint64_t bytes, const std::string& what) const {
        if (cfg_.memory.export_range == nullptr)
            throw error(errc::invalid_argument,
                        "`cfg.memory` has no export_range: this world's memory provider cannot share memory it did "
                        "not create");
        if (p == nullptr) throw error(errc::invalid_argument, what + " is null");
        if (bytes == 0) throw error(errc::invalid_argument, what + " is empty (0 bytes)");
        const auto a = reinterpret_cast<std::uint64_t>(p);
        if (bytes > ~std::uint64_t(0) - a) throw error(errc::invalid_argument, what + " wraps around the address space");
        auto overlaps = [&](std::uint64_t b, std::uint64_t len) { return a < b + len && b < a + bytes; };
        if (overlaps(reinterpret_cast<std::uint64_t>(own()), segment_bytes_))
            throw error(errc::invalid_argument,
                        what + " overlaps this rank's shared segment (its scratch or registered area, which peers "
                               "reach already: it needs no registration)");
        for (const registration& g : regs_)
            if (overlaps(g.base, g.bytes))
                throw error(errc::invalid_argument, what + " overlaps registration " + std::to_string(g.id) +
                                                        " of this rank (" + std::to_string(g.bytes) +
                                                        " bytes); deregister it first");
        if (regs_.size() >= std::size_t(max_lane_registrations))
            throw error(errc::invalid_argument,
                        what + " cannot be registered: this rank holds " + std::to_string(regs_.size()) +
                            " live registrations, the most a world holds (max_lane_registrations = " +
                            std::to_string(max_lane_registrations) + "); deregister one first");
    }
    //! The world is broken: why, for `fn`.
    error broken(const std::string& fn) const {
        if (const int d = dead_rank(); d >= 0)
            return error(errc::peer_failed, fn + ": rank " + std::to_string(d) + " (process " +
                                                std::to_string(header()->pid[d]) +
                                                ") died; the world is broken, make a new one");
        return error(errc::aborted, fn + ": the world was aborted; make a new one");
    }
    //! Waits until every peer's `field` reached `k` (deadline: setup_timeout;
    //! stops on an abort and on a peer that left the world).
    void wait_all(std::uint64_t k, std::uint64_t lane_reg_slot::*field, const std::string& fn) {
        const auto deadline = std::chrono::steady_clock::now() + cfg_.setup_timeout;
        auto reached = [&](int r) {
            return std::atomic_ref<std::uint64_t>(slot(r).*field).load(std::memory_order_acquire) >= k;
        };
        for (unsigned spin = 0;; ++spin) {
            std::string missing;
            for (int r = 0; r < n_; ++r)
                if (r != rank_ && !reached(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            if (missing.empty()) return;
            if (aborted()) throw broken(fn);
            for (int r = 0; r < n_; ++r)
                if (r != rank_ && std::atomic_ref<std::uint8_t>(header()->left[r]).load(std::memory_order_seq_cst) &&
                    !reached(r))
                    throw error(errc::peer_failed, fn + ": rank " + std::to_string(r) +
                                                       " left the world (destroyed its communicator) without making "
                                                       "this call");
            if (std::chrono::steady_clock::now() > deadline) {
                abort();
                throw error(errc::timeout,
                            fn + ": rank(s) " + missing + " did not make this call within " +
                                std::to_string(cfg_.setup_timeout.count()) + " ms (" + cfg_.knob_prefix +
                                "setup_timeout; every rank registers and deregisters in the same order); the world "
                                "is aborted");
            }
            if (spin < 64) std::this_thread::yield();
            else std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    //! Publishes this rank's call `k` once every peer finished call k - 1
    //! (its slot is free again).
    void publish(std::uint64_t k, const lane_reg_slot& f, const std::string& fn) {
        wait_all(k - 1, &lane_reg_slot::done, fn);
        lane_reg_slot& s = slot(rank_);
        s.op = f.op;
        s.refused = f.refused;
        s.id = f.id;
        s.name = f.name;
        s.alloc_base = f.alloc_base;
        s.alloc_bytes = f.alloc_bytes;
        s.base = f.base;
        s.bytes = f.bytes;
        std::atomic_ref<std::uint64_t>(s.seq).store(k, std::memory_order_release);
    }
    //! One registration call's exchange: publishes `f` (marked refused when
    //! this rank refused the call: then finishes it and throws `refused`,
    //! its peers see the refusal), waits for every peer's call `k` and
    //! checks that all made the same one (agree).
    void trade(std::uint64_t k, lane_reg_slot& f, const std::optional<error>& refused, const std::string& fn) {
        f.refused = refused ? 1 : 0;
        publish(k, f, fn);
        if (refused) {
            finish(k);
            throw *refused;
        }
        wait_all(k, &lane_reg_slot::seq, fn);
        agree(k, f, fn);
    }
    void finish(std::uint64_t k) noexcept {
        std::atomic_ref<std::uint64_t>(slot(rank_).done).store(k, std::memory_order_release);
    }
    //! Every rank published call `k`: throws (after finishing it) unless
    //! every peer made the same call and took its own arguments.
    void agree(std::uint64_t k, const lane_reg_slot& f, const std::string& fn) {
        auto name = [](std::uint32_t op) { return op == 1 ? "register_range" : "deregister_range"; };
        for (int q = 0; q < n_; ++q) {
            if (q == rank_) continue;
            const lane_reg_slot& o = slot(q);
            std::optional<error> e;
            if (o.refused)
                e = error(errc::peer_failed, fn + ": rank " + std::to_string(q) +
                                                 " refused its own arguments (its error says why); nothing changed");
            else if (o.op != f.op)
                e = error(errc::mismatch, fn + ": rank " + std::to_string(q) + " called " + name(o.op) +
                                              " where this rank called " + name(f.op) +
                                              " (every rank registers and deregisters in the same order); nothing "
                                              "changed");
            else if (o.op == 2 && o.id != f.id)
                e = error(errc::mismatch, fn + ": rank " + std::to_string(q) + " deregisters handle " +
                                              std::to_string(o.id) + ", this rank handle " + std::to_string(f.id) +
                                              "; nothing changed");
            if (e) {
                finish(k);
                throw *e;
            }
        }
    }
    void close_all(registration& g) noexcept {
        for (lane_mapping& m : g.peers)
            if (m.base != nullptr) cfg_.memory.close(m);
    }
    //! maps_[q]: the scratch, the registered area, then every live registration.
    void rebuild_maps() noexcept {
        for (int q = 0; q < n_; ++q) {
            if (q == rank_) continue;
            lane_peer_map& m = maps_[std::size_t(q)];
            m.count = 2;
            for (const registration& g : regs_) m.ranges[m.count++] = g.ranges[std::size_t(q)];
            for (int i = m.count; i < max_lane_ranges; ++i) m.ranges[i] = {};
        }
    }

    lane_process_config cfg_;
    int rank_ = 0, n_ = 1;
    std::uint64_t area_bytes_ = 0, scratch_offset_ = 0, registered_offset_ = 0, segment_bytes_ = 0;
    std::uint64_t faults_offset_ = 0, reg_offset_ = 0, node_bytes_ = 0;
    std::uint64_t calls_ = 0;         //!< registration calls made (register_range, deregister_range)
    std::vector<registration> regs_;  //!< live registrations, oldest first
    struct block {
        std::uint64_t offset, bytes; //!< in the registered area
    };
    std::vector<block> blocks_; //!< allocate_registered's blocks not freed, by offset
    std::vector<record> recs_;
    std::vector<lane_mapping> segs_; //!< [n]: every rank's segment as this process maps it
    lane_mapping node_{};
    std::vector<lane_rank_area*> table_;
    std::vector<lane_peer_map> maps_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread watcher_;
};

} // namespace chorus::detail
