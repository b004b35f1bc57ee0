// The digits MLP of data_parallel_training.cpp on GPU communicators: the
// same options, data, split, modes and accuracy table (digits.hpp), with the
// parameters, gradients and data in device memory, the model's forward and
// backward passes as small CUDA kernels (one thread per output element: a
// tiny model, written for clarity, not speed), and the chorus::train helpers
// on chorus::gpu::communicator (docs/gpu.md, "Training on GPUs"):
//
//   sync    gradient buckets: each layer's AllReduce is enqueued on the
//           rank's communication stream as soon as the backward kernels that
//           produce its gradient are enqueued, and overlaps the rest
//   hybrid  gradient accumulation: k micro-batches summed on the device,
//           then one AllReduce on the compute stream
//   async   bounded staleness: AllReduces in flight on the communication
//           stream, their means applied (clipped, warmed up) on the compute
//           stream up to s steps late
//
// No gradient crosses the host: the only device-to-host copies are the
// loss and accuracy of the table, the step count of each staleness round,
// and the final parameters (to compare the replicas).
//
//   --launch virtual  --ranks N ranks on device 0, one host thread each (default)
//   --launch mpi      one rank per MPI process (built where MPI was found):
//                     mpiexec -n 4 data_parallel_training_gpu --launch mpi
//
// Without a CUDA device it prints "CHORUS_SKIP: no CUDA device" and exits 77.
// Ends with "data_parallel_training_gpu: OK" when every rank holds the same
// model and the test accuracy reaches --min-accuracy.
#include <chorus/gpu.hpp>
#include <chorus/train.hpp>
#if defined(CHORUS_EXAMPLE_MPI)
#  include <chorus/gpu_mpi.hpp>
#endif

#include "digits.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace digits;
namespace train = chorus::train;
using comm_t = chorus::gpu::communicator;
using steady = std::chrono::steady_clock;

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

//! Device memory for n elements of T (zeroed), freed on destruction.
template <class T>
struct dev_vec {
    T* p = nullptr;
    std::size_t n = 0;
    explicit dev_vec(std::size_t count) : n(count) {
        cuda_ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
        cuda_ok(cudaMemset(p, 0, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMemset");
    }
    dev_vec(const dev_vec&) = delete;
    dev_vec& operator=(const dev_vec&) = delete;
    ~dev_vec() { (void)cudaFree(p); }
    std::span<T> span() const { return std::span<T>(p, n); }
};

unsigned blocks_for(std::size_t n) { return unsigned((n + 127) / 128); }

// ---------------------------------------------------------------- kernels ---

//! The parameter layout (digits.hpp) as kernel arguments.
struct dev_layout {
    std::size_t h, w1, b1, w2, b2;
};

// z1 = b1 + x W1, a1 = relu(z1): one thread per (sample, hidden unit).
__global__ void hidden_forward(dev_layout L, const float* w, const float* X, const int* idx, int b, float* z1, float* a1) {
    const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= std::size_t(b) * L.h) return;
    const std::size_t s = t / L.h, j = t % L.h;
    const float* x = X + std::size_t(idx[s]) * features;
    float z = w[L.b1 + j];
    for (int i = 0; i < features; ++i) z += x[i] * w[L.w1 + std::size_t(i) * L.h + j];
    z1[t] = z;
    a1[t] = z > 0.0f ? z : 0.0f;
}

// Logits, softmax, loss and dz2 = (p - onehot) / b into p (training), or the
// count of right answers (evaluation): one thread per sample.
__global__ void output_forward(dev_layout L, const float* w, const int* Y, const int* idx, int b, const float* a1,
                               float* p, double* loss, int* right, bool training) {
    const int s = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (s >= b) return;
    const float* a = a1 + std::size_t(s) * L.h;
    float* ps = p + std::size_t(s) * classes;
    float mx = -1e30f;
    for (int o = 0; o < classes; ++o) {
        float acc = w[L.b2 + std::size_t(o)];
        const float* wr = w + L.w2 + std::size_t(o) * L.h;
        for (std::size_t j = 0; j < L.h; ++j) acc += a[j] * wr[j];
        ps[o] = acc;
        mx = fmaxf(mx, acc);
    }
    const int y = Y[idx[s]];
    if (!training) {
        int best = 0;
        for (int o = 1; o < classes; ++o)
            if (ps[o] > ps[best]) best = o;
        if (best == y) atomicAdd(right, 1);
        return;
    }
    double sum = 0;
    for (int o = 0; o < classes; ++o) sum += exp(double(ps[o] - mx));
    const float inv_b = 1.0f / float(b);
    for (int o = 0; o < classes; ++o) {
        const float po = float(exp(double(ps[o] - mx)) / sum);
        if (o == y) atomicAdd(loss, -log(fmax(double(po), 1e-30)));
        ps[o] = (po - (o == y ? 1.0f : 0.0f)) * inv_b;
    }
}

// The output layer's gradient: dW2[o][j] = sum_s dz2[s][o] a1[s][j] and
// db2[o] = sum_s dz2[s][o] (j == h): one thread per (o, j).
__global__ void output_grad(dev_layout L, const float* dz, const float* a1, int b, float* g) {
    const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= std::size_t(classes) * (L.h + 1)) return;
    const std::size_t o = t / (L.h + 1), j = t % (L.h + 1);
    float acc = 0;
    for (int s = 0; s < b; ++s) acc += dz[std::size_t(s) * classes + o] * (j == L.h ? 1.0f : a1[std::size_t(s) * L.h + j]);
    if (j == L.h) g[L.b2 + o] = acc;
    else g[L.w2 + o * L.h + j] = acc;
}

// da1 = (W2^T dz2) * relu'(z1): one thread per (sample, hidden unit).
__global__ void hidden_backward(dev_layout L, const float* w, const float* dz, const float* z1, int b, float* da1) {
    const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= std::size_t(b) * L.h) return;
    const std::size_t s = t / L.h, j = t % L.h;
    float acc = 0;
    for (int o = 0; o < classes; ++o) acc += dz[s * classes + std::size_t(o)] * w[L.w2 + std::size_t(o) * L.h + j];
    da1[t] = z1[t] > 0.0f ? acc : 0.0f;
}

// The first layer's gradient: dW1[i][j] = sum_s x[s][i] da1[s][j] and
// db1[j] = sum_s da1[s][j] (i == 64): one thread per (i, j).
__global__ void hidden_grad(dev_layout L, const float* X, const int* idx, const float* da1, int b, float* g) {
    const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= std::size_t(features + 1) * L.h) return;
    const std::size_t i = t / L.h, j = t % L.h;
    float acc = 0;
    for (int s = 0; s < b; ++s) {
        const float xi = i == std::size_t(features) ? 1.0f : X[std::size_t(idx[s]) * features + i];
        acc += xi * da1[std::size_t(s) * L.h + j];
    }
    if (i == std::size_t(features)) g[L.b1 + j] = acc;
    else g[L.w1 + i * L.h + j] = acc;
}

__global__ void squared_norm(const float* g, std::size_t n, double* out) {
    double acc = 0;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
        acc += double(g[i]) * double(g[i]);
    atomicAdd(out, acc);
}

// Clipping to global norm c (train::clip_by_global_norm on the device), then
// SGD with momentum: v = mu v + g; w -= lr v.
__global__ void clip_and_sgd(float* w, float* v, float* g, std::size_t n, const double* norm2, double c, float lr,
                             float mu) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    if (c > 0) {
        const double norm = sqrt(*norm2);
        if (isfinite(norm) && norm > c) gi = float(double(gi) * (c / norm));
    }
    v[i] = mu * v[i] + gi;
    w[i] -= lr * v[i];
}

// -------------------------------------------------------------- training ---

//! What each rank reports at the end.
struct rank_summary {
    std::uint64_t hash = 0;
    std::int64_t steps = 0;
    double wait = 0;
};

//! One rank's training. `ready` waits for every rank to have allocated
//! what it needs (no rank allocates device memory while another's
//! collective kernels wait for it).
void train_rank(comm_t& comm, const options& o, const dataset& d, const split& sp, rank_summary& me, result& out,
                const std::function<void()>& ready) {
    const int r = comm.rank(), n = comm.size();
    cuda_ok(cudaSetDevice(comm.device()), "cudaSetDevice");
    cudaStream_t s = nullptr; // the compute stream: forward, backward, optimizer
    cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    struct stream_guard {
        cudaStream_t s;
        ~stream_guard() { (void)cudaStreamDestroy(s); }
    } sg{s};

    const layout L(std::size_t(o.hidden));
    const dev_layout DL{L.h, L.w1, L.b1, L.w2, L.b2};
    const std::size_t b = std::size_t(o.batch);
    const std::size_t rows = std::max(b, sp.test.size());
    dev_vec<float> w(L.total), g(L.total), v(L.total), X(d.x.size()), z1(rows * L.h), a1(rows * L.h),
        p(rows * classes), da1(b * L.h);
    dev_vec<int> Y(d.y.size()), idx(rows), test_idx(sp.test.size());
    dev_vec<double> loss(1), norm2(1);
    dev_vec<int> right(1);
    cuda_ok(cudaMemcpy(X.p, d.x.data(), d.x.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_ok(cudaMemcpy(Y.p, d.y.data(), d.y.size() * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy");
    {
        const std::vector<int> t(sp.test.begin(), sp.test.end());
        cuda_ok(cudaMemcpy(test_idx.p, t.data(), t.size() * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy");
    }

    // Rank 0 initialises (Glorot uniform, as the host program), everyone else receives it.
    if (r == 0) {
        std::vector<float> h(L.total);
        std::mt19937 gen(o.seed);
        auto init = [&](std::size_t off, std::size_t count, double fan_in, double fan_out) {
            const double a = std::sqrt(6.0 / (fan_in + fan_out));
            for (std::size_t i = 0; i < count; ++i) h[off + i] = float((double(gen()) / 4294967296.0 * 2 - 1) * a);
        };
        init(L.w1, std::size_t(features) * L.h, features, double(L.h));
        init(L.w2, std::size_t(classes) * L.h, double(L.h), classes);
        cuda_ok(cudaMemcpy(w.p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    }

    // The helper of the mode, made (and its device memory allocated) before the first collective.
    const auto policy = o.policy == "eager" ? train::staleness_policy::eager : train::staleness_policy::fixed_delay;
    std::optional<train::gradient_buckets<comm_t, float>> buckets;
    std::optional<train::gradient_accumulator<comm_t, float>> accumulator;
    std::optional<train::bounded_staleness<comm_t, float>> stale;
    if (o.mode == "sync") {
        // Gradient tensors in the order the backward kernels complete them.
        std::vector<std::span<float>> tensors{g.span().subspan(L.w2, std::size_t(classes) * L.h),
                                              g.span().subspan(L.b2, classes),
                                              g.span().subspan(L.w1, std::size_t(features) * L.h),
                                              g.span().subspan(L.b1, L.h)};
        buckets.emplace(comm, tensors, std::size_t(o.bucket_kb * 1024), s);
    } else if (o.mode == "hybrid") {
        accumulator.emplace(comm, L.total, o.accum, s);
    } else {
        stale.emplace(comm, L.total, o.staleness, s, policy);
    }
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    ready();
    chorus::broadcast(comm, w.span(), 0, s);

    // This rank's shard: every n-th training sample, batches from a reshuffled order (as the host program).
    std::vector<std::size_t> shard;
    for (std::size_t i = std::size_t(r); i < sp.train.size(); i += std::size_t(n)) shard.push_back(sp.train[i]);
    const std::size_t min_shard = sp.train.size() / std::size_t(n);
    if (b > min_shard) throw std::runtime_error("--batch is larger than a rank's shard of the training set");
    const std::int64_t steps_per_epoch = std::int64_t((min_shard + b - 1) / b);
    std::mt19937 data_gen(o.seed * 7919u + std::uint32_t(r) * 104729u + 1u);
    std::vector<std::size_t> order = shard;
    std::size_t cursor = order.size();
    std::vector<int> batch(b);
    auto next_batch = [&] {
        if (cursor + b > order.size()) {
            shuffle(order, data_gen);
            cursor = 0;
        }
        for (std::size_t k = 0; k < b; ++k) batch[k] = int(order[cursor + k]);
        cursor += b;
        // Pageable source: the copy has taken the indices when the call returns.
        cuda_ok(cudaMemcpyAsync(idx.p, batch.data(), b * sizeof(int), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    };

    const train::linear_warmup schedule(o.lr, o.warmup);
    std::int64_t updates = 0;
    auto update = [&](std::span<float> mean_grad, std::int64_t index) {
        if (o.clip > 0) {
            cuda_ok(cudaMemsetAsync(norm2.p, 0, sizeof(double), s), "cudaMemsetAsync");
            squared_norm<<<64, 256, 0, s>>>(mean_grad.data(), mean_grad.size(), norm2.p);
        }
        clip_and_sgd<<<blocks_for(L.total), 128, 0, s>>>(w.p, v.p, mean_grad.data(), L.total, norm2.p, o.clip,
                                                          float(schedule(index)), float(o.momentum));
        cuda_ok(cudaGetLastError(), "clip_and_sgd");
        ++updates;
    };

    double loss_count = 0;
    auto compute = [&](auto&& output_ready) {
        next_batch();
        const int bi = int(b);
        hidden_forward<<<blocks_for(b * L.h), 128, 0, s>>>(DL, w.p, X.p, idx.p, bi, z1.p, a1.p);
        output_forward<<<blocks_for(b), 128, 0, s>>>(DL, w.p, Y.p, idx.p, bi, a1.p, p.p, loss.p, right.p, true);
        loss_count += double(b);
        output_grad<<<blocks_for(classes * (L.h + 1)), 128, 0, s>>>(DL, p.p, a1.p, bi, g.p);
        output_ready();
        hidden_backward<<<blocks_for(b * L.h), 128, 0, s>>>(DL, w.p, p.p, z1.p, bi, da1.p);
        hidden_grad<<<blocks_for((features + 1) * L.h), 128, 0, s>>>(DL, X.p, idx.p, da1.p, bi, g.p);
        cuda_ok(cudaGetLastError(), "the model's kernels");
    };

    auto accuracy = [&] {
        const int nt = int(sp.test.size());
        cuda_ok(cudaMemsetAsync(right.p, 0, sizeof(int), s), "cudaMemsetAsync");
        hidden_forward<<<blocks_for(sp.test.size() * L.h), 128, 0, s>>>(DL, w.p, X.p, test_idx.p, nt, z1.p, a1.p);
        output_forward<<<blocks_for(sp.test.size()), 128, 0, s>>>(DL, w.p, Y.p, test_idx.p, nt, a1.p, p.p, loss.p,
                                                                 right.p, false);
        int h = 0;
        cuda_ok(cudaMemcpyAsync(&h, right.p, sizeof(int), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
        cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        return double(h) / double(nt);
    };

    const auto t0 = steady::now();
    double eval_s = 0;
    auto report = [&](int epoch, double global_samples, double wait_s) {
        if (r != 0) return;
        cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize"); // the epoch's work is done
        const auto te = steady::now();
        const double t = std::chrono::duration<double>(te - t0).count() - eval_s;
        double loss_sum = 0;
        cuda_ok(cudaMemcpyAsync(&loss_sum, loss.p, sizeof(double), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
        cuda_ok(cudaMemsetAsync(loss.p, 0, sizeof(double), s), "cudaMemsetAsync");
        const double acc = accuracy();
        eval_s += std::chrono::duration<double>(steady::now() - te).count();
        epoch_row row{epoch, updates, global_samples, t, loss_count > 0 ? loss_sum / loss_count : 0.0, acc,
                      global_samples / std::max(t, 1e-9), wait_s};
        loss_count = 0;
        out.rows.push_back(row);
        print_row(row);
    };

    std::int64_t my_steps = 0;
    const double per_step = double(n) * double(b);
    if (buckets) {
        for (int e = 0; e < o.epochs; ++e) {
            for (std::int64_t k = 0; k < steps_per_epoch; ++k) {
                compute([&] {
                    buckets->mark_ready(0);
                    buckets->mark_ready(1);
                });
                buckets->mark_ready(2);
                buckets->mark_ready(3);
                buckets->wait_all(); // enqueues: the compute stream waits for the AllReduces
                update(g.span(), updates);
                ++my_steps;
            }
            report(e + 1, double(my_steps) * per_step, buckets->wait_seconds());
        }
        me.wait = buckets->wait_seconds();
    } else if (accumulator) {
        auto& acc = *accumulator;
        for (int e = 0; e < o.epochs; ++e) {
            for (std::int64_t k = 0; k < steps_per_epoch; ++k) {
                compute([] {});
                if (acc.add(g.span())) update(acc.gradient(), updates);
                ++my_steps;
            }
            report(e + 1, double(my_steps) * per_step, acc.wait_seconds());
        }
        me.wait = acc.wait_seconds();
    } else {
        auto& st = *stale;
        auto apply = [&](std::span<float> mean, const train::stale_update& u) { update(mean, u.round); };
        if (policy == train::staleness_policy::fixed_delay) {
            for (int e = 0; e < o.epochs; ++e) {
                for (std::int64_t k = 0; k < steps_per_epoch; ++k) {
                    compute([] {});
                    st.step(std::span<const float>(g.p, L.total), apply);
                    ++my_steps;
                }
                if (e + 1 == o.epochs) st.finish(apply);
                report(e + 1, double(my_steps) * per_step, st.wait_seconds());
            }
        } else {
            const double epoch_steps = double(steps_per_epoch) * n;
            int e = 0;
            while (e < o.epochs) {
                compute([] {});
                st.step(std::span<const float>(g.p, L.total), apply);
                ++my_steps;
                while (e < o.epochs && st.global_steps_applied() >= epoch_steps * (e + 1)) {
                    ++e;
                    if (e == o.epochs) st.finish(apply);
                    report(e, st.global_steps_applied() * double(b), st.wait_seconds());
                }
            }
        }
        me.wait = st.wait_seconds();
    }

    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    cuda_ok(cudaStreamSynchronize(comm.stream()), "cudaStreamSynchronize");
    comm.check(); // a failed collective of this rank
    std::vector<float> h(L.total);
    cuda_ok(cudaMemcpy(h.data(), w.p, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    me.hash = fnv1a(h);
    me.steps = my_steps;
    if (r == 0) out.final_acc = out.rows.empty() ? 0.0 : out.rows.back().test_acc;
}

//! The result of all ranks' summaries (rank 0's rows already in `res`).
void summarize(const std::vector<rank_summary>& all, result& res) {
    res.replicas_agree = std::all_of(all.begin(), all.end(), [&](const rank_summary& x) { return x.hash == all[0].hash; });
    for (const auto& x : all) {
        res.steps_per_rank.push_back(x.steps);
        res.wait_per_rank.push_back(x.wait);
    }
}

int run_virtual(const options& o, const dataset& d, const split& sp) {
    print_header(o, o.ranks, sp, " (virtual, device 0)");
    auto comms = chorus::gpu::make_communicators(std::vector<int>(std::size_t(o.ranks), 0));
    std::vector<rank_summary> all(std::size_t(o.ranks));
    result res;
    std::mutex m;
    std::string failure;
    std::vector<std::thread> threads;
    std::barrier<> go(o.ranks);
    for (int r = 0; r < o.ranks; ++r)
        threads.emplace_back([&, r] {
            bool arrived = false;
            try {
                train_rank(comms[std::size_t(r)], o, d, sp, all[std::size_t(r)], res, [&] {
                    arrived = true;
                    go.arrive_and_wait();
                });
            } catch (const std::exception& e) {
                if (!arrived) go.arrive_and_drop();
                std::lock_guard<std::mutex> lk(m);
                if (failure.empty()) failure = "rank " + std::to_string(r) + ": " + e.what();
            }
        });
    for (auto& t : threads) t.join();
    if (!failure.empty()) {
        std::fprintf(stderr, "%s: error: %s\n", program, failure.c_str());
        return 1;
    }
    summarize(all, res);
    return finish(o, o.ranks, res);
}

#if defined(CHORUS_EXAMPLE_MPI)
int run_mpi(const options& o, const dataset& d, const split& sp, int devices) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) print_header(o, size, sp, " (one process each)");
    rank_summary me;
    result res;
    try {
        auto comm = chorus::gpu::make_communicator(MPI_COMM_WORLD, rank % devices);
        train_rank(comm, o, d, sp, me, res, [] { MPI_Barrier(MPI_COMM_WORLD); });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: rank %d: %s\n", program, rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1); // the other ranks may be waiting in a collective
    }
    std::vector<rank_summary> all(static_cast<std::size_t>(size));
    MPI_Gather(&me, int(sizeof me), MPI_BYTE, all.data(), int(sizeof me), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != 0) return 0;
    summarize(all, res);
    return finish(o, size, res);
}
#endif

} // namespace

int main(int argc, char** argv) {
    program = "data_parallel_training_gpu";
    gpu_program = true;
    // Each virtual rank uses two streams (compute, communication) whose kernels must run side by side:
    // more hardware queues than CUDA's default 8, unless the user chose (set before the first CUDA call).
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    const options o = parse(argc, argv);
#if defined(CHORUS_EXAMPLE_MPI)
    if (o.launch == "mpi") MPI_Init(&argc, &argv);
#else
    if (o.launch == "mpi") bad_usage("--launch mpi: this build has no MPI");
#endif
    int devices = 0;
    int rc = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("CHORUS_SKIP: no CUDA device\n");
        rc = 77;
    } else {
        const dataset d = load_digits(o.data);
        const split sp = make_split(d, o.seed);
        try {
#if defined(CHORUS_EXAMPLE_MPI)
            rc = o.launch == "mpi" ? run_mpi(o, d, sp, devices) : run_virtual(o, d, sp);
#else
            rc = run_virtual(o, d, sp);
#endif
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: error: %s\n", program, e.what());
            rc = 1;
        }
    }
#if defined(CHORUS_EXAMPLE_MPI)
    if (o.launch == "mpi") MPI_Finalize();
#endif
    return rc;
}
