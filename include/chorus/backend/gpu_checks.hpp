#pragma once
//! \file backend/gpu_checks.hpp
//! The GPU backend's argument checks, as plain host code (the CPU suite
//! tests them without a GPU; backend/gpu.hpp feeds them what
//! cudaPointerGetAttributes says).

#include <string>

#include "../algo/schedule.hpp"
#include "../core/error.hpp"
#include "../exec/lane_env.hpp"

namespace chorus::detail {

//! What a CUDA memory query says about a pointer, reduced to what chorus checks.
enum class mem_kind { host, device, managed };

//! Throws unless `p` is memory that rank code on device `dev` may use:
//! device memory of `dev` (or of a device the runtime does not name,
//! `ptr_device` < 0), or managed memory. `name` is the argument.
//! `fn` names the call in the message ("all_reduce", "send", ...).
inline void check_gpu_buffer(const char* fn, const char* name, mem_kind kind, int ptr_device, int dev) {
    const std::string head = std::string("chorus::") + fn + ": `" + name + "` ";
    if (kind == mem_kind::host)
        throw error(errc::invalid_argument, head + "is host memory; a GPU communicator needs device memory "
                                                   "(cudaMalloc) on device " + std::to_string(dev));
    // A device ordinal below 0 means the runtime did not say where the memory
    // lives (CUDA 13 on an H200 reported -1 for plain cudaMalloc memory):
    // then it is device memory of some device, and it is accepted.
    if (kind == mem_kind::device && ptr_device >= 0 && ptr_device != dev)
        throw error(errc::invalid_argument, head + "is memory of device " + std::to_string(ptr_device) +
                                                " but this rank runs on device " + std::to_string(dev));
}

inline void check_gpu_buffer(collective coll, const char* name, mem_kind kind, int ptr_device, int dev) {
    check_gpu_buffer(collective_name(coll), name, kind, ptr_device, dev);
}

inline std::string describe_signature(const lane_signature& s) {
    return std::string(collective_name(s.coll())) + "(count=" + std::to_string(s.count) +
           ", root=" + std::to_string(s.root()) + ", channels=" + std::to_string(s.channels()) + ")";
}

//! Why a rank could not reach a peer's buffer (status::unreachable), in
//! the words every report uses.
inline std::string unreachable_text(int owner) {
    return "a buffer of " + rank_text(owner) +
           " is neither registered nor staged (with one process per device a rank reads only the memory its "
           "peers registered, or the shared scratch a staged call copies through)";
}

//! A point-to-point failure record (lane_fault::p2p != 0) of rank
//! `rank`: "message #m from rank s to rank d".
inline std::string p2p_message_text(const lane_fault& f, int rank) {
    const int src = f.p2p == 1 ? rank : f.peer;
    const int dst = f.p2p == 1 ? f.peer : rank;
    return "message #" + std::to_string(f.unit) + " from rank " + std::to_string(src) + " to rank " +
           std::to_string(dst);
}

//! Both sides of a point-to-point mismatch, in the words of the host
//! backends: "rank s sends N elements (E-byte) but rank d receives M
//! elements (E-byte)".
inline std::string p2p_mismatch_text(const lane_fault& f, int rank) {
    const bool send = f.p2p == 1;
    const std::uint64_t sc = send ? f.p2p_count : f.theirs.count;
    const std::uint64_t se = send ? f.p2p_elem_bytes : f.theirs.elem_bytes;
    const std::uint64_t rc = send ? f.theirs.count : f.p2p_count;
    const std::uint64_t re = send ? f.theirs.elem_bytes : f.p2p_elem_bytes;
    const int src = send ? rank : f.peer;
    const int dst = send ? f.peer : rank;
    std::string t = "rank " + std::to_string(src) + " sends " + std::to_string(sc) + " elements (" +
                    std::to_string(se) + "-byte) but rank " + std::to_string(dst) + " receives " +
                    std::to_string(rc) + " elements (" + std::to_string(re) + "-byte)";
    if (sc == rc && se == re) t += " of another element type";
    return t + " (" + p2p_message_text(f, rank) + ")";
}

//! What a failure record of rank `r` says, for its peers' reports.
inline std::string fault_summary(const lane_fault& o, int r) {
    if (o.p2p != 0) {
        if (o.code == static_cast<int>(status::timeout))
            return std::string("its ") + (o.p2p == 1 ? "send " : "recv ") + timed_out_waiting(-1, rank_text(o.peer)) +
                   ", " + p2p_message_text(o, r);
        if (o.code == static_cast<int>(status::mismatch)) return p2p_mismatch_text(o, r);
        if (o.code == static_cast<int>(status::unreachable)) return unreachable_text(o.peer);
    }
    return o.code == static_cast<int>(status::timeout)       ? "it " + timed_out_waiting(-1, rank_text(o.peer))
           : o.code == static_cast<int>(status::unreachable) ? unreachable_text(o.peer)
                                                             : std::string("ranks disagree about the call");
}

//! The error rank `rank` reports for the failure records its kernels left
//! (faults[rank].code != 0): its own timeout, mismatch or unreachable
//! peer buffer; else a peer that could not reach this rank's buffer
//! (errc::invalid_argument: this rank passed it); else the rank whose
//! failure stopped it; else the abort `reason`.
inline error gpu_fault_error(int rank, const lane_fault* faults, int n, const std::string& reason) {
    const lane_fault& f = faults[rank];
    const std::string head = "chorus::gpu: rank " + std::to_string(rank) + ": ";
    if (f.p2p != 0) {
        // A send (p2p 1) or receive (2) of this rank failed (exec/lane_p2p.hpp).
        const std::string fn = f.p2p == 1 ? "send: " : "recv: ";
        switch (static_cast<status>(f.code)) {
        case status::timeout:
            return error(errc::timeout, head + fn + timed_out_waiting(-1, rank_text(f.peer)) +
                                            (f.p2p == 1 ? " to receive " : " to send ") + p2p_message_text(f, rank) +
                                            "; did rank " + std::to_string(f.peer) + " issue the matching " +
                                            (f.p2p == 1 ? "recv?" : "send?"));
        case status::mismatch: return error(errc::mismatch, head + fn + p2p_mismatch_text(f, rank));
        case status::unreachable:
            return error(errc::invalid_argument,
                         head + fn + unreachable_text(f.peer) + " (" + p2p_message_text(f, rank) + ")");
        case status::ok:
        case status::aborted:
        case status::peer_exited: break;
        }
    }
    switch (static_cast<status>(f.code)) {
    case status::timeout:
        return error(errc::timeout, head + timed_out_waiting(-1, rank_text(f.peer)) + " (channel " +
                                        std::to_string(f.channel) + ", unit " + std::to_string(f.unit) +
                                        "); did every rank issue this collective?");
    case status::mismatch:
        return error(errc::mismatch, head + "ranks disagree: rank " + std::to_string(f.peer) + " called " +
                                         describe_signature(f.theirs) +
                                         " (or with another element type, operator or algorithm)");
    case status::unreachable:
        return error(errc::invalid_argument, head + unreachable_text(f.peer) + " (channel " +
                                                 std::to_string(f.channel) + ", unit " + std::to_string(f.unit) + ")");
    case status::ok:
    case status::aborted:
    case status::peer_exited: break;
    }
    for (int r = 0; r < n; ++r) {
        const lane_fault& o = faults[r];
        if (r != rank && o.code == static_cast<int>(status::unreachable) && o.peer == rank)
            return error(errc::invalid_argument, head + "rank " + std::to_string(r) +
                                                     " could not read a buffer this rank passed: " +
                                                     unreachable_text(rank));
    }
    for (int r = 0; r < n; ++r) {
        const lane_fault& o = faults[r];
        if (o.code != 0 && o.code != static_cast<int>(status::aborted))
            return error(errc::peer_failed,
                         head + "stopped because rank " + std::to_string(r) + " failed (" + fault_summary(o, r) + ")");
    }
    return error(errc::aborted, head + "communicator aborted" + (reason.empty() ? std::string() : ": " + reason));
}

} // namespace chorus::detail
