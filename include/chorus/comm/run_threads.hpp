#pragma once
//! \file comm/run_threads.hpp
//! run_threads: the threads backend's entry point, n ranks as threads of
//! this process, each with its communicator<threads>.

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../backend/threads.hpp"
#include "../core/error.hpp"
#include "../ops/operators.hpp"
#include "communicator.hpp"

namespace chorus {

namespace detail {
//! What run_threads reports when the thread of rank `r` of `n` could not be
//! started (`what`: the system's reason): the limits that apply.
inline std::string run_threads_limit_text(int r, int n, const char* what) {
    return "chorus::run_threads: could not start the thread of rank " + std::to_string(r) + " of " +
           std::to_string(n) + ": " + what +
           " (the process's thread or memory limit: ulimit -u, ulimit -v, /proc/sys/kernel/threads-max)";
}
} // namespace detail

//! Starts `n` ranks as threads, calls fn(communicator<threads>&) on each,
//! and joins them. If a rank throws, the others are released with an error
//! (peer_failed) instead of hanging, and the first rank's original
//! exception is rethrown here. If a rank's thread cannot be started (the
//! process's thread or memory limit), the ranks already started are
//! released (their calls fail with errc::aborted), joined, and
//! chorus::error(errc::unavailable) naming the rank and the limit is thrown
//! instead of anything they threw; rank 0 (the calling thread) does not run.
template <class F>
void run_threads(int n, F&& fn) {
    if (n < 1) throw error(errc::invalid_argument, "chorus::run_threads: `n` must be >= 1, got " + std::to_string(n));
    std::shared_ptr<detail::threads_world> world;
    std::vector<std::thread> ts;
    try {
        world = std::make_shared<detail::threads_world>(n); // may throw chorus::error (CHORUS_RANKS_PER_NODE)
        ts.reserve(static_cast<std::size_t>(n - 1));
    } catch (const std::bad_alloc&) {
        throw error(errc::unavailable, "chorus::run_threads: not enough memory for the shared state of `n` = " +
                                           std::to_string(n) + " ranks");
    }
    std::mutex m;
    std::exception_ptr first;      // the first failure that is not a consequence of another
    std::exception_ptr first_any;  // the first failure of any kind
    auto body = [&](int r) {
        try {
            struct leave { // runs after comm drained its queue (declared first, destroyed last)
                detail::threads_world& w;
                int r;
                int unwinding = std::uncaught_exceptions();
                ~leave() {
                    // fn's exceptions are caught below: one unwinding through here
                    // comes from making the communicator. Fail the peers with that
                    // reason before they see this rank as merely gone.
                    if (std::uncaught_exceptions() > unwinding) {
                        try {
                            w.abort(errc::peer_failed,
                                    "rank " + std::to_string(r) + " could not create its communicator");
                        } catch (...) {
                        }
                    }
                    w.mark_gone(r);
                }
            } on_exit{*world, r};
            communicator<threads> comm(world, r);
            try {
                fn(comm);
            } catch (...) {
                // Release peers before this rank's communicator drains its queue.
                std::string what = "unknown exception";
                bool secondary = false;
                try {
                    throw;
                } catch (const error& e) {
                    what = e.what();
                    secondary = e.code() == errc::aborted || e.code() == errc::peer_failed;
                } catch (const std::exception& e) {
                    what = e.what();
                } catch (...) {
                }
                world->abort(errc::peer_failed, "rank " + std::to_string(r) + " failed: " + what);
                std::lock_guard<std::mutex> lk(m);
                if (!first_any) first_any = std::current_exception();
                if (!first && !secondary) first = std::current_exception();
            }
        } catch (...) {
            std::lock_guard<std::mutex> lk(m);
            if (!first_any) first_any = std::current_exception();
        }
    };
    for (int r = 1; r < n; ++r) {
        try {
            ts.emplace_back(body, r); // reserved: only the thread's start can fail
        } catch (const std::exception& e) {
            // std::system_error (EAGAIN: thread or memory limit) or std::bad_alloc.
            // The ranks already started may wait for this one or rank 0, which
            // never run: release them (their calls fail with errc::aborted),
            // join them, and report the limit, not what they threw.
            std::string why;
            try {
                why = detail::run_threads_limit_text(r, n, e.what());
            } catch (...) { // no memory left for the text either
            }
            try {
                world->abort(errc::aborted, why);
            } catch (...) {
                world->abort(errc::aborted, std::string()); // copying an empty text allocates nothing
            }
            for (auto& t : ts) t.join();
            if (why.empty()) throw error(errc::unavailable, "chorus::run_threads: could not start a rank's thread");
            throw error(errc::unavailable, why);
        }
    }
    body(0);
    for (auto& t : ts) t.join();
    if (first) std::rethrow_exception(first);
    if (first_any) std::rethrow_exception(first_any);
}

// The contract of core/communicator.hpp, for one element type and operator.
static_assert(detail::collective_backend<communicator<threads>, float, sum>);

} // namespace chorus
