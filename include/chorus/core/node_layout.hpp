#pragma once
//! \file core/node_layout.hpp
//! Which ranks of a GPU communicator share a node, for GPU ranks across
//! nodes (gpu::make_communicator over an MPI communicator whose processes
//! run on several hosts, or on emulated nodes): every rank's node, its
//! index inside the node (its "local" rank in the node's process world),
//! and, per local index, the ranks with that index on every node (the
//! inter-node group). Host code, no CUDA, no MPI: the GPU backend
//! (backend/gpu_nodes_mpi.hpp) plans with it, tests/unit/test_node_layout.cpp
//! checks it exhaustively over small sizes.

#include <cstddef>
#include <string>
#include <vector>

#include "error.hpp"

namespace chorus::detail {

//! The node split of n ranks: `nodes` nodes of `local_size` ranks each
//! (always equal), numbered by their smallest rank; inside a node, ranks
//! keep their communicator order.
struct node_layout {
    int nodes = 0;
    int local_size = 0;
    std::vector<int> node_of;  //!< per rank: its node, 0..nodes-1
    std::vector<int> local_of; //!< per rank: its index inside its node, 0..local_size-1
    std::vector<int> members;  //!< node-major: members[node * local_size + local] = rank

    int size() const noexcept { return static_cast<int>(node_of.size()); }
    //! The rank at `local` of node `node`.
    int rank_at(int node, int local) const {
        return members[static_cast<std::size_t>(node) * static_cast<std::size_t>(local_size) +
                       static_cast<std::size_t>(local)];
    }
};

//! The node split of host_of.size() ranks: host_of[r] names rank r's host
//! (any integer; ranks with equal values share memory). `ranks_per_node`:
//! 0 for one node per host, k > 0 to split each host's ranks, in rank
//! order, into emulated nodes of k consecutive ranks (CHORUS_RANKS_PER_NODE;
//! an emulated node never spans hosts). Throws errc::invalid_argument
//! naming `fn` and the argument: no ranks, a negative ranks_per_node, a
//! host whose rank count is not a multiple of it, or nodes of unequal
//! sizes (GPU ranks across nodes need the same number of ranks per node).
inline node_layout plan_node_layout(const std::vector<int>& host_of, int ranks_per_node,
                                    const std::string& fn = "chorus::gpu::make_communicator") {
    const int n = static_cast<int>(host_of.size());
    if (n < 1) throw error(errc::invalid_argument, fn + ": no ranks to place on nodes");
    if (ranks_per_node < 0)
        throw error(errc::invalid_argument, fn + ": `ranks_per_node` is " + std::to_string(ranks_per_node) +
                                                "; it must be >= 0 (0: one node per host)");
    // Hosts in order of their smallest rank, each with its ranks in order.
    std::vector<std::vector<int>> hosts;
    std::vector<int> host_key;
    for (int r = 0; r < n; ++r) {
        const int h = host_of[static_cast<std::size_t>(r)];
        std::size_t i = 0;
        while (i < host_key.size() && host_key[i] != h) ++i;
        if (i == host_key.size()) {
            host_key.push_back(h);
            hosts.emplace_back();
        }
        hosts[i].push_back(r);
    }
    // Nodes: whole hosts, or runs of ranks_per_node ranks of one host.
    std::vector<std::vector<int>> nodes;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        const std::vector<int>& h = hosts[i];
        const int k = ranks_per_node == 0 ? static_cast<int>(h.size()) : ranks_per_node;
        if (static_cast<int>(h.size()) % k != 0)
            throw error(errc::invalid_argument,
                        fn + ": the host of rank " + std::to_string(h.front()) + " runs " + std::to_string(h.size()) +
                            " rank(s), not a multiple of `ranks_per_node` (" + std::to_string(k) +
                            ", from gpu::options::ranks_per_node or CHORUS_RANKS_PER_NODE); emulated nodes never "
                            "span hosts");
        for (std::size_t j = 0; j < h.size(); j += static_cast<std::size_t>(k))
            nodes.emplace_back(h.begin() + static_cast<std::ptrdiff_t>(j),
                               h.begin() + static_cast<std::ptrdiff_t>(j) + k);
    }
    // Nodes are numbered by their smallest rank (already: hosts are in
    // that order, and runs inside a host too; but runs of a later host
    // can start before runs of an earlier one ends, so sort).
    for (std::size_t a = 1; a < nodes.size(); ++a)
        for (std::size_t b = a; b > 0 && nodes[b].front() < nodes[b - 1].front(); --b) nodes[b].swap(nodes[b - 1]);
    const std::size_t L = nodes.front().size();
    for (const std::vector<int>& nd : nodes)
        if (nd.size() != L)
            throw error(errc::invalid_argument,
                        fn + ": the nodes hold different numbers of ranks (the node of rank " +
                            std::to_string(nodes.front().front()) + ": " + std::to_string(L) + ", the node of rank " +
                            std::to_string(nd.front()) + ": " + std::to_string(nd.size()) +
                            "); GPU ranks across nodes need the same number of ranks on every node (start as many "
                            "processes per host, or set `ranks_per_node` / CHORUS_RANKS_PER_NODE)");
    node_layout out;
    out.nodes = static_cast<int>(nodes.size());
    out.local_size = static_cast<int>(L);
    out.node_of.assign(static_cast<std::size_t>(n), -1);
    out.local_of.assign(static_cast<std::size_t>(n), -1);
    out.members.reserve(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < nodes.size(); ++k)
        for (std::size_t l = 0; l < L; ++l) {
            const int r = nodes[k][l];
            out.node_of[static_cast<std::size_t>(r)] = static_cast<int>(k);
            out.local_of[static_cast<std::size_t>(r)] = static_cast<int>(l);
            out.members.push_back(r);
        }
    return out;
}

} // namespace chorus::detail
