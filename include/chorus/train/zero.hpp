#pragma once
//! \file train/zero.hpp
//! A ZeRO-style sharded optimizer step, built from ReduceScatter and
//! AllGather.
//!
//! Plain data parallelism keeps on every rank a full copy of the optimizer
//! state (here, SGD momentum) and reduces the full gradient with AllReduce,
//! although each rank then does exactly the same update. ZeRO (stages 1 and
//! 2) splits that work: rank r owns shard r of the parameters. A
//! ReduceScatter leaves on rank r only the mean gradient of its shard (the
//! first half of an AllReduce, half the traffic); rank r updates its shard
//! and keeps momentum for it alone (1/n of the state); an AllGather (the
//! second half of an AllReduce) hands every rank the full updated
//! parameters. Same traffic as one AllReduce, n times less optimizer state
//! and update work per rank, and bit for bit the update a replicated
//! optimizer would make (the mean gradient is computed the same way).
//!
//! Shards are m = ceil(count / n) elements; when n does not divide count,
//! the last shards are padded with zeros in a staging buffer (the
//! collectives need equal blocks). When it does, the gradient is
//! reduce-scattered straight from the caller's buffer and the parameters are
//! all-gathered in place.
//!
//! On a GPU communicator (<chorus/gpu.hpp>) the parameters, the gradient,
//! the shards and the momentum are device memory, and the whole step (the
//! ReduceScatter, the update kernel, the AllGather, the padding copies) is
//! enqueued on the stream given to the constructor; step() returns at once.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives/all_gather.hpp"
#include "../collectives/reduce_scatter.hpp"
#include "../ops/operators.hpp"
#include "check.hpp"
#include "memory.hpp"

namespace chorus::train {

//! SGD with momentum (v = momentum * v + g; p -= lr * v, as PyTorch's SGD),
//! optimizer state sharded across the ranks of `comm`.
template <class Comm, class T>
class sharded_sgd {
    static_assert(std::is_floating_point_v<T>, "chorus::train::sharded_sgd: parameters are float or double");
    using mem = detail::train_memory<Comm>;

public:
    sharded_sgd(Comm& comm, std::size_t count, double lr, double momentum = 0.0)
        requires(!mem::device)
        : sharded_sgd(typename mem::context(comm, {}, {}), comm, count, lr, momentum) {}

    //! GPU communicators: the same in device memory, every step enqueued
    //! on `stream` (null: comm.stream()).
    sharded_sgd(Comm& comm, std::size_t count, double lr, double momentum, typename mem::stream_type stream)
        requires(mem::device)
        : sharded_sgd(typename mem::context(comm, stream, stream), comm, count, lr, momentum) {}

    sharded_sgd(const sharded_sgd&) = delete;
    sharded_sgd& operator=(const sharded_sgd&) = delete;

private:
    sharded_sgd(typename mem::context&& ctx, Comm& comm, std::size_t count, double lr, double momentum)
        : comm_(&comm), ctx_(std::move(ctx)), count_(count), lr_(lr), momentum_(momentum) {
        if (count == 0) detail::throw_arg(who, "`count` must be positive");
        check_lr(lr);
        if (!(momentum >= 0 && momentum < 1))
            detail::throw_arg(who, "`momentum` must be in [0, 1), got " + std::to_string(momentum));
        const std::size_t n = std::size_t(comm.size());
        shard_ = (count + n - 1) / n;
        begin_ = std::min(count, std::size_t(comm.rank()) * shard_);
        mine_ = std::min(count, begin_ + shard_) - begin_;
        padded_ = shard_ * n != count;
        grad_shard_ = mem::template alloc<T>(ctx_, shard_);
        velocity_ = mem::template alloc<T>(ctx_, mine_);
        if (padded_) {
            grad_pad_ = mem::template alloc<T>(ctx_, shard_ * n);
            param_pad_ = mem::template alloc<T>(ctx_, shard_ * n);
        }
    }

public:
    //! One step on every rank: `params` (the full, replicated parameters)
    //! become the update with the mean over ranks of `grad`, at learning rate `lr`.
    void step(std::span<T> params, std::span<const T> grad, double lr) {
        check_lr(lr);
        if (params.size() != count_)
            detail::throw_arg(who, "step: `params` has " + std::to_string(params.size()) + " elements but " +
                                       std::to_string(count_) + " were declared");
        if (grad.size() != count_)
            detail::throw_arg(who, "step: `grad` has " + std::to_string(grad.size()) + " elements but " +
                                       std::to_string(count_) + " were declared");
        if (params.data() == nullptr) detail::throw_arg(who, "step: `params` has a null data pointer");
        if (grad.data() == nullptr) detail::throw_arg(who, "step: `grad` has a null data pointer");
        mem::check_memory(ctx_, params.data(), who, "step: `params`");
        mem::check_memory(ctx_, grad.data(), who, "step: `grad`");
        const std::size_t r = std::size_t(comm_->rank());
        const auto s = ctx_.compute;

        // 1. ReduceScatter: the mean gradient of this rank's shard.
        const std::span<T> grad_shard(grad_shard_.data(), shard_);
        if (padded_) {
            mem::copy(s, grad_pad_.data(), grad.data(), count_);
            mem::reduce_scatter(*comm_, std::span<const T>(grad_pad_.data(), grad_pad_.size()), grad_shard,
                                chorus::avg{}, s);
        } else {
            mem::reduce_scatter(*comm_, grad, grad_shard, chorus::avg{}, s);
        }

        // 2. Update this rank's shard only; its momentum lives here alone.
        T* p = padded_ ? param_pad_.data() + r * shard_ : params.data() + begin_;
        if (padded_) mem::copy(s, p, params.data() + begin_, mine_);
        const T mu = static_cast<T>(momentum_), a = static_cast<T>(lr);
        mem::sgd(s, p, velocity_.data(), grad_shard_.data(), mine_, mu, a);

        // 3. AllGather (in place): every rank gets every updated shard.
        if (padded_) {
            std::span<T> all(param_pad_.data(), param_pad_.size());
            mem::all_gather(*comm_, std::span<const T>(all.subspan(r * shard_, shard_)), all, s);
            mem::copy(s, params.data(), param_pad_.data(), count_);
        } else {
            mem::all_gather(*comm_, std::span<const T>(params.subspan(r * shard_, shard_)), params, s);
        }
        ++steps_;
    }

    //! The same at the learning rate given to the constructor.
    void step(std::span<T> params, std::span<const T> grad) { step(params, grad, lr_); }

    //! Elements per shard (the last shards may hold fewer real elements).
    std::size_t shard_size() const noexcept { return shard_; }
    //! First parameter of this rank's shard.
    std::size_t shard_begin() const noexcept { return begin_; }
    //! Real parameters in this rank's shard.
    std::size_t shard_elements() const noexcept { return mine_; }
    //! This rank's optimizer state: the momentum of its shard alone.
    std::span<const T> momentum_state() const noexcept { return std::span<const T>(velocity_.data(), mine_); }
    std::size_t steps() const noexcept { return steps_; }

private:
    static constexpr const char* who = "sharded_sgd";

    static void check_lr(double lr) {
        if (!(lr > 0) || !std::isfinite(lr))
            detail::throw_arg(who, "`lr` must be positive and finite, got " + std::to_string(lr));
    }

    Comm* comm_;
    typename mem::context ctx_;
    std::size_t count_;
    double lr_;
    double momentum_;
    std::size_t shard_ = 0, begin_ = 0, mine_ = 0;
    bool padded_ = false;
    typename mem::template buffer<T> grad_shard_, velocity_, grad_pad_, param_pad_;
    std::size_t steps_ = 0;
};

} // namespace chorus::train
