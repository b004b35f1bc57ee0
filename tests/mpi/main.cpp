// The MPI test main: every rank runs the same doctest cases in the same
// order (they issue collectives together), and the job fails on every rank
// when any rank failed a check, so mpiexec's exit status and CTest see it.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) std::fprintf(stderr, "chorus_mpi_tests: MPI does not provide MPI_THREAD_MULTIPLE\n");
        MPI_Finalize();
        return 1;
    }
    doctest::Context ctx;
    ctx.setOption("no-colors", true); // logs of several ranks interleave
    ctx.applyCommandLine(argc, argv);
    const int failed = ctx.run() != 0 ? 1 : 0;
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && failed) std::fprintf(stderr, "chorus_mpi_tests: rank %d of %d failed\n", rank, size);
    if (rank == 0) std::printf("chorus_mpi_tests: %d ranks: %s\n", size, any ? "FAILED" : "all ranks passed");
    MPI_Finalize();
    return any;
}
