#pragma once
//! \file core/error.hpp
//! The one exception type chorus throws, and the status codes that device-
//! clean code returns instead of throwing.

#include <stdexcept>
#include <string>

#include "config.hpp"

namespace chorus {

//! What went wrong, coarsely; the message says exactly what.
enum class errc {
    invalid_argument, //!< a bad argument, named in the message; nothing was moved
    timeout,          //!< a wait passed its deadline; the message names the rank waited for
    aborted,          //!< the communicator was aborted (comm.abort() or a failed peer)
    peer_failed,      //!< another rank failed; the message says which and why
    mismatch,         //!< ranks called different collectives / counts / roots
    internal,         //!< a bug in chorus, or a CUDA runtime call that failed (the message has CUDA's error)
    unavailable,      //!< what the call needs is not there: no CUDA device, no peer access between two devices
};

inline const char* to_string(errc e) noexcept {
    switch (e) {
    case errc::invalid_argument: return "invalid argument";
    case errc::timeout: return "timeout";
    case errc::aborted: return "aborted";
    case errc::peer_failed: return "peer failed";
    case errc::mismatch: return "mismatch";
    case errc::internal: return "internal error";
    case errc::unavailable: return "unavailable";
    }
    return "unknown";
}

//! Thrown by every chorus call that fails. `what()` names the collective and
//! the argument or rank at fault.
class error : public std::runtime_error {
public:
    error(errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
    errc code() const noexcept { return code_; }

private:
    errc code_;
};

} // namespace chorus

namespace chorus::detail {
//! Result of device-clean code (no exceptions there).
//! unreachable: a peer's buffer this rank has no mapping for (one process
//! per device: the peer passed memory it neither registered nor staged).
enum class status : int { ok = 0, timeout, aborted, mismatch, peer_exited, unreachable };
//! The words of every backend's timeout: "timed out after <ms> ms waiting
//! for <whom>" (timeout_ms < 0, when the waiter does not know it: the GPU
//! kernels, "timed out waiting for <whom>").
inline std::string timed_out_waiting(long long timeout_ms, const std::string& whom) {
    return (timeout_ms >= 0 ? "timed out after " + std::to_string(timeout_ms) + " ms" : std::string("timed out")) +
           " waiting for " + whom;
}
//! "rank <r>", as the messages name a rank.
inline std::string rank_text(int r) { return "rank " + std::to_string(r); }

} // namespace chorus::detail
