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
//!
//! On a GPU communicator (<chorus/gpu.hpp>) the micro-batch gradients and
//! the accumulator are device memory, and everything (the elementwise sum,
//! the division by k, the AllReduce) is enqueued on the stream given to the
//! constructor: add() returns at once, and gradient() is valid for kernels
//! issued on that stream after it.

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives/all_reduce.hpp"
#include "../ops/operators.hpp"
#include "check.hpp"
#include "memory.hpp"

namespace chorus::train {

template <class Comm, class T>
class gradient_accumulator {
    static_assert(std::is_floating_point_v<T>, "chorus::train::gradient_accumulator: gradients are float or double");
    using mem = detail::train_memory<Comm>;

public:
    //! Accumulates gradients of `count` elements over `k` (>= 1) micro-batches.
    gradient_accumulator(Comm& comm, std::size_t count, int k)
        requires(!mem::device)
        : gradient_accumulator(typename mem::context(comm, {}, {}), comm, count, k) {}

    //! GPU communicators: the same in device memory, every operation
    //! enqueued on `stream` (the stream of the kernels that compute the
    //! micro-batch gradients; null: comm.stream()).
    gradient_accumulator(Comm& comm, std::size_t count, int k, typename mem::stream_type stream)
        requires(mem::device)
        : gradient_accumulator(typename mem::context(comm, stream, stream), comm, count, k) {}

    gradient_accumulator(const gradient_accumulator&) = delete;
    gradient_accumulator& operator=(const gradient_accumulator&) = delete;

private:
    gradient_accumulator(typename mem::context&& ctx, Comm& comm, std::size_t count, int k)
        : comm_(&comm), ctx_(std::move(ctx)), k_(k), count_(count) {
        if (count == 0) detail::throw_arg(who, "`count` must be positive");
        if (k < 1) detail::throw_arg(who, "`k` must be >= 1, got " + std::to_string(k));
        sum_ = mem::template alloc<T>(ctx_, count);
    }

public:

    //! Adds one micro-batch's gradient (the mean over its samples). After the
    //! k-th call it runs the AllReduce and returns true: gradient() then holds
    //! the mean over the k micro-batches of every rank, and the next call
    //! starts a new accumulation.
    bool add(std::span<const T> micro_grad) {
        if (micro_grad.size() != count_)
            detail::throw_arg(who, "add: `micro_grad` has " + std::to_string(micro_grad.size()) +
                                       " elements but the accumulator has " + std::to_string(count_));
        if (micro_grad.data() == nullptr) detail::throw_arg(who, "add: `micro_grad` has a null data pointer");
        mem::check_memory(ctx_, micro_grad.data(), who, "add: `micro_grad`");
        mem::accumulate(ctx_.compute, sum_.data(), micro_grad.data(), count_, pending_ == 0);
        if (++pending_ < k_) return false;

        // Divide by k before the AllReduce: avg then divides by the rank count,
        // so the result is the mean over k * size() micro-batches.
        if (k_ > 1) mem::divide(ctx_.compute, sum_.data(), count_, static_cast<T>(k_));
        const auto t0 = std::chrono::steady_clock::now();
        mem::all_reduce(*comm_, std::span<T>(sum_.data(), count_), chorus::avg{}, ctx_.compute);
        wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        pending_ = 0;
        ++reductions_;
        return true;
    }

    //! After add() returned true: the mean gradient, until the next add()
    //! (the same buffer then accumulates the next micro-batches).
    std::span<const T> gradient() const noexcept { return std::span<const T>(sum_.data(), count_); }
    //! The same, writable (e.g. to clip it in place).
    std::span<T> gradient() noexcept { return std::span<T>(sum_.data(), count_); }
    //! Micro-batches added since the last AllReduce.
    int pending() const noexcept { return pending_; }
    int k() const noexcept { return k_; }
    //! AllReduces run so far.
    std::size_t reductions() const noexcept { return reductions_; }
    //! Total time spent in the AllReduce, in seconds (waiting for the
    //! slowest rank included; GPU: only the time to enqueue it).
    double wait_seconds() const noexcept { return wait_seconds_; }

private:
    static constexpr const char* who = "gradient_accumulator";

    Comm* comm_;
    typename mem::context ctx_;
    int k_;
    std::size_t count_;
    int pending_ = 0;
    typename mem::template buffer<T> sum_;
    std::size_t reductions_ = 0;
    double wait_seconds_ = 0;
};

} // namespace chorus::train
