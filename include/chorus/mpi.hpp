#pragma once
//! \file mpi.hpp
//! chorus over MPI: everything in <chorus/chorus.hpp> plus
//! chorus::communicator<chorus::mpi>. Needs <mpi.h> and linking MPI
//! (CMake: find_package(MPI COMPONENTS CXX), target MPI::MPI_CXX).

#include "chorus.hpp"
#include "backend/mpi.hpp"
#include "comm/communicator.hpp"

namespace chorus {
// The contract of core/communicator.hpp, for one element type and operator.
static_assert(detail::collective_backend<communicator<mpi>, float, sum>);
} // namespace chorus
