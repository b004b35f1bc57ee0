// A process world (backend/lane_process.hpp) whose records travel over MPI
// (backend/mpi_bootstrap.hpp: MPI_Allgather on a duplicate of
// MPI_COMM_WORLD), on the CPU: POSIX shared memory, the lane executor on
// threads (tests/unit/lane_test_util.hpp). Checks: rank and size from the
// communicator; ring<> AllReduce of (float, sum) on integer-valued data,
// registered buffers, exact; the bootstrap refuses an exchange whose ranks
// give different sizes (errc::mismatch on every rank) and a closed one
// (errc::aborted). The same bootstrap makes gpu::make_communicator(MPI_Comm)'s
// world (<chorus/gpu_mpi.hpp>), which only a GPU can run.
#include <chorus/chorus.hpp>
#include <chorus/backend/mpi_bootstrap.hpp>
#include "../unit/lane_test_util.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

using namespace chorus;

namespace {

int g_failures = 0;
void fail(int rank, const std::string& what) {
    std::printf("FAIL rank %d: %s\n", rank, what.c_str());
    ++g_failures;
}
float value_of(int r, std::uint64_t i) { return float((std::uint64_t(r) * 5 + i * 3) % 13 + 1); }

} // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    try {
        detail::mpi_lane_bootstrap boot(MPI_COMM_WORLD);
        if (boot.rank() != rank || boot.size() != size) fail(rank, "rank or size differ from MPI's");
        detail::lane_process_config cfg;
        const std::uint64_t count = 3001;
        cfg.scratch_bytes = std::uint64_t(1) << 20;
        cfg.registered_bytes = 2 * count * sizeof(float) + 1024;
        detail::lane_process_world w(boot, cfg);
        auto* in = static_cast<float*>(w.allocate_registered(count * sizeof(float)));
        auto* out = static_cast<float*>(w.allocate_registered(count * sizeof(float)));
        for (std::uint64_t i = 0; i < count; ++i) in[i] = value_of(rank, i);
        schedule_args a{collective::all_reduce, rank, size, 0, count, sizeof(float), false, 0};
        a.commutative = true;
        const policy pol = policy_of<ring<>>;
        detail::lane_launch<float, sum, any_schedule> L;
        L.sch = make_schedule(pol, a);
        L.world = w.world();
        L.rank = rank;
        L.in = in;
        L.out = out;
        L.scratch = reinterpret_cast<float*>(w.scratch());
        L.sig = chorus_test::lane_signature_of<float, sum>(collective::all_reduce, L.sch.channels(), 0, count, pol.id());
        L.timeout_ns = 20000ull * 1000000ull;
        L.op.set(sum{});
        if (chorus_test::run_rank_lanes(L, 2) != detail::status::ok) {
            const auto f = w.failure();
            fail(rank, std::string("all_reduce failed: ") + (f ? f->what() : "no fault recorded"));
        } else {
            std::uint64_t wrong = 0;
            for (std::uint64_t i = 0; i < count; ++i) {
                float want = 0.f;
                for (int q = 0; q < size; ++q) want += value_of(q, i);
                wrong += out[i] != want;
            }
            if (wrong != 0) fail(rank, "all_reduce: " + std::to_string(wrong) + " wrong elements");
        }
        MPI_Barrier(MPI_COMM_WORLD); // every rank done with the world before any destroys it
    } catch (const error& e) {
        fail(rank, std::string("uncaught (") + to_string(e.code()) + "): " + e.what());
    }
    // Exchanges the ranks disagree about, and a closed bootstrap.
    try {
        detail::mpi_lane_bootstrap boot(MPI_COMM_WORLD, "test");
        const char bytes[2] = {1, 2};
        try {
            (void)boot.all_gather(bytes, size > 1 && rank == size - 1 ? 2 : 1);
            if (size > 1) fail(rank, "different sizes: no error");
        } catch (const error& e) {
            if (e.code() != errc::mismatch || std::string(e.what()).find("test: the ranks gave 1 to 2 bytes") ==
                                                  std::string::npos)
                fail(rank, std::string("different sizes: wrong error: ") + e.what());
        }
        boot.close();
        try {
            (void)boot.all_gather(bytes, 1);
            fail(rank, "closed: no error");
        } catch (const error& e) {
            if (e.code() != errc::aborted) fail(rank, std::string("closed: wrong error: ") + e.what());
        }
    } catch (const error& e) {
        fail(rank, std::string("uncaught (") + to_string(e.code()) + "): " + e.what());
    }
    int all = 0;
    MPI_Allreduce(&g_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) std::printf("all ranks passed (%d processes)\n", size);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
