#pragma once
//! \file ops/traits.hpp
//! Operator traits and the `reduction<Op, T>` concept, read from the
//! operator's members so user operators opt in by declaring them.

#include <concepts>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/element.hpp"

namespace chorus {

//! An operator that can combine two values of `T` on host (and, if its call
//! operator is `__host__ __device__`, on device).
template <class Op, class T>
concept reduction = element<T> && std::is_trivially_copyable_v<Op> && std::copy_constructible<Op> &&
                    requires(const Op& op, const T& a, const T& b) {
                        { op(a, b) } -> std::convertible_to<T>;
                    };

template <class Op>
struct op_traits {
    //! True only when the operator says so: a user operator is assumed
    //! order-sensitive unless it declares `static constexpr bool commutative = true`.
    static constexpr bool commutative = [] {
        if constexpr (requires { { Op::commutative } -> std::convertible_to<bool>; }) return bool(Op::commutative);
        else return false;
    }();
    static constexpr bool integral_only = [] {
        if constexpr (requires { { Op::integral_only } -> std::convertible_to<bool>; }) return bool(Op::integral_only);
        else return false;
    }();
    static constexpr bool arithmetic_only = [] {
        if constexpr (requires { { Op::arithmetic_only } -> std::convertible_to<bool>; }) return bool(Op::arithmetic_only);
        else return false;
    }();
    static constexpr const char* name() {
        if constexpr (requires { { Op::name } -> std::convertible_to<const char*>; }) return Op::name;
        else return "user";
    }
};

namespace detail {
template <class Op, class T>
concept has_finish = requires(const Op& op, const T& v) {
    { op.finish(v, 1) } -> std::convertible_to<T>;
};

//! Epilogue of a finished reduction over `nranks` ranks (avg divides; others do nothing).
template <class Op, class T>
CHORUS_HD constexpr T finish(const Op& op, const T& acc, int nranks) {
    if constexpr (has_finish<Op, T>) return static_cast<T>(op.finish(acc, nranks));
    else {
        (void)op;
        (void)nranks;
        return acc;
    }
}
} // namespace detail

} // namespace chorus
