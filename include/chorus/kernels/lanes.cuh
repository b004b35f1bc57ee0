#pragma once
//! \file kernels/lanes.cuh
//! The lanes of a CUDA thread block, as exec/lane_env.hpp and
//! exec/lane_reduce_copy.hpp expect them (the CPU lane test supplies CPU
//! threads instead).

#include <cstdint>

namespace chorus::detail {

struct block_lanes {
    __device__ int id() const { return static_cast<int>(threadIdx.x); }
    __device__ int count() const { return static_cast<int>(blockDim.x); }
    __device__ void sync() const { __syncthreads(); }
    template <class V>
    __device__ V share(V v) const {
        __shared__ alignas(16) unsigned char box[16];
        static_assert(sizeof(V) <= 16, "chorus: block_lanes::share moves at most 16 bytes");
        __syncthreads();
        if (threadIdx.x == 0) *reinterpret_cast<V*>(box) = v;
        __syncthreads();
        return *reinterpret_cast<const V*>(box);
    }
    //! The global nanosecond timer (the same on every SM, unlike clock64()).
    __device__ std::uint64_t now_ns() const {
        std::uint64_t t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        return t;
    }
    __device__ void relax() const {}
};

} // namespace chorus::detail
