#pragma once
//! \file backend/mpi_c.hpp
//! <mpi.h>, for the MPI transport's headers: only MPI's C API is used, so
//! the deprecated C++ bindings (and their warnings) stay out; and the one
//! check of an MPI call's result.

#if !defined(OMPI_SKIP_MPICXX)
#  define OMPI_SKIP_MPICXX 1
#endif
#if !defined(MPICH_SKIP_MPICXX)
#  define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>

#include "../core/error.hpp"

namespace chorus::detail {

//! Throws chorus::error for a failed MPI call.
inline void mpi_check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw error(errc::internal, std::string("chorus: ") + what + " failed: " + msg);
}

} // namespace chorus::detail
