// hierarchical<Intra, Inter> AllReduce end to end on the threads backend,
// with the node split emulated through CHORUS_RANKS_PER_NODE:
//   nodes x ranks per node {2x2, 2x3, 3x2, 2x4, 4x2}
//   x {ring, direct} x {ring, direct} (Intra x Inter, small chunks for some)
//   x operators {sum, avg, max} x {int32, integer-valued float}
//   x counts {0, 1, 7, 1009, 100003} x in place / out of place,
// bit for bit against a serial reference, with buffers at element offsets
// that differ between ranks and guard elements around every span.

#include "test_util.hpp"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace chorus_test;
using comm_t = chorus::communicator<chorus::threads>;

//! Sets an environment variable for the lifetime of the object, then
//! restores the previous value (or unsets it).
class scoped_env {
public:
    scoped_env(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = std::string(old);
        if (value) ::setenv(name, value, 1);
        else ::unsetenv(name);
    }
    ~scoped_env() {
        if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
        else ::unsetenv(name_.c_str());
    }
    scoped_env(const scoped_env&) = delete;
    scoped_env& operator=(const scoped_env&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

//! Rank r's input element i: small integers (exact in float, sums exact).
template <class T>
T input(int r, std::uint64_t i, int op_kind) {
    const long long h = static_cast<long long>((i * 2654435761ull + std::uint64_t(r) * 40503ull + 17ull) % 1000003ull);
    if (op_kind == 2) return static_cast<T>(h % 20001 - 10000); // max: a wide range
    return static_cast<T>(h % 201 - 100);
}

template <class T, class Op>
std::vector<T> reference(int n, std::uint64_t count, int op_kind, const Op& op) {
    std::vector<T> ref(count);
    for (std::uint64_t i = 0; i < count; ++i) {
        T acc = input<T>(0, i, op_kind);
        for (int r = 1; r < n; ++r) acc = op(acc, input<T>(r, i, op_kind));
        if constexpr (requires { op.finish(acc, n); }) acc = op.finish(acc, n);
        ref[i] = acc;
    }
    return ref;
}

constexpr std::uint64_t counts[] = {0, 1, 7, 1009, 100003};
// Under ThreadSanitizer (ten times slower, 8 threads on 2 cores) the largest count is left out.
constexpr std::size_t n_counts = chorus_test::under_tsan ? 4 : 5;

template <class Algo, class T, class Op>
void check_all_reduce(comm_t& comm, failure_log& log, const std::string& algo, int op_kind, const Op& op) {
    const int n = comm.size();
    const int r = comm.rank();
    for (std::uint64_t count : std::span(counts, n_counts)) {
        const std::vector<T> ref = reference<T>(n, count, op_kind, op);
        for (bool in_place : {false, true}) {
            const std::size_t off = std::size_t((r + int(in_place)) % 3);
            guarded<T> out(count, off);
            guarded<T> in(count, std::size_t(r % 2));
            for (std::uint64_t i = 0; i < count; ++i) {
                in[i] = input<T>(r, i, op_kind);
                out[i] = input<T>(r, i, op_kind);
            }
            if (in_place) chorus::all_reduce<Algo>(comm, out.span(), op);
            else chorus::all_reduce<Algo>(comm, std::span<const T>(in.cspan()), out.span(), op);
            const std::string where = algo + " " + Op::name + " " + (std::is_floating_point_v<T> ? "float" : "int32") +
                                      " n=" + std::to_string(n) + " count=" + std::to_string(count) +
                                      (in_place ? " in place" : " out of place") + " rank " + std::to_string(r);
            std::uint64_t bad = 0;
            for (std::uint64_t i = 0; i < count; ++i) {
                if (!same_bits(out[i], ref[i])) {
                    if (bad++ == 0)
                        log.add(where + ": out[" + std::to_string(i) + "] = " + show(out[i]) + ", want " + show(ref[i]));
                }
            }
            if (bad > 1) log.add(where + ": " + std::to_string(bad) + " wrong elements");
            if (!out.guards_intact()) log.add(where + ": guard elements of out clobbered");
            if (!in.guards_intact()) log.add(where + ": guard elements of in clobbered");
            if (!in_place)
                for (std::uint64_t i = 0; i < count; ++i)
                    if (!same_bits(in[i], input<T>(r, i, op_kind))) {
                        log.add(where + ": in changed");
                        break;
                    }
        }
    }
}

template <class Algo>
void check_policy(comm_t& comm, failure_log& log, const std::string& algo) {
    check_all_reduce<Algo, std::int32_t>(comm, log, algo, 0, chorus::sum{});
    check_all_reduce<Algo, std::int32_t>(comm, log, algo, 1, chorus::avg{});
    check_all_reduce<Algo, std::int32_t>(comm, log, algo, 2, chorus::max{});
    check_all_reduce<Algo, float>(comm, log, algo, 0, chorus::sum{});
    check_all_reduce<Algo, float>(comm, log, algo, 1, chorus::avg{});
    check_all_reduce<Algo, float>(comm, log, algo, 2, chorus::max{});
}

using hier_rr = chorus::hierarchical<chorus::ring<{2, 4096}>, chorus::ring<{1, 1024}>>;
using hier_rd = chorus::hierarchical<chorus::ring<{1, 16 << 10}>, chorus::direct<{1, 4096}>>;
using hier_dr = chorus::hierarchical<chorus::direct<{2, 8192}>, chorus::ring<{1, 1024}>>;
using hier_dd = chorus::hierarchical<chorus::direct<{1, 1 << 20}>, chorus::direct<{2, 256}>>;

} // namespace

TEST_CASE("hierarchical all_reduce on an emulated node split is bit-exact (threads backend)") {
    struct shape {
        int n, per_node;
    };
    for (const shape sh : {shape{4, 2}, shape{6, 3}, shape{6, 2}, shape{8, 4}, shape{8, 2}}) {
        CAPTURE(sh.n);
        CAPTURE(sh.per_node);
        // The composite is what runs, not the flat fallback.
        CHECK_FALSE(hier_rd::make_schedule({chorus::collective::all_reduce, 1, sh.n, 0, 1009, 4, false, sh.per_node}).flat);
        const std::string k = std::to_string(sh.per_node);
        scoped_env env("CHORUS_RANKS_PER_NODE", k.c_str());
        failure_log log;
        chorus::run_threads(sh.n, [&](comm_t& comm) {
            check_policy<hier_rr>(comm, log, "hierarchical<ring, ring>");
            check_policy<hier_rd>(comm, log, "hierarchical<ring, direct>");
            check_policy<hier_dr>(comm, log, "hierarchical<direct, ring>");
            check_policy<hier_dd>(comm, log, "hierarchical<direct, direct>");
        });
        log.report();
    }
}

TEST_CASE("hierarchical with CHORUS_RANKS_PER_NODE unusable for the split runs the flat schedule") {
    // 5 ranks cannot split into nodes of 2; "abc" and "0" are ignored; 6 >= n.
    for (const char* v : {"2", "abc", "0", "6"}) {
        CAPTURE(v);
        scoped_env env("CHORUS_RANKS_PER_NODE", v);
        failure_log log;
        chorus::run_threads(5, [&](comm_t& comm) {
            check_all_reduce<hier_rd, std::int32_t>(comm, log, "hierarchical<ring, direct>", 1, chorus::avg{});
            // Other collectives run Intra's schedule: a quick reduce_scatter.
            std::vector<std::int32_t> in(5 * 3), out(3);
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::int32_t(i) + comm.rank();
            chorus::reduce_scatter<hier_rd>(comm, std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
            for (std::size_t i = 0; i < out.size(); ++i) {
                const std::int32_t want = 5 * std::int32_t(std::size_t(comm.rank()) * 3 + i) + 10;
                if (out[i] != want) log.add("reduce_scatter rank " + std::to_string(comm.rank()) + " out[" + std::to_string(i) + "]");
            }
        });
        log.report();
    }
}
