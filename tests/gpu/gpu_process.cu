// One process per GPU (backend/gpu_process.hpp), run under mpiexec with
// 2, 4 and 8 processes, all on device 0 (CUDA IPC between processes of one
// device is allowed; their kernels share the GPU by time slicing).
// Covered, with (float, sum) on integer-valued data compared exactly:
//   - make_communicator over MPI_COMM_WORLD and over a unique_id (rank 0
//     makes it, MPI_Bcast hands it out);
//   - ring<>, direct<> and automatic x AllReduce (also in place),
//     AllGather, ReduceScatter, Broadcast, Reduce x counts 0, 1, 13, 3001
//     x buffers from comm.alloc (zero-copy), plain cudaMalloc buffers
//     (staged through the shared scratch) and mixed (even ranks
//     registered, odd ranks staged); Barrier; calls on a user stream and
//     on the communicator's own; one large staged AllReduce;
//   - all_to_allv, all_gatherv, reduce_scatterv and all_to_all on
//     buffers from comm.alloc (counts with zeros), a cudaMalloc buffer
//     refused by name, split refused by name (not available here);
//   - bad arguments named (`rank`, `nranks`, `device`), comm.alloc's
//     errors and reuse after free;
//   - register_buffer of cudaMalloc buffers (one at an allocation's
//     middle): AllReduce (also in place), AllGather, ReduceScatter and
//     all_to_all (never staged) on them, exact; after deregister_buffer
//     all_to_all is refused again; misuse (empty, host memory, comm.alloc
//     memory, past the allocation, a stale handle, one rank's refusal
//     named on its peers, the 14-registration limit, twice over time,
//     a make_communicators communicator);
//   - a mismatch (rank 0 passes another count): every rank fails, at
//     least one with errc::mismatch, none hangs;
//   - a process killed while the others are inside a collective: rank 0
//     spawns `size` fresh copies of this program (not MPI processes: MPI
//     would take the whole job down with the dead one) that make a
//     communicator from a unique_id; the last one SIGKILLs itself and
//     the others must fail with errc::peer_failed naming it within the
//     timeout + 1 s.
// Without a CUDA device every rank checks that make_communicator (both
// forms) fails with errc::unavailable, prints "CHORUS_SKIP: no CUDA
// device" and exits 77 (CTest: Skipped). Written without ever having run
// on a GPU: see docs/gpu.md.

#include <chorus/gpu_mpi.hpp>

#include "../expected_sum.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

int g_rank = 0;
int g_failures = 0;

void fail(const std::string& what) {
    std::printf("FAIL rank %d: %s\n", g_rank, what.c_str());
    std::fflush(stdout);
    ++g_failures;
}
void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::printf("FAIL rank %d: %s: %s\n", g_rank, what, cudaGetErrorString(e));
        std::fflush(stdout);
        std::exit(1);
    }
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Integer-valued, small: every sum of 8 ranks is exact in float.
float value_of(int rank, std::uint64_t i) { return float((std::uint64_t(rank) * 7 + i * 3) % 61); }

// Expects `call` to throw chorus::error with `code` and a message holding `part`.
template <class F>
void expect_error(const char* what, chorus::errc code, const std::string& part, F&& call) {
    try {
        call();
    } catch (const chorus::error& e) {
        if (e.code() != code || !contains(e.what(), part))
            fail(std::string(what) + ": wrong error (" + chorus::to_string(e.code()) + "): " + e.what());
        return;
    }
    fail(std::string(what) + ": no error");
}

enum class mem { registered, staged, mixed };
const char* mem_name(mem m) { return m == mem::registered ? "registered" : m == mem::staged ? "staged" : "mixed"; }

constexpr std::uint64_t max_count = 3001;

struct buffers {
    std::span<float> reg_in, reg_out; // comm.alloc: the registered area
    float* priv_in = nullptr;         // cudaMalloc: staged
    float* priv_out = nullptr;
    std::uint64_t elems = 0;
};

buffers make_buffers(chorus::gpu::communicator& comm, std::uint64_t elems) {
    buffers b;
    b.elems = elems;
    b.reg_in = comm.alloc<float>(elems);
    b.reg_out = comm.alloc<float>(elems);
    cuda_ok(cudaMalloc(&b.priv_in, elems * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&b.priv_out, elems * sizeof(float)), "cudaMalloc");
    return b;
}
void free_buffers(chorus::gpu::communicator& comm, buffers& b) {
    comm.free(b.reg_in);
    comm.free(b.reg_out);
    cudaFree(b.priv_in);
    cudaFree(b.priv_out);
}

// One collective on this rank, checked element by element. `in_place`:
// AllReduce on one buffer. `on_own_stream`: the call without a stream.
template <class Algo>
void run_call(chorus::gpu::communicator& comm, buffers& b, const char* algo, chorus::collective coll,
              std::uint64_t count, mem m, bool in_place, cudaStream_t st, bool on_own_stream) {
    using chorus::collective;
    const int n = comm.size(), rank = comm.rank(), root = n - 1;
    const bool reg = m == mem::registered || (m == mem::mixed && rank % 2 == 0);
    const std::uint64_t in_len = coll == collective::reduce_scatter ? count * std::uint64_t(n) : count;
    const std::uint64_t out_len = coll == collective::all_gather ? count * std::uint64_t(n) : count;
    const std::size_t off = std::size_t(rank % 3); // misaligned by 0, 1, 2 elements
    float* in = (reg ? b.reg_in.data() : b.priv_in) + off;
    float* out = (reg ? b.reg_out.data() : b.priv_out) + off;
    if (in_place || coll == collective::broadcast) out = in;
    std::vector<float> host(std::size_t(std::max(in_len, out_len)) + 1);
    for (std::uint64_t i = 0; i < in_len; ++i)
        host[i] = coll == collective::broadcast && rank != root ? 0.f : value_of(rank, i);
    cuda_ok(cudaMemcpy(in, host.data(), in_len * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    if (out != in) {
        std::vector<float> minus(std::size_t(out_len) + 1, -1.f);
        cuda_ok(cudaMemcpy(out, minus.data(), out_len * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    const std::string name = std::string(algo) + " " + chorus::collective_name(coll) + " count " +
                             std::to_string(count) + " " + mem_name(m) + (in_place ? " in place" : "") +
                             (on_own_stream ? " (own stream)" : "");
    std::span<const float> sin(in, in_len);
    std::span<float> sout(out, out_len);
    try {
        if (on_own_stream) {
            switch (coll) {
            case collective::all_reduce:
                if (in_place) chorus::all_reduce<Algo>(comm, sout);
                else chorus::all_reduce<Algo>(comm, sin, sout);
                break;
            case collective::all_gather: chorus::all_gather<Algo>(comm, sin, sout); break;
            case collective::reduce_scatter: chorus::reduce_scatter<Algo>(comm, sin, sout); break;
            case collective::broadcast: chorus::broadcast<Algo>(comm, sout, root); break;
            case collective::reduce: chorus::reduce<Algo>(comm, sin, sout, chorus::sum{}, root); break;
            default: break;
            }
        } else {
            switch (coll) {
            case collective::all_reduce:
                if (in_place) chorus::all_reduce<Algo>(comm, sout, chorus::sum{}, st);
                else chorus::all_reduce<Algo>(comm, sin, sout, chorus::sum{}, st);
                break;
            case collective::all_gather: chorus::all_gather<Algo>(comm, sin, sout, st); break;
            case collective::reduce_scatter: chorus::reduce_scatter<Algo>(comm, sin, sout, chorus::sum{}, st); break;
            case collective::broadcast: chorus::broadcast<Algo>(comm, sout, root, st); break;
            case collective::reduce: chorus::reduce<Algo>(comm, sin, sout, chorus::sum{}, root, st); break;
            default: break;
            }
            cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
            comm.check();
        }
    } catch (const chorus::error& e) {
        fail(name + ": " + chorus::to_string(e.code()) + ": " + e.what());
        return;
    }
    if (coll == collective::reduce && rank != root) return;
    cuda_ok(cudaMemcpy(host.data(), out, out_len * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::uint64_t wrong = 0, first = 0;
    for (std::uint64_t i = 0; i < out_len; ++i) {
        const float want = chorus_test::expected_sum(coll, rank, n, root, count, i, value_of);
        if (host[i] != want && wrong++ == 0) first = i;
    }
    if (wrong != 0)
        fail(name + ": " + std::to_string(wrong) + " wrong elements, the first at " + std::to_string(first) + ": " +
             std::to_string(host[first]));
}

template <class Algo>
void matrix(chorus::gpu::communicator& comm, buffers& b, const char* algo, cudaStream_t st) {
    using chorus::collective;
    for (mem m : {mem::registered, mem::staged, mem::mixed})
        for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce})
            for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(13), max_count}) {
                run_call<Algo>(comm, b, algo, coll, count, m, false, st, count == 13);
                if (coll == collective::all_reduce && count != 0)
                    run_call<Algo>(comm, b, algo, coll, count, m, true, st, false);
            }
}

chorus::gpu::options test_options(int n) {
    chorus::gpu::options opt;
    const std::uint64_t buf = (max_count * std::uint64_t(n) + 8) * sizeof(float);
    opt.scratch_bytes = std::size_t(8) << 20; // the large staged AllReduce below: 2 x 1 MiB + the schedule's
    opt.registered_bytes = std::size_t(2 * buf + 4096);
    return opt;
}

// --- the killed process (children spawned by rank 0) ------------------------

constexpr int kill_timeout_ms = 5000;

// A child: rank `rank` of `n` at `id`; the last rank kills itself while
// the others are inside an AllReduce. Exit 0: as expected.
int child_main(const char* id_text, int rank, int n) {
    g_rank = rank;
    chorus::unique_id id;
    std::strncpy(id.internal, id_text, sizeof id.internal - 1);
    chorus::gpu::options opt;
    opt.scratch_bytes = std::size_t(1) << 20;
    opt.registered_bytes = std::size_t(1) << 20;
    try {
        auto comm = chorus::gpu::make_communicator(id, rank, n, 0, opt);
        comm.set_timeout(std::chrono::milliseconds(kill_timeout_ms));
        auto buf = comm.alloc<float>(1024);
        chorus::all_reduce<chorus::ring<>>(comm, buf); // everyone is up
        if (rank == n - 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(500)); // the others are waiting inside
            ::raise(SIGKILL);
        }
        const auto t0 = std::chrono::steady_clock::now();
        try {
            chorus::all_reduce<chorus::ring<>>(comm, buf);
            fail("child: the AllReduce with a dead peer did not fail");
        } catch (const chorus::error& e) {
            const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
            if (e.code() != chorus::errc::peer_failed || !contains(e.what(), "rank " + std::to_string(n - 1)))
                fail(std::string("child: wrong error (") + chorus::to_string(e.code()) + "): " + e.what());
            else if (ms > kill_timeout_ms + 1000)
                fail("child: peer_failed came after " + std::to_string(ms) + " ms (timeout " +
                     std::to_string(kill_timeout_ms) + " ms + 1 s)");
            else
                std::printf("rank %d: %lld ms after the call: %s\n", rank, static_cast<long long>(ms), e.what());
        }
    } catch (const chorus::error& e) {
        fail(std::string("child: ") + chorus::to_string(e.code()) + ": " + e.what());
    }
    std::fflush(stdout);
    return g_failures == 0 ? 0 : 1;
}

// Rank 0 of the MPI job: spawns `n` children, waits for them (60 s at
// most, then kills them), checks how each ended.
void kill_test(const char* self, int n) {
    const chorus::unique_id id = chorus::make_unique_id();
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
        const std::string rs = std::to_string(r), ns = std::to_string(n);
        char* argv[] = {const_cast<char*>(self), const_cast<char*>("--child"), const_cast<char*>(id.internal),
                        const_cast<char*>(rs.c_str()), const_cast<char*>(ns.c_str()), nullptr};
        pid_t pid = 0;
        if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) {
            fail("posix_spawn failed");
            break;
        }
        pids.push_back(pid);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (std::size_t r = 0; r < pids.size(); ++r) {
        int status = 0;
        for (;;) {
            const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
            if (got == pids[r]) break;
            if (std::chrono::steady_clock::now() > deadline) {
                for (pid_t p : pids) ::kill(p, SIGKILL);
                fail("kill test: children still running after 60 s (killed)");
                ::waitpid(pids[r], &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const bool victim = int(r) == n - 1;
        if (victim && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
            fail("kill test: the victim did not die of SIGKILL (status " + std::to_string(status) + ")");
        if (!victim && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            fail("kill test: child " + std::to_string(r) + " failed (status " + std::to_string(status) + ")");
    }
}

} // namespace

// The exchange collectives on registered buffers (comm.alloc), counts
// with zeros, on a user stream, compared exactly; a cudaMalloc buffer is
// refused by name (these are not staged); split is refused by name.
void exchange(chorus::gpu::communicator& comm, buffers& b, cudaStream_t st) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t nn = std::size_t(n), ru = std::size_t(r);
    auto check = [&](const char* what, std::uint64_t len, const std::vector<float>& want) {
        cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        comm.check();
        std::vector<float> h(len);
        cuda_ok(cudaMemcpy(h.data(), b.reg_out.data(), len * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
        std::uint64_t wrong = 0;
        for (std::uint64_t i = 0; i < len; ++i) wrong += h[i] != want[i];
        if (wrong) fail(std::string(what) + ": " + std::to_string(wrong) + " wrong elements");
    };
    auto upload = [&](std::uint64_t len, auto value) {
        std::vector<float> h(len);
        for (std::uint64_t i = 0; i < len; ++i) h[i] = value(i);
        cuda_ok(cudaMemcpy(b.reg_in.data(), h.data(), len * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    };
    try {
        // all_to_allv: counts[q * n + p] elements from q to p, zeros included.
        std::vector<std::size_t> mc(nn * nn);
        for (std::size_t i = 0; i < mc.size(); ++i) mc[i] = (i / nn * 3 + i % nn * 5) % 7 * 11;
        std::size_t sends = 0, recvs = 0;
        for (std::size_t j = 0; j < nn; ++j) {
            sends += mc[ru * nn + j];
            recvs += mc[j * nn + ru];
        }
        upload(sends, [&](std::uint64_t i) { return value_of(r, i); });
        std::vector<float> want;
        for (std::size_t q = 0; q < nn; ++q) {
            std::size_t s = 0;
            for (std::size_t j = 0; j < ru; ++j) s += mc[q * nn + j];
            for (std::size_t j = 0; j < mc[q * nn + ru]; ++j) want.push_back(value_of(int(q), s + j));
        }
        chorus::all_to_allv(comm, std::span<const float>(b.reg_in.data(), sends),
                            std::span<float>(b.reg_out.data(), recvs), std::span<const std::size_t>(mc), st);
        check("all_to_allv", recvs, want);
        // all_gatherv: rank 1 contributes nothing.
        std::vector<std::size_t> vc(nn), D(nn + 1, 0);
        for (std::size_t q = 0; q < nn; ++q) {
            vc[q] = q == 1 ? 0 : (q * 13 + 2) % 29 + 1;
            D[q + 1] = D[q] + vc[q];
        }
        upload(vc[ru], [&](std::uint64_t i) { return value_of(r, i); });
        want.clear();
        for (std::size_t q = 0; q < nn; ++q)
            for (std::size_t j = 0; j < vc[q]; ++j) want.push_back(value_of(int(q), j));
        chorus::all_gatherv<chorus::ring<>>(comm, std::span<const float>(b.reg_in.data(), vc[ru]),
                                            std::span<float>(b.reg_out.data(), D[nn]),
                                            std::span<const std::size_t>(vc), st);
        check("all_gatherv", D[nn], want);
        // reduce_scatterv (sum)
        upload(D[nn], [&](std::uint64_t i) { return value_of(r, i); });
        want.clear();
        for (std::size_t j = 0; j < vc[ru]; ++j) {
            float x = 0.f;
            for (int q = 0; q < n; ++q) x += value_of(q, D[ru] + j);
            want.push_back(x);
        }
        chorus::reduce_scatterv(comm, std::span<const float>(b.reg_in.data(), D[nn]),
                                std::span<float>(b.reg_out.data(), vc[ru]), std::span<const std::size_t>(vc),
                                chorus::sum{}, st);
        check("reduce_scatterv", vc[ru], want);
        // all_to_all, 101 elements per block
        const std::size_t c = 101;
        upload(c * nn, [&](std::uint64_t i) { return value_of(r, i); });
        want.clear();
        for (std::size_t i = 0; i < c * nn; ++i) want.push_back(value_of(int(i / c), ru * c + i % c));
        chorus::all_to_all<chorus::direct<>>(comm, std::span<const float>(b.reg_in.data(), c * nn),
                                             std::span<float>(b.reg_out.data(), c * nn), st);
        check("all_to_all", c * nn, want);
    } catch (const chorus::error& e) {
        fail(std::string("exchange collectives: ") + e.what());
    }
    expect_error("all_to_all on cudaMalloc memory", chorus::errc::invalid_argument, "comm.alloc", [&] {
        chorus::all_to_all(comm, std::span<const float>(b.priv_in, nn), std::span<float>(b.priv_out, nn), st);
    });
    expect_error("split with one process per GPU", chorus::errc::invalid_argument, "split",
                 [&] { (void)comm.split(0, r); });
}

// --- register_buffer: cudaMalloc memory every peer maps ---------------------

// Collectives on registered cudaMalloc buffers run zero-copy (all_to_all,
// which is never staged, runs on them, and stops running once they are
// deregistered); the misuse errors, named on every rank.
void registration(chorus::gpu::communicator& comm, cudaStream_t st) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t nn = std::size_t(n), ru = std::size_t(r);
    const std::uint64_t elems = max_count * std::uint64_t(n) + 8;
    // `in` is the second half of one allocation (not its start), `out` one of its own.
    float* in_alloc = nullptr;
    float* out = nullptr;
    cuda_ok(cudaMalloc(&in_alloc, 2 * elems * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&out, elems * sizeof(float)), "cudaMalloc");
    float* in = in_alloc + elems;
    chorus::gpu::buffer_handle h_in, h_out;
    try {
        h_in = comm.register_buffer(std::span<float>(in, elems));
        h_out = comm.register_buffer(std::span<float>(out, elems));
        if (!h_in || h_out.id != h_in.id + 1) fail("register_buffer: handles not consecutive");
    } catch (const chorus::error& e) {
        fail(std::string("register_buffer: ") + e.what());
        cudaFree(in_alloc);
        cudaFree(out);
        return;
    }
    buffers b;
    b.reg_in = std::span<float>(in, elems);
    b.reg_out = std::span<float>(out, elems);
    b.elems = elems;
    using chorus::collective;
    for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter}) {
        run_call<chorus::ring<>>(comm, b, "ring<> (register_buffer)", coll, max_count, mem::registered, false, st, false);
        run_call<chorus::direct<>>(comm, b, "direct<> (register_buffer)", coll, 13, mem::registered, false, st, true);
    }
    run_call<chorus::automatic>(comm, b, "automatic (register_buffer)", collective::all_reduce, max_count,
                                mem::registered, true, st, false);
    const std::size_t c = 101;
    auto all_to_all = [&] {
        chorus::all_to_all<chorus::direct<>>(comm, std::span<const float>(in, c * nn), std::span<float>(out, c * nn), st);
        cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        comm.check();
    };
    try {
        std::vector<float> h(c * nn);
        for (std::size_t i = 0; i < h.size(); ++i) h[i] = value_of(r, i);
        cuda_ok(cudaMemcpy(in, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
        all_to_all();
        cuda_ok(cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
        std::uint64_t wrong = 0;
        for (std::size_t i = 0; i < h.size(); ++i) wrong += h[i] != value_of(int(i / c), ru * c + i % c);
        if (wrong) fail("all_to_all on registered buffers: " + std::to_string(wrong) + " wrong elements");
    } catch (const chorus::error& e) {
        fail(std::string("all_to_all on registered buffers: ") + e.what());
    }
    try {
        comm.deregister_buffer(h_in);
        comm.deregister_buffer(h_out);
    } catch (const chorus::error& e) {
        fail(std::string("deregister_buffer: ") + e.what());
    }
    expect_error("all_to_all after deregistration", chorus::errc::invalid_argument, "comm.register_buffer", all_to_all);

    // Misuse: every rank refuses its own arguments (each names them).
    expect_error("register_buffer of nothing", chorus::errc::invalid_argument, "`buf` is empty",
                 [&] { (void)comm.register_buffer(std::span<float>(in, 0)); });
    std::vector<float> host(16);
    expect_error("register_buffer of host memory", chorus::errc::invalid_argument, "host memory",
                 [&] { (void)comm.register_buffer(std::span<float>(host)); });
    expect_error("deregister_buffer of a stale handle", chorus::errc::invalid_argument, "`handle`",
                 [&] { comm.deregister_buffer(h_in); });
    {
        auto a = comm.alloc<float>(64);
        expect_error("register_buffer of comm.alloc memory", chorus::errc::invalid_argument, "shared segment",
                     [&] { (void)comm.register_buffer(a); });
        comm.free(a);
    }
    // One rank's refusal: the others name it. (8 MiB past the end: past
    // whatever the driver rounds the allocation up to.)
    if (r == 0)
        expect_error("register_buffer past its allocation", chorus::errc::invalid_argument, "runs past the end",
                     [&] { (void)comm.register_buffer(std::span<float>(in, elems + (std::size_t(8) << 20) / 4)); });
    else
        expect_error("a peer's refusal", chorus::errc::peer_failed, "rank 0 refused",
                     [&] { (void)comm.register_buffer(std::span<float>(in, 16)); });
    // The limit: 14 registrations live (slices of one allocation), then
    // more over time.
    try {
        for (int round = 0; round < 2; ++round) {
            std::vector<chorus::gpu::buffer_handle> hs;
            for (int i = 0; i < 14; ++i) hs.push_back(comm.register_buffer(std::span<float>(in_alloc + i * 64, 64)));
            expect_error("the 15th registration", chorus::errc::invalid_argument, "max_lane_registrations",
                         [&] { (void)comm.register_buffer(std::span<float>(in_alloc + 20 * 64, 64)); });
            for (auto h : hs) comm.deregister_buffer(h);
        }
    } catch (const chorus::error& e) {
        fail(std::string("registration limit: ") + e.what());
    }
    cudaFree(in_alloc);
    cudaFree(out);
}

// --- emulated nodes: GPU ranks across nodes ----------------------------------

// With an even process count >= 4: two emulated nodes of size / 2 ranks
// (opt.ranks_per_node), so the inter-node step really goes through MPI
// (pinned host staging unless Open MPI is CUDA-aware) with device-resident
// buffers. hierarchical<> and automatic AllReduce (float sum, integer
// values: exact), sizes 1 .. ~1M including counts not divisible by the
// ranks, in place on cudaMalloc memory (staged inside the node) and out of
// place on registered memory; all_gather; broadcast from a rank of the
// other node; barrier; and the refusals (ring<>, reduce_scatter, send).
void across_nodes(int size, cudaStream_t st) {
    chorus::gpu::options opt = test_options(size);
    opt.ranks_per_node = size / 2;
    opt.scratch_bytes = std::size_t(24) << 20;  // 2^20 + 3 floats staged in place, plus the schedule's
    opt.inter_staging_bytes = 3 * (16 << 10);   // small slots: many chunks through the pipeline
    try {
        auto comm = chorus::gpu::make_communicator(MPI_COMM_WORLD, 0, opt);
        if (comm.rank() != g_rank || comm.size() != size) fail("across nodes: rank or size differ from MPI's");
        const std::uint64_t big = (std::uint64_t(1) << 20) + 3;
        float* d = nullptr;
        cuda_ok(cudaMalloc(&d, big * sizeof(float)), "cudaMalloc");
        std::vector<float> h(big);
        auto check_sum = [&](const char* what, const float* dev, std::uint64_t n) {
            cuda_ok(cudaMemcpy(h.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
            std::uint64_t wrong = 0;
            for (std::uint64_t i = 0; i < n; ++i) {
                float want = 0.f;
                for (int q = 0; q < size; ++q) want += value_of(q, i);
                wrong += h[i] != want;
            }
            if (wrong)
                fail(std::string("across nodes: ") + what + " of " + std::to_string(n) + ": " +
                     std::to_string(wrong) + " wrong elements");
        };
        auto fill = [&](float* dev, std::uint64_t n) {
            for (std::uint64_t i = 0; i < n; ++i) h[i] = value_of(g_rank, i);
            cuda_ok(cudaMemcpy(dev, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
        };
        const std::uint64_t L = std::uint64_t(size / 2);
        for (std::uint64_t n : {std::uint64_t(1), L - 1, L, L + 1, 2 * L + 1, std::uint64_t(1000), std::uint64_t(65537),
                                big}) {
            if (n == 0) continue;
            try {
                fill(d, n);
                chorus::all_reduce<chorus::hierarchical<>>(comm, std::span<float>(d, n), chorus::sum{}, st);
                cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
                comm.check();
                check_sum("hierarchical<> all_reduce (in place, cudaMalloc)", d, n);
                fill(d, n);
                auto f = chorus::all_reduce_async(comm, std::span<float>(d, n), chorus::sum{}, st);
                f.get();
                check_sum("automatic all_reduce_async (in place, cudaMalloc)", d, n);
            } catch (const chorus::error& e) {
                fail("across nodes: all_reduce of " + std::to_string(n) + ": " + e.what());
            }
        }
        {
            const std::uint64_t n = 3001;
            auto in = comm.alloc<float>(n);
            auto out = comm.alloc<float>(n);
            try {
                fill(in.data(), n);
                chorus::all_reduce<chorus::hierarchical<chorus::direct<>, chorus::ring<>>>(
                    comm, std::span<const float>(in.data(), n), out, chorus::sum{});
                check_sum("hierarchical<direct<>, ring<>> all_reduce (registered, out of place)", out.data(), n);
                // Broadcast from the last rank (the other node for rank 0).
                const int root = size - 1;
                for (std::uint64_t i = 0; i < n; ++i) h[i] = g_rank == root ? value_of(root, i) : -1.f;
                cuda_ok(cudaMemcpy(out.data(), h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
                chorus::broadcast<chorus::hierarchical<>>(comm, out, root);
                cuda_ok(cudaMemcpy(h.data(), out.data(), n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
                std::uint64_t wrong = 0;
                for (std::uint64_t i = 0; i < n; ++i) wrong += h[i] != value_of(root, i);
                if (wrong) fail("across nodes: broadcast: " + std::to_string(wrong) + " wrong elements");
                chorus::barrier(comm, st);
                cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
                comm.check();
            } catch (const chorus::error& e) {
                fail(std::string("across nodes: registered all_reduce / broadcast / barrier: ") + e.what());
            }
            // AllGather (emulated nodes are consecutive ranks): cudaMalloc
            // buffers, staged inside the node.
            for (std::uint64_t c : {std::uint64_t(1), std::uint64_t(1000), std::uint64_t(40000) + 3}) {
                try {
                    float* ag_in = nullptr;
                    cuda_ok(cudaMalloc(&ag_in, c * sizeof(float)), "cudaMalloc");
                    for (std::uint64_t i = 0; i < c; ++i) h[i] = value_of(g_rank, i);
                    cuda_ok(cudaMemcpy(ag_in, h.data(), c * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
                    chorus::all_gather<chorus::hierarchical<>>(comm, std::span<const float>(ag_in, c),
                                                               std::span<float>(d, c * std::uint64_t(size)), st);
                    cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
                    comm.check();
                    std::vector<float> all(c * std::uint64_t(size));
                    cuda_ok(cudaMemcpy(all.data(), d, all.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
                    std::uint64_t wrong = 0;
                    for (int q = 0; q < size; ++q)
                        for (std::uint64_t i = 0; i < c; ++i) wrong += all[std::uint64_t(q) * c + i] != value_of(q, i);
                    if (wrong)
                        fail("across nodes: all_gather of " + std::to_string(c) + " per rank: " + std::to_string(wrong) +
                             " wrong elements");
                    cudaFree(ag_in);
                } catch (const chorus::error& e) {
                    fail("across nodes: all_gather of " + std::to_string(c) + " per rank: " + e.what());
                }
            }
            // Refused by name, on every rank alike (nothing is issued).
            expect_error("across nodes: ring<>", chorus::errc::invalid_argument, "ring<>", [&] {
                chorus::all_reduce<chorus::ring<>>(comm, std::span<float>(out.data(), n), chorus::sum{}, st);
            });
            expect_error("across nodes: reduce_scatter", chorus::errc::invalid_argument, "reduce_scatter", [&] {
                chorus::reduce_scatter<chorus::hierarchical<>>(comm, std::span<const float>(in.data(), n / size * size),
                                                               std::span<float>(out.data(), n / size), chorus::sum{}, st);
            });
            expect_error("across nodes: send", chorus::errc::invalid_argument, "across nodes", [&] {
                chorus::send(comm, std::span<const float>(in.data(), 4), (g_rank + 1) % size, st);
            });
            comm.free(in);
            comm.free(out);
        }
        cudaFree(d);
    } catch (const chorus::error& e) {
        fail(std::string("across nodes: ") + e.what());
    }
}

int main(int argc, char** argv) {
    if (argc == 5 && std::string(argv[1]) == "--child") return child_main(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        (void)cudaGetLastError();
        expect_error("make_communicator(id) without a device", chorus::errc::unavailable, "no CUDA device",
                     [] { (void)chorus::gpu::make_communicator(chorus::make_unique_id(), 0, 1, 0); });
        expect_error("make_communicator(MPI_Comm) without a device", chorus::errc::unavailable, "no CUDA device",
                     [] { (void)chorus::gpu::make_communicator(MPI_COMM_WORLD, 0); });
        const int rc = g_failures == 0 ? 77 : 1;
        if (rc == 77 && g_rank == 0) std::printf("CHORUS_SKIP: no CUDA device\n");
        MPI_Finalize();
        return rc;
    }
    cuda_ok(cudaSetDevice(0), "cudaSetDevice");

    // Bad arguments, named (no rank meets another: each fails alone).
    chorus::unique_id lone = chorus::make_unique_id();
    expect_error("`rank` out of range", chorus::errc::invalid_argument, "`rank`",
                 [&] { (void)chorus::gpu::make_communicator(lone, 2, 2, 0); });
    expect_error("`nranks` 0", chorus::errc::invalid_argument, "`nranks`",
                 [&] { (void)chorus::gpu::make_communicator(lone, 0, 0, 0); });
    expect_error("`device` out of range", chorus::errc::invalid_argument, "`device`",
                 [&] { (void)chorus::gpu::make_communicator(lone, 0, 1, devices); });
    expect_error("MPI: `device` out of range", chorus::errc::invalid_argument, "`device`",
                 [&] { (void)chorus::gpu::make_communicator(MPI_COMM_WORLD, -1); });

    cudaStream_t st = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    {
        auto comm = chorus::gpu::make_communicator(MPI_COMM_WORLD, 0, test_options(size));
        if (comm.rank() != g_rank || comm.size() != size) fail("rank or size differ from MPI's");
        // alloc: errors, and a freed block is reused.
        expect_error("alloc(0)", chorus::errc::invalid_argument, "`count` is 0", [&] { (void)comm.alloc<float>(0); });
        expect_error("alloc too much", chorus::errc::invalid_argument, "gpu::options::registered_bytes",
                     [&] { (void)comm.alloc<float>(std::size_t(1) << 30); });
        expect_error("free of another pointer", chorus::errc::invalid_argument, "`p`",
                     [&] { comm.free(static_cast<const void*>(&size)); });
        {
            auto a = comm.alloc<float>(100);
            comm.free(a);
            auto b2 = comm.alloc<float>(100);
            if (b2.data() != a.data()) fail("alloc after free did not reuse the block");
            comm.free(b2);
        }
        buffers b = make_buffers(comm, max_count * std::uint64_t(size) + 8);
        matrix<chorus::ring<>>(comm, b, "ring<>", st);
        matrix<chorus::direct<>>(comm, b, "direct<>", st);
        matrix<chorus::automatic>(comm, b, "automatic", st);
        exchange(comm, b, st);
        try {
            chorus::barrier(comm, st);
            cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
            comm.check();
            chorus::barrier(comm);
        } catch (const chorus::error& e) {
            fail(std::string("barrier: ") + e.what());
        }
        // One large staged AllReduce (2^18 + 5 floats of cudaMalloc memory).
        {
            const std::uint64_t big = (std::uint64_t(1) << 18) + 5;
            float* d = nullptr;
            cuda_ok(cudaMalloc(&d, big * sizeof(float)), "cudaMalloc");
            std::vector<float> h(big);
            for (std::uint64_t i = 0; i < big; ++i) h[i] = value_of(g_rank, i);
            cuda_ok(cudaMemcpy(d, h.data(), big * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
            try {
                chorus::all_reduce(comm, std::span<float>(d, big));
                cuda_ok(cudaMemcpy(h.data(), d, big * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
                std::uint64_t wrong = 0;
                for (std::uint64_t i = 0; i < big; ++i) {
                    float want = 0.f;
                    for (int q = 0; q < size; ++q) want += value_of(q, i);
                    wrong += h[i] != want;
                }
                if (wrong) fail("large staged all_reduce: " + std::to_string(wrong) + " wrong elements");
            } catch (const chorus::error& e) {
                fail(std::string("large staged all_reduce: ") + e.what());
            }
            cudaFree(d);
        }
        // send/recv: one message per ordered pair of processes, every rank
        // going through the pairs in the same order (so the rendezvous
        // cannot deadlock); the sender's buffer registered (zero-copy) or
        // cudaMalloc memory (staged through its scratch), by pair.
        try {
            const std::uint64_t cnt = 1000 + 7;
            for (int s = 0; s < size; ++s)
                for (int d = 0; d < size; ++d) {
                    if (s == d || (g_rank != s && g_rank != d)) continue;
                    const bool reg = (s + d) % 2 == 0;
                    if (g_rank == s) {
                        float* src = reg ? b.reg_in.data() : b.priv_in;
                        std::vector<float> h(cnt);
                        for (std::uint64_t i = 0; i < cnt; ++i) h[i] = value_of(s * 16 + d, i);
                        cuda_ok(cudaMemcpy(src, h.data(), cnt * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
                        chorus::send(comm, std::span<const float>(src, cnt), d, st);
                    } else {
                        float* dst = reg ? b.reg_out.data() : b.priv_out;
                        cuda_ok(cudaMemset(dst, 0, cnt * sizeof(float)), "cudaMemset");
                        chorus::recv(comm, std::span<float>(dst, cnt), s, st);
                        cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
                        std::vector<float> h(cnt);
                        cuda_ok(cudaMemcpy(h.data(), dst, cnt * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
                        std::uint64_t wrong = 0;
                        for (std::uint64_t i = 0; i < cnt; ++i) wrong += h[i] != value_of(s * 16 + d, i);
                        if (wrong)
                            fail("send/recv " + std::to_string(s) + " -> " + std::to_string(d) + " (" +
                                 (reg ? "registered" : "staged") + "): " + std::to_string(wrong) + " wrong elements");
                    }
                    cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
                    comm.check();
                }
        } catch (const chorus::error& e) {
            fail(std::string("send/recv: ") + e.what());
        }
        free_buffers(comm, b);
        registration(comm, st);
    }
    // make_communicators reaches every buffer: it registers nothing.
    {
        auto comms = chorus::gpu::make_communicators({0});
        float* d = nullptr;
        cuda_ok(cudaMalloc(&d, 64 * sizeof(float)), "cudaMalloc");
        expect_error("register_buffer on make_communicators", chorus::errc::invalid_argument, "make_communicators",
                     [&] { (void)comms[0].register_buffer(std::span<float>(d, 64)); });
        expect_error("deregister_buffer on make_communicators", chorus::errc::invalid_argument, "make_communicators",
                     [&] { comms[0].deregister_buffer(chorus::gpu::buffer_handle{1}); });
        cudaFree(d);
    }
    // A communicator made from a unique_id (rank 0's, handed out by MPI).
    chorus::unique_id id;
    if (g_rank == 0) id = chorus::make_unique_id();
    MPI_Bcast(id.internal, sizeof id.internal, MPI_CHAR, 0, MPI_COMM_WORLD);
    {
        auto comm = chorus::gpu::make_communicator(id, g_rank, size, 0, test_options(size));
        buffers b = make_buffers(comm, max_count * std::uint64_t(size) + 8);
        for (mem m : {mem::registered, mem::staged})
            run_call<chorus::ring<>>(comm, b, "ring<> (unique_id)", chorus::collective::all_reduce, max_count, m,
                                     false, st, false);
        // A mismatch: rank 0 passes another count. Every rank fails, none hangs.
        int got_mismatch = 0, any_mismatch = 0;
        try {
            comm.set_timeout(std::chrono::milliseconds(10000));
            chorus::all_reduce<chorus::ring<>>(comm, std::span<float>(b.reg_in.data(), g_rank == 0 ? 13 : 14));
            fail("mismatch: no error");
        } catch (const chorus::error& e) {
            got_mismatch = e.code() == chorus::errc::mismatch;
            if (e.code() != chorus::errc::mismatch && e.code() != chorus::errc::peer_failed)
                fail(std::string("mismatch: wrong error (") + chorus::to_string(e.code()) + "): " + e.what());
        }
        MPI_Allreduce(&got_mismatch, &any_mismatch, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (!any_mismatch && g_rank == 0) fail("mismatch: no rank reported errc::mismatch");
        // (b's registered blocks go with the communicator.)
        cudaFree(b.priv_in);
        cudaFree(b.priv_out);
    }
    if (size >= 4 && size % 2 == 0) across_nodes(size, st);
    cudaStreamDestroy(st);

    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) kill_test(argv[0], size);
    MPI_Barrier(MPI_COMM_WORLD);

    int mine = g_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf(all == 0 ? "all ranks passed (%d processes)\n" : "FAILED (%d processes)\n", size);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
