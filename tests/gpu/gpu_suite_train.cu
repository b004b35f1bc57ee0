// chorus::train on GPU communicators (train/gpu.hpp): gradient buckets (one
// contiguous bucket reduced in place, one staged), gradient accumulation,
// bounded staleness (fixed_delay) and the sharded SGD step, on virtual
// ranks, one host thread per rank, each with its own compute stream. Inputs
// are integer-valued floats, so every check is exact: the sums are exact in
// any order, and the only rounding (a division by k or by the rank count,
// the SGD update) is reproduced on the host with the same operations.
// Also: host memory handed to a helper is refused by name.
#include "gpu_suite.hpp"

#include <chorus/train.hpp>

#include <atomic>
#include <barrier>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace chorus_gpu_suite {

namespace {

std::atomic<int> t_failures{0};
std::mutex t_print;

#define TEXPECT(cond, ...)                                                                 \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            ++t_failures;                                                                  \
            std::lock_guard<std::mutex> lk_(t_print);                                      \
            std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            std::printf(__VA_ARGS__);                                                      \
            std::printf("\n");                                                             \
        }                                                                                  \
    } while (0)

using comm_t = chorus::gpu::communicator;

//! Runs body(r, ready) on one thread per rank, the rank's device current;
//! body calls ready() once it has allocated everything, before its first
//! collective (no rank allocates while another's kernels run). An
//! exception is a failure.
void per_rank(world& w, const char* what, const std::function<void(int, const std::function<void()>&)>& body) {
    std::vector<std::thread> th;
    std::barrier<> go(w.size());
    for (int r = 0; r < w.size(); ++r)
        th.emplace_back([&, r] {
            bool arrived = false;
            const std::function<void()> ready = [&] {
                arrived = true;
                go.arrive_and_wait();
            };
            try {
                w.set_device(r);
                body(r, ready);
                cuda_ok(cudaStreamSynchronize(w.stream(r)), "cudaStreamSynchronize");
                cuda_ok(cudaStreamSynchronize(w.comm(r).stream()), "cudaStreamSynchronize");
                w.comm(r).check();
            } catch (const std::exception& e) {
                if (!arrived) go.arrive_and_drop();
                ++t_failures;
                std::lock_guard<std::mutex> lk(t_print);
                std::printf("FAIL %s, rank %d: %s\n", what, r, e.what());
            }
        });
    for (auto& t : th) t.join();
    ++g_cases;
}

//! p[0, n) := make_value<float>(v, first + j) on `s`.
void fill_on(float* p, std::size_t n, int v, std::uint64_t first, cudaStream_t s) {
    fill_kernel<float><<<unsigned(std::min<std::size_t>((n + 255) / 256, 1024)), 256, 0, s>>>(p, n, v, first);
    cuda_ok(cudaGetLastError(), "fill_kernel");
}

std::vector<float> download_on(const float* p, std::size_t n, cudaStream_t s) {
    std::vector<float> h(n);
    cuda_ok(cudaMemcpyAsync(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return h;
}

//! The sum over ranks of make_value<float>(q + 10 * step, i), exact.
float rank_sum(int n, int step, std::uint64_t i) {
    float s = 0;
    for (int q = 0; q < n; ++q) s += make_value<float>(q + 10 * step, i);
    return s;
}

// Buckets over four tensors of one allocation: [0, 100) and [100, 150) are
// back to back (bucket 0, reduced in place); [200, 300) and [160, 190) are
// not (bucket 1, staged). The gaps are guards that must keep their values.
void buckets_case(world& w) {
    const int n = w.size();
    constexpr std::size_t len = 300;
    per_rank(w, "gradient_buckets", [&](int r, const std::function<void()>& ready) {
        comm_t& comm = w.comm(r);
        const cudaStream_t s = w.stream(r);
        dev_buf<float> g(len);
        float* p = g.data();
        fill_on(p, len, 97, 0, s); // guards
        std::vector<std::span<float>> tensors{std::span<float>(p, 100), std::span<float>(p + 100, 50),
                                              std::span<float>(p + 200, 100), std::span<float>(p + 160, 30)};
        chorus::train::gradient_buckets<comm_t, float, chorus::sum> b(comm, tensors, 600, s);
        ready();
        TEXPECT(b.bucket_count() == 2 && !b.staged(0) && b.staged(1), "rank %d: %zu buckets, staged %d %d", r,
                b.bucket_count(), int(b.staged(0)), b.bucket_count() > 1 ? int(b.staged(1)) : -1);
        for (int step = 0; step < 2; ++step) {
            // The "backward pass" writes each tensor on the compute stream, then marks it ready
            // (bucket 1's tensors first: it launches only after bucket 0).
            const int order[] = {3, 2, 1, 0};
            for (int t : order) {
                const std::size_t at = std::size_t(tensors[std::size_t(t)].data() - p);
                fill_on(p + at, tensors[std::size_t(t)].size(), r + 10 * step, at, s);
                b.mark_ready(std::size_t(t));
                if (t == 2) TEXPECT(b.launched() == 0, "rank %d: a bucket launched before its predecessor", r);
            }
            TEXPECT(b.launched() == 2, "rank %d: %zu buckets launched", r, b.launched());
            b.wait_all();
            const std::vector<float> h = download_on(p, len, s);
            long long wrong = 0;
            for (std::size_t i = 0; i < len; ++i) {
                const bool guard_elem = (i >= 150 && i < 160) || (i >= 190 && i < 200);
                const float want = guard_elem ? make_value<float>(97, i) : rank_sum(n, step, i);
                wrong += h[i] != want;
            }
            TEXPECT(wrong == 0, "gradient_buckets n=%d rank %d step %d: %lld wrong", n, r, step, wrong);
        }
        TEXPECT(b.steps() == 2, "rank %d: %zu steps", r, b.steps());
    });
}

// Accumulation of k = 2 micro-batches, then avg over the ranks.
void accumulate_case(world& w) {
    const int n = w.size();
    constexpr std::size_t count = 1001;
    per_rank(w, "gradient_accumulator", [&](int r, const std::function<void()>& ready) {
        const cudaStream_t s = w.stream(r);
        dev_buf<float> g(count);
        chorus::train::gradient_accumulator<comm_t, float> acc(w.comm(r), count, 2, s);
        ready();
        for (int round = 0; round < 2; ++round) {
            fill_on(g.data(), count, r + 10 * (2 * round), 0, s);
            TEXPECT(!acc.add(std::span<const float>(g.data(), count)), "rank %d: add 1 of 2 returned true", r);
            fill_on(g.data(), count, r + 10 * (2 * round + 1), 0, s);
            TEXPECT(acc.add(std::span<const float>(g.data(), count)), "rank %d: add 2 of 2 returned false", r);
            const std::vector<float> h = download_on(acc.gradient().data(), count, s);
            long long wrong = 0;
            for (std::size_t i = 0; i < count; ++i) {
                float sum = 0; // halves: exact
                for (int q = 0; q < n; ++q)
                    sum += (make_value<float>(q + 10 * (2 * round), i) + make_value<float>(q + 10 * (2 * round + 1), i)) /
                           2.0f;
                wrong += h[i] != chorus::avg{}.finish(sum, n);
            }
            TEXPECT(wrong == 0, "gradient_accumulator n=%d rank %d round %d: %lld wrong", n, r, round, wrong);
        }
        TEXPECT(acc.reductions() == 2, "rank %d: %zu reductions", r, acc.reductions());
    });
}

// Bounded staleness, fixed_delay with bound 2: the gradient of step t is
// applied at step t + 2 (or by finish()), averaged over the ranks.
void staleness_case(world& w) {
    const int n = w.size();
    constexpr std::size_t count = 257;
    constexpr int steps = 5, bound = 2;
    per_rank(w, "bounded_staleness", [&](int r, const std::function<void()>& ready) {
        const cudaStream_t s = w.stream(r);
        dev_buf<float> g(count), seen(count * steps);
        chorus::train::bounded_staleness<comm_t, float> st(w.comm(r), count, bound, s);
        std::vector<chorus::train::stale_update> ups;
        ups.reserve(steps);
        ready();
        auto apply = [&](std::span<float> mean, const chorus::train::stale_update& u) {
            TEXPECT(mean.size() == count && u.round >= 0 && u.round < steps, "rank %d: round %lld", r,
                    static_cast<long long>(u.round));
            if (u.round >= 0 && u.round < steps)
                cuda_ok(cudaMemcpyAsync(seen.data() + std::size_t(u.round) * count, mean.data(), count * sizeof(float),
                                        cudaMemcpyDeviceToDevice, s),
                        "cudaMemcpyAsync");
            ups.push_back(u);
        };
        for (int t = 0; t < steps; ++t) {
            fill_on(g.data(), count, r + 10 * t, 0, s);
            st.step(std::span<const float>(g.data(), count), apply);
        }
        st.finish(apply);
        TEXPECT(ups.size() == std::size_t(steps) && st.rounds_applied() == steps && st.in_flight() == 0,
                "rank %d: %zu updates applied", r, ups.size());
        for (std::size_t j = 0; j < ups.size(); ++j) {
            const auto& u = ups[j];
            const std::int64_t want_at = j + bound < std::size_t(steps) ? std::int64_t(j) + bound : steps;
            TEXPECT(u.round == std::int64_t(j) && u.first_step == std::int64_t(j) && u.applied_at == want_at &&
                        u.global_steps == double(n),
                    "rank %d update %zu: round %lld first %lld applied at %lld, %g global steps", r, j,
                    static_cast<long long>(u.round), static_cast<long long>(u.first_step),
                    static_cast<long long>(u.applied_at), u.global_steps);
        }
        TEXPECT(st.max_staleness() == bound, "rank %d: max staleness %d", r, st.max_staleness());
        const std::vector<float> h = download_on(seen.data(), count * steps, s);
        long long wrong = 0;
        for (int t = 0; t < steps; ++t)
            for (std::size_t i = 0; i < count; ++i)
                wrong += h[std::size_t(t) * count + i] != rank_sum(n, t, i) / float(n);
        TEXPECT(wrong == 0, "bounded_staleness n=%d rank %d: %lld wrong", n, r, wrong);
    });
}

// The sharded step, `count` parameters (padded when n does not divide it),
// two steps, against a replicated update on the host in the same float
// operations.
void sharded_case(world& w, std::size_t count) {
    const int n = w.size();
    const float lr = 0.5f, mu = 0.5f;
    std::vector<float> want(count), vel(count, 0.0f);
    for (std::size_t i = 0; i < count; ++i) want[i] = make_value<float>(50, i);
    for (int step = 0; step < 2; ++step)
        for (std::size_t i = 0; i < count; ++i) {
            const float gm = chorus::avg{}.finish(rank_sum(n, step, i), n);
            vel[i] = mu * vel[i] + gm;
            want[i] -= lr * vel[i];
        }
    per_rank(w, "sharded_sgd", [&](int r, const std::function<void()>& ready) {
        const cudaStream_t s = w.stream(r);
        dev_buf<float> params(count), grad(count);
        fill_on(params.data(), count, 50, 0, s);
        chorus::train::sharded_sgd<comm_t, float> opt(w.comm(r), count, lr, mu, s);
        ready();
        for (int step = 0; step < 2; ++step) {
            fill_on(grad.data(), count, r + 10 * step, 0, s);
            opt.step(std::span<float>(params.data(), count), std::span<const float>(grad.data(), count));
        }
        const std::vector<float> h = download_on(params.data(), count, s);
        long long wrong = 0;
        for (std::size_t i = 0; i < count; ++i) wrong += h[i] != want[i];
        TEXPECT(wrong == 0, "sharded_sgd n=%d count=%zu rank %d: %lld wrong", n, count, r, wrong);
        TEXPECT(opt.momentum_state().size() == opt.shard_elements() && opt.steps() == 2, "rank %d: state %zu of %zu",
                r, opt.momentum_state().size(), opt.shard_elements());
    });
}

// Host memory is refused by name (nothing collective runs).
void refusals(world& w) {
    w.set_device(0);
    std::vector<float> host(16);
    auto refused = [&](const char* what, const char* needle, auto&& call) {
        ++g_cases;
        try {
            call();
            TEXPECT(false, "%s: host memory was accepted", what);
        } catch (const chorus::error& e) {
            TEXPECT(e.code() == chorus::errc::invalid_argument && std::string(e.what()).find(needle) != std::string::npos,
                    "%s: %s", what, e.what());
        }
    };
    refused("gradient_buckets", "tensor 0 of `tensors` is host memory", [&] {
        chorus::train::gradient_buckets<comm_t, float> b(w.comm(0), {std::span<float>(host)}, 64, w.stream(0));
    });
    refused("gradient_accumulator", "`micro_grad` is host memory", [&] {
        chorus::train::gradient_accumulator<comm_t, float> acc(w.comm(0), host.size(), 2, w.stream(0));
        (void)acc.add(std::span<const float>(host));
    });
    refused("bounded_staleness", "`grad` is host memory", [&] {
        chorus::train::bounded_staleness<comm_t, float> st(w.comm(0), host.size(), 1, w.stream(0));
        st.step(std::span<const float>(host), [](std::span<float>, const chorus::train::stale_update&) {});
    });
    refused("sharded_sgd", "`params` is host memory", [&] {
        chorus::train::sharded_sgd<comm_t, float> opt(w.comm(0), host.size(), 0.1, 0.0, w.stream(0));
        dev_buf<float> g(host.size());
        opt.step(std::span<float>(host), std::span<const float>(g.data(), host.size()));
    });
}

} // namespace

void train_cases(const std::vector<int>& devs) {
    const int before = t_failures;
    {
        world w(devs);
        buckets_case(w);
        accumulate_case(w);
        staleness_case(w);
        sharded_case(w, 1001);
        sharded_case(w, std::size_t(12 * w.size()));
        refusals(w);
    }
    g_failures += t_failures - before;
    std::printf("train helpers on %zu rank(s): %s\n", devs.size(), t_failures == before ? "ok" : "FAILED");
}

} // namespace chorus_gpu_suite
