//! \file nccl/src/types.cpp
//! The data types NCCL names, dispatched once to chorus's instantiations.

#include <cstdint>
#include <string>

// Only the declaration: the instantiations are in types_*.cpp, compiled in
// parallel, not here.
#include "internal.hpp"

namespace chorus_nccl {

chorus::future issue(const op_desc& d, bool async) {
    switch (d.type) {
    case ncclInt8: return issue_typed<std::int8_t, true>(d, async);
    case ncclUint8: return issue_typed<std::uint8_t, true>(d, async);
    case ncclInt32: return issue_typed<std::int32_t, true>(d, async);
    case ncclUint32: return issue_typed<std::uint32_t, true>(d, async);
    case ncclInt64: return issue_typed<std::int64_t, true>(d, async);
    case ncclUint64: return issue_typed<std::uint64_t, true>(d, async);
    case ncclFloat32: return issue_typed<float, true>(d, async);
    case ncclFloat64: return issue_typed<double, true>(d, async);
    // No arithmetic on the host path: the copying operations move them as
    // words of their size (validated at the call).
    case ncclFloat16:
    case ncclBfloat16: return issue_typed<std::uint16_t, false>(d, async);
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return issue_typed<std::uint8_t, false>(d, async);
    default: break;
    }
    throw chorus::error(chorus::errc::internal, "libchorus_nccl: data type " + std::to_string(d.type) +
                                                    " reached the dispatch unvalidated");
}

} // namespace chorus_nccl
