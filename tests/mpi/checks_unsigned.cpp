// Instantiates the checkers (mpi_checks.hpp) for the unsigned integer
// types: uint8 (sum, max), uint32 (sum, bit_xor), uint64 (sum, bit_or),
// AllGather / Broadcast of the three, and AllGatherv of uint8. The tests
// that call them: test_matrix.cpp (every policy: uint8), test_mpi.cpp
// (hierarchical<>).

#include "mpi_checks.hpp"

namespace mpi_test {

MPI_TEST_REDUCTIONS(std::uint8_t, chorus::sum);
MPI_TEST_REDUCTIONS(std::uint8_t, chorus::max);
MPI_TEST_COPIES(std::uint8_t);
MPI_TEST_ALL_GATHERV(std::uint8_t);

MPI_TEST_REDUCTIONS(std::uint32_t, chorus::sum);
MPI_TEST_REDUCTIONS(std::uint32_t, chorus::bit_xor);
MPI_TEST_COPIES(std::uint32_t);

MPI_TEST_REDUCTIONS(std::uint64_t, chorus::sum);
MPI_TEST_REDUCTIONS(std::uint64_t, chorus::bit_or);
MPI_TEST_COPIES(std::uint64_t);

} // namespace mpi_test
