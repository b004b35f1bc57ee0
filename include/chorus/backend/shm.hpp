#pragma once
//! \file backend/shm.hpp
//! Shared memory between the processes of one node (POSIX shm), and the
//! bounded wait on a counter that lives in it. Used by the MPI backend for
//! its intra-node phases.
//!
//! A segment is created by one process under a fresh name, exclusively
//! (mode 0600: readable by the owning user only; a name that exists, left
//! by an earlier job whose process id was reused, is skipped for another),
//! reserved whole with posix_fallocate (a /dev/shm too small is an error
//! naming the size and the knob, not a SIGBUS at first touch), mapped by
//! the others once they learnt its name, and unlinked by the last of them
//! to map it. A job killed inside that window leaves its name behind: the
//! next creator on the node removes the names of processes that no longer
//! exist (sweep_stale_segments).

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../core/error.hpp"
#include "host_wait.hpp"

namespace chorus::detail {

//! True while process `pid` exists (a killed peer is gone once reaped).
inline bool process_alive(int pid) {
    if (pid <= 0) return true; // unknown: assume alive
    return kill(pid, 0) == 0 || errno != ESRCH;
}

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

    //! Creates and maps a new segment of `bytes` bytes, zero-filled, under
    //! a name "/chorus-<pid>-<random>" that did not exist (written to
    //! `name`). The whole size is reserved: when /dev/shm cannot hold it
    //! the error (errc::unavailable) says how much was asked, how much is
    //! free, and `knob` (what sets the size). Nothing is left behind on
    //! failure.
    //! With `populate` the mapping's page tables are filled at once
    //! (MAP_POPULATE): no page fault at first touch.
    static shm_segment create_unique(std::string& name, std::size_t bytes, const std::string& knob,
                                     bool populate = false) {
        if (bytes > static_cast<std::size_t>(std::numeric_limits<off_t>::max()))
            throw error(errc::unavailable, "chorus: a shared-memory segment of " + std::to_string(bytes) +
                                               " bytes is larger than a file can be; " + knob);
        // Asking tmpfs for more than it has free would fill it page by page
        // before failing, and /dev/shm may be as large as the memory (or
        // larger): more than the memory available would wake the OOM
        // killer instead. Refuse either at once.
        if (const std::uint64_t avail = free_bytes(); avail != 0 && bytes > avail) no_room(bytes, knob);
        if (const std::uint64_t mem = memory_available(); mem != 0 && bytes > mem)
            throw error(errc::unavailable, "chorus: the node's shared memory needs " + std::to_string(bytes) +
                                               " bytes but the machine has " + std::to_string(mem) +
                                               " bytes of memory available (MemAvailable); " + knob + "; lower it");
        std::random_device rd;
        std::mt19937_64 gen((std::uint64_t(rd()) << 32) ^ rd() ^
                            std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
        int fd = -1;
        for (int attempt = 0; fd < 0; ++attempt) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "/chorus-%d-%016llx", static_cast<int>(getpid()),
                          static_cast<unsigned long long>(gen()));
            name = buf;
            fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
            if (fd < 0 && (errno != EEXIST || attempt == 15)) fail("shm_open(O_CREAT | O_EXCL) of " + name);
        }
        int rc = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
        const char* step = "ftruncate";
        if (rc == 0) {
            rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); // returns the error, errno untouched
            step = "posix_fallocate";
        }
        if (rc != 0) {
            close(fd);
            shm_unlink(name.c_str());
            if (rc == ENOSPC || rc == ENOMEM || rc == EFBIG) no_room(bytes, knob);
            errno = rc;
            fail(std::string(step) + " of " + name + " to " + std::to_string(bytes) + " bytes");
        }
        return map(fd, name, bytes, populate);
    }
    //! Maps an existing segment created by another process.
    static shm_segment open(const std::string& name, std::size_t bytes, bool populate = false) {
        const int fd = shm_open(name.c_str(), O_RDWR, 0);
        if (fd < 0) fail("shm_open of " + name);
        return map(fd, name, bytes, populate);
    }
    static void unlink(const std::string& name) { shm_unlink(name.c_str()); }

    //! Removes the names an earlier chorus job of this user left in
    //! /dev/shm because it was killed between creating and unlinking them:
    //! "chorus-<pid>-..." whose process no longer exists. A process that
    //! mapped such a segment keeps its memory; only the name goes.
    static void sweep_stale_segments() noexcept {
        DIR* d = opendir("/dev/shm");
        if (d == nullptr) return;
        const uid_t me = geteuid();
        while (const dirent* e = readdir(d)) {
            int pid = 0, used = 0;
            if (std::sscanf(e->d_name, "chorus-%d-%*16[0-9a-f]%n", &pid, &used) != 1 || used == 0 ||
                e->d_name[used] != '\0' || pid <= 0 || pid == static_cast<int>(getpid()))
                continue;
            struct stat st{};
            if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != me) continue;
            if (!process_alive(pid)) shm_unlink((std::string("/") + e->d_name).c_str());
        }
        closedir(d);
    }

    std::byte* data() const noexcept { return base_; }
    std::size_t bytes() const noexcept { return bytes_; }

private:
    static shm_segment map(int fd, const std::string& name, std::size_t bytes, bool populate = false) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
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
    //! Bytes free in /dev/shm (0: unknown).
    static std::uint64_t free_bytes() noexcept {
        struct statvfs v{};
        return statvfs("/dev/shm", &v) == 0 ? std::uint64_t(v.f_bavail) * v.f_frsize : 0;
    }
    //! MemAvailable of /proc/meminfo in bytes (0: unknown).
    static std::uint64_t memory_available() noexcept {
        std::FILE* f = std::fopen("/proc/meminfo", "r");
        if (f == nullptr) return 0;
        char line[128];
        unsigned long long kb = 0;
        while (std::fgets(line, sizeof line, f) != nullptr)
            if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
        std::fclose(f);
        return std::uint64_t(kb) * 1024;
    }
    [[noreturn]] static void no_room(std::size_t bytes, const std::string& knob) {
        const std::uint64_t avail = free_bytes();
        throw error(errc::unavailable, "chorus: /dev/shm cannot hold the node's shared memory: it needs " +
                                           std::to_string(bytes) + " bytes and has " +
                                           (avail != 0 ? std::to_string(avail) : std::string("an unknown number of")) +
                                           " bytes free; " + knob + "; lower it, or enlarge /dev/shm (docker: --shm-size)");
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
