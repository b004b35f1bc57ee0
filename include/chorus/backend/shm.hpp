#pragma once
//! \file backend/shm.hpp
//! Shared memory between the processes of one node (POSIX shm), and the
//! bounded wait on a counter that lives in it. Used by the MPI backend for
//! its intra-node phases.
//!
//! A segment is created by one process (mode 0600: readable by the owning
//! user only), mapped by the others once they learnt its name, and
//! unlinked as soon as everyone mapped it, so no name outlives the job even
//! when a process is killed.

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.hpp"
#include "host_wait.hpp"

namespace chorus::detail {

//! One mapping of a named POSIX shared-memory segment.
class shm_segment {
public:
    shm_segment() = default;
    shm_segment(const shm_segment&) = delete;
    shm_segment& operator=(const shm_segment&) = delete;
    shm_segment(shm_segment&& o) noexcept { swap(o); }
    shm_segment& operator=(shm_segment&& o) noexcept {
        shm_segment t(std::move(o));
        swap(t);
        return *this;
    }
    ~shm_segment() {
        if (base_ != nullptr) munmap(base_, bytes_);
    }

    //! Creates and maps `name` (which must not exist), zero-filled.
    static shm_segment create(const std::string& name, std::size_t bytes) {
        const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
        if (fd < 0) fail("shm_open(O_CREAT) of " + name);
        if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
            const int e = errno;
            close(fd);
            shm_unlink(name.c_str());
            errno = e;
            fail("ftruncate of " + name + " to " + std::to_string(bytes) + " bytes");
        }
        return map(fd, name, bytes);
    }
    //! Maps an existing segment created by another process.
    static shm_segment open(const std::string& name, std::size_t bytes) {
        const int fd = shm_open(name.c_str(), O_RDWR, 0);
        if (fd < 0) fail("shm_open of " + name);
        return map(fd, name, bytes);
    }
    static void unlink(const std::string& name) { shm_unlink(name.c_str()); }

    std::byte* data() const noexcept { return base_; }
    std::size_t bytes() const noexcept { return bytes_; }

private:
    static shm_segment map(int fd, const std::string& name, std::size_t bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        const int e = errno;
        close(fd);
        if (p == MAP_FAILED) {
            errno = e;
            fail("mmap of " + name + " (" + std::to_string(bytes) + " bytes)");
        }
        shm_segment s;
        s.base_ = static_cast<std::byte*>(p);
        s.bytes_ = bytes;
        return s;
    }
    [[noreturn]] static void fail(const std::string& what) {
        throw error(errc::internal, "chorus: " + what + " failed: " + std::strerror(errno) +
                                        " (is /dev/shm mounted and large enough?)");
    }
    void swap(shm_segment& o) noexcept {
        std::swap(base_, o.base_);
        std::swap(bytes_, o.bytes_);
    }
    std::byte* base_ = nullptr;
    std::size_t bytes_ = 0;
};

//! True while process `pid` exists (a killed peer is gone once reaped).
inline bool process_alive(int pid) {
    if (pid <= 0) return true; // unknown: assume alive
    return kill(pid, 0) == 0 || errno != ESRCH;
}

//! Polls `ready()` until it holds: spin for bp.spin, then yield for
//! bp.yield, then sleep in growing slices (at most 1 ms, so a hand-off
//! after a long wait costs at most that). Between polls it asks
//! `check()` (abort flag, peer liveness) and the deadline. Returns ok,
//! timeout or whatever non-ok status check() returned.
template <class Ready, class Check>
status poll_until(Ready&& ready, Check&& check, std::chrono::steady_clock::time_point deadline,
                  const backoff_policy& bp) {
    using clock = std::chrono::steady_clock;
    if (ready()) return status::ok;
    const auto start = clock::now();
    auto sleep = std::chrono::microseconds(20);
    for (unsigned i = 1;; ++i) {
        if (ready()) return status::ok;
        const auto now = clock::now();
        const auto waited = now - start;
        if (waited < bp.spin) {
            cpu_relax();
            continue;
        }
        if (i % 16 == 0 || waited >= bp.spin + bp.yield) {
            if (const status st = check(); st != status::ok) return st;
            if (now >= deadline) return status::timeout;
        }
        if (waited < bp.spin + bp.yield) {
            std::this_thread::yield();
        } else {
            std::this_thread::sleep_for(sleep);
            if (sleep < std::chrono::microseconds(1000)) sleep *= 2;
        }
    }
}

} // namespace chorus::detail
