// Instantiates the checkers (mpi_checks.hpp) for int32: every built-in
// operator, AllGather / Broadcast, and the exchange collectives
// (AllToAll, AllGatherv, ReduceScatterv with sum and bit_xor, AllToAllv).
// The tests that call them: test_matrix.cpp (every policy), test_mpi.cpp
// (hierarchical<>).

#include "mpi_checks.hpp"

namespace mpi_test {

MPI_TEST_REDUCTIONS(std::int32_t, chorus::sum);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::prod);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::min);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::max);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::avg);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::bit_and);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::bit_or);
MPI_TEST_REDUCTIONS(std::int32_t, chorus::bit_xor);
MPI_TEST_COPIES(std::int32_t);

MPI_TEST_ALL_TO_ALL(std::int32_t);
MPI_TEST_ALL_GATHERV(std::int32_t);
MPI_TEST_REDUCE_SCATTERV(std::int32_t, chorus::sum);
MPI_TEST_REDUCE_SCATTERV(std::int32_t, chorus::bit_xor);
MPI_TEST_ALL_TO_ALLV(std::int32_t);

} // namespace mpi_test
