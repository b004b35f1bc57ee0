//! \file nccl/src/types_int8.cpp
//! issue_typed instantiations (see issue_typed.hpp).

#include <cstdint>

#include "issue_typed.hpp"

CHORUS_NCCL_INSTANTIATE(std::int8_t, true)
CHORUS_NCCL_INSTANTIATE(std::uint8_t, true)
CHORUS_NCCL_INSTANTIATE(std::uint8_t, false)
