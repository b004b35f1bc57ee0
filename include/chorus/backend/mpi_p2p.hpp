#pragma once
//! \file backend/mpi_p2p.hpp
//! communicator<mpi>'s send/recv: `Self` is detail::mpi_transport, whose
//! state it uses (its own duplicated communicator, the header buffers and
//! the sink). Part of backend/mpi.hpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../core/element.hpp"
#include "../core/error.hpp"
#include "host_common.hpp"
#include "mpi_c.hpp"
#include "mpi_plan.hpp"
#include "mpi_wait.hpp"
#include "mpi_wire.hpp"
#include "transport.hpp"

namespace chorus::detail {

template <class Self>
struct mpi_p2p {
    Self& self;

    //! One send or receive. The sender posts a header (count, element size
    //! and type) and the data (messages of at most 1 GiB) with tag 1, and
    //! waits for the receiver's reply (tag 2): MPI keeps each tag's messages
    //! between a pair in order, so calls match in issue order. The receiver
    //! checks the header, receives the data straight into `buf` (or, on a
    //! mismatch, into a sink, so the pair stays in step), then replies with
    //! what it expected: a send returns once the receiver has the data, and
    //! a mismatch fails both calls with errc::mismatch naming both counts
    //! (the communicator stays usable).
    template <class T>
    void transfer(bool is_send, T* buf, std::uint64_t count, int peer, std::uint64_t msg, call_settings cs) {
        const char* fn = is_send ? "send" : "recv";
        const auto deadline = std::chrono::steady_clock::now() + cs.timeout;
        if (self.broken())
            throw error(errc::aborted,
                        std::string("chorus::") + fn + ": the communicator is broken (" + self.reason() + ")");
        const int src = is_send ? self.rank_ : peer;
        const int dst = is_send ? peer : self.rank_;
        const std::string which =
            "message #" + std::to_string(msg) + " from rank " + std::to_string(src) + " to rank " + std::to_string(dst);
        using header = p2p_header;
        auto describe = [](header& h, std::uint64_t n) {
            h.count = n;
            h.elem_bytes = sizeof(T);
            h.type_id = type_hash<T>();
            std::strncpy(h.type_name, element_traits<T>::name(), sizeof h.type_name - 1);
        };
        constexpr int data_tag = 1, reply_tag = 2;
        constexpr std::uint64_t per = sched_plan::max_message_bytes;
        mpi_waiter<Self> e{self, deadline};
        auto check = [&](status st) {
            if (st == status::ok) return;
            if (st == status::aborted)
                throw error(errc::aborted,
                            std::string("chorus::") + fn + ": communicator aborted (" + self.reason() + ")");
            if (st == status::peer_exited)
                self.fail_call(fn, errc::peer_failed,
                               self.died_text(peer) + " before " + (is_send ? "receiving " : "sending ") + which);
            self.fail_call(fn, errc::timeout,
                           timed_out_waiting(cs.timeout.count(), rank_text(peer)) +
                               (is_send ? " to receive " : " to send ") + which);
        };
        // `bytes` bytes at p, in messages of at most `per`.
        auto post = [&](bool send, void* p, std::uint64_t bytes, int tag, std::vector<MPI_Request>& reqs) {
            auto* b = static_cast<std::byte*>(p);
            for (std::uint64_t off = 0; off < bytes; off += per) {
                reqs.push_back(MPI_REQUEST_NULL);
                const int m = static_cast<int>(std::min(per, bytes - off));
                if (send)
                    mpi_check(MPI_Isend(b + off, m, MPI_BYTE, peer, tag, self.p2p_comm_, &reqs.back()), "MPI_Isend");
                else
                    mpi_check(MPI_Irecv(b + off, m, MPI_BYTE, peer, tag, self.p2p_comm_, &reqs.back()), "MPI_Irecv");
            }
        };
        auto wait = [&](std::vector<MPI_Request>& reqs) {
            if (!reqs.empty()) check(e.wait(reqs.data(), static_cast<int>(reqs.size()), peer));
            reqs.clear();
        };
        auto mismatch = [&](const header& sent, const header& got) {
            return error(errc::mismatch, std::string("chorus::") + fn + ": rank " + std::to_string(src) + " sends " +
                                             std::to_string(sent.count) + " elements of " + sent.type_name + " (" +
                                             std::to_string(sent.elem_bytes) + "-byte) but rank " +
                                             std::to_string(dst) + " receives " + std::to_string(got.count) +
                                             " elements of " + got.type_name + " (" + std::to_string(got.elem_bytes) +
                                             "-byte) (" + which + ")");
        };
        const std::uint64_t bytes = count * sizeof(T);
        std::vector<MPI_Request> reqs;
        // Members, not locals: a failed call leaves requests MPI may still
        // serve after we return, and these outlive it with the communicator.
        header& mine = self.p2p_mine_;
        header& theirs = self.p2p_theirs_;
        mine = header{};
        theirs = header{};
        describe(mine, count);
        if (is_send) {
            post(false, &theirs, sizeof theirs, reply_tag, reqs);
            post(true, &mine, sizeof mine, data_tag, reqs);
            post(true, buf, bytes, data_tag, reqs);
            wait(reqs);
            theirs.type_name[sizeof theirs.type_name - 1] = '\0';
            if (theirs.ok == 0) throw mismatch(mine, theirs);
            return;
        }
        post(false, &theirs, sizeof theirs, data_tag, reqs);
        wait(reqs);
        theirs.type_name[sizeof theirs.type_name - 1] = '\0';
        const std::uint64_t sent_bytes = theirs.count * theirs.elem_bytes;
        mine.ok = theirs.count == count && theirs.elem_bytes == sizeof(T) && theirs.type_id == mine.type_id ? 1 : 0;
        if (mine.ok) {
            post(false, buf, bytes, data_tag, reqs);
            wait(reqs);
        } else {
            auto* sink =
                static_cast<std::byte*>(self.p2p_sink_.reserve(static_cast<std::size_t>(std::min(per, sent_bytes))));
            for (std::uint64_t off = 0; off < sent_bytes; off += per) {
                post(false, sink, std::min(per, sent_bytes - off), data_tag, reqs);
                wait(reqs);
            }
        }
        post(true, &mine, sizeof mine, reply_tag, reqs);
        wait(reqs);
        if (!mine.ok) throw mismatch(theirs, mine);
    }
};

} // namespace chorus::detail
