#pragma once
//! \file backend/mpi_wait.hpp
//! The bounded wait every MPI path uses (the schedule executor, checked
//! mode, barrier, send/recv): MPI requests polled until done,
//! the call's deadline, the communicator's broken state, and whether the
//! awaited process is still alive. `Self` is detail::mpi_transport, whose
//! state it reads. Part of backend/mpi.hpp, which includes it.

#include <chrono>
#include <cstddef>
#include <thread>

#include "../core/error.hpp"
#include "host_wait.hpp"
#include "mpi_c.hpp"
#include "shm.hpp"

namespace chorus::detail {

template <class Self>
struct mpi_waiter {
    Self& self;
    std::chrono::steady_clock::time_point deadline;
    int bad_peer = -1;  //!< the rank a failed wait waited for
    const char* doing = ""; //!< what it waited for
    int mpi_rc = MPI_SUCCESS;

    //! What every wait checks between polls: the abort flags, and whether
    //! the awaited rank's process (peer < 0: any rank's on this machine,
    //! for waits on several ranks at once) still exists.
    detail::status check_peer(int peer) {
        if (self.broken() || self.told_to_fail()) return detail::status::aborted;
        const int here = self.real_node_[static_cast<std::size_t>(self.rank_)];
        auto dead = [&](int r) {
            return r != self.rank_ && self.real_node_[static_cast<std::size_t>(r)] == here &&
                   !detail::process_alive(self.pids_[static_cast<std::size_t>(r)]);
        };
        if (peer >= 0) return dead(peer) ? detail::status::peer_exited : detail::status::ok;
        for (int r = 0; r < self.size_; ++r)
            if (dead(r)) {
                bad_peer = r;
                return detail::status::peer_exited;
            }
        return detail::status::ok;
    }

    //! Waits for k requests. On failure point-to-point requests are
    //! retired (below) unless `keep` (the caller retires them); a
    //! nonblocking collective's (`p2p` false) can be neither cancelled nor
    //! freed (MPI forbids it), so it is left behind with the broken
    //! communicator.
    detail::status wait(MPI_Request* reqs, int k, int peer, bool p2p = true, bool keep = false) {
        int done = 0;
        const detail::status st = detail::poll_until(
            [&] {
                if (const int rc = MPI_Testall(k, reqs, &done, MPI_STATUSES_IGNORE); rc != MPI_SUCCESS) {
                    done = 1; // reported below
                    mpi_rc = rc;
                }
                return done != 0;
            },
            [&] { return check_peer(peer); }, deadline, self.backoff_);
        if (st != detail::status::ok) {
            if (peer >= 0 || bad_peer < 0) bad_peer = peer;
            doing = p2p ? "a point-to-point transfer" : "an MPI nonblocking collective";
            if (p2p && !keep) retire(reqs, k);
        }
        if (mpi_rc != MPI_SUCCESS) detail::mpi_check(mpi_rc, "MPI_Testall"); // a bug: sizes disagree
        return st;
    }
    //! Polls `ready` within the same bounds (a flag in shared memory).
    template <class Ready>
    detail::status poll(Ready&& ready, int peer) {
        const detail::status st = detail::poll_until(ready, [&] { return check_peer(peer); }, deadline, self.backoff_);
        if (st != detail::status::ok && (peer >= 0 || bad_peer < 0)) bad_peer = peer;
        return st;
    }
    //! Ends point-to-point requests of a failed call without leaving MPI
    //! inside the caller's buffers: each is cancelled (a receive not yet
    //! matched ends at once; a send, or a transfer under way, runs on),
    //! then tested until it has ended, for at most `grace` in all (a peer
    //! that made the same call receives, or sends, within that). What is
    //! left after it is freed; only a peer that enters this call later
    //! than that can still match it (docs/reliability.md).
    static void retire(MPI_Request* reqs, int k,
                       std::chrono::milliseconds grace = std::chrono::milliseconds(500)) {
        bool pending = false;
        for (int i = 0; i < k; ++i)
            if (reqs[i] != MPI_REQUEST_NULL) {
                MPI_Cancel(&reqs[i]);
                pending = true;
            }
        if (!pending) return;
        const auto until = std::chrono::steady_clock::now() + grace;
        while (pending) {
            pending = false;
            for (int i = 0; i < k; ++i) {
                if (reqs[i] == MPI_REQUEST_NULL) continue;
                int done = 0;
                MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
                pending = pending || !done;
            }
            if (!pending || std::chrono::steady_clock::now() >= until) break;
            std::this_thread::yield();
        }
        for (int i = 0; i < k; ++i)
            if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
    }
};

} // namespace chorus::detail
