#pragma once
//! \file algo/hierarchical.hpp
//! The hierarchical policy: reduce inside each node first, then across
//! nodes, then share inside the node (the bandwidth-optimal form: an
//! intra-node reduce-scatter, an inter-node all-reduce of each rank's
//! share, an intra-node all-gather).
//!
//! `Intra` names the algorithm inside a node and `Inter` the one between
//! nodes. On the MPI backend the intra-node phases run over shared memory
//! (each rank reduces its share straight out of its node peers' windows)
//! and the inter-node phase runs `Inter` over MPI point-to-point,
//! pipelined in Inter::params.chunk_bytes. On the threads backend every
//! rank is on one node, so hierarchical<Intra, Inter> runs `Intra`.

#include "ring.hpp"

namespace chorus {

template <class Intra = ring<>, class Inter = ring<>>
struct hierarchical {
    static_assert(requires { Intra::params; }, "chorus: hierarchical<Intra, Inter>: Intra must be an algorithm policy");
    static_assert(requires { Inter::params; }, "chorus: hierarchical<Intra, Inter>: Inter must be an algorithm policy");
    using intra = Intra;
    using inter = Inter;
    //! The tuning every backend without a node split uses (threads: one node).
    static constexpr ring_params params = Intra::params;
    static constexpr bool reorders_operands = true;
    static constexpr bool is_hierarchical = true;
    static constexpr const char* name = "hierarchical";
};

namespace detail {
template <class Algo>
concept hierarchical_policy = requires { requires Algo::is_hierarchical; };
} // namespace detail

} // namespace chorus
