#pragma once
//! \file train/buckets.hpp
//! Gradient buckets: overlap the AllReduce of a model's gradients with the
//! rest of its backward pass, as PyTorch's DistributedDataParallel does.
//!
//! The backward pass produces gradients one tensor at a time, last layer
//! first. Reducing each small tensor on its own pays a collective's fixed
//! cost per tensor; reducing everything at the end overlaps nothing. So the
//! tensors are grouped, in the order given (pass them in the order the
//! backward pass finishes them), into buckets of about `bucket_bytes`, and a
//! bucket's async AllReduce starts as soon as every tensor in it has been
//! marked ready; wait_all() then waits only for what is still in flight.
//!
//! Buckets are launched strictly in bucket order: a ready bucket waits for
//! the buckets before it. Every rank must issue collectives in the same
//! order, and ranks may well finish their tensors in different orders
//! (different control flow, or simply different layer timings).
//!
//! A bucket whose tensors lie back to back in memory, in order, is reduced
//! in place on that memory. Otherwise its tensors are copied into a flat
//! staging buffer when it launches, reduced there, and copied back by
//! wait_all(). In-place buckets read and write the tensors until wait_all()
//! returns, so they must not be touched after mark_ready(); staged tensors
//! are free once marked, until wait_all() overwrites them.
//!
//! On a GPU communicator (<chorus/gpu.hpp>, docs/gpu.md "Training on
//! GPUs") the tensors are device memory and the constructor takes the
//! stream the backward kernels run on. mark_ready() then blocks nothing: it
//! makes the rank's communication stream (comm.stream()) wait for the work
//! issued so far on that stream (a CUDA event) and enqueues the bucket's
//! staging copies and AllReduce there, so they overlap the backward kernels
//! issued after it. wait_all() makes the backward stream wait for the
//! AllReduces and enqueues the copies back from staging on it, without
//! blocking the host either: kernels issued on that stream afterwards (the
//! optimizer) see the averaged gradients. Errors surface in
//! comm.check() once the stream has been synchronized.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../async/future.hpp"
#include "../collectives/all_reduce.hpp"
#include "../core/error.hpp"
#include "../ops/operators.hpp"
#include "check.hpp"
#include "memory.hpp"

namespace chorus::train {

//! Buckets over the gradient tensors of one model replica. `Comm` is any
//! chorus communicator; `Op` is chorus::avg (the usual data-parallel mean)
//! or chorus::sum. One object serves every step: mark_ready() each tensor,
//! then wait_all(), which also re-arms the buckets for the next step.
template <class Comm, class T, class Op = chorus::avg>
class gradient_buckets {
    static_assert(std::is_floating_point_v<T>, "chorus::train::gradient_buckets: gradients are float or double");
    using mem = detail::train_memory<Comm>;

public:
    //! Groups `tensors` (in this order) into buckets of at most `bucket_bytes`;
    //! a tensor larger than that gets a bucket of its own.
    gradient_buckets(Comm& comm, std::vector<std::span<T>> tensors, std::size_t bucket_bytes, Op op = {})
        requires(!mem::device)
        : gradient_buckets(typename mem::context(comm, {}, {}), comm, std::move(tensors), bucket_bytes, op) {}

    //! GPU communicators: the same, `tensors` being device memory of the
    //! rank's device, and `stream` the stream the backward kernels that
    //! write them run on (null: comm.stream()). The AllReduces run on
    //! comm.stream(), ordered after `stream` by events.
    gradient_buckets(Comm& comm, std::vector<std::span<T>> tensors, std::size_t bucket_bytes,
                     typename mem::stream_type stream, Op op = {})
        requires(mem::device)
        : gradient_buckets(typename mem::context(comm, stream, typename mem::stream_type{}), comm, std::move(tensors),
                           bucket_bytes, op) {}

    gradient_buckets(const gradient_buckets&) = delete;
    gradient_buckets& operator=(const gradient_buckets&) = delete;

private:
    gradient_buckets(typename mem::context&& ctx, Comm& comm, std::vector<std::span<T>> tensors,
                     std::size_t bucket_bytes, Op op)
        : comm_(&comm), ctx_(std::move(ctx)), tensors_(std::move(tensors)), op_(op) {
        if (bucket_bytes == 0) detail::throw_arg(who, "`bucket_bytes` must be positive");
        if (tensors_.empty()) detail::throw_arg(who, "`tensors` is empty");
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            if (tensors_[i].empty()) detail::throw_arg(who, "tensor " + std::to_string(i) + " of `tensors` is empty");
            if (tensors_[i].data() == nullptr)
                detail::throw_arg(who, "tensor " + std::to_string(i) + " of `tensors` has a null data pointer");
            mem::check_memory(ctx_, tensors_[i].data(), who, "tensor " + std::to_string(i) + " of `tensors`");
        }
        check_disjoint();

        bucket_of_.resize(tensors_.size());
        std::size_t bytes = 0;
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            const std::size_t b = tensors_[i].size() * sizeof(T);
            if (buckets_.empty() || (bytes + b > bucket_bytes && !buckets_.back().members.empty())) {
                buckets_.emplace_back();
                bytes = 0;
            }
            buckets_.back().members.push_back(i);
            buckets_.back().count += tensors_[i].size();
            bytes += b;
            bucket_of_[i] = buckets_.size() - 1;
        }
        for (auto& bk : buckets_) {
            bk.contiguous = true;
            for (std::size_t j = 1; j < bk.members.size(); ++j) {
                const auto& prev = tensors_[bk.members[j - 1]];
                if (prev.data() + prev.size() != tensors_[bk.members[j]].data()) bk.contiguous = false;
            }
            if (!bk.contiguous) bk.staging = mem::template alloc<T>(ctx_, bk.count);
        }
        ready_.assign(tensors_.size(), 0);
        reset_step();
    }

public:
    //! Records that tensor `tensor` holds this step's local gradient; launches
    //! every bucket that is now complete and whose predecessors are launched.
    void mark_ready(std::size_t tensor) {
        if (tensor >= tensors_.size())
            detail::throw_arg(who, "mark_ready: `tensor` is " + std::to_string(tensor) + " but there are " +
                                       std::to_string(tensors_.size()) + " tensors");
        if (ready_[tensor])
            detail::throw_arg(who, "mark_ready: tensor " + std::to_string(tensor) +
                                       " was already marked ready in this step (call wait_all() between steps)");
        ready_[tensor] = 1;
        ++buckets_[bucket_of_[tensor]].ready;
        while (next_launch_ < buckets_.size() &&
               buckets_[next_launch_].ready == buckets_[next_launch_].members.size())
            launch(buckets_[next_launch_++]);
    }

    //! Waits for every bucket of this step, copies staged results back into
    //! the tensors, and re-arms for the next step. Every tensor must have
    //! been marked ready. (GPU: enqueues that on the backward stream and
    //! returns; see the top of this file.)
    void wait_all() {
        for (std::size_t i = 0; i < tensors_.size(); ++i)
            if (!ready_[i])
                detail::throw_arg(who, "wait_all: tensor " + std::to_string(i) +
                                           " was not marked ready in this step (every rank must reduce every bucket)");
        const auto t0 = std::chrono::steady_clock::now();
        for (auto& bk : buckets_) bk.done.wait();
        wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        mem::join(ctx_, ctx_.comm, ctx_.compute);
        for (auto& bk : buckets_) {
            if (!bk.contiguous) {
                std::size_t off = 0;
                for (std::size_t i : bk.members) {
                    mem::copy(ctx_.compute, tensors_[i].data(), bk.staging.data() + off, tensors_[i].size());
                    off += tensors_[i].size();
                }
            }
            bk.done = typename mem::handle();
        }
        reset_step();
        ++steps_;
    }

    std::size_t tensor_count() const noexcept { return tensors_.size(); }
    std::size_t bucket_count() const noexcept { return buckets_.size(); }
    //! The bucket that tensor `tensor` belongs to.
    std::size_t bucket_of(std::size_t tensor) const { return bucket_of_.at(tensor); }
    //! The tensors of bucket `b`, in order.
    std::span<const std::size_t> tensors_in(std::size_t b) const { return buckets_.at(b).members; }
    //! Elements in bucket `b`.
    std::size_t elements_in(std::size_t b) const { return buckets_.at(b).count; }
    //! True when bucket `b` is reduced through a staging buffer (its tensors are not contiguous).
    bool staged(std::size_t b) const { return !buckets_.at(b).contiguous; }
    //! Buckets launched so far in the current step.
    std::size_t launched() const noexcept { return next_launch_; }
    //! Completed steps (calls of wait_all()).
    std::size_t steps() const noexcept { return steps_; }
    //! Total time spent blocked in wait_all(), in seconds (GPU: about 0,
    //! the waiting is the stream's).
    double wait_seconds() const noexcept { return wait_seconds_; }

private:
    static constexpr const char* who = "gradient_buckets";

    struct bucket {
        std::vector<std::size_t> members;
        std::size_t count = 0;
        std::size_t ready = 0;
        bool contiguous = true;
        typename mem::template buffer<T> staging;
        typename mem::handle done;
    };

    void check_disjoint() const {
        std::vector<std::size_t> order(tensors_.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(),
                  [&](std::size_t a, std::size_t b) { return std::less<const T*>{}(tensors_[a].data(), tensors_[b].data()); });
        for (std::size_t j = 1; j < order.size(); ++j) {
            const auto& lo = tensors_[order[j - 1]];
            if (std::less<const T*>{}(tensors_[order[j]].data(), lo.data() + lo.size()))
                detail::throw_arg(who, "tensors " + std::to_string(order[j - 1]) + " and " + std::to_string(order[j]) +
                                           " of `tensors` overlap (each element must be reduced once)");
        }
    }

    void launch(bucket& bk) {
        mem::join(ctx_, ctx_.compute, ctx_.comm);
        if (bk.contiguous) {
            std::span<T> all(tensors_[bk.members.front()].data(), bk.count);
            bk.done = mem::start_all_reduce(*comm_, all, op_, ctx_.comm);
        } else {
            std::size_t off = 0;
            for (std::size_t i : bk.members) {
                mem::copy(ctx_.comm, bk.staging.data() + off, tensors_[i].data(), tensors_[i].size());
                off += tensors_[i].size();
            }
            bk.done = mem::start_all_reduce(*comm_, std::span<T>(bk.staging.data(), bk.count), op_, ctx_.comm);
        }
    }

    void reset_step() {
        std::fill(ready_.begin(), ready_.end(), 0);
        for (auto& bk : buckets_) bk.ready = 0;
        next_launch_ = 0;
    }

    Comm* comm_;
    typename mem::context ctx_;
    std::vector<std::span<T>> tensors_;
    Op op_;
    std::vector<bucket> buckets_;
    std::vector<std::size_t> bucket_of_;
    std::vector<unsigned char> ready_;
    std::size_t next_launch_ = 0;
    std::size_t steps_ = 0;
    double wait_seconds_ = 0;
};

} // namespace chorus::train
