#pragma once
//! \file backend/mpi_bootstrap.hpp
//! lane_bootstrap (backend/lane_process.hpp) over MPI: a process world
//! made from the user's MPI communicator trades its records with
//! MPI_Allgather on a duplicate of it (so nothing interleaves with the
//! user's own messages). Needs <mpi.h>: included only by the MPI-gated
//! headers (<chorus/gpu_mpi.hpp>), never by the host headers.

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "lane_process.hpp"

namespace chorus::detail {

//! The records of a process world, exchanged over a duplicate of `comm`.
//! MPI must be initialised; every rank of `comm` constructs one.
class mpi_lane_bootstrap final : public lane_bootstrap {
public:
    explicit mpi_lane_bootstrap(MPI_Comm comm, const char* who = "chorus::mpi_lane_bootstrap") : who_(who) {
        int init = 0, fin = 0;
        MPI_Initialized(&init);
        MPI_Finalized(&fin);
        if (!init || fin)
            throw error(errc::invalid_argument, std::string(who_) + ": MPI is not initialised (call MPI_Init_thread "
                                                                    "first) or already finalised");
        if (comm == MPI_COMM_NULL) throw error(errc::invalid_argument, std::string(who_) + ": `comm` is MPI_COMM_NULL");
        check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    mpi_lane_bootstrap(const mpi_lane_bootstrap&) = delete;
    mpi_lane_bootstrap& operator=(const mpi_lane_bootstrap&) = delete;
    ~mpi_lane_bootstrap() override {
        if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::vector<std::byte> all_gather(const void* mine, std::size_t bytes) override {
        if (comm_ == MPI_COMM_NULL) throw error(errc::aborted, std::string(who_) + ": the bootstrap is closed");
        // Every rank must give the same size: compare first, so that a
        // mismatch is an error, not an MPI truncation.
        unsigned long long b = bytes, lo = 0, hi = 0;
        check(MPI_Allreduce(&b, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm_), "MPI_Allreduce");
        check(MPI_Allreduce(&b, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm_), "MPI_Allreduce");
        if (lo != hi)
            throw error(errc::mismatch, std::string(who_) + ": the ranks gave " + std::to_string(lo) + " to " +
                                            std::to_string(hi) + " bytes to one exchange (they made different calls)");
        std::vector<std::byte> out(bytes * std::size_t(size_));
        if (bytes > std::size_t(INT_MAX))
            throw error(errc::invalid_argument, std::string(who_) + ": " + std::to_string(bytes) +
                                                    " bytes is more than one MPI_Allgather exchange carries");
        check(MPI_Allgather(mine, int(bytes), MPI_BYTE, out.data(), int(bytes), MPI_BYTE, comm_), "MPI_Allgather");
        return out;
    }
    void close() override {
        if (comm_ == MPI_COMM_NULL) return;
        check(MPI_Barrier(comm_), "MPI_Barrier");
        MPI_Comm_free(&comm_);
    }

private:
    void check(int rc, const char* what) const {
        if (rc == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING] = {};
        int len = 0;
        MPI_Error_string(rc, text, &len);
        throw error(errc::internal, std::string(who_) + ": " + what + " failed: " + std::string(text, std::size_t(len)));
    }

    const char* who_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0, size_ = 1;
};

} // namespace chorus::detail
