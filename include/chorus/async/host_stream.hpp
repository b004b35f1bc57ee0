#pragma once
//! \file async/host_stream.hpp
//! An in-order queue of host work, one per communicator: the host
//! analogue of a CUDA stream. Async calls enqueue and return a future; a
//! worker thread (started on first use) runs them in issue order. A sync
//! call on an idle stream runs inline on the caller's thread, so the
//! latency path has no thread hand-off; on a busy stream it queues behind
//! the pending work and waits, preserving issue order.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "../core/error.hpp"
#include "future.hpp"

namespace chorus::detail {

class host_stream {
public:
    host_stream() = default;
    host_stream(const host_stream&) = delete;
    host_stream& operator=(const host_stream&) = delete;
    ~host_stream() { shutdown(); }

    //! Runs fn in issue order and returns when it finished; rethrows its error.
    //! On an idle stream (nothing queued or running: the common case of a
    //! synchronous call) fn runs inline without taking the mutex: only the
    //! issuing thread adds work (the communicator admits one at a time), so
    //! nothing can be queued behind the caller's back while fn runs.
    template <class Fn>
    void run_sync(Fn&& fn) {
        if (pending_.load(std::memory_order_acquire) != 0) {
            enqueue(std::function<void()>(std::forward<Fn>(fn))).wait();
            return;
        }
        struct release {
            host_stream* s;
            ~release() {
                // seq_cst store, then look for drainers: drain() counts
                // itself in, then looks at inline_ (one sees the other).
                s->inline_.store(false, std::memory_order_seq_cst);
                if (s->drainers_.load(std::memory_order_seq_cst) != 0) {
                    std::lock_guard<std::mutex> lk(s->m_);
                    s->cv_.notify_all();
                }
            }
        };
        inline_.store(true, std::memory_order_relaxed);
        const release r{this};
        fn();
    }

    //! Starts the worker thread now, if it is not running (else enqueue
    //! does): a caller that numbers its calls calls this first, so a thread
    //! that cannot start fails the call before it took a number.
    void start() {
        std::lock_guard<std::mutex> lk(m_);
        if (!worker_.joinable()) start_worker();
    }

    //! Queues fn behind everything issued before; the future completes when it ran.
    //! The worker thread is started (on first use) before fn is queued: if it
    //! cannot be (the process's thread or memory limit), chorus::error
    //! (errc::unavailable) is thrown, nothing was queued and fn never runs;
    //! the stream stays usable (sync calls run inline, a later enqueue tries
    //! again).
    future enqueue(std::function<void()> fn, std::function<void()> on_abandon = {}) {
        auto state = std::make_shared<completion>();
        state->on_abandon = std::move(on_abandon);
        {
            std::lock_guard<std::mutex> lk(m_);
            if (!worker_.joinable()) start_worker();
            queue_.push_back({std::move(fn), state});
            pending_.fetch_add(1, std::memory_order_relaxed);
        }
        cv_.notify_all();
        return future(state);
    }

    //! Blocks until everything issued so far has run.
    void drain() {
        drainers_.fetch_add(1, std::memory_order_seq_cst);
        {
            std::unique_lock<std::mutex> lk(m_);
            cv_.wait(lk, [&] { return queue_.empty() && !busy_ && !inline_.load(std::memory_order_seq_cst); });
        }
        drainers_.fetch_sub(1, std::memory_order_relaxed);
    }

private:
    struct item {
        std::function<void()> fn;
        std::shared_ptr<completion> state;
    };

    void loop() {
        std::unique_lock<std::mutex> lk(m_);
        for (;;) {
            cv_.wait(lk, [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty()); });
            if (queue_.empty()) return; // stop requested and nothing left
            item it = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
            lk.unlock();
            std::exception_ptr err;
            try {
                it.fn();
            } catch (...) {
                err = std::current_exception();
            }
            // Counted out before the future completes: a caller that waited
            // for it finds the stream idle.
            pending_.fetch_sub(1, std::memory_order_release);
            it.state->complete(err);
            lk.lock();
            busy_ = false;
            cv_.notify_all();
        }
    }

    //! Starts the worker (m_ held, so it waits for the lock before it looks at the queue).
    void start_worker() {
        try {
            worker_ = std::thread([this] { loop(); });
        } catch (const std::exception& e) { // std::system_error (EAGAIN) or std::bad_alloc
            throw error(errc::unavailable,
                        std::string("chorus: could not start the worker thread that runs a communicator's async "
                                    "calls: ") +
                            e.what() +
                            " (the process's thread or memory limit: ulimit -u, ulimit -v, "
                            "/proc/sys/kernel/threads-max); nothing was queued");
        }
    }

    void shutdown() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<item> queue_;
    bool busy_ = false;
    bool stop_ = false;
    std::atomic<std::uint64_t> pending_{0}; //!< queued and running items (written under m_ or by the worker)
    std::atomic<bool> inline_{false};       //!< a sync call runs inline on the issuing thread
    std::atomic<int> drainers_{0};          //!< threads in drain()
    std::thread worker_;
};

} // namespace chorus::detail
