#pragma once
//! \file backend/mpi_compare.hpp
//! How MPI ranks compare their calls with checked mode off, where a rank
//! could otherwise hear only from ranks that made its own call (broadcast,
//! reduce, count 0), and check that every rank finished a call whose
//! operator may throw: on one node through the words ranks publish in the
//! node segment (node_flag::call, node_flag::done), else as a
//! dissemination of (sequence, fingerprint) under tags carrying the
//! fingerprint, on a communicator of their own. `Self` is
//! detail::mpi_transport, whose state it reads. Part of backend/mpi.hpp.

#include <chrono>
#include <cstdint>
#include <string>

#include "../core/error.hpp"
#include "host_common.hpp"
#include "mpi_c.hpp"
#include "mpi_node.hpp"
#include "mpi_wait.hpp"

namespace chorus::detail {

template <class Self>
struct mpi_compare {
    Self& self;

    void confirm_call(const call& c, std::uint64_t fp, const char* head_name,
                      std::chrono::steady_clock::time_point deadline) {
        const std::uint64_t word = node_call_word(c.seq, fp);
        self.node_area_.call(self.node_area_.local(), unsigned(c.seq & 1)).store(word, std::memory_order_release);
        auto differs = [&](int from) {
            self.fail_call(head_name, errc::mismatch, mismatch_text(different_call_text(from)));
        };
        if (self.node_area_.size() == self.size_) { // one node: the published calls
            each_node_peer(c, head_name, deadline, [&](int r, int q) {
                const std::uint64_t v = self.node_area_.call(q, unsigned(c.seq & 1)).load(std::memory_order_acquire);
                if ((v >> 32) < (c.seq & 0xffffffffu)) return false; // not published yet (later: moved on)
                if ((v >> 32) == (c.seq & 0xffffffffu) && v != word) differs(r);
                return true;
            });
            return;
        }
        const int base = self.tag_base(fp, 32);
        const std::uint64_t mine[2] = {c.seq, fp};
        int from = -1;
        if (!disseminate(mine, base, c, head_name, deadline, from)) differs(from);
    }

    bool disseminate(const std::uint64_t (&mine)[2], int base, const call& c, const char* head_name,
                     std::chrono::steady_clock::time_point deadline, int& from) {
        std::uint64_t got[2] = {0, 0};
        for (int k = 1, round = 0; k < self.size_; k <<= 1, ++round) {
            const int to = (self.rank_ + k) % self.size_;
            from = (self.rank_ - k + self.size_) % self.size_;
            MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
            mpi_check(MPI_Irecv(got, 2, MPI_UINT64_T, from, base + round, self.confirm_comm_, &r[0]), "MPI_Irecv");
            mpi_check(MPI_Isend(mine, 2, MPI_UINT64_T, to, base + round, self.confirm_comm_, &r[1]), "MPI_Isend");
            mpi_waiter<Self> e{self, deadline};
            if (const status st = e.wait(r, 2, from); st != status::ok) confirm_failed(c, head_name, st, from);
            if (got[0] != mine[0] || got[1] != mine[1]) return false;
        }
        return true;
    }

    //! Polls ready(rank, local rank) for every node peer in turn, within
    //! the call's bounds; a failed wait is the call's error.
    template <class Ready>
    void each_node_peer(const call& c, const char* head_name, std::chrono::steady_clock::time_point deadline,
                        Ready&& ready) {
        for (int r = 0; r < self.size_; ++r) {
            const int q = self.area_local_[static_cast<std::size_t>(r)];
            if (r == self.rank_ || q < 0) continue;
            mpi_waiter<Self> e{self, deadline};
            if (const status st = e.poll([&] { return ready(r, q); }, r); st != status::ok)
                confirm_failed(c, head_name, st, r);
        }
    }

    [[noreturn]] void confirm_failed(const call& c, const char* head_name, status st, int from) {
        if (st == status::peer_exited)
            self.fail_call(head_name, errc::peer_failed, self.died_text(from));
        if (self.broken())
            self.fail_call(head_name, errc::aborted, "the communicator was aborted (" + self.reason() + ")");
        self.fail_call(head_name, errc::timeout,
                       timed_out_waiting(c.settings.timeout.count(), rank_text(from)) +
                           " (comparing calls; a rank that made a different call, or failed, never answers)");
    }

    void confirm_done(const call& c, std::uint64_t fp, const char* head_name,
                      std::chrono::steady_clock::time_point deadline) {
        self.node_area_.done(self.node_area_.local()).store(c.seq, std::memory_order_release);
        if (self.node_area_.size() == self.size_) {
            each_node_peer(c, head_name, deadline, [&](int, int q) {
                return self.node_area_.done(q).load(std::memory_order_acquire) >= c.seq;
            });
            return;
        }
        const std::uint64_t mine[2] = {c.seq, ~fp};
        int from = -1;
        if (!disseminate(mine, self.tag_base(fp, 32) + 16, c, head_name, deadline, from))
            self.fail_call(head_name, errc::mismatch,
                           mismatch_text("rank " + std::to_string(from) + " finished a different call"));
    }
};

} // namespace chorus::detail
