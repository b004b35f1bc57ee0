// Instantiates the checkers (mpi_checks.hpp) for int8: every built-in
// operator, and AllGather / Broadcast. The tests that call them:
// test_matrix.cpp (every policy), test_mpi.cpp (hierarchical<>).

#include "mpi_checks.hpp"

namespace mpi_test {

MPI_TEST_REDUCTIONS(std::int8_t, chorus::sum);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::prod);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::min);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::max);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::avg);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::bit_and);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::bit_or);
MPI_TEST_REDUCTIONS(std::int8_t, chorus::bit_xor);
MPI_TEST_COPIES(std::int8_t);

} // namespace mpi_test
