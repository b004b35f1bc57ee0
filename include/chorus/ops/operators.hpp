#pragma once
//! \file ops/operators.hpp
//! Built-in reduction operators. Each is an empty, trivially copyable functor
//! callable on host and device, with its traits as members:
//!   - `commutative`: operands may be combined in any order;
//!   - `integral_only`: only integer element types make sense (bitwise ops);
//!   - `identity<T>()`: the neutral element;
//!   - `finish(acc, n)` (avg only): the epilogue applied once to a finished
//!     reduction over n ranks.
//! User operators need only `T operator()(T, T) const`; they are treated as
//! non-commutative unless they declare `static constexpr bool commutative = true`.
//! The built-in ones are noexcept where the element type's arithmetic is;
//! a call whose operator may throw pays a completion check on MPI
//! (detail::op_may_throw).

#include <functional>
#include <limits>
#include <type_traits>

#include "../core/config.hpp"

#if defined(__CUDACC__) && CHORUS_HAS_LIBCUDACXX
#  include <cuda/functional>
#  include <cuda/std/functional>
#endif

namespace chorus {

struct sum {
    static constexpr bool commutative = true;
    static constexpr const char* name = "sum";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(static_cast<T>(a + b))) {
        return static_cast<T>(a + b);
    }
    template <class T>
    static constexpr T identity() {
        if constexpr (std::is_floating_point_v<T>) return T(-0.0); // -0 + x == x for every x, +0 is not neutral for -0
        else return T(0);
    }
};

struct prod {
    static constexpr bool commutative = true;
    static constexpr const char* name = "prod";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(static_cast<T>(a * b))) {
        return static_cast<T>(a * b);
    }
    template <class T>
    static constexpr T identity() { return T(1); }
};

struct min {
    static constexpr bool commutative = true;
    static constexpr const char* name = "min";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(b < a ? b : a)) {
        return b < a ? b : a;
    }
    template <class T>
    static constexpr T identity() {
        if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
        else return std::numeric_limits<T>::max();
    }
};

struct max {
    static constexpr bool commutative = true;
    static constexpr const char* name = "max";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(a < b ? b : a)) {
        return a < b ? b : a;
    }
    template <class T>
    static constexpr T identity() {
        if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
        else return std::numeric_limits<T>::lowest();
    }
};

//! Average: sums like `sum`, then divides once by the rank count (NCCL's ncclAvg).
//! Integer averages truncate toward zero, as integer division does.
struct avg {
    static constexpr bool commutative = true;
    static constexpr bool arithmetic_only = true;
    static constexpr const char* name = "avg";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(static_cast<T>(a + b))) {
        return static_cast<T>(a + b);
    }
    template <class T>
    CHORUS_HD constexpr T finish(const T& acc, int nranks) const { return static_cast<T>(acc / static_cast<T>(nranks)); }
    template <class T>
    static constexpr T identity() { return sum::identity<T>(); }
};

struct bit_and {
    static constexpr bool commutative = true;
    static constexpr bool integral_only = true;
    static constexpr const char* name = "bit_and";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(static_cast<T>(a & b))) {
        return static_cast<T>(a & b);
    }
    template <class T>
    static constexpr T identity() { return static_cast<T>(~T(0)); }
};

struct bit_or {
    static constexpr bool commutative = true;
    static constexpr bool integral_only = true;
    static constexpr const char* name = "bit_or";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(static_cast<T>(a | b))) {
        return static_cast<T>(a | b);
    }
    template <class T>
    static constexpr T identity() { return T(0); }
};

struct bit_xor {
    static constexpr bool commutative = true;
    static constexpr bool integral_only = true;
    static constexpr const char* name = "bit_xor";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T& b) const noexcept(noexcept(static_cast<T>(a ^ b))) {
        return static_cast<T>(a ^ b);
    }
    template <class T>
    static constexpr T identity() { return T(0); }
};

namespace detail {
//! The built-in operator that computes exactly what a standard functor
//! computes on T, or Op itself: std::plus<> and std::plus<T> on an
//! arithmetic T are `sum` (likewise multiplies → prod, and bit_and, bit_or,
//! bit_xor on integers; in CUDA translation units the libcu++ ones, and
//! cuda::maximum → max, cuda::minimum → min on integers, where the two
//! agree bit for bit). The communicator runs the built-in, so a standard
//! functor takes the same vector loops and GPU kernels, and matches a peer
//! that passed the built-in. Traits of the functors: ops/traits.hpp.
template <class Op, class T>
struct canonical_op {
    using type = Op;
};
template <class U, class T>
inline constexpr bool standard_exact = std::is_arithmetic_v<T> && (std::is_void_v<U> || std::is_same_v<U, T>);
template <class U, class T>
inline constexpr bool standard_exact_int = std::is_integral_v<T> && standard_exact<U, T>;

#define CHORUS_CANONICAL_OP(functor, exact, builtin)                                                                    \
    template <class U, class T>                                                                                        \
        requires exact<U, T>                                                                                           \
    struct canonical_op<functor<U>, T> {                                                                               \
        using type = builtin;                                                                                          \
    };
CHORUS_CANONICAL_OP(std::plus, standard_exact, chorus::sum)
CHORUS_CANONICAL_OP(std::multiplies, standard_exact, chorus::prod)
CHORUS_CANONICAL_OP(std::bit_and, standard_exact_int, chorus::bit_and)
CHORUS_CANONICAL_OP(std::bit_or, standard_exact_int, chorus::bit_or)
CHORUS_CANONICAL_OP(std::bit_xor, standard_exact_int, chorus::bit_xor)
#if defined(__CUDACC__) && CHORUS_HAS_LIBCUDACXX
CHORUS_CANONICAL_OP(cuda::std::plus, standard_exact, chorus::sum)
CHORUS_CANONICAL_OP(cuda::std::multiplies, standard_exact, chorus::prod)
CHORUS_CANONICAL_OP(cuda::std::bit_and, standard_exact_int, chorus::bit_and)
CHORUS_CANONICAL_OP(cuda::std::bit_or, standard_exact_int, chorus::bit_or)
CHORUS_CANONICAL_OP(cuda::std::bit_xor, standard_exact_int, chorus::bit_xor)
CHORUS_CANONICAL_OP(cuda::maximum, standard_exact, chorus::max)         // both `a < b ? b : a`
CHORUS_CANONICAL_OP(cuda::minimum, standard_exact_int, chorus::min)     // on floats the two differ for NaN and -0
#endif
#undef CHORUS_CANONICAL_OP
template <class Op, class T>
using canonical_op_t = typename canonical_op<Op, T>::type;

//! Stand-in operator of the collectives that only copy (AllGather,
//! Broadcast, the exchanges, barrier): never called on data they move.
struct copy_only {
    static constexpr const char* name = "copy";
    template <class T>
    CHORUS_HD constexpr T operator()(const T& a, const T&) const noexcept(noexcept(T(a))) {
        return a;
    }
};
} // namespace detail

} // namespace chorus
