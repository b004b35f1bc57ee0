// The policy matrix over MPI: every policy of matrix_policies() (each on
// the schedule executor) x every collective x operators x element types x ragged counts
// x in place / out of place (the largest count, with sum, on half the types
// at each process count), checked bit for bit against a serial
// reference folded in rank order; the non-commutative operators on every
// policy that keeps rank order (and their refusal by the others); then the
// exchange collectives (all_to_all, all_gatherv, reduce_scatterv,
// all_to_allv), which every policy plans with the exchange schedule; and
// the user element types on the schedule executor. CTest runs this under
// mpiexec with every process count 1..9 (tests/mpi/CMakeLists.txt).
//
// The policies are values iterated at run time: the checkers (compiled
// once per element type and operator in checks_*.cpp) serve them all.

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include "mpi_test_util.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

//! The policies the matrix runs: extend freely with any policy value.
const std::vector<named_policy>& matrix_policies() {
    using namespace chorus;
    static const std::vector<named_policy> list = {
        named<ring<>>(),
        named<direct<>>(),
        named<direct<direct_params{2, 4096}>>(),
        named<hierarchical<direct<>, direct<>>>(),
        named<hierarchical<ring<>, ring<>>>(),
        named<tree<>>(),
        named<recursive_doubling<>>(),
        named<rabenseifner<direct_params{2, 4096}>>(),
        named<two_shot<>>(),
        named<automatic>(),
        named<deterministic<>>(),
    };
    return list;
}

//! Ragged counts: empty, one element, odd, a little over 1000, ~100k. The
//! operators other than sum exercise the combining code, not the
//! partitioning: they run the odd and the mid-size count.
const std::vector<std::uint64_t> all_counts = {0, 1, 7, 1003, 100003};
//! all_counts but the large one: most of the matrix's time is spent there
//! (about 80 % of the sum case's, under ASan), so each process count gives
//! it to one type of each element size (1, 4 and 8 bytes), the other half
//! of the types at odd counts than at even ones (large_count_for).
const std::vector<std::uint64_t> small_counts = {0, 1, 7, 1003};
const std::vector<std::uint64_t>& large_count_for(int n, bool even_half) {
    return (n % 2 == 0) == even_half ? all_counts : small_counts;
}
const std::vector<std::uint64_t> op_counts = {7, 1003};
const std::vector<std::uint64_t> copy_counts = {1, 1003};
//! The user element types and the non-commutative operators.
const std::vector<std::uint64_t> user_counts = {1, 7, 1003, 70001};

} // namespace

TEST_CASE("policy matrix over MPI: AllReduce, ReduceScatter and Reduce with sum on every type, every count but the largest on half the types") {
    comm_t& comm = world();
    using namespace chorus;
    const int n = comm.size();
    for (const named_policy& p : matrix_policies()) {
        // the large count: int8, int32 and double at even process counts,
        // uint8, float and int64 at odd ones
        check_reductions<std::int8_t, sum>(comm, p, large_count_for(n, true));
        check_reductions<std::uint8_t, sum>(comm, p, large_count_for(n, false));
        check_reductions<std::int32_t, sum>(comm, p, large_count_for(n, true));
        check_reductions<std::int64_t, sum>(comm, p, large_count_for(n, false));
        check_reductions<float, sum>(comm, p, large_count_for(n, false));
        check_reductions<double, sum>(comm, p, large_count_for(n, true));
    }
}

TEST_CASE("policy matrix over MPI: AllReduce, ReduceScatter and Reduce with every other operator on int32 and float") {
    comm_t& comm = world();
    using namespace chorus;
    for (const named_policy& p : matrix_policies()) {
        check_reductions<std::int32_t, max>(comm, p, op_counts);
        check_reductions<std::int32_t, bit_xor>(comm, p, op_counts);
        check_reductions<std::int32_t, prod>(comm, p, op_counts);
        check_reductions<std::int32_t, min>(comm, p, op_counts);
        check_reductions<std::int32_t, avg>(comm, p, op_counts);
        check_reductions<std::int32_t, bit_and>(comm, p, op_counts);
        check_reductions<std::int32_t, bit_or>(comm, p, op_counts);
        check_reductions<float, avg>(comm, p, op_counts);
        check_reductions<float, prod>(comm, p, op_counts);
        check_reductions<float, min>(comm, p, op_counts);
        check_reductions<float, max>(comm, p, op_counts);
    }
}

TEST_CASE("policy matrix over MPI: non-commutative operators keep rank order, or are refused") {
    comm_t& comm = world();
    for (const named_policy& p : matrix_policies()) {
        if (p.pol.reorders_operands()) {
            check_refused<affine, compose>(comm, p);
            continue;
        }
        // associative: every order-keeping policy (automatic chooses among them)
        check_reductions<affine, compose>(comm, p, user_counts);
        // not associative: only a left fold in rank order gives the reference
        if (folds_left(p.pol)) check_reductions<std::int64_t, shift_add>(comm, p, user_counts);
    }
}

TEST_CASE("policy matrix over MPI: AllGather and Broadcast (roots 0 and n-1) on every type") {
    comm_t& comm = world();
    for (const named_policy& p : matrix_policies()) {
        check_copies<std::int8_t>(comm, p, all_counts, false);
        check_copies<std::uint8_t>(comm, p, copy_counts, false);
        check_copies<std::int32_t>(comm, p, all_counts, false);
        check_copies<std::int64_t>(comm, p, copy_counts, false);
        check_copies<float>(comm, p, copy_counts, false);
        check_copies<double>(comm, p, all_counts, false);
    }
}

TEST_CASE("policy matrix over MPI: the exchange collectives with ragged counts and zeros") {
    comm_t& comm = world();
    using namespace chorus;
    const std::size_t N = std::size_t(comm.size());
    std::vector<std::size_t> ragged(N);
    for (std::size_t q = 0; q < N; ++q) ragged[q] = (q * 7 + 3) % 5 * 211 + (q % 3 == 1 ? 0 : q);
    for (const named_policy& p : matrix_policies()) {
        check_all_to_all<std::int32_t>(comm, p);
        check_all_to_all<double>(comm, p);
        check_all_gatherv<std::int32_t>(comm, p, ragged);
        check_all_gatherv<std::uint8_t>(comm, p, ragged);
        check_reduce_scatterv<std::int32_t, sum>(comm, p, ragged);
        check_reduce_scatterv<float, avg>(comm, p, ragged);
        check_reduce_scatterv<std::int32_t, bit_xor>(comm, p, ragged);
        check_all_to_allv<std::int32_t>(comm, p, 1, false);
        check_all_to_allv<std::int32_t>(comm, p, 3, true);
        check_all_to_allv<double>(comm, p, 97, false);
        check_all_to_allv<double>(comm, p, 89, true);
    }
}

TEST_CASE("all_gatherv: one rank gives nothing, another 10^6 + 3 elements") {
    comm_t& comm = world();
    const int n = comm.size();
    std::vector<std::size_t> counts(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) counts[std::size_t(q)] = std::size_t(q % 4) * 13 + 1;
    counts[0] = 0;
    counts[std::size_t(n - 1)] = 1000003;
    check_all_gatherv<std::int32_t>(comm, named<chorus::direct<>>(), counts);
    check_all_gatherv<std::int32_t>(comm, named<chorus::direct<chorus::direct_params{2, 4096}>>(), counts);
}

TEST_CASE("schedule executor: user element types, and a non-commutative operator folded in rank order") {
    comm_t& comm = world();
    using namespace chorus;
    const named_policy direct_2_4k = named<direct<direct_params{2, 4096}>>();
    check_reductions<vec3, vec3_add>(comm, direct_2_4k, user_counts);
    check_copies<vec3>(comm, direct_2_4k, user_counts, false);
    check_reductions<indexed, argmax_op>(comm, named<tree<>>(), user_counts);
    // direct<> combines every element as the left fold in rank order
    check_reductions<std::int64_t, shift_add>(comm, named<direct<>>(), user_counts);
    check_reductions<std::int64_t, shift_add>(comm, direct_2_4k, user_counts);
}
