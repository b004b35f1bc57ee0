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
#include <type_traits>

#include "../core/collective.hpp"
#include "../core/config.hpp"

namespace chorus {

//! Which of a rank's registered buffers an operand lives in.
enum class where : std::uint8_t { none, in, out, scratch };

//! A slice of one rank's buffer: `rank` is absolute, `offset` in elements.
struct operand {
    int rank = -1;
    where loc = where::none;
    std::uint64_t offset = 0;
};

//! Where an operand's slice starts, given its rank's registered buffers:
//! `elem_bytes` per element; null for where::none (and for a buffer the
//! rank did not register). Every executor resolves operands with it.
CHORUS_HD inline unsigned char* operand_address(const operand& o, const void* in, void* out, void* scratch,
                                                std::uint64_t elem_bytes) {
    unsigned char* b = nullptr;
    switch (o.loc) {
    case where::in: b = const_cast<unsigned char*>(static_cast<const unsigned char*>(in)); break;
    case where::out: b = static_cast<unsigned char*>(out); break;
    case where::scratch: b = static_cast<unsigned char*>(scratch); break;
    case where::none: break;
    }
    return b == nullptr ? nullptr : b + o.offset * elem_bytes;
}

//! Wait until rank `peer` has finished `units` units on this channel
//! (peer < 0: no wait). With span > 1 the wait covers the ranks
//! peer + i * stride for i < span (a group: "every rank of my node"),
//! skipping the waiting rank itself.
struct wait_spec {
    int peer = -1;
    std::uint64_t units = 0;
    std::uint16_t span = 0;   //!< 0 or 1: the single rank `peer`
    std::uint16_t stride = 1;
    //! Wait for every channel of the group (the waiting rank's own other
    //! channels included), not only the waiting channel: a phase whose
    //! channels split the data differently from the phase before reads
    //! what other channels wrote. Executors that run a rank's channels in
    //! order, unit by unit, satisfy it by that order; those that run
    //! channels independently (the GPU's thread blocks) wait on each one.
    bool every_channel = false;
};

//! One unit of work: dst = src0 op src1 (src1.loc == none: dst = src0),
//! `count` elements, then the operator's epilogue when `finish` is set;
//! the same values also go to dst2 when dst2.loc != none. dst belongs to
//! the executing rank; dst2 may be a peer's buffer (a "push"). count == 0
//! is a pure synchronisation step.
//! Fan-in (fan_in >= 2): the sources are the same slice (src0.loc,
//! src0.offset) of ranks src0.rank + q * fan_stride, q = 0..fan_in-1,
//! combined in that order, element by element (every source of element i
//! is read before element i is written, so dst may be one of them); src1
//! is unused. This is the N-source reduce-copy of one-shot algorithms.
struct step {
    operand dst{};
    operand dst2{};
    operand src0{};
    operand src1{};
    std::uint64_t count = 0;
    bool finish = false;
    std::uint16_t fan_in = 0;
    std::uint16_t fan_stride = 1;
    wait_spec waits[2]{};

    //! Rank of fan-in source q.
    CHORUS_HD constexpr int source_rank(int q) const { return src0.rank + q * int(fan_stride); }
    //! Fan-in source q: src0's slice in rank source_rank(q)'s buffer.
    CHORUS_HD constexpr operand fan_source(int q) const { return {source_rank(q), src0.loc, src0.offset}; }
};

//! Calls f(operand) for each source of `s` in the order the step combines
//! them: fan-in sources q = 0..fan_in-1, else src0 then src1.
template <class F>
constexpr void for_each_source(const step& s, F&& f) {
    if (s.fan_in >= 2) {
        for (int q = 0; q < int(s.fan_in); ++q) f(s.fan_source(q));
        return;
    }
    if (s.src0.loc != where::none) f(s.src0);
    if (s.src1.loc != where::none) f(s.src1);
}

namespace model {
struct topology;
} // namespace model

//! What a policy needs to plan one collective on one rank. Every rank of
//! the collective passes the same values except `rank` and `in_place`.
//! Invariant every schedule keeps (the MPI executor relies on it): what a
//! rank reads from a peer, and the peer progress it waits for, do not
//! depend on the reader's own `in_place`.
struct schedule_args {
    collective coll = collective::all_reduce;
    int rank = 0;
    int nranks = 1;
    int root = 0;
    std::uint64_t count = 0;      //!< AllReduce/Broadcast/Reduce: elements; AllGather/ReduceScatter: per-rank block
    std::uint64_t elem_bytes = 1;
    bool in_place = false;        //!< this rank's in and out are the same memory (as the API defines in place)
    int node_size = 0;            //!< ranks per node for hierarchical policies (0: one node)
    //! The "v" collectives: all_gatherv and reduce_scatterv, counts[q] =
    //! rank q's block (n entries); all_to_allv, counts[q * n + r] = what
    //! rank q sends rank r (n * n entries). Blocks are packed in rank
    //! order. Every rank passes the same values. Null otherwise.
    const std::uint64_t* counts = nullptr;
    bool commutative = true;      //!< the operator is commutative (automatic may reorder operands)
    const model::topology* topo = nullptr; //!< what automatic plans against (null: the built-in topology{})
    //! Scratch the backend can give one call, bytes (0: as much as needed):
    //! automatic leaves out algorithms that would need more.
    std::uint64_t scratch_limit_bytes = 0;
    //! Bytes of scratch this rank's node peers can read, where they can
    //! read nothing else of it (ranks that keep their buffers private, as
    //! MPI processes do: the transport puts scratch in a window the node
    //! shares). hierarchical<> then stages through the windows
    //! (algo/staged.hpp). 0: peers read each other's buffers directly.
    std::uint64_t node_window_bytes = 0;
    //! Payload bytes the transport's LL receive region holds per source
    //! (0: no LL protocol, as on the host backends): direct<> with
    //! protocol::ll, automatic and deterministic<> run a call whose
    //! per-source payload fits with the LL protocol (algo/ll.hpp).
    std::uint64_t ll_limit_bytes = 0;
    //! Channels one rank may use on a GPU transport, every rank's blocks on
    //! a device resident at once (backend/gpu.hpp); tuning fields left at 0
    //! (chosen per call) are resolved against it (resolve_tuning in
    //! algo/policy.hpp). 0: a host transport (the host values).
    int channel_budget = 0;
};

//! True when two calls have the same schedule_args (every field, but
//! in_place where `any_in_place`; pointers by address).
CHORUS_HD constexpr bool same_args(const schedule_args& a, const schedule_args& b, bool any_in_place = false) {
    return a.coll == b.coll && a.rank == b.rank && a.nranks == b.nranks && a.root == b.root && a.count == b.count &&
           a.elem_bytes == b.elem_bytes && (any_in_place || a.in_place == b.in_place) && a.node_size == b.node_size &&
           a.counts == b.counts && a.commutative == b.commutative && a.topo == b.topo &&
           a.scratch_limit_bytes == b.scratch_limit_bytes && a.node_window_bytes == b.node_window_bytes &&
           a.ll_limit_bytes == b.ll_limit_bytes && a.channel_budget == b.channel_budget;
}

//! Whether one rank's call is in place as the API defines it: AllGather,
//! `in` is block `rank` of `out`; ReduceScatter, `out` is block `rank` of
//! `in`; the others, in == out. `count` as in schedule_args.
template <class T>
CHORUS_HD constexpr bool in_place_call(collective coll, const T* in, const T* out, int rank, std::uint64_t count) {
    if (coll == collective::reduce_scatter) return out == in + std::uint64_t(rank) * count;
    if (coll == collective::all_gather) return out + std::uint64_t(rank) * count == in;
    return in == out;
}

namespace detail {
//! s.unit(c, p), compiled as a function of its own (CHORUS_NOINLINE).
template <class S>
CHORUS_HD CHORUS_NOINLINE step unit_out_of_line(const S& s, int c, std::uint64_t p) {
    return s.unit(c, p);
}
} // namespace detail

//! Unit p of channel c of schedule `s`, where one schedule is a part of
//! another (hierarchical<>'s phases, two_shot<>'s shots, any_schedule's
//! kinds). In device code out of line, so each schedule's code is compiled
//! once however many composites use it: nvcc's ptxas takes time that grows
//! faster than the size of a function, and this is what keeps a kernel
//! cheap to build (one default all_reduce in a .cu file: 67 s of build
//! with everything inlined, 13 s this way). In host code (compiled once
//! per translation unit: host executors are not templates of the element
//! type) and in constant expressions, inline.
template <class S>
CHORUS_HD constexpr step unit_of(const S& s, int c, std::uint64_t p) {
#if defined(__CUDA_ARCH__)
    if (!std::is_constant_evaluated()) return detail::unit_out_of_line(s, c, p);
#endif
    return s.unit(c, p);
}

namespace detail {
CHORUS_HD constexpr int mod(long long a, int n) {
    long long r = a % n;
    return static_cast<int>(r < 0 ? r + n : r);
}
} // namespace detail

} // namespace chorus
