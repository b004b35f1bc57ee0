#pragma once
//! \file core/options.hpp
//! Per-call options that apply to the collectives a scope issues.

#include <chrono>
#include <string>

#include "error.hpp"

namespace chorus {

//! The longest timeout chorus accepts (comm.set_timeout, timeout_scope,
//! CHORUS_TIMEOUT_MS): 10^9 ms, about 11.6 days. A deadline
//! steady_clock::now() + timeout therefore cannot overflow.
inline constexpr std::chrono::milliseconds max_timeout{1'000'000'000};
static_assert(std::chrono::duration_cast<std::chrono::steady_clock::duration>(max_timeout) <
                  std::chrono::steady_clock::duration::max() / 2,
              "now() + max_timeout must not overflow steady_clock");

namespace detail {
//! Throws errc::invalid_argument, naming `who`'s argument `t`, unless
//! 0 < t <= max_timeout.
inline void check_timeout(const char* who, std::chrono::milliseconds t) {
    if (t.count() <= 0 || t > max_timeout)
        throw error(errc::invalid_argument, std::string(who) + ": `t` must be positive and at most " +
                                                std::to_string(max_timeout.count()) + " ms (about 11.6 days), got " +
                                                std::to_string(t.count()) + " ms");
}
} // namespace detail

//! Collectives issued on `comm` while this object lives wait at most `t`
//! (instead of the communicator's timeout, comm.set_timeout). The deadline
//! is fixed when a call is issued, so it also holds for async calls that
//! run after the scope ended. Scopes nest. `t` must be positive and at
//! most max_timeout (else errc::invalid_argument).
//!
//!     { chorus::timeout_scope quick(comm, std::chrono::milliseconds(200));
//!       chorus::all_reduce(comm, std::span(x)); }
template <class Comm>
class timeout_scope {
public:
    timeout_scope(Comm& comm, std::chrono::milliseconds t) : comm_(comm), previous_(comm.call_timeout()) {
        detail::check_timeout("chorus::timeout_scope", t);
        comm_.set_call_timeout(t);
    }
    timeout_scope(const timeout_scope&) = delete;
    timeout_scope& operator=(const timeout_scope&) = delete;
    ~timeout_scope() { comm_.set_call_timeout(previous_); }

private:
    Comm& comm_;
    std::chrono::milliseconds previous_;
};

} // namespace chorus
