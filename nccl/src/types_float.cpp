//! \file nccl/src/types_float.cpp
//! issue_typed instantiations (see issue_typed.hpp).

#include <cstdint>

#include "issue_typed.hpp"

CHORUS_NCCL_INSTANTIATE(float, true)
