#pragma once
//! \file comm/gpu_nodes.hpp
//! enqueue_across_nodes: a collective of a GPU communicator across nodes,
//! as backend/gpu_nodes.hpp's file comment describes it. In the comm layer
//! because it plans node-local schedules (algo/automatic.hpp's
//! make_schedule), which a transport does not; gpu_transport::enqueue
//! declares it and <chorus/gpu.hpp> (through comm/make_communicators.hpp)
//! brings its definition.

#if !defined(__CUDACC__)
#  error "chorus/comm/gpu_nodes.hpp is CUDA code: include <chorus/gpu.hpp> from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../algo/automatic.hpp"
#include "../backend/gpu.hpp"
#include "../backend/gpu_nodes.hpp"
#include "../core/error.hpp"
#include "../ops/operators.hpp"

namespace chorus::detail {

//! This rank's schedule for a call inside the node.
struct node_call_schedules {
    any_schedule sch;
    const any_schedule& mine() const noexcept { return sch; }
};

//! A collective across nodes (see the file comment): gpu_transport::enqueue
//! sends here when gpu_world::nodes is set.
template <class T, class Op, class Schedules>
void enqueue_across_nodes(gpu_transport& t, const call& c, const Op& op, Schedules&, void* stream_handle) {
    gpu_world& w = *t.world();
    gpu_inter_nodes& nd = *w.nodes;
    const collective coll = c.coll;
    const std::string fn = std::string("chorus::") + collective_name(coll);
    const policy& pol = c.pol;
    const bool hier = !pol.choose && !pol.deterministic && pol.algo == algorithm::hierarchical;
    const bool autom = pol.choose && !pol.deterministic;
    if (coll != collective::barrier) {
        if (coll != collective::all_reduce && coll != collective::broadcast && coll != collective::all_gather)
            throw error(errc::invalid_argument,
                        fn + ": not available on a GPU communicator across nodes (" + std::to_string(nd.nodes) +
                            " nodes of " + std::to_string(nd.local_size) +
                            " ranks): across nodes only all_reduce, all_gather, broadcast and barrier run, with "
                            "hierarchical<> or automatic");
        if (coll == collective::all_gather && !nd.consecutive)
            throw error(errc::invalid_argument,
                        fn + ": across nodes all_gather needs every node's ranks to be consecutive ranks of the "
                             "communicator (start the processes node by node, e.g. mpirun --map-by slot)");
        if (!hier && !autom)
            throw error(errc::invalid_argument,
                        fn + ": policy " + (pol.deterministic ? std::string("deterministic<>")
                                                              : std::string(algorithm_name(pol.algo)) + "<>") +
                            " is not available on a GPU communicator across nodes (" + std::to_string(nd.nodes) +
                            " nodes): a flat schedule cannot span nodes; use hierarchical<> (or automatic, which "
                            "takes it)");
    }
    const inter_elem et = inter_elem_of<T>();
    const inter_op eo = inter_op_of<Op>();
    if (coll == collective::all_reduce) {
        if (et == inter_elem::none)
            throw error(errc::invalid_argument,
                        fn + ": the element type (" + std::to_string(sizeof(T)) +
                            " bytes) is not one MPI reduces across nodes; GPU communicators across nodes reduce "
                            "float, double and the standard integer types");
        if (eo == inter_op::none)
            throw error(errc::invalid_argument,
                        fn + ": the operator is not one MPI reduces across nodes; GPU communicators across nodes "
                             "reduce with chorus::sum, prod, min and max (or the std:: functors equal to them)");
    }
    cudaStream_t st = stream_handle != nullptr ? static_cast<cudaStream_t>(stream_handle) : t.stream();
    const int dev = t.device();
    device_guard guard(dev);
    const int L = w.n, lr = t.local_rank();
    const policy intra = autom ? policy::automatic() : policy::fixed(pol.intra, pol.tune);

    // One call on the node world, through the ordinary path (staging included).
    auto node_call = [&](collective k, const T* in, T* out, std::uint64_t count, int root) {
        call nc = c;
        nc.coll = k;
        nc.in = in;
        nc.out = out;
        nc.count = count;
        nc.root = root;
        nc.counts = {};
        nc.signature_count = count;
        nc.counts_id = 0;
        nc.small = false;
        nc.pol = k == collective::barrier ? policy::fixed(algorithm::direct) : intra;
        nc.planned = nc.pol;
        schedule_args a{k, lr, L, root, count, sizeof(T), false, L};
        if (k == collective::barrier) a = schedule_args{collective::all_reduce, lr, L, 0, 0, 1, false, 0};
        else a.in_place = in_place_call<T>(k, in, out, lr, count);
        a.commutative = c.args.commutative;
        a.topo = &w.topo;
        a.scratch_limit_bytes = w.scratch_bytes;
        nc.args = a;
        node_call_schedules ns{make_schedule(nc.planned, nc.args)};
        t.template enqueue_local<T>(nc, op, ns, st);
    };
    inter_wait iw;
    iw.timeout = c.settings.timeout;
    iw.deadline = std::chrono::steady_clock::now() + c.settings.timeout;
    iw.aborted = [&w] { return w.aborted(); };
    iw.fn = fn;
    // Waits for the work enqueued on `st` so far, then makes the group
    // agree that every member got there; a failure anywhere fails every
    // member (none is left inside MPI alone), and this rank's own is
    // rethrown as it was.
    auto settle = [&](const char* what) {
        std::exception_ptr mine;
        try {
            cudaEvent_t ev = nullptr;
            cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
            struct destroy {
                cudaEvent_t e;
                ~destroy() { (void)cudaEventDestroy(e); }
            } d{ev};
            cuda_check(cudaEventRecord(ev, st), "cudaEventRecord");
            inter_wait_event(ev, iw, what);
            t.check();
        } catch (...) {
            mine = std::current_exception();
            if (!w.aborted()) w.abort(fn + ": rank " + std::to_string(nd.rank) + " failed before the inter-node step");
        }
        const bool all = nd.agree(mine == nullptr, iw);
        if (mine) std::rethrow_exception(mine);
        if (!all) {
            w.abort(fn + ": a rank on another node failed before the inter-node step");
            throw error(errc::peer_failed, fn + ": a rank with local index " + std::to_string(nd.local) +
                                               " on another node failed before the inter-node step (see its error)");
        }
    };
    // An inter-node step that fails (MPI error, timeout, abort) breaks the
    // node world, so the node peers' next kernels stop at once.
    auto inter = [&](auto&& step) {
        try {
            step();
        } catch (const error& e) {
            w.abort(e.what());
            throw;
        }
    };

    if (coll == collective::barrier) {
        settle("the work before the barrier");
        node_call(collective::barrier, nullptr, nullptr, 0, 0);
        return;
    }
    const std::uint64_t N = c.count;
    if (N == 0) return;
    if (coll == collective::broadcast) {
        const int k0 = nd.node_of[std::size_t(c.root)], l0 = nd.local_of[std::size_t(c.root)];
        T* buf = static_cast<T*>(c.out != nullptr ? c.out : const_cast<void*>(c.in));
        if (lr == l0) {
            settle("the work before the broadcast");
            inter([&] { nd.broadcast(buf, N * sizeof(T), k0, st, iw); });
        }
        node_call(collective::broadcast, buf, buf, N, l0);
        return;
    }
    if (coll == collective::all_gather) {
        // Inside the node into its (contiguous) part of `out`; local rank 0
        // of every node trades the node parts across nodes; then a
        // broadcast inside the node from local rank 0.
        T* out = static_cast<T*>(c.out);
        const std::uint64_t Lc = std::uint64_t(L) * N;
        node_call(collective::all_gather, static_cast<const T*>(c.in), out + std::uint64_t(nd.node) * Lc, N, 0);
        if (lr == 0) {
            settle("the in-node all-gather");
            inter([&] { nd.all_gather(out, Lc * sizeof(T), st, iw); });
        }
        node_call(collective::broadcast, out, out, Lc * std::uint64_t(nd.nodes), 0);
        return;
    }
    // AllReduce.
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    const std::uint64_t m = N / std::uint64_t(L), body = m * std::uint64_t(L), tail = N - body;
    if (m > 0) node_call(collective::reduce_scatter, in, out + std::uint64_t(lr) * m, m, 0);
    if (tail > 0) node_call(collective::all_reduce, in + body, out + body, tail, 0);
    settle("the in-node reduce-scatter");
    inter([&] {
        if (m > 0) nd.all_reduce(out + std::uint64_t(lr) * m, m, et, eo, st, iw);
        if (tail > 0) nd.all_reduce(out + body, tail, et, eo, st, iw);
    });
    if (m > 0) node_call(collective::all_gather, out + std::uint64_t(lr) * m, out, m, 0);
}

} // namespace chorus::detail
