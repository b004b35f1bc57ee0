#pragma once
//! \file core/signature.hpp
//! What ranks compare before they move data (checked mode on the host
//! transports; always in the GPU kernels): one call's identity as eight
//! 64-bit words, the same on every transport. The threads transport
//! publishes them in atomics under a sequence lock, MPI exchanges them in
//! one MPI_Iallgather (with the names as text), the GPU kernels in each
//! rank's device area.

#include <cstdint>

#include "collective.hpp"
#include "config.hpp"

namespace chorus::detail {

struct call_signature {
    std::uint64_t seq = 0;        //!< 1, 2, ... per communicator (0 where the transport counts otherwise: GPU)
    std::uint64_t count = 0;      //!< elements (the "v" collectives: the sum of all counts)
    std::uint64_t elem_bytes = 0;
    std::uint64_t shape = 0;      //!< collective | channels << 8 | root << 32 (see make_shape)
    std::uint64_t type_id = 0;    //!< hash of the element type's name
    std::uint64_t op_id = 0;      //!< hash of the operator type's name
    std::uint64_t algo_id = 0;    //!< the policy's id() (algorithm and tuning)
    std::uint64_t counts_id = 0;  //!< the "v" collectives: hash of the counts array; 0 otherwise

    static constexpr int words = 8;

    CHORUS_HD static constexpr std::uint64_t make_shape(collective c, int channels, int root) {
        return std::uint64_t(c) | std::uint64_t(std::uint32_t(channels) & 0xffffff) << 8 |
               std::uint64_t(std::uint32_t(root)) << 32;
    }
    CHORUS_HD constexpr collective coll() const { return static_cast<collective>(shape & 0xff); }
    CHORUS_HD constexpr int channels() const { return static_cast<int>((shape >> 8) & 0xffffff); }
    CHORUS_HD constexpr int root() const { return static_cast<int>(static_cast<std::uint32_t>(shape >> 32)); }

    //! A 64-bit digest of every word but the sequence number (never 0):
    //! what a small-message protocol compares instead of the whole
    //! signature (two different calls agree on it with probability 2^-63).
    CHORUS_HD constexpr std::uint64_t hash() const {
        const std::uint64_t w[7] = {count, elem_bytes, shape, type_id, op_id, algo_id, counts_id};
        std::uint64_t h = 0x9E3779B97F4A7C15ull;
        for (std::uint64_t x : w) {
            h = (h ^ x) * 0xFF51AFD7ED558CCDull;
            h ^= h >> 32;
        }
        return h | 1;
    }

    CHORUS_HD constexpr bool same_call(const call_signature& o) const {
        return seq == o.seq && count == o.count && elem_bytes == o.elem_bytes && shape == o.shape &&
               type_id == o.type_id && op_id == o.op_id && algo_id == o.algo_id && counts_id == o.counts_id;
    }
};

} // namespace chorus::detail
