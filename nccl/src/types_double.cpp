//! \file nccl/src/types_double.cpp
//! issue_typed instantiations (see issue_typed.hpp).

#include <cstdint>

#include "issue_typed.hpp"

CHORUS_NCCL_INSTANTIATE(double, true)
CHORUS_NCCL_INSTANTIATE(std::uint16_t, false)
