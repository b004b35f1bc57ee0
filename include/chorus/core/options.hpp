#pragma once
//! \file core/options.hpp
//! Per-call options that apply to the collectives a scope issues.

#include <chrono>

namespace chorus {

//! Collectives issued on `comm` while this object lives wait at most `t`
//! (instead of the communicator's timeout, comm.set_timeout). The deadline
//! is fixed when a call is issued, so it also holds for async calls that
//! run after the scope ended. Scopes nest.
//!
//!     { chorus::timeout_scope quick(comm, std::chrono::milliseconds(200));
//!       chorus::all_reduce(comm, std::span(x)); }
template <class Comm>
class timeout_scope {
public:
    timeout_scope(Comm& comm, std::chrono::milliseconds t) : comm_(comm), previous_(comm.call_timeout()) {
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
