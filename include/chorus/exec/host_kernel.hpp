#pragma once
//! \file exec/host_kernel.hpp
//! The element type and the operator of one call, erased: what a host
//! executor needs of them. The reduce-copy loops (exec/host_reduce_copy.hpp)
//! are the only code that depends on the type and the operator; everything
//! else a host executor does (waits, flags, descriptors, error reports) is
//! compiled once, not once per (element type, operator), and reaches the
//! loops through the two function pointers here (one indirect call per
//! unit of a schedule, i.e. per chunk).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../core/element.hpp"
#include "../ops/traits.hpp"
#include "host_reduce_copy.hpp"

namespace chorus::detail {

//! What checked mode compares and error messages print of a call's types.
struct call_types {
    std::uint64_t elem_bytes = 1;
    std::uint64_t type_id = 0; //!< type_hash of the element type
    std::uint64_t op_id = 0;   //!< type_hash of the operator
    const char* type_name = "";
    const char* op_name = "";
    bool commutative = true; //!< op_traits<Op>::commutative (automatic reorders operands only then)
};

//! A stable per-program identifier of a type (FNV-1a of its spelled name),
//! so ranks can tell float from int32 and sum from a user operator.
template <class X>
constexpr std::uint64_t type_hash() {
#if defined(__GNUC__) || defined(__clang__)
    const char* s = __PRETTY_FUNCTION__;
#else
    const char* s = __FUNCSIG__;
#endif
    std::uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
    return h;
}

template <class T, class Op>
constexpr call_types call_types_of() {
    return {sizeof(T), type_hash<T>(), type_hash<Op>(), element_traits<T>::name(), op_traits<Op>::name(),
            op_traits<Op>::commutative};
}

//! One call's reduce-copy loops with their operator (see the file comment).
//! `op` points to the call's operator object, which outlives the call.
struct host_kernel {
    const void* op = nullptr;
    call_types types{};
    //! host_reduce_copy on elements: dst (and dst2) = finish(a op b), or a copy when b is null.
    void (*reduce_copy)(const void* op, void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                        int finish_n, bool streaming) = nullptr;
    //! host_reduce_fan on elements: dst (and dst2) = finish(src[0] op ... op src[nsrc-1]).
    void (*reduce_fan)(const void* op, void* dst, void* dst2, const void* const* src, int nsrc, std::size_t n,
                       int finish_n) = nullptr;
};

template <class T, class Op>
void host_reduce_copy_erased(const void* op, void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                             int finish_n, bool streaming) {
    host_reduce_copy(static_cast<T*>(dst), static_cast<T*>(dst2), static_cast<const T*>(a),
                     static_cast<const T*>(b), n, *static_cast<const Op*>(op), finish_n, streaming);
}

template <class T, class Op>
void host_reduce_fan_erased(const void* op, void* dst, void* dst2, const void* const* src, int nsrc, std::size_t n,
                            int finish_n) {
    thread_local std::vector<const T*> typed; // grows once per thread and type
    typed.resize(static_cast<std::size_t>(nsrc));
    for (int q = 0; q < nsrc; ++q) typed[static_cast<std::size_t>(q)] = static_cast<const T*>(src[q]);
    host_reduce_fan(static_cast<T*>(dst), static_cast<T*>(dst2), typed.data(), nsrc, n, *static_cast<const Op*>(op),
                    finish_n);
}

//! The erased kernel of element type T and operator `op` (which must
//! outlive every use of the result).
template <class T, class Op>
host_kernel host_kernel_of(const Op& op) {
    return {&op, call_types_of<T, Op>(), &host_reduce_copy_erased<T, Op>, &host_reduce_fan_erased<T, Op>};
}

} // namespace chorus::detail
