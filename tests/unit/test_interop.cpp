// What a user of the standard library brings: std::plus<> and its kin as
// operators (with their traits: commutative, bitwise ones integral-only),
// run as the built-in they equal; and containers passed without spelling
// std::span (collectives/buffers.hpp).
#include "test_util.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

namespace {

using chorus::communicator;
using chorus::threads;

// The traits a standard functor gets.
static_assert(chorus::op_traits<std::plus<>>::commutative);
static_assert(chorus::op_traits<std::plus<float>>::commutative);
static_assert(chorus::op_traits<std::multiplies<int>>::commutative);
static_assert(chorus::op_traits<std::bit_xor<>>::commutative && chorus::op_traits<std::bit_xor<>>::integral_only);
static_assert(!chorus::op_traits<std::plus<>>::integral_only);
// Which run as a built-in: exactly where the built-in computes the same.
static_assert(std::is_same_v<chorus::detail::canonical_op_t<std::plus<>, float>, chorus::sum>);
static_assert(std::is_same_v<chorus::detail::canonical_op_t<std::plus<int>, int>, chorus::sum>);
static_assert(std::is_same_v<chorus::detail::canonical_op_t<std::plus<int>, float>, std::plus<int>>); // converts to int
static_assert(std::is_same_v<chorus::detail::canonical_op_t<std::multiplies<>, double>, chorus::prod>);
static_assert(std::is_same_v<chorus::detail::canonical_op_t<std::bit_and<>, std::uint32_t>, chorus::bit_and>);
static_assert(std::is_same_v<chorus::detail::canonical_op_t<std::bit_or<>, float>, std::bit_or<>>);
// A user operator stays itself, and order-sensitive.
struct first_of {
    template <class T>
    T operator()(const T& a, const T&) const {
        return a;
    }
};
static_assert(!chorus::op_traits<first_of>::commutative);
static_assert(std::is_same_v<chorus::detail::canonical_op_t<first_of, float>, first_of>);

constexpr int max_ranks = 5;

} // namespace

TEST_CASE("std::plus<> and kin run with every policy that reorders operands") {
    for (int n = 1; n <= max_ranks; ++n) {
        chorus_test::failure_log log;
        chorus::run_threads(n, [&](communicator<threads>& comm) {
            const int r = comm.rank();
            const std::size_t len = 1000 + 7;
            std::vector<float> v(len);
            auto refill = [&] {
                for (std::size_t i = 0; i < len; ++i) v[i] = float((r + 1) * int(i % 13));
            };
            auto expect = [&](const char* what, float factor) {
                for (std::size_t i = 0; i < len; ++i)
                    if (v[i] != factor * float(int(i % 13))) {
                        log.add(std::string(what) + " rank " + std::to_string(r) + " element " + std::to_string(i));
                        return;
                    }
            };
            const float tri = float(n * (n + 1) / 2);
            refill();
            chorus::all_reduce<chorus::ring<>>(comm, std::span(v), std::plus<>{});
            expect("ring<> std::plus<>", tri);
            refill();
            chorus::all_reduce<chorus::tree<>>(comm, std::span(v), std::plus<float>{});
            expect("tree<> std::plus<float>", tri);
            refill();
            chorus::all_reduce<chorus::hierarchical<>>(comm, std::span(v), std::plus<>{});
            expect("hierarchical<> std::plus<>", tri);
            refill();
            chorus::all_reduce(comm, std::span(v), std::plus<>{}); // automatic: may pick any of them
            expect("automatic std::plus<>", tri);
            refill();
            chorus::all_reduce<chorus::ring<>>(comm, std::span(v), std::plus<int>{}); // not a built-in: runs as given
            expect("ring<> std::plus<int> on float", tri);

            // Bitwise and products on integers, ReduceScatter and Reduce.
            std::vector<std::uint32_t> bits(std::size_t(n) * 3);
            for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = 1u << ((std::size_t(r) + i) % 32);
            std::vector<std::uint32_t> mine(3);
            chorus::reduce_scatter<chorus::ring<>>(comm, std::span<const std::uint32_t>(bits), std::span(mine),
                                                   std::bit_or<>{});
            for (std::size_t j = 0; j < 3; ++j) {
                std::uint32_t want = 0;
                for (int q = 0; q < n; ++q) want |= 1u << ((std::size_t(q) + std::size_t(r) * 3 + j) % 32);
                if (mine[j] != want) log.add("reduce_scatter bit_or rank " + std::to_string(r));
            }
            const std::vector<std::int64_t> p(4, std::int64_t(r + 1));
            std::vector<std::int64_t> prod(4);
            chorus::reduce<chorus::tree<>>(comm, std::span(p), std::span(prod), std::multiplies<>{}, 0);
            if (r == 0) {
                std::int64_t fact = 1;
                for (int q = 1; q <= n; ++q) fact *= q;
                for (std::int64_t x : prod)
                    if (x != fact) log.add("reduce multiplies");
            }
        });
        log.report();
    }
}

TEST_CASE("std::plus<> and chorus::sum are the same operator to checked mode") {
    // Ranks that pass the functor and the built-in make one call, not a mismatch.
    chorus_test::failure_log log;
    chorus::run_threads(3, [&](communicator<threads>& comm) {
        comm.set_checked(true);
        std::vector<double> v(64, double(comm.rank() + 1));
        if (comm.rank() == 1) chorus::all_reduce<chorus::ring<>>(comm, std::span(v), chorus::sum{});
        else chorus::all_reduce<chorus::ring<>>(comm, std::span(v), std::plus<>{});
        for (double x : v)
            if (x != 6.0) log.add("checked mixed sum rank " + std::to_string(comm.rank()));
    });
    log.report();
}

namespace {
// A buffer with a fancy pointer, as thrust::device_vector's device_ptr.
template <class T>
struct fancy_ptr {
    T* p;
    T* get() const { return p; }
};
template <class T>
struct fancy_vector {
    std::vector<T> store;
    explicit fancy_vector(std::size_t n, T v = T()) : store(n, v) {}
    fancy_ptr<T> data() { return {store.data()}; }
    fancy_ptr<const T> data() const { return {store.data()}; }
    std::size_t size() const { return store.size(); }
};
// A view of another library (as cuda::std::span): trivially copyable, so a
// temporary one is fine.
template <class T>
struct other_span {
    T* p;
    std::size_t n;
    T* data() const { return p; }
    std::size_t size() const { return n; }
};
static_assert(chorus::detail::buffer_like<std::vector<float>&>);
static_assert(chorus::detail::buffer_like<fancy_vector<float>&>);
static_assert(chorus::detail::buffer_like<other_span<float>>);
static_assert(!chorus::detail::buffer_like<std::span<float>>);
static_assert(!chorus::detail::op_like<std::vector<float>>);
static_assert(chorus::detail::buffer_arg<other_span<float>&&> && !chorus::detail::buffer_arg<std::vector<float>&&>);
} // namespace

TEST_CASE("containers and other spans are taken where a std::span is (collectives/buffers.hpp)") {
    for (int n = 1; n <= 4; ++n) {
        chorus_test::failure_log log;
        chorus::run_threads(n, [&](communicator<threads>& comm) {
            const int r = comm.rank();
            const std::size_t un = std::size_t(n);
            auto check = [&](bool ok, const char* what) {
                if (!ok) log.add(std::string(what) + " rank " + std::to_string(r) + " of " + std::to_string(n));
            };
            const float tri = float(n * (n + 1) / 2);
            std::vector<float> v(100, float(r + 1));
            chorus::all_reduce(comm, v); // in place, sum
            check(v[0] == tri && v[99] == tri, "all_reduce(vector)");
            const std::vector<float> in(10, 1.0f);
            std::array<float, 10> out{};
            chorus::all_reduce<chorus::ring<>>(comm, in, out, chorus::max{});
            check(out[9] == 1.0f, "all_reduce(const vector, array)");
            fancy_vector<float> fv(33, float(r));
            chorus::all_reduce(comm, fv, std::plus<>{});
            check(fv.store[32] == float(n * (n - 1) / 2), "all_reduce(fancy pointer)");
            std::vector<float> raw(7, 2.0f);
            chorus::all_reduce(comm, other_span<float>{raw.data(), raw.size()}, chorus::prod{}); // a temporary view
            float pw = 1;
            for (int q = 0; q < n; ++q) pw *= 2.0f;
            check(raw[6] == pw, "all_reduce(temporary view)");

            std::vector<int> mine{r, 10 * r}, all(2 * un);
            chorus::all_gather(comm, mine, all);
            check(all[2 * un - 1] == 10 * (n - 1), "all_gather(vector, vector)");
            std::vector<int> part(2);
            chorus::reduce_scatter(comm, all, part);
            check(part[1] == n * 10 * r, "reduce_scatter(vector, vector)");
            std::array<int, 3> cfg{};
            if (r == 0) cfg = {7, 8, 9};
            chorus::broadcast(comm, cfg, 0);
            check(cfg[2] == 9, "broadcast(array)");
            std::vector<long> cnt(5, r + 1), tot(5);
            chorus::reduce(comm, cnt, tot, chorus::sum{}, 0);
            check(r != 0 || tot[4] == long(n * (n + 1) / 2), "reduce(vector, vector)");
            std::vector<int> a2a(un), back(un);
            for (std::size_t q = 0; q < un; ++q) a2a[q] = r * 100 + int(q);
            chorus::all_to_all(comm, a2a, back);
            check(back[un - 1] == (n - 1) * 100 + r, "all_to_all(vector, vector)");
            std::vector<std::size_t> counts(un, 2);
            std::vector<int> gv(2 * un);
            chorus::all_gatherv(comm, mine, gv, counts);
            check(gv == all, "all_gatherv(vector, vector, counts vector)");

            chorus::future f = chorus::all_reduce_async(comm, v, chorus::sum{});
            f.wait();
            check(v[0] == tri * float(n), "all_reduce_async(vector)");
            if (n > 1) {
                std::vector<double> msg(4, double(r));
                if (r == 0) chorus::send(comm, msg, 1);
                if (r == 1) {
                    chorus::recv(comm, msg, 0);
                    check(msg[3] == 0.0, "recv(vector)");
                }
            }
        });
        log.report();
    }
}
