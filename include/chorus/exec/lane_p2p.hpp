#pragma once
//! \file exec/lane_p2p.hpp
//! Point-to-point (send/recv) in the lane executor: the body of the GPU
//! backend's p2p kernel (kernels/p2p.cuh, one block per call) and of the
//! CPU lane test (tests/unit/test_lanes_p2p.cpp), __host__ __device__ like
//! the rest of exec/lane_env.hpp.
//!
//! One rendezvous per message of an ordered pair (s -> r), numbered 1, 2,
//! ... on each side by counters in the ranks' own areas (lane_p2p_out::sent
//! on s, lane_p2p_in::received on r), so a launch replayed from a CUDA
//! graph is the pair's next message. Messages of a pair match in issue
//! order, independently of the collectives (their flags and counters are
//! elsewhere) and of other pairs.
//!
//!  sender s (message m)                     receiver r (message m)
//!  out[r] = {buf, count, elem_bytes, type}
//!  out[r].posted = m            (release)   wait out[s].posted >= m  (peer's area)
//!                                           in[s].state = m:claimed  (seq_cst)
//!                                           out[s].cancelled >= m ?  (seq_cst) -> refused
//!                                           compare count, element size, type
//!                                             differ: in[s] = {its count...}, m:mismatched
//!                                           copy buf -> its buffer (all lanes)
//!  wait in[s].state >= m:delivered          in[s].state = m:delivered (release)
//!
//! A sender whose wait fails (deadline, abort word) withdraws the message
//! (cancelled = m) and then looks at the receiver's state: the seq_cst
//! store-then-load on both sides (a Dekker pair) guarantees that either
//! the receiver sees the withdrawal and never reads `buf`, or the sender
//! sees the claim and waits (a second deadline of at least 60 s, no abort check: the copy
//! cannot block) until the copy is done. So a send never returns while a
//! receiver may still read its buffer. Each rank writes only its own area;
//! peers only read it.
//!
//! Every wait polls a deadline (lane_p2p_launch::timeout_ns) and the
//! abort word; a failure leaves a lane_fault (p2p = 1 send, 2 recv; unit =
//! the message number; on a mismatch `theirs` holds the other side's count,
//! element size and type) and sets the abort word, as a failed collective
//! does: the pair's numbering no longer agrees, the communicator is broken.
//!
//! Address spaces: with lane_world::maps the receiver translates the
//! sender's pointer through its lane_peer_map of the sender (the whole
//! message must lie in one mapped range, else status::unreachable and the
//! message is refused: the sender then fails too, the receiver's record
//! naming it).

#include <cstdint>

#include "../core/atomic.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../ops/operators.hpp"
#include "lane_env.hpp"
#include "lane_reduce_copy.hpp"

namespace chorus::detail {

//! The low three bits of lane_p2p_in::state.
enum lane_p2p_phase : std::uint64_t {
    lane_p2p_claimed = 1,    //!< the receiver saw the message and copies unless it was withdrawn
    lane_p2p_delivered = 2,  //!< copied: the sender may return
    lane_p2p_mismatched = 3, //!< counts, element sizes or types differ: both fail
    lane_p2p_refused = 4,    //!< not copied: withdrawn by the sender, or its buffer unreachable
};

//! Everything one send or receive needs (a kernel parameter on a GPU).
struct lane_p2p_launch {
    lane_world world{};
    int rank = 0;
    int peer = 0;
    bool is_send = false;
    //! Send: the data as this rank publishes it (the receiver translates
    //! it with maps). Receive: where the data goes (this rank's memory).
    void* buf = nullptr;
    std::uint64_t count = 0; //!< elements
    std::uint64_t elem_bytes = 1;
    std::uint64_t type_id = 0; //!< type_hash of the element type
    std::uint64_t timeout_ns = 0;
};

CHORUS_HD inline void p2p_store_sc(std::uint64_t* w, std::uint64_t v) {
    atomic_ref<std::uint64_t>(*w).store(v, mo::memory_order_seq_cst);
}
CHORUS_HD inline std::uint64_t p2p_load_sc(std::uint64_t* w) {
    return atomic_ref<std::uint64_t>(*w).load(mo::memory_order_seq_cst);
}
CHORUS_HD inline bool p2p_aborted(const lane_world& w) {
    return atomic_ref<std::uint32_t>(*w.abort).load(mo::memory_order_acquire) != 0;
}

//! Lane 0 polls `word` until it reaches `target`: bounded by `deadline_ns`
//! and, with `watch_abort`, by the abort word (read every 1024 polls, the
//! clock every 64, as lane_env::poll).
CHORUS_HD_TEMPLATE
template <class Lanes>
CHORUS_HD status p2p_poll(const Lanes& lanes, const lane_world& w, std::uint64_t* word, std::uint64_t target,
                          std::uint64_t deadline_ns, bool watch_abort) {
    for (unsigned i = 1;; ++i) {
        if (flag_load_acquire(word) >= target) return status::ok;
        lanes.relax();
        if ((i & 63u) == 0) {
            if (watch_abort && (i & 1023u) == 0 && p2p_aborted(w)) return status::aborted;
            if (lanes.now_ns() > deadline_ns) return watch_abort && p2p_aborted(w) ? status::aborted : status::timeout;
        }
    }
}

//! What lane 0 found, to record a failure.
struct lane_p2p_outcome {
    status st = status::ok;
    std::uint64_t msg = 0;
    lane_signature theirs{};
};

//! The sender's side (lane 0 only).
CHORUS_HD_TEMPLATE
template <class Lanes>
CHORUS_HD lane_p2p_outcome p2p_send_lane0(const Lanes& lanes, const lane_p2p_launch& L, std::uint64_t deadline) {
    lane_p2p_outcome r;
    lane_p2p_out& o = L.world.areas[L.rank]->p2p_out[L.peer];
    lane_p2p_in* in = &L.world.areas[L.peer]->p2p_in[L.rank];
    const std::uint64_t m = o.sent + 1;
    r.msg = m;
    o.buf = L.buf;
    o.count = L.count;
    o.elem_bytes = L.elem_bytes;
    o.type_id = L.type_id;
    flag_store_release(&o.posted, m);
    const std::uint64_t done = (m << 3) | lane_p2p_delivered;
    status st = p2p_poll(lanes, L.world, &in->state, done, deadline, true);
    if (st != status::ok) {
        // Withdraw, then look whether the receiver claimed it first.
        p2p_store_sc(&o.cancelled, m);
        if (p2p_load_sc(&in->state) >= ((m << 3) | lane_p2p_claimed)) {
            // Its copy is under way and cannot block: wait for its end, for
            // at least a minute whatever the timeout (returning earlier would
            // hand the caller a buffer still being read).
            constexpr std::uint64_t copy_bound_ns = 60'000'000'000ull;
            const std::uint64_t until = lanes.now_ns() + (L.timeout_ns > copy_bound_ns ? L.timeout_ns : copy_bound_ns);
            if (p2p_poll(lanes, L.world, &in->state, done, until, false) == status::ok) st = status::ok;
        }
    }
    if (st == status::ok) {
        const std::uint64_t s = flag_load_acquire(&in->state);
        const std::uint64_t phase = s & 7u;
        if (phase == lane_p2p_mismatched) {
            st = status::mismatch;
            r.theirs.count = in->count;
            r.theirs.elem_bytes = in->elem_bytes;
            r.theirs.type_id = in->type_id;
        } else if (phase == lane_p2p_refused) {
            st = status::aborted; // the receiver's record says why
        }
    }
    o.sent = m;
    r.st = st;
    return r;
}

//! The receiver's side, before the copy (lane 0 only): the source, as
//! this rank reaches it, in `src`.
CHORUS_HD_TEMPLATE
template <class Lanes>
CHORUS_HD lane_p2p_outcome p2p_recv_lane0(const Lanes& lanes, const lane_p2p_launch& L, std::uint64_t deadline,
                                          const unsigned char*& src) {
    lane_p2p_outcome r;
    lane_p2p_in& in = L.world.areas[L.rank]->p2p_in[L.peer];
    lane_p2p_out* out = &L.world.areas[L.peer]->p2p_out[L.rank];
    const std::uint64_t m = in.received + 1;
    r.msg = m;
    src = nullptr;
    status st = p2p_poll(lanes, L.world, &out->posted, m, deadline, true);
    if (st == status::ok) {
        p2p_store_sc(&in.state, (m << 3) | lane_p2p_claimed);
        if (p2p_load_sc(&out->cancelled) >= m) {
            flag_store_release(&in.state, (m << 3) | lane_p2p_refused);
            st = status::aborted; // the sender failed first: its record says why
        }
    }
    if (st == status::ok) {
        r.theirs.count = out->count;
        r.theirs.elem_bytes = out->elem_bytes;
        r.theirs.type_id = out->type_id;
        if (r.theirs.count != L.count || r.theirs.elem_bytes != L.elem_bytes || r.theirs.type_id != L.type_id) {
            in.count = L.count;
            in.elem_bytes = L.elem_bytes;
            in.type_id = L.type_id;
            flag_store_release(&in.state, (m << 3) | lane_p2p_mismatched);
            st = status::mismatch;
        } else if (L.count != 0) {
            const std::uint64_t bytes = L.count * L.elem_bytes;
            const unsigned char* p = static_cast<const unsigned char*>(out->buf);
            if (L.world.maps != nullptr) p = L.world.maps[L.peer].translate(p, bytes);
            if (p == nullptr) {
                flag_store_release(&in.state, (m << 3) | lane_p2p_refused);
                st = status::unreachable;
            }
            src = p;
        }
    }
    in.received = m;
    r.st = st;
    return r;
}

//! One send or receive, run by every lane of one group (a thread block
//! on a GPU, CPU threads in the lane test). Returns its status on every
//! lane; a failure leaves this rank's lane_fault and sets the abort word.
CHORUS_HD_TEMPLATE
template <class Lanes>
CHORUS_HD status run_lane_p2p(const Lanes& lanes, const lane_p2p_launch& L) {
    lane_p2p_outcome r;
    const unsigned char* src = nullptr;
    if (lanes.id() == 0) {
        const std::uint64_t deadline = lanes.now_ns() + L.timeout_ns;
        r = L.is_send ? p2p_send_lane0(lanes, L, deadline) : p2p_recv_lane0(lanes, L, deadline, src);
    }
    status st = static_cast<status>(lanes.share(static_cast<int>(r.st)));
    if (!L.is_send && st == status::ok && L.count != 0) {
        src = lanes.share(src);
        reduce_copy_args<unsigned char> a{};
        const unsigned char* srcs[1] = {src};
        a.src = srcs;
        a.nsrc = 1;
        a.dst[0] = static_cast<unsigned char*>(L.buf);
        a.ndst = 1;
        a.count = L.count * L.elem_bytes;
        lane_reduce_copy(lanes, a, copy_only{});
    }
    if (!L.is_send && st == status::ok) {
        lanes.sync(); // every lane's stores precede the release below
        if (lanes.id() == 0) flag_store_release(&L.world.areas[L.rank]->p2p_in[L.peer].state, (r.msg << 3) | lane_p2p_delivered);
    }
    if (lanes.id() == 0 && st != status::ok) {
        lane_fault f{};
        f.peer = L.peer;
        f.unit = r.msg;
        f.theirs = r.theirs;
        f.p2p = L.is_send ? 1 : 2;
        f.p2p_count = L.count;
        f.p2p_elem_bytes = L.elem_bytes;
        record_lane_fault(L.world, L.rank, f, st);
    }
    return st;
}

} // namespace chorus::detail
