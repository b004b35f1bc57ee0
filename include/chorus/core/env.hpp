#pragma once
//! \file core/env.hpp
//! Strict parsing of the environment variables chorus reads (CHORUS_CHECK,
//! CHORUS_TIMEOUT_MS, CHORUS_SHM_BYTES, CHORUS_RANKS_PER_NODE): a value is
//! parsed whole and range-checked, and either accepted or rejected with
//! chorus::error (errc::invalid_argument) naming the variable, its value
//! and what is accepted. Unset or empty: the caller's default. Locale-free.

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>

#include "error.hpp"

namespace chorus::detail {

//! `s` without leading and trailing blanks (space, tab, newline, CR).
inline std::string_view env_trim(std::string_view s) noexcept {
    constexpr std::string_view blanks = " \t\n\r";
    const std::size_t b = s.find_first_not_of(blanks);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

//! `value` (of the variable `name`) as a whole decimal number from 1 to
//! `cap`: digits only, leading and trailing blanks allowed, no sign, no
//! exponent, no suffix. Anything else throws errc::invalid_argument naming
//! `name`, `value` and the accepted range ("a whole number of <unit> from 1
//! to <cap><note>").
inline std::uint64_t parse_env_positive(const char* name, const char* value, std::uint64_t cap, const char* unit,
                                        const char* note = "") {
    const std::string_view v = env_trim(value);
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n, 10);
    // ec: not a number, or more than 2^64 - 1 (above every cap).
    if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || n == 0 || n > cap)
        throw error(errc::invalid_argument, std::string("chorus: ") + name + "='" + value +
                                                "' is not accepted (use a whole number of " + unit + " from 1 to " +
                                                std::to_string(cap) + note + ")");
    return n;
}

//! The variable `name` by parse_env_positive(), or `fallback` when it is
//! unset or empty.
inline std::uint64_t env_positive(const char* name, std::uint64_t fallback, std::uint64_t cap, const char* unit,
                                  const char* note = "") {
    const char* s = std::getenv(name);
    if (s == nullptr || *s == '\0') return fallback;
    return parse_env_positive(name, s, cap, unit, note);
}

//! CHORUS_RANKS_PER_NODE, the ranks of one emulated node for hierarchical<>
//! policies on the threads and GPU backends (and their benchmarks): unset
//! or empty, 0 (one node); otherwise a whole number from 1 to 65535, and
//! anything else throws errc::invalid_argument naming the variable and its
//! value. (The MPI backend, which also takes lists such as "3,2,1", parses
//! it itself: backend/mpi_node.hpp.)
inline int env_ranks_per_node() {
    return static_cast<int>(env_positive("CHORUS_RANKS_PER_NODE", 0, 65535, "ranks per node",
                                         "; unset or empty for one node"));
}

//! `value` (of the variable `name`) as a boolean, case-insensitively:
//! 1/true/on/yes, or 0/false/off/no and the empty string; leading and
//! trailing blanks allowed. Anything else throws errc::invalid_argument.
inline bool parse_env_bool(const char* name, const char* value) {
    std::string v(env_trim(value));
    for (char& c : v)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
    if (v.empty() || v == "0" || v == "false" || v == "off" || v == "no") return false;
    throw error(errc::invalid_argument, std::string("chorus: ") + name + "='" + value +
                                            "' is not a boolean (use 1/true/on/yes or 0/false/off/no)");
}

//! The variable `name` by parse_env_bool(), or `fallback` when it is unset.
inline bool env_bool(const char* name, bool fallback) {
    const char* s = std::getenv(name);
    return s == nullptr ? fallback : parse_env_bool(name, s);
}

} // namespace chorus::detail
