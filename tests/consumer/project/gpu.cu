// A CUDA user's translation unit: <chorus/gpu.hpp>, a lambda operator and
// libcu++'s functor, built with no chorus flags of its own (chorus::cuda
// carries -std=c++20 --expt-relaxed-constexpr --extended-lambda). The
// consumer test builds it; it runs where a device is (exit 77 otherwise).
#include <chorus/gpu.hpp>

#include <cuda/std/functional>

#include <cstdio>
#include <span>
#include <vector>

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("consumer_gpu: no CUDA device\n");
        return 77;
    }
    const int n = 2;
    const std::size_t count = 1000;
    auto comms = chorus::gpu::make_communicators(std::vector<int>(n, 0));
    std::vector<float*> buf(n);
    std::vector<cudaStream_t> streams(n); // ranks on one device run concurrently: a stream each
    for (int r = 0; r < n; ++r) {
        cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
        cudaMalloc(&buf[r], count * sizeof(float));
        std::vector<float> host(count, float(r + 1));
        cudaMemcpy(buf[r], host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    }
    auto plus = [] __host__ __device__(float a, float b) { return a + b; };
    using tuned = chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 1 << 16}>;
    for (int r = 0; r < n; ++r) chorus::all_reduce<tuned>(comms[r], std::span<float>(buf[r], count), cuda::std::plus<>{},
                                                  streams[r]);
    for (int r = 0; r < n; ++r) chorus::all_reduce(comms[r], std::span<float>(buf[r], count), plus, streams[r]);
    cudaDeviceSynchronize();
    bool ok = true;
    for (int r = 0; r < n; ++r) {
        std::vector<float> host(count);
        cudaMemcpy(host.data(), buf[r], count * sizeof(float), cudaMemcpyDeviceToHost);
        for (float x : host) ok = ok && x == 6.0f; // (1 + 2) + (1 + 2)... summed twice: 3, then 6
        cudaFree(buf[r]);
        cudaStreamDestroy(streams[r]);
    }
    std::printf(ok ? "consumer_gpu: ok\n" : "consumer_gpu: WRONG\n");
    return ok ? 0 : 1;
}
