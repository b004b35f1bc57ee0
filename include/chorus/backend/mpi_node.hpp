#pragma once
//! \file backend/mpi_node.hpp
//! The MPI transport's node split: which ranks share a node (real, or
//! emulated with CHORUS_RANKS_PER_NODE), and the shared memory of a node's
//! ranks (node_area: progress flags and windows in one POSIX
//! shared-memory segment per node, shm.hpp). Part of backend/mpi.hpp,
//! which includes it.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include "../core/config.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "host_small.hpp"
#include "mpi_c.hpp"
#include "shm.hpp"

namespace chorus::detail {

//! Which ranks share a node. Nodes are numbered by their smallest rank;
//! within a node ranks keep their communicator order (local rank).
struct mpi_topology {
    std::vector<int> node_of, local_of;
    std::vector<std::vector<int>> nodes;
    int min_node_size = 1;

    static mpi_topology from_nodes(std::vector<std::vector<int>> nodes, int n) {
        mpi_topology t;
        t.nodes = std::move(nodes);
        t.node_of.assign(static_cast<std::size_t>(n), -1);
        t.local_of.assign(static_cast<std::size_t>(n), -1);
        t.min_node_size = n;
        for (std::size_t k = 0; k < t.nodes.size(); ++k) {
            for (std::size_t l = 0; l < t.nodes[k].size(); ++l) {
                t.node_of[static_cast<std::size_t>(t.nodes[k][l])] = static_cast<int>(k);
                t.local_of[static_cast<std::size_t>(t.nodes[k][l])] = static_cast<int>(l);
            }
            t.min_node_size = std::min(t.min_node_size, static_cast<int>(t.nodes[k].size()));
        }
        return t;
    }
    int size(int node) const { return static_cast<int>(nodes[static_cast<std::size_t>(node)].size()); }
    int count() const { return static_cast<int>(nodes.size()); }
};

//! Parses CHORUS_RANKS_PER_NODE: "k" (nodes of k consecutive ranks, the
//! last one possibly smaller) or "a,b,c" (node sizes, summing to n).
inline std::vector<std::vector<int>> emulated_nodes(const std::string& spec, int n) {
    auto bad = [&](const std::string& why) -> std::vector<std::vector<int>> {
        throw error(errc::invalid_argument,
                    "chorus: CHORUS_RANKS_PER_NODE='" + spec + "' " + why + " (for " + std::to_string(n) +
                        " ranks; give ranks per node, e.g. 2, or every node's size, e.g. 3,2,1)");
    };
    std::vector<long> sizes;
    const char* s = spec.c_str();
    while (*s != '\0') {
        char* end = nullptr;
        const long v = std::strtol(s, &end, 10);
        if (end == s || v <= 0) return bad("is not a list of positive integers");
        sizes.push_back(v);
        s = end;
        if (*s == ',') ++s;
        else if (*s != '\0') return bad("is not a list of positive integers");
    }
    if (sizes.empty()) return bad("is empty");
    if (sizes.size() == 1) {
        const long k = sizes[0];
        sizes.clear();
        for (long left = n; left > 0; left -= k) sizes.push_back(std::min(k, left));
    }
    long total = 0;
    for (long v : sizes) total += v;
    if (total != n) return bad("sums to " + std::to_string(total));
    std::vector<std::vector<int>> nodes;
    int r = 0;
    for (long v : sizes) {
        nodes.emplace_back();
        for (long i = 0; i < v; ++i) nodes.back().push_back(r++);
    }
    return nodes;
}

//! One (local rank, channel) progress flag, on its own cache line:
//! (sequence << 32) | units done, as exec/rank_program.hpp's protocol
//! says. Shared between processes: posted with a release store and polled
//! (no futex: the waiters are in other processes).
struct alignas(64) node_flag {
    std::atomic<std::uint64_t> value{0};
    //! Channel 0's only: the rank's call, (sequence << 32) | the low half
    //! of its fingerprint (host_common.hpp's call_fingerprint), per
    //! sequence parity; stored before the call's first post, on the line
    //! its node peers poll anyway.
    std::atomic<std::uint64_t> call[2]{};
    //! Channel 0's only: the last call the rank finished, where its
    //! operator may throw (mpi_transport::confirm_done).
    std::atomic<std::uint64_t> done{0};
};
//! What a rank stores in node_flag::call for call `seq` with fingerprint
//! `fingerprint`: the sequence above, the fingerprint's low half below.
constexpr std::uint64_t node_call_word(std::uint64_t seq, std::uint64_t fingerprint) noexcept {
    return seq << 32 | (fingerprint & 0xffffffffu);
}
//! A rank's buffers for one call, for the zero-copy path (mpi.hpp:
//! mpi_transport::zero_copy_agreed): per sequence parity, published by
//! every rank of a one-node communicator at the start of every call.
//! `seq` is stored last (release); the rest is read once it names the
//! call. A buffer is (token, byte offset, mapped size) of one of the
//! rank's buffers from alloc (mpi_alloc.hpp); token 0: none (null).
struct alignas(64) node_buffers {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::uint64_t> fingerprint{0};
    std::atomic<std::uint64_t> capable{0}; //!< 1: in and out are in its buffers from alloc, scratch fits
    std::atomic<std::uint64_t> frees{0};   //!< its process's buffers freed so far (shm_buffers::frees)
    std::atomic<std::uint64_t> in[3]{};    //!< token, offset, mapped bytes
    std::atomic<std::uint64_t> out[3]{};
};
//! Per local rank, in the node segment.
struct alignas(64) node_slot {
    std::atomic<std::int32_t> pid{0};
    node_flag flags[max_channels];
    node_buffers buffers[2]; //!< per sequence parity
    small_box box[2];        //!< the small-message protocol's boxes, per sequence parity (host_small.hpp)
};
struct alignas(64) node_header {
    std::atomic<std::int64_t> aborted_by{0}; //!< 1 + rank of the first node rank that failed; 0: fine
    std::atomic<int> reason_ready{0};        //!< 1 once `reason` holds the failure's text
    char reason[244] = {};                   //!< written by the rank that set aborted_by
    std::atomic<int> mapped{0};              //!< ranks other than the creator that mapped the segment
};

//! The shared memory of one node's ranks for one communicator: per rank
//! its progress flags and its window, which holds the rank's scratch
//! where its node peers read it (schedule_args::node_window_bytes).
//! Shared memory when the node has several ranks, private memory when it
//! has one.
class node_area {
public:
    node_area() = default;
    node_area(const node_area&) = delete;
    node_area& operator=(const node_area&) = delete;

    //! Collective over `node_comm` (the ranks of this node).
    void init(MPI_Comm node_comm, std::size_t window_bytes) {
        window_ = window_bytes;
        mpi_check(MPI_Comm_rank(node_comm, &local_), "MPI_Comm_rank");
        mpi_check(MPI_Comm_size(node_comm, &size_), "MPI_Comm_size");
        const std::size_t head = round_up(sizeof(node_header) + sizeof(node_slot) * std::size_t(size_), 4096);
        const std::size_t bytes = head + window_ * std::size_t(size_);
        const std::string knob = "CHORUS_SHM_BYTES sets the window of each of the node's " + std::to_string(size_) +
                                 " ranks (now " + std::to_string(window_) + " bytes)";
        if (size_ == 1) {
            try {
                private_.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t(4096))));
            } catch (const std::bad_alloc&) {
                throw error(errc::unavailable, "chorus: could not allocate the rank's window of " +
                                                   std::to_string(bytes) + " bytes; " + knob);
            }
            base_ = private_.get();
            std::memset(base_, 0, head); // the windows are touched on first use
            new (base_) node_header();
            new (base_ + sizeof(node_header)) node_slot();
        } else {
            // Local rank 0 creates the segment and sends its name, or its
            // error ('N' + name, or 'U'/'I' + message: errc unavailable or
            // internal); the last rank to map it unlinks the name.
            char msg[512] = {};
            if (local_ == 0) {
                shm_segment::sweep_stale_segments();
                std::string name;
                try {
                    seg_ = shm_segment::create_unique(name, bytes, knob);
                    msg[0] = 'N';
                    std::snprintf(msg + 1, sizeof msg - 1, "%s", name.c_str());
                } catch (const error& e) {
                    msg[0] = e.code() == errc::unavailable ? 'U' : 'I';
                    std::snprintf(msg + 1, sizeof msg - 1, "%s", e.what());
                }
            }
            mpi_check(MPI_Bcast(msg, sizeof msg, MPI_CHAR, 0, node_comm), "MPI_Bcast");
            if (msg[0] != 'N') throw error(msg[0] == 'U' ? errc::unavailable : errc::internal, msg + 1);
            const std::string name = msg + 1;
            int ok = 1;
            std::string err;
            if (local_ != 0) {
                try {
                    seg_ = shm_segment::open(name, bytes);
                    auto& h = *reinterpret_cast<node_header*>(seg_.data());
                    if (h.mapped.fetch_add(1) + 2 == size_) shm_segment::unlink(name);
                } catch (const error& e) {
                    ok = 0;
                    err = e.what();
                }
            }
            mpi_check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node_comm), "MPI_Allreduce");
            if (local_ == 0) shm_segment::unlink(name); // when some rank could not map it
            if (!ok)
                throw error(errc::internal, err.empty() ? "chorus: a rank of this node could not map the node's "
                                                          "shared memory segment " + name
                                                        : err);
            base_ = seg_.data();
        }
        header().aborted_by.store(0);
        slot(local_).pid.store(static_cast<std::int32_t>(getpid()));
        windows_ = base_ + head;
    }

    int local() const noexcept { return local_; }
    int size() const noexcept { return size_; }
    std::size_t window_bytes() const noexcept { return window_; }
    node_header& header() const { return *reinterpret_cast<node_header*>(base_); }
    node_slot& slot(int q) const {
        return reinterpret_cast<node_slot*>(base_ + sizeof(node_header))[q];
    }
    //! Local rank q's window (page-aligned, window_bytes()).
    std::byte* window(int q) const { return windows_ + window_ * std::size_t(q); }
    //! Local rank q's progress flag on channel c.
    std::atomic<std::uint64_t>& flag(int q, int c) const {
        return slot(q).flags[static_cast<std::size_t>(c)].value;
    }
    //! Local rank q's call of sequence parity `parity` (node_flag::call).
    std::atomic<std::uint64_t>& call(int q, unsigned parity) const { return slot(q).flags[0].call[parity & 1]; }
    //! Local rank q's buffers of the call of sequence parity `parity` (node_buffers).
    node_buffers& buffers(int q, unsigned parity) const { return slot(q).buffers[parity & 1]; }
    //! Local rank q's small-message box of sequence parity `parity`.
    small_box& box(int q, unsigned parity) const { return slot(q).box[parity & 1]; }
    //! Local rank q's last finished call (node_flag::done).
    std::atomic<std::uint64_t>& done(int q) const { return slot(q).flags[0].done; }

private:
    static std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
    struct aligned_delete {
        void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t(4096)); }
    };
    shm_segment seg_;
    std::unique_ptr<std::byte, aligned_delete> private_;
    std::byte* base_ = nullptr;
    std::byte* windows_ = nullptr;
    std::size_t window_ = 0;
    int local_ = 0, size_ = 1;
};

//! Window size per rank: CHORUS_SHM_BYTES, a whole number of bytes from 1
//! to 64 GiB (anything else throws errc::invalid_argument), default 16 MiB;
//! raised to at least 256 KiB, rounded up to whole 4 KiB pages.
inline std::size_t default_window_bytes() {
    constexpr std::uint64_t cap = std::uint64_t(64) << 30;
    auto w = static_cast<std::size_t>(env_positive("CHORUS_SHM_BYTES", std::uint64_t(16) << 20, cap, "bytes",
                                                   " (64 GiB); values below 262144 (256 KiB) are raised to it"));
    w = std::max<std::size_t>(w, std::size_t(256) << 10);
    return (w + 4095) / 4096 * 4096;
}

//! This process's emulated node under CHORUS_RANKS_PER_NODE=`spec` (by
//! its rank in MPI_COMM_WORLD), or -1 when `spec` is null or empty. A
//! spec emulated_nodes() refuses throws.
inline int emulated_node_of_process(const char* spec) {
    if (spec == nullptr || spec[0] == '\0') return -1;
    int wrank = 0, wsize = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    const auto world_nodes = emulated_nodes(spec, wsize);
    for (std::size_t k = 0; k < world_nodes.size(); ++k)
        for (int r : world_nodes[k])
            if (r == wrank) return static_cast<int>(k);
    return -1;
}

//! Who shares a node with whom: every rank's real node (the smallest rank
//! sharing its memory), its process id, and the node split hierarchical<>
//! uses (the real one, or CHORUS_RANKS_PER_NODE's, which must not put
//! ranks that share no memory on one node). Collective over `comm`.
struct node_discovery {
    std::vector<int> real_node, pids;
    mpi_topology topo;
};
inline node_discovery discover_nodes(MPI_Comm comm, int rank, int size) {
    node_discovery d;
    // Real nodes: who shares memory with whom.
    MPI_Comm shared = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared),
              "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    int leader = rank;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared), "MPI_Allreduce");
    MPI_Comm_free(&shared);
    // Emulated nodes are a property of the process (its rank in
    // MPI_COMM_WORLD), so a split() communicator keeps them.
    const char* spec = std::getenv("CHORUS_RANKS_PER_NODE");
    const int emulated = emulated_node_of_process(spec);
    int mine[3] = {leader, static_cast<int>(getpid()), emulated};
    std::vector<int> all(3 * static_cast<std::size_t>(size));
    mpi_check(MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, comm), "MPI_Allgather");
    d.real_node.resize(static_cast<std::size_t>(size));
    d.pids.resize(static_cast<std::size_t>(size));
    std::vector<int> node_key(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
        const std::size_t i = static_cast<std::size_t>(r);
        d.real_node[i] = all[3 * i];
        d.pids[i] = all[3 * i + 1];
        node_key[i] = all[3 * i + 2] >= 0 ? all[3 * i + 2] : d.real_node[i];
    }
    // Nodes in order of their smallest rank; ranks in communicator order.
    std::vector<std::vector<int>> nodes;
    std::vector<int> keys;
    for (int r = 0; r < size; ++r) {
        const int key = node_key[static_cast<std::size_t>(r)];
        const auto it = std::find(keys.begin(), keys.end(), key);
        if (it == keys.end()) {
            keys.push_back(key);
            nodes.push_back({r});
        } else {
            nodes[static_cast<std::size_t>(it - keys.begin())].push_back(r);
        }
    }
    for (const auto& nd : nodes)
        for (int r : nd)
            if (d.real_node[static_cast<std::size_t>(r)] != d.real_node[static_cast<std::size_t>(nd[0])])
                throw error(errc::invalid_argument,
                            std::string("chorus: CHORUS_RANKS_PER_NODE='") + (spec ? spec : "") +
                                "' puts ranks " + std::to_string(nd[0]) + " and " + std::to_string(r) +
                                " on one node, but they do not share memory");
    d.topo = mpi_topology::from_nodes(std::move(nodes), size);
    return d;
}

} // namespace chorus::detail
