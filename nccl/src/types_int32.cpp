//! \file nccl/src/types_int32.cpp
//! issue_typed instantiations (see issue_typed.hpp).

#include <cstdint>

#include "issue_typed.hpp"

CHORUS_NCCL_INSTANTIATE(std::int32_t, true)
CHORUS_NCCL_INSTANTIATE(std::uint32_t, true)
