// The policy matrix over MPI: every policy of mpi_test_algos (ring<> and
// hierarchical<*, ring<>> on the engine, the others on the schedule
// executor) x every collective x operators x element types x ragged counts
// x in place / out of place, checked bit for bit against a serial
// reference folded in rank order. Then the exchange collectives
// (all_to_all, all_gatherv, reduce_scatterv, all_to_allv), which every
// policy plans with the exchange schedule. CTest runs this under mpiexec
// with every process count 1..9 (tests/mpi/CMakeLists.txt).

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include "mpi_test_util.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

//! The policies the matrix runs: extend freely (any policy with a
//! make_schedule, or ring<> / hierarchical<Intra, ring<>>).
//! CHORUS_TEST_REDUCED_MATRIX (the sanitizer builds): the engine, the
//! schedule executor with a fan-in and a pushing-free pipelined policy,
//! and automatic, on fewer (type, operator) pairs; the Release build runs
//! them all. (The full matrix took one compiler process 13 GB and more than
//! 15 minutes under ASan + UBSan.)
#if defined(CHORUS_TEST_REDUCED_MATRIX)
using mpi_test_algos = std::tuple<chorus::ring<>, chorus::direct<chorus::direct_params{2, 4096}>,
                                  chorus::hierarchical<chorus::ring<>, chorus::ring<>>, chorus::tree<>,
                                  chorus::automatic>;
#else
using mpi_test_algos =
    std::tuple<chorus::ring<>, chorus::direct<>, chorus::direct<chorus::direct_params{2, 4096}>,
               chorus::hierarchical<chorus::direct<>, chorus::direct<>>, chorus::hierarchical<chorus::ring<>, chorus::ring<>>,
               chorus::tree<>, chorus::recursive_doubling<>, chorus::rabenseifner<chorus::direct_params{2, 4096}>,
               chorus::two_shot<>, chorus::automatic, chorus::deterministic<>>;
#endif

namespace {

using namespace mpi_test;

//! Ragged counts: empty, one element, odd, a little over 1000, ~100k. The
//! operators other than sum exercise the combining code, not the
//! partitioning: they run the odd and the mid-size count.
const std::vector<std::uint64_t> all_counts = {0, 1, 7, 1003, 100003};
const std::vector<std::uint64_t> op_counts = {7, 1003};
const std::vector<std::uint64_t> copy_counts = {1, 1003};

template <class Algo>
void classic_matrix(comm_t& comm, const char* algo) {
    using namespace chorus;
    // sum on every type, at every count
    check_reductions<Algo, std::int8_t, sum>(comm, algo, all_counts);
    check_reductions<Algo, std::uint8_t, sum>(comm, algo, all_counts);
    check_reductions<Algo, std::int32_t, sum>(comm, algo, all_counts);
    check_reductions<Algo, std::int64_t, sum>(comm, algo, all_counts);
    check_reductions<Algo, float, sum>(comm, algo, all_counts);
    check_reductions<Algo, double, sum>(comm, algo, all_counts);
    // every other operator on int32 and float (reduced matrix: three)
    check_reductions<Algo, std::int32_t, max>(comm, algo, op_counts);
    check_reductions<Algo, std::int32_t, bit_xor>(comm, algo, op_counts);
    check_reductions<Algo, float, avg>(comm, algo, op_counts);
#if !defined(CHORUS_TEST_REDUCED_MATRIX)
    check_reductions<Algo, std::int32_t, prod>(comm, algo, op_counts);
    check_reductions<Algo, std::int32_t, min>(comm, algo, op_counts);
    check_reductions<Algo, std::int32_t, avg>(comm, algo, op_counts);
    check_reductions<Algo, std::int32_t, bit_and>(comm, algo, op_counts);
    check_reductions<Algo, std::int32_t, bit_or>(comm, algo, op_counts);
    check_reductions<Algo, float, prod>(comm, algo, op_counts);
    check_reductions<Algo, float, min>(comm, algo, op_counts);
    check_reductions<Algo, float, max>(comm, algo, op_counts);
#endif
    // AllGather and Broadcast (roots 0 and n-1) on every type
    check_copies<Algo, std::int8_t>(comm, algo, all_counts, false);
    check_copies<Algo, std::uint8_t>(comm, algo, copy_counts, false);
    check_copies<Algo, std::int32_t>(comm, algo, all_counts, false);
    check_copies<Algo, std::int64_t>(comm, algo, copy_counts, false);
    check_copies<Algo, float>(comm, algo, copy_counts, false);
    check_copies<Algo, double>(comm, algo, all_counts, false);
}

// --- the exchange collectives ----------------------------------------------------------

//! Element i of what rank `from` sends rank `to` (all_to_all(v)).
template <class T>
T sent(int from, int to, std::uint64_t i) {
    return static_cast<T>((std::uint64_t(from) * 31 + std::uint64_t(to) * 7 + i * 3) % 101);
}

template <class Algo, class T>
void check_all_to_all(comm_t& comm) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    for (const std::uint64_t block : {0ull, 1ull, 7ull, 1003ull}) {
        for (const bool in_place : {false, true}) {
            CAPTURE(block);
            CAPTURE(in_place);
            const std::uint64_t total = block * std::uint64_t(n);
            std::vector<T> in(off + total), out(off + total);
            for (int to = 0; to < n; ++to)
                for (std::uint64_t i = 0; i < block; ++i) in[off + std::uint64_t(to) * block + i] = sent<T>(r, to, i);
            if (in_place) {
                chorus::all_to_all<Algo>(comm, std::span<const T>(in.data() + off, total),
                                         std::span<T>(in.data() + off, total));
                out = in;
            } else {
                chorus::all_to_all<Algo>(comm, std::span<const T>(in.data() + off, total),
                                         std::span<T>(out.data() + off, total));
            }
            CHECK(first_wrong(out, off, total, [&](std::uint64_t i) {
                      return sent<T>(int(i / block), r, i % block);
                  }) == "");
        }
    }
}

template <class Algo, class T>
void check_all_gatherv(comm_t& comm, const std::vector<std::size_t>& counts) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    std::vector<std::size_t> displ(std::size_t(n) + 1, 0);
    for (int q = 0; q < n; ++q) displ[std::size_t(q) + 1] = displ[std::size_t(q)] + counts[std::size_t(q)];
    const std::size_t total = displ[std::size_t(n)], mine = counts[std::size_t(r)];
    using Op = chorus::sum; // the input pattern
    for (const bool in_place : {false, true}) {
        CAPTURE(in_place);
        CAPTURE(total);
        std::vector<T> in(off + mine), out(off + total);
        T* block = in_place ? out.data() + off + displ[std::size_t(r)] : in.data() + off;
        for (std::size_t i = 0; i < mine; ++i) block[i] = input<T, Op>(r, n, i);
        chorus::all_gatherv<Algo>(comm, std::span<const T>(block, mine), std::span<T>(out.data() + off, total),
                                  std::span<const std::size_t>(counts));
        std::string wrong;
        for (int q = 0; q < n && wrong.empty(); ++q)
            for (std::size_t i = 0; i < counts[std::size_t(q)] && wrong.empty(); ++i)
                if (!same_bits(out[off + displ[std::size_t(q)] + i], input<T, Op>(q, n, i)))
                    wrong = "block " + std::to_string(q) + " element " + std::to_string(i);
        CHECK(wrong == "");
    }
}

template <class Algo, class T, class Op>
void check_reduce_scatterv(comm_t& comm, const std::vector<std::size_t>& counts) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    std::size_t total = 0, displ = 0;
    for (int q = 0; q < n; ++q) {
        if (q == r) displ = total;
        total += counts[std::size_t(q)];
    }
    const std::size_t mine = counts[std::size_t(r)];
    const std::string op_s = chorus::op_traits<Op>::name();
    CAPTURE(op_s);
    for (const bool in_place : {false, true}) {
        CAPTURE(in_place);
        std::vector<T> in(off + total), out(off + mine);
        for (std::size_t i = 0; i < total; ++i) in[off + i] = input<T, Op>(r, n, i);
        T* dst = in_place ? in.data() + off + displ : out.data() + off;
        chorus::reduce_scatterv<Algo>(comm, std::span<const T>(in.data() + off, total), std::span<T>(dst, mine),
                                      std::span<const std::size_t>(counts), Op{});
        std::string wrong;
        for (std::size_t i = 0; i < mine && wrong.empty(); ++i)
            if (!same_bits(dst[i], reference<T, Op>(n, displ + i))) wrong = "element " + std::to_string(i);
        CHECK(wrong == "");
    }
}

//! counts[q * n + j] = what q sends j (zeros included). `symmetric`: a
//! symmetric matrix, so every rank sends as much as it receives and the
//! call can run in place on every rank.
template <class Algo, class T>
void check_all_to_allv(comm_t& comm, std::uint64_t scale, bool symmetric) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    const std::size_t N = std::size_t(n), R = std::size_t(r);
    std::vector<std::size_t> counts(N * N);
    for (std::size_t q = 0; q < N; ++q)
        for (std::size_t j = 0; j < N; ++j)
            counts[q * N + j] = (symmetric ? (q + j + 1) % 5 : (q * 3 + j * 5 + 1) % 7) * scale;
    std::size_t in_total = 0, out_total = 0;
    for (std::size_t j = 0; j < N; ++j) in_total += counts[R * N + j];
    for (std::size_t q = 0; q < N; ++q) out_total += counts[q * N + R];
    for (const bool in_place : {false, true}) {
        if (in_place && !symmetric) continue;
        CAPTURE(in_place);
        CAPTURE(scale);
        std::vector<T> in(off + in_total), out(off + out_total);
        std::size_t pos = 0;
        for (std::size_t j = 0; j < N; ++j)
            for (std::size_t i = 0; i < counts[R * N + j]; ++i) in[off + pos++] = sent<T>(r, int(j), i);
        T* dst = in_place ? in.data() + off : out.data() + off;
        chorus::all_to_allv<Algo>(comm, std::span<const T>(in.data() + off, in_total), std::span<T>(dst, out_total),
                                  std::span<const std::size_t>(counts));
        std::string wrong;
        pos = 0;
        for (std::size_t q = 0; q < N && wrong.empty(); ++q)
            for (std::size_t i = 0; i < counts[q * N + R] && wrong.empty(); ++i)
                if (!same_bits(dst[pos++], sent<T>(int(q), r, i)))
                    wrong = "from rank " + std::to_string(q) + " element " + std::to_string(i);
        CHECK(wrong == "");
    }
}

template <class Algo>
void exchange_matrix(comm_t& comm) {
    using namespace chorus;
    const int n = comm.size();
    const std::size_t N = std::size_t(n);
    check_all_to_all<Algo, std::int32_t>(comm);
    check_all_to_all<Algo, double>(comm);
    // ragged per-rank counts with zeros
    std::vector<std::size_t> ragged(N);
    for (std::size_t q = 0; q < N; ++q) ragged[q] = (q * 7 + 3) % 5 * 211 + (q % 3 == 1 ? 0 : q);
    check_all_gatherv<Algo, std::int32_t>(comm, ragged);
    check_all_gatherv<Algo, std::uint8_t>(comm, ragged);
    check_reduce_scatterv<Algo, std::int32_t, sum>(comm, ragged);
    check_reduce_scatterv<Algo, float, avg>(comm, ragged);
    check_reduce_scatterv<Algo, std::int32_t, bit_xor>(comm, ragged);
    check_all_to_allv<Algo, std::int32_t>(comm, 1, false);
    check_all_to_allv<Algo, std::int32_t>(comm, 3, true);
    check_all_to_allv<Algo, double>(comm, 97, false);
    check_all_to_allv<Algo, double>(comm, 89, true);
}

} // namespace

TEST_CASE_TEMPLATE_DEFINE("policy matrix over MPI: every collective, operator, type, count and placement", Algo,
                          policy_matrix) {
    comm_t& comm = world();
    const std::string name = chorus::detail::algo_name<Algo>();
    classic_matrix<Algo>(comm, name.c_str());
    exchange_matrix<Algo>(comm);
}
TEST_CASE_TEMPLATE_APPLY(policy_matrix, mpi_test_algos);

TEST_CASE("all_gatherv: one rank gives nothing, another 10^6 + 3 elements") {
    comm_t& comm = world();
    const int n = comm.size();
    std::vector<std::size_t> counts(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) counts[std::size_t(q)] = std::size_t(q % 4) * 13 + 1;
    counts[0] = 0;
    counts[std::size_t(n - 1)] = 1000003;
    check_all_gatherv<chorus::direct<>, std::int32_t>(comm, counts);
    check_all_gatherv<chorus::direct<chorus::direct_params{2, 4096}>, std::int32_t>(comm, counts);
}

namespace {
//! Not commutative: the result depends on the order the ranks are folded in.
struct shift_add {
    static constexpr bool commutative = false;
    static constexpr const char* name = "shift_add";
    std::int64_t operator()(const std::int64_t& a, const std::int64_t& b) const { return (a * 7 + b) % 1000003; }
};
} // namespace

TEST_CASE("schedule executor: user element types, and a non-commutative operator folded in rank order") {
    comm_t& comm = world();
    using namespace chorus;
    const std::vector<std::uint64_t> counts = {1, 7, 1003, 70001};
    check_reductions<direct<direct_params{2, 4096}>, vec3, vec3_add>(comm, "direct<2, 4 KiB>", counts);
    check_copies<direct<direct_params{2, 4096}>, vec3>(comm, "direct<2, 4 KiB>", counts, false);
    check_reductions<tree<>, indexed, argmax_op>(comm, "tree<>", counts);
    // direct<> combines every element as the left fold in rank order
    check_reductions<direct<>, std::int64_t, shift_add>(comm, "direct<>", counts);
    check_reductions<direct<direct_params{2, 4096}>, std::int64_t, shift_add>(comm, "direct<2, 4 KiB>", counts);
}
