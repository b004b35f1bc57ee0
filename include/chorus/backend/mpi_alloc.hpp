#pragma once
//! \file backend/mpi_alloc.hpp
//! Buffers in shared memory for the MPI backend's zero-copy path
//! (communicator<mpi>::alloc / free, mpi::api in backend/mpi.hpp): every
//! buffer is a POSIX shared-memory segment of its own (shm.hpp), created
//! by this process under a fresh name "/chorus-<pid>-<token>" that stays
//! in /dev/shm while the buffer lives, so that node peers can map it by
//! name when a collective first names it. The registry is the process's
//! (any communicator<mpi> of the process recognises any of its buffers).
//! free() unlinks the name and unmaps this process's view; a peer that
//! still maps it keeps valid memory until it drops its mapping. At exit
//! the names of buffers never freed are unlinked; a process killed
//! leaves its names, which the next node setup's sweep removes
//! (shm_segment::sweep_stale_segments: names of dead processes). Part of
//! backend/mpi.hpp, which includes it.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "../core/error.hpp"
#include "shm.hpp"

namespace chorus::detail {

//! The process's buffers from communicator<mpi>::alloc.
class shm_buffers {
public:
    //! Where a range lies: its buffer's token (the name's random part),
    //! the range's byte offset in it and the buffer's mapped size.
    struct location {
        std::uint64_t token = 0;
        std::uint64_t offset = 0;
        std::uint64_t seg_bytes = 0;
    };

    static shm_buffers& process() {
        static shm_buffers b;
        return b;
    }
    shm_buffers() = default;
    shm_buffers(const shm_buffers&) = delete;
    shm_buffers& operator=(const shm_buffers&) = delete;
    ~shm_buffers() {
        for (const entry& e : v_) shm_segment::unlink(e.name);
    }

    //! A new buffer of `bytes` (> 0) bytes, zero-filled, page-aligned,
    //! its pages mapped. /dev/shm or memory too small: errc::unavailable.
    void* allocate(std::uint64_t bytes, const std::string& what) {
        const std::uint64_t page = 4096;
        if (bytes > std::uint64_t(std::numeric_limits<std::int64_t>::max()) - page)
            throw error(errc::invalid_argument, what + ": " + std::to_string(bytes) + " bytes is more than a "
                                                         "shared-memory segment can hold");
        const std::uint64_t rounded = (bytes + page - 1) / page * page;
        entry e;
        try {
            e.seg = shm_segment::create_unique(e.name, static_cast<std::size_t>(rounded),
                                               what + " asked for " + std::to_string(bytes) + " bytes", true);
        } catch (const error& err) {
            throw error(err.code(), what + ": " + err.what());
        }
        unsigned long long token = 0;
        int pid = 0;
        if (std::sscanf(e.name.c_str(), "/chorus-%d-%16llx", &pid, &token) != 2 || token == 0) {
            shm_segment::unlink(e.name);
            throw error(errc::internal, what + ": unexpected segment name " + e.name);
        }
        e.token = token;
        void* p = e.seg.data();
        std::lock_guard<std::mutex> lk(m_);
        const auto at = std::lower_bound(v_.begin(), v_.end(), e.seg.data(),
                                         [](const entry& x, const std::byte* b) { return x.seg.data() < b; });
        v_.insert(at, std::move(e));
        return p;
    }

    //! Frees the buffer that starts at `p`; anything else (a pointer into
    //! a buffer, or memory not from allocate) throws errc::invalid_argument
    //! with `what` (which names the argument).
    void release(const void* p, const std::string& what) {
        entry gone;
        {
            std::lock_guard<std::mutex> lk(m_);
            const auto it = std::find_if(v_.begin(), v_.end(), [&](const entry& e) { return e.seg.data() == p; });
            if (it == v_.end()) {
                const bool inside = find_locked(p, 1) != nullptr;
                throw error(errc::invalid_argument,
                            what + (inside ? " points into a buffer from alloc but not at its start"
                                           : " is not a buffer from alloc (or was freed already)"));
            }
            gone = std::move(*it);
            v_.erase(it);
        }
        frees_.fetch_add(1, std::memory_order_release);
        shm_segment::unlink(gone.name); // the mapping goes with `gone`
    }

    //! Whether [p, p + bytes) lies inside one buffer, and where.
    bool find(const void* p, std::uint64_t bytes, location& loc) const {
        if (p == nullptr) return false;
        std::lock_guard<std::mutex> lk(m_);
        const entry* e = find_locked(p, bytes);
        if (e == nullptr) return false;
        loc.token = e->token;
        loc.offset = static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - e->seg.data());
        loc.seg_bytes = e->seg.bytes();
        return true;
    }
    //! Buffers freed so far (peers drop their mappings when it moves).
    std::uint64_t frees() const noexcept { return frees_.load(std::memory_order_acquire); }
    //! Buffers allocated and not freed.
    std::size_t live() const {
        std::lock_guard<std::mutex> lk(m_);
        return v_.size();
    }

    //! The name a buffer of process `pid` with `token` has in /dev/shm.
    static std::string name_of(int pid, std::uint64_t token) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "/chorus-%d-%016llx", pid, static_cast<unsigned long long>(token));
        return buf;
    }

private:
    struct entry {
        shm_segment seg;
        std::string name;
        std::uint64_t token = 0;
    };
    const entry* find_locked(const void* p, std::uint64_t bytes) const {
        const auto* b = static_cast<const std::byte*>(p);
        auto it = std::upper_bound(v_.begin(), v_.end(), b,
                                   [](const std::byte* x, const entry& e) { return x < e.seg.data(); });
        if (it == v_.begin()) return nullptr;
        --it;
        const std::uint64_t off = static_cast<std::uint64_t>(b - it->seg.data());
        if (off >= it->seg.bytes() || bytes > it->seg.bytes() - off) return nullptr;
        return &*it;
    }
    mutable std::mutex m_;
    std::vector<entry> v_; //!< sorted by address
    std::atomic<std::uint64_t> frees_{0};
};

} // namespace chorus::detail
