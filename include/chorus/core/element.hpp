#pragma once
//! \file core/element.hpp
//! What may be an element of a collective: any trivially copyable object
//! type. Arithmetic types get a printable name; user types print as
//! "user(N bytes)".

#include <cstdint>
#include <type_traits>

namespace chorus {

//! An element type chorus can move: bytes in, bytes out.
template <class T>
concept element = std::is_object_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T> &&
                  std::is_trivially_copyable_v<T>;

template <class T>
struct element_traits {
    static constexpr std::uint64_t bytes = sizeof(T);
    static constexpr bool arithmetic = std::is_arithmetic_v<T>;
    static constexpr const char* name() {
        if constexpr (std::is_same_v<T, float>) return "float";
        else if constexpr (std::is_same_v<T, double>) return "double";
        else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
        else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
        else if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
        else if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
        else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
        else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
        else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
        else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
        else return "user";
    }
};

} // namespace chorus
