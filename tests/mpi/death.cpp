// A process that dies in the middle of a collective: the last rank kills
// itself (SIGKILL, no chance to clean up) while the others are inside an
// AllReduce waiting for it. The survivors must fail with a chorus::error
// well within their deadline instead of hanging, and the job must exit
// non-zero. Each survivor prints what it caught, then aborts the job
// (MPI_Finalize would wait for the dead rank).
// Argument "direct": the AllReduce runs direct<>; otherwise
// ("hierarchical") hierarchical<>, staged through the node's windows.

#include <chorus/mpi.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    chorus::communicator<chorus::mpi> comm(MPI_COMM_WORLD);
    comm.set_timeout(std::chrono::seconds(20));
    const bool direct = argc > 1 && std::strcmp(argv[1], "direct") == 0;
    std::vector<float> v(1 << 20, 1.0f);
    auto all_reduce = [&] {
        if (direct) chorus::all_reduce<chorus::direct<>>(comm, std::span<float>(v));
        else chorus::all_reduce<chorus::hierarchical<>>(comm, std::span<float>(v));
    };
    all_reduce(); // everyone is up
    if (rank == n - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200)); // the others are waiting by now
        std::raise(SIGKILL);
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
        all_reduce();
        std::printf("chorus_mpi_death: rank %d: no error although rank %d died\n", rank, n - 1);
    } catch (const chorus::error& e) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("chorus_mpi_death: rank %d caught after %.3f s (deadline 20 s): %s\n", rank, s, e.what());
    }
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
}
