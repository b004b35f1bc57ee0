#pragma once
//! \file train/accumulate.hpp
//! Gradient accumulation, the "hybrid" mode: each rank adds up the
//! gradients of k local micro-batches, then all ranks average them in one
//! synchronous AllReduce.
//!
//! It communicates k times less often than synchronous data parallelism at
//! the same micro-batch size, and it is still synchronous: every rank applies
//! the same mean gradient, over k micro-batches times all ranks, so it
//! converges like one large-batch run. It is what one reaches for when a
//! batch that large does not fit in memory, or when each AllReduce costs
//! too much to pay after every micro-batch.

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives/all_reduce.hpp"
#include "../ops/operators.hpp"
#include "check.hpp"

namespace chorus::train {

template <class Comm, class T>
class gradient_accumulator {
    static_assert(std::is_floating_point_v<T>, "chorus::train::gradient_accumulator: gradients are float or double");

public:
    //! Accumulates gradients of `count` elements over `k` (>= 1) micro-batches.
    gradient_accumulator(Comm& comm, std::size_t count, int k) : comm_(&comm), k_(k), sum_(count, T(0)) {
        if (count == 0) detail::throw_arg(who, "`count` must be positive");
        if (k < 1) detail::throw_arg(who, "`k` must be >= 1, got " + std::to_string(k));
    }

    //! Adds one micro-batch's gradient (the mean over its samples). After the
    //! k-th call it runs the AllReduce and returns true: gradient() then holds
    //! the mean over the k micro-batches of every rank, and the next call
    //! starts a new accumulation.
    bool add(std::span<const T> micro_grad) {
        if (micro_grad.size() != sum_.size())
            detail::throw_arg(who, "add: `micro_grad` has " + std::to_string(micro_grad.size()) +
                                       " elements but the accumulator has " + std::to_string(sum_.size()));
        if (pending_ == 0) {
            for (std::size_t i = 0; i < sum_.size(); ++i) sum_[i] = micro_grad[i];
        } else {
            for (std::size_t i = 0; i < sum_.size(); ++i) sum_[i] += micro_grad[i];
        }
        if (++pending_ < k_) return false;

        // Divide by k before the AllReduce: avg then divides by the rank count,
        // so the result is the mean over k * size() micro-batches.
        if (k_ > 1)
            for (T& v : sum_) v /= static_cast<T>(k_);
        const auto t0 = std::chrono::steady_clock::now();
        chorus::all_reduce(*comm_, std::span<T>(sum_), chorus::avg{});
        wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        pending_ = 0;
        ++reductions_;
        return true;
    }

    //! After add() returned true: the mean gradient, until the next add()
    //! (the same buffer then accumulates the next micro-batches).
    std::span<const T> gradient() const noexcept { return sum_; }
    //! The same, writable (e.g. to clip it in place).
    std::span<T> gradient() noexcept { return sum_; }
    //! Micro-batches added since the last AllReduce.
    int pending() const noexcept { return pending_; }
    int k() const noexcept { return k_; }
    //! AllReduces run so far.
    std::size_t reductions() const noexcept { return reductions_; }
    //! Total time spent in the AllReduce, in seconds (waiting for the
    //! slowest rank included).
    double wait_seconds() const noexcept { return wait_seconds_; }

private:
    static constexpr const char* who = "gradient_accumulator";

    Comm* comm_;
    int k_;
    int pending_ = 0;
    std::vector<T> sum_;
    std::size_t reductions_ = 0;
    double wait_seconds_ = 0;
};

} // namespace chorus::train
