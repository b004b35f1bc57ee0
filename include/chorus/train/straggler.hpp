#pragma once
//! \file train/straggler.hpp
//! A straggler injector for experiments: one rank computes `factor` times
//! slower than the others.
//!
//! Synchronous training runs at the pace of its slowest rank, and one slow
//! device (throttled by heat, sharing its host, on a congested link) is
//! enough. To see what each training mode does about it, the injector times
//! the slow rank's compute and then sleeps (factor - 1) times as long, so
//! its step takes `factor` times its own compute time. It sleeps rather than
//! spins: on a machine with fewer cores than ranks a spinning straggler would
//! take CPU from the others and slow them too, which is a different
//! experiment.

#include <chrono>
#include <cmath>
#include <concepts>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "check.hpp"

namespace chorus::train {

class straggler {
public:
    //! On the rank `my_rank` of `size` ranks: slow down rank `slow_rank`
    //! (-1: none) by `factor` (>= 1).
    straggler(int my_rank, int size, int slow_rank, double factor)
        : slow_(slow_rank >= 0 && slow_rank == my_rank), factor_(factor) {
        if (size < 1) detail::throw_arg(who, "`size` must be >= 1, got " + std::to_string(size));
        if (my_rank < 0 || my_rank >= size)
            detail::throw_arg(who, "`my_rank` is " + std::to_string(my_rank) + " but there are " +
                                       std::to_string(size) + " ranks");
        if (slow_rank < -1 || slow_rank >= size)
            detail::throw_arg(who, "`slow_rank` is " + std::to_string(slow_rank) + " but must be -1 (none) or 0.." +
                                       std::to_string(size - 1));
        if (!(factor >= 1) || !std::isfinite(factor))
            detail::throw_arg(who, "`factor` must be finite and >= 1, got " + std::to_string(factor));
    }

    //! The same for the calling rank of `comm` (any communicator).
    template <class Comm>
        requires requires(const Comm& c) {
            { c.rank() } -> std::convertible_to<int>;
            { c.size() } -> std::convertible_to<int>;
        }
    straggler(const Comm& comm, int slow_rank, double factor)
        : straggler(comm.rank(), comm.size(), slow_rank, factor) {}

    //! Runs `compute()`; on the slow rank then sleeps (factor - 1) times the
    //! time it took. Returns what compute() returns.
    template <class F>
    decltype(auto) run(F&& compute) {
        const auto t0 = std::chrono::steady_clock::now();
        if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
            compute();
            delay(std::chrono::steady_clock::now() - t0);
        } else {
            decltype(auto) result = compute();
            delay(std::chrono::steady_clock::now() - t0);
            return result;
        }
    }

    //! For a compute phase timed by the caller: sleeps (factor - 1) * `compute_time` on the slow rank.
    void delay(std::chrono::steady_clock::duration compute_time) {
        if (!slow_ || factor_ == 1.0 || compute_time <= compute_time.zero()) return;
        const auto extra = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(std::chrono::duration<double>(compute_time).count() * (factor_ - 1.0)));
        const auto t0 = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(extra);
        injected_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    //! True on the rank that is slowed down.
    bool slow() const noexcept { return slow_; }
    double factor() const noexcept { return factor_; }
    //! Seconds slept so far.
    double injected_seconds() const noexcept { return injected_; }

private:
    static constexpr const char* who = "straggler";
    bool slow_;
    double factor_;
    double injected_ = 0;
};

} // namespace chorus::train
