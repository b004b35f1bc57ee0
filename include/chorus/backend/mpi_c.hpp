#pragma once
//! \file backend/mpi_c.hpp
//! <mpi.h>, for the MPI transport's headers: only MPI's C API is used, so
//! the deprecated C++ bindings (and their warnings) stay out.

#if !defined(OMPI_SKIP_MPICXX)
#  define OMPI_SKIP_MPICXX 1
#endif
#if !defined(MPICH_SKIP_MPICXX)
#  define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
