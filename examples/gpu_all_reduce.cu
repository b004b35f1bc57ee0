// chorus on a GPU: four ranks on device 0 ("virtual ranks"; with several
// GPUs, pass their ids instead), each with its own stream. Inputs are made
// and checked on the device with Thrust. Prints "gpu_all_reduce: OK".
//
// Naming a policy (ring<...>, direct<>, the default automatic) adds no
// kernel: one kernel per (element type, operator) runs every policy, so
// this file compiles two collective kernels, float/avg and float/sum.
//
//   nvcc -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -I<chorus>/include gpu_all_reduce.cu
#include <chorus/gpu.hpp>

#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/fill.h>

#include <cstdio>
#include <vector>

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("CHORUS_SKIP: no CUDA device\n");
        return 77;
    }
    const int n = 4;
    const std::size_t count = (std::size_t(1) << 20) + 3; // need not divide by n
    auto comms = chorus::gpu::make_communicators(std::vector<int>(n, 0));

    std::vector<thrust::device_vector<float>> grad(n);
    std::vector<cudaStream_t> streams(n);
    for (int r = 0; r < n; ++r) {
        grad[r].assign(count, float(r + 1));
        cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
    }
    // Stream-ordered: each call enqueues one kernel on the rank's stream and returns.
    using wide = chorus::ring<chorus::ring_params{8, 256 << 10}>;
    // A thrust::device_vector is taken as it is (collectives/buffers.hpp).
    for (int r = 0; r < n; ++r) chorus::all_reduce<wide>(comms[r], grad[r], chorus::avg{}, streams[r]);
    // The _async form returns a chorus::future backed by a CUDA event.
    std::vector<chorus::future> done;
    for (int r = 0; r < n; ++r)
        done.push_back(chorus::all_reduce_async<chorus::direct<>>(
            comms[r], std::span<float>(thrust::raw_pointer_cast(grad[r].data()), 16), chorus::sum{}, streams[r]));
    for (auto& f : done) f.wait(); // throws if the collective failed

    bool ok = true;
    for (int r = 0; r < n; ++r) {
        cudaStreamSynchronize(streams[r]);
        comms[r].check();
        const float mean = 2.5f; // avg of 1, 2, 3, 4
        const auto head = thrust::count(grad[r].begin(), grad[r].begin() + 16, mean * n);
        const auto tail = thrust::count(grad[r].begin() + 16, grad[r].end(), mean);
        ok = ok && head == 16 && tail == std::ptrdiff_t(count - 16);
        cudaStreamDestroy(streams[r]);
    }
    std::printf(ok ? "gpu_all_reduce: OK\n" : "gpu_all_reduce: MISMATCH\n");
    return ok ? 0 : 1;
}
