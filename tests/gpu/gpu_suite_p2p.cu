// The GPU suite's point-to-point cases (send/recv, collectives/gpu_p2p.hpp,
// one p2p_kernel for every element type): a ring shift with sends and
// receives on separate streams and several messages per pair, a pipeline
// chain of micro-batches (the _async forms and stream_wait), a ring shift
// interleaved with all_reduce on one stream per rank (even ranks send
// first), zero-length and misaligned messages, a send/recv pair captured in
// a CUDA graph and replayed, a count mismatch (both sides errc::mismatch
// naming both counts), a receive with no sender (timeout) and the argument
// checks. The protocol itself also runs on CPU threads in
// tests/unit/test_lanes_p2p.cpp.
#include "gpu_suite.hpp"

namespace chorus_gpu_suite {

namespace {

template <class T>
std::vector<T> msg_values(int src, int dst, int m, std::size_t n) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = T((std::size_t(src) * 31 + std::size_t(dst) * 7 + std::size_t(m) * 13 + i * 3) % 97 + 1);
    return v;
}

void sync_all(world& w) {
    for (int r = 0; r < w.size(); ++r) {
        w.set_device(r);
        cuda_ok(cudaStreamSynchronize(w.stream(r)), "cudaStreamSynchronize");
    }
}

// Ring shift: sends on w.stream(r), receives on a second stream per rank;
// `msgs` messages per pair of varying sizes, at element offset `off`.
void ring_shift(world& w, int msgs, std::size_t base, std::size_t off) {
    const int n = w.size();
    std::vector<cudaStream_t> rs(static_cast<std::size_t>(n));
    std::vector<std::vector<dev_buf<float>>> sb(static_cast<std::size_t>(n)), rb(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        cuda_ok(cudaStreamCreateWithFlags(&rs[std::size_t(r)], cudaStreamNonBlocking), "cudaStreamCreate");
        for (int m = 0; m < msgs; ++m) {
            const std::size_t c = base + std::size_t(m) * 7;
            sb[std::size_t(r)].emplace_back(c + off);
            rb[std::size_t(r)].emplace_back(c + off);
            auto v = msg_values<float>(r, (r + 1) % n, m, c + off);
            sb[std::size_t(r)].back().upload(v);
            rb[std::size_t(r)].back().upload(std::vector<float>(c + off, 0.f));
        }
    }
    for (int m = 0; m < msgs; ++m)
        for (int r = 0; r < n; ++r) {
            const std::size_t c = base + std::size_t(m) * 7;
            w.set_device(r);
            chorus::send(w.comm(r), std::span<const float>(sb[std::size_t(r)][std::size_t(m)].data() + off, c),
                         (r + 1) % n, w.stream(r));
            chorus::recv(w.comm(r), std::span<float>(rb[std::size_t(r)][std::size_t(m)].data() + off, c),
                         (r + n - 1) % n, rs[std::size_t(r)]);
        }
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        cuda_ok(cudaStreamSynchronize(rs[std::size_t(r)]), "cudaStreamSynchronize");
    }
    sync_all(w);
    for (int r = 0; r < n; ++r) {
        try {
            w.comm(r).check();
        } catch (const chorus::error& e) {
            EXPECT(false, "ring shift: rank %d: %s", r, e.what());
        }
        for (int m = 0; m < msgs; ++m) {
            const std::size_t c = base + std::size_t(m) * 7;
            const auto got = rb[std::size_t(r)][std::size_t(m)].download();
            const auto want = msg_values<float>((r + n - 1) % n, r, m, c + off);
            bool ok = true;
            for (std::size_t i = 0; i < off; ++i) ok = ok && got[i] == 0.f;
            for (std::size_t i = off; i < off + c; ++i) ok = ok && got[i] == want[i];
            EXPECT(ok, "ring shift n=%d: rank %d message %d (count %zu, offset %zu)", n, r, m, c, off);
        }
        cudaStreamDestroy(rs[std::size_t(r)]);
    }
    ++g_cases;
}

// Pipeline: rank r receives micro-batch m from r-1, adds 1 (a kernel on
// its stream), sends it to r+1; the _async forms' futures are waited for.
__global__ void add_one(float* p, std::size_t n) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) p[i] += 1.f;
}
void pipeline(world& w, int micro, std::size_t count) {
    const int n = w.size();
    std::vector<std::vector<dev_buf<float>>> b(static_cast<std::size_t>(n));
    std::vector<float> first(count);
    for (std::size_t i = 0; i < count; ++i) first[i] = float(i % 1000);
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        for (int m = 0; m < micro; ++m) {
            b[std::size_t(r)].emplace_back(count);
            b[std::size_t(r)].back().upload(r == 0 ? first : std::vector<float>(count, 0.f));
        }
    }
    std::vector<chorus::future> fs;
    for (int m = 0; m < micro; ++m)
        for (int r = 0; r < n; ++r) {
            w.set_device(r);
            float* p = b[std::size_t(r)][std::size_t(m)].data();
            if (r > 0) {
                fs.push_back(chorus::recv_async(w.comm(r), std::span<float>(p, count), r - 1, w.stream(r)));
                add_one<<<64, 256, 0, w.stream(r)>>>(p, count);
            }
            if (r < n - 1) fs.push_back(chorus::send_async(w.comm(r), std::span<float>(p, count), r + 1, w.stream(r)));
        }
    for (auto& f : fs) {
        try {
            f.get();
        } catch (const chorus::error& e) {
            EXPECT(false, "pipeline: %s", e.what());
        }
    }
    for (int m = 0; m < micro; ++m) {
        const auto got = b[std::size_t(n - 1)][std::size_t(m)].download();
        bool ok = true;
        for (std::size_t i = 0; i < count; ++i) ok = ok && got[i] == float(i % 1000) + float(n - 1);
        EXPECT(ok, "pipeline n=%d: micro-batch %d", n, m);
    }
    ++g_cases;
}

// One stream per rank: all_reduce, ring shift (even ranks send first),
// all_reduce, a zero-length message, then a graph of one send/recv pair
// replayed twice.
void mixed_and_graph(world& w) {
    const int n = w.size();
    const std::size_t count = 1001;
    std::vector<dev_buf<float>> ar, s, r2;
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        ar.emplace_back(count);
        ar.back().upload(std::vector<float>(count, float(r + 1)));
        s.emplace_back(count);
        s.back().upload(msg_values<float>(r, (r + 1) % n, 0, count));
        r2.emplace_back(count);
        r2.back().upload(std::vector<float>(count, 0.f));
    }
    for (int r = 0; r < n; ++r) {
        w.set_device(r);
        chorus::all_reduce<chorus::ring<>>(w.comm(r), std::span<float>(ar[std::size_t(r)].data(), count), chorus::sum{}, w.stream(r));
        auto snd = [&] { chorus::send(w.comm(r), std::span<float>(s[std::size_t(r)].data(), count), (r + 1) % n, w.stream(r)); };
        auto rcv = [&] { chorus::recv(w.comm(r), std::span<float>(r2[std::size_t(r)].data(), count), (r + n - 1) % n, w.stream(r)); };
        if (r % 2 == 0) { snd(); rcv(); } else { rcv(); snd(); }
        chorus::all_reduce<chorus::ring<>>(w.comm(r), std::span<float>(ar[std::size_t(r)].data(), count), chorus::sum{}, w.stream(r));
        if (r % 2 == 0) {
            chorus::send(w.comm(r), std::span<float>(), (r + 1) % n, w.stream(r));
            chorus::recv(w.comm(r), std::span<float>(), (r + n - 1) % n, w.stream(r));
        } else {
            chorus::recv(w.comm(r), std::span<float>(), (r + n - 1) % n, w.stream(r));
            chorus::send(w.comm(r), std::span<float>(), (r + 1) % n, w.stream(r));
        }
    }
    sync_all(w);
    const float expect = float(n * (n + 1) / 2) * float(n);
    for (int r = 0; r < n; ++r) {
        try {
            w.comm(r).check();
        } catch (const chorus::error& e) {
            EXPECT(false, "mixed: rank %d: %s", r, e.what());
        }
        const auto a = ar[std::size_t(r)].download();
        const auto g = r2[std::size_t(r)].download();
        const auto want = msg_values<float>((r + n - 1) % n, r, 0, count);
        EXPECT(a[0] == expect && a[count - 1] == expect, "mixed n=%d rank %d: all_reduce %g, expected %g", n, r, a[0], expect);
        EXPECT(g == want, "mixed n=%d rank %d: ring shift", n, r);
    }
    // A graph per rank 0 and 1: rank 0 sends s[0] to 1, rank 1 receives into r2[1]; replayed twice.
    cudaGraphExec_t exec[2] = {};
    for (int r = 0; r < 2; ++r) {
        w.set_device(r);
        cudaGraph_t g;
        cuda_ok(cudaStreamBeginCapture(w.stream(r), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        if (r == 0) chorus::send(w.comm(0), std::span<float>(s[0].data(), count), 1, w.stream(0));
        else chorus::recv(w.comm(1), std::span<float>(r2[1].data(), count), 0, w.stream(1));
        cuda_ok(cudaStreamEndCapture(w.stream(r), &g), "cudaStreamEndCapture");
        cuda_ok(cudaGraphInstantiate(&exec[r], g, 0), "cudaGraphInstantiate");
        cudaGraphDestroy(g);
    }
    for (int rep = 0; rep < 2; ++rep) {
        w.set_device(1);
        r2[1].upload(std::vector<float>(count, 0.f));
        for (int r = 0; r < 2; ++r) {
            w.set_device(r);
            cuda_ok(cudaGraphLaunch(exec[r], w.stream(r)), "cudaGraphLaunch");
        }
        sync_all(w);
        EXPECT(r2[1].download() == msg_values<float>(0, 1, 0, count), "graph replay %d", rep);
    }
    for (auto e : exec) cudaGraphExecDestroy(e);
    try {
        w.comm(0).check();
        w.comm(1).check();
    } catch (const chorus::error& e) {
        EXPECT(false, "graph: %s", e.what());
    }
    ++g_cases;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Failures: a count mismatch (both sides errc::mismatch, both counts
// named), a receive with no sender (timeout), bad arguments.
void failures(const std::vector<int>& devs) {
    {
        world w(devs);
        w.set_device(0);
        dev_buf<float> a(10);
        w.set_device(1);
        dev_buf<float> b(12);
        w.set_device(0);
        chorus::send(w.comm(0), std::span<float>(a.data(), 10), 1, w.stream(0));
        w.set_device(1);
        chorus::recv(w.comm(1), std::span<float>(b.data(), 12), 0, w.stream(1));
        sync_all(w);
        for (int r = 0; r < 2; ++r) {
            try {
                w.comm(r).check();
                EXPECT(false, "mismatch: rank %d did not fail", r);
            } catch (const chorus::error& e) {
                EXPECT(e.code() == chorus::errc::mismatch && has(e.what(), "sends 10 elements") &&
                           has(e.what(), "receives 12 elements"),
                       "mismatch: rank %d: %s", r, e.what());
            }
        }
        ++g_cases;
    }
    {
        world w(devs);
        w.comm(1).set_timeout(std::chrono::milliseconds(300));
        w.set_device(1);
        dev_buf<float> b(12);
        chorus::recv(w.comm(1), std::span<float>(b.data(), 12), 0, w.stream(1));
        sync_all(w);
        try {
            w.comm(1).check();
            EXPECT(false, "a receive with no sender did not fail");
        } catch (const chorus::error& e) {
            EXPECT(e.code() == chorus::errc::timeout && has(e.what(), "rank 0"), "no sender: %s", e.what());
        }
        ++g_cases;
    }
    {
        world w(devs);
        w.set_device(0);
        dev_buf<float> a(4);
        std::vector<float> host(4);
        auto expect_throw = [&](const char* what, auto&& f, const char* part) {
            try {
                f();
                EXPECT(false, "%s did not throw", what);
            } catch (const chorus::error& e) {
                EXPECT(e.code() == chorus::errc::invalid_argument && has(e.what(), part), "%s: %s", what, e.what());
            }
        };
        expect_throw("peer out of range", [&] { chorus::send(w.comm(0), std::span<float>(a.data(), 4), w.size(), w.stream(0)); }, "`peer`");
        expect_throw("peer == self", [&] { chorus::recv(w.comm(0), std::span<float>(a.data(), 4), 0, w.stream(0)); }, "`peer`");
        expect_throw("host buffer", [&] { chorus::send(w.comm(0), std::span<float>(host), 1, w.stream(0)); }, "`buf` is host memory");
        ++g_cases;
    }
}

} // namespace

void p2p_cases(const std::vector<int>& devs) {
    const int before = g_failures;
    const int n = int(devs.size());
    try {
        {
            world w(devs);
            ring_shift(w, 3, 1000, 0);
            ring_shift(w, 2, 33, 3); // not a multiple of the vector width, misaligned
            ring_shift(w, 1, std::size_t(1) << 20, 0);
        }
        {
            world w(devs);
            pipeline(w, 4, (std::size_t(1) << 18) + 5);
        }
        {
            world w(devs);
            mixed_and_graph(w);
        }
        if (n >= 2) failures(devs);
    } catch (const chorus::error& e) {
        ++g_failures;
        std::printf("FAIL send/recv: %s\n", e.what());
    }
    std::printf("send/recv on %d rank(s): %s\n", n, g_failures == before ? "ok" : "FAILED");
}

} // namespace chorus_gpu_suite
