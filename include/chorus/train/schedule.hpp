#pragma once
//! \file train/schedule.hpp
//! The two safeguards that asynchronous (stale) updates need: clipping the
//! gradient by its global norm, and a learning-rate warm-up.
//!
//! A stale gradient was computed on parameters the model has since moved
//! away from; early in training, when gradients are large and change fast,
//! applying it at full learning rate can throw the model off. Clipping
//! bounds the size of any one update; the warm-up keeps early updates small
//! until the model has settled into a region where successive gradients
//! agree.
//!
//! Clip the *reduced* gradient: it is the same on every rank, so every
//! replica applies the same update and no extra collective is needed for
//! the norm.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "check.hpp"

namespace chorus::train {

//! Sum of squares of `g`, accumulated in double.
template <class T>
double squared_norm(std::span<const T> g) {
    static_assert(std::is_floating_point_v<T>, "chorus::train::squared_norm: gradients are float or double");
    double s = 0;
    for (const T& v : g) s += double(v) * double(v);
    return s;
}

namespace detail {
inline void check_max_norm(double max_norm) {
    if (!(max_norm > 0) || !std::isfinite(max_norm))
        throw_arg("clip_by_global_norm", "`max_norm` must be positive and finite, got " + std::to_string(max_norm));
}
template <class T>
void scale(std::span<T> g, double s) {
    for (T& v : g) v = static_cast<T>(double(v) * s);
}
} // namespace detail

//! Scales `grad` by max_norm / ||grad|| when its L2 norm exceeds
//! `max_norm`; returns the norm before clipping. A non-finite norm (an
//! overflowed or NaN gradient) leaves `grad` unchanged: check the returned
//! value and skip such a step.
template <class T>
double clip_by_global_norm(std::span<T> grad, double max_norm) {
    detail::check_max_norm(max_norm);
    const double norm = std::sqrt(squared_norm(std::span<const T>(grad)));
    if (std::isfinite(norm) && norm > max_norm) detail::scale(grad, max_norm / norm);
    return norm;
}

//! The same over several tensors that form one gradient: the norm is taken
//! over all of them together, and all are scaled by the same factor.
template <class T>
double clip_by_global_norm(const std::vector<std::span<T>>& tensors, double max_norm) {
    detail::check_max_norm(max_norm);
    double s = 0;
    for (const auto& t : tensors) s += squared_norm(std::span<const T>(t));
    const double norm = std::sqrt(s);
    if (std::isfinite(norm) && norm > max_norm)
        for (const auto& t : tensors) detail::scale(t, max_norm / norm);
    return norm;
}

//! Linear learning-rate warm-up: base_lr * (step + 1) / warmup_steps for the
//! first `warmup_steps` steps (step counts from 0), then base_lr. With
//! warmup_steps == 0 it is the constant base_lr.
class linear_warmup {
public:
    linear_warmup(double base_lr, std::int64_t warmup_steps) : base_(base_lr), steps_(warmup_steps) {
        if (!(base_lr > 0) || !std::isfinite(base_lr))
            detail::throw_arg("linear_warmup", "`base_lr` must be positive and finite, got " + std::to_string(base_lr));
        if (warmup_steps < 0)
            detail::throw_arg("linear_warmup", "`warmup_steps` must be >= 0, got " + std::to_string(warmup_steps));
    }

    //! The learning rate of step `step` (>= 0).
    double operator()(std::int64_t step) const {
        if (step < 0) detail::throw_arg("linear_warmup", "`step` must be >= 0, got " + std::to_string(step));
        if (step >= steps_) return base_;
        return base_ * double(step + 1) / double(steps_);
    }

    double base_lr() const noexcept { return base_; }
    std::int64_t warmup_steps() const noexcept { return steps_; }

private:
    double base_;
    std::int64_t steps_;
};

} // namespace chorus::train
