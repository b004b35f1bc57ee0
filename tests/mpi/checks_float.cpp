// Instantiates the checkers (mpi_checks.hpp) for the floating-point types:
// float with sum, prod, min, max and avg, double with sum, max and avg,
// AllGather / Broadcast of both, ReduceScatterv of float with avg, and
// AllToAll / AllToAllv of double. The tests that call them:
// test_matrix.cpp (every policy), test_mpi.cpp (hierarchical<>).

#include "mpi_checks.hpp"

namespace mpi_test {

MPI_TEST_REDUCTIONS(float, chorus::sum);
MPI_TEST_REDUCTIONS(float, chorus::prod);
MPI_TEST_REDUCTIONS(float, chorus::min);
MPI_TEST_REDUCTIONS(float, chorus::max);
MPI_TEST_REDUCTIONS(float, chorus::avg);
MPI_TEST_COPIES(float);
MPI_TEST_REDUCE_SCATTERV(float, chorus::avg);

MPI_TEST_REDUCTIONS(double, chorus::sum);
MPI_TEST_REDUCTIONS(double, chorus::max);
MPI_TEST_REDUCTIONS(double, chorus::avg);
MPI_TEST_COPIES(double);
MPI_TEST_ALL_TO_ALL(double);
MPI_TEST_ALL_TO_ALLV(double);

} // namespace mpi_test
