// A translation unit compiled by the host compiler (not nvcc), as most MPI
// and threads users' code is, still gets a device pointer refused by name:
// the check asks the CUDA driver the process has loaded
// (backend/host_common.hpp: check_host_pointer). Managed memory is
// accepted. Exits 77 (Skipped) without a CUDA device.

#include <chorus/chorus.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

int main() {
    float* d = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)) != cudaSuccess) {
        std::printf("CHORUS_SKIP: no CUDA device\n");
        return 77;
    }
    bool refused = false;
    try {
        chorus::run_threads(2, [&](chorus::communicator<chorus::threads>& comm) {
            chorus::all_reduce(comm, std::span<float>(d, 64));
        });
    } catch (const chorus::error& e) {
        refused = e.code() == chorus::errc::invalid_argument &&
                  std::string(e.what()).find("points to GPU memory") != std::string::npos;
        std::printf("%s\n", e.what());
    }
    cudaFree(d);
    if (!refused) {
        std::printf("FAIL: a device pointer was not refused by a threads communicator\n");
        return 1;
    }
    std::vector<float*> managed(2, nullptr);
    for (auto& m : managed)
        if (cudaMallocManaged(reinterpret_cast<void**>(&m), 64 * sizeof(float)) != cudaSuccess) return 1;
    bool exact = true;
    chorus::run_threads(2, [&](chorus::communicator<chorus::threads>& comm) {
        float* m = managed[static_cast<std::size_t>(comm.rank())];
        for (int i = 0; i < 64; ++i) m[i] = float(i + comm.rank());
        chorus::all_reduce(comm, std::span<float>(m, 64));
        for (int i = 0; i < 64; ++i)
            if (m[i] != float(2 * i + 1)) exact = false;
    });
    for (auto* m : managed) cudaFree(m);
    if (!exact) {
        std::printf("FAIL: managed memory gave a wrong AllReduce\n");
        return 1;
    }
    std::printf("ok: device memory refused, managed memory reduced, from a host-compiler translation unit\n");
    return 0;
}
