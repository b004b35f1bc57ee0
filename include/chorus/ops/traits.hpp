#pragma once
//! \file ops/traits.hpp
//! Operator traits and the `reduction<Op, T>` concept, read from the
//! operator's members so user operators opt in by declaring them.

#include <concepts>
#include <functional>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/element.hpp"

#if defined(__CUDACC__)
#  include <cuda_bf16.h>
#  include <cuda_fp16.h>
#  if CHORUS_HAS_LIBCUDACXX
#    include <cuda/functional>
#    include <cuda/std/functional>
#  endif
#endif

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
//! What op_traits reports for a standard library functor, which cannot
//! declare members: commutative, and integral-only for the bitwise ones.
template <bool Integral>
struct standard_op_traits {
    static constexpr bool commutative = true;
    static constexpr bool integral_only = Integral;
    static constexpr bool arithmetic_only = false;
};
} // namespace detail

// std::plus<U> and its kin (U = void is the transparent form, std::plus<>);
// in CUDA translation units libcu++'s too (host-compiled code never parses
// libcu++, core/atomic.hpp).
#define CHORUS_STANDARD_OP_TRAITS(functor, integral)                                                                   \
    template <class U>                                                                                                 \
    struct op_traits<functor<U>> : detail::standard_op_traits<integral> {                                              \
        static constexpr const char* name() { return #functor; }                                                       \
    };
CHORUS_STANDARD_OP_TRAITS(std::plus, false)
CHORUS_STANDARD_OP_TRAITS(std::multiplies, false)
CHORUS_STANDARD_OP_TRAITS(std::bit_and, true)
CHORUS_STANDARD_OP_TRAITS(std::bit_or, true)
CHORUS_STANDARD_OP_TRAITS(std::bit_xor, true)
#if defined(__CUDACC__) && CHORUS_HAS_LIBCUDACXX
CHORUS_STANDARD_OP_TRAITS(cuda::std::plus, false)
CHORUS_STANDARD_OP_TRAITS(cuda::std::multiplies, false)
CHORUS_STANDARD_OP_TRAITS(cuda::std::bit_and, true)
CHORUS_STANDARD_OP_TRAITS(cuda::std::bit_or, true)
CHORUS_STANDARD_OP_TRAITS(cuda::std::bit_xor, true)
CHORUS_STANDARD_OP_TRAITS(cuda::maximum, false)
CHORUS_STANDARD_OP_TRAITS(cuda::minimum, false)
#endif
#undef CHORUS_STANDARD_OP_TRAITS

//! The type reductions of T are carried out in: T itself, except for the
//! 16-bit floating-point types, which accumulate in float.
template <class T>
struct accumulator {
    using type = T;
};
template <class T>
using accum_t = typename accumulator<T>::type;

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

#if defined(__CUDACC__)
namespace chorus {
template <>
struct accumulator<__half> {
    using type = float;
};
template <>
struct accumulator<__nv_bfloat16> {
    using type = float;
};
template <>
struct element_traits<__half> {
    static constexpr std::uint64_t bytes = 2;
    static constexpr bool arithmetic = true;
    static constexpr const char* name() { return "half"; }
};
template <>
struct element_traits<__nv_bfloat16> {
    static constexpr std::uint64_t bytes = 2;
    static constexpr bool arithmetic = true;
    static constexpr const char* name() { return "bfloat16"; }
};
} // namespace chorus
#endif
