#pragma once
//! \file async/future.hpp
//! chorus::future: the handle of an asynchronous collective. Move-only.
//! wait() blocks until the collective finished and rethrows its error;
//! get() does the same and releases the handle; ready() never blocks;
//! wait_for() waits at most a duration. An error is never dropped silently:
//! it is rethrown by wait()/get(), and a failed collective also breaks its
//! communicator, so the next call on it reports the failure too.
//!
//! Destroying a future whose collective is still running waits for it (as
//! std::async's futures do): the collective reads and writes the caller's
//! buffers, which typically die right after the future. When the future is
//! destroyed by an exception unwinding the stack, it first aborts the
//! communicator, so the wait is short and the peers fail instead of
//! waiting for this rank.

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "../core/error.hpp"

namespace chorus {

namespace detail {
//! Shared completion state of one queued operation.
struct completion {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::function<void()> on_abandon; //!< called when the future dies in stack unwinding
    //! Device-backed operations (the GPU backend): checks for completion
    //! (blocking or not) and calls complete() once the work is done. Called
    //! without the mutex held.
    std::function<void(bool block)> drive;
    void* device_event = nullptr; //!< the cudaEvent_t the operation records, if any

    void complete(std::exception_ptr e) {
        {
            std::lock_guard<std::mutex> lk(m);
            error = std::move(e);
            done = true;
        }
        cv.notify_all();
    }
};
} // namespace detail

class future {
public:
    future() = default;
    explicit future(std::shared_ptr<detail::completion> state) : state_(std::move(state)) {}
    future(future&&) noexcept = default;
    future& operator=(future&& other) noexcept {
        if (this != &other) {
            settle();
            state_ = std::move(other.state_);
        }
        return *this;
    }
    future(const future&) = delete;
    future& operator=(const future&) = delete;
    ~future() { settle(); }

    //! True when this future refers to an operation (not default-constructed or consumed by get()).
    bool valid() const noexcept { return state_ != nullptr; }

    //! True once the operation has finished (successfully or not). Never blocks.
    bool ready() const {
        if (!state_) return true;
        if (state_->drive) state_->drive(false);
        std::lock_guard<std::mutex> lk(state_->m);
        return state_->done;
    }

    //! Blocks until the operation finished; rethrows its error.
    void wait() const {
        if (!state_) return;
        if (state_->drive) state_->drive(true);
        std::unique_lock<std::mutex> lk(state_->m);
        state_->cv.wait(lk, [&] { return state_->done; });
        if (state_->error) std::rethrow_exception(state_->error);
    }

    //! Waits at most `d`; true when finished (then rethrows its error like wait()).
    template <class Rep, class Period>
    bool wait_for(const std::chrono::duration<Rep, Period>& d) const {
        if (!state_) return true;
        if (state_->drive) { // a device event: poll it until the deadline
            const auto until = std::chrono::steady_clock::now() + d;
            for (;;) {
                state_->drive(false);
                {
                    std::lock_guard<std::mutex> lk(state_->m);
                    if (state_->done) break;
                }
                if (std::chrono::steady_clock::now() >= until) return false;
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
        }
        std::unique_lock<std::mutex> lk(state_->m);
        if (!state_->cv.wait_for(lk, d, [&] { return state_->done; })) return false;
        if (state_->error) std::rethrow_exception(state_->error);
        return true;
    }

    //! The CUDA event a GPU collective records when it finishes (as a
    //! cudaEvent_t), or null for host operations. chorus::gpu::stream_wait
    //! makes a stream wait for it.
    void* device_event() const noexcept { return state_ ? state_->device_event : nullptr; }

    //! wait(), then release the handle.
    void get() {
        std::shared_ptr<detail::completion> s = std::move(state_);
        state_.reset();
        if (!s) throw error(errc::invalid_argument, "chorus::future::get: the future has no state (already consumed?)");
        future(std::move(s)).wait();
    }

private:
    //! Waits (without rethrowing) for an operation nobody waited for.
    void settle() noexcept {
        if (!state_) return;
        if (state_->drive) {
            try {
                state_->drive(true);
            } catch (...) {
            }
        }
        std::unique_lock<std::mutex> lk(state_->m);
        if (!state_->done && std::uncaught_exceptions() > 0 && state_->on_abandon) {
            lk.unlock();
            try {
                state_->on_abandon();
            } catch (...) {
            }
            lk.lock();
        }
        state_->cv.wait(lk, [&] { return state_->done; });
    }

    std::shared_ptr<detail::completion> state_;
};

} // namespace chorus
