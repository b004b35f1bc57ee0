// The GPU correctness suite, on virtual ranks (2, 3, 4, 6 and 8 ranks on
// device 0) and, when the machine has several GPUs, on one rank per device:
//
//  - every policy, as a run-time value (policy_cases() below, each on its
//    own communicators): ring<4 channels, 64 KiB>, direct<2 channels,
//    1 MiB>, hierarchical<ring, direct> and hierarchical<direct, ring>
//    (node split: n/2 ranks per node, 1 for odd n), tree<>,
//    recursive_doubling<>, rabenseifner<> and two_shot<> with a
//    multi-channel tuning and their default one, ring<> and direct<> with
//    their default tuning, automatic (alone and with a node split, where it
//    picks hierarchical<> for large messages), deterministic<ring<4
//    channels>> and deterministic<automatic>;
//  - x every collective (AllReduce, AllGather, ReduceScatter, Broadcast,
//    Reduce) x in place and out of place x ragged counts: a full matrix
//    (each policy on some rank counts, see policy_cases) runs 0, 1, n + 1,
//    1009 and 1000003 (the last with float/sum and bfloat16/sum, and with
//    int32/max and __half/sum where every pair runs), the others 1 and
//    1009; x buffers `r % 3` elements off an allocation (misaligned for
//    every element size), with guard elements on both sides: the guards,
//    the inputs, the rest of an in-place ReduceScatter's input and a
//    non-root's Reduce output must not change;
//  - x (element type, operator) pairs: ring<4 channels> and direct<2
//    channels> run every pair
//    (float/sum, int32/max, int8/min, double/avg, bfloat16/sum,
//    uint64/bit_xor, the user struct span2 with the user operator widen,
//    __half/sum; __half and __nv_bfloat16 accumulate in float), every other
//    policy the core ones (float/sum, int32/max, int8/min, double/avg,
//    bfloat16/sum: element sizes 1, 2, 4 and 8, an operator with an
//    epilogue), and every policy that keeps operand order also the
//    non-commutative user operator (composition of affine maps on uint32);
//  - the public stream-ordered forms of every collective, sync and _async
//    (futures), stream_wait, CUDA graph capture of two collectives with
//    different policies and three replays, barrier;
//  - group launch: 20 AllReduces of mixed sizes and policies (ring, direct,
//    LL, automatic) and an AllGather in one group per rank, a group captured
//    in a CUDA graph and replayed, refusals (another stream, group_end
//    without a group), the scope form with an _async call inside;
//  - the exchange collectives (all_to_all, all_gatherv, reduce_scatterv,
//    all_to_allv; float), sync with a policy type and _async with the
//    default, in and out of place, counts with zeros freed as soon as each
//    call returns, exact results and guards; all_to_allv captured in a CUDA
//    graph and replayed with new inputs; split by parity (an odd n's last
//    rank passes -1) with an all_reduce on each new communicator, and a
//    rank that never calls split (the others fail);
//  - automatic with the non-commutative operator: correct results for
//    AllReduce, ReduceScatter and Reduce up to sizes where it picks ring<>
//    or hierarchical<> for a commutative one, and automatic::choose never
//    names a reordering algorithm (ring, tree, hierarchical) for it;
//  - deterministic<> gives bitwise-identical results for non-integer float
//    inputs (AllReduce in and out of place, ReduceScatter, Reduce) with
//    different channel counts and chunk sizes (deterministic<ring<>>: 1
//    channel, 256 KiB; deterministic<ring<4 channels, 64 KiB>>;
//    deterministic<automatic>), equal to the serial left fold in rank order
//    and to what direct<2 channels> and two_shot<4 channels> give, while
//    ring<> gives other bits (so the inputs tell orders apart);
//  - scratch limits: a fixed policy whose scratch does not fit is refused
//    at issue naming gpu::options::scratch_bytes; automatic leaves such
//    algorithms out and still runs;
//  - bad input: a host pointer, different counts on different ranks
//    (checked mode), a rank that never joins (the others time out), a
//    device pointer on a threads communicator, a policy value that
//    reorders operands with the non-commutative operator and one with a
//    tuning out of range (refused at issue).
//
// Integer-valued inputs make every float and integer result exact whatever
// the reduction order; bfloat16 and half are checked against a float64
// reference with a relative bound.
//
// How it is built: one kernel per (element type, operator) runs every
// policy (the schedule is data), so the policies cost nothing to compile
// and iterate at run time; the pairs' kernels are spread over this file
// (float/sum, bfloat16/sum, affine/compose), gpu_suite_pairs_a.cu
// (int32/max, int8/min, double/avg) and gpu_suite_pairs_b.cu
// (uint64/bit_xor, span2/widen, __half/sum), about six kernels each,
// compiled in parallel (gpu_suite.hpp). `--quick` runs the small matrix everywhere.
//
// Without a device it prints "CHORUS_SKIP: no CUDA device" and exits 77
// (CTest: Skipped): then it only proves that all of this compiles.
#include "gpu_suite.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

int chorus_gpu_suite::g_failures = 0;
int chorus_gpu_suite::g_cases = 0;

std::vector<chorus_gpu_suite::pair_case> chorus_gpu_suite::pairs_main() {
    return {
        make_pair_case<float, chorus::sum>("float/sum", true, pair_case::every_policy),
        make_pair_case<__nv_bfloat16, chorus::sum>("bfloat16/sum", true, pair_case::every_policy),
        make_pair_case<affine, compose>("affine/compose", true, pair_case::none),
    };
}

namespace {

using namespace chorus_gpu_suite;

// ---------------------------------------------------------------------------
// The policies
// ---------------------------------------------------------------------------

struct policy_case {
    std::string name;
    chorus::policy pol;
    bool split = false;     //!< on communicators with a node split (node_split_size)
    bool all_pairs = false; //!< every (element type, operator), else the core pairs
    std::vector<int> full_at; //!< rank counts that run the full matrix (every count)
};

//! Ranks per node of the communicators of a `split` policy_case.
int node_split_size(int n) { return n % 2 == 0 ? n / 2 : 1; }

std::vector<policy_case> policy_cases() {
    using namespace chorus;
    using ring4 = ring<ring_params{4, 64 << 10}>;
    using ring2 = ring<ring_params{2, 64 << 10}>;
    using direct2 = direct<direct_params{2, 1 << 20}>;
    std::vector<policy_case> v = {
        {"", policy_of<ring4>, false, true, {2, 4, 8}},
        {"", policy_of<direct2>, false, true, {2, 4}},
        {"", policy_of<ring<>>, false, false, {}},
        {"", policy_of<direct<>>, false, false, {}},
        {"", policy_of<hierarchical<ring2, direct2>>, true, false, {4}},
        {"", policy_of<hierarchical<direct2, ring2>>, true, false, {}},
        {"", policy_of<tree<tree_params{2, 16 << 10}>>, false, false, {4, 6}},
        {"", policy_of<tree<>>, false, false, {}},
        {"", policy_of<recursive_doubling<recursive_params{2, 16 << 10}>>, false, false, {4, 6}},
        {"", policy_of<recursive_doubling<>>, false, false, {}},
        {"", policy_of<rabenseifner<recursive_params{3, 16 << 10}>>, false, false, {4, 6}},
        {"", policy_of<rabenseifner<>>, false, false, {}},
        {"", policy_of<two_shot<recursive_params{4, 64 << 10}>>, false, false, {4, 6}},
        {"", policy_of<two_shot<>>, false, false, {}},
        {"", policy_of<automatic>, false, false, {4, 6}},
        {"", policy_of<automatic>, true, false, {}},
        {"", policy_of<deterministic<ring4>>, false, false, {4, 6}},
        {"", policy_of<deterministic<>>, false, false, {}},
    };
    for (auto& c : v) c.name = detail::policy_text(c.pol) + (c.split ? " (node split)" : "");
    return v;
}

// Runs one part of the suite on new communicators: a chorus::error that
// escapes it (a call refused at issue, or communicators broken by a failed
// collective, on which every later call throws) fails that part only.
template <class F>
void on_fresh_world(const char* what, const std::vector<int>& devs, const chorus::gpu::options& opt, F&& f) {
    try {
        world w(devs, opt);
        f(w);
    } catch (const chorus::error& e) {
        ++g_failures;
        std::printf("FAIL %s on %zu ranks: %s\n", what, devs.size(), e.what());
    }
}

//! One policy's matrix (see the file comment) over `pairs`.
void matrix(world& w, const policy_case& pc, const std::vector<pair_case>& pairs, bool full) {
    using chorus::collective;
    const int n = w.size();
    constexpr std::uint64_t largest = 1000003;
    std::vector<std::uint64_t> counts{1, 1009};
    if (full) counts = {0, 1, std::uint64_t(n + 1), 1009, largest};
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                            collective::broadcast, collective::reduce}) {
        const bool copies = coll == collective::all_gather || coll == collective::broadcast;
        for (std::uint64_t count : counts) {
            for (bool ip : {false, true}) {
                if (ip && coll == collective::broadcast) continue;
                for (const pair_case& p : pairs) {
                    if (!p.commutative && pc.pol.reorders_operands()) continue;
                    if (copies && !p.copies) continue;
                    if (count == largest && (p.largest == pair_case::none ||
                                             (p.largest == pair_case::every_pair_policies && !pc.all_pairs)))
                        continue;
                    (void)p.run(w, pc.pol, pc.name.c_str(), coll, count, ip);
                }
            }
        }
    }
}

//! Every policy on the ranks `devs`.
void run_policies(const std::vector<int>& devs, bool quick, const std::vector<pair_case>& all,
                  const std::vector<pair_case>& core) {
    const int n = int(devs.size());
    for (const policy_case& pc : policy_cases()) {
        chorus::gpu::options opt;
        if (pc.split) opt.ranks_per_node = node_split_size(n);
        const bool full = !quick && std::find(pc.full_at.begin(), pc.full_at.end(), n) != pc.full_at.end();
        const int before = g_failures, cases = g_cases;
        on_fresh_world(pc.name.c_str(), devs, opt,
                       [&](world& w) { matrix(w, pc, pc.all_pairs ? all : core, full); });
        std::printf("  %s, %d ranks%s: %d case(s) %s\n", pc.name.c_str(), n, full ? ", full" : "", g_cases - cases,
                    g_failures == before ? "ok" : "FAILED");
    }
}

// ---------------------------------------------------------------------------
// Futures, stream_wait, graphs, the public stream-ordered forms
// ---------------------------------------------------------------------------

//! Refills every rank's buffer with `count` copies of value(r).
template <class F>
void fill_constant(world& w, std::vector<dev_buf<float>>& b, std::uint64_t count, F value) {
    for (int r = 0; r < w.size(); ++r) {
        w.set_device(r);
        b[std::size_t(r)].upload(std::vector<float>(count, value(r)));
    }
}

//! One device buffer per rank holding `count` copies of value(r).
template <class F>
std::vector<dev_buf<float>> constant_bufs(world& w, std::uint64_t count, F value) {
    std::vector<dev_buf<float>> b;
    for (int r = 0; r < w.size(); ++r) {
        w.set_device(r);
        b.emplace_back(count);
    }
    fill_constant(w, b, count, value);
    return b;
}

//! Every element of every rank's buffer (elements [first, first + count)) is `want`.
bool all_equal(world& w, std::vector<dev_buf<float>>& b, std::uint64_t first, std::uint64_t count, float want,
               int only_rank = -1) {
    bool ok = true;
    for (int r = 0; r < w.size(); ++r) {
        if (only_rank >= 0 && r != only_rank) continue;
        w.set_device(r);
        const std::vector<float> h = b[std::size_t(r)].download();
        for (std::uint64_t i = first; i < first + count; ++i) ok = ok && h[i] == want;
    }
    return ok;
}

void async_and_graphs(world& w) {
    const int n = w.size();
    const std::uint64_t count = 4099;
    auto bufs = constant_bufs(w, count, [](int r) { return float(r + 1); });
    // _async: a future backed by an event; stream_wait orders another stream after it.
    std::vector<chorus::future> fs;
    for (int r = 0; r < n; ++r)
        fs.push_back(chorus::all_reduce_async(w.comm(r), std::span<float>(bufs[std::size_t(r)].data(), count),
                                              chorus::sum{}, w.stream(r)));
    cudaStream_t other;
    w.set_device(0);
    cuda_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate");
    chorus::gpu::stream_wait(other, fs[0]);
    cuda_ok(cudaStreamSynchronize(other), "other");
    cudaStreamDestroy(other);
    for (auto& f : fs) f.wait();
    EXPECT(fs[0].ready(), "future ready after wait");
    EXPECT(all_equal(w, bufs, 0, count, float(n * (n + 1) / 2)), "async all_reduce on %d ranks", n);
    ++g_cases;

    // CUDA graphs: capture two AllReduces per rank (a policy type through the
    // public form, then a policy value through detail::all_reduce_run), replay three times.
    const chorus::policy direct_value = chorus::policy::fixed(chorus::algorithm::direct, {2, 4096});
    {
        rank_graphs graphs(w, [&](int r) {
            float* p = bufs[std::size_t(r)].data();
            chorus::all_reduce<chorus::ring<chorus::ring_params{2, 4096}>>(w.comm(r), std::span<float>(p, count),
                                                                           chorus::sum{}, w.stream(r));
            on_stream{w.comm(r), w.stream(r), direct_value}.all_reduce<float>(p, p, count, chorus::sum{});
        });
        for (int rep = 0; rep < 3; ++rep) {
            fill_constant(w, bufs, count, [rep](int r) { return float(r + rep); });
            graphs.replay();
            const float wr = float(n) * float(n * (n - 1) / 2 + n * rep); // the sum, then n times the sum
            EXPECT(all_equal(w, bufs, 0, count, wr), "graph replay %d on %d ranks: want %f", rep, n, double(wr));
            ++g_cases;
        }
    }

    // barrier
    for (int r = 0; r < n; ++r) chorus::barrier(w.comm(r), w.stream(r));
    w.sync();
    ++g_cases;
}

// The public stream-ordered forms of the other collectives (the matrix
// calls detail::*_run with policy values): each sync and _async, with a
// policy type and the default (automatic).
void public_forms(world& w) {
    using chorus::direct;
    using chorus::ring;
    const int n = w.size();
    const int root = n - 1;
    const std::uint64_t c = 257;
    const float total = float(n * (n + 1) / 2); // inputs r + 1
    for (bool async : {false, true}) {
        auto in = constant_bufs(w, c * std::uint64_t(n), [](int r) { return float(r + 1); });
        auto gathered = constant_bufs(w, c * std::uint64_t(n), [](int) { return -1.f; });
        auto scattered = constant_bufs(w, c, [](int) { return -1.f; });
        auto bcast = constant_bufs(w, c, [](int r) { return float(r + 1); });
        auto reduced = constant_bufs(w, c, [](int) { return -1.f; });
        std::vector<chorus::future> fs;
        for (int r = 0; r < n; ++r) {
            auto& comm = w.comm(r);
            cudaStream_t s = w.stream(r);
            const std::span<const float> mine(in[std::size_t(r)].data(), c);
            const std::span<const float> blocks(in[std::size_t(r)].data(), c * std::uint64_t(n));
            const std::span<float> g(gathered[std::size_t(r)].data(), c * std::uint64_t(n));
            const std::span<float> sc(scattered[std::size_t(r)].data(), c);
            const std::span<float> bc(bcast[std::size_t(r)].data(), c);
            const std::span<float> red(reduced[std::size_t(r)].data(), c);
            if (async) {
                fs.push_back(chorus::all_gather_async(comm, mine, g, s));
                fs.push_back(chorus::reduce_scatter_async(comm, blocks, sc, chorus::sum{}, s));
                fs.push_back(chorus::broadcast_async(comm, bc, root, s));
                fs.push_back(chorus::reduce_async(comm, mine, red, chorus::sum{}, root, s));
            } else {
                chorus::all_gather<ring<>>(comm, mine, g, s);
                chorus::reduce_scatter<direct<>>(comm, blocks, sc, chorus::sum{}, s);
                chorus::broadcast<ring<>>(comm, bc, root, s);
                chorus::reduce<direct<>>(comm, mine, red, chorus::sum{}, root, s);
            }
        }
        if (async)
            for (auto& f : fs) f.wait();
        else w.sync();
        bool gather_ok = true;
        for (int q = 0; q < n; ++q)
            gather_ok = gather_ok && all_equal(w, gathered, std::uint64_t(q) * c, c, float(q + 1));
        const char* form = async ? "_async" : "sync";
        EXPECT(gather_ok, "all_gather (%s) on %d ranks", form, n);
        EXPECT(all_equal(w, scattered, 0, c, total), "reduce_scatter (%s) on %d ranks", form, n);
        EXPECT(all_equal(w, bcast, 0, c, float(root + 1)), "broadcast (%s) on %d ranks", form, n);
        EXPECT(all_equal(w, reduced, 0, c, total, root), "reduce (%s) on %d ranks", form, n);
        g_cases += 4;
    }
}

// ---------------------------------------------------------------------------
// The exchange collectives: all_to_all, all_to_allv, all_gatherv,
// reduce_scatterv (float; the counts through the rank's device counts area)
// ---------------------------------------------------------------------------

//! One device buffer per rank holding `h[r]` (the host vectors), plus 4
//! guard elements of -7 at the end.
std::vector<dev_buf<float>> upload_all(world& w, const std::vector<std::vector<float>>& h) {
    std::vector<dev_buf<float>> b;
    for (int r = 0; r < w.size(); ++r) {
        w.set_device(r);
        std::vector<float> v = h[std::size_t(r)];
        v.insert(v.end(), 4, -7.f);
        b.emplace_back(v.size());
        b.back().upload(v);
    }
    return b;
}

//! Rank r's buffer equals want[r] followed by the 4 guards (count mismatches).
int wrong_elements(world& w, std::vector<dev_buf<float>>& b, const std::vector<std::vector<float>>& want) {
    int wrong = 0;
    for (int r = 0; r < w.size(); ++r) {
        w.set_device(r);
        const std::vector<float> h = b[std::size_t(r)].download();
        const std::vector<float>& x = want[std::size_t(r)];
        for (std::size_t i = 0; i < h.size(); ++i) wrong += h[i] != (i < x.size() ? x[i] : -7.f);
    }
    return wrong;
}

//! The four exchange collectives on `w`, each out of place and in place,
//! sync with a policy type and _async with the default, with counts that
//! include zeros and are freed as soon as each call returns; then
//! all_to_allv captured in a CUDA graph and replayed with new inputs.
void exchange_forms(world& w) {
    using chorus::direct;
    using chorus::ring;
    const int n = w.size();
    const std::size_t nn = std::size_t(n);
    auto val = [](int r, std::size_t i) { return float(r * 10000 + int(i)); };
    // counts: AllGatherV / ReduceScatterV (rank 1 contributes nothing), AllToAllV (symmetric, zeros on
    // part of the diagonal, so every rank sends what it receives and the call can run in place).
    std::vector<std::size_t> vc(nn), mc(nn * nn);
    for (std::size_t q = 0; q < nn; ++q) vc[q] = q == 1 ? 0 : (q * 37 + 5) % 50 + 1;
    for (std::size_t a = 0; a < nn; ++a)
        for (std::size_t b = 0; b < nn; ++b) mc[a * nn + b] = (std::min(a, b) * 3 + std::max(a, b) * 5) % 9 * 7;
    std::vector<std::size_t> D(nn + 1, 0);
    for (std::size_t q = 0; q < nn; ++q) D[q + 1] = D[q] + vc[q];
    const std::size_t total = D[nn];
    const std::size_t c = 129; // AllToAll block
    for (bool async : {false, true}) {
        for (bool in_place : {false, true}) {
            const char* form = async ? "_async" : "sync";
            const char* where = in_place ? "in place" : "out of place";
            // --- all_to_all
            {
                std::vector<std::vector<float>> in(nn), want(nn), out0(nn, std::vector<float>(c * nn, -1.f));
                for (int r = 0; r < n; ++r)
                    for (std::size_t i = 0; i < c * nn; ++i) {
                        in[std::size_t(r)].push_back(val(r, i));
                        want[std::size_t(r)].push_back(val(int(i / c), std::size_t(r) * c + i % c));
                    }
                auto ib = upload_all(w, in);
                auto ob = upload_all(w, out0);
                std::vector<chorus::future> fs;
                for (int r = 0; r < n; ++r) {
                    float* ip = ib[std::size_t(r)].data();
                    float* op = in_place ? ip : ob[std::size_t(r)].data();
                    const std::span<const float> i(ip, c * nn);
                    const std::span<float> o(op, c * nn);
                    if (async) fs.push_back(chorus::all_to_all_async(w.comm(r), i, o, w.stream(r)));
                    else chorus::all_to_all<direct<chorus::direct_params{2, 256}>>(w.comm(r), i, o, w.stream(r));
                }
                for (auto& f : fs) f.wait();
                w.sync();
                EXPECT(wrong_elements(w, in_place ? ib : ob, want) == 0, "all_to_all (%s, %s) on %d ranks", form,
                       where, n);
                ++g_cases;
            }
            // --- all_gatherv: out = in_0 | in_1 | ... (in place: in is block r of out)
            {
                std::vector<std::vector<float>> in(nn), out0(nn, std::vector<float>(total, -1.f)), want(nn);
                for (int r = 0; r < n; ++r) {
                    for (std::size_t j = 0; j < vc[std::size_t(r)]; ++j) in[std::size_t(r)].push_back(val(r, j));
                    if (in_place)
                        for (std::size_t j = 0; j < vc[std::size_t(r)]; ++j)
                            out0[std::size_t(r)][D[std::size_t(r)] + j] = val(r, j);
                    for (std::size_t q = 0; q < nn; ++q)
                        for (std::size_t j = 0; j < vc[q]; ++j) want[std::size_t(r)].push_back(val(int(q), j));
                }
                auto ib = upload_all(w, in);
                auto ob = upload_all(w, out0);
                std::vector<chorus::future> fs;
                for (int r = 0; r < n; ++r) {
                    const std::vector<std::size_t> counts = vc; // freed when the call has returned
                    float* op = ob[std::size_t(r)].data();
                    const float* ip = in_place ? op + D[std::size_t(r)] : ib[std::size_t(r)].data();
                    const std::span<const float> i(ip, vc[std::size_t(r)]);
                    const std::span<float> o(op, total);
                    if (async) fs.push_back(chorus::all_gatherv_async(w.comm(r), i, o, counts, w.stream(r)));
                    else chorus::all_gatherv<ring<chorus::ring_params{3, 64}>>(w.comm(r), i, o, counts, w.stream(r));
                }
                for (auto& f : fs) f.wait();
                w.sync();
                EXPECT(wrong_elements(w, ob, want) == 0, "all_gatherv (%s, %s) on %d ranks", form, where, n);
                ++g_cases;
            }
            // --- reduce_scatterv (sum): out = block r of the sum (in place: out is block r of in)
            {
                std::vector<std::vector<float>> in(nn), out0(nn), want(nn), want_in(nn);
                for (int r = 0; r < n; ++r) {
                    for (std::size_t i = 0; i < total; ++i) in[std::size_t(r)].push_back(float(r + 1 + int(i % 7)));
                    out0[std::size_t(r)].assign(vc[std::size_t(r)], -1.f);
                    for (std::size_t j = 0; j < vc[std::size_t(r)]; ++j)
                        want[std::size_t(r)].push_back(
                            float(n * (n + 1) / 2 + n * int((D[std::size_t(r)] + j) % 7)));
                    want_in[std::size_t(r)] = in[std::size_t(r)];
                    for (std::size_t j = 0; j < vc[std::size_t(r)]; ++j)
                        want_in[std::size_t(r)][D[std::size_t(r)] + j] = want[std::size_t(r)][j];
                }
                auto ib = upload_all(w, in);
                auto ob = upload_all(w, out0);
                std::vector<chorus::future> fs;
                for (int r = 0; r < n; ++r) {
                    const std::vector<std::size_t> counts = vc;
                    float* ip = ib[std::size_t(r)].data();
                    float* op = in_place ? ip + D[std::size_t(r)] : ob[std::size_t(r)].data();
                    const std::span<const float> i(ip, total);
                    const std::span<float> o(op, vc[std::size_t(r)]);
                    if (async)
                        fs.push_back(chorus::reduce_scatterv_async(w.comm(r), i, o, counts, chorus::sum{}, w.stream(r)));
                    else chorus::reduce_scatterv<direct<>>(w.comm(r), i, o, counts, chorus::sum{}, w.stream(r));
                }
                for (auto& f : fs) f.wait();
                w.sync();
                EXPECT(wrong_elements(w, in_place ? ib : ob, in_place ? want_in : want) == 0,
                       "reduce_scatterv (%s, %s) on %d ranks", form, where, n);
                ++g_cases;
            }
            // --- all_to_allv
            {
                std::vector<std::vector<float>> in(nn), out0(nn), want(nn);
                for (std::size_t r = 0; r < nn; ++r) {
                    std::size_t sends = 0;
                    for (std::size_t j = 0; j < nn; ++j) sends += mc[r * nn + j];
                    for (std::size_t i = 0; i < sends; ++i) in[r].push_back(val(int(r), i));
                    for (std::size_t q = 0; q < nn; ++q) {
                        std::size_t s = 0; // where q's block for r starts in q's `in`
                        for (std::size_t j = 0; j < r; ++j) s += mc[q * nn + j];
                        for (std::size_t j = 0; j < mc[q * nn + r]; ++j) want[r].push_back(val(int(q), s + j));
                    }
                    out0[r].assign(want[r].size(), -1.f);
                }
                auto ib = upload_all(w, in);
                auto ob = upload_all(w, out0);
                std::vector<chorus::future> fs;
                for (int r = 0; r < n; ++r) {
                    const std::vector<std::size_t> counts = mc;
                    float* ip = ib[std::size_t(r)].data();
                    float* op = in_place ? ip : ob[std::size_t(r)].data();
                    const std::span<const float> i(ip, in[std::size_t(r)].size());
                    const std::span<float> o(op, want[std::size_t(r)].size());
                    if (async) fs.push_back(chorus::all_to_allv_async(w.comm(r), i, o, counts, w.stream(r)));
                    else chorus::all_to_allv<ring<chorus::ring_params{2, 128}>>(w.comm(r), i, o, counts, w.stream(r));
                }
                for (auto& f : fs) f.wait();
                w.sync();
                EXPECT(wrong_elements(w, in_place ? ib : ob, want) == 0, "all_to_allv (%s, %s) on %d ranks", form,
                       where, n);
                ++g_cases;
            }
        }
    }
    // CUDA graphs: all_to_allv captured per rank (the counts vector is gone
    // before the replays), replayed twice with new inputs.
    {
        std::vector<std::vector<float>> in(nn), want(nn);
        std::vector<std::size_t> sends(nn, 0), recvs(nn, 0);
        for (std::size_t r = 0; r < nn; ++r)
            for (std::size_t j = 0; j < nn; ++j) {
                sends[r] += mc[r * nn + j];
                recvs[r] += mc[j * nn + r];
            }
        std::vector<std::vector<float>> out0(nn);
        for (std::size_t r = 0; r < nn; ++r) out0[r].assign(recvs[r], -1.f);
        for (std::size_t r = 0; r < nn; ++r) in[r].assign(sends[r], 0.f);
        auto ib = upload_all(w, in);
        auto ob = upload_all(w, out0);
        rank_graphs graphs(w, [&](int r) {
            const std::vector<std::size_t> counts = mc;
            chorus::all_to_allv<direct<chorus::direct_params{2, 256}>>(
                w.comm(r), std::span<const float>(ib[std::size_t(r)].data(), sends[std::size_t(r)]),
                std::span<float>(ob[std::size_t(r)].data(), recvs[std::size_t(r)]), counts, w.stream(r));
        });
        for (int rep = 0; rep < 2; ++rep) {
            for (std::size_t r = 0; r < nn; ++r) {
                in[r].clear();
                for (std::size_t i = 0; i < sends[r]; ++i) in[r].push_back(val(int(r), i) + float(rep));
                w.set_device(int(r));
                ib[r].upload(in[r]);
                want[r].clear();
                for (std::size_t q = 0; q < nn; ++q) {
                    std::size_t s = 0;
                    for (std::size_t j = 0; j < r; ++j) s += mc[q * nn + j];
                    for (std::size_t j = 0; j < mc[q * nn + r]; ++j) want[r].push_back(val(int(q), s + j) + float(rep));
                }
            }
            graphs.replay();
            EXPECT(wrong_elements(w, ob, want) == 0, "all_to_allv graph replay %d on %d ranks", rep, n);
            ++g_cases;
        }
    }
}

// split: every rank on its own host thread (split blocks until all came);
// colors by parity (odd n: the last rank passes -1 and gets nullptr), keys
// reversing the order; an all_reduce on each new communicator.
void split_forms(const std::vector<int>& devs) {
    world w(devs);
    const int n = w.size();
    const int failures_before = g_failures;
    std::vector<std::unique_ptr<chorus::gpu::communicator>> sub(static_cast<std::size_t>(n));
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
        ts.emplace_back([&, r] {
            try {
                const int color = (n % 2 == 1 && r == n - 1) ? -1 : r % 2;
                sub[std::size_t(r)] = w.comm(r).split(color, n - r);
            } catch (const chorus::error& e) {
                errors[std::size_t(r)] = e.what();
            }
        });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) EXPECT(errors[std::size_t(r)].empty(), "split on rank %d: %s", r, errors[std::size_t(r)].c_str());
    if (g_failures != failures_before) return;
    for (int r = 0; r < n; ++r) {
        const bool none = n % 2 == 1 && r == n - 1;
        EXPECT((sub[std::size_t(r)] == nullptr) == none, "split: rank %d %s a communicator", r, none ? "got" : "lacks");
    }
    // Color c holds the ranks r % 2 == c (but an odd n's last), in decreasing old rank.
    std::vector<std::vector<int>> members(2);
    for (int r = n - 1; r >= 0; --r)
        if (!(n % 2 == 1 && r == n - 1)) members[std::size_t(r % 2)].push_back(r);
    const std::uint64_t count = 1031;
    std::vector<dev_buf<float>> bufs;
    std::vector<cudaStream_t> streams(std::size_t(n), nullptr);
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        bufs.emplace_back(count);
        bufs.back().upload(std::vector<float>(count, float(r + 1)));
        auto* c = sub[std::size_t(r)].get();
        if (!c) continue;
        const auto& m = members[std::size_t(r % 2)];
        EXPECT(c->size() == int(m.size()), "split: rank %d's communicator has %d ranks, want %zu", r, c->size(), m.size());
        EXPECT(c->rank() == int(std::find(m.begin(), m.end(), r) - m.begin()), "split: rank %d has new rank %d", r,
               c->rank());
        cuda_ok(cudaStreamCreateWithFlags(&streams[std::size_t(r)], cudaStreamNonBlocking), "cudaStreamCreate");
        chorus::all_reduce(*c, std::span<float>(bufs.back().data(), count), chorus::sum{}, streams[std::size_t(r)]);
    }
    for (int r = 0; r < n; ++r) {
        if (!sub[std::size_t(r)]) continue;
        w.set_device(r);
        cuda_ok(cudaStreamSynchronize(streams[std::size_t(r)]), "cudaStreamSynchronize");
        sub[std::size_t(r)]->check();
        float want = 0;
        for (int q : members[std::size_t(r % 2)]) want += float(q + 1);
        const std::vector<float> h = bufs[std::size_t(r)].download();
        bool ok = true;
        for (float x : h) ok = ok && x == want;
        EXPECT(ok, "split: all_reduce on rank %d's new communicator: want %f", r, double(want));
        cudaStreamDestroy(streams[std::size_t(r)]);
    }
    g_cases += 2;
    // A rank that never calls split: the others fail (timeout or aborted), never hang.
    {
        world w2(devs);
        for (int r = 0; r < n; ++r) w2.comm(r).set_timeout(std::chrono::milliseconds(500));
        std::vector<int> failed(std::size_t(n), 0);
        std::vector<std::thread> ts2;
        for (int r = 0; r + 1 < n; ++r)
            ts2.emplace_back([&, r] {
                try {
                    (void)w2.comm(r).split(0, r);
                } catch (const chorus::error& e) {
                    failed[std::size_t(r)] = e.code() == chorus::errc::timeout || e.code() == chorus::errc::aborted;
                }
            });
        for (auto& t : ts2) t.join();
        bool all = true;
        for (int r = 0; r + 1 < n; ++r) all = all && failed[std::size_t(r)];
        EXPECT(all, "split with rank %d missing: the others fail", n - 1);
        ++g_cases;
    }
}

// ---------------------------------------------------------------------------
// automatic with a non-commutative operator
// ---------------------------------------------------------------------------

// It may only pick algorithms that keep rank order (direct, two_shot,
// recursive_doubling, rabenseifner), and the results are the left fold in
// rank order.
void non_commutative_automatic(world& w, bool full) {
    using chorus::collective;
    using chorus::model::algorithm;
    const int n = w.size();
    const chorus::model::topology topo = w.topology();
    const chorus::policy automatic = chorus::policy::automatic();
    std::vector<std::uint64_t> counts = {1, std::uint64_t(n + 1), 1009, 65537};
    if (full) counts.push_back(1000003);
    std::string picks, commutative_picks;
    for (collective coll : {collective::all_reduce, collective::reduce_scatter, collective::reduce}) {
        for (std::uint64_t count : counts) {
            for (bool ip : {false, true}) {
                // What automatic chooses for this call, as the backend asks (rank 0's arguments).
                chorus::schedule_args a{};
                a.coll = coll;
                a.rank = 0;
                a.nranks = n;
                a.root = coll == collective::reduce ? n - 1 : 0;
                a.count = count;
                a.elem_bytes = sizeof(affine);
                a.in_place = ip;
                a.node_size = w.node_size();
                a.commutative = false;
                a.topo = &topo;
                a.scratch_limit_bytes = w.opt.scratch_bytes;
                const algorithm pick = chorus::automatic::choose(a);
                a.commutative = true;
                const algorithm if_commutative = chorus::automatic::choose(a);
                const bool reorders =
                    pick == algorithm::ring || pick == algorithm::tree || pick == algorithm::hierarchical;
                EXPECT(!reorders, "automatic picked %s for a non-commutative operator: %s n=%d count=%llu",
                       chorus::model::algorithm_name(pick), chorus::collective_name(coll), n,
                       static_cast<unsigned long long>(count));
                if (!ip) {
                    char buf[160];
                    std::snprintf(buf, sizeof buf, " %s/%llu:%s", chorus::collective_name(coll),
                                  static_cast<unsigned long long>(count), chorus::model::algorithm_name(pick));
                    picks += buf;
                    std::snprintf(buf, sizeof buf, " %s/%llu:%s", chorus::collective_name(coll),
                                  static_cast<unsigned long long>(count),
                                  chorus::model::algorithm_name(if_commutative));
                    commutative_picks += buf;
                }
                run_case<affine>(w, automatic, "automatic", coll, count, ip, compose{}, "affine/compose");
            }
        }
    }
    std::printf("  n=%d automatic, non-commutative:%s\n  n=%d automatic, same calls if commutative:%s\n", n,
                picks.c_str(), n, commutative_picks.c_str());
}

// ---------------------------------------------------------------------------
// deterministic<>: the same bits whatever the tuning
// ---------------------------------------------------------------------------

// Non-integer floats spanning magnitudes: the rounding of every addition
// depends on the order of the operands.
std::uint64_t mix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
float noisy(int r, std::uint64_t i) {
    const std::uint64_t h = mix64(std::uint64_t(r) * 1000003u + i);
    const float mant = float(h % 1000003) / 7919.0f;
    const int e = int((h >> 20) % 24) - 12;
    return std::ldexp(mant, e) * ((h >> 40) & 1 ? -1.0f : 1.0f);
}

// Every rank's noisy() input of `len` elements.
std::vector<std::vector<float>> noisy_inputs(int n, std::uint64_t len) {
    std::vector<std::vector<float>> in(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        in[std::size_t(r)].resize(len);
        for (std::uint64_t i = 0; i < len; ++i) in[std::size_t(r)][i] = noisy(r, i);
    }
    return in;
}

// One float sum reduction (all_reduce, reduce_scatter out of place, or
// reduce to rank n-1 out of place) of the inputs `host_in` (count, or
// count * n for reduce_scatter, per rank) with policy `pol`: the results of
// every rank that has one (reduce: the root only), or nothing when the
// call failed.
std::vector<std::vector<float>> reduce_bits(world& w, const chorus::policy& pol, chorus::collective coll,
                                            std::uint64_t count, bool in_place,
                                            const std::vector<std::vector<float>>& host_in) {
    using chorus::collective;
    const int n = w.size();
    const int root = n - 1;
    const std::uint64_t in_len = coll == collective::reduce_scatter ? count * std::uint64_t(n) : count;
    std::vector<dev_buf<float>> in, out;
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        in.emplace_back(in_len);
        in.back().upload(host_in[std::size_t(r)]);
        out.emplace_back(count);
        out.back().upload(std::vector<float>(count, 0.f));
    }
    for (int r = 0; r < n; ++r) {
        on_stream call{w.comm(r), w.stream(r), pol};
        float* ip = in[std::size_t(r)].data();
        float* op = out[std::size_t(r)].data();
        switch (coll) {
        case collective::all_reduce: call.all_reduce<float>(ip, in_place ? ip : op, count, chorus::sum{}); break;
        case collective::reduce_scatter: call.reduce_scatter<float>(ip, op, count, chorus::sum{}); break;
        default: call.reduce<float>(ip, op, count, chorus::sum{}, root); break;
        }
    }
    std::vector<std::vector<float>> got;
    try {
        w.sync();
    } catch (const chorus::error& e) {
        std::printf("  error: %s\n", e.what());
        return got;
    }
    for (int r = 0; r < n; ++r) {
        if (coll == collective::reduce && r != root) continue;
        w.set_device(r);
        std::vector<float> h = (coll == collective::all_reduce && in_place ? in : out)[std::size_t(r)].download();
        h.resize(count);
        got.push_back(std::move(h));
    }
    return got;
}

// The serial left fold in rank order 0..n-1 of what reduce_bits reduces
// (one vector per rank that has a result).
std::vector<std::vector<float>> left_fold(int n, chorus::collective coll, std::uint64_t count,
                                          const std::vector<std::vector<float>>& in) {
    std::vector<std::vector<float>> want;
    for (int r = 0; r < n; ++r) {
        if (coll == chorus::collective::reduce && r != n - 1) continue;
        const std::uint64_t base = coll == chorus::collective::reduce_scatter ? std::uint64_t(r) * count : 0;
        std::vector<float> v(count);
        for (std::uint64_t i = 0; i < count; ++i) {
            float acc = in[0][base + i];
            for (int q = 1; q < n; ++q) acc = acc + in[std::size_t(q)][base + i];
            v[i] = acc;
        }
        want.push_back(std::move(v));
    }
    return want;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t r = 0; r < a.size(); ++r)
        if (a[r].size() != b[r].size() || std::memcmp(a[r].data(), b[r].data(), a[r].size() * sizeof(float)) != 0)
            return false;
    return true;
}

// deterministic<> is bitwise reproducible: the same bits with different
// channel counts and chunk sizes, equal to the serial left fold, which
// direct<> and two_shot<> (the policies deterministic<> runs) compute too;
// the ring's order differs (so these inputs tell orders apart).
// The LL protocol (algo/ll.hpp, exec/lane_ll.hpp): direct<> with
// protocol::ll and automatic on calls that fit the LL region (default
// 64 KiB per rank pair), exact results over sizes 1..16K floats, many
// calls in a row (both call parities, slot reuse), the other LL
// collectives, and a captured LL AllReduce replayed from a graph.
void ll_protocol(world& w) {
    const int n = w.size();
    if (n < 2) return;
    const chorus::policy ll = chorus::policy_of<chorus::direct<chorus::direct_params{.proto = chorus::protocol::ll}>>;
    const chorus::policy aut = chorus::policy::automatic();
    int call = 0;
    for (std::uint64_t count : {1ull, 2ull, 3ull, 5ull, 31ull, 256ull, 1000ull, 4097ull, 16384ull}) {
        for (int rep = 0; rep < 3; ++rep, ++call) {
            auto bufs = constant_bufs(w, count, [&](int r) { return float(r + 1 + call); });
            const chorus::policy& pol = (call & 1) ? ll : aut;
            for (int r = 0; r < n; ++r) {
                w.set_device(r);
                float* p = bufs[std::size_t(r)].data();
                on_stream{w.comm(r), w.stream(r), pol}.all_reduce<float>(p, p, count, chorus::sum{});
            }
            w.sync();
            const float want = float(n * (n + 1) / 2 + n * call);
            EXPECT(all_equal(w, bufs, 0, count, want), "LL all_reduce %llu floats on %d ranks (call %d)",
                   static_cast<unsigned long long>(count), n, call);
            EXPECT(std::string(w.comm(0).last_call().algorithm) == "direct_ll", "LL all_reduce ran %s",
                   w.comm(0).last_call().algorithm);
            ++g_cases;
        }
    }
    // The other LL collectives, small.
    for (std::uint64_t count : {1ull, 7ull, 1024ull}) {
        auto in = constant_bufs(w, count * std::uint64_t(n), [](int r) { return float(r + 1); });
        auto out = constant_bufs(w, count * std::uint64_t(n), [](int) { return 0.0f; });
        for (int r = 0; r < n; ++r) {
            w.set_device(r);
            on_stream{w.comm(r), w.stream(r), ll}.reduce_scatter<float>(in[std::size_t(r)].data(),
                                                                        out[std::size_t(r)].data(), count,
                                                                        chorus::sum{});
        }
        w.sync();
        EXPECT(all_equal(w, out, 0, count, float(n * (n + 1) / 2)), "LL reduce_scatter %llu", (unsigned long long)count);
        for (int r = 0; r < n; ++r) {
            w.set_device(r);
            on_stream{w.comm(r), w.stream(r), ll}.broadcast<float>(in[std::size_t(r)].data(), count, n - 1);
        }
        w.sync();
        EXPECT(all_equal(w, in, 0, count, float(n)), "LL broadcast %llu", (unsigned long long)count);
        ++g_cases;
    }
    // A captured LL AllReduce, replayed: the call number comes from device memory.
    const std::uint64_t count = 1000;
    auto bufs = constant_bufs(w, count, [](int r) { return float(r); });
    rank_graphs graphs(w, [&](int r) {
        float* p = bufs[std::size_t(r)].data();
        on_stream{w.comm(r), w.stream(r), ll}.all_reduce<float>(p, p, count, chorus::sum{});
    });
    for (int rep = 0; rep < 5; ++rep) {
        fill_constant(w, bufs, count, [rep](int r) { return float(r + rep); });
        graphs.replay();
        const float want = float(n * (n - 1) / 2 + n * rep);
        EXPECT(all_equal(w, bufs, 0, count, want), "LL graph replay %d on %d ranks", rep, n);
        ++g_cases;
    }
}

// Group launch (collectives/gpu_group.hpp): 20 AllReduces of different
// sizes and policies (ring 4 channels, direct 2 channels, LL, automatic)
// with an AllGather (another operator: its own launch) in the middle, in
// one group per rank (group_start/group_end on every rank, then every
// rank's calls: more than one launch's capacity); then a group of two
// captured in a CUDA graph and replayed; a call on another stream refused
// inside a group (nothing queued), group_end without a group refused; the
// scope form, with an _async call inside (its future covers the queued calls).
void group_launch(world& w) {
    using namespace chorus;
    const int n = w.size();
    const policy pols[] = {policy_of<ring<ring_params{4, 64 << 10}>>, policy_of<direct<direct_params{2, 1 << 20}>>,
                           policy_of<direct<direct_params{.proto = protocol::ll}>>, policy::automatic()};
    const int calls = 20;
    std::vector<std::uint64_t> counts;
    std::vector<std::vector<dev_buf<float>>> bufs;
    for (int k = 0; k < calls; ++k) {
        counts.push_back(std::uint64_t(1 + (k * 997) % 5000));
        bufs.push_back(constant_bufs(w, counts.back(), [k](int r) { return float(r + 1 + k); }));
    }
    const std::uint64_t gc = 33;
    auto gin = constant_bufs(w, gc, [](int r) { return float(r + 1); });
    auto gout = constant_bufs(w, gc * std::uint64_t(n), [](int) { return -1.f; });
    for (int r = 0; r < n; ++r) gpu::group_start(w.comm(r), w.stream(r));
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        for (int k = 0; k < calls; ++k) {
            float* p = bufs[std::size_t(k)][std::size_t(r)].data();
            on_stream{w.comm(r), w.stream(r), pols[k % 4]}.all_reduce<float>(p, p, counts[std::size_t(k)], sum{});
            if (k == 9)
                all_gather(w.comm(r), std::span<const float>(gin[std::size_t(r)].data(), gc),
                           std::span<float>(gout[std::size_t(r)].data(), gc * std::uint64_t(n)), w.stream(r));
        }
    }
    for (int r = 0; r < n; ++r) gpu::group_end(w.comm(r));
    w.sync();
    for (int k = 0; k < calls; ++k)
        EXPECT(all_equal(w, bufs[std::size_t(k)], 0, counts[std::size_t(k)], float(n * (n + 1) / 2 + n * k)),
               "grouped all_reduce %d (%llu floats) on %d ranks", k, (unsigned long long)counts[std::size_t(k)], n);
    bool gathered = true;
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        const std::vector<float> h = gout[std::size_t(r)].download();
        for (std::uint64_t i = 0; i < h.size(); ++i) gathered = gathered && h[i] == float(i / gc + 1);
    }
    EXPECT(gathered, "grouped all_gather on %d ranks", n);
    ++g_cases;

    // A group captured in a CUDA graph, replayed with new inputs.
    {
        rank_graphs graphs(w, [&](int r) {
            gpu::group grp(w.comm(r), w.stream(r));
            for (int k = 0; k < 2; ++k) {
                float* p = bufs[std::size_t(k)][std::size_t(r)].data();
                all_reduce(w.comm(r), std::span<float>(p, counts[std::size_t(k)]), sum{}, w.stream(r));
            }
        });
        for (int rep = 0; rep < 3; ++rep) {
            for (int k = 0; k < 2; ++k)
                fill_constant(w, bufs[std::size_t(k)], counts[std::size_t(k)],
                              [rep, k](int r) { return float(r + rep + k); });
            graphs.replay();
            for (int k = 0; k < 2; ++k)
                EXPECT(all_equal(w, bufs[std::size_t(k)], 0, counts[std::size_t(k)],
                                 float(n * (n - 1) / 2 + n * (rep + k))),
                       "grouped graph replay %d, call %d on %d ranks", rep, k, n);
            ++g_cases;
        }
    }

    // Refusals: another stream inside a group, group_end without a group.
    {
        cudaStream_t other;
        w.set_device(0);
        cuda_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate");
        gpu::group_start(w.comm(0), w.stream(0));
        bool refused = false;
        try {
            all_reduce(w.comm(0), std::span<float>(bufs[0][0].data(), counts[0]), sum{}, other);
        } catch (const error& e) {
            refused = e.code() == errc::invalid_argument && std::string(e.what()).find("`stream`") != std::string::npos;
        }
        EXPECT(refused, "a call on another stream inside a group is refused");
        EXPECT(w.comm(0).transport().group_drop() == 0, "the refused call was not queued");
        cudaStreamDestroy(other);
        refused = false;
        try {
            gpu::group_end(w.comm(0));
        } catch (const error& e) {
            refused = e.code() == errc::invalid_argument;
        }
        EXPECT(refused, "group_end without a group is refused");
        ++g_cases;
    }

    // The scope form with an _async call: its future waits for the calls queued before it.
    // (Inputs first: upload() synchronises the device, which must not
    // happen while a rank's group holds calls its peers' kernels wait for.)
    for (int k = 0; k < 3; ++k) fill_constant(w, bufs[std::size_t(k)], counts[std::size_t(k)], [](int r) { return float(r); });
    std::vector<future> fs;
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        gpu::group grp(w.comm(r), w.stream(r));
        for (int k = 0; k < 3; ++k) {
            float* p = bufs[std::size_t(k)][std::size_t(r)].data();
            if (k < 2) all_reduce(w.comm(r), std::span<float>(p, counts[std::size_t(k)]), sum{}, w.stream(r));
            else fs.push_back(all_reduce_async(w.comm(r), std::span<float>(p, counts[std::size_t(k)]), sum{}, w.stream(r)));
        }
    }
    for (auto& f : fs) f.wait();
    for (int k = 0; k < 3; ++k)
        EXPECT(all_equal(w, bufs[std::size_t(k)], 0, counts[std::size_t(k)], float(n * (n - 1) / 2)),
               "scope group call %d with a future on %d ranks", k, n);
    ++g_cases;
}

void deterministic_bits(world& w) {
    using namespace chorus;
    using chorus::collective;
    struct named {
        const char* name;
        policy pol;
    };
    const named deterministic_ones[] = {
        {"deterministic<ring<1ch,256K>>", policy_of<deterministic<ring<>>>},
        {"deterministic<ring<4ch,64K>>", policy_of<deterministic<ring<ring_params{4, 64 << 10}>>>},
        {"deterministic<automatic>", policy_of<deterministic<>>},
        {"direct<2ch,1M>", policy_of<direct<direct_params{2, 1 << 20}>>},
        {"two_shot<4ch,64K>", policy_of<two_shot<recursive_params{4, 64 << 10}>>},
    };
    const policy reordering = policy_of<ring<ring_params{4, 64 << 10}>>;
    const int n = w.size();
    bool ring_differs = false;
    for (std::uint64_t count : {std::uint64_t(1), std::uint64_t(1009), std::uint64_t(65537), std::uint64_t(262147)}) {
        const auto in_vec = noisy_inputs(n, count);                       // all_reduce, reduce
        const auto in_blocks = noisy_inputs(n, count * std::uint64_t(n)); // reduce_scatter
        struct call {
            collective coll;
            bool in_place;
        };
        for (call c : {call{collective::all_reduce, false}, call{collective::all_reduce, true},
                       call{collective::reduce_scatter, false}, call{collective::reduce, false}}) {
            const auto& in = c.coll == collective::reduce_scatter ? in_blocks : in_vec;
            const auto want = left_fold(n, c.coll, count, in);
            const char* cn = chorus::collective_name(c.coll);
            const unsigned long long cnt = count;
            for (const named& p : deterministic_ones) {
                const auto got = reduce_bits(w, p.pol, c.coll, count, c.in_place, in);
                ++g_cases;
                EXPECT(!got.empty() && same_bits(got, want), "%s is not the left fold: %s n=%d count=%llu in_place=%d",
                       p.name, cn, n, cnt, int(c.in_place));
            }
            if (c.coll == collective::all_reduce && !c.in_place && count >= 1009) {
                const auto r = reduce_bits(w, reordering, c.coll, count, false, in);
                ++g_cases;
                EXPECT(!r.empty(), "ring<4ch,64K> all_reduce failed: n=%d count=%llu", n, cnt);
                if (!r.empty() && !same_bits(r, want)) ring_differs = true;
            }
        }
    }
    // With 2 ranks every order is the same sum; from 3 on the ring's is not the left fold.
    if (n >= 3) EXPECT(ring_differs, "n=%d: ring<> gave the left fold's bits: the inputs do not tell orders apart", n);
}

// ---------------------------------------------------------------------------
// Scratch limits, bad input
// ---------------------------------------------------------------------------

// A fixed policy whose scratch does not fit is refused at issue, naming
// gpu::options::scratch_bytes, on every rank (nothing is enqueued);
// automatic leaves such algorithms out and runs one that fits.
void scratch_limits(const std::vector<int>& devs) {
    chorus::gpu::options opt;
    opt.scratch_bytes = 64 << 10;
    world w(devs, opt);
    const int n = w.size();
    const std::uint64_t count = std::uint64_t(1) << 18; // 1 MiB of floats: recursive_doubling<> needs m+1 copies
    w.set_device(0);
    dev_buf<float> buf(count);
    buf.upload(std::vector<float>(count, 1.f));
    int refused = 0;
    std::string first;
    for (int r = 0; r < n; ++r) {
        try {
            chorus::all_reduce<chorus::recursive_doubling<>>(w.comm(r), std::span<float>(buf.data(), count),
                                                             chorus::sum{}, w.stream(r));
        } catch (const chorus::error& e) {
            const std::string what = e.what();
            if (e.code() == chorus::errc::invalid_argument &&
                what.find("gpu::options::scratch_bytes") != std::string::npos)
                ++refused;
            if (first.empty()) first = what;
        }
    }
    std::printf("  scratch too small: %s\n", first.c_str());
    EXPECT(refused == n, "recursive_doubling<> with 64 KiB of scratch: %d of %d ranks refused naming "
           "gpu::options::scratch_bytes", refused, n);
    ++g_cases;
    try {
        w.sync(); // nothing was enqueued: the communicators are still usable
    } catch (const chorus::error& e) {
        std::printf("  error after the refused calls: %s\n", e.what());
        ++g_failures;
        return;
    }
    const chorus::policy automatic = chorus::policy::automatic();
    run_case<float>(w, automatic, "automatic", chorus::collective::all_reduce, count, false, chorus::sum{}, "float");
    run_case<float>(w, automatic, "automatic", chorus::collective::all_reduce, count, true, chorus::sum{}, "float");
}

struct failure_tally {
    int errors = 0;
    int mismatches = 0;
    std::string first;
};

// Rank r issues an AllReduce of counts[r] floats (none when 0); then every
// rank that issued one reports whether it failed.
failure_tally failing_all_reduce(world& w, const std::vector<std::size_t>& counts) {
    const int n = w.size();
    auto bufs = constant_bufs(w, 64, [](int) { return 1.f; });
    for (int r = 0; r < n; ++r)
        if (counts[std::size_t(r)] != 0)
            chorus::all_reduce(w.comm(r), std::span<float>(bufs[std::size_t(r)].data(), counts[std::size_t(r)]),
                               chorus::sum{}, w.stream(r));
    failure_tally t;
    for (int r = 0; r < n; ++r) {
        if (counts[std::size_t(r)] == 0) continue;
        cuda_ok(cudaStreamSynchronize(w.stream(r)), "sync");
        try {
            w.comm(r).check();
        } catch (const chorus::error& e) {
            ++t.errors;
            if (e.code() == chorus::errc::mismatch) ++t.mismatches;
            if (t.first.empty()) t.first = e.what();
        }
    }
    return t;
}

void bad_input(const std::vector<int>& devs) {
    // A host pointer is refused by name before anything is enqueued.
    {
        world w(devs);
        std::vector<float> host(16, 1.f);
        bool refused = false;
        try {
            chorus::all_reduce(w.comm(0), std::span<float>(host), chorus::sum{}, w.stream(0));
        } catch (const chorus::error& e) {
            refused = e.code() == chorus::errc::invalid_argument &&
                      std::string(e.what()).find("`in`") != std::string::npos;
            std::printf("  host pointer: %s\n", e.what());
        }
        EXPECT(refused, "host pointer refused");
        ++g_cases;
    }
    // Different counts on different ranks: every rank fails with an error, nobody hangs.
    {
        world w(devs);
        for (auto& c : w.comms) c.set_checked(true);
        std::vector<std::size_t> counts(w.comms.size(), 64);
        counts[1] = 63;
        const failure_tally t = failing_all_reduce(w, counts);
        std::printf("  mismatch: %s\n", t.first.c_str());
        EXPECT(t.errors == w.size() && t.mismatches >= 1, "mismatch: %d errors, %d mismatches", t.errors, t.mismatches);
        ++g_cases;
    }
    // A rank that never joins: the others time out instead of hanging.
    {
        world w(devs);
        for (auto& c : w.comms) c.set_timeout(std::chrono::milliseconds(300));
        std::vector<std::size_t> counts(w.comms.size(), 64);
        counts.back() = 0; // the last rank issues nothing
        const auto t0 = std::chrono::steady_clock::now();
        const failure_tally t = failing_all_reduce(w, counts);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  never joins: %s\n", t.first.c_str());
        EXPECT(t.errors == w.size() - 1 && secs < 10, "never joins: %d errors after %.2f s", t.errors, secs);
        ++g_cases;
    }
    // Policy values that a policy type would refuse at compile time are refused at issue
    // (invalid_argument, nothing enqueued): a reordering algorithm with the non-commutative
    // operator, and tunings out of range.
    {
        using chorus::algorithm;
        using chorus::policy;
        world w(devs);
        w.set_device(0);
        dev_buf<affine> a(16);
        dev_buf<float> f(16);
        auto refused = [&](const policy& p, auto call) {
            try {
                call(on_stream{w.comm(0), w.stream(0), p});
            } catch (const chorus::error& e) {
                return e.code() == chorus::errc::invalid_argument;
            }
            return false;
        };
        const policy reordering[] = {policy::fixed(algorithm::ring), policy::fixed(algorithm::tree),
                                     policy::fixed(algorithm::hierarchical)};
        for (const policy& p : reordering) {
            const std::string name = chorus::detail::policy_text(p);
            EXPECT(refused(p, [&](on_stream s) { s.all_reduce<affine>(a.data(), a.data(), 16, compose{}); }),
                   "%s all_reduce with a non-commutative operator not refused", name.c_str());
            EXPECT(refused(p, [&](on_stream s) { s.reduce<affine>(a.data(), a.data(), 16, compose{}, 0); }),
                   "%s reduce with a non-commutative operator not refused", name.c_str());
            g_cases += 2;
        }
        const policy bad_tunings[] = {policy::fixed(algorithm::ring, {-1, 1 << 16}),
                                      policy::fixed(algorithm::direct, {chorus::max_channels + 1, 1 << 16}),
                                      policy::fixed(algorithm::two_shot, {1, 8})};
        for (const policy& p : bad_tunings) {
            EXPECT(refused(p, [&](on_stream s) { s.all_reduce<float>(f.data(), f.data(), 16, chorus::sum{}); }),
                   "tuning channels=%d chunk_bytes=%llu not refused", p.tune.channels,
                   static_cast<unsigned long long>(p.tune.chunk_bytes));
            ++g_cases;
        }
        try {
            w.sync(); // nothing was enqueued
        } catch (const chorus::error& e) {
            std::printf("FAIL error after the refused policies: %s\n", e.what());
            ++g_failures;
        }
    }
    // A device pointer handed to a threads communicator is refused too.
    {
        float* d = nullptr;
        cuda_ok(cudaMalloc(&d, 64 * sizeof(float)), "cudaMalloc");
        bool refused = false;
        chorus::run_threads(1, [&](chorus::communicator<chorus::threads>& comm) {
            try {
                chorus::all_reduce(comm, std::span<float>(d, 64), chorus::sum{});
            } catch (const chorus::error& e) {
                refused = e.code() == chorus::errc::invalid_argument;
            }
        });
        cudaFree(d);
        EXPECT(refused, "device pointer on a threads communicator refused");
        ++g_cases;
    }
}

//! Everything but the scratch limits and bad input on the ranks `devs`.
void run_all(const std::vector<int>& devs, bool quick, const std::vector<pair_case>& all,
             const std::vector<pair_case>& core) {
    const int n = int(devs.size());
    run_policies(devs, quick, all, core);
    on_fresh_world("futures, stream_wait, graphs, barrier", devs, {}, [&](world& w) { async_and_graphs(w); });
    on_fresh_world("public stream-ordered forms", devs, {}, [&](world& w) { public_forms(w); });
    on_fresh_world("exchange collectives", devs, {}, [&](world& w) { exchange_forms(w); });
    try {
        split_forms(devs);
    } catch (const chorus::error& e) {
        ++g_failures;
        std::printf("FAIL split on %d ranks: %s\n", n, e.what());
    }
    // full: up to 8 MB, where automatic would pick ring<> for a commutative operator on 2-3 ranks
    on_fresh_world("automatic, non-commutative operator", devs, {},
                   [&](world& w) { non_commutative_automatic(w, !quick && n <= 3); });
    if (n == 4) { // with a node split, where it would pick hierarchical<> for a commutative one
        chorus::gpu::options opt;
        opt.ranks_per_node = 2;
        on_fresh_world("automatic, non-commutative operator, node split", devs, opt,
                       [&](world& w) { non_commutative_automatic(w, !quick); });
    }
    on_fresh_world("deterministic<> bits", devs, {}, [&](world& w) { deterministic_bits(w); });
    on_fresh_world("LL protocol", devs, {}, [&](world& w) { ll_protocol(w); });
    on_fresh_world("group launch", devs, {}, [&](world& w) { group_launch(w); });
}

} // namespace

int main(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        // Even here: asking for GPU communicators fails with a clear error.
        try {
            (void)chorus::gpu::make_communicators({0, 0});
            std::printf("FAIL: make_communicators without a device did not throw\n");
            return 1;
        } catch (const chorus::error& e) {
            if (e.code() != chorus::errc::unavailable) {
                std::printf("FAIL: make_communicators without a device: %s\n", e.what());
                return 1;
            }
            std::printf("without a device: %s\n", e.what());
        }
        std::printf("CHORUS_SKIP: no CUDA device\n");
        return 77;
    }
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("device 0: %s, %d device(s)\n", prop.name, devices);
    std::vector<pair_case> all = pairs_main(), core;
    for (auto more : {pairs_a(), pairs_b()}) all.insert(all.end(), more.begin(), more.end());
    for (const pair_case& p : all)
        if (p.core) core.push_back(p);
    for (int n : {2, 3, 4, 6, 8}) {
        const int before = g_failures;
        run_all(std::vector<int>(static_cast<std::size_t>(n), 0), quick, all, core);
        std::printf("virtual ranks %d on device 0: %s\n", n, g_failures == before ? "ok" : "FAILED");
    }
    for (int n : {2, 3, 5}) p2p_cases(std::vector<int>(static_cast<std::size_t>(n), 0));
    for (int n : {2, 3, 4}) train_cases(std::vector<int>(static_cast<std::size_t>(n), 0));
    if (devices >= 2) {
        std::vector<int> devs;
        for (int d = 0; d < devices && d < 8; ++d) devs.push_back(d);
        p2p_cases(devs);
    }
    if (devices >= 2) {
        std::vector<int> devs;
        for (int d = 0; d < devices && d < 8; ++d) devs.push_back(d);
        const int before = g_failures;
        run_all(devs, quick, all, core);
        std::printf("one rank per device on %d devices: %s\n", int(devs.size()),
                    g_failures == before ? "ok" : "FAILED");
    }
    try {
        scratch_limits(std::vector<int>(4, 0));
    } catch (const chorus::error& e) {
        ++g_failures;
        std::printf("FAIL scratch limits: %s\n", e.what());
    }
    bad_input(std::vector<int>(4, 0));
    std::printf("%s: %d case(s), %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_cases, g_failures);
    return g_failures ? 1 : 0;
}
