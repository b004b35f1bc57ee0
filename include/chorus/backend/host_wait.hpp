#pragma once
//! \file backend/host_wait.hpp
//! Progress flags for ranks that are host threads, and the bounded wait on
//! them: spin briefly, then yield, then block in the kernel (a futex on
//! Linux) in slices, re-checking the abort flag and the deadline after each.
//! A poster wakes blocked waiters only when there are any, so the common,
//! fast path is one store.

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#  include <linux/futex.h>
#  include <sys/syscall.h>
#  include <time.h>
#  include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#endif

#include "../core/error.hpp"

namespace chorus::detail {

//! One (rank, channel) progress flag, on its own cache line.
struct alignas(64) host_flag {
    std::atomic<std::uint64_t> value{0};  //!< (sequence << 32) | units done
    std::atomic<std::uint32_t> epoch{0};  //!< bumped on every post: the futex word
    std::atomic<std::uint32_t> waiters{0};//!< threads blocked (or about to block) on epoch
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds slice) {
#if defined(__linux__)
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(slice.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(slice.count() % 1000000000);
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
#else
    (void)word;
    (void)expected;
    std::this_thread::sleep_for(slice < std::chrono::microseconds(200) ? slice : std::chrono::microseconds(200));
#endif
}

inline void futex_wake_all(std::atomic<std::uint32_t>& word) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
    (void)word;
#endif
}

//! Publishes a new flag value and wakes blocked waiters, if any. The
//! store and the look at `waiters` are sequentially consistent (a waiter
//! counts itself in, then looks at the value: one of the two sees the
//! other); the epoch is bumped only when someone waits, so the common case
//! is one store, with no locked read-modify-write on the line peers poll.
inline void post_flag(host_flag& f, std::uint64_t v) {
    f.value.store(v, std::memory_order_seq_cst);
    if (f.waiters.load(std::memory_order_seq_cst) != 0) {
        f.epoch.fetch_add(1, std::memory_order_seq_cst);
        futex_wake_all(f.epoch);
    }
}

//! Wakes everyone blocked on the flag without changing its value (abort).
inline void nudge_flag(host_flag& f) {
    f.epoch.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(f.epoch);
}

//! How long to spin and yield before blocking. Spinning is bounded by
//! time, not by a count (a pause instruction costs 5-150 cycles depending
//! on the CPU), and must outlast a futex wake-up (tens of microseconds on
//! a virtual machine): otherwise two ranks that wait on each other block
//! and wake alternately, and every hand-off pays a wake-up.
//! Between the two, polling with sched_yield costs about a microsecond per
//! poll but hands the core over when the rank being waited for shares it.
struct backoff_policy {
    std::chrono::microseconds spin{200};   //!< poll with a pause instruction
    std::chrono::microseconds yield{1000}; //!< then poll with sched_yield
    std::chrono::milliseconds block_slice{20}; //!< longest single block before re-checking abort/deadline
};

//! Waits until f.value >= target. Returns ok, aborted (when abort_flag
//! becomes true), peer_exited (when the flag's owner has left for good,
//! `owner_gone`, without reaching target) or timeout (at `deadline`).
inline status wait_flag(host_flag& f, std::uint64_t target, const std::atomic<bool>& abort_flag,
                        const std::atomic<bool>& owner_gone, std::chrono::steady_clock::time_point deadline,
                        const backoff_policy& bp) {
    using clock = std::chrono::steady_clock;
    auto gone = [&] {
        return owner_gone.load(std::memory_order_seq_cst) && f.value.load(std::memory_order_seq_cst) < target;
    };
    if (f.value.load(std::memory_order_acquire) >= target) return status::ok;
    const auto start = clock::now();
    for (unsigned i = 1;; ++i) {
        if (f.value.load(std::memory_order_acquire) >= target) return status::ok;
        cpu_relax();
        if (i % 64 == 0 && clock::now() - start >= bp.spin) break;
    }
    for (;;) {
        if (f.value.load(std::memory_order_acquire) >= target) return status::ok;
        if (abort_flag.load(std::memory_order_relaxed)) return status::aborted;
        if (gone()) return status::peer_exited;
        const auto now = clock::now();
        if (now - start >= bp.spin + bp.yield) break;
        if (now >= deadline) return status::timeout;
        std::this_thread::yield();
    }
    for (;;) {
        const std::uint32_t e = f.epoch.load(std::memory_order_seq_cst);
        f.waiters.fetch_add(1, std::memory_order_seq_cst);
        if (f.value.load(std::memory_order_seq_cst) >= target) {
            f.waiters.fetch_sub(1, std::memory_order_relaxed);
            return status::ok;
        }
        if (abort_flag.load(std::memory_order_seq_cst)) {
            f.waiters.fetch_sub(1, std::memory_order_relaxed);
            return status::aborted;
        }
        if (gone()) {
            f.waiters.fetch_sub(1, std::memory_order_relaxed);
            return status::peer_exited;
        }
        const auto now = clock::now();
        if (now >= deadline) {
            f.waiters.fetch_sub(1, std::memory_order_relaxed);
            return status::timeout;
        }
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
        futex_wait(f.epoch, e, left < bp.block_slice ? left : std::chrono::nanoseconds(bp.block_slice));
        f.waiters.fetch_sub(1, std::memory_order_relaxed);
        if (f.value.load(std::memory_order_acquire) >= target) return status::ok;
    }
}

} // namespace chorus::detail
