// Soak: thousands of random collectives on the threads backend, each checked
// element by element against a serial reference. Every rank seeds its own
// RNG identically, so all ranks draw the same sequence of calls (collective,
// policy, operator, element type, count, in place or not, sync or an async
// batch, root) and stay in step. Inputs are small integers, so every result,
// floating point included, is exact.
//
// Policies are run-time values: half the calls draw one of three rings
// (ring<>, 2 channels x 64 B, 3 channels x 1 KiB), the other half one of
// direct, tree, recursive_doubling, rabenseifner, two_shot (some tuned to
// several channels and small chunks), hierarchical<> (one node), automatic
// and deterministic<>, with every operator. ring<> goes through the public
// template API (chorus::all_reduce<chorus::ring<>>(...), ..._async), the
// others through chorus::detail::*_run. So the code is instantiated per
// (type, operator) only: 23 reduction pairs (5 types x {sum, min, max, avg}
// and bit_xor on the 3 integer types) and 5 copy-only types.

#include "test_util.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace chorus_test;
using comm_t = chorus::communicator<chorus::threads>;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool soak_sanitized = true;
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool soak_sanitized = true;
#  else
constexpr bool soak_sanitized = false;
#  endif
#else
constexpr bool soak_sanitized = false;
#endif

enum coll_k : int { k_all_reduce, k_all_gather, k_reduce_scatter, k_broadcast, k_reduce, k_barrier, k_colls };
enum op_k : int { o_sum, o_min, o_max, o_xor, o_avg };
enum type_k : int { t_i32, t_f32, t_f64, t_u8, t_i64, t_types };

const char* coll_names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "barrier"};
const char* op_names[] = {"sum", "min", "max", "bit_xor", "avg"};
const char* type_names[] = {"int32", "float", "double", "uint8", "int64"};

using ring_a = chorus::ring<>;
using ring_b = chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 64}>;
using ring_c = chorus::ring<chorus::ring_params{.channels = 3, .chunk_bytes = 1024}>;

//! The policies calls draw from: the three rings first (index 0, ring<>, runs through the public template API).
const named_policy policies[] = {
    {"ring<>", chorus::policy_of<ring_a>},
    {"ring<2ch,64B>", chorus::policy_of<ring_b>},
    {"ring<3ch,1KiB>", chorus::policy_of<ring_c>},
    {"direct<2ch,512B>", chorus::policy_of<chorus::direct<chorus::direct_params{2, 512}>>},
    {"tree<>", chorus::policy_of<chorus::tree<>>},
    {"recursive_doubling<2ch,256B>", chorus::policy_of<chorus::recursive_doubling<chorus::recursive_params{2, 256}>>},
    {"rabenseifner<>", chorus::policy_of<chorus::rabenseifner<>>},
    {"two_shot<3ch,128B>", chorus::policy_of<chorus::two_shot<chorus::recursive_params{3, 128}>>},
    {"hierarchical<>", chorus::policy_of<chorus::hierarchical<>>},
    {"automatic", chorus::policy_of<chorus::automatic>},
    {"deterministic<>", chorus::policy_of<chorus::deterministic<>>},
};
constexpr int n_rings = 3;
constexpr int n_policies = int(sizeof(policies) / sizeof(policies[0]));

//! One drawn call; identical on every rank.
struct call {
    int coll = 0, algo = 0, op = 0, type = 0;
    std::size_t count = 0; //!< per-rank block for all_gather / reduce_scatter, else the buffer length
    bool in_place = false;
    int root = 0;
    std::uint64_t salt = 0;

    std::string str() const {
        return std::string(coll_names[coll]) + " " + type_names[type] + " op " + op_names[op] + " algo " +
               policies[algo].name + " count " + std::to_string(count) + (in_place ? " in-place" : "") + " root " +
               std::to_string(root) + " salt " + std::to_string(salt);
    }
};

call draw(std::mt19937_64& rng, int n) {
    auto pick = [&](std::uint64_t k) { return static_cast<int>(rng() % k); };
    call c;
    c.coll = pick(k_colls);
    c.type = pick(t_types);
    const bool integral = c.type == t_i32 || c.type == t_u8 || c.type == t_i64;
    if (integral) {
        c.op = pick(5);
    } else {
        static constexpr int fops[] = {o_sum, o_min, o_max, o_avg};
        c.op = fops[pick(4)];
    }
    c.algo = pick(2) == 0 ? pick(n_rings) : n_rings + pick(n_policies - n_rings);
    const int band = pick(100);
    if (band < 40) c.count = std::size_t(pick(17));
    else if (band < 75) c.count = std::size_t(pick(301));
    else if (band < 98) c.count = std::size_t(pick(3001));
    else c.count = 20000;
    c.in_place = pick(2) == 1;
    c.root = pick(std::uint64_t(n));
    c.salt = rng() & 0xffff;
    return c;
}

//! Rank r's input element i (a small integer).
template <class T>
T input(int r, std::size_t i, std::uint64_t salt) {
    const std::uint64_t h = (std::uint64_t(i) * 2654435761u + std::uint64_t(r) * 40503u + salt * 97u) >> 3;
    if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<T>(h % 41);
    else return static_cast<T>(static_cast<int>(h % 61) - 30);
}

template <class T>
T sentinel() {
    if constexpr (std::is_same_v<T, std::uint8_t>) return T(0xEE);
    else return static_cast<T>(-777);
}

template <class T, class Op>
T fold(int n, std::size_t i, std::uint64_t salt) {
    Op op{};
    T acc = input<T>(0, i, salt);
    for (int r = 1; r < n; ++r) acc = static_cast<T>(op(acc, input<T>(r, i, salt)));
    if constexpr (std::is_same_v<Op, chorus::avg>) acc = op.finish(acc, n);
    return acc;
}

template <class T>
T reference(int op, int n, std::size_t i, std::uint64_t salt) {
    switch (op) {
    case o_sum: return fold<T, chorus::sum>(n, i, salt);
    case o_min: return fold<T, chorus::min>(n, i, salt);
    case o_max: return fold<T, chorus::max>(n, i, salt);
    case o_avg: return fold<T, chorus::avg>(n, i, salt);
    default:
        if constexpr (std::is_integral_v<T>) return fold<T, chorus::bit_xor>(n, i, salt);
        else return T{};
    }
}

struct job_base {
    call c;
    chorus::future f;
    virtual ~job_base() = default;
    //! Checks the outputs; returns the number of checked elements.
    virtual std::size_t check(int r, int n, failure_log& log) = 0;
};

template <class T>
struct job final : job_base {
    std::vector<T> a, b; //!< a: input (or the in-place buffer); b: output

    std::span<const T> ca() const { return std::span<const T>(a); }

    void prepare(int r, int n) {
        const std::size_t m = c.count, nn = std::size_t(n);
        auto fill_in = [&](std::vector<T>& v, std::size_t len) {
            v.resize(len);
            for (std::size_t i = 0; i < len; ++i) v[i] = input<T>(r, i, c.salt);
        };
        switch (c.coll) {
        case k_all_reduce:
            fill_in(a, m);
            if (!c.in_place) b.assign(m, sentinel<T>());
            break;
        case k_all_gather:
            if (c.in_place) {
                a.assign(nn * m, sentinel<T>());
                for (std::size_t j = 0; j < m; ++j) a[std::size_t(r) * m + j] = input<T>(r, j, c.salt);
            } else {
                fill_in(a, m);
                b.assign(nn * m, sentinel<T>());
            }
            break;
        case k_reduce_scatter:
            fill_in(a, nn * m);
            if (!c.in_place) b.assign(m, sentinel<T>());
            break;
        case k_broadcast:
            if (r == c.root) fill_in(a, m);
            else a.assign(m, sentinel<T>());
            break;
        case k_reduce:
            fill_in(a, m);
            if (r == c.root && !c.in_place) b.assign(m, sentinel<T>());
            break;
        default: break;
        }
    }

    std::span<T> out_span(int r, int n) {
        const std::size_t m = c.count;
        switch (c.coll) {
        case k_all_reduce: return c.in_place ? std::span<T>(a) : std::span<T>(b);
        case k_all_gather: return c.in_place ? std::span<T>(a) : std::span<T>(b);
        case k_reduce_scatter: return c.in_place ? std::span<T>(a).subspan(std::size_t(r) * m, m) : std::span<T>(b);
        case k_broadcast: return std::span<T>(a);
        case k_reduce:
            if (r != c.root) return {};
            return c.in_place ? std::span<T>(a) : std::span<T>(b);
        default: return {};
        }
        (void)n;
    }

    std::size_t check(int r, int n, failure_log& log) override {
        const std::size_t m = c.count;
        std::span<T> out = out_span(r, n);
        std::size_t bad = 0, first_bad = 0;
        T got{}, want{};
        auto expect = [&](std::size_t i, T w) {
            if (!same_bits(out[i], w) && !(out[i] == w)) {
                if (bad++ == 0) {
                    first_bad = i;
                    got = out[i];
                    want = w;
                }
            }
        };
        switch (c.coll) {
        case k_all_reduce:
        case k_reduce:
            for (std::size_t i = 0; i < out.size(); ++i) expect(i, reference<T>(c.op, n, i, c.salt));
            break;
        case k_all_gather:
            for (std::size_t q = 0; q < std::size_t(n); ++q)
                for (std::size_t j = 0; j < m; ++j) expect(q * m + j, input<T>(int(q), j, c.salt));
            break;
        case k_reduce_scatter:
            for (std::size_t j = 0; j < m; ++j) expect(j, reference<T>(c.op, n, std::size_t(r) * m + j, c.salt));
            break;
        case k_broadcast:
            for (std::size_t j = 0; j < m; ++j) expect(j, input<T>(c.root, j, c.salt));
            break;
        default: break;
        }
        if (bad)
            log.add("n=" + std::to_string(n) + " rank " + std::to_string(r) + ": " + c.str() + ": " +
                    std::to_string(bad) + " wrong elements, first at " + std::to_string(first_bad) + ": got " +
                    show(got) + ", want " + show(want));
        return out.size();
    }
};

// One call: ring<> (algo 0) through the public template API, every other
// policy through chorus::detail::name##_run with its value. `args` are the
// public call's arguments after the communicator; the run function takes
// the same ones, the policy first and the async flag last.
#define SOAK_CALL(name, ...)                                                                                          \
    do {                                                                                                              \
        if (c.algo != 0) j.f = chorus::detail::name##_run(comm, policies[c.algo].pol, __VA_ARGS__, async);            \
        else if (async) j.f = chorus::name##_async<ring_a>(comm, __VA_ARGS__);                                        \
        else chorus::name<ring_a>(comm, __VA_ARGS__);                                                                 \
    } while (0)

template <class T, class Op>
void issue_reduction(comm_t& comm, job<T>& j, bool async) {
    const call& c = j.c;
    const int r = comm.rank();
    const std::size_t m = c.count;
    Op op{};
    switch (c.coll) {
    case k_all_reduce:
        if (c.in_place && c.algo == 0) {
            // The public in-place overload (one span).
            if (async) j.f = chorus::all_reduce_async<ring_a>(comm, std::span<T>(j.a), op);
            else chorus::all_reduce<ring_a>(comm, std::span<T>(j.a), op);
        } else if (c.in_place) {
            SOAK_CALL(all_reduce, j.ca(), std::span<T>(j.a), op);
        } else {
            SOAK_CALL(all_reduce, j.ca(), std::span<T>(j.b), op);
        }
        break;
    case k_reduce_scatter:
        if (c.in_place) SOAK_CALL(reduce_scatter, j.ca(), std::span<T>(j.a).subspan(std::size_t(r) * m, m), op);
        else SOAK_CALL(reduce_scatter, j.ca(), std::span<T>(j.b), op);
        break;
    case k_reduce:
        if (r == c.root && c.in_place) SOAK_CALL(reduce, j.ca(), std::span<T>(j.a), op, c.root);
        else SOAK_CALL(reduce, j.ca(), std::span<T>(j.b), op, c.root);
        break;
    default: break;
    }
}

template <class T>
void issue_copy(comm_t& comm, job<T>& j, bool async) {
    const call& c = j.c;
    const int r = comm.rank();
    const std::size_t m = c.count;
    if (c.coll == k_all_gather) {
        if (c.in_place) SOAK_CALL(all_gather, j.ca().subspan(std::size_t(r) * m, m), std::span<T>(j.a));
        else SOAK_CALL(all_gather, j.ca(), std::span<T>(j.b));
    } else {
        SOAK_CALL(broadcast, std::span<T>(j.a), c.root);
    }
}
#undef SOAK_CALL

template <class T>
void issue_typed(comm_t& comm, job<T>& j, bool async) {
    const call& c = j.c;
    if (c.coll == k_all_gather || c.coll == k_broadcast) return issue_copy<T>(comm, j, async);
    switch (c.op) {
    case o_sum: return issue_reduction<T, chorus::sum>(comm, j, async);
    case o_min: return issue_reduction<T, chorus::min>(comm, j, async);
    case o_max: return issue_reduction<T, chorus::max>(comm, j, async);
    case o_avg: return issue_reduction<T, chorus::avg>(comm, j, async);
    default:
        if constexpr (std::is_integral_v<T>) return issue_reduction<T, chorus::bit_xor>(comm, j, async);
    }
}

template <class T>
std::unique_ptr<job_base> start_typed(comm_t& comm, const call& c, bool async) {
    auto j = std::make_unique<job<T>>();
    j->c = c;
    j->prepare(comm.rank(), comm.size());
    issue_typed<T>(comm, *j, async);
    return j;
}

std::unique_ptr<job_base> start(comm_t& comm, const call& c, bool async) {
    if (c.coll == k_barrier) {
        auto j = std::make_unique<job<int>>();
        j->c = c;
        if (async) j->f = chorus::barrier_async(comm);
        else chorus::barrier(comm);
        return j;
    }
    switch (c.type) {
    case t_i32: return start_typed<std::int32_t>(comm, c, async);
    case t_f32: return start_typed<float>(comm, c, async);
    case t_f64: return start_typed<double>(comm, c, async);
    case t_u8: return start_typed<std::uint8_t>(comm, c, async);
    default: return start_typed<std::int64_t>(comm, c, async);
    }
}

struct soak_totals {
    std::atomic<std::size_t> collectives{0}, elements{0}, async_calls{0};
    std::atomic<std::size_t> per_policy[n_policies] = {}; //!< collectives other than barrier, by policy
};

//! `iters` iterations on n ranks; an iteration is one sync call or an async batch of 1-8.
void soak(int n, int iters, std::uint64_t seed, soak_totals& tot, failure_log& log) {
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(60));
        const int r = comm.rank();
        std::mt19937_64 rng(seed); // identical on every rank
        std::size_t colls = 0, elems = 0, asyncs = 0;
        for (int it = 0; it < iters && log.count() == 0; ++it) {
            const bool async = rng() % 3 == 0;
            const int batch = async ? 1 + int(rng() % 8) : 1;
            std::vector<std::unique_ptr<job_base>> jobs;
            for (int b = 0; b < batch; ++b) jobs.push_back(start(comm, draw(rng, n), async));
            for (auto& j : jobs) {
                try {
                    if (j->f.valid()) j->f.wait();
                } catch (const std::exception& e) {
                    log.add("n=" + std::to_string(n) + " rank " + std::to_string(r) + " iteration " +
                            std::to_string(it) + ": " + j->c.str() + " threw: " + e.what());
                    throw;
                }
                elems += j->check(r, n, log);
                ++colls;
                if (r == 0 && j->c.coll != k_barrier) ++tot.per_policy[j->c.algo];
                if (async) ++asyncs;
            }
        }
        if (r == 0) {
            tot.collectives += colls;
            tot.async_calls += asyncs;
        }
        tot.elements += elems;
    });
}

} // namespace

TEST_CASE("soak: thousands of random collectives match a serial reference") {
    // Release: ~5500 collectives; sanitizers: ~2000 (TSan: ~3 s here).
    const int iters = soak_sanitized ? 250 : 650;
    soak_totals tot;
    const auto t0 = steady::now();
    for (int n : {2, 3, 4, 5}) {
        failure_log log;
        const auto t1 = steady::now();
        try {
            soak(n, iters, 0xC0FFEEull + std::uint64_t(n), tot, log);
        } catch (const std::exception& e) {
            FAIL_CHECK("n=" << n << ": run_threads threw: " << std::string(e.what()));
        }
        MESSAGE("soak n=" << n << ": " << seconds_since(t1) << " s");
        log.report();
    }
    const std::size_t colls = tot.collectives.load();
    MESSAGE("soak: " << colls << " collectives (" << tot.async_calls.load() << " async) soaked, "
                     << tot.elements.load() << " elements checked, in " << seconds_since(t0) << " s");
    CHECK(colls >= (soak_sanitized ? 500u : 3000u));
    for (int a = 0; a < n_policies; ++a) {
        const std::string name = policies[a].name;
        CAPTURE(name);
        CHECK(tot.per_policy[a].load() >= (soak_sanitized ? 10u : 50u));
    }
}
