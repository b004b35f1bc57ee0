//! \file nccl/src/types_int64.cpp
//! issue_typed instantiations (see issue_typed.hpp).

#include <cstdint>

#include "issue_typed.hpp"

CHORUS_NCCL_INSTANTIATE(std::int64_t, true)
CHORUS_NCCL_INSTANTIATE(std::uint64_t, true)
