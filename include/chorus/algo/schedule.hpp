#pragma once
//! \file algo/schedule.hpp
//! The vocabulary of schedules: what one rank does in one step, and which
//! peer progress it must wait for first. Plain, trivially copyable structs
//! shared by the host and device executors.
//!
//! Progress protocol. Each (rank, channel) owns one monotonically increasing
//! flag. A rank runs its steps ("units") in order; after unit p it posts
//! "p + 1 units done" (release). Before a unit it waits (acquire) until the
//! named peers have posted at least the given unit counts. Waiting for the
//! peer whose data a unit reads is the data dependency; waiting for the
//! peer that reads what a unit overwrites is the write-after-read guard.
//! Collectives are told apart by a per-communicator sequence number kept in
//! the flag's high 32 bits, so flags never need resetting.

#include <cstdint>

#include "../core/config.hpp"

namespace chorus {

//! The collectives chorus schedules.
enum class collective : std::uint8_t { all_reduce, all_gather, reduce_scatter, broadcast, reduce, barrier };

CHORUS_HD constexpr const char* collective_name(collective c) {
    switch (c) {
    case collective::all_reduce: return "all_reduce";
    case collective::all_gather: return "all_gather";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::broadcast: return "broadcast";
    case collective::reduce: return "reduce";
    case collective::barrier: return "barrier";
    }
    return "?";
}

//! Which of a rank's registered buffers an operand lives in.
enum class where : std::uint8_t { none, in, out, scratch };

//! A slice of one rank's buffer: `rank` is absolute, `offset` in elements.
struct operand {
    int rank = -1;
    where loc = where::none;
    std::uint64_t offset = 0;
};

//! Wait until rank `peer` has finished `units` units on this channel
//! (peer < 0: no wait).
struct wait_spec {
    int peer = -1;
    std::uint64_t units = 0;
};

//! One unit of work: dst = src0 op src1 (src1.loc == none: dst = src0),
//! `count` elements, then the operator's epilogue when `finish` is set;
//! the same values also go to dst2 when dst2.loc != none. dst belongs to
//! the executing rank; dst2 may be a peer's buffer (a "push"). count == 0
//! is a pure synchronisation step.
struct step {
    operand dst{};
    operand dst2{};
    operand src0{};
    operand src1{};
    std::uint64_t count = 0;
    bool finish = false;
    wait_spec waits[2]{};
};

namespace detail {
CHORUS_HD constexpr int mod(long long a, int n) {
    long long r = a % n;
    return static_cast<int>(r < 0 ? r + n : r);
}
} // namespace detail

} // namespace chorus
