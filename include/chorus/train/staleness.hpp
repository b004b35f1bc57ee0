#pragma once
//! \file train/staleness.hpp
//! Bounded-staleness asynchronous data parallelism.
//!
//! Synchronous data parallelism waits at every step for the slowest rank.
//! Here a rank hands its gradient to an asynchronous AllReduce and carries
//! on computing with the parameters it has; the averaged gradient is applied
//! a few steps later. The bound `s` caps how late: the gradient this rank
//! computed at its step t is applied by its step t + s at the latest. The
//! rank never waits while the collectives in flight are within the bound,
//! and waits for the oldest one only when going on would exceed it. s = 0 is
//! synchronous training.
//!
//! Every rank applies the same averaged gradients, in the same order, so
//! the replicas agree after every applied AllReduce; they differ only in
//! which parameters each rank computed its later gradients on. Stale
//! gradients are why asynchronous training is usually paired with gradient
//! clipping and a learning-rate warm-up (train/schedule.hpp): apply them in
//! the callback.
//!
//! Two policies:
//!
//! - fixed_delay: one AllReduce per step, up to s in flight, and the
//!   gradient of step t is applied exactly at step t + s (waiting there if
//!   it has not arrived). What each rank computes is then a function of the
//!   data alone: a run is bitwise reproducible. It absorbs jitter of up to s
//!   steps; a rank that is *persistently* slower still sets the pace of all,
//!   because every AllReduce needs every rank's contribution (this is stale
//!   synchronous parallel, SSP).
//! - eager: one AllReduce in flight; the gradients of the steps a rank takes
//!   meanwhile are summed locally and go out with its next AllReduce, and
//!   the result is applied as soon as it arrives. A fast rank then
//!   contributes more steps per AllReduce than a slow one (the average is
//!   weighted by steps), so a persistent straggler slows only itself. What
//!   an AllReduce carries depends on timing, so runs are not bitwise
//!   reproducible. Why one in flight: every rank must issue the same number
//!   of AllReduces; with one in flight, each rank issues AllReduce j + 1 in
//!   the very step in which it applies AllReduce j, so a stop rule computed
//!   from applied results (global_steps_applied(), the same on every rank)
//!   stops every rank after the same number of AllReduces.
//!
//! Each AllReduce carries the local gradient sum and the number of local
//! steps in it, reduced with `sum`; the callback receives sum / steps. Under
//! fixed_delay every rank contributes one step, so that is chorus::avg.
//!
//! On a GPU communicator (<chorus/gpu.hpp>) the gradients and the rounds'
//! buffers are device memory. The constructor takes the stream of the
//! kernels that compute the gradients: step() adds the gradient into the
//! pending sum on that stream, and an issued AllReduce runs on
//! comm.stream(), after an event on that stream, so the next steps' kernels
//! overlap it. Whether a round is due or done is decided on the host, from
//! the round's future (a CUDA event) and the step count, which is read back
//! once the round has completed (one element per round). The span the
//! callback receives is device memory valid for kernels issued on the
//! stream during the call; the division by the step count is already
//! enqueued there.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../async/future.hpp"
#include "../collectives/all_reduce.hpp"
#include "../ops/operators.hpp"
#include "check.hpp"
#include "memory.hpp"

namespace chorus::train {

enum class staleness_policy { fixed_delay, eager };

inline const char* to_string(staleness_policy p) noexcept {
    return p == staleness_policy::fixed_delay ? "fixed_delay" : "eager";
}

//! What the apply callback learns about one averaged gradient.
struct stale_update {
    std::int64_t round;      //!< index of the AllReduce, from 0: the same on every rank (use it for schedules)
    std::int64_t first_step; //!< this rank's oldest local step in it
    std::int64_t applied_at; //!< this rank's local step at which it is applied
    int staleness;           //!< applied_at - first_step, never above the bound
    double global_steps;     //!< local steps summed over all ranks in it (the same on every rank)
    bool waited;             //!< this rank had to block for it
};

template <class Comm, class T>
class bounded_staleness {
    static_assert(std::is_floating_point_v<T>, "chorus::train::bounded_staleness: gradients are float or double");
    using mem = detail::train_memory<Comm>;

public:
    //! Gradients of `count` elements, applied at most `bound` (>= 0) steps late.
    bounded_staleness(Comm& comm, std::size_t count, int bound, staleness_policy policy = staleness_policy::fixed_delay)
        requires(!mem::device)
        : bounded_staleness(typename mem::context(comm, {}, {}), comm, count, bound, policy) {}

    //! GPU communicators: the same in device memory; `stream` is the stream
    //! of the kernels that compute the gradients and apply the updates
    //! (null: comm.stream()).
    bounded_staleness(Comm& comm, std::size_t count, int bound, typename mem::stream_type stream,
                      staleness_policy policy = staleness_policy::fixed_delay)
        requires(mem::device)
        : bounded_staleness(typename mem::context(comm, stream, typename mem::stream_type{}), comm, count, bound,
                            policy) {}

    bounded_staleness(const bounded_staleness&) = delete;
    bounded_staleness& operator=(const bounded_staleness&) = delete;

private:
    bounded_staleness(typename mem::context&& ctx, Comm& comm, std::size_t count, int bound, staleness_policy policy)
        : comm_(&comm), ctx_(std::move(ctx)), count_(count), bound_(bound), policy_(policy) {
        if (count == 0) detail::throw_arg(who, "`count` must be positive");
        if (bound < 0) detail::throw_arg(who, "`bound` (the staleness bound) must be >= 0, got " + std::to_string(bound));
        if (policy != staleness_policy::fixed_delay && policy != staleness_policy::eager)
            detail::throw_arg(who, "`policy` is not a staleness_policy");
        max_in_flight_ = policy == staleness_policy::eager ? 1 : (bound > 0 ? bound : 1);
        pending_ = mem::template alloc<T>(ctx_, count + 1);
        // Every buffer a round can need, allocated now rather than mid-training.
        for (int i = 0; i < max_in_flight_; ++i) spare_.push_back(mem::template alloc<T>(ctx_, count + 1));
        mem::prepare_load(ctx_);
    }

public:
    //! Submits the local gradient of this rank's next step, then calls
    //! apply(std::span<T> mean_gradient, const stale_update&) for every
    //! averaged gradient that is due (oldest first). The span is scratch
    //! owned by this object, valid during the call; it may be modified
    //! (clipped in place).
    template <class Apply>
    void step(std::span<const T> grad, Apply&& apply) {
        if (grad.size() != count_)
            detail::throw_arg(who, "step: `grad` has " + std::to_string(grad.size()) + " elements but " +
                                       std::to_string(count_) + " were declared");
        if (grad.data() == nullptr) detail::throw_arg(who, "step: `grad` has a null data pointer");
        mem::check_memory(ctx_, grad.data(), who, "step: `grad`");
        const std::int64_t t = steps_;
        mem::accumulate(ctx_.compute, pending_.data(), grad.data(), count_, pending_steps_ == 0);
        if (pending_steps_ == 0) pending_first_ = t;
        ++pending_steps_;

        harvest(t, apply, true);
        if (int(flight_.size()) < max_in_flight_) issue();
        // With bound 0 the AllReduce just issued is due now. Nothing else is
        // applied after an issue: under eager, a rank applies AllReduce j only
        // before issuing j + 1 in the same step, which keeps the ranks' issue
        // counts in step (see the top of this file).
        harvest(t, apply, false);
        ++steps_;
    }

    //! Waits for every AllReduce in flight and applies it (applied_at is the
    //! number of steps taken). Call it on every rank at the end of training;
    //! the object is then ready for further steps. Local gradients not yet
    //! handed to an AllReduce (eager policy only, when a rank stops in a step
    //! in which it could not issue) are dropped and counted in dropped_steps().
    template <class Apply>
    void finish(Apply&& apply) {
        while (!flight_.empty()) apply_front(steps_, apply, false);
        dropped_ += pending_steps_;
        pending_steps_ = 0;
    }

    int bound() const noexcept { return bound_; }
    staleness_policy policy() const noexcept { return policy_; }
    //! AllReduces issued and not yet applied.
    int in_flight() const noexcept { return int(flight_.size()); }
    //! Local steps taken (calls of step()).
    std::int64_t steps() const noexcept { return steps_; }
    std::int64_t rounds_issued() const noexcept { return issued_; }
    std::int64_t rounds_applied() const noexcept { return applied_; }
    //! Local steps of all ranks in the applied AllReduces: the same on every rank.
    double global_steps_applied() const noexcept { return global_steps_; }
    //! Largest staleness of an applied gradient so far.
    int max_staleness() const noexcept { return max_staleness_; }
    //! Times step() found a due AllReduce unfinished and blocked for it
    //! (finish() blocks by design and is not counted).
    std::int64_t waits() const noexcept { return waits_; }
    //! Total time blocked in step() and finish(), in seconds.
    double wait_seconds() const noexcept { return wait_seconds_; }
    //! Local steps dropped by finish() (see there).
    std::int64_t dropped_steps() const noexcept { return dropped_; }

private:
    static constexpr const char* who = "bounded_staleness";

    using buffer = typename mem::template buffer<T>;

    struct round {
        buffer buf; // [local gradient sum..., local steps]; declared before `done`, destroyed after it
        typename mem::marker reduced; // GPU: recorded on the communication stream after the AllReduce
        chorus::future done;
        std::int64_t index;
        std::int64_t first_step;
    };

    void issue() {
        round r;
        if (!spare_.empty()) {
            r.buf = std::move(spare_.back());
            spare_.pop_back();
        }
        if (!spare_markers_.empty()) {
            r.reduced = std::move(spare_markers_.back());
            spare_markers_.pop_back();
        }
        std::swap(r.buf, pending_);
        if (pending_.size() != count_ + 1) pending_ = mem::template alloc<T>(ctx_, count_ + 1);
        mem::store(ctx_.compute, r.buf.data() + count_, static_cast<T>(pending_steps_));
        r.index = issued_++;
        r.first_step = pending_first_;
        pending_steps_ = 0;
        mem::join(ctx_, ctx_.compute, ctx_.comm);
        r.done = mem::all_reduce_async(*comm_, std::span<T>(r.buf.data(), count_ + 1), chorus::sum{}, ctx_.comm);
        mem::record(ctx_, r.reduced, ctx_.comm);
        flight_.push_back(std::move(r));
    }

    //! Applies the AllReduces that are due at step t (waiting for them if
    //! needed) and, under eager with `early`, those that already finished.
    template <class Apply>
    void harvest(std::int64_t t, Apply& apply, bool early) {
        while (!flight_.empty()) {
            round& r = flight_.front();
            const bool due = t - r.first_step >= bound_;
            // fixed_delay applies only when due, so that nothing depends on timing.
            if (!due && (!early || policy_ == staleness_policy::fixed_delay || !r.done.ready())) break;
            apply_front(t, apply, true);
        }
    }

    template <class Apply>
    void apply_front(std::int64_t t, Apply& apply, bool in_step) {
        round r = std::move(flight_.front());
        flight_.pop_front();
        const bool waited = !r.done.ready();
        if (waited && in_step) ++waits_;
        const auto t0 = std::chrono::steady_clock::now();
        r.done.wait(); // rethrows the AllReduce's error, if any
        wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const T steps = mem::load(ctx_, r.buf.data() + count_);
        mem::wait(ctx_, r.reduced, ctx_.compute);
        mem::divide(ctx_.compute, r.buf.data(), count_, steps);
        const stale_update u{r.index, r.first_step, t, int(t - r.first_step), double(steps), waited};
        ++applied_;
        global_steps_ += double(steps);
        if (u.staleness > max_staleness_) max_staleness_ = u.staleness;
        apply(std::span<T>(r.buf.data(), count_), u);
        r.done = chorus::future();
        spare_.push_back(std::move(r.buf));
        spare_markers_.push_back(std::move(r.reduced));
    }

    Comm* comm_;
    typename mem::context ctx_;
    std::size_t count_;
    int bound_;
    staleness_policy policy_;
    int max_in_flight_;
    buffer pending_;
    std::int64_t pending_steps_ = 0;
    std::int64_t pending_first_ = 0;
    std::deque<round> flight_;
    std::vector<buffer> spare_;
    std::vector<typename mem::marker> spare_markers_;
    std::int64_t steps_ = 0;
    std::int64_t issued_ = 0;
    std::int64_t applied_ = 0;
    double global_steps_ = 0;
    int max_staleness_ = 0;
    std::int64_t waits_ = 0;
    double wait_seconds_ = 0;
    std::int64_t dropped_ = 0;
};

} // namespace chorus::train
