// Instantiates the checkers (mpi_checks.hpp) for int64 (sum, min, avg,
// and the non-associative user operator shift_add; AllGather / Broadcast)
// and for the user element types: vec3 with vec3_add and indexed with
// argmax (AllGather / Broadcast of both too), and the non-commutative
// affine maps with compose (and its refusal by the policies that reorder
// operands). The tests that call them: test_matrix.cpp, test_mpi.cpp.

#include "mpi_checks.hpp"

namespace mpi_test {

MPI_TEST_REDUCTIONS(std::int64_t, chorus::sum);
MPI_TEST_REDUCTIONS(std::int64_t, chorus::min);
MPI_TEST_REDUCTIONS(std::int64_t, chorus::avg);
MPI_TEST_REDUCTIONS(std::int64_t, shift_add);
MPI_TEST_COPIES(std::int64_t);

MPI_TEST_REDUCTIONS(vec3, vec3_add);
MPI_TEST_COPIES(vec3);

MPI_TEST_REDUCTIONS(indexed, argmax_op);
MPI_TEST_COPIES(indexed);

MPI_TEST_REDUCTIONS(affine, compose);
MPI_TEST_REFUSED(affine, compose);

} // namespace mpi_test
