#pragma once
//! \file backend/mpi_engine.hpp
//! The MPI transport's engine for hierarchical<Intra, ring<>> (see
//! backend/mpi.hpp for what it does and where it is used). `Self` is
//! detail::mpi_transport, whose state it reads. Part of backend/mpi.hpp,
//! which includes it.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../core/collective.hpp"
#include "../core/error.hpp"
#include "../exec/host_reduce_copy.hpp"
#include "../plan/partition.hpp"
#include "host_wait.hpp"
#include "mpi_c.hpp"
#include "mpi_node.hpp"
#include "mpi_schedule.hpp"
#include "mpi_wait.hpp"

namespace chorus::detail {

//! One collective on one rank: the engine described in backend/mpi.hpp.
template <class Self, class T, class Op>
struct mpi_engine : mpi_waiter<Self> {
    using base = mpi_waiter<Self>;
    using base::bad_peer;
    using base::check_peer;
    using base::deadline;
    using base::doing;
    using base::self;
    using base::wait;

    const detail::mpi_topology& tp;
    detail::node_area& area;
    Op op;
    std::uint64_t chunk_elems; //!< inter-node message size (elements)
    alignment align = alignment_of(sizeof(T), 0);
    std::vector<MPI_Request> sends{}; //!< outstanding sends of a chain

    int me() const { return self.rank_; }
    using base::drop;
    int node() const { return tp.node_of[static_cast<std::size_t>(me())]; }
    int L() const { return area.size(); }
    int l() const { return area.local(); }
    T* tmp(std::uint64_t elems) {
        if (self.tmp_.size() < elems * sizeof(T)) self.tmp_.resize(elems * sizeof(T));
        return reinterpret_cast<T*>(self.tmp_.data());
    }

    //! All ranks of this node entered the barrier.
    detail::status node_barrier() {
        if (L() == 1) return detail::status::ok;
        const std::uint64_t e = area.next_epoch();
        area.slot(l()).barrier.store(e, std::memory_order_seq_cst);
        const auto& ranks = tp.nodes[static_cast<std::size_t>(node())];
        for (int q = 0; q < L(); ++q) {
            if (q == l()) continue;
            const int peer = ranks[static_cast<std::size_t>(q)];
            const detail::status st = detail::poll_until(
                [&] { return area.slot(q).barrier.load(std::memory_order_acquire) >= e; },
                [&] { return check_peer(peer); }, deadline, self.backoff_);
            if (st != detail::status::ok) {
                bad_peer = peer;
                doing = "a node barrier";
                return st;
            }
        }
        return detail::status::ok;
    }

    void isend(const T* p, std::uint64_t m, int peer, MPI_Request* r) {
        detail::mpi_check(MPI_Isend(p, static_cast<int>(m * sizeof(T)), MPI_BYTE, peer, 7, self.comm_, r), "MPI_Isend");
    }
    void irecv(T* p, std::uint64_t m, int peer, MPI_Request* r) {
        detail::mpi_check(MPI_Irecv(p, static_cast<int>(m * sizeof(T)), MPI_BYTE, peer, 7, self.comm_, r), "MPI_Irecv");
    }
    //! A chain keeps at most this many sends in flight: enough to pipeline,
    //! and bounded (each is a rendezvous the receiver must serve).
    static constexpr std::size_t max_in_flight = 4;
    detail::status forward(const T* p, std::uint64_t m, int peer) {
        if (sends.size() == max_in_flight) {
            if (const detail::status st = wait(sends.data(), 1, peer); st != detail::status::ok) return st;
            sends.erase(sends.begin());
        }
        sends.push_back(MPI_REQUEST_NULL);
        isend(p, m, peer, &sends.back());
        return detail::status::ok;
    }
    detail::status wait_sends() {
        if (sends.empty()) return detail::status::ok;
        const detail::status st = wait(sends.data(), static_cast<int>(sends.size()), -1);
        sends.clear();
        return st;
    }

    //! Ring all-reduce of buf[0, m) among owners[0..N) (one per node, in
    //! node order); this rank is owners[k]. Per chunk: N-1 reduce-scatter
    //! steps, then N-1 all-gather steps. dst = (value from pred) op (own).
    detail::status ring_all_reduce(T* buf, std::uint64_t m, const std::vector<int>& owners, int k) {
        const int N = static_cast<int>(owners.size());
        if (N == 1 || m == 0) return detail::status::ok;
        const int succ = owners[static_cast<std::size_t>((k + 1) % N)];
        const int pred = owners[static_cast<std::size_t>((k + N - 1) % N)];
        const std::uint64_t chunk = chunk_elems * std::uint64_t(N);
        T* t = tmp(max_part_bound(std::min(chunk, m), std::uint64_t(N), align) + 1);
        for (std::uint64_t c0 = 0; c0 < m; c0 += chunk) {
            const index_range ch{c0, std::min(m, c0 + chunk)};
            auto part = [&](int i) { return chorus::split(ch, std::uint64_t(detail::mod(i, N)), std::uint64_t(N), align); };
            for (int s = 0; s < N - 1; ++s) {
                const index_range tx = part(k - s), rx = part(k - s - 1);
                MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
                irecv(t, rx.size(), pred, &r[0]);
                isend(buf + tx.begin, tx.size(), succ, &r[1]);
                if (const detail::status st = wait(r, 2, pred); st != detail::status::ok) return st;
                detail::host_reduce_copy(buf + rx.begin, static_cast<T*>(nullptr), t, buf + rx.begin,
                                         static_cast<std::size_t>(rx.size()), op, 0, false);
            }
            for (int s = 0; s < N - 1; ++s) {
                const index_range tx = part(k + 1 - s), rx = part(k - s);
                MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
                irecv(buf + rx.begin, rx.size(), pred, &r[0]);
                isend(buf + tx.begin, tx.size(), succ, &r[1]);
                if (const detail::status st = wait(r, 2, pred); st != detail::status::ok) return st;
            }
        }
        return detail::status::ok;
    }

    //! Chain reduce of buf[0, m) towards owners[dest]: the chain starts at
    //! the node after dest and ends at dest; each link adds its own value
    //! (value from pred) op (own) and forwards, chunk by chunk (pipelined).
    detail::status chain_reduce(T* buf, std::uint64_t m, const std::vector<int>& owners, int k, int dest) {
        const int N = static_cast<int>(owners.size());
        if (N == 1 || m == 0) return detail::status::ok;
        const int pos = detail::mod(k - dest - 1, N); // 0: start, N-1: dest
        const int succ = owners[static_cast<std::size_t>((k + 1) % N)];
        const int pred = owners[static_cast<std::size_t>((k + N - 1) % N)];
        T* t = tmp(std::min(chunk_elems, m));
        for (std::uint64_t c0 = 0; c0 < m; c0 += chunk_elems) {
            const std::uint64_t len = std::min(chunk_elems, m - c0);
            if (pos > 0) {
                MPI_Request r = MPI_REQUEST_NULL;
                irecv(t, len, pred, &r);
                if (const detail::status st = wait(&r, 1, pred); st != detail::status::ok) return st;
                detail::host_reduce_copy(buf + c0, static_cast<T*>(nullptr), t, buf + c0, static_cast<std::size_t>(len),
                                         op, 0, false);
            }
            if (pos < N - 1)
                if (const detail::status st = forward(buf + c0, len, succ); st != detail::status::ok) return st;
        }
        return wait_sends();
    }

    //! Chain broadcast of buf[0, m) from owners[src] around the ring, chunk by chunk.
    detail::status chain_bcast(T* buf, std::uint64_t m, const std::vector<int>& owners, int k, int src) {
        const int N = static_cast<int>(owners.size());
        if (N == 1 || m == 0) return detail::status::ok;
        const int pos = detail::mod(k - src, N);
        const int succ = owners[static_cast<std::size_t>((k + 1) % N)];
        const int pred = owners[static_cast<std::size_t>((k + N - 1) % N)];
        for (std::uint64_t c0 = 0; c0 < m; c0 += chunk_elems) {
            const std::uint64_t len = std::min(chunk_elems, m - c0);
            if (pos > 0) {
                MPI_Request r = MPI_REQUEST_NULL;
                irecv(buf + c0, len, pred, &r);
                if (const detail::status st = wait(&r, 1, pred); st != detail::status::ok) return st;
            }
            if (pos < N - 1)
                if (const detail::status st = forward(buf + c0, len, succ); st != detail::status::ok) return st;
        }
        return wait_sends();
    }

    //! dst[0, m) = src(0) op src(1) op ... op src(k-1), in that order (the
    //! result is the same on every rank whatever the timing); finish_n > 0
    //! applies the operator's epilogue in the last step. dst may be src(0),
    //! or src(q) for q >= 1 only if it is read in the first step.
    template <class Src>
    void reduce_in_order(T* dst, Src&& src, std::size_t m, int k, int finish_n) {
        detail::host_reduce_copy(dst, static_cast<T*>(nullptr), src(0), src(1), m, op, k == 2 ? finish_n : 0, false);
        for (int q = 2; q < k; ++q)
            detail::host_reduce_copy(dst, static_cast<T*>(nullptr), static_cast<const T*>(dst), src(q), m, op,
                                     q == k - 1 ? finish_n : 0, false);
    }

    //! Block q of this node's split of a V-element vector.
    index_range block(std::uint64_t V, int q, int Lk) const {
        return chorus::split({0, V}, std::uint64_t(q), std::uint64_t(Lk), align);
    }
    //! The rank of node k' that owns the segment starting at s0.
    int owner(std::uint64_t V, int kk, std::uint64_t s0) const {
        const int Lk = tp.size(kk);
        for (int q = 0; q < Lk; ++q) {
            const index_range b = block(V, q, Lk);
            if (b.begin <= s0 && s0 < b.end) return tp.nodes[static_cast<std::size_t>(kk)][static_cast<std::size_t>(q)];
        }
        return -1;
    }

    //! Runs collective `coll` over all pieces.
    detail::status run(collective coll, const T* in, T* out, std::uint64_t count, int root) {
        const int n = self.size_;
        if (tp.count() == 1 && L() > 1) {
            // One node: collectives whose input share fits a small buffer
            // run one-shot (one barrier, then every rank reads what it
            // needs straight from its peers' small buffers).
            const std::uint64_t share = coll == collective::reduce_scatter ? count * std::uint64_t(n) : count;
            if (share * sizeof(T) <= detail::node_area::small_bytes) return one_shot(coll, in, out, count, root);
            if (coll == collective::all_reduce && area.single_copy()) return single_copy_all_reduce(in, out, count);
        }
        const std::uint64_t half = area.half_bytes() / sizeof(T); // elements per window half
        // Piece length p (elements of `count`) such that every rank's input
        // share and output block fit in its window halves, on every node.
        std::uint64_t pmax = half;
        if (coll == collective::reduce_scatter) pmax = half / std::uint64_t(n);
        if (coll == collective::all_gather) pmax = std::min<std::uint64_t>(half, half * std::uint64_t(tp.min_node_size) / std::uint64_t(n));
        // Blocks are split at aligned indices, so a block may exceed V/L by a granule.
        const std::uint64_t slack = align.aligned ? align.granule : 1;
        pmax = pmax > 2 * slack ? pmax - 2 * slack : 0;
        if (pmax == 0)
            throw error(errc::invalid_argument, std::string("chorus::") + collective_name(coll) + ": elements of " +
                                                    std::to_string(sizeof(T)) + " bytes do not fit the " +
                                                    std::to_string(area.window_bytes()) +
                                                    "-byte shared-memory windows for " + std::to_string(n) +
                                                    " ranks; raise CHORUS_SHM_BYTES");
        for (std::uint64_t a = 0; a < count; a += pmax) {
            const std::uint64_t p = std::min(pmax, count - a);
            if (const detail::status st = piece(coll, in, out, count, root, a, p); st != detail::status::ok) return st;
        }
        return detail::status::ok;
    }

    //! One node, AllReduce, peers readable (process_vm_readv): no staging.
    //! Publish the buffers; barrier; reduce this rank's block reading the
    //! peers' inputs chunk by chunk into a cache-sized buffer, into our own
    //! output; barrier; read every other block straight from its owner's
    //! output into ours; barrier (nobody returns while a peer still reads).
    detail::status single_copy_all_reduce(const T* in, T* out, std::uint64_t count) {
        using detail::status;
        const int n = self.size_;
        area.slot(l()).in.store(reinterpret_cast<std::uint64_t>(in));
        area.slot(l()).out.store(reinterpret_cast<std::uint64_t>(out));
        if (status st = node_barrier(); st != status::ok) return st;
        // every rank of the communicator is on this node: local rank == rank
        const index_range blk = block(count, l(), L());
        const std::uint64_t chunk = std::max<std::uint64_t>(1, (std::uint64_t(64) << 10) / sizeof(T));
        T* t = tmp(chunk * std::uint64_t(n));
        // In place, our own input is the destination: the first reduction
        // step would overwrite it before it is combined, unless it comes
        // first (rank 0, 1) or is set aside (slot n-1 of t).
        const bool set_aside = in == out && l() >= 2;
        auto fail_read = [&](int q) {
            bad_peer = q;
            doing = "a single-copy read (process_vm_readv)";
            return detail::process_alive(area.slot(q).pid.load()) ? status::mismatch : status::peer_exited;
        };
        for (std::uint64_t c0 = blk.begin; c0 < blk.end; c0 += chunk) {
            const std::uint64_t m = std::min(chunk, blk.end - c0);
            // sources in rank order: our own input, the peers' in t
            auto src = [&](int q) -> const T* {
                if (q == l()) return set_aside ? t + std::uint64_t(n - 1) * chunk : in + c0;
                return t + std::uint64_t(q < l() ? q : q - 1) * chunk;
            };
            if (set_aside)
                std::memcpy(static_cast<void*>(const_cast<T*>(src(l()))), static_cast<const void*>(in + c0),
                            m * sizeof(T));
            for (int q = 0; q < n; ++q)
                if (q != l() && !detail::read_remote(area.slot(q).pid.load(), const_cast<T*>(src(q)),
                                                      area.slot(q).in.load() + c0 * sizeof(T), m * sizeof(T)))
                    return fail_read(q);
            reduce_in_order(out + c0, src, static_cast<std::size_t>(m), n, n);
        }
        if (status st = node_barrier(); st != status::ok) return st;
        for (int q = 0; q < n; ++q) {
            if (q == l()) continue;
            const index_range bq = block(count, q, L());
            if (!bq.empty() && !detail::read_remote(area.slot(q).pid.load(), out + bq.begin,
                                                    area.slot(q).out.load() + bq.begin * sizeof(T),
                                                    bq.size() * sizeof(T)))
                return fail_read(q);
        }
        return node_barrier();
    }

    //! One node, small input: copy in, one barrier, read peers directly.
    detail::status one_shot(collective coll, const T* in, T* out, std::uint64_t count, int root) {
        const int n = self.size_;
        const unsigned which = area.next_small();
        T* mine = area.small_area<T>(l(), which);
        const std::uint64_t share = coll == collective::reduce_scatter ? count * std::uint64_t(n) : count;
        if (coll != collective::broadcast || me() == root)
            std::memcpy(static_cast<void*>(mine), static_cast<const void*>(in), share * sizeof(T));
        if (const detail::status st = node_barrier(); st != detail::status::ok) return st;
        // every rank of the communicator is on this node: local rank == rank
        auto src = [&](int q) { return static_cast<const T*>(area.small_area<T>(q, which)); };
        const std::uint64_t off = coll == collective::reduce_scatter ? std::uint64_t(me()) * count : 0;
        const std::size_t m = static_cast<std::size_t>(count);
        switch (coll) {
        case collective::all_reduce:
        case collective::reduce_scatter:
        case collective::reduce:
            if (coll == collective::reduce && me() != root) break;
            reduce_in_order(out, [&](int q) { return src(q) + off; }, m, n, n);
            break;
        case collective::all_gather:
            for (int q = 0; q < n; ++q)
                std::memcpy(static_cast<void*>(out + std::uint64_t(q) * count), static_cast<const void*>(src(q)),
                            m * sizeof(T));
            break;
        case collective::broadcast:
            if (me() != root) std::memcpy(static_cast<void*>(out), static_cast<const void*>(src(root)), m * sizeof(T));
            break;
        case collective::barrier:
        default: break;
        }
        return detail::status::ok;
    }

    detail::status piece(collective coll, const T* in, T* out, std::uint64_t count, int root, std::uint64_t a,
                         std::uint64_t p) {
        using detail::status;
        const int n = self.size_;
        const int k = node();
        const int N = tp.count();
        const bool slotted = coll == collective::all_gather || coll == collective::reduce_scatter;
        const std::uint64_t V = slotted ? p * std::uint64_t(n) : p;
        auto copy = [](T* d, const T* s, std::uint64_t m) {
            if (m != 0 && d != s) std::memcpy(static_cast<void*>(d), static_cast<const void*>(s), m * sizeof(T));
        };
        const auto& ranks = tp.nodes[static_cast<std::size_t>(k)];

        // 1. this rank's share of the input into its window (AllReduce:
        // all but our own block, which only we read, from `in` itself)
        T* my_in = area.in_area<T>(l());
        const index_range blk = block(V, l(), L());
        switch (coll) {
        case collective::all_reduce:
            copy(my_in, in + a, blk.begin);
            copy(my_in + blk.end, in + a + blk.end, p - blk.end);
            break;
        case collective::reduce:
        case collective::all_gather: copy(my_in, in + a, p); break;
        case collective::reduce_scatter:
            for (int g = 0; g < n; ++g) copy(my_in + std::uint64_t(g) * p, in + std::uint64_t(g) * count + a, p);
            break;
        case collective::broadcast:
            if (me() == root) copy(my_in, in + a, p);
            break;
        case collective::barrier:
        default: break;
        }
        if (status st = node_barrier(); st != status::ok) return st;

        // 2. intra-node: this rank's block of the node's vector
        T* my_out = area.out_area<T>(l());
        auto in_block = [&](int q) -> const T* {
            if (coll == collective::all_reduce && q == l()) return in + a + blk.begin;
            return area.in_area<T>(q) + blk.begin;
        };
        const bool reducing = coll == collective::all_reduce || coll == collective::reduce ||
                              coll == collective::reduce_scatter;
        if (reducing) {
            if (L() == 1) {
                copy(my_out, in_block(0), blk.size());
            } else {
                reduce_in_order(my_out, in_block, static_cast<std::size_t>(blk.size()), L(), 0);
            }
        } else if (coll == collective::all_gather) {
            // slot g of the vector is rank g's piece; copy the slots of this node's ranks
            for (int q = 0; q < L(); ++q) {
                const std::uint64_t s0 = std::uint64_t(ranks[static_cast<std::size_t>(q)]) * p;
                const std::uint64_t b = std::max(s0, blk.begin), e = std::min(s0 + p, blk.end);
                if (b < e) copy(my_out + (b - blk.begin), area.in_area<T>(q) + (b - s0), e - b);
            }
        } else if (coll == collective::broadcast && tp.node_of[static_cast<std::size_t>(root)] == k) {
            copy(my_out, area.in_area<T>(tp.local_of[static_cast<std::size_t>(root)]) + blk.begin, blk.size());
        }

        // 3. inter-node: the segments of this block, each with one owner per node
        if (N > 1 && !blk.empty()) {
            std::vector<std::uint64_t> cuts{blk.begin, blk.end};
            for (int kk = 0; kk < N; ++kk)
                for (int q = 1; q < tp.size(kk); ++q) cuts.push_back(block(V, q, tp.size(kk)).begin);
            if (slotted)
                for (int g = 1; g < n; ++g) cuts.push_back(std::uint64_t(g) * p);
            std::sort(cuts.begin(), cuts.end());
            cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
            std::vector<int> owners(static_cast<std::size_t>(N));
            for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
                const std::uint64_t s0 = cuts[i], s1 = cuts[i + 1];
                if (s0 < blk.begin || s1 > blk.end || s0 == s1) continue;
                for (int kk = 0; kk < N; ++kk) owners[static_cast<std::size_t>(kk)] = owner(V, kk, s0);
                T* seg = my_out + (s0 - blk.begin);
                const std::uint64_t m = s1 - s0;
                const int slot_node = slotted ? tp.node_of[static_cast<std::size_t>(s0 / p)] : -1;
                const int root_node = tp.node_of[static_cast<std::size_t>(root)];
                status st = status::ok;
                switch (coll) {
                case collective::all_reduce: st = ring_all_reduce(seg, m, owners, k); break;
                case collective::reduce: st = chain_reduce(seg, m, owners, k, root_node); break;
                case collective::reduce_scatter: st = chain_reduce(seg, m, owners, k, slot_node); break;
                case collective::all_gather: st = chain_bcast(seg, m, owners, k, slot_node); break;
                case collective::broadcast: st = chain_bcast(seg, m, owners, k, root_node); break;
                case collective::barrier:
                default: break;
                }
                if (st != status::ok) return st;
            }
        }
        if constexpr (detail::has_finish<Op, T>) {
            if (reducing)
                detail::host_reduce_copy(my_out, static_cast<T*>(nullptr), my_out, static_cast<const T*>(nullptr),
                                         static_cast<std::size_t>(blk.size()), op, n, false);
        }
        if (status st = node_barrier(); st != status::ok) return st;

        // 4. what this rank needs, out of its node peers' blocks. Large
        // results are written with streaming stores: the caller's buffer is
        // not read again here, so it need not be fetched into the cache.
        const bool streaming = V * sizeof(T) >= (std::uint64_t(4) << 20);
        auto gather = [&](std::uint64_t v0, std::uint64_t v1, T* dst) { // vector [v0, v1) -> dst
            for (int q = 0; q < L(); ++q) {
                const index_range bq = block(V, q, L());
                const std::uint64_t b = std::max(v0, bq.begin), e = std::min(v1, bq.end);
                if (b < e)
                    detail::host_reduce_copy(dst + (b - v0), static_cast<T*>(nullptr),
                                             static_cast<const T*>(area.out_area<T>(q) + (b - bq.begin)),
                                             static_cast<const T*>(nullptr), static_cast<std::size_t>(e - b), op, 0,
                                             streaming);
            }
        };
        switch (coll) {
        case collective::all_reduce: gather(0, p, out + a); break;
        case collective::reduce:
            if (me() == root) gather(0, p, out + a);
            break;
        case collective::broadcast:
            if (me() != root) gather(0, p, out + a);
            break;
        case collective::reduce_scatter: gather(std::uint64_t(me()) * p, std::uint64_t(me() + 1) * p, out + a); break;
        case collective::all_gather:
            for (int g = 0; g < n; ++g) gather(std::uint64_t(g) * p, std::uint64_t(g + 1) * p, out + std::uint64_t(g) * count + a);
            break;
        case collective::barrier:
        default: break;
        }
        if (streaming) detail::store_fence();
        return status::ok;
    }
};

} // namespace chorus::detail
