// What the digits training examples share (data_parallel_training.cpp on
// host threads, data_parallel_training_gpu.cu on GPU communicators): the
// options, the digits data and its split, the model's parameter layout, and
// the closing report (per-rank lines, the CSV, the replica and accuracy
// checks). The model itself is each program's own.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace digits {

//! The program's name in its messages.
inline const char* program = "data_parallel_training";
//! True in the GPU program: --launch is accepted, --straggler-rank and --device-us are not.
inline bool gpu_program = false;

inline constexpr const char* default_digits = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
inline constexpr int features = 64, classes = 10;

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
    std::string launch = "virtual"; // GPU program: virtual | mpi
};

inline void usage(std::FILE* f) {
    std::fprintf(f, "usage: %s [options]\n", program);
    if (gpu_program)
        std::fprintf(f, "  --launch L           virtual: --ranks ranks on device 0, one thread each (default);\n"
                        "                       mpi: one rank per MPI process, on device (MPI rank %% devices)\n");
    std::fprintf(f,
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

[[noreturn]] inline void bad_usage(const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n", program, msg.c_str());
    usage(stderr);
    std::exit(2);
}

inline double to_double(const std::string& flag, const char* v) {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !std::isfinite(x)) bad_usage(flag + " needs a number, got '" + v + "'");
    return x;
}

inline int to_int(const std::string& flag, const char* v) {
    const double x = to_double(flag, v);
    if (x != std::floor(x) || std::abs(x) > 1e9) bad_usage(flag + " needs an integer, got '" + v + "'");
    return int(x);
}

inline options parse(int argc, char** argv) {
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
        else if (a == "--launch" && gpu_program) o.launch = v;
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
    if (gpu_program) {
        if (o.launch != "virtual" && o.launch != "mpi") bad_usage("--launch must be virtual or mpi");
        if (o.straggler_rank >= 0 || o.device_us > 0)
            bad_usage("--straggler-rank and --device-us are for the host program (data_parallel_training)");
    }
    return o; // --accum, --staleness, --straggler-rank, --slowdown: checked by chorus::train
}


// ------------------------------------------------------------------- data ---

struct dataset {
    std::vector<float> x; // n x 64, pixels / 16
    std::vector<int> y;
    std::size_t size() const { return y.size(); }
};

[[noreturn]] inline void data_error(const std::string& path, const std::string& why) {
    std::fprintf(stderr,
                 "%s: cannot read the digits data at %s: %s\n"
                 "  It ships with Debian's python3-sklearn (apt-get install python3-sklearn);\n"
                 "  or pass --data PATH / set CHORUS_DIGITS to a digits.csv.gz.\n",
                 program, path.c_str(), why.c_str());
    std::exit(2);
}

inline dataset load_digits(const std::string& path) {
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
inline void shuffle(std::vector<std::size_t>& v, std::mt19937& g) {
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


inline std::uint64_t fnv1a(const std::vector<float>& w) {
    std::uint64_t hsh = 1469598103934665603ull;
    const auto* b = reinterpret_cast<const unsigned char*>(w.data());
    for (std::size_t i = 0; i < w.size() * sizeof(float); ++i) hsh = (hsh ^ b[i]) * 1099511628211ull;
    return hsh;
}


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


// ---------------------------------------------------------------- the run ---

//! The train/test split: 80 / 20, shuffled with the seed.
struct split {
    std::vector<std::size_t> train, test;
};

inline split make_split(const dataset& d, std::uint32_t seed) {
    std::vector<std::size_t> all(d.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::mt19937 split_gen(seed);
    shuffle(all, split_gen);
    const std::size_t n_test = d.size() / 5;
    split s;
    s.test.assign(all.begin(), all.begin() + std::ptrdiff_t(n_test));
    s.train.assign(all.begin() + std::ptrdiff_t(n_test), all.end());
    return s;
}

//! The first line: what runs, on how many ranks, on what data.
inline void print_header(const options& o, int ranks, const split& s, const char* where = "") {
    std::string what = o.mode;
    if (o.mode == "async") what += " (" + o.policy + ", staleness " + std::to_string(o.staleness) + ")";
    if (o.mode == "hybrid") what += " (accumulation " + std::to_string(o.accum) + ")";
    std::printf("%s: %s, %d ranks%s, batch %d per rank, hidden %d, %zu train / %zu test images", program, what.c_str(),
                ranks, where, o.batch, o.hidden, s.train.size(), s.test.size());
    if (o.straggler_rank >= 0) std::printf(", rank %d slowed %.3gx", o.straggler_rank, o.slowdown);
    std::printf("\n");
}

//! One line of the accuracy table (rank 0, after each epoch).
inline void print_row(const epoch_row& row) {
    std::printf("epoch %3d  loss %.4f  test acc %.4f  samples/s %8.0f  wait %.3f s  (updates %lld, %.2f s)\n",
                row.epoch, row.loss, row.test_acc, row.samples_per_s, row.wait_s, static_cast<long long>(row.updates),
                row.time_s);
    std::fflush(stdout);
}

//! The end of a run: per-rank lines, the CSV (--csv), the checks; the exit code.
inline int finish(const options& o, int ranks, const result& res) {
    for (std::size_t r = 0; r < res.steps_per_rank.size(); ++r)
        std::printf("rank %zu: %lld steps, %.3f s blocked in collectives\n", r,
                    static_cast<long long>(res.steps_per_rank[r]), res.wait_per_rank[r]);

    if (!o.csv.empty()) {
        std::FILE* f = std::fopen(o.csv.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "%s: error: cannot write %s: %s\n", program, o.csv.c_str(), std::strerror(errno));
            return 1;
        }
        std::fprintf(f, "mode,policy,ranks,straggler_rank,slowdown,batch,epoch,updates,samples,time_s,loss,test_acc,"
                        "samples_per_s,wait_s\n");
        const std::string policy = o.mode == "async" ? o.policy : "";
        for (const auto& row : res.rows)
            std::fprintf(f, "%s,%s,%d,%d,%g,%d,%d,%lld,%.0f,%.6f,%.6f,%.6f,%.1f,%.6f\n", o.mode.c_str(), policy.c_str(),
                         ranks, o.straggler_rank, o.straggler_rank >= 0 ? o.slowdown : 1.0, o.batch, row.epoch,
                         static_cast<long long>(row.updates), row.samples, row.time_s, row.loss, row.test_acc,
                         row.samples_per_s, row.wait_s);
        std::fclose(f);
    }

    if (!res.replicas_agree) {
        std::fprintf(stderr, "%s: error: the ranks ended with different models\n", program);
        return 1;
    }
    if (!(res.final_acc >= o.min_accuracy)) {
        std::fprintf(stderr, "%s: error: test accuracy %.4f is below --min-accuracy %.4f\n", program, res.final_acc,
                     o.min_accuracy);
        return 1;
    }
    std::printf("%s: OK (test accuracy %.4f)\n", program, res.final_acc);
    return 0;
}

} // namespace digits
