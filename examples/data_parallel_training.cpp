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
// override the path.

#include <chorus/chorus.hpp>
#include <chorus/train.hpp>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
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

namespace train = chorus::train;
using comm_t = chorus::communicator<chorus::threads>;
using steady = std::chrono::steady_clock;

constexpr const char* default_digits = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
constexpr int features = 64, classes = 10;

// ---------------------------------------------------------------- options ---

struct options {
    int ranks = 4;
    std::string mode = "sync"; // sync | hybrid | async
    std::string policy = "fixed";
    int staleness = 3;
    int accum = 4;
    int epochs = 60;
    int batch = -1; // per rank and step (per micro-batch in hybrid); -1: mode default
    int hidden = 1024;
    double lr = 0.1;
    double momentum = -1; // -1: mode default
    int warmup = -1;    // -1: mode default
    double clip = -1;   // -1: mode default; 0: off
    double bucket_kb = 64;
    int straggler_rank = -1;
    double slowdown = 2.0;
    double device_us = 0; // pad each step's compute to this many microseconds per sample
    std::uint32_t seed = 1;
    std::string data;
    std::string csv;
    double min_accuracy = 0.9;
};

void usage(std::FILE* f) {
    std::fprintf(f,
                 "usage: data_parallel_training [options]\n"
                 "  --ranks N            ranks (threads), default 4\n"
                 "  --mode M             sync | hybrid | async, default sync\n"
                 "  --policy P           async: fixed (reproducible) | eager (straggler-tolerant), default fixed\n"
                 "  --staleness S        async: staleness bound in steps, default 3\n"
                 "  --accum K            hybrid: micro-batches per AllReduce, default 4\n"
                 "  --epochs E           passes over each rank's shard, default 60\n"
                 "  --batch B            samples per rank and step (hybrid: per micro-batch); default 128,\n"
                 "                       hybrid 32 (so that one AllReduce covers 128 samples per rank as well)\n"
                 "  --hidden H           hidden units, default 1024\n"
                 "  --lr X               peak learning rate (SGD with momentum), default 0.1\n"
                 "  --momentum X         default 0.9; async 0.5 (stale updates already act like momentum)\n"
                 "  --warmup N           warm-up updates; default 20 for async, 0 otherwise\n"
                 "  --clip X             clip the averaged gradient to global norm X (0: off); default 5 for async, off otherwise\n"
                 "  --bucket-kb X        sync: gradient bucket size in KiB, default 64\n"
                 "  --straggler-rank R   slow down rank R (default: none)\n"
                 "  --slowdown F         ... by factor F, default 2\n"
                 "  --device-us U        pad each step's compute with sleep to at least U microseconds per sample:\n"
                 "                       emulates ranks with a device each (their step time does not depend on\n"
                 "                       how many cores the host shares among them); default 0 (off)\n"
                 "  --seed N             default 1\n"
                 "  --data PATH          digits.csv.gz (default: $CHORUS_DIGITS, else %s)\n"
                 "  --csv FILE           write one row per epoch\n"
                 "  --min-accuracy X     fail below this final test accuracy, default 0.9\n",
                 default_digits);
}

[[noreturn]] void bad_usage(const std::string& msg) {
    std::fprintf(stderr, "data_parallel_training: %s\n", msg.c_str());
    usage(stderr);
    std::exit(2);
}

double to_double(const std::string& flag, const char* v) {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !std::isfinite(x)) bad_usage(flag + " needs a number, got '" + v + "'");
    return x;
}

int to_int(const std::string& flag, const char* v) {
    const double x = to_double(flag, v);
    if (x != std::floor(x) || std::abs(x) > 1e9) bad_usage(flag + " needs an integer, got '" + v + "'");
    return int(x);
}

options parse(int argc, char** argv) {
    options o;
    if (const char* env = std::getenv("CHORUS_DIGITS"); env && *env) o.data = env;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        }
        if (i + 1 >= argc) bad_usage("unknown option or missing value: " + a);
        const char* v = argv[++i];
        if (a == "--ranks") o.ranks = to_int(a, v);
        else if (a == "--mode") o.mode = v;
        else if (a == "--policy") o.policy = v;
        else if (a == "--staleness") o.staleness = to_int(a, v);
        else if (a == "--accum") o.accum = to_int(a, v);
        else if (a == "--epochs") o.epochs = to_int(a, v);
        else if (a == "--batch") o.batch = to_int(a, v);
        else if (a == "--hidden") o.hidden = to_int(a, v);
        else if (a == "--lr") o.lr = to_double(a, v);
        else if (a == "--momentum") o.momentum = to_double(a, v);
        else if (a == "--warmup") o.warmup = to_int(a, v);
        else if (a == "--clip") o.clip = to_double(a, v);
        else if (a == "--bucket-kb") o.bucket_kb = to_double(a, v);
        else if (a == "--straggler-rank") o.straggler_rank = to_int(a, v);
        else if (a == "--slowdown") o.slowdown = to_double(a, v);
        else if (a == "--device-us") o.device_us = to_double(a, v);
        else if (a == "--seed") o.seed = std::uint32_t(to_int(a, v));
        else if (a == "--data") o.data = v;
        else if (a == "--csv") o.csv = v;
        else if (a == "--min-accuracy") o.min_accuracy = to_double(a, v);
        else bad_usage("unknown option " + a);
    }
    if (o.mode != "sync" && o.mode != "hybrid" && o.mode != "async") bad_usage("--mode must be sync, hybrid or async");
    if (o.policy != "fixed" && o.policy != "eager") bad_usage("--policy must be fixed or eager");
    if (o.batch < 0) o.batch = o.mode == "hybrid" ? 32 : 128;
    if (o.momentum < 0) o.momentum = o.mode == "async" ? 0.5 : 0.9;
    if (o.ranks < 1 || o.epochs < 1 || o.batch < 1 || o.hidden < 1) bad_usage("--ranks, --epochs, --batch, --hidden must be >= 1");
    if (o.momentum >= 1) bad_usage("--momentum must be in [0, 1)");
    if (o.bucket_kb <= 0) bad_usage("--bucket-kb must be positive");
    if (o.device_us < 0) bad_usage("--device-us must be >= 0");
    if (o.warmup < 0) o.warmup = o.mode == "async" ? 20 : 0;
    if (o.clip < 0) o.clip = o.mode == "async" ? 5.0 : 0.0;
    if (o.data.empty()) o.data = default_digits;
    return o; // --accum, --staleness, --straggler-rank, --slowdown: checked by chorus::train
}

// ------------------------------------------------------------------- data ---

struct dataset {
    std::vector<float> x; // n x 64, pixels / 16
    std::vector<int> y;
    std::size_t size() const { return y.size(); }
};

[[noreturn]] void data_error(const std::string& path, const std::string& why) {
    std::fprintf(stderr,
                 "data_parallel_training: cannot read the digits data at %s: %s\n"
                 "  It ships with Debian's python3-sklearn (apt-get install python3-sklearn);\n"
                 "  or pass --data PATH / set CHORUS_DIGITS to a digits.csv.gz.\n",
                 path.c_str(), why.c_str());
    std::exit(2);
}

dataset load_digits(const std::string& path) {
    auto fail = [&](const std::string& why) { data_error(path, why); };
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) fail(std::strerror(errno));
    std::string text;
    std::array<char, 1 << 16> buf;
    for (;;) {
        const int got = gzread(f, buf.data(), unsigned(buf.size()));
        if (got < 0) {
            int err = 0;
            const std::string msg = gzerror(f, &err);
            gzclose(f);
            fail("decompression failed: " + msg);
        }
        if (got == 0) break;
        text.append(buf.data(), std::size_t(got));
    }
    gzclose(f);

    dataset d;
    std::size_t line = 0, pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        ++line;
        if (eol > pos) {
            const char* p = text.data() + pos;
            const char* end = text.data() + eol;
            double v[features + 1];
            int k = 0;
            while (k <= features) {
                char* q = nullptr;
                v[k] = std::strtod(p, &q);
                if (q == p || q > end) break;
                ++k;
                p = q;
                if (p < end && *p == ',') ++p;
            }
            const double label = v[features];
            if (k != features + 1 || label < 0 || label > 9 || label != std::floor(label))
                fail("line " + std::to_string(line) + " is not 64 pixels and a label 0..9");
            for (int i = 0; i < features; ++i) d.x.push_back(float(v[i] / 16.0));
            d.y.push_back(int(label));
        }
        pos = eol + 1;
    }
    if (d.size() < 100) fail("only " + std::to_string(d.size()) + " images");
    return d;
}

// Fisher-Yates with mt19937 (fully specified by the standard, unlike
// std::shuffle's use of it), so a seed means the same order everywhere.
void shuffle(std::vector<std::size_t>& v, std::mt19937& g) {
    for (std::size_t i = v.size(); i > 1; --i) {
        const std::size_t j = std::size_t(g() % std::uint32_t(i));
        std::swap(v[i - 1], v[j]);
    }
}

// ------------------------------------------------------------------ model ---

// 64 -> H (ReLU) -> 10 (softmax). All parameters in one flat vector, and
// the gradient in another with the same layout, so buckets of adjacent
// tensors reduce in place. W1 is stored input-major ([64][H]) and W2
// output-major ([10][H]) so that the inner loops run over H contiguously.
struct layout {
    std::size_t h;
    std::size_t w1 = 0, b1, w2, b2, total;
    explicit layout(std::size_t hidden) : h(hidden) {
        b1 = w1 + std::size_t(features) * h;
        w2 = b1 + h;
        b2 = w2 + std::size_t(classes) * h;
        total = b2 + classes;
    }
};

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

std::uint64_t fnv1a(const std::vector<float>& w) {
    std::uint64_t hsh = 1469598103934665603ull;
    const auto* b = reinterpret_cast<const unsigned char*>(w.data());
    for (std::size_t i = 0; i < w.size() * sizeof(float); ++i) hsh = (hsh ^ b[i]) * 1099511628211ull;
    return hsh;
}

// ---------------------------------------------------------------- training ---

struct epoch_row {
    int epoch;
    std::int64_t updates;
    double samples, time_s, loss, test_acc, samples_per_s, wait_s;
};

struct result {
    std::vector<epoch_row> rows;
    double final_acc = 0;
    bool replicas_agree = false;
    std::vector<std::int64_t> steps_per_rank;
    std::vector<double> wait_per_rank;
};

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
        std::printf("epoch %3d  loss %.4f  test acc %.4f  samples/s %8.0f  wait %.3f s  (updates %lld, %.2f s)\n",
                    epoch, row.loss, row.test_acc, row.samples_per_s, row.wait_s, static_cast<long long>(row.updates),
                    row.time_s);
        std::fflush(stdout);
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

    // Train/test split: 80 / 20, shuffled with the seed.
    std::vector<std::size_t> all(d.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::mt19937 split_gen(o.seed);
    shuffle(all, split_gen);
    const std::size_t n_test = d.size() / 5;
    const std::vector<std::size_t> test_idx(all.begin(), all.begin() + std::ptrdiff_t(n_test));
    const std::vector<std::size_t> train_idx(all.begin() + std::ptrdiff_t(n_test), all.end());

    std::string what = o.mode;
    if (o.mode == "async") what += " (" + o.policy + ", staleness " + std::to_string(o.staleness) + ")";
    if (o.mode == "hybrid") what += " (accumulation " + std::to_string(o.accum) + ")";
    std::printf("data_parallel_training: %s, %d ranks, batch %d per rank, hidden %d, %zu train / %zu test images",
                what.c_str(), o.ranks, o.batch, o.hidden, train_idx.size(), test_idx.size());
    if (o.straggler_rank >= 0) std::printf(", rank %d slowed %.3gx", o.straggler_rank, o.slowdown);
    std::printf("\n");

    result res;
    try {
        chorus::run_threads(o.ranks, [&](comm_t& comm) { train_rank(comm, o, d, train_idx, test_idx, res); });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "data_parallel_training: error: %s\n", e.what());
        return 1;
    }

    for (std::size_t r = 0; r < res.steps_per_rank.size(); ++r)
        std::printf("rank %zu: %lld steps, %.3f s blocked in collectives\n", r,
                    static_cast<long long>(res.steps_per_rank[r]), res.wait_per_rank[r]);

    if (!o.csv.empty()) {
        std::FILE* f = std::fopen(o.csv.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "data_parallel_training: error: cannot write %s: %s\n", o.csv.c_str(), std::strerror(errno));
            return 1;
        }
        std::fprintf(f, "mode,policy,ranks,straggler_rank,slowdown,batch,epoch,updates,samples,time_s,loss,test_acc,"
                        "samples_per_s,wait_s\n");
        const std::string policy = o.mode == "async" ? o.policy : "";
        for (const auto& row : res.rows)
            std::fprintf(f, "%s,%s,%d,%d,%g,%d,%d,%lld,%.0f,%.6f,%.6f,%.6f,%.1f,%.6f\n", o.mode.c_str(), policy.c_str(),
                         o.ranks, o.straggler_rank, o.straggler_rank >= 0 ? o.slowdown : 1.0, o.batch, row.epoch,
                         static_cast<long long>(row.updates), row.samples, row.time_s, row.loss, row.test_acc,
                         row.samples_per_s, row.wait_s);
        std::fclose(f);
    }

    if (!res.replicas_agree) {
        std::fprintf(stderr, "data_parallel_training: error: the ranks ended with different models\n");
        return 1;
    }
    if (!(res.final_acc >= o.min_accuracy)) {
        std::fprintf(stderr, "data_parallel_training: error: test accuracy %.4f is below --min-accuracy %.4f\n",
                     res.final_acc, o.min_accuracy);
        return 1;
    }
    std::printf("data_parallel_training: OK (test accuracy %.4f)\n", res.final_acc);
    return 0;
}
