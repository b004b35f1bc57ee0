#pragma once
//! \file comm/run_threads.hpp
//! run_threads: the threads backend's entry point, n ranks as threads of
//! this process, each with its communicator<threads>.

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../backend/threads.hpp"
#include "../core/error.hpp"
#include "../ops/operators.hpp"
#include "communicator.hpp"

namespace chorus {

//! Starts `n` ranks as threads, calls fn(communicator<threads>&) on each,
//! and joins them. If a rank throws, the others are released with an error
//! (peer_failed) instead of hanging, and the first rank's original
//! exception is rethrown here.
template <class F>
void run_threads(int n, F&& fn) {
    if (n < 1) throw error(errc::invalid_argument, "chorus::run_threads: `n` must be >= 1, got " + std::to_string(n));
    auto world = std::make_shared<detail::threads_world>(n);
    std::mutex m;
    std::exception_ptr first;      // the first failure that is not a consequence of another
    std::exception_ptr first_any;  // the first failure of any kind
    auto body = [&](int r) {
        try {
            struct leave { // runs after comm drained its queue (declared first, destroyed last)
                detail::threads_world& w;
                int r;
                ~leave() { w.mark_gone(r); }
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
    std::vector<std::thread> ts;
    ts.reserve(static_cast<std::size_t>(n));
    for (int r = 1; r < n; ++r) ts.emplace_back(body, r);
    body(0);
    for (auto& t : ts) t.join();
    if (first) std::rethrow_exception(first);
    if (first_any) std::rethrow_exception(first_any);
}

// The contract of core/communicator.hpp, for one element type and operator.
static_assert(detail::collective_backend<communicator<threads>, float, sum>);

} // namespace chorus
