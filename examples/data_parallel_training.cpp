// Data-parallel training of a small MLP on the 8x8 handwritten digits, with
// the ranks as threads (chorus::threads) and the chorus::train helpers:
//
//   sync    gradient buckets: each layer's AllReduce starts as soon as the
//           backward pass has produced its gradient (overlapped with the rest)
//   hybrid  gradient accumulation: k micro-batches locally, then one AllReduce
//   async   bounded staleness: gradients applied up to s steps late, with
//           clipping and learning-rate warm-up; --policy fixed (reproducible)
//           or eager (a slow rank slows only itself)
//
// --straggler-rank R --slowdown F makes rank R compute F times slower. One
// line per epoch (loss, test accuracy, samples/s, time blocked in
// collectives), optionally a CSV (--csv). A fixed --seed makes sync, hybrid
// and async --policy fixed runs bitwise reproducible. At the end the program
// checks that every rank holds the same model and that the test accuracy
// reaches --min-accuracy, then prints "data_parallel_training: OK".
//
// Data: digits.csv.gz as shipped by Debian's python3-sklearn (1797 images,
// 64 pixels 0..16 and a label per line); --data PATH or CHORUS_DIGITS
// override the path. The options, the data and the closing report are
// shared with the GPU version, data_parallel_training_gpu.cu (digits.hpp).

#include <chorus/chorus.hpp>
#include <chorus/train.hpp>

#include "digits.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace digits;
namespace train = chorus::train;
using comm_t = chorus::communicator<chorus::threads>;
using steady = std::chrono::steady_clock;

// ------------------------------------------------------------------ model ---

struct workspace {
    std::vector<float> z1, a1, p, da1;
    void fit(std::size_t b, std::size_t h) {
        z1.resize(b * h);
        a1.resize(b * h);
        p.resize(b * classes);
        da1.resize(b * h);
    }
};

// Forward pass over samples idx[0..b); fills ws.a1 / ws.z1 / ws.p with
// softmax probabilities; returns the summed cross-entropy loss.
double forward(const layout& L, const std::vector<float>& w, const dataset& d, const std::size_t* idx, std::size_t b,
               workspace& ws) {
    const std::size_t h = L.h;
    ws.fit(b, h);
    double loss = 0;
    for (std::size_t s = 0; s < b; ++s) {
        const float* x = &d.x[idx[s] * features];
        float* z = &ws.z1[s * h];
        std::copy(w.begin() + std::ptrdiff_t(L.b1), w.begin() + std::ptrdiff_t(L.b1 + h), z);
        for (int i = 0; i < features; ++i) {
            const float xi = x[i];
            if (xi == 0.0f) continue; // about half the pixels are blank
            const float* wr = &w[L.w1 + std::size_t(i) * h];
            for (std::size_t j = 0; j < h; ++j) z[j] += xi * wr[j];
        }
        float* a = &ws.a1[s * h];
        for (std::size_t j = 0; j < h; ++j) a[j] = z[j] > 0.0f ? z[j] : 0.0f;
        float* p = &ws.p[s * classes];
        float mx = -1e30f;
        for (int o = 0; o < classes; ++o) {
            const float* wr = &w[L.w2 + std::size_t(o) * h];
            float acc = w[L.b2 + std::size_t(o)];
            for (std::size_t j = 0; j < h; ++j) acc += a[j] * wr[j];
            p[o] = acc;
            mx = std::max(mx, acc);
        }
        double sum = 0;
        for (int o = 0; o < classes; ++o) sum += std::exp(double(p[o] - mx));
        for (int o = 0; o < classes; ++o) p[o] = float(std::exp(double(p[o] - mx)) / sum);
        loss -= std::log(std::max(double(p[d.y[idx[s]]]), 1e-30));
    }
    return loss;
}

// Backward pass for the batch of the last forward(); the gradient (mean over
// the batch) goes to g. `output_ready` is called once the output layer's
// gradient is complete, before the (larger) first layer's is computed: the
// point where its AllReduce can start.
template <class Ready>
void backward(const layout& L, const std::vector<float>& w, const dataset& d, const std::size_t* idx, std::size_t b,
              workspace& ws, std::vector<float>& g, Ready&& output_ready) {
    const std::size_t h = L.h;
    const float inv_b = 1.0f / float(b);
    std::fill(g.begin(), g.end(), 0.0f);
    // Output layer: dz2 = (p - onehot) / b; dW2 += dz2 a1^T; da1 = W2^T dz2.
    for (std::size_t s = 0; s < b; ++s) {
        float* p = &ws.p[s * classes];
        p[d.y[idx[s]]] -= 1.0f;
        const float* a = &ws.a1[s * h];
        for (int o = 0; o < classes; ++o) {
            const float dz = p[o] * inv_b;
            p[o] = dz;
            g[L.b2 + std::size_t(o)] += dz;
            float* gw = &g[L.w2 + std::size_t(o) * h];
            for (std::size_t j = 0; j < h; ++j) gw[j] += dz * a[j];
        }
    }
    output_ready();
    // Hidden layer: dz1 = da1 * relu'(z1); dW1 += x dz1^T.
    for (std::size_t s = 0; s < b; ++s) {
        const float* p = &ws.p[s * classes];
        float* da = &ws.da1[s * h];
        std::fill(da, da + h, 0.0f);
        for (int o = 0; o < classes; ++o) {
            const float* wr = &w[L.w2 + std::size_t(o) * h];
            for (std::size_t j = 0; j < h; ++j) da[j] += p[o] * wr[j];
        }
        const float* z = &ws.z1[s * h];
        for (std::size_t j = 0; j < h; ++j) da[j] = z[j] > 0.0f ? da[j] : 0.0f;
        float* gb = &g[L.b1];
        for (std::size_t j = 0; j < h; ++j) gb[j] += da[j];
        const float* x = &d.x[idx[s] * features];
        for (int i = 0; i < features; ++i) {
            const float xi = x[i];
            if (xi == 0.0f) continue;
            float* gw = &g[L.w1 + std::size_t(i) * h];
            for (std::size_t j = 0; j < h; ++j) gw[j] += xi * da[j];
        }
    }
}

double accuracy(const layout& L, const std::vector<float>& w, const dataset& d, const std::vector<std::size_t>& idx,
                workspace& ws) {
    std::size_t right = 0;
    for (std::size_t s0 = 0; s0 < idx.size(); s0 += 64) {
        const std::size_t b = std::min<std::size_t>(64, idx.size() - s0);
        forward(L, w, d, &idx[s0], b, ws);
        for (std::size_t s = 0; s < b; ++s) {
            const float* p = &ws.p[s * classes];
            if (int(std::max_element(p, p + classes) - p) == d.y[idx[s0 + s]]) ++right;
        }
    }
    return double(right) / double(idx.size());
}

// SGD with momentum (v = mu v + g; w -= lr v), the same on every rank.
struct sgd {
    std::vector<float> v;
    void apply(std::vector<float>& w, std::span<const float> g, double lr, double mu) {
        if (v.size() != w.size()) v.assign(w.size(), 0.0f);
        const float a = float(lr), m = float(mu);
        for (std::size_t i = 0; i < w.size(); ++i) {
            v[i] = m * v[i] + g[i];
            w[i] -= a * v[i];
        }
    }
};


// ---------------------------------------------------------------- training ---
void train_rank(comm_t& comm, const options& o, const dataset& d, const std::vector<std::size_t>& train_idx,
                const std::vector<std::size_t>& test_idx, result& out) {
    const int r = comm.rank(), n = comm.size();
    const layout L(std::size_t(o.hidden));
    std::vector<float> w(L.total), g(L.total);

    // Rank 0 initialises (Glorot uniform), everyone else receives it.
    if (r == 0) {
        std::mt19937 gen(o.seed);
        auto init = [&](std::size_t off, std::size_t count, double fan_in, double fan_out) {
            const double a = std::sqrt(6.0 / (fan_in + fan_out));
            for (std::size_t i = 0; i < count; ++i) w[off + i] = float((double(gen()) / 4294967296.0 * 2 - 1) * a);
        };
        init(L.w1, std::size_t(features) * L.h, features, double(L.h));
        init(L.w2, std::size_t(classes) * L.h, double(L.h), classes);
    }
    chorus::broadcast(comm, std::span(w), 0);

    // This rank's shard of the training set: every n-th sample. An epoch is
    // ceil(shard / batch) steps on every rank (sync and hybrid need the same
    // count everywhere); batches run through a reshuffled order of the shard.
    std::vector<std::size_t> shard;
    for (std::size_t i = std::size_t(r); i < train_idx.size(); i += std::size_t(n)) shard.push_back(train_idx[i]);
    const std::size_t b = std::size_t(o.batch);
    const std::size_t min_shard = train_idx.size() / std::size_t(n);
    if (b > min_shard) throw std::runtime_error("--batch is larger than a rank's shard of the training set");
    const std::int64_t steps_per_epoch = std::int64_t((min_shard + b - 1) / b);
    std::mt19937 data_gen(o.seed * 7919u + std::uint32_t(r) * 104729u + 1u);
    std::vector<std::size_t> order = shard;
    std::size_t cursor = order.size(); // reshuffle on first use
    auto next_batch = [&]() -> const std::size_t* {
        if (cursor + b > order.size()) {
            shuffle(order, data_gen);
            cursor = 0;
        }
        const std::size_t* p = &order[cursor];
        cursor += b;
        return p;
    };

    workspace ws;
    sgd opt;
    const train::linear_warmup schedule(o.lr, o.warmup);
    train::straggler slow(comm, o.straggler_rank, o.slowdown);
    std::int64_t updates = 0;
    auto update = [&](std::span<float> mean_grad, std::int64_t index) {
        if (o.clip > 0) train::clip_by_global_norm(mean_grad, o.clip);
        opt.apply(w, mean_grad, schedule(index), o.momentum);
        ++updates;
    };

    double loss_sum = 0, loss_count = 0;
    const auto device_time = std::chrono::duration<double, std::micro>(o.device_us * double(b));
    auto compute = [&](auto&& output_ready) {
        const auto tc = steady::now();
        const std::size_t* idx = next_batch();
        loss_sum += forward(L, w, d, idx, b, ws);
        loss_count += double(b);
        backward(L, w, d, idx, b, ws, g, output_ready);
        // --device-us: the rest of the step runs on the "device"; the host
        // sleeps, so the ranks do not compete for the shared cores.
        if (o.device_us > 0) std::this_thread::sleep_until(tc + std::chrono::duration_cast<steady::duration>(device_time));
    };

    const auto t0 = steady::now();
    double eval_s = 0; // rank 0's evaluation time, left out of the throughput
    auto report = [&](int epoch, double global_samples, double wait_s) {
        if (r != 0) return;
        const auto te = steady::now();
        const double t = std::chrono::duration<double>(te - t0).count() - eval_s;
        const double acc = accuracy(L, w, d, test_idx, ws);
        eval_s += std::chrono::duration<double>(steady::now() - te).count();
        epoch_row row{epoch, updates, global_samples, t, loss_count > 0 ? loss_sum / loss_count : 0.0, acc,
                      global_samples / std::max(t, 1e-9), wait_s};
        loss_sum = loss_count = 0;
        out.rows.push_back(row);
        print_row(row);
    };

    double my_wait = 0;
    std::int64_t my_steps = 0;
    const double per_step = double(n) * double(b);

    if (o.mode == "sync") {
        // Gradient tensors in the order the backward pass completes them.
        std::vector<std::span<float>> tensors{std::span(g).subspan(L.w2, std::size_t(classes) * L.h),
                                              std::span(g).subspan(L.b2, classes),
                                              std::span(g).subspan(L.w1, std::size_t(features) * L.h),
                                              std::span(g).subspan(L.b1, L.h)};
        train::gradient_buckets<comm_t, float> buckets(comm, tensors, std::size_t(o.bucket_kb * 1024));
        for (int e = 0; e < o.epochs; ++e) {
            for (std::int64_t s = 0; s < steps_per_epoch; ++s) {
                slow.run([&] {
                    compute([&] {
                        buckets.mark_ready(0);
                        buckets.mark_ready(1);
                    });
                    buckets.mark_ready(2);
                    buckets.mark_ready(3);
                });
                buckets.wait_all();
                update(std::span(g), updates);
                ++my_steps;
            }
            report(e + 1, double(my_steps) * per_step, buckets.wait_seconds());
        }
        my_wait = buckets.wait_seconds();
    } else if (o.mode == "hybrid") {
        train::gradient_accumulator<comm_t, float> acc(comm, L.total, o.accum);
        for (int e = 0; e < o.epochs; ++e) {
            for (std::int64_t s = 0; s < steps_per_epoch; ++s) {
                slow.run([&] { compute([] {}); });
                if (acc.add(g)) update(acc.gradient(), updates);
                ++my_steps;
            }
            report(e + 1, double(my_steps) * per_step, acc.wait_seconds());
        }
        my_wait = acc.wait_seconds();
    } else {
        const auto policy = o.policy == "eager" ? train::staleness_policy::eager : train::staleness_policy::fixed_delay;
        train::bounded_staleness<comm_t, float> st(comm, L.total, o.staleness, policy);
        auto apply = [&](std::span<float> mean, const train::stale_update& u) { update(mean, u.round); };
        if (policy == train::staleness_policy::fixed_delay) {
            for (int e = 0; e < o.epochs; ++e) {
                for (std::int64_t s = 0; s < steps_per_epoch; ++s) {
                    slow.run([&] { compute([] {}); });
                    st.step(std::span<const float>(g), apply);
                    ++my_steps;
                }
                if (e + 1 == o.epochs) st.finish(apply);
                report(e + 1, double(my_steps) * per_step, st.wait_seconds());
            }
        } else {
            // Eager: ranks take different numbers of steps; an epoch ends when
            // the applied AllReduces hold an epoch's worth of samples from all
            // ranks together, which every rank sees at the same AllReduce.
            const double epoch_steps = double(steps_per_epoch) * n;
            int e = 0;
            while (e < o.epochs) {
                slow.run([&] { compute([] {}); });
                st.step(std::span<const float>(g), apply);
                ++my_steps;
                while (e < o.epochs && st.global_steps_applied() >= epoch_steps * (e + 1)) {
                    ++e;
                    if (e == o.epochs) st.finish(apply);
                    report(e, st.global_steps_applied() * double(b), st.wait_seconds());
                }
            }
        }
        my_wait = st.wait_seconds();
    }

    // Every rank must hold the same model: compare hashes of the parameters.
    std::array<std::uint64_t, 1> mine{fnv1a(w)};
    std::vector<std::uint64_t> all(static_cast<std::size_t>(n));
    chorus::all_gather(comm, std::span<const std::uint64_t>(mine), std::span(all));
    std::array<double, 1> wait_mine{my_wait};
    std::array<std::int64_t, 1> steps_mine{my_steps};
    std::vector<double> waits(static_cast<std::size_t>(n));
    std::vector<std::int64_t> steps(static_cast<std::size_t>(n));
    chorus::all_gather(comm, std::span<const double>(wait_mine), std::span(waits));
    chorus::all_gather(comm, std::span<const std::int64_t>(steps_mine), std::span(steps));
    if (r == 0) {
        out.replicas_agree = std::all_of(all.begin(), all.end(), [&](std::uint64_t x) { return x == all[0]; });
        out.final_acc = out.rows.empty() ? 0.0 : out.rows.back().test_acc;
        out.steps_per_rank = steps;
        out.wait_per_rank = waits;
    }
}

} // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    const dataset d = load_digits(o.data);
    const split sp = make_split(d, o.seed);
    const std::vector<std::size_t>& train_idx = sp.train;
    const std::vector<std::size_t>& test_idx = sp.test;
    print_header(o, o.ranks, sp);

    result res;
    try {
        chorus::run_threads(o.ranks, [&](comm_t& comm) { train_rank(comm, o, d, train_idx, test_idx, res); });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "data_parallel_training: error: %s\n", e.what());
        return 1;
    }
    return finish(o, o.ranks, res);
}
