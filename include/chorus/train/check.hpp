#pragma once
//! \file train/check.hpp
//! Argument errors of the training helpers: chorus::error with
//! errc::invalid_argument, the message naming the helper and the argument.

#include <string>

#include "../core/error.hpp"

namespace chorus::train::detail {

[[noreturn]] inline void throw_arg(const char* who, const std::string& msg) {
    throw error(errc::invalid_argument, std::string("chorus::train::") + who + ": " + msg);
}

} // namespace chorus::train::detail
