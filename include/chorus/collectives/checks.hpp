#pragma once
//! \file collectives/checks.hpp
//! What every collective checks before it moves a byte: at compile time,
//! that the element type, operator and algorithm compose (one sentence per
//! failure, no template backtrace to decode); at run time, that the spans
//! fit together (messages name the argument).

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "../algo/policy.hpp"
#include "../algo/schedule.hpp"
#include "../core/element.hpp"
#include "../core/error.hpp"
#include "../ops/operators.hpp"
#include "../ops/traits.hpp"

namespace chorus::detail {

template <class X>
inline constexpr bool is_span_v = false;
template <class X, std::size_t E>
inline constexpr bool is_span_v<std::span<X, E>> = true;

//! The raw pointer of a contiguous buffer other than std::span: r.data()
//! where that is a pointer (std::vector, std::array, cuda::std::span,
//! thrust::host_vector), r.data().get() where it is a fancy pointer
//! (thrust::device_vector's device_ptr).
template <class R>
    requires requires(R& r) { requires std::is_pointer_v<decltype(r.data())>; }
constexpr auto buffer_data(R& r) {
    return r.data();
}
template <class R>
    requires requires(R& r) { requires std::is_pointer_v<decltype(r.data().get())>; }
constexpr auto buffer_data(R& r) {
    return r.data().get();
}
//! A contiguous buffer that is not a std::span: what the buffer forms of
//! the collectives (collectives/buffers.hpp) take and view as a span.
template <class R>
concept buffer_like = !is_span_v<std::remove_cvref_t<R>> && requires(R& r) {
    { buffer_data(r) };
    requires std::is_pointer_v<decltype(buffer_data(r))>;
    { r.size() } -> std::convertible_to<std::size_t>;
};

//! Distinguishes an operator argument from a buffer in overloads.
template <class Op>
concept op_like = std::is_class_v<Op> && !is_span_v<Op> && !buffer_like<Op>;

template <class Algo, class T>
constexpr bool check_element() {
    static_assert(std::is_trivially_copyable_v<T>, "chorus: element type must be trivially copyable");
    static_assert(algorithm_policy<Algo>, "chorus: Algo must be an algorithm policy such as chorus::ring<>");
    return std::is_trivially_copyable_v<T> && algorithm_policy<Algo>;
}

template <class Algo, class T, class Op>
constexpr bool check_reduction() {
    if constexpr (!check_element<Algo, T>()) {
        return false;
    } else {
        constexpr bool integral_ok = !op_traits<Op>::integral_only || std::is_integral_v<T>;
        static_assert(integral_ok, "chorus: bit_and/bit_or/bit_xor need an integral element type");
        constexpr bool arithmetic_ok = !op_traits<Op>::arithmetic_only || element_traits<T>::arithmetic;
        static_assert(arithmetic_ok, "chorus: avg needs an arithmetic element type (it divides by the rank count)");
        static_assert(std::is_trivially_copyable_v<Op>,
                      "chorus: the operator must be trivially copyable (it is copied to worker threads and kernels)");
        constexpr bool callable = reduction<Op, T>;
        static_assert(callable, "chorus: the operator cannot combine two values of the element type "
                                "(it needs T operator()(const T&, const T&) const)");
        constexpr bool order_ok = !Algo::reorders_operands || op_traits<Op>::commutative;
        constexpr algorithm which = policy_of<Algo>.algo;
        if constexpr (which == algorithm::hierarchical)
            static_assert(order_ok, "chorus: hierarchical<> reorders operands; the operator must be commutative "
                                    "(declare static constexpr bool commutative = true in the operator)");
        else if constexpr (which == algorithm::tree)
            static_assert(order_ok, "chorus: tree<> reorders operands; the operator must be commutative "
                                    "(declare static constexpr bool commutative = true in the operator, or use "
                                    "an order-keeping policy: direct<>, two_shot<>, recursive_doubling<>, "
                                    "rabenseifner<>, automatic)");
        else
            static_assert(order_ok, "chorus: ring<> reorders operands; the operator must be commutative "
                                    "(declare static constexpr bool commutative = true in the operator)");
        return integral_ok && arithmetic_ok && callable && order_ok;
    }
}

[[noreturn]] inline void throw_arg(collective c, const std::string& msg) {
    throw error(errc::invalid_argument, std::string("chorus::") + collective_name(c) + ": " + msg);
}

//! What a policy type's static_asserts refuse, for a policy value made at
//! run time: tuning out of range, hierarchical phases that are not ring or
//! direct, and an algorithm that reorders operands with an operator that
//! is not commutative (`commutative`: the call's operator; true for the
//! collectives that only copy).
inline void check_policy(collective c, const policy& p, bool commutative) {
    // 0: chosen per call (resolve_tuning in algo/policy.hpp).
    auto tune_ok = [](const tuning& t) {
        return t.channels >= 0 && t.channels <= max_channels && (t.chunk_bytes == 0 || t.chunk_bytes >= 16);
    };
    if (!tune_ok(p.tune))
        throw_arg(c, "the policy's tuning has " + std::to_string(p.tune.channels) + " channel(s) and chunk_bytes " +
                         std::to_string(p.tune.chunk_bytes) + "; it needs 1.." + std::to_string(max_channels) +
                         " channels and chunk_bytes >= 16 (or 0 in either: chosen per call)");
    if (!p.choose && p.algo == algorithm::hierarchical) {
        const auto leaf = [](algorithm a) { return a == algorithm::ring || a == algorithm::direct; };
        if (!leaf(p.intra) || !leaf(p.inter))
            throw_arg(c, "hierarchical<Intra, Inter> needs ring or direct phases");
        if (!tune_ok(p.inter_tune)) throw_arg(c, "hierarchical<Intra, Inter>: Inter's tuning is out of range");
    }
    if (!commutative && p.reorders_operands())
        throw_arg(c, std::string(algorithm_name(p.algo)) +
                         "<> reorders operands; the operator must be commutative (or use an order-keeping "
                         "policy: direct<>, two_shot<>, recursive_doubling<>, rabenseifner<>, automatic)");
}

template <class T>
void check_data(collective c, const char* name, const T* p, std::size_t n) {
    if (p == nullptr && n != 0)
        throw_arg(c, std::string("`") + name + "` has " + std::to_string(n) + " elements but a null data pointer");
}

//! True when [a, a+na) and [b, b+nb) share an element.
template <class T>
bool overlaps(const T* a, std::size_t na, const T* b, std::size_t nb) {
    if (na == 0 || nb == 0) return false;
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + nb * sizeof(T) && y < x + na * sizeof(T);
}

inline void check_root(collective c, int root, int size) {
    if (root < 0 || root >= size)
        throw_arg(c, "`root` is " + std::to_string(root) + " but the communicator has ranks 0.." +
                         std::to_string(size - 1));
}

inline std::size_t checked_mul(collective c, const char* what, std::size_t a, std::size_t b) {
    if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b)
        throw_arg(c, std::string(what) + " overflows: " + std::to_string(a) + " * " + std::to_string(b));
    return a * b;
}

} // namespace chorus::detail
