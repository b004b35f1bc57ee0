// The node split of gpu::make_communicator(MPI_Comm) across nodes
// (backend/mpi_gpu_nodes.hpp: MPI_Comm_split_type(SHARED) and emulated
// nodes of ranks_per_node), run on the CPU under mpiexec: all processes
// share one host here, so real hosts give one node and ranks_per_node
// gives emulated ones. Checks the layout every rank computes, and the
// errors every rank must agree on (an uneven split, different
// ranks_per_node on different ranks). The GPU half of the feature
// (tests/gpu/gpu_process.cu) needs a device.
#include <chorus/backend/mpi_gpu_nodes.hpp>
#include <chorus/core/error.hpp>

#include <cstdio>
#include <string>

namespace {

int g_rank = 0;
int g_failures = 0;
void fail(const std::string& what) {
    std::printf("FAIL rank %d: %s\n", g_rank, what.c_str());
    std::fflush(stdout);
    ++g_failures;
}

template <class F>
void expect_error(const char* what, chorus::errc code, const std::string& part, F&& call) {
    try {
        call();
    } catch (const chorus::error& e) {
        if (e.code() != code || std::string(e.what()).find(part) == std::string::npos)
            fail(std::string(what) + ": wrong error (" + chorus::to_string(e.code()) + "): " + e.what());
        return;
    }
    fail(std::string(what) + ": no error");
}

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    using chorus::detail::mpi_node_layout;
    using chorus::detail::node_layout;
    try {
        const node_layout one = mpi_node_layout(MPI_COMM_WORLD, 0, "fn");
        if (one.nodes != 1 || one.local_size != size || one.local_of[std::size_t(g_rank)] != g_rank)
            fail("one host, no ranks_per_node: not one node of every rank");
        const node_layout all = mpi_node_layout(MPI_COMM_WORLD, size, "fn");
        if (all.nodes != 1) fail("ranks_per_node = size: not one node");
        for (int k = 1; k < size; ++k) {
            if (size % k != 0) continue;
            const node_layout p = mpi_node_layout(MPI_COMM_WORLD, k, "fn");
            if (p.nodes != size / k || p.local_size != k) fail("ranks_per_node " + std::to_string(k) + ": node count");
            for (int r = 0; r < size; ++r)
                if (p.node_of[std::size_t(r)] != r / k || p.local_of[std::size_t(r)] != r % k)
                    fail("ranks_per_node " + std::to_string(k) + ": rank " + std::to_string(r) + " misplaced");
        }
    } catch (const chorus::error& e) {
        fail(std::string("layout: ") + e.what());
    }
    // Errors every rank reaches alike (none waits for another).
    expect_error("uneven split", chorus::errc::invalid_argument, "ranks_per_node",
                 [&] { (void)mpi_node_layout(MPI_COMM_WORLD, size + 1, "fn"); });
    if (size > 1)
        expect_error("ranks_per_node differs between ranks", chorus::errc::mismatch, "ranks_per_node",
                     [&] { (void)mpi_node_layout(MPI_COMM_WORLD, g_rank == 0 ? 1 : size, "fn"); });
    // The communicator still works after the errors.
    int mine = g_failures, total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf(total == 0 ? "all ranks passed (%d processes)\n" : "FAILED (%d processes)\n", size);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
