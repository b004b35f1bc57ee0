// communicator<mpi> refuses GPU device memory by name (backend/host_common.hpp:
// check_host_pointer, in a CUDA translation unit): the MPI transport copies
// and reduces with the CPU. Exits 77 (Skipped) without a CUDA device.

#include <chorus/mpi.hpp>

#include <cuda_runtime.h>

#include <cstdio>
#include <span>
#include <string>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = 0;
    {
        chorus::communicator<chorus::mpi> comm(MPI_COMM_WORLD);
        float* d = nullptr;
        if (cudaMalloc(&d, 64 * sizeof(float)) != cudaSuccess) {
            std::printf("CHORUS_SKIP: no CUDA device\n");
            rc = 77;
        } else {
            auto refused = [](auto&& call, const char* what) {
                try {
                    call();
                } catch (const chorus::error& e) {
                    const std::string m = e.what();
                    if (e.code() == chorus::errc::invalid_argument && m.find("points to GPU memory") != std::string::npos)
                        return true;
                    std::printf("FAIL: %s: wrong error: %s\n", what, e.what());
                    return false;
                }
                std::printf("FAIL: %s: not refused\n", what);
                return false;
            };
            bool ok = refused([&] { chorus::all_reduce(comm, std::span<float>(d, 64)); }, "all_reduce");
            ok = refused([&] { chorus::broadcast(comm, std::span<float>(d, 64), 0); }, "broadcast") && ok;
            if (comm.size() > 1)
                ok = refused([&] { chorus::send(comm, std::span<const float>(d, 64), (comm.rank() + 1) % comm.size()); },
                             "send") && ok;
            cudaFree(d);
            rc = ok ? 0 : 1;
            if (ok) std::printf("ok: device pointers refused by communicator<mpi>\n");
        }
    }
    MPI_Finalize();
    return rc;
}
