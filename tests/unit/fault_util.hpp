#pragma once
//! Helpers for the fault-injection tests (test_faults.cpp): what a rank saw
//! when a call failed, and one collective call of a kind chosen at run time
//! with buffers that outlive an async call and a verifier of its result.

#include "test_util.hpp"

#include <cctype>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#  define CHORUS_FAULT_SANITIZED 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#    define CHORUS_FAULT_SANITIZED 1
#  endif
#endif
#if !defined(CHORUS_FAULT_SANITIZED)
#  define CHORUS_FAULT_SANITIZED 0
#endif

namespace chorus_fault {

using chorus_test::contains;
using chorus_test::seconds_since;
using chorus_test::steady;
using comm_t = chorus::communicator<chorus::threads>;

inline constexpr bool sanitized = CHORUS_FAULT_SANITIZED != 0;

//! What one rank saw from one call.
struct seen {
    bool ran = false;   //!< the call was attempted
    bool threw = false; //!< it threw (anything)
    bool chorus_error = false;
    chorus::errc code = chorus::errc::internal;
    std::string what;
    double after_s = 0; //!< seconds from the call to its return / exception
};

template <class F>
seen capture(F&& f) {
    seen s;
    s.ran = true;
    const auto t0 = steady::now();
    try {
        f();
    } catch (const chorus::error& e) {
        s.threw = true;
        s.chorus_error = true;
        s.code = e.code();
        s.what = e.what();
    } catch (const std::exception& e) {
        s.threw = true;
        s.what = std::string("not a chorus::error: ") + e.what();
    } catch (...) {
        s.threw = true;
        s.what = "not a std::exception";
    }
    s.after_s = seconds_since(t0);
    return s;
}

//! The message names rank r ("rank 2 ...", "ranks that have not joined it: 2", "ranks 1, 2: ...").
inline bool names_rank(const std::string& what, int r) {
    const std::string d = std::to_string(r);
    if (contains(what, "rank " + d)) return true;
    if (contains(what, "not joined it: " + d)) return true;
    // lists such as "ranks 0, 2:" or "ranks 0, 1 and 2"
    for (std::size_t p = what.find("ranks "); p != std::string::npos; p = what.find("ranks ", p + 1)) {
        std::size_t q = p + 6;
        while (q < what.size() && (std::isdigit(static_cast<unsigned char>(what[q])) || what[q] == ',' ||
                                   what[q] == ' ' || what.compare(q, 4, "and ") == 0)) {
            if (what.compare(q, 4, "and ") == 0) { q += 4; continue; }
            if (std::isdigit(static_cast<unsigned char>(what[q]))) {
                std::size_t e = q;
                while (e < what.size() && std::isdigit(static_cast<unsigned char>(what[e]))) ++e;
                if (what.compare(q, e - q, d) == 0 && e - q == d.size()) return true;
                q = e;
            } else {
                ++q;
            }
        }
    }
    return false;
}

enum coll_k : int { k_all_reduce, k_all_gather, k_reduce_scatter, k_broadcast, k_reduce, k_barrier };
inline const char* coll_name(int c) {
    static const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "barrier"};
    return names[c];
}

//! A sum whose first combine on the thread `signal_thread` sets `in_op` and
//! sleeps `hold`: it holds that rank inside a reduction step, so that
//! another thread can act while the collective is certainly in flight.
struct signal_state {
    std::atomic<std::thread::id> thread{};
    std::atomic<bool> in_op{false};
    std::chrono::milliseconds hold{30};
};
inline signal_state g_signal;

struct signal_sum {
    static constexpr bool commutative = true;
    static constexpr const char* name = "signal_sum";
    float operator()(const float& a, const float& b) const {
        if (std::this_thread::get_id() == g_signal.thread.load() && !g_signal.in_op.exchange(true))
            std::this_thread::sleep_for(g_signal.hold);
        return a + b;
    }
};

//! Rank r's input element i: a small integer, exact in float.
inline float input_of(int r, std::size_t i) { return float(r + 1) + float(i % 7); }

//! One float collective with sum and ring<>: `count` is the buffer length
//! (all_reduce, broadcast, reduce) or the per-rank block (all_gather,
//! reduce_scatter). The buffers live in the object, so an async call may
//! be waited later.
struct one_call {
    int coll = k_all_reduce;
    std::size_t count = 0;
    int root = 0;
    bool slow = false; //!< all_reduce / reduce use signal_sum
    std::vector<float> a, b;
    chorus::future f;

    one_call(int c, std::size_t cnt, int rt = 0) : coll(c), count(cnt), root(rt) {}

    void prepare(int r, int n) {
        const std::size_t m = count, nn = std::size_t(n);
        auto fill = [&](std::vector<float>& v, std::size_t len) {
            v.resize(len);
            for (std::size_t i = 0; i < len; ++i) v[i] = input_of(r, i);
        };
        switch (coll) {
        case k_all_reduce: fill(a, m); b.assign(m, -1.0f); break;
        case k_all_gather: fill(a, m); b.assign(nn * m, -1.0f); break;
        case k_reduce_scatter: fill(a, nn * m); b.assign(m, -1.0f); break;
        case k_broadcast:
            if (r == root) fill(a, m);
            else a.assign(m, -1.0f);
            break;
        case k_reduce:
            fill(a, m);
            b.assign(r == root ? m : 0, -1.0f);
            break;
        default: break;
        }
    }

    //! Issues the call (after prepare()).
    void issue(comm_t& comm, bool async) {
        std::span<const float> in(a);
        switch (coll) {
        case k_all_reduce:
            if (slow) chorus::all_reduce(comm, in, std::span(b), signal_sum{});
            else if (async) f = chorus::all_reduce_async(comm, in, std::span(b), chorus::sum{});
            else chorus::all_reduce(comm, in, std::span(b), chorus::sum{});
            break;
        case k_all_gather:
            if (async) f = chorus::all_gather_async(comm, in, std::span(b));
            else chorus::all_gather(comm, in, std::span(b));
            break;
        case k_reduce_scatter:
            if (async) f = chorus::reduce_scatter_async(comm, in, std::span(b), chorus::sum{});
            else chorus::reduce_scatter(comm, in, std::span(b), chorus::sum{});
            break;
        case k_broadcast:
            if (async) f = chorus::broadcast_async(comm, std::span(a), root);
            else chorus::broadcast(comm, std::span(a), root);
            break;
        case k_reduce:
            if (slow) chorus::reduce(comm, in, std::span(b), signal_sum{}, root);
            else if (async) f = chorus::reduce_async(comm, in, std::span(b), chorus::sum{}, root);
            else chorus::reduce(comm, in, std::span(b), chorus::sum{}, root);
            break;
        default:
            if (async) f = chorus::barrier_async(comm);
            else chorus::barrier(comm);
            break;
        }
    }

    //! "" when this rank's output is right, else what is wrong.
    std::string verify(int r, int n) const {
        const std::size_t m = count;
        const float tri = float(n * (n + 1) / 2);
        auto first_bad = [&](const std::vector<float>& v, auto want) -> std::string {
            for (std::size_t i = 0; i < v.size(); ++i)
                if (v[i] != want(i))
                    return std::string(coll_name(coll)) + " element " + std::to_string(i) + " is " +
                           std::to_string(v[i]) + ", want " + std::to_string(want(i));
            return {};
        };
        switch (coll) {
        case k_all_reduce: return first_bad(b, [&](std::size_t i) { return tri + float(n) * float(i % 7); });
        case k_all_gather:
            return first_bad(b, [&](std::size_t i) { return input_of(int(i / m), i % m); });
        case k_reduce_scatter:
            return first_bad(b, [&](std::size_t j) { return tri + float(n) * float((std::size_t(r) * m + j) % 7); });
        case k_broadcast: return first_bad(a, [&](std::size_t i) { return input_of(root, i); });
        case k_reduce:
            if (r != root) return {};
            return first_bad(b, [&](std::size_t i) { return tri + float(n) * float(i % 7); });
        default: return {};
        }
    }
};

} // namespace chorus_fault
